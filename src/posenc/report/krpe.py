"""Report section ``krpe``: kernelized attention with RPE (Luo et al., NeurIPS 2021)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from posenc.experiments import krpe as exp
from posenc.report.section import FigureSaver, Section
from posenc.report.tables import fmt_holm, fmt_interval, fmt_states, gate_lines


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(map(str, header)) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _ms(stat: dict | None, digits: int = 2) -> str:
    if not stat or stat.get("mean") is None:
        return "n/a"
    return f"{stat['mean']:.{digits}f} ± {stat['std']:.{digits}f}"


def _verdict(claim: dict | None) -> str:
    if claim is None:
        return "not measured"
    return "confirmed" if claim["holds"] else "not confirmed at this scale"


def render(summary: dict, save_figure: FigureSaver) -> str:
    import matplotlib

    matplotlib.use("Agg")

    claims = summary.get("claims", {})
    out: list[str] = []

    approx = summary.get("approx")
    if approx:
        ms = approx["features"]
        out.append("### Approximation of exp(q·k) by positive random features (paper Fig. 1b)\n")
        out.append("Median relative error of φ(q)·φ(k) against exp(q·k) for q, k on the sphere of radius R "
                   "(d = 64), and relative error of the attention output against exact softmax (n = 64).\n")
        rows = [[f"R = {R}"] + [f"{e:.3f}" for e in approx["kernel"][R]] +
                [f"{a:.3f}" for a in approx["attention"][R][-1:]] for R in approx["kernel"]]
        out.append(_table(["keys/queries", *[f"m = {m}" for m in ms], f"attention err (m = {ms[-1]})"], rows))
        fig, note = _approx_figure(approx)
        out.append(f"\n![approximation]({save_figure('approx', fig)})\n")
        if note:
            out.append(note + "\n")
        c = claims.get("approx_large_norm_useless")
        if c:
            out.append(f"- Large norms make random features useless, normalised q/k does not: **{_verdict(c)}** "
                       f"(error at m = {ms[-1]}: R = 1 → {c['err_R1_at_max_m']:.3f}, "
                       f"R = {approx['norms'][-1]} → {c['err_Rmax_at_max_m']:.3f}).")
        c = claims.get("approx_inverse_sqrt_m")
        if c and c["slope_R1"] is not None:
            out.append(f"- Error ∝ m^(-1/2) at R = 1: **{_verdict(c)}** (log-log slope {c['slope_R1']:.2f}).")
        out.append("")

    train = summary.get("train", {})
    if train:
        out.append("### Stability and accuracy (the `posenc.models.TransformerEncoder` testbed, 2 pre-LN layers; the attention module is the variable)\n")
        out.append("Variants: `performer_raw` (FAVOR+ on raw q/k, scaled d^-1/4), `norm_nope` (unit q/k, no RPE), "
                   "`norm_rpe` (unit q/k + learned per-head RPE, FFT path), `softmax_rpe` (exact softmax, 1/√d, same "
                   "RPE). All have learned absolute position embeddings. A spike is a step whose loss exceeds 1.5× "
                   "the median of the previous 20 steps and that median by more than 0.05 nats.\n")
        for task, rows in train.items():
            out.append(f"**Task `{task}`** ({'copy the token at i − 3' if task == 'copy' else 'associative recall'})\n")
            tab = [[v, _ms(r["accuracy"], 3), _ms(r["final_loss"], 3), _ms(r["spikes"], 1),
                    f"{r['diverged']}/{r['seeds']}", fmt_states(r.get("states"))] for v, r in _ordered(rows)]
            out.append(_table(["variant", "accuracy", "final loss", "loss spikes", "diverged",
                               "runs (conv. / failed / learning)"], tab))
            out.append("")
            for key, text in ((f"{task}_rpe_beats_nope", "RPE beats no RPE (normalised q/k) by > 0.02 accuracy"),
                              (f"{task}_norm_rpe_beats_raw_performer", "normalised q/k + RPE beats Performer on raw q/k by > 0.02"),
                              (f"{task}_norm_rpe_close_to_softmax", "normalised q/k + RPE within 0.05 of softmax + RPE")):
                c = claims.get(key)
                if c:
                    note = f" — {c['note']}" if c.get("note") else ""
                    out.append(f"- {text}: {c['method']} − ({c['baseline']} {c['shift']:+g}), paired per seed: "
                               f"{fmt_interval(c)} → **{c['verdict']}**; after Holm: {fmt_holm(c)}{note}.")
            out.append("")
        if summary.get("gate"):
            out.append("\n".join(gate_lines(summary)) + "\n")
        out.append(f"![training loss per task]({save_figure('train', _train_figure(train))})\n")
        out.append("Training loss: mean over seeds (line) and the range of the seeds (band); one colour per "
                   "variant, the same in both panels.\n")

    sp = summary.get("speed")
    if sp:
        out.append(f"### Speed (forward+backward, 1 thread, {sp['heads']} heads, d = {sp['head_dim']}, "
                   f"m = {sp['features']})\n")
        keys = ("fft", "dense", "softmax", "no_rpe") + (("floor",) if any("floor" in r for r in sp["rows"]) else ())
        tab = [[r["n"]] + [f"{r[k]:.3f}" if k in r else "—" for k in keys] for r in sp["rows"]]
        out.append(_table(["n", "FFT kernelized RPE (s)", "dense kernelized RPE (s)", "softmax + bias (s)",
                           "kernelized, no RPE (s)", "FFT floor (s)"][:len(keys) + 1], tab))
        sl = summary.get("speed_slopes", {})
        out.append("\nWall-clock seconds, best of the repeats. Log-log slopes of wall time vs n: " + ", ".join(
            f"{k} {v:.2f}" for k, v in sl.items() if v is not None) + ".")
        cpu = summary.get("speed_slopes_cpu", {})
        if cpu:
            out.append("Log-log slopes of CPU time vs n (one thread; time spent waiting for a core is not counted): "
                       + ", ".join(f"{k} {v:.2f}" for k, v in cpu.items() if v is not None) + ".")
        load = _load_text(sp)
        if load:
            out.append(load)
        c = claims.get("fft_grows_subquadratically")
        slope = c.get("slope", c.get("slope_fft_n_ge_1024")) if c else None
        if c and slope is not None:
            extra = ""
            r = c.get("dense_over_fft")
            if r and r.get("dense_over_fft"):
                extra = f"; at n = {r['n']} the dense path takes {r['dense_over_fft']:.1f}× the FFT path's time"
            if c.get("basis") == "cpu_ratio_to_floor":
                how = ("read from the CPU-time ratio of the FFT path to the FFT floor (the FFTs alone, an n log n "
                       f"reference timed in the same run), whose log-log slope for n ≥ 1024 must be ≤ {c['limit']:g} "
                       f"(an n² path gives ≈ 0.9): slope {slope:.2f}. The FFT path alone grows with slope "
                       f"{c['slope_fft_cpu_n_ge_1024']:.2f} in CPU time and {c['slope_fft_n_ge_1024']:.2f} in wall "
                       "time; the floor's own slope shows how much of that the machine's caches and load add")
            else:
                basis = "CPU time" if c.get("basis") == "cpu" else "wall time"
                how = f"log-log slope of {basis} ≤ 1.2 for n ≥ 1024, measured within one run: slope {slope:.2f}"
            out.append(f"- The FFT path grows like n log n: **{_verdict(c)}**; {how}{extra}. The full timing table "
                       "with memory is `benchmarks/results/krpe.json` (`make bench`).")
        out.append("")

    num = summary.get("numerics")
    if num:
        out.append(f"### Numerics of the FFT path (n = {num['n']}, error / max|v| against float64 dense)\n")
        tab = [[r["range"], r["profile"], f"{r['err_float32']:.1e}", f"{r['err_float64']:.1e}",
                f"{r['bound_float32']:.1e}"] for r in num["rows"]]
        out.append(_table(["bias range (nats)", "bias profile", "float32", "float64 accumulation",
                           "float32 bound ε·log2(L)·e^B"], tab))
        c = claims.get("float32_bound_holds")
        out.append(f"\n- The documented float32 bound holds on every row: **{_verdict(c)}**.")
        c = claims.get("float32_fails_wide_growing_bias")
        if c:
            out.append(f"- A bias that grows with distance over ≥ 40 nats breaks float32: "
                       f"**{_verdict(c)}**; float64 accumulation errors: "
                       + ", ".join(f"{e64:.1e} at {B:g} nats" for B, _, e64 in c["errors"]) + ".")
        out.append("")
    return "\n".join(out)


def _ordered(rows: dict) -> list[tuple[str, dict]]:
    """The variants of ``rows`` in the section's fixed order (unknown ones last)."""
    known = [(v, rows[v]) for v in exp.VARIANTS if v in rows]
    return known + [(v, r) for v, r in rows.items() if v not in exp.VARIANTS]


def _load_text(sp: dict) -> str:
    before, after = sp.get("load_before"), sp.get("load_after")
    if not before:
        return ""
    cores = sp.get("cpu_count")
    return (f"Load average (1 min) {before[0]:.2f} before and {after[0]:.2f} after the timings"
            + (f", on {cores} cores" if cores else "") + "; above about one per core, wall times are inflated by "
            "other work; the claim below reads CPU-time ratios measured within this run.") if after else ""


def _approx_figure(approx: dict):
    """Median relative error against m, one curve per norm R; says which curves coincide."""
    import matplotlib.pyplot as plt

    from posenc.report.plotting import fit_ylim

    ms = approx["features"]
    norms = list(approx["kernel"])
    styles = ["-", "--", "-.", ":"]
    markers = ["o", "s", "^", "D", "v", "P"]
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for i, R in enumerate(norms):
        # open markers growing with i: a curve drawn over an earlier one still shows the earlier markers
        ax.plot(ms, approx["kernel"][R], ls=styles[i % len(styles)], marker=markers[i % len(markers)],
                ms=5 + 1.8 * i, mfc="none", mew=1.3, label=f"R = {R}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(ms, [str(m) for m in ms])
    ax.minorticks_off()
    fit_ylim(ax, [e for R in norms for e in approx["kernel"][R]], log=True)
    ax.set_xlabel("random features m")
    ax.set_ylabel("median relative error")
    ax.legend(fontsize=8)
    # curves that lie within 5% of each other at every m are drawn on top of each other: say so
    same = []
    for i, a in enumerate(norms):
        for b in norms[i + 1:]:
            ea, eb = approx["kernel"][a], approx["kernel"][b]
            if all(abs(x - y) <= 0.05 * max(abs(x), abs(y), 1e-12) for x, y in zip(ea, eb)):
                same.append(f"R = {a} and R = {b}")
    note = ("The curves for " + "; ".join(same) + " coincide (within 5% at every m): they are drawn on top of "
            "each other, told apart by their markers." if same else "")
    if same:
        ax.text(0.98, 0.9, "\n".join(f"{x}: coincide" for x in same), transform=ax.transAxes, ha="right",
                va="top", fontsize=7, bbox=dict(fc="white", ec="none", alpha=0.8))
    fig.tight_layout()
    return fig, note


def _train_figure(train: dict):
    """Training loss against step, one panel per task, one colour per variant, one legend."""
    import matplotlib.pyplot as plt

    from posenc.report.plotting import figure_legend, method_colours

    order = list(exp.VARIANTS) + sorted({v for rows in train.values() for v in rows} - set(exp.VARIANTS))
    colour = method_colours(order)
    tasks = [t for t in ("copy", "recall") if t in train] + [t for t in train if t not in ("copy", "recall")]
    fig, axes = plt.subplots(1, len(tasks), figsize=(4.8 * len(tasks), 3.4), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        for v, r in _ordered(train[task]):
            curves = [c for c in r["curves"] if c]
            if not curves:
                continue
            steps = min(len(c) for c in curves)
            cols = [[c[t] for c in curves] for t in range(steps)]
            ax.plot(range(steps), [sum(x) / len(x) for x in cols], color=colour[v], lw=1.5, label=v)
            if len(curves) > 1:
                ax.fill_between(range(steps), [min(x) for x in cols], [max(x) for x in cols], color=colour[v],
                                alpha=0.15, lw=0)
        ax.set_title(f"task {task}")
        ax.set_xlabel("step (subsampled)")
        ax.set_ylabel("training loss")
    figure_legend(fig, axes[0])
    fig.tight_layout()
    return fig


SECTION = Section(
    name="krpe",
    title="Kernelized attention with RPE in O(n log n) (Luo et al., NeurIPS 2021)",
    plan=exp.plan,
    summarize=exp.summarize,
    render=render,
    quick_budget_s=120.0,
)
