"""``AddAnchorPE``: a PyG transform attaching anchor-distance positional encodings to ``Data``.

Anchors are drawn once per call from the transform's seed (so a fixed seed gives
the same anchors for graphs of the same size), distances come from the batched
multi-source BFS of :mod:`posenc.graph.distances`, and the encoding is one of:

* ``"inverse"``: ``s = 1 / (d + 1)``, ``0`` when unreachable (P-GNN's ``s``);
* ``"distance"``: the hop count ``d`` itself, ``inf`` when unreachable;
* ``"onehot"``: one-hot of ``min(d, max_distance)`` with one extra slot for
  "unreachable / farther", flattened to ``K * (max_distance + 2)`` columns.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch_geometric.data import Data
from torch_geometric.transforms import BaseTransform

from posenc._checks import check_choice, check_positive_int
from posenc.graph._validate import check_num_anchors
from posenc.graph.anchors import select_anchors
from posenc.graph.distances import anchor_distances

ENCODINGS = ("inverse", "distance", "onehot")


class AddAnchorPE(BaseTransform):
    """Add ``data[attr_name]`` ``(n, K)`` (``(n, K*(L+2))`` one-hot), ``data.anchor_index``, ``data.anchor_set``.

    Args:
        num_anchors: ``K`` (ignored for ``method="bourgain"``, which draws ``log2(n)^2`` sets).
        method: ``"random"``, ``"degree"`` or ``"bourgain"`` (anchor sets).
        encoding: ``"inverse"``, ``"distance"`` or ``"onehot"``.
        max_distance: hop cutoff (required for ``"onehot"``; optional otherwise).
        seed: seed of the anchor draw.
        attr_name: attribute to write; ``None`` concatenates to ``data.x`` instead.
        symmetrize: accept directed graphs by adding reverse edges.

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
    ) -> None:
        self.num_anchors = check_positive_int("num_anchors", num_anchors)
        self.method = check_choice("method", method, ("random", "degree", "bourgain"))
        self.encoding = check_choice("encoding", encoding, ENCODINGS)
        if encoding == "onehot" and max_distance is None:
            raise ValueError("max_distance is required for encoding='onehot'")
        self.max_distance = None if max_distance is None else check_positive_int("max_distance", max_distance)
        self.seed = seed
        self.attr_name = attr_name
        self.symmetrize = symmetrize

    def forward(self, data: Data) -> Data:
        n = data.num_nodes
        if n is None or n < 1:
            raise ValueError(f"data must have num_nodes >= 1, got {n}")
        if self.method != "bourgain":
            check_num_anchors("num_anchors", self.num_anchors, n)
        sets = select_anchors(self.method, data.edge_index, n, self.num_anchors, generator=self.seed)
        dist = anchor_distances(
            data.edge_index, n, sets, max_distance=self.max_distance, symmetrize=self.symmetrize
        ).contiguous()
        if self.encoding == "inverse":
            pe = torch.where(torch.isfinite(dist), 1.0 / (dist + 1.0), torch.zeros_like(dist))
        elif self.encoding == "distance":
            pe = dist
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
        return (
            f"{type(self).__name__}(num_anchors={self.num_anchors}, method={self.method!r}, "
            f"encoding={self.encoding!r}, max_distance={self.max_distance}, seed={self.seed})"
        )
