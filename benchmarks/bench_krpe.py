"""Benchmark of kernelized attention with RPE (issue 4, section 5).

Every configuration runs in a fresh child process (``python -c ...``) so that its
peak resident memory (``VmHWM``, see ``benchmarks.common.peak_rss_mb``) is its own. Configurations whose predicted
memory exceeds ``MEMORY_LIMIT_MB`` or whose predicted time exceeds the remaining
budget are skipped and extrapolated from a log-log fit of the measured points
(marked ``"extrapolated": true`` with the reason).

Methods (batch 1, H heads, head dim d, m features, forward+backward unless noted):

* ``ours``: :func:`posenc.attention.kernelized_attention` FFT path, learned bias
  (gradient w.r.t. the 2n-1 coefficients), features given.
* ``floor``: the rfft/irfft calls of a straightforward FFT implementation on the
  same shapes alone (per head: rfft + irfft of the ``n x m(d+1)`` tensor in
  forward, the same two in backward), measured in the same child as ``ours``.
* ``floor_own``: the transforms our implementation issues (6 per block: forward
  2, backward 4, on the same cache-sized block shapes), i.e. the floor of this design.
* ``dense``: kernelized attention with the n x n RPE matrix materialised.
* ``sdpa_fixed`` / ``sdpa_learned``: softmax SDPA with a materialised bias (fixed,
  or built from a learned table so the gradient goes through the n x n bias).
* ``flex``: FlexAttention with a relative-bias ``score_mod`` (compiled; forward
  only, CPU has no FlexAttention backward in torch 2.13).
* ``performer``: kernelized attention without RPE (linear attention).
* ``decay``: the exponential-decay RPE (2 terms each side) by chunked scans.

Every row of posenc's calls is the default call (``check_inputs=True``). The rows of
functions that have ``check_inputs`` also time the call with ``check_inputs=False`` in the
same child, round-robin (``unchecked_s``, and ``check_cost``: the median over the rounds of
default / unchecked CPU time, minus 1; with two rounds it is noise of several per cent either
way, so ``checks_alone_s`` also times the checks themselves on the same tensors), and every
row its first call in the child process
(``first_s``: the warm-up, or the first measured call where there is none). The sweeps of
internal parameters (crossovers, block sizes, chunk lengths, transform widths) compare
methods and settings, not default calls: they time those directly.

Side-by-side ratios (one child, round-robin, repeated; the load average is recorded
before and after every child):

* ``efficiency_vs_floor``: ``ours`` against ``floor_own`` (the transforms it issues) and
  ``floor`` at n = 4,096 to 65,536, m = 16 / 32 / 64, 1 and 8 heads;
* ``decay_vs_fft``: the decay RPE against the FFT path at the same n, m, heads;
* ``mha_causal``: ``KernelizedMHA(causal=True)`` with ``rpe="none"`` against ``rpe="alibi"``
  (both on the chunkwise decay path now) and, at the core, against the prefix-sum form that
  ``rpe="none"`` used before (cumulative sums of the ``n x m x (d+1)`` outer products).
"""

from __future__ import annotations

import json
import math
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

MEMORY_LIMIT_MB = 9000.0
ROOT = Path(__file__).resolve().parent.parent

# ------------------------------------------------------------------ child side


def _child_main() -> None:
    spec = json.loads(sys.stdin.read())
    load_before = os.getloadavg()[0]
    if "sweep" in spec:  # quick profile: one child per method, lengths in increasing order
        rows = []
        for n in spec.pop("sweep"):
            rows.append({**_measure({**spec, "n": n}), "n": n, "shared_process": True})
        res = {"rows": rows}
    else:
        res = _measure(spec)
    res["loadavg_1min"] = [load_before, os.getloadavg()[0]]
    print(json.dumps(res))


def _rss_mb() -> float:
    from benchmarks.common import peak_rss_mb

    return peak_rss_mb()


def _best(fn, repeats: int) -> float:
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _attention_inputs(g, H: int, n: int, m: int, d: int, coeffs: bool = True):
    """Leaf tensors ``phi_q, phi_k (1, H, n, m)``, ``v (1, H, n, d)``, ``coeffs (H, 2n-1)`` (or None)."""
    import torch

    pq = torch.rand(1, H, n, m, generator=g).requires_grad_()
    pk = torch.rand(1, H, n, m, generator=g).requires_grad_()
    v = torch.randn(1, H, n, d, generator=g).requires_grad_()
    c = torch.rand(H, 2 * n - 1, generator=g).requires_grad_() if coeffs else None
    return pq, pk, v, c


def _interleaved(fns: dict, repeats: int) -> dict:
    """Best CPU time of each function, timed round-robin (one warm-up call each) so all see the same load."""
    for fn in fns.values():
        fn()
    best = {k: math.inf for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            t0 = time.process_time()
            fn()
            best[k] = min(best[k], time.process_time() - t0)
    return best


def _timed(fn) -> tuple[float, float]:
    """``(wall, cpu)`` seconds of one call; CPU time (this process, every thread) is what a loaded,
    shared machine disturbs least (it excludes the time spent waiting for a core)."""
    w0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w0, time.process_time() - c0


def _rounds(fns: dict, repeats: int, warm: bool = True) -> dict:
    """CPU time of each call of each function, timed round-robin (round r runs each once, odd rounds in
    reverse order), after one warm-up call each; wall times under ``"wall"``, and under ``"first"`` the
    wall time of each function's first call in this process (its warm-up, or round 0 without one)."""
    first: dict = {}
    if warm:
        for k, fn in fns.items():
            first[k] = _timed(fn)[0]
    times: dict = {k: [] for k in fns}
    wall: dict = {k: [] for k in fns}
    for r in range(repeats):
        # odd rounds in reverse order: what runs first after another's allocations were freed differs
        for k in (list(fns) if r % 2 == 0 else list(fns)[::-1]):
            w, c = _timed(fns[k])
            times[k].append(c)
            wall[k].append(w)
            first.setdefault(k, w)
    return {**times, "wall": wall, "first": first}


def _checks_alone(*tensors, output=None, repeats: int = 7) -> float:
    """Best wall time of the finiteness checks a default call makes on these inputs (and its result):
    the checks' cost measured directly, which few rounds of a noisy side-by-side cannot resolve."""
    from posenc._checks import all_finite, check_finite

    def run():
        for t in tensors:
            check_finite("t", t)
        if output is not None:
            all_finite(output)

    return _best(run, repeats)


def _check_cost(rounds: dict, default: str, unchecked: str) -> float:
    """Median over the rounds of (default / check_inputs=False) CPU time, minus 1: the checks' share."""
    import statistics

    return statistics.median(d / u for d, u in zip(rounds[default], rounds[unchecked])) - 1.0


def _measure(spec: dict) -> dict:
    import torch

    torch.set_num_threads(spec.get("threads", 1))
    from posenc.attention.kernelized.kernelized import ATTENTION_BLOCK_BYTES, _blocks, kernelized_attention, rpe_coeffs
    from posenc.attention.kernelized.reference import rpe_matrix
    from posenc.attention.kernelized.toeplitz import lines_per_block, next_fast_len, toeplitz_matmul

    kind, n, H, d, m = spec["kind"], spec["n"], spec["heads"], spec["d"], spec["m"]
    reps = spec.get("repeats", 1)
    base = _rss_mb()
    g = torch.Generator().manual_seed(0)
    out: dict = {"baseline_rss_mb": base}

    if kind == "crossover_toeplitz":
        rows = []
        for nn in spec["lengths"]:
            x = torch.randn(H, nn, spec["channels"], generator=g).requires_grad_()
            c = torch.rand(H, 2 * nn - 1, generator=g).requires_grad_()
            row = {"n": nn}
            for meth in ("direct", "fft"):
                fn = lambda: toeplitz_matmul(c, x, method=meth).sum().backward()  # noqa: E731
                fn()
                row[meth] = _best(fn, reps)
            rows.append(row)
        return {"rows": rows}
    if kind == "block_sweep":  # forward+backward of ours against the size of a block of spectra
        rows = []
        for nn in spec["lengths"]:
            pq, pk, v, c = _attention_inputs(g, H, nn, m, d)
            fns = {str(mib): (lambda bb=int(mib * 2**20): kernelized_attention(
                pq, pk, v, c, method="fft", block_bytes=bb).sum().backward()) for mib in spec["block_mib"]}
            rows.append({"n": nn, **_interleaved(fns, reps)})
        return {"rows": rows}
    if kind == "decay_chunk":  # forward+backward of the chunkwise decay RPE against the chunk length
        from posenc.attention.kernelized.decay import decay_kernelized_attention

        rows = []
        for nn in spec["lengths"]:
            pq, pk, v, _ = _attention_inputs(g, H, nn, m, d, coeffs=False)
            a = torch.rand(H, 2, generator=g).requires_grad_()
            lam = torch.rand(H, 2, generator=g).requires_grad_()
            fns = {str(C): (lambda C=C: decay_kernelized_attention(pq, pk, v, a, lam, (a, lam), chunk=C)
                            .sum().backward()) for C in spec["chunks"]}
            rows.append({"n": nn, **_interleaved(fns, reps)})
        return {"rows": rows}
    if kind == "decay_pieces":  # forward+backward of the chunkwise decay RPE against its piece size (block_bytes)
        from posenc.attention.kernelized.decay import decay_kernelized_attention

        rows = []
        for nn in spec["lengths"]:
            pq, pk, v, _ = _attention_inputs(g, H, nn, m, d, coeffs=False)
            a = torch.rand(H, 2, generator=g).requires_grad_()
            lam = torch.rand(H, 2, generator=g).requires_grad_()
            fns = {str(mib): (lambda bb=int(mib * 2**20): decay_kernelized_attention(
                pq, pk, v, a, lam, (a, lam), block_bytes=bb).sum().backward()) for mib in spec["block_mib"]}
            rows.append({"n": nn, **_interleaved(fns, reps)})
        return {"rows": rows}
    if kind == "fft_lines":  # rfft+irfft of `channels` lines of length 2n, transformed `lines` at a time
        rows = []
        for nn in spec["lengths"]:
            L = next_fast_len(2 * nn - 1)
            x = torch.randn(spec["channels"], nn, generator=g)
            row = {"n": nn, "L": L}
            for lines in spec["lines"]:
                def fn(lines=lines):
                    for a in range(0, x.shape[0], lines):
                        torch.fft.irfft(torch.fft.rfft(x[a : a + lines], n=L, dim=-1), n=L, dim=-1)
                t = _best(fn, reps)
                row[str(lines)] = {"s": t, "ns_per_line_L_log2L": t / (x.shape[0] * L * math.log2(L)) * 1e9}
            rows.append(row)
        return {"rows": rows}
    if kind == "crossover_attention":
        rows = []
        for nn in spec["lengths"]:
            pq, pk, v, c = _attention_inputs(g, H, nn, m, d)
            row = {"n": nn}
            for meth in ("dense", "fft"):
                fn = lambda: kernelized_attention(pq, pk, v, c, method=meth).sum().backward()  # noqa: E731
                fn()
                row[meth] = _best(fn, reps)
            rows.append(row)
        return {"rows": rows}

    if kind == "decay_vs_fft":  # the decay RPE (2 + 2 terms) against the FFT path, same n, m, heads, round-robin
        from posenc.attention.kernelized.decay import decay_kernelized_attention

        pq, pk, v, _ = _attention_inputs(g, H, n, m, d, coeffs=False)
        table = (0.1 * torch.randn(H, 2 * n - 1, generator=g)).requires_grad_()
        a = torch.rand(H, 2, generator=g).requires_grad_()
        lam = torch.rand(H, 2, generator=g).requires_grad_()
        fns = {"fft": lambda: kernelized_attention(pq, pk, v, rpe_coeffs(table, n), method="fft").sum().backward(),
               "decay": lambda: decay_kernelized_attention(pq, pk, v, a, lam, (a, lam)).sum().backward(),
               "fft_unchecked": lambda: kernelized_attention(pq, pk, v, rpe_coeffs(table, n), method="fft",
                                                             check_inputs=False).sum().backward(),
               "decay_unchecked": lambda: decay_kernelized_attention(pq, pk, v, a, lam, (a, lam),
                                                                     check_inputs=False).sum().backward()}
        rounds = _rounds(fns, reps, warm=n <= 16384)
        faults = {}
        for k in ("fft", "decay"):  # fresh pages of a warm call (the kernel zero-fills each): the decay path's
            f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt  # autograd saves O(n) tensors, which glibc
            fns[k]()  # returns to the kernel when they are freed
            faults[k] = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
        return {"page_faults_per_call": faults, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                "numerics_env": {k: os.environ.get(k) for k in ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS",
                                                                 "MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_")},
                "rounds_cpu_s": rounds, "fft_s": min(rounds["fft"]), "decay_s": min(rounds["decay"]),
                "ratio_fft_over_decay": min(rounds["fft"]) / min(rounds["decay"]),
                "ratio_per_round": [f / c for f, c in zip(rounds["fft"], rounds["decay"])],
                "ratio_wall": min(rounds["wall"]["fft"]) / min(rounds["wall"]["decay"]),
                "fft_unchecked_s": min(rounds["fft_unchecked"]), "decay_unchecked_s": min(rounds["decay_unchecked"]),
                "check_cost_fft": _check_cost(rounds, "fft", "fft_unchecked"),
                "check_cost_decay": _check_cost(rounds, "decay", "decay_unchecked"),
                "checks_alone_s": {"fft": _checks_alone(pq, pk, v, rpe_coeffs(table.detach(), n),
                                                        output=torch.zeros_like(v)),
                                   "decay": _checks_alone(pq, pk, v)},
                "first_s": {"fft": rounds["first"]["fft"], "decay": rounds["first"]["decay"]}}
    if kind == "mha_causal":  # KernelizedMHA(causal) rpe="none" vs rpe="alibi"; the old prefix sums at the core
        from posenc.attention import KernelizedMHA

        E = H * d
        x = torch.randn(1, n, E, generator=g).requires_grad_()
        mods = {}
        for rpe in ("none", "alibi"):
            for suffix, check in (("", True), ("_unchecked", False)):
                torch.manual_seed(0)
                mods[rpe + suffix] = KernelizedMHA(E, H, batch_first=True, num_features=m, rpe=rpe, causal=True,
                                                   check_inputs=check)

        def module_fn(mod):
            return lambda: mod(x, x, x, need_weights=False)[0].sum().backward()

        fns = {f"mha_{rpe}": module_fn(mod) for rpe, mod in mods.items()}
        pq, pk, v, _ = _attention_inputs(g, H, n, m, d, coeffs=False)
        fns["core_none"] = lambda: kernelized_attention(pq, pk, v, None, causal=True).sum().backward()
        from posenc.attention import alibi_kernelized_attention, alibi_slopes

        slopes = alibi_slopes(H)
        fns["core_alibi"] = lambda: alibi_kernelized_attention(pq, pk, v, slopes, causal=True).sum().backward()
        if n <= spec.get("prefix_sum_max_n", 4096):
            def prefix_sums():  # the previous rpe="none" causal path, written out (O(n m d) memory per head)
                vv = torch.cat((v, v.new_ones((*v.shape[:-1], 1))), dim=-1)
                kv = torch.cumsum(pk[..., :, None] * vv[..., None, :], dim=-3)
                nd = torch.einsum("...im,...ime->...ie", pq, kv)
                (nd[..., :-1] / nd[..., -1:]).sum().backward()

            fns["core_prefix_sum"] = prefix_sums
        rounds = _rounds(fns, reps, warm=True)
        best = {k: min(t) for k, t in rounds.items() if k not in ("wall", "first")}
        out = {"rounds_cpu_s": rounds, "best_s": best, "embed_dim": E,
               "check_cost_mha_none": _check_cost(rounds, "mha_none", "mha_none_unchecked"),
               "check_cost_mha_alibi": _check_cost(rounds, "mha_alibi", "mha_alibi_unchecked"),
               "first_s": {k: rounds["first"][k] for k in ("mha_none", "mha_alibi")},
               "ratio_none_over_alibi_wall": min(rounds["wall"]["mha_none"]) / min(rounds["wall"]["mha_alibi"]),
               "ratio_none_over_alibi": best["mha_none"] / best["mha_alibi"],
               "ratio_none_over_alibi_per_round": [a / b for a, b in zip(rounds["mha_none"], rounds["mha_alibi"])],
               "ratio_core_none_over_alibi": best["core_none"] / best["core_alibi"]}
        if "core_prefix_sum" in best:
            out["ratio_prefix_sum_over_core_none"] = best["core_prefix_sum"] / best["core_none"]
        return out

    if kind not in ("decode", "flex"):
        q = torch.randn(1, H, n, d, generator=g).requires_grad_()
        k = torch.randn(1, H, n, d, generator=g).requires_grad_()
        v = torch.randn(1, H, n, d, generator=g).requires_grad_()
        table = (0.1 * torch.randn(H, 2 * n - 1, generator=g)).requires_grad_()

    if kind == "ours":
        pq = torch.rand(1, H, n, m, generator=g).requires_grad_()
        pk = torch.rand(1, H, n, m, generator=g).requires_grad_()

        def fwd():
            with torch.no_grad():
                kernelized_attention(pq, pk, v, rpe_coeffs(table, n), method="fft")

        def fwdbwd():
            kernelized_attention(pq, pk, v, rpe_coeffs(table, n), method="fft").sum().backward()

        def fwdbwd_unchecked():
            kernelized_attention(pq, pk, v, rpe_coeffs(table, n), method="fft", check_inputs=False).sum().backward()

        out["first_s"] = _timed(fwdbwd)[0]  # the first call in this process (the warm-up below n = 8,192)
        out["fwdbwd_s"] = _best(fwdbwd, reps) if n < 32768 else out["first_s"]
        out["peak_rss_mb"] = _rss_mb()  # ours' own peak, before the floors allocate
        if n < 32768:  # (forward alone is compared with FlexAttention at n <= 4,096)
            out["fwd_s"] = _best(fwd, reps)
        L = next_fast_len(2 * n - 1)
        x = torch.randn(m * (d + 1), n, generator=g)

        def floor():  # straightforward implementation: 4 transforms per head on full shapes
            for _ in range(H):
                for _ in range(2):
                    torch.fft.irfft(torch.fft.rfft(x, n=L, dim=-1), n=L, dim=-1)

        lines = lines_per_block(L, m * (d + 1), ATTENTION_BLOCK_BYTES, 4)
        sizes = [(a1 - a0) * (f1 - f0) for a0, a1, f0, f1 in _blocks(m, d + 1, lines)]
        xb = {s: torch.randn(s, n, generator=g) for s in set(sizes)}

        def floor_own():  # our design: 6 transforms per block, on our block shapes
            for _ in range(H):
                for s in sizes:
                    for _ in range(3):
                        torch.fft.irfft(torch.fft.rfft(xb[s], n=L, dim=-1), n=L, dim=-1)

        # interleave so the ratios see the same machine load: round r times ours and its own
        # transforms side by side (the straightforward floor once, in the first round, at n >= 32k)
        # (and ours with check_inputs=False, odd rounds before the default: the checks' cost side by side)
        f1, f2, o2, u2, ratios = [], [], [], [], []
        cpu: dict = {"ours": [], "own": [], "floor": [], "ours_unchecked": []}
        for r in range(max(reps, 2)):
            if r == 0 or n < 32768:
                w, c = _timed(floor)
                f1.append(w)
                cpu["floor"].append(c)
            pair = [("ours", fwdbwd, o2), ("ours_unchecked", fwdbwd_unchecked, u2)]
            for key, fn, acc in [("own", floor_own, f2), *(pair if r % 2 == 0 else pair[::-1])]:
                w, c = _timed(fn)
                acc.append(w)
                cpu[key].append(c)
            ratios.append(cpu["ours"][-1] / cpu["own"][-1])
        out["floor_s"], out["floor_own_s"] = min(f1), min(f2)
        out["fwdbwd_s"] = min(out["fwdbwd_s"], min(o2))
        out["unchecked_s"] = min(u2)
        out["check_cost"] = _check_cost(cpu, "ours", "ours_unchecked")
        out["checks_alone_s"] = _checks_alone(pq, pk, v, rpe_coeffs(table.detach(), n), output=torch.zeros_like(v))
        out["cpu_s"] = {k: min(v) for k, v in cpu.items()}
        out["ratio_own_cpu"] = out["cpu_s"]["ours"] / out["cpu_s"]["own"]
        out["ratio_cpu"] = out["cpu_s"]["ours"] / out["cpu_s"]["floor"]
        out["ratio_own_rounds"] = ratios  # CPU time, round by round
        out["block_bytes"] = ATTENTION_BLOCK_BYTES
        return out

    if kind == "decode":
        from posenc.attention.kernelized.decay import DecayDecoder, decay_kernelized_attention

        a, lam = torch.rand(H, 2, generator=g), torch.rand(H, 2, generator=g)
        rows = []
        for nn in spec["lengths"]:
            dec = DecayDecoder(a, lam, 1, m, d)
            pq, pk = torch.rand(1, H, m, generator=g), torch.rand(1, H, m, generator=g)
            vv = torch.randn(1, H, d, generator=g)
            steps = 0
            t0 = time.perf_counter()
            with torch.no_grad():
                for _ in range(nn):  # decode a whole sequence of length nn
                    dec.step(pq, pk, vv)
                    steps += 1
            per_token = (time.perf_counter() - t0) / steps
            # recomputing causal attention over the prefix for the last token (what FFT decoding must do)
            fq, fk = torch.rand(1, H, nn, m, generator=g), torch.rand(1, H, nn, m, generator=g)
            fv = torch.randn(1, H, nn, d, generator=g)
            with torch.no_grad():
                t_full = _best(lambda: kernelized_attention(fq, fk, fv, rpe_coeffs(torch.zeros(H, 2 * nn - 1), nn,
                                                                                   causal=True), causal=True,
                                                            method="fft"), 1)
                t_scan = _best(lambda: decay_kernelized_attention(fq, fk, fv, a, lam), 1)
            rows.append({"n": nn, "decoder_per_token_s": per_token, "fft_full_prefix_s": t_full,
                         "scan_full_prefix_s": t_scan})
        return {"rows": rows}
    if kind == "flex":
        from torch.nn.attention.flex_attention import flex_attention

        compiled = torch.compile(flex_attention, dynamic=False)
        res = []
        for nn in spec["lengths"]:
            qq, kk, vv = (torch.randn(1, H, nn, d, generator=g) for _ in range(3))
            bias = torch.randn(H, 2 * nn - 1, generator=g)

            def score_mod(score, b, h, q_idx, kv_idx, bias=bias, nn=nn):
                return score + bias[h, kv_idx - q_idx + nn - 1]

            t0 = time.perf_counter()
            compiled(qq, kk, vv, score_mod=score_mod)
            first = time.perf_counter() - t0
            res.append({"n": nn, "fwd_s": _best(lambda: compiled(qq, kk, vv, score_mod=score_mod), reps),
                        "first_call_s": first, "peak_rss_mb": _rss_mb()})
        try:
            qq.requires_grad_()
            compiled(qq, kk, vv, score_mod=score_mod).sum().backward()
            backward = "ran"
        except Exception as exc:  # noqa: BLE001 - recorded, not hidden
            backward = f"{type(exc).__name__}: {str(exc)[:200]}"
        return {"rows": res, "backward": backward}

    pq = torch.rand(1, H, n, m, generator=g).requires_grad_()
    pk = torch.rand(1, H, n, m, generator=g).requires_grad_()
    if kind == "dense":
        def fn():
            kernelized_attention(pq, pk, v, rpe_coeffs(table, n), method="dense").sum().backward()
    elif kind == "sdpa_fixed":
        fixed = rpe_matrix(table.detach(), n, n)[None]

        def fn():
            torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=fixed).sum().backward()
    elif kind == "sdpa_learned":
        def fn():
            bias = rpe_matrix(table, n, n)[None]
            torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias).sum().backward()
    elif kind == "performer":
        def fn(check_inputs=True):
            kernelized_attention(pq, pk, v, None, check_inputs=check_inputs).sum().backward()
    elif kind == "decay":
        from posenc.attention.kernelized.decay import decay_kernelized_attention

        a = torch.rand(H, 2, generator=g).requires_grad_()
        lam = torch.rand(H, 2, generator=g).requires_grad_()

        def fn(check_inputs=True):
            decay_kernelized_attention(pq, pk, v, a, lam, (a, lam), check_inputs=check_inputs).sum().backward()
    else:
        raise ValueError(f"unknown kind {kind!r}")
    # the first call in this process, timed (the warm-up below n = 8,192; above it, the first measured call)
    out["first_s"] = _timed(fn)[0]
    out["fwdbwd_s"] = _best(fn, reps) if n <= 4096 or reps > 1 else out["first_s"]
    if kind in ("performer", "decay"):  # functions with check_inputs: the unchecked call beside the default
        cpu: dict = {"default": [], "unchecked": []}
        for r in range(max(reps, 2)):
            pair = [("default", fn), ("unchecked", lambda: fn(False))]
            for key, f in (pair if r % 2 == 0 else pair[::-1]):
                cpu[key].append(_timed(f)[1])
        out["unchecked_s"] = min(cpu["unchecked"])
        out["check_cost"] = _check_cost(cpu, "default", "unchecked")
        out["checks_alone_s"] = _checks_alone(pq, pk, v, output=torch.zeros_like(v) if kind == "performer" else None)
    out["peak_rss_mb"] = _rss_mb()
    return out


# ------------------------------------------------------------------ parent side


def predict_mb(kind: str, n: int, H: int, d: int, m: int) -> float:
    """Rough peak-memory model (MiB) used to skip configurations that would not fit."""
    f = 4 / 2**20
    base = 400.0
    lin = H * n * (2 * m + 3 * d) * f * 4
    if kind == "ours":
        return base + lin + 6 * m * (d + 1) * n * f  # the floor's full-shape transforms dominate
    if kind == "dense":
        return base + lin + 6 * H * n * n * f
    if kind == "sdpa_fixed":
        return base + lin + 3.5 * H * n * n * f
    if kind == "sdpa_learned":
        return base + lin + 6 * H * n * n * f
    if kind == "decay":
        return base + 2 * lin
    return base + lin


GROWTH = {"ours": 1.15, "dense": 2.0, "sdpa_fixed": 2.0, "sdpa_learned": 2.0, "performer": 1.0, "decay": 1.05}


def _child(spec: dict, timeout: float) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT), env.get("PYTHONPATH", "")])
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, "-c", "from benchmarks.bench_krpe import _child_main; _child_main()"],
            input=json.dumps(spec), capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timeout after {timeout:.0f} s", "wall_s": time.perf_counter() - t0}
    if proc.returncode != 0:
        return {"error": proc.stderr.strip()[-600:], "wall_s": time.perf_counter() - t0}
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    res["wall_s"] = time.perf_counter() - t0
    return res


def _fit(points: list[tuple[int, float]]) -> tuple[float, float] | None:
    """``log t = a + s log n`` through the last two points."""
    pts = [(n, t) for n, t in points if t and t > 0][-2:]
    if len(pts) < 2:
        return None
    (n1, t1), (n2, t2) = pts
    s = math.log(t2 / t1) / math.log(n2 / n1)
    return math.log(t1) - s * math.log(n1), s


def _extrapolate(points, n):
    fit = _fit(points)
    return None if fit is None else math.exp(fit[0] + fit[1] * math.log(n))


def _crossover(ours: list[tuple[int, float]], other: list[tuple[int, float]]) -> dict:
    """Smallest measured n where ours is faster, else the crossing of the two log-log fits."""
    o = dict(ours)
    if not other:
        return {"n": None, "how": "not measured in this run"}
    prev = None
    for n, t in other:
        if n in o and o[n] < t:
            if prev is None:
                return {"n": n, "how": "ours already faster at the smallest measured n"}
            (n0, t0), r0 = prev, o[prev[0]]
            # crossing of the two log-log segments between n0 and n
            s_o = math.log(o[n] / r0) / math.log(n / n0)
            s_b = math.log(t / t0) / math.log(n / n0)
            x = math.log(r0 / t0) / (s_b - s_o)
            return {"n": round(n0 * math.exp(x)), "how": f"measured between n={n0} and n={n} (log-log interpolation)"}
        if n in o:
            prev = (n, t)
    fo, fb = _fit(ours), _fit(other)
    if not fo or not fb or fb[1] <= fo[1]:
        return {"n": None, "how": "no crossing within the fitted growth"}
    n_star = math.exp((fo[0] - fb[0]) / (fb[1] - fo[1]))
    return {"n": round(n_star), "how": f"extrapolated from log-log fits (slopes ours {fo[1]:.2f}, other {fb[1]:.2f})"}


def run(quick: bool) -> dict:
    budget = 90.0 if quick else 3600.0
    start = time.perf_counter()
    load_start = os.getloadavg()
    H, d, m = (2, 64, 32) if quick else (8, 64, 32)
    lengths = [512, 2048] if quick else [256, 1024, 4096, 16384, 65536]
    reps = 1
    result: dict = {
        "settings": {"threads": 1, "batch": 1, "heads": H, "head_dim": d, "features": m,
                     "memory_limit_mb": MEMORY_LIMIT_MB, "budget_s": budget},
        "notes": [],
        "loadavg_start": list(load_start),
    }

    def left() -> float:
        return budget - (time.perf_counter() - start)

    # 0. first, before the budget can run out: the side-by-side ratios of the performance goals.
    # Side by side in one child: the decay RPE against the FFT path (same n, m, heads), and the
    # causal drop-in without RPE against causal ALiBi (both chunkwise), with the old prefix sums
    result["decay_vs_fft"] = [
        {**_child({"kind": "decay_vs_fft", "n": nn, "heads": H, "d": d, "m": m, "repeats": r}, 900), "n": nn}
        for nn, r in ([(2048, 2)] if quick else [(4096, 4), (16384, 4), (65536, 2)])
    ]
    result["mha_causal"] = [
        {**_child({"kind": "mha_causal", "n": nn, "heads": H, "d": d, "m": m, "repeats": r}, 600), "n": nn}
        for nn, r in ([(512, 2)] if quick else [(1024, 4), (4096, 4), (16384, 4), (65536, 2)])
    ]

    # 0b. ours against its floors at other m / heads, and the memory target (65,536 x 8 heads, m = 16)
    # (the main table's "ours" rows below add m = 32 with 8 heads)
    extra = []
    if not quick:
        for mm, nn, hh in [(16, 4096, 8), (16, 16384, 8), (16, 65536, 8), (32, 4096, 1), (32, 16384, 1),
                           (32, 65536, 1), (64, 4096, 8)]:
            res = _child({"kind": "ours", "n": nn, "heads": hh, "d": d, "m": mm, "repeats": 2 if nn <= 16384 else 1},
                         1200)
            res.update({"n": nn, "m": mm, "heads": hh})
            extra.append(res)
    result["ours_more"] = extra

    # 1. crossovers (small sizes, direct vs FFT)
    tl = [16, 32, 64, 128, 256, 512] if not quick else [64, 256]
    result["toeplitz_crossover"] = _child(
        {"kind": "crossover_toeplitz", "n": 0, "heads": 4, "d": 0, "m": 0, "channels": 64, "lengths": tl,
         "repeats": 3}, 300)
    al = [256, 512, 1024, 2048, 4096] if not quick else [512, 2048]
    result["attention_crossover"] = _child(
        {"kind": "crossover_attention", "n": 0, "heads": 1, "d": d, "m": m, "lengths": al, "repeats": 2}, 300)

    # 1b. block size of the FFT path, and the cost per element of long transforms by lines per call
    bl = [2048] if quick else [4096, 16384, 65536]
    result["block_sweep"] = _child(
        {"kind": "block_sweep", "n": 0, "heads": 1, "d": d, "m": 16, "lengths": bl,
         "block_mib": [0.25, 0.5, 1, 2, 4], "repeats": 2 if quick else 4}, 400)
    result["fft_lines"] = _child(
        {"kind": "fft_lines", "n": 0, "heads": 0, "d": 0, "m": 0, "channels": 64, "lengths": bl,
         "lines": [1, 8, 64], "repeats": 3}, 300)

    result["decay_chunk"] = _child(
        {"kind": "decay_chunk", "n": 0, "heads": H, "d": d, "m": m, "lengths": [2048] if quick else [4096, 16384],
         "chunks": [16, 32, 64, 128, 256], "repeats": 3}, 300)

    result["decay_pieces"] = _child(
        {"kind": "decay_pieces", "n": 0, "heads": H, "d": d, "m": m, "lengths": [2048] if quick else [4096, 16384],
         "block_mib": [1, 4, 16, 64], "repeats": 3}, 400)

    # 2. main table: every method, growing n
    table: dict[str, list[dict]] = {}
    kinds = ["ours", "sdpa_fixed", "sdpa_learned", "dense", "performer", "decay"]
    if quick:  # one child per method (peak memory is then the max over the lengths so far)
        for kind in kinds:
            res = _child({"kind": kind, "heads": H, "d": d, "m": m, "repeats": reps, "sweep": lengths}, 120)
            table[kind] = res.get("rows", [res])
        kinds_full: list[str] = []
    else:
        kinds_full = kinds
    max_n: dict[str, int] = {}  # per-method length caps (none needed since the cache-sized blocks)
    for kind in kinds_full:
        rows = table.setdefault(kind, [])
        for n in lengths:
            if n > max_n.get(kind, n):
                measured = [(r["n"], r["fwdbwd_s"]) for r in rows if r.get("fwdbwd_s") and not r.get("extrapolated")]
                rows.append({"n": n, "extrapolated": True, "fwdbwd_s": _extrapolate(measured, n),
                             "reason": "not run at this size to keep the bench within 15 minutes"})
                continue
            mem = predict_mb(kind, n, H, d, m)
            measured = [(r["n"], r["fwdbwd_s"]) for r in rows if "fwdbwd_s" in r and not r.get("extrapolated")]
            guess = _extrapolate(measured, n)
            if guess is None and measured:
                guess = measured[-1][1] * (n / measured[-1][0]) ** GROWTH[kind]
            cost = (guess or 1.0) * (6 if kind == "ours" else 1.5) + 5
            reason = None
            if mem > MEMORY_LIMIT_MB:
                reason = f"predicted memory {mem:.0f} MB > {MEMORY_LIMIT_MB:.0f} MB"
            elif kind != "ours" and cost > max(left(), 0) * 0.5:  # ours rows are goal rows: always run
                reason = f"predicted time {cost:.0f} s exceeds the remaining budget ({left():.0f} s)"
            if reason:
                rows.append({"n": n, "extrapolated": True, "reason": reason, "predicted_mb": mem,
                             "fwdbwd_s": _extrapolate(measured, n)})
                continue
            r = 2 if kind == "ours" and n <= 16384 else reps
            res = _child({"kind": kind, "n": n, "heads": H, "d": d, "m": m, "repeats": r}, max(120, 4 * cost))
            res.update({"n": n, "predicted_mb": mem})
            rows.append(res)
    result["table"] = table

    # 3. FlexAttention (compiled, forward only on CPU)
    if quick:
        result["flex"] = {"skipped": "quick profile (compiling FlexAttention takes ~40 s per shape on this CPU)"}
    elif left() > 300:
        result["flex"] = _child({"kind": "flex", "n": 0, "heads": H, "d": d, "m": m, "lengths": [1024, 4096],
                                 "repeats": 1}, 240)
    else:
        result["flex"] = {"skipped": "bench time budget exhausted"}

    # 4. autoregressive decoding with the decay RPE: O(1) per token vs recomputing the prefix
    result["decode"] = _child({"kind": "decode", "n": 0, "heads": H, "d": d, "m": m,
                               "lengths": [256, 1024] if quick else [1024, 4096]}, 300)

    # 6. derived numbers
    ours = [(r["n"], r["fwdbwd_s"]) for r in table["ours"] if r.get("fwdbwd_s") and not r.get("extrapolated")]
    derived: dict = {}
    ours_rows = [r for r in table["ours"] + extra if "floor_s" in r]
    derived["efficiency_vs_floor"] = [
        {"n": r["n"], "m": r.get("m", m), "heads": r.get("heads", H), "ours_s": r["fwdbwd_s"],
         "floor_s": r["floor_s"], "ratio": r["fwdbwd_s"] / r["floor_s"],
         "floor_own_s": r.get("floor_own_s"),
         "ratio_own": r["fwdbwd_s"] / r["floor_own_s"] if r.get("floor_own_s") else None,
         "ratio_own_cpu": r.get("ratio_own_cpu"), "ratio_cpu": r.get("ratio_cpu"),
         "ratio_own_rounds": r.get("ratio_own_rounds"), "loadavg_1min": r.get("loadavg_1min"),
         "peak_rss_mb": r.get("peak_rss_mb"), "unchecked_s": r.get("unchecked_s"), "check_cost": r.get("check_cost"),
         "checks_alone_s": r.get("checks_alone_s"), "first_s": r.get("first_s")}
        for r in ours_rows
    ]
    for kind in ("sdpa_fixed", "sdpa_learned", "dense"):
        other = [(r["n"], r["fwdbwd_s"]) for r in table[kind] if r.get("fwdbwd_s") and not r.get("extrapolated")]
        derived[f"crossover_vs_{kind}"] = _crossover(ours, other)
    flex_rows = result["flex"].get("rows") if isinstance(result.get("flex"), dict) else None
    if flex_rows:
        ours_fwd = [(r["n"], r["fwd_s"]) for r in table["ours"] if r.get("fwd_s") and not r.get("extrapolated")]
        derived["crossover_fwd_vs_flex"] = {
            **_crossover(ours_fwd, [(r["n"], r["fwd_s"]) for r in flex_rows]),
            "note": "forward only: FlexAttention has no backward on CPU in torch 2.13",
        }
    groups: dict = {}
    for r in ours_rows:
        if r["n"] >= 4096:
            groups.setdefault(f"m={r.get('m', m)},heads={r.get('heads', H)}", []).append(
                (r["n"], r["fwdbwd_s"], r.get("floor_own_s"), r.get("floor_s")))

    def _slope(p, i):
        return math.log(p[-1][i] / p[0][i]) / math.log(p[-1][0] / p[0][0]) if p[0][i] and p[-1][i] else None

    derived["slope_ours_n_ge_4096"] = {
        key: {"slope": _slope(p, 1), "floor_own_slope": _slope(p, 2), "floor_slope": _slope(p, 3),
              "from": p[0][0], "to": p[-1][0]}
        for key, p in ((k, sorted(v)) for k, v in groups.items()) if len(p) >= 2
    }
    for kind in kinds:
        pts = [(r["n"], r["fwdbwd_s"]) for r in table[kind] if r.get("fwdbwd_s") and not r.get("extrapolated")]
        fit = _fit(pts)
        derived[f"slope_last_two_{kind}"] = None if fit is None else fit[1]
    mem_target = [r for r in extra if r.get("n") == 65536 and r.get("m") == 16 and r.get("heads") == 8]
    if mem_target and "peak_rss_mb" in mem_target[0]:
        derived["memory_target_65536x8_m16"] = {"peak_rss_mb": mem_target[0]["peak_rss_mb"],
                                                "within_8GB": mem_target[0]["peak_rss_mb"] <= 8192,
                                                "fwdbwd_s": mem_target[0]["fwdbwd_s"]}
    dvf = [r for r in result["decay_vs_fft"] if "ratio_fft_over_decay" in r]
    derived["decay_vs_fft"] = [{"n": r["n"], "fft_s": r["fft_s"], "decay_s": r["decay_s"],
                                "ratio": r["ratio_fft_over_decay"], "ratio_per_round": r["ratio_per_round"],
                                "check_cost_fft": r.get("check_cost_fft"), "check_cost_decay": r.get("check_cost_decay"),
                                "checks_alone_s": r.get("checks_alone_s"), "first_s": r.get("first_s")}
                               for r in dvf]
    mc = [r for r in result["mha_causal"] if "best_s" in r]
    derived["mha_causal"] = [{"n": r["n"], **r["best_s"], "ratio_none_over_alibi": r["ratio_none_over_alibi"],
                              "ratio_per_round": r["ratio_none_over_alibi_per_round"],
                              "ratio_core_none_over_alibi": r.get("ratio_core_none_over_alibi"),
                              "ratio_prefix_sum_over_core_none": r.get("ratio_prefix_sum_over_core_none"),
                              "check_cost_mha_none": r.get("check_cost_mha_none"),
                              "check_cost_mha_alibi": r.get("check_cost_mha_alibi"), "first_s": r.get("first_s")}
                             for r in mc]
    result["derived"] = derived
    result["loadavg_end"] = list(os.getloadavg())
    result["notes"].append("No GPU is lent to this task; every number is CPU, 1 torch thread, on a 2-core machine "
                           "shared with other jobs (timings are noisy; compare ratios within one run).")
    return result


if __name__ == "__main__":  # pragma: no cover
    print(json.dumps(run(quick="--quick" in sys.argv), indent=1))
