"""2D relative positions for image patches: block-Toeplitz products by 2D FFT.

Luo et al. (NeurIPS 2021, Sec. 4.3) train DeiT with RPE on patch grids but do not
say how to compute it fast. For patches on an ``H x W`` grid with a bias that
depends on the 2D offset, ``c[dr, dc]`` with ``dr = r' - r``, ``dc = c' - c``, the
``HW x HW`` matrix is block-Toeplitz with Toeplitz blocks, and

    y_(r,c) = sum_(r',c') c[r'-r, c'-c] x_(r',c')

is a 2D linear convolution: one ``rfft2`` of size ``>= (2H-1) x (2W-1)``, i.e.
``O(HW log(HW))`` per channel instead of ``O((HW)^2)``.

Coefficient layout: ``coeffs[..., dr + H - 1, dc + W - 1]``, shape ``(..., 2H-1, 2W-1)``.
Patches are flattened row-major (``index = r * W + c``), as ViT does.
"""

from __future__ import annotations

import torch

from posenc._checks import check_finite, check_floating, check_positive_int, check_tensor
from posenc._resources import check_footprint
from posenc.attention.kernelized._common import _vv, check_all_finite, check_key_padding_mask, check_qkv
from posenc.attention.kernelized.toeplitz import circulant_kernel, next_fast_len


def check_coeffs2d(coeffs: torch.Tensor, grid: tuple[int, int], name: str = "coeffs") -> None:
    check_tensor(name, coeffs)
    check_floating(name, coeffs)
    H, W = grid
    if coeffs.dim() < 2 or tuple(coeffs.shape[-2:]) != (2 * H - 1, 2 * W - 1):
        raise ValueError(
            f"{name} must have shape (..., 2H-1, 2W-1) = (..., {2 * H - 1}, {2 * W - 1}) for grid "
            f"{grid}, got {tuple(coeffs.shape)}"
        )


def rpe2d_matrix(coeffs: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
    """Materialise ``(..., 2H-1, 2W-1) -> (..., HW, HW)`` (for tests and small grids)."""
    check_coeffs2d(coeffs, grid)
    H, W = grid
    lead = float(coeffs[..., 0, 0].numel())
    n = float(H) * W
    check_footprint(n * n * (lead * coeffs.element_size() + 2 * 8.0), f"grid={tuple(grid)}",
                    "the dense (HW, HW) 2D RPE matrix")
    r = torch.arange(H, device=coeffs.device).repeat_interleave(W)
    c = torch.arange(W, device=coeffs.device).repeat(H)
    dr = r[None, :] - r[:, None] + H - 1
    dc = c[None, :] - c[:, None] + W - 1
    return coeffs[..., dr, dc]


def toeplitz2d_matmul(
    coeffs: torch.Tensor, x: torch.Tensor, grid: tuple[int, int], *, check_inputs: bool = True
) -> torch.Tensor:
    """``y_p = sum_p' c[p' - p] x_p'`` over an ``H x W`` patch grid, by 2D FFT.

    Args:
        coeffs: ``(..., 2H-1, 2W-1)``, leading dims broadcast with those of ``x``.
        x: ``(..., H*W, channels)`` row-major patches.
        grid: ``(H, W)``.
        check_inputs: refuse NaN/inf in ``coeffs`` and ``x`` (one reduction over each; pass
            False in hot loops whose inputs are known to be finite).

    Returns:
        ``(..., H*W, channels)``.
    """
    H = check_positive_int("grid[0]", grid[0])
    W = check_positive_int("grid[1]", grid[1])
    check_coeffs2d(coeffs, grid)
    check_tensor("x", x)
    check_floating("x", x)
    if x.dim() < 2 or x.shape[-2] != H * W:
        raise ValueError(f"x must have shape (..., H*W, channels) = (..., {H * W}, ch), got {tuple(x.shape)}")
    check_all_finite(check_inputs, coeffs=coeffs, x=x)
    dtype = torch.promote_types(coeffs.dtype, x.dtype)
    L1, L2 = next_fast_len(2 * H - 1), next_fast_len(2 * W - 1)
    k = circulant_kernel(coeffs.to(dtype), W, L2)  # along columns
    k = circulant_kernel(k.transpose(-1, -2), H, L1).transpose(-1, -2)  # along rows: (..., L1, L2)
    kf = torch.fft.rfft2(k)  # (..., L1, L2//2+1)
    xs = x.to(dtype).reshape(*x.shape[:-2], H, W, x.shape[-1]).movedim(-1, -3)  # (..., ch, H, W)
    xf = torch.fft.rfft2(xs, s=(L1, L2))
    y = torch.fft.irfft2(xf * kf[..., None, :, :], s=(L1, L2))[..., :H, :W]
    return y.movedim(-3, -1).reshape(*x.shape[:-2], H * W, x.shape[-1])


def kernelized_attention_2d(
    phi_q: torch.Tensor,
    phi_k: torch.Tensor,
    v: torch.Tensor,
    coeffs: torch.Tensor,
    grid: tuple[int, int],
    *,
    key_padding_mask: torch.Tensor | None = None,
    check_inputs: bool = True,
) -> torch.Tensor:
    """Eq. 10 of Luo et al. with a 2D relative bias on a patch grid.

    Args:
        phi_q, phi_k: ``(B, heads, H*W, m)``; v: ``(B, heads, H*W, d)``.
        coeffs: ``c = exp(b)`` of 2D offsets, ``(heads, 2H-1, 2W-1)`` (or broadcastable).
        grid: ``(H, W)``.
        key_padding_mask: ``(B, H*W)`` bool, True = ignore.
        check_inputs: refuse NaN/inf in ``phi_q``, ``phi_k``, ``v`` (one reduction over each;
            False in hot loops whose inputs are known to be finite). ``coeffs`` is always checked.

    Returns:
        ``(B, heads, H*W, d)``.
    """
    check_qkv(phi_q, phi_k, v, names=("phi_q", "phi_k", "v"))
    B, Hh, n, m = phi_q.shape
    check_key_padding_mask(key_padding_mask, B, phi_k.shape[-2])
    check_all_finite(check_inputs, phi_q=phi_q, phi_k=phi_k, v=v)
    check_finite("coeffs", coeffs)
    if key_padding_mask is not None:
        phi_k = phi_k.masked_fill(key_padding_mask[:, None, :, None], 0.0)
    d = v.shape[-1]
    A = (phi_k[..., None] * _vv(v)[..., None, :]).reshape(B, Hh, n, -1)
    D = toeplitz2d_matmul(coeffs, A, grid, check_inputs=False).reshape(B, Hh, n, m, d + 1)
    nd = torch.einsum("bhim,bhime->bhie", phi_q, D)
    return nd[..., :d] / nd[..., d:]
