"""Memory of the search spaces, estimated from their arguments before anything is allocated.

The cell networks (:class:`~posenc.search.DartsNet`, :class:`~posenc.search.NB201MicroNet`)
and :class:`~posenc.search.EncodingSearch` call :func:`posenc._resources.check_footprint` with
these estimates in their constructors, and ``posenc search`` checks
:func:`posenc.search.spaces.space_bytes` against ``--max-memory``: a request beyond the limit is
refused before the first layer is built. This module imports no search space (the networks pass
their own class), so the spaces can call it without an import circle.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from posenc._resources import CHECK_ABOVE, check_footprint

__all__ = ["cell_net_parameters", "guard_cell_net"]

#: Bytes of one float32 element.
_F32 = 4.0


def _numel(module: nn.Module) -> int:
    seen: set[int] = set()
    total = 0
    for p in [*module.parameters(), *module.buffers()]:
        if id(p) not in seen:
            seen.add(id(p))
            total += p.numel()
    return total


def cell_net_parameters(cls: type, kwargs: dict[str, Any], num_cells: int) -> float:
    """Parameters and buffers of ``cls(num_cells=num_cells, **kwargs)``, counted on the meta device
    from a network of at most 3 cells: ``num_cells`` times its largest cell, plus the rest.

    An upper bound for DARTS cells (the third cell already has the last stage's ``4 C``
    channels) and exact for stacked NAS-Bench-201 cells (every cell alike).
    """
    k = min(int(num_cells), 3)
    kw = {**kwargs, "device": "meta", "num_cells": k}
    kw.pop("choices", None)
    net = cls(**kw)
    cells = [_numel(c) for c in net.cells]
    rest = _numel(net) - sum(cells)
    return float(rest) + float(max(cells)) * float(num_cells)


def _cheap_bound(channels: int, num_cells: int, num_nodes: int, n_ops: int, reductions: int) -> float:
    """A quick upper bound of the parameters: every op a 3x3 convolution of the widest stage."""
    c = float(channels) * 2.0 ** reductions
    edges = float(num_nodes) * (num_nodes + 3) / 2.0
    return float(num_cells) * (edges * n_ops * (9.0 * c * c + 100.0 * c) + 2.0 * (c * c * 4.0 + 4.0 * c)) \
        + 100.0 * c + 1e4


def guard_cell_net(cls: type, kwargs: dict[str, Any], *, channels: int, num_cells: int, num_nodes: int,
                   n_ops: int, reductions: int, device: Any, dtype: Any) -> None:
    """Refuse a cell network whose parameters would exceed the library's memory limit.

    Skipped on the meta device and whenever the quick bound is below
    :data:`~posenc._resources.CHECK_ABOVE`.
    """
    if device is not None and torch.device(device).type == "meta":
        return
    size = torch.empty((), dtype=dtype).element_size() if dtype is not None else _F32
    if _cheap_bound(channels, num_cells, num_nodes, n_ops, reductions) * size <= CHECK_ABOVE:
        return
    nbytes = cell_net_parameters(cls, kwargs, num_cells) * size
    check_footprint(nbytes, f"channels={channels}, num_cells={num_cells}",
                    f"a {cls.__name__} of {num_cells} cells at {channels} channels (its parameters)")
