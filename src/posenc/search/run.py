"""One search end to end: train a supernet, select an architecture, measure it.

``selector`` is ``'pt'`` (first-order DARTS, then perturbation-based selection;
DARTS+PT), ``'pt-fixed'`` (``alpha`` frozen at uniform, then perturbation; "PT with fixed
alpha") or ``'magnitude'`` (first-order DARTS, then the largest ``alpha``), the three
selectors compared by DARTS-PT (Wang et al., ICLR 2021, Tables 1-3).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from torch import nn

from posenc._checks import check_choice, check_positive_float
from posenc.search.selection import CRITERIA, magnitude_select, perturbation_select
from posenc.search.supernet import Data, check_data, evaluate, make_finetune, mixed_ops, train_darts

__all__ = ["SELECTORS", "digits_splits", "run_search"]

#: Selectors of :func:`run_search` (and ``posenc search --selector``).
SELECTORS: tuple[str, ...] = ("pt", "pt-fixed", "magnitude")


def run_search(model: nn.Module, train: Data, val: Data, *, selector: str = "pt", steps: int | None = None,
               epochs: float | None = None, finetune_epochs: float = 0.0, criterion: str = "loss", seed: int = 0,
               train_kwargs: Mapping[str, Any] | None = None,
               progress: Callable[[str, int, int], None] | None = None) -> dict[str, Any]:
    """Train ``model`` as a supernet, select with ``selector``, and measure the result.

    The model is left discretised to the selected architecture (its weights inherited from
    the supernet, fine-tuned between decisions when ``finetune_epochs > 0``).

    Args:
        model: a supernet (see :func:`~posenc.search.mixed_ops`), initialised by the caller.
        train, val: ``(inputs, targets)``: weights train on ``train``; ``alpha`` and the
            perturbation measurements use ``val``.
        selector: one of :data:`SELECTORS`.
        steps / epochs: supernet training length (exactly one).
        finetune_epochs: weight-only fine-tuning after each perturbation decision (>= 0;
            magnitude selection makes no sequential decisions and is not fine-tuned).
        criterion: ``'loss'`` or ``'accuracy'`` (perturbation selectors).
        seed: batch order, edge order and tie breaks.
        train_kwargs: more :func:`~posenc.search.train_darts` keywords (``batch_size``,
            ``w_lr``, ``a_lr``, ``w_optimizer``, ...).
        progress: optional ``progress(stage, done, total)``; stages ``'supernet'`` and
            ``'select'``.

    Returns:
        a JSON-serialisable dict: ``selector``, ``choices``, ``selection`` (the
        :class:`~posenc.search.Selection` as a dict), ``supernet`` (``train_loss_first`` /
        ``train_loss_last`` averaged over the first/last 10 % of steps, ``val_loss``,
        ``val_accuracy``, ``alpha``), ``selected`` (``val_loss``, ``val_accuracy`` of the
        discretised network) and ``seconds`` (process CPU time per stage).
    """
    edges = mixed_ops(model)
    check_choice("selector", selector, SELECTORS)
    check_choice("criterion", criterion, CRITERIA)
    train = check_data("train", train)
    val = check_data("val", val)
    check_positive_float("finetune_epochs", finetune_epochs, allow_zero=True)
    kw = dict(train_kwargs or {})
    for bad in ("steps", "epochs", "fixed_alpha", "progress", "seed"):
        if bad in kw:
            raise ValueError(f"train_kwargs must not set {bad!r}; it is an argument of run_search")
    t0 = time.process_time()

    def supernet_progress(done: int, total: int, info: dict) -> None:
        if progress is not None:
            progress("supernet", done, total)

    hist = train_darts(model, train, val, steps=steps, epochs=epochs, fixed_alpha=selector == "pt-fixed", seed=seed,
                       progress=supernet_progress, **kw)
    val_loss, val_acc = evaluate(model, val)
    t1 = time.process_time()
    if selector == "magnitude":
        sel = magnitude_select(model, seed=seed)
        if progress is not None:
            progress("select", len(edges), len(edges))
    else:
        finetune = None
        if finetune_epochs > 0:
            ft_kw = {k: v for k, v in kw.items() if k != "a_lr"}
            finetune = make_finetune(train, val, epochs=finetune_epochs, fixed_alpha=True, seed=seed + 1, **ft_kw)
        sel = perturbation_select(model, val, criterion=criterion, finetune=finetune, seed=seed,
                                  progress=None if progress is None else lambda d, t, r: progress("select", d, t))
    sel_loss, sel_acc = evaluate(model, val)
    t2 = time.process_time()
    n = len(hist["train_loss"])
    k = max(1, n // 10)

    def mean(v: list[float]) -> float | None:
        return sum(v) / len(v) if v else None

    return {
        "selector": selector,
        "criterion": "alpha" if selector == "magnitude" else criterion,
        "choices": dict(sel.choices),
        "selection": sel.to_dict(),
        "supernet": {"steps": hist["steps"], "train_loss_first": mean(hist["train_loss"][:k]),
                     "train_loss_last": mean(hist["train_loss"][-k:]), "val_loss": val_loss,
                     "val_accuracy": val_acc, "alpha": hist["alpha"]},
        "selected": {"val_loss": sel_loss, "val_accuracy": sel_acc},
        "seconds": {"supernet": t1 - t0, "select": t2 - t1},
    }


def digits_splits(val_fraction: float = 0.5, seed: int = 0) -> dict[str, Data]:
    """``load_digits`` 8x8 images as ``{"train", "val", "test"}`` ``(inputs, targets)`` pairs.

    The test quarter of :func:`posenc.data.grid_tasks.digits_images` (split seed 0) is
    ``test``; the rest is split by a seeded permutation into ``train`` and ``val``
    (``val_fraction`` of it). Needs scikit-learn.
    """
    import torch

    from posenc.data.grid_tasks import digits_images

    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
    d = digits_images(upsample=1, seed=0)
    x, y = d["x_train"], d["y_train"]
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    n_val = int(round(len(y) * val_fraction))
    return {"train": (x[perm[n_val:]], y[perm[n_val:]]), "val": (x[perm[:n_val]], y[perm[:n_val]]),
            "test": (d["x_test"], d["y_test"])}
