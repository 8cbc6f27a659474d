"""A mixed edge: candidate operations weighted by ``softmax(alpha)`` (DARTS, Liu et al.
ICLR 2019), with the masking and discretisation that perturbation-based selection needs
(DARTS-PT, Wang et al., ICLR 2021, Sec. 4).

``MixedOp(x) = sum_o w_o * o(x)`` with ``w = softmax(alpha)``. Masking an op sets its
weight to 0 *without renormalising* the others (the paper's perturbation); a discretised
edge is one-hot on its chosen op, and a pruned edge (topology selection) outputs zeros.
Ops of weight 0 are not evaluated, so a perturbed forward pass costs less than a full one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence

import torch
from torch import nn

__all__ = ["MixedOp"]


class MixedOp(nn.Module):
    """``sum_o softmax(alpha)_o * o(x)`` over named candidate ops.

    Args:
        candidates: a mapping ``name -> module`` or a sequence of ``(name, module)`` pairs
            (at least one; names unique and non-empty). Every candidate must
            return the same shape for a given input.
        device, dtype: of ``alpha``.

    Attributes:
        names: candidate names in order.
        alpha: architecture parameters, shape ``(len(names),)``, zeros at init (uniform).
        chosen: the op the edge was discretised to, or ``None``.
        pruned: ``True`` once topology selection removed the edge (output zeros).

    Shapes: whatever the candidates map, e.g. ``(B, C, H, W) -> (B, C, H, W)``.
    """

    def __init__(self, candidates: Mapping[str, nn.Module] | Sequence[tuple[str, nn.Module]],
                 *, device=None, dtype=None) -> None:
        super().__init__()
        if isinstance(candidates, Mapping):
            items = list(candidates.items())
        elif isinstance(candidates, Sequence) and not isinstance(candidates, (str, bytes)):
            items = []
            for item in candidates:
                if not (isinstance(item, tuple) and len(item) == 2):
                    raise TypeError(f"candidates must hold (name, module) pairs, got {item!r}")
                items.append(item)
        else:
            raise TypeError(f"candidates must be a mapping or a sequence of (name, module) pairs, "
                            f"got {type(candidates).__name__}")
        if not items:
            raise ValueError("candidates must hold at least one op, got none")
        for name, module in items:
            if not isinstance(name, str) or not name:
                raise ValueError(f"candidates: op names must be non-empty strings, got {name!r}")
            if not isinstance(module, nn.Module):
                raise TypeError(f"candidates: op {name!r} must be an nn.Module, got {type(module).__name__}")
        names = [name for name, _ in items]
        if len(set(names)) != len(names):
            raise ValueError(f"candidates: op names must be unique, got {names}")
        # A ModuleList, not a ModuleDict: op names such as 'double' or 'eval' would clash
        # with nn.Module attributes.
        self.candidates = nn.ModuleList(module for _, module in items)
        self.names: tuple[str, ...] = tuple(names)
        self.alpha = nn.Parameter(torch.zeros(len(names), device=device, dtype=dtype))
        self.chosen: str | None = None
        self.pruned = False
        self._masked: set[str] = set()

    @property
    def ops(self) -> dict[str, nn.Module]:
        """``{name: op module}`` in candidate order."""
        return dict(zip(self.names, self.candidates))

    # ------------------------------------------------------------------ state
    def _check_name(self, name: object, arg: str = "name") -> str:
        if name not in self.names:
            raise ValueError(f"{arg} must be one of this edge's ops {', '.join(map(repr, self.names))}; got {name!r}")
        return name  # type: ignore[return-value]

    @property
    def masked_ops(self) -> frozenset[str]:
        """The ops masked right now (inside :meth:`masked`)."""
        return frozenset(self._masked)

    def active(self) -> tuple[str, ...]:
        """Names of the ops whose weight is not forced to 0 (pruned: none; discretised: the
        chosen op; otherwise every op that is not masked)."""
        if self.pruned:
            return ()
        pool = (self.chosen,) if self.chosen is not None else self.names
        return tuple(n for n in pool if n not in self._masked)

    def weights(self) -> torch.Tensor:
        """Op weights, shape ``(len(names),)``: ``softmax(alpha)`` with masked ops set to 0
        and no renormalisation; one-hot on :attr:`chosen` once discretised; all zero once
        pruned. Differentiable in ``alpha`` while undecided."""
        if self.chosen is not None or self.pruned:
            w = torch.zeros_like(self.alpha)
            if self.chosen is not None and not self.pruned and self.chosen not in self._masked:
                w = w.index_fill(0, torch.tensor(self.names.index(self.chosen), device=w.device), 1.0)
            return w.detach()
        w = torch.softmax(self.alpha, dim=0)
        if self._masked:
            keep = torch.tensor([n not in self._masked for n in self.names], device=w.device)
            w = w * keep.to(w.dtype)
        return w

    @contextlib.contextmanager
    def masked(self, *names: str) -> Iterator[MixedOp]:
        """Context manager: the named ops get weight 0 (no renormalisation) inside the block.

        ``with edge.masked("conv3x3"): loss = ...``. Masking every op makes the edge output 0.
        """
        if not names:
            raise ValueError("masked: name at least one op to mask")
        for name in names:
            self._check_name(name)
        added = [n for n in dict.fromkeys(names) if n not in self._masked]
        self._masked.update(added)
        try:
            yield self
        finally:
            self._masked.difference_update(added)

    def discretize(self, name: str) -> None:
        """Keep op ``name`` alone, with weight 1 (the edge becomes that op)."""
        self.chosen = self._check_name(name)

    def prune(self) -> None:
        """Remove the edge (topology selection): its output becomes 0."""
        self.pruned = True

    @contextlib.contextmanager
    def removed(self) -> Iterator[MixedOp]:
        """Context manager: the edge outputs 0 inside the block (a topology perturbation)."""
        before = self.pruned
        self.pruned = True
        try:
            yield self
        finally:
            self.pruned = before

    def reset(self) -> None:
        """Undo :meth:`discretize` and :meth:`prune` (``alpha`` is untouched)."""
        self.chosen = None
        self.pruned = False

    # ---------------------------------------------------------------- forward
    def forward(self, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        w = self.weights()
        active = self.active()
        if not active:
            # Every op is off: zeros of the output shape (a zero op gives it for free;
            # otherwise probe the first op without grad).
            for op in self.candidates:
                if getattr(op, "is_zero", False):
                    return op(x, *args, **kwargs)
            with torch.no_grad():
                probe = self.candidates[0](x, *args, **kwargs)
            return torch.zeros_like(probe)
        out: torch.Tensor | None = None
        first = None
        for i, name in enumerate(self.names):
            if name not in active:
                continue
            y = self.candidates[i](x, *args, **kwargs)
            if not isinstance(y, torch.Tensor):
                raise TypeError(f"candidate op {name!r} must return a tensor, got {type(y).__name__}")
            if out is None:
                first, out = name, w[i] * y if self.chosen is None else y
                continue
            if y.shape != out.shape:
                raise ValueError(f"candidate op {name!r} returns shape {tuple(y.shape)} but op {first!r} "
                                 f"returns {tuple(out.shape)}: the ops of a MixedOp must return the same shape")
            out = out + w[i] * y
        assert out is not None
        return out

    def extra_repr(self) -> str:
        state = f", chosen={self.chosen!r}" if self.chosen is not None else ""
        state += ", pruned=True" if self.pruned else ""
        return f"ops={list(self.names)}{state}"
