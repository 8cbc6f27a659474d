"""``AddAnchorPE``: a PyG transform attaching anchor-distance positional encodings to ``Data``.

Distances come from the batched multi-source BFS of :mod:`posenc.graph.distances`,
and the encoding is one of:

* ``"inverse"``: ``s = 1 / (d + 1)``, ``0`` when unreachable (P-GNN's ``s``);
* ``"distance"``: the hop count ``d`` itself; an unreachable anchor (or one beyond
  ``max_distance``) gets the finite value ``unreachable``, never ``inf``, which a GNN
  would turn into NaN. The default is the same for every graph, so that one value means
  one thing across a batch of graphs of different sizes: ``max_distance + 1`` with a
  cutoff (one hop past it), else ``-1`` (no hop count is negative). For a value that
  reads "farther than any path" without a cutoff, pass ``unreachable=`` a bound on the
  dataset's distances (for example its largest node count);
* ``"onehot"``: one-hot of ``min(d, max_distance)`` with one extra slot for
  "unreachable / farther", flattened to ``K * (max_distance + 2)`` columns.

Anchors. With ``resample=False`` (default) they are drawn from ``seed`` on every
call, so a graph gets the same anchors each time it passes through (and graphs of
the same size get the same anchor ids). With ``resample=True`` every call draws
new anchors from the transform's own generator, seeded by ``seed``: used as a
dataset's ``transform`` (not ``pre_transform``), each epoch sees fresh anchors, as
P-GNN re-draws its anchor sets at every training iteration (You et al., ICML 2019,
and its official code). :meth:`AddAnchorPE.set_epoch` makes
the draws a function of ``(seed, epoch)`` alone (reproducible whatever the call
order, e.g. in DataLoader worker processes that each hold a copy).

Small graphs. A graph with fewer nodes than ``num_anchors`` raises a
``ValueError`` by default; with ``clamp=True`` every node becomes an anchor and
the ``num_anchors - n`` missing columns are encoded as unreachable, so every
graph still gets ``num_anchors`` columns and a dataset of mixed sizes batches.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch_geometric.data import Data
from torch_geometric.transforms import BaseTransform

from posenc._checks import check_choice, check_positive_int
from posenc.graph._validate import check_num_anchors
from posenc.graph.anchors import select_anchors
from posenc.graph.distances import anchor_distances

ENCODINGS = ("inverse", "distance", "onehot")

#: ``encoding="distance"``'s default value for an unreachable anchor without ``max_distance``:
#: below every hop count, and the same in every graph (a batch mixes graphs of different sizes).
UNREACHABLE = -1.0

#: Mixes the epoch into the seed of :meth:`AddAnchorPE.set_epoch` (a large odd constant).
_EPOCH_STRIDE = 1_000_003


class AddAnchorPE(BaseTransform):
    """Add ``data[attr_name]`` ``(n, K)`` (``(n, K*(L+2))`` one-hot), ``data.anchor_index``, ``data.anchor_set``.

    Args:
        num_anchors: ``K`` (ignored for ``method="bourgain"``, which draws ``log2(n)^2`` sets).
        method: ``"random"``, ``"degree"`` or ``"bourgain"`` (anchor sets).
        encoding: ``"inverse"``, ``"distance"`` or ``"onehot"``.
        max_distance: hop cutoff (required for ``"onehot"``; optional otherwise).
        seed: seed of the anchor draws (an int >= 0).
        attr_name: attribute to write; ``None`` concatenates to ``data.x`` instead.
        symmetrize: accept directed graphs by adding reverse edges.
        clamp: a graph with fewer than ``num_anchors`` nodes uses all its nodes as
            anchors and encodes the missing columns as unreachable (default: raise).
        resample: draw new anchors on every call (per epoch, as P-GNN does) instead
            of the same anchors from ``seed`` each time.
        unreachable: the value of ``encoding="distance"`` for an anchor that cannot be
            reached (or lies beyond ``max_distance``): a finite number, the same for every
            graph. Default ``max_distance + 1`` with a cutoff, else ``-1``.

    Example::

        data = AddAnchorPE(num_anchors=16, seed=0)(data)   # data.anchor_pe: (n, 16)
    """

    def __init__(
        self,
        num_anchors: int = 16,
        *,
        method: str = "random",
        encoding: str = "inverse",
        max_distance: int | None = None,
        seed: int = 0,
        attr_name: str | None = "anchor_pe",
        symmetrize: bool = False,
        clamp: bool = False,
        resample: bool = False,
        unreachable: float | None = None,
    ) -> None:
        self.num_anchors = check_positive_int("num_anchors", num_anchors)
        self.method = check_choice("method", method, ("random", "degree", "bourgain"))
        self.encoding = check_choice("encoding", encoding, ENCODINGS)
        if encoding == "onehot" and max_distance is None:
            raise ValueError("max_distance is required for encoding='onehot'")
        self.max_distance = None if max_distance is None else check_positive_int("max_distance", max_distance)
        self.seed = check_positive_int("seed", seed, minimum=0)
        if attr_name is not None and (not isinstance(attr_name, str) or not attr_name.isidentifier()):
            raise ValueError(f"attr_name must be an identifier string or None, got {attr_name!r}")
        self.attr_name = attr_name
        for name, value in (("symmetrize", symmetrize), ("clamp", clamp), ("resample", resample)):
            if not isinstance(value, bool):
                raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
        self.symmetrize = symmetrize
        self.clamp = clamp
        self.resample = resample
        if unreachable is not None:
            if encoding != "distance":
                raise ValueError(f"unreachable applies to encoding='distance' only, got encoding={encoding!r}")
            if isinstance(unreachable, bool) or not isinstance(unreachable, (int, float)):
                raise TypeError(f"unreachable must be a finite number, got {type(unreachable).__name__}")
            if not math.isfinite(unreachable):
                raise ValueError(f"unreachable must be finite (inf becomes NaN in a GNN), got {unreachable}")
            unreachable = float(unreachable)
        self.unreachable = unreachable
        self._generator = torch.Generator().manual_seed(self.seed)

    def set_epoch(self, epoch: int) -> None:
        """Make the next draws (with ``resample=True``) a function of ``(seed, epoch)`` alone."""
        check_positive_int("epoch", epoch, minimum=0)
        self._generator = torch.Generator().manual_seed(self.seed + _EPOCH_STRIDE * (epoch + 1))

    @property
    def unreachable_value(self) -> float:
        """The ``"distance"`` encoding's value for unreachable anchors (the same in every graph)."""
        if self.unreachable is not None:
            return self.unreachable
        return float(self.max_distance + 1) if self.max_distance is not None else UNREACHABLE

    def forward(self, data: Data) -> Data:
        n = data.num_nodes
        if n is None or n < 1:
            raise ValueError(f"data must have num_nodes >= 1, got {n}")
        k = self.num_anchors
        missing = 0
        if self.method != "bourgain":
            if self.clamp and k > n:
                k, missing = n, k - n
            check_num_anchors("num_anchors", k, n)
        generator = self._generator if self.resample else self.seed
        sets = select_anchors(self.method, data.edge_index, n, k, generator=generator)
        dist = anchor_distances(
            data.edge_index, n, sets, max_distance=self.max_distance, symmetrize=self.symmetrize
        ).contiguous()
        if missing:  # columns of anchors this graph cannot have: unreachable from every node
            dist = torch.cat((dist, dist.new_full((n, missing), math.inf)), dim=1)
        if self.encoding == "inverse":
            pe = torch.where(torch.isfinite(dist), 1.0 / (dist + 1.0), torch.zeros_like(dist))
        elif self.encoding == "distance":
            pe = torch.where(torch.isfinite(dist), dist, dist.new_tensor(self.unreachable_value))
        else:
            lab = torch.where(torch.isfinite(dist), dist, float(self.max_distance + 1)).long()
            pe = F.one_hot(lab, self.max_distance + 2).float().reshape(n, -1)
        data.anchor_index = sets.nodes  # node ids ("index" in the name: PyG shifts them when batching)
        data.anchor_set = sets.set_index  # the set each anchor node belongs to
        if self.attr_name is None:
            x = data.x
            data.x = pe if x is None else torch.cat([x.view(n, -1).to(pe.dtype), pe], dim=-1)
        else:
            data[self.attr_name] = pe
        return data

    def __repr__(self) -> str:
        extra = "".join(
            f", {name}={value!r}"
            for name, value, default in (("clamp", self.clamp, False), ("resample", self.resample, False),
                                          ("unreachable", self.unreachable, None))
            if value != default
        )
        return (
            f"{type(self).__name__}(num_anchors={self.num_anchors}, method={self.method!r}, "
            f"encoding={self.encoding!r}, max_distance={self.max_distance}, seed={self.seed}, "
            f"attr_name={self.attr_name!r}, symmetrize={self.symmetrize}{extra})"
        )


__all__ = ["ENCODINGS", "UNREACHABLE", "AddAnchorPE"]
