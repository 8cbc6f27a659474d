"""Searching the position encoding of a user's model.

:class:`EncodingSearch` is a drop-in replacement for an additive position-encoding layer
(``tokens -> tokens + pe``): a :class:`~posenc.search.MixedOp` whose candidates are position
encodings of the token grid (an explicit ``'none'`` and any name of
:func:`posenc.create_encoding`). Put it where your model adds its ``pos_embed``, train the
model as a supernet (:func:`~posenc.search.train_darts`), select
(:func:`~posenc.search.perturbation_select` or :func:`~posenc.search.magnitude_select`) and
:func:`~posenc.search.apply_selection` turns it into a plain ``tokens + chosen encoding``
layer. The selection methods are those of DARTS-PT (Wang et al., ICLR 2021).

Each candidate's output is RMS-normalised per token (no parameters) by default, so the
mixing weights do not merely track the candidates' very different output scales (a learned
table starts at std 0.02, a sinusoid at about 0.7).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from posenc._checks import check_positive_int
from posenc._resources import check_footprint
from posenc.search.mixed import MixedOp
from posenc.search.ops import Zero

__all__ = ["ENCODING_CANDIDATES", "AddEncoding", "EncodingBranch", "EncodingSearch", "candidates_nbytes",
           "encoding_candidate", "grid_positions"]

#: Default candidates of :class:`EncodingSearch`.
ENCODING_CANDIDATES: tuple[str, ...] = ("none", "sinusoidal", "learned_table", "lff")
_SEEDED = ("learned_table", "lff", "random", "rff", "coord_mlp", "cape")


def grid_positions(grid: Sequence[int], device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Integer indices and cell centres in ``[-1, 1]`` of a token grid in raster order.

    Args:
        grid: ``(n,)`` for a sequence or ``(rows, cols)`` for a patch grid.

    Returns:
        ``(index (N, d) int64, centre (N, d) float32)`` with ``N = prod(grid)``.
    """
    axes = torch.meshgrid(*[torch.arange(g, device=device) for g in grid], indexing="ij")
    index = torch.stack(axes, -1).reshape(-1, len(grid))
    sizes = torch.tensor(list(grid), device=device, dtype=torch.float32)
    centre = -1.0 + 2.0 * (index.float() + 0.5) / sizes
    return index, centre


class EncodingBranch(nn.Module):
    """One absolute encoding of the token grid, RMS-normalised: ``x (B, N, D) -> (B, N, D)``.

    The output depends on ``x`` only through its shape. Integer grid indices go to
    encodings whose ``positions_kind`` is ``'index'`` or ``'any'``, cell centres in
    ``[-1, 1]`` to ``'continuous'`` ones and to CAPE; an encoding that augments per sample
    (``per_sample_positions``) gets one copy of the grid per example in training mode.

    Args:
        encoding: an :class:`~posenc.encodings.Encoding` with ``in_dim == len(grid)``, ``out_dim == D``.
        grid: ``(n,)`` or ``(rows, cols)``.
        prefix_tokens: leading tokens (e.g. a class token) that get no encoding (zeros).
        normalize: RMS-normalise each token's encoding.
        eps: of the RMS normalisation.
    """

    def __init__(self, encoding: nn.Module, grid: Sequence[int], *, prefix_tokens: int = 0, normalize: bool = True,
                 eps: float = 1e-10) -> None:
        super().__init__()
        self.encoding, self.grid, self.eps = encoding, tuple(int(g) for g in grid), eps
        self.prefix_tokens, self.normalize = prefix_tokens, normalize
        kind = getattr(encoding, "positions_kind", "continuous")
        self.continuous = kind == "continuous" or getattr(encoding, "per_sample_positions", False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        index, centre = grid_positions(self.grid, x.device)
        n = index.shape[0] + self.prefix_tokens
        if x.dim() != 3 or x.shape[1] != n:
            raise ValueError(f"x must have shape (batch, {n} tokens, dim) for grid {self.grid} and "
                             f"{self.prefix_tokens} prefix tokens, got {tuple(x.shape)}")
        pos = centre.to(x.dtype) if self.continuous else index
        if getattr(self.encoding, "per_sample_positions", False) and self.training:
            pos = pos.expand(x.shape[0], *pos.shape)
        f = self.encoding(pos).to(x.dtype)
        if self.normalize:
            f = f * torch.rsqrt(f.pow(2).mean(-1, keepdim=True) + self.eps)
        if self.prefix_tokens:
            pad = torch.zeros(*f.shape[:-2], self.prefix_tokens, f.shape[-1], device=f.device, dtype=f.dtype)
            f = torch.cat([pad, f], dim=-2)
        return f.expand(x.shape)

    def extra_repr(self) -> str:
        return f"grid={self.grid}, prefix_tokens={self.prefix_tokens}, continuous={self.continuous}"


def _candidate_kwargs(name: str, dim: int, grid: Sequence[int], seed: int, kwargs: Mapping[str, Any]) -> dict:
    kw: dict[str, Any] = {"in_dim": len(grid), "num_features": dim}
    if name == "learned_table":
        kw["grid_size"] = tuple(grid) if len(grid) > 1 else grid[0]
    if name in _SEEDED:
        kw["seed"] = seed
    kw.update(kwargs)
    return kw


def candidates_nbytes(candidates: Sequence[str], dim: int, grid: Sequence[int], *, seed: int = 0,
                      encoding_kwargs: Mapping[str, Mapping[str, Any]] | None = None) -> float:
    """Bytes (float32) of the parameters and buffers of :class:`EncodingSearch`'s named candidates,
    from the arguments alone (:func:`posenc.encodings.encoding_footprint`), plus one output of
    ``prod(grid) x dim`` per candidate (what a forward pass holds)."""
    from posenc.encodings import encoding_footprint

    tokens = float(math.prod(int(g) for g in grid))
    total = 0.0
    for name in candidates:
        if name == "none":
            continue
        kw = _candidate_kwargs(name, dim, grid, seed, (encoding_kwargs or {}).get(name, {}))
        try:
            fp = encoding_footprint(name, **kw)
        except (TypeError, ValueError) as err:
            raise ValueError(f"candidates: {name!r} cannot encode a {len(grid)}D grid to dim={dim}: {err}") from None
        total += 4.0 * (float(fp.parameters) + float(fp.buffers)) + 4.0 * tokens * float(dim)
    return total


def encoding_candidate(name: str, dim: int, grid: Sequence[int], *, prefix_tokens: int = 0, normalize: bool = True,
                       seed: int = 0, **kwargs: Any) -> nn.Module:
    """One candidate of :class:`EncodingSearch`: ``'none'`` (:class:`~posenc.search.Zero`) or an
    :class:`EncodingBranch` over ``create_encoding(name, in_dim=len(grid), num_features=dim, ...)``."""
    from posenc.encodings import create_encoding

    if name == "none":
        return Zero()
    kw = _candidate_kwargs(name, dim, grid, seed, kwargs)
    try:
        enc = create_encoding(name, **kw)
    except (TypeError, ValueError) as err:
        raise ValueError(f"candidates: {name!r} cannot encode a {len(grid)}D grid to dim={dim}: {err}") from None
    return EncodingBranch(enc, grid, prefix_tokens=prefix_tokens, normalize=normalize)


class AddEncoding(nn.Module):
    """``x -> x + encoding(x)``: what :class:`EncodingSearch` becomes once a candidate is chosen."""

    def __init__(self, encoding: nn.Module) -> None:
        super().__init__()
        self.encoding = encoding

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.encoding(x)


class EncodingSearch(MixedOp):
    """``x -> x + sum_o softmax(alpha)_o * encoding_o(grid)``: a searchable additive position encoding.

    Args:
        dim: token width ``D``.
        grid: ``n`` (a sequence of ``n`` tokens) or ``(rows, cols)`` (a patch grid, raster order).
        candidates: encoding names (``'none'`` and names of :func:`posenc.create_encoding`
            that encode ``len(grid)``-D positions to ``dim`` features), or a mapping
            ``name -> module`` of your own ``(B, N, D) -> (B, N, D)`` encodings.
        prefix_tokens: leading tokens (a class token) that get no encoding.
        normalize: RMS-normalise each candidate's output per token.
        encoding_kwargs: extra constructor arguments per encoding name.
        seed: seed of the encodings' own initial draws.
        **kwargs: of :class:`~posenc.search.MixedOp` (``alpha_init``, ``generator``, ...).

    Shapes: ``(B, prefix_tokens + prod(grid), D) -> same``.

    Example::

        model.pos = EncodingSearch(64, (8, 8))   # where the model did x = x + pos_embed
    """

    def __init__(self, dim: int, grid: int | Sequence[int], candidates: Sequence[str] | Mapping[str, nn.Module]
                 = ENCODING_CANDIDATES, *, prefix_tokens: int = 0, normalize: bool = True,
                 encoding_kwargs: Mapping[str, Mapping[str, Any]] | None = None, seed: int = 0,
                 **kwargs: Any) -> None:
        check_positive_int("dim", dim)
        check_positive_int("prefix_tokens", prefix_tokens, minimum=0)
        if isinstance(grid, bool) or not (isinstance(grid, int) or (isinstance(grid, Sequence)
                                                                     and not isinstance(grid, str))):
            raise TypeError(f"grid must be an int n (a sequence of n tokens) or a pair (rows, cols), "
                            f"got {type(grid).__name__} ({grid!r})")
        grid_t = (grid,) if isinstance(grid, int) else tuple(grid)
        if not 1 <= len(grid_t) <= 2:
            raise ValueError(f"grid must be n or (rows, cols), got {grid!r}")
        for g in grid_t:
            check_positive_int("grid", g)
        if isinstance(candidates, Mapping):
            ops = list(candidates.items())
        else:
            if isinstance(candidates, str) or not isinstance(candidates, Sequence) or not candidates:
                raise ValueError(f"candidates must be a non-empty sequence of encoding names, got {candidates!r}")
            extra = {k: dict(v) for k, v in (encoding_kwargs or {}).items()}
            unknown = [k for k in extra if k not in candidates]
            if unknown:
                raise ValueError(f"encoding_kwargs names encodings that are not candidates: {unknown}")
            check_footprint(candidates_nbytes(candidates, dim, grid_t, seed=seed, encoding_kwargs=extra),
                            f"dim={dim}, grid={grid_t}", f"EncodingSearch over {list(candidates)}")
            ops = [(n, encoding_candidate(n, dim, grid_t, prefix_tokens=prefix_tokens, normalize=normalize,
                                          seed=seed, **extra.get(n, {}))) for n in candidates]
        super().__init__(ops, **kwargs)
        self.dim, self.grid, self.prefix_tokens = dim, grid_t, prefix_tokens

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        if not isinstance(x, torch.Tensor) or not x.is_floating_point():
            raise TypeError(f"x must be a floating-point tensor of token features (batch, tokens, {self.dim}), got "
                            f"{getattr(x, 'dtype', type(x).__name__)}: embed integer token ids first")
        if x.dim() != 3 or x.shape[-1] != self.dim:
            raise ValueError(f"x must have shape (batch, tokens, {self.dim}), got {tuple(x.shape)}")
        if self.outputs_zero():
            return x
        return x + super().forward(x)

    def selected_module(self) -> nn.Module:
        """``AddEncoding(chosen encoding)``, or ``nn.Identity()`` for ``'none'`` / a pruned edge."""
        op = super().selected_module()
        return nn.Identity() if getattr(op, "is_zero", False) else AddEncoding(op)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, grid={self.grid}, prefix_tokens={self.prefix_tokens}, " + super().extra_repr()
