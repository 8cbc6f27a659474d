"""The jobs of the ``search`` section: supernets of stacked cells, their selections, and
stand-alone (re)training of the architectures they pick.

A supernet job trains one supernet (``alpha`` trained by first-order DARTS, or fixed at its
initial value), reads magnitude's pick off ``alpha`` at several epochs (DARTS's genotype:
largest ``alpha``, two inputs per DARTS node, no ``'none'``), runs DARTS-PT's selection at
the end as the authors' code runs it, and **retrains every pick from scratch** with one
recipe and one seed for all selectors, so that the outcome of two selectors on one supernet
seed differs only by the architecture they picked. A ground-truth job trains every
architecture of an enumerable space with the same recipe.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from posenc.experiments.search._common import (
    SPLITS,
    VARIANTS,
    arch_choices,
    arch_key,
    digits_splits,
    epoch_means,
    plateaued,
    share,
    torch_threads,
)

#: the seed offset of stand-alone (re)training: every selector's pick of supernet seed ``s``
#: is retrained from the same initial draw, ``RETRAIN_SEED + s``
RETRAIN_SEED = 1000


@dataclass(frozen=True)
class SpaceConfig:
    """A built-in convolutional space at digits scale (:func:`posenc.search.build_space`)."""

    space: str = "nb201"
    ops: tuple[str, ...] | None = ("skip", "conv3x3")
    num_cells: int = 3
    num_nodes: int = 3
    channels: int = 8

    def build(self, choices: Mapping[str, str] | None = None, standalone: bool = False) -> nn.Module:
        """The supernet, or with ``choices`` the stand-alone network (affine BatchNorm with
        running statistics, as a network trained on its own normally has)."""
        from posenc.search import build_space

        kw: dict[str, Any] = {"channels": self.channels, "num_nodes": self.num_nodes}
        if self.ops is not None:
            kw["ops"] = self.ops
        if standalone:
            kw.update(affine=True, track_running_stats=True)
        return build_space(self.space, choices=choices, num_cells=self.num_cells, **kw)


def _space_fields(cfg: Any) -> SpaceConfig:
    return SpaceConfig(cfg.space, cfg.ops, cfg.num_cells, cfg.num_nodes, cfg.channels)


@dataclass(frozen=True)
class RetrainConfig:
    """One recipe for every stand-alone network: SGD (0.025, momentum 0.9, weight decay 3e-4,
    clipping 5, cosine to 0.001, batches of 64) on the training and validation splits,
    tested on the test split."""

    epochs: int = 20
    lr: float = 0.025
    batch_size: int = 64
    fit_at: float = 0.95


def retrain(space: SpaceConfig, arch: str, edges: Sequence[str], recipe: RetrainConfig, seed: int,
            data: Mapping[str, tuple[torch.Tensor, torch.Tensor]]) -> dict:
    """Train architecture ``arch`` from scratch (initial draw ``seed``); its accuracies."""
    from posenc.search import evaluate, train_network

    torch.manual_seed(seed)
    net = space.build(arch_choices(arch, edges), standalone=True)
    x = torch.cat([data["train"][0], data["val"][0]])
    y = torch.cat([data["train"][1], data["val"][1]])
    hist = train_network(net, (x, y), epochs=recipe.epochs, batch_size=recipe.batch_size, lr=recipe.lr, seed=seed)
    curve = epoch_means(hist["train_loss"], math.ceil(len(y) / recipe.batch_size))
    fit = evaluate(net, (x, y))[1]
    test = evaluate(net, data["test"])[1]
    return {"arch": arch, "test_acc": test, "train_acc": fit, "loss_curve": curve,
            "converged": fit >= recipe.fit_at or plateaued(curve)}


@dataclass(frozen=True)
class SupernetConfig:
    """Train one supernet, select by magnitude (along training) and by DARTS-PT (at the end),
    retrain the picks (``subset > 0``: the first ``subset`` images of each split, for tests).

    ``variant="darts"``: first-order DARTS (``alpha`` trained on the validation split), then
    magnitude at every epoch of ``checkpoints`` and DARTS+PT at the last epoch;
    ``"fixed"``: ``alpha`` fixed, then PT with fixed ``alpha``. PT runs as the authors' code:
    accuracy criterion, batches of 64 with batch statistics, ``proj_intv`` tuning epochs
    between decisions (one persistent SGD at ``w_lr / 10``, ``alpha`` updated for DARTS+PT).
    ``alpha``'s Adam runs at ``a_lr`` (3e-3, ten times DARTS's: an epoch of digits is 17
    steps where one of CIFAR-10 is ~390).
    """

    space: str = "nb201"
    ops: tuple[str, ...] | None = ("skip", "conv3x3")
    num_cells: int = 3
    num_nodes: int = 3
    channels: int = 8
    variant: str = "darts"
    seed: int = 0
    data_seed: int = 0
    epochs: int = 30
    checkpoints: tuple[int, ...] = (5, 10, 20, 30)
    batch_size: int = 64
    w_lr: float = 0.025
    a_lr: float = 3e-3
    proj_intv: int = 5
    criterion: str = "accuracy"
    keep_none: bool = True  # PT may keep 'none' (the authors' project_op); False: never (posenc's earlier default)
    retrain: RetrainConfig = field(default_factory=RetrainConfig)
    fit_at: float = 0.95
    subset: int = 0
    threads: int = 1


def _data(data_seed: int, subset: int) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """The digits splits; ``subset > 0`` keeps the first ``subset`` images of each (for tests)."""
    data = digits_splits(data_seed)
    if subset:
        data = {k: (x[:subset], y[:subset]) for k, (x, y) in data.items()}
    return data


def run_supernet(cfg: SupernetConfig) -> dict:
    """One supernet seed: training, magnitude along training, DARTS-PT at the end, retraining."""
    from posenc.search import PARAMETER_FREE, darts_pt, derive_settings, evaluate, magnitude_select, mixed_ops, train_darts

    if cfg.variant not in VARIANTS:
        raise ValueError(f"variant must be one of {', '.join(VARIANTS)}, got {cfg.variant!r}")
    if not cfg.checkpoints or any(not 0 < c <= cfg.epochs for c in cfg.checkpoints) \
            or list(cfg.checkpoints) != sorted(set(cfg.checkpoints)) or cfg.checkpoints[-1] != cfg.epochs:
        raise ValueError(f"checkpoints must be increasing epochs in 1..epochs={cfg.epochs} ending at epochs, "
                         f"got {cfg.checkpoints}")
    space = _space_fields(cfg)
    cpu0 = time.process_time()
    with torch_threads(cfg.threads):
        data = _data(cfg.data_seed, cfg.subset)
        torch.manual_seed(cfg.seed)
        net = space.build()
        edges = list(mixed_ops(net))
        how = derive_settings(net)
        fixed = cfg.variant == "fixed"
        per_epoch = math.ceil(len(data["train"][1]) / cfg.batch_size)
        magnitude: dict[int, dict] = {}

        def pick(step: int, total: int, info: dict) -> None:
            if fixed or step % per_epoch or step // per_epoch not in cfg.checkpoints:
                return
            sel = magnitude_select(net, apply=False, seed=cfg.seed, exclude=how["exclude"], nodes=how["nodes"])
            arch = arch_key(sel.choices, edges, sel.pruned)
            magnitude[step // per_epoch] = {"arch": arch, "param_free": share(arch, PARAMETER_FREE)}

        kw = {"batch_size": cfg.batch_size, "lr": cfg.w_lr, "a_lr": cfg.a_lr}
        hist = train_darts(net, data["train"], data["val"], epochs=cfg.epochs, fixed_alpha=fixed, seed=cfg.seed,
                           progress=pick, **kw)
        a_opt = hist.pop("a_optimizer")
        curve = epoch_means(hist["train_loss"], per_epoch)
        acc = {split: evaluate(net, data[split], bn="batch")[1] for split in SPLITS}
        alpha = {e: [round(w, 5) for w in ws] for e, ws in hist["alpha"].items()}
        sel, topo = darts_pt(net, data["train"], data["val"], fixed_alpha=fixed, a_optimizer=a_opt,
                             keep_none=cfg.keep_none,
                             proj_intv=cfg.proj_intv, criterion=cfg.criterion, seed=cfg.seed, train_kwargs=kw)
        pruned = topo.pruned if topo is not None else []
        pt_arch = arch_key(sel.choices, edges, pruned)
        picks = {"pt_fixed" if fixed else "pt": pt_arch}
        if not fixed:
            picks["magnitude"] = magnitude[cfg.epochs]["arch"]
        retrained: dict[str, dict] = {}
        for arch in dict.fromkeys(picks.values()):
            if cfg.retrain.epochs > 0:
                retrained[arch] = retrain(space, arch, edges, cfg.retrain, RETRAIN_SEED + cfg.seed, data)
        return {
            "kind": "super", "space": cfg.space, "variant": cfg.variant, "seed": cfg.seed, "edges": edges,
            "ops": {e: list(o) for e, o in zip(edges, (mixed_ops(net)[e].names for e in edges))},
            "train_loss_curve": curve, "train_acc": acc["train"], "val_acc": acc["val"], "test_acc": acc["test"],
            "plateaued": plateaued(curve), "fits": acc["train"] >= cfg.fit_at,
            "converged": acc["train"] >= cfg.fit_at or plateaued(curve), "alpha": alpha,
            "magnitude": {str(k): v for k, v in sorted(magnitude.items())},
            "picks": picks, "param_free": {k: share(a, PARAMETER_FREE) for k, a in picks.items()},
            "pt_decisions": [{k: d[k] for k in ("edge", "scores", "base", "chosen", "step")} for d in sel.decisions],
            "pt_pruned": pruned, "pt_final_val_acc": evaluate(net, data["val"], bn="batch")[1],
            "retrained": {k: retrained.get(a) for k, a in picks.items()},
            "cpu_s": time.process_time() - cpu0,
        }


@dataclass(frozen=True)
class GroundTruthConfig:
    """Train a batch of architectures of an enumerable space alone, with the retraining recipe."""

    space: str = "nb201"
    ops: tuple[str, ...] | None = ("skip", "conv3x3")
    num_cells: int = 3
    num_nodes: int = 3
    channels: int = 8
    archs: tuple[str, ...] = ("conv3x3|conv3x3|conv3x3",)
    seed: int = 0
    data_seed: int = 0
    retrain: RetrainConfig = field(default_factory=RetrainConfig)
    subset: int = 0
    threads: int = 1


def space_archs(cfg: Any) -> tuple[list[str], list[str]]:
    """``(edges, every architecture key)`` of an NB201-type space (DARTS spaces with topology
    selection are not enumerated here)."""
    import itertools

    from posenc.search import mixed_ops

    space = _space_fields(cfg)
    if space.space not in ("nb201", "nb201-micro"):
        raise ValueError(f"only NB201 spaces are enumerated, got {space.space!r}")
    net = space.build()
    sp = {e: m.names for e, m in mixed_ops(net).items()}
    edges = list(sp)
    return edges, ["|".join(c) for c in itertools.product(*(sp[e] for e in edges))]


def run_ground_truth(cfg: GroundTruthConfig) -> dict:
    """Train every architecture of ``cfg.archs`` alone (initial draw ``RETRAIN_SEED + seed``)."""
    if not cfg.archs:
        raise ValueError("archs must name at least one architecture")
    edges, every = space_archs(cfg)
    bad = [a for a in cfg.archs if a not in every]
    if bad:
        raise ValueError(f"archs: {bad} are not architectures of the space (edges {edges})")
    cpu0 = time.process_time()
    with torch_threads(cfg.threads):
        data = _data(cfg.data_seed, cfg.subset)
        rows = [retrain(_space_fields(cfg), a, edges, cfg.retrain, RETRAIN_SEED + cfg.seed, data) for a in cfg.archs]
    return {"kind": "gt", "space": cfg.space, "seed": cfg.seed, "edges": edges, "archs": rows,
            "cpu_s": time.process_time() - cpu0}


# ------------------------------------------------------------------ result schemas
# the types the summary reads from each job's stored result (posenc.report.schema's spec language)
NUM = (float, None)  # a number, or null (a non-finite value is stored as null)
run_supernet.result_schema = {  # type: ignore[attr-defined]
    "kind": str, "space": str, "variant": str, "seed": int, "edges": [str], "ops": {str: [str]},
    "train_loss_curve": [NUM], "train_acc": NUM, "val_acc": NUM, "converged": bool, "alpha": {str: [NUM]},
    "magnitude": {str: {"arch": str, "param_free": NUM}}, "picks": {str: str}, "param_free": {str: NUM},
    "retrained": {str: (None, {"arch": str, "test_acc": NUM, "converged": bool})}, "cpu_s": NUM,
}
run_ground_truth.result_schema = {  # type: ignore[attr-defined]
    "kind": str, "space": str, "seed": int, "edges": [str],
    "archs": [{"arch": str, "test_acc": NUM, "converged": bool}], "cpu_s": NUM,
}
