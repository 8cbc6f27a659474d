"""Input checks and ratio helpers that the kernelized attention modules share.

:mod:`~posenc.attention.kernelized.kernelized` (the FFT / dense kernelized attention) and
:mod:`~posenc.attention.kernelized.decay` (the decay recurrences) both use them, as do the
2D and reference paths; they live below all of them so that none imports another for them.
"""

from __future__ import annotations

import torch

from posenc._checks import _compiling, check_finite, check_floating, check_tensor


def safe_ratio(num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
    """``num / den`` with ``den == 0`` replaced by 1.

    A query whose every key has zero weight (all-zero key features, all-zero
    coefficients, or every key masked) has ``num = den = 0``: its output is 0,
    never ``0/0 = NaN``.
    """
    return num / torch.where(den == 0, torch.ones_like(den), den)


class _LastRatio(torch.autograd.Function):
    """``nd (..., e) -> nd[..., :e-1] / nd[..., e-1:]`` with a zero denominator read as 1.

    The same values and gradients as ``safe_ratio(nd[..., :-1], nd[..., -1:])`` under
    autograd, which builds a zero-filled ``nd``-sized gradient for each of the two slices
    and adds them; this backward writes ``[dz / den, -(dz . z) / den]`` once.
    """

    @staticmethod
    def forward(ctx, nd):  # type: ignore[override]
        den = nd[..., -1:]
        zero = den == 0
        den = torch.where(zero, torch.ones_like(den), den)
        z = nd[..., :-1] / den
        ctx.save_for_backward(z, den, zero)
        return z

    @staticmethod
    def backward(ctx, dz):  # type: ignore[override]
        z, den, zero = ctx.saved_tensors
        g_num = dz / den
        g_den = (g_num * z).sum(-1, keepdim=True).neg_().masked_fill_(zero, 0.0)  # d/dden of a 1 is 0
        return torch.cat((g_num, g_den), dim=-1)


def ratio_of_last(nd: torch.Tensor) -> torch.Tensor:
    """``nd[..., :-1] / nd[..., -1:]`` (numerators, then the denominator), 0 where the denominator is 0."""
    return _LastRatio.apply(nd)


def check_all_finite(check_inputs: bool, **tensors: torch.Tensor | None) -> None:
    """``check_finite`` on each named tensor when ``check_inputs`` (None entries skipped)."""
    if not check_inputs:
        return
    for name, t in tensors.items():
        if t is not None:
            check_finite(name, t)


def _vv(v: torch.Tensor) -> torch.Tensor:
    return torch.cat((v, v.new_ones((*v.shape[:-1], 1))), dim=-1)


def check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, names=("q", "k", "v")) -> None:
    """Shapes ``(batch, heads, n_q, dq)``, ``(batch, heads, n_k, dq)``, ``(batch, heads, n_k, dv)``."""
    nq, nk, nv = names
    for name, t in zip(names, (q, k, v)):
        check_tensor(name, t)
        check_floating(name, t)
        if t.dim() != 4:
            raise ValueError(f"{name} must have shape (batch, heads, n, dim), got {tuple(t.shape)}")
    if q.shape[:2] != k.shape[:2] or k.shape[:2] != v.shape[:2]:
        raise ValueError(
            f"{nq}, {nk}, {nv} must share (batch, heads); got {nq} {tuple(q.shape)}, "
            f"{nk} {tuple(k.shape)}, {nv} {tuple(v.shape)} (mismatched heads)"
        )
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"{nq} and {nk} must have the same last dim, got {q.shape[-1]} and {k.shape[-1]}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"{nk} and {nv} must have the same length n_k, got {k.shape[-2]} and {v.shape[-2]}")
    for name, t in zip(names, (q, k, v)):
        if t.shape[-2] == 0 or t.shape[-1] == 0:
            raise ValueError(f"{name} must have n >= 1 and dim >= 1, got {tuple(t.shape)}")


def check_key_padding_mask(mask: torch.Tensor | None, batch: int, n_k: int) -> None:
    """``(batch, n_k)`` bool, True = padded key (as in ``nn.MultiheadAttention``)."""
    if mask is None:
        return
    check_tensor("key_padding_mask", mask)
    if mask.dtype != torch.bool:
        raise TypeError(f"key_padding_mask must be a bool tensor (True = padding), got {mask.dtype}")
    if tuple(mask.shape) != (batch, n_k):
        raise ValueError(
            f"key_padding_mask must have shape (batch, n_k) = ({batch}, {n_k}), got {tuple(mask.shape)}"
        )
    if not _compiling() and bool(mask.all(-1).any()):  # data-dependent: eager only
        raise ValueError("key_padding_mask masks every key of some batch row; attention is undefined")
