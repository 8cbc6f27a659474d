"""Render the ``lff`` section: tables with mean ± std over seeds, claims, figures."""

from __future__ import annotations

from posenc.experiments import lff as exp
from posenc.report.section import FigureSaver, Section
from posenc.report.tables import verdict

LABELS = {
    "none": "none",
    "table1d": "learned 1D table",
    "table2d": "learned 2D table",
    "sine2d": "sinusoidal 2D",
    "mlp": "MLP on raw x,y",
    "rff_mlp": "fixed RFF + MLP",
    "lff_nomlp": "LFF, no MLP",
    "lff_mlp": "LFF + MLP",
}


def _ms(d: dict | None, fmt: str = ".3f") -> str:
    if d is None:
        return "–"
    return f"{d['mean']:{fmt}} ± {d['std']:{fmt}}"


def _figures(summary: dict, save_figure: FigureSaver) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = []
    curves = summary.get("curves", {})
    if curves:
        fig, axes = plt.subplots(1, len(curves), figsize=(5.5 * len(curves), 3.6), squeeze=False)
        for ax, (task, by_enc) in zip(axes[0], curves.items()):
            for enc, curve in by_enc.items():
                k = max(1, len(curve) // 40)
                smooth = [sum(curve[i : i + k]) / len(curve[i : i + k]) for i in range(0, len(curve), k)]
                ax.plot([i * k for i in range(len(smooth))], smooth, label=LABELS[enc],
                        lw=2.2 if enc == "lff_mlp" else 1.2)
            ax.set_title(f"{task}: training BCE (mean over seeds)")
            ax.set_xlabel("step")
            ax.set_yscale("log")
        axes[0][-1].legend(fontsize=7)
        out.append(f"![loss curves]({save_figure('curves', fig)})")
    disk = summary.get("grid", {}).get("disk", {})
    iso = {e: r["iso_curve"] for e, r in disk.items() if "iso_curve" in r}
    if iso:
        fig, axes = plt.subplots(1, len(iso), figsize=(3.0 * len(iso), 2.8), squeeze=False, sharey=True)
        for ax, (enc, c) in zip(axes[0], iso.items()):
            ax.plot(c["distance"], c["axis"], label="along an axis")
            ax.plot(c["distance"], c["diagonal"], "--", label="along a diagonal")
            ax.set_title(LABELS[enc], fontsize=9)
            ax.set_xlabel("distance (cells)")
        axes[0][0].set_ylabel("cosine similarity to centre")
        axes[0][0].legend(fontsize=7)
        out.append(f"![isotropy]({save_figure('isotropy', fig)})")
    scale = summary.get("scale", {})
    if scale:
        stds = sorted(scale, key=float)
        fig, ax = plt.subplots(figsize=(4.2, 3.0))
        m = [scale[s]["auc_loss"]["mean"] for s in stds]
        e = [scale[s]["auc_loss"]["std"] for s in stds]
        ax.errorbar([float(s) for s in stds], m, yerr=e, marker="o")
        ax.set_xscale("log")
        ax.set_xlabel("initial std of W_r (= 1/gamma)")
        ax.set_ylabel("area under training loss")
        out.append(f"![frequency scale]({save_figure('scale', fig)})")
    return out


def render(summary: dict, save_figure: FigureSaver) -> str:
    """Markdown for the ``lff`` section."""
    lines = [
        "Li et al. (NeurIPS 2021) propose learnable Fourier features + MLP (LFF) for multi-dimensional "
        "positions and claim faster convergence and better accuracy where L2 distances matter. Their "
        "benchmarks are out of reach here; we test the claims on the synthetic task \"occupied and within "
        "radius R of the marker\" on a grid of tokens (disk: Euclidean distance; square: Chebyshev) with a "
        f"tiny pre-LN transformer, {summary.get('seeds', 0)} seeds per cell, mean ± std over seeds. "
        "bacc = balanced accuracy ((TPR+TNR)/2, chance 0.5) on held-out samples; AUC = mean training BCE over "
        "all steps (lower = faster convergence); steps to target = first evaluation with test bacc >= "
        f"{exp.GridConfig().target_bacc} among the seeds that reached it. The learned 1D table over the flattened "
        "cells is the learned 2D table on a fixed grid (same parameters and draws), so their rows coincide.",
        "",
    ]
    for task, rows in summary.get("grid", {}).items():
        lines += [
            f"**{task} task**",
            "",
            "| encoding | AUC train loss | final test BCE | final test bacc | reached target | steps to target | tokens/s |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for enc, r in rows.items():
            lines.append(
                f"| {LABELS[enc]} | {_ms(r['auc_loss'])} | {_ms(r['final_bce'])} | {_ms(r['final_bacc'])} | "
                f"{r['reached_target']} | {_ms(r['steps_to_target'], '.0f')} | {_ms(r['tokens_per_s'], '.0f')} |"
            )
        lines.append("")
    claims = summary.get("claims", {})
    c = claims.get("faster_convergence")
    if c:
        lines.append(
            f"- *Faster convergence (disk):* LFF + MLP AUC {c['lff_mlp_auc']:.3f} vs the best other encoding "
            f"({LABELS.get(c['best_other'], c['best_other'])}) {c['best_other_auc']:.3f}: {verdict(c['holds'])}"
            + (" (the difference is within one std over seeds)." if c.get("within_noise") else ".")
        )
    c = claims.get("best_final_disk")
    if c:
        lines.append(
            f"- *Best final accuracy on the disk task:* ranking by bacc: "
            f"{', '.join(LABELS[e] for e in c['ranking'])}: {verdict(c['holds'])}."
        )
    c = claims.get("gain_larger_on_disk")
    if c and c["reference"]:
        g = c["gains"][c["reference"]]
        lines.append(
            f"- *LFF gains more where L2 matters:* bacc gain of LFF + MLP over {LABELS[c['reference']]} is "
            f"{g['disk_gain']:+.3f} on the disk vs {g['square_gain']:+.3f} on the square: {verdict(c['holds'])}. "
            "Gains over the others: "
            + "; ".join(f"{LABELS[e]} {v['disk_gain']:+.3f} / {v['square_gain']:+.3f}" for e, v in c["gains"].items())
            + " (disk / square)."
        )
    signal = summary.get("signal", {})
    if signal:
        lines += [
            "",
            "**Positional signal at initialisation** (no training): RMS of the encoding over the grid cells and "
            "of its position-dependent part (minus the mean over cells), relative to the RMS of the token "
            "embeddings. The transformer must amplify a small position-dependent part before it can use it.",
            "",
            "| encoding | total / token | position-dependent / token |",
            "|---|---:|---:|",
        ]
        for enc, r in signal.items():
            lines.append(f"| {LABELS[enc]} | {_ms(r['total'])} | {_ms(r['position_dependent'])} |")
    hold = summary.get("holdout", {})
    if hold:
        lines += [
            "",
            "**Positions never seen in training** (point sets with continuous positions; the box "
            f"{exp.HoldoutConfig().box} (x0, x1, y0, y1) of [-1, 1]² is absent from training; tables quantise "
            "positions to the grid, so their rows for the box are never trained):",
            "",
            "| encoding | bacc seen region | bacc held-out region | BCE seen | BCE held-out |",
            "|---|---:|---:|---:|---:|",
        ]
        for enc, r in hold.items():
            lines.append(f"| {LABELS[enc]} | {_ms(r['seen_bacc'])} | {_ms(r['heldout_bacc'])} | "
                         f"{_ms(r['seen_bce'])} | {_ms(r['heldout_bce'])} |")
        c = claims.get("tables_fail_on_unseen")
        if c:
            d = c["drop_seen_minus_heldout"]
            lines.append("")
            lines.append(
                f"- *Tables cannot generalise to unseen positions:* bacc drop (seen − held-out) learned 2D table "
                f"{d['table2d']:+.3f} vs LFF + MLP {d['lff_mlp']:+.3f}: {verdict(c['holds'])}"
                + ("." if c.get("informative", True) else
                   " — uninformative here: the table did not learn the region it saw either (seen bacc <= 0.6).")
            )
    scale = summary.get("scale", {})
    if scale:
        lines += ["", "**Initial frequency scale** (LFF + MLP, disk task; std of W_r = 1/γ, positions in [-1, 1]):", "",
                  "| std of W_r | γ | AUC train loss | final test BCE | final test bacc |", "|---:|---:|---:|---:|---:|"]
        for std in sorted(scale, key=float):
            r = scale[std]
            lines.append(f"| {float(std):g} | {1 / float(std):.3g} | {_ms(r['auc_loss'])} | {_ms(r['final_bce'])} | "
                         f"{_ms(r['final_bacc'])} |")
        c = claims.get("u_shaped_scale")
        if c:
            lines.append("")
            lines.append(f"- *U-shaped sensitivity to the initial scale:* best std {c['best_std']:g} "
                         f"(an interior value is the U shape), margin to the better end {c['margin_to_ends']:.3f}: "
                         f"{verdict(c['holds'])}" + (" but within one std over seeds." if c["within_noise"] else "."))
    disk = summary.get("grid", {}).get("disk", {})
    iso_rows = [(e, r) for e, r in disk.items() if "anisotropy_trained" in r]
    if iso_rows:
        lines += ["", "**Isotropy** of the encoding's cosine similarity to the grid centre: mean |axis − diagonal| "
                  "over distances 0.5 … G/2−0.5 cells (0 = isotropic; raw features, constant part included):", "",
                  "| encoding | at init | after training (disk) |", "|---|---:|---:|"]
        for e, r in iso_rows:
            lines.append(f"| {LABELS[e]} | {_ms(r['anisotropy_init'])} | {_ms(r['anisotropy_trained'])} |")
        c = claims.get("lff_more_isotropic_than_sine")
        if c:
            lines.append("")
            lines.append(f"- *LFF is more isotropic than the separable sinusoidal encoding (after training):* "
                         f"{c['lff_mlp']:.4f} vs {c['sine2d']:.4f}: {verdict(c['holds'])}.")
    lines.append("")
    lines += _figures(summary, save_figure)
    return "\n".join(lines) + "\n"


SECTION = Section(
    name="lff",
    title="Learnable Fourier features for 2D positions (Li et al., NeurIPS 2021)",
    plan=exp.plan,
    summarize=exp.summarize,
    render=render,
    quick_budget_s=120.0,
)
