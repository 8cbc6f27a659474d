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
(no FFT round-off). :class:`DecayDecoder` runs the same recurrence one token at a
time in ``O(R m d)`` per token.
"""

from __future__ import annotations

import torch

from posenc._checks import check_finite, check_positive_int
from posenc.attention.kernelized import _vv, check_key_padding_mask, check_qkv

DEFAULT_CHUNK = 16


def check_decay(name: str, amplitudes: torch.Tensor, rates: torch.Tensor) -> None:
    """``amplitudes`` and ``rates`` of the same shape ``(..., R)``, finite, ``a >= 0``, ``lambda >= 0``."""
    if amplitudes.shape != rates.shape or amplitudes.dim() == 0:
        raise ValueError(
            f"{name} amplitudes and rates must have the same shape (..., R), got "
            f"{tuple(amplitudes.shape)} and {tuple(rates.shape)}"
        )
    check_finite(f"{name} amplitudes", amplitudes)
    check_finite(f"{name} rates", rates)
    if bool((amplitudes < 0).any()) or bool((rates < 0).any()):
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


def decay_kernelized_attention(
    phi_q: torch.Tensor,
    phi_k: torch.Tensor,
    v: torch.Tensor,
    amplitudes: torch.Tensor,
    rates: torch.Tensor,
    future: tuple[torch.Tensor, torch.Tensor] | None = None,
    *,
    key_padding_mask: torch.Tensor | None = None,
    chunk: int = DEFAULT_CHUNK,
    checkpoint: bool = True,
    block_bytes: int = 4 * 2**20,
) -> torch.Tensor:
    """Eq. 10 of Luo et al. with a decay-family RPE, by linear recurrences.

    Args:
        phi_q, phi_k, v: ``(B, H, n, m)``, ``(B, H, n, m)``, ``(B, H, n, d)`` (equal lengths).
        amplitudes, rates: ``(H, R)`` past terms; ``future``: ``(H, R')`` pair or None (causal).
        key_padding_mask: ``(B, n)`` bool, True = padded key.
        checkpoint: recompute each head's scan in backward (memory of one head's
            ``n x m x (d+1)`` tensor instead of all heads').
        block_bytes: size of the blocks of features processed in turn.

    Returns:
        ``(B, H, n, d)``.
    """
    check_qkv(phi_q, phi_k, v, names=("phi_q", "phi_k", "v"))
    B, H, n, m = phi_q.shape
    if phi_k.shape[-2] != n:
        raise ValueError(f"the decay RPE needs n_q == n_k, got {n} and {phi_k.shape[-2]}")
    check_key_padding_mask(key_padding_mask, B, n)
    if key_padding_mask is not None:
        phi_k = phi_k.masked_fill(key_padding_mask[:, None, :, None], 0.0)
    d = v.shape[-1]

    # Blocks of features keep every temporary below ``block_bytes``: small enough to stay
    # in cache and to be recycled by the allocator (fresh buffers above glibc's 32 MiB mmap
    # threshold cost page faults that dominated these memory-bound passes).
    mb = max(1, min(m, block_bytes // max(1, B * (d + 1) * n * v.element_size())))

    def one(pq, pk, vh, a, lam, fa, fr):
        fut = None if fa is None else (fa.expand(B, -1), fr.expand(B, -1))
        vvT = _vv(vh).transpose(1, 2)[:, None, :, :]  # (B, 1, d+1, n)
        pkT, pqT = pk.transpose(1, 2), pq.transpose(1, 2)  # (B, m, n)
        nd = 0.0
        for s in range(0, m, mb):
            # channel-major block: A (B, mb, d+1, n)
            A = (pkT[:, s : s + mb, None, :] * vvT).reshape(B, -1, n)
            D = decay_toeplitz_cm(A, a.expand(B, -1), lam.expand(B, -1), fut, chunk=chunk)
            nd = nd + (D.reshape(B, -1, d + 1, n) * pqT[:, s : s + mb, None, :]).sum(1)  # (B, d+1, n)
        return (nd[:, :d] / nd[:, d:]).transpose(1, 2)

    outs = []
    for h in range(H):
        fa = fr = None
        if future is not None:
            fa, fr = future[0][h : h + 1], future[1][h : h + 1]
        args = (phi_q[:, h], phi_k[:, h], v[:, h], amplitudes[h : h + 1], rates[h : h + 1], fa, fr)
        if checkpoint and torch.is_grad_enabled():
            outs.append(torch.utils.checkpoint.checkpoint(one, *args, use_reentrant=False))
        else:
            outs.append(one(*args))
    return torch.stack(outs, dim=1)


class DecayDecoder:
    """Causal autoregressive decoding with a decay RPE in ``O(R m d)`` per token.

    Holds ``h_r = sum_{j <= i} gamma_r^{i-j} phi(k_j) (x) [v_j, 1]`` per head.

    Args:
        amplitudes, rates: ``(H, R)`` past terms.
        batch, m, d: sizes of the state ``(batch, H, R, m, d+1)``.
    """

    def __init__(self, amplitudes: torch.Tensor, rates: torch.Tensor, batch: int, m: int, d: int) -> None:
        check_decay("past", amplitudes, rates)
        self.amplitudes = amplitudes
        self.gamma = torch.exp(-rates)
        H, R = rates.shape
        self.state = rates.new_zeros(batch, H, R, m, d + 1)

    def step(self, phi_q: torch.Tensor, phi_k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """One token: ``phi_q, phi_k (batch, H, m)``, ``v (batch, H, d)`` -> ``z (batch, H, d)``."""
        upd = phi_k[:, :, None, :, None] * _vv(v)[:, :, None, None, :]
        self.state = self.gamma[None, :, :, None, None] * self.state + upd
        nd = torch.einsum("bhm,hr,bhrme->bhe", phi_q, self.amplitudes, self.state)
        return nd[..., :-1] / nd[..., -1:]
