"""Reproduction section ``relative``: length extrapolation of position encodings.

One study for the relative encodings of :mod:`posenc.attention` and for CAPE's
1D length claims (Likhomanenko et al., NeurIPS 2021): the testbed
(:class:`posenc.models.TransformerEncoder`) is trained on sequences of
``train_length`` tokens and tested, without retraining, at 1x, 2x, 4x and 8x
that length.

Tasks (per-token classification over a vocabulary of ``vocab`` random tokens):

* ``shift`` -- only relative offsets matter: output the token ``offset`` places
  to the left (``y_i = x_{i - offset}``; the first ``offset`` tokens are not scored);
* ``recent`` -- relative, and made for recency biases such as ALiBi: output the most
  recent token (at or before ``i``) from the lower half of the vocabulary;
* ``first`` -- needs absolute position: output the token at position ``anchor``
  (``y_i = x_anchor`` for every ``i``).

Variants (the position information and where it enters):

* absolute, added to the token embedding: ``none``, ``sinusoidal`` (integer
  positions), ``table`` (a learned table of ``8 x train_length`` rows, of which
  only the first ``train_length`` are ever trained -- what a model with a long
  table trained on short data has), ``cape`` (global shift + local shift,
  mean-centred, no scaling), ``cape_noshift`` (no global shift), ``cape_scale``
  (``cape`` plus global scaling);
* relative, inside softmax attention (:class:`posenc.attention.RelativeSelfAttention`):
  ``rope``, ``xpos``, ``alibi``, ``t5`` (buckets), ``learned`` (clipped offsets);
* relative, in kernelized attention (:class:`posenc.attention.KernelizedAttentionLayer`,
  Luo et al.): ``fft_rpe`` (a learned bias per offset, Toeplitz products by FFT)
  and ``decay_rpe`` (sums of exponential decays);
* RoPE context extension at test time on the trained ``rope`` model (no retraining):
  ``rope+linear`` (position interpolation), ``rope+ntk``, ``rope+yarn``, each set to
  the test length. YaRN is the authors' code's (ramp linear in the pair index); the
  ``rope`` jobs carry it in their config (:class:`RopeLengthConfig`), so a change of
  YaRN's reading recomputes exactly those jobs.

Every run records its accuracy at the training length on validation sequences every tenth of
training, and the convergence gate (:data:`GATES`, :mod:`posenc.experiments.gate`) reads that
curve: a run that plateaued has converged (at whatever level), one whose accuracy stayed at the
task's chance level failed to learn it (a result: its transfer numbers are compared as measured,
and a variant that cannot learn a task does not extrapolate it), and one still improving at the
end keeps its pairs out of the claims.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from posenc.attention import KernelizedAttentionLayer, RopeScaling, relative_attention_factory, set_rope_scaling
from posenc.encodings import LearnedTableEncoding, SinusoidalEncoding, create_encoding
from posenc.models import TrainConfig, TransformerEncoder, train
from posenc.experiments.gate import FAILED, LEARNING, STATES, Gate
from posenc.experiments.stats import (
    CONTRADICTED,
    HOLDS,
    NOT_CONFIRMED,
    NOT_DECIDED,
    holm_verdicts,
    mean_std,
    paired_difference,
)
from posenc.experiments.job import Job
from posenc.experiments.profiles import profile_settings

TASKS = ("shift", "recent", "first")
ABSOLUTE = ("none", "sinusoidal", "table", "cape", "cape_noshift", "cape_scale")
RELATIVE = ("rope", "xpos", "alibi", "t5", "learned")
KERNELIZED = ("fft_rpe", "decay_rpe")
VARIANTS = ABSOLUTE + RELATIVE + KERNELIZED
EXTENSIONS = ("linear", "ntk", "yarn")


@dataclass(frozen=True)
class LengthConfig:
    """One training run of one variant on one task, evaluated at several lengths."""

    variant: str = "rope"
    task: str = "shift"
    seed: int = 0
    train_length: int = 16
    test_factors: tuple[int, ...] = (1, 2, 4, 8)
    vocab: int = 8
    offset: int = 2  # shift: y_i = x_{i - offset}
    anchor: int = 1  # first: y_i = x_anchor
    dim: int = 32
    depth: int = 2
    heads: int = 2
    steps: int = 250
    batch: int = 32
    lr: float = 3e-3
    eval_batch: int = 64
    val_batch: int = 256  # sequences of the validation curve (the gate's; `first` scores one answer per sequence)
    cape_shift_factor: float = 4.0  # cape's max global shift, in units of train_length
    cape_scaling: float = 1.4  # cape_scale's max global scaling (the paper's largest, vision)
    kernel_features: int = 32
    evals: int = 10
    threads: int = 1


@dataclass(frozen=True)
class RopeLengthConfig(LengthConfig):
    """A ``rope`` run, which also tests context extension at test time.

    ``yarn_ramp``: the YaRN reading (:class:`posenc.attention.RopeScaling`); ``"dims"`` is
    the authors' code and HF's. Only ``rope`` jobs hold this field, so their stored results
    (and no others) are recomputed when it changes.
    """

    yarn_ramp: str = "dims"


# ------------------------------------------------------------------ data
def make_batch(task: str, batch: int, length: int, cfg: LengthConfig, generator: torch.Generator):
    """``(tokens (B, n, vocab) one-hot, targets (B, n) long, scored (B, n) bool)``."""
    x = torch.randint(cfg.vocab, (batch, length), generator=generator)
    steps = torch.arange(length).expand(batch, -1)
    if task == "shift":
        y = torch.roll(x, cfg.offset, dims=1)
        scored = steps >= cfg.offset
    elif task == "recent":
        # the most recent token (at or before i) from the lower half of the vocabulary
        last = torch.where(x < cfg.vocab // 2, steps, torch.full_like(x, -1)).cummax(dim=1).values
        y = x.gather(1, last.clamp_min(0))
        scored = last >= 0
    elif task == "first":
        y = x[:, cfg.anchor : cfg.anchor + 1].expand(-1, length)
        scored = steps >= cfg.anchor  # causal: earlier tokens cannot see the anchor
    else:
        raise ValueError(f"task must be one of {', '.join(TASKS)}, got {task!r}")
    return F.one_hot(x, cfg.vocab).float(), y, scored


# ------------------------------------------------------------------ models
def build_model(cfg: LengthConfig) -> TransformerEncoder:
    """The testbed for ``cfg.variant`` (seeded by ``cfg.seed``)."""
    torch.manual_seed(cfg.seed)
    v, d, L = cfg.variant, cfg.dim, cfg.train_length
    encoding: nn.Module | None = None
    attention = None
    longest = L * max(cfg.test_factors)
    if v not in VARIANTS:
        raise ValueError(f"variant must be one of {', '.join(VARIANTS)}, got {v!r}")
    if v == "sinusoidal":
        encoding = SinusoidalEncoding(in_dim=1, num_features=d)
    elif v == "table":
        encoding = LearnedTableEncoding(in_dim=1, grid_size=longest, num_features=d, seed=cfg.seed)
    elif v.startswith("cape"):
        encoding = create_encoding(
            "cape", in_dim=1, num_features=d, mean_center=True, max_local_shift=0.5,
            max_global_shift=0.0 if v == "cape_noshift" else cfg.cape_shift_factor * L,
            max_global_scaling=cfg.cape_scaling if v == "cape_scale" else 1.0, seed=cfg.seed,
        )
    if v in RELATIVE:
        attention = relative_attention_factory(v, causal=True, max_distance=2 * L, num_buckets=16 if v == "t5" else 32)
    elif v in KERNELIZED:
        kw = {"rpe": "table"} if v == "fft_rpe" else {"rpe": "decay", "decay_terms": 2}

        def attention(dim: int, heads: int) -> nn.Module:
            return KernelizedAttentionLayer(dim, heads, num_features=cfg.kernel_features, seed=cfg.seed,
                                            causal=True, max_distance=L, **kw)
    else:  # absolute encodings (or none) with plain causal softmax attention
        attention = relative_attention_factory("none", causal=True)
    return TransformerEncoder(cfg.vocab, cfg.vocab, dim=d, depth=cfg.depth, num_heads=cfg.heads,
                              encoding=encoding, attention=attention)


def positions_for(cfg: LengthConfig, length: int) -> torch.Tensor:
    """``(n, 1)`` positions: integer indices (tables take int64)."""
    pos = torch.arange(length)[:, None]
    return pos if cfg.variant == "table" else pos.float()


def _loss(model: nn.Module, batch, cfg: LengthConfig):
    tokens, targets, scored = batch
    logits = model(tokens, positions_for(cfg, tokens.shape[1]))
    loss = F.cross_entropy(logits[scored], targets[scored])
    acc = (logits[scored].argmax(-1) == targets[scored]).float().mean()
    return loss, {"acc": float(acc)}


#: The convergence gate of each task on the validation accuracy at the training length: chance is
#: 1 / vocab for ``shift`` and ``first`` (every token can be the answer) and 2 / vocab for ``recent``
#: (the answer is always from the lower half); a run whose accuracy over the last third of training
#: averages within 0.05 of it failed to learn the task; one whose least-squares gain over that third
#: is at most 0.02 has converged.
GATES = {task: Gate(f"validation accuracy at the training length ({task})",
                    chance=(2.0 if task == "recent" else 1.0) / LengthConfig.vocab, learned=0.05, tol=0.02)
         for task in TASKS}


def run_state(result: dict) -> str:
    """The gate's reading of a run (its task's :data:`GATES` on its validation curve)."""
    return GATES[result["task"]].read(result.get("val_curve", []))


@torch.no_grad()
def accuracy(model: nn.Module, cfg: LengthConfig, length: int, seed: int, batch: int | None = None) -> float:
    """Scored-token accuracy on ``batch`` (default ``cfg.eval_batch``) fresh sequences of ``length``
    tokens (eval mode); ``seed`` draws them (the test sequences use ``10_000 + run seed``, the
    validation ones ``20_000 +``)."""
    model.eval()
    gen = torch.Generator().manual_seed(seed)
    tokens, targets, scored = make_batch(cfg.task, batch or cfg.eval_batch, length, cfg, gen)
    logits = model(tokens, positions_for(cfg, length))
    return float((logits[scored].argmax(-1) == targets[scored]).float().mean())


def run_length(cfg: LengthConfig) -> dict:
    """Train one variant on one task at ``train_length`` and test it at every length."""
    if cfg.task not in TASKS:
        raise ValueError(f"task must be one of {', '.join(TASKS)}, got {cfg.task!r}")
    old = torch.get_num_threads()
    torch.set_num_threads(cfg.threads)
    try:
        model = build_model(cfg)
        L = cfg.train_length

        def sample(step: int, gen: torch.Generator):
            return make_batch(cfg.task, cfg.batch, L, cfg, gen)

        hist = train(model, sample, lambda m, b: _loss(m, b, cfg),
                     TrainConfig(steps=cfg.steps, lr=cfg.lr, seed=cfg.seed, threads=cfg.threads,
                                 eval_every=max(1, cfg.steps // max(1, cfg.evals))),
                     evaluate=lambda m: {"val_acc": accuracy(m, cfg, L, 20_000 + cfg.seed, cfg.val_batch)})
        lengths = [L * f for f in cfg.test_factors]
        acc = {str(n): accuracy(model, cfg, n, 10_000 + cfg.seed) for n in lengths}
        val_curve = [[e["step"], e["val_acc"]] for e in hist["evals"]]
        out = {
            "variant": cfg.variant, "task": cfg.task, "seed": cfg.seed, "train_length": L,
            "accuracy": acc, "train_accuracy": acc[str(L)], "val_curve": val_curve,
            "state": GATES[cfg.task].read(val_curve),
            "final_loss": hist["loss"][-1], "loss_curve": hist["loss"][:: max(1, cfg.steps // 50)],
            "seconds": hist["seconds"], "extended": {},
        }
        if cfg.variant == "rope":  # context extension at test time, one scaling per test length
            for kind in EXTENSIONS:
                ext = {}
                for n in lengths:
                    ramp = getattr(cfg, "yarn_ramp", "dims")
                    set_rope_scaling(model, RopeScaling(kind, L, n, yarn_ramp=ramp))
                    ext[str(n)] = accuracy(model, cfg, n, 10_000 + cfg.seed)
                set_rope_scaling(model, None)
                out["extended"][kind] = ext
        return out
    finally:
        torch.set_num_threads(old)


# ------------------------------------------------------------------ plan
def plan(profile: str, seeds: int | None = None) -> list[Job]:
    """The jobs of ``profile``: per task of its ``runs`` in ``profiles.toml``
    (:func:`posenc.experiments.profiles.profile_settings`), every listed variant (``"all"``: every
    variant) on its seeds, for its steps, tested at ``test_factors`` times the training length
    (``seeds`` overrides every task's seed count)."""
    settings = profile_settings("relative", profile)
    base = LengthConfig(test_factors=tuple(settings["test_factors"]))
    jobs = []
    for run in settings["runs"]:
        variants = VARIANTS if run["variants"] == "all" else tuple(run["variants"])
        for v in variants:
            for s in range(seeds or run["seeds"]):
                cfg = dataclasses.replace(base, variant=v, task=run["task"], seed=s, steps=run["steps"])
                if v == "rope":
                    cfg = RopeLengthConfig(**dataclasses.asdict(cfg))
                jobs.append(Job(f"{run['task']}.{v}.s{s}", run_length, cfg,
                                (2.0 if v in KERNELIZED else 1.0) * run["steps"] / 250))
    return jobs


# ------------------------------------------------------------------ summary
def _extrapolation(acc: dict[str, float], train_length: int) -> float:
    """Mean accuracy over the test lengths beyond the training length."""
    vals = [v for n, v in acc.items() if int(n) > train_length]
    return statistics.fmean(vals) if vals else math.nan


def _runs_by_variant(results: dict[str, dict]) -> dict[str, dict[str, dict[int, dict]]]:
    """``{task: {variant: {seed: {"acc": {n: a}, "state": str}}}}``, RoPE extensions as variants (the
    trained RoPE model's state: extension is applied to it at test time)."""
    out: dict[str, dict[str, dict[int, dict]]] = {}
    for r in results.values():
        rows = out.setdefault(r["task"], {})
        state = run_state(r)  # read here, with this version's gate
        rows.setdefault(r["variant"], {})[r["seed"]] = {"acc": r["accuracy"], "state": state, "L": r["train_length"]}
        for kind, acc in r.get("extended", {}).items():
            rows.setdefault(f"rope+{kind}", {})[r["seed"]] = {"acc": acc, "state": state, "L": r["train_length"]}
    return out


#: The smallest difference in accuracy that matters for a directional claim (one point: an interval
#: wholly short of it contradicts "better"; :func:`posenc.experiments.stats.read_verdict`).
SESOI = 0.01


def _compare(by: dict, task: str, method: str, baseline: str, metric: str, direction: str = "greater",
             margin: float = 0.0, sesoi: float | None = SESOI) -> dict | None:
    """Paired difference of ``metric`` ("train" or "extrapolation") between two variants of one task."""
    rows = by.get(task, {})
    if method not in rows or baseline not in rows:
        return None

    def values(v):
        return {s: (r["acc"][str(r["L"])] if metric == "train" else _extrapolation(r["acc"], r["L"]))
                for s, r in rows[v].items()}

    def states(v):  # the convergence gate: only a run still learning drops its pair
        return {s: r["state"] for s, r in rows[v].items()}

    diff = paired_difference(values(method), values(baseline), direction=direction, margin=margin,
                             method_state=states(method), baseline_state=states(baseline), sesoi=sesoi)
    diff.update({"task": task, "method": method, "baseline": baseline, "metric": metric})
    return diff


def summarize(results: dict[str, dict]) -> dict:
    """Accuracy per (task, variant, length) and the claims as paired per-seed differences."""
    by = _runs_by_variant(results)
    table = {}
    for task, rows in by.items():
        table[task] = {}
        for v, runs in rows.items():
            lengths = sorted({int(n) for r in runs.values() for n in r["acc"]})
            table[task][v] = {
                "accuracy": {str(n): mean_std([r["acc"].get(str(n)) for r in runs.values()]) for n in lengths},
                "extrapolation": mean_std([_extrapolation(r["acc"], r["L"]) for r in runs.values()]),
                "states": {st: sum(r["state"] == st for r in runs.values()) for st in STATES}, "seeds": len(runs),
            }
    claims: dict[str, list] = {
        "alibi_extrapolates_beyond_rope": [],
        "extension_recovers_rope": [],
        "relative_beats_absolute_on_relative_tasks": [],
        "absolute_beats_relative_on_absolute_task": [],
        "cape_matches_sinusoidal_at_train_length": [],
        "cape_degrades_less_than_sinusoidal": [],
        "cape_needs_global_shift": [],
        "scaling_hurts_exact_offsets": [],
    }
    for task in ("shift", "recent"):
        claims["alibi_extrapolates_beyond_rope"].append(_compare(by, task, "alibi", "rope", "extrapolation"))
        for kind in EXTENSIONS:
            claims["extension_recovers_rope"].append(_compare(by, task, f"rope+{kind}", "rope", "extrapolation"))
        for rel in RELATIVE + KERNELIZED:
            for ab in ("sinusoidal", "table"):
                claims["relative_beats_absolute_on_relative_tasks"].append(_compare(by, task, rel, ab, "extrapolation"))
        claims["cape_matches_sinusoidal_at_train_length"].append(
            _compare(by, task, "cape", "sinusoidal", "train", direction="equal", margin=0.02, sesoi=None))
        claims["cape_degrades_less_than_sinusoidal"].append(_compare(by, task, "cape", "sinusoidal", "extrapolation"))
        claims["cape_needs_global_shift"].append(_compare(by, task, "cape", "cape_noshift", "extrapolation"))
    claims["scaling_hurts_exact_offsets"].append(_compare(by, "shift", "cape", "cape_scale", "train"))
    claims["scaling_hurts_exact_offsets"].append(
        _compare(by, "shift", "cape", "cape_scale", "extrapolation"))
    for ab in ("sinusoidal", "table"):
        for rel in RELATIVE + KERNELIZED:
            claims["absolute_beats_relative_on_absolute_task"].append(_compare(by, "first", ab, rel, "train"))
    # multiplicity: every comparison of the section is one family (Holm, next to each verdict)
    holm_verdicts({f"{name}/{i}": c for name, comps in claims.items() for i, c in enumerate(comps) if c is not None})
    out_claims = {}
    for name, comps in claims.items():
        comps = [c for c in comps if c is not None]
        if not comps:
            continue
        verdicts = [c["verdict"] for c in comps]
        counts = {v: verdicts.count(v) for v in (HOLDS, NOT_CONFIRMED, CONTRADICTED, NOT_DECIDED)}
        if len(comps) == 1:
            headline = verdicts[0]
        else:  # several comparisons: each is reported; the headline counts them (no "beats all at once")
            headline = (f"holds in {counts[HOLDS]} of {len(comps)} comparisons "
                        f"({counts[NOT_CONFIRMED]} not confirmed, {counts[CONTRADICTED]} contradicted, "
                        f"{counts[NOT_DECIDED]} not decided)")
        out_claims[name] = {"verdict": headline, "holds": counts[HOLDS] == len(comps), "comparisons": comps,
                            "counts": counts}
    curves = {task: {v: [r["loss_curve"] for r in results.values() if r["task"] == task and r["variant"] == v]
                     for v in {r["variant"] for r in results.values() if r["task"] == task}}
              for task in by}
    keys = {f"{r['task']}.{r['variant']}.s{r['seed']}": run_state(r) for r in results.values()}
    return {"table": table, "claims": out_claims, "curves": curves,
            "train_length": next(iter(results.values()))["train_length"] if results else None,
            "gate": {t: GATES[t].as_dict() for t in TASKS if t in by},
            "not_converged": sorted(k for k, st in keys.items() if st == LEARNING),
            "failed_to_learn": sorted(k for k, st in keys.items() if st == FAILED)}


# ------------------------------------------------------------------ result schemas
# the types the summary reads from each job's stored result (posenc.report.schema's spec language)
NUM = (float, None)  # a number, or null (a non-finite value is stored as null)
run_length.result_schema = {  # type: ignore[attr-defined]
    "variant": str, "task": str, "seed": int, "train_length": int, "accuracy": {str: NUM}, "train_accuracy": NUM,
    "val_curve": [[NUM]], "final_loss": NUM, "loss_curve": [NUM], "extended": {str: {str: NUM}},
}
