"""Report of the ``relative`` section: accuracy against test length, per task, and the claims."""

from __future__ import annotations

from posenc.experiments.relative import EXTENSIONS, TASKS, VARIANTS, plan, summarize
from posenc.report.section import FigureSaver, Section
from posenc.report.tables import claims_markdown, fmt_ms, fmt_states, gate_lines, markdown_table

TASK_TEXT = {
    "shift": "`shift` (relative, exact offset): output the token 2 places to the left",
    "recent": "`recent` (relative, recency): output the most recent token from the lower half of the vocabulary",
    "first": "`first` (absolute): output the token at position 1",
}
ORDER = VARIANTS[:6] + ("rope",) + tuple(f"rope+{k}" for k in EXTENSIONS) + VARIANTS[7:]
CLAIM_TEXT = {
    "alibi_extrapolates_beyond_rope": "ALiBi extrapolates where RoPE does not (accuracy beyond the training "
                                      "length, ALiBi − RoPE)",
    "extension_recovers_rope": "Position interpolation / NTK / YaRN recover RoPE beyond its training length "
                               "(extended − plain RoPE, beyond the training length)",
    "relative_beats_absolute_on_relative_tasks": "Relative encodings beat absolute ones on relative tasks "
                                                 "(beyond the training length)",
    "absolute_beats_relative_on_absolute_task": "Absolute encodings beat relative ones on the absolute task "
                                                "(at the training length)",
    "cape_matches_sinusoidal_at_train_length": "CAPE ≈ sinusoids at the training length (equivalence margin 0.02)",
    "cape_degrades_less_than_sinusoidal": "CAPE degrades less than sinusoids away from the training length",
    "cape_needs_global_shift": "Without the global shift, CAPE loses length transfer (CAPE − CAPE without shift)",
    "scaling_hurts_exact_offsets": "Global scaling hurts exact-offset tasks (CAPE − CAPE with scaling, `shift`)",
}


def _colours(variants: list[str]) -> dict[str, object]:
    """One fixed colour per variant (by its place in ``ORDER``: the same in every panel and every run)."""
    from posenc.report.plotting import method_colours

    order = list(ORDER) + [v for v in variants if v not in ORDER]
    colours = method_colours(order)
    return {v: colours[v] for v in variants}


def _figure(summary: dict, save_figure: FigureSaver) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from posenc.report.plotting import figure_legend

    tasks = [t for t in TASKS if t in summary["table"]]
    variants = [v for v in ORDER if any(v in summary["table"][t] for t in tasks)]
    colour = _colours(variants)
    fig, axes = plt.subplots(1, len(tasks), figsize=(4.6 * len(tasks), 3.8), squeeze=False, sharey=True)
    for ax, task in zip(axes[0], tasks):
        for v in variants:
            row = summary["table"][task].get(v)
            if row is None:
                continue
            ns = sorted(int(n) for n in row["accuracy"])
            ys = [row["accuracy"][str(n)]["mean"] for n in ns]
            style = "--" if v.startswith("rope+") else ":" if v in ("fft_rpe", "decay_rpe") else "-"
            ax.plot(ns, ys, style, marker="o", ms=3, color=colour[v], label=v)
        ax.axvline(summary["train_length"], color="gray", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xticks(ns, [str(n) for n in ns])
        ax.minorticks_off()
        ax.set_title(task)
        ax.set_xlabel("test length (tokens; grey: training length)")
        ax.set_ylim(0, 1.02)
    axes[0][0].set_ylabel("accuracy (mean over seeds)")
    figure_legend(fig, axes[0])
    fig.tight_layout()
    return f"![accuracy against test length]({save_figure('length', fig)})"


def render(summary: dict, save_figure: FigureSaver) -> str:
    L = summary["train_length"]
    out = [
        "Length extrapolation on the testbed (`posenc.models.TransformerEncoder`, 2 pre-LN layers, causal "
        f"attention): trained on sequences of {L} tokens, tested without retraining at 1×, 2×, 4×, 8× (and "
        "16× in the full profile). Absolute encodings are added to the token embeddings; relative ones act "
        "inside attention (RoPE, xPos, ALiBi, T5 buckets, learned clipped offsets; the kernelized FFT-RPE and "
        "decay RPE of Luo et al.); `rope+linear/ntk/yarn` are the trained RoPE model with each context-"
        "extension method set to the test length (no retraining). `table` has 8×L rows of which only the "
        "first L are ever trained. CAPE: mean-centred positions, global shift up to 4×L, local shift ±0.5; "
        "`cape_scale` adds global scaling up to 1.4. Accuracy is over scored tokens, mean ± std over seeds; "
        "*runs* counts the seeds whose validation curve at the training length the convergence gate read as "
        "converged / failed to learn / still learning (below the tables).",
        "",
    ]
    for task in (t for t in TASKS if t in summary["table"]):
        rows = summary["table"][task]
        lengths = sorted({int(n) for r in rows.values() for n in r["accuracy"]})
        out.append(f"**{TASK_TEXT[task]}**\n")
        body = []
        for v in (v for v in ORDER if v in rows):
            r = rows[v]
            body.append([v, fmt_states(r.get("states"))] + [fmt_ms(r["accuracy"].get(str(n)), 3) for n in lengths]
                        + [fmt_ms(r["extrapolation"], 3)])
        out.append(markdown_table(["variant", "runs (conv. / failed / learning)", *[f"{n // L}× ({n})" for n in lengths],
                                   "mean beyond L"], body))
        out.append("")
    out.append(_figure(summary, save_figure))
    out += ["", *gate_lines(summary)]
    out += ["", *claims_markdown(summary["claims"], CLAIM_TEXT)]
    return "\n".join(out) + "\n"


SECTION = Section(
    name="relative",
    title="Length extrapolation: rotary, bias-based and kernelized relative encodings, CAPE and absolute encodings",
    plan=plan,
    summarize=summarize,
    render=render,
    quick_budget_s=75.0,
)
