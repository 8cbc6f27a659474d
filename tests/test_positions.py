import pytest
import torch

from posenc.positions import grid, grid_1d, index_grid, subsample_mask


def test_grid_1d_is_left_closed_right_open():
    x = grid_1d(4, dtype=torch.float64)
    assert x[:, 0].tolist() == [0.0, 0.25, 0.5, 0.75]
    assert grid_1d(3, (-1, 1), endpoint=True)[:, 0].tolist() == [-1.0, 0.0, 1.0]


def test_grid_nd_layout():
    g = grid((2, 3), dtype=torch.float64)
    assert g.shape == (2, 3, 2)
    assert g[1, 2].tolist() == [0.5, 2 / 3]
    assert index_grid((2, 3))[1, 2].tolist() == [1, 2]


def test_subsample_mask_counts():
    m = subsample_mask((5, 4), 2)
    assert m.sum() == 3 * 2 and m[0, 0] and not m[1, 0]


@pytest.mark.parametrize("shape,exc,match", [
    ((0,), ValueError, r"shape\[0\]"),
    (5, TypeError, "shape"),
    ((), TypeError, "shape"),
    ((2, 2.5), TypeError, r"shape\[1\]"),
])
def test_grid_bad_shape(shape, exc, match):
    with pytest.raises(exc, match=match):
        grid(shape)


def test_grid_bad_domain():
    with pytest.raises(ValueError, match="domain"):
        grid_1d(4, (1, 1))
    with pytest.raises(ValueError, match="stride"):
        subsample_mask((4,), 0)
