"""Print the README's benchmark tables from ``benchmarks/results/*.json``.

``python -m benchmarks.tables [--results DIR]`` writes markdown to stdout; the
README's performance section is pasted from it, so every number there comes from
a saved benchmark result.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from posenc.report.tables import markdown_table


def _sec(seconds: float | None, digits: int = 3) -> str:
    return "–" if seconds is None else f"{seconds:.{digits}f}"


def _pct(share: float | None) -> str:
    """The checks' share of a call (default / unchecked - 1) as a signed percentage."""
    return "–" if share is None else f"{share:+.1%}"


def _ms(seconds: float | None, digits: int = 2) -> str:
    """Milliseconds, or "–" where the record has no such time (older records, cases without it)."""
    return "–" if seconds is None else f"{seconds * 1e3:.{digits}f}"


def coords(r: dict) -> str:
    t = r["throughput"]
    rows = [[name, e["out_dim"], f"{e['coords_per_s'] / 1e6:.2f}", f"{e['seconds'] * 1e3:.0f}",
             _ms(e.get("first_s"), 0), f"{e['ratio_to_floor']:.2f}"] for name, e in t["encodings"].items()]
    out = [f"Encoding throughput, N = {t['n']:,} positions, D = {t['d']}, float32, {t['threads']} threads "
           f"(floor: allocating and writing the N x D output, {t['alloc_write_floor_s'] * 1e3:.0f} ms):", "",
           markdown_table(["encoding", "D", "M coords/s", "ms", "first call ms", "time / floor"], rows), ""]
    f = r["fit_image"]
    rows = []
    for model, m in f["models"].items():
        ours, naive = m["posenc"], m["naive"]
        if "error" in ours or "error" in naive:
            rows.append([model, m["iters"], "error", ours.get("error", ""), naive.get("error", ""), "", ""])
            continue
        rows.append([model, m["iters"], f"{ours['test_psnr']:.2f}", f"{ours['seconds']:.1f}", f"{naive['seconds']:.1f}",
                     f"{m['time_ratio']:.2f}", f"{ours['peak_rss_mb']:.0f} / {naive['peak_rss_mb']:.0f}"])
    out += [f"`fit-image` on a {f['size']}x{f['size']} photograph, {f['encoding']}, D = {f['features']}, "
            "posenc (chunked) beside the naive loop (dense features of every pixel at once):", "",
            markdown_table(["model", "steps", "test PSNR", "posenc s", "naive s", "time ratio", "peak MB posenc / naive"],
                           rows)]
    big = f.get("large")
    if big:
        out += ["", f"Memory at {big['size']}x{big['size']} with D = {big['features']} (lstsq): posenc peak "
                f"{big['posenc'].get('peak_rss_mb', float('nan')):.0f} MB, naive peak "
                f"{big['naive'].get('peak_rss_mb', float('nan')):.0f} MB."]
    return "\n".join(out)


def lff(r: dict) -> str:
    enc = r["encodings_fwd_bwd"]
    rows = [[name, f"{e['median_s'] * 1e3:.0f}", _ms(e.get("first_s"), 0), f"{e['ratio_to_sinusoidal']:.2f}"]
            for name, e in enc["results"].items()]
    p = enc["params"]
    out = [f"Forward + backward of each encoding, {p['positions']} positions x batch {p['batch']}, dim {p['dim']}:", "",
           markdown_table(["encoding", "ms", "first call ms", "ratio to sinusoidal"], rows)]
    tb = r.get("testbed_train_step")
    if isinstance(tb, dict) and "results" in tb:
        rows = [[name, f"{e['tokens_per_s']:,.0f}", f"{e['ratio_to_sine2d']:.2f}"] for name, e in tb["results"].items()]
        out += ["", "Testbed training throughput:", "", markdown_table(["encoding", "tokens/s", "ratio to sinusoidal"], rows)]
    return "\n".join(out)


def graph(r: dict) -> str:
    a, p, e = r["anchor_distances"], r["pgnn_precompute"], r["gir_epoch"]
    rows = [
        ["posenc `anchor_distances`", f"{a['ours_anchor_distances_s']:.2f}", "1.00"],
        ["scipy `shortest_path(unweighted=True, indices=anchors)`", f"{a['scipy_shortest_path_s']:.2f}",
         f"{a['ratio_shortest_path_over_ours']:.2f}"],
        [f"{a['anchors']} x scipy `breadth_first_order`", f"{a['scipy_breadth_first_order_x_k_s']:.2f}",
         f"{a['ratio_bfo_over_ours']:.2f}"],
    ]
    return "\n".join([
        f"Anchor distances on a {a['graph']} ({a['nodes']:,} nodes), {a['anchors']} anchors "
        f"(target < {a['target_s']:.0f} s: {'met' if a['meets_target'] else 'missed'}):", "",
        markdown_table(["method", "s", "time / ours"], rows), "",
        f"P-GNN precompute on {p['graph']}: networkx all-pairs BFS {p['networkx_all_pairs_extrapolated_s']:.0f} s "
        f"(extrapolated from {p['networkx_sources_timed']} sources) vs posenc {p['ours_one_resampling_s']:.2f} s "
        f"per anchor resampling: {p['ratio_networkx_over_ours']:.0f}x.", "",
        f"One GIR training epoch on a {e['graph']} ({e['nodes']:,} nodes, {e['anchors']} anchors): "
        f"{e['epoch_s']:.2f} s, peak memory {e['peak_rss_mb']:.0f} MB (subprocess).",
    ])


def krpe(r: dict) -> str:
    t, st = r["table"], r["settings"]
    labels = {"ours": "ours (FFT, learned bias)", "sdpa_fixed": "SDPA, fixed materialised bias",
              "sdpa_learned": "SDPA, learned bias", "dense": "dense kernelized RPE",
              "performer": "kernelized, no RPE", "decay": "decay RPE (chunkwise, 2 + 2 terms)"}
    ns = sorted({e["n"] for rows in t.values() for e in rows})
    def measured(key: str) -> bool:
        return any(e.get("fwdbwd_s") is not None for e in t.get(key, []))

    not_run = [label for key, label in labels.items() if key in t and not measured(key)]
    rows = []
    for key, label in labels.items():
        if key in t and not measured(key):
            continue
        by_n = {e["n"]: e for e in t.get(key, [])}
        cells = []
        for n in ns:
            e = by_n.get(n)
            if e is None or e.get("fwdbwd_s") is None:
                cells.append("–")
            elif e.get("extrapolated"):
                cells.append(f"*~{e['fwdbwd_s']:.0f} (extrap.)*")
            else:
                cell = f"{e['fwdbwd_s']:.3f} ({e['peak_rss_mb']:.0f} MB)"
                if e.get("unchecked_s") is not None:
                    cell += f"; unchecked {e['unchecked_s']:.3f} ({_pct(e.get('check_cost'))})"
                if e.get("checks_alone_s") is not None:
                    cell += f"; checks alone {e['checks_alone_s'] / e['fwdbwd_s']:.1%}"
                if e.get("first_s") is not None:
                    cell += f"; first {e['first_s']:.3f}"
                cells.append(cell)
        rows.append([label, *cells])
    mem = [e for e in r.get("ours_more", []) if e.get("n") == 65536 and e.get("m") == 16 and e.get("heads") == 8
           and "fwdbwd_s" in e]
    out = [f"Forward + backward, batch 1, {st['heads']} heads, d = {st['head_dim']}, m = {st['features']}, "
           f"{st['threads']} thread, seconds (peak RSS; the call with `check_inputs=False` and the checks' share, "
           f"where the function has the switch; the first call in the process); configurations predicted above "
           f"{st['memory_limit_mb'] / 1000:.0f} GB are extrapolated, not run:", "",
           markdown_table(["method", *[f"n = {n:,}" for n in ns]], rows)]
    if not_run:
        out += ["", "Not run in this run (its time budget ran out before them): " + "; ".join(not_run) + "."]
    if mem:
        out += ["", f"n = 65,536, 8 heads, m = 16, forward + backward: {mem[0]['fwdbwd_s']:.0f} s, peak "
                f"{mem[0]['peak_rss_mb']:.0f} MB. Performance goals and their verdicts: docs/krpe.md."]
    der = r.get("derived", {})
    eff = sorted((e for e in der.get("efficiency_vs_floor", []) if e["n"] >= 4096),
                 key=lambda e: (e["m"], -e["heads"], e["n"]))
    if eff and eff[0].get("ratio_own_cpu") is not None:
        def rounds(e):
            return " / ".join(f"{x:.2f}" for x in e.get("ratio_own_rounds") or [])

        rows = [[f"{e['n']:,}", e["m"], e["heads"], f"{e['ours_s']:.2f}", _sec(e.get("unchecked_s")),
                 _pct(e.get("check_cost")),
                 "–" if e.get("checks_alone_s") is None else f"{e['checks_alone_s'] / e['ours_s']:.2%}",
                 _sec(e.get("first_s")), f"{e['ratio_cpu']:.2f}",
                 f"{e['ratio_own_cpu']:.2f}", rounds(e), f"{e['ratio_own']:.2f}",
                 "–" if not e.get("loadavg_1min") else "{:.1f} → {:.1f}".format(*e["loadavg_1min"])] for e in eff]
        out += ["", "Forward + backward against the FFT floor, side by side in one process (`floor` = the 4 "
                "full-shape transforms per head of a straightforward implementation; `own` = the 6 "
                "cache-sized transforms per block that this implementation issues, its strict floor). "
                "Ratios of CPU time (best of the rounds; then each round's ratio), and of wall time:", "",
                markdown_table(["n", "m", "heads", "ours (s, wall)", "unchecked (s)", "checks", "checks alone",
                                "first call (s)",
                                "ours / floor", "ours / own", "ours / own, per round", "ours / own (wall)", "load avg"],
                               rows)]
    elif eff:
        rows = [[f"{e['n']:,}", e["m"], e["heads"], f"{e['ours_s']:.2f}", f"{e['floor_s']:.2f}",
                 f"{e['ratio']:.2f}", "–" if e.get("ratio_own") is None else f"{e['ratio_own']:.2f}"]
                for e in eff]
        out += ["", "Forward + backward against the FFT floor (the rfft/irfft calls alone: `floor` = the 4 "
                "full-shape transforms per head of a straightforward implementation; `own` = the 6 "
                "cache-sized transforms per block that this implementation issues):", "",
                markdown_table(["n", "m", "heads", "ours (s)", "floor (s)", "ours / floor", "ours / own"], rows)]
    dvf = der.get("decay_vs_fft")
    if dvf:
        loads = {e["n"]: e.get("loadavg_1min") for e in r.get("decay_vs_fft", [])}
        rows = [[f"{e['n']:,}", f"{e['fft_s']:.3f}", f"{e['decay_s']:.3f}", f"{e['ratio']:.1f}",
                 " / ".join(f"{x:.1f}" for x in e["ratio_per_round"]),
                 f"{_pct(e.get('check_cost_fft'))} / {_pct(e.get('check_cost_decay'))}",
                 " / ".join(_sec((e.get("first_s") or {}).get(k)) for k in ("fft", "decay")),
                 "–" if not loads.get(e["n"]) else "{:.1f} → {:.1f}".format(*loads[e["n"]])] for e in dvf]
        out += ["", f"Decay RPE (2 + 2 terms) against the FFT path, forward + backward, {st['heads']} heads, "
                f"m = {st['features']}, d = {st['head_dim']}, side by side in one process (CPU seconds, best of "
                "the rounds; the checks' share beside `check_inputs=False`, and the first calls, wall s):", "",
                markdown_table(["n", "FFT (s)", "decay (s)", "FFT / decay", "per round", "checks FFT / decay",
                                "first call FFT / decay (s)", "load avg"], rows)]
    mc = der.get("mha_causal")
    if mc:
        loads = {e["n"]: e.get("loadavg_1min") for e in r.get("mha_causal", [])}
        rows = [[f"{e['n']:,}", f"{e['mha_none']:.3f}", f"{e['mha_alibi']:.3f}", f"{e['ratio_none_over_alibi']:.2f}",
                 " / ".join(f"{x:.2f}" for x in e["ratio_per_round"]), f"{e['core_none']:.3f}",
                 "–" if e.get("core_alibi") is None else f"{e['core_alibi']:.3f}",
                 "–" if e.get("core_prefix_sum") is None else f"{e['core_prefix_sum']:.3f}",
                 "–" if e.get("ratio_prefix_sum_over_core_none") is None
                 else f"{e['ratio_prefix_sum_over_core_none']:.1f}",
                 f"{_pct(e.get('check_cost_mha_none'))} / {_pct(e.get('check_cost_mha_alibi'))}",
                 " / ".join(_sec((e.get("first_s") or {}).get(k)) for k in ("mha_none", "mha_alibi")),
                 "–" if not loads.get(e["n"]) else "{:.1f} → {:.1f}".format(*loads[e["n"]])] for e in mc]
        out += ["", f"`KernelizedMHA(causal=True)`, batch 1, {st['heads']} heads, embed {st['heads'] * st['head_dim']}, "
                f"m = {st['features']}, forward + backward (CPU seconds, best of the rounds): `rpe=\"none\"` against "
                "`rpe=\"alibi\"` (both on the chunkwise decay path), and the attention core without RPE against "
                "the prefix sums it used before:", "",
                markdown_table(["n", "none (s)", "ALiBi (s)", "none / ALiBi", "per round", "core none, chunkwise (s)",
                                "core ALiBi (s)", "core none, prefix sums (s)", "prefix sums / chunkwise",
                                "checks none / ALiBi", "first call none / ALiBi (s)", "load avg"], rows)]
    sweep = r.get("block_sweep", {}).get("rows")
    if sweep:
        mibs = [k for k in sweep[0] if k != "n"]
        rows = [[f"{e['n']:,}", *[f"{e[k]:.3f}" for k in mibs]] for e in sweep]
        out += ["", "Block size of the FFT path (1 head, m = 16, forward + backward, CPU seconds, round-robin):", "",
                markdown_table(["n", *[f"{k} MiB" for k in mibs]], rows)]
    lines = r.get("fft_lines", {}).get("rows")
    if lines:
        ks = [k for k in lines[0] if k not in ("n", "L")]
        rows = [[f"{e['n']:,}", *[f"{e[k]['ns_per_line_L_log2L']:.3f}" for k in ks]] for e in lines]
        out += ["", "rfft + irfft of 64 lines of length 2n, ns per line·L·log2 L, by lines per call:", "",
                markdown_table(["n", *[f"{k} lines" for k in ks]], rows)]
    dc = r.get("decay_chunk", {}).get("rows")
    if dc:
        ks = [k for k in dc[0] if k != "n"]
        rows = [[f"{e['n']:,}", *[f"{e[k]:.3f}" for k in ks]] for e in dc]
        out += ["", f"Chunk length of the decay RPE ({st['heads']} heads, m = {st['features']}, 2 + 2 terms, "
                "forward + backward, CPU seconds, round-robin):", "", markdown_table(["n", *[f"C = {k}" for k in ks]], rows)]
    names = {"sdpa_fixed": "SDPA, fixed bias", "sdpa_learned": "SDPA, learned bias",
             "dense": "dense kernelized RPE", "fwd_vs_flex": "FlexAttention (forward only)"}
    cross = [f"{label}: n ≈ {c['n']:,} ({c['how']})" if c.get("n") else f"{label}: {c['how']}"
             for key, label in names.items() if (c := der.get(f"crossover_{key}" if key == "fwd_vs_flex"
                                                            else f"crossover_vs_{key}"))
             and (key == "fwd_vs_flex" or measured(key))]
    if cross:
        out += ["", "Length from which ours is faster: " + "; ".join(cross) + "."]
    slopes = der.get("slope_ours_n_ge_4096", {})
    if slopes:
        rows = [[k, f"{v['from']:,} → {v['to']:,}", f"{v['slope']:.2f}",
                 "–" if v.get("floor_own_slope") is None else f"{v['floor_own_slope']:.2f}",
                 "–" if v.get("floor_slope") is None else f"{v['floor_slope']:.2f}"] for k, v in slopes.items()]
        out += ["", "Log-log slope of forward + backward time (n log n alone gives ≈ 1.10 over 4,096 → 65,536):",
                "", markdown_table(["configuration", "n", "ours", "own transforms alone", "floor"], rows)]
    return "\n".join(out)


def rope(r: dict) -> str:
    out = []
    titles = {"cpu": "CPU, fresh memory as it comes", "cpu_thp": "CPU, `THP_MEM_ALLOC_ENABLE=1` (huge pages)",
              "cuda": "CUDA"}
    for key, title in titles.items():
        part = r.get(key)
        if not part or "cases" not in part:
            continue
        sh = part["shape"]
        dev = part.get("device_name", "cpu")
        where = title if dev == "cpu" else f"{title} ({dev})"
        threads = f", {part['threads']} thread" if dev == "cpu" else ""
        out += [f"RoPE on q and k, {where}: batch {sh['batch']}, {sh['heads']} heads, n = {sh['n']:,}, "
                f"d = {sh['d']}, float32, forward{threads}; {part['bytes_moved_floor'] / 2**20:.0f} "
                f"MiB read + written at the floor; target ≤ {part['target_ratio']:g}× floor:", ""]
        rows = [[name, f"{c['min_s'] * 1e3:.2f}", _ms(c.get("first_s")), f"{c['ratio_to_floor']:.2f}",
                 f"{c['ratio_to_alloc_floor']:.2f}"] for name, c in part["cases"].items()]
        rows += [[name, "not run", "", why, ""] for name, why in part.get("skipped", {}).items()]
        out.append(markdown_table(["implementation", "ms", "first call ms", "÷ copy floor", "÷ allocation floor"],
                                  rows))
        out.append("")
    graphs = r.get("compile_graphs")
    if graphs:
        counts = "; ".join(f"{label}: {k}" for label, k in graphs["graphs"].items())
        out.append(f"`torch.compile` of a RoPE attention module fed {len(graphs['lengths'])} sequence lengths "
                   f"({', '.join(map(str, graphs['lengths']))}): graphs built — {counts}.")
    return "\n".join(out).rstrip()


def relative(r: dict) -> str:
    out: list[str] = []
    for key, title in (("bias", "Attention with a position bias, forward + backward (FlexAttention: forward only), "
                                "causal"), ("long", "Long sequences")):
        part = r[key]
        labels = r["bias"]["labels"]
        lengths = sorted({row["n"] for row in part["rows"]})
        kinds = list(dict.fromkeys(row["kind"] for row in part["rows"]))
        cell = {(row["kind"], row["n"]): row for row in part["rows"]}

        def fmt(row):
            if row is None:
                return "–"
            if "skipped" in row:
                return "not run (memory)"
            if "error" in row:
                return "error"
            cell = f"{row['median_s']:.3f} s ({row['peak_rss_mb']:.0f} MB)"
            if row.get("unchecked_median_s") is not None:
                cell += f"; unchecked {row['unchecked_median_s']:.3f} s (checks {row['check_cost']:+.1%})"
            if row.get("first_s") is not None:
                cell += f"; first call {row['first_s']:.3f} s"
            return cell

        out += ([""] if out else []) + [f"{title}, batch {part['batch']}, {part['heads']} heads, "
                                         f"d = {part['head_dim']}, {part['threads']} thread, seconds (peak RSS):", ""]
        out.append(markdown_table(["method", *[f"n = {n:,}" for n in lengths]],
                                  [[labels[k], *[fmt(cell.get((k, n))) for n in lengths]] for k in kinds]))
    cross = r.get("crossovers", {})
    if cross:
        parts = [f"{k.replace('_', ' ')}: " + ("n ≈ " + f"{v:,.0f}" if v else "not within the measured lengths")
                 for k, v in cross.items()]
        out += ["", "Length from which kernelized ALiBi (decay path) is faster: " + "; ".join(parts) + "."]
    mha = r.get("mha")
    if mha:
        lengths = sorted({row["n"] for row in mha["rows"]})
        cell = {(row["mode"], row["kind"], row["n"]): row for row in mha["rows"]}
        modes = list(dict.fromkeys(row["mode"] for row in mha["rows"]))
        kinds = list(dict.fromkeys(row["kind"] for row in mha["rows"]))
        load = mha.get("load_average") or r.get("load_average")
        out += ["", f"`RelativeMHA` (causal) ÷ the same projections around SDPA with the bias precomputed, batch "
                    f"{mha['batch']}, E = {mha['embed_dim']}, {mha['heads']} heads, {mha['threads']} thread, min of "
                    f"{mha['repeat']} round-robin runs; goal ≤ {mha['target_ratio']:g}×"
                    + (f"; measured {mha['date']}" if mha.get("date") else "")
                    + (f", load average {load[0]:.1f}" if load else "") + ":", ""]
        def first(c: dict) -> str:
            return "" if c.get("ours_first_s") is None else f"; first call {c['ours_first_s'] * 1e3:.0f} ms"

        rows = [[mode, mha["labels"][k], *[f"{cell[(mode, k, n)]['ratio']:.2f}× ({cell[(mode, k, n)]['ours_s'] * 1e3:.0f} "
                                           f"vs {cell[(mode, k, n)]['floor_s'] * 1e3:.0f} ms{first(cell[(mode, k, n)])})"
                                           for n in lengths]]
                for mode in modes for k in kinds]
        out.append(markdown_table(["mode", "bias", *[f"n = {n:,}" for n in lengths]], rows))
    return "\n".join(out)


def cape(r: dict) -> str:
    e = r["embedding_forward"]
    p = e["params"]
    labels = {"1d_sinusoidal": "1D sinusoids (reference)", "1d_cape_train": "1D CAPE, training mode (text preset)",
              "2d_cape_no_augmentation": "2D CAPE sinusoids, no augmentation (reference)",
              "2d_sinusoidal_per_axis": "2D per-axis sinusoids",
              "2d_cape_train": "2D CAPE, training mode (vision preset, spacing measured)",
              "2d_cape_train_given_spacing": "2D CAPE, training mode, spacing given"}
    rows = [[labels.get(k, k), f"{c['median_s'] * 1e3:.1f}", _ms(c.get("first_s"), 1), f"{c['ratio_to_sinusoidal']:.2f}"]
            for k, c in e["results"].items()]
    met = ", ".join(f"{k}: {'met' if v else 'missed'}" for k, v in e["meets_target"].items())
    out = [f"Augmentation + embedding, forward, {p['tokens']:,} tokens x batch {p['batch']}, width {p['dim']}, "
           f"{p['dtype']}, 1 thread, CPU ms (median); ratio to plain sinusoids on the same positions "
           f"(target ≤ {e['target_ratio']:g}×; {met}):", "",
           markdown_table(["case", "ms", "first call ms", "ratio"], rows)]
    tb = r["testbed_fwd_bwd"]
    lengths = list(tb["results"])
    kinds = list(next(iter(tb["results"].values())))
    names = {"sinusoidal": "absolute sinusoids", "cape": "CAPE (training mode)",
             "relative_bias": "learned relative bias (clipped offsets)"}
    def tcell(c: dict) -> str:
        first = "" if c.get("first_s") is None else f"; first {c['first_s'] * 1e3:.0f}"
        return f"{c['median_s'] * 1e3:.0f} ({c['ratio_to_sinusoidal']:.2f}×{first})"

    rows = [[names.get(k, k), *[tcell(tb["results"][n][k]) for n in lengths]] for k in kinds]
    q = tb["params"]
    out += ["", f"Testbed forward + backward (TransformerEncoder, dim {q['dim']}, {q['depth']} layers, {q['heads']} heads, "
            f"batch {q['batch']}), CPU ms (ratio to absolute sinusoids; first call):", "",
            markdown_table(["position information", *[f"n = {int(n):,}" for n in lengths]], rows)]
    return "\n".join(out)


def defaults(r: dict) -> str:
    st, goals = r["settings"], r["goals"]

    def ratio(x: float | None) -> str:
        return "–" if x is None else f"{x:.2f}×"

    def shape(e: dict, key: str) -> str:
        x = e.get(key) or {}
        return "–" if not x else f"{ratio(x.get('first_over_warm_cpu'))} ({ratio(x.get('first_over_warm'))})"

    verdict = {True: "met", False: "**missed**", None: "–"}
    rows = []
    for e in r["rows"]:
        if "error" in e:
            rows.append([e["call"], f"{e['n']:,}", "error: " + str(e["error"])[:80], *[""] * 10])
            continue
        alone = e.get("checks_alone_s")
        rows.append([
            e["call"], f"{e['n']:,}", _ms(e["default_s"], 1), _ms(e.get("unchecked_s"), 1),
            "–" if e.get("check_cost_cpu") is None else f"{_pct(e['check_cost_cpu'])} ({_pct(e['check_cost'])})",
            "–" if alone is None else f"{alone * 1e3:.2f} ({e['checks_alone_fraction']:.1%})",
            f"{e['first_s'] * 1e3:.1f}: {ratio(e.get('first_over_warm_cpu'))} ({ratio(e['first_over_warm'])})",
            ratio(e.get("first_call_floor")), _ms(e.get("first_sys_s"), 1), shape(e, "new_shape_shorter"), shape(e, "new_shape_longer"),
            f"{e['first_page_faults']:,.0f} / {e['warm_page_faults_per_call']:,.0f}",
            f"{verdict[e['checks_within_goal']]} / {verdict[e['first_call_within_goal']]}",
        ])
    out = [f"Default calls, one torch thread, ms, medians over {st['processes']} fresh processes of up to "
           f"{st['rounds']} round-robin rounds each. `checks` = default ÷ `check_inputs=False` − 1, the median of "
           f"the rounds' ratios in CPU time (in wall time); `checks alone` = the validation the default call "
           f"makes, called by itself (its share of the call); `first call` = the first call in a fresh process, "
           f"wall ms: its CPU time ÷ a warm call's (wall ÷ wall), and the kernel's CPU time in it (`sys`, page "
           f"faults of fresh memory); `floor` = (a warm call + the kernel's first touch of fresh pages for an "
           f"output of this size) ÷ a warm call, CPU: what any implementation's first call costs at least; "
           f"`new shape` = the first call at n − n/4 (memory the process has used) and "
           f"n + n/4 (fresh memory) in the warm process, ÷ its warm call (CPU, wall); minor page faults of the "
           f"first and of a warm call. Goals: checks ≤ {goals['check_cost_max']:.0%}, first call ≤ "
           f"{goals['first_over_warm_max']:g}× warm (verdicts in CPU time):", "",
           markdown_table(["call", "n", "default", "unchecked", "checks", "checks alone (share)", "first call",
                           "floor", "sys", "new shape, shorter", "new shape, longer", "page faults first / warm",
                           "goals checks / first call"], rows)]
    dense = r.get("toeplitz_vs_dense") or {}
    if dense:
        rows = [[f"{int(n):,}", _ms(d["fft_default_s"], 1), _ms(d["fft_first_s"], 1), _ms(d["dense_s"], 1),
                 _ms(d["dense_first_s"], 1), f"{d.get('speedup_warm_cpu', d['speedup_warm']):.1f}×",
                 f"{d.get('speedup_first_call_cpu', d['speedup_first_call']):.1f}×",
                 "met" if d["within_goal"] else "**missed**"] for n, d in dense.items()]
        out += ["", f"`toeplitz_matmul(c, x)` (defaults: FFT, checks on) against the dense `C @ x` with the n × n "
                f"matrix built beforehand, {st['toeplitz_channels']} channels, wall ms; speed-ups in CPU time "
                f"(goal: ≥ {goals['fft_over_dense_min']:g}× faster, the FFT's first call included):", "",
                markdown_table(["n", "FFT warm", "FFT first call", "dense warm", "dense first call",
                                "dense ÷ FFT warm", "dense ÷ FFT first call", "goal"], rows)]
    v = r.get("verdicts", {})
    if v:
        out += ["", f"Verdicts at n ≥ 4,096: checks {'met' if v.get('checks_within_goal') else 'missed'}, first call "
                f"{'met' if v.get('first_call_within_goal') else 'missed'}, FFT vs dense "
                f"{'met' if v.get('fft_over_dense_within_goal') else 'missed'}"
                + (f" (misses: {', '.join(v['misses'])})" if v.get("misses") else "") + "."]
        if "first_call_goal_below_floor" in v:
            below, above = v["first_call_goal_below_floor"], v.get("first_call_misses_above_floor") or []
            out += ["", "First-call goal below the floor (the output's fresh pages alone cost more than "
                    f"{goals['first_over_warm_max'] - 1:g} warm call): {', '.join(below) if below else 'none'}. "
                    f"First-call misses with room above the floor: {', '.join(above) if above else 'none'}."]
    return "\n".join(out)


def search(r: dict) -> str:
    from benchmarks.bench_search import markdown as search_markdown

    return search_markdown(r)


def choice(r: dict) -> str:
    from benchmarks.bench_choice import markdown as choice_markdown

    return choice_markdown(r)


def optuna(r: dict) -> str:
    from benchmarks.bench_optuna import markdown as optuna_markdown

    return optuna_markdown(r)


def families(r: dict) -> str:
    from benchmarks.bench_families import markdown as families_markdown

    return families_markdown(r)


def graph_families(r: dict) -> str:
    from benchmarks.bench_graph_families import markdown as graph_families_markdown

    return graph_families_markdown(r)


def scale(r: dict) -> str:
    from benchmarks.bench_scale import markdown as scale_markdown

    return scale_markdown(r)


FORMATTERS = {"coords": coords, "lff": lff, "graph": graph, "krpe": krpe, "relative": relative, "search": search,
              "cape": cape, "scale": scale, "rope": rope, "choice": choice,
              "optuna": optuna, "families": families, "graph_families": graph_families}

FORMATTERS["defaults"] = defaults


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.tables")
    parser.add_argument("--results", default="benchmarks/results")
    args = parser.parse_args()
    for path in sorted(Path(args.results).glob("*.json")):
        r = json.loads(path.read_text())
        name = r.get("benchmark", path.stem)
        fmt = FORMATTERS.get(name)
        print(f"#### {path.stem} ({r['environment']['date']}, torch {r['environment']['torch']})\n")
        print(fmt(r) if fmt else "```json\n" + json.dumps({k: v for k, v in r.items() if k != "environment"},
                                                          indent=1)[:3000] + "\n```")
        print()


if __name__ == "__main__":
    main()
