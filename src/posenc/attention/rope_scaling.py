"""Context extension of a trained RoPE model without retraining.

A RoPE model trained on sequences of ``L`` tokens sees, at ``L' > L``, rotation
angles it never saw for the low frequencies. Three published fixes, each a
function of the scale ``s = L' / L`` (``>= 1``):

* **Linear position interpolation** (Chen, Wong, Chen, Tian, "Extending Context
  Window of Large Language Models via Positional Interpolation", arXiv 2306.15595):
  positions are multiplied by ``1 / s``, so every angle stays in the trained range.
* **NTK-aware base scaling** (bloc97, 2023; analysed in Peng et al.): the base
  becomes ``base * s ** (r / (r - 2))`` (``r`` rotated channels), which leaves the
  highest frequency unchanged and divides the lowest by ``s``.
* **YaRN** (Peng, Quesnelle, Fan, Shippole, "YaRN: Efficient Context Window
  Extension of Large Language Models", arXiv 2309.00071, Eq. 18-20): per
  frequency, with ``rho_i = L / lambda_i`` the number of full turns of pair ``i``
  over the trained length (``lambda_i = 2 pi / theta_i``), the ramp
  ``g(rho) = 0`` for ``rho < alpha``, ``1`` for ``rho > beta``, linear between,
  gives ``theta_i' = (1 - g) theta_i / s + g theta_i`` (interpolate the slow
  pairs, keep the fast ones), and the logits are multiplied by
  ``(0.1 ln s + 1) ** 2`` (q and k each by ``0.1 ln s + 1``); ``alpha = 1``,
  ``beta = 32`` for LLaMA-family models.

:class:`RopeScaling` packages a choice; :meth:`RopeScaling.frequencies` returns
what :class:`~posenc.attention.rotary.RotaryEmbedding` and
:func:`~posenc.attention.rotary.apply_rope_qk` take: frequencies, a position
scale and an attention factor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from posenc._checks import check_choice, check_positive_float, check_positive_int
from posenc.attention.rotary import rope_frequencies

KINDS = ("none", "linear", "ntk", "yarn")


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


def yarn_ramp(turns: torch.Tensor, alpha: float, beta: float) -> torch.Tensor:
    """YaRN's ``g(rho)``: 0 below ``alpha`` turns, 1 above ``beta``, linear between."""
    return ((turns - alpha) / (beta - alpha)).clamp(0.0, 1.0)


def yarn_frequencies(
    rotary_dim: int, base: float, trained_length: int, target_length: int, *, alpha: float = 1.0, beta: float = 32.0
) -> tuple[torch.Tensor, float]:
    """YaRN frequencies ``(rotary_dim/2,)`` (float64) and the attention factor ``0.1 ln s + 1``."""
    check_positive_float("alpha", alpha, allow_zero=True)
    check_positive_float("beta", beta)
    if not beta > alpha:
        raise ValueError(f"beta must be > alpha, got alpha={alpha}, beta={beta}")
    s = extension_factor(trained_length, target_length)
    theta = rope_frequencies(rotary_dim, base)
    turns = trained_length * theta / (2.0 * math.pi)
    g = yarn_ramp(turns, alpha, beta)
    return (1.0 - g) * theta / s + g * theta, 0.1 * math.log(s) + 1.0


@dataclass(frozen=True)
class RopeScaling:
    """A context-extension choice for a RoPE model trained on ``trained_length`` tokens.

    Args:
        kind: ``"none"``, ``"linear"`` (position interpolation), ``"ntk"`` or ``"yarn"``.
        trained_length: the length the model was trained on.
        target_length: the length it should now handle (``>= trained_length``).
        alpha, beta: YaRN's ramp bounds in turns (1 and 32).
        yarn_temperature: apply YaRN's attention factor (default True).
    """

    kind: str
    trained_length: int
    target_length: int
    alpha: float = 1.0
    beta: float = 32.0
    yarn_temperature: bool = True

    def __post_init__(self) -> None:
        check_choice("kind", self.kind, KINDS)
        extension_factor(self.trained_length, self.target_length)

    @property
    def factor(self) -> float:
        return self.target_length / self.trained_length

    def frequencies(self, rotary_dim: int, base: float) -> tuple[torch.Tensor, float, float]:
        """``(freqs (rotary_dim/2,) float64, position_scale, attention_factor)``."""
        L, T = self.trained_length, self.target_length
        if self.kind == "linear":
            return rope_frequencies(rotary_dim, base), linear_position_scale(L, T), 1.0
        if self.kind == "ntk":
            return rope_frequencies(rotary_dim, ntk_base(base, rotary_dim, L, T)), 1.0, 1.0
        if self.kind == "yarn":
            freqs, factor = yarn_frequencies(rotary_dim, base, L, T, alpha=self.alpha, beta=self.beta)
            return freqs, 1.0, factor if self.yarn_temperature else 1.0
        return rope_frequencies(rotary_dim, base), 1.0, 1.0

    def __str__(self) -> str:
        return f"{self.kind}({self.trained_length}->{self.target_length})"
