"""Reproduction of Luo et al., "Stable, Fast and Accurate: Kernelized Attention
with Relative Positional Encoding" (NeurIPS 2021).

Claims checked (the report states each as measured, whichever way it falls):

1. Approximation (paper Fig. 1b): the random-feature estimate of ``exp(q.k)``
   is useless when keys and queries are large (norm R = 4, 8) and accurate when
   they are normalised (R = 1); the error falls like ``1/sqrt(m)``.
2. Stability and accuracy: on tasks that need sharp positional attention (copy
   the token at ``i - k``; associative recall) a Performer with raw q/k trains
   worse or less stably than normalised q/k, and RPE on top of normalised q/k
   closes (part of) the gap to exact softmax attention with the same RPE.
3. Speed and memory: the FFT path grows like ``n log n`` (log-log slope near 1)
   while dense kernelized / softmax attention grow like ``n^2``.
4. Numerics: the float32 FFT error grows like ``exp(bias range)``; bounding the
   range or accumulating in float64 keeps it at round-off.

Every job is a pure function of a frozen config; no printing, no file paths.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from dataclasses import dataclass

import torch
from torch import nn

from posenc.attention import (
    KernelizedAttentionLayer,
    PositiveRandomFeatures,
    dense_kernelized_attention,
    kernelized_attention,
    rpe_coeffs,
    softmax_rpe_attention,
)
from posenc.attention.kernelized.toeplitz import next_fast_len
from posenc.encodings import create_encoding
from posenc.models import TransformerEncoder
from posenc.experiments.gate import FAILED, LEARNING, STATES, Gate
from posenc.experiments.job import Job
from posenc.experiments.profiles import profile_settings
from posenc.experiments.stats import holm_verdicts, paired_difference

# ---------------------------------------------------------------- approximation


@dataclass(frozen=True)
class ApproxConfig:
    dim: int = 64
    features: tuple[int, ...] = (16, 32, 64, 128, 256)
    norms: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0)
    pairs: int = 256
    draws: int = 8
    n: int = 64
    seed: int = 0


def _on_sphere(count: int, dim: int, radius: float, g: torch.Generator) -> torch.Tensor:
    x = torch.randn(count, dim, generator=g, dtype=torch.float64)
    return radius * x / x.norm(dim=-1, keepdim=True)


def run_approx(cfg: ApproxConfig) -> dict:
    """Relative error of ``phi(q).phi(k)`` vs ``exp(q.k)`` and of the attention output vs softmax."""
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(cfg.seed)
    out: dict = {"features": list(cfg.features), "norms": list(cfg.norms), "kernel": {}, "attention": {}}
    for R in cfg.norms:
        q, k = _on_sphere(cfg.pairs, cfg.dim, R, g), _on_sphere(cfg.pairs, cfg.dim, R, g)
        exact = torch.exp((q * k).sum(-1))
        aq = _on_sphere(cfg.n, cfg.dim, R, g)[None, None]
        ak = _on_sphere(cfg.n, cfg.dim, R, g)[None, None]
        av = torch.randn(1, 1, cfg.n, cfg.dim, generator=g, dtype=torch.float64)
        soft = softmax_rpe_attention(aq, ak, av, scale=1.0)
        kern_err, att_err = [], []
        for m in cfg.features:
            ke, ae = [], []
            for _ in range(cfg.draws):
                fm = PositiveRandomFeatures(cfg.dim, m, generator=g, dtype=torch.float64)
                est = (fm(q) * fm(k)).sum(-1)
                ke.append(float(((est - exact).abs() / exact).median()))
                z = kernelized_attention(fm(aq), fm(ak), av)
                ae.append(float((z - soft).norm() / soft.norm()))
            kern_err.append(statistics.mean(ke))
            att_err.append(statistics.mean(ae))
        out["kernel"][str(R)] = kern_err
        out["attention"][str(R)] = att_err
    return out


# ---------------------------------------------------------------- numerics


@dataclass(frozen=True)
class NumericsConfig:
    n: int = 1024
    features: int = 16
    head_dim: int = 16
    ranges: tuple[float, ...] = (0.0, 5.0, 10.0, 20.0, 40.0, 60.0)
    seed: int = 0


def run_numerics(cfg: NumericsConfig) -> dict:
    """Max error of the FFT path (float32, float64 accumulation) vs float64 dense, per bias range."""
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(cfg.seed)
    n = cfg.n
    pq = torch.rand(1, 2, n, cfg.features, generator=g)
    pk = torch.rand(1, 2, n, cfg.features, generator=g)
    v = torch.randn(1, 2, n, cfg.head_dim, generator=g)
    shape = (1 - torch.linspace(-1, 1, 2 * n - 1, dtype=torch.float64).abs())[None].repeat(2, 1)
    L = next_fast_len(2 * n - 1)
    rows = []
    for B in cfg.ranges:
        for profile in ("decaying", "growing"):
            bias = B * shape - B if profile == "decaying" else -B * shape
            ref = dense_kernelized_attention(pq.double(), pk.double(), v.double(), bias)
            z32 = kernelized_attention(pq, pk, v, rpe_coeffs(bias.float(), n), method="fft")
            z64 = kernelized_attention(pq, pk, v, rpe_coeffs(bias, n), method="fft", compute_dtype=torch.float64)
            scale = float(v.abs().max())
            rows.append({
                "range": B, "profile": profile,
                "err_float32": float((z32.double() - ref).abs().max()) / scale,
                "err_float64": float((z64.double() - ref).abs().max()) / scale,
                "bound_float32": 2.0**-24 * math.log2(L) * math.exp(B),
            })
    return {"n": n, "rows": rows}


# ---------------------------------------------------------------- stability


VARIANTS = {
    # name: (mode, normalize_qk, rpe)
    "performer_raw": ("kernelized", False, "none"),
    "norm_nope": ("kernelized", True, "none"),
    "norm_rpe": ("kernelized", True, "table"),
    "softmax_rpe": ("softmax", False, "table"),
}


@dataclass(frozen=True)
class TrainConfig:
    task: str = "copy"  # "copy" (token at i - shift) or "recall" (associative recall)
    variant: str = "norm_rpe"
    seed: int = 0
    length: int = 32
    vocab: int = 16
    shift: int = 3
    pairs: int = 4
    embed_dim: int = 32
    heads: int = 2
    layers: int = 2
    features: int = 32
    steps: int = 300
    batch: int = 32
    lr: float = 3e-3
    eval_batches: int = 4
    #: validation evaluations during training (the convergence gate's curve): every ``steps // evals``
    #: steps, on ``val_batches`` batches drawn from a generator of their own (never the test batches)
    evals: int = 10
    val_batches: int = 2


def build_model(cfg: TrainConfig, vocab: int, length: int) -> TransformerEncoder:
    """The transformer testbed (:class:`posenc.models.TransformerEncoder`) with the variant's attention.

    One-hot tokens through the linear embedding (an embedding table), a learned
    absolute position table added, ``cfg.layers`` pre-LN blocks (MLP ratio 4)
    whose attention is the variable under test.
    """
    mode, norm, rpe = VARIANTS[cfg.variant]
    made = 0

    def attention(dim: int, heads: int) -> nn.Module:
        nonlocal made
        made += 1
        return KernelizedAttentionLayer(
            dim, heads, num_features=cfg.features, rpe=rpe, max_distance=length, normalize_qk=norm,
            mode=mode, seed=cfg.seed * 100 + made - 1,
        )

    table = create_encoding("learned_table", in_dim=1, grid_size=length, num_features=cfg.embed_dim, seed=cfg.seed)
    return TransformerEncoder(vocab, vocab, dim=cfg.embed_dim, depth=cfg.layers, num_heads=cfg.heads,
                              encoding=table, mlp_ratio=4.0, attention=attention)


def make_batch(cfg: TrainConfig, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokens ``(batch, length)`` and targets (``-100`` = ignored)."""
    if cfg.task == "copy":
        x = torch.randint(0, cfg.vocab, (cfg.batch, cfg.length), generator=g)
        y = torch.full_like(x, -100)
        y[:, cfg.shift :] = x[:, : -cfg.shift]
        return x, y
    # recall: [k1 v1 ... kp vp q], keys in [0, V), values in [V, 2V), query one of the keys
    V = cfg.vocab
    keys = torch.stack([torch.randperm(V, generator=g)[: cfg.pairs] for _ in range(cfg.batch)])
    vals = torch.randint(V, 2 * V, (cfg.batch, cfg.pairs), generator=g)
    seq = torch.stack((keys, vals), dim=-1).reshape(cfg.batch, -1)
    pick = torch.randint(0, cfg.pairs, (cfg.batch,), generator=g)
    rows = torch.arange(cfg.batch)
    x = torch.cat((seq, keys[rows, pick][:, None]), dim=1)
    y = torch.full_like(x, -100)
    y[:, -1] = vals[rows, pick]
    return x, y


def chance_level(cfg: TrainConfig) -> float:
    """The accuracy of a model that learned nothing of the task: ``copy`` 1 / vocab (any token can
    be the answer); ``recall`` 1 / pairs (the answer is one of the values in context, which a model
    can learn without learning which key it belongs to: the plateau of a model that has not learned
    the association)."""
    return 1.0 / cfg.vocab if cfg.task == "copy" else 1.0 / cfg.pairs


def _spikes(losses: list[float], window: int = 20, factor: float = 1.5, floor: float = 0.05) -> int:
    """Steps whose loss exceeds ``factor`` x the median of the previous ``window`` steps
    and that median by at least ``floor`` nats (so jitter of a converged ~0 loss is no spike)."""
    count = 0
    for t in range(window, len(losses)):
        med = statistics.median(losses[t - window : t])
        if losses[t] > factor * med and losses[t] - med > floor:
            count += 1
    return count


def run_train(cfg: TrainConfig) -> dict:
    """Train the testbed encoder; return the loss curve, spikes, divergence and held-out accuracy."""
    torch.set_num_threads(1)
    torch.manual_seed(cfg.seed)
    vocab = cfg.vocab if cfg.task == "copy" else 2 * cfg.vocab
    length = cfg.length if cfg.task == "copy" else 2 * cfg.pairs + 1
    model = build_model(cfg, vocab, length)
    positions = torch.arange(length)[:, None]

    def logits_of(tokens: torch.Tensor) -> torch.Tensor:
        n = tokens.shape[1]
        return model(nn.functional.one_hot(tokens, vocab).float(), positions[:n])

    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    g = torch.Generator().manual_seed(10_000 + cfg.seed)
    g_val = torch.Generator().manual_seed(77_777)  # validation batches: neither training nor test ones
    val = [make_batch(cfg, g_val) for _ in range(cfg.val_batches)]
    every = max(1, cfg.steps // max(1, cfg.evals))
    losses: list[float] = []
    grad_norms: list[float] = []
    evals: list[list[float]] = []
    diverged = False

    def accuracy(batches) -> float:
        correct = total = 0
        was = model.training
        model.eval()
        with torch.no_grad():
            for x, y in batches:
                pred = logits_of(x).argmax(-1)
                keep = y != -100
                correct += int((pred[keep] == y[keep]).sum())
                total += int(keep.sum())
        model.train(was)
        return correct / max(total, 1)

    t0 = time.perf_counter()
    for step in range(cfg.steps):
        x, y = make_batch(cfg, g)
        logits = logits_of(x)
        loss = nn.functional.cross_entropy(logits.reshape(-1, vocab), y.reshape(-1), ignore_index=-100)
        if not torch.isfinite(loss):
            diverged = True
            break
        opt.zero_grad()
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf"))
        grad_norms.append(float(gn))
        opt.step()
        losses.append(float(loss.detach()))
        if (step + 1) % every == 0 or step + 1 == cfg.steps:
            evals.append([step + 1, accuracy(val)])
    seconds = time.perf_counter() - t0
    eg = torch.Generator().manual_seed(99_999)
    acc = accuracy([make_batch(cfg, eg) for _ in range(cfg.eval_batches)]) if not diverged else 0.0
    tail = losses[-max(1, len(losses) // 10) :] if losses else [float("nan")]
    return {
        "task": cfg.task, "variant": cfg.variant, "seed": cfg.seed,
        "losses": losses[:: max(1, cfg.steps // 100)],
        "final_loss": statistics.mean(tail) if losses else None,
        "accuracy": acc, "val_curve": evals, "chance": chance_level(cfg),
        "diverged": diverged or (bool(losses) and statistics.mean(tail) > losses[0]),
        "spikes": _spikes(losses), "max_grad_norm": max(grad_norms) if grad_norms else None,
        "seconds": seconds,
    }


# ---------------------------------------------------------------- speed


@dataclass(frozen=True)
class SpeedConfig:
    lengths: tuple[int, ...] = (256, 1024, 4096)
    heads: int = 2
    head_dim: int = 64
    features: int = 32
    dense_max: int = 4096
    repeats: int = 2
    seed: int = 0


def _clock() -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process)."""
    return time.perf_counter(), time.process_time()


def _load() -> list[float] | None:
    """The 1, 5 and 15 minute load averages (``None`` where the OS has none)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def run_speed(cfg: SpeedConfig) -> dict:
    """Forward+backward seconds (best of ``repeats``, 1 thread) per method and length.

    ``floor`` times the FFTs alone of a straightforward implementation (rfft + irfft of the
    ``m (d + 1)`` feature columns at the padded length, twice per head): an ``n log n``
    reference measured in the same run, so that the growth of the FFT path can be read as a
    ratio to it, which the machine's load does not shift.

    Every measurement records wall time and the process's CPU time: at one thread, CPU
    time does not count the time spent waiting for a core, so it stays meaningful on a
    machine that other work is loading (the load averages before and after are recorded
    too). The repeats are interleaved (round ``r`` times every length and method once), so
    a change of load during the run affects every length alike and the ratios between
    lengths, measured within this one run, stay comparable.
    """
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(cfg.seed)
    H, d, m = cfg.heads, cfg.head_dim, cfg.features
    load_before = _load()
    work: list[tuple[int, str, object]] = []
    for n in cfg.lengths:
        q = torch.randn(1, H, n, d, generator=g).requires_grad_()
        k = torch.randn(1, H, n, d, generator=g).requires_grad_()
        v = torch.randn(1, H, n, d, generator=g).requires_grad_()
        bias = torch.zeros(H, 2 * n - 1).requires_grad_()
        fm = PositiveRandomFeatures(d, m, seed=cfg.seed)

        def kern(method, rpe=True, q=q, k=k, v=v, bias=bias, fm=fm, n=n):
            def fn():
                c = rpe_coeffs(bias, n) if rpe else None
                kernelized_attention(fm(q), fm(k), v, c, method=method).sum().backward()
            return fn

        def soft(q=q, k=k, v=v, bias=bias):
            softmax_rpe_attention(q, k, v, bias).sum().backward()

        L = next_fast_len(2 * n - 1)
        x = torch.randn(m * (d + 1), n, generator=g)

        def floor(x=x, L=L):  # the transforms of a straightforward FFT implementation: 4 per head
            for _ in range(H):
                for _ in range(2):
                    torch.fft.irfft(torch.fft.rfft(x, n=L, dim=-1), n=L, dim=-1)

        work += [(n, "fft", kern("fft")), (n, "no_rpe", kern("fft", False)), (n, "floor", floor)]
        if n <= cfg.dense_max:
            work += [(n, "dense", kern("dense")), (n, "softmax", soft)]
    best_wall = {(n, key): math.inf for n, key, _ in work}
    best_cpu = dict(best_wall)
    for _, _, fn in work:  # warm-up
        fn()
    for _ in range(max(1, cfg.repeats)):
        for n, key, fn in work:
            w0, c0 = _clock()
            fn()
            w1, c1 = _clock()
            best_wall[n, key] = min(best_wall[n, key], w1 - w0)
            best_cpu[n, key] = min(best_cpu[n, key], c1 - c0)
    rows = []
    for n in cfg.lengths:
        keys = [key for nn, key, _ in work if nn == n]
        row: dict = {"n": n, **{key: best_wall[n, key] for key in keys}}
        row["cpu"] = {key: best_cpu[n, key] for key in keys}
        rows.append(row)
    return {"heads": H, "head_dim": d, "features": m, "rows": rows, "threads": torch.get_num_threads(),
            "load_before": load_before, "load_after": _load(), "cpu_count": os.cpu_count()}


# ---------------------------------------------------------------- plan / summary


def plan(profile: str, seeds: int | None) -> list[Job]:
    """Jobs of the ``quick`` or ``full`` profile (``seeds`` overrides every task's seed count); the
    training runs' steps, seeds, evaluations and batches per task come from ``profiles.toml``
    (:func:`posenc.experiments.profiles.profile_settings`)."""
    train_plan = profile_settings("krpe", profile)
    quick = profile == "quick"
    jobs = [
        Job("approx", run_approx, ApproxConfig(draws=4 if quick else 16), cost=1.0),
        Job("numerics", run_numerics, NumericsConfig(n=512 if quick else 2048), cost=0.5),
        Job("speed", run_speed, SpeedConfig() if quick else SpeedConfig(lengths=(256, 1024, 4096, 16384)),
            cost=2.0 if quick else 20.0, alone=True),
    ]
    for task, p in train_plan.items():
        vocab = 16 if task == "copy" else 8
        for variant in VARIANTS:
            for seed in range(seeds or p["seeds"]):
                cfg = TrainConfig(task=task, variant=variant, seed=seed, steps=p["steps"], vocab=vocab,
                                  evals=p["evals"], val_batches=p["val_batches"], eval_batches=p["eval_batches"])
                jobs.append(Job(f"train-{task}-{variant}-s{seed}", run_train, cfg, cost=p["steps"] / 150))
    return jobs


#: accuracy difference below which two variants count as tied (seed noise at this scale)
MARGIN = 0.02


#: The convergence gate's plateau tolerance per task and its chance margin (accuracy). Copy is
#: scored on every token of 2 validation batches (1,856 tokens); recall on one query per sequence,
#: 2,048 of them (a standard error of about 0.011 per evaluation, 0.015 on the tail's fitted gain),
#: so its tolerance is wider.
GATE_TOL: dict[str, float] = {"copy": 0.02, "recall": 0.03}
GATE_LEARNED = 0.05


def gate(task: str, chance: float) -> Gate:
    """The convergence gate of a training task (:mod:`posenc.experiments.gate`) on its validation
    accuracy: converged when the least-squares gain over the last third of training is at most
    :data:`GATE_TOL`; failed to learn when that third averages within :data:`GATE_LEARNED` of
    ``chance`` (:func:`chance_level`), or the run diverged."""
    return Gate(f"validation accuracy ({task})", chance=chance, learned=GATE_LEARNED, tol=GATE_TOL[task])


def run_state(result: dict) -> str:
    """The gate's reading of a training run: its validation curve (a result stored before runs kept
    one reads as still learning) and whether it diverged."""
    chance = result.get("chance", 1.0 / 16)
    return gate(result["task"], chance).read(result.get("val_curve", []), diverged=bool(result.get("diverged")))


def _ms(values: list[float]) -> dict:
    vals = [float(v) for v in values if v is not None and math.isfinite(v)]
    if not vals:
        return {"mean": None, "std": None, "n": 0}
    return {"mean": statistics.mean(vals), "std": statistics.pstdev(vals) if len(vals) > 1 else 0.0, "n": len(vals)}


def _slope(xs: list[float], ys: list[float]) -> float | None:
    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys) if y and y > 0]
    if len(pts) < 2:
        return None
    mx = statistics.mean(p[0] for p in pts)
    my = statistics.mean(p[1] for p in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)


def summarize(results: dict[str, dict]) -> dict:
    summary: dict = {"claims": {}}
    approx = results.get("approx")
    if approx:
        summary["approx"] = approx
        ms = approx["features"]
        slopes = {R: _slope(ms, errs) for R, errs in approx["kernel"].items()}
        summary["approx_slopes"] = slopes
        small, large = approx["kernel"]["1.0"][-1], approx["kernel"][str(approx["norms"][-1])][-1]
        summary["claims"]["approx_large_norm_useless"] = {
            "holds": bool(large > 0.5 and small < 0.2),
            "err_R1_at_max_m": small, "err_Rmax_at_max_m": large,
        }
        s1 = slopes.get("1.0")
        summary["claims"]["approx_inverse_sqrt_m"] = {"holds": bool(s1 is not None and -0.65 < s1 < -0.35),
                                                      "slope_R1": s1}
    if "numerics" in results:
        rows = results["numerics"]["rows"]
        summary["numerics"] = results["numerics"]
        ok = all(r["err_float32"] <= r["bound_float32"] for r in rows)
        wide = [r for r in rows if r["profile"] == "growing" and r["range"] >= 40]
        summary["claims"]["float32_bound_holds"] = {"holds": ok}
        summary["claims"]["float32_fails_wide_growing_bias"] = {
            "holds": bool(wide and all(r["err_float32"] > 1e-2 for r in wide)),
            "errors": [(r["range"], r["err_float32"], r["err_float64"]) for r in wide],
        }
    if "speed" in results:
        sp = results["speed"]
        summary["speed"] = sp
        rows = sp["rows"]
        ns = [r["n"] for r in rows]
        summary["speed_slopes"] = {
            key: _slope([r["n"] for r in rows if key in r], [r[key] for r in rows if key in r])
            for key in ("fft", "no_rpe", "dense", "softmax", "floor")
        }
        big = [r for r in rows if r["n"] >= 1024]
        s_fft = _slope([r["n"] for r in big], [r["fft"] for r in big])
        cpu_rows = [r for r in big if "cpu" in r]
        s_cpu = _slope([r["n"] for r in cpu_rows], [r["cpu"]["fft"] for r in cpu_rows]) if cpu_rows else None
        summary["speed_slopes_cpu"] = {
            key: _slope([r["n"] for r in rows if key in r.get("cpu", {})],
                        [r["cpu"][key] for r in rows if key in r.get("cpu", {})])
            for key in ("fft", "no_rpe", "dense", "softmax", "floor")
        } if any("cpu" in r for r in rows) else {}
        # The claim reads the ratio FFT path / FFT floor (CPU time, one thread, one run with
        # interleaved repeats): both see the same load and caches, so the log-log slope of the
        # ratio is ~0 for an n log n path and ~0.9 for a quadratic one; the threshold 0.2 is
        # the margin of "slope <= 1.2" over n^1. Results stored without a floor fall back to
        # the absolute slope (CPU time, else wall time) <= 1.2, and say so.
        ratio_rows = [r for r in cpu_rows if "floor" in r["cpu"] and r["cpu"]["floor"] > 0]
        s_ratio = _slope([r["n"] for r in ratio_rows], [r["cpu"]["fft"] / r["cpu"]["floor"] for r in ratio_rows])
        if s_ratio is not None:
            basis, slope, limit = "cpu_ratio_to_floor", s_ratio, 0.2
        elif s_cpu is not None:
            basis, slope, limit = "cpu", s_cpu, 1.2
        else:
            basis, slope, limit = "wall", s_fft, 1.2
        both = [r for r in rows if "dense" in r and "fft" in r]
        ratio = None
        if both:
            last = both[-1]
            t = last["cpu"] if "cpu" in last else last
            ratio = {"n": last["n"], "dense_over_fft": t["dense"] / t["fft"] if t["fft"] > 0 else None}
        summary["claims"]["fft_grows_subquadratically"] = {
            "holds": bool(slope is not None and slope <= limit), "slope": slope, "basis": basis, "limit": limit,
            "slope_fft_n_ge_1024": s_fft, "slope_fft_cpu_n_ge_1024": s_cpu, "slope_fft_over_floor_cpu": s_ratio,
            "lengths": ns, "dense_over_fft": ratio,
            "load_before": sp.get("load_before"), "load_after": sp.get("load_after"),
        }
    train: dict = {}
    for key, res in results.items():
        if key.startswith("train-"):
            train.setdefault(res["task"], {}).setdefault(res["variant"], []).append(res)
    table: dict = {}
    for task, by_var in train.items():
        table[task] = {}
        for variant, runs in by_var.items():
            table[task][variant] = {
                "accuracy": _ms([r["accuracy"] for r in runs]),
                "final_loss": _ms([r["final_loss"] for r in runs]),
                "spikes": _ms([r["spikes"] for r in runs]),
                "diverged": sum(bool(r["diverged"]) for r in runs),
                "states": {st: sum(run_state(r) == st for r in runs) for st in STATES},
                "seeds": len(runs),
                "curves": [r["losses"] for r in runs],
            }
    summary["train"] = table
    by_seed = {task: {v: {r["seed"]: r for r in runs} for v, runs in by_var.items()} for task, by_var in train.items()}
    comparisons: dict[str, dict] = {}
    for task, rows in by_seed.items():
        # claim: (method, baseline, shift): method's accuracy - (baseline's + shift) > 0, paired per seed
        for name, method, base, shift in ((f"{task}_rpe_beats_nope", "norm_rpe", "norm_nope", MARGIN),
                                          (f"{task}_norm_rpe_beats_raw_performer", "norm_rpe", "performer_raw", MARGIN),
                                          (f"{task}_norm_rpe_close_to_softmax", "norm_rpe", "softmax_rpe", -2.5 * MARGIN)):
            if method not in rows or base not in rows:
                continue
            d = paired_difference({s: r["accuracy"] for s, r in rows[method].items()},
                                  {s: r["accuracy"] + shift for s, r in rows[base].items()},
                                  method_state={s: run_state(r) for s, r in rows[method].items()},
                                  baseline_state={s: run_state(r) for s, r in rows[base].items()})
            d.update({"task": task, "method": method, "baseline": base, "shift": shift,
                      "metric": "accuracy" + (f", {base} {shift:+g}" if shift else "")})
            comparisons[name] = d
    holm_verdicts(comparisons)
    summary["claims"].update(comparisons)
    states = {f"train-{r['task']}-{r['variant']}-s{r['seed']}": run_state(r)
              for runs in train.values() for rs in runs.values() for r in rs}
    summary["not_converged"] = sorted(k for k, st in states.items() if st == LEARNING)
    summary["failed_to_learn"] = sorted(k for k, st in states.items() if st == FAILED)
    summary["gate"] = {task: gate(task, next(iter(by_var.values()))[0].get("chance", 1.0 / 16)).as_dict()
                       for task, by_var in train.items()}
    return summary


# ------------------------------------------------------------------ result schemas
# the types the summary reads from each job's stored result (posenc.report.schema's spec language)
NUM = (float, None)  # a number, or null (a non-finite value is stored as null)
run_approx.result_schema = {  # type: ignore[attr-defined]
    "features": [int], "norms": [float], "kernel": {str: [NUM]}, "attention": {str: [NUM]},
}
run_numerics.result_schema = {  # type: ignore[attr-defined]
    "n": int,
    "rows": [{"range": float, "profile": str, "err_float32": NUM, "err_float64": NUM, "bound_float32": NUM}],
}
run_speed.result_schema = {  # type: ignore[attr-defined]
    "heads": int, "head_dim": int, "features": int,
    "rows": [{"n": int, "fft": NUM, "no_rpe": NUM, "floor": NUM, "dense": NUM, "softmax": NUM}],
}
run_train.result_schema = {  # type: ignore[attr-defined]
    "task": str, "variant": str, "seed": int, "losses": [NUM], "final_loss": NUM, "accuracy": NUM,
    "val_curve": [[NUM]], "chance": float, "diverged": bool, "spikes": int, "max_grad_norm": NUM,
}
