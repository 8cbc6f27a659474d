"""Attention modules: kernelized attention with RPE (Luo et al., NeurIPS 2021).

Three modules compute the same attention; they differ in what they take and return:

* :class:`KernelizedAttention` -- the core, on projected heads:
  ``q, k, v (batch, heads, n, d) -> (batch, heads, n_q, d)``.
* :class:`KernelizedAttentionLayer` -- posenc's own layer with separate q/k/v/output
  projections, ``layer(x, context=None, key_padding_mask=None, positions=None) ->
  (batch, n_q, embed_dim)`` (a tensor); batch first; ``positions`` is accepted and ignored
  so that it plugs into :class:`posenc.models.TransformerEncoder` (``attention=`` factory).
  It is **not** a drop-in for ``nn.MultiheadAttention`` (different call signature,
  return value and parameter names). Formerly ``KernelizedMultiheadAttention``: that name
  still works, with a ``DeprecationWarning``.
* :class:`posenc.attention.KernelizedMHA` (in :mod:`posenc.attention.kernelized.kernelized_mha`) -- the
  ``nn.MultiheadAttention`` drop-in: its constructor arguments, ``forward(query, key,
  value, ...) -> (output, None)``, PyTorch's masks and ``batch_first``, the packed
  ``in_proj_weight``, and ``from_torch`` to load a trained ``nn.MultiheadAttention``.

Options: ``rpe`` = ``"table"`` (per-head learned bias ``b_t`` for ``|t| <= max_distance``;
farther offsets share the edge value so any length works at inference), ``"decay"``
(sum of exponential decays, computed by recurrences, :mod:`posenc.attention.kernelized.decay`),
``"alibi"`` (Press et al.'s fixed slopes, ``exp(-m_h |t|)``, the one-term decay; see
:mod:`posenc.attention.relative.alibi` for how it differs from softmax ALiBi) or ``"none"``; ``normalize_qk`` (unit-length q and k, no ``1/sqrt d``, as in the
paper) or Performer scaling ``d^{-1/4}``; ``mode="softmax"`` computes the exact
softmax attention with the same bias (the reference of the experiments).
"""

from __future__ import annotations

import math
import sys
import warnings

import torch
import torch.nn.functional as F
from torch import nn

from posenc._checks import (
    _compiling,
    check_bool,
    check_choice,
    check_device,
    check_finite,
    check_float_dtype,
    check_positive_float,
    check_positive_int,
)
from posenc.attention.kernelized._common import check_key_padding_mask, check_qkv
from posenc.attention.kernelized.decay import decay_coeffs, decay_kernelized_attention
from posenc.attention.kernelized.features import PositiveRandomFeatures, TrigRandomFeatures
from posenc.attention.kernelized.kernelized import (
    bounded_bias,
    feature_scale,
    kernelized_attention,
    relative_offsets,
    rpe_coeffs,
)
from posenc.attention.kernelized.reference import softmax_rpe_attention
from posenc.attention.slopes import alibi_slopes

RPE_KINDS = ("table", "decay", "alibi", "none")
MODES = ("kernelized", "softmax")
FEATURES = ("positive", "trig")

#: Bias range (nats) above which ``compute_dtype="auto"`` accumulates in float64:
#: the float32 bound ``eps * log2(L) * exp(B)`` of docs/krpe.md stays below 1e-2 up to here.
AUTO_FLOAT64_RANGE = 10.0


class KernelizedAttention(nn.Module):
    """Kernelized (random-feature) attention with relative positional encoding.

    ``q (B, H, n_q, d), k (B, H, n_k, d), v (B, H, n_k, dv) -> (B, H, n_q, dv)``.

    Args:
        num_heads: H (one bias per head).
        head_dim: d of q and k.
        num_features: m random features (shared by all heads).
        rpe: ``"table"``, ``"decay"``, ``"alibi"`` or ``"none"``.
        max_distance: largest distinct offset of the ``"table"`` bias.
        decay_terms: R exponential terms of the ``"decay"`` bias.
        normalize_qk: unit-length q and k with logit scale 1 (paper); else ``d^{-1/2}``.
        causal: attend to keys ``j <= i`` only.
        mode: ``"kernelized"`` or ``"softmax"`` (exact, same bias; for reference).
        feature_map: ``"positive"`` (FAVOR+) or ``"trig"``.
        orthogonal: orthogonal random features.
        bias_range: soft bound on the bias range in nats (``None`` = unbounded); see
            the float32 guarantee in :mod:`posenc.attention.kernelized.kernelized`.
        compute_dtype: accumulate the Toeplitz products in this dtype (e.g. float64);
            ``"auto"`` (default) switches float32 inputs to float64 accumulation when the
            visible bias range exceeds :data:`AUTO_FLOAT64_RANGE` nats (never when
            ``bias_range <= AUTO_FLOAT64_RANGE``; always in code traced by ``torch.compile`` or
            ``torch.export``, where the range is not known: see :meth:`_needs_float64`).
        method: ``"auto"``, ``"fft"`` or ``"dense"`` for the table RPE.
        seed: seed of the random features.
        device, dtype: of parameters and buffers.
        check_inputs: check in ``forward`` that ``q``, ``k``, ``v`` are finite (one pass
            over each; NaN/inf raise a ValueError in every mode instead of giving NaN or,
            in ``mode="softmax"`` without RPE, a silent all-zero row). Set False in hot
            loops whose inputs are known to be finite.
    """

    def __init__(
        self,
        num_heads: int,
        head_dim: int,
        num_features: int = 32,
        *,
        rpe: str = "table",
        max_distance: int = 128,
        decay_terms: int = 2,
        normalize_qk: bool = True,
        causal: bool = False,
        mode: str = "kernelized",
        feature_map: str = "positive",
        orthogonal: bool = False,
        bias_range: float | None = None,
        compute_dtype: torch.dtype | str | None = "auto",
        method: str = "auto",
        seed: int = 0,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        check_inputs: bool = True,
    ) -> None:
        super().__init__()
        check_device("device", device)
        check_float_dtype("dtype", dtype)
        self.check_inputs = check_bool("check_inputs", check_inputs)
        if not (compute_dtype is None or compute_dtype == "auto" or isinstance(compute_dtype, torch.dtype)):
            raise TypeError(f"compute_dtype must be 'auto', None or a floating-point torch.dtype, got {compute_dtype!r}")
        if isinstance(compute_dtype, torch.dtype):
            check_float_dtype("compute_dtype", compute_dtype)
        self.num_heads = check_positive_int("num_heads", num_heads)
        self.head_dim = check_positive_int("head_dim", head_dim)
        self.num_features = check_positive_int("num_features", num_features)
        self.rpe = check_choice("rpe", rpe, RPE_KINDS)
        self.max_distance = check_positive_int("max_distance", max_distance, minimum=0)
        self.decay_terms = check_positive_int("decay_terms", decay_terms)
        self.normalize_qk = bool(normalize_qk)
        self.causal = bool(causal)
        self.mode = check_choice("mode", mode, MODES)
        self.bias_range = None if bias_range is None else check_positive_float("bias_range", bias_range)
        self.compute_dtype = compute_dtype
        self.method = check_choice("method", method, ("auto", "fft", "dense"))
        factory = {"device": device, "dtype": dtype}
        check_choice("feature_map", feature_map, FEATURES)
        cls = PositiveRandomFeatures if feature_map == "positive" else TrigRandomFeatures
        self.features = cls(head_dim, num_features, orthogonal=orthogonal, seed=seed, **factory)
        if self.rpe == "table":
            self.bias = nn.Parameter(torch.empty(num_heads, 2 * max_distance + 1, **factory))
        elif self.rpe == "decay":
            # c_t = sum_r a_r exp(-lambda_r |t|): log-amplitudes and softplus^{-1}(rates).
            self.decay_logit = nn.Parameter(torch.empty(num_heads, decay_terms, **factory))
            self.decay_rate = nn.Parameter(torch.empty(num_heads, decay_terms, **factory))
            if not causal:
                self.future_logit = nn.Parameter(torch.empty(num_heads, decay_terms, **factory))
                self.future_rate = nn.Parameter(torch.empty(num_heads, decay_terms, **factory))
        elif self.rpe == "alibi":
            self.register_buffer("slopes", alibi_slopes(num_heads, device=device, dtype=dtype or torch.float32),
                                 persistent=False)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        if self.rpe == "table":
            self.bias.zero_()
        elif self.rpe == "decay":
            # spread initial rates over scales 1..max_distance (ALiBi-like geometric slopes)
            R = self.decay_terms
            for name_l, name_r in (("decay_logit", "decay_rate"), ("future_logit", "future_rate")):
                if not hasattr(self, name_l):
                    continue
                getattr(self, name_l).zero_()
                lam = torch.logspace(0, -math.log10(max(self.max_distance, 2)), R, dtype=torch.float64)
                getattr(self, name_r).copy_(torch.log(torch.expm1(lam)).expand(self.num_heads, R))

    def redraw_features(self, generator: torch.Generator | None = None) -> None:
        """Redraw the random feature projection (explicit; never automatic)."""
        self.features.redraw(generator)

    def bias_values(self, n_q: int, n_k: int) -> torch.Tensor:
        """Per-head biases ``b_t`` ``(H, n_q + n_k - 1)`` of offsets ``-(n_q-1)..n_k-1``."""
        if self.rpe == "table":
            check_finite("bias", self.bias)
            idx = relative_offsets(n_q, n_k, self.max_distance, device=self.bias.device)
            return bounded_bias(self.bias, self.bias_range)[:, idx]
        if self.rpe == "decay":
            a, lam, fut = self._decay_params()
            return torch.log(decay_coeffs(a, lam, n_q, n_k, fut).clamp_min(1e-30))
        if self.rpe == "alibi":
            t = torch.arange(-(n_q - 1), n_k, device=self.slopes.device, dtype=self.slopes.dtype)
            return -self.slopes[:, None] * t.abs()
        raise ValueError("rpe='none' has no bias")

    def _decay_params(self):
        a = torch.softmax(self.decay_logit, dim=-1)
        lam = F.softplus(self.decay_rate)
        fut = None
        if hasattr(self, "future_logit"):
            fut = (torch.softmax(self.future_logit, dim=-1), F.softplus(self.future_rate))
        return a, lam, fut

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        check_qkv(q, k, v)
        if self.check_inputs:
            for name, t in (("q", q), ("k", k), ("v", v)):
                check_finite(name, t)
        if q.shape[1] != self.num_heads:
            raise ValueError(f"q must have {self.num_heads} heads (dim 1), got {q.shape[1]}")
        if q.shape[-1] != self.head_dim:
            raise ValueError(f"q and k must have head_dim={self.head_dim} (last dim), got {q.shape[-1]}")
        n_q, n_k = q.shape[-2], k.shape[-2]
        check_key_padding_mask(key_padding_mask, q.shape[0], n_k)
        if self.causal and n_q != n_k:
            raise ValueError(f"causal=True needs n_q == n_k (equal query and key lengths), got {n_q} and {n_k}")
        if self.normalize_qk:
            q, k, scale = F.normalize(q, dim=-1), F.normalize(k, dim=-1), 1.0
        else:
            scale = 1.0 / math.sqrt(self.head_dim)
        if self.mode == "softmax":
            bias = None if self.rpe == "none" else self.bias_values(n_q, n_k)
            return softmax_rpe_attention(
                q, k, v, bias, causal=self.causal, key_padding_mask=key_padding_mask, scale=scale
            )
        if not self.normalize_qk:
            q, k = q * feature_scale(self.head_dim), k * feature_scale(self.head_dim)
        phi_q, phi_k = self._features(q, k, key_padding_mask)
        if self.rpe == "decay":
            a, lam, fut = self._decay_params()
            if self.causal:
                fut = None
            return decay_kernelized_attention(phi_q, phi_k, v, a, lam, fut, key_padding_mask=key_padding_mask,
                                              check_inputs=self.check_inputs)
        if self.rpe == "alibi":
            if n_q != n_k:
                raise ValueError(f"rpe='alibi' needs n_q == n_k (self-attention), got {n_q} and {n_k}")
            # exp(-m |t|): one decay term of amplitude 1 and rate m per direction (Press et al.'s
            # slopes, checked when the buffer was built)
            lam = self.slopes.to(v.dtype)[:, None]
            a = torch.ones_like(lam)
            return decay_kernelized_attention(phi_q, phi_k, v, a, lam, None if self.causal else (a, lam),
                                              key_padding_mask=key_padding_mask, check_inputs=self.check_inputs)
        coeffs = None
        compute_dtype = None if self.compute_dtype == "auto" else self.compute_dtype
        if self.rpe == "table":
            b = self.bias_values(n_q, n_k)
            if self.compute_dtype == "auto" and v.dtype != torch.float64 and self._needs_float64(b, n_q):
                compute_dtype = torch.float64
            coeffs = rpe_coeffs(b if compute_dtype is None else b.to(compute_dtype), n_q, causal=self.causal)
        return kernelized_attention(
            phi_q, phi_k, v, coeffs, causal=self.causal, key_padding_mask=key_padding_mask,
            method=self.method, compute_dtype=compute_dtype, check_inputs=self.check_inputs,
        )

    def _needs_float64(self, b: torch.Tensor, n_q: int) -> bool:
        """``compute_dtype="auto"``: accumulate in float64 when the visible bias range may exceed
        :data:`AUTO_FLOAT64_RANGE` nats.

        ``bias_range <= AUTO_FLOAT64_RANGE`` bounds it for every value of the bias (no check).
        Otherwise eager mode reads the range from the bias (one synchronising reduction); under
        ``torch.compile`` / ``torch.export`` the bias is not known while tracing, so the traced
        graph takes the safe side, float64 (pass ``compute_dtype=None`` for float32, or a
        ``bias_range``).
        """
        if self.bias_range is not None and self.bias_range <= AUTO_FLOAT64_RANGE:
            return False
        if _compiling():
            return True
        visible = b[:, :n_q] if self.causal else b
        return float((visible.max() - visible.min()).detach()) > AUTO_FLOAT64_RANGE

    def _features(self, q, k, key_padding_mask):
        if isinstance(self.features, TrigRandomFeatures):
            return self.features(q), self.features(k)
        lq, lk = self.features.log_features(q), self.features.log_features(k)
        # Stabilise: a per-query shift cancels in z_i; one shift per (batch, head) for keys too.
        lq = lq - lq.amax(-1, keepdim=True).detach()
        if key_padding_mask is not None:
            lk = lk.masked_fill(key_padding_mask[:, None, :, None], float("-inf"))
        lk = lk - lk.amax((-2, -1), keepdim=True).detach()
        return torch.exp(lq), torch.exp(lk)

    def extra_repr(self) -> str:
        return (
            f"num_heads={self.num_heads}, head_dim={self.head_dim}, num_features={self.num_features}, "
            f"rpe={self.rpe!r}, max_distance={self.max_distance}, normalize_qk={self.normalize_qk}, "
            f"causal={self.causal}, mode={self.mode!r}, bias_range={self.bias_range}"
        )


class KernelizedAttentionLayer(nn.Module):
    """posenc's kernelized attention layer with projections: ``(B, n_q, E), (B, n_k, E) -> (B, n_q, E)``.

    Not the ``nn.MultiheadAttention`` drop-in (that is :class:`posenc.attention.KernelizedMHA`):
    ``forward(x, context=None, key_padding_mask=None, positions=None)`` takes batch-first
    tensors, a bool ``key_padding_mask`` (True = padded) and returns one tensor, not
    ``(output, weights)``; the projections are four ``nn.Linear`` (``q_proj``, ``k_proj``,
    ``v_proj``, ``out_proj``), not a packed ``in_proj_weight``. It is the form that
    :class:`posenc.models.TransformerEncoder` calls (``attention=`` factory; ``positions`` is
    ignored: the relative offsets are those of the token order). Formerly
    ``KernelizedMultiheadAttention`` (still importable, with a ``DeprecationWarning``).

    Args:
        embed_dim: E (divisible by ``num_heads``).
        num_heads: H.
        **kwargs: passed to :class:`KernelizedAttention` (``num_features``, ``rpe``,
            ``max_distance``, ``normalize_qk``, ``causal``, ``mode``, ...).
        device, dtype: of parameters.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        **kwargs,
    ) -> None:
        super().__init__()
        check_positive_int("embed_dim", embed_dim)
        check_positive_int("num_heads", num_heads)
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim must be divisible by num_heads, got {embed_dim} and {num_heads}")
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = embed_dim // num_heads
        factory = {"device": device, "dtype": dtype}
        self.q_proj = nn.Linear(embed_dim, embed_dim, **factory)
        self.k_proj = nn.Linear(embed_dim, embed_dim, **factory)
        self.v_proj = nn.Linear(embed_dim, embed_dim, **factory)
        self.out_proj = nn.Linear(embed_dim, embed_dim, **factory)
        self.attention = KernelizedAttention(num_heads, self.head_dim, **factory, **kwargs)

    def reset_parameters(self) -> None:
        for lin in (self.q_proj, self.k_proj, self.v_proj, self.out_proj):
            lin.reset_parameters()
        self.attention.reset_parameters()

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        B, n, _ = x.shape
        return x.reshape(B, n, self.num_heads, self.head_dim).transpose(1, 2)

    def forward(
        self,
        x: torch.Tensor,
        context: torch.Tensor | None = None,
        key_padding_mask: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``x (B, n_q, E)``; ``context (B, n_k, E)`` (default ``x``); ``key_padding_mask (B, n_k)``.

        ``positions`` is accepted so the module plugs into
        :class:`posenc.models.TransformerEncoder` (``attention=`` factory) and is
        ignored: the relative offsets are those of the token order.
        """
        context = x if context is None else context
        for name, t in (("x", x), ("context", context)):
            if t.dim() != 3 or t.shape[-1] != self.embed_dim:
                raise ValueError(f"{name} must have shape (batch, n, {self.embed_dim}), got {tuple(t.shape)}")
        z = self.attention(
            self._split(self.q_proj(x)), self._split(self.k_proj(context)), self._split(self.v_proj(context)),
            key_padding_mask=key_padding_mask,
        )
        return self.out_proj(z.transpose(1, 2).reshape(x.shape[0], x.shape[1], self.embed_dim))

    def extra_repr(self) -> str:
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}"


_RENAMED = {"KernelizedMultiheadAttention": "KernelizedAttentionLayer"}


def renamed(module: str, name: str):
    """The object behind a deprecated name of :data:`_RENAMED`, with a ``DeprecationWarning``.

    Called from a module's ``__getattr__``. ``from package import name`` looks the name up
    twice (importlib's ``hasattr`` on the package, then the import itself): the first
    lookup, from importlib's own frames, does not warn, so one import gives one warning.
    """
    new = _RENAMED[name]
    caller = sys._getframe(2)  # who asked the module's __getattr__
    if caller.f_code.co_filename.startswith("<frozen importlib"):
        return globals()[new]
    warnings.warn(
        f"{module}.{name} is deprecated and will be removed: it was renamed {new} (posenc's own layer, "
        f"x -> tensor). The nn.MultiheadAttention drop-in is posenc.attention.KernelizedMHA.",
        DeprecationWarning,
        stacklevel=3,
    )
    return globals()[new]


def __getattr__(name: str):
    if name in _RENAMED:
        return renamed(__name__, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
