import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from posenc.encodings import SinusoidalEncoding, create_encoding


def reference_1d(p: float, num_features: int, base: float = 10000.0, scale: float = 1.0) -> list[float]:
    """Vaswani et al. Sec. 3.5, written out with a loop: sines of k = 0..K-1, then cosines."""
    half = num_features // 2
    sines = [math.sin(scale * p / base ** (k / half)) for k in range(half)]
    cosines = [math.cos(scale * p / base ** (k / half)) for k in range(half)]
    return sines + cosines


def test_1d_matches_loop_reference():
    enc = SinusoidalEncoding(in_dim=1, num_features=16, dtype=torch.float64)
    pos = torch.tensor([[0.0], [1.0], [7.0], [123.5]], dtype=torch.float64)
    want = torch.tensor([reference_1d(float(p), 16) for p in pos[:, 0]], dtype=torch.float64)
    torch.testing.assert_close(enc(pos), want, rtol=0, atol=1e-12)


def test_integer_positions_equal_float_positions():
    enc = SinusoidalEncoding(in_dim=1, num_features=8)
    ints = torch.arange(10)[:, None]
    out = enc(ints)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, enc(ints.float()))


def test_2d_is_per_axis_split_and_depends_on_the_pair():
    enc = SinusoidalEncoding(in_dim=2, num_features=32, dtype=torch.float64)
    a, b, c = enc(torch.tensor([[3.0, 5.0], [5.0, 3.0], [8.0, 0.0]], dtype=torch.float64))
    # the bug of summing identical per-axis rows makes these equal; the split does not
    assert not torch.allclose(a, b) and not torch.allclose(a, c) and not torch.allclose(b, c)
    want = torch.tensor(reference_1d(3.0, 16) + reference_1d(5.0, 16), dtype=torch.float64)
    torch.testing.assert_close(a, want, rtol=0, atol=1e-12)


def test_scale_and_base():
    enc = SinusoidalEncoding(in_dim=1, num_features=4, base=100.0, scale=2 * math.pi, dtype=torch.float64)
    p = torch.tensor([[0.25]], dtype=torch.float64)
    want = torch.tensor([reference_1d(0.25, 4, 100.0, 2 * math.pi)], dtype=torch.float64)
    torch.testing.assert_close(enc(p), want, rtol=0, atol=1e-12)


@given(
    in_dim=st.integers(1, 4),
    per_axis=st.integers(1, 4),
    lead=st.lists(st.integers(1, 3), min_size=0, max_size=3),
)
def test_nd_shapes_and_unit_norm_per_axis(in_dim, per_axis, lead):
    enc = SinusoidalEncoding(in_dim=in_dim, num_features=2 * per_axis * in_dim)
    pos = torch.randn(*lead, in_dim) * 10
    out = enc(pos)
    assert out.shape == (*lead, 2 * per_axis * in_dim)
    # each axis block holds per_axis (sin, cos) pairs: squared norm per_axis
    blocks = out.reshape(*lead, in_dim, 2 * per_axis)
    torch.testing.assert_close(blocks.pow(2).sum(-1), torch.full((*lead, in_dim), float(per_axis)), atol=1e-4, rtol=0)


def test_registered():
    enc = create_encoding("sinusoidal", in_dim=2, num_features=8)
    assert isinstance(enc, SinusoidalEncoding) and enc.out_dim == 8
    assert "base=10000" in repr(enc)


def test_half_precision_input_computed_in_float32():
    enc = SinusoidalEncoding(in_dim=1, num_features=8)
    p = torch.tensor([[1000.0]])
    out = enc(p.half())
    assert out.dtype == torch.float16
    torch.testing.assert_close(out.float(), enc(p), atol=2e-3, rtol=0)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(in_dim=2, num_features=6), "num_features"),
        (dict(in_dim=1, num_features=0), "num_features"),
        (dict(in_dim=0, num_features=8), "in_dim"),
        (dict(num_features=8, base=1.0), "base"),
        (dict(num_features=8, scale=-1.0), "scale"),
    ],
)
def test_bad_constructor_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SinusoidalEncoding(**kwargs)


def test_bad_positions():
    enc = SinusoidalEncoding(in_dim=2, num_features=8)
    with pytest.raises(ValueError, match="positions"):
        enc(torch.zeros(3, 3))
    with pytest.raises(ValueError, match="positions"):
        enc(torch.tensor([[0.0, float("nan")]]))
    with pytest.raises(ValueError, match="positions"):
        enc(torch.tensor([[0.0, float("inf")]]))
    with pytest.raises(TypeError, match="positions"):
        enc(torch.zeros(2, 2, dtype=torch.bool))
    with pytest.raises(TypeError, match="positions"):
        enc([[0.0, 1.0]])
