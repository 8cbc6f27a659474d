"""Shared pieces of the ``search`` section: the digits splits, architecture keys, training loop."""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn


SEP = "|"
SPLITS = ("train", "val", "test")
#: the fewest paired seeds a verdict is read from
MIN_PAIRS = 3
# ------------------------------------------------------------------ data
def digits_splits(data_seed: int = 0, val_fraction: float = 0.2, test_fraction: float = 0.2,
                  dtype: torch.dtype = torch.float32) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """scikit-learn's ``load_digits`` split into train / validation / test by a seeded permutation.

    Args:
        data_seed: seed of the permutation; every job of the section uses the same one,
            so the stand-alone models, the supernets and the selections see the same splits.
        val_fraction, test_fraction: shares of the 1,797 images (their sum below 1).
        dtype: of the images.

    Returns:
        ``{"train": (x, y), "val": (x, y), "test": (x, y)}`` with ``x (n, 1, 8, 8)``
        in ``[0, 1]`` and ``y (n,)`` int64 labels 0..9; the three index sets are disjoint.
    """
    from sklearn.datasets import load_digits  # bundled with scikit-learn; no download

    for name, v in (("val_fraction", val_fraction), ("test_fraction", test_fraction)):
        if not isinstance(v, (int, float)) or not 0.0 < v < 1.0:
            raise ValueError(f"{name} must be in (0, 1), got {v!r}")
    if val_fraction + test_fraction >= 0.9:
        raise ValueError(f"val_fraction + test_fraction must leave a training split, got {val_fraction + test_fraction}")
    data = load_digits()
    x = torch.tensor(data.images, dtype=dtype)[:, None] / 16.0
    y = torch.tensor(data.target, dtype=torch.int64)
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(int(data_seed)))
    n_test = int(round(len(y) * test_fraction))
    n_val = int(round(len(y) * val_fraction))
    idx = {"test": perm[:n_test], "val": perm[n_test:n_test + n_val], "train": perm[n_test + n_val:]}
    return {k: (x[i], y[i]) for k, i in idx.items()}

def edge_names(num_nodes: int) -> list[str]:
    """Local edge names of the cell in order (``"1<-0", "2<-0", "2<-1"`` for 3 nodes)."""
    return [f"{j}<-{i}" for j in range(1, num_nodes) for i in range(j)]


def space_archs(ops: Sequence[str], num_nodes: int) -> list[str]:
    """Every architecture of the micro space as ``"op|op|op"``, first edge slowest."""
    return [SEP.join(c) for c in itertools.product(ops, repeat=len(edge_names(num_nodes)))]


def choices_of(arch: str, num_nodes: int) -> dict[str, str]:
    """``"skip|conv3x3|none"`` -> ``{"1<-0": "skip", "2<-0": "conv3x3", "2<-1": "none"}``."""
    ops = arch.split(SEP)
    names = edge_names(num_nodes)
    if len(ops) != len(names):
        raise ValueError(f"arch must name {len(names)} ops, got {arch!r}")
    return dict(zip(names, ops))


def arch_of(selection: Mapping[str, str], num_nodes: int, prefix: str = "cell.edges.") -> str:
    """The ``"op|op|op"`` key of a selection ``{qualified edge name: op}``."""
    return SEP.join(selection[prefix + e] for e in edge_names(num_nodes))


def plateaued(losses: Sequence[float], window: float = 0.25, tol: float = 0.05, atol: float = 0.01) -> bool:
    """Whether a per-epoch loss curve has flattened: the mean of its last ``window`` share of
    epochs is below the mean of the share before it by at most ``tol`` (relative) + ``atol``."""
    n = max(1, int(round(len(losses) * window)))
    if len(losses) < 2 * n:
        return False
    last, before = statistics.fmean(losses[-n:]), statistics.fmean(losses[-2 * n:-n])
    return before - last <= tol * abs(before) + atol


def fit(model: nn.Module, train: tuple[torch.Tensor, torch.Tensor], *, epochs: int, batch_size: int,
        lr: float, seed: int) -> list[float]:
    """Train a stand-alone network: Adam, cosine decay to 0, shuffled mini-batches.

    Returns the mean training loss of every epoch.
    """
    x, y = train
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    per_epoch = math.ceil(len(y) / batch_size)
    total, step, curve = epochs * per_epoch, 0, []
    model.train()
    for _ in range(epochs):
        perm = torch.randperm(len(y), generator=gen)
        acc = 0.0
        for start in range(0, len(y), batch_size):
            idx = perm[start:start + batch_size]
            for group in opt.param_groups:
                group["lr"] = 0.5 * lr * (1.0 + math.cos(math.pi * step / total))
            loss = F.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            acc += float(loss.detach()) * len(idx)
        curve.append(acc / len(y))
    return curve

VARIANTS = ("darts", "fixed")
def _epoch_means(per_step: Sequence[float], steps_per_epoch: int) -> list[float]:
    return [statistics.fmean(per_step[i:i + steps_per_epoch]) for i in range(0, len(per_step), steps_per_epoch)]
