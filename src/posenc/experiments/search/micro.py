"""The micro NB-201 space of the ``search`` section: stand-alone ground truth and supernet selections."""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from posenc.experiments.search._common import (
    SPLITS,
    VARIANTS,
    _epoch_means,
    arch_of,
    choices_of,
    digits_splits,
    edge_names,
    fit,
    plateaued,
    space_archs,
)


# ------------------------------------------------------------------ the micro space
class DigitsCellNet(nn.Module):
    """Stem -> one NB-201 cell -> ``pool x pool`` average pool -> linear, for 8x8 digits.

    The cell is :class:`posenc.search.NB201Cell` (a :class:`~posenc.search.MixedOp` per edge,
    or plain ops given ``choices``). Close to ``NB201MicroNet(pool=2)`` but, by default, without
    the BN-ReLU before the pool (``head_bn=False``): the setting of our pilot on digits, kept so
    that every ground truth of the section was trained by the same network.

    Args:
        channels: cell width ``C``.
        ops: candidate ops of every edge.
        num_nodes: nodes per cell (3: three edges).
        pool: side of the pooled map fed to the classifier.
        choices: ``{local edge name ("2<-1"): op}`` for a stand-alone network, or ``None``.
        num_classes: logits.
        head_bn: BN-ReLU before the pool (as ``NB201MicroNet``).

    Shapes: ``(B, 1, H, W) -> (B, num_classes)``.
    """

    def __init__(self, channels: int, ops: Sequence[str], *, num_nodes: int = 3, pool: int = 2,
                 choices: Mapping[str, str] | None = None, num_classes: int = 10, head_bn: bool = False) -> None:
        super().__init__()
        from posenc.search import NB201Cell

        self.stem = nn.Sequential(nn.Conv2d(1, channels, 3, padding=1, bias=False),
                                  nn.BatchNorm2d(channels, track_running_stats=False))
        self.cell = NB201Cell(channels, ops, num_nodes=num_nodes, choices=choices)
        self.head_bn = nn.BatchNorm2d(channels, track_running_stats=False) if head_bn else None
        self.pool = pool
        self.classifier = nn.Linear(channels * pool * pool, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.cell(self.stem(x))
        if self.head_bn is not None:
            h = torch.relu(self.head_bn(h))
        return self.classifier(F.adaptive_avg_pool2d(h, self.pool).flatten(1))

    def extra_repr(self) -> str:
        return f"pool={self.pool}"

@dataclass(frozen=True)
class GroundTruthConfig:
    """Train a batch of architectures of the micro space stand-alone, one seed."""

    archs: tuple[str, ...] = ("conv3x3|skip|conv3x3",)
    seed: int = 0
    ops: tuple[str, ...] = ("none", "skip", "conv3x3")
    num_nodes: int = 3
    channels: int = 8
    pool: int = 2
    data_seed: int = 0
    epochs: int = 10
    batch_size: int = 128
    lr: float = 0.02
    fit_at: float = 0.95  # training accuracy that counts as fitting the data
    threads: int = 1


def run_ground_truth(cfg: GroundTruthConfig) -> dict:
    """Train every architecture of ``cfg.archs`` alone; validation and test accuracy of each."""
    from posenc.search import evaluate

    if not cfg.archs:
        raise ValueError("archs must name at least one architecture")
    old = torch.get_num_threads()
    torch.set_num_threads(cfg.threads)
    try:
        data = digits_splits(cfg.data_seed)
        rows = []
        for k, arch in enumerate(cfg.archs):
            choices = choices_of(arch, cfg.num_nodes)
            for op in choices.values():
                if op not in cfg.ops:
                    raise ValueError(f"archs: op {op!r} of {arch!r} is not one of ops {cfg.ops}")
            torch.manual_seed(cfg.seed * 100_003 + space_archs(cfg.ops, cfg.num_nodes).index(arch))
            net = DigitsCellNet(cfg.channels, cfg.ops, num_nodes=cfg.num_nodes, pool=cfg.pool, choices=choices)
            curve = fit(net, data["train"], epochs=cfg.epochs, batch_size=cfg.batch_size, lr=cfg.lr, seed=cfg.seed)
            acc = {split: evaluate(net, data[split])[1] for split in SPLITS}
            rows.append({"arch": arch, "train_acc": acc["train"], "val_acc": acc["val"], "test_acc": acc["test"],
                         "final_loss": curve[-1], "loss_curve": curve, "plateaued": plateaued(curve),
                         "fits": acc["train"] >= cfg.fit_at,
                         # optimisation reached its end state: it fits the data or its loss stopped falling
                         "converged": acc["train"] >= cfg.fit_at or plateaued(curve)})
        return {"kind": "gt", "seed": cfg.seed,
                "space": {"ops": list(cfg.ops), "edges": edge_names(cfg.num_nodes), "channels": cfg.channels},
                "archs": rows}
    finally:
        torch.set_num_threads(old)

@dataclass(frozen=True)
class SupernetConfig:
    """Train one supernet of the micro space and select architectures from it at several epochs.

    ``variant="darts"``: first-order DARTS (α trained on the validation split);
    ``"fixed"``: α frozen at uniform (DARTS-PT's "PT with fixed α"). At each epoch of
    ``checkpoints`` a copy of the supernet is taken; afterwards each copy is discretised by
    magnitude (``darts`` only) and, on another copy, by perturbation (edge order and ties
    from ``seed``), fine-tuning ``finetune_epochs`` after each decision.
    """

    variant: str = "darts"
    seed: int = 0
    ops: tuple[str, ...] = ("none", "skip", "conv3x3")
    num_nodes: int = 3
    channels: int = 8
    pool: int = 2
    data_seed: int = 0
    epochs: int = 10
    checkpoints: tuple[int, ...] = (2, 5, 10)
    batch_size: int = 64
    w_lr: float = 0.05
    a_lr: float = 3e-3
    criterion: str = "loss"
    finetune_epochs: float = 1.0
    finetune_lr: float = 0.01
    fit_at: float = 0.95
    threads: int = 1

def run_supernet(cfg: SupernetConfig) -> dict:
    """Train a supernet; at each checkpoint select by magnitude and by perturbation (on copies)."""
    from posenc.search import evaluate, magnitude_select, make_finetune, perturbation_select, train_darts

    if cfg.variant not in VARIANTS:
        raise ValueError(f"variant must be one of {', '.join(VARIANTS)}, got {cfg.variant!r}")
    if not cfg.checkpoints or any(not 0 < c <= cfg.epochs for c in cfg.checkpoints) \
            or list(cfg.checkpoints) != sorted(set(cfg.checkpoints)):
        raise ValueError(f"checkpoints must be increasing epochs in 1..epochs={cfg.epochs}, got {cfg.checkpoints}")
    old = torch.get_num_threads()
    torch.set_num_threads(cfg.threads)
    try:
        data = digits_splits(cfg.data_seed)
        torch.manual_seed(cfg.seed)
        net = DigitsCellNet(cfg.channels, cfg.ops, num_nodes=cfg.num_nodes, pool=cfg.pool)
        fixed = cfg.variant == "fixed"
        per_epoch = math.ceil(len(data["train"][1]) / cfg.batch_size)
        snapshots: dict[int, nn.Module] = {}

        def snapshot(step: int, total: int, info: dict) -> None:
            if step % per_epoch == 0 and step // per_epoch in cfg.checkpoints:
                snap = copy.deepcopy(net)
                for p in snap.parameters():
                    p.grad = None
                    p.requires_grad_(True)
                snapshots[step // per_epoch] = snap

        hist = train_darts(net, data["train"], data["val"], epochs=cfg.epochs, batch_size=cfg.batch_size,
                           w_lr=cfg.w_lr, a_lr=cfg.a_lr, fixed_alpha=fixed, seed=cfg.seed, progress=snapshot)
        curve = _epoch_means(hist["train_loss"], per_epoch)
        acc = {split: evaluate(net, data[split])[1] for split in SPLITS}
        gen = torch.Generator().manual_seed(cfg.seed)
        checkpoints = []
        for epoch in cfg.checkpoints:
            snap = snapshots[epoch]
            alpha = {e: torch.softmax(m.alpha.detach(), 0).tolist() for e, m in _edges(snap).items()}
            row = {"epoch": epoch, "alpha": alpha, "val_acc": evaluate(snap, data["val"])[1]}
            if not fixed:
                mag = copy.deepcopy(snap)
                row["magnitude"] = arch_of(magnitude_select(mag, seed=cfg.seed).choices, cfg.num_nodes)
            order = [f"cell.edges.{e}" for e in edge_names(cfg.num_nodes)]
            order = [order[i] for i in torch.randperm(len(order), generator=gen).tolist()]
            tune = make_finetune(data["train"], data["val"], epochs=cfg.finetune_epochs, batch_size=cfg.batch_size,
                                 w_lr=cfg.finetune_lr, fixed_alpha=True, seed=cfg.seed * 1000 + epoch)
            sel = perturbation_select(snap, data["val"], criterion=cfg.criterion, finetune=tune, order=order,
                                      seed=cfg.seed)
            row["pt"] = arch_of(sel.choices, cfg.num_nodes)
            row["pt_decisions"] = [{"edge": d["edge"].removeprefix("cell.edges."), "scores": d["scores"],
                                    "base": d["base"], "chosen": d["chosen"]} for d in sel.decisions]
            row["pt_final_val_acc"] = evaluate(snap, data["val"])[1]
            checkpoints.append(row)
        return {"kind": "super", "variant": cfg.variant, "seed": cfg.seed,
                "train_loss_curve": curve, "train_acc": acc["train"], "val_acc": acc["val"], "test_acc": acc["test"],
                "plateaued": plateaued(curve), "fits": acc["train"] >= cfg.fit_at,
                "converged": acc["train"] >= cfg.fit_at or plateaued(curve),
                "alpha": hist["alpha"], "checkpoints": checkpoints}
    finally:
        torch.set_num_threads(old)


def _edges(model: nn.Module) -> dict[str, nn.Module]:
    from posenc.search import mixed_ops

    return {name.removeprefix("cell.edges."): m for name, m in mixed_ops(model).items()}
