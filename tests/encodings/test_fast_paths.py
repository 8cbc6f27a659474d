"""The fast paths of the coordinate encodings (#25) give the same tensors as the plain formulas,
and every registered encoding compiles with ``fullgraph=True`` and exports, matching eager."""

import math
import warnings

import numpy as np
import pytest
import torch

from posenc.encodings import available_encodings, create_encoding
from posenc.encodings import fourier as fourier_module
from posenc.encodings.basis import gaussian_basis, gaussian_support, grid_centres, triangle_basis

GEN = torch.Generator().manual_seed(0)


def _positions(n: int, k: int, num: int, dtype) -> torch.Tensor:
    edges = torch.tensor([0.0, 1.0, 1 / num, 1 - 1 / num, 0.5, 0.5 / num])
    t = torch.cat((torch.rand(n, k, generator=GEN, dtype=torch.float64), edges[:, None].expand(-1, k)))
    return t.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("num,sigma,truncate", [(1000, 0.002, None), (300, 0.004, None), (4000, 1e-4, None),
                                                (64, 1e-3, None), (1000, 0.002, 4.0), (500, 0.003, 1.0)])
def test_banded_gaussian_is_the_dense_formula_bit_for_bit(dtype, num, sigma, truncate):
    # the band covers every centre where exp(-d^2 / 2 sigma^2) is not exactly 0 in the compute dtype
    t = _positions(400, 2, num, dtype)
    c = grid_centres(num).to(dtype)
    d = t[..., None] - c
    dense = torch.exp(d.square() * (-0.5 / sigma**2))
    if truncate is not None:
        dense = dense.masked_fill(d.abs() > truncate * sigma, 0.0)
    band = gaussian_basis(t, c, sigma, truncate, unit_grid=True)
    assert torch.equal(band, dense)
    assert torch.equal(gaussian_basis(t, c, sigma, truncate), dense)  # grid recognised from the values
    # and it is the float64 Gaussian (written independently) to the precision of the dtype
    x = t.double().numpy()[..., None] - np.arange(num) / num
    ref = np.exp(-(x**2) / (2 * sigma**2))
    if truncate is not None:
        ref[np.abs(x) > truncate * sigma] = 0.0
        # at the cut-off itself the rounded displacement decides: leave out the entries rounding can flip
        keep = np.abs(np.abs(x) - truncate * sigma) > 1e-6
        ref, band = ref * keep, band * torch.from_numpy(keep)
    # float32: the displacement is rounded to ~1.2e-7, and |d exp(-d^2/2s^2)/dd| <= 1/(s sqrt(e))
    tol = 1e-12 if dtype == torch.float64 else 1e-6 + 1.2e-7 / (sigma * math.sqrt(math.e))
    np.testing.assert_allclose(band.double().numpy(), ref, atol=tol)


def test_gaussian_support_is_where_the_dtype_underflows():
    for dtype, log2_smallest in ((torch.float32, -149), (torch.float64, -1074)):
        r = gaussian_support(1.0, dtype)  # exp(-r^2/2) below half the smallest subnormal, but not by far
        assert (0.95 * r) ** 2 / 2 < -(log2_smallest - 1) * math.log(2) < r**2 / 2
    assert gaussian_support(0.5, torch.float16) == gaussian_support(0.5, torch.float32)  # computed in float32
    assert gaussian_support(0.5, torch.float32, truncate=3.0) == 1.5


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_banded_triangle_is_the_dense_formula_bit_for_bit(dtype):
    num, width = 800, 0.003
    t = _positions(300, 3, num, dtype)
    c = grid_centres(num).to(dtype)
    dense = (t[..., None] - c).abs().mul(-1.0 / width).add(1.0).clamp_min(0.0)
    assert torch.equal(triangle_basis(t, c, width, unit_grid=True), dense)


def test_band_outside_the_domain_and_gradients():
    enc = create_encoding("gaussian", num_features=400, sigma=0.002, strict=False, dtype=torch.float64)
    x = torch.tensor([[-3.0], [-1e-3], [1.0005], [7.5], [1e12]], dtype=torch.float64)
    c = torch.arange(400, dtype=torch.float64) / 400
    assert torch.equal(enc(x), torch.exp((x - c).square() * (-0.5 / 0.002**2)))
    torch.testing.assert_close(enc(x), torch.exp(-((x - c) ** 2) / (2 * 0.002**2)), rtol=1e-12, atol=1e-300)
    xg = (torch.rand(6, 1, generator=GEN, dtype=torch.float64) * 0.9 + 0.05).requires_grad_()
    assert torch.autograd.gradcheck(enc, (xg,))
    torch.testing.assert_close(enc(xg), enc(xg.detach()), rtol=0, atol=0)


@pytest.mark.parametrize("name,kw,in_dim", [
    ("linf", dict(num_features=60, max_freq=100.0), 1), ("logf", dict(num_features=40, max_freq=256.0), 2),
    ("rff", dict(num_features=64, sigma=50.0), 3), ("rff", dict(num_features=64, sigma=50.0), 1),
    ("rff", dict(num_features=48, mode="separable"), 2),
    ("rff", dict(num_features=16, mode="product"), 2), ("basic", {}, 2),
    ("linf", dict(num_features=64, mode="four_direction", normalize=True), 2),
])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_blocked_fourier_features_equal_the_plain_formula(name, kw, in_dim, dtype, monkeypatch):
    monkeypatch.setattr(fourier_module, "PHASE_BLOCK", 50)  # many blocks, a partial last one
    enc = create_encoding(name, in_dim=in_dim, dtype=dtype, **kw)
    x = torch.rand(37, in_dim, generator=GEN, dtype=dtype)
    fast = enc(x)
    plain = enc(x.clone().requires_grad_()).detach()  # autograd takes the plain path
    if name == "rff" and kw.get("mode") is None:  # a matrix product per block: the sums may round differently
        torch.testing.assert_close(fast, plain, rtol=0, atol=1e-12 if dtype == torch.float64 else 5e-4)
    else:
        assert torch.equal(fast, plain)
    # float64: the formula written out independently
    if dtype == torch.float64 and name != "rff":
        f = enc.freqs.double()
        u = x.double()
        if kw.get("mode") == "four_direction":
            u = torch.stack((u[:, 0], u[:, 1], (u[:, 0] + u[:, 1]) / 2, (u[:, 0] - u[:, 1] + 1) / 2), -1)
        if name == "basic" and kw.get("mode") is None:
            f = torch.ones(1, dtype=torch.float64)
        ph = 2 * math.pi * u[..., None] * f
        ref = torch.cat((ph.sin(), ph.cos()), -1).flatten(-2) * enc.scale.double()
        torch.testing.assert_close(fast, ref, rtol=0, atol=1e-12)
    if dtype == torch.float64 and name == "rff" and kw.get("mode") is None:
        ph = 2 * math.pi * x.numpy() @ enc.freqs.numpy().T
        np.testing.assert_allclose(fast.numpy(), np.concatenate((np.sin(ph), np.cos(ph)), -1), atol=1e-12)


def test_normalised_features_are_scaled_in_place_without_changing_values():
    enc = create_encoding("gaussian", in_dim=2, num_features=64, sigma=0.05, normalize=True, dtype=torch.float64)
    raw = create_encoding("gaussian", in_dim=2, num_features=64, sigma=0.05, dtype=torch.float64)
    x = torch.rand(11, 2, generator=GEN, dtype=torch.float64)
    torch.testing.assert_close(enc(x), raw(x) * enc.scale, rtol=0, atol=0)
    assert enc.scale.item() < 1.0


# ------------------------------------------------------------------ torch.compile / torch.export
_KW = {"learned_table": dict(grid_size=8, num_features=16), "lff": dict(num_features=16),
       "coord_mlp": dict(num_features=16), "rff": dict(in_dim=2, num_features=32),
       "gaussian": dict(num_features=400, sigma=0.002, normalize=True)}


def _inputs(name: str, enc) -> torch.Tensor:
    if name == "learned_table":
        return torch.randint(0, 8, (5, 1), generator=GEN)
    return torch.rand(5, enc.in_dim, generator=GEN) * 0.9


@pytest.mark.parametrize("name", available_encodings())
def test_compile_fullgraph_and_export_match_eager(name):
    import torch._dynamo as dynamo

    enc = create_encoding(name, **_KW.get(name, {})).eval()
    x = _inputs(name, enc)
    dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = torch.compile(enc, backend="eager", fullgraph=True)(x)  # before any eager call: no cache
        # torch 2.4's export cannot lift the circulant encodings' tensor constant ("Unexpectedly found a
        # Tensor in the inputs"); 2.13 can (2.5-2.12 not tried)
        old_export = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) < (2, 5)
        exported = None if old_export else torch.export.export(enc, (x,)).module()(x)
    ref = enc(x)
    torch.testing.assert_close(compiled, ref, rtol=1e-6, atol=1e-6)
    if exported is not None:
        torch.testing.assert_close(exported, ref, rtol=1e-6, atol=1e-6)
    # the input checks stay in eager mode
    bad = x.clone().float()
    bad[0, 0] = float("nan")
    with pytest.raises(ValueError, match="positions"):
        enc(bad)


# ------------------------------------------------------------------ learnable Fourier features
def _lff_plain(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    # Algorithm 1, line 2 of Li et al. (2021), written out with autograd's own sin/cos
    proj = x @ w.T
    return torch.cat((torch.cos(proj), torch.sin(proj)), dim=-1) / math.sqrt(2 * w.shape[0])


def test_lff_features_forward_and_backward_equal_the_plain_formula():
    from posenc.encodings import learnable_fourier_features

    x = torch.randn(3, 50, 2, generator=GEN).requires_grad_()
    w = torch.randn(16, 2, generator=GEN).requires_grad_()
    out = learnable_fourier_features(x, w)
    assert torch.equal(out, _lff_plain(x, w))
    g = torch.randn(out.shape, generator=GEN)
    gx, gw = torch.autograd.grad(out, (x, w), g)
    rx, rw = torch.autograd.grad(_lff_plain(x, w), (x, w), g)
    torch.testing.assert_close(gx, rx, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(gw, rw, rtol=1e-5, atol=1e-5)


def test_lff_features_gradcheck_and_second_derivatives():
    from posenc.encodings import learnable_fourier_features

    x = torch.randn(2, 5, 3, generator=GEN, dtype=torch.float64).requires_grad_()
    w = torch.randn(4, 3, generator=GEN, dtype=torch.float64).requires_grad_()
    assert torch.autograd.gradcheck(learnable_fourier_features, (x, w))
    assert torch.autograd.gradgradcheck(learnable_fourier_features, (x, w))
    # only the positions, or only W_r, need a gradient
    assert torch.autograd.gradcheck(lambda a: learnable_fourier_features(a, w.detach()), (x,))
    assert torch.autograd.gradcheck(lambda b: learnable_fourier_features(x.detach(), b), (w,))


def test_lff_module_gradients_match_the_plain_formula():
    enc = create_encoding("lff", in_dim=2, num_features=32, num_groups=2, dtype=torch.float64)
    x = torch.rand(4, 6, 2, 2, generator=GEN, dtype=torch.float64).requires_grad_()
    out = enc(x)
    out.square().sum().backward()
    grads = [x.grad.clone()] + [p.grad.clone() for p in enc.parameters()]
    x.grad = None
    enc.zero_grad()
    feats = _lff_plain(x, enc.w_r)
    ref = enc.mlp(feats).flatten(-2)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    ref.square().sum().backward()
    for got, want in zip(grads, [x.grad] + [p.grad for p in enc.parameters()]):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("write", ["data_copy", "numpy_view", "set_data"])
def test_circulant_table_follows_writes_to_its_generator(write):
    # the gathered F x F table is cached: a write to generator_vector (even through .data) must be seen
    enc = create_encoding("random", num_features=16, seed=0)
    x = torch.rand(7, 1, generator=GEN)
    enc(x)  # fills the table
    new = torch.randn(16, generator=GEN)
    if write == "data_copy":
        enc.generator_vector.data.copy_(new)
    elif write == "numpy_view":
        enc.generator_vector.numpy()[:] = new.numpy()
    else:
        enc.generator_vector.data = new
    fresh = create_encoding("random", num_features=16, seed=0)
    fresh.generator_vector.copy_(new)
    assert torch.equal(enc(x), fresh(x))


@pytest.mark.parametrize("in_dim", [1, 2, 3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sinusoidal_in_place_path_is_the_plain_formula_bit_for_bit(in_dim, dtype, monkeypatch):
    # without autograd the phases are made in the output, a block of rows at a time; with it,
    # sin and cos of one phase tensor are concatenated: the same values, bit for bit
    monkeypatch.setattr(fourier_module, "PHASE_BLOCK", 50)  # many blocks, a partial last one
    enc = create_encoding("sinusoidal", in_dim=in_dim, num_features=12 * in_dim, dtype=dtype)
    x = 100 * torch.rand(4, 9, in_dim, generator=GEN, dtype=dtype)
    fast = enc(x)
    plain = enc(x.clone().requires_grad_()).detach()
    assert fast.shape == (4, 9, 12 * in_dim) and fast.dtype == dtype
    assert torch.equal(fast, plain)
    f = enc.freqs.double()
    ph = x.double()[..., None] * f
    ref = torch.cat((ph.sin(), ph.cos()), -1).flatten(-2)
    torch.testing.assert_close(fast.double(), ref, rtol=0, atol=1e-12 if dtype == torch.float64 else 1e-4)
    ints = torch.arange(30).reshape(10, 3)[:, :in_dim]  # token indices: cast, the same path
    assert torch.equal(enc(ints), enc(ints.to(dtype)))
