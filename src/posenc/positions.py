"""Position grids: 1D, 2D and N-D, on a coordinate domain or as integer indices.

Coordinate encodings (Zheng et al.) sample the unit interval as
``linspace(0, 1, N + 1)[:-1]``: N points, left-closed, right-open. That is the
default here (``endpoint=False``); ``endpoint=True`` gives ``linspace(low, high, N)``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from posenc._checks import check_domain, check_positive_int


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
    axes = []
    for n in sizes:
        if endpoint:
            axes.append(torch.linspace(low, high, n, device=device, dtype=torch.float64))
        else:
            axes.append(low + (high - low) * torch.arange(n, device=device, dtype=torch.float64) / n)
    mesh = torch.meshgrid(*axes, indexing="ij")
    return torch.stack(mesh, dim=-1).to(dtype)


def index_grid(
    shape: Sequence[int], device: torch.device | str | None = None, dtype: torch.dtype = torch.long
) -> torch.Tensor:
    """Integer positions ``(*shape, len(shape))``: ``index_grid((H, W))[i, j] == (i, j)``."""
    if isinstance(shape, int) or not isinstance(shape, Sequence) or len(shape) == 0:
        raise TypeError(f"shape must be a non-empty sequence of ints, got {shape!r}")
    sizes = [check_positive_int(f"shape[{k}]", n) for k, n in enumerate(shape)]
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
