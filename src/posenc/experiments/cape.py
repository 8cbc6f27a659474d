"""Reproduction section ``cape``: resolution transfer of 2D position encodings in a tiny ViT.

Likhomanenko et al., "CAPE: Encoding Relative Positions with Continuous Augmented
Positional Embeddings" (NeurIPS 2021, arXiv 2106.03143) train ViTs on ImageNet at
224 px and evaluate them, without retraining, at 160-672 px: CAPE (patch positions
in ``[-1, 1]``, augmented by a global shift, a local shift and a global scale) should
match the plain sinusoidal embedding at the training resolution and degrade less
away from it, also less than a learned table resized bicubically; global scaling and
training at mixed resolutions should help further.

Here :class:`posenc.models.TinyViT` (2 x 2-pixel patches, CLS token) learns
scikit-learn's 8 x 8 digits rendered at ``train_res`` pixels and is tested on the
*same* held-out digits rendered at every resolution of ``test_res`` (bilinear
resampling of the 8 x 8 originals, as the ``lff`` section's digits task does): the
digit always fills the image, so a position encoding that maps the image to
``[-1, 1]`` keeps each stroke at its coordinates, but the grid gets denser or
coarser than in training (16 px: 8 x 8 patches; 12 px: 6 x 6; 32 px: 16 x 16). The
arrangement of strokes carries the class (the variant without any position encoding
is the floor that shows it), and no encoding is right by construction: the table is
resampled, the sinusoids are evaluated at unseen positions, CAPE at positions it may
have seen through its augmentation.

**The testbed and how it was chosen** (the rule, written before the runs that use it): the
patch grid is the finest whose full profile (every variant trained until the gate reads it
converged) fits a few CPU-hours on a 2-core machine: 8 x 8. The coarser 4 x 4 grid (4-px
patches), which an earlier version used because it is four times cheaper, makes CAPE's local
shift (up to half a grid step, the authors' setting) an eighth of the image: there CAPE's
validation accuracy plateaus near 0.86 (the sinusoids: 0.98) and does not transfer (0.25-0.33
away from 16 px), a test of the grid rather than of the encoding. At 8 x 8 the local shift is a
sixteenth of the image (the paper's ViT at 224 px, a 14 x 14 grid: a 28th). The steps are
those at which every variant's validation accuracy plateaus on the sweep's seed (8,000 at
batch 32), and the learning rate comes from one rule for every variant (:func:`choose_lr`).

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
``eval_every`` steps, and the convergence gate (:data:`GATE`, :mod:`posenc.experiments.gate`)
reads that curve: converged (plateaued), failed to learn (at chance, 0.1) or still learning.
Each claim is a paired per-seed difference over the seeds neither of whose runs is still
learning (fewer than three such pairs read "not decided"), with a 95% t interval, its smallest
detectable difference (:func:`~posenc.experiments.stats.detectable_difference`) and a
Holm-adjusted verdict over the section's claims. "Mixed resolutions help" is read at the
resolutions neither variant trained at (:func:`unseen_accuracy`). A claim whose variants a
profile does not train reads "not decided" and says so: CAPE needs about 8,000 steps on this
testbed, so the quick profile reads only "the task needs position" and the full profile the rest.
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
from posenc.experiments.gate import FAILED, LEARNING, STATES, Gate
from posenc.experiments.job import Job
from posenc.experiments.profiles import profile_settings
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
    test_res: tuple[int, ...] = (12, 14, 16, 20, 24, 28, 32)
    mixed_res: tuple[int, ...] = (12, 16, 20)  # cape_mixed draws its training resolution from these
    patch: int = 2
    dim: int = 32
    depth: int = 2
    heads: int = 4
    steps: int = 8000
    batch: int = 32
    lr: float = LR
    eval_every: int = 200
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


#: The convergence gate on the validation accuracy at the training resolution (270 validation
#: digits): converged when the least-squares line through the last third of training gains at most
#: 0.03 over it (about twice the standard error of that gain); failed to learn when that third
#: averages within 0.05 of chance (0.1, ten classes).
GATE = Gate("validation accuracy at the training resolution", chance=1.0 / NUM_CLASSES, learned=0.05, tol=0.03)


def run_state(run: dict) -> str:
    """The gate's reading of a run (:data:`GATE` on its validation curve)."""
    return GATE.read(run.get("val_curve", []))


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
            "val_curve": val_curve, "steps": cfg.steps, "patch": cfg.patch, "batch": cfg.batch,
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
            "val_accuracy": out["val_accuracy"], "val_curve": out["val_curve"], "seconds": out["seconds"],
            "cpu_seconds": out["cpu_seconds"]}


# ------------------------------------------------------------------ plan
def plan(profile: str, seeds: int | None = None) -> list[Job]:
    """Jobs of the ``quick`` or ``full`` profile (``seeds`` overrides the seed count of the main
    runs): its variants, seeds, steps, evaluation interval and sweep seeds come from
    ``profiles.toml`` (:func:`posenc.experiments.profiles.profile_settings`)."""
    p = profile_settings("cape", profile)
    base = ResolutionConfig(steps=p["steps"], eval_every=p["eval_every"])
    variants = tuple(p["variants"])
    bad = [v for v in variants if v not in VARIANTS]
    if bad:
        raise ValueError(f"profiles.toml: cape.{profile}.variants must be among {', '.join(VARIANTS)}, got {bad}")
    jobs = []
    # the sweep first: it checks the frozen learning rate and the testbed's steps before the main runs
    for s in range(p["sweep_seeds"]):
        for lr in LR_GRID:
            for v in variants:
                cfg = dataclasses.replace(base, variant=v, seed=100 + s, lr=lr)
                jobs.append(Job(f"sweep.lr={lr:g}.{v}.s{s}", run_sweep, cfg, cost=0.9 * p["steps"] / 1000))
    for s in range(seeds or p["seeds"]):
        for v in variants:
            cost = 1.4 if v == "cape_mixed" else 1.0
            jobs.append(Job(f"digits.{v}.s{s}", run_resolution, dataclasses.replace(base, variant=v, seed=s),
                            cost=cost * p["steps"] / 1000))
    return jobs


# ------------------------------------------------------------------ statistics
def choose_lr(results: dict[str, dict]) -> dict | None:
    """The learning-rate rule: the candidate with the highest validation accuracy at the training
    resolution, averaged over every variant and sweep seed (one rate for all variants). The sweep's
    runs also check the testbed's step count: ``"states"`` reads each with the gate."""
    by_lr: dict[float, list[float]] = {}
    per: dict[float, dict[str, list[float]]] = {}
    states: dict[str, dict[str, str]] = {}
    for r in results.values():
        if r.get("sweep"):
            states.setdefault(f"{r['lr']:g}", {})[r["variant"]] = run_state(r)
            by_lr.setdefault(r["lr"], []).append(r["val_accuracy"])
            per.setdefault(r["lr"], {}).setdefault(r["variant"], []).append(r["val_accuracy"])
    if not by_lr:
        return None
    means = {lr: statistics.fmean(v) for lr, v in by_lr.items()}
    best = max(sorted(means), key=lambda lr: means[lr])
    return {"chosen": best, "mean_val_accuracy": {f"{lr:g}": m for lr, m in sorted(means.items())},
            "per_variant": {f"{lr:g}": {v: statistics.fmean(a) for v, a in per[lr].items()} for lr in sorted(per)},
            "used": LR, "agrees": math.isclose(best, LR), "states": states,
            "still_learning": sorted(f"{lr}/{v}" for lr, by in states.items() for v, st in by.items()
                                     if st == LEARNING)}


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
            margin: float = 0.0, sesoi: float | None = None) -> dict:
    """Paired per-seed difference of ``metric`` between two variants, over the seeds neither of
    whose runs is still learning (the convergence gate: with fewer than three such pairs the
    verdict is "not decided"); the runs still learning (``"not_converged"``) and those that failed
    to learn (``"failed"``) are listed as ``{variant: [seeds]}``. A variant the profile did not
    train makes the comparison "not decided", with a note naming it."""
    missing = [v for v in (method, baseline) if v not in by]
    if missing:
        note = (f"not decided: this profile does not train {' or '.join(f'`{v}`' for v in missing)} "
                "(the full profile does)")
        return {"mean": None, "low": None, "high": None, "n": 0, "dropped": 0, "diffs": [], "seeds": [],
                "direction": direction, "margin": margin, "sesoi": sesoi, "verdict": NOT_DECIDED, "holds": False,
                "p": None, "detectable": None, "note": note, "method": method, "baseline": baseline, "metric": metric,
                "not_converged": {}, "failed": {}, "not_run": missing}
    seeds = sorted(set(by[method]) & set(by[baseline]))
    state = {v: {s: run_state(by[v][s]) for s in seeds} for v in (method, baseline)}
    diff = paired_difference({s: metric_value(by[method][s], metric) for s in seeds},
                             {s: metric_value(by[baseline][s], metric) for s in seeds},
                             direction=direction, margin=margin, sesoi=sesoi,
                             method_state=state[method], baseline_state=state[baseline])
    nc = {v: [s for s in seeds if state[v][s] == LEARNING] for v in (method, baseline)}
    failed = {v: [s for s in seeds if state[v][s] == FAILED] for v in (method, baseline)}
    diff.update({"method": method, "baseline": baseline, "metric": metric,
                 "not_converged": {v: ss for v, ss in nc.items() if ss},
                 "failed": {v: ss for v, ss in failed.items() if ss}})
    return diff


#: The smallest difference in accuracy that matters for the directional claims (one point: 4-5 of
#: the 449 test digits): an interval wholly short of it contradicts "better".
SESOI = 0.01
#: claim -> (method, baseline, metric, direction, margin, smallest difference that matters)
CLAIMS: dict[str, tuple[str, str, str, str, float, float | None]] = {
    "task_needs_position": ("sine", "none", "train", "greater", 0.0, SESOI),
    "cape_matches_sine_at_train_res": ("cape", "sine", "train", "equal", 0.02, None),
    "cape_degrades_less_than_sine": ("cape", "sine", "away", "greater", 0.0, SESOI),
    "cape_beats_table_away": ("cape", "table", "away", "greater", 0.0, SESOI),
    "scaling_helps_resolution_transfer": ("cape", "cape_noscale", "away", "greater", 0.0, SESOI),
    # measured where neither variant trained: mixed training sees some of the "away" resolutions
    "mixed_resolutions_help": ("cape_mixed", "cape", "unseen", "greater", 0.0, SESOI),
}


def summarize(results: dict[str, dict]) -> dict:
    """Accuracy per (variant, resolution), the gate's reading of every run, every claim (those whose
    variants did not run read "not decided" and say so), and the learning-rate sweep."""
    by = _runs(results)
    table: dict[str, dict] = {}
    for v in (v for v in VARIANTS if v in by):
        runs = by[v]
        res = sorted({int(r) for run in runs.values() for r in run["accuracy"]})
        states = {s: run_state(run) for s, run in runs.items()}
        table[v] = {
            "accuracy": {str(r): mean_std([run["accuracy"].get(str(r)) for run in runs.values()]) for r in res},
            "away": mean_std([away_accuracy(run["accuracy"], run["train_res"]) for run in runs.values()]),
            "val": mean_std([run["val_accuracy"] for run in runs.values()]),
            "states": {st: sum(x == st for x in states.values()) for st in STATES}, "seeds": len(runs),
            "not_converged": sorted(s for s, st in states.items() if st == LEARNING),
            "failed": sorted(s for s, st in states.items() if st == FAILED),
        }
    claims = {name: compare(by, *spec) for name, spec in CLAIMS.items()} if by else {}
    holm_verdicts(claims)  # the section's claims are one family
    curves = {v: {"val": [r["val_curve"] for r in runs.values()], "loss": [r["loss_curve"] for r in runs.values()]}
              for v, runs in by.items()}
    first = next((r for runs in by.values() for r in runs.values()), None)
    cpu = [r.get("cpu_seconds") for r in results.values() if isinstance(r, dict)]
    keys = {f"digits.{v}.s{s}": st for v, row in table.items()
            for st, seeds in (("l", row["not_converged"]), ("f", row["failed"])) for s in seeds}
    return {"table": table, "claims": claims, "curves": curves, "lr": choose_lr(results),
            "cpu_seconds": sum(c for c in cpu if c) if any(cpu) else None,
            "train_res": first["train_res"] if first else None, "used_lr": first["lr"] if first else None,
            "steps": first.get("steps") if first else None,
            "patch": results_patch(results),
            "seeds": max((len(runs) for runs in by.values()), default=0),
            "gate": {"all runs": GATE.as_dict()},
            "not_converged": sorted(k for k, st in keys.items() if st == "l"),
            "failed_to_learn": sorted(k for k, st in keys.items() if st == "f"),
            "verdicts": {v: sum(c["verdict"] == v for c in claims.values())
                         for v in (HOLDS, NOT_CONFIRMED, CONTRADICTED, NOT_DECIDED)}}


def results_patch(results: dict[str, dict]) -> int | None:
    """The patch size the runs were made with (recorded by each run; None if none records it)."""
    sizes = {r.get("patch") for r in results.values() if isinstance(r, dict) and not r.get("sweep")}
    sizes.discard(None)
    return sizes.pop() if len(sizes) == 1 else None


# ------------------------------------------------------------------ result schemas
# the types the summary reads from each job's stored result (posenc.report.schema's spec language)
NUM = (float, None)  # a number, or null (a non-finite value is stored as null)
run_resolution.result_schema = {  # type: ignore[attr-defined]
    "variant": str, "seed": int, "train_res": int, "lr": float, "accuracy": {str: NUM}, "train_accuracy": NUM,
    "val_accuracy": NUM, "val_curve": [[NUM]], "steps": int, "patch": int, "loss_curve": [NUM],
}
run_sweep.result_schema = {  # type: ignore[attr-defined]
    "sweep": bool, "variant": str, "seed": int, "lr": float, "val_accuracy": NUM, "val_curve": [[NUM]],
}
