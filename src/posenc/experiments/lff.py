"""Reproduction section ``lff``: learnable Fourier features vs other position encodings.

Li, Si, Li, Hsieh and Bengio, "Learnable Fourier Features for Multi-Dimensional
Spatial Positional Encoding" (NeurIPS 2021) claim that LFF + MLP (i) converges
faster and (ii) is more accurate where L2 distances between 2D positions matter.
Their benchmarks (ImageNet64, COCO, widget captioning) are out of reach here, so
the claims are tested on the synthetic "occupied and within radius R of the
marker" tasks of :mod:`posenc.data.grid_tasks` with a tiny pre-LN transformer
(:class:`posenc.models.TransformerEncoder`), comparing eight encodings:

``none``, ``table1d`` (learned table over the flattened cells), ``table2d``
(learned ``G x G`` table), ``sine2d`` (per-axis sinusoidal), ``mlp`` (MLP on raw
coordinates), ``rff_mlp`` (fixed random Fourier features + MLP), ``lff_nomlp``
(learnable Fourier features, no MLP), ``lff_mlp`` (Algorithm 1).

Jobs:

* ``grid``: one encoding on the disk (L2) or square (Chebyshev) task, one seed:
  per-step training loss, held-out BCE / balanced accuracy every ``eval_every``
  steps, area under the loss curve, steps to a target accuracy, and the
  isotropy of the encoding's similarity before and after training;
* ``holdout``: the point-set task with a region of the plane never seen in
  training; scored separately on held-out-region tokens;
* the frequency-scale sweep: ``lff_mlp`` grid jobs with other ``freq_std = 1/gamma``.

Positions given to the encodings: integer cells for the tables, cell units
(one unit per cell) for ``sine2d`` (as in ViT's 2D sin-cos tables), and
coordinates in ``[-1, 1]`` (one cell = ``2/G``) for the MLP-based encodings.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from posenc.data.grid_tasks import grid_radius_task, in_box, point_set_task
from posenc.encodings import (
    CoordinateMLPEncoding,
    LearnableFourierEncoding,
    LearnedTableEncoding,
    SinusoidalEncoding,
)
from posenc.models import TrainConfig, TransformerEncoder, train
from posenc.experiments.stats import mean_std
from posenc.report.section import Job

ENCODINGS = ("none", "table1d", "table2d", "sine2d", "mlp", "rff_mlp", "lff_nomlp", "lff_mlp")
CONTINUOUS = ("sine2d", "mlp", "rff_mlp", "lff_nomlp", "lff_mlp")
TASKS = {"disk": "l2", "square": "linf"}


@dataclass(frozen=True)
class GridConfig:
    """One training run on the grid radius task."""

    encoding: str = "lff_mlp"
    task: str = "disk"  # "disk" (L2) or "square" (Chebyshev)
    seed: int = 0
    grid: int = 8
    radius: float = 2.5  # disk radius in cells; the square uses ``square_radius``
    square_radius: float = 2.0
    dim: int = 32
    depth: int = 2
    heads: int = 4
    hidden: int = 32
    freq_std: float = 3.0  # std of W_r = 1 / gamma, in 1 / coordinate units ([-1, 1] spans the grid)
    steps: int = 300
    batch: int = 32
    lr: float = 3e-3
    eval_every: int = 25
    eval_samples: int = 256
    target_bacc: float = 0.9
    threads: int = 1


@dataclass(frozen=True)
class HoldoutConfig:
    """One training run on the point-set task with a held-out region."""

    encoding: str = "lff_mlp"
    seed: int = 0
    grid: int = 8  # tables quantise positions to this grid
    num_points: int = 48
    radius: float = 0.6
    box: tuple[float, float, float, float] = (0.25, 1.0, 0.25, 1.0)
    dim: int = 32
    depth: int = 2
    heads: int = 4
    hidden: int = 32
    freq_std: float = 3.0
    steps: int = 300
    batch: int = 32
    lr: float = 3e-3
    eval_samples: int = 256
    threads: int = 1


@dataclass(frozen=True)
class SignalConfig:
    """Size of each encoding's position-dependent signal at initialisation (no training)."""

    seed: int = 0
    grid: int = 8
    dim: int = 32
    depth: int = 2
    heads: int = 4
    hidden: int = 32
    freq_std: float = 3.0
    samples: int = 256


# ------------------------------------------------------------------ encodings
def build_encoding(name: str, dim: int, grid: int, hidden: int, freq_std: float, seed: int) -> nn.Module | None:
    """The encoding called ``name`` in this section, width ``dim``."""
    gamma = 1.0 / freq_std
    if name == "none":
        return None
    if name == "table1d":
        return LearnedTableEncoding(in_dim=1, grid_size=grid * grid, num_features=dim, seed=seed)
    if name == "table2d":
        return LearnedTableEncoding(in_dim=2, grid_size=grid, num_features=dim, seed=seed)
    if name == "sine2d":
        return SinusoidalEncoding(in_dim=2, num_features=dim)
    if name == "mlp":
        return CoordinateMLPEncoding(in_dim=2, num_features=dim, hidden_dim=hidden, seed=seed)
    if name in ("rff_mlp", "lff_nomlp", "lff_mlp"):
        return LearnableFourierEncoding(
            in_dim=2, num_features=dim, hidden_dim=hidden, gamma=gamma, seed=seed,
            learnable_freqs=name != "rff_mlp", use_mlp=name != "lff_nomlp",
        )
    raise ValueError(f"encoding must be one of {', '.join(ENCODINGS)}, got {name!r}")


def encoding_input(name: str, coords: torch.Tensor, grid: int) -> torch.Tensor | None:
    """Positions for encoding ``name`` from coordinates ``(..., 2)`` in ``[-1, 1]``."""
    cell = (coords + 1.0) * (grid / 2.0) - 0.5  # cell units: centres at 0 .. grid-1
    if name == "none":
        return None
    if name in ("table1d", "table2d"):
        idx = cell.round().clamp(0, grid - 1).long()
        return idx[..., :1] * grid + idx[..., 1:] if name == "table1d" else idx
    if name == "sine2d":
        return cell
    return coords


def isotropy(model: TransformerEncoder, name: str, grid: int, steps: int = 8) -> dict | None:
    """Cosine similarity of the encoding at the grid centre to points along an axis vs a diagonal.

    Distances ``d`` in cells from 0.5 to ``grid / 2 - 0.5``; ``axis`` averages the
    four axis directions, ``diagonal`` the four diagonals. ``anisotropy`` is the
    mean ``|axis - diagonal|``. Only for encodings of continuous positions.
    """
    if name not in CONTINUOUS:
        return None
    dist = torch.linspace(0.5, grid / 2 - 0.5, steps)
    dirs_axis = torch.tensor([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.0, -1.0]])
    dirs_diag = torch.tensor([[1.0, 1.0], [1.0, -1.0], [-1.0, 1.0], [-1.0, -1.0]]) / math.sqrt(2.0)
    to_coord = 2.0 / grid

    def sims(dirs: torch.Tensor) -> list[float]:
        pts = dist[:, None, None] * dirs[None] * to_coord  # (S, 4, 2) coordinates around the centre 0
        with torch.no_grad():
            ref = model.position_features(encoding_input(name, torch.zeros(1, 2), grid))
            feats = model.position_features(encoding_input(name, pts, grid))
        return F.cosine_similarity(feats, ref, dim=-1).mean(-1).tolist()

    axis, diag = sims(dirs_axis), sims(dirs_diag)
    return {"distance": dist.tolist(), "axis": axis, "diagonal": diag,
            "anisotropy": statistics.fmean(abs(a - b) for a, b in zip(axis, diag))}


# ------------------------------------------------------------------ metrics
def token_metrics(logits: torch.Tensor, labels: torch.Tensor) -> dict[str, float]:
    """BCE, accuracy and balanced accuracy ((TPR + TNR) / 2) over all tokens."""
    bce = F.binary_cross_entropy_with_logits(logits, labels)
    pred = logits > 0
    pos = labels > 0.5
    tpr = (pred & pos).sum() / pos.sum().clamp_min(1)
    tnr = (~pred & ~pos).sum() / (~pos).sum().clamp_min(1)
    return {"bce": float(bce), "acc": float((pred == pos).float().mean()), "bacc": float((tpr + tnr) / 2)}


def steps_to_target(evals: list[dict], key: str, target: float) -> int | None:
    """First evaluated step whose ``key`` reaches ``target`` (``None``: never)."""
    for e in evals:
        if e[key] >= target:
            return int(e["step"])
    return None


# ------------------------------------------------------------------ jobs
def build_model(cfg, grid: int) -> tuple[TransformerEncoder, str]:
    """The section's transformer for ``cfg`` (a :class:`GridConfig`-like config), seeded; and its encoding name."""
    torch.manual_seed(cfg.seed)  # nn.Linear default inits of the transformer
    enc = build_encoding(cfg.encoding, cfg.dim, grid, cfg.hidden, cfg.freq_std, cfg.seed)
    return TransformerEncoder(2, 1, dim=cfg.dim, depth=cfg.depth, num_heads=cfg.heads, encoding=enc), cfg.encoding


def run_grid(cfg: GridConfig) -> dict:
    """Train on the grid disk/square task; return curves and final metrics."""
    torch.set_num_threads(cfg.threads)
    metric = TASKS[cfg.task]
    radius = cfg.radius if cfg.task == "disk" else cfg.square_radius
    model, name = build_model(cfg, cfg.grid)
    coords = grid_radius_task(1, torch.Generator().manual_seed(0), grid=cfg.grid)["coords"]
    pos = encoding_input(name, coords, cfg.grid)
    test = grid_radius_task(cfg.eval_samples, torch.Generator().manual_seed(10_000 + cfg.seed),
                            grid=cfg.grid, radius=radius, metric=metric)
    iso_init = isotropy(model, name, cfg.grid)
    with torch.no_grad():  # size of the positional signal vs the token embedding at initialisation
        tok_rms = float(model.embed(test["tokens"]).pow(2).mean().sqrt())
        pos_rms = float(model.position_features(pos).pow(2).mean().sqrt()) if pos is not None else 0.0

    def sample(step: int, gen: torch.Generator) -> dict:
        return grid_radius_task(cfg.batch, gen, grid=cfg.grid, radius=radius, metric=metric)

    def loss_fn(net: nn.Module, batch: dict):
        logits = net(batch["tokens"], pos)[..., 0]
        return F.binary_cross_entropy_with_logits(logits, batch["labels"]), {}

    def evaluate(net: nn.Module) -> dict:
        return token_metrics(net(test["tokens"], pos)[..., 0], test["labels"])

    tc = TrainConfig(steps=cfg.steps, lr=cfg.lr, eval_every=cfg.eval_every, seed=cfg.seed, threads=cfg.threads)
    hist = train(model, sample, loss_fn, tc, evaluate=evaluate)
    model.eval()
    final = hist["evals"][-1]
    return {
        "loss_curve": hist["loss"],
        "evals": hist["evals"],
        "auc_loss": statistics.fmean(hist["loss"]),
        "auc_test_bce": statistics.fmean(e["bce"] for e in hist["evals"]),
        "steps_to_target": steps_to_target(hist["evals"], "bacc", cfg.target_bacc),
        "final": {k: final[k] for k in ("bce", "acc", "bacc")},
        "isotropy_init": iso_init,
        "pos_to_token_rms_init": pos_rms / tok_rms,
        "isotropy_trained": isotropy(model, name, cfg.grid),
        "seconds": hist["seconds"],
        "tokens_per_s": cfg.steps * cfg.batch * cfg.grid**2 / hist["seconds"],
    }


def run_holdout(cfg: HoldoutConfig) -> dict:
    """Train on point sets avoiding ``box``; score held-out-region tokens separately."""
    torch.set_num_threads(cfg.threads)
    model, name = build_model(cfg, cfg.grid)
    test = point_set_task(cfg.eval_samples, torch.Generator().manual_seed(20_000 + cfg.seed),
                          num_points=cfg.num_points, radius=cfg.radius)

    def sample(step: int, gen: torch.Generator) -> dict:
        return point_set_task(cfg.batch, gen, num_points=cfg.num_points, radius=cfg.radius, exclude=cfg.box)

    def loss_fn(net: nn.Module, batch: dict):
        logits = net(batch["tokens"], encoding_input(name, batch["positions"], cfg.grid))[..., 0]
        return F.binary_cross_entropy_with_logits(logits, batch["labels"]), {}

    tc = TrainConfig(steps=cfg.steps, lr=cfg.lr, seed=cfg.seed, threads=cfg.threads)
    hist = train(model, sample, loss_fn, tc)
    model.eval()
    with torch.no_grad():
        logits = model(test["tokens"], encoding_input(name, test["positions"], cfg.grid))[..., 0]
    held = in_box(test["positions"], cfg.box)
    held[:, 0] = False  # the marker token is never a positive; score the others
    seen = ~held
    seen[:, 0] = False
    return {
        "heldout": token_metrics(logits[held], test["labels"][held]),
        "seen": token_metrics(logits[seen], test["labels"][seen]),
        "train_loss_end": statistics.fmean(hist["loss"][-20:]),
        "seconds": hist["seconds"],
    }


def run_signal(cfg: SignalConfig) -> dict:
    """RMS of each encoding's features over the grid, and of their position-dependent part
    (features minus their mean over the cells), relative to the RMS of the token embeddings,
    at initialisation. A small position-dependent part means the transformer starts nearly
    blind to position."""
    torch.set_num_threads(1)
    data = grid_radius_task(cfg.samples, torch.Generator().manual_seed(0), grid=cfg.grid)
    out = {}
    for name in ENCODINGS:
        if name == "none":
            continue
        model, _ = build_model(GridConfig(encoding=name, seed=cfg.seed, grid=cfg.grid, dim=cfg.dim, depth=cfg.depth,
                                     heads=cfg.heads, hidden=cfg.hidden, freq_std=cfg.freq_std), cfg.grid)
        with torch.no_grad():
            tok = float(model.embed(data["tokens"]).pow(2).mean().sqrt())
            feats = model.position_features(encoding_input(name, data["coords"], cfg.grid))
            out[name] = {"total": float(feats.pow(2).mean().sqrt()) / tok,
                         "position_dependent": float((feats - feats.mean(0)).pow(2).mean().sqrt()) / tok}
    return out


# ------------------------------------------------------------------ plan
PROFILES = {
    # quick: a 6x6 grid and few steps, to fit the 120 s budget on 2 shared cores. The 1D
    # table is left out: on a fixed grid it is the 2D table (same parameters, same draws,
    # index r*G+c), so it would only repeat that row (the full profile shows it).
    # The square task runs a subset (the disk is the task of the L2 claim).
    "quick": dict(seeds=2, grid=6, steps=240, batch=16, eval_every=20, eval_samples=128, holdout_steps=240,
                  holdout_points=24, freq_stds=(0.3, 3.0, 30.0),
                  encodings=tuple(e for e in ENCODINGS if e != "table1d"),
                  square_encodings=("none", "table2d", "sine2d", "mlp", "lff_mlp"),
                  holdout_encodings=("table2d", "sine2d", "lff_mlp")),
    "full": dict(seeds=3, grid=8, steps=500, batch=32, eval_every=25, eval_samples=256, holdout_steps=500,
                 holdout_points=48, freq_stds=(0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0),
                 encodings=ENCODINGS, holdout_encodings=tuple(e for e in ENCODINGS if e != "none")),
}


def plan(profile: str, seeds: int | None = None) -> list[Job]:
    """Jobs of the ``quick`` or ``full`` profile (``seeds`` overrides the seed count)."""
    p = PROFILES[profile]
    n_seeds = seeds or p["seeds"]
    base = GridConfig()
    jobs: list[Job] = []
    common = dict(grid=p["grid"], steps=p["steps"], batch=p["batch"], eval_every=p["eval_every"],
                  eval_samples=p["eval_samples"])
    for seed in range(n_seeds):
        for task in TASKS:
            for enc in p["encodings"] if task == "disk" else p.get("square_encodings", p["encodings"]):
                cfg = GridConfig(encoding=enc, task=task, seed=seed, **common)
                jobs.append(Job(f"grid.{task}.{enc}.s{seed}", run_grid, cfg, cost=1.0))
        for std in p["freq_stds"]:
            if std == base.freq_std:
                continue  # the main grid job already covers it
            cfg = GridConfig(encoding="lff_mlp", task="disk", seed=seed, freq_std=std, **common)
            jobs.append(Job(f"scale.std={std:g}.s{seed}", run_grid, cfg, cost=1.0))
        jobs.append(Job(f"signal.s{seed}", run_signal, SignalConfig(seed=seed, grid=p["grid"]), cost=0.1))
        for enc in p["holdout_encodings"]:
            cfg = HoldoutConfig(encoding=enc, seed=seed, grid=p["grid"], steps=p["holdout_steps"],
                                batch=p["batch"], num_points=p["holdout_points"], eval_samples=p["eval_samples"])
            jobs.append(Job(f"holdout.{enc}.s{seed}", run_holdout, cfg, cost=1.0))
    return jobs


# ------------------------------------------------------------------ summary
def _parse(key: str) -> list[str]:
    parts = key.split(".")
    # "scale.std=0.3.s0" splits the float: glue it back
    if parts[0] == "scale":
        return ["scale", ".".join(parts[1:-1]), parts[-1]]
    return parts


def summarize(results: dict[str, dict]) -> dict:
    """Means ± std over seeds, and each claim as a boolean with its numbers."""
    grid: dict[str, dict[str, list[dict]]] = {}
    scale: dict[float, list[dict]] = {}
    holdout: dict[str, list[dict]] = {}
    signal_runs: list[dict] = []
    for key, res in results.items():
        parts = _parse(key)
        if parts[0] == "grid":
            grid.setdefault(parts[1], {}).setdefault(parts[2], []).append(res)
        elif parts[0] == "scale":
            scale.setdefault(float(parts[1].split("=")[1]), []).append(res)
        elif parts[0] == "holdout":
            holdout.setdefault(parts[1], []).append(res)
        elif parts[0] == "signal":
            signal_runs.append(res)
    base_std = GridConfig().freq_std
    if "disk" in grid and "lff_mlp" in grid["disk"]:
        scale.setdefault(base_std, []).extend(grid["disk"]["lff_mlp"])

    table: dict[str, dict[str, dict]] = {}
    curves: dict[str, dict[str, list[float]]] = {}
    for task, by_enc in grid.items():
        table[task] = {}
        curves[task] = {}
        for enc in ENCODINGS:
            runs = by_enc.get(enc)
            if not runs:
                continue
            reached = [r["steps_to_target"] for r in runs if r["steps_to_target"] is not None]
            row = {
                "auc_loss": mean_std([r["auc_loss"] for r in runs]),
                "auc_test_bce": mean_std([r["auc_test_bce"] for r in runs]),
                "final_bce": mean_std([r["final"]["bce"] for r in runs]),
                "final_bacc": mean_std([r["final"]["bacc"] for r in runs]),
                "reached_target": f"{len(reached)}/{len(runs)}",
                "steps_to_target": mean_std(reached) if reached else None,
                "tokens_per_s": mean_std([r["tokens_per_s"] for r in runs]),
                "pos_to_token_rms_init": mean_std([r["pos_to_token_rms_init"] for r in runs]),
            }
            iso_t = [r["isotropy_trained"] for r in runs if r["isotropy_trained"]]
            iso_i = [r["isotropy_init"] for r in runs if r["isotropy_init"]]
            if iso_t:
                row["anisotropy_init"] = mean_std([i["anisotropy"] for i in iso_i])
                row["anisotropy_trained"] = mean_std([i["anisotropy"] for i in iso_t])
                row["iso_curve"] = {
                    "distance": iso_t[0]["distance"],
                    "axis": [statistics.fmean(v) for v in zip(*[i["axis"] for i in iso_t])],
                    "diagonal": [statistics.fmean(v) for v in zip(*[i["diagonal"] for i in iso_t])],
                }
            table[task][enc] = row
            curves[task][enc] = [statistics.fmean(v) for v in zip(*[r["loss_curve"] for r in runs])]

    claims: dict[str, dict] = {}
    disk = table.get("disk", {})
    square = table.get("square", {})
    if "lff_mlp" in disk:
        others = {e: r["auc_loss"]["mean"] for e, r in disk.items() if e != "lff_mlp"}
        best_other = min(others, key=others.get) if others else None
        claims["faster_convergence"] = {
            "holds": bool(best_other is None or disk["lff_mlp"]["auc_loss"]["mean"] < others[best_other]),
            "within_noise": bool(best_other is not None and abs(disk["lff_mlp"]["auc_loss"]["mean"] - others[best_other])
                                 <= max(disk["lff_mlp"]["auc_loss"]["std"], disk[best_other]["auc_loss"]["std"])),
            "lff_mlp_auc": disk["lff_mlp"]["auc_loss"]["mean"],
            "best_other": best_other,
            "best_other_auc": others.get(best_other),
        }
        accs = {e: r["final_bacc"]["mean"] for e, r in disk.items()}
        claims["best_final_disk"] = {
            "holds": bool(max(accs, key=accs.get) == "lff_mlp"),
            "ranking": sorted(accs, key=accs.get, reverse=True),
        }
    if "lff_mlp" in disk and "lff_mlp" in square:
        gains = {}
        for enc in disk:
            if enc != "lff_mlp" and enc in square:
                gains[enc] = {
                    "disk_gain": disk["lff_mlp"]["final_bacc"]["mean"] - disk[enc]["final_bacc"]["mean"],
                    "square_gain": square["lff_mlp"]["final_bacc"]["mean"] - square[enc]["final_bacc"]["mean"],
                }
        ref = "table2d" if "table2d" in gains else next(iter(gains), None)
        # "gains more on the disk" needs a gain on the disk in the first place
        claims["gain_larger_on_disk"] = {
            "holds": bool(ref and 0 < gains[ref]["disk_gain"] and gains[ref]["disk_gain"] > gains[ref]["square_gain"]),
            "reference": ref,
            "gains": gains,
        }
    hold_table = {
        enc: {
            "heldout_bacc": mean_std([r["heldout"]["bacc"] for r in runs]),
            "seen_bacc": mean_std([r["seen"]["bacc"] for r in runs]),
            "heldout_bce": mean_std([r["heldout"]["bce"] for r in runs]),
            "seen_bce": mean_std([r["seen"]["bce"] for r in runs]),
        }
        for enc, runs in holdout.items()
    }
    if "lff_mlp" in hold_table and "table2d" in hold_table:
        drop = {e: r["seen_bacc"]["mean"] - r["heldout_bacc"]["mean"] for e, r in hold_table.items()}
        claims["tables_fail_on_unseen"] = {
            "holds": bool(drop["table2d"] > drop["lff_mlp"]),
            "drop_seen_minus_heldout": drop,
            # the comparison says something only if the table learned the region it saw
            "informative": bool(hold_table["table2d"]["seen_bacc"]["mean"] > 0.6),
        }
    scale_table = {
        std: {"final_bce": mean_std([r["final"]["bce"] for r in runs]),
              "final_bacc": mean_std([r["final"]["bacc"] for r in runs]),
              "auc_loss": mean_std([r["auc_loss"] for r in runs])}
        for std, runs in sorted(scale.items())
    }
    if len(scale_table) >= 3:
        stds = sorted(scale_table)
        aucs = [scale_table[s]["auc_loss"]["mean"] for s in stds]
        best = min(range(len(aucs)), key=aucs.__getitem__)
        sd = [scale_table[s]["auc_loss"]["std"] for s in stds]
        margin = min(aucs[0], aucs[-1]) - aucs[best]
        claims["u_shaped_scale"] = {"holds": bool(0 < best < len(aucs) - 1), "best_std": stds[best],
                                    "auc_by_std": dict(zip(map(str, stds), aucs)),
                                    "margin_to_ends": margin, "within_noise": bool(margin <= max(sd))}
    if "lff_mlp" in disk and "sine2d" in disk and "anisotropy_trained" in disk["lff_mlp"]:
        claims["lff_more_isotropic_than_sine"] = {
            "holds": bool(disk["lff_mlp"]["anisotropy_trained"]["mean"] < disk["sine2d"]["anisotropy_trained"]["mean"]),
            "lff_mlp": disk["lff_mlp"]["anisotropy_trained"]["mean"],
            "sine2d": disk["sine2d"]["anisotropy_trained"]["mean"],
        }
    signal = {
        enc: {k: mean_std([r[enc][k] for r in signal_runs]) for k in ("total", "position_dependent")}
        for enc in ENCODINGS if signal_runs and enc in signal_runs[0]
    }
    n_seeds = max((len(v) for by in grid.values() for v in by.values()), default=0)
    return {"grid": table, "curves": curves, "holdout": hold_table,
            "scale": {str(k): v for k, v in scale_table.items()}, "signal": signal, "claims": claims,
            "seeds": n_seeds}
