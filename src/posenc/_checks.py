"""Argument validation shared by the library.

Every check raises a ``ValueError`` or ``TypeError`` whose message names the
argument, what was expected and what was received. Checks that need the data
(finiteness, domain) are skipped while ``torch.compile`` traces, so compiled
graphs stay free of data-dependent branches.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch


def _compiling() -> bool:
    compiler = getattr(torch, "compiler", None)
    return bool(compiler is not None and compiler.is_compiling())


def check_positive_int(name: str, value: Any, *, minimum: int = 1) -> int:
    """Return ``value`` if it is an int ``>= minimum`` (bools are rejected)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} ({value!r})")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def check_even(name: str, value: int) -> int:
    """Return ``value`` if it is even (sine/cosine pairs need an even width)."""
    if value % 2:
        raise ValueError(f"{name} must be even (features come in sine/cosine pairs), got {value}")
    return value


def check_divisible(name: str, value: int, divisor: int, why: str) -> int:
    if value % divisor:
        raise ValueError(f"{name} must be divisible by {divisor} ({why}), got {value}")
    return value


def check_positive_float(name: str, value: Any, *, allow_zero: bool = False) -> float:
    """Return ``float(value)`` if it is a finite number > 0 (or >= 0)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} ({value!r})")
    value = float(value)
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be finite and {bound}, got {value}")
    return value


def check_choice(name: str, value: Any, choices: Sequence[str]) -> str:
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}; got {value!r}")
    return value


def check_domain(name: str, value: Any) -> tuple[float, float]:
    """Return a ``(low, high)`` pair of finite floats with ``low < high``."""
    try:
        low, high = (float(v) for v in value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a pair (low, high) of numbers, got {value!r}") from None
    if not (math.isfinite(low) and math.isfinite(high)) or not low < high:
        raise ValueError(f"{name} must satisfy low < high with finite bounds, got ({low}, {high})")
    return low, high


def check_tensor(name: str, value: Any) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    return value


def check_last_dim(name: str, x: torch.Tensor, size: int) -> None:
    if x.dim() == 0 or x.shape[-1] != size:
        raise ValueError(
            f"{name} must have shape (..., {size}), got {tuple(x.shape)}"
        )


def check_floating(name: str, x: torch.Tensor) -> None:
    if not (x.is_floating_point()):
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")


def check_finite(name: str, x: torch.Tensor) -> None:
    """Raise if ``x`` holds NaN or infinity (skipped under torch.compile)."""
    if _compiling():
        return
    if x.is_floating_point() and not bool(torch.isfinite(x.detach()).all()):
        bad = int((~torch.isfinite(x)).sum())
        raise ValueError(f"{name} contains {bad} non-finite value(s) (NaN or inf)")


def check_in_domain(name: str, x: torch.Tensor, low: float, high: float, *, tol: float = 1e-6) -> None:
    """Raise if any entry of ``x`` lies outside ``[low, high]`` (up to ``tol`` of the width)."""
    if _compiling() or x.numel() == 0:
        return
    slack = tol * (high - low)
    lo, hi = float(x.detach().min()), float(x.detach().max())
    if lo < low - slack or hi > high + slack:
        raise ValueError(
            f"{name} must lie in the domain [{low}, {high}], got values in [{lo:.6g}, {hi:.6g}]; "
            "pass domain=(low, high) to the encoding or strict=False to allow extrapolation"
        )
