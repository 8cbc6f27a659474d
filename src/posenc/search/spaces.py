"""Search spaces by name, and enumeration of a (small) space's architectures."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from torch import nn

from posenc._checks import check_choice, check_positive_int
from posenc.search.footprint import _F32, _numel, cell_net_parameters
from posenc.search.supernet import search_space

__all__ = [
    "CONV_SPACES",
    "SPACES",
    "SPACE_TRAINING",
    "STANDALONE_TRAINING",
    "architecture_id",
    "build_space",
    "enumerate_architectures",
    "space_bytes",
]

#: Names of the built-in spaces (``posenc search --space``), all for 8x8 one-channel images:
#: ``nb201-micro`` (a NAS-Bench-201 cell of 3 edges; 125 architectures), ``nb201`` (the
#: benchmark's 6-edge cell), ``darts`` (DARTS cells, DARTS-PT's op set), ``s1``-``s4`` (the
#: RobustDARTS spaces on DARTS cells) and ``pe`` (the positional-encoding space).
SPACES: tuple[str, ...] = ("nb201-micro", "nb201", "darts", "s1", "s2", "s3", "s4", "pe")
#: The convolutional spaces (``num_cells`` applies to them).
CONV_SPACES: tuple[str, ...] = ("nb201-micro", "nb201", "darts", "s1", "s2", "s3", "s4")

_DARTS = {"nb201-micro": False, "nb201": False, "darts": True, "s1": True, "s2": True, "s3": True, "s4": True}
_CONV = {"optimizer": "sgd", "lr": 0.025, "a_lr": 3e-3, "batch_size": 64}

#: Supernet training settings (:func:`~posenc.search.train_darts` keywords) for the built-in
#: spaces on 8x8 digits: the authors' SGD (lr 0.025, cosine to 0.001) for the convolutional
#: cells, AdamW for the transformer. ``alpha``'s Adam runs at 3e-3, ten times DARTS's 3e-4:
#: an epoch of digits is ~17 steps where an epoch of CIFAR-10 is ~390, and ``alpha`` would
#: barely move otherwise.
SPACE_TRAINING: dict[str, dict[str, Any]] = {
    **{space: dict(_CONV) for space in CONV_SPACES},
    "pe": {"optimizer": "adamw", "lr": 1e-2, "lr_min": 0.0, "weight_decay": 0.01, "a_lr": 3e-3,
           "batch_size": 64},
}

#: The same settings as :func:`~posenc.search.train_network` keywords, for training the
#: stand-alone architectures of a space (``build_space(name, choices=...)``) alike.
STANDALONE_TRAINING: dict[str, dict[str, Any]] = {
    space: {k: v for k, v in kw.items() if k != "a_lr"}
    for space, kw in SPACE_TRAINING.items()
}


def build_space(space: str, *, num_classes: int = 10, choices: Mapping[str, str] | None = None,
                num_cells: int | None = None, **kwargs: Any) -> nn.Module:
    """Build a built-in search space for 8x8 one-channel images by name.

    Args:
        space: one of :data:`SPACES`.
        num_classes: output logits.
        choices: ``{edge: op}`` for the stand-alone network instead of the supernet.
        num_cells: stacked cells of a convolutional space (default: 1 for the NB201 spaces,
            3 for the DARTS spaces: a normal and two reduction cells, as DARTS places them).
        **kwargs: passed to the space's class (``channels``, ``ops``, ``num_nodes``,
            ``share_alpha``, ...). Defaults at this scale: NB201 cells of 16 channels with a
            2x2 pooled map before the classifier (with one cell on 8x8 images, global pooling
            learns several times slower); DARTS cells of 8 channels with 2 intermediate nodes.

    Call ``torch.manual_seed`` first for reproducible weights (the modules draw from the
    default generator, as ``torch.nn`` layers do).
    """
    check_choice("space", space, SPACES)
    if num_cells is not None:
        check_positive_int("num_cells", num_cells)
        if space == "pe":
            raise ValueError("num_cells applies to the convolutional spaces, not 'pe' (use depth=)")
    if space in ("nb201-micro", "nb201"):
        from posenc.search.nb201 import NB201MicroNet

        kwargs.setdefault("num_nodes", 3 if space == "nb201-micro" else 4)
        kwargs.setdefault("pool", 2)
        return NB201MicroNet(num_classes=num_classes, choices=choices, num_cells=num_cells or 1, **kwargs)
    if space == "pe":
        from posenc.search.pe import PESearchNet

        return PESearchNet(num_classes=num_classes, choices=choices, **kwargs)
    from posenc.search.darts import DartsNet, robust_darts_ops

    kwargs.setdefault("channels", 8)
    kwargs.setdefault("num_nodes", 2)
    kwargs.setdefault("in_channels", 1)
    if space != "darts" and "ops" not in kwargs:
        kwargs["ops"] = robust_darts_ops(space, kwargs["num_nodes"])
    return DartsNet(num_classes=num_classes, choices=choices, num_cells=num_cells or 3, **kwargs)


def is_darts_space(space: str) -> bool:
    """Whether a built-in space is made of DARTS cells (topology selection, ``'none'`` never kept)."""
    check_choice("space", space, SPACES)
    return _DARTS.get(space, False)


def _space_of(space: nn.Module | Mapping[str, Sequence[str]]) -> dict[str, tuple[str, ...]]:
    if isinstance(space, nn.Module):
        return search_space(space)
    if not isinstance(space, Mapping) or not space:
        raise TypeError(f"space must be a supernet (nn.Module) or a non-empty mapping edge -> op names, "
                        f"got {type(space).__name__}")
    out = {}
    for edge, ops in space.items():
        if isinstance(ops, str) or not isinstance(ops, Sequence) or not ops:
            raise ValueError(f"space[{edge!r}] must be a non-empty sequence of op names, got {ops!r}")
        out[str(edge)] = tuple(ops)
    return out


def enumerate_architectures(space: nn.Module | Mapping[str, Sequence[str]]) -> list[dict[str, str]]:
    """Every architecture ``{edge: op}`` of a space, in a fixed (lexicographic) order.

    Args:
        space: a supernet (its :func:`~posenc.search.search_space`) or a mapping
            ``{edge: candidate op names}`` such as ``NB201MicroNet.space()``.

    Returns:
        ``prod(len(ops))`` dicts; the first op of each edge varies slowest along edges.
    """
    sp = _space_of(space)
    edges = list(sp)
    return [dict(zip(edges, combo)) for combo in itertools.product(*(sp[e] for e in edges))]


def architecture_id(choices: Mapping[str, str], space: nn.Module | Mapping[str, Sequence[str]]) -> int:
    """The index of ``choices`` in :func:`enumerate_architectures` (mixed radix), without
    enumerating."""
    sp = _space_of(space)
    missing = [e for e in sp if e not in choices]
    if missing or len(choices) != len(sp):
        raise ValueError(f"choices must name every edge of the space: missing {missing}, "
                         f"unknown {[e for e in choices if e not in sp]}")
    index = 0
    for edge, ops in sp.items():
        if choices[edge] not in ops:
            raise ValueError(f"choices[{edge!r}] must be one of {list(ops)}, got {choices[edge]!r}")
        index = index * len(ops) + ops.index(choices[edge])
    return index


# ------------------------------------------------------------------ memory
def space_bytes(space: str, num_cells: int | None = None, *, batch_size: int = 64, image: int = 8,
                **kwargs: Any) -> float:
    """Peak bytes of a search on a built-in space, from its arguments alone: parameters, their
    gradients and optimiser state (x4), and the activations of one training batch that
    autograd keeps (every op output of every edge of every cell, x2 for their gradients).

    Args:
        space: one of :data:`~posenc.search.SPACES`.
        num_cells: stacked cells (the space's default when None).
        batch_size: examples per step; ``image`` the side of the square input.
        **kwargs: of the space's class (``channels``, ``num_nodes``, ...).
    """
    if space == "pe":
        net = build_space("pe", device="meta", **kwargs)
        params = float(_numel(net))
        return 4 * _F32 * params + 2 * _F32 * batch_size * params ** 0.5 * 64
    probe = build_space(space, num_cells=min(num_cells or 3, 3), device="meta", **kwargs)
    cells = num_cells or len(probe.cells)
    params = cell_net_parameters(type(probe), _rebuild_kwargs(space, probe, kwargs), cells)
    per_cell = 0.0
    for cell in probe.cells:
        ops = sum(len(m.names) for m in cell.modules() if hasattr(m, "names") and hasattr(m, "alpha"))
        width = getattr(cell, "channels", None) or getattr(probe, "channels", 16)
        nodes = getattr(cell, "num_nodes", 4) + 2
        per_cell = max(per_cell, float(ops + nodes) * width)
    act = 2 * _F32 * batch_size * image * image * per_cell * cells
    return 4 * _F32 * params + act


def _rebuild_kwargs(space: str, probe: nn.Module, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The constructor arguments :func:`~posenc.search.build_space` used for ``probe``."""
    from posenc.search.darts import DartsNet, robust_darts_ops

    kw = dict(kwargs)
    if isinstance(probe, DartsNet):
        kw.setdefault("channels", 8)
        kw.setdefault("num_nodes", 2)
        kw.setdefault("in_channels", 1)
        if space != "darts" and "ops" not in kw:
            kw["ops"] = robust_darts_ops(space, kw["num_nodes"])
    else:
        kw.setdefault("num_nodes", 3 if space == "nb201-micro" else 4)
        kw.setdefault("pool", 2)
    return kw
