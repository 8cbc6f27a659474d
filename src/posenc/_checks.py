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


#: the largest seed a ``torch.Generator`` takes (an unsigned 64-bit integer)
MAX_SEED = 2**64 - 1


def check_seed(name: str, value: Any) -> int:
    """Return ``value`` if it is an int in ``[0, 2**64 - 1]``, the seeds ``torch.Generator`` takes."""
    check_positive_int(name, value, minimum=0)
    if value > MAX_SEED:
        raise ValueError(f"{name} must be at most 2**64 - 1 (a torch.Generator seed), got {value}")
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


#: Widths and frequencies (sigma, gamma, kernel_width, max_freq, ...) outside
#: ``[WIDTH_MIN, WIDTH_MAX]`` under- or overflow the encodings' float32 arithmetic
#: (``1 / sigma**2``, ``sigma * randn * 2 pi x``); on the unit domain they are far
#: beyond any meaningful scale (float64 resolves positions to ~1e-16).
WIDTH_MIN, WIDTH_MAX = 1e-15, 1e15


def check_width(name: str, value: Any) -> float:
    """Return ``float(value)`` if it is a finite number in ``[WIDTH_MIN, WIDTH_MAX]``."""
    value = check_positive_float(name, value)
    if not WIDTH_MIN <= value <= WIDTH_MAX:
        raise ValueError(f"{name} must be in [{WIDTH_MIN:g}, {WIDTH_MAX:g}] (beyond it the encoding's float32 "
                         f"arithmetic under- or overflows), got {value:g}")
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


def check_has_data(name: str, x: torch.Tensor) -> None:
    """Raise if ``x`` is on the ``meta`` device (shapes only: no values to check or compute with)."""
    if x.is_meta:
        raise ValueError(f"{name} is on the 'meta' device (it has a shape but no values); pass a tensor with data")


def all_finite(x: torch.Tensor) -> bool:
    """Whether ``x`` holds no NaN or infinity, in one reduction over ``x`` and no temporary of its size.

    A NaN or an infinity anywhere makes the sum of ``x`` non-finite (IEEE arithmetic never
    turns them back into a finite number), so a finite sum proves every entry finite. A
    non-finite sum is either such an entry or finite values whose sum overflows (float16 past
    65,504, or any dtype near its maximum): only then is the exact element-wise test run, so
    the verdict is always that of ``torch.isfinite(x).all()``. float16, whose sums overflow at a
    few thousand entries of order 10, reduces to its extremes instead (``torch.aminmax``, which
    propagates NaN and cannot overflow). Non-floating tensors are finite.
    """
    if not x.is_floating_point() or x.numel() == 0:
        return True
    x = x.detach()
    if x.dtype == torch.float16:
        lo, hi = torch.aminmax(x)
        reduced = (hi.float() - lo.float()).item()  # finite exactly when both extremes are (no float32 overflow)
    else:
        reduced = x.sum().item()
    # one read-back of one number (math.isfinite on a Python float costs less than a 0-d torch.isfinite)
    return math.isfinite(reduced) or bool(torch.isfinite(x).all())


def broadcast_shape(*shapes: Sequence[int]) -> torch.Size:
    """``torch.broadcast_shapes(*shapes)`` computed on the sizes directly.

    The same result, and the same ``RuntimeError`` for shapes that do not broadcast, without
    the import of sympy (about half a second) that ``torch.broadcast_shapes`` makes on its first
    call in a process. Under ``torch.compile``, ``torch.export`` or ``torch.jit.trace`` it defers
    to ``torch.broadcast_shapes`` (symbolic and traced sizes).
    """
    if _compiling() or torch.jit.is_tracing():
        return torch.broadcast_shapes(*shapes)
    ndim = max((len(s) for s in shapes), default=0)
    out = [1] * ndim
    for shape in shapes:
        for i, size in enumerate(shape, ndim - len(shape)):
            if size == 1:
                continue
            if out[i] == 1:
                out[i] = size
            elif out[i] != size:
                raise RuntimeError(f"shapes {[tuple(s) for s in shapes]} do not broadcast: size {out[i]} against "
                                   f"{size} at dimension {i - ndim}")
    return torch.Size(out)


def check_finite(name: str, x: torch.Tensor) -> None:
    """Raise if ``x`` holds NaN or infinity (skipped under torch.compile).

    One reduction over ``x`` (:func:`all_finite`); the entries are counted only to word the
    error. A ``meta`` tensor has no values: it is refused with a ValueError naming ``name``.
    """
    if _compiling():
        return
    check_has_data(name, x)
    if not all_finite(x):
        bad = int((~torch.isfinite(x)).sum())
        raise ValueError(f"{name} contains {bad} non-finite value(s) (NaN or inf)")


def check_bool(name: str, value: Any) -> bool:
    """Return ``value`` if it is a bool (``"maybe"``, 0/1 and None are refused, not coerced)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__} ({value!r})")
    return value


def check_device(name: str, device: Any) -> torch.device | None:
    """Return ``torch.device(device)`` if this machine can allocate there (None passes through).

    Raises:
        ValueError: not a device string/object, or a device this build or machine lacks
            (``"cuda"`` on a CPU-only build, ``"bogus"``).
    """
    if device is None:
        return None
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise ValueError(f"{name} must be a torch device such as 'cpu' or 'cuda:0', got {device!r}") from None
    if dev.type in ("cpu", "meta"):
        return dev
    try:
        torch.empty(0, device=dev)
    except (RuntimeError, AssertionError, ValueError) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ValueError(f"{name}={device!r} is not available on this machine ({first})") from None
    return dev


def check_float_dtype(name: str, dtype: Any, *, allow_none: bool = True) -> torch.dtype | None:
    """Return ``dtype`` if it is a floating-point ``torch.dtype`` (or None when allowed)."""
    if dtype is None and allow_none:
        return None
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"{name} must be a floating-point torch.dtype such as torch.float32, got {dtype!r}")
    if not dtype.is_floating_point:
        raise TypeError(f"{name} must be a floating-point torch.dtype such as torch.float32, got {dtype}")
    return dtype


def check_in_domain(name: str, x: torch.Tensor, low: float, high: float, *, tol: float = 1e-6) -> None:
    """Raise if any entry of ``x`` lies outside ``[low, high]`` (up to ``tol`` of the width)."""
    if _compiling() or x.numel() == 0:
        return
    check_has_data(name, x)
    slack = tol * (high - low)
    lo, hi = torch.stack(torch.aminmax(x.detach())).tolist()  # one pass over x, one read back
    if lo < low - slack or hi > high + slack:
        raise ValueError(
            f"{name} must lie in the domain [{low}, {high}], got values in [{lo:.6g}, {hi:.6g}]; "
            "pass domain=(low, high) to the encoding or strict=False to allow extrapolation"
        )
