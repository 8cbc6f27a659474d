"""Synthetic spatial tasks for transformer positional encodings (generated, never downloaded).

* :func:`grid_radius_task`: a ``G x G`` grid of tokens; each cell is occupied
  with probability ``occupancy`` and one cell holds a marker. A token's label is
  "occupied and within ``radius`` of the marker", with the Euclidean distance
  (``metric="l2"``, a disk) or the axis-aligned Chebyshev distance
  (``metric="linf"``, a square). The model sees only (occupied, marker) bits per
  token, so everything spatial must come from the positional encoding. This is
  the pilot task behind the claim of Li et al. (NeurIPS 2021) that learnable
  Fourier features help "where L2 distances ... need to be captured".
* :func:`point_set_task`: the same rule on sets of points with continuous
  positions in ``[-1, 1]^2``; a rectangular region can be held out of training
  to test generalisation to positions never seen.
* :func:`digits_images`: scikit-learn's bundled 8x8 ``load_digits`` images
  (optionally upsampled) for a tiny ViT.

Every draw takes a ``torch.Generator``.
"""

from __future__ import annotations

import torch

from posenc._checks import check_choice, check_positive_float, check_positive_int
from posenc._resources import check_footprint

METRICS = ("l2", "linf")


def _distance(d: torch.Tensor, metric: str) -> torch.Tensor:
    """Distance of displacements ``(..., 2)``: Euclidean or Chebyshev."""
    return d.norm(dim=-1) if metric == "l2" else d.abs().amax(dim=-1)


def grid_cells(grid: int) -> torch.Tensor:
    """Integer ``(row, col)`` of the ``grid x grid`` cells, row-major: ``(grid**2, 2)`` int64."""
    check_positive_int("grid", grid)
    check_footprint(3 * 2 * 8.0 * grid * grid, f"grid={grid}", "the grid's cells")
    r = torch.arange(grid)
    return torch.stack(torch.meshgrid(r, r, indexing="ij"), dim=-1).reshape(-1, 2)


def cell_coords(grid: int) -> torch.Tensor:
    """Cell centres in ``[-1, 1]^2``, row-major: ``(grid**2, 2)`` float32."""
    return ((2.0 * grid_cells(grid).float() + 1.0) / grid - 1.0)


def grid_radius_task(
    num_samples: int,
    generator: torch.Generator,
    grid: int = 10,
    radius: float = 3.0,
    metric: str = "l2",
    occupancy: float = 0.5,
) -> dict[str, torch.Tensor]:
    """Draw samples of the grid "occupied and within radius of the marker" task.

    Args:
        num_samples: ``B``.
        generator: the random source.
        grid: side ``G`` of the grid (``N = G^2`` tokens).
        radius: in cells; a cell is inside when its distance to the marker cell is
            ``<= radius`` (``"l2"``: Euclidean, ``"linf"``: Chebyshev).
        metric: ``"l2"`` (disk) or ``"linf"`` (square).
        occupancy: probability that a cell is occupied (the marker cell never is).

    Returns:
        ``tokens (B, N, 2)`` float (occupied, marker), ``labels (B, N)`` float 0/1,
        ``cells (N, 2)`` int64 grid indices, ``coords (N, 2)`` float centres in [-1, 1],
        ``marker (B,)`` int64 marker token index.
    """
    check_positive_int("num_samples", num_samples)
    check_positive_int("grid", grid, minimum=2)
    check_positive_float("radius", radius)
    check_choice("metric", metric, METRICS)
    occupancy = check_positive_float("occupancy", occupancy, allow_zero=True)
    if occupancy > 1:
        raise ValueError(f"occupancy must be in [0, 1], got {occupancy}")
    n = grid * grid
    # per token: occupancy, marker, displacement (float32 x 2), distance, labels and the two-channel tokens
    check_footprint(40.0 * num_samples * n, f"num_samples={num_samples}, grid={grid}", "the grid radius task")
    cells = grid_cells(grid)
    occupied = torch.rand(num_samples, n, generator=generator) < occupancy
    marker = torch.randint(n, (num_samples,), generator=generator)
    is_marker = torch.zeros(num_samples, n, dtype=torch.bool)
    is_marker[torch.arange(num_samples), marker] = True
    occupied &= ~is_marker
    disp = (cells[None, :, :] - cells[marker][:, None, :]).float()
    inside = _distance(disp, metric) <= radius + 1e-9
    labels = (occupied & inside).float()
    tokens = torch.stack((occupied.float(), is_marker.float()), dim=-1)
    return {"tokens": tokens, "labels": labels, "cells": cells, "coords": cell_coords(grid), "marker": marker}


def _uniform_points(shape: tuple[int, int], generator: torch.Generator,
                    exclude: tuple[float, float, float, float] | None) -> torch.Tensor:
    """Uniform points in ``[-1, 1]^2`` avoiding the box ``exclude = (x0, x1, y0, y1)``."""
    pts = torch.rand(*shape, 2, generator=generator) * 2 - 1
    if exclude is None:
        return pts
    for _ in range(100):
        bad = in_box(pts, exclude)
        if not bool(bad.any()):
            return pts
        fresh = torch.rand(int(bad.sum()), 2, generator=generator) * 2 - 1
        pts[bad] = fresh
    raise RuntimeError("could not sample points outside the held-out box")  # pragma: no cover


def in_box(points: torch.Tensor, box: tuple[float, float, float, float]) -> torch.Tensor:
    """Whether points ``(..., 2)`` lie in the box ``(x0, x1, y0, y1)`` (closed): ``(...)`` bool."""
    x0, x1, y0, y1 = box
    x, y = points[..., 0], points[..., 1]
    return (x >= x0) & (x <= x1) & (y >= y0) & (y <= y1)


def point_set_task(
    num_samples: int,
    generator: torch.Generator,
    num_points: int = 64,
    radius: float = 0.6,
    metric: str = "l2",
    occupancy: float = 0.5,
    exclude: tuple[float, float, float, float] | None = None,
) -> dict[str, torch.Tensor]:
    """The radius task on point sets with continuous positions in ``[-1, 1]^2``.

    Point 0 of every set is the marker; the others are occupied with probability
    ``occupancy``. With ``exclude = (x0, x1, y0, y1)`` no point (marker included)
    falls in that box: train with it, test without it and score the tokens
    :func:`in_box` to measure generalisation to unseen positions.

    Args:
        num_samples: ``B``.
        generator: the random source.
        num_points: ``N`` points per set.
        radius: in coordinate units (``0.6`` = 3 cells of a 10x10 grid over [-1, 1]).
        metric: ``"l2"`` or ``"linf"``.
        occupancy: probability that a non-marker point is occupied.
        exclude: held-out box, or ``None``.

    Returns:
        ``tokens (B, N, 2)``, ``labels (B, N)``, ``positions (B, N, 2)`` float.
    """
    check_positive_int("num_samples", num_samples)
    check_positive_int("num_points", num_points, minimum=2)
    check_positive_float("radius", radius)
    check_choice("metric", metric, METRICS)
    if exclude is not None:
        x0, x1, y0, y1 = (float(v) for v in exclude)
        if not (x0 < x1 and y0 < y1) or (x1 - x0) * (y1 - y0) >= 4.0 * 0.9:
            raise ValueError(f"exclude must be a box (x0, x1, y0, y1) leaving room in [-1, 1]^2, got {exclude}")
    check_footprint(48.0 * num_samples * num_points, f"num_samples={num_samples}, num_points={num_points}",
                    "the point-set task")
    pos = _uniform_points((num_samples, num_points), generator, exclude)
    occupied = torch.rand(num_samples, num_points, generator=generator) < occupancy
    occupied[:, 0] = False
    is_marker = torch.zeros(num_samples, num_points, dtype=torch.bool)
    is_marker[:, 0] = True
    inside = _distance(pos - pos[:, :1], metric) <= radius
    labels = (occupied & inside).float()
    tokens = torch.stack((occupied.float(), is_marker.float()), dim=-1)
    return {"tokens": tokens, "labels": labels, "positions": pos}


def digits_images(upsample: int = 2, test_fraction: float = 0.25, seed: int = 0) -> dict[str, torch.Tensor]:
    """scikit-learn's bundled ``load_digits`` (1797 8x8 images, 10 classes), split and scaled.

    Args:
        upsample: integer nearest-neighbour upsampling factor (8x8 -> 8u x 8u).
        test_fraction: share of the images held out (a seeded permutation).
        seed: seed of the split.

    Returns:
        ``x_train (n, 1, 8u, 8u)`` in [0, 1], ``y_train (n,)``, ``x_test``, ``y_test``.
    """
    from sklearn.datasets import load_digits  # bundled with scikit-learn; no download

    check_positive_int("upsample", upsample)
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    data = load_digits()
    x = torch.tensor(data.images, dtype=torch.float32)[:, None] / 16.0
    if upsample > 1:
        x = x.repeat_interleave(upsample, dim=-1).repeat_interleave(upsample, dim=-2)
    y = torch.tensor(data.target, dtype=torch.int64)
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    n_test = int(round(len(y) * test_fraction))
    test, train = perm[:n_test], perm[n_test:]
    return {"x_train": x[train], "y_train": y[train], "x_test": x[test], "y_test": y[test]}
