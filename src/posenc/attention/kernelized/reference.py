"""Exact O(n^2) references: dense kernelized attention and softmax attention with RPE.

These materialise the ``n_q x n_k`` relative-position matrix and are meant for
tests and experiments (small n), not for long sequences.

* :func:`dense_kernelized_attention` -- Eq. 10 of Luo et al. (NeurIPS 2021)
  written literally: ``S_ij = phi(q_i).phi(k_j) exp(b_{j-i})``,
  ``z_i = sum_j S_ij v_j / sum_j S_ij``.
* :func:`softmax_rpe_attention` -- the exact attention the kernelized one
  approximates, ``softmax(scale q k^T + B) v`` with ``B_ij = b_{j-i}``, computed
  with :func:`torch.nn.functional.scaled_dot_product_attention`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from posenc._checks import check_finite
from posenc._resources import check_footprint
from posenc.attention.kernelized._common import check_key_padding_mask, check_qkv
from posenc.attention.kernelized.toeplitz import check_coeffs, dense_bytes


def rpe_matrix(bias: torch.Tensor, n_q: int, n_k: int) -> torch.Tensor:
    """``B_ij = b_{j-i}``: ``(..., n_q + n_k - 1) -> (..., n_q, n_k)``.

    Built with a sliding window over the reversed coefficients (independent of
    the indexing used by :func:`posenc.attention.kernelized.toeplitz.toeplitz_dense`).
    """
    check_coeffs(bias, n_q, n_k, name="bias")
    check_footprint(dense_bytes(bias, n_q, n_k, index_bytes=0), f"n_q={n_q}, n_k={n_k}", "the dense RPE matrix")
    return bias.flip(-1).unfold(-1, n_k, 1).flip(-1)


def _check_dense(q: torch.Tensor, n_q: int, n_k: int, copies: int, what: str) -> None:
    """Refuse ``copies`` ``(B, H, n_q, n_k)`` tensors in ``q``'s dtype beyond the memory limit."""
    nbytes = float(q.shape[0]) * q.shape[1] * n_q * n_k * q.element_size() * copies
    check_footprint(nbytes, f"n_q={n_q}, n_k={n_k} (batch {q.shape[0]}, {q.shape[1]} heads)", what)


def _mask(n_q: int, n_k: int, B: int, causal: bool, key_padding_mask, device) -> torch.Tensor | None:
    """``(B, 1, n_q, n_k)`` bool, True = may attend; None when nothing is masked."""
    if not causal and key_padding_mask is None:
        return None
    allow = torch.ones(B, 1, n_q, n_k, dtype=torch.bool, device=device)
    if causal:
        allow = allow & torch.ones(n_q, n_k, dtype=torch.bool, device=device).tril()
    if key_padding_mask is not None:
        allow = allow & ~key_padding_mask[:, None, None, :]
    return allow


def dense_kernelized_attention(
    phi_q: torch.Tensor,
    phi_k: torch.Tensor,
    v: torch.Tensor,
    bias: torch.Tensor | None = None,
    *,
    causal: bool = False,
    key_padding_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Eq. 10 with the RPE matrix materialised: ``(B, H, n_q, m), (B, H, n_k, m), (B, H, n_k, d) -> (B, H, n_q, d)``.

    Args:
        bias: ``b_t`` (not ``exp``) broadcastable to ``(B, H, n_q + n_k - 1)``; None = no RPE.
        causal, key_padding_mask: as in :func:`~posenc.attention.kernelized.kernelized_attention`.
    """
    check_qkv(phi_q, phi_k, v, names=("phi_q", "phi_k", "v"))
    B, _, n_q, _ = phi_q.shape
    n_k = phi_k.shape[-2]
    if causal and n_q != n_k:
        raise ValueError(f"causal=True needs n_q == n_k, got {n_q} and {n_k}")
    check_key_padding_mask(key_padding_mask, B, n_k)
    _check_dense(phi_q, n_q, n_k, 4, "dense kernelized attention")
    s = torch.einsum("bhim,bhjm->bhij", phi_q, phi_k)
    if bias is not None:
        check_finite("bias", bias)
        s = s * torch.exp(rpe_matrix(bias, n_q, n_k))
    allow = _mask(n_q, n_k, B, causal, key_padding_mask, phi_q.device)
    if allow is not None:
        s = s * allow.to(s.dtype)
    return torch.einsum("bhij,bhjd->bhid", s, v) / s.sum(-1, keepdim=True)


def softmax_rpe_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias: torch.Tensor | None = None,
    *,
    causal: bool = False,
    key_padding_mask: torch.Tensor | None = None,
    scale: float | None = None,
) -> torch.Tensor:
    """``softmax(scale q k^T + B) v`` with ``B_ij = b_{j-i}``: ``(B, H, n_q, d) -> (B, H, n_q, dv)``.

    Args:
        bias: ``b_t`` broadcastable to ``(B, H, n_q + n_k - 1)``; None = no RPE.
        scale: logit scale (default ``1/sqrt(d)``; Luo et al. use 1 with unit-norm q, k).
    """
    check_qkv(q, k, v)
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_finite(name, t)  # SDPA would turn a NaN query into a silent all-zero row
    B, _, n_q, _ = q.shape
    n_k = k.shape[-2]
    if causal and n_q != n_k:
        raise ValueError(f"causal=True needs n_q == n_k, got {n_q} and {n_k}")
    check_key_padding_mask(key_padding_mask, B, n_k)
    _check_dense(q, n_q, n_k, 3, "softmax attention with a dense RPE matrix")
    attn = None
    if bias is not None:
        check_finite("bias", bias)
        attn = rpe_matrix(bias, n_q, n_k).to(q.dtype)
        if attn.dim() == 2:
            attn = attn[None, None]
        elif attn.dim() == 3:
            attn = attn[None]
    allow = _mask(n_q, n_k, B, causal, key_padding_mask, q.device)
    if allow is not None:
        neg = torch.zeros(allow.shape, dtype=q.dtype, device=q.device).masked_fill(~allow, float("-inf"))
        attn = neg if attn is None else attn + neg
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn, scale=scale)
