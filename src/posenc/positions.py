"""Position grids: 1D, 2D and N-D, on a coordinate domain or as integer indices.

Coordinate encodings (Zheng et al.) sample the unit interval as
``linspace(0, 1, N + 1)[:-1]``: N points, left-closed, right-open. That is the
default here (``endpoint=False``); ``endpoint=True`` gives ``linspace(low, high, N)``.

:func:`cape_augment` is CAPE's augmentation of continuous positions (global
shift, local shift, global scaling; Likhomanenko et al., NeurIPS 2021);
:func:`grid_spacing` measures the spacing of a grid of positions and
:func:`grid_cell` the width of one of its cells (the unit of CAPE's local shift
in 2D).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from posenc._checks import (
    WIDTH_MAX,
    _compiling,
    all_finite,
    check_domain,
    check_has_data,
    check_finite,
    check_floating,
    check_positive_int,
    check_tensor,
)
from posenc._resources import check_footprint

__all__ = [
    "LIMIT_MAX",
    "SCALING_DISTRIBUTIONS",
    "cape_augment",
    "grid",
    "grid_1d",
    "grid_cell",
    "grid_spacing",
    "index_grid",
    "subsample_mask",
]


def grid_1d(
    num: int,
    domain: tuple[float, float] = (0.0, 1.0),
    endpoint: bool = False,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """``num`` evenly spaced positions on ``domain``: shape ``(num, 1)``.

    Args:
        num: number of points (>= 1).
        domain: ``(low, high)``.
        endpoint: include ``high`` (``linspace(low, high, num)``); otherwise
            ``low + (high - low) * i / num`` for ``i < num``.
        device, dtype: of the result (default dtype: ``torch.get_default_dtype()``).
    """
    return grid((num,), domain, endpoint, device=device, dtype=dtype)


def grid(
    shape: Sequence[int],
    domain: tuple[float, float] = (0.0, 1.0),
    endpoint: bool = False,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """A regular N-D grid of positions: shape ``(*shape, len(shape))``.

    Axis ``k`` of the result's last dimension holds the coordinate along grid axis
    ``k`` (``indexing="ij"``), so ``grid((H, W))[i, j] == (y_i, x_j)``.

    Args:
        shape: points per axis.
        domain, endpoint, device, dtype: as in :func:`grid_1d` (one domain for all axes).
    """
    if isinstance(shape, int) or not isinstance(shape, Sequence) or len(shape) == 0:
        raise TypeError(f"shape must be a non-empty sequence of ints, got {shape!r}")
    sizes = [check_positive_int(f"shape[{k}]", n) for k, n in enumerate(shape)]
    low, high = check_domain("domain", domain)
    dtype = dtype or torch.get_default_dtype()
    # the float64 stack and its cast (the axes and the meshgrid's views are small)
    _check_grid(sizes, 8 + getattr(dtype, "itemsize", 8))
    axes = []
    for n in sizes:
        if endpoint:
            axes.append(torch.linspace(low, high, n, device=device, dtype=torch.float64))
        else:
            axes.append(low + (high - low) * torch.arange(n, device=device, dtype=torch.float64) / n)
    mesh = torch.meshgrid(*axes, indexing="ij")
    return torch.stack(mesh, dim=-1).to(dtype)


def _check_grid(sizes: list[int], bytes_per_coordinate: int) -> None:
    """Refuse a grid of ``prod(sizes)`` points beyond the memory limit (before anything is allocated)."""
    points = math.prod(float(n) for n in sizes)
    check_footprint(points * len(sizes) * bytes_per_coordinate, f"shape={tuple(sizes)}",
                    f"a grid of {points:.4g} points")


def index_grid(
    shape: Sequence[int], device: torch.device | str | None = None, dtype: torch.dtype = torch.long
) -> torch.Tensor:
    """Integer positions ``(*shape, len(shape))``: ``index_grid((H, W))[i, j] == (i, j)``."""
    if isinstance(shape, int) or not isinstance(shape, Sequence) or len(shape) == 0:
        raise TypeError(f"shape must be a non-empty sequence of ints, got {shape!r}")
    sizes = [check_positive_int(f"shape[{k}]", n) for k, n in enumerate(shape)]
    _check_grid(sizes, getattr(dtype, "itemsize", 8))
    mesh = torch.meshgrid(*(torch.arange(n, device=device, dtype=dtype) for n in sizes), indexing="ij")
    return torch.stack(mesh, dim=-1)


def subsample_mask(shape: Sequence[int], stride: int = 2, device: torch.device | str | None = None) -> torch.Tensor:
    """Boolean mask of the ``[::stride, ::stride, ...]`` sub-grid (the training points).

    The paper trains on even samples (``[::2]`` in 1D, ``[::2, ::2]`` in 2D) and
    tests on the rest.
    """
    check_positive_int("stride", stride)
    idx = index_grid(shape, device=device)
    return (idx % stride == 0).all(dim=-1)


# --------------------------------------------------------------------------- CAPE
#: Largest CAPE limit (shift, scale, spacing) accepted. The augmentation runs in at least
#: float32: a shift of 1e300 overflows it to inf, and the embedding turns that into NaN.
#: Within ``[0, LIMIT_MAX]`` the limits cannot overflow float32 by themselves (the same
#: bound as the encodings' widths, :data:`posenc._checks.WIDTH_MAX`); positions times
#: frequencies that still overflow are refused where the phase is formed.
LIMIT_MAX = WIDTH_MAX

#: How the global scale is drawn (``scaling_distribution``).
SCALING_DISTRIBUTIONS = ("log_uniform", "uniform")


def _check_limit(name: str, value: object, minimum: float = 0.0, maximum: float = LIMIT_MAX) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} ({value!r})")
    value = float(value)
    if not math.isfinite(value) or value < minimum:
        raise ValueError(f"{name} must be finite and >= {minimum:g}, got {value}")
    if value > maximum:
        raise ValueError(f"{name} must be <= {maximum:g} (beyond it float32 arithmetic overflows), got {value:g}")
    return value


def check_scaling_range(max_global_scaling: object, min_global_scaling: object = None,
                        scaling_distribution: object = "log_uniform") -> tuple[float, float, str]:
    """Validate CAPE's global-scale range: ``(min, max, distribution)``.

    ``max_global_scaling`` in ``[1, LIMIT_MAX]``; ``min_global_scaling`` in
    ``(0, 1]`` (default ``1 / max_global_scaling``); ``scaling_distribution`` one of
    :data:`SCALING_DISTRIBUTIONS`.
    """
    hi = _check_limit("max_global_scaling", max_global_scaling, minimum=1.0)
    if min_global_scaling is None:
        lo = 1.0 / hi
    else:
        if isinstance(min_global_scaling, bool) or not isinstance(min_global_scaling, (int, float)):
            raise TypeError(f"min_global_scaling must be a number, got {type(min_global_scaling).__name__} "
                            f"({min_global_scaling!r})")
        lo = float(min_global_scaling)
        if not 1.0 / LIMIT_MAX <= lo <= 1.0:  # also refuses NaN
            raise ValueError(f"min_global_scaling must be in [{1.0 / LIMIT_MAX:g}, 1], got {lo:g}")
    if scaling_distribution not in SCALING_DISTRIBUTIONS:
        raise ValueError(f"scaling_distribution must be one of {', '.join(map(repr, SCALING_DISTRIBUTIONS))}; "
                         f"got {scaling_distribution!r}")
    return lo, hi, str(scaling_distribution)


def check_key_padding_mask(mask: object, batch_shape: tuple[int, ...]) -> torch.Tensor:
    """Validate a key padding mask ``(..., N)`` (``True`` = padding) against ``batch_shape``.

    Raises if it is not a bool tensor of exactly ``batch_shape`` or if some sample
    pads every token (checked outside ``torch.compile`` only).
    """
    check_tensor("key_padding_mask", mask)
    if mask.dtype != torch.bool:
        raise TypeError(f"key_padding_mask must be a bool tensor (True = padding), got dtype {mask.dtype}")
    if tuple(mask.shape) != tuple(batch_shape):
        raise ValueError(
            f"key_padding_mask must have the positions' shape without the last axis, {tuple(batch_shape)}, "
            f"got {tuple(mask.shape)}"
        )
    if not _compiling() and mask.numel() and bool(mask.all(dim=-1).any()):
        bad = int(mask.all(dim=-1).sum())
        raise ValueError(f"key_padding_mask pads every token of {bad} sample(s); each sample needs a real token")
    return mask


def check_generator(generator: object, device: torch.device) -> torch.Generator | None:
    """Return ``generator`` if it is ``None`` or a ``torch.Generator`` on ``device``."""
    if generator is None:
        return None
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    gdev = generator.device
    if gdev.type != device.type or (gdev.index is not None and device.index is not None and gdev.index != device.index):
        raise ValueError(
            f"generator must be on the positions' device {device}, got a generator on {gdev}; "
            f"create it with torch.Generator(device={str(device)!r})"
        )
    return generator


def _spacing_tensor(spacing: object, d: int, like: torch.Tensor) -> torch.Tensor:
    """``spacing`` as a tensor broadcastable to ``(..., 1, d)`` in ``like``'s dtype and device."""
    if isinstance(spacing, torch.Tensor):
        s = spacing.to(device=like.device, dtype=like.dtype)
        if s.dim() == 0:
            s = s.reshape(1)
        if s.shape[-1] not in (1, d):
            raise ValueError(f"spacing must have 1 or D={d} entries on its last axis, got shape {tuple(spacing.shape)}")
    else:
        try:
            vals = [spacing] if isinstance(spacing, (int, float)) else list(spacing)  # type: ignore[arg-type]
        except TypeError:
            raise TypeError(f"spacing must be a number, a sequence of numbers or a tensor, got {spacing!r}") from None
        if len(vals) not in (1, d):
            raise ValueError(f"spacing must be a number or D={d} numbers, got {spacing!r}")
        vals = [_check_limit("spacing", v) for v in vals]
        s = torch.tensor(vals, device=like.device, dtype=like.dtype)
    if not _compiling() and not bool((torch.isfinite(s) & (s > 0)).all()):
        raise ValueError(f"spacing must be finite and > 0, got {spacing!r}")
    return s


def cape_augment(
    positions: torch.Tensor,
    *,
    max_global_shift: float = 0.0,
    max_local_shift: float = 0.0,
    max_global_scaling: float = 1.0,
    mean_center: bool = False,
    spacing: float | Sequence[float] | torch.Tensor = 1.0,
    key_padding_mask: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    min_global_scaling: float | None = None,
    scaling_distribution: str = "log_uniform",
) -> torch.Tensor:
    """CAPE's augmentation of continuous positions (Likhomanenko et al., NeurIPS 2021, Sec. 3).

    ``positions (..., N, D) -> (..., N, D)``: every leading index is one sample,
    ``N`` its tokens, ``D`` the axes (1 for sequences, 2 for images). In order,

    1. optional mean-centring ``x <- x - mean_i(x_i)`` (per sample and axis, over
       the unpadded tokens);
    2. global shift ``x <- x + Delta``, ``Delta ~ U[-max_global_shift, max_global_shift]``,
       one draw per sample and axis;
    3. local shift ``x_i <- x_i + eps_i``, ``eps_i ~ U[-max_local_shift, max_local_shift] * spacing``,
       one draw per token and axis (``spacing``: the unit, e.g. the patch width ``2 / n``
       of ``n`` patches on ``[-1, 1]``, so that ``max_local_shift = 0.5`` gives ``+-1/n``);
    4. global scaling ``x <- lambda * x``, one draw per sample shared by all axes:
       ``log lambda ~ U[log min, log max]`` (``"log_uniform"``, the paper's text and the
       authors' 1D code) or ``lambda ~ U[min, max]`` (``"uniform"``, the authors' 2D code,
       ``U[0.7, 1.4]``), with ``min = min_global_scaling`` (default ``1 / max``) and
       ``max = max_global_scaling``.

    The three draws are always made, in that order (``Delta``, then ``eps``, then
    the scale) and whatever the limits, so switching one augmentation off does
    not change the others' draws. They are made on the positions' device, from
    ``generator`` when given (it must live on that device), otherwise from torch's
    default generator of that device. The arithmetic runs in at least float32 and
    the result is cast back to the positions' dtype. Padded positions
    (``key_padding_mask`` True) take no part in the mean and are returned unchanged.

    Args:
        positions: ``(..., N, D)`` floating-point positions, finite.
        max_global_shift: in ``[0, LIMIT_MAX]``, in the positions' units.
        max_local_shift: in ``[0, LIMIT_MAX]``, in units of ``spacing``.
        max_global_scaling: in ``[1, LIMIT_MAX]`` (1 with the default minimum: no scaling).
        mean_center: subtract each sample's mean position first.
        spacing: unit of the local shift: a number, ``D`` numbers (one per axis), or a
            tensor broadcastable to ``(..., 1, D)`` (e.g. one spacing per sample).
        key_padding_mask: ``(..., N)`` bool, ``True`` at padding; no sample may be all padding.
        generator: a ``torch.Generator`` on the positions' device, or ``None``.
        min_global_scaling: smallest scale, in ``[1/LIMIT_MAX, 1]``; default ``1 / max_global_scaling``.
        scaling_distribution: ``"log_uniform"`` or ``"uniform"``.

    Returns:
        The augmented positions, same shape and dtype as ``positions``.

    Raises:
        ValueError: a limit out of range, or augmented positions that overflow the
            working precision (finite positions near the float32 range times a large scale).
    """
    out = cape_augment_work(
        positions, max_global_shift=max_global_shift, max_local_shift=max_local_shift,
        max_global_scaling=max_global_scaling, mean_center=mean_center, spacing=spacing,
        key_padding_mask=key_padding_mask, generator=generator, augment=True,
        min_global_scaling=min_global_scaling, scaling_distribution=scaling_distribution,
    )
    return out.to(positions.dtype)


def cape_augment_work(
    positions: torch.Tensor,
    *,
    max_global_shift: float = 0.0,
    max_local_shift: float = 0.0,
    max_global_scaling: float = 1.0,
    mean_center: bool = False,
    spacing: float | Sequence[float] | torch.Tensor = 1.0,
    key_padding_mask: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    augment: bool = True,
    min_global_scaling: float | None = None,
    scaling_distribution: str = "log_uniform",
) -> torch.Tensor:
    """:func:`cape_augment` returning its working precision (at least float32).

    With ``augment=False`` only the mean-centring is applied (CAPE at evaluation),
    and nothing is drawn. Encodings call this so that half-precision positions are
    augmented and embedded in float32 without a round trip through the half type.
    """
    check_tensor("positions", positions)
    if positions.dim() < 2:
        raise ValueError(f"positions must have shape (..., N, D) (tokens, then axes), got {tuple(positions.shape)}")
    check_floating("positions", positions)
    gen = check_generator(generator, positions.device)
    shift = _check_limit("max_global_shift", max_global_shift)
    local = _check_limit("max_local_shift", max_local_shift)
    lo, hi, dist = check_scaling_range(max_global_scaling, min_global_scaling, scaling_distribution)
    if not isinstance(mean_center, bool):
        raise TypeError(f"mean_center must be a bool, got {type(mean_center).__name__}")
    check_finite("positions", positions)
    mask = None
    if key_padding_mask is not None:
        mask = check_key_padding_mask(key_padding_mask, tuple(positions.shape[:-1]))
    work_dtype = torch.promote_types(positions.dtype, torch.float32)
    x = positions.to(work_dtype)
    keep = None if mask is None else (~mask)[..., None]  # (..., N, 1): real tokens
    if mean_center:
        if keep is None:
            mean = x.mean(dim=-2, keepdim=True)
        else:
            w = keep.to(work_dtype)
            mean = (x * w).sum(dim=-2, keepdim=True) / w.sum(dim=-2, keepdim=True)
        x = x - mean
    if augment:
        *batch, n, d = x.shape
        step = _spacing_tensor(spacing, d, x)
        kw = {"generator": gen, "device": x.device, "dtype": work_dtype}
        delta = (2.0 * torch.rand((*batch, 1, d), **kw) - 1.0) * shift
        eps = (2.0 * torch.rand((*batch, n, d), **kw) - 1.0) * local
        u = 2.0 * torch.rand((*batch, 1, 1), **kw) - 1.0  # in [-1, 1): the scale's draw
        if dist == "uniform":
            lam = (lo + hi) / 2.0 + u * ((hi - lo) / 2.0)
        elif min_global_scaling is None:  # symmetric in log: log lambda ~ U[-log max, log max]
            lam = torch.exp(u * math.log(hi))
        else:
            lam = torch.exp((math.log(lo) + math.log(hi)) / 2.0 + u * ((math.log(hi) - math.log(lo)) / 2.0))
        x = (x + delta + eps * step) * lam
    if keep is not None:
        x = torch.where(keep, x, positions.to(work_dtype))
    if not _compiling() and not all_finite(x):
        raise ValueError(
            f"positions overflow {work_dtype} once augmented (largest |position| "
            f"{float(positions.detach().abs().max()):g}, max_global_shift={shift:g}, max_local_shift={local:g}, "
            f"global scale up to {hi:g}); pass smaller positions or limits, or float64 positions"
        )
    return x


def _gap_extent(positions: torch.Tensor, key_padding_mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Per sample and axis: the smallest gap between distinct coordinates (inf if none) and the extent."""
    check_tensor("positions", positions)
    if positions.dim() < 2:
        raise ValueError(f"positions must have shape (..., N, D), got {tuple(positions.shape)}")
    check_floating("positions", positions)
    check_has_data("positions", positions)
    if positions.shape[-2] == 0:  # no tokens: no gap and no extent (the callers fall back to their default)
        shape = (*positions.shape[:-2], 1, positions.shape[-1])
        empty = torch.full(shape, math.inf, device=positions.device,
                           dtype=torch.promote_types(positions.dtype, torch.float32))
        return empty, torch.zeros_like(empty)
    if key_padding_mask is None:
        # positions shared by a batch through expand() (stride 0): measure one copy, expand the result
        shared = [i for i in range(positions.dim() - 2) if positions.stride(i) == 0 and positions.shape[i] > 1]
        if shared:
            one = positions[tuple(slice(0, 1) if i in shared else slice(None) for i in range(positions.dim()))]
            shape = (*positions.shape[:-2], 1, positions.shape[-1])
            gap, extent = _gap_extent(one, None)
            return gap.expand(shape), extent.expand(shape)
    x = positions.to(torch.promote_types(positions.dtype, torch.float32))
    if key_padding_mask is not None:
        check_key_padding_mask(key_padding_mask, tuple(positions.shape[:-1]))
        x = torch.where(key_padding_mask[..., None], torch.full_like(x, math.inf), x)
    s = x.sort(dim=-2).values
    gaps = s.diff(dim=-2)  # inf - finite = inf, inf - inf = nan: both rejected below
    finite = torch.where(torch.isfinite(x), x, torch.zeros_like(x))
    extent = finite.amax(dim=-2, keepdim=True) - finite.amin(dim=-2, keepdim=True)
    tol = 1e-6 * extent
    gaps = torch.where(torch.isfinite(gaps) & (gaps > tol), gaps, torch.full_like(gaps, math.inf))
    gap = gaps.amin(dim=-2, keepdim=True) if gaps.shape[-2] else torch.full_like(x[..., :1, :], math.inf)
    return gap, extent


def grid_spacing(
    positions: torch.Tensor, key_padding_mask: torch.Tensor | None = None, *, single: float = 2.0
) -> torch.Tensor:
    """Per sample and axis, the smallest gap between distinct coordinates: ``(..., N, D) -> (..., 1, D)``.

    For a regular grid this is its spacing (``2 / n`` for ``n`` patch centres on
    ``[-1, 1]``). An axis with a single distinct value gets ``single`` (2: one
    patch spans ``[-1, 1]``). Gaps below ``1e-6`` of the axis' extent count as equal
    coordinates; padded tokens are ignored.
    """
    gap, _ = _gap_extent(positions, key_padding_mask)
    return torch.where(torch.isfinite(gap), gap, torch.full_like(gap, float(single)))


def grid_cell(
    positions: torch.Tensor, key_padding_mask: torch.Tensor | None = None, *, endpoint: bool = False,
    single: float = 2.0,
) -> torch.Tensor:
    """Per sample and axis, the width of one grid cell (patch): ``(..., N, D) -> (..., 1, D)``.

    The unit of CAPE's 2D local shift, which is ``+-1/n`` for ``n`` patches a side on
    ``[-1, 1]`` (half a cell of width ``2 / n``) whichever grid carries the positions:

    * ``endpoint=False``: positions are cell centres (``-1 + (2i + 1)/n``); the cell is
      the spacing, :func:`grid_spacing`.
    * ``endpoint=True``: positions are ``linspace(-1, 1, n)`` (the authors' 2D grid); the
      spacing is ``2/(n - 1)`` but the cell is ``extent / n = 2 / n``, computed as
      ``gap * extent / (extent + gap)`` (exact for any regular grid of ``n`` points).

    An axis with a single distinct value gets ``single`` (2: one patch spans ``[-1, 1]``).
    """
    if not isinstance(endpoint, bool):
        raise TypeError(f"endpoint must be a bool, got {type(endpoint).__name__}")
    gap, extent = _gap_extent(positions, key_padding_mask)
    cell = gap * extent / (extent + gap) if endpoint else gap
    ok = torch.isfinite(cell) & (cell > 0)
    return torch.where(ok, cell, torch.full_like(cell, float(single)))
