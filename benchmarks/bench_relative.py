"""Benchmarks for the relative encodings (area ``relative``).

RoPE against the memory floor is its own area (``bench_rope``).

1. Attention with a position bias, forward + backward, batch 1, 8 heads, d = 64,
   n = 1k .. 16k, each case in a fresh process (peak memory): plain SDPA (no bias,
   the fused kernel), SDPA + the fixed ALiBi bias, SDPA + a learned T5 bias, SDPA +
   a learned clipped-offset bias; FlexAttention with ALiBi's ``score_mod``
   (forward only: torch has no CPU backward for it). Cases predicted above
   ``MEMORY_LIMIT_MB`` are not run.
2. ALiBi at long n: linear attention with ALiBi through the decay path
   (:func:`posenc.attention.alibi_kernelized_attention`, m = 32 features) against
   SDPA + ALiBi, forward + backward.
3. The drop-in: :class:`posenc.attention.RelativeMHA` with ALiBi, T5 buckets and a
   learned clipped-offset bias (causal) against its floor, the same projections
   around SDPA with the same bias precomputed once (a leaf that requires grad for the
   learned kinds, so SDPA computes its gradient too). Timed round-robin in one
   process, forward under ``no_grad`` (evaluation) and forward + backward
   (training); goal ≤ 1.2x.

Every row also gives its first call (the warm-up, timed: the first call at that shape in its
process; for ``RelativeMHA`` it builds the bias cache). The decay-path ALiBi rows time the
default call beside ``check_inputs=False``, round-robin; the other rows call SDPA or
``RelativeMHA``, which have no such switch (``RelativeMHA`` reads no input values to check).
"""

from __future__ import annotations

import math
import os
import statistics

import torch
import torch.nn.functional as F

from benchmarks.common import peak_rss_mb, timeit
from benchmarks.isolated import run_isolated

HEADS, HEAD_DIM = 8, 64
MEMORY_LIMIT_MB = 9000.0


# ------------------------------------------------------------------ 1. bias attention
def _predicted_mb(kind: str, n: int, heads: int) -> float:
    if kind in ("sdpa", "flex_alibi_fwd", "decay_alibi"):
        return 0.0
    # the bias (H n^2) plus the attention probabilities kept for backward, float32, about 3 copies
    return 3 * heads * n * n * 4 / 2**20


def attention_case(kind: str, n: int, heads: int = HEADS, d: int = HEAD_DIM, repeat: int = 3) -> dict:
    """One timed case (run in a fresh process by :func:`run_isolated`)."""
    from posenc.attention import RelativePositionBias, alibi_bias, alibi_kernelized_attention, alibi_slopes
    from posenc.attention.kernelized.features import PositiveRandomFeatures

    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, heads, n, d, generator=g).requires_grad_(True) for _ in range(3))
    slopes = alibi_slopes(heads)
    if kind == "flex_alibi_fwd":
        from torch.nn.attention.flex_attention import flex_attention

        from posenc.attention import alibi_score_mod

        flex = torch.compile(flex_attention, dynamic=False)
        mod = alibi_score_mod(slopes)

        qd, kd, vd = q.detach(), k.detach(), v.detach()

        def step() -> None:
            flex(qd, kd, vd, score_mod=mod)
    elif kind == "decay_alibi":
        feats = PositiveRandomFeatures(d, 32, seed=0)

        def step(check_inputs: bool = True) -> None:
            qn, kn = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
            out = alibi_kernelized_attention(feats(qn), feats(kn), v, slopes, causal=True, check_inputs=check_inputs)
            out.sum().backward()

        # the default beside check_inputs=False, round-robin (odd rounds in reverse order)
        first = timeit(step, repeat=1, warmup=1)["first_s"]
        step(False)
        calls = {"default": step, "unchecked": lambda: step(False)}
        times: dict[str, list[float]] = {k: [] for k in calls}
        for r in range(max(repeat, 2)):
            for name in (list(calls) if r % 2 == 0 else list(calls)[::-1]):
                times[name].append(timeit(calls[name], repeat=1, warmup=0)["median_s"])
        per_round = [d / u for d, u in zip(times["default"], times["unchecked"])]
        return {"kind": kind, "n": n, "median_s": statistics.median(times["default"]), "min_s": min(times["default"]),
                "first_s": first, "unchecked_median_s": statistics.median(times["unchecked"]),
                "check_cost": statistics.median(per_round) - 1.0, "peak_rss_mb": peak_rss_mb()}
    else:
        table = None
        if kind in ("sdpa_t5", "sdpa_learned"):
            table = RelativePositionBias(heads, kind="t5" if kind == "sdpa_t5" else "clipped", max_distance=128)
            with torch.no_grad():
                table.table.normal_(0, 0.1, generator=g)

        def step() -> None:
            if kind == "sdpa":
                out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            elif kind == "sdpa_alibi":
                out = F.scaled_dot_product_attention(q, k, v, attn_mask=alibi_bias(slopes, n, causal=True))
            else:
                fut = torch.ones(n, n, dtype=torch.bool).triu(1)
                bias = table(n).masked_fill(fut, float("-inf"))
                out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
            out.sum().backward()
    t = timeit(step, repeat=repeat, warmup=1)
    return {"kind": kind, "n": n, "median_s": t["median_s"], "min_s": t["min_s"], "first_s": t["first_s"],
            "peak_rss_mb": peak_rss_mb()}


KINDS = {
    "sdpa": "SDPA, causal, no bias (fused kernel)",
    "sdpa_alibi": "SDPA + ALiBi (fixed materialised bias)",
    "sdpa_t5": "SDPA + learned T5 bias",
    "sdpa_learned": "SDPA + learned clipped-offset bias",
    "flex_alibi_fwd": "FlexAttention + ALiBi score_mod (compiled, forward only)",
    "decay_alibi": "kernelized ALiBi, decay path (m = 32)",
}


def bench_bias(lengths: list[int], kinds: list[str], repeat: int) -> dict:
    rows = []
    for n in lengths:
        for kind in kinds:
            pred = _predicted_mb(kind, n, HEADS)
            if pred > MEMORY_LIMIT_MB:
                rows.append({"kind": kind, "n": n, "skipped": f"predicted {pred:.0f} MB > {MEMORY_LIMIT_MB:.0f} MB"})
                continue
            res = run_isolated("bench_relative", "attention_case", kind=kind, n=n, repeat=repeat)
            rows.append({"kind": kind, "n": n, **res})
    return {"heads": HEADS, "head_dim": HEAD_DIM, "batch": 1, "threads": 1, "rows": rows, "labels": KINDS}


def crossover(rows: list[dict], fast: str, slow: str) -> float | None:
    """Length from which ``fast`` beats ``slow`` (log-log interpolation between measured lengths)."""
    t = {}
    for r in rows:
        if "median_s" in r:
            t.setdefault(r["kind"], {})[r["n"]] = r["median_s"]
    common = sorted(set(t.get(fast, {})) & set(t.get(slow, {})))
    for a, b in zip(common, common[1:]):
        ra, rb = t[fast][a] / t[slow][a], t[fast][b] / t[slow][b]
        if ra >= 1.0 > rb:
            f = math.log(ra) / (math.log(ra) - math.log(rb))
            return math.exp(math.log(a) + f * (math.log(b) - math.log(a)))
    if common and t[fast][common[0]] < t[slow][common[0]]:
        return float(common[0])
    return None


# ------------------------------------------------------------------ 3. RelativeMHA against SDPA + precomputed bias
MHA_KINDS = {"alibi": "ALiBi", "t5": "learned T5 bias", "learned": "learned clipped-offset bias"}
MHA_TARGET = 1.2


def mha_vs_sdpa(lengths: list[int], kinds: list[str], *, batch: int = 1, embed_dim: int = 512, heads: int = HEADS,
                repeat: int = 5) -> dict:
    """``RelativeMHA`` forward (no_grad) and forward + backward against its SDPA floor, round-robin per case."""
    import time

    from posenc.attention import RelativeMHA

    torch.set_num_threads(1)
    hd = embed_dim // heads
    rows = []
    for train in (False, True):
        for kind in kinds:
            for n in lengths:
                torch.manual_seed(0)
                mha = RelativeMHA(embed_dim, heads, batch_first=True, position=kind, causal=True)
                if mha.rel_bias is not None:
                    with torch.no_grad():
                        mha.rel_bias.table.normal_(0, 0.1)
                x = torch.randn(batch, n, embed_dim, requires_grad=train)
                with torch.no_grad():
                    bias = mha._bias(None, n, x.device, x.dtype, True).clone()
                if train and mha.rel_bias is not None:
                    bias.requires_grad_(True)

                def ours() -> None:
                    out, _ = mha(x, x, x, need_weights=False)
                    if train:
                        out.sum().backward()

                def floor() -> None:
                    qkv = F.linear(x, mha.in_proj_weight, mha.in_proj_bias).view(batch, n, 3, heads, hd)
                    q, k, v = qkv.permute(2, 0, 3, 1, 4)
                    o = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
                    o = mha.out_proj(o.transpose(1, 2).reshape(batch, n, embed_dim))
                    if train:
                        o.sum().backward()

                times: dict[str, list[float]] = {"ours": [], "floor": []}
                with torch.set_grad_enabled(train):
                    t0 = time.perf_counter()
                    ours()  # warm-up (and the bias cache, as in use): timed, the first call at this shape
                    first = time.perf_counter() - t0
                    floor()
                    for _ in range(repeat):
                        for name, fn in (("ours", ours), ("floor", floor)):
                            t0 = time.perf_counter()
                            fn()
                            times[name].append(time.perf_counter() - t0)
                o, f = min(times["ours"]), min(times["floor"])
                rows.append({"kind": kind, "n": n, "mode": "forward + backward" if train else "forward (no_grad)",
                             "ours_s": o, "floor_s": f, "ratio": o / f, "ours_first_s": first})
    return {"batch": batch, "embed_dim": embed_dim, "heads": heads, "threads": 1, "repeat": repeat, "rows": rows,
            "labels": MHA_KINDS, "target_ratio": MHA_TARGET, "date": time.strftime("%Y-%m-%d %H:%M:%S"),
            "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None}


def run(quick: bool = False) -> dict:
    lengths = [256, 512] if quick else [1024, 4096, 16384]
    bias = bench_bias(lengths, list(KINDS), repeat=1 if quick else 2)
    # one length past the sweep: SDPA is O(n^2) (about 3 min per forward + backward at
    # n = 32,768 on one core, 4x that at 65,536), the decay path O(n)
    long_n = [1024] if quick else [32768]
    decay = bench_bias(long_n, ["sdpa", "decay_alibi"], repeat=1 if quick else 1)
    rows = bias["rows"] + decay["rows"]
    mha = mha_vs_sdpa([128, 256] if quick else [512, 1024, 2048], list(MHA_KINDS), repeat=2 if quick else 5)
    return {
        "bias": bias,
        "long": decay,
        "mha": mha,
        "crossovers": {
            "decay_alibi_vs_sdpa_alibi": crossover(rows, "decay_alibi", "sdpa_alibi"),
            "decay_alibi_vs_sdpa_no_bias": crossover(rows, "decay_alibi", "sdpa"),
        },
    }
