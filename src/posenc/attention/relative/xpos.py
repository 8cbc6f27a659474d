"""xPos (Sun et al., "A Length-Extrapolatable Transformer", arXiv 2212.10554): the per-pair scales.

The query at position ``m`` has pair ``i`` multiplied by ``zeta_i ** ((m - c) / scale_base)``
and the key at ``n`` by ``zeta_i ** (-(n - c) / scale_base)``, with
``zeta_i = (2i/r + gamma) / (1 + gamma)``; their logit gains ``zeta_i ** ((m - n) / scale_base)``,
whatever the centre ``c``. The centre only keeps the scales in floating-point range:
:func:`xpos_default_center` takes the middle of the key positions (``n // 2`` for keys
``0..n-1``, as torchscale and rotary-embedding-torch), and :func:`_check_xpos_range`
refuses scales that leave the normal range of the output dtype (with ``gamma = 0.4``
and ``scale_base = 512``: about 36,000 positions from the centre in float32, 4,000 in
float16, 290,000 in float64).
"""

from __future__ import annotations

import math

import torch

from posenc._checks import _compiling, check_positive_float


def _xpos_zeta(rotary_dim: int, gamma: float, device=None) -> torch.Tensor:
    i = torch.arange(rotary_dim // 2, device=device, dtype=torch.float64)
    return (2.0 * i / rotary_dim + gamma) / (1.0 + gamma)


def xpos_scales(
    positions: torch.Tensor, rotary_dim: int, *, scale_base: float = 512.0, gamma: float = 0.4,
    center: float | torch.Tensor = 0.0,
) -> torch.Tensor:
    """xPos factors ``zeta_i ** ((p - center) / scale_base)``: ``(...) -> (..., rotary_dim/2)`` in float64.

    Queries use these factors, keys their reciprocals.
    """
    check_positive_float("scale_base", scale_base)
    check_positive_float("gamma", gamma)
    zeta = _xpos_zeta(rotary_dim, gamma, positions.device)
    c = center.to(device=positions.device, dtype=torch.float64) if isinstance(center, torch.Tensor) else center
    expo = (positions.to(torch.float64)[..., None] - c) / scale_base
    return torch.exp(expo * torch.log(zeta))


def xpos_default_center(k_positions: torch.Tensor) -> torch.Tensor:
    """The automatic xPos centre: the middle of the key positions, ``floor((min + max + 1) / 2)``.

    For keys ``0..n-1`` this is ``n // 2``, as rotary-embedding-torch (and torchscale, up to
    rounding) measure it. A 0-d float64 tensor (no host synchronisation).
    """
    p = k_positions.to(torch.float64)
    return torch.floor((p.amin() + p.amax() + 1.0) / 2.0)


def xpos_log_range(max_distance: float, rotary_dim: int, *, scale_base: float = 512.0, gamma: float = 0.4) -> float:
    """``max |ln zeta_i| * max_distance / scale_base``: the largest ``|ln|`` of an xPos factor at that distance."""
    zeta0 = gamma / (1.0 + gamma)  # the smallest zeta (pair 0)
    return abs(math.log(zeta0)) * max_distance / scale_base


def _check_xpos_range(pq: torch.Tensor, pk: torch.Tensor, center, rotary_dim: int, scale_base: float, gamma: float,
                      dtype: torch.dtype) -> None:
    """Refuse xPos scales (or their reciprocals) outside the normal range of ``dtype``."""
    if _compiling():
        return
    c = center if isinstance(center, torch.Tensor) else torch.tensor(float(center), dtype=torch.float64)
    c = c.to(torch.float64)
    dist = max(float((p.to(torch.float64) - c.to(p.device)).abs().amax()) for p in (pq, pk))
    e = xpos_log_range(dist, rotary_dim, scale_base=scale_base, gamma=gamma)
    limit = -math.log(torch.finfo(dtype).tiny)
    if e > limit:
        raise ValueError(
            f"xPos scales reach e^{e:.0f} (and e^-{e:.0f}) at {dist:.0f} positions from xpos_center={float(c):g}, beyond "
            f"the range of {dtype} (about e^+-{limit:.0f}): centre the positions (xpos_center), use a wider dtype "
            f"(float32: e^+-87, float64: e^+-708), a larger xpos_scale_base, or shorter sequences"
        )


