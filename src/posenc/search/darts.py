"""The DARTS search space, scaled to small images (Liu et al., ICLR 2019, Sec. 2.1), and the
RobustDARTS spaces S1-S4 on it (Zela et al., ICLR 2020).

A network stacks ``num_cells`` cells; cells ``num_cells // 3`` and ``2 * num_cells // 3``
are *reduction* cells (stride 2 on their input edges, twice the channels), the others
*normal* cells, as in DARTS. A cell has two input nodes (the outputs of the two previous
cells, each preprocessed: a 1x1 ReLU-Conv-BN, or a factorized reduce after a reduction
cell) and ``num_nodes`` intermediate nodes; intermediate node ``j`` sums a mixed edge from
every earlier node, and the cell outputs the concatenation of its intermediate nodes. As in
DARTS (and the DARTS-PT code), every normal cell shares one ``alpha`` per edge, and every
reduction cell another (``share_alpha``): the searched architecture is one normal and one
reduction cell. A derived DARTS cell keeps two input edges per intermediate node
(:meth:`DartsNet.node_inputs` gives the groups that topology selection prunes) and never
reports ``'none'`` (:attr:`DartsNet.derive_exclude`).

Node numbering: inputs are 0 and 1, intermediate nodes ``2 .. num_nodes + 1``; edges
``"j<-i"``; qualified edge names ``"cells.<c>.edges.j<-i"``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from posenc._checks import check_choice, check_positive_int
from posenc.search.mixed import MixedOp
from posenc.search.ops import DARTS_OPS, OPS, FactorizedReduce, ReLUConvBN, make_op

__all__ = ["CELL_TYPES", "ROBUST_DARTS", "DartsCell", "DartsNet", "robust_darts_ops"]

CELL_TYPES: tuple[str, ...] = ("normal", "reduce")

# RobustDARTS S1 (Zela et al., ICLR 2020; ``sota/cnn/spaces.py`` of DARTS-PT): the two ops
# of each of the 14 edges of a 4-node cell, normal and reduction, in DARTS's edge order.
_S1 = {
    "normal": [("skip", "dilconv3x3"), ("skip", "dilconv5x5"), ("skip", "dilconv5x5"), ("skip", "sepconv3x3"),
               ("skip", "dilconv3x3"), ("maxpool", "skip"), ("skip", "sepconv3x3"), ("skip", "sepconv3x3"),
               ("skip", "dilconv3x3"), ("skip", "sepconv3x3"), ("maxpool", "skip"), ("skip", "dilconv3x3"),
               ("dilconv3x3", "dilconv5x5"), ("dilconv3x3", "dilconv5x5")],
    "reduce": [("maxpool", "avgpool"), ("maxpool", "dilconv3x3"), ("maxpool", "avgpool"), ("maxpool", "avgpool"),
               ("skip", "dilconv5x5"), ("maxpool", "avgpool"), ("maxpool", "sepconv3x3"), ("skip", "dilconv3x3"),
               ("skip", "dilconv5x5"), ("maxpool", "avgpool"), ("maxpool", "avgpool"), ("skip", "dilconv5x5"),
               ("skip", "dilconv5x5"), ("skip", "dilconv5x5")],
}
#: The RobustDARTS spaces: ``'s1'`` (per-edge pairs, see :func:`robust_darts_ops`), and the
#: op sets of every edge of ``'s2'`` - ``'s4'``; ``'darts'`` is DARTS's own set (without
#: ``'none'``, as DARTS-PT's ``s5``, scaled down).
ROBUST_DARTS: dict[str, tuple[str, ...] | None] = {
    "s1": None,
    "s2": ("skip", "sepconv3x3"),
    "s3": ("none", "skip", "sepconv3x3"),
    "s4": ("noise", "sepconv3x3"),
}


def _edge_names(num_nodes: int) -> list[str]:
    return [f"{j}<-{i}" for j in range(2, num_nodes + 2) for i in range(j)]


def robust_darts_ops(space: str, num_nodes: int = 4) -> dict[str, list[tuple[str, ...]]]:
    """Per cell type, the candidate ops of each edge of a RobustDARTS space.

    Args:
        space: ``'s1'`` .. ``'s4'``.
        num_nodes: intermediate nodes per cell (<= 4 for S1, whose 14 per-edge pairs come
            from a 4-node cell: a smaller cell takes the first edges, which are the edges of
            its nodes in the same order).

    Returns:
        ``{"normal": [ops of edge 0, ...], "reduce": [...]}`` in the order of
        ``DartsCell.edge_names(num_nodes)``.
    """
    check_choice("space", space, tuple(ROBUST_DARTS))
    check_positive_int("num_nodes", num_nodes)
    n = len(_edge_names(num_nodes))
    if space == "s1":
        if num_nodes > 4:
            raise ValueError(f"S1 is defined for cells of at most 4 intermediate nodes, got num_nodes={num_nodes}")
        return {t: [tuple(p) for p in _S1[t][:n]] for t in CELL_TYPES}
    ops = ROBUST_DARTS[space]
    assert ops is not None
    return {t: [ops] * n for t in CELL_TYPES}


def _per_edge(ops: Any, num_nodes: int) -> dict[str, list[tuple[str, ...]]]:
    """Normalise ``ops`` (one sequence for all, or per cell type and edge) and check names."""
    n = len(_edge_names(num_nodes))
    if isinstance(ops, Mapping):
        if set(ops) != set(CELL_TYPES):
            raise ValueError(f"ops given per cell type must have keys {list(CELL_TYPES)}, got {list(ops)}")
        out = {}
        for t in CELL_TYPES:
            lists = ops[t]
            if isinstance(lists, str) or not isinstance(lists, Sequence) or len(lists) != n:
                raise ValueError(f"ops[{t!r}] must list the ops of each of the {n} edges, got {lists!r}")
            out[t] = [_check_ops(e, f"ops[{t!r}]") for e in lists]
        return out
    one = _check_ops(ops, "ops")
    return {t: [one] * n for t in CELL_TYPES}


def _check_ops(ops: Any, arg: str) -> tuple[str, ...]:
    if isinstance(ops, str) or not isinstance(ops, Sequence) or not ops:
        raise ValueError(f"{arg} must be a non-empty sequence of op names from {list(OPS)}, got {ops!r}")
    bad = [o for o in ops if o not in OPS]
    if bad or len(set(ops)) != len(ops):
        raise ValueError(f"{arg} must be distinct names from {list(OPS)}, got {list(ops)}")
    return tuple(ops)


def _is_zero(module: nn.Module) -> bool:
    if isinstance(module, MixedOp):
        return module.outputs_zero()
    return bool(getattr(module, "is_zero", False))


class DartsCell(nn.Module):
    """One DARTS cell: ``(s0, s1) -> (B, num_nodes * C, H', W')``.

    Args:
        channels: ``C`` of the cell's nodes.
        prev_prev, prev: channels of the inputs ``s0`` and ``s1``.
        ops: per edge, its candidate ops (a list in :meth:`edge_names` order).
        num_nodes: intermediate nodes (DARTS: 4).
        reduction: a reduction cell (stride 2 on the edges from the inputs; ``H' = H / 2``).
        reduction_prev: the previous cell reduced (``s0`` is then factorized-reduced).
        choices: ``{local edge: op}`` for a derived cell (plain ops); edges left out are
            absent (pruned by topology selection).
        share_with: a cell of the same type whose edges' ``alpha`` this cell's edges share.
        affine, track_running_stats, pool_bn, sep_repeats: of the ops (:func:`~posenc.search.make_op`).
        device, dtype: of the parameters.
    """

    def __init__(self, channels: int, prev_prev: int, prev: int, ops: Sequence[Sequence[str]], *,
                 num_nodes: int = 4, reduction: bool = False, reduction_prev: bool = False,
                 choices: Mapping[str, str] | None = None, share_with: DartsCell | None = None,
                 affine: bool = False, track_running_stats: bool = False, pool_bn: bool = True,
                 sep_repeats: int = 2, device=None, dtype=None) -> None:
        super().__init__()
        for arg, v in (("channels", channels), ("prev_prev", prev_prev), ("prev", prev), ("num_nodes", num_nodes)):
            check_positive_int(arg, v)
        names = self.edge_names(num_nodes)
        if len(ops) != len(names):
            raise ValueError(f"ops must list the candidates of each of the {len(names)} edges, got {len(ops)}")
        bn = dict(affine=affine, track_running_stats=track_running_stats, device=device, dtype=dtype)
        self.channels, self.num_nodes, self.reduction = channels, num_nodes, bool(reduction)
        self.preprocess0 = (FactorizedReduce(prev_prev, channels, **bn) if reduction_prev
                            else ReLUConvBN(prev_prev, 1, out_channels=channels, **bn))
        self.preprocess1 = ReLUConvBN(prev, 1, out_channels=channels, **bn)
        self.edges = nn.ModuleDict()
        kw = dict(pool_bn=pool_bn, sep_repeats=sep_repeats, **bn)
        for name, edge_ops in zip(names, ops):
            stride = 2 if reduction and int(name.split("<-")[1]) < 2 else 1
            if choices is None:
                leader = share_with.edges[name] if share_with is not None else None
                self.edges[name] = MixedOp([(o, make_op(o, channels, stride=stride, **kw)) for o in edge_ops],
                                           share_with=leader, device=device, dtype=dtype)
            elif name in choices:
                self.edges[name] = make_op(choices[name], channels, stride=stride, **kw)

    @staticmethod
    def edge_names(num_nodes: int = 4) -> list[str]:
        """``["2<-0", "2<-1", "3<-0", ...]``: the cell's edges in DARTS's order."""
        return _edge_names(num_nodes)

    def forward(self, s0: torch.Tensor, s1: torch.Tensor) -> torch.Tensor:
        states = [self.preprocess0(s0), self.preprocess1(s1)]
        for j in range(2, self.num_nodes + 2):
            acc = None
            for i in range(j):
                edge = self.edges[f"{j}<-{i}"] if f"{j}<-{i}" in self.edges else None
                if edge is None or _is_zero(edge):
                    continue
                y = edge(states[i])
                acc = y if acc is None else acc + y
            if acc is None:  # every input edge removed: the node is zero
                ref = states[1][..., ::2, ::2] if self.reduction else states[1]
                acc = torch.zeros_like(ref)
            states.append(acc)
        return torch.cat(states[2:], dim=1)

    def extra_repr(self) -> str:
        return f"channels={self.channels}, num_nodes={self.num_nodes}, reduction={self.reduction}"


class DartsNet(nn.Module):
    """Stem -> ``num_cells`` DARTS cells (normal and reduction) -> global average pool -> linear.

    Args:
        channels: ``C``, the width of the first cells (doubled at each reduction cell).
        num_classes: output logits.
        ops: candidate ops of every edge (default :data:`~posenc.search.DARTS_OPS`), or per
            cell type and edge (``{"normal": [...], "reduce": [...]}``, e.g.
            :func:`robust_darts_ops`).
        num_nodes: intermediate nodes per cell (DARTS: 4).
        num_cells: cells (DARTS's search network: 8); cells ``num_cells // 3`` and
            ``2 * num_cells // 3`` reduce.
        in_channels: image channels.
        stem_multiplier: the stem outputs ``stem_multiplier * C`` channels (DARTS: 3).
        share_alpha: every cell of one type shares its edges' ``alpha`` (DARTS); ``False``
            searches every cell on its own.
        choices: ``{qualified edge: op}`` for the stand-alone (derived) network; edges left
            out are absent. With ``share_alpha`` the edges of the first cell of each type
            name the architecture of all cells of that type.
        affine, track_running_stats: BatchNorm of the ops and preprocessing (search: no
            affine, batch statistics).
        pool_bn: a BatchNorm (no affine) after each pooling op (DARTS-PT's DARTS space).
        sep_repeats: stacks of a separable convolution (DARTS: 2).
        device, dtype: of the parameters.

    Attributes:
        derive_exclude: ``("none",)``: ops a derived DARTS cell never keeps.

    Shapes: ``(B, in_channels, H, W) -> (B, num_classes)``.
    """

    derive_exclude: tuple[str, ...] = ("none",)

    def __init__(self, channels: int = 16, num_classes: int = 10, *, ops: Any = DARTS_OPS, num_nodes: int = 4,
                 num_cells: int = 8, in_channels: int = 3, stem_multiplier: int = 3, share_alpha: bool = True,
                 choices: Mapping[str, str] | None = None, affine: bool = False, track_running_stats: bool = False,
                 pool_bn: bool = True, sep_repeats: int = 2, device=None, dtype=None) -> None:
        super().__init__()
        for arg, v in (("channels", channels), ("num_classes", num_classes), ("num_nodes", num_nodes),
                       ("num_cells", num_cells), ("in_channels", in_channels), ("stem_multiplier", stem_multiplier)):
            check_positive_int(arg, v)
        per_edge = _per_edge(ops, num_nodes)
        from posenc.search.footprint import guard_cell_net

        guard_cell_net(DartsNet, dict(channels=channels, num_classes=num_classes, ops=ops, num_nodes=num_nodes,
                                      in_channels=in_channels, stem_multiplier=stem_multiplier,
                                      share_alpha=share_alpha, affine=affine,
                                      track_running_stats=track_running_stats, pool_bn=pool_bn,
                                      sep_repeats=sep_repeats, dtype=dtype),
                       channels=channels, num_cells=num_cells, num_nodes=num_nodes,
                       n_ops=max(len(o) for t in per_edge.values() for o in t), reductions=2, device=device,
                       dtype=dtype)
        self.in_channels = in_channels
        self.num_nodes, self.num_cells, self.share_alpha = num_nodes, num_cells, bool(share_alpha)
        self.channels, self.ops_per_edge = channels, per_edge
        self.cell_types = [("reduce" if c in (num_cells // 3, 2 * num_cells // 3) else "normal")
                           for c in range(num_cells)]
        per_cell = self._split_choices(choices, per_edge) if choices is not None else [None] * num_cells
        c_curr = stem_multiplier * channels
        self.stem = nn.Sequential(
            nn.Conv2d(in_channels, c_curr, 3, padding=1, bias=False, device=device, dtype=dtype),
            nn.BatchNorm2d(c_curr, track_running_stats=track_running_stats, device=device, dtype=dtype))
        c_pp, c_p, c_curr = c_curr, c_curr, channels
        self.cells = nn.ModuleList()
        first: dict[str, DartsCell] = {}
        reduction_prev = False
        for c, kind in enumerate(self.cell_types):
            reduction = kind == "reduce"
            if reduction:
                c_curr *= 2
            cell = DartsCell(c_curr, c_pp, c_p, per_edge[kind], num_nodes=num_nodes, reduction=reduction,
                             reduction_prev=reduction_prev, choices=per_cell[c],
                             share_with=first.get(kind) if share_alpha else None, affine=affine,
                             track_running_stats=track_running_stats, pool_bn=pool_bn, sep_repeats=sep_repeats,
                             device=device, dtype=dtype)
            first.setdefault(kind, cell)
            self.cells.append(cell)
            reduction_prev = reduction
            c_pp, c_p = c_p, num_nodes * c_curr
        self.classifier = nn.Linear(c_p, num_classes, device=device, dtype=dtype)

    # ------------------------------------------------------------------ naming
    def _searched_cells(self, kind: str) -> list[int]:
        cells = [c for c, t in enumerate(self.cell_types) if t == kind]
        return cells[:1] if self.share_alpha else cells

    def _split_choices(self, choices: Mapping[str, str], per_edge: dict) -> list[dict[str, str]]:
        if not isinstance(choices, Mapping):
            raise TypeError(f"choices must be a mapping edge -> op, got {type(choices).__name__}")
        names = _edge_names(self.num_nodes)
        known = {}
        for kind in CELL_TYPES:
            for c in self._searched_cells(kind):
                for k, e in enumerate(names):
                    known[f"cells.{c}.edges.{e}"] = (kind, per_edge[kind][k])
        unknown = [e for e in choices if e not in known]
        if unknown:
            raise ValueError(f"choices names unknown edges {unknown}; the searchable edges are {list(known)}")
        for e, op in choices.items():
            if op not in known[e][1]:
                raise ValueError(f"choices[{e!r}] must be one of {list(known[e][1])}, got {op!r}")
        out = []
        for c, kind in enumerate(self.cell_types):
            src = self.first_cell_of(kind) if self.share_alpha else c
            out.append({e.split(".edges.")[1]: op for e, op in choices.items() if e.startswith(f"cells.{src}.edges.")})
        return out

    def first_cell_of(self, kind: str) -> int:
        return self.cell_types.index(kind)

    def space(self) -> dict[str, tuple[str, ...]]:
        """``{qualified searchable edge: ops}`` (the first cell of each type when shared)."""
        names = _edge_names(self.num_nodes)
        return {f"cells.{c}.edges.{e}": self.ops_per_edge[kind][k]
                for kind in CELL_TYPES for c in self._searched_cells(kind) for k, e in enumerate(names)}

    def decision_groups(self) -> list[list[str]]:
        """The searchable edges of the normal cells and of the reduction cells: DARTS-PT decides
        one of each per step (``perturbation_select(groups=...)``)."""
        names = _edge_names(self.num_nodes)
        groups = [[f"cells.{c}.edges.{e}" for c in self._searched_cells(kind) for e in names] for kind in CELL_TYPES]
        return [g for g in groups if g]

    def node_inputs(self) -> dict[str, list[str]]:
        """``{node: its input edges}`` of the searched cells, for topology selection (keep=2)."""
        return {f"cells.{c}.node{j}": [f"cells.{c}.edges.{j}<-{i}" for i in range(j)]
                for kind in CELL_TYPES for c in self._searched_cells(kind) for j in range(2, self.num_nodes + 2)}

    def node_groups(self) -> list[list[str]]:
        """Nodes with more than two inputs, of the normal and of the reduction cells."""
        groups = [[f"cells.{c}.node{j}" for c in self._searched_cells(kind) for j in range(3, self.num_nodes + 2)]
                  for kind in CELL_TYPES]
        return [g for g in groups if g]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 4 or x.shape[1] != self.in_channels:
            raise ValueError(f"x must have shape (batch, {self.in_channels} channels (in_channels), H, W), "
                             f"got {tuple(x.shape)}")
        s0 = s1 = self.stem(x)
        for cell in self.cells:
            s0, s1 = s1, cell(s0, s1)
        return self.classifier(s1.mean(dim=(-2, -1)))

    def extra_repr(self) -> str:
        return (f"channels={self.channels}, num_nodes={self.num_nodes}, cells={''.join(t[0] for t in self.cell_types)}, "
                f"share_alpha={self.share_alpha}")
