"""Render the ``lff`` section: the learning-rate rule, per-encoding tables, convergence, paired claims."""

from __future__ import annotations

from posenc.experiments import lff as exp
from posenc.report.section import FigureSaver, Section
from posenc.report.tables import fmt_holm, fmt_interval, fmt_states, gate_lines

LABELS = {
    "none": "none",
    "table2d": "learned 2D table",
    "sine2d": "sinusoidal 2D",
    "mlp": "MLP on raw x,y",
    "rff_mlp": "fixed RFF + MLP",
    "lff_nomlp": "LFF, no MLP",
    "lff_mlp": "LFF + MLP",
}
#: One colour per encoding in every figure of the section.
COLORS = {
    "none": "#7f7f7f",
    "table2d": "#8c564b",
    "sine2d": "#1f77b4",
    "mlp": "#2ca02c",
    "rff_mlp": "#ff7f0e",
    "lff_nomlp": "#9467bd",
    "lff_mlp": "#d62728",
}
CLAIM_TEXT = {
    "digits_faster": "digits ViT: LFF + MLP converges faster (lower mean training loss over all steps)",
    "digits_final": "digits ViT: LFF + MLP reaches a higher final test accuracy",
    "grid_faster": "grid (L2 disk): LFF + MLP converges faster (lower mean training loss)",
    "grid_interpolation": "grid (L2 disk): higher balanced accuracy at finer resolutions over the same extent",
    "grid_isotropy": "grid: the trained LFF + MLP is more isotropic (centred features; lower |axis − diagonal|)",
}
METRIC_TEXT = {"val_acc": "validation accuracy", "val_bce": "validation BCE"}


def _ms(d: dict | None, fmt: str = ".3f") -> str:
    if d is None or d.get("mean") is None:
        return "–"
    return f"{d['mean']:{fmt}} ± {d['std']:{fmt}}"


def _score(x: float) -> str:
    """A validation score: 3 decimals, or 2 significant digits below 0.01 (a loss near 0)."""
    return f"{x:.3f}" if abs(x) >= 0.01 or x == 0 else f"{x:.1e}"


def _power(c: dict) -> str:
    det = c.get("detectable")
    return "–" if det is None else f"{det:.3f}"


def _legend(fig, handles: dict, ncol: int | None = None) -> None:
    order = [e for e in exp.ENCODINGS if e in handles]
    fig.legend([handles[e] for e in order], [LABELS[e] for e in order], loc="lower center",
               ncol=ncol or len(order), fontsize=8, frameon=False)


def _figures(summary: dict, save_figure: FigureSaver) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = []
    curves = summary.get("curves", {})
    panels = [(t, kind) for t in exp.TASKS if t in curves for kind in ("loss", "eval")]
    if panels:
        fig, axes = plt.subplots(1, len(panels), figsize=(3.6 * len(panels), 3.4), squeeze=False)
        handles = {}
        for ax, (task, kind) in zip(axes[0], panels):
            for enc, c in curves[task].items():
                x, y = (c["loss_step"], c["loss"]) if kind == "loss" else (c["eval_step"], c["eval"])
                (line,) = ax.plot(x, y, color=COLORS[enc], lw=2.2 if enc == "lff_mlp" else 1.2)
                handles[enc] = line
            ax.set_xlabel("step")
            if kind == "loss":
                ax.set_yscale("log")
                ax.set_title(f"{task}: training loss (mean over seeds)", fontsize=9)
            else:
                metric = next(iter(curves[task].values()))["metric"]
                ax.set_title(f"{task}: test {'accuracy' if metric == 'acc' else 'balanced accuracy'}", fontsize=9)
                if metric == "acc":
                    ax.set_ylim(0.5, 1.0)
        _legend(fig, handles, ncol=(len(handles) + 1) // 2 if len(panels) == 2 else None)
        fig.tight_layout(rect=(0, 0.12 if len(panels) == 2 else 0.08, 1, 1))
        out.append(f"![learning curves]({save_figure('curves', fig)})")
    sweep = summary.get("sweep", {})
    if sweep:
        fig, axes = plt.subplots(1, len(sweep), figsize=(4.2 * len(sweep), 3.4), squeeze=False)
        handles = {}
        for ax, (task, s) in zip(axes[0], sweep.items()):
            lrs = [float(x) for x in s["lrs"]]
            for enc, med in s["per_encoding"].items():
                (line,) = ax.plot([float(k) for k in med], list(med.values()), marker="o", color=COLORS[enc],
                                  lw=2.2 if enc == "lff_mlp" else 1.2)
                handles[enc] = line
            ax.plot(lrs, [s["median"][k] for k in s["lrs"]], color="black", ls="--", lw=1.0)
            ax.axvline(s["chosen"], color="black", lw=0.6, ls=":")
            ax.set_xscale("log")
            if not s["higher_is_better"]:
                ax.set_yscale("log")  # a loss: the solved runs sit near 0
            ax.set_xlabel("peak learning rate")
            ax.set_title(f"{task}: median {METRIC_TEXT.get(s['metric'], s['metric'])}\n"
                         "(dashed: all encodings pooled; dotted: chosen)", fontsize=8)
        _legend(fig, handles, ncol=(len(handles) + 1) // 2 if len(sweep) == 1 else None)
        fig.tight_layout(rect=(0, 0.14 if len(sweep) == 1 else 0.09, 1, 1))
        out.append(f"![learning-rate sweep]({save_figure('sweep', fig)})")
    grid = summary.get("table", {}).get("grid", {})
    iso = {e: r["iso_curve"] for e, r in grid.items() if "iso_curve" in r}
    if iso:
        fig, ax = plt.subplots(figsize=(6.0, 3.4))
        for enc, c in iso.items():
            ax.plot(c["distance"], c["axis"], color=COLORS[enc], label=f"{LABELS[enc]}")
            ax.plot(c["distance"], c["diagonal"], color=COLORS[enc], ls="--")
        ax.set_xlabel("distance from the centre (cells)")
        ax.set_ylabel("cosine similarity (centred)")
        ax.set_title("solid: along an axis, dashed: along a diagonal", fontsize=8)
        fig.tight_layout(rect=(0, 0, 0.74, 1))
        fig.legend(loc="center left", bbox_to_anchor=(0.75, 0.5), fontsize=7, frameon=False)
        out.append(f"![isotropy]({save_figure('isotropy', fig)})")
    return out


def _sweep_lines(summary: dict) -> list[str]:
    lines = []
    lr = summary.get("lr", {})
    sweep = summary.get("sweep", {})
    rule = (f"**Learning rate.** One peak learning rate per task for every encoding, chosen by the rule of "
            f"`posenc.experiments.lff.choose_lr`: the rate of {', '.join(f'{x:g}' for x in exp.LR_SWEEP)} with the "
            f"best median validation score over all (encoding, seed) runs of the sweep (seeds "
            f"{', '.join(map(str, exp.SWEEP_SEEDS))}, not the claims' seeds; the test set is never read), frozen in "
            f"`LR`: " + ", ".join(f"{t} {v:g}" for t, v in lr.items()) + ".")
    if not sweep:
        rule += (" The sweep is part of the full profile (`sweep.*` jobs), which checks that the frozen "
                 "rate is still the sweep's choice.")
    lines += [rule, ""]
    for task, s in sweep.items():
        verdict = ("agrees with the frozen rate" if s["agrees"] else
                   f"**differs from the frozen rate {s['frozen']:g}** (the claims ran at the frozen rate)")
        lines += [f"*{task}* sweep ({METRIC_TEXT.get(s['metric'], s['metric'])}, "
                  f"{'higher' if s['higher_is_better'] else 'lower'} is better; medians over "
                  f"{len(exp.SWEEP_SEEDS)} seeds): chosen **{s['chosen']:g}**, which {verdict}.", "",
                  "| encoding | " + " | ".join(f"lr {x}" for x in s["lrs"]) + " |",
                  "|---|" + "---:|" * len(s["lrs"])]
        for enc, med in s["per_encoding"].items():
            lines.append(f"| {LABELS[enc]} | " + " | ".join(
                _score(med[x]) if x in med else "–" for x in s["lrs"]) + " |")
        lines.append("| **all (rule)** | " + " | ".join(f"**{_score(s['median'][x])}**" for x in s["lrs"]) + " |")
        lines.append("")
    return lines


def _convergence_lines(summary: dict) -> list[str]:
    if not summary.get("gate"):
        return []
    return [*gate_lines(summary), ""]


def render(summary: dict, save_figure: FigureSaver) -> str:
    """Markdown for the ``lff`` section."""
    seeds = summary.get("seeds", 0)
    scales = ", ".join(f"`{k}` × {v:g}" for k, v in summary.get("lr_scales", {}).items())
    table = summary.get("table", {})
    tasks = " and ".join({"digits": "a TinyViT trained on scikit-learn's digits",
                          "grid": "the grid task \"occupied and within an L2 radius of the marker\" (trained at "
                                  "6×6, tested at 6×6 and at finer grids over the same extent)"}[t]
                         for t in exp.TASKS if t in table)
    lines = [
        "Li et al. (NeurIPS 2021) claim that learnable Fourier features + MLP (LFF) converge faster and reach "
        "better quality than other 2D position encodings, especially where L2 distances matter, and carry over "
        f"to new resolutions where a learned table cannot. Their benchmarks are out of reach; we test the same "
        f"claims on {tasks or '–'}. Every encoding gets the same model, optimiser, learning rate and steps, and "
        f"runs of one seed share the transformer's initial weights and batches (paired); {seeds} seeds; W_r "
        f"learning rate: {scales or '–'} (one choice for every encoding). Each claim is the paired per-seed "
        "difference LFF + MLP − baseline with its 95 % t interval, the verdict read from the interval, and the "
        "smallest true difference the seeds detect with 80 % power (δ₈₀).",
        "",
    ]
    if "grid" not in table:
        lines += [f"**Quick profile** ({seeds} seeds): the digits task only; the grid task, the learning-rate "
                  "sweep and the `none` reference run in `--profile full` (8 seeds).", ""]
    lines += _sweep_lines(summary)
    lines += _convergence_lines(summary)
    if "digits" in table:
        lines += ["**Digits ViT** (1,078 training, 270 validation and 449 test images; mean ± std over seeds)", "",
                  "| encoding | mean training loss | final test accuracy | final test loss | validation accuracy | "
                  "runs (conv. / failed / learning) | W_r rel. change |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for enc, r in table["digits"].items():
            lines.append(f"| {LABELS[enc]} | {_ms(r['auc_loss'])} | {_ms(r['final_acc'])} | "
                         f"{_ms(r['final_test_loss'])} | {_ms(r['val_acc'])} | {fmt_states(r.get('states'))} | "
                         f"{_ms(r['w_r_change'])} |")
        lines.append("")
    if "grid" in table:
        grids = next(iter(table["grid"].values())).get("finer", {})
        head = " | ".join(f"bacc at {g}×{g}" for g in grids)
        lines += ["**Grid disk task** (balanced accuracy, chance 0.5; trained at 6×6; finer grids cover the same "
                  "extent, tables are resampled bicubically)", "",
                  f"| encoding | mean training loss | test BCE at 6×6 | bacc at 6×6 | {head} | anisotropy (centred) "
                  "| runs (conv. / failed / learning) | W_r rel. change |",
                  "|---|---:|---:|---:|" + "---:|" * len(grids) + "---:|---:|---:|"]
        for enc, r in table["grid"].items():
            fin = " | ".join(_ms(r["finer"][g]) for g in grids)
            lines.append(f"| {LABELS[enc]} | {_ms(r['auc_loss'])} | {_ms(r['final_bce'])} | {_ms(r['final_bacc'])} "
                         f"| {fin} | {_ms(r['anisotropy'], '.4f')} | {fmt_states(r.get('states'))} | {_ms(r['w_r_change'])} |")
        lines.append("")
    claims = summary.get("claims", {})
    if claims:
        lines += ["### Claims: LFF + MLP − baseline over paired seeds", "",
                  "| claim (metric, LFF better if; smallest difference that matters) | vs | mean [95 % interval] (n) "
                  "| verdict | after Holm | δ₈₀ | seeds left out (still learning) |",
                  "|---|---|---|---|---|---:|---|"]
        for name, c in claims.items():
            for i, (base, d) in enumerate(c["vs"].items()):
                sesoi = f"; {d['sesoi']:g}" if d.get("sesoi") else ""
                label = f"{CLAIM_TEXT.get(name, name)} (`{c['metric']}`, {c['direction']}{sesoi})" if i == 0 else ""
                left = ", ".join(map(str, d.get("excluded", []))) or "–"
                lines.append(f"| {label} | {LABELS[base]} | {fmt_interval(d)} | **{d['verdict']}** | {fmt_holm(d)} | "
                             f"{_power(d)} | {left} |")
        n_family = max((d.get("holm_family", 0) for c in claims.values() for d in c["vs"].values()), default=0)
        lines += ["", "δ₈₀ = (t₀.₉₇₅ + t₀.₈₀)·s/√n with s the standard deviation of the paired differences: a "
                  "true difference smaller than δ₈₀ will usually read \"not confirmed at this scale\" with these "
                  "seeds. A claim whose whole interval lies short of its smallest difference that matters (LFF "
                  "better by less than it, or worse) is contradicted. "
                  f"*After Holm*: the verdict with the {n_family} comparisons of the section taken as one "
                  "family (Holm's step-down adjustment of their decision p-values at 5 %); a claim with fewer than "
                  "3 usable pairs reads \"not decided\".", ""]
    cost = summary.get("cost")
    if cost and cost.get("timed"):
        lines += [f"Cost: {cost['cpu_seconds']:.0f} s of CPU (process time) over the {cost['timed']} timed runs of "
                  f"{cost['runs']}.", ""]
    lines += _figures(summary, save_figure)
    return "\n".join(lines) + "\n"


SECTION = Section(
    name="lff",
    title="Learnable Fourier features for 2D positions (Li et al., NeurIPS 2021)",
    plan=exp.plan,
    summarize=exp.summarize,
    render=render,
    # quick: 36 digits runs of 800 steps; 296 s of CPU measured at load 3-6 (two workers beside
    # other jobs), about 6 s a run; ~220 s expected on a quiet machine (docs/lff.md)
    quick_budget_s=300.0,
)
