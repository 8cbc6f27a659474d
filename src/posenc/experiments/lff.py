"""Reproduction section ``lff``: learnable Fourier features vs the paper's baselines.

Li, Si, Li, Hsieh and Bengio, "Learnable Fourier Features for Multi-Dimensional
Spatial Positional Encoding" (NeurIPS 2021) claim that LFF + MLP (Algorithm 1)
converges faster and reaches better quality than other 2D position encodings,
in particular where L2 distances between positions matter, and that unlike a
learned table it carries over to positions (resolutions) not seen in training.
Their benchmarks (ImageNet64 generation, COCO detection, ImageNet ViT, widget
captioning) are out of reach; two small tasks test the same claims:

* ``digits``: a :class:`~posenc.models.TinyViT` on scikit-learn's bundled digits
  (16 x 16 images, 4 x 4 patches): convergence (area under the training loss)
  and final test accuracy;
* ``grid``: the "occupied and within an L2 radius of the marker" task of
  :func:`posenc.data.grid_tasks.grid_radius_task` with a tiny transformer, trained
  at a ``G x G`` grid and tested at ``G`` and at finer grids over the same extent
  (interpolation: the same disk in the plane, more tokens); and the isotropy of the
  trained encoding measured on its centred (position-dependent) part.

Encodings, all with the same width, model, optimiser and step budget:
``none`` (reference), ``table2d`` (learned ``G x G`` table, bicubically resampled at
a new resolution), ``sine2d`` (per-axis sinusoidal), ``mlp`` (GeLU MLP on raw
coordinates), ``rff_mlp`` (fixed random Fourier features + MLP), ``lff_nomlp``
(learnable Fourier features, no MLP) and ``lff_mlp``. Positions: integer cells
for the table, cell units of the training grid for ``sine2d`` (as ViT's sin-cos
tables), coordinates in ``[-1, 1]`` for the MLP-based encodings.

``W_r`` has its own learning rate (:data:`LR_SCALES`, through
:func:`posenc.models.parameter_groups`), chosen once for the whole section: its
entries are ``O(1/gamma)`` and Adam moves them by about ``lr`` per step, so at the
shared rate they barely change and "learnable" would not be tested.

Every claim is a paired per-seed difference of LFF + MLP against each baseline
with a 95 % t interval (:mod:`posenc.experiments.stats`).
"""

from __future__ import annotations

import math
import statistics
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
from posenc.experiments.stats import mean_std, paired_difference
from posenc.models import TinyViT, TrainConfig, TransformerEncoder, train
from posenc.experiments.job import Job

ENCODINGS = ("none", "table2d", "sine2d", "mlp", "rff_mlp", "lff_nomlp", "lff_mlp")
#: What LFF + MLP is compared with (``none`` is a reference row, not a baseline).
BASELINES = ("table2d", "sine2d", "rff_mlp", "lff_nomlp", "mlp")
CONTINUOUS = ("sine2d", "mlp", "rff_mlp", "lff_nomlp", "lff_mlp")
#: The shared peak AdamW learning rate (warm-up, cosine to 10 %) of every run: at 3e-3 the
#: grid task sits on a plateau (balanced accuracy ~0.6) for most encodings for ~1000 steps.
LR = 1e-2
#: ``W_r``'s learning rate is 10x the shared one, for every run of the section.
LR_SCALES: tuple[tuple[str, float], ...] = (("w_r", 10.0),)
#: Each claim: (metric key, direction of "LFF is better", task).
CLAIMS = {
    "digits_faster": ("auc_loss", "less", "digits"),
    "digits_final": ("final_acc", "greater", "digits"),
    "grid_faster": ("auc_loss", "less", "grid"),
    "grid_final": ("final_bacc", "greater", "grid"),
    "grid_interpolation": ("finer_bacc", "greater", "grid"),
    "grid_isotropy": ("anisotropy", "less", "grid"),
}


@dataclass(frozen=True)
class DigitsConfig:
    """One TinyViT run on the digits (16 x 16, 4 x 4 patches of 4 x 4 pixels)."""

    encoding: str = "lff_mlp"
    seed: int = 0
    steps: int = 300
    batch: int = 64
    lr: float = LR
    lr_scales: tuple[tuple[str, float], ...] = LR_SCALES
    dim: int = 32
    depth: int = 2
    heads: int = 4
    hidden: int = 32
    freq_std: float = 3.0  # std of W_r = 1 / gamma, positions in [-1, 1]
    patch: int = 4
    upsample: int = 2
    eval_every: int = 50
    threads: int = 1


@dataclass(frozen=True)
class GridConfig:
    """One run on the grid disk task, tested at the training grid and at finer ones."""

    encoding: str = "lff_mlp"
    seed: int = 0
    grid: int = 6
    radius: float = 2.5  # in training-grid cells; scaled with the grid at test time
    test_grids: tuple[int, ...] = (9, 12)
    steps: int = 400
    batch: int = 16
    lr: float = LR
    lr_scales: tuple[tuple[str, float], ...] = LR_SCALES
    dim: int = 32
    depth: int = 2
    heads: int = 4
    hidden: int = 32
    freq_std: float = 3.0
    eval_every: int = 50
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


def _converged(evals: list[dict], key: str, tol: float) -> bool:
    """Whether ``key`` moved by at most ``tol`` over the last three evaluations."""
    tail = [e[key] for e in evals[-3:]]
    return len(tail) == 3 and max(tail) - min(tail) <= tol


# ------------------------------------------------------------------ jobs
def run_digits(cfg: DigitsConfig) -> dict:
    """Train a TinyViT on the digits with one encoding; curves, final accuracy, W_r change."""
    torch.set_num_threads(cfg.threads)
    data = digits_images(upsample=cfg.upsample, seed=0)
    side = 8 * cfg.upsample // cfg.patch
    torch.manual_seed(cfg.seed)
    enc = build_encoding(cfg.encoding, cfg.dim, side, cfg.hidden, cfg.freq_std, cfg.seed)
    kind = "continuous" if cfg.encoding in ("mlp", "rff_mlp", "lff_nomlp", "lff_mlp") else "index"
    model = TinyViT(1, 10, patch_size=cfg.patch, dim=cfg.dim, depth=cfg.depth, num_heads=cfg.heads,
                    encoding=enc, positions=kind, seed=cfg.seed)
    w0 = enc.w_r.detach().clone() if isinstance(enc, LearnableFourierEncoding) else None
    n_train = data["y_train"].shape[0]

    def sample(step: int, gen: torch.Generator):
        idx = torch.randint(n_train, (cfg.batch,), generator=gen)
        return data["x_train"][idx], data["y_train"][idx]

    def loss_fn(net: nn.Module, batch):
        return F.cross_entropy(net(batch[0]), batch[1]), {}

    def evaluate(net: nn.Module) -> dict:
        logits = net(data["x_test"])
        return {"loss": float(F.cross_entropy(logits, data["y_test"])),
                "acc": float((logits.argmax(-1) == data["y_test"]).float().mean())}

    tc = TrainConfig(steps=cfg.steps, lr=cfg.lr, eval_every=cfg.eval_every, seed=cfg.seed, threads=cfg.threads,
                     lr_scales=cfg.lr_scales)
    hist = train(model, sample, loss_fn, tc, evaluate=evaluate)
    return {
        "task": "digits",
        "encoding": cfg.encoding,
        "seed": cfg.seed,
        "loss_curve": _thin(hist["loss"]),
        "evals": hist["evals"],
        "auc_loss": statistics.fmean(hist["loss"]),
        "final_acc": hist["evals"][-1]["acc"],
        "final_test_loss": hist["evals"][-1]["loss"],
        "converged": _converged(hist["evals"], "acc", 0.01),
        "w_r_change": _w_r_change(enc, w0),
        "seconds": hist["seconds"],
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
    """Train on the grid disk task; test at the training grid and at finer grids; centred isotropy."""
    torch.set_num_threads(cfg.threads)
    name = cfg.encoding
    torch.manual_seed(cfg.seed)
    enc = build_encoding(name, cfg.dim, cfg.grid, cfg.hidden, cfg.freq_std, cfg.seed)
    model = TransformerEncoder(2, 1, dim=cfg.dim, depth=cfg.depth, num_heads=cfg.heads, encoding=enc)
    w0 = enc.w_r.detach().clone() if isinstance(enc, LearnableFourierEncoding) else None
    coords = grid_radius_task(1, torch.Generator().manual_seed(0), grid=cfg.grid)["coords"]
    pos = encoding_input(name, coords, cfg.grid)
    test = grid_radius_task(cfg.eval_samples, torch.Generator().manual_seed(10_000 + cfg.seed),
                            grid=cfg.grid, radius=cfg.radius)

    def sample(step: int, gen: torch.Generator) -> dict:
        return grid_radius_task(cfg.batch, gen, grid=cfg.grid, radius=cfg.radius)

    def loss_fn(net: nn.Module, batch: dict):
        logits = net(batch["tokens"], pos)[..., 0]
        return F.binary_cross_entropy_with_logits(logits, batch["labels"]), {}

    def evaluate(net: nn.Module) -> dict:
        return token_metrics(net(test["tokens"], pos)[..., 0], test["labels"])

    tc = TrainConfig(steps=cfg.steps, lr=cfg.lr, eval_every=cfg.eval_every, seed=cfg.seed, threads=cfg.threads,
                     lr_scales=cfg.lr_scales)
    hist = train(model, sample, loss_fn, tc, evaluate=evaluate)
    model.eval()
    finer = {str(g): _grid_eval(model, name, cfg, g, 20_000 + cfg.seed) for g in cfg.test_grids}
    iso = None
    if name in CONTINUOUS:
        iso = centred_isotropy(lambda c: model.position_features(encoding_input(name, c, cfg.grid)), cfg.grid)
    return {
        "task": "grid",
        "encoding": name,
        "seed": cfg.seed,
        "loss_curve": _thin(hist["loss"]),
        "evals": hist["evals"],
        "auc_loss": statistics.fmean(hist["loss"]),
        "final_bacc": hist["evals"][-1]["bacc"],
        "final_bce": hist["evals"][-1]["bce"],
        "finer": finer,
        "finer_bacc": statistics.fmean(m["bacc"] for m in finer.values()) if finer else None,
        "converged": _converged(hist["evals"], "bacc", 0.01),
        "isotropy": iso,
        "anisotropy": iso["anisotropy"] if iso else None,
        "w_r_change": _w_r_change(enc, w0),
        "seconds": hist["seconds"],
    }


# ------------------------------------------------------------------ plan
PROFILES = {
    # quick: indicative only. Shorter training than full (the grid task's plateau lasts about
    # 1,000 steps for most encodings), 2 seeds, no "none" reference.
    "quick": dict(seeds=2, encodings=ENCODINGS[1:], digits_steps=600, digits_eval=100,
                  grid_steps=1200, grid_eval=100),
    # full: trained to convergence (checked per run), 8 seeds, with the "none" reference.
    "full": dict(seeds=8, encodings=ENCODINGS, digits_steps=1500, digits_eval=100,
                 grid_steps=2000, grid_eval=100),
}


def plan(profile: str, seeds: int | None = None) -> list[Job]:
    """Jobs of the ``quick`` or ``full`` profile (``seeds`` overrides the seed count)."""
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {', '.join(PROFILES)}, got {profile!r}")
    p = PROFILES[profile]
    jobs: list[Job] = []
    for seed in range(seeds or p["seeds"]):
        for enc in p["encodings"]:
            dc = DigitsConfig(encoding=enc, seed=seed, steps=p["digits_steps"], eval_every=p["digits_eval"])
            jobs.append(Job(f"digits.{enc}.s{seed}", run_digits, dc, cost=1.5))
            gc = GridConfig(encoding=enc, seed=seed, steps=p["grid_steps"], eval_every=p["grid_eval"])
            jobs.append(Job(f"grid.{enc}.s{seed}", run_grid, gc, cost=1.0))
    return jobs


# ------------------------------------------------------------------ summary
def summarize(results: dict[str, dict]) -> dict:
    """Per-encoding means ± std, mean curves, and every claim as paired per-seed differences."""
    runs: dict[str, dict[str, dict[int, dict]]] = {}
    for res in results.values():
        if isinstance(res, dict) and "task" in res:
            runs.setdefault(res["task"], {}).setdefault(res["encoding"], {})[res["seed"]] = res
    table: dict[str, dict[str, dict]] = {}
    curves: dict[str, dict[str, dict]] = {}
    keys = {"digits": ("auc_loss", "final_acc", "final_test_loss", "w_r_change"),
            "grid": ("auc_loss", "final_bacc", "final_bce", "finer_bacc", "anisotropy", "w_r_change")}
    for task, by_enc in runs.items():
        table[task], curves[task] = {}, {}
        for enc in ENCODINGS:
            seeds = by_enc.get(enc)
            if not seeds:
                continue
            rs = list(seeds.values())
            row = {k: mean_std([r[k] for r in rs]) for k in keys[task]}
            row["converged"] = f"{sum(bool(r['converged']) for r in rs)}/{len(rs)}"
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
            metric = "acc" if task == "digits" else "bacc"
            curves[task][enc] = {
                "loss_step": [p[0] for p in rs[0]["loss_curve"]],
                "loss": [statistics.fmean(v) for v in zip(*[[p[1] for p in r["loss_curve"]] for r in rs])],
                "eval_step": [e["step"] for e in rs[0]["evals"]],
                "eval": [statistics.fmean(v) for v in zip(*[[e[metric] for e in r["evals"]] for r in rs])],
                "metric": metric,
            }
    claims: dict[str, dict] = {}
    for claim, (key, direction, task) in CLAIMS.items():
        by_enc = runs.get(task, {})
        if "lff_mlp" not in by_enc:
            continue
        lff = {s: r[key] for s, r in by_enc["lff_mlp"].items()}
        per_base = {}
        for base in BASELINES:
            if base in by_enc and (key != "anisotropy" or base in CONTINUOUS):
                per_base[base] = paired_difference(lff, {s: r[key] for s, r in by_enc[base].items()},
                                                   direction=direction)
        by_verdict: dict[str, list[str]] = {}
        for base, d in per_base.items():
            by_verdict.setdefault(d["verdict"], []).append(base)
        # one line per claim for the CLI; each baseline keeps its own interval and verdict in "vs"
        summary_line = "; ".join(f"{v} vs {', '.join(bs)}" for v, bs in by_verdict.items())
        claims[claim] = {"metric": key, "direction": direction, "task": task, "vs": per_base,
                         "verdict": summary_line}
    n_seeds = max((len(s) for by in runs.values() for s in by.values()), default=0)
    return {"table": table, "curves": curves, "claims": claims, "seeds": n_seeds,
            "lr_scales": dict(LR_SCALES)}
