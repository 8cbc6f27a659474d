"""Context extension of a trained RoPE model: the scalings of the papers and of Hugging Face configs.

A RoPE model trained on sequences of ``L`` tokens sees, at ``L' > L``, rotation
angles it never saw for the low frequencies. Each method below changes the
inverse frequencies ``theta_i = base ** (-2 i / r)`` of the ``r / 2`` rotated
pairs (and, for some, scales the logits), as a function of the factor
``s = L' / L``:

* ``"linear"`` -- position interpolation (Chen, Wong, Chen, Tian, arXiv 2306.15595):
  ``theta_i / s`` (the same angles as positions multiplied by ``1 / s``).
* ``"ntk"`` -- NTK-aware base (bloc97, 2023): the base becomes ``base * s ** (r / (r - 2))``
  (the highest frequency is kept, the lowest divided by ``s``).
* ``"dynamic"`` -- dynamic NTK (emozilla, 2023; Hugging Face's ``"dynamic"``): the
  NTK base recomputed from the current length ``T``:
  ``base * (s T / L - (s - 1)) ** (r / (r - 2))`` once ``T > L``, plain RoPE before.
* ``"yarn"`` -- YaRN (Peng, Quesnelle, Fan, Shippole, arXiv 2309.00071), **as the
  authors' code (jquesnelle/yarn) and Hugging Face compute it**: pair ``i`` makes
  ``L theta_i / (2 pi)`` turns over the trained length; the pair index at which it
  makes ``b`` turns is ``dim(b) = r ln(L / (2 pi b)) / (2 ln base)``; with
  ``low = floor(dim(beta_fast = 32))`` and ``high = ceil(dim(beta_slow = 1))``
  (clipped to ``[0, r - 1]``), the interpolation weight ``ramp_i = clamp((i - low) /
  (high - low), 0, 1)`` is **linear in the pair index**, and
  ``theta_i' = ramp_i theta_i / s + (1 - ramp_i) theta_i``. q and k are each
  multiplied by ``0.1 ln s + 1`` (the logits by its square).
  The paper's text (Eq. 17-18) states the ramp ``g`` as linear in the number of
  turns ``rho_i`` between ``alpha = 1`` and ``beta = 32``; the two agree at the
  ramp's ends only. That reading is kept as ``yarn_ramp="turns"``.
* ``"llama3"`` -- Llama 3.1's scaling (Meta; Hugging Face's ``"llama3"``): wavelengths
  ``2 pi / theta_i`` longer than ``L / low_freq_factor`` are divided by ``s``, shorter
  than ``L / high_freq_factor`` kept, and blended linearly in ``L / wavelength`` between.
* ``"longrope"`` -- LongRoPE (Ding et al., arXiv 2402.13753; Phi-3): per-pair factors
  ``theta_i / f_i``, the ``short_factor`` list up to ``L`` tokens and ``long_factor``
  beyond, with the logit factor ``sqrt(1 + ln s / ln L)``.
* ``"proportional"`` -- Hugging Face's proportional RoPE (Gemma 4's global layers): the
  first ``rotated_pairs`` pairs turn at ``theta_i / s`` with ``theta_i = base ** (-2 i / r)``
  over the **whole** rotated width ``r``, the other pairs not at all (frequency 0), so the
  unrotated channels are the tail of each half, not a block at the end; ``s`` (``factor``)
  defaults to 1.

:class:`RopeScaling` packages a choice; :meth:`RopeScaling.frequencies` returns
what :class:`~posenc.attention.relative.rotary.RotaryEmbedding` and
:func:`~posenc.attention.relative.rotary.apply_rope_qk` take: frequencies (float64), a
position scale (1) and the attention factor. ``RotaryEmbedding.from_hf_config``
builds one from a model's ``config.json`` (:mod:`posenc.attention.relative.rope_hf`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from posenc._checks import check_choice, check_positive_float, check_positive_int
from posenc.attention.relative.frequencies import rope_frequencies

KINDS = ("none", "linear", "ntk", "dynamic", "yarn", "llama3", "longrope", "proportional")
YARN_RAMPS = ("dims", "turns")


def extension_factor(trained_length: int, target_length: int) -> float:
    """``s = target_length / trained_length``, refused below 1 (these methods only extend)."""
    check_positive_int("trained_length", trained_length)
    check_positive_int("target_length", target_length)
    s = target_length / trained_length
    if s < 1.0:
        raise ValueError(
            f"target_length must be >= trained_length (a scaling factor >= 1), got {target_length} < {trained_length}"
        )
    return s


def linear_position_scale(trained_length: int, target_length: int) -> float:
    """Position interpolation: multiply positions by ``trained / target`` (``1 / s``)."""
    return 1.0 / extension_factor(trained_length, target_length)


def ntk_base(base: float, rotary_dim: int, trained_length: int, target_length: int) -> float:
    """NTK-aware base: ``base * s ** (r / (r - 2))`` for ``r = rotary_dim > 2``."""
    check_positive_float("base", base)
    check_positive_int("rotary_dim", rotary_dim, minimum=4)
    s = extension_factor(trained_length, target_length)
    return base * s ** (rotary_dim / (rotary_dim - 2))


def dynamic_ntk_base(base: float, rotary_dim: int, trained_length: int, factor: float, length: int) -> float:
    """Dynamic NTK: ``base * (s T / L - (s - 1)) ** (r / (r - 2))`` for ``T = length > L``, else ``base``."""
    check_positive_float("base", base)
    check_positive_int("rotary_dim", rotary_dim, minimum=4)
    check_positive_int("trained_length", trained_length)
    check_positive_int("length", length)
    s = _check_factor(factor)
    T = max(length, trained_length)
    return base * (s * T / trained_length - (s - 1.0)) ** (rotary_dim / (rotary_dim - 2))


def yarn_ramp(turns: torch.Tensor, alpha: float, beta: float) -> torch.Tensor:
    """The paper's ``g(rho)``: 0 below ``alpha`` turns, 1 above ``beta``, linear in turns between."""
    return ((turns - alpha) / (beta - alpha)).clamp(0.0, 1.0)


def yarn_correction_dim(turns: float, rotary_dim: int, base: float, trained_length: int) -> float:
    """The (fractional) pair index whose pair makes ``turns`` full turns over ``trained_length`` tokens.

    ``r ln(L / (2 pi turns)) / (2 ln base)`` (``find_correction_dim`` of the YaRN code).
    """
    return rotary_dim * math.log(trained_length / (turns * 2.0 * math.pi)) / (2.0 * math.log(base))


def yarn_correction_range(beta_fast: float, beta_slow: float, rotary_dim: int, base: float, trained_length: int,
                          truncate: bool = True) -> tuple[float, float]:
    """``(low, high)`` pair indices of YaRN's ramp: ``dim(beta_fast)`` floored, ``dim(beta_slow)`` ceiled
    (unless ``truncate=False``), clipped to ``[0, rotary_dim - 1]`` (as the authors' code and HF do)."""
    low = yarn_correction_dim(beta_fast, rotary_dim, base, trained_length)
    high = yarn_correction_dim(beta_slow, rotary_dim, base, trained_length)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    return max(low, 0), min(high, rotary_dim - 1)


def yarn_frequencies(
    rotary_dim: int, base: float, trained_length: int, target_length: int | None = None, *, alpha: float = 1.0,
    beta: float = 32.0, ramp: str = "dims", truncate: bool = True, factor: float | None = None,
) -> tuple[torch.Tensor, float]:
    """YaRN frequencies ``(rotary_dim/2,)`` (float64) and the attention factor ``0.1 ln s + 1``.

    Args:
        rotary_dim, base: of the RoPE being extended.
        trained_length: ``L``, the length the model was trained on.
        target_length: ``L'``; ``s = L' / L`` unless ``factor`` is given.
        alpha, beta: the ramp's bounds in turns: ``beta_slow = 1`` and ``beta_fast = 32``.
        ramp: ``"dims"`` (default; the authors' code and HF: linear in the pair index
            between the floored/ceiled correction dims) or ``"turns"`` (the paper's text:
            linear in the number of turns).
        truncate: floor/ceil the correction dims (``"dims"`` only; HF's ``truncate``).
        factor: ``s`` itself (HF configs give it; then ``target_length`` may be None).
    """
    _check_yarn(alpha, beta, ramp)
    check_choice("ramp", ramp, YARN_RAMPS)
    s = _factor(trained_length, target_length, factor)
    theta = rope_frequencies(rotary_dim, base)
    base = float(base)
    if ramp == "turns":
        turns = trained_length * theta / (2.0 * math.pi)
        keep = yarn_ramp(turns, alpha, beta)  # 1 = extrapolate (keep theta)
    else:
        low, high = yarn_correction_range(beta, alpha, rotary_dim, base, trained_length, bool(truncate))
        if low == high:
            high = high + 0.001  # as the authors' code: no division by zero
        i = torch.arange(rotary_dim // 2, dtype=torch.float64)
        keep = 1.0 - ((i - low) / (high - low)).clamp(0.0, 1.0)
    return (1.0 - keep) * theta / s + keep * theta, yarn_mscale(s)


def yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    """YaRN's ``0.1 * mscale * ln s + 1`` (1 for ``s <= 1``)."""
    return 1.0 if factor <= 1.0 else 0.1 * mscale * math.log(factor) + 1.0


def llama3_frequencies(rotary_dim: int, base: float, trained_length: int, factor: float, *,
                       low_freq_factor: float = 1.0, high_freq_factor: float = 4.0) -> torch.Tensor:
    """Llama 3.1's frequencies ``(rotary_dim/2,)`` (float64); see the module docstring."""
    s = _check_factor(factor)
    theta = rope_frequencies(rotary_dim, base)
    wavelen = 2.0 * math.pi / theta
    low_wl, high_wl = trained_length / low_freq_factor, trained_length / high_freq_factor
    smooth = (trained_length / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    blended = (1.0 - smooth) * theta / s + smooth * theta
    out = torch.where(wavelen > low_wl, theta / s, theta)
    return torch.where((wavelen >= high_wl) & (wavelen <= low_wl), blended, out)


def _check_factor(factor) -> float:
    s = check_positive_float("factor", factor)
    if s < 1.0:
        raise ValueError(f"factor must be >= 1 (these scalings extend the context), got {s}")
    return s


def _factor(trained_length: int, target_length: int | None, factor: float | None) -> float:
    check_positive_int("trained_length", trained_length)
    if factor is not None:
        return _check_factor(factor)
    if target_length is None:
        raise ValueError("give target_length or factor (the scaling factor s = target_length / trained_length)")
    return extension_factor(trained_length, target_length)


def _check_yarn(alpha, beta, ramp) -> None:
    check_choice("yarn_ramp", ramp, YARN_RAMPS)
    a = check_positive_float("alpha", alpha, allow_zero=(ramp == "turns"))
    b = check_positive_float("beta", beta)
    if not b > a:
        raise ValueError(f"beta must be > alpha (YaRN's ramp runs from alpha to beta turns), got alpha={a}, beta={b}")


def _check_factors(name: str, value) -> tuple[float, ...] | None:
    if value is None:
        return None
    try:
        out = tuple(float(v) for v in value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a sequence of numbers, got {value!r}") from None
    if not out or not all(math.isfinite(v) and v > 0 for v in out):
        raise ValueError(f"{name} must hold finite numbers > 0, got {value!r}")
    return out


@dataclass(frozen=True)
class RopeScaling:
    """A context-extension choice for a RoPE model trained on ``trained_length`` tokens.

    Args:
        kind: one of :data:`KINDS` (see the module docstring).
        trained_length: ``L``, the length the model was trained on (HF:
            ``original_max_position_embeddings``; ``max_position_embeddings`` for ``"dynamic"``).
        target_length: the length it should now handle; ``s = target / trained`` unless ``factor``
            is given (then it is informative only).
        alpha, beta: YaRN's ramp bounds in turns, ``beta_slow = 1`` and ``beta_fast = 32``.
        yarn_temperature: apply YaRN's attention factor (default True).
        factor: the scaling factor ``s`` (HF configs give it; Llama 3.1: 8 with ``L = 8192``).
        yarn_ramp: ``"dims"`` (the authors' code and HF, default) or ``"turns"`` (the paper's text).
        truncate: floor/ceil YaRN's correction dims (HF's ``truncate``, default True).
        attention_factor: override the attention factor (YaRN, LongRoPE).
        mscale, mscale_all_dim: DeepSeek's YaRN variant: attention factor
            ``(0.1 mscale ln s + 1) / (0.1 mscale_all_dim ln s + 1)``.
        low_freq_factor, high_freq_factor: ``"llama3"``'s band edges (1 and 4).
        short_factor, long_factor: ``"longrope"``'s per-pair factors (``rotary_dim / 2`` each).
        rotated_pairs: ``"proportional"``: pairs that turn (default all); the rest have frequency 0.

    Invalid values are refused at construction.
    """

    kind: str
    trained_length: int
    target_length: int | None = None
    alpha: float = 1.0
    beta: float = 32.0
    yarn_temperature: bool = True
    factor: float | None = None
    yarn_ramp: str = "dims"
    truncate: bool = True
    attention_factor: float | None = None
    mscale: float | None = None
    mscale_all_dim: float | None = None
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    short_factor: tuple[float, ...] | None = None
    long_factor: tuple[float, ...] | None = None
    rotated_pairs: int | None = None

    def __post_init__(self) -> None:
        check_choice("kind", self.kind, KINDS)
        check_positive_int("trained_length", self.trained_length)
        if self.target_length is not None:
            check_positive_int("target_length", self.target_length)
        if self.factor is not None:
            object.__setattr__(self, "factor", _check_factor(self.factor))
        elif self.target_length is not None:
            extension_factor(self.trained_length, self.target_length)
        elif self.kind not in ("none", "proportional"):
            raise ValueError(f"RopeScaling({self.kind!r}) needs target_length or factor")
        if self.rotated_pairs is not None:
            check_positive_int("rotated_pairs", self.rotated_pairs, minimum=0)
            if self.kind != "proportional":
                raise ValueError(f"rotated_pairs is an option of kind='proportional', got kind={self.kind!r}")
        _check_yarn(self.alpha, self.beta, self.yarn_ramp)
        for name in ("attention_factor", "mscale", "mscale_all_dim"):
            v = getattr(self, name)
            if v is not None:
                object.__setattr__(self, name, check_positive_float(name, v))
        lo = check_positive_float("low_freq_factor", self.low_freq_factor)
        hi = check_positive_float("high_freq_factor", self.high_freq_factor)
        if not hi > lo:
            raise ValueError(f"high_freq_factor must be > low_freq_factor, got {hi} <= {lo}")
        object.__setattr__(self, "short_factor", _check_factors("short_factor", self.short_factor))
        object.__setattr__(self, "long_factor", _check_factors("long_factor", self.long_factor))
        if self.kind == "longrope" and (self.short_factor is None or self.long_factor is None):
            raise ValueError("RopeScaling('longrope') needs short_factor and long_factor")

    @property
    def scale(self) -> float:
        """The scaling factor ``s``."""
        if self.factor is not None:
            return self.factor
        return 1.0 if self.target_length is None else self.target_length / self.trained_length

    @property
    def length_dependent(self) -> bool:
        """Whether the frequencies depend on the current sequence length (``"dynamic"``, ``"longrope"``)."""
        return self.kind in ("dynamic", "longrope")

    def yarn_attention_factor(self) -> float:
        if self.attention_factor is not None:
            return self.attention_factor
        s = self.scale
        if self.mscale and self.mscale_all_dim:
            return yarn_mscale(s, self.mscale) / yarn_mscale(s, self.mscale_all_dim)
        return yarn_mscale(s)

    def frequencies(self, rotary_dim: int, base: float, length: int | None = None) -> tuple[torch.Tensor, float, float]:
        """``(freqs (rotary_dim/2,) float64, position_scale, attention_factor)``.

        ``length``: the current sequence length (positions ``0..length-1``), read by the
        length-dependent kinds; None = at most ``trained_length``.
        """
        L, s = self.trained_length, self.scale
        if self.kind == "linear":
            return rope_frequencies(rotary_dim, base) / s, 1.0, 1.0
        if self.kind == "ntk":
            return rope_frequencies(rotary_dim, base * s ** (rotary_dim / (rotary_dim - 2))), 1.0, 1.0
        if self.kind == "dynamic":
            T = L if length is None else length
            return rope_frequencies(rotary_dim, dynamic_ntk_base(base, rotary_dim, L, s, T)), 1.0, 1.0
        if self.kind == "yarn":
            freqs, _ = yarn_frequencies(rotary_dim, base, L, alpha=self.alpha, beta=self.beta, ramp=self.yarn_ramp,
                                        truncate=self.truncate, factor=s)
            return freqs, 1.0, self.yarn_attention_factor() if self.yarn_temperature else 1.0
        if self.kind == "llama3":
            return llama3_frequencies(rotary_dim, base, L, s, low_freq_factor=self.low_freq_factor,
                                      high_freq_factor=self.high_freq_factor), 1.0, 1.0
        if self.kind == "longrope":
            ext = self.long_factor if length is not None and length > L else self.short_factor
            if len(ext) != rotary_dim // 2:
                raise ValueError(f"longrope factors must have rotary_dim / 2 = {rotary_dim // 2} entries, got {len(ext)}")
            a = self.attention_factor
            if a is None:
                a = math.sqrt(1.0 + math.log(s) / math.log(L)) if s > 1.0 and L > 1 else 1.0
            return rope_frequencies(rotary_dim, base) / torch.tensor(ext, dtype=torch.float64), 1.0, a
        if self.kind == "proportional":
            freqs = rope_frequencies(rotary_dim, base) / s
            k = rotary_dim // 2 if self.rotated_pairs is None else self.rotated_pairs
            if k > rotary_dim // 2:
                raise ValueError(f"rotated_pairs must be <= rotary_dim / 2 = {rotary_dim // 2}, got {k}")
            freqs[k:] = 0.0
            return freqs, 1.0, 1.0
        return rope_frequencies(rotary_dim, base), 1.0, 1.0

    def __str__(self) -> str:
        if self.kind == "proportional":
            pairs = "all" if self.rotated_pairs is None else self.rotated_pairs
            return f"proportional(x{self.scale:g}, {pairs} pairs turning)"
        if self.target_length is not None and self.factor is None:
            return f"{self.kind}({self.trained_length}->{self.target_length})"
        return f"{self.kind}(x{self.scale:g} of {self.trained_length})"
