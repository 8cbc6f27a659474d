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


#: Functions of posenc.positions without an underscore that are shared validation helpers of
#: the CAPE encoding, not part of the module's public interface (kept out of ``__all__``).
HELPERS = {"cape_augment_work", "check_generator", "check_key_padding_mask", "check_scaling_range"}


def test_star_import_gives_exactly_the_public_names():
    import inspect

    import posenc.positions as mod

    namespace: dict = {}
    exec("from posenc.positions import *", namespace)
    names = set(namespace) - {"__builtins__"}
    assert names == {"LIMIT_MAX", "SCALING_DISTRIBUTIONS", "cape_augment", "grid", "grid_1d", "grid_cell",
                     "grid_spacing", "index_grid", "subsample_mask"}
    assert len(mod.__all__) == len(set(mod.__all__))
    # every function defined here is either public or a named helper; none is forgotten
    defined = {n for n, f in vars(mod).items() if inspect.isfunction(f) and f.__module__ == mod.__name__
               and not n.startswith("_")}
    assert defined == (names | HELPERS) - {"LIMIT_MAX", "SCALING_DISTRIBUTIONS"}
    assert all(getattr(mod, n).__doc__ for n in names if callable(getattr(mod, n)))
