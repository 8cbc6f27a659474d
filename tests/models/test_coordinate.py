"""Coordinate fitting: least squares against numpy, chunked paths, Adam training, bad input."""

import numpy as np
import pytest
import torch

from posenc import create_encoding
from posenc.models.coordinate import fit_coordinates, make_mlp, psnr
from posenc.positions import grid_1d


def _signal(n=64):
    x = grid_1d(n, dtype=torch.float64)
    y = 0.5 + 0.3 * torch.sin(2 * torch.pi * 3 * x[:, 0]) + 0.1 * torch.cos(2 * torch.pi * 7 * x[:, 0])
    return x, y


def test_psnr_matches_formula():
    a, b = torch.zeros(10), torch.full((10,), 0.1)
    assert psnr(a, b) == pytest.approx(20.0)


def test_lstsq_equals_numpy_min_norm_solution():
    x, y = _signal(64)
    enc = create_encoding("gaussian", num_features=40, sigma=0.03, dtype=torch.float64)
    tr, te = slice(0, None, 2), slice(1, None, 2)
    res = fit_coordinates(enc, x[tr], y[tr], x[te], y[te], "lstsq", predict_x=x)
    a = np.hstack([enc(x[tr]).numpy(), np.ones((32, 1))])
    w = np.linalg.pinv(a, rcond=1e-13) @ y[tr].numpy()
    pred = np.hstack([enc(x).numpy(), np.ones((64, 1))]) @ w
    np.testing.assert_allclose(res.predictions[:, 0].numpy(), pred, atol=1e-6)
    assert res.test_psnr == pytest.approx(psnr(torch.from_numpy(pred[1::2]), y[te]), abs=1e-3)


def test_lstsq_chunked_normal_equations_equal_dense_path():
    x, y = _signal(200)
    enc = create_encoding("gaussian", num_features=30, sigma=0.05, dtype=torch.float64)
    dense = fit_coordinates(enc, x, y, model="lstsq", predict_x=x)
    chunked = fit_coordinates(enc, x, y, model="lstsq", predict_x=x, ridge=1e-14, chunk_size=17)
    torch.testing.assert_close(dense.predictions, chunked.predictions, atol=1e-6, rtol=0)


def test_linear_training_reduces_loss_and_is_seeded():
    x, y = _signal(64)
    enc = create_encoding("gaussian", num_features=64, sigma=0.02, normalize=True)
    a = fit_coordinates(enc, x.float(), y.float(), model="linear", iters=200, lr=1e-2, seed=3, log_every=10)
    b = fit_coordinates(enc, x.float(), y.float(), model="linear", iters=200, lr=1e-2, seed=3, log_every=10)
    assert a.history[-1][1] < 0.1 * a.history[0][1]
    assert a.train_psnr == b.train_psnr


def test_uncached_training_equals_cached():
    x, y = _signal(50)
    enc = create_encoding("gaussian", num_features=32, sigma=0.03)
    a = fit_coordinates(enc, x.float(), y.float(), model="linear", iters=30, lr=1e-2, seed=1)
    b = fit_coordinates(enc, x.float(), y.float(), model="linear", iters=30, lr=1e-2, seed=1,
                        max_feature_bytes=0, chunk_size=7)
    assert a.train_mse == pytest.approx(b.train_mse, rel=1e-4)


def test_mlp_fits_multichannel_targets():
    x, y = _signal(64)
    y2 = torch.stack((y, 1 - y), dim=1)
    enc = create_encoding("rff", num_features=32, sigma=4.0)
    res = fit_coordinates(enc, x.float(), y2.float(), model="mlp", iters=300, lr=3e-3, hidden=32, depth=2,
                          predict_x=x.float())
    assert res.predictions.shape == (64, 2)
    assert res.train_psnr > 25


def test_make_mlp_layout():
    net = make_mlp(10, 3, hidden=8, depth=4)
    assert sum(isinstance(m, torch.nn.Linear) for m in net) == 5


@pytest.mark.parametrize("kwargs,exc,match", [
    (dict(model="cnn"), ValueError, "model"),
    (dict(iters=0), ValueError, "iters"),
    (dict(lr=-1.0), ValueError, "lr"),
    (dict(ridge=-1.0), ValueError, "ridge"),
    (dict(chunk_size=0), ValueError, "chunk_size"),
])
def test_bad_arguments(kwargs, exc, match):
    x, y = _signal(16)
    enc = create_encoding("gaussian", num_features=8)
    with pytest.raises(exc, match=match):
        fit_coordinates(enc, x.float(), y.float(), **kwargs)


def test_bad_data():
    x, y = _signal(16)
    enc = create_encoding("gaussian", num_features=8)
    with pytest.raises(ValueError, match="train_y must have shape"):
        fit_coordinates(enc, x.float(), y[:10].float())
    bad = y.clone().float()
    bad[3] = float("nan")
    with pytest.raises(ValueError, match="train_y contains"):
        fit_coordinates(enc, x.float(), bad)
    with pytest.raises(ValueError, match="test_x and test_y"):
        fit_coordinates(enc, x.float(), y.float(), test_x=x.float())
    with pytest.raises(ValueError, match="positions must lie in the domain"):
        fit_coordinates(enc, x.float() + 2, y.float())


@pytest.mark.parametrize("ridge", [0.0, 1e-12])  # the LAPACK path and the normal-equations path
def test_lstsq_refuses_non_finite_features(ridge):
    x, y = _signal(32)
    enc = create_encoding("gaussian", num_features=8, sigma=0.05, dtype=torch.float64)
    real = enc.iter_chunks

    def poisoned(xs, chunk_size):
        for f in real(xs, chunk_size):
            f = f.clone()
            f[0, 0] = float("nan")
            yield f

    enc.iter_chunks = poisoned
    with pytest.raises(ValueError, match="non-finite"):
        fit_coordinates(enc, x, y, model="lstsq", ridge=ridge)
