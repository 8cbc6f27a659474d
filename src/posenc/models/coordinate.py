"""Coordinate networks: fit a signal or image from its encoded coordinates.

Three models, as in Zheng et al. (arXiv 2107.02561), Sec. 5:

* ``"linear"``: a single linear layer (no hidden layer), full-batch Adam;
* ``"mlp"``: ``depth`` hidden ReLU layers of width ``hidden`` (default 4 x 256), full-batch Adam;
* ``"lstsq"``: the closed-form least-squares linear layer (minimum-norm, float64).

Features are produced in chunks, so predicting a 512 x 512 image with 1000
features never holds the 1 GB feature matrix of all pixels at once. The training
features are materialised only while they fit in ``max_feature_bytes``;
otherwise every step recomputes them chunk by chunk (exact, slower).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from posenc._checks import (
    check_choice,
    check_finite,
    check_positive_float,
    check_positive_int,
    check_tensor,
)
from posenc._resources import check_footprint, fit_bytes

MODELS = ("linear", "mlp", "lstsq")
ProgressFn = Callable[[int, int], None]


def mse(pred: torch.Tensor, target: torch.Tensor) -> float:
    return float((pred.to(torch.float64) - target.to(torch.float64)).pow(2).mean())


def psnr_from_mse(value: float) -> float:
    """``-10 log10(MSE)`` for signals in ``[0, 1]`` (capped at 300 dB for an exact fit)."""
    return 300.0 if value <= 1e-30 else -10.0 * math.log10(value)


def psnr(pred: torch.Tensor, target: torch.Tensor) -> float:
    """PSNR in dB of ``pred`` against ``target``, both in ``[0, 1]``."""
    return psnr_from_mse(mse(pred, target))


@dataclass
class FitResult:
    """Outcome of :func:`fit_coordinates`.

    ``history`` holds ``(step, train_mse)`` pairs; ``predictions`` the model's
    output on ``predict_x`` when it was given.
    """

    model: str
    train_mse: float
    train_psnr: float
    test_mse: float | None
    test_psnr: float | None
    seconds: float
    history: list[tuple[int, float]] = field(default_factory=list)
    predictions: torch.Tensor | None = None

    def as_dict(self) -> dict:
        return {
            "model": self.model,
            "train_mse": self.train_mse,
            "train_psnr": self.train_psnr,
            "test_mse": self.test_mse,
            "test_psnr": self.test_psnr,
            "seconds": self.seconds,
        }


def make_mlp(in_features: int, out_features: int, hidden: int = 256, depth: int = 4) -> nn.Sequential:
    """``depth`` hidden ReLU layers of width ``hidden``, then a linear output layer."""
    check_positive_int("in_features", in_features)
    check_positive_int("out_features", out_features)
    check_positive_int("hidden", hidden)
    check_positive_int("depth", depth, minimum=0)
    params = (in_features + 1) * hidden + (depth - 1) * (hidden + 1) * hidden + (hidden + 1) * out_features \
        if depth else (in_features + 1) * out_features
    check_footprint(4.0 * params, f"hidden={hidden}, depth={depth}", f"an MLP of {params:,} parameters")
    layers: list[nn.Module] = []
    width = in_features
    for _ in range(depth):
        layers += [nn.Linear(width, hidden), nn.ReLU()]
        width = hidden
    layers.append(nn.Linear(width, out_features))
    return nn.Sequential(*layers)


def _features(encoding: nn.Module, x: torch.Tensor, chunk_size: int) -> torch.Tensor:
    with torch.no_grad():
        return torch.cat([f.to(torch.float32) for f in encoding.iter_chunks(x, chunk_size)], dim=0)


def _predict(encoding: nn.Module, head: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, chunk_size: int):
    outs = []
    with torch.no_grad():
        for feats in encoding.iter_chunks(x, chunk_size):
            outs.append(head(feats))
    return torch.cat(outs, dim=0)


def _check_features(t: torch.Tensor) -> None:
    """LAPACK returns garbage, not an error, for non-finite input: refuse it with the reason."""
    if not bool(torch.isfinite(t).all()):
        raise ValueError(
            f"the encoding's features of the training positions hold {int((~torch.isfinite(t)).sum())} non-finite "
            "value(s) (NaN or inf; with the lstsq model, squared features too): check the encoding's widths "
            "and the positions' domain"
        )


def _lstsq_weights(
    encoding: nn.Module, x: torch.Tensor, y: torch.Tensor, chunk_size: int, ridge: float, rcond: float
) -> torch.Tensor:
    """Least-squares ``[W; b]`` (float64) for ``[psi(x), 1] @ [W; b] ~ y``.

    Small problems go to LAPACK ``gelsd`` (SVD, minimum-norm); large ones to
    normal equations accumulated chunk by chunk and solved through an
    eigendecomposition with the same relative cut-off (a minimum-norm solution
    restricted to the well-conditioned subspace).
    """
    n, d = x.shape[0], encoding.out_dim + 1
    y64 = y.to(torch.float64)
    if n * d <= 2**24 and ridge == 0.0:
        with torch.no_grad():
            psi = torch.cat([f.to(torch.float64) for f in encoding.iter_chunks(x, chunk_size)], 0)
        _check_features(psi)
        a = torch.cat((psi, torch.ones(n, 1, dtype=torch.float64)), dim=1)
        return torch.linalg.lstsq(a, y64, rcond=rcond, driver="gelsd").solution
    gram = torch.zeros(d, d, dtype=torch.float64)
    rhs = torch.zeros(d, y.shape[1], dtype=torch.float64)
    start = 0
    with torch.no_grad():
        for feats in encoding.iter_chunks(x, chunk_size):
            a = torch.cat((feats.to(torch.float64), torch.ones(feats.shape[0], 1, dtype=torch.float64)), 1)
            gram += a.T @ a
            rhs += a.T @ y64[start : start + feats.shape[0]]
            start += feats.shape[0]
    _check_features(gram)
    evals, evecs = torch.linalg.eigh(gram)
    cutoff = max(rcond * float(evals[-1]), 0.0)
    shift = ridge * float(evals[-1])
    inv = torch.where(evals > cutoff, 1.0 / (evals + shift), torch.zeros_like(evals))
    return evecs @ (inv[:, None] * (evecs.T @ rhs))


def fit_coordinates(
    encoding: nn.Module,
    train_x: torch.Tensor,
    train_y: torch.Tensor,
    test_x: torch.Tensor | None = None,
    test_y: torch.Tensor | None = None,
    model: str = "linear",
    *,
    iters: int = 2000,
    lr: float = 1e-3,
    hidden: int = 256,
    depth: int = 4,
    ridge: float = 0.0,
    rcond: float | None = None,
    seed: int = 0,
    chunk_size: int = 16384,
    max_feature_bytes: int = 1 << 30,
    log_every: int = 50,
    predict_x: torch.Tensor | None = None,
    progress: ProgressFn | None = None,
) -> FitResult:
    """Fit ``y = model(encoding(x))`` on the training points and score both splits.

    Args:
        encoding: an encoding module (``(N, in_dim) -> (N, D)``).
        train_x, train_y: ``(N, in_dim)`` positions and ``(N,)`` or ``(N, C)`` values in ``[0, 1]``.
        test_x, test_y: held-out positions/values (optional, both or neither).
        model: ``"linear"``, ``"mlp"`` or ``"lstsq"``.
        iters, lr: full-batch Adam steps and learning rate (linear, mlp).
        hidden, depth: MLP width and number of hidden layers.
        ridge: Tikhonov weight relative to the largest eigenvalue (lstsq).
        rcond: singular-value cut-off relative to the largest (lstsq; default
            ``max(N, D) * eps(float64)``).
        seed: seeds the model's initialisation.
        chunk_size: positions encoded at once.
        max_feature_bytes: keep the training features in memory up to this size.
        log_every: record the training MSE every this many steps.
        predict_x: positions to predict after fitting (returned in ``predictions``).
        progress: ``progress(step, total)`` callback.

    Returns:
        A :class:`FitResult` (train/test MSE and PSNR, time, loss history).
    """
    check_choice("model", model, MODELS)
    check_tensor("train_x", train_x)
    check_tensor("train_y", train_y)
    if train_x.dim() != 2:
        raise ValueError(f"train_x must have shape (N, in_dim), got {tuple(train_x.shape)}")
    y = train_y[:, None] if train_y.dim() == 1 else train_y
    if y.dim() != 2 or y.shape[0] != train_x.shape[0]:
        raise ValueError(
            f"train_y must have shape ({train_x.shape[0]},) or ({train_x.shape[0]}, C), got {tuple(train_y.shape)}"
        )
    check_finite("train_y", y)
    if (test_x is None) != (test_y is None):
        raise ValueError("test_x and test_y must be given together")
    ty = None
    if test_y is not None:
        ty = test_y[:, None] if test_y.dim() == 1 else test_y
        if ty.shape[0] != test_x.shape[0] or ty.shape[1] != y.shape[1]:
            raise ValueError(f"test_y must have shape ({test_x.shape[0]}, {y.shape[1]}), got {tuple(test_y.shape)}")
        check_finite("test_y", ty)
    check_positive_int("iters", iters)
    check_positive_float("lr", lr)
    check_positive_float("ridge", ridge, allow_zero=True)
    check_positive_int("chunk_size", chunk_size)
    encoding.check_input(train_x)
    if model == "mlp":
        check_positive_int("hidden", hidden)
        check_positive_int("depth", depth, minimum=0)
    n_eval = (0 if test_x is None else test_x.shape[0]) + (0 if predict_x is None else predict_x.shape[0])
    # the CLI's estimate, from the sizes alone (before any feature is computed)
    check_footprint(fit_bytes(train_x.shape[0], n_eval, int(encoding.out_dim), y.shape[1], model, hidden=hidden,
                              depth=depth, chunk_size=chunk_size, max_feature_bytes=max_feature_bytes),
                    f"out_dim={encoding.out_dim}, len(train_x)={train_x.shape[0]}",
                    f"fit_coordinates ({model})")

    start = time.perf_counter()
    history: list[tuple[int, float]] = []
    n, d, c = train_x.shape[0], encoding.out_dim, y.shape[1]
    y32 = y.to(torch.float32)

    if model == "lstsq":
        rc = rcond if rcond is not None else max(n, d + 1) * torch.finfo(torch.float64).eps
        w = _lstsq_weights(encoding, train_x, y, chunk_size, ridge, rc)

        def head(feats: torch.Tensor) -> torch.Tensor:
            return feats.to(torch.float64) @ w[:-1] + w[-1]

        if progress is not None:
            progress(1, 1)
    else:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            net = nn.Linear(d, c) if model == "linear" else make_mlp(d, c, hidden, depth)
        opt = torch.optim.Adam(net.parameters(), lr=lr)
        cached = n * d * 4 <= max_feature_bytes
        feats = _features(encoding, train_x, chunk_size) if cached else None
        for step in range(1, iters + 1):
            opt.zero_grad(set_to_none=True)
            if cached:
                loss = (net(feats) - y32).pow(2).mean()
                loss.backward()
                value = float(loss.detach())
            else:
                value = 0.0
                for i, block in enumerate(encoding.iter_chunks(train_x, chunk_size)):
                    rows = slice(i * chunk_size, i * chunk_size + block.shape[0])
                    part = (net(block.detach().to(torch.float32)) - y32[rows]).pow(2).sum() / (n * c)
                    part.backward()
                    value += float(part.detach())
            opt.step()
            if step % log_every == 0 or step == 1 or step == iters:
                history.append((step, value))
            if progress is not None:
                progress(step, iters)
        del feats
        net.eval()

        def head(feats: torch.Tensor) -> torch.Tensor:
            return net(feats.to(torch.float32))

    train_pred = _predict(encoding, head, train_x, chunk_size)
    train_mse = mse(train_pred, y)
    test_mse = None
    if test_x is not None:
        test_mse = mse(_predict(encoding, head, test_x, chunk_size), ty)
    preds = None if predict_x is None else _predict(encoding, head, predict_x, chunk_size).to(torch.float64)
    return FitResult(
        model=model,
        train_mse=train_mse,
        train_psnr=psnr_from_mse(train_mse),
        test_mse=test_mse,
        test_psnr=None if test_mse is None else psnr_from_mse(test_mse),
        seconds=time.perf_counter() - start,
        history=history,
        predictions=preds,
    )
