"""A NAS-Bench-201-like search space for small images (Dong & Yang, ICLR 2020).

A cell is a DAG on ``num_nodes`` nodes: node 0 is the cell input and node ``j`` is the sum
over ``i < j`` of ``edge(j<-i)(node i)``; the last node is the output. With 4 nodes there
are 6 edges (the benchmark's cell); with 3 nodes, 3 edges, so 5 ops give 125
architectures, few enough to train every one. Every edge mixes the candidate ops of
:mod:`posenc.search.ops`.

The network: stem (3x3 conv + BN) -> ``num_cells`` stacked cells -> BN-ReLU -> average pool
(global by default, ``pool x pool`` on request) -> linear. As in NAS-Bench-201's supernet
(and DARTS-PT's code), every cell shares one ``alpha`` per edge (``share_alpha``): the
searched architecture is one cell, repeated. Built with ``choices={edge: op}`` it is the
stand-alone network of that architecture (plain ops, no mixing; ``'none'`` edges are skipped).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import nn

from posenc._checks import check_positive_int
from posenc.search.mixed import MixedOp
from posenc.search.ops import NB201_OPS, OPS, make_op

__all__ = ["NB201Cell", "NB201MicroNet"]


def _check_ops(ops: Sequence[str]) -> tuple[str, ...]:
    if isinstance(ops, str) or not isinstance(ops, Sequence) or not ops:
        raise ValueError(f"ops must be a non-empty sequence of op names from {OPS}, got {ops!r}")
    bad = [o for o in ops if o not in OPS]
    if bad:
        raise ValueError(f"ops: unknown op(s) {bad}; known: {list(OPS)}")
    if len(set(ops)) != len(ops):
        raise ValueError(f"ops must not repeat an op, got {list(ops)}")
    return tuple(ops)


class NB201Cell(nn.Module):
    """One cell: ``node_j = sum_{i<j} edge(j<-i)(node_i)``, output = last node.

    Args:
        channels: ``C``.
        ops: candidate op names (each edge a :class:`MixedOp` over them), unless ``choices``.
        num_nodes: nodes including input and output (>= 2); ``n (n-1) / 2`` edges.
        choices: ``{local edge name: op}`` for a discretised cell (plain ops).
        share_with: a cell whose edges' ``alpha`` (and selection) this cell's edges share.
        affine, track_running_stats: BatchNorm settings of the convolutions (search: no
            affine, batch statistics).
        device, dtype: of the parameters.

    Shapes: ``(B, C, H, W) -> (B, C, H, W)``. Edge names are ``"j<-i"``.
    """

    def __init__(self, channels: int, ops: Sequence[str] = NB201_OPS, *, num_nodes: int = 4,
                 choices: Mapping[str, str] | None = None, share_with: NB201Cell | None = None,
                 affine: bool = False, track_running_stats: bool = False, device=None, dtype=None) -> None:
        super().__init__()
        check_positive_int("channels", channels)
        check_positive_int("num_nodes", num_nodes, minimum=2)
        ops = _check_ops(ops)
        self.channels, self.num_nodes = channels, num_nodes
        kw = dict(affine=affine, track_running_stats=track_running_stats, device=device, dtype=dtype)
        if choices is not None:
            names = self.edge_names(num_nodes)
            missing = [e for e in names if e not in choices]
            unknown = [e for e in choices if e not in names]
            if missing or unknown:
                raise ValueError(f"choices must name every edge of the cell: missing {missing}, unknown {unknown}")
        self.edges = nn.ModuleDict()
        for name in self.edge_names(num_nodes):
            if choices is None:
                leader = share_with.edges[name] if share_with is not None else None
                self.edges[name] = MixedOp([(o, make_op(o, channels, **kw)) for o in ops], share_with=leader,
                                           device=device, dtype=dtype)
            else:
                self.edges[name] = make_op(choices[name], channels, **kw)

    @staticmethod
    def edge_names(num_nodes: int = 4) -> list[str]:
        """``["1<-0", "2<-0", "2<-1", ...]``: the cell's edges in order."""
        return [f"{j}<-{i}" for j in range(1, num_nodes) for i in range(j)]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        nodes = [x]
        for j in range(1, self.num_nodes):
            acc = None
            for i in range(j):
                op = self.edges[f"{j}<-{i}"]
                if op.outputs_zero() if isinstance(op, MixedOp) else getattr(op, "is_zero", False):
                    continue
                y = op(nodes[i])
                acc = y if acc is None else acc + y
            nodes.append(acc if acc is not None else torch.zeros_like(x))
        return nodes[-1]

    def extra_repr(self) -> str:
        return f"channels={self.channels}, num_nodes={self.num_nodes}"


class NB201MicroNet(nn.Module):
    """Stem -> NB201 cells -> BN-ReLU -> global average pool -> linear, for small images.

    Args:
        channels: cell width ``C``.
        num_classes: output logits.
        ops: candidate ops of every edge (default all five of :data:`NB201_OPS`).
        num_nodes: nodes per cell: 4 is the benchmark's cell (6 edges), 3 the micro space
            (3 edges; 125 architectures with 5 ops).
        num_cells: stacked cells.
        in_channels: image channels.
        share_alpha: every cell shares cell 0's ``alpha`` and selection (NAS-Bench-201);
            ``False`` searches each cell on its own.
        choices: ``{qualified edge name: op}`` (names as :func:`posenc.search.mixed_ops`
            returns them, e.g. ``"cells.0.edges.2<-1"``; a :class:`Selection`'s
            ``choices``; with ``share_alpha`` cell 0's edges name every cell's) to build the
            stand-alone discretised network; ``None`` builds the supernet.
        affine: learnable BatchNorm scale and shift in the ops (search: ``False``).
        track_running_stats: BatchNorm keeps running statistics (default ``False``: batch
            statistics in train and eval mode, as in DARTS supernets).
        pool: side of the average-pooled map fed to the classifier (1: global average
            pooling, as NAS-Bench-201; 2 keeps a coarse layout, which one cell on 8x8 images
            learns much faster with).
        device, dtype: of the parameters.

    Shapes: ``(B, in_channels, H, W) -> (B, num_classes)``.
    """

    def __init__(self, channels: int = 16, num_classes: int = 10, *, ops: Sequence[str] = NB201_OPS,
                 num_nodes: int = 3, num_cells: int = 1, in_channels: int = 1, share_alpha: bool = True,
                 choices: Mapping[str, str] | None = None, affine: bool = False, track_running_stats: bool = False,
                 pool: int = 1, device=None, dtype=None) -> None:
        super().__init__()
        for arg, v in (("channels", channels), ("num_classes", num_classes), ("num_cells", num_cells),
                       ("in_channels", in_channels), ("pool", pool)):
            check_positive_int(arg, v)
        check_positive_int("num_nodes", num_nodes, minimum=2)
        ops = _check_ops(ops)
        from posenc.search.footprint import guard_cell_net

        guard_cell_net(NB201MicroNet, dict(channels=channels, num_classes=num_classes, ops=ops, num_nodes=num_nodes,
                                           in_channels=in_channels, share_alpha=share_alpha, affine=affine,
                                           track_running_stats=track_running_stats, pool=pool, dtype=dtype),
                       channels=channels, num_cells=num_cells, num_nodes=num_nodes, n_ops=len(ops), reductions=0,
                       device=device, dtype=dtype)
        self.in_channels = in_channels
        self.ops_names, self.share_alpha = ops, bool(share_alpha)
        cell_choices: list[dict[str, str] | None] = [None] * num_cells
        if choices is not None:
            if not isinstance(choices, Mapping):
                raise TypeError(f"choices must be a mapping edge -> op, got {type(choices).__name__}")
            space = self.space(ops, num_nodes=num_nodes, num_cells=1 if share_alpha else num_cells)
            missing = [e for e in space if e not in choices]
            unknown = [e for e in choices if e not in space]
            if missing or unknown:
                raise ValueError(f"choices must name every edge: missing {missing}, unknown {unknown}")
            for e, op in choices.items():
                if op not in ops:
                    raise ValueError(f"choices[{e!r}] must be one of {list(ops)}, got {op!r}")
            cell_choices = [{e: choices[f"cells.{0 if share_alpha else c}.edges.{e}"]
                             for e in NB201Cell.edge_names(num_nodes)} for c in range(num_cells)]
        kw = dict(affine=affine, track_running_stats=track_running_stats, device=device, dtype=dtype)
        self.stem = nn.Sequential(
            nn.Conv2d(in_channels, channels, 3, padding=1, bias=False, device=device, dtype=dtype),
            nn.BatchNorm2d(channels, track_running_stats=track_running_stats, device=device, dtype=dtype))
        self.cells = nn.ModuleList()
        for cc in cell_choices:
            lead = self.cells[0] if share_alpha and len(self.cells) else None
            self.cells.append(NB201Cell(channels, ops, num_nodes=num_nodes, choices=cc, share_with=lead, **kw))
        self.head_bn = nn.BatchNorm2d(channels, track_running_stats=track_running_stats, device=device, dtype=dtype)
        self.classifier = nn.Linear(channels * pool * pool, num_classes, device=device, dtype=dtype)
        self.channels, self.num_classes, self.num_nodes, self.num_cells = channels, num_classes, num_nodes, num_cells
        self.pool = pool

    @staticmethod
    def space(ops: Sequence[str] = NB201_OPS, *, num_nodes: int = 3, num_cells: int = 1) -> dict[str, tuple[str, ...]]:
        """``{qualified edge name: ops}`` of the supernet, without building it (with shared
        ``alpha`` the searchable edges are those of cell 0: pass ``num_cells=1``)."""
        ops = _check_ops(ops)
        return {f"cells.{c}.edges.{e}": ops for c in range(num_cells) for e in NB201Cell.edge_names(num_nodes)}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 4 or x.shape[1] != self.in_channels:
            raise ValueError(f"x must have shape (batch, {self.in_channels} channels (in_channels), H, W), "
                             f"got {tuple(x.shape)}")
        h = self.stem(x)
        for cell in self.cells:
            h = cell(h)
        h = torch.relu(self.head_bn(h))
        if self.pool == 1:
            return self.classifier(h.mean(dim=(-2, -1)))
        return self.classifier(nn.functional.adaptive_avg_pool2d(h, self.pool).flatten(1))

    def extra_repr(self) -> str:
        return (f"channels={self.channels}, num_classes={self.num_classes}, num_nodes={self.num_nodes}, "
                f"num_cells={self.num_cells}, share_alpha={self.share_alpha}, pool={self.pool}, "
                f"ops={list(self.ops_names)}")
