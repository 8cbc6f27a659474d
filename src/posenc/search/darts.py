"""A small DARTS-like cell for small images (Liu et al., ICLR 2019, Sec. 2.1).

A cell has two input nodes (the outputs of the two previous cells, each preprocessed by a
1x1 ReLU-Conv-BN) and ``num_nodes`` intermediate nodes; intermediate node ``j`` sums a
mixed edge from every earlier node. The cell output is a 1x1 ReLU-Conv-BN of the
concatenated intermediate nodes. A discretised DARTS cell keeps two input edges per
intermediate node: :meth:`DartsMicroNet.node_inputs` gives the groups that
:func:`~posenc.search.topology_select` prunes (DARTS-PT, Alg. 2).

Node numbering: inputs are 0 and 1, intermediate nodes ``2 .. num_nodes + 1``; edges
``"j<-i"``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import nn

from posenc._checks import check_positive_int
from posenc.search.mixed import MixedOp
from posenc.search.ops import DARTS_OPS, OPS, ReLUConvBN, Zero, make_op

__all__ = ["DartsCell", "DartsMicroNet"]


def _edge_names(num_nodes: int) -> list[str]:
    return [f"{j}<-{i}" for j in range(2, num_nodes + 2) for i in range(j)]


class DartsCell(nn.Module):
    """One DARTS-like cell: ``(s0, s1) (B, C, H, W) each -> (B, C, H, W)``.

    Args:
        channels: ``C``.
        ops: candidate ops of every edge (names of :data:`~posenc.search.ops.OPS`).
        num_nodes: intermediate nodes (DARTS: 4; here 2 by default: 5 edges).
        choices: ``{local edge: op}`` for a discretised cell; edges left out are absent
            (pruned by topology selection).
        track_running_stats: BatchNorm setting.
        device, dtype: of the parameters.
    """

    def __init__(self, channels: int, ops: Sequence[str] = DARTS_OPS, *, num_nodes: int = 2,
                 choices: Mapping[str, str] | None = None, track_running_stats: bool = False,
                 device=None, dtype=None) -> None:
        super().__init__()
        check_positive_int("channels", channels)
        check_positive_int("num_nodes", num_nodes)
        kw = dict(track_running_stats=track_running_stats, device=device, dtype=dtype)
        self.channels, self.num_nodes = channels, num_nodes
        self.pre0 = ReLUConvBN(channels, 1, **kw)
        self.pre1 = ReLUConvBN(channels, 1, **kw)
        self.edges = nn.ModuleDict()
        for name in _edge_names(num_nodes):
            if choices is None:
                self.edges[name] = MixedOp([(o, make_op(o, channels, **kw)) for o in ops], device=device, dtype=dtype)
            elif name in choices:
                self.edges[name] = make_op(choices[name], channels, **kw)
        self.out = nn.Sequential(nn.ReLU(), nn.Conv2d(num_nodes * channels, channels, 1, bias=False, device=device,
                                                      dtype=dtype),
                                 nn.BatchNorm2d(channels, track_running_stats=track_running_stats, device=device,
                                                dtype=dtype))

    def forward(self, s0: torch.Tensor, s1: torch.Tensor) -> torch.Tensor:
        nodes = [self.pre0(s0), self.pre1(s1)]
        for j in range(2, self.num_nodes + 2):
            acc = torch.zeros_like(nodes[0])
            for i in range(j):
                name = f"{j}<-{i}"
                if name in self.edges and not isinstance(self.edges[name], Zero):
                    acc = acc + self.edges[name](nodes[i])
            nodes.append(acc)
        return self.out(torch.cat(nodes[2:], dim=1))

    def extra_repr(self) -> str:
        return f"channels={self.channels}, num_nodes={self.num_nodes}"


class DartsMicroNet(nn.Module):
    """Stem -> ``num_cells`` DARTS-like cells -> average pool -> linear.

    Args:
        channels: width ``C``.
        num_classes: output logits.
        ops: candidate ops (default :data:`~posenc.search.ops.DARTS_OPS`).
        num_nodes: intermediate nodes per cell.
        num_cells: cells; cell ``k`` reads the outputs of cells ``k-2`` and ``k-1`` (the
            stem stands in for the missing ones).
        in_channels: image channels.
        choices: ``{qualified edge: op}`` for the stand-alone network; edges left out are
            absent (pruned), e.g. a :func:`~posenc.search.topology_select` result's choices.
        track_running_stats: BatchNorm setting (default batch statistics).
        pool: side of the average-pooled map fed to the classifier (1: global).
        device, dtype: of the parameters.

    Shapes: ``(B, in_channels, H, W) -> (B, num_classes)``.
    """

    def __init__(self, channels: int = 16, num_classes: int = 10, *, ops: Sequence[str] = DARTS_OPS,
                 num_nodes: int = 2, num_cells: int = 1, in_channels: int = 1,
                 choices: Mapping[str, str] | None = None, track_running_stats: bool = False, pool: int = 1,
                 device=None, dtype=None) -> None:
        super().__init__()
        for arg, v in (("channels", channels), ("num_classes", num_classes), ("num_nodes", num_nodes),
                       ("num_cells", num_cells), ("in_channels", in_channels), ("pool", pool)):
            check_positive_int(arg, v)
        if isinstance(ops, str) or not ops or any(o not in OPS for o in ops) or len(set(ops)) != len(ops):
            raise ValueError(f"ops must be distinct names from {list(OPS)}, got {ops!r}")
        space = self.space(ops, num_nodes=num_nodes, num_cells=num_cells)
        per_cell: list[dict[str, str] | None] = [None] * num_cells
        if choices is not None:
            unknown = [e for e in choices if e not in space]
            if unknown:
                raise ValueError(f"choices names unknown edges {unknown}")
            for e, op in choices.items():
                if op not in ops:
                    raise ValueError(f"choices[{e!r}] must be one of {list(ops)}, got {op!r}")
            per_cell = [{e.split(".edges.")[1]: op for e, op in choices.items() if e.startswith(f"cells.{c}.")}
                        for c in range(num_cells)]
        kw = dict(track_running_stats=track_running_stats, device=device, dtype=dtype)
        self.stem = nn.Sequential(
            nn.Conv2d(in_channels, channels, 3, padding=1, bias=False, device=device, dtype=dtype),
            nn.BatchNorm2d(channels, track_running_stats=track_running_stats, device=device, dtype=dtype))
        self.cells = nn.ModuleList(DartsCell(channels, ops, num_nodes=num_nodes, choices=pc, **kw) for pc in per_cell)
        self.classifier = nn.Linear(channels * pool * pool, num_classes, device=device, dtype=dtype)
        self.ops_names, self.num_nodes, self.num_cells, self.pool = tuple(ops), num_nodes, num_cells, pool

    @staticmethod
    def space(ops: Sequence[str] = DARTS_OPS, *, num_nodes: int = 2, num_cells: int = 1) -> dict[str, tuple[str, ...]]:
        """``{qualified edge: ops}`` of the supernet."""
        return {f"cells.{c}.edges.{e}": tuple(ops) for c in range(num_cells) for e in _edge_names(num_nodes)}

    def node_inputs(self) -> dict[str, list[str]]:
        """``{node: its input edges}`` for :func:`~posenc.search.topology_select` (keep=2)."""
        return {f"cells.{c}.node{j}": [f"cells.{c}.edges.{j}<-{i}" for i in range(j)]
                for c in range(self.num_cells) for j in range(2, self.num_nodes + 2)}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 4:
            raise ValueError(f"x must have shape (batch, channels, H, W), got {tuple(x.shape)}")
        s0 = s1 = self.stem(x)
        for cell in self.cells:
            s0, s1 = s1, cell(s0, s1)
        if self.pool == 1:
            return self.classifier(s1.mean(dim=(-2, -1)))
        return self.classifier(nn.functional.adaptive_avg_pool2d(s1, self.pool).flatten(1))

    def extra_repr(self) -> str:
        return f"num_nodes={self.num_nodes}, num_cells={self.num_cells}, pool={self.pool}, ops={list(self.ops_names)}"
