"""Exponential-decay relative biases: Toeplitz products as linear recurrences.

Going beyond Luo et al. (NeurIPS 2021), whose FFT has no step-by-step decoding:
when the RPE coefficients are a short sum of exponentials in the distance,

    c_t = sum_r a_r exp(-lambda_r |t|)   for t <= 0 (past and present),
    c_t = sum_r a'_r exp(-lambda'_r t)   for t > 0  (future, non-causal only),

(one term with ``a = 1`` is ALiBi, ``b_t = -alpha |t|``, Press et al. 2022), the
product ``y_i = sum_j c_{j-i} x_j`` is ``sum_r a_r h_{r,i}`` with the recurrence
``h_{r,i} = gamma_r h_{r,i-1} + x_i``, ``gamma_r = exp(-lambda_r)``. It is computed
here as a chunked scan: a dense ``C x C`` decay matrix inside each chunk plus a
carried state between chunks, ``O(n R C channels)`` work, exact for this family
(no FFT round-off). :func:`decay_kernelized_attention` never forms the
``n x m x (d+1)`` products: it uses the chunkwise-parallel form of linear attention
(Katharopoulos et al. 2020; Sun et al. 2023, "Retentive Network"), ``(Q K^T * T) [V, 1]``
inside chunks plus one ``m x (d+1)`` state per term and chunk, ``O(n C (m + d) + n R m d)``.
:class:`DecayDecoder` runs the recurrence one token at a time in ``O(R m d)`` per token.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from posenc._checks import _compiling, check_finite, check_positive_int
from posenc._resources import check_footprint
from posenc.attention.kernelized._common import (
    _vv,
    check_all_finite,
    check_key_padding_mask,
    check_qkv,
    ratio_of_last,
    safe_ratio,
)
from posenc.attention.kernelized.toeplitz import _prime_allocator

DEFAULT_CHUNK = 16
DEFAULT_ATTENTION_CHUNK = 64
#: Heads of the chunkwise decay attention go in groups whose temporaries stay near this size
#: (4 MiB: as fast warm as 32 MiB, and a first call touches a third less fresh memory at n = 8,192;
#: ``benchmarks/bench_defaults.py``).
DEFAULT_HEAD_GROUP_BYTES = 4 * 2**20


def check_decay(name: str, amplitudes: torch.Tensor, rates: torch.Tensor) -> None:
    """``amplitudes`` and ``rates`` of the same shape ``(..., R)``, finite, ``a >= 0``, ``lambda >= 0``."""
    if amplitudes.shape != rates.shape or amplitudes.dim() == 0:
        raise ValueError(
            f"{name} amplitudes and rates must have the same shape (..., R), got "
            f"{tuple(amplitudes.shape)} and {tuple(rates.shape)}"
        )
    check_finite(f"{name} amplitudes", amplitudes)
    check_finite(f"{name} rates", rates)
    if not _compiling() and (bool((amplitudes < 0).any()) or bool((rates < 0).any())):  # eager only
        raise ValueError(f"{name} amplitudes and rates must be >= 0 (c_t = sum a exp(-lambda |t|))")


def decay_coeffs(
    amplitudes: torch.Tensor,
    rates: torch.Tensor,
    n_q: int,
    n_k: int,
    future: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """The Toeplitz coefficients ``(..., n_q + n_k - 1)`` of the decay family (offsets ``-(n_q-1)..n_k-1``).

    Args:
        amplitudes, rates: ``(..., R)`` for the past (``t <= 0``).
        future: ``(amplitudes, rates)`` for ``t > 0``; None = no future (causal).
    """
    check_positive_int("n_q", n_q)
    check_positive_int("n_k", n_k)
    lead = float(rates[..., 0].numel()) if rates.dim() else 1.0
    check_footprint(3.0 * lead * max(rates.shape[-1] if rates.dim() else 1, 1) * (n_q + n_k) * rates.element_size(),
                    f"n_q={n_q}, n_k={n_k}", "the decay coefficients")
    t = torch.arange(-(n_q - 1), n_k, device=rates.device, dtype=rates.dtype)
    past = (amplitudes[..., None] * torch.exp(-rates[..., None] * (-t).clamp_min(0))).sum(-2)
    past = past * (t <= 0)
    if future is None:
        return past
    fa, fr = future
    fut = (fa[..., None] * torch.exp(-fr[..., None] * t.clamp_min(0))).sum(-2)
    return past + fut * (t > 0)


def _decay_matrix(lam: torch.Tensor, size: int) -> torch.Tensor:
    """``M[p, s', s] = exp(-lam_p (s - s'))`` for ``s >= s'``, else 0: ``(P,) -> (P, size, size)``.

    Laid out so that ``x @ M`` scans the last dim of ``x``.
    """
    s = torch.arange(size, device=lam.device, dtype=lam.dtype)
    diff = s[None, :] - s[:, None]
    return torch.exp(-lam[:, None, None] * diff.clamp_min(0)) * (diff >= 0)


def _scan(x: torch.Tensor, lam: torch.Tensor, chunk: int) -> torch.Tensor:
    """Inclusive scan ``h_k = exp(-lam) h_{k-1} + x_k`` along the last dim of ``x (P, ch, K)``.

    Chunks of ``chunk`` steps are one matrix product each (``(P, ch*K/C, C) @ (C, C)``);
    the chunk-to-chunk carries are themselves a scan (rate ``chunk * lam``), done
    recursively, so no Python loop runs over the sequence.
    """
    P, ch, K = x.shape
    if K <= chunk:
        return x @ _decay_matrix(lam, K)
    nc = -(-K // chunk)
    if nc * chunk != K:
        x = torch.cat((x, x.new_zeros(P, ch, nc * chunk - K)), dim=-1)
    intra = (x.reshape(P, ch * nc, chunk) @ _decay_matrix(lam, chunk)).reshape(P, ch, nc, chunk)
    totals = _scan(intra[..., -1], lam * chunk, chunk)  # state at each chunk's end: (P, ch, nc)
    carry_in = torch.cat((totals.new_zeros(P, ch, 1), totals[..., :-1]), dim=-1)
    s = torch.arange(1, chunk + 1, device=x.device, dtype=x.dtype)
    y = intra + carry_in[..., None] * torch.exp(-lam[:, None] * s)[:, None, None, :]
    return y.reshape(P, ch, nc * chunk)[..., :K]


def _cross_chunk(xc: torch.Tensor, a: torch.Tensor, lam: torch.Tensor, chunk: int, future: bool) -> torch.Tensor:
    """Contributions from other chunks (past or future) of the terms ``a, lam (G, R)``.

    ``xc (G, ch, K, C)`` channel-major chunks -> ``(G, ch, K, C)``.
    """
    G, ch, K, C = xc.shape
    R = lam.shape[-1]
    s = torch.arange(C, device=xc.device, dtype=xc.dtype)
    if future:  # S'_k = sum_s g^s x_{k,s};  position s receives g^(C-s) F_k
        w_in, w_out = s, C - s
    else:  # S_k = sum_s g^(C-1-s) x_{k,s};  position s receives g^(s+1) H_k
        w_in, w_out = C - 1 - s, s + 1
    w_in = torch.exp(-lam[..., None] * w_in)  # (G, R, C)
    w_out = a[..., None] * torch.exp(-lam[..., None] * w_out)
    S = (xc.reshape(G, ch * K, C) @ w_in.transpose(1, 2)).reshape(G, ch, K, R)
    S = S.permute(0, 3, 1, 2).reshape(G * R, ch, K)
    if future:
        S = S.flip(-1)
    h = _scan(S, (lam * C).reshape(-1), chunk)
    h = torch.cat((h.new_zeros(G * R, ch, 1), h[..., :-1]), dim=-1)  # exclusive
    if future:
        h = h.flip(-1)
    h = h.reshape(G, R, ch, K).permute(0, 2, 3, 1).reshape(G, ch * K, R)
    return (h @ w_out).reshape(G, ch, K, C)


def decay_toeplitz_cm(
    x: torch.Tensor,
    amplitudes: torch.Tensor,
    rates: torch.Tensor,
    future: tuple[torch.Tensor, torch.Tensor] | None = None,
    *,
    chunk: int = DEFAULT_CHUNK,
) -> torch.Tensor:
    """:func:`decay_toeplitz` on channel-major ``x (G, channels, n)`` -> ``(G, channels, n)``."""
    check_positive_int("chunk", chunk, minimum=2)
    check_decay("past", amplitudes, rates)
    if future is not None:
        check_decay("future", *future)
    G, ch, n = x.shape
    C = min(chunk, n)
    K = -(-n // C)
    if K * C != n:
        x = torch.cat((x, x.new_zeros(G, ch, K * C - n)), dim=-1)
    c = decay_coeffs(amplitudes, rates, C, C, future)  # offsets -(C-1)..C-1
    i = torch.arange(C, device=x.device)
    Tt = c[:, i[:, None] - i[None, :] + C - 1]  # (G, C, C): Tt[s', s] = c_{s'-s}
    y = (x.reshape(G, ch * K, C) @ Tt).reshape(G, ch, K, C)
    if K > 1:
        xc = x.reshape(G, ch, K, C)
        # in place: the product's backward needs its inputs only, and fresh full-size
        # buffers cost page faults that dominate these memory-bound passes
        y.add_(_cross_chunk(xc, amplitudes, rates, chunk, future=False))
        if future is not None:
            y.add_(_cross_chunk(xc, future[0], future[1], chunk, future=True))
    return y.reshape(G, ch, K * C)[..., :n]


def decay_toeplitz(
    x: torch.Tensor,
    amplitudes: torch.Tensor,
    rates: torch.Tensor,
    future: tuple[torch.Tensor, torch.Tensor] | None = None,
    *,
    chunk: int = DEFAULT_CHUNK,
) -> torch.Tensor:
    """``y_i = sum_j c_{j-i} x_j`` for the decay family, by a chunked scan.

    Inside a chunk of C positions the product is one ``C x C`` Toeplitz matrix
    (all terms, past and future, summed); across chunks each term carries a state
    that decays by ``exp(-lambda C)`` per chunk. Work ``O(n C ch + n R ch)``, all
    in matrix products over a channel-major layout.

    Args:
        x: ``(G, n, channels)``.
        amplitudes, rates: ``(G, R)`` past terms (``t <= 0``).
        future: ``(G, R')`` amplitudes and rates of ``t > 0``; None = causal.
        chunk: scan chunk length C (>= 2).

    Returns:
        ``(G, n, channels)``.
    """
    return decay_toeplitz_cm(x.transpose(1, 2), amplitudes, rates, future, chunk=chunk).transpose(1, 2)


def _check_terms(name: str, amplitudes: torch.Tensor, rates: torch.Tensor, H: int) -> None:
    check_decay(name, amplitudes, rates)
    if amplitudes.dim() != 2 or amplitudes.shape[0] != H:
        raise ValueError(
            f"{name} amplitudes and rates must have shape (heads, R) = ({H}, R), got {tuple(amplitudes.shape)}"
        )


def _scan_steps(
    u: torch.Tensor, g: torch.Tensor, reverse: bool, h0: torch.Tensor | None = None,
    dot_with: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Exclusive scan along dim 2 of ``u (B, H, K, R, M)`` with factors ``g (H, R)``.

    Forward: ``h_0 = h0``, ``h_k = g h_{k-1} + u_{k-1}``; ``reverse``: ``h_{K-1} = h0``,
    ``h_k = g h_{k+1} + u_{k+1}`` (``h0 = None``: zero). The adjoint of a forward scan
    is a reverse one. One step per chunk on ``(B, H, R, M)`` slices. With ``dot_with``
    (same shape as ``u``) also returns ``sum_{b, k, M} h * dot_with`` of shape ``(H, R)``,
    accumulated step by step (no full-size temporary).
    """
    K = u.shape[2]
    h = torch.empty_like(u)
    acc = None if dot_with is None else torch.zeros_like(u[:, :, 0])
    gg = g[None, :, :, None]
    first, steps = (K - 1, range(K - 2, -1, -1)) if reverse else (0, range(1, K))
    if h0 is None:
        h[:, :, first].zero_()
    else:
        h[:, :, first].copy_(h0)
    if acc is not None:
        acc.addcmul_(h[:, :, first], dot_with[:, :, first])
    for k in steps:
        prev = k - steps.step
        # slice assignment (not ``out=``): torch.compile refuses non-contiguous ``out=`` tensors
        h[:, :, k] = torch.addcmul(u[:, :, prev], h[:, :, prev], gg)
        if acc is not None:
            acc.addcmul_(h[:, :, k], dot_with[:, :, k])
    return h, None if acc is None else acc.sum((0, 3))


class _ChunkScan(torch.autograd.Function):
    """:func:`_scan_steps` with its adjoint: ``u (B, H, K, R, M)``, ``g (H, R)``, ``h0 (B, H, R, M)`` -> ``h``.

    Backward: ``grad_u`` is the opposite-direction exclusive scan of ``grad_h``;
    ``grad_g = sum_k <grad_u_k, h_k>`` (for a forward scan, ``h_{k+1} = g h_k + u_k``:
    the adjoint of ``h_{k+1}`` is ``grad_u_k`` and it meets ``d h_{k+1} / d g = h_k``);
    ``grad_h0 = grad_h[first] + g grad_u[first]`` (``h0`` reaches ``h_k`` as ``g^k h0``).
    """

    @staticmethod
    def forward(ctx, u, g, reverse: bool, h0):  # type: ignore[override]
        h, _ = _scan_steps(u, g, reverse, h0)
        ctx.save_for_backward(g, h)
        ctx.reverse = reverse
        return h

    @staticmethod
    def backward(ctx, grad_h):  # type: ignore[override]
        g, h = ctx.saved_tensors
        dot_with = h if ctx.needs_input_grad[1] else None
        grad_h = grad_h.contiguous()
        grad_u, grad_g = _scan_steps(grad_h, g, not ctx.reverse, dot_with=dot_with)
        grad_h0 = None
        if ctx.needs_input_grad[3]:
            first = h.shape[2] - 1 if ctx.reverse else 0
            grad_h0 = torch.addcmul(grad_h[:, :, first], grad_u[:, :, first], g[None, :, :, None])
        return grad_u, grad_g, None, grad_h0


def decay_kernelized_attention(
    phi_q: torch.Tensor,
    phi_k: torch.Tensor,
    v: torch.Tensor,
    amplitudes: torch.Tensor,
    rates: torch.Tensor,
    future: tuple[torch.Tensor, torch.Tensor] | None = None,
    *,
    key_padding_mask: torch.Tensor | None = None,
    chunk: int = DEFAULT_ATTENTION_CHUNK,
    checkpoint: bool = False,
    block_bytes: int | None = None,
    check_inputs: bool = True,
) -> torch.Tensor:
    """Eq. 10 of Luo et al. with a decay-family RPE, in the chunkwise-parallel form.

    ``z_i = sum_j c_{j-i} (phi_q_i . phi_k_j) v_j / sum_j c_{j-i} (phi_q_i . phi_k_j)``
    with ``c`` of :func:`decay_coeffs`. The sequence is cut into chunks of C positions
    (the chunkwise form of linear attention, Katharopoulos et al. 2020, and of
    retention, Sun et al. 2023 "Retentive Network", extended here to several terms
    and to both directions):

    * inside a chunk, ``(Q K^T * T) [V, 1]`` with the ``C x C`` Toeplitz matrix
      ``T[s, s'] = c_{s'-s}`` (all terms, past and future): ``O(n C (m + d))``;
    * across chunks, per term r a state ``U_r[k] = sum_s' gamma_r^(C-1-s') phi_k (x) [v, 1]``
      (``m x (d+1)``, ``gamma = exp(-lambda)``), an exclusive scan over chunks with
      factor ``gamma_r^C``, read out as ``a_r gamma_r^(s+1) phi_q . H_r[k]``; the
      future terms are the mirror image (weights ``gamma'^s'`` in, reverse scan,
      ``a'_r gamma'^(C-s)`` out): ``O(n R m d)``.

    Every factor is a power of ``gamma <= 1``, so large rates underflow to 0 (never
    overflow) and ``lambda = 0`` is exact. Backward is autograd through batched
    matrix products plus the hand-written adjoint of the scan over chunks
    (:class:`_ChunkScan`); memory ``O(n (C + R m + d + R m d / C))`` per head.

    The work is cut into pieces whose largest temporaries stay near ``block_bytes``:
    groups of heads, and for long sequences runs of chunks (segments) that hand
    their scan states on to the next segment (past terms, in order) or the previous
    one (future terms, in reverse order). Allocations above glibc's mmap threshold
    (32 MiB) are returned to the system when freed and page-faulted in again on
    every pass, which made the unsegmented form grow faster than ``n``.

    Args:
        phi_q, phi_k, v: ``(B, H, n, m)``, ``(B, H, n, m)``, ``(B, H, n, d)`` (equal lengths).
        amplitudes, rates: ``(H, R)`` past terms (``t = j - i <= 0``); may require grad.
        future: ``(H, R')`` amplitudes and rates of ``t > 0``, or None (causal).
        key_padding_mask: ``(B, n)`` bool, True = padded key.
        chunk: chunk length C (>= 2; ``min(C, n)`` is used).
        checkpoint: accepted for backward compatibility and ignored (the chunkwise form
            needs no recomputation).
        block_bytes: bound on the largest temporaries of one piece (heads x chunks);
            None = :data:`DEFAULT_HEAD_GROUP_BYTES`.
        check_inputs: refuse NaN/inf in ``phi_q``, ``phi_k``, ``v`` (one pass over each;
            False in hot loops whose inputs are known to be finite). A query whose keys
            all have zero weight gets 0, never NaN.

    Returns:
        ``(B, H, n, d)``.
    """
    del checkpoint
    check_qkv(phi_q, phi_k, v, names=("phi_q", "phi_k", "v"))
    if not phi_q.dtype == phi_k.dtype == v.dtype:  # the scans accumulate in one dtype
        raise TypeError(f"phi_q, phi_k and v must share one dtype, got phi_q {phi_q.dtype}, phi_k {phi_k.dtype}, "
                        f"v {v.dtype}")
    check_all_finite(check_inputs, phi_q=phi_q, phi_k=phi_k, v=v)
    B, H, n, m = phi_q.shape
    if phi_k.shape[-2] != n:
        raise ValueError(f"the decay RPE needs n_q == n_k, got {n} and {phi_k.shape[-2]}")
    check_positive_int("chunk", chunk, minimum=2)
    if block_bytes is not None:
        check_positive_int("block_bytes", block_bytes)
    _check_terms("past", amplitudes, rates, H)
    if future is not None:
        _check_terms("future", *future, H)
    check_key_padding_mask(key_padding_mask, B, n)
    if key_padding_mask is not None:
        phi_k = phi_k.masked_fill(key_padding_mask[:, None, :, None], 0.0)
    return chunkwise_attention(phi_q, phi_k, v, (amplitudes, rates), future, chunk=chunk, block_bytes=block_bytes)


def chunkwise_attention(
    phi_q: torch.Tensor,
    phi_k: torch.Tensor,
    v: torch.Tensor,
    past: tuple[torch.Tensor, torch.Tensor] | None,
    future: tuple[torch.Tensor, torch.Tensor] | None,
    *,
    chunk: int = DEFAULT_ATTENTION_CHUNK,
    block_bytes: int | None = None,
) -> torch.Tensor:
    """The chunkwise form on checked inputs (see :func:`decay_kernelized_attention`).

    ``past = None`` is plain causal linear attention (``c_t = 1`` for ``t <= 0``, no
    future): the same chunked form with every decay factor 1, so no weighting passes
    (used by :func:`~posenc.attention.kernelized.kernelized_attention` for
    ``causal=True`` without RPE). Key padding must already be applied (``phi_k = 0``).
    """
    B, H, n, m = phi_q.shape
    d = v.shape[-1]
    e = d + 1
    C = min(chunk, n)
    K = -(-n // C)
    pad = K * C - n
    vv = _vv(v)
    if pad:  # padded keys have phi_k = 0 and contribute nothing; padded queries are sliced away
        phi_q, phi_k, vv = (F.pad(t, (0, 0, 0, pad)) for t in (phi_q, phi_k, vv))
    q = phi_q.reshape(B, H, K, C, m)
    k = phi_k.reshape(B, H, K, C, m)
    vv = vv.reshape(B, H, K, C, e)
    R = 1 if past is None else max(past[1].shape[1], 0 if future is None else future[1].shape[1])
    # pieces of (heads x chunks) whose largest temporaries (per chunk and head: C x max(C, R m,
    # d + 1), or the R x m x (d + 1) scan state) stay near the budget: the allocator recycles a
    # piece's buffers for the next piece, so a call touches one piece's worth of fresh memory
    # (a first call in a process pays a page fault per 4 KiB of it; buffers above glibc's
    # 32 MiB mmap threshold would pay them on every call)
    budget = DEFAULT_HEAD_GROUP_BYTES if block_bytes is None else block_bytes
    per_chunk = B * max(C * max(C, R * m, e), R * m * e) * v.element_size()
    hg = max(1, min(H, budget // (per_chunk * K)))
    Ks = K if hg > 1 or per_chunk * K <= budget else max(1, budget // per_chunk)
    # once per process and size: glibc then serves the pieces' temporaries (a few of the budget's size)
    # from memory it keeps, not from fresh mappings each (a first call at n = 4,096 faulted 7,700 pages
    # for a 2 MB result, 5,300 after it; see _prime_allocator)
    _prime_allocator(4 * budget, phi_q.device)
    outs = []
    # the groups are views from one split (so are the segments below): autograd gathers their gradients
    # with one concatenation; indexing each piece out of the whole tensor gave each piece's gradient a
    # zero-filled copy of the whole, summed: O(n) work per piece, O(n^2 / block_bytes) per call
    groups = zip(q.split(hg, dim=1), k.split(hg, dim=1), vv.split(hg, dim=1))
    for h0, (qg, kg, vg) in zip(range(0, H, hg), groups):
        hs = slice(h0, h0 + hg)
        p = None if past is None else (past[0][hs], past[1][hs])
        f = None if future is None else (future[0][hs], future[1][hs])
        outs.append(_chunkwise_heads(qg, kg, vg, p, f, C, Ks))
    nd = (outs[0] if len(outs) == 1 else torch.cat(outs, dim=1)).reshape(B, H, K * C, e)
    if pad:  # padded query rows are dropped before dividing (their denominators are 0)
        nd = nd[:, :, :n]
    return ratio_of_last(nd)


def _direction_weights(terms, C: int, future: bool, dtype):
    """``w_in (H, R, C)``, ``w_out (H, R, C)`` and ``lambda C (H, R)`` of one direction's terms.

    Past: a chunk's state is ``sum_s' gamma^(C-1-s') x_s'``, position s reads ``a gamma^(s+1) H``;
    future: ``sum_s' gamma^s' x_s'`` and ``a gamma^(C-s) H``.
    """
    a, lam = terms
    s = torch.arange(C, device=lam.device, dtype=lam.dtype)
    w_in, w_out = (s, C - s) if future else (C - 1 - s, s + 1)
    w_in = torch.exp(-lam[..., None] * w_in).to(dtype)
    w_out = (a[..., None] * torch.exp(-lam[..., None] * w_out)).to(dtype)
    return w_in, w_out, (lam * C).to(dtype)


def _chunkwise_heads(q, k, vv, past, future, C: int, Ks: int) -> torch.Tensor:
    """Numerators and denominators ``(B, h, K, C, e)`` of one group of heads, segment by segment."""
    B, h, K, _, m = q.shape
    e = vv.shape[-1]
    # intra-chunk Toeplitz block T[s, s'] = c_{s'-s}, every term of both directions (None: the causal
    # mask of plain attention, applied with tril_)
    T = None
    if past is not None:
        c = decay_coeffs(past[0], past[1], C, C, future).to(q.dtype)  # (h, 2C-1), offsets -(C-1)..C-1
        i = torch.arange(C, device=c.device)
        T = c[:, i[None, :] - i[:, None] + C - 1][:, None]
    segs = list(zip(q.split(Ks, dim=2), k.split(Ks, dim=2), vv.split(Ks, dim=2)))
    pieces = []
    pw = None if past is None else _direction_weights(past, C, False, q.dtype)
    carry = None
    for j, (qs, ks, vs) in enumerate(segs):
        S = qs @ ks.transpose(-1, -2)  # (B, h, Ks, C, C); in place where autograd allows (T without grad)
        S = S.tril_() if T is None else (S * T if T.requires_grad else S.mul_(T))
        nd = S @ vs  # (B, h, Ks, C, e)
        if K > 1:
            nd, carry = _cross_chunks(nd, qs, ks, vs, pw, carry, reverse=False, last=j == len(segs) - 1)
        pieces.append(nd)
    if future is not None and K > 1:
        fw = _direction_weights(future, C, True, q.dtype)
        carry = None
        for j in range(len(segs) - 1, -1, -1):
            pieces[j], carry = _cross_chunks(pieces[j], *segs[j], fw, carry, reverse=True, last=j == 0)
    return pieces[0] if len(pieces) == 1 else torch.cat(pieces, dim=2)


def _cross_chunks(nd, qs, ks, vs, weights, carry, *, reverse: bool, last: bool):
    """Add the contributions of the other chunks of one direction to ``nd (B, h, Ks, C, e)``.

    ``weights``: ``(w_in, w_out, lambda C)`` of :func:`_direction_weights`, or None for plain
    causal attention (every factor 1). ``carry (B, h, R, m e)``: the scan state entering this
    segment from the previous one (None at the sequence's start or end). Returns the new ``nd``
    and the state to hand on (None when ``last``).
    """
    B, h, Ks, C, m = qs.shape
    e = vs.shape[-1]
    if weights is None:
        R, kw, qw = 1, ks, qs
        g = torch.ones(h, 1, device=qs.device, dtype=qs.dtype)
    else:
        w_in, w_out, lam_c = weights
        R = w_in.shape[1]
        # U[k] = sum_s' w_in[r, s'] phi_k[k, s'] (x) vv[k, s']: one matmul with (r, m) folded
        kw = (ks[:, :, :, :, None, :] * w_in.transpose(1, 2)[None, :, None, :, :, None]).reshape(B, h, Ks, C, R * m)
        qw = (qs[:, :, :, :, None, :] * w_out.transpose(1, 2)[None, :, None, :, :, None]).reshape(B, h, Ks, C, R * m)
        g = torch.exp(-lam_c)  # (h, R): the factor per chunk
    U = (kw.transpose(-1, -2) @ vs).reshape(B, h, Ks, R, m * e)
    Hs = _ChunkScan.apply(U, g, reverse, carry)
    new_carry = None
    if not last:
        edge = 0 if reverse else Ks - 1
        new_carry = torch.addcmul(U[:, :, edge], Hs[:, :, edge], g[None, :, :, None])
    nd = torch.baddbmm(nd.reshape(-1, C, e), qw.reshape(-1, C, R * m), Hs.reshape(-1, R * m, e))
    return nd.reshape(B, h, Ks, C, e), new_carry


class DecayDecoder:
    """Causal autoregressive decoding with a decay RPE in ``O(R m d)`` per token.

    Holds ``h_r = sum_{j <= i} gamma_r^{i-j} phi(k_j) (x) [v_j, 1]`` per head.

    Args:
        amplitudes, rates: ``(H, R)`` past terms.
        batch, m, d: sizes of the state ``(batch, H, R, m, d+1)``.
    """

    def __init__(self, amplitudes: torch.Tensor, rates: torch.Tensor, batch: int, m: int, d: int) -> None:
        check_decay("past", amplitudes, rates)
        check_positive_int("batch", batch)
        check_positive_int("m", m)
        check_positive_int("d", d)
        H, R = rates.shape
        check_footprint(2.0 * batch * H * R * m * (d + 1) * rates.element_size(), f"batch={batch}, m={m}, d={d}",
                        f"the decoder state of {H} heads and {R} decay terms (and its update)")
        self.amplitudes = amplitudes
        self.gamma = torch.exp(-rates)
        self.state = rates.new_zeros(batch, H, R, m, d + 1)

    def step(self, phi_q: torch.Tensor, phi_k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """One token: ``phi_q, phi_k (batch, H, m)``, ``v (batch, H, d)`` -> ``z (batch, H, d)``."""
        upd = phi_k[:, :, None, :, None] * _vv(v)[:, :, None, None, :]
        self.state = self.gamma[None, :, :, None, None] * self.state + upd
        nd = torch.einsum("bhm,hr,bhrme->bhe", phi_q, self.amplitudes, self.state)
        return safe_ratio(nd[..., :-1], nd[..., -1:])
