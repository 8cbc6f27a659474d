import math

import pytest
import torch

from posenc.attention.kernelized.features import (
    PositiveRandomFeatures,
    TrigRandomFeatures,
    gaussian_projection,
    kernel_estimate,
)

D = torch.float64


def unit_pair(g, d=8, R=1.0):
    q = torch.randn(d, dtype=D, generator=g)
    k = torch.randn(d, dtype=D, generator=g)
    return R * q / q.norm(), R * k / k.norm()


def rmse(cls, q, k, m, trials, g, **kw):
    fm = cls(q.shape[-1], m, dtype=D, **kw)
    est = []
    for _ in range(trials):
        fm.redraw(g)
        est.append(float(kernel_estimate(fm, q, k)))
    est = torch.tensor(est, dtype=D)
    return float(((est - math.exp(float(q @ k))) ** 2).mean().sqrt())


@pytest.mark.parametrize("cls", [PositiveRandomFeatures, TrigRandomFeatures])
def test_error_decays_like_inverse_sqrt_m(cls):
    g = torch.Generator().manual_seed(0)
    q, k = unit_pair(g)
    ms = [16, 64, 256, 1024]
    errs = [rmse(cls, q, k, m, 300, g) for m in ms]
    x = torch.log(torch.tensor(ms, dtype=D))
    y = torch.log(torch.tensor(errs, dtype=D))
    fit = ((x - x.mean()) * (y - y.mean())).sum() / ((x - x.mean()) ** 2).sum()
    assert -0.62 < float(fit) < -0.38


def test_positive_variance_matches_closed_form():
    """FAVOR+ (Choromanski et al. 2021, Lemma 2): Var = exp(2 q.k) (exp(|q+k|^2) - 1) / m."""
    g = torch.Generator().manual_seed(1)
    q, k = unit_pair(g)
    m = 64
    err = rmse(PositiveRandomFeatures, q, k, m, 2000, g)
    var = math.exp(2 * float(q @ k)) * (math.exp(float((q + k) @ (q + k))) - 1) / m
    assert err == pytest.approx(math.sqrt(var), rel=0.1)


def test_features_are_positive_and_unbiased_shape():
    fm = PositiveRandomFeatures(5, 7, seed=3)
    x = torch.randn(2, 3, 5)
    phi = fm(x)
    assert phi.shape == (2, 3, 7) and bool((phi > 0).all())
    assert TrigRandomFeatures(5, 6)(x).shape == (2, 3, 6)


def test_seeded_and_redraw():
    a, b = PositiveRandomFeatures(4, 8, seed=11), PositiveRandomFeatures(4, 8, seed=11)
    torch.testing.assert_close(a.weight, b.weight)
    w0 = a.weight.clone()
    a.redraw()
    assert not torch.equal(a.weight, w0)
    b.redraw()
    torch.testing.assert_close(a.weight, b.weight)  # same seed -> same sequence of draws
    assert not torch.equal(PositiveRandomFeatures(4, 8, seed=12).weight, w0)


def test_orthogonal_rows_are_orthogonal():
    g = torch.Generator().manual_seed(2)
    w = gaussian_projection(8, 8, orthogonal=True, generator=g, dtype=D)
    gram = w @ w.T
    off = gram - torch.diag(torch.diagonal(gram))
    assert float(off.abs().max()) < 1e-10
    assert gaussian_projection(20, 8, orthogonal=True, generator=g).shape == (20, 8)


def test_orthogonal_lowers_error():
    g = torch.Generator().manual_seed(3)
    q, k = unit_pair(g, d=16)
    iid = rmse(PositiveRandomFeatures, q, k, 16, 600, g)
    orf = rmse(PositiveRandomFeatures, q, k, 16, 600, g, orthogonal=True)
    assert orf < iid


@pytest.mark.parametrize(
    "make,exc,match",
    [
        (lambda: PositiveRandomFeatures(4, 0), ValueError, "num_features"),
        (lambda: PositiveRandomFeatures(4, -3), ValueError, "num_features"),
        (lambda: PositiveRandomFeatures(0, 4), ValueError, "dim"),
        (lambda: TrigRandomFeatures(4, 5), ValueError, "num_features"),
        (lambda: PositiveRandomFeatures(4, 2.5), TypeError, "num_features"),
        (lambda: PositiveRandomFeatures(4, 8)(torch.zeros(3, 5)), ValueError, "x"),
    ],
)
def test_bad_input(make, exc, match):
    with pytest.raises(exc, match=match):
        make()
