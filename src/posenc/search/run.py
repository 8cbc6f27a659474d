"""One search end to end: train a supernet, select an architecture, measure it.

``selector`` is ``'pt'`` (first-order DARTS, then perturbation-based selection;
DARTS+PT), ``'pt-fixed'`` (``alpha`` frozen at its near-uniform initial value, then
perturbation; "PT with fixed alpha") or ``'magnitude'`` (first-order DARTS, then the largest
``alpha``), the three selectors compared by DARTS-PT (Wang et al., ICLR 2021, Tables 1-3).
The selection runs as the authors' code runs it: the accuracy criterion on batches of 64
with batch statistics, tuning between decisions (:class:`~posenc.search.Finetune`:
``proj_intv`` epochs, one persistent SGD at a tenth of the supernet's learning rate,
``alpha`` updated for DARTS+PT), and in a DARTS space one normal and one reduction edge per
decision, topology selection after the operations, and no ``'none'`` in the derived cell.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Mapping
from typing import Any

from torch import nn

from posenc._checks import check_choice, check_positive_float, check_positive_int
from posenc.search.batches import Data
from posenc.search.selection import CRITERIA, TIES, Selection, magnitude_select, perturbation_select, topology_select
from posenc.search.batches import Batches
from posenc.search.supernet import OLD_NAMES, _check_seed, evaluate, mixed_ops, resolve_recipe, train_darts
from posenc.search.tuning import Finetune, tuning_epochs

__all__ = ["SELECTORS", "darts_pt", "derive_settings", "digits_splits", "run_search"]

#: Selectors of :func:`run_search` (and ``posenc search --selector``).
SELECTORS: tuple[str, ...] = ("pt", "pt-fixed", "magnitude")
_TRAIN_KEYS = ("batch_size", "lr", "lr_min", "a_lr", "optimizer", "momentum", "weight_decay",
               "a_weight_decay", "grad_clip", "loss_fn")


def _train_kwargs(train_kwargs: Mapping[str, Any] | None, where: str) -> dict[str, Any]:
    """``train_kwargs`` with the deprecated ``w_*`` names mapped to :func:`train_network`'s."""
    kw = dict(train_kwargs or {})
    if not isinstance(train_kwargs, (Mapping, type(None))):
        raise TypeError(f"train_kwargs must be a mapping of train_darts keywords, got {type(train_kwargs).__name__}")
    for old, new in OLD_NAMES.items():
        if old in kw:
            if new in kw:
                raise ValueError(f"train_kwargs gives both {new!r} and its deprecated name {old!r}")
            warnings.warn(f"{where}: train_kwargs[{old!r}] is deprecated; use {new!r} (train_network's name)",
                          DeprecationWarning, stacklevel=3)
            kw[new] = kw.pop(old)
    return kw


def derive_settings(model: nn.Module) -> dict[str, Any]:
    """How a supernet's architecture is derived, read from the model: ``groups`` (edges decided
    together, e.g. a normal and a reduction edge), ``nodes`` / ``node_groups`` (topology
    selection of DARTS cells, or None) and ``exclude`` (ops never kept, ``('none',)`` in DARTS
    cells). A model without ``decision_groups`` / ``node_inputs`` / ``derive_exclude`` gets
    one group of every edge, no topology selection and no exclusion."""
    groups = model.decision_groups() if hasattr(model, "decision_groups") else None
    nodes = model.node_inputs() if hasattr(model, "node_inputs") else None
    node_groups = model.node_groups() if hasattr(model, "node_groups") else None
    if nodes is not None and node_groups is not None:
        live = {n for g in node_groups for n in g}
        nodes = {n: e for n, e in nodes.items() if n in live} or None
        node_groups = node_groups if nodes else None
    exclude = tuple(getattr(model, "derive_exclude", ()))
    return {"groups": groups, "nodes": nodes, "node_groups": node_groups, "exclude": exclude}


def darts_pt(model: nn.Module, train: Data, val: Data, *, fixed_alpha: bool = False,
             a_optimizer: Any = None, proj_intv: int = 5, finetune_epochs: float | None = None,
             criterion: str = "accuracy", seed: int = 0, train_kwargs: Mapping[str, Any] | None = None,
             progress: Callable[[int, int, dict], None] | None = None,
             keep_none: bool = True, ties: str = "random") -> tuple[Selection, Selection | None]:
    """DARTS-PT's selection on a trained supernet, as the authors' code runs it; discretises
    (and prunes) ``model`` in place.

    ``keep_none=True`` (the default) scores every op of an edge, ``'none'`` included, as the
    authors' ``project_op`` does: in a space with ``'none'`` (RobustDARTS S3) an edge keeps
    ``'none'`` when no other op's removal lowers the validation accuracy, and that edge then
    stays zero in the supernet (the authors' genotype prints such an edge as
    ``skip_connect``; posenc reports ``'none'``). ``keep_none=False`` never keeps ``'none'``
    (the model's ``derive_exclude``, as DARTS's genotype and posenc's earlier default).

    Operation selection (:func:`~posenc.search.perturbation_select` over the model's
    :func:`derive_settings`: one edge of each group per step), then topology selection where the model has DARTS nodes, with the tuning of
    :class:`~posenc.search.Finetune` after each step: ``proj_intv`` epochs
    (:func:`~posenc.search.tuning_epochs`), one persistent SGD at ``lr / 10``, and
    ``alpha`` updated unless ``fixed_alpha``.

    Args:
        model: a trained supernet.
        train, val: as in :func:`run_search`.
        fixed_alpha: the fixed-alpha variant (no ``alpha`` steps while tuning).
        a_optimizer: the optimizer of ``alpha`` to continue (``train_darts``'s ``"a_optimizer"``).
        proj_intv, finetune_epochs, criterion, seed, progress: as in :func:`run_search`.
        train_kwargs: the supernet's :func:`~posenc.search.train_darts` keywords
            (:func:`~posenc.search.train_network`'s names; the former ``w_*`` names still work,
            with a ``DeprecationWarning``).
        ties: how equal scores are decided, in operation and topology selection alike (one of
            :data:`~posenc.search.TIES`): ``'random'`` (seeded) or ``'official'``, the authors' rule
            (the lowest op index; for topology, the last of the tied edges), which makes their
            decisions where scores tie.

    Returns:
        ``(operation selection, topology selection or None)``.
    """
    check_choice("criterion", criterion, CRITERIA)
    check_choice("ties", ties, TIES)
    check_positive_int("proj_intv", proj_intv)
    if finetune_epochs is not None:
        check_positive_float("finetune_epochs", finetune_epochs, allow_zero=True)
    kw = _train_kwargs(train_kwargs, "darts_pt")
    _check_seed(seed)
    edges = mixed_ops(model)
    train, val = Batches("train", train), Batches("val", val)
    recipe = resolve_recipe(edges, {k: kw.get(k) for k in ("lr", "momentum", "weight_decay", "a_lr")}, {},
                            where="darts_pt")
    how = derive_settings(model)
    groups = how["groups"] or [list(edges)]
    op_steps = max(len([e for e in g if edges[e].undecided]) for g in groups)
    topo_steps = max((len(g) for g in how["node_groups"] or []), default=0)
    if finetune_epochs is not None:
        schedule: float | list[int] = finetune_epochs
    else:
        schedule = tuning_epochs(max(1, op_steps + topo_steps), proj_intv,
                                 space="darts" if how["nodes"] else "nb201")
    bs = kw.get("batch_size", 64)
    tune = Finetune(train, val, epochs=schedule, lr=recipe["lr"] / 10,
                    momentum=recipe["momentum"], weight_decay=recipe["weight_decay"],
                    grad_clip=kw.get("grad_clip", 5.0), fixed_alpha=fixed_alpha,
                    a_lr=recipe["a_lr"] if recipe["a_lr"] is not None else 3e-4,
                    a_weight_decay=kw.get("a_weight_decay", 1e-3), a_optimizer=a_optimizer, batch_size=bs,
                    seed=(seed + 1) % 2**63, loss_fn=kw.get("loss_fn"))
    if not isinstance(keep_none, bool):
        raise TypeError(f"keep_none must be a bool, got {type(keep_none).__name__}")
    never = tuple(o for o in how["exclude"] if not (keep_none and o == "none"))
    sel = perturbation_select(model, val, criterion=criterion, finetune=tune, groups=how["groups"], seed=seed,
                              batch_size=bs, exclude=never, loss_fn=kw.get("loss_fn"), progress=progress, ties=ties)
    topo = None
    if how["nodes"]:
        topo = topology_select(model, val, how["nodes"], criterion=criterion, finetune=tune,
                               groups=how["node_groups"], seed=seed, batch_size=bs, loss_fn=kw.get("loss_fn"),
                               ties=ties)
    return sel, topo


def run_search(model: nn.Module, train: Data, val: Data, *, selector: str = "pt", steps: int | None = None,
               epochs: float | None = None, proj_intv: int = 5, finetune_epochs: float | None = None,
               criterion: str = "accuracy", seed: int = 0, train_kwargs: Mapping[str, Any] | None = None,
               progress: Callable[[str, int, int], None] | None = None) -> dict[str, Any]:
    """Train ``model`` as a supernet, select with ``selector``, and measure the result.

    The model is left discretised to the selected architecture (its weights inherited from
    the supernet and tuned between decisions).

    Args:
        model: a supernet (see :func:`~posenc.search.mixed_ops`), initialised by the caller.
        train, val: ``(inputs, targets)`` pairs or iterables of such batches: weights train
            on ``train``; ``alpha`` and the perturbation measurements use ``val``.
        selector: one of :data:`SELECTORS`.
        steps / epochs: supernet training length (exactly one).
        proj_intv: tuning epochs between two PT decisions (the authors' 5, scheduled as
            :func:`~posenc.search.tuning_epochs`).
        finetune_epochs: instead, this many tuning epochs after every decision (0: none).
        criterion: ``'accuracy'`` (the authors') or ``'loss'`` (perturbation selectors).
        seed: batch order, edge order and tie breaks.
        train_kwargs: more :func:`~posenc.search.train_darts` keywords (``batch_size``,
            ``lr``, ``a_lr``, ``optimizer``, ...); the tuning uses ``lr / 10`` and the
            same momentum, weight decay and clipping.
        progress: optional ``progress(stage, done, total)``; stages ``'supernet'`` and
            ``'select'``.

    Returns:
        a JSON-serialisable dict: ``selector``, ``choices``, ``pruned``, ``selection`` (the
        operation :class:`~posenc.search.Selection` as a dict) and ``topology`` (or None),
        ``supernet`` (``train_loss_first`` / ``train_loss_last`` averaged over the first /
        last 10 % of steps, ``val_loss``, ``val_accuracy``, ``alpha``), ``selected``
        (``val_loss``, ``val_accuracy`` of the discretised network) and ``seconds``
        (process CPU time per stage).
    """
    edges = mixed_ops(model)
    check_choice("selector", selector, SELECTORS)
    check_choice("criterion", criterion, CRITERIA)
    check_positive_int("proj_intv", proj_intv)
    if finetune_epochs is not None:
        check_positive_float("finetune_epochs", finetune_epochs, allow_zero=True)
    kw = _train_kwargs(train_kwargs, "run_search")
    for bad in ("steps", "epochs", "fixed_alpha", "progress", "seed", "a_optimizer"):
        if bad in kw:
            raise ValueError(f"train_kwargs must not set {bad!r}; it is an argument of run_search")
    unknown = [k for k in kw if k not in _TRAIN_KEYS]
    if unknown:
        raise ValueError(f"train_kwargs: unknown keywords {unknown}; known: {list(_TRAIN_KEYS)}")
    t0 = time.process_time()

    def supernet_progress(done: int, total: int, info: dict) -> None:
        if progress is not None:
            progress("supernet", done, total)

    fixed = selector == "pt-fixed"
    hist = train_darts(model, train, val, steps=steps, epochs=epochs, fixed_alpha=fixed, seed=seed,
                       progress=supernet_progress, **kw)
    a_opt = hist.pop("a_optimizer", None)
    bs = kw.get("batch_size", 64)
    val_loss, val_acc = evaluate(model, val, bs, bn="batch")
    t1 = time.process_time()
    topo = None
    if selector == "magnitude":
        how = derive_settings(model)
        sel = magnitude_select(model, seed=seed, exclude=how["exclude"], nodes=how["nodes"])
        if progress is not None:
            progress("select", len(edges), len(edges))
    else:
        sel, topo = darts_pt(model, train, val, fixed_alpha=fixed, a_optimizer=a_opt, proj_intv=proj_intv,
                             finetune_epochs=finetune_epochs, criterion=criterion, seed=seed, train_kwargs=kw,
                             progress=None if progress is None else lambda d, t, r: progress("select", d, t))
    sel_loss, sel_acc = evaluate(model, val, bs, bn="batch")
    t2 = time.process_time()
    n = len(hist["train_loss"])
    k = max(1, n // 10)

    def mean(v: list[float]) -> float | None:
        return sum(v) / len(v) if v else None

    pruned = [name for name, e in edges.items() if e.pruned]
    return {
        "selector": selector,
        "criterion": "alpha" if selector == "magnitude" else criterion,
        "choices": {name: e.chosen for name, e in edges.items() if not e.pruned},
        "pruned": pruned,
        "selection": sel.to_dict(),
        "topology": None if topo is None else topo.to_dict(),
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
