"""Shared pieces of the ``search`` section: the digits splits, architecture keys, convergence."""

from __future__ import annotations

import contextlib
import statistics
from collections.abc import Iterator, Mapping, Sequence

import torch

SEP = "|"
#: the key of a pruned edge in an architecture string
PRUNED = "-"
SPLITS = ("train", "val", "test")
#: the fewest paired seeds a verdict is read from
MIN_PAIRS = 3
#: supernet variants: alpha trained (first-order DARTS) or fixed at its initial value
VARIANTS = ("darts", "fixed")


# ------------------------------------------------------------------ data
def digits_splits(data_seed: int = 0, val_fraction: float = 0.2, test_fraction: float = 0.2,
                  dtype: torch.dtype = torch.float32) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """scikit-learn's ``load_digits`` split into train / validation / test by a seeded permutation.

    Args:
        data_seed: seed of the permutation; every job of the section uses the same one,
            so the stand-alone models, the supernets and the selections see the same splits.
        val_fraction, test_fraction: shares of the 1,797 images (their sum below 0.9).
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


# ------------------------------------------------------------------ architectures
def arch_key(choices: Mapping[str, str], edges: Sequence[str], pruned: Sequence[str] = ()) -> str:
    """``"op|op|-|op"``: the op of every searchable edge in ``edges`` order (``-``: pruned)."""
    missing = [e for e in edges if e not in choices and e not in pruned]
    if missing:
        raise ValueError(f"choices must decide every edge: missing {missing}")
    return SEP.join(PRUNED if e in pruned else choices[e] for e in edges)


def arch_choices(arch: str, edges: Sequence[str]) -> dict[str, str]:
    """Inverse of :func:`arch_key`: ``{edge: op}`` of the kept edges."""
    ops = arch.split(SEP)
    if len(ops) != len(edges):
        raise ValueError(f"arch must name {len(edges)} ops, got {arch!r}")
    return {e: op for e, op in zip(edges, ops) if op != PRUNED}


def share(arch: str, ops: Sequence[str]) -> float:
    """Share of the kept edges of ``arch`` whose op is in ``ops``."""
    kept = [p for p in arch.split(SEP) if p != PRUNED]
    return sum(p in ops for p in kept) / len(kept) if kept else 0.0


# ------------------------------------------------------------------ convergence
def plateaued(losses: Sequence[float], window: float = 0.25, tol: float = 0.05, atol: float = 0.01) -> bool:
    """Whether a per-epoch loss curve has flattened: the mean of its last ``window`` share of
    epochs is below the mean of the share before it by at most ``tol`` (relative) + ``atol``."""
    n = max(1, int(round(len(losses) * window)))
    if len(losses) < 2 * n:
        return False
    last, before = statistics.fmean(losses[-n:]), statistics.fmean(losses[-2 * n:-n])
    return before - last <= tol * abs(before) + atol


def epoch_means(per_step: Sequence[float], steps_per_epoch: int) -> list[float]:
    """Mean of each epoch's steps."""
    return [statistics.fmean(per_step[i:i + steps_per_epoch]) for i in range(0, len(per_step), steps_per_epoch)]


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run the block with ``n`` torch threads (restored afterwards)."""
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)
