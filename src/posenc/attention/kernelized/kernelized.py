"""Kernelized attention with relative positional encoding (RPE) in O(n log n).

Luo et al., "Stable, Fast and Accurate: Kernelized Attention with Relative
Positional Encoding" (NeurIPS 2021), Eq. 10::

    z_i = phi(q_i) sum_j c_{j-i} phi(k_j)^T v_j  /  phi(q_i) sum_j c_{j-i} phi(k_j)^T,
    c_t = exp(b_t).

Both sums are Toeplitz products (:mod:`posenc.attention.kernelized.toeplitz`) of the
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
    all_finite,
    broadcast_shape,
    check_choice,
    check_finite,
    check_float_dtype,
    check_has_data,
    check_positive_int,
)
from posenc._resources import check_footprint
from posenc.attention.kernelized._common import (
    _vv,
    check_all_finite,
    check_key_padding_mask,
    check_qkv,
    ratio_of_last,
    safe_ratio,
)
from posenc.attention.kernelized.toeplitz import (
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

#: Default bound on the spectra of one block of the FFT path (bytes): 512 KiB keeps a block's
#: buffers (channels, their spectra, the inverse transforms) near the 1 MiB L2 cache of the
#: development machine; in a sweep of the block size (``bench_krpe.py``, ``block_sweep``)
#: forward+backward was fastest, or tied, at 0.5-1 MiB for n = 4,096 to 65,536. From n ~ 8k on,
#: the floor of :data:`~posenc.attention.kernelized.toeplitz.MIN_LINES` lines per transform decides.
ATTENTION_BLOCK_BYTES = 512 * 2**10

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


def check_output(check_inputs: bool, z: torch.Tensor, what: str) -> torch.Tensor:
    """Raise a ValueError when finite inputs gave a non-finite result (overflow)."""
    if check_inputs and not _compiling() and not z.is_meta and not all_finite(z):
        raise ValueError(
            f"{what}: the result overflows {z.dtype} although every input is finite; pass "
            "compute_dtype=torch.float64 or rescale the inputs"
        )
    return z


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


def _outer_into(out: torch.Tensor, a: torch.Tensor, f: torch.Tensor) -> None:
    """``out[a, f, :] = a[a, 0, :] * f[0, f, :]`` for ``a (na, 1, n)``, ``f (1, nf, n)`` without a temporary.

    One pass with ``out=`` in eager mode; two in-place passes (copy, multiply) while tracing,
    since ``torch.compile`` refuses a non-contiguous ``out=`` tensor.
    """
    if _compiling():
        out.copy_(f.expand(out.shape)).mul_(a)
    else:
        torch.mul(a, f, out=out)


def _staging(v: torch.Tensor, rows: int, n: int, ones_row: bool = False) -> torch.Tensor:
    """A ``(rows, n)`` buffer the slices of one (batch x head) are copied into, channel-major;
    with ``ones_row`` its last row is the constant channel of ones (``[v, 1]``), written once."""
    out = v.new_empty((rows, n))
    if ones_row:
        out[-1].fill_(1.0)
    return out


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
    recomputed instead of stored, so memory is linear in ``n``), in 2 calls: the
    block's channels and the output gradient's channels are transformed together,
    multiplied by the kernel's spectrum and its conjugate, and transformed back together.

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
        e = d + 1
        length = next_fast_len(n_q + n_k - 1)
        blocks = _blocks(m, e, lines_per_block(length, m * e, block_bytes, v.element_size()))
        hf = torch.fft.rfft(circulant_kernel(coeffs, n_q, length), dim=-1)
        num_den = v.new_empty((G, e, n_q))
        # per (batch x head) slice: phi_k, [v, 1], phi_q channel-major in staging buffers, so that
        # every block's views below are made once, not once per slice
        pk, vv, pq, nd = _staging(v, m, n_k), _staging(v, e, n_k, True), _staging(v, m, n_q), _staging(v, e, n_q)
        buf = v.new_zeros((max((a1 - a0) * (f1 - f0) for a0, a1, f0, f1 in blocks), length))  # zero tail
        plan = []
        for a0, a1, f0, f1 in blocks:
            na, nf = a1 - a0, f1 - f0
            A = buf[: na * nf]
            plan.append((A, A.view(na, nf, length)[..., :n_k], pk[a0:a1, None], vv[None, f0:f1],
                         [(r * nf, (r + 1) * nf, pq[a0 + r]) for r in range(na)], nd[f0:f1]))
        for g in range(G):
            pk.copy_(phi_k[g].T)
            vv[:d].copy_(v[g].T)
            pq.copy_(phi_q[g].T)
            nd.zero_()
            hg = hf[g]
            for A, A_n, pk_b, vv_b, rows, nd_b in plan:
                _outer_into(A_n, pk_b, vv_b)
                Af = torch.fft.rfft(A, dim=-1)
                Af.mul_(hg)
                D = torch.fft.irfft(Af, n=length, dim=-1)
                del Af
                for r0, r1, pq_row in rows:
                    nd_b.addcmul_(D[r0:r1, :n_q], pq_row)
                del D
            num_den[g].copy_(nd)
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
        e = d + 1
        hf = torch.fft.rfft(circulant_kernel(coeffs, n_q, length), dim=-1)
        need_c = ctx.needs_input_grad[3]
        dphi_qT = phi_q.new_empty((G, m, n_q))
        dphi_kT = phi_k.new_empty((G, m, n_k))
        dvT = v.new_empty((G, d, n_k))
        cross = hf.new_zeros(hf.shape) if need_c else None
        # gradient w.r.t. [num_i, den_i]: (G, n_q, d+1)
        gnum = dz / den[..., None]
        gden = -(dz * z).sum(-1, keepdim=True) / den[..., None]
        grad = torch.cat((gnum, gden), dim=-1)
        pk, vv, pq, gr = _staging(v, m, n_k), _staging(v, e, n_k, True), _staging(v, m, n_q), _staging(v, e, n_q)
        dq, dk, dvv = _staging(v, m, n_q), _staging(v, m, n_k), _staging(v, e, n_k)
        # [A; dD] of a block: one zero-tailed buffer per block size (rows keep their role)
        bufs = {s: v.new_zeros((2 * s, length)) for s in {(a1 - a0) * (f1 - f0) for a0, a1, f0, f1 in blocks}}
        plan = []
        for a0, a1, f0, f1 in blocks:
            na, nf = a1 - a0, f1 - f0
            s = na * nf
            buf = bufs[s]
            plan.append((s, buf, buf[:s].view(na, nf, length)[..., :n_k], buf[s:].view(na, nf, length)[..., :n_q],
                         pk[a0:a1, None], vv[None, f0:f1], pq[a0:a1, None], gr[None, f0:f1], (na, nf),
                         dq[a0:a1], dk[a0:a1], dvv[f0:f1], [(r * nf, (r + 1) * nf, pk[a0 + r]) for r in range(na)]))
        for g in range(G):
            pk.copy_(phi_k[g].T)
            vv[:d].copy_(v[g].T)
            pq.copy_(phi_q[g].T)
            gr.copy_(grad[g].T)
            dq.zero_()
            dk.zero_()
            dvv.zero_()
            hh = torch.stack((hf[g], hf[g].conj()))[:, None]  # C for A, C^T for dD
            for s, buf, A_n, dD_n, pk_b, vv_b, pq_b, gr_b, shape, dq_b, dk_b, dv_b, rows in plan:
                _outer_into(A_n, pk_b, vv_b)  # A = phi_k (x) [v, 1]
                _outer_into(dD_n, pq_b, gr_b)  # dD = phi_q (x) grad
                spec = torch.fft.rfft(buf, dim=-1)  # both in one call
                if need_c:
                    cross[g] += torch.linalg.vecdot(spec[:s], spec[s:], dim=0)  # sum over lines: conj(Af) dDf
                spec.view(2, s, -1).mul_(hh)
                res = torch.fft.irfft(spec, n=length, dim=-1)
                del spec
                # dphi_q = sum_f D * grad with D = C A (recomputed); dA = C^T dD -> d[v, 1], dphi_k
                dq_b += res[:s].view(*shape, length)[..., :n_q].mul_(gr_b).sum(1)
                for r0, r1, pk_row in rows:
                    dv_b.addcmul_(res[s + r0 : s + r1, :n_k], pk_row)
                dk_b += res[s:].view(*shape, length)[..., :n_k].mul_(vv_b).sum(1)
                del res
            dphi_qT[g].copy_(dq)
            dphi_kT[g].copy_(dk)
            dvT[g].copy_(dvv[:d])
        dcoeffs = None
        if need_c:
            dcoeffs = kernel_grad_to_coeffs(torch.fft.irfft(cross, n=length, dim=-1), n_q, n_k)
        return dphi_qT.transpose(1, 2), dphi_kT.transpose(1, 2), dvT.transpose(1, 2), dcoeffs, None


def _dense(phi_q, phi_k, v, coeffs, n_q, n_k):
    # the (B, H, n_q, n_k) scores, the expanded coefficients and their product
    lead = float(phi_q.shape[0]) * phi_q.shape[1]
    check_footprint(3.0 * lead * n_q * n_k * phi_q.element_size(), f"n_q={n_q}, n_k={n_k} (method='dense')",
                    "dense kernelized attention")
    s = phi_q @ phi_k.transpose(-1, -2)
    if coeffs is not None:
        s = s * toeplitz_dense(coeffs, n_q, n_k)
    return safe_ratio(s @ v, s.sum(-1, keepdim=True))


def _linear_attention(phi_q: torch.Tensor, phi_k: torch.Tensor, v: torch.Tensor,
                      guard: bool = True) -> torch.Tensor:
    """``phi_q (phi_k^T v) / (phi_q sum_j phi_k_j)``, 0 where the denominator is 0 (non-causal, no RPE).

    Under autograd (or while tracing) one product with ``[v, 1]`` gives numerators and
    denominators together, and :func:`ratio_of_last` divides them (its hand-written backward).
    Without autograd the numerators are made in the result's memory and divided in place, and the
    denominators are one column: the call touches no memory but its result's and three small
    ``m``-sized products (no ``[v, 1]`` copy, no ``n x (d + 1)`` temporary), which is what a first
    call in a process pays page faults for. ``guard=False`` (without autograd) divides by the
    denominators as they are: a zero one gives NaN or infinity, which the caller's check of the
    result then finds (it recomputes with the guard); every other entry is the guarded result's.
    """
    grad = torch.is_grad_enabled() and (phi_q.requires_grad or phi_k.requires_grad or v.requires_grad)
    if grad or _compiling():
        kv = torch.einsum("bhjm,bhje->bhme", phi_k, _vv(v))
        return ratio_of_last(phi_q @ kv)
    kv = phi_k.transpose(-1, -2) @ v  # (B, H, m, d)
    den = phi_q @ phi_k.sum(-2, keepdim=True).transpose(-1, -2)  # (B, H, n, 1)
    return torch.matmul(phi_q, kv).div_(den.masked_fill_(den == 0, 1.0) if guard else den)


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
    block_bytes: int = ATTENTION_BLOCK_BYTES,
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
            :func:`~posenc.attention.kernelized.decay.chunkwise_attention` with every decay factor 1).
        causal: only keys ``j <= i`` (needs ``n_q == n_k``).
        key_padding_mask: ``(batch, n_k)`` bool, True = ignore that key.
        method: ``"fft"``, ``"dense"`` (materialised n_q x n_k) or ``"auto"``.
        compute_dtype: accumulate in this dtype (e.g. ``torch.float64``), cast back.
            Half-precision inputs (float16, bfloat16) are computed in float32.
        block_bytes: bound on the spectra of one block of the FFT path (default
            :data:`ATTENTION_BLOCK_BYTES`).
        check_inputs: check that ``phi_q``, ``phi_k``, ``v``, ``coeffs`` are finite and
            that the result did not overflow (one pass over each; without ``coeffs`` and
            ``causal``, one pass over the result, which every input entry reaches; pass False
            in hot loops whose inputs are known to be finite).

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
    linear = coeffs is None and not causal  # plain linear attention: its checks read the result
    if linear:
        # Every entry of phi_k and v reaches kv = phi_k^T [v, 1], and every entry of kv and of
        # phi_q reaches every column of a row of the result: NaN and inf survive products and
        # sums (inf * 0 is NaN), and a non-finite denominator is never read as 0. So a finite
        # result proves the inputs finite, for one pass over it instead of three over them (the
        # inputs are read again only to name a culprit). A key the padding mask removes never
        # reaches kv: with a mask, phi_k is checked here.
        for name, t in (("phi_q", phi_q), ("phi_k", phi_k), ("v", v)):
            check_has_data(name, t)
        check_all_finite(check_inputs and key_padding_mask is not None, phi_k=phi_k)
    else:
        check_all_finite(check_inputs, phi_q=phi_q, phi_k=phi_k, v=v)
    B, H, n_q, m = phi_q.shape
    n_k = phi_k.shape[-2]
    if causal and n_q != n_k:
        raise ValueError(f"causal=True needs n_q == n_k (equal query and key lengths), got {n_q} and {n_k}")
    check_key_padding_mask(key_padding_mask, B, n_k)
    given = {"phi_q": phi_q, "phi_k": phi_k, "v": v}
    out_dtype = v.dtype
    dtype = compute_dtype or torch.promote_types(torch.promote_types(phi_q.dtype, phi_k.dtype), v.dtype)
    if dtype in (torch.float16, torch.bfloat16):  # no half-precision FFT on CPU; the bound assumes float32
        dtype = torch.float32
    phi_q, phi_k, v = phi_q.to(dtype), phi_k.to(dtype), v.to(dtype)
    if key_padding_mask is not None:
        phi_k = phi_k.masked_fill(key_padding_mask[:, None, :, None], 0.0)
    if coeffs is None:
        if causal:  # the chunkwise form of causal linear attention, with every decay factor 1
            from posenc.attention.kernelized.decay import chunkwise_attention

            z = chunkwise_attention(phi_q, phi_k, v, None, None)
            return check_output(check_inputs, z, "kernelized_attention").to(out_dtype)
        checked = check_inputs and not _compiling()
        # checked, the result's check also finds a zero denominator (x / 0 is never finite): the division
        # skips its guard, and only a result that is not finite is made again with it
        z = _linear_attention(phi_q, phi_k, v, guard=not checked)
        if checked and not all_finite(z):
            z = _linear_attention(phi_q, phi_k, v)  # a query whose keys all have zero weight gets 0
            if not all_finite(z):
                check_all_finite(True, **given)  # names the non-finite input; else finite inputs overflowed
                check_output(True, z, "kernelized_attention")
        return z.to(out_dtype)
    check_coeffs(coeffs, n_q, n_k)
    check_finite("coeffs", coeffs)
    try:
        ok = broadcast_shape(coeffs.shape[:-1], (B, H)) == (B, H)
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
    check_positive_int("n_q", n_q)
    check_positive_int("n_k", n_k)
    check_footprint(2 * 8.0 * (n_q + n_k), f"n_q={n_q}, n_k={n_k}", "the int64 offsets")
    t = torch.arange(-(n_q - 1), n_k, device=device)
    return t.clamp(-max_distance, max_distance) + max_distance


def feature_scale(d: int) -> float:
    """Performer scaling ``d^{-1/4}`` of q and k so that ``phi(q).phi(k) ~ exp(q.k / sqrt d)``."""
    return d ** -0.25


__all__ = [
    "ATTENTION_BLOCK_BYTES",
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

