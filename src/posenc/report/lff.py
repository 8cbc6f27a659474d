"""Render the ``lff`` section: per-encoding tables, paired claims with intervals, figures."""

from __future__ import annotations

from posenc.experiments import lff as exp
from posenc.report.section import FigureSaver, Section

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
    "grid_final": "grid (L2 disk): higher final test balanced accuracy at the training resolution",
    "grid_interpolation": "grid (L2 disk): higher balanced accuracy at finer resolutions over the same extent",
    "grid_isotropy": "grid: the trained LFF + MLP is more isotropic (centred features; lower |axis − diagonal|)",
}


def _ms(d: dict | None, fmt: str = ".3f") -> str:
    if d is None or d.get("mean") is None:
        return "–"
    return f"{d['mean']:{fmt}} ± {d['std']:{fmt}}"


def _diff(c: dict) -> str:
    if c["mean"] is None:
        return "–"
    if c["low"] is None:
        return f"{c['mean']:+.3f} (n = {c['n']})"
    return f"{c['mean']:+.3f} [{c['low']:+.3f}, {c['high']:+.3f}] (n = {c['n']})"


def _figures(summary: dict, save_figure: FigureSaver) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = []
    curves = summary.get("curves", {})
    panels = [(t, kind) for t in ("digits", "grid") if t in curves for kind in ("loss", "eval")]
    if panels:
        fig, axes = plt.subplots(1, len(panels), figsize=(3.6 * len(panels), 3.3), squeeze=False)
        handles = {}
        for ax, (task, kind) in zip(axes[0], panels):
            for enc, c in curves[task].items():
                x, y = (c["loss_step"], c["loss"]) if kind == "loss" else (c["eval_step"], c["eval"])
                (line,) = ax.plot(x, y, color=COLORS[enc], lw=2.2 if enc == "lff_mlp" else 1.2)
                handles[enc] = line
            ax.set_xlabel("step")
            if kind == "loss":
                ax.set_yscale("log")
                ax.set_title(f"{task}: training loss", fontsize=9)
            else:
                metric = next(iter(curves[task].values()))["metric"]
                ax.set_title(f"{task}: test {'accuracy' if metric == 'acc' else 'balanced accuracy'}", fontsize=9)
        order = [e for e in exp.ENCODINGS if e in handles]
        fig.legend([handles[e] for e in order], [LABELS[e] for e in order], loc="lower center",
                   ncol=len(order), fontsize=8, frameon=False)
        fig.tight_layout(rect=(0, 0.08, 1, 1))
        out.append(f"![learning curves]({save_figure('curves', fig)})")
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


def render(summary: dict, save_figure: FigureSaver) -> str:
    """Markdown for the ``lff`` section."""
    seeds = summary.get("seeds", 0)
    scales = ", ".join(f"`{k}` × {v:g}" for k, v in summary.get("lr_scales", {}).items())
    lines = [
        "Li et al. (NeurIPS 2021) claim that learnable Fourier features + MLP (LFF) converge faster and reach "
        "better quality than other 2D position encodings, especially where L2 distances matter, and carry over "
        "to new resolutions where a learned table cannot. Their benchmarks are out of reach; we test the same "
        "claims on a TinyViT trained on scikit-learn's digits and on the grid task \"occupied and within an L2 "
        "radius of the marker\" (trained at 6×6, tested at 6×6 and at finer grids over the same extent). Every "
        f"encoding gets the same model, optimiser and steps; {seeds} seeds; W_r learning rate: {scales or '–'} "
        "(one choice for every encoding). Each claim is the paired per-seed difference LFF + MLP − baseline "
        "with its 95 % t interval; the verdict is read from the interval.",
        "",
    ]
    if seeds < 8:
        lines += [f"**Quick profile: indicative only** ({seeds} seeds, training shorter than the full profile's; the `converged` "
                  "column says which runs converged). Use `--profile full` (8 seeds, trained to convergence).", ""]
    table = summary.get("table", {})
    if "digits" in table:
        lines += ["**Digits ViT** (test accuracy on 449 held-out images; mean ± std over seeds)", "",
                  "| encoding | mean training loss | final test accuracy | final test loss | converged | W_r rel. change |",
                  "|---|---:|---:|---:|---:|---:|"]
        for enc, r in table["digits"].items():
            lines.append(f"| {LABELS[enc]} | {_ms(r['auc_loss'])} | {_ms(r['final_acc'])} | "
                         f"{_ms(r['final_test_loss'])} | {r['converged']} | {_ms(r['w_r_change'])} |")
        lines.append("")
    if "grid" in table:
        grids = next(iter(table["grid"].values())).get("finer", {})
        head = " | ".join(f"bacc at {g}×{g}" for g in grids)
        lines += ["**Grid disk task** (balanced accuracy, chance 0.5; trained at 6×6; finer grids cover the same "
                  "extent, tables are resampled bicubically)", "",
                  f"| encoding | mean training loss | bacc at 6×6 | {head} | anisotropy (centred) | converged | "
                  "W_r rel. change |",
                  "|---|---:|---:|" + "---:|" * len(grids) + "---:|---:|---:|"]
        for enc, r in table["grid"].items():
            fin = " | ".join(_ms(r["finer"][g]) for g in grids)
            lines.append(f"| {LABELS[enc]} | {_ms(r['auc_loss'])} | {_ms(r['final_bacc'])} | {fin} | "
                         f"{_ms(r['anisotropy'], '.4f')} | {r['converged']} | {_ms(r['w_r_change'])} |")
        lines.append("")
    claims = summary.get("claims", {})
    if claims:
        lines += ["### Claims: LFF + MLP − baseline, mean [95 % interval] over paired seeds", ""]
        for name, c in claims.items():
            lines.append(f"- *{CLAIM_TEXT.get(name, name)}* (`{c['metric']}`, LFF better if {c['direction']}):")
            for base, d in c["vs"].items():
                lines.append(f"  - vs {LABELS[base]}: {_diff(d)} → **{d['verdict']}**")
        lines.append("")
    lines += _figures(summary, save_figure)
    return "\n".join(lines) + "\n"


SECTION = Section(
    name="lff",
    title="Learnable Fourier features for 2D positions (Li et al., NeurIPS 2021)",
    plan=exp.plan,
    summarize=exp.summarize,
    render=render,
    quick_budget_s=100.0,
)
