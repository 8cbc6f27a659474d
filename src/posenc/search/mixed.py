"""A mixed edge: candidate operations weighted by ``softmax(alpha)`` (DARTS, Liu et al.
ICLR 2019), with the masking and discretisation that perturbation-based selection needs
(DARTS-PT, Wang et al., ICLR 2021, Sec. 4).

``MixedOp(x) = sum_o w_o * o(x)`` with ``w = softmax(alpha)``. Masking an op sets its
weight to 0 *without renormalising* the others (the paper's perturbation); a discretised
edge is one-hot on its chosen op, and a pruned edge (topology selection) outputs zeros.
Ops of weight 0 are not evaluated, so a perturbed forward pass costs less than a full one.

Edges can *share* their architecture: in DARTS every normal cell of the network uses one
``alpha`` per edge position (and every reduction cell another), and so does NAS-Bench-201's
supernet. ``MixedOp(..., share_with=leader)`` builds such a follower: it has its own
candidate modules (own weights) but reads ``alpha``, the masks and the selection state from
its leader, so masking or discretising the leader acts on every cell at once.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch
from torch import nn

__all__ = ["ALPHA_INITS", "MixedOp"]

#: ``alpha_init`` choices: ``'normal'`` (``alpha_std * randn``, DARTS and DARTS-PT: 1e-3) or ``'zeros'``.
ALPHA_INITS: tuple[str, ...] = ("normal", "zeros")


class MixedOp(nn.Module):
    """``sum_o softmax(alpha)_o * o(x)`` over named candidate ops.

    Args:
        candidates: a mapping ``name -> module`` or a sequence of ``(name, module)`` pairs
            (at least one; names unique and non-empty). Every candidate must return the
            same shape for a given input.
        alpha_init: ``'normal'`` (default: ``alpha_std * randn``, as the authors' code of
            DARTS and DARTS-PT, drawn from ``generator`` or torch's default generator) or
            ``'zeros'`` (exactly uniform weights).
        alpha_std: standard deviation of the ``'normal'`` initialisation (``1e-3``).
        generator: optional ``torch.Generator`` for ``alpha``'s initial draw.
        share_with: another ``MixedOp`` with the same op names whose ``alpha`` and selection
            state this edge uses (DARTS's cells of one type share their architecture).
        device, dtype: of ``alpha``.

    Attributes:
        names: candidate names in order.
        alpha: architecture parameters, shape ``(len(names),)`` (the leader's if shared).
        chosen: the op the edge was discretised to, or ``None``.
        pruned: ``True`` once topology selection removed the edge (output zeros).
        leader: the edge whose architecture this one shares, or ``None``.

    ``chosen`` and ``pruned`` are saved in ``state_dict`` (as extra state), so saving and
    loading a discretised supernet keeps its discretisation.

    Shapes: whatever the candidates map, e.g. ``(B, C, H, W) -> (B, C, H, W)``.
    """

    def __init__(self, candidates: Mapping[str, nn.Module] | Sequence[tuple[str, nn.Module]], *,
                 alpha_init: str = "normal", alpha_std: float = 1e-3, generator: torch.Generator | None = None,
                 share_with: MixedOp | None = None, device=None, dtype=None) -> None:
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
        if alpha_init not in ALPHA_INITS:
            raise ValueError(f"alpha_init must be one of {', '.join(map(repr, ALPHA_INITS))}; got {alpha_init!r}")
        if isinstance(alpha_std, bool) or not isinstance(alpha_std, (int, float)) or not alpha_std >= 0 \
                or alpha_std == float("inf"):
            raise ValueError(f"alpha_std must be a finite number >= 0, got {alpha_std!r}")
        # A ModuleList, not a ModuleDict: op names such as 'double' or 'eval' would clash
        # with nn.Module attributes.
        self.candidates = nn.ModuleList(module for _, module in items)
        self.names: tuple[str, ...] = tuple(names)
        self.alpha_init, self.alpha_std, self._generator = alpha_init, float(alpha_std), generator
        # plain attributes (not submodules): a leader is a module of its own cell
        object.__setattr__(self, "_leader", None)
        if share_with is not None:
            if not isinstance(share_with, MixedOp):
                raise TypeError(f"share_with must be a MixedOp, got {type(share_with).__name__}")
            if share_with.names != self.names:
                raise ValueError(f"share_with has ops {list(share_with.names)}, this edge {list(self.names)}: "
                                 "edges that share alpha must have the same ops in the same order")
            root = share_with.leader or share_with
            object.__setattr__(self, "_leader", root)
            self.alpha = root.alpha  # the same Parameter: optimisers and state_dict see one tensor
        else:
            self.alpha = nn.Parameter(torch.zeros(len(names), device=device, dtype=dtype))
            self.reset_parameters()
        self._chosen: str | None = None
        self._pruned = False
        self._decided_by: str | None = None
        self._masked: set[str] = set()

    # ------------------------------------------------------------------ sharing
    @property
    def leader(self) -> MixedOp | None:
        """The edge whose ``alpha`` and selection state this one shares (``None``: its own)."""
        return self._leader

    def _root(self) -> MixedOp:
        return self._leader if self._leader is not None else self

    def reset_parameters(self) -> None:
        """Draw ``alpha`` again (``alpha_init``); a follower leaves its leader's ``alpha`` alone."""
        if self._leader is not None:
            return
        with torch.no_grad():
            if self.alpha_init == "zeros" or self.alpha_std == 0:
                self.alpha.zero_()
            else:
                noise = torch.randn(self.alpha.shape, generator=self._generator, dtype=torch.float32)
                self.alpha.copy_(noise.to(self.alpha) * self.alpha_std)

    @property
    def ops(self) -> dict[str, nn.Module]:
        """``{name: op module}`` in candidate order."""
        return dict(zip(self.names, self.candidates))

    # ------------------------------------------------------------------ state
    @property
    def chosen(self) -> str | None:
        return self._root()._chosen

    @chosen.setter
    def chosen(self, name: str | None) -> None:
        if name is not None:
            self._check_name(name)
        self._root()._chosen = name

    @property
    def pruned(self) -> bool:
        return self._root()._pruned

    @pruned.setter
    def pruned(self, value: bool) -> None:
        self._root()._pruned = bool(value)

    @property
    def decided_by(self) -> str | None:
        """The call that discretised or pruned the edge (``'magnitude_select()'``,
        ``'MixedOp.discretize()'``, ``'load_state_dict()'``, ...); ``None`` while undecided."""
        return None if self.undecided else (self._root()._decided_by or "MixedOp.discretize()")

    def _check_name(self, name: object, arg: str = "name") -> str:
        if name not in self.names:
            raise ValueError(f"{arg} must be one of this edge's ops {', '.join(map(repr, self.names))}; got {name!r}")
        return name  # type: ignore[return-value]

    def get_extra_state(self) -> dict[str, Any]:
        """``{"chosen", "pruned"}``: the discretisation, saved in ``state_dict``."""
        return {"chosen": self.chosen, "pruned": self.pruned}

    def set_extra_state(self, state: Any) -> None:
        if not (isinstance(state, Mapping) and set(state) == {"chosen", "pruned"}):
            raise ValueError(f"MixedOp extra state must be {{'chosen', 'pruned'}}, got {state!r}")
        if self._leader is not None:
            return  # the leader's own entry restores the shared state
        chosen, pruned = state["chosen"], state["pruned"]
        if chosen is not None:
            self._check_name(chosen, "state_dict 'chosen'")
        if not isinstance(pruned, bool):
            raise TypeError(f"state_dict 'pruned' must be True or False, got {type(pruned).__name__} ({pruned!r})")
        self._chosen, self._pruned = chosen, pruned
        self._decided_by = None if chosen is None and not pruned else "load_state_dict()"

    @property
    def masked_ops(self) -> frozenset[str]:
        """The ops masked right now (inside :meth:`masked`)."""
        return frozenset(self._root()._masked)

    @property
    def undecided(self) -> bool:
        """Neither discretised nor pruned."""
        return self.chosen is None and not self.pruned

    def active(self) -> tuple[str, ...]:
        """Names of the ops whose weight is not forced to 0 (pruned: none; discretised: the
        chosen op; otherwise every op that is not masked)."""
        if self.pruned:
            return ()
        masked = self._root()._masked
        pool = (self.chosen,) if self.chosen is not None else self.names
        return tuple(n for n in pool if n not in masked)

    def outputs_zero(self) -> bool:
        """Whether the edge's output is zero for any input (pruned, all ops masked, or every
        active op flagged ``is_zero``): a cell may then skip it."""
        ops = self.ops
        return all(getattr(ops[n], "is_zero", False) for n in self.active())

    def check_alpha(self) -> None:
        """Raise ``ValueError`` if ``alpha`` holds a NaN or an infinity."""
        if not bool(torch.isfinite(self.alpha.detach()).all()):
            raise ValueError(f"alpha of the edge over {list(self.names)} is not finite ({self.alpha.detach().tolist()}): "
                             "the supernet's training diverged or alpha was set to NaN/inf")

    def weights(self) -> torch.Tensor:
        """Op weights, shape ``(len(names),)``: ``softmax(alpha)`` with masked ops set to 0
        and no renormalisation; one-hot on :attr:`chosen` once discretised; all zero once
        pruned. Differentiable in ``alpha`` while undecided."""
        masked = self._root()._masked
        if self.chosen is not None or self.pruned:
            w = torch.zeros_like(self.alpha)
            if self.chosen is not None and not self.pruned and self.chosen not in masked:
                w = w.index_fill(0, torch.tensor(self.names.index(self.chosen), device=w.device), 1.0)
            return w.detach()
        w = torch.softmax(self.alpha, dim=0)
        if masked:
            keep = torch.tensor([n not in masked for n in self.names], device=w.device)
            w = w * keep.to(w.dtype)
        return w

    @contextlib.contextmanager
    def masked(self, *names: str) -> Iterator[MixedOp]:
        """Context manager: the named ops get weight 0 (no renormalisation) inside the block.

        ``with edge.masked("conv3x3"): loss = ...``. Masking every op makes the edge output 0.
        On a shared edge the mask acts on every edge that shares the architecture.
        """
        if not names:
            raise ValueError("masked: name at least one op to mask")
        for name in names:
            self._check_name(name)
        store = self._root()._masked
        added = [n for n in dict.fromkeys(names) if n not in store]
        store.update(added)
        try:
            yield self
        finally:
            store.difference_update(added)

    def discretize(self, name: str, *, by: str = "MixedOp.discretize()") -> None:
        """Keep op ``name`` alone, with weight 1 (the edge becomes that op).

        Args:
            name: one of :attr:`names`.
            by: the call that decided (reported by :attr:`decided_by`).
        """
        self.chosen = self._check_name(name)
        self._root()._decided_by = by

    def prune(self, *, by: str = "MixedOp.prune()") -> None:
        """Remove the edge (topology selection): its output becomes 0.

        Args:
            by: the call that decided (reported by :attr:`decided_by`).
        """
        self.pruned = True
        self._root()._decided_by = by

    @contextlib.contextmanager
    def removed(self) -> Iterator[MixedOp]:
        """Context manager: the edge outputs 0 inside the block (a topology perturbation)."""
        before = self.pruned
        self.pruned = True
        try:
            yield self
        finally:
            self.pruned = before

    def clear_selection(self) -> None:
        """Undo :meth:`discretize` and :meth:`prune` (``alpha`` is untouched)."""
        self.chosen = None
        self.pruned = False
        self._root()._decided_by = None

    def reset(self) -> None:
        """Deprecated alias of :meth:`clear_selection` (it never reset parameters)."""
        warnings.warn("MixedOp.reset() is deprecated; use clear_selection() (reset_parameters() re-draws alpha)",
                      DeprecationWarning, stacklevel=2)
        self.clear_selection()

    def selected_module(self) -> nn.Module:
        """The plain module this edge has become: its chosen op, or a :class:`PrunedEdge`
        (zeros of the output's shape) if it was pruned or discretised to a zero op.

        Raises:
            ValueError: if the edge is still undecided.
        """
        if self.pruned:
            return PrunedEdge(self.candidates[0])
        if self.chosen is None:
            raise ValueError("the edge is undecided: discretise it (a selection) before apply_selection")
        return self.ops[self.chosen]

    # ---------------------------------------------------------------- forward
    def forward(self, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        w = self.weights()
        active = self.active()
        if not active:
            return _zeros_like_output(self.candidates[0], x, *args, **kwargs)
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
        state += ", shared" if self._leader is not None else ""
        return f"ops={list(self.names)}{state}"


def _zeros_like_output(op: nn.Module, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    """Zeros of ``op(x)``'s shape: free for an ``is_zero`` op, else one pass without grad."""
    if getattr(op, "is_zero", False):
        return op(x, *args, **kwargs)
    with torch.no_grad():
        probe = op(x, *args, **kwargs)
    return torch.zeros_like(probe)


class PrunedEdge(nn.Module):
    """A removed edge: zeros of the shape ``reference(x)`` has (``is_zero``; a cell may skip it).

    Args:
        reference: the op whose output shape the zeros take (run once per call without grad
            unless it is itself an ``is_zero`` op).
    """

    is_zero = True

    def __init__(self, reference: nn.Module) -> None:
        super().__init__()
        self.reference = reference

    def forward(self, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        return _zeros_like_output(self.reference, x, *args, **kwargs)
