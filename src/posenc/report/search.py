"""Report of the ``search`` section: DARTS-PT against magnitude selection on stacked cells."""

from __future__ import annotations

from posenc.experiments.search import PARAM_FREE, SEP, plan, summarize
from posenc.report.section import FigureSaver, Section
from posenc.report.tables import fmt_ms, markdown_table

LABELS = {"magnitude": "magnitude (DARTS)", "pt": "PT, α trained (DARTS+PT)", "pt_fixed": "PT, α fixed"}
COLOURS = {"magnitude": "tab:red", "pt": "tab:blue", "pt_fixed": "tab:green", "random": "0.5", "optimum": "black"}
MARKERS = {"magnitude": "v", "pt": "o", "pt_fixed": "s"}
SPACE_TEXT = {
    "nb201": "NAS-Bench-201-like cells",
    "s1": "RobustDARTS S1 on DARTS cells (two ops per edge)",
    "s2": "RobustDARTS S2 on DARTS cells: {skip, sep_conv_3x3}",
    "s3": "RobustDARTS S3 on DARTS cells: {none, skip, sep_conv_3x3}",
    "s4": "RobustDARTS S4 on DARTS cells: {noise, sep_conv_3x3}",
}
CLAIM_TEXT = {
    "param_free_gap": "mechanism: magnitude keeps more parameter-free ops than PT on the same supernet "
                      "(share of kept edges, magnitude − PT)",
    "param_free_gap_fixed": "mechanism: magnitude keeps more parameter-free ops than PT with α fixed (same seed)",
    "magnitude_drift": "mechanism: magnitude's share of parameter-free ops grows along supernet training "
                       "(last checkpoint − first)",
    "pt_beats_magnitude": "outcome: PT's pick, trained alone, is more accurate than magnitude's (test accuracy)",
    "pt_fixed_beats_magnitude": "outcome: PT with α fixed beats magnitude (trained alone, test accuracy)",
    "pt_fixed_vs_pt": "outcome: PT with α fixed ≥ PT with α trained (the paper's NAS-Bench-201 finding)",
    "magnitude_beats_random": "ground truth: magnitude's pick beats the space's mean",
    "pt_beats_random": "ground truth: PT's pick beats the space's mean",
    "pt_fixed_beats_random": "ground truth: PT-fixed's pick beats the space's mean",
}


def _pct(v: float | None, digits: int = 1) -> str:
    return "n/a" if v is None else f"{100 * v:.{digits}f}"


def _ms_pct(stat: dict | None) -> str:
    if not stat or stat.get("mean") is None:
        return "n/a"
    return f"{100 * stat['mean']:.1f} ± {100 * stat['std']:.1f}"


def _diff(c: dict, scale: float, unit: str) -> str:
    if c.get("mean") is None:
        return "n/a"
    d = 2 if unit else 3
    lo, hi = c.get("low"), c.get("high")
    interval = "[n/a]" if lo is None or hi is None else f"[{scale * lo:+.{d}f}, {scale * hi:+.{d}f}]"
    size = f"n={c['n']}" if "rows" not in c else f"{c['rows']} supernet seeds × {c['columns']} training seeds"
    holm = c.get("holm_verdict")
    holm_text = f"; Holm over the space's {c['holm_family']} claims: **{holm}**" if holm and c.get("holm_family") else ""
    return f"{scale * c['mean']:+.{d}f}{unit} {interval} ({size}): **{c['verdict']}**{holm_text}"


def _tests(test: dict | None) -> str:
    if not test:
        return ""
    parts = [f"{test['wins']}/{test['ties']}/{test['losses']} wins/ties/losses"]
    for k, name in (("t_p", "t-test"), ("wilcoxon_p", "Wilcoxon")):
        if test.get(k) is not None:
            parts.append(f"{name} p = {test[k]:.3g}")
    return "; ".join(parts)


def _detectable(c: dict, scale: float, unit: str) -> str:
    if c.get("detectable") is None:
        return "too few seeds to state a detectable difference"
    if c["detectable"] == 0:
        return "no spread: nothing is read from a zero-width interval"
    text = f"its own spread detects ≥ {scale * c['detectable']:.{2 if unit else 3}f}{unit} (80 % power)"
    if c.get("seeds_needed") and c.get("mean"):
        text += f"; {c['seeds_needed']} seeds would detect the observed {scale * abs(c['mean']):.{2 if unit else 3}f}{unit}"
    return text


def _claims(claims: dict) -> list[str]:
    lines = []
    for name, c in claims.items():
        acc = name.endswith("magnitude") and "gap" not in name or name.endswith("_vs_pt") or name.endswith("random")
        scale, unit = (100.0, " pts") if acc else (1.0, "")
        note = f" — {c['note']}" if c.get("note") else ""
        if c.get("excluded"):
            note += f" (left out: seeds {', '.join(map(str, c['excluded']))})"
        tests = _tests(c.get("test"))
        lines.append(f"- {CLAIM_TEXT.get(name, name)}: {_diff(c, scale, unit)} ({tests + '; ' if tests else ''}"
                     f"{_detectable(c, scale, unit)}){note}")
    return lines


def _figures(summary: dict, save_figure: FigureSaver) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    spaces = [(s, p) for s, p in summary["spaces"].items() if p.get("magnitude_by_epoch")]
    if not spaces:
        return []
    out = []
    fig, axes = plt.subplots(2, len(spaces), figsize=(4.2 * len(spaces) + 0.6, 7.2), squeeze=False)
    for k, (space, part) in enumerate(spaces):
        ax = axes[0][k]
        epochs = sorted(int(e) for e in part["magnitude_by_epoch"])
        free = [part["magnitude_by_epoch"][str(e)]["param_free"] for e in epochs]
        ax.errorbar(epochs, [f["mean"] for f in free], yerr=[f["std"] for f in free], marker=MARKERS["magnitude"],
                    color=COLOURS["magnitude"], capsize=3, label=LABELS["magnitude"])
        for j, sel in enumerate(("pt", "pt_fixed")):
            row = part["selectors"].get(sel)
            if row:
                x = epochs[-1] * (1.04 + 0.04 * j)
                ax.errorbar([x], [row["param_free"]["mean"]], yerr=[row["param_free"]["std"]], marker=MARKERS[sel],
                            color=COLOURS[sel], capsize=3, ls="none", label=f"{LABELS[sel]} (at the end)")
        ax.set_ylim(-0.05, 1.05)
        ax.set_xlabel("supernet epoch")
        if k == 0:
            ax.set_ylabel("share of kept edges: " + " / ".join(PARAM_FREE))
        ax.set_title(f"{space}: parameter-free share", fontsize=10)
        ax = axes[1][k]
        sels = [s for s in ("magnitude", "pt", "pt_fixed") if part["selectors"].get(s)]
        per_seed = {s: part["selectors"][s].get("per_seed", {}) for s in sels}
        for s, sel in enumerate(sels):
            vals = [v for v in per_seed[sel].values() if v is not None]
            ax.scatter([s] * len(vals), [100 * v for v in vals], color=COLOURS[sel], marker=MARKERS[sel], alpha=0.7)
        seeds = sorted({seed for p in per_seed.values() for seed in p})
        for seed in seeds:
            ys = [per_seed[sel].get(seed) for sel in sels]
            xs = [i for i, y in enumerate(ys) if y is not None]
            ax.plot(xs, [100 * ys[i] for i in xs], color="0.7", lw=0.8, zorder=0)
        gt = part.get("gt")
        if gt:
            ax.axhline(100 * gt["table"][gt["best"]]["test"], color=COLOURS["optimum"], ls="--", lw=1,
                       label="best of the space (ground truth)")
            ax.axhline(100 * gt["random_test"], color=COLOURS["random"], ls=":", lw=1,
                       label="mean of the space (ground truth)")
        ax.set_xlim(-0.4, len(sels) - 0.6)
        ax.set_xticks(range(len(sels)), [LABELS[s].split(" (")[0].replace(", ", "\n") for s in sels], fontsize=8)
        if k == 0:
            ax.set_ylabel("stand-alone test accuracy (%)")
        ax.set_title(f"{space}: picks trained alone (one line per seed)", fontsize=10)
    handles, labels = [], []
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    fig.legend(handles, labels, loc="lower center", ncol=2, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.09, 1, 1))
    out.append(f"![parameter-free share along training, and the picks trained alone]({save_figure('picks', fig)})")
    plt.close(fig)
    return out


def render(summary: dict, save_figure: FigureSaver) -> str:
    out = [
        "Perturbation-based architecture selection (DARTS-PT, Wang et al., ICLR 2021) against the magnitude of α "
        "(DARTS) on supernets of **stacked cells** (3 cells; a single cell cannot show magnitude's drift), on "
        "scikit-learn's `load_digits` (8×8; one fixed 60/20/20 % train / validation / test split). Supernet weights "
        "train on the training split (SGD 0.025, momentum 0.9, cosine to 0.001, batches of 64) and α on the "
        "validation split (first-order DARTS; Adam at 3e-3, ten times DARTS's 3e-4 because an epoch of digits is "
        "17 steps); α starts at 1e-3·randn and stays there in the fixed-α supernets. Every cell shares one α per "
        "edge (per cell type in DARTS cells), as in DARTS and NAS-Bench-201. Magnitude keeps the largest α "
        "(DARTS's genotype: two inputs per DARTS node, never `none`). PT runs as the authors' code: the validation "
        "accuracy with each op masked, batches of 64 with batch statistics, a random edge per step (one normal "
        "and one reduction edge in DARTS cells, then topology), 5 tuning epochs between decisions with one "
        "persistent SGD at 0.0025 and α updated (DARTS+PT) or fixed. **Mechanism**: the share of parameter-free "
        "ops (`none`, `skip`, `noise`) among the kept edges. **Outcome**: the stand-alone test accuracy of each "
        "pick, trained from scratch with one recipe (SGD 0.025, cosine, on training + validation); discretised "
        "supernets are never compared. Where the space is enumerated, every architecture is trained alone on "
        "several training seeds (the ground truth), and a pick on supernet seed s is scored by every training "
        "seed: the interval of such a claim carries both spreads (supernet seeds × training seeds, a crossed "
        "design). Elsewhere every pick is retrained with one initial draw per supernet seed. Claims leave out "
        "only the runs still learning (the convergence gate below): mean [95 % t interval]: verdict, a "
        "Holm-adjusted verdict over the claims of the space, and the smallest difference the claim's own spread "
        "detects with 80 % power. An accuracy claim whose whole interval lies short of "
        f"{100 * summary.get('acc_sesoi', 0.005):g} points (the smallest difference that matters) is contradicted.",
        "",
    ]
    if summary.get("cpu_s"):
        out += [f"**Compute.** {summary['jobs']} jobs took {summary['cpu_s']:.0f} s of CPU time (their process "
                f"time, one thread each).", ""]
    if summary.get("gate"):
        out += [f"**Convergence gate.** A network (supernet, retrained pick or ground-truth run) has converged when "
                f"it fits its training data (training accuracy ≥ {summary.get('fit_at', 0.95):g}) or when "
                f"{summary['gate']['rule']}. Only runs still learning are left out.", ""]
    for space, part in summary["spaces"].items():
        if not part.get("supernets"):
            continue
        n_edges = len(part.get("edges", []))
        out.append(f"#### `{space}`: {SPACE_TEXT.get(space, space)}")
        out.append("")
        out.append(f"{n_edges} searchable edges ({', '.join(f'`{o}`' for o in part['ops'])}). Supernets: " + "; ".join(
            f"{v} α: {r['converged']}/{r['n']} converged or failed to learn (claims leave out the others), validation accuracy "
            f"{_ms_pct(r['val_acc'])} %"
            for v, r in part["supernets"].items()) + ".")
        out.append("")
        gt = part.get("gt")
        body = []
        for sel, row in part["selectors"].items():
            common = ", ".join(f"`{a}` ×{n}" for a, n in list(row["picks"].items())[:2])
            cells = [LABELS[sel], row["seeds"], f"{row['param_free']['mean']:.2f} ± {row['param_free']['std']:.2f}",
                     _ms_pct(row.get("gt_test") if gt else row.get("test"))]
            if gt:
                cells += [fmt_ms(row.get("gt_percentile"), 1), f"{row.get('optimum_hits', 0)}/{row['seeds']}"]
            body.append(cells + [common])
        header = ["selector", "seeds", "parameter-free share",
                  "stand-alone test acc. of the pick (%)" if gt else "retrained test acc. (%)"]
        if gt:
            header += ["ground-truth percentile", "picked the best or a tie"]
        out.append(markdown_table(header + ["most frequent picks"], body))
        out.append("")
        if part.get("magnitude_by_epoch"):
            out.append("Magnitude's parameter-free share along supernet training: " + ", ".join(
                f"epoch {e}: {v['param_free']['mean']:.2f}" for e, v in part["magnitude_by_epoch"].items()) + ".")
            out.append("")
        if gt:
            best = gt["best"]
            flagged = gt.get("unconverged_archs") or []
            out.append(f"Ground truth: all {gt['n_archs']} architectures trained alone with the retraining recipe on "
                       f"{gt['seeds']} training seeds ({gt['converged']}/{gt['runs']} runs converged, "
                       f"{gt.get('failed', 0)} failed to learn); edges in the "
                       f"order {', '.join(f'`{e}`' for e in part['edges'])}.")
            if best is not None:
                out.append(f"Best `{best}` {_pct(gt['table'][best]['test'])} %; tied with it: "
                           f"{', '.join(f'`{a}`' for a in gt['tied'])} ({gt['tie_rule']}). Mean of the space over "
                           f"all its {gt['n_archs']} architectures (what a random pick draws from): "
                           f"{_pct(gt['random_test'])} %.")
            if flagged:
                out.append("Still learning on some seed, so a pick of it is left out of the claims (it stays in the "
                           "space's mean): "
                           + ", ".join(f"`{a}` ({gt['table'][a]['converged']}/{gt['table'][a]['seeds']} runs converged, "
                                       f"{_pct(gt['table'][a]['test'])} %)" for a in flagged) + ".")
            out.append("")
            out.append(markdown_table(["architecture", "test acc. (%)", "per training seed (%)",
                                       "runs (conv. / failed / learning)"], [
                [f"`{a}`", f"{_pct(g['test'])} ± {_pct(g['test_std'])}",
                 ", ".join(_pct(v) for v in g["per_seed"].values()),
                 f"{g['converged']} / {g.get('failed', 0)} / {g.get('learning', g['seeds'] - g['converged'])}"]
                for a, g in gt["table"].items()]))
            out.append("")
        if part.get("claims"):
            out += _claims(part["claims"])
            out.append("")
    out += _figures(summary, save_figure)
    return "\n".join(out) + "\n"


SECTION = Section(
    name="search",
    title="Architecture selection on stacked cells: perturbation (DARTS-PT) vs α magnitude",
    plan=plan,
    summarize=summarize,
    render=render,
    quick_budget_s=140.0,
)

__all__ = ["SECTION", "render", "SEP"]
