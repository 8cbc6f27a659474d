"""ALiBi: attention with linear biases (Press, Smith, Lewis, "Train Short, Test Long", ICLR 2022).

Head ``h`` adds ``-m_h |i - j|`` to the logit of query ``i`` and key ``j`` (causal
models only see ``j <= i``, where this is ``-m_h (i - j)``). The slopes are a
geometric sequence: for ``H`` a power of two, ``m_h = 2 ** (-8 h / H)``,
``h = 1..H``; otherwise the paper takes the ``2**floor(log2 H)`` slopes of the
nearest lower power of two, ``p = 2 ** floor(log2 H)``, and adds every other slope
of the next power of two, ``2 ** (-4 h / p)`` for ``h = 1, 3, 5, ...``, until there are ``H``.

Three ways to use it, all computing the same function:

* :func:`alibi_bias` — an explicit ``(H, n_q, n_k)`` bias for ``scaled_dot_product_attention``
  (O(n²) memory; a fixed bias keeps SDPA's math path);
* :func:`alibi_score_mod` — a ``score_mod`` for ``torch.nn.attention.flex_attention``
  (no bias tensor);
* :func:`alibi_kernelized_attention` — in linear (random-feature) attention:
  ``exp(b_t) = exp(-m |t|)`` is a one-term decay, which posenc computes by the
  chunkwise recurrence of :mod:`posenc.attention.kernelized.decay` in O(n) time, with
  O(1)-per-token decoding (:func:`alibi_decoder`).

**Where the kernelized form differs from softmax ALiBi.** Softmax ALiBi is
``softmax(q.k / sqrt(d) - m|i-j|)``. The kernelized form replaces
``exp(q.k / sqrt(d))`` by a random-feature estimate ``phi(q).phi(k)`` (Performer's
FAVOR+) and keeps the multiplicative ``exp(-m|i-j|)`` exactly, so (1) it is
exact in expectation only for each term of numerator and denominator, not for
their ratio; (2) its error grows with ``|q| |k|`` (unit-normalised q/k, as in
Luo et al., keep it small); (3) with unit-normalised q/k and logit scale 1 it
is a different model from softmax ALiBi with ``1/sqrt(d)``, to be trained as
such, not a drop-in for softmax ALiBi weights.
"""

from __future__ import annotations

import math

import torch

from posenc._checks import check_has_data, check_positive_int, check_tensor
from posenc._resources import check_footprint
from posenc.attention.kernelized.decay import DecayDecoder, decay_kernelized_attention
from posenc.attention.relative.relative_bias import toeplitz_from_offsets
from posenc.attention.slopes import alibi_slopes  # noqa: F401  (also its old home: posenc.attention.alibi)


def _check_slopes(slopes: torch.Tensor) -> torch.Tensor:
    check_tensor("slopes", slopes)
    check_has_data("slopes", slopes)
    if slopes.dim() != 1 or slopes.numel() == 0:
        raise ValueError(f"slopes must have shape (num_heads,), got {tuple(slopes.shape)}")
    if not slopes.is_floating_point():
        raise TypeError(f"slopes must be a floating-point tensor, got dtype {slopes.dtype}")
    if not bool(torch.isfinite(slopes).all()) or bool((slopes < 0).any()):
        raise ValueError("slopes must be finite and >= 0")
    return slopes


def _check_offset(q_offset) -> int:
    """An integer offset (an int, or a float holding an integer); anything else is refused."""
    if isinstance(q_offset, bool) or not isinstance(q_offset, (int, float)):
        raise TypeError(f"q_offset must be an int, got {type(q_offset).__name__} ({q_offset!r})")
    if isinstance(q_offset, float):
        if not (math.isfinite(q_offset) and q_offset.is_integer()):
            raise ValueError(f"q_offset must be an integer position, got {q_offset!r}")
        q_offset = int(q_offset)
    if abs(q_offset) > 2**62:
        raise ValueError(f"q_offset must lie within +-2**62, got {q_offset}")
    return q_offset


def relative_distance(n_q: int, n_k: int, *, q_offset: int | None = None, device=None) -> torch.Tensor:
    """``j - i`` for query ``i`` and key ``j``: ``(n_q, n_k)`` int64.

    Query ``i`` sits at position ``i + q_offset``; the default offset ``n_k - n_q``
    aligns the last query with the last key (decoding with a cache). Refused before
    anything is allocated when ``n_q x n_k`` int64 exceeds the memory limit
    (:func:`posenc._resources.check_footprint`).
    """
    check_positive_int("n_q", n_q)
    check_positive_int("n_k", n_k)
    off = n_k - n_q if q_offset is None else _check_offset(q_offset)
    check_footprint(8.0 * n_q * n_k, f"n_q={n_q}, n_k={n_k}", "the (n_q, n_k) int64 relative distances")
    qi = torch.arange(n_q, device=device) + off
    kj = torch.arange(n_k, device=device)
    return kj[None, :] - qi[:, None]


def alibi_bias(
    slopes: torch.Tensor, n_q: int, n_k: int | None = None, *, causal: bool = False,
    q_offset: int | None = None, dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """The ALiBi bias ``-m_h |j - i|``: ``(H, n_q, n_k)``; ``causal`` adds ``-inf`` where ``j > i``.

    Args:
        slopes: ``(H,)`` from :func:`alibi_slopes`.
        n_q, n_k: query and key lengths (``n_k`` defaults to ``n_q``).
        causal: mask future keys with ``-inf`` (then the bias equals ``-m (i - j)``).
        q_offset: position of query 0 (see :func:`relative_distance`).
        dtype: of the result (default the slopes' dtype).

    Computed in float64 once per offset ``j - i`` and expanded in one copy, so the result is
    the only ``n_q x n_k`` tensor; refused before anything is allocated when it would exceed the
    memory limit (:func:`alibi_bias_bytes`, :func:`posenc._resources.check_footprint`).
    """
    _check_slopes(slopes)
    if dtype is not None and not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise TypeError(f"dtype must be a floating-point torch.dtype (the bias holds -m |i - j| and -inf), got {dtype}")
    n_k = n_q if n_k is None else n_k
    check_positive_int("n_q", n_q)
    check_positive_int("n_k", n_k)
    off = n_k - n_q if q_offset is None else _check_offset(q_offset)
    dtype = dtype or slopes.dtype
    heads = slopes.shape[0]
    check_footprint(alibi_bias_bytes(heads, n_q, n_k, dtype), f"n_q={n_q}, n_k={n_k}",
                    f"the ALiBi bias of {heads} heads")
    # one value per offset t = j - i (from -(n_q - 1) to n_k - 1): the key sits t - off positions from its query
    t = torch.arange(-(n_q - 1), n_k, device=slopes.device, dtype=torch.int64)
    rel = t - off
    vals = -slopes[:, None].to(torch.float64) * rel.abs().to(torch.float64)
    if causal:
        vals = vals.masked_fill(rel > 0, float("-inf"))
    return toeplitz_from_offsets(vals.to(dtype), n_q, n_k)


def alibi_bias_bytes(num_heads: int, n_q: int, n_k: int, dtype: torch.dtype = torch.float32) -> float:
    """Peak bytes of :func:`alibi_bias`: the ``(H, n_q, n_k)`` result and its per-offset values."""
    item = dtype.itemsize
    return float(num_heads) * n_q * n_k * item + 3 * 8.0 * num_heads * (n_q + n_k)


def alibi_score_mod(slopes: torch.Tensor, *, causal: bool = False):
    """A FlexAttention ``score_mod(score, b, h, q_idx, kv_idx)`` adding ``-m_h |q_idx - kv_idx|``.

    For ``causal=True`` the future is set to ``-inf`` here too (prefer a ``block_mask``
    with ``causal_mask`` for speed).
    """
    _check_slopes(slopes)

    def score_mod(score, b, h, q_idx, kv_idx):
        dist = (q_idx - kv_idx).abs()
        out = score - slopes[h].to(score.dtype) * dist.to(score.dtype)
        if causal:
            out = torch.where(kv_idx > q_idx, torch.full_like(out, float("-inf")), out)
        return out

    return score_mod


def alibi_decay_terms(slopes: torch.Tensor, *, causal: bool = False):
    """ALiBi as decay terms of :func:`posenc.attention.kernelized.decay.decay_kernelized_attention`.

    Returns ``(amplitudes (H, 1), rates (H, 1), future)``: ``c_t = exp(-m |t|)`` is one term with
    amplitude 1 and rate ``m``; ``future`` is the same pair (non-causal) or None.
    """
    _check_slopes(slopes)
    a = torch.ones(slopes.shape[0], 1, device=slopes.device, dtype=slopes.dtype)
    lam = slopes[:, None]
    return a, lam, (None if causal else (a, lam))


def alibi_kernelized_attention(
    phi_q: torch.Tensor,
    phi_k: torch.Tensor,
    v: torch.Tensor,
    slopes: torch.Tensor,
    *,
    causal: bool = False,
    key_padding_mask: torch.Tensor | None = None,
    check_inputs: bool = True,
) -> torch.Tensor:
    """Linear attention with ALiBi, ``z_i = sum_j e^{-m|i-j|} (phi_q_i . phi_k_j) v_j / sum_j (...)``.

    ``phi_q, phi_k (B, H, n, m)``, ``v (B, H, n, d)`` -> ``(B, H, n, d)`` in O(n) time
    (chunkwise decay recurrence, exact for this bias). See the module docstring for
    how this differs from softmax ALiBi. ``check_inputs``: refuse NaN/inf inputs (see
    :func:`~posenc.attention.kernelized.decay.decay_kernelized_attention`).
    """
    a, lam, fut = alibi_decay_terms(slopes.to(v.dtype), causal=causal)
    return decay_kernelized_attention(phi_q, phi_k, v, a, lam, fut, key_padding_mask=key_padding_mask,
                                      check_inputs=check_inputs)


def alibi_decoder(slopes: torch.Tensor, batch: int, num_features: int, head_dim: int) -> DecayDecoder:
    """A step-by-step causal decoder for kernelized ALiBi, ``O(H m d)`` per token."""
    a, lam, _ = alibi_decay_terms(slopes, causal=True)
    return DecayDecoder(a, lam, batch, num_features, head_dim)
