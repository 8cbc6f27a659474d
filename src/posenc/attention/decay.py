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

DEFAULT_CHUNK = 64


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


def _scan_one(x: torch.Tensor, gamma: torch.Tensor, chunk: int) -> torch.Tensor:
    """``h_i = gamma h_{i-1} + x_i`` along dim -2 for ``x (G, n, ch)``, ``gamma (G,)``."""
    G, n, ch = x.shape
    K = -(-n // chunk)
    pad = K * chunk - n
    if pad:
        x = torch.cat((x, x.new_zeros(G, pad, ch)), dim=1)
    xc = x.reshape(G, K, chunk, ch)
    s = torch.arange(chunk, device=x.device, dtype=x.dtype)
    diff = s[:, None] - s[None, :]
    lg = torch.log(gamma.clamp_min(torch.finfo(x.dtype).tiny))[:, None, None]
    M = torch.exp(lg * diff.clamp_min(0)) * (diff >= 0)  # (G, C, C) gamma^{s - s'}
    intra = torch.einsum("gst,gktc->gksc", M, xc)
    last = intra[:, :, -1]  # chunk totals with decay to the chunk's end: (G, K, ch)
    gC = torch.exp(lg[:, :, 0] * chunk)  # (G, 1)
    states = [x.new_zeros(G, ch)]
    for k in range(K - 1):
        states.append(gC * states[-1] + last[:, k])
    H = torch.stack(states, dim=1)  # (G, K, ch) state entering chunk k
    carry = torch.exp(lg[:, :, 0, None] * (s + 1))  # (G, 1, C) -> gamma^{s+1}
    y = intra + carry[:, :, :, None] * H[:, :, None, :]
    return y.reshape(G, K * chunk, ch)[:, :n]


def decay_toeplitz(
    x: torch.Tensor,
    amplitudes: torch.Tensor,
    rates: torch.Tensor,
    future: tuple[torch.Tensor, torch.Tensor] | None = None,
    *,
    chunk: int = DEFAULT_CHUNK,
) -> torch.Tensor:
    """``y_i = sum_j c_{j-i} x_j`` for the decay family, by chunked scans.

    Args:
        x: ``(G, n, channels)``.
        amplitudes, rates: ``(G, R)`` past terms (``t <= 0``).
        future: ``(G, R')`` amplitudes and rates of ``t > 0``; None = causal.
        chunk: scan chunk length C.

    Returns:
        ``(G, n, channels)``.
    """
    check_positive_int("chunk", chunk)
    check_decay("past", amplitudes, rates)
    y = 0.0
    for r in range(rates.shape[-1]):
        y = y + amplitudes[:, r, None, None] * _scan_one(x, torch.exp(-rates[:, r]), chunk)
    if future is not None:
        fa, fr = future
        check_decay("future", fa, fr)
        xr = x.flip(1)
        for r in range(fr.shape[-1]):
            g = torch.exp(-fr[:, r])
            h = _scan_one(xr, g, chunk)  # inclusive scan of the reversed sequence
            strict = torch.cat((h.new_zeros(h.shape[0], 1, h.shape[2]), h[:, :-1]), dim=1) * g[:, None, None]
            y = y + fa[:, r, None, None] * strict.flip(1)
    return y


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
) -> torch.Tensor:
    """Eq. 10 of Luo et al. with a decay-family RPE, by linear recurrences.

    Args:
        phi_q, phi_k, v: ``(B, H, n, m)``, ``(B, H, n, m)``, ``(B, H, n, d)`` (equal lengths).
        amplitudes, rates: ``(H, R)`` past terms; ``future``: ``(H, R')`` pair or None (causal).
        key_padding_mask: ``(B, n)`` bool, True = padded key.
        checkpoint: recompute each head's scan in backward (memory of one head's
            ``n x m x (d+1)`` tensor instead of all heads').

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

    def one(pq, pk, vh, a, lam, fa, fr):
        A = (pk[..., None] * _vv(vh)[..., None, :]).reshape(B, n, -1)
        fut = None if fa is None else (fa.expand(B, -1), fr.expand(B, -1))
        D = decay_toeplitz(A, a.expand(B, -1), lam.expand(B, -1), fut, chunk=chunk)
        nd = torch.einsum("bim,bime->bie", pq, D.reshape(B, n, m, d + 1))
        return nd[..., :d] / nd[..., d:]

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
