"""Reproduction section ``lff``: learnable Fourier features vs the paper's baselines.

Li, Si, Li, Hsieh and Bengio, "Learnable Fourier Features for Multi-Dimensional
Spatial Positional Encoding" (NeurIPS 2021) claim that LFF + MLP (Algorithm 1)
converges faster and reaches better quality than other 2D position encodings,
in particular where L2 distances between positions matter, and that unlike a
learned table it carries over to positions (resolutions) not seen in training.
Their benchmarks (ImageNet64 generation, COCO detection, ImageNet ViT, widget
captioning) are out of reach; two small tasks test the same claims:

* ``digits``: a :class:`~posenc.models.TinyViT` on scikit-learn's bundled digits
  (16 x 16 images, 4 x 4 patches): convergence (mean training loss over all steps)
  and final test accuracy;
* ``grid``: the "occupied and within an L2 radius of the marker" task of
  :func:`posenc.data.grid_tasks.grid_radius_task` with a tiny transformer, trained
  at a ``G x G`` grid and tested at ``G`` and at finer grids over the same extent
  (interpolation: the same disk in the plane, more tokens); and the isotropy of the
  trained encoding measured on its centred (position-dependent) part.

Encodings, all with the same width, model, optimiser, learning rate and step budget:
``none`` (reference), ``table2d`` (learned ``G x G`` table, bicubically resampled at
a new resolution), ``sine2d`` (per-axis sinusoidal), ``mlp`` (GeLU MLP on raw
coordinates), ``rff_mlp`` (fixed random Fourier features + MLP), ``lff_nomlp``
(learnable Fourier features, no MLP) and ``lff_mlp``. Positions: integer cells
for the table, cell units of the training grid for ``sine2d`` (as ViT's sin-cos
tables), coordinates in ``[-1, 1]`` for the MLP-based encodings.

Fairness, as the section applies it:

* **One learning rate per task for every encoding**, chosen by :func:`choose_lr`
  from a sweep (:data:`LR_SWEEP` x the compared encodings x :data:`SWEEP_SEEDS`, seeds
  disjoint from the claims' seeds) on a **validation** split, never the test: the
  rate with the best median validation score over all (encoding, seed) runs. The
  sweep is a set of jobs of the full profile (keys ``sweep.*``); its choice is frozen
  in :data:`LR`, and the full report checks that the frozen value is the sweep's.
* ``W_r`` has its own learning rate (:data:`LR_SCALES`, through
  :func:`posenc.models.parameter_groups`), chosen once for the whole section: its
  entries are ``O(1/gamma)`` and Adam moves them by about ``lr`` per step, so at the
  shared rate they barely change and "learnable" would not be tested.
* **Paired initialisation**: the transformer's weights come from ``init_seed = seed``
  (:func:`posenc.models.seeded_reset_parameters`), the encoding's from its own seed,
  and the batches from the training seed, so runs of one seed share the transformer's
  initial weights and data order across encodings.
* **Convergence gate** (:data:`GATES`, :mod:`posenc.experiments.gate`): each run's validation
  curve reads as converged (plateaued), failed to learn (at chance) or still learning; a seed
  enters a claim unless one of its two runs is still learning, and the summary lists the runs
  in each state.

Every claim is a paired per-seed difference of LFF + MLP against each baseline with a
95 % t interval (:mod:`posenc.experiments.stats`), a verdict, and the smallest
difference its seeds can detect (:func:`detectable_difference`).
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from posenc.data.grid_tasks import digits_images, grid_radius_task
from posenc.encodings import (
    CoordinateMLPEncoding,
    LearnableFourierEncoding,
    LearnedTableEncoding,
    SinusoidalEncoding,
)
from posenc.experiments.gate import FAILED, LEARNING, STATES, Gate
from posenc.experiments.job import Job
from posenc.experiments.profiles import profile_settings
from posenc.experiments.stats import detectable_difference, holm_verdicts, mean_std, paired_difference
from posenc.models import TinyViT, TrainConfig, TransformerEncoder, train

ENCODINGS = ("none", "table2d", "sine2d", "mlp", "rff_mlp", "lff_nomlp", "lff_mlp")
#: What LFF + MLP is compared with (``none`` is a reference row, not a baseline).
BASELINES = ("table2d", "sine2d", "rff_mlp", "lff_nomlp", "mlp")
#: The encodings the learning-rate sweep serves (every compared one; not the ``none`` reference).
COMPARED = ("table2d", "sine2d", "mlp", "rff_mlp", "lff_nomlp", "lff_mlp")
CONTINUOUS = ("sine2d", "mlp", "rff_mlp", "lff_nomlp", "lff_mlp")
TASKS = ("digits", "grid")
#: Peak AdamW learning rates (warm-up, cosine to 10 %) the sweep tries for each task.
LR_SWEEP: tuple[float, ...] = (1e-3, 3e-3, 1e-2)
#: Seeds of the sweep's runs: disjoint from the claims' seeds (0, 1, ...).
SWEEP_SEEDS: tuple[int, ...] = (100, 101, 102)
#: The learning rate of every claim run, per task: :func:`choose_lr` on the full profile's
#: ``sweep.*`` jobs, frozen here (the full report says whether the sweep still agrees).
LR: dict[str, float] = {"digits": 3e-3, "grid": 1e-2}
#: The validation metric the sweep and the convergence gate read, and whether higher is better.
#: The grid's balanced accuracy saturates at 1.0 at the training resolution, so it uses the BCE.
VAL_METRIC: dict[str, tuple[str, bool]] = {"digits": ("val_acc", True), "grid": ("val_bce", False)}
#: The convergence gate of each task on its validation metric (:data:`VAL_METRIC`), evaluated every
#: 10 % of training: converged when the least-squares line through the last third of the evaluations
#: gains at most ``tol`` over it. Digits: 0.03 of accuracy (the line through four evaluations on 270
#: validation images has a standard error of about 0.02 at 0.95); chance 0.1 (ten classes). Grid:
#: 0.01 of BCE; chance ln 2 (a constant prediction of 1/2).
GATES: dict[str, Gate] = {
    "digits": Gate("validation accuracy", chance=0.1, learned=0.05, tol=0.03),
    "grid": Gate("validation BCE", chance=math.log(2.0), learned=0.05, tol=0.01, higher_is_better=False),
}
#: ``W_r``'s learning rate is 10x the shared one, for every run of the section.
LR_SCALES: tuple[tuple[str, float], ...] = (("w_r", 10.0),)
#: Each claim: (metric key, direction of "LFF is better", task). The grid task has no final-quality
#: claim at its training resolution: every converged run solves it (balanced accuracy 1.0, test BCE
#: ~1e-5), so among the runs the gate admits that comparison is a tie by construction. Quality on the
#: grid is read at the finer resolutions (``grid_interpolation``); the 6x6 numbers stay in the table.
CLAIMS = {
    "digits_faster": ("auc_loss", "less", "digits"),
    "digits_final": ("final_acc", "greater", "digits"),
    "grid_faster": ("auc_loss", "less", "grid"),
    "grid_interpolation": ("finer_bacc", "greater", "grid"),
    "grid_isotropy": ("anisotropy", "less", "grid"),
}
#: The smallest difference that matters per claim metric, fixed with the claims (``sesoi`` of
#: :func:`posenc.experiments.stats.paired_difference`): an interval wholly short of it contradicts
#: "LFF is better". One point of accuracy (4-5 of the 449 test digits; a grid's balanced accuracy),
#: 0.02 nats of mean training loss. Anisotropy has no such unit: none.
SESOI: dict[str, float | None] = {"final_acc": 0.01, "finer_bacc": 0.01, "auc_loss": 0.02, "anisotropy": None}


@dataclass(frozen=True)
class DigitsConfig:
    """One TinyViT run on the digits (16 x 16, 4 x 4 patches of 4 x 4 pixels).

    The 1,797 images split into 449 test images (``digits_images``' seeded split) and
    1,348 others, of which ``val_fraction`` (270) are held out for validation and the
    rest (1,078) train.
    """

    encoding: str = "lff_mlp"
    seed: int = 0
    steps: int = 800
    batch: int = 64
    lr: float = LR["digits"]
    lr_scales: tuple[tuple[str, float], ...] = LR_SCALES
    dim: int = 32
    depth: int = 2
    heads: int = 2  # heads of 16 channels: CPU attention costs a quarter of 4 heads of 8
    hidden: int = 32
    freq_std: float = 3.0  # std of W_r = 1 / gamma, positions in [-1, 1]
    patch: int = 4
    upsample: int = 2
    val_fraction: float = 0.2
    eval_every: int = 60
    threads: int = 1


@dataclass(frozen=True)
class GridConfig:
    """One run on the grid disk task, tested at the training grid and at finer ones."""

    encoding: str = "lff_mlp"
    seed: int = 0
    grid: int = 6
    radius: float = 2.5  # in training-grid cells; scaled with the grid at test time
    test_grids: tuple[int, ...] = (9, 12)
    steps: int = 2000
    batch: int = 16
    lr: float = LR["grid"]
    lr_scales: tuple[tuple[str, float], ...] = LR_SCALES
    dim: int = 32
    depth: int = 2
    heads: int = 4
    hidden: int = 32
    freq_std: float = 3.0
    eval_every: int = 200
    eval_samples: int = 256
    threads: int = 1


# ------------------------------------------------------------------ encodings
def build_encoding(name: str, dim: int, grid: int, hidden: int, freq_std: float, seed: int) -> nn.Module | None:
    """The encoding called ``name`` (width ``dim``; ``grid``: side of the learned table)."""
    if name == "none":
        return None
    if name == "table2d":
        return LearnedTableEncoding(in_dim=2, grid_size=grid, num_features=dim, interpolation="bicubic", seed=seed)
    if name == "sine2d":
        return SinusoidalEncoding(in_dim=2, num_features=dim)
    if name == "mlp":
        return CoordinateMLPEncoding(in_dim=2, num_features=dim, hidden_dim=hidden, seed=seed)
    if name in ("rff_mlp", "lff_nomlp", "lff_mlp"):
        return LearnableFourierEncoding(
            in_dim=2, num_features=dim, hidden_dim=hidden, gamma=1.0 / freq_std, seed=seed,
            learnable_freqs=name != "rff_mlp", use_mlp=name != "lff_nomlp",
        )
    raise ValueError(f"encoding must be one of {', '.join(ENCODINGS)}, got {name!r}")


def encoding_input(name: str, coords: torch.Tensor, grid: int) -> torch.Tensor | None:
    """Positions for encoding ``name`` from coordinates ``(..., 2)`` in ``[-1, 1]``.

    ``grid`` is the *training* grid: cell units (and table indices) are those of that grid.
    """
    cell = (coords + 1.0) * (grid / 2.0) - 0.5  # cell units: centres at 0 .. grid-1
    if name == "none":
        return None
    if name == "table2d":
        return cell.round().clamp(0, grid - 1).long()
    if name == "sine2d":
        return cell
    return coords


# ------------------------------------------------------------------ measures
def token_metrics(logits: torch.Tensor, labels: torch.Tensor) -> dict[str, float]:
    """BCE, accuracy and balanced accuracy ((TPR + TNR) / 2) over all tokens."""
    bce = F.binary_cross_entropy_with_logits(logits, labels)
    pred = logits > 0
    pos = labels > 0.5
    tpr = (pred & pos).sum() / pos.sum().clamp_min(1)
    tnr = (~pred & ~pos).sum() / (~pos).sum().clamp_min(1)
    return {"bce": float(bce), "acc": float((pred == pos).float().mean()), "bacc": float((tpr + tnr) / 2)}


def centred_isotropy(
    features: Callable[[torch.Tensor], torch.Tensor], grid: int, steps: int = 8
) -> dict:
    """Isotropy of the position-dependent part of an encoding.

    The features are centred by their mean over the ``grid x grid`` cell centres
    (removing the constant part, which dominates an MLP's output and makes every
    cosine similarity close to 1). The cosine similarity of the centred feature at
    the centre ``(0, 0)`` of ``[-1, 1]^2`` to centred features at distances
    ``d`` (cells, ``0.5 ... grid/2 - 0.5``) is averaged over the 4 axis directions
    and over the 4 diagonals; ``anisotropy`` is the mean ``|axis - diagonal|``.

    Args:
        features: maps coordinates ``(..., 2)`` in ``[-1, 1]`` to features ``(..., D)``.
        grid: side of the cell grid (one cell = ``2 / grid``).
        steps: number of distances.

    Returns:
        ``{"distance": [...], "axis": [...], "diagonal": [...], "anisotropy": float}``.
    """
    cells = torch.arange(grid, dtype=torch.float64)
    cc = (2.0 * cells + 1.0) / grid - 1.0
    centres = torch.stack(torch.meshgrid(cc, cc, indexing="ij"), dim=-1).reshape(-1, 2)
    dist = torch.linspace(0.5, grid / 2 - 0.5, steps, dtype=torch.float64)
    dirs_axis = torch.tensor([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.0, -1.0]], dtype=torch.float64)
    dirs_diag = torch.tensor([[1.0, 1.0], [1.0, -1.0], [-1.0, 1.0], [-1.0, -1.0]], dtype=torch.float64) / math.sqrt(2)
    with torch.no_grad():
        mean = features(centres.float()).double().mean(0)
        ref = features(torch.zeros(1, 2)).double()[0] - mean

        def sims(dirs: torch.Tensor) -> list[float]:
            pts = dist[:, None, None] * dirs[None] * (2.0 / grid)  # (S, 4, 2)
            f = features(pts.float()).double() - mean
            return F.cosine_similarity(f, ref.expand_as(f), dim=-1, eps=1e-12).mean(-1).tolist()

        axis, diag = sims(dirs_axis), sims(dirs_diag)
    return {"distance": dist.tolist(), "axis": axis, "diagonal": diag,
            "anisotropy": statistics.fmean(abs(a - b) for a, b in zip(axis, diag))}


def _w_r_change(enc: nn.Module | None, w0: torch.Tensor | None) -> float | None:
    if w0 is None or not isinstance(enc, LearnableFourierEncoding):
        return None
    return float((enc.w_r.detach() - w0).norm() / w0.norm())


def _thin(curve: list[float], points: int = 60) -> list[list[float]]:
    """``[step, mean loss over the bin]`` pairs, ``points`` bins (keeps the JSON small)."""
    k = max(1, len(curve) // points)
    return [[i + k, statistics.fmean(curve[i : i + k])] for i in range(0, len(curve), k)]


def run_state(result: dict) -> str:
    """The gate's reading of a run: its task's :data:`GATES` on the validation metric of its
    evaluations (:data:`VAL_METRIC`)."""
    metric, _ = VAL_METRIC[result["task"]]
    return GATES[result["task"]].read([[e["step"], e.get(metric)] for e in result.get("evals", [])])


# ------------------------------------------------------------------ jobs
def _digits_split(cfg: DigitsConfig) -> dict[str, torch.Tensor]:
    """Train / validation / test tensors; the split depends on nothing but ``val_fraction``."""
    if not 0.0 < cfg.val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in (0, 1), got {cfg.val_fraction}")
    data = digits_images(upsample=cfg.upsample, seed=0)
    n = data["y_train"].shape[0]
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(1))
    n_val = int(round(n * cfg.val_fraction))
    val, tr = perm[:n_val], perm[n_val:]
    return {"x_train": data["x_train"][tr], "y_train": data["y_train"][tr],
            "x_val": data["x_train"][val], "y_val": data["y_train"][val],
            "x_test": data["x_test"], "y_test": data["y_test"]}


def build_digits_model(cfg: DigitsConfig) -> TinyViT:
    """The TinyViT of a digits run: encoding from ``cfg.seed``, transformer from ``init_seed = cfg.seed``.

    Runs of one seed therefore share the transformer's initial weights whatever the encoding.
    """
    side = 8 * cfg.upsample // cfg.patch
    torch.manual_seed(cfg.seed)
    enc = build_encoding(cfg.encoding, cfg.dim, side, cfg.hidden, cfg.freq_std, cfg.seed)
    kind = "continuous" if cfg.encoding in ("mlp", "rff_mlp", "lff_nomlp", "lff_mlp") else "index"
    return TinyViT(1, 10, patch_size=cfg.patch, dim=cfg.dim, depth=cfg.depth, num_heads=cfg.heads,
                   encoding=enc, positions=kind, seed=cfg.seed, init_seed=cfg.seed)


def build_grid_model(cfg: GridConfig) -> TransformerEncoder:
    """The transformer of a grid run, paired across encodings as :func:`build_digits_model`."""
    torch.manual_seed(cfg.seed)
    enc = build_encoding(cfg.encoding, cfg.dim, cfg.grid, cfg.hidden, cfg.freq_std, cfg.seed)
    return TransformerEncoder(2, 1, dim=cfg.dim, depth=cfg.depth, num_heads=cfg.heads, encoding=enc,
                              init_seed=cfg.seed)


def run_digits(cfg: DigitsConfig) -> dict:
    """Train a TinyViT on the digits with one encoding; curves, validation and test scores, W_r change."""
    cpu0 = time.process_time()
    torch.set_num_threads(cfg.threads)
    data = _digits_split(cfg)
    model = build_digits_model(cfg)
    enc = model.encoder.encoding
    w0 = enc.w_r.detach().clone() if isinstance(enc, LearnableFourierEncoding) else None
    n_train = data["y_train"].shape[0]

    def sample(step: int, gen: torch.Generator):
        idx = torch.randint(n_train, (cfg.batch,), generator=gen)
        return data["x_train"][idx], data["y_train"][idx]

    def loss_fn(net: nn.Module, batch):
        return F.cross_entropy(net(batch[0]), batch[1]), {}

    def evaluate(net: nn.Module) -> dict:
        out = {}
        for split in ("val", "test"):
            logits = net(data[f"x_{split}"])
            y = data[f"y_{split}"]
            out[f"{split}_loss"] = float(F.cross_entropy(logits, y))
            out[f"{split}_acc"] = float((logits.argmax(-1) == y).float().mean())
        return out

    tc = TrainConfig(steps=cfg.steps, lr=cfg.lr, eval_every=cfg.eval_every, seed=cfg.seed, threads=cfg.threads,
                     lr_scales=cfg.lr_scales)
    hist = train(model, sample, loss_fn, tc, evaluate=evaluate)
    last = hist["evals"][-1]
    return {
        "task": "digits",
        "encoding": cfg.encoding,
        "seed": cfg.seed,
        "lr": cfg.lr,
        "loss_curve": _thin(hist["loss"]),
        "evals": hist["evals"],
        "auc_loss": statistics.fmean(hist["loss"]),
        "final_acc": last["test_acc"],
        "final_test_loss": last["test_loss"],
        "val_acc": last["val_acc"],
        "val_loss": last["val_loss"],
        "state": run_state({"task": "digits", "evals": hist["evals"]}),  # as run
        "w_r_change": _w_r_change(enc, w0),
        "seconds": hist["seconds"],
        "cpu_seconds": time.process_time() - cpu0,  # this process's CPU time for the whole run
    }


def _grid_eval(model: TransformerEncoder, name: str, cfg: GridConfig, grid: int, seed: int) -> dict:
    """Balanced accuracy on a ``grid x grid`` version of the task over the same extent."""
    radius = cfg.radius * grid / cfg.grid
    test = grid_radius_task(cfg.eval_samples, torch.Generator().manual_seed(seed), grid=grid, radius=radius)
    pos_features = None
    pos = encoding_input(name, test["coords"], cfg.grid)
    if name == "table2d" and grid != cfg.grid:
        pos_features, pos = model.encoding.table((grid, grid)), None  # bicubic resampling
    with torch.no_grad():
        logits = model(test["tokens"], pos, pos_features=pos_features)[..., 0]
    return token_metrics(logits, test["labels"])


def run_grid(cfg: GridConfig) -> dict:
    """Train on the grid disk task; validate, test at the training grid and at finer grids; isotropy."""
    cpu0 = time.process_time()
    torch.set_num_threads(cfg.threads)
    name = cfg.encoding
    model = build_grid_model(cfg)
    enc = model.encoding
    w0 = enc.w_r.detach().clone() if isinstance(enc, LearnableFourierEncoding) else None
    coords = grid_radius_task(1, torch.Generator().manual_seed(0), grid=cfg.grid)["coords"]
    pos = encoding_input(name, coords, cfg.grid)
    held = {split: grid_radius_task(cfg.eval_samples, torch.Generator().manual_seed(offset + cfg.seed),
                                    grid=cfg.grid, radius=cfg.radius)
            for split, offset in (("val", 30_000), ("test", 10_000))}

    def sample(step: int, gen: torch.Generator) -> dict:
        return grid_radius_task(cfg.batch, gen, grid=cfg.grid, radius=cfg.radius)

    def loss_fn(net: nn.Module, batch: dict):
        logits = net(batch["tokens"], pos)[..., 0]
        return F.binary_cross_entropy_with_logits(logits, batch["labels"]), {}

    def evaluate(net: nn.Module) -> dict:
        return {f"{split}_{k}": v for split, d in held.items()
                for k, v in token_metrics(net(d["tokens"], pos)[..., 0], d["labels"]).items()}

    tc = TrainConfig(steps=cfg.steps, lr=cfg.lr, eval_every=cfg.eval_every, seed=cfg.seed, threads=cfg.threads,
                     lr_scales=cfg.lr_scales)
    hist = train(model, sample, loss_fn, tc, evaluate=evaluate)
    model.eval()
    finer = {str(g): _grid_eval(model, name, cfg, g, 20_000 + cfg.seed) for g in cfg.test_grids}
    iso = None
    if name in CONTINUOUS:
        iso = centred_isotropy(lambda c: model.position_features(encoding_input(name, c, cfg.grid)), cfg.grid)
    last = hist["evals"][-1]
    return {
        "task": "grid",
        "encoding": name,
        "seed": cfg.seed,
        "lr": cfg.lr,
        "loss_curve": _thin(hist["loss"]),
        "evals": hist["evals"],
        "auc_loss": statistics.fmean(hist["loss"]),
        "final_bacc": last["test_bacc"],
        "final_bce": last["test_bce"],
        "val_bacc": last["val_bacc"],
        "val_bce": last["val_bce"],
        "finer": finer,
        "finer_bacc": statistics.fmean(m["bacc"] for m in finer.values()) if finer else None,
        "state": run_state({"task": "grid", "evals": hist["evals"]}),
        "isotropy": iso,
        "anisotropy": iso["anisotropy"] if iso else None,
        "w_r_change": _w_r_change(enc, w0),
        "seconds": hist["seconds"],
        "cpu_seconds": time.process_time() - cpu0,  # this process's CPU time for the whole run
    }


# ------------------------------------------------------------------ plan
#: Relative cost of one run (for progress bars and shard balancing).
COSTS = {"digits": 1.0, "grid": 1.0}


def _config(task: str, **kw) -> DigitsConfig | GridConfig:
    return DigitsConfig(**kw) if task == "digits" else GridConfig(**kw)


def _run(task: str) -> Callable[[DigitsConfig | GridConfig], dict]:
    return run_digits if task == "digits" else run_grid


def plan(profile: str, seeds: int | None = None) -> list[Job]:
    """Jobs of the ``quick`` or ``full`` profile (``seeds`` overrides the claims' seed count).

    Keys: ``{task}.{encoding}.s{seed}`` for the claims' runs (at :data:`LR`), and
    ``sweep.{task}.lr{lr:g}.{encoding}.s{seed}`` for the sweep. The profile's seeds, tasks,
    encodings, sweep and steps come from ``profiles.toml``
    (:func:`posenc.experiments.profiles.profile_settings`).
    """
    p = profile_settings("lff", profile)
    encodings = {"compared": COMPARED, "all": ENCODINGS}[p["encodings"]]
    steps = p["steps"]
    jobs: list[Job] = []
    if p["sweep"]:
        for task in p["tasks"]:
            for lr in LR_SWEEP:
                for seed in SWEEP_SEEDS:
                    for enc in COMPARED:
                        jobs.append(Job(f"sweep.{task}.lr{lr:g}.{enc}.s{seed}", _run(task),
                                        _config(task, encoding=enc, seed=seed, lr=lr, steps=steps[task]),
                                        cost=COSTS[task]))
    for seed in range(seeds or p["seeds"]):
        for task in p["tasks"]:
            for enc in encodings:
                jobs.append(Job(f"{task}.{enc}.s{seed}", _run(task),
                                _config(task, encoding=enc, seed=seed, lr=LR[task], steps=steps[task]),
                                cost=COSTS[task]))
    return jobs


# ------------------------------------------------------------------ statistics
def choose_lr(scores: dict[float, list[float]], higher_is_better: bool) -> float:
    """The section's learning-rate rule: the rate with the best **median** validation score.

    Args:
        scores: ``{lr: [validation score of every (encoding, seed) run at lr]}``; non-finite
            scores (a diverged run) count as the worst possible.
        higher_is_better: direction of the score (accuracy: True; a loss: False).

    Returns:
        The chosen rate; a tie goes to the smaller rate.
    """
    if not scores:
        raise ValueError("scores must hold at least one learning rate")
    worst = -math.inf if higher_is_better else math.inf

    def med(vals: list[float]) -> float:
        if not vals:
            raise ValueError("scores must hold at least one run per learning rate")
        return statistics.median(float(v) if v is not None and math.isfinite(float(v)) else worst for v in vals)

    sign = 1.0 if higher_is_better else -1.0
    return max(sorted(scores), key=lambda lr: (sign * med(scores[lr]), -lr))


def _sweep_summary(sweep: dict[str, dict[float, dict[str, list[dict]]]]) -> dict:
    """Per task: the median validation score per lr (pooled and per encoding), the choice, the frozen LR."""
    out = {}
    for task, by_lr in sweep.items():
        metric, higher = VAL_METRIC[task]
        pooled = {lr: [r[metric] for rs in by_enc.values() for r in rs] for lr, by_enc in by_lr.items()}
        chosen = choose_lr(pooled, higher)
        per_enc = {enc: {f"{lr:g}": statistics.median(r[metric] for r in by_lr[lr][enc])
                         for lr in sorted(by_lr) if by_lr[lr].get(enc)}
                   for enc in COMPARED}
        out[task] = {
            "metric": metric, "higher_is_better": higher,
            "lrs": [f"{lr:g}" for lr in sorted(by_lr)],
            "median": {f"{lr:g}": statistics.median(v) for lr, v in sorted(pooled.items())},
            "runs": {f"{lr:g}": len(v) for lr, v in sorted(pooled.items())},
            "per_encoding": {e: v for e, v in per_enc.items() if v},
            "chosen": chosen, "frozen": LR[task], "agrees": math.isclose(chosen, LR[task]),
        }
    return out


# ------------------------------------------------------------------ summary
def summarize(results: dict[str, dict]) -> dict:
    """Per-encoding means ± std, mean curves, the sweep's choice, and every claim as paired differences.

    Claims read the runs the gate (:data:`GATES`) did not find still learning: a seed enters a
    comparison unless one of its runs is still learning; ``not_converged`` lists those, and
    ``failed_to_learn`` the runs that stayed at chance (compared as measured).
    """
    runs: dict[str, dict[str, dict[int, dict]]] = {}
    sweep: dict[str, dict[float, dict[str, list[dict]]]] = {}
    for key, res in results.items():
        if not (isinstance(res, dict) and "task" in res):
            continue
        # the gate is applied here, from the stored evaluations, with the criterion of this version
        res = {**res, "state": run_state(res)}
        if key.startswith("sweep."):
            sweep.setdefault(res["task"], {}).setdefault(float(res["lr"]), {}).setdefault(
                res["encoding"], []).append(res)
        else:
            runs.setdefault(res["task"], {}).setdefault(res["encoding"], {})[res["seed"]] = res
    table: dict[str, dict[str, dict]] = {}
    curves: dict[str, dict[str, dict]] = {}
    keys = {"digits": ("auc_loss", "final_acc", "final_test_loss", "val_acc", "w_r_change"),
            "grid": ("auc_loss", "final_bacc", "final_bce", "finer_bacc", "anisotropy", "w_r_change")}
    not_converged: dict[str, list[str]] = {}
    failed: dict[str, list[str]] = {}
    for task in TASKS:
        by_enc = runs.get(task)
        if not by_enc:
            continue
        table[task], curves[task] = {}, {}
        for enc in ENCODINGS:
            seeds = by_enc.get(enc)
            if not seeds:
                continue
            rs = [seeds[s] for s in sorted(seeds)]
            row = {k: mean_std([r[k] for r in rs]) for k in keys[task]}
            row["states"] = {st: sum(r["state"] == st for r in rs) for st in STATES}
            not_converged[task] = not_converged.get(task, []) + [
                f"{task}.{enc}.s{r['seed']}" for r in rs if r["state"] == LEARNING]
            failed[task] = failed.get(task, []) + [f"{task}.{enc}.s{r['seed']}" for r in rs if r["state"] == FAILED]
            if task == "grid":
                grids = sorted(rs[0]["finer"], key=int)
                row["finer"] = {g: mean_std([r["finer"][g]["bacc"] for r in rs]) for g in grids}
                isos = [r["isotropy"] for r in rs if r.get("isotropy")]
                if isos:
                    row["iso_curve"] = {
                        "distance": isos[0]["distance"],
                        "axis": [statistics.fmean(v) for v in zip(*[i["axis"] for i in isos])],
                        "diagonal": [statistics.fmean(v) for v in zip(*[i["diagonal"] for i in isos])],
                    }
            table[task][enc] = row
            metric = "test_acc" if task == "digits" else "test_bacc"
            curves[task][enc] = {
                "loss_step": [p[0] for p in rs[0]["loss_curve"]],
                "loss": [statistics.fmean(v) for v in zip(*[[p[1] for p in r["loss_curve"]] for r in rs])],
                "eval_step": [e["step"] for e in rs[0]["evals"]],
                "eval": [statistics.fmean(v) for v in zip(*[[e[metric] for e in r["evals"]] for r in rs])],
                "metric": "acc" if task == "digits" else "bacc",
            }
    claims: dict[str, dict] = {}
    for claim, (key, direction, task) in CLAIMS.items():
        by_enc = runs.get(task, {})
        if "lff_mlp" not in by_enc:
            continue

        def values(enc: str) -> dict:
            return {s: r[key] for s, r in by_enc[enc].items()}

        def states(enc: str) -> dict:  # the convergence gate: a run still learning drops out of every pairing
            return {s: r["state"] for s, r in by_enc[enc].items()}

        per_base = {}
        for base in BASELINES:
            if base in by_enc and (key != "anisotropy" or base in CONTINUOUS):
                d = paired_difference(values("lff_mlp"), values(base), direction=direction,
                                      method_state=states("lff_mlp"), baseline_state=states(base),
                                      sesoi=SESOI.get(key))
                d["excluded"] = sorted(
                    s for s in set(by_enc["lff_mlp"]) & set(by_enc[base])
                    if LEARNING in (by_enc["lff_mlp"][s]["state"], by_enc[base][s]["state"]))
                per_base[base] = d
        by_verdict: dict[str, list[str]] = {}
        for base, d in per_base.items():
            by_verdict.setdefault(d["verdict"], []).append(base)
        # one line per claim for the CLI; each baseline keeps its own interval and verdict in "vs"
        summary_line = "; ".join(f"{v} vs {', '.join(bs)}" for v, bs in by_verdict.items())
        claims[claim] = {"metric": key, "direction": direction, "task": task, "vs": per_base,
                         "verdict": summary_line}
    # multiplicity: every comparison of the section is one family (Holm, next to each verdict)
    family = {f"{claim}/{base}": d for claim, c in claims.items() for base, d in c["vs"].items()}
    holm_verdicts(family)
    for c in claims.values():
        held = [b for b, d in c["vs"].items() if d["holm_verdict"] != d["verdict"]]
        if held:
            c["holm_note"] = f"after Holm over the {len(family)} comparisons: not confirmed vs {', '.join(held)}"
    n_seeds = max((len(s) for by in runs.values() for s in by.values()), default=0)
    every = [r for r in results.values() if isinstance(r, dict) and "task" in r]
    cpu = [r["cpu_seconds"] for r in every if isinstance(r.get("cpu_seconds"), (int, float))]
    cost = {"runs": len(every), "timed": len(cpu), "cpu_seconds": sum(cpu)}
    return {"table": table, "curves": curves, "claims": claims, "seeds": n_seeds,
            "lr": {t: LR[t] for t in runs}, "lr_scales": dict(LR_SCALES),
            "gate": {t: GATES[t].as_dict() for t in runs},
            "not_converged": not_converged, "failed_to_learn": failed, "sweep": _sweep_summary(sweep), "cost": cost}


# ------------------------------------------------------------------ result schemas
# the types the summary reads from each job's stored result (posenc.report.schema's spec language)
NUM = (float, None)  # a number, or null (a non-finite value is stored as null)
run_digits.result_schema = {  # type: ignore[attr-defined]
    "task": str, "encoding": str, "seed": int, "lr": float, "loss_curve": [[NUM]], "evals": [{str: NUM}],
    "auc_loss": NUM, "final_acc": NUM, "final_test_loss": NUM, "val_acc": NUM, "state": str,
    "w_r_change": NUM,
}
run_grid.result_schema = {  # type: ignore[attr-defined]
    "task": str, "encoding": str, "seed": int, "lr": float, "loss_curve": [[NUM]], "evals": [{str: NUM}],
    "auc_loss": NUM, "final_bacc": NUM, "final_bce": NUM, "finer": {str: {"bce": NUM, "acc": NUM, "bacc": NUM}},
    "finer_bacc": NUM, "state": str, "isotropy": object, "anisotropy": NUM, "w_r_change": NUM,
}
