"""Reproduction section ``cape``: resolution transfer of 2D position encodings in a tiny ViT.

Likhomanenko et al., "CAPE: Encoding Relative Positions with Continuous Augmented
Positional Embeddings" (NeurIPS 2021, arXiv 2106.03143) train ViTs on ImageNet at
224 px and evaluate them, without retraining, at 160-672 px: CAPE (patch positions
in ``[-1, 1]``, augmented by a global shift, a local shift and a global scale) should
match the plain sinusoidal embedding at the training resolution and degrade less
away from it, also less than a learned table resized bicubically; global scaling and
training at mixed resolutions should help further.

Here :class:`posenc.models.TinyViT` (4 x 4-pixel patches, CLS token) learns
scikit-learn's 8 x 8 digits rendered at ``train_res`` pixels and is tested on the
*same* held-out digits rendered at every resolution of ``test_res`` (bilinear
resampling of the 8 x 8 originals, as the ``lff`` section's digits task does): the
digit always fills the image, so a position encoding that maps the image to
``[-1, 1]`` keeps each stroke at its coordinates, but the grid gets denser or
coarser than in training (16 px: 4 x 4 patches; 12 px: 3 x 3; 32 px: 8 x 8). The
arrangement of strokes carries the class (the variant without any position encoding
is the floor that shows it), and no encoding is right by construction: the table is
resampled, the sinusoids are evaluated at unseen positions, CAPE at positions it may
have seen through its augmentation.

Variants (the position encoding added to the patch embeddings):

* ``none`` -- no position information (the floor);
* ``table`` -- a learned ``G x G`` table (``G = train_res / patch``), resampled
  bicubically to the test grid (the paper's ``abspos``; timm's convention);
* ``sine`` -- CAPE's 2D sinusoids (the authors' convention) without augmentation
  (the paper's ``sinpos``: the same features, nothing drawn);
* ``cape`` -- the authors' vision setting: global shift ``U[-0.5, 0.5]`` per axis,
  local shift ``+-1/n``, global scale ``lambda ~ U[0.7, 1.4]``;
* ``cape_noscale`` -- ``cape`` without the global scaling;
* ``cape_mixed`` -- ``cape`` trained on a resolution drawn per step from
  ``mixed_res`` (ours: 0.75x, 1x and 1.25x the training resolution; the tests at
  1.5x and 2x stay unseen).

Fairness: every variant gets the same model, steps, batches (the batch generator
is seeded by the run's seed), learning rate (one rule for all, :data:`LR`, chosen
on a validation split by :func:`choose_lr`) and **the same initial transformer**:
the model without its encoding is built from the seed alone (:func:`build_model`),
so same-seed runs of different variants differ only in the encoding.

Every run records its validation accuracy at the training resolution every
``eval_every`` steps and is *converged* when its evaluations over the last third of
training lie within ``converge_tol`` (:func:`converged`). Each claim is a paired per-seed
difference over the seeds whose two runs converged (the convergence gate: fewer than three
such pairs read "not decided"), with a 95% t interval, its smallest detectable difference
(:func:`~posenc.experiments.stats.detectable_difference`) and a Holm-adjusted verdict over
the section's claims. "Mixed resolutions help" is read at the resolutions neither variant
trained at (:func:`unseen_accuracy`). CAPE learns this task several times more slowly than
the unaugmented encodings (its global shift removes the absolute position of the centred
digits, so the model must learn the strokes' relative layout): in the quick profile's 700
steps the unaugmented variants converge and CAPE's do not, so CAPE's claims are decided by
the full profile (3,000 steps, 8 seeds).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from posenc.encodings import CAPEEncoding, LearnedTableEncoding
from posenc.experiments.job import Job
from posenc.experiments.stats import (
    CONTRADICTED,
    HOLDS,
    NOT_CONFIRMED,
    NOT_DECIDED,
    detectable_difference,
    holm_verdicts,
    mean_std,
    paired_difference,
)
from posenc.models import TinyViT, TrainConfig, train

VARIANTS = ("none", "table", "sine", "cape", "cape_noscale", "cape_mixed")
NUM_CLASSES = 10
#: The peak AdamW learning rate of every run (warm-up, cosine to 10%), chosen by
#: :func:`choose_lr` on the full profile's sweep (``docs/cape.md``).
LR = 3e-3
#: The sweep's candidates (a factor-2 grid around the rate the other sections use).
LR_GRID = (1.5e-3, 3e-3, 6e-3)
#: Share of the training images held out as the validation split (a seeded permutation).
VAL_FRACTION = 0.2


@dataclass(frozen=True)
class ResolutionConfig:
    """One TinyViT run of one variant: trained at ``train_res``, tested at each ``test_res``.

    Resolutions are image sides in pixels, multiples of ``patch``.
    """

    variant: str = "cape"
    seed: int = 0
    train_res: int = 16
    test_res: tuple[int, ...] = (12, 16, 20, 24, 32)
    mixed_res: tuple[int, ...] = (12, 16, 20)  # cape_mixed draws its training resolution from these
    patch: int = 4
    dim: int = 32
    depth: int = 2
    heads: int = 4
    steps: int = 700
    batch: int = 64
    lr: float = LR
    eval_every: int = 70
    converge_tol: float = 0.03
    threads: int = 1


# ------------------------------------------------------------------ data
@functools.lru_cache(maxsize=1)
def digits_splits() -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """scikit-learn's 8 x 8 digits: ``{"fit", "val", "test"}`` -> ``(images (n, 1, 8, 8) in [0, 1], labels)``.

    ``test`` is :func:`posenc.data.grid_tasks.digits_images`' held-out quarter (449 images);
    its training part is split once more into ``fit`` and ``val`` (:data:`VAL_FRACTION`).
    """
    from posenc.data.grid_tasks import digits_images

    d = digits_images(upsample=1, seed=0)
    perm = torch.randperm(len(d["y_train"]), generator=torch.Generator().manual_seed(1))
    n_val = int(round(len(perm) * VAL_FRACTION))
    val, fit = perm[:n_val], perm[n_val:]
    return {"fit": (d["x_train"][fit], d["y_train"][fit]), "val": (d["x_train"][val], d["y_train"][val]),
            "test": (d["x_test"], d["y_test"])}


def render(images: torch.Tensor, res: int) -> torch.Tensor:
    """8 x 8 digits ``(n, 1, 8, 8)`` rendered at ``res x res`` (bilinear, antialiased when shrinking)."""
    if images.shape[-1] == res:
        return images
    return F.interpolate(images, size=(res, res), mode="bilinear", align_corners=False, antialias=True)


# ------------------------------------------------------------------ model
def check_config(cfg: ResolutionConfig) -> None:
    if cfg.variant not in VARIANTS:
        raise ValueError(f"variant must be one of {', '.join(VARIANTS)}, got {cfg.variant!r}")
    for r in (cfg.train_res, *cfg.test_res, *cfg.mixed_res):
        if r % cfg.patch:
            raise ValueError(f"resolutions must be multiples of patch={cfg.patch}, got {r}")


def build_encoding(cfg: ResolutionConfig) -> tuple[nn.Module | None, str]:
    """The position encoding of ``cfg.variant`` and the patch positions it takes (``"index"``/``"continuous"``)."""
    v, d = cfg.variant, cfg.dim
    if v == "none":
        return None, "continuous"
    if v == "table":
        g = cfg.train_res // cfg.patch
        return LearnedTableEncoding(in_dim=2, grid_size=(g, g), num_features=d, interpolation="bicubic",
                                    seed=cfg.seed), "index"
    if v == "sine":
        return CAPEEncoding(in_dim=2, num_features=d, max_global_shift=0.0, max_local_shift=0.0,
                            max_global_scaling=1.0), "continuous"
    kw = {"max_global_scaling": 1.0} if v == "cape_noscale" else {}
    return CAPEEncoding(in_dim=2, num_features=d, preset="vision", seed=cfg.seed, **kw), "continuous"


def build_model(cfg: ResolutionConfig) -> TinyViT:
    """The TinyViT of ``cfg.variant``; its transformer's initial weights depend on ``cfg.seed`` only.

    The pairing is :class:`~posenc.models.TinyViT`'s ``init_seed`` (the mechanism every section
    uses): the trunk is drawn from ``cfg.seed`` whatever the encoding, and the encoding keeps its
    own seed, so same-seed runs of different variants start from identical transformers.
    """
    check_config(cfg)
    encoding, kind = build_encoding(cfg)
    return TinyViT(in_channels=1, num_classes=NUM_CLASSES, patch_size=cfg.patch, dim=cfg.dim, depth=cfg.depth,
                   num_heads=cfg.heads, encoding=encoding, positions=kind, cls_token=True, seed=cfg.seed,
                   init_seed=cfg.seed)


def trunk_state(model: TinyViT) -> dict[str, torch.Tensor]:
    """The model's parameters and buffers outside its position encoding."""
    return {k: v for k, v in model.state_dict().items() if not k.startswith("encoder.encoding.")}


@torch.no_grad()
def accuracy(model: nn.Module, images: torch.Tensor, labels: torch.Tensor, res: int, chunk: int = 128) -> float:
    """Accuracy on ``images`` (8 x 8) rendered at ``res`` (evaluation mode)."""
    model.eval()
    x = render(images, res)
    correct = sum(int((model(x[i:i + chunk]).argmax(-1) == labels[i:i + chunk]).sum())
                  for i in range(0, len(labels), chunk))
    return correct / len(labels)


def converged(curve: list[list[float]], steps: int, tol: float) -> bool:
    """Whether the validation accuracy stayed within ``tol`` over the last third of training.

    ``curve`` holds ``[step, accuracy]`` pairs; the evaluations at or after ``2/3 * steps``
    (at least three of them) must lie within ``tol`` of each other.
    """
    tail = [acc for step, acc in curve if step >= 2 * steps / 3]
    return len(tail) >= 3 and max(tail) - min(tail) <= tol + 1e-12  # slack for float rounding


def run_resolution(cfg: ResolutionConfig) -> dict:
    """Train one variant at ``train_res`` (or mixed resolutions) and test it at every ``test_res``."""
    check_config(cfg)
    old = torch.get_num_threads()
    torch.set_num_threads(cfg.threads)
    cpu0 = time.process_time()
    try:
        model = build_model(cfg)
        splits = digits_splits()
        x_fit, y_fit = splits["fit"]
        x_val, y_val = splits["val"]
        x_test, y_test = splits["test"]
        train_res = cfg.mixed_res if cfg.variant == "cape_mixed" else (cfg.train_res,)
        rendered = {r: render(x_fit, r) for r in train_res}

        def sample(step: int, gen: torch.Generator):
            r = train_res[int(torch.randint(len(train_res), (1,), generator=gen))] if len(train_res) > 1 else train_res[0]
            idx = torch.randint(len(y_fit), (cfg.batch,), generator=gen)
            return rendered[r][idx], y_fit[idx]

        def loss_fn(net: nn.Module, batch):
            return F.cross_entropy(net(batch[0]), batch[1]), {}

        def evaluate(net: nn.Module) -> dict:
            return {"val_acc": accuracy(net, x_val, y_val, cfg.train_res)}

        hist = train(model, sample, loss_fn, TrainConfig(steps=cfg.steps, lr=cfg.lr, seed=cfg.seed,
                                                         threads=cfg.threads, eval_every=cfg.eval_every),
                     evaluate=evaluate)
        val_curve = [[e["step"], e["val_acc"]] for e in hist["evals"]]
        acc = {str(r): accuracy(model, x_test, y_test, r) for r in sorted(set(cfg.test_res) | {cfg.train_res})}
        curve = hist["loss"]
        k = max(1, len(curve) // 50)
        return {
            "variant": cfg.variant, "seed": cfg.seed, "train_res": cfg.train_res, "lr": cfg.lr,
            "mixed_res": list(cfg.mixed_res),
            "accuracy": acc, "train_accuracy": acc[str(cfg.train_res)], "val_accuracy": val_curve[-1][1],
            "val_curve": val_curve, "converged": converged(val_curve, cfg.steps, cfg.converge_tol),
            "converge_tol": cfg.converge_tol, "steps": cfg.steps,
            "final_loss": statistics.fmean(curve[-k:]),
            "loss_curve": [statistics.fmean(curve[i:i + k]) for i in range(0, len(curve), k)],
            "seconds": hist["seconds"], "cpu_seconds": time.process_time() - cpu0,
        }
    finally:
        torch.set_num_threads(old)


def run_sweep(cfg: ResolutionConfig) -> dict:
    """One learning-rate sweep point: validation accuracy at the training resolution (no test data read)."""
    out = run_resolution(dataclasses.replace(cfg, test_res=(cfg.train_res,)))
    return {"sweep": True, "variant": cfg.variant, "seed": cfg.seed, "lr": cfg.lr,
            "val_accuracy": out["val_accuracy"], "converged": out["converged"], "seconds": out["seconds"],
            "cpu_seconds": out["cpu_seconds"]}


# ------------------------------------------------------------------ plan
#: quick: 4 seeds, 700 steps at 16 px, tested at 12-32 px (the unaugmented encodings converge; the
#: CAPE variants need several times longer, so their claims are decided by the full profile);
#: full: 8 seeds, 3,000 steps, and the learning-rate sweep (one seed per variant and candidate).
PROFILES = {
    "quick": {"seeds": 4, "base": ResolutionConfig(), "sweep_seeds": 0},
    "full": {"seeds": 8, "base": ResolutionConfig(steps=3000, eval_every=150), "sweep_seeds": 1},
}


def plan(profile: str, seeds: int | None = None) -> list[Job]:
    """Jobs of the ``quick`` or ``full`` profile (``seeds`` overrides the seed count of the main runs)."""
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {', '.join(map(repr, PROFILES))}, got {profile!r}")
    p = PROFILES[profile]
    base: ResolutionConfig = p["base"]
    jobs = []
    for s in range(seeds or p["seeds"]):
        for v in VARIANTS:
            cost = 1.4 if v == "cape_mixed" else 1.0
            jobs.append(Job(f"digits.{v}.s{s}", run_resolution, dataclasses.replace(base, variant=v, seed=s),
                            cost=cost))
    for s in range(p["sweep_seeds"]):
        for lr in LR_GRID:
            for v in VARIANTS:
                cfg = dataclasses.replace(base, variant=v, seed=100 + s, lr=lr)
                jobs.append(Job(f"sweep.lr={lr:g}.{v}.s{s}", run_sweep, cfg, cost=0.9))
    return jobs


# ------------------------------------------------------------------ statistics
def choose_lr(results: dict[str, dict]) -> dict | None:
    """The learning-rate rule: the candidate with the highest validation accuracy at the training
    resolution, averaged over every variant and sweep seed (one rate for all variants)."""
    by_lr: dict[float, list[float]] = {}
    per: dict[float, dict[str, list[float]]] = {}
    for r in results.values():
        if r.get("sweep"):
            by_lr.setdefault(r["lr"], []).append(r["val_accuracy"])
            per.setdefault(r["lr"], {}).setdefault(r["variant"], []).append(r["val_accuracy"])
    if not by_lr:
        return None
    means = {lr: statistics.fmean(v) for lr, v in by_lr.items()}
    best = max(sorted(means), key=lambda lr: means[lr])
    return {"chosen": best, "mean_val_accuracy": {f"{lr:g}": m for lr, m in sorted(means.items())},
            "per_variant": {f"{lr:g}": {v: statistics.fmean(a) for v, a in per[lr].items()} for lr in sorted(per)},
            "used": LR, "agrees": math.isclose(best, LR)}


# ------------------------------------------------------------------ summary
def away_accuracy(acc: dict[str, float], train_res: int) -> float:
    """Mean accuracy over the test resolutions other than the training one."""
    vals = [v for r, v in acc.items() if int(r) != train_res]
    return statistics.fmean(vals) if vals else math.nan


def _runs(results: dict[str, dict]) -> dict[str, dict[int, dict]]:
    """``{variant: {seed: result}}`` of the main runs."""
    out: dict[str, dict[int, dict]] = {}
    for r in results.values():
        if isinstance(r, dict) and not r.get("sweep") and "variant" in r:
            out.setdefault(r["variant"], {})[r["seed"]] = r
    return out


def unseen_accuracy(acc: dict[str, float], train_res: int, mixed_res: Sequence[int]) -> float:
    """Mean accuracy over the test resolutions that neither the training resolution nor the mixed
    training resolutions include (where ``cape_mixed`` has not been trained either)."""
    seen = {train_res, *mixed_res}
    vals = [v for r, v in acc.items() if int(r) not in seen]
    return statistics.fmean(vals) if vals else math.nan


def metric_value(run: dict, metric: str) -> float:
    """``"train"``: accuracy at the training resolution; ``"away"``: mean over the others;
    ``"unseen"``: mean over those no variant trained at (:func:`unseen_accuracy`)."""
    if metric == "train":
        return run["train_accuracy"]
    if metric == "unseen":
        return unseen_accuracy(run["accuracy"], run["train_res"], run.get("mixed_res", ()))
    return away_accuracy(run["accuracy"], run["train_res"])


def compare(by: dict[str, dict[int, dict]], method: str, baseline: str, metric: str, direction: str = "greater",
            margin: float = 0.0) -> dict | None:
    """Paired per-seed difference of ``metric`` between two variants, over the seeds whose two
    runs both converged (the convergence gate: with fewer than three such pairs the verdict is
    "not decided"); the runs that had not converged are listed (``"not_converged"``:
    ``{variant: [seeds]}``)."""
    if method not in by or baseline not in by:
        return None
    seeds = sorted(set(by[method]) & set(by[baseline]))
    diff = paired_difference({s: metric_value(by[method][s], metric) for s in seeds},
                             {s: metric_value(by[baseline][s], metric) for s in seeds},
                             direction=direction, margin=margin,
                             method_converged={s: bool(by[method][s]["converged"]) for s in seeds},
                             baseline_converged={s: bool(by[baseline][s]["converged"]) for s in seeds})
    nc = {v: [s for s in seeds if not by[v][s]["converged"]] for v in (method, baseline)}
    diff.update({"method": method, "baseline": baseline, "metric": metric,
                 "not_converged": {v: ss for v, ss in nc.items() if ss}})
    return diff


#: claim -> (method, baseline, metric, direction, margin)
CLAIMS: dict[str, tuple[str, str, str, str, float]] = {
    "task_needs_position": ("sine", "none", "train", "greater", 0.0),
    "cape_matches_sine_at_train_res": ("cape", "sine", "train", "equal", 0.02),
    "cape_degrades_less_than_sine": ("cape", "sine", "away", "greater", 0.0),
    "cape_beats_table_away": ("cape", "table", "away", "greater", 0.0),
    "scaling_helps_resolution_transfer": ("cape", "cape_noscale", "away", "greater", 0.0),
    # measured where neither variant trained: mixed training sees some of the "away" resolutions
    "mixed_resolutions_help": ("cape_mixed", "cape", "unseen", "greater", 0.0),
}


def summarize(results: dict[str, dict]) -> dict:
    """Accuracy per (variant, resolution), convergence, the claims, and the learning-rate sweep."""
    by = _runs(results)
    table: dict[str, dict] = {}
    for v in (v for v in VARIANTS if v in by):
        runs = by[v]
        res = sorted({int(r) for run in runs.values() for r in run["accuracy"]})
        table[v] = {
            "accuracy": {str(r): mean_std([run["accuracy"].get(str(r)) for run in runs.values()]) for r in res},
            "away": mean_std([away_accuracy(run["accuracy"], run["train_res"]) for run in runs.values()]),
            "val": mean_std([run["val_accuracy"] for run in runs.values()]),
            "converged": sum(bool(run["converged"]) for run in runs.values()), "seeds": len(runs),
            "not_converged": sorted(s for s, run in runs.items() if not run["converged"]),
        }
    claims = {}
    for name, spec in CLAIMS.items():
        c = compare(by, *spec)
        if c is not None:
            claims[name] = c
    holm_verdicts(claims)  # the section's claims are one family
    curves = {v: {"val": [r["val_curve"] for r in runs.values()], "loss": [r["loss_curve"] for r in runs.values()]}
              for v, runs in by.items()}
    first = next((r for runs in by.values() for r in runs.values()), None)
    cpu = [r.get("cpu_seconds") for r in results.values() if isinstance(r, dict)]
    return {"table": table, "claims": claims, "curves": curves, "lr": choose_lr(results),
            "cpu_seconds": sum(c for c in cpu if c) if any(cpu) else None,
            "train_res": first["train_res"] if first else None, "used_lr": first["lr"] if first else None,
            "converge_tol": first.get("converge_tol") if first else None, "steps": first.get("steps") if first else None,
            "seeds": max((len(runs) for runs in by.values()), default=0),
            "verdicts": {v: sum(c["verdict"] == v for c in claims.values())
                         for v in (HOLDS, NOT_CONFIRMED, CONTRADICTED, NOT_DECIDED)}}


# ------------------------------------------------------------------ result schemas
# the types the summary reads from each job's stored result (posenc.report.schema's spec language)
NUM = (float, None)  # a number, or null (a non-finite value is stored as null)
run_resolution.result_schema = {  # type: ignore[attr-defined]
    "variant": str, "seed": int, "train_res": int, "lr": float, "accuracy": {str: NUM}, "train_accuracy": NUM,
    "val_accuracy": NUM, "val_curve": [[NUM]], "converged": bool, "steps": int, "loss_curve": [NUM],
}
run_sweep.result_schema = {  # type: ignore[attr-defined]
    "sweep": bool, "variant": str, "seed": int, "lr": float, "val_accuracy": NUM, "converged": bool,
}
