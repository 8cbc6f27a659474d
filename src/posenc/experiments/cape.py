"""Reproduction section ``cape``: resolution transfer of 2D position encodings in a tiny ViT.

Likhomanenko et al., "CAPE: Encoding Relative Positions with Continuous Augmented
Positional Embeddings" (NeurIPS 2021, arXiv 2106.03143) train ViTs at one image
resolution and evaluate them at smaller and larger ones; CAPE (patch centres in
``[-1, 1]``, augmented by a global shift, a local shift and a global scale) should
match the plain sinusoidal embedding at the training resolution and degrade less
away from it. Here :class:`posenc.models.TinyViT` is trained at ``train_res``
pixels and tested, without retraining, at every resolution of ``test_res``, on
data that can be rendered at any resolution:

* ``relation`` -- two Gaussian blobs, one in each channel ("red", "blue"); four
  classes: red left of / right of blue, times red above / below blue. Position is
  the whole point: without a position encoding the patches are a bag.
* ``shapes`` -- one filled shape (disk, square, triangle) at a random place and
  size, rendered by 4x supersampling; position helps through the arrangement of
  patches.
* ``digits`` -- scikit-learn's 8x8 digits, resampled (bilinear, antialiased) to each
  resolution (:func:`posenc.data.grid_tasks.digits_images`).

The test images of every resolution are renderings of the *same* scenes (same
blob centres, shapes, digits), so accuracies at different resolutions are paired.

Variants (the position encoding added to the patch embeddings):

* ``none`` -- no position information (a floor);
* ``table`` -- a learned ``G x G`` table (``G = train_res / patch``), resampled
  bicubically to the test grid (the paper's baseline; timm's convention);
* ``sine`` -- CAPE's 2D sinusoidal embedding of the patch centres in ``[-1, 1]``
  without augmentation (the paper's ``sinpos``: same features, no augmentation);
* ``cape`` -- the vision preset: global shift ``U[-0.5, 0.5]`` per axis, local
  shift ``+-0.5`` patch spacings, global scale ``lambda in [1/1.4, 1.4]``;
* ``cape_noscale`` -- ``cape`` without the global scaling;
* ``cape_mixed`` -- ``cape`` trained on a resolution drawn per step from ``mixed_res``;
* ``cape_half`` -- ``cape`` with every frequency halved (``freq_scale = pi / 2``): the
  paper's lowest 2D frequency has a wavelength of one image side (2 in ``[-1, 1]``
  units), so the sign of an offset longer than half a side (a third of a side after a
  global scale of 1.4) is ambiguous at that frequency, while the blobs of ``relation``
  lie up to 0.8 sides apart. Halving the frequencies tests whether that is what slows
  CAPE down (a diagnostic of ours, not a setting of the paper).

Every run reports its accuracy at the training resolution; a run below
``converged_at`` there has not learned the task, and its transfer numbers are
reported but not read as transfer (:func:`summarize`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import statistics
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from posenc.encodings import CAPEEncoding, LearnedTableEncoding
from posenc.experiments.stats import CONTRADICTED, HOLDS, NOT_CONFIRMED, mean_std, paired_difference
from posenc.models import TinyViT, TrainConfig, train
from posenc.experiments.job import Job

TASKS = ("relation", "shapes", "digits")
VARIANTS = ("none", "table", "sine", "cape", "cape_noscale", "cape_mixed", "cape_half")
NUM_CLASSES = {"relation": 4, "shapes": 3, "digits": 10}
CHANNELS = {"relation": 2, "shapes": 1, "digits": 1}


@dataclass(frozen=True)
class ResolutionConfig:
    """One TinyViT run of one variant on one task: trained at ``train_res``, tested at each ``test_res``.

    Resolutions are image sides in pixels, multiples of ``patch``.
    """

    variant: str = "cape"
    task: str = "relation"
    seed: int = 0
    train_res: int = 12
    test_res: tuple[int, ...] = (6, 8, 12, 18, 24)
    mixed_res: tuple[int, ...] = (8, 12, 16)  # cape_mixed draws its training resolution from these
    patch: int = 2
    dim: int = 32
    depth: int = 2
    heads: int = 2
    steps: int = 900
    batch: int = 32
    lr: float = 3e-3
    eval_size: int = 256
    max_global_shift: float = 0.5  # the vision preset (REFERENCES.md §3)
    max_local_shift: float = 0.5
    max_global_scaling: float = 1.4
    blob_sigma: float = 0.2  # relation: blob width in [-1, 1] units
    min_gap: float = 0.25  # relation: smallest |dx| and |dy| between the blobs
    converged_at: float = 0.95
    threads: int = 1


# ------------------------------------------------------------------ data
def pixel_centres(res: int, supersample: int = 1) -> torch.Tensor:
    """Centres of ``res * supersample`` pixels along one axis of ``[-1, 1]``: ``(res * supersample,)``."""
    n = res * supersample
    return -1.0 + (2.0 * torch.arange(n, dtype=torch.float32) + 1.0) / n


def sample_scenes(task: str, n: int, cfg: ResolutionConfig, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Resolution-free descriptions of ``n`` images (rendered by :func:`render`)."""
    if task == "relation":
        # two centres in [-0.7, 0.7]^2, at least min_gap apart along each axis
        red = (torch.rand(n, 2, generator=generator) * 2 - 1) * 0.7
        gap = cfg.min_gap + torch.rand(n, 2, generator=generator) * (1.4 - cfg.min_gap)
        sign = torch.where(torch.rand(n, 2, generator=generator) < 0.5, -1.0, 1.0)
        blue = red + sign * gap
        # reflect out-of-range partners to the other side (keeps the gap)
        blue = torch.where(blue.abs() > 0.7, red - sign * gap, blue)
        blue = blue.clamp(-0.9, 0.9)
        # label: 2 * (red left of blue) + (red above blue); rows grow downwards
        label = 2 * (red[:, 1] < blue[:, 1]).long() + (red[:, 0] < blue[:, 0]).long()
        return {"red": red, "blue": blue, "label": label}
    if task == "shapes":
        label = torch.randint(3, (n,), generator=generator)
        size = 0.3 + 0.25 * torch.rand(n, generator=generator)  # half-size in [-1, 1] units
        centre = (torch.rand(n, 2, generator=generator) * 2 - 1) * (0.95 - size)[:, None]
        return {"centre": centre, "size": size, "label": label}
    if task == "digits":
        return {"index": torch.randint(1 << 30, (n,), generator=generator)}
    raise ValueError(f"task must be one of {', '.join(TASKS)}, got {task!r}")


@functools.lru_cache(maxsize=2)
def _digits(split: str) -> tuple[torch.Tensor, torch.Tensor]:
    from posenc.data.grid_tasks import digits_images

    d = digits_images(upsample=1, seed=0)
    return d[f"x_{split}"], d[f"y_{split}"]


def render(task: str, scenes: dict[str, torch.Tensor], res: int, cfg: ResolutionConfig,
           split: str = "train") -> tuple[torch.Tensor, torch.Tensor]:
    """``(images (n, C, res, res), labels (n,))`` of ``scenes`` at ``res`` pixels a side."""
    if task == "digits":
        x, y = _digits(split)
        idx = scenes["index"] % len(y)
        img = F.interpolate(x[idx], size=(res, res), mode="bilinear", align_corners=False, antialias=True)
        return img, y[idx]
    if task == "relation":
        c = pixel_centres(res)
        rows, cols = c[None, :, None], c[None, None, :]

        def blob(p: torch.Tensor) -> torch.Tensor:
            d2 = (rows - p[:, 0, None, None]) ** 2 + (cols - p[:, 1, None, None]) ** 2
            return torch.exp(-d2 / (2 * cfg.blob_sigma**2))

        return torch.stack((blob(scenes["red"]), blob(scenes["blue"])), dim=1), scenes["label"]
    if task == "shapes":
        s = 4  # supersampling factor: soft edges at every resolution
        c = pixel_centres(res, s)
        dy = (c[None, :, None] - scenes["centre"][:, 0, None, None]) / scenes["size"][:, None, None]
        dx = (c[None, None, :] - scenes["centre"][:, 1, None, None]) / scenes["size"][:, None, None]
        disk = dx**2 + dy**2 <= 1.0
        square = (dx.abs() <= 0.8) & (dy.abs() <= 0.8)
        triangle = (dy <= 0.8) & (dy >= 2.0 * dx.abs() - 1.0)  # apex up, base at the bottom
        lab = scenes["label"][:, None, None]
        inside = torch.where(lab == 0, disk, torch.where(lab == 1, square, triangle)).float()
        img = F.avg_pool2d(inside[:, None], s)
        return img, scenes["label"]
    raise ValueError(f"task must be one of {', '.join(TASKS)}, got {task!r}")


# ------------------------------------------------------------------ model
def build_model(cfg: ResolutionConfig) -> TinyViT:
    """The TinyViT of ``cfg.variant`` (seeded by ``cfg.seed``)."""
    if cfg.variant not in VARIANTS:
        raise ValueError(f"variant must be one of {', '.join(VARIANTS)}, got {cfg.variant!r}")
    if cfg.task not in TASKS:
        raise ValueError(f"task must be one of {', '.join(TASKS)}, got {cfg.task!r}")
    for r in (cfg.train_res, *cfg.test_res, *cfg.mixed_res):
        if r % cfg.patch:
            raise ValueError(f"resolutions must be multiples of patch={cfg.patch}, got {r}")
    torch.manual_seed(cfg.seed)
    v, d = cfg.variant, cfg.dim
    encoding: nn.Module | None = None
    positions = "continuous"
    if v == "table":
        g = cfg.train_res // cfg.patch
        encoding = LearnedTableEncoding(in_dim=2, grid_size=(g, g), num_features=d, interpolation="bicubic",
                                        seed=cfg.seed)
        positions = "index"
    elif v != "none":
        on = v != "sine"
        encoding = CAPEEncoding(
            in_dim=2, num_features=d, preset="vision",
            max_global_shift=cfg.max_global_shift if on else 0.0,
            max_local_shift=cfg.max_local_shift if on else 0.0,
            max_global_scaling=cfg.max_global_scaling if on and v != "cape_noscale" else 1.0,
            freq_scale=math.pi / 2 if v == "cape_half" else None, seed=cfg.seed,
        )
    return TinyViT(in_channels=CHANNELS[cfg.task], num_classes=NUM_CLASSES[cfg.task], patch_size=cfg.patch, dim=d,
                   depth=cfg.depth, num_heads=cfg.heads, encoding=encoding, positions=positions, cls_token=True,
                   seed=cfg.seed)


@torch.no_grad()
def accuracy_by_resolution(model: nn.Module, cfg: ResolutionConfig) -> dict[str, float]:
    """Accuracy on ``eval_size`` held-out scenes rendered at each test resolution (eval mode)."""
    model.eval()
    scenes = sample_scenes(cfg.task, cfg.eval_size, cfg, torch.Generator().manual_seed(10_000 + cfg.seed))
    out = {}
    for res in sorted(set(cfg.test_res) | {cfg.train_res}):
        x, y = render(cfg.task, scenes, res, cfg, split="test")
        out[str(res)] = float((model(x).argmax(-1) == y).float().mean())
    return out


def run_resolution(cfg: ResolutionConfig) -> dict:
    """Train one variant at ``train_res`` (or mixed resolutions) and test it at every ``test_res``."""
    old = torch.get_num_threads()
    torch.set_num_threads(cfg.threads)
    try:
        model = build_model(cfg)
        mixed = cfg.variant == "cape_mixed"

        def sample(step: int, gen: torch.Generator):
            res = cfg.mixed_res[int(torch.randint(len(cfg.mixed_res), (1,), generator=gen))] if mixed else cfg.train_res
            return render(cfg.task, sample_scenes(cfg.task, cfg.batch, cfg, gen), res, cfg)

        def loss_fn(net: nn.Module, batch):
            x, y = batch
            logits = net(x)
            return F.cross_entropy(logits, y), {"acc": float((logits.argmax(-1) == y).float().mean())}

        hist = train(model, sample, loss_fn, TrainConfig(steps=cfg.steps, lr=cfg.lr, seed=cfg.seed,
                                                         threads=cfg.threads))
        acc = accuracy_by_resolution(model, cfg)
        train_acc = acc[str(cfg.train_res)]
        return {
            "variant": cfg.variant, "task": cfg.task, "seed": cfg.seed, "train_res": cfg.train_res,
            "accuracy": acc, "train_accuracy": train_acc, "converged": train_acc >= cfg.converged_at,
            "final_loss": hist["loss"][-1], "loss_curve": hist["loss"][:: max(1, cfg.steps // 50)],
            "seconds": hist["seconds"],
        }
    finally:
        torch.set_num_threads(old)


# ------------------------------------------------------------------ plan
QUICK_TASKS = ("relation",)
QUICK = ResolutionConfig()
FULL = ResolutionConfig(steps=1500, eval_size=512, train_res=16, test_res=(8, 12, 16, 24, 32, 48),
                        mixed_res=(12, 16, 20))


def plan(profile: str, seeds: int | None = None) -> list[Job]:
    """quick: the relation task, every variant, 2 seeds, 900 steps at 12 px (tested at 6-24 px);
    full: every task, 5 seeds, 1,500 steps at 16 px (tested at 8-48 px)."""
    if profile == "quick":
        tasks, n_seeds, base = QUICK_TASKS, seeds or 2, QUICK
    elif profile == "full":
        tasks, n_seeds, base = TASKS, seeds or 5, FULL
    else:
        raise ValueError(f"profile must be 'quick' or 'full', got {profile!r}")
    jobs = []
    for task in tasks:
        for v in VARIANTS:
            for s in range(n_seeds):
                cfg = dataclasses.replace(base, variant=v, task=task, seed=s)
                jobs.append(Job(f"{task}.{v}.s{s}", run_resolution, cfg))
    return jobs


# ------------------------------------------------------------------ summary
def away_accuracy(acc: dict[str, float], train_res: int) -> float:
    """Mean accuracy over the test resolutions other than the training one."""
    vals = [v for r, v in acc.items() if int(r) != train_res]
    return statistics.fmean(vals) if vals else math.nan


def _runs(results: dict[str, dict]) -> dict[str, dict[str, dict[int, dict]]]:
    """``{task: {variant: {seed: result}}}``."""
    out: dict[str, dict[str, dict[int, dict]]] = {}
    for r in results.values():
        out.setdefault(r["task"], {}).setdefault(r["variant"], {})[r["seed"]] = r
    return out


def compare(by: dict, task: str, method: str, baseline: str, metric: str, direction: str = "greater",
            margin: float = 0.0) -> dict | None:
    """Paired per-seed difference of ``metric`` (``"train"`` or ``"away"``) between two variants of a task.

    A transfer comparison (``"away"``) is read only when both variants learned the task at
    the training resolution on every seed (``none``, the no-position floor, is exempt: it is
    not expected to learn a positional task); otherwise its verdict is "not confirmed".
    """
    rows = by.get(task, {})
    if method not in rows or baseline not in rows:
        return None

    def values(v: str) -> dict[int, float]:
        return {s: (r["train_accuracy"] if metric == "train" else away_accuracy(r["accuracy"], r["train_res"]))
                for s, r in rows[v].items()}

    diff = paired_difference(values(method), values(baseline), direction=direction, margin=margin)
    learned = {v: all(r["converged"] for r in rows[v].values()) for v in (method, baseline)}
    diff.update({"task": task, "method": method, "baseline": baseline, "metric": metric, "learned": learned})
    needed = [v for v in (method, baseline) if v != "none"]
    if metric == "away" and not all(learned[v] for v in needed):
        diff["verdict"], diff["holds"] = NOT_CONFIRMED, False
        diff["note"] = "not learned at the training resolution: " + ", ".join(v for v in needed if not learned[v])
    return diff


#: claim -> (method, baseline, metric, direction, margin)
CLAIMS: dict[str, list[tuple[str, str, str, str, float]]] = {
    "cape_matches_sine_at_train_res": [("cape", "sine", "train", "equal", 0.02),
                                       ("cape_half", "sine", "train", "equal", 0.02)],
    "cape_degrades_less_than_sine": [("cape", "sine", "away", "greater", 0.0),
                                     ("cape_half", "sine", "away", "greater", 0.0)],
    "cape_beats_table_away": [("cape", "table", "away", "greater", 0.0),
                              ("cape_half", "table", "away", "greater", 0.0)],
    "cape_beats_none_away": [("cape", "none", "away", "greater", 0.0),
                             ("cape_half", "none", "away", "greater", 0.0)],
    "scaling_helps_resolution_transfer": [("cape", "cape_noscale", "away", "greater", 0.0)],
    "mixed_resolutions_help": [("cape_mixed", "cape", "away", "greater", 0.0)],
    "halved_frequencies_learn_better": [("cape_half", "cape", "train", "greater", 0.0)],
}


def summarize(results: dict[str, dict]) -> dict:
    """Accuracy per (task, variant, resolution), convergence, and the claims as paired per-seed differences."""
    by = _runs(results)
    table: dict[str, dict] = {}
    for task, rows in by.items():
        table[task] = {}
        for v, runs in rows.items():
            res = sorted({int(r) for run in runs.values() for r in run["accuracy"]})
            table[task][v] = {
                "accuracy": {str(r): mean_std([run["accuracy"].get(str(r)) for run in runs.values()]) for r in res},
                "away": mean_std([away_accuracy(run["accuracy"], run["train_res"]) for run in runs.values()]),
                "converged": sum(bool(run["converged"]) for run in runs.values()), "seeds": len(runs),
            }
    claims = {}
    for name, specs in CLAIMS.items():
        comps = [c for task in TASKS for spec in specs
                 if (c := compare(by, task, spec[0], spec[1], spec[2], spec[3], spec[4])) is not None]
        if not comps:
            continue
        verdicts = [c["verdict"] for c in comps]
        counts = {v: verdicts.count(v) for v in (HOLDS, NOT_CONFIRMED, CONTRADICTED)}
        headline = verdicts[0] if len(comps) == 1 else (
            f"holds in {counts[HOLDS]} of {len(comps)} comparisons "
            f"({counts[NOT_CONFIRMED]} not confirmed, {counts[CONTRADICTED]} contradicted)")
        claims[name] = {"verdict": headline, "holds": counts[HOLDS] == len(comps), "comparisons": comps,
                        "counts": counts}
    not_learned = {task: {v: f"{row['converged']}/{row['seeds']}" for v, row in rows.items()
                          if row["converged"] < row["seeds"]} for task, rows in table.items()}
    curves = {task: {v: [r["loss_curve"] for r in runs.values()] for v, runs in rows.items()} for task, rows in by.items()}
    first = next(iter(results.values()), None)
    return {"table": table, "claims": claims, "not_learned": not_learned, "curves": curves,
            "train_res": first["train_res"] if first else None,
            "seeds": max((len(runs) for rows in by.values() for runs in rows.values()), default=0)}
