"""Reproduction section ``search``: perturbation-based architecture selection (DARTS-PT).

Wang, Cheng, Chen, Tang and Hsieh, "Rethinking Architecture Selection in
Differentiable NAS" (ICLR 2021) claim that the magnitude of the architecture
weights α does not measure an operation's contribution to a DARTS supernet, and
select by perturbation instead: on each edge (in a random order), mask each op
in turn, keep the one whose removal hurts the supernet's validation loss most,
discretise, fine-tune, go on. They report that magnitude selection drifts
towards parameter-free ops (``skip``, ``none``) as the supernet trains, while
perturbation selection stays good, even with α frozen at uniform.

No NAS benchmark table can be downloaded here, so the ground truth is built:

* a micro search space (a cell of ``nodes`` nodes whose every edge mixes the
  ``ops``) small enough to train **every** architecture stand-alone on
  scikit-learn's ``load_digits`` (train / validation / test splits fixed by
  ``data_seed``), on several seeds (jobs ``gt.*``, one per batch of
  architectures and seed, so ``--shard i/n`` splits them);
* supernets (jobs ``super.*``) trained with first-order DARTS (α trained on the
  validation split, ``darts``) or with α frozen at uniform (``fixed``), one per
  supernet seed; at several epochs each is copied and its architecture is
  selected by magnitude and by perturbation (random edge order drawn from the
  seed); the summary looks up each selection's ground-truth test accuracy and
  percentile;
* the positional-encoding search (jobs ``pe.*``): the testbed transformer with a
  mixed edge over input encodings on a task where position matters; each
  candidate trained alone is the ground truth.

Run functions are pure: a frozen config in, a JSON-serialisable dict out.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from posenc.experiments.stats import NOT_CONFIRMED, mean_std, paired_difference

#: edge ops chosen per architecture are written ``"op|op|op"`` (edge order of the space)
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


# ------------------------------------------------------------------ the micro space
class DigitsCellNet(nn.Module):
    """Stem -> one NB-201 cell -> BN-ReLU -> ``pool x pool`` average pool -> linear, for 8x8 digits.

    The cell is :class:`posenc.search.NB201Cell` (a :class:`~posenc.search.MixedOp` per edge,
    or plain ops given ``choices``). Unlike :class:`posenc.search.NB201MicroNet`, which ends in
    a global average pool, the head keeps a ``pool x pool`` map: on 8x8 digits with one cell a
    global pool learns too slowly for the section's budget.

    Args:
        channels: cell width ``C``.
        ops: candidate ops of every edge.
        num_nodes: nodes per cell (3: three edges).
        pool: side of the pooled map fed to the classifier.
        choices: ``{local edge name ("2<-1"): op}`` for a stand-alone network, or ``None``.
        num_classes: logits.

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


VARIANTS = ("darts", "fixed")


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


def _epoch_means(per_step: Sequence[float], steps_per_epoch: int) -> list[float]:
    return [statistics.fmean(per_step[i:i + steps_per_epoch]) for i in range(0, len(per_step), steps_per_epoch)]


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


# ------------------------------------------------------------------ ground-truth lookups
def arch_key(choices: Sequence[str]) -> str:
    """``("skip", "conv3x3")`` -> ``"skip|conv3x3"`` (edge order of the space)."""
    return SEP.join(choices)


def percentile(value: float, population: Sequence[float]) -> float:
    """Mid-rank percentile of ``value`` among ``population`` (which contains it), in ``[0, 100]``.

    ``100 * (#below + (#equal - 1) / 2) / (N - 1)``: the best of the population is 100, the
    worst 0, and an architecture drawn uniformly at random has expected percentile exactly 50.
    """
    n = len(population)
    if n < 2:
        raise ValueError(f"population must hold at least two values, got {n}")
    below = sum(1 for p in population if p < value)
    equal = sum(1 for p in population if p == value)
    if equal == 0:
        raise ValueError("value must be one of the population")
    return 100.0 * (below + (equal - 1) / 2.0) / (n - 1)


def ground_truth(results: Mapping[str, dict], kind: str = "gt") -> dict[str, dict]:
    """Per architecture: mean test / validation accuracy over the ground-truth seeds.

    Args:
        results: every job result of the section (only those with ``result["kind"] == kind``
            are read); each holds ``{"seed", "archs": [{"arch", "test_acc", "val_acc",
            "train_acc", "converged"}]}``.

    Returns:
        ``{arch: {"test": mean, "val": mean, "test_std", "seeds", "converged", "percentile"}}``
        (percentile of the mean test accuracy among all architectures).
    """
    runs: dict[str, list[dict]] = {}
    for r in results.values():
        if r.get("kind") != kind:
            continue
        for a in r["archs"]:
            runs.setdefault(a["arch"], []).append(a)
    table = {}
    for arch, rs in runs.items():
        test = mean_std(a["test_acc"] for a in rs)
        table[arch] = {"test": test["mean"], "test_std": test["std"],
                       "val": mean_std(a["val_acc"] for a in rs)["mean"],
                       "train": mean_std(a["train_acc"] for a in rs)["mean"],
                       "seeds": len(rs), "converged": sum(bool(a["converged"]) for a in rs)}
    pop = [t["test"] for t in table.values()]
    for t in table.values():
        t["percentile"] = percentile(t["test"], pop) if len(pop) > 1 else None
    return table


# ------------------------------------------------------------------ significance
def significance(diffs: Sequence[float]) -> dict:
    """Two-sided p-values of paired differences: Student t (mean 0) and Wilcoxon signed-rank.

    ``None`` where the test is undefined (fewer than two differences, or all zero).
    """
    d = [float(v) for v in diffs if v is not None and math.isfinite(float(v))]
    out: dict = {"t_p": None, "wilcoxon_p": None, "n": len(d), "wins": sum(v > 0 for v in d),
                 "ties": sum(v == 0 for v in d), "losses": sum(v < 0 for v in d)}
    if len(d) < 2 or all(v == 0 for v in d):
        return out
    from scipy import stats

    if statistics.stdev(d) > 0:
        out["t_p"] = float(stats.ttest_1samp(d, 0.0).pvalue)
    elif statistics.fmean(d) != 0:
        out["t_p"] = 0.0
    if any(v != 0 for v in d):
        out["wilcoxon_p"] = float(stats.wilcoxon(d, zero_method="wilcox").pvalue)
    return out


def compare(method: Mapping[object, float | None], baseline: Mapping[object, float | None], *,
            direction: str = "greater", margin: float = 0.0) -> dict:
    """:func:`posenc.experiments.stats.paired_difference` plus :func:`significance` of its differences.

    With fewer than :data:`MIN_PAIRS` seeds the verdict is "not confirmed at this scale".
    """
    diff = paired_difference(method, baseline, direction=direction, margin=margin)
    diff["test"] = significance(diff["diffs"])
    if diff["n"] < MIN_PAIRS and diff["verdict"] != NOT_CONFIRMED:
        # two identical picks give a zero-width interval: too few seeds to read a verdict from
        diff["verdict"], diff["holds"] = NOT_CONFIRMED, False
        diff["note"] = f"fewer than {MIN_PAIRS} seeds"
    return diff


# ------------------------------------------------------------------ summary of the micro space
#: selector -> (supernet variant, selection method)
SELECTORS = {"magnitude": ("darts", "magnitude"), "pt": ("darts", "pt"), "pt_fixed": ("fixed", "pt")}
#: ops without parameters that magnitude selection is said to drift towards
PARAM_FREE = ("none", "skip")


def _lookup(gt: Mapping[str, dict], arch: str | None, field: str = "test") -> float | None:
    row = gt.get(arch) if arch is not None else None
    return None if row is None else row[field]


def _share(arch: str, ops: Sequence[str]) -> float:
    parts = arch.split(SEP)
    return sum(p in ops for p in parts) / len(parts)


def selections(results: Mapping[str, dict]) -> dict[str, dict[int, dict[int, str]]]:
    """``{selector: {seed: {epoch: arch}}}`` from the supernet jobs."""
    out: dict[str, dict[int, dict[int, str]]] = {s: {} for s in SELECTORS}
    for r in results.values():
        if r.get("kind") != "super":
            continue
        for sel, (variant, method) in SELECTORS.items():
            if r["variant"] != variant:
                continue
            out[sel][r["seed"]] = {int(c["epoch"]): c[method] for c in r["checkpoints"]}
    return out


def summarize_micro(results: Mapping[str, dict]) -> dict:
    """Ground truth, the selections' ground-truth accuracy and percentile, the claims."""
    gt = ground_truth(results)
    gt_runs = [r for r in results.values() if r.get("kind") == "gt"]
    supers = [r for r in results.values() if r.get("kind") == "super"]
    out: dict = {"gt": {}, "selectors": {}, "claims": {}, "edges": {}, "supernets": {}}
    if not gt:
        return out
    tests = [row["test"] for row in gt.values()]
    best = max(gt, key=lambda a: gt[a]["test"])
    worst = min(gt, key=lambda a: gt[a]["test"])
    ranked = sorted(gt, key=lambda a: -gt[a]["test"])
    space = next(iter(gt_runs))["space"]
    random_test = statistics.fmean(tests)
    out["gt"] = {
        "n_archs": len(gt), "space": space,
        "seeds": sorted({r["seed"] for r in gt_runs}),
        "runs": sum(row["seeds"] for row in gt.values()),
        "converged": sum(row["converged"] for row in gt.values()),
        "best": {"arch": best, **gt[best]}, "worst": {"arch": worst, **gt[worst]},
        "random_test": random_test, "tests": sorted(tests),
        "top": [{"arch": a, **gt[a]} for a in ranked[:8]],
        "rank": {a: i + 1 for i, a in enumerate(ranked)},
        "val_test_spearman": _spearman([gt[a]["val"] for a in gt], [gt[a]["test"] for a in gt]),
        "seed_noise": mean_std(row["test_std"] for row in gt.values() if row["seeds"] > 1),
    }
    # the op of each edge in the optimum, and each op's marginal mean over the space
    edges = space["edges"]
    best_ops = best.split(SEP)
    marginal = {}
    for i, e in enumerate(edges):
        marginal[e] = {op: statistics.fmean(gt[a]["test"] for a in gt if a.split(SEP)[i] == op)
                       for op in space["ops"]}
    out["edges"] = {"best_ops": dict(zip(edges, best_ops)), "marginal": marginal,
                    "marginal_best": {e: max(m, key=m.get) for e, m in marginal.items()}}
    sels = selections(results)
    final: dict[str, dict[int, dict]] = {}
    for sel, by_seed in sels.items():
        if not by_seed:
            continue
        epochs = sorted({e for ch in by_seed.values() for e in ch})
        last = {s: ch[max(ch)] for s, ch in by_seed.items()}
        final[sel] = {s: {"arch": a, "test": _lookup(gt, a), "percentile": _lookup(gt, a, "percentile")}
                      for s, a in last.items()}
        by_epoch = {}
        for e in epochs:
            archs = [ch[e] for ch in by_seed.values() if e in ch]
            by_epoch[str(e)] = {
                "test": mean_std(_lookup(gt, a) for a in archs),
                "percentile": mean_std(_lookup(gt, a, "percentile") for a in archs),
                "param_free": mean_std(_share(a, PARAM_FREE) for a in archs),
                "op_share": {op: statistics.fmean(_share(a, (op,)) for a in archs) for op in space["ops"]},
            }
        agree = {}
        for i, e in enumerate(edges):
            picks = [a.split(SEP)[i] for a in last.values()]
            agree[e] = {"optimum": sum(p == best_ops[i] for p in picks) / len(picks),
                        "marginal": sum(p == out["edges"]["marginal_best"][e] for p in picks) / len(picks)}
        out["selectors"][sel] = {
            "seeds": len(last),
            "test": mean_std(v["test"] for v in final[sel].values()),
            "percentile": mean_std(v["percentile"] for v in final[sel].values()),
            "optimum_hits": sum(v["arch"] == best for v in final[sel].values()),
            "per_seed": {str(s): v for s, v in sorted(final[sel].items())},
            "by_epoch": by_epoch, "agreement": agree,
        }
    for variant in ("darts", "fixed"):
        rs = [r for r in supers if r["variant"] == variant]
        if rs:
            out["supernets"][variant] = {
                "n": len(rs), "converged": sum(bool(r["converged"]) for r in rs),
                "val_acc": mean_std(r["val_acc"] for r in rs),
                "train_acc": mean_std(r["train_acc"] for r in rs),
            }
    out["claims"] = micro_claims(final, sels, random_test)
    return out


def _spearman(a: Sequence[float], b: Sequence[float]) -> float | None:
    if len(a) < 3:
        return None
    from scipy.stats import spearmanr

    rho = spearmanr(a, b).statistic
    return None if rho is None or not math.isfinite(float(rho)) else float(rho)


def micro_claims(final: Mapping[str, Mapping[int, dict]], sels: Mapping[str, Mapping[int, Mapping[int, str]]],
                 random_test: float) -> dict:
    """The paper's claims on the micro space, each a paired per-seed difference with a test.

    * ``pt_beats_magnitude``, ``pt_fixed_beats_magnitude``: ground-truth test accuracy of
      the selected architecture, method − magnitude, per supernet seed;
    * ``pt_fixed_vs_pt``: PT with α fixed − PT with α trained (the paper finds fixed α
      better on NAS-Bench-201);
    * ``beats_random``: each selector's accuracy − the mean over the space (the expected
      accuracy of a uniformly random architecture);
    * ``magnitude_drifts`` / ``pt_stable``: the share of ``none``/``skip`` in magnitude's
      (PT's) selection at the last checkpoint − at the first; ``drift_gap``: magnitude's
      drift − PT's drift on the same supernet.
    """
    def metric(sel: str, field: str = "test") -> dict[int, float | None]:
        return {s: v[field] for s, v in final.get(sel, {}).items()}

    claims: dict = {}
    if "magnitude" in final:
        for sel in ("pt", "pt_fixed"):
            if sel in final:
                c = compare(metric(sel), metric("magnitude"))
                c["percentile"] = compare(metric(sel, "percentile"), metric("magnitude", "percentile"))
                claims[f"{sel}_beats_magnitude"] = c
    if "pt" in final and "pt_fixed" in final:
        c = compare(metric("pt_fixed"), metric("pt"))
        c["percentile"] = compare(metric("pt_fixed", "percentile"), metric("pt", "percentile"))
        claims["pt_fixed_vs_pt"] = c
    for sel in final:
        m = metric(sel)
        claims[f"{sel}_beats_random"] = compare(m, {s: random_test for s in m})

    def drift(sel: str) -> dict[int, float]:
        """Per seed: share of none/skip at the last checkpoint − at the first."""
        return {s: _share(ch[max(ch)], PARAM_FREE) - _share(ch[min(ch)], PARAM_FREE)
                for s, ch in sels.get(sel, {}).items() if len(ch) > 1}

    if any(len(ch) > 1 for ch in sels.get("magnitude", {}).values()):
        d_mag, d_pt = drift("magnitude"), drift("pt")
        claims["magnitude_drifts"] = compare(d_mag, {s: 0.0 for s in d_mag})
        if d_pt:
            claims["pt_stable"] = compare(d_pt, {s: 0.0 for s in d_pt}, direction="equal", margin=1.0 / 6.0)
            claims["drift_gap"] = compare(d_mag, d_pt)
    return claims


# ------------------------------------------------------------------ summary of the PE space
def summarize_pe(results: Mapping[str, dict]) -> dict:
    """Ground truth of the positional-encoding space and where the searches land in it."""
    gt = ground_truth(results, kind="pe_gt")
    runs = [r for r in results.values() if r.get("kind") == "pe_search"]
    out: dict = {"gt": {}, "selectors": {}, "claims": {}, "supernets": {}}
    if not gt:
        return out
    ranked = sorted(gt, key=lambda a: -gt[a]["test"])
    best = ranked[0]
    random_test = statistics.fmean(row["test"] for row in gt.values())
    out["gt"] = {"table": {a: gt[a] for a in ranked}, "best": best, "random_test": random_test,
                 "n_archs": len(gt), "runs": sum(row["seeds"] for row in gt.values()),
                 "converged": sum(row["converged"] for row in gt.values())}
    final: dict[str, dict[int, dict]] = {}
    for sel, (variant, method) in SELECTORS.items():
        picks = {r["seed"]: r[method] for r in runs if r["variant"] == variant and method in r}
        if not picks:
            continue
        final[sel] = {s: {"arch": a, "test": _lookup(gt, a), "percentile": _lookup(gt, a, "percentile")}
                      for s, a in sorted(picks.items())}
        counts: dict[str, int] = {}
        for a in picks.values():
            counts[a] = counts.get(a, 0) + 1
        out["selectors"][sel] = {
            "seeds": len(picks), "picks": counts,
            "test": mean_std(v["test"] for v in final[sel].values()),
            "percentile": mean_std(v["percentile"] for v in final[sel].values()),
            "optimum_hits": sum(a == best for a in picks.values()),
            "encoding_hits": sum(a.split(SEP)[0] == best.split(SEP)[0] for a in picks.values()),
            "per_seed": {str(s): v for s, v in final[sel].items()},
        }
    for variant in VARIANTS:
        rs = [r for r in runs if r["variant"] == variant]
        if rs:
            out["supernets"][variant] = {"n": len(rs), "converged": sum(bool(r["converged"]) for r in rs),
                                         "val_acc": mean_std(r["val_acc"] for r in rs),
                                         "train_acc": mean_std(r["train_acc"] for r in rs)}
    claims: dict = {}
    if "magnitude" in final:
        for sel in ("pt", "pt_fixed"):
            if sel in final:
                claims[f"{sel}_beats_magnitude"] = compare({s: v["test"] for s, v in final[sel].items()},
                                                           {s: v["test"] for s, v in final["magnitude"].items()})
    for sel, per in final.items():
        m = {s: v["test"] for s, v in per.items()}
        claims[f"{sel}_beats_random"] = compare(m, {s: random_test for s in m})
    out["claims"] = claims
    return out


def summarize(results: Mapping[str, dict]) -> dict:
    """The section's summary: the micro space and the positional-encoding space."""
    return {"micro": summarize_micro(results), "pe": summarize_pe(results)}


# ------------------------------------------------------------------ plan
QUICK_GT = GroundTruthConfig()
QUICK_SUPER = SupernetConfig()
QUICK_PE_GT = PEAloneConfig()
QUICK_PE = PESearchConfig()
FULL_OPS = ("none", "skip", "conv1x1", "conv3x3", "avgpool")
FULL_GT = GroundTruthConfig(ops=FULL_OPS, epochs=15)
FULL_SUPER = SupernetConfig(ops=FULL_OPS, epochs=20, checkpoints=(2, 5, 10, 20))
FULL_PE_ENC = ("none", "sinusoidal", "learned_table", "lff", "cape")
FULL_PE_ATT = ("plain", "rope_axial")
FULL_PE_GT = PEAloneConfig(encodings=FULL_PE_ENC, attention=FULL_PE_ATT, epochs=40)
FULL_PE = PESearchConfig(encodings=FULL_PE_ENC, attention=FULL_PE_ATT, epochs=40)
#: profile -> (ground-truth seeds, architectures per job, supernet seeds, PE ground-truth seeds, PE search seeds)
PROFILE_SIZES = {"quick": (1, 9, 4, 1, 2), "full": (3, 25, 20, 3, 10)}


def plan(profile: str, seeds: int | None = None) -> list:
    """The jobs of a profile; ``seeds`` sets the number of supernet seeds (micro and PE space).

    quick: 27 architectures ({none, skip, conv3x3} on 3 edges) x 1 seed, 10 epochs; 4 supernet
    seeds per variant, selections at epochs 2, 5, 10; the PE space over 4 encodings (attention
    plain) trained alone on 1 seed and searched on 2 seeds. full: 125 architectures (5 ops) x 3
    seeds, 15 epochs; 20 supernet seeds of 20 epochs (selections at 2, 5, 10, 20); the PE space
    over 5 encodings x {plain, axial RoPE} per block (20 architectures) x 3 seeds, searched on 10.
    """
    from posenc.report.section import Job

    if profile == "quick":
        gt, sup, pe_gt, pe = QUICK_GT, QUICK_SUPER, QUICK_PE_GT, QUICK_PE
    elif profile == "full":
        gt, sup, pe_gt, pe = FULL_GT, FULL_SUPER, FULL_PE_GT, FULL_PE
    else:
        raise ValueError(f"profile must be 'quick' or 'full', got {profile!r}")
    gt_seeds, per_job, n_super, pe_gt_seeds, n_pe = PROFILE_SIZES[profile]
    if seeds is not None:
        n_super, n_pe = seeds, seeds
    archs = space_archs(gt.ops, gt.num_nodes)
    jobs = []
    for s in range(gt_seeds):
        for b in range(0, len(archs), per_job):
            cfg = dataclasses.replace(gt, archs=tuple(archs[b:b + per_job]), seed=s)
            jobs.append(Job(f"gt.b{b // per_job}.s{s}", run_ground_truth, cfg, cost=len(cfg.archs) / 9))
    for s in range(n_super):
        for v in VARIANTS:
            jobs.append(Job(f"super.{v}.s{s}", run_supernet, dataclasses.replace(sup, variant=v, seed=s), cost=1.0))
    for s in range(pe_gt_seeds):
        for a in pe_archs(pe_gt.encodings, pe_gt.attention, pe_gt.depth):
            cfg = dataclasses.replace(pe_gt, arch=a, seed=s)
            jobs.append(Job(f"pe_gt.{a.replace(SEP, '-')}.s{s}", run_pe_alone, cfg, cost=1.0))
    for s in range(n_pe):
        for v in VARIANTS:
            jobs.append(Job(f"pe.{v}.s{s}", run_pe_search, dataclasses.replace(pe, variant=v, seed=s),
                            cost=3.0 if v == "darts" else 1.5))
    return jobs
