"""Report of the ``cape`` section: ViT accuracy against test resolution, convergence, the claims, the sweep."""

from __future__ import annotations

from posenc.experiments.cape import CLAIMS, VARIANTS, plan, summarize
from posenc.report.section import FigureSaver, Section
from posenc.report.tables import fmt_holm, fmt_interval, fmt_ms, fmt_states, gate_lines, markdown_table

LABELS = {
    "none": "no position",
    "table": "learned table (bicubic resampling)",
    "sine": "2D sinusoids (no augmentation)",
    "cape": "CAPE",
    "cape_noscale": "CAPE without scaling",
    "cape_mixed": "CAPE, mixed training resolutions",
}
CLAIM_TEXT = {
    "task_needs_position": "The task needs position: sinusoids − no position, at the training resolution",
    "cape_matches_sine_at_train_res": "CAPE ≈ 2D sinusoids at the training resolution (CAPE − sinusoids, "
                                      "equivalence margin 0.02)",
    "cape_degrades_less_than_sine": "CAPE degrades less than the sinusoids away from the training resolution "
                                    "(mean accuracy at the other resolutions, CAPE − sinusoids)",
    "cape_beats_table_away": "CAPE beats the bicubically resampled learned table away from the training resolution",
    "scaling_helps_resolution_transfer": "Global scaling helps resolution transfer (CAPE − CAPE without scaling)",
    "mixed_resolutions_help": "Training at mixed resolutions helps transfer (mixed − single-resolution CAPE)",
}
#: one colour per variant, fixed across the section's figures
COLOURS = {"none": "#7f7f7f", "table": "#1f77b4", "sine": "#ff7f0e", "cape": "#2ca02c",
           "cape_noscale": "#9467bd", "cape_mixed": "#d62728"}


def _figures(summary: dict, save_figure: FigureSaver) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = summary["table"]
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10.5, 3.8))
    res_all: list[int] = []
    for v in (v for v in VARIANTS if v in rows):
        acc = rows[v]["accuracy"]
        rs = sorted(int(r) for r in acc if acc[r]["mean"] is not None)
        res_all = sorted(set(res_all) | set(rs))
        ax.errorbar(rs, [acc[str(r)]["mean"] for r in rs], yerr=[acc[str(r)]["std"] for r in rs], marker="o",
                    ms=3, capsize=2, color=COLOURS[v], label=LABELS[v], lw=2.0 if v == "cape" else 1.2)
    if summary.get("train_res"):
        ax.axvline(summary["train_res"], color="gray", lw=0.8, ls="--")
    ax.set_xscale("log", base=2)
    ax.set_xticks(res_all, [str(r) for r in res_all])
    ax.minorticks_off()
    ax.set_xlabel("test resolution (px; dashed: training)")
    ax.set_ylabel("test accuracy (mean ± std over seeds)")
    ax.set_ylim(0, 1.02)
    ax.set_title("digits rendered at each resolution", fontsize=9)
    for v, c in summary.get("curves", {}).items():
        for i, curve in enumerate(c["val"]):
            steps, vals = zip(*curve) if curve else ((), ())
            bx.plot(steps, vals, color=COLOURS[v], lw=0.9, alpha=0.7, label=LABELS[v] if i == 0 else None)
    bx.set_xlabel("training step")
    bx.set_ylabel("validation accuracy at the training resolution")
    bx.set_ylim(0, 1.02)
    bx.set_title("convergence (one line per seed)", fontsize=9)
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    fig.tight_layout()
    return [f"![accuracy against test resolution, and convergence]({save_figure('resolution', fig)})"]


def claims_lines(claims: dict) -> list[str]:
    family = max((c.get("holm_family", 0) for c in claims.values()), default=0)
    out = ["**Claims** (paired per-seed differences over the seeds neither of whose runs is still learning: mean "
           "[95% interval] (n) → verdict, then the verdict after Holm's adjustment over the section's "
           f"{family} claims that could reach a verdict; no verdict is read from fewer than 3 usable pairs; a "
           "directional claim whose interval lies wholly short of one point of accuracy (the smallest difference "
           "that matters) is contradicted; *detectable*: the smallest true "
           "difference these seeds detect with 80% power at the 5% level, from the observed spread).", ""]
    for name, c in claims.items():
        metric = {"train": "at the training resolution", "unseen": "mean at the resolutions neither trained at"}.get(
            c["metric"], "mean away from the training resolution")
        det = c.get("detectable")
        det_text = f"; detectable ≥ {det:.3f}" if det is not None else "; detectable: – (fewer than 2 pairs)"
        margin = f", margin ±{c['margin']:g}" if c["direction"] == "equal" else ""
        nc = c.get("not_converged") or {}
        left = (" — left out, still learning: " + "; ".join(f"{v} seeds {', '.join(map(str, s))}" for v, s in nc.items())
                if nc else "")
        failed = c.get("failed") or {}
        left += (" — failed to learn (compared as measured): "
                 + "; ".join(f"{v} seeds {', '.join(map(str, s))}" for v, s in failed.items()) if failed else "")
        note = f" — {c['note']}" if c.get("note") else ""
        out.append(f"- {CLAIM_TEXT.get(name, name)}: `{c['method']}` − `{c['baseline']}` ({metric}{margin}): "
                   f"{fmt_interval(c)} → **{c['verdict']}**; Holm: **{fmt_holm(c)}**{det_text}{note}{left}.")
    return out


def render(summary: dict, save_figure: FigureSaver) -> str:
    R = summary["train_res"]
    seeds = summary.get("seeds", 0)
    patch = summary.get("patch")
    grid = f"{R // patch}×{R // patch}" if patch and R else "–"
    out = [
        "Likhomanenko et al. (NeurIPS 2021) train ViTs at one resolution and evaluate them at others: CAPE "
        "(positions in [−1, 1], global shift, local shift and global scaling during training) should match the "
        "plain sinusoidal embedding at the training resolution and degrade less away from it, also less than a "
        "learned table resized bicubically; global scaling and mixed-resolution training should help. Here a "
        f"`posenc.models.TinyViT` ({patch}×{patch}-pixel patches, {grid} of them at the training resolution, "
        f"CLS token, 2 pre-LN layers) learns scikit-learn's 8×8 "
        f"digits rendered at {R}×{R} px and is tested without retraining on the same 449 held-out digits rendered "
        "at every resolution (bilinear). CAPE is the authors' vision setting (their code: grid "
        "`linspace(−1, 1, n)`, Δ ~ U[−0.5, 0.5] per axis, ε ~ U[−1/n, 1/n], λ ~ U[0.7, 1.4]); `sine` is the same "
        "features without augmentation; `cape_mixed` draws its training resolution per step (0.75×, 1×, 1.25×). "
        f"Every variant: the same initial transformer per seed, the same {summary.get('steps') or '–'} steps and "
        f"batches, learning rate {summary.get('used_lr') or '–'} (one rule for all, chosen on a validation split); "
        f"{seeds} seeds."
        + (f" CPU time of the jobs: {summary['cpu_seconds']:.0f} s (sum of their process times)."
           if summary.get("cpu_seconds") else ""),
        "",
    ]
    rows = summary["table"]
    res = sorted({int(r) for row in rows.values() for r in row["accuracy"]})
    body = []
    for v in (v for v in VARIANTS if v in rows):
        r = rows[v]
        body.append([v, fmt_states(r.get("states"))] + [fmt_ms(r["accuracy"].get(str(x)), 3) for x in res]
                    + [fmt_ms(r["away"], 3)])
    out.append(markdown_table(["variant", "runs (conv. / failed / learning)",
                               *[f"{x} px" + (" (train)" if x == R else "") for x in res],
                               "mean away from train"], body))
    out.append("")
    out += gate_lines(summary)
    out.append("")
    out += _figures(summary, save_figure)
    out += ["", *claims_lines(summary["claims"]), ""]
    lr = summary.get("lr")
    if lr:
        cand = ", ".join(f"{k}: {m:.3f}" for k, m in lr["mean_val_accuracy"].items())
        out.append(f"**Learning-rate rule** (validation accuracy at the training resolution, mean over every "
                   f"variant and sweep seed): {cand}. The rule picks {lr['chosen']:g}; the runs above used "
                   f"{lr['used']:g} ({'the same' if lr['agrees'] else 'a different value: rerun with the chosen one'}).")
        learning = lr.get("still_learning") or []
        out.append("The sweep's runs also check the testbed's steps: "
                   + ("every one reached a plateau or failed to learn." if not learning else
                      "still learning at the end: " + ", ".join(f"`{k}`" for k in learning) + "."))
        out.append("")
    not_run = sorted({v for c in summary["claims"].values() for v in c.get("not_run", [])})
    if not_run:
        out.append(f"*This profile* trains {', '.join(f'`{v}`' for v in VARIANTS if v in rows)} only: the claims "
                   f"that need {', '.join(f'`{v}`' for v in not_run)} read \"not decided\" here and are decided by "
                   "the full profile (`posenc reproduce cape --profile full`; docs/cape.md gives its record).")
        out.append("")
    return "\n".join(out) + "\n"


SECTION = Section(
    name="cape",
    title="CAPE: resolution transfer of 2D position encodings in a ViT (Likhomanenko et al., NeurIPS 2021)",
    plan=plan,
    summarize=summarize,
    render=render,
    quick_budget_s=240.0,
)

__all__ = ["SECTION", "CLAIMS"]
