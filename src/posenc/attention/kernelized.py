"""Kernelized attention with relative positional encoding (RPE) in O(n log n).

Luo et al., "Stable, Fast and Accurate: Kernelized Attention with Relative
Positional Encoding" (NeurIPS 2021), Eq. 10::

    z_i = phi(q_i) sum_j c_{j-i} phi(k_j)^T v_j  /  phi(q_i) sum_j c_{j-i} phi(k_j)^T,
    c_t = exp(b_t).

Both sums are Toeplitz products (:mod:`posenc.attention.toeplitz`) of the
``n x m x (d+1)`` tensor ``A_j = phi(k_j) (x) [v_j, 1]`` (value channels plus one
channel of ones for the denominator).

:func:`kernelized_attention` is the functional core. Its FFT path is a custom
autograd function that walks over (batch x head) slices and blocks of feature
channels in turn and recomputes spectra in backward, so its memory is
``O(B H n (m + d))`` for inputs and outputs plus one block of spectra -- never
``O(n^2)`` and never ``O(B H n m d)``.

Numerical guarantee (see docs/krpe.md): with coefficients ``c_t`` in
``[exp(-B), 1]`` (:func:`rpe_coeffs` subtracts the maximum bias, which cancels
between numerator and denominator; ``bias_range=B`` in the module bounds the
range), non-negative features and FFT length L, the output satisfies
``|z_fft - z| <= eps * log2(L) * exp(B) * max|v|`` (float32 ``eps = 2^-24``;
tested for B up to 20 nats). Pass ``compute_dtype=torch.float64`` to accumulate
in float64 (``eps = 2^-53``) when the range must be wide.
"""

from __future__ import annotations

import torch

from posenc._checks import (
    _compiling,
    check_choice,
    check_finite,
    check_float_dtype,
    check_floating,
    check_positive_int,
    check_tensor,
)
from posenc.attention.toeplitz import (
    DEFAULT_BLOCK_BYTES,
    _pow2_scale,
    causal_coeffs,
    check_coeffs,
    circulant_kernel,
    even_ranges,
    kernel_grad_to_coeffs,
    lines_per_block,
    next_fast_len,
    toeplitz_dense,
)

#: ``method="auto"`` uses the dense O(n^2) path when ``n_q * n_k`` is at most
#: this square. Measured crossover of forward+backward (1 head, d = 64, m = 32,
#: float32, 1 thread) on the development machine: see ``bench_krpe.py``
#: (``attention_crossover``) and docs/krpe.md.
DENSE_MAX_N = 1536

METHODS = ("auto", "fft", "dense")


def rpe_coeffs(bias: torch.Tensor, n_q: int, causal: bool = False) -> torch.Tensor:
    """``c_t = exp(b_t - max b)`` over the offsets a query can see.

    Subtracting the maximum leaves the attention unchanged (it cancels between
    numerator and denominator) and puts every coefficient in ``(0, 1]``, the
    condition of the float32 error bound. With ``causal`` the future offsets
    ``t > 0`` get ``c_t = 0`` and are excluded from the maximum.

    Args:
        bias: ``(..., n_q + n_k - 1)`` biases ``b_t`` of offsets ``-(n_q-1)..n_k-1``.
        n_q: number of queries.
        causal: zero the future offsets.
    """
    check_finite("bias", bias)
    if causal:
        future = torch.arange(bias.shape[-1], device=bias.device) > n_q - 1
        bias = bias.masked_fill(future, float("-inf"))
    top = bias.amax(-1, keepdim=True).detach()
    return torch.exp(bias - top)


def safe_ratio(num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
    """``num / den`` with ``den == 0`` replaced by 1.

    A query whose every key has zero weight (all-zero key features, all-zero
    coefficients, or every key masked) has ``num = den = 0``: its output is 0,
    never ``0/0 = NaN``.
    """
    return num / torch.where(den == 0, torch.ones_like(den), den)


def check_all_finite(check_inputs: bool, **tensors: torch.Tensor | None) -> None:
    """``check_finite`` on each named tensor when ``check_inputs`` (None entries skipped)."""
    if not check_inputs:
        return
    for name, t in tensors.items():
        if t is not None:
            check_finite(name, t)


def check_output(check_inputs: bool, z: torch.Tensor, what: str) -> torch.Tensor:
    """Raise a ValueError when finite inputs gave a non-finite result (overflow)."""
    if check_inputs and not _compiling() and not z.is_meta and not bool(torch.isfinite(z.detach()).all()):
        raise ValueError(
            f"{what}: the result overflows {z.dtype} although every input is finite; pass "
            "compute_dtype=torch.float64 or rescale the inputs"
        )
    return z


def _vv(v: torch.Tensor) -> torch.Tensor:
    return torch.cat((v, v.new_ones((*v.shape[:-1], 1))), dim=-1)


def _blocks(m: int, d1: int, lines: int) -> list[tuple[int, int, int, int]]:
    """Blocks ``(a0, a1, f0, f1)`` of the ``m x d1`` channels ``A[a, f]``.

    With room for whole features, a block is ``a0:a1`` features times all ``d1``
    channels; otherwise one feature ``a`` and a range of channels, the ``d1``
    channels split into near-equal ranges of at most ``lines`` (no short tail,
    which would transform a single line alone).
    """
    if lines >= d1:
        per = lines // d1
        return [(a, min(a + per, m), 0, d1) for a in range(0, m, per)]
    return [(a, a + 1, f0, f1) for a in range(m) for f0, f1 in even_ranges(d1, lines)]


def _outer_into(buf: torch.Tensor, a: torch.Tensor, f: torch.Tensor, n: int) -> None:
    """``buf[a * nf + f, :n] = a[a] * f[f]`` for ``a (na, n)``, ``f (nf, n)`` (two in-place passes, no temporary)."""
    na, nf = a.shape[0], f.shape[0]
    view = buf.view(na, nf, buf.shape[-1])[..., :n]
    view.copy_(f.expand(na, nf, n)).mul_(a[:, None, :])


class KernelizedRPEFunction(torch.autograd.Function):
    """Eq. 10 by FFT on flattened slices; stores inputs and ``den``, recomputes spectra.

    ``phi_q (G, n_q, m)``, ``phi_k (G, n_k, m)``, ``v (G, n_k, d)``,
    ``coeffs (G, n_q + n_k - 1)`` -> ``z (G, n_q, d)``.

    The ``m x (d+1)`` channels ``A[a, f] = phi_k[:, a] * [v, 1][:, f]`` are never
    all materialised: they are built, transformed and contracted one block at a
    time (:func:`_blocks`) in a channel-major layout (FFT along the last,
    contiguous dim). A block's spectra are sized to stay in cache
    (``block_bytes``), which keeps the cost per transform flat as ``n`` grows.
    Forward issues 2 transforms per block, backward 4 (the forward's spectra are
    recomputed instead of stored, so memory is linear in ``n``).

    Everything between the transforms is done in place or into buffers reused
    from block to block: a block's channels are written into the first ``n``
    columns of a zero-padded ``(lines, L)`` buffer (its zero tail is written once,
    so the transforms need no padding copy), and the contractions with ``phi_q``,
    ``[v, 1]`` and the output gradient accumulate with ``addcmul_`` or reduce the
    inverse transform's own output, so no block-sized temporary is allocated
    besides the transforms' outputs.
    """

    @staticmethod
    def forward(ctx, phi_q, phi_k, v, coeffs, block_bytes: int):  # type: ignore[override]
        G, n_q, m = phi_q.shape
        n_k, d = v.shape[-2:]
        length = next_fast_len(n_q + n_k - 1)
        blocks = _blocks(m, d + 1, lines_per_block(length, m * (d + 1), block_bytes, v.element_size()))
        hf = torch.fft.rfft(circulant_kernel(coeffs, n_q, length), dim=-1)
        num_den = v.new_zeros((G, d + 1, n_q))
        buf = v.new_zeros((max((a1 - a0) * (f1 - f0) for a0, a1, f0, f1 in blocks), length))
        for g in range(G):
            vvT = _vv(v[g]).T.contiguous()  # (d+1, n_k)
            pkT, pqT = phi_k[g].T.contiguous(), phi_q[g].T.contiguous()  # (m, n)
            nd = num_den[g]
            for a0, a1, f0, f1 in blocks:
                na, nf = a1 - a0, f1 - f0
                A = buf[: na * nf]
                _outer_into(A, pkT[a0:a1], vvT[f0:f1], n_k)
                Af = torch.fft.rfft(A, dim=-1)
                Af.mul_(hf[g])
                D = torch.fft.irfft(Af, n=length, dim=-1).view(na, nf, length)
                del Af
                for a in range(na):
                    nd[f0:f1].addcmul_(D[a, :, :n_q], pqT[a0 + a])
                del D
        den = num_den[:, d]
        den = torch.where(den == 0, torch.ones_like(den), den)  # zero-weight rows: z = 0, not NaN
        z = (num_den[:, :d] / den[:, None]).transpose(1, 2)
        ctx.save_for_backward(phi_q, phi_k, v, coeffs, z, den)
        ctx.length, ctx.blocks = length, blocks
        return z

    @staticmethod
    def backward(ctx, dz):  # type: ignore[override]
        phi_q, phi_k, v, coeffs, z, den = ctx.saved_tensors
        length, blocks = ctx.length, ctx.blocks
        G, n_q, m = phi_q.shape
        n_k, d = v.shape[-2:]
        hf = torch.fft.rfft(circulant_kernel(coeffs, n_q, length), dim=-1)
        need_c = ctx.needs_input_grad[3]
        dphi_qT = phi_q.new_zeros((G, m, n_q))
        dphi_kT = phi_k.new_zeros((G, m, n_k))
        dvvT = v.new_zeros((G, d + 1, n_k))
        cross = hf.new_zeros(hf.shape) if need_c else None
        # gradient w.r.t. [num_i, den_i], channel-major: (G, d+1, n_q)
        gnum = dz / den[..., None]
        gden = -(dz * z).sum(-1, keepdim=True) / den[..., None]
        gradT = torch.cat((gnum, gden), dim=-1).transpose(1, 2).contiguous()
        lines = max((a1 - a0) * (f1 - f0) for a0, a1, f0, f1 in blocks)
        buf_a, buf_g = v.new_zeros((lines, length)), v.new_zeros((lines, length))  # zero tails, written once
        for g in range(G):
            vvT = _vv(v[g]).T.contiguous()
            pkT, pqT = phi_k[g].T.contiguous(), phi_q[g].T.contiguous()
            gT, dqT, dkT, dvT = gradT[g], dphi_qT[g], dphi_kT[g], dvvT[g]
            hg, hgc = hf[g], hf[g].conj()
            for a0, a1, f0, f1 in blocks:
                na, nf = a1 - a0, f1 - f0
                A, dD = buf_a[: na * nf], buf_g[: na * nf]
                _outer_into(A, pkT[a0:a1], vvT[f0:f1], n_k)
                _outer_into(dD, pqT[a0:a1], gT[f0:f1], n_q)
                Af = torch.fft.rfft(A, dim=-1)
                dDf = torch.fft.rfft(dD, dim=-1)
                if need_c:
                    cross[g] += torch.linalg.vecdot(Af, dDf, dim=0)  # sum over lines of conj(Af) * dDf
                # dphi_q = sum_f D * grad, with D = C A (recomputed)
                Af.mul_(hg)
                D = torch.fft.irfft(Af, n=length, dim=-1).view(na, nf, length)[..., :n_q]
                del Af
                dqT[a0:a1] += D.mul_(gT[None, f0:f1]).sum(1)
                del D
                # dA = C^T (phi_q (x) grad): gradients of [v, 1] and of phi_k
                dDf.mul_(hgc)
                dA = torch.fft.irfft(dDf, n=length, dim=-1).view(na, nf, length)[..., :n_k]
                del dDf
                for a in range(na):
                    dvT[f0:f1].addcmul_(dA[a], pkT[a0 + a])
                dkT[a0:a1] += dA.mul_(vvT[None, f0:f1]).sum(1)
                del dA
        dcoeffs = None
        if need_c:
            dcoeffs = kernel_grad_to_coeffs(torch.fft.irfft(cross, n=length, dim=-1), n_q, n_k)
        dv = dvvT[:, :d].transpose(1, 2)
        return dphi_qT.transpose(1, 2), dphi_kT.transpose(1, 2), dv, dcoeffs, None


def _dense(phi_q, phi_k, v, coeffs, n_q, n_k):
    s = phi_q @ phi_k.transpose(-1, -2)
    if coeffs is not None:
        s = s * toeplitz_dense(coeffs, n_q, n_k)
    return safe_ratio(s @ v, s.sum(-1, keepdim=True))


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


def kernelized_attention(
    phi_q: torch.Tensor,
    phi_k: torch.Tensor,
    v: torch.Tensor,
    coeffs: torch.Tensor | None = None,
    *,
    causal: bool = False,
    key_padding_mask: torch.Tensor | None = None,
    method: str = "auto",
    compute_dtype: torch.dtype | None = None,
    block_bytes: int = DEFAULT_BLOCK_BYTES,
    check_inputs: bool = True,
) -> torch.Tensor:
    """Kernelized attention with a Toeplitz RPE (Luo et al. 2021, Eq. 10).

    Args:
        phi_q: query features ``(batch, heads, n_q, m)`` (non-negative for the bound).
        phi_k: key features ``(batch, heads, n_k, m)``.
        v: values ``(batch, heads, n_k, d)``.
        coeffs: ``c_t = exp(b_t)`` of offsets ``-(n_q-1)..n_k-1``, shape broadcastable
            to ``(batch, heads, n_q + n_k - 1)`` (e.g. ``(heads, L)``); ``None`` = no RPE
            (``c = 1``, plain linear attention in ``O(n m d)``; causal: the chunkwise form of
            :func:`~posenc.attention.decay.chunkwise_attention` with every decay factor 1).
        causal: only keys ``j <= i`` (needs ``n_q == n_k``).
        key_padding_mask: ``(batch, n_k)`` bool, True = ignore that key.
        method: ``"fft"``, ``"dense"`` (materialised n_q x n_k) or ``"auto"``.
        compute_dtype: accumulate in this dtype (e.g. ``torch.float64``), cast back.
            Half-precision inputs (float16, bfloat16) are computed in float32.
        block_bytes: bound on the spectra held at once by the FFT path.
        check_inputs: check that ``phi_q``, ``phi_k``, ``v``, ``coeffs`` are finite and
            that the result did not overflow (one pass over each; pass False in hot
            loops whose inputs are known to be finite).

    Returns:
        ``(batch, heads, n_q, d)``. A query whose keys all have zero weight
        (all-zero features or coefficients) gets 0, never NaN; the coefficients are
        rescaled by a power of two (it cancels) so values near the dtype's maximum
        do not overflow the FFT.

    Raises:
        ValueError: NaN/inf inputs or an overflowing result (when ``check_inputs``).
    """
    check_qkv(phi_q, phi_k, v, names=("phi_q", "phi_k", "v"))
    check_choice("method", method, METHODS)
    check_float_dtype("compute_dtype", compute_dtype)
    check_positive_int("block_bytes", block_bytes)
    check_all_finite(check_inputs, phi_q=phi_q, phi_k=phi_k, v=v)
    B, H, n_q, m = phi_q.shape
    n_k = phi_k.shape[-2]
    if causal and n_q != n_k:
        raise ValueError(f"causal=True needs n_q == n_k (equal query and key lengths), got {n_q} and {n_k}")
    check_key_padding_mask(key_padding_mask, B, n_k)
    out_dtype = v.dtype
    dtype = compute_dtype or torch.promote_types(torch.promote_types(phi_q.dtype, phi_k.dtype), v.dtype)
    if dtype in (torch.float16, torch.bfloat16):  # no half-precision FFT on CPU; the bound assumes float32
        dtype = torch.float32
    phi_q, phi_k, v = phi_q.to(dtype), phi_k.to(dtype), v.to(dtype)
    if key_padding_mask is not None:
        phi_k = phi_k.masked_fill(key_padding_mask[:, None, :, None], 0.0)
    if coeffs is None:
        if causal:  # the chunkwise form of causal linear attention, with every decay factor 1
            from posenc.attention.decay import chunkwise_attention

            z = chunkwise_attention(phi_q, phi_k, v, None, None)
            return check_output(check_inputs, z, "kernelized_attention").to(out_dtype)
        kv = torch.einsum("bhjm,bhje->bhme", phi_k, _vv(v))
        nd = phi_q @ kv
        return check_output(check_inputs, safe_ratio(nd[..., :-1], nd[..., -1:]), "kernelized_attention").to(out_dtype)
    check_coeffs(coeffs, n_q, n_k)
    check_finite("coeffs", coeffs)
    try:
        ok = torch.broadcast_shapes(coeffs.shape[:-1], (B, H)) == (B, H)
    except RuntimeError:
        ok = False
    if not ok:
        raise ValueError(f"coeffs must broadcast to (batch, heads, n_q + n_k - 1) = ({B}, {H}, {n_q + n_k - 1}), "
                         f"got {tuple(coeffs.shape)}") from None
    coeffs = coeffs.to(dtype)
    coeffs = coeffs / _pow2_scale(coeffs)  # cancels between numerator and denominator
    if causal:
        coeffs = causal_coeffs(coeffs, n_q)
    if method == "auto":
        method = "dense" if n_q * n_k <= DENSE_MAX_N**2 else "fft"
    if method == "dense":
        return check_output(check_inputs, _dense(phi_q, phi_k, v, coeffs, n_q, n_k), "kernelized_attention").to(out_dtype)
    L = coeffs.shape[-1]
    c = coeffs.expand(B, H, L).reshape(B * H, L)
    z = KernelizedRPEFunction.apply(
        phi_q.reshape(B * H, n_q, m), phi_k.reshape(B * H, n_k, m), v.reshape(B * H, n_k, -1), c, block_bytes
    )
    return check_output(check_inputs, z.reshape(B, H, n_q, -1), "kernelized_attention").to(out_dtype)


def bounded_bias(bias: torch.Tensor, bias_range: float | None) -> torch.Tensor:
    """Soft-clamp ``bias`` into ``[-bias_range/2, bias_range/2]`` (``r tanh(b / r)``, ``r = range/2``)."""
    if bias_range is None:
        return bias
    r = 0.5 * bias_range
    return r * torch.tanh(bias / r)


def relative_offsets(n_q: int, n_k: int, max_distance: int, device=None) -> torch.Tensor:
    """Table indices of offsets ``-(n_q-1)..n_k-1`` clamped to ``[-D, D]`` (shared edge values)."""
    t = torch.arange(-(n_q - 1), n_k, device=device)
    return t.clamp(-max_distance, max_distance) + max_distance


def feature_scale(d: int) -> float:
    """Performer scaling ``d^{-1/4}`` of q and k so that ``phi(q).phi(k) ~ exp(q.k / sqrt d)``."""
    return d ** -0.25


__all__ = [
    "DENSE_MAX_N",
    "KernelizedRPEFunction",
    "bounded_bias",
    "check_key_padding_mask",
    "check_qkv",
    "feature_scale",
    "kernelized_attention",
    "relative_offsets",
    "rpe_coeffs",
    "safe_ratio",
]

