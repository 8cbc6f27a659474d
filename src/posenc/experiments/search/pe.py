"""The positional-encoding space of the ``search`` section (PESearchNet on 8x8 digits)."""

from __future__ import annotations

import copy
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from posenc.experiments.search._common import (
    SEP,
    SPLITS,
    VARIANTS,
    _epoch_means,
    digits_splits,
    fit,
    plateaued,
)


# ------------------------------------------------------------------ the positional-encoding space
def pe_edges(depth: int) -> list[str]:
    """Edges of :class:`posenc.search.PESearchNet`: ``"encoding"``, then ``"blocks.<i>.attn"``."""
    return ["encoding", *[f"blocks.{i}.attn" for i in range(depth)]]


def pe_archs(encodings: Sequence[str], attention: Sequence[str], depth: int) -> list[str]:
    """Every architecture of the PE space as ``"encoding|attn_0|...|attn_{depth-1}"``."""
    return [SEP.join(c) for c in itertools.product(encodings, *[attention] * depth)]


@dataclass(frozen=True)
class PEAloneConfig:
    """Train one architecture of the positional-encoding space alone (ViT on 8x8 digits)."""

    arch: str = "learned_table|plain|plain"
    seed: int = 0
    encodings: tuple[str, ...] = ("none", "sinusoidal", "learned_table", "lff")
    attention: tuple[str, ...] = ("plain",)
    depth: int = 2
    dim: int = 32
    heads: int = 4
    patch_size: int = 2
    data_seed: int = 0
    epochs: int = 20
    batch_size: int = 64
    lr: float = 1e-2
    fit_at: float = 0.95
    threads: int = 1


def _pe_net(cfg, choices: Mapping[str, str] | None = None) -> nn.Module:
    from posenc.search import PESearchNet

    return PESearchNet(8, 10, patch_size=cfg.patch_size, dim=cfg.dim, depth=cfg.depth, num_heads=cfg.heads,
                       encodings=cfg.encodings, attention=cfg.attention, choices=choices, seed=cfg.seed)


def run_pe_alone(cfg: PEAloneConfig) -> dict:
    """Train the stand-alone network of ``cfg.arch``; its validation and test accuracy."""
    from posenc.search import evaluate

    ops = cfg.arch.split(SEP)
    edges = pe_edges(cfg.depth)
    if len(ops) != len(edges):
        raise ValueError(f"arch must name {len(edges)} ops (encoding, then one attention term per block), "
                         f"got {cfg.arch!r}")
    old = torch.get_num_threads()
    torch.set_num_threads(cfg.threads)
    try:
        data = digits_splits(cfg.data_seed)
        torch.manual_seed(cfg.seed)
        net = _pe_net(cfg, dict(zip(edges, ops)))
        curve = fit(net, data["train"], epochs=cfg.epochs, batch_size=cfg.batch_size, lr=cfg.lr, seed=cfg.seed)
        acc = {split: evaluate(net, data[split])[1] for split in SPLITS}
        return {"kind": "pe_gt", "seed": cfg.seed, "space": {"edges": edges, "encodings": list(cfg.encodings),
                                                             "attention": list(cfg.attention)},
                "archs": [{"arch": cfg.arch, "train_acc": acc["train"], "val_acc": acc["val"],
                           "test_acc": acc["test"], "loss_curve": curve, "plateaued": plateaued(curve),
                           "fits": acc["train"] >= cfg.fit_at,
                           "converged": acc["train"] >= cfg.fit_at or plateaued(curve)}]}
    finally:
        torch.set_num_threads(old)


@dataclass(frozen=True)
class PESearchConfig:
    """Search the positional-encoding space: a supernet, then magnitude and perturbation selection."""

    variant: str = "darts"
    seed: int = 0
    encodings: tuple[str, ...] = ("none", "sinusoidal", "learned_table", "lff")
    attention: tuple[str, ...] = ("plain",)
    depth: int = 2
    dim: int = 32
    heads: int = 4
    patch_size: int = 2
    data_seed: int = 0
    epochs: int = 20
    batch_size: int = 64
    w_lr: float = 0.1
    a_lr: float = 3e-3
    criterion: str = "loss"
    finetune_epochs: float = 1.0
    finetune_lr: float = 0.02
    fit_at: float = 0.95
    threads: int = 1


def run_pe_search(cfg: PESearchConfig) -> dict:
    """Train the PE supernet (``darts`` or ``fixed`` α) and select by magnitude and perturbation."""
    from posenc.search import evaluate, magnitude_select, make_finetune, perturbation_select, train_darts

    if cfg.variant not in VARIANTS:
        raise ValueError(f"variant must be one of {', '.join(VARIANTS)}, got {cfg.variant!r}")
    old = torch.get_num_threads()
    torch.set_num_threads(cfg.threads)
    try:
        data = digits_splits(cfg.data_seed)
        torch.manual_seed(cfg.seed)
        net = _pe_net(cfg)
        fixed = cfg.variant == "fixed"
        per_epoch = math.ceil(len(data["train"][1]) / cfg.batch_size)
        hist = train_darts(net, data["train"], data["val"], epochs=cfg.epochs, batch_size=cfg.batch_size,
                           w_lr=cfg.w_lr, a_lr=cfg.a_lr, fixed_alpha=fixed, seed=cfg.seed)
        curve = _epoch_means(hist["train_loss"], per_epoch)
        acc = {split: evaluate(net, data[split])[1] for split in SPLITS}
        edges = pe_edges(cfg.depth)
        out = {"kind": "pe_search", "variant": cfg.variant, "seed": cfg.seed, "train_loss_curve": curve,
               "train_acc": acc["train"], "val_acc": acc["val"], "test_acc": acc["test"],
               "plateaued": plateaued(curve), "fits": acc["train"] >= cfg.fit_at,
               "converged": acc["train"] >= cfg.fit_at or plateaued(curve), "alpha": hist["alpha"]}
        if not fixed:
            mag = magnitude_select(copy.deepcopy(net), seed=cfg.seed)
            out["magnitude"] = SEP.join(mag.choices[e] for e in edges)
        gen = torch.Generator().manual_seed(cfg.seed)
        order = [edges[i] for i in torch.randperm(len(edges), generator=gen).tolist()]
        tune = make_finetune(data["train"], data["val"], epochs=cfg.finetune_epochs, batch_size=cfg.batch_size,
                             w_lr=cfg.finetune_lr, fixed_alpha=True, seed=cfg.seed * 1000)
        sel = perturbation_select(net, data["val"], criterion=cfg.criterion, finetune=tune, order=order,
                                  seed=cfg.seed)
        out["pt"] = SEP.join(sel.choices[e] for e in edges)
        out["pt_decisions"] = sel.decisions
        return out
    finally:
        torch.set_num_threads(old)
