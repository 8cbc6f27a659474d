"""1D signals: rows of the embedded photographs, synthetic signals, and user files.

All signals are float64 tensors of shape ``(length,)`` with values in ``[0, 1]``.
Zheng et al. fit rows of 512 x 512 images; train on the even samples, test on
the odd ones.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import torch

from posenc._checks import check_choice, check_positive_int
from posenc._resources import check_footprint

SYNTHETIC_KINDS = ("multitone", "steps", "chirp")


def image_rows(num_rows: int, length: int = 512, image: str = "china", seed: int = 0) -> torch.Tensor:
    """``num_rows`` distinct random rows of a grayscale sample photograph resized to ``length``.

    Returns ``(num_rows, length)`` float64 in ``[0, 1]``.
    """
    from posenc.data.images import sample_image

    check_positive_int("num_rows", num_rows)
    check_positive_int("length", length, minimum=4)
    if num_rows > length:
        raise ValueError(f"num_rows must be <= length ({length}), got {num_rows}")
    img = sample_image(image, size=length, grayscale=True)[:, :, 0]
    gen = torch.Generator().manual_seed(seed)
    rows = torch.randperm(length, generator=gen)[:num_rows].sort().values
    return img[rows]


def synthetic_signal(kind: str = "multitone", length: int = 512, seed: int = 0) -> torch.Tensor:
    """A seeded synthetic signal rescaled to ``[0, 1]``.

    Args:
        kind: ``"multitone"`` (random sinusoids with a 1/f amplitude spectrum up to
            a quarter of the sampling rate), ``"steps"`` (piecewise constant with
            random jumps) or ``"chirp"`` (frequency rising linearly to length/8).
        length: number of samples.
        seed: seed of the draw.
    """
    check_choice("kind", kind, SYNTHETIC_KINDS)
    check_positive_int("length", length, minimum=4)
    # multitone sums length / 4 sinusoids of length samples as one float64 matrix (and its products)
    per_sample = 3 * 8.0 * max(2, length // 4) if kind == "multitone" else 6 * 8.0
    check_footprint(per_sample * length, f"length={length}", f"the {kind} signal")
    gen = torch.Generator().manual_seed(seed)
    t = torch.arange(length, dtype=torch.float64) / length
    if kind == "multitone":
        freqs = torch.arange(1, max(2, length // 4) + 1, dtype=torch.float64)
        amp = torch.randn(len(freqs), generator=gen, dtype=torch.float64) / freqs
        phase = 2 * math.pi * torch.rand(len(freqs), generator=gen, dtype=torch.float64)
        sig = (amp[:, None] * torch.sin(2 * math.pi * freqs[:, None] * t + phase[:, None])).sum(0)
    elif kind == "steps":
        jumps = torch.rand(length, generator=gen, dtype=torch.float64) < 16.0 / length
        sig = torch.cumsum(jumps * torch.randn(length, generator=gen, dtype=torch.float64), 0)
    else:
        f_max = length / 8.0
        sig = torch.sin(2 * math.pi * (0.5 * f_max * t**2) * 1.0 + 0.0)
    return _rescale(sig)


def _rescale(sig: torch.Tensor) -> torch.Tensor:
    lo, hi = sig.min(), sig.max()
    if hi == lo:
        return torch.full_like(sig, 0.5)
    return (sig - lo) / (hi - lo)


def load_signal(path: str | os.PathLike) -> tuple[torch.Tensor, bool]:
    """Read a 1D signal from ``.npy`` or ``.csv`` (one value per line or one row).

    Values outside ``[0, 1]`` are min-max rescaled to ``[0, 1]`` (PSNR is defined
    for that range); the second return value says whether that happened.

    Raises:
        FileNotFoundError: missing file.
        ValueError: unknown extension, unreadable content, not 1-D, fewer than 4
            samples, or NaN/inf values.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"signal: no such file {str(path)!r}")
    suffix = path.suffix.lower()
    try:
        if suffix == ".npy":
            arr = np.load(path, allow_pickle=False)
        elif suffix in (".csv", ".txt"):
            arr = np.loadtxt(path, delimiter="," if suffix == ".csv" else None, ndmin=1)
        else:
            raise ValueError(f"signal: {str(path)!r} must be a .npy or .csv file")
    except (OSError, ValueError, EOFError) as err:  # EOFError: an empty or truncated .npy
        if str(err).startswith("signal:"):
            raise
        raise ValueError(f"signal: cannot read {str(path)!r} ({err or err.__class__.__name__})") from None
    arr = np.squeeze(np.asarray(arr))
    if arr.dtype.kind not in "fiu":
        raise ValueError(f"signal: {str(path)!r} must hold numbers, got dtype {arr.dtype}")
    if arr.ndim != 1:
        raise ValueError(f"signal: {str(path)!r} must be 1-D, got shape {arr.shape}")
    if arr.size < 4:
        raise ValueError(f"signal: {str(path)!r} needs at least 4 samples, got {arr.size}")
    if not np.isfinite(arr).all():
        bad = int((~np.isfinite(arr)).sum())
        raise ValueError(f"signal: {str(path)!r} contains {bad} NaN/inf value(s)")
    sig = torch.from_numpy(arr.astype(np.float64))
    if float(sig.min()) < 0.0 or float(sig.max()) > 1.0:
        return _rescale(sig), True
    return sig, False
