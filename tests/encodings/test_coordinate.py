"""Coordinate encodings against dense float64 references, shapes, dtypes and bad input."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from scipy.linalg import circulant

from posenc import available_encodings, create_encoding
from posenc.encodings import circulant_generator

X = torch.linspace(0.0, 1.0, 37, dtype=torch.float64)[:, None]


def ref_gaussian(x, F, sigma):
    out = np.zeros((len(x), F))
    for n, xv in enumerate(x):
        for i in range(F):
            out[n, i] = math.exp(-((xv - i / F) ** 2) / (2 * sigma**2))
    return out


def ref_fourier(x, freqs):
    out = np.zeros((len(x), 2 * len(freqs)))
    for n, xv in enumerate(x):
        for i, f in enumerate(freqs):
            out[n, i] = math.sin(2 * math.pi * f * xv)
            out[n, len(freqs) + i] = math.cos(2 * math.pi * f * xv)
    return out


def test_gaussian_matches_dense_loop():
    enc = create_encoding("gaussian", num_features=16, sigma=0.07, dtype=torch.float64)
    np.testing.assert_allclose(enc(X).numpy(), ref_gaussian(X[:, 0].tolist(), 16, 0.07), rtol=1e-12, atol=1e-15)


def test_gaussian_truncation_zeroes_far_entries_only():
    full = create_encoding("gaussian", num_features=32, sigma=0.02, dtype=torch.float64)(X)
    trunc = create_encoding("gaussian", num_features=32, sigma=0.02, truncate=3.0, dtype=torch.float64)(X)
    diff = (X - torch.arange(32, dtype=torch.float64) / 32).abs()
    assert torch.all(trunc[diff > 0.06] == 0)
    torch.testing.assert_close(trunc[diff <= 0.06], full[diff <= 0.06])


def test_triangle_matches_dense_loop():
    enc = create_encoding("triangle", num_features=10, width=0.15, dtype=torch.float64)
    ref = np.array([[max(0.0, 1 - abs(x - i / 10) / 0.15) for i in range(10)] for x in X[:, 0].tolist()])
    np.testing.assert_allclose(enc(X).numpy(), ref, atol=1e-15)


@pytest.mark.parametrize("name,freqs", [
    ("linf", np.linspace(1, 9, 4)),
    ("logf", 2.0 ** np.linspace(0, np.log2(9), 4)),
])
def test_linf_logf_match_dense_loop(name, freqs):
    enc = create_encoding(name, num_features=8, max_freq=9, dtype=torch.float64)
    np.testing.assert_allclose(enc(X).numpy(), ref_fourier(X[:, 0].tolist(), freqs), atol=1e-12)


def test_basic_fourier():
    enc = create_encoding("basic", dtype=torch.float64)
    np.testing.assert_allclose(enc(X).numpy(), ref_fourier(X[:, 0].tolist(), [1.0]), atol=1e-15)


def test_rff_full_matches_loop_and_is_seeded():
    enc = create_encoding("rff", in_dim=3, num_features=10, sigma=4.0, seed=7, dtype=torch.float64)
    b = enc.freqs.numpy()  # (5, 3)
    x = torch.rand(6, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    ref = np.zeros((6, 10))
    for n in range(6):
        for i in range(5):
            phase = 2 * math.pi * sum(x[n, k].item() * b[i, k] for k in range(3))
            ref[n, i], ref[n, 5 + i] = math.sin(phase), math.cos(phase)
    np.testing.assert_allclose(enc(x).numpy(), ref, atol=1e-12)
    again = create_encoding("rff", in_dim=3, num_features=10, sigma=4.0, seed=7, dtype=torch.float64)
    assert torch.equal(enc.freqs, again.freqs)
    other = create_encoding("rff", in_dim=3, num_features=10, sigma=4.0, seed=8, dtype=torch.float64)
    assert not torch.equal(enc.freqs, other.freqs)
    # the draw has the requested scale
    big = create_encoding("rff", in_dim=1, num_features=20000, sigma=4.0, seed=1, dtype=torch.float64)
    assert abs(big.freqs.std().item() - 4.0) < 0.1


@pytest.mark.parametrize("gen", ["impulse", "gaussian", "square", "sine", "random"])
def test_circulant_rows_on_the_grid(gen):
    F = 12
    enc = create_encoding("circulant", generator=gen, num_features=F, sigma=0.1, freq=2, seed=3, dtype=torch.float64)
    x = (torch.arange(F, dtype=torch.float64) / F)[:, None]
    c = circulant_generator(gen, F, sigma=0.1, freq=2, seed=3).numpy()
    ref = circulant(c)  # psi_i(x_j) = c[(j - i) mod F]: row j of circulant(c)
    np.testing.assert_allclose(enc(x).numpy(), ref, atol=1e-15)
    assert abs(np.linalg.norm(c) - 1) < 1e-12


def test_circulant_named_aliases():
    for name in ("impulse", "square", "sine", "random"):
        enc = create_encoding(name, num_features=8)
        assert enc.generator == name
    with pytest.raises(TypeError, match="generator"):
        create_encoding("impulse", generator="sine")


def test_impulse_is_one_hot_of_nearest_grid_point():
    enc = create_encoding("impulse", num_features=10, dtype=torch.float64)
    out = enc(torch.tensor([[0.0], [0.26], [0.99]], dtype=torch.float64))
    assert out.argmax(-1).tolist() == [0, 3, 0]  # 0.99 snaps to 1.0 == 0 (periodic)
    assert torch.all(out.sum(-1) == 1)


def test_separable_and_four_direction_layout():
    g = create_encoding("gaussian", num_features=8, sigma=0.1, dtype=torch.float64)
    sep = create_encoding("gaussian", in_dim=2, num_features=16, sigma=0.1, dtype=torch.float64)
    four = create_encoding("gaussian", in_dim=2, num_features=32, sigma=0.1, mode="four_direction", dtype=torch.float64)
    xy = torch.tensor([[0.2, 0.7], [0.9, 0.1]], dtype=torch.float64)
    x, y = xy[:, :1], xy[:, 1:]
    torch.testing.assert_close(sep(xy), torch.cat((g(x), g(y)), -1))
    dirs = [x, y, (x + y) / 2, (x - y + 1) / 2]
    torch.testing.assert_close(four(xy), torch.cat([g(d) for d in dirs], -1))


def test_product_mode_is_kronecker():
    g = create_encoding("triangle", num_features=5, width=0.3, dtype=torch.float64)
    prod = create_encoding("triangle", in_dim=2, num_features=5, width=0.3, mode="product", dtype=torch.float64)
    xy = torch.tensor([[0.2, 0.7], [0.9, 0.1]], dtype=torch.float64)
    ref = torch.stack([torch.kron(g(xy[n, :1]), g(xy[n, 1:])) for n in range(2)])
    assert prod.out_dim == 25
    torch.testing.assert_close(prod(xy), ref)


def test_2d_sinusoid_not_symmetric_in_xy():
    enc = create_encoding("rff", in_dim=2, num_features=16, sigma=3.0)
    a, b = enc(torch.tensor([[0.3, 0.5]])), enc(torch.tensor([[0.5, 0.3]]))
    assert not torch.allclose(a, b)


@pytest.mark.parametrize("name,kw", [
    ("gaussian", dict(num_features=64, sigma=0.01)),
    ("triangle", dict(num_features=64, width=0.03)),
    ("linf", dict(num_features=64, max_freq=20)),
    ("rff", dict(num_features=64, sigma=5.0)),
    ("random", dict(num_features=64)),
])
@pytest.mark.parametrize("in_dim,mode", [(1, "separable"), (2, "separable"), (2, "four_direction"), (2, "product")])
def test_normalize_bounds_row_norm_by_one(name, kw, in_dim, mode):
    if mode == "product":
        kw = {**kw, "num_features": 16}
    enc = create_encoding(name, in_dim=in_dim, mode=mode, normalize=True, dtype=torch.float64, **kw)
    x = torch.rand(4000, in_dim, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    if in_dim == 1:
        x = torch.cat((x, torch.linspace(0, 1, 4001, dtype=torch.float64)[:, None]))
    norms = enc(x).norm(dim=-1)
    assert norms.max() <= 1 + 1e-9
    if mode != "four_direction":  # exact for separable/product: the bound is attained (nearly)
        assert norms.max() > 0.97


@given(
    lead=st.lists(st.integers(1, 3), min_size=0, max_size=3),
    name=st.sampled_from(["gaussian", "triangle", "basic", "linf", "logf", "rff", "impulse", "square"]),
    in_dim=st.integers(1, 3),
)
def test_shapes_for_any_leading_dims(lead, name, in_dim):
    enc = create_encoding(name, in_dim=in_dim) if name == "basic" else create_encoding(
        name, in_dim=in_dim, num_features=12 * in_dim)
    x = torch.rand(*lead, in_dim)
    out = enc(x)
    assert out.shape == (*lead, enc.out_dim)
    assert torch.isfinite(out).all()


def test_dtypes_and_half_inputs():
    enc = create_encoding("gaussian", num_features=8, sigma=0.1)
    x = torch.rand(5, 1)
    assert enc(x.double()).dtype == torch.float64
    h = enc(x.half())
    assert h.dtype == torch.float16
    torch.testing.assert_close(h.float(), enc(x.half().float()), atol=2e-3, rtol=2e-3)
    enc64 = create_encoding("gaussian", num_features=8, sigma=0.1, dtype=torch.float64)
    assert enc64.centres.dtype == torch.float64


def test_domain_maps_to_unit_interval():
    a = create_encoding("gaussian", num_features=8, sigma=0.1, domain=(-1, 1), dtype=torch.float64)
    b = create_encoding("gaussian", num_features=8, sigma=0.1, dtype=torch.float64)
    x = torch.tensor([[-1.0], [0.0], [0.5]], dtype=torch.float64)
    torch.testing.assert_close(a(x), b((x + 1) / 2))


def test_iter_chunks_equals_full():
    enc = create_encoding("gaussian", in_dim=2, num_features=20, sigma=0.05)
    x = torch.rand(103, 2)
    torch.testing.assert_close(torch.cat(list(enc.iter_chunks(x, 10))), enc(x))


def test_repr_and_registry():
    names = available_encodings()
    for expected in ("basic", "linf", "logf", "rff", "gaussian", "triangle", "impulse", "square", "sine", "random"):
        assert expected in names
    r = repr(create_encoding("gaussian", sigma=0.25, num_features=4, domain=(0, 2)))
    assert "sigma=0.25" in r and "out_dim=4" in r and "domain" in r


def test_torch_compile_fullgraph():
    enc = create_encoding("gaussian", in_dim=2, num_features=16, sigma=0.1, normalize=True)
    compiled = torch.compile(enc, backend="eager", fullgraph=True)
    x = torch.rand(7, 2)
    torch.testing.assert_close(compiled(x), enc(x))


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_positions(bad):
    enc = create_encoding("gaussian")
    with pytest.raises(ValueError, match="positions.*non-finite"):
        enc(torch.tensor([[0.1], [bad]]))


def test_out_of_domain_positions_and_strict_false():
    enc = create_encoding("gaussian")
    with pytest.raises(ValueError, match="positions must lie in the domain"):
        enc(torch.tensor([[1.5]]))
    loose = create_encoding("gaussian", strict=False)
    assert torch.isfinite(loose(torch.tensor([[1.5]]))).all()


def test_wrong_trailing_dim_and_dtype():
    enc = create_encoding("gaussian", in_dim=2)
    with pytest.raises(ValueError, match=r"positions must have shape \(\.\.\., 2\)"):
        enc(torch.rand(4, 3))
    with pytest.raises(TypeError, match="positions must be a floating-point"):
        enc(torch.zeros(4, 2, dtype=torch.long))
    with pytest.raises(TypeError, match="positions must be a torch.Tensor"):
        enc([[0.1, 0.2]])


@pytest.mark.parametrize("name,kw,exc,match", [
    ("gaussian", dict(sigma=0.0), ValueError, "sigma"),
    ("gaussian", dict(sigma=-1.0), ValueError, "sigma"),
    ("gaussian", dict(sigma=float("nan")), ValueError, "sigma"),
    ("triangle", dict(width=0), ValueError, "width"),
    ("rff", dict(sigma=-2.0), ValueError, "sigma"),
    ("gaussian", dict(num_features=0), ValueError, "num_features"),
    ("gaussian", dict(num_features=2.5), TypeError, "num_features"),
    ("linf", dict(num_features=7), ValueError, "num_features"),
    ("rff", dict(num_features=9), ValueError, "num_features"),
    ("gaussian", dict(in_dim=2, num_features=9), ValueError, "num_features"),
    ("gaussian", dict(in_dim=3, mode="four_direction"), ValueError, "four_direction"),
    ("gaussian", dict(mode="diagonal"), ValueError, "mode"),
    ("gaussian", dict(domain=(1, 0)), ValueError, "domain"),
    ("linf", dict(max_freq=0.5), ValueError, "max_freq"),
    ("gaussian", dict(bandwidth=3), TypeError, "bandwidth"),
    ("circulant", dict(generator="wavelet"), ValueError, "generator"),
])
def test_bad_constructor_arguments(name, kw, exc, match):
    with pytest.raises(exc, match=match):
        create_encoding(name, **kw)


def test_unknown_encoding_lists_available():
    with pytest.raises(ValueError, match="unknown encoding 'fourrier'.*gaussian"):
        create_encoding("fourrier")


@pytest.mark.parametrize("name", ["gaussian", "triangle", "rff", "linf"])
def test_gradients_flow_to_positions(name):
    enc = create_encoding(name, num_features=8, dtype=torch.float64)
    x = torch.rand(5, 1, dtype=torch.float64, requires_grad=True) * 0.8 + 0.1
    x = x.detach().requires_grad_()
    assert torch.autograd.gradcheck(lambda p: enc(p), (x,))
    # the no-grad fast path gives the same values
    torch.testing.assert_close(enc(x.detach()), enc(x).detach())


@pytest.mark.parametrize("name,kw", [
    ("gaussian", dict(sigma=0.004, truncate=4.0)),
    ("triangle", dict(width=0.006)),
])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_banded_path_equals_dense_reference(name, kw, dtype):
    F = 200  # narrow support: the banded path is taken
    enc = create_encoding(name, num_features=F, dtype=dtype, **kw)
    x = torch.cat((torch.rand(300, 1, dtype=torch.float64, generator=torch.Generator().manual_seed(0)),
                   torch.tensor([[0.0], [1.0], [0.5], [1 / F], [1 - 1 / F]], dtype=torch.float64)))
    x = x.to(dtype).double()  # the reference sees the same (rounded) positions
    c = np.arange(F) / F
    d = x.numpy() - c[None, :]
    if name == "gaussian":
        ref = np.where(np.abs(d) <= 4.0 * 0.004, np.exp(-(d**2) / (2 * 0.004**2)), 0.0)
    else:
        ref = np.maximum(0.0, 1 - np.abs(d) / 0.006)
    out = enc(x.to(dtype))
    # float32 cannot do better than ~|d|/sigma^2 * eps32 ~ 1e-5 here (conditioning, not the path)
    tol = 1e-12 if dtype == torch.float64 else 3e-5
    np.testing.assert_allclose(out.double().numpy(), ref, atol=tol)


def test_bipolar_square_and_offset_sine_generators_match_direct_formulas():
    """Zheng et al.'s all-embedder SR/DP notebook: a +-1 square wave and sin + 0.7 (#9 Sec. 4)."""
    F, f = 64, 3
    k = np.arange(F)
    sq = np.array([1.0 if math.sin(2 * math.pi * f * (i + 0.5) / F) > 0 else -1.0 for i in k])
    np.testing.assert_allclose(circulant_generator("square", F, freq=f, bipolar=True).numpy(), sq / math.sqrt(F))
    sn = np.array([math.sin(2 * math.pi * f * i / F) + 0.7 for i in k])
    # closed form of the norm: sum sin^2 = F/2, sum sin = 0 (integer freq < F/2), so ||c||^2 = F (1/2 + 0.49)
    np.testing.assert_allclose(circulant_generator("sine", F, freq=f, offset=0.7).numpy(), sn / math.sqrt(F * 0.99))
    enc = create_encoding("sine", num_features=F, freq=f, offset=0.7, dtype=torch.float64)
    x = torch.arange(F, dtype=torch.float64)[:, None] / F
    np.testing.assert_allclose(enc(x).numpy(), circulant(sn / math.sqrt(F * 0.99)), atol=1e-12)
    assert "offset=0.7" in repr(enc)
    assert "bipolar=True" in repr(create_encoding("square", num_features=F, bipolar=True))
    # the +-1 wave has zero mean: its rows are orthogonal to the constant, unlike the 0/1 wave
    assert abs(circulant_generator("square", F, bipolar=True).sum().item()) < 1e-12


def test_generator_option_bad_input():
    with pytest.raises(ValueError, match="bipolar"):
        circulant_generator("sine", 8, bipolar=True)
    with pytest.raises(TypeError, match="bipolar"):
        circulant_generator("square", 8, bipolar=1)
    with pytest.raises(ValueError, match="offset"):
        circulant_generator("sine", 8, offset=float("nan"))
    with pytest.raises(ValueError, match="identically zero"):
        circulant_generator("impulse", 1, offset=-1.0)
