"""Report of the ``search`` section: DARTS-PT against magnitude selection on ground truths we train."""

from __future__ import annotations

import math

from posenc.experiments.search import PARAM_FREE, SEP, plan, summarize
from posenc.report.section import FigureSaver, Section
from posenc.report.tables import fmt_diff, fmt_ms, markdown_table

LABELS = {"magnitude": "magnitude (DARTS)", "pt": "PT, α trained (DARTS+PT)", "pt_fixed": "PT, α fixed"}
COLOURS = {"magnitude": "tab:red", "pt": "tab:blue", "pt_fixed": "tab:green", "random": "0.5", "optimum": "black"}
MARKERS = {"magnitude": "v", "pt": "o", "pt_fixed": "s"}
STYLES = {"magnitude": "-", "pt": "--", "pt_fixed": ":"}
#: small horizontal offsets so that coinciding selectors stay visible
SHIFT = {"magnitude": -0.12, "pt": 0.0, "pt_fixed": 0.12}
CLAIM_TEXT = {
    "pt_beats_magnitude": "PT (α trained) selects better architectures than magnitude on the same supernet",
    "pt_fixed_beats_magnitude": "PT with α fixed selects better architectures than magnitude",
    "pt_fixed_vs_pt": "PT with α fixed ≥ PT with α trained (the paper's NAS-Bench-201 finding)",
    "magnitude_beats_random": "magnitude beats a random architecture",
    "pt_beats_random": "PT (α trained) beats a random architecture",
    "pt_fixed_beats_random": "PT (α fixed) beats a random architecture",
    "magnitude_drifts": "magnitude drifts towards none/skip as the supernet trains (share at the last "
                        "checkpoint − at the first)",
    "pt_stable": "PT's share of none/skip stays put (equivalence, margin ±1/6)",
    "drift_gap": "magnitude drifts more than PT on the same supernet",
}


def _pct(v: float | None, digits: int = 1) -> str:
    return "n/a" if v is None else f"{100 * v:.{digits}f}"


def _ms_pct(stat: dict | None) -> str:
    if not stat or stat.get("mean") is None:
        return "n/a"
    return f"{100 * stat['mean']:.1f} ± {100 * stat['std']:.1f}"


def _p(test: dict | None) -> str:
    if not test:
        return ""
    parts = [f"{test['wins']}/{test['ties']}/{test['losses']} wins/ties/losses"]
    for k, name in (("t_p", "t-test"), ("wilcoxon_p", "Wilcoxon")):
        if test.get(k) is not None:
            parts.append(f"{name} p = {test[k]:.3g}")
    return "; ".join(parts)


def _legend(fig, axes, ncol: int = 5) -> None:
    handles, labels = [], []
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    fig.legend(handles, labels, loc="lower center", bbox_to_anchor=(0.5, -0.02), ncol=min(ncol, len(labels)),
               fontsize=8, frameon=False)


def _figures(summary: dict, save_figure: FigureSaver) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = []
    micro, pe = summary["micro"], summary["pe"]
    panels = [(name, part) for name, part in (("micro", micro), ("pe", pe)) if part.get("gt")]
    if panels:
        fig, axes = plt.subplots(1, len(panels), figsize=(5.6 * len(panels), 4.0), squeeze=False)
        for ax, (name, part) in zip(axes[0], panels):
            if name == "micro":
                tests = sorted(part["gt"]["tests"], reverse=True)
                rank_of = part["gt"]["rank"]
                title = f"micro space: all {len(tests)} architectures"
            else:
                table = part["gt"]["table"]
                tests = [row["test"] for row in table.values()]
                rank_of = {a: i + 1 for i, a in enumerate(table)}
                title = f"PE space: all {len(tests)} architectures"
            ranks = list(range(1, len(tests) + 1))
            ax.plot(ranks, [100 * t for t in tests], "-", color="0.75", lw=1.5, label="ground truth (rank order)")
            ax.axhline(100 * part["gt"]["random_test"], color=COLOURS["random"], ls=":", lw=1,
                       label="random architecture (mean)")
            for sel, row in part["selectors"].items():
                counts: dict[int, int] = {}
                for v in row["per_seed"].values():
                    r = rank_of.get(v["arch"])
                    if r is not None:
                        counts[r] = counts.get(r, 0) + 1
                xs = [r * (1 + SHIFT[sel]) for r in counts]  # side by side on the log axis
                ys = [100 * tests[r - 1] for r in counts]
                ax.scatter(xs, ys, s=[30 * (1 + math.log2(c)) for c in counts.values()], marker=MARKERS[sel],
                           color=COLOURS[sel], alpha=0.75, label=f"picked by {LABELS[sel]} (area grows with seeds)",
                           zorder=3)
            if name == "micro":
                ax.set_xscale("log")
                ticks = [t for t in (1, 2, 5, 10, 20, 50, 100, 200, 500) if t <= len(tests)]
                ax.set_xticks(ticks, [str(t) for t in ticks])
                ax.minorticks_off()
            ax.set_xlabel("ground-truth rank (1 = best test accuracy)")
            ax.set_ylabel("stand-alone test accuracy (%)")
            ax.set_title(title, fontsize=10)
            if name == "pe":
                ax.set_xticks(ranks, [a.replace(SEP + "plain", "").replace(SEP, "\n") for a in part["gt"]["table"]],
                              fontsize=6, rotation=90 if len(ranks) > 6 else 0)
        _legend(fig, axes[0], ncol=3 if len(panels) > 1 else 2)
        fig.tight_layout(rect=(0, 0.16 if len(panels) > 1 else 0.24, 1, 1))
        out.append(f"![where the selections land]({save_figure('picks', fig)})")
    sels = {s: r for s, r in micro.get("selectors", {}).items() if len(r["by_epoch"]) > 1}
    if sels:
        fig, axes = plt.subplots(1, 3, figsize=(14.5, 3.8), squeeze=False)
        ax_acc, ax_free, ax_edge = axes[0]
        for sel, row in sels.items():
            epochs = sorted(int(e) for e in row["by_epoch"])
            acc = [row["by_epoch"][str(e)]["test"] for e in epochs]
            free = [row["by_epoch"][str(e)]["param_free"] for e in epochs]
            xs = [e * (1 + SHIFT[sel] / 2) for e in epochs]  # shifted on the log axis
            ax_acc.errorbar(xs, [100 * a["mean"] for a in acc], yerr=[100 * a["std"] for a in acc], ls=STYLES[sel],
                            marker=MARKERS[sel], color=COLOURS[sel], capsize=3, label=LABELS[sel])
            ax_free.errorbar(xs, [f["mean"] for f in free], yerr=[f["std"] for f in free], ls=STYLES[sel],
                             marker=MARKERS[sel], color=COLOURS[sel], capsize=3, label=LABELS[sel])
        gt = micro["gt"]
        ax_acc.axhline(100 * gt["best"]["test"], color=COLOURS["optimum"], ls="--", lw=1, label="optimum")
        ax_acc.axhline(100 * gt["random_test"], color=COLOURS["random"], ls=":", lw=1,
                       label="random architecture (mean)")
        for ax in (ax_acc, ax_free):
            ax.set_xscale("log")
            ax.set_xticks(epochs, [str(e) for e in epochs])
            ax.minorticks_off()
        ax_acc.set_xlabel("supernet epoch of the selection")
        ax_acc.set_ylabel("stand-alone test accuracy of the pick (%)")
        ax_acc.set_title("selected architecture vs supernet epoch", fontsize=10)
        ax_free.set_xlabel("supernet epoch of the selection")
        ax_free.set_ylabel("share of edges set to " + " / ".join(PARAM_FREE))
        ax_free.set_ylim(-0.05, 1.05)
        ax_free.set_title("drift towards parameter-free ops", fontsize=10)
        edges = list(micro["edges"]["best_ops"])
        width = 0.8 / max(1, len(micro["selectors"]))
        for k, (sel, row) in enumerate(micro["selectors"].items()):
            xs = [i + (k - (len(micro["selectors"]) - 1) / 2) * width for i in range(len(edges))]
            ax_edge.bar(xs, [row["agreement"][e]["marginal"] for e in edges], width, color=COLOURS[sel],
                        label=LABELS[sel])
        ax_edge.set_xticks(range(len(edges)),
                           [f"{e}\n(best: {micro['edges']['marginal_best'][e]})" for e in edges], fontsize=8)
        ax_edge.set_ylim(0, 1.05)
        ax_edge.set_ylabel("share of supernet seeds")
        ax_edge.set_title("per edge: pick = best op (mean over the space)", fontsize=10)
        _legend(fig, axes[0])
        fig.tight_layout(rect=(0, 0.08, 1, 1))
        out.append(f"![selections against supernet epoch, and per edge]({save_figure('epochs', fig)})")
    return out


def _claims(claims: dict) -> list[str]:
    lines = []
    for name, c in claims.items():
        note = f" — {c['note']}" if c.get("note") else ""
        text = CLAIM_TEXT.get(name, name)
        if "epoch" in c and name.startswith("pt_beats_magnitude_at_epoch_"):
            text = f"PT (α trained) − magnitude on the selections taken at supernet epoch {c['epoch']}"
        lines.append(f"- {text}: {fmt_diff(c)}"
                     + (f" ({_p(c.get('test'))})" if c.get("test") else "") + note)
        if c.get("percentile"):
            lines.append(f"  - in ground-truth percentile points: {fmt_diff(c['percentile'], 1)}")
    return lines


def render(summary: dict, save_figure: FigureSaver) -> str:
    micro, pe = summary["micro"], summary["pe"]
    out = [
        "Perturbation-based architecture selection (DARTS-PT, Wang et al., ICLR 2021) against the magnitude "
        "of α (DARTS), on ground truths we train ourselves (no NAS benchmark can be downloaded). Data: "
        "scikit-learn's `load_digits` (8×8), one fixed train / validation / test split (60/20/20 %). Supernets "
        "train their weights on the training split and α (first-order DARTS) on the validation split; "
        "selections are scored by the **stand-alone test accuracy** of the architecture they pick (mean over "
        "the ground-truth seeds) and its **percentile** in the space (100 = best, a random architecture = 50 "
        "in expectation). PT masks each op of an edge (weight 0, no renormalisation) and keeps the one whose "
        "removal raises the validation loss most, edges in a random order per seed, ties broken at random, "
        "measured in eval mode with batch statistics (BatchNorm keeps no running statistics), fine-tuning the "
        "weights (α frozen) for one epoch after each decision. Supernet training: weights by SGD (momentum 0.9, "
        "lr 0.05, cosine), α by Adam at lr 3e-3 — ten times DARTS's default, because our runs are 10–20 epochs "
        "of ~17 steps; α fixed keeps it uniform. Stand-alone networks: Adam, lr 0.02, cosine, 10 (quick) or "
        "15 (full) epochs. Differences are paired per supernet seed: mean [95% t interval] (n), "
        "the verdict read from the interval, plus a t-test and a Wilcoxon signed-rank test.",
        "",
    ]
    gt = micro.get("gt")
    if gt:
        space = gt["space"]
        rho = "n/a" if gt["val_test_spearman"] is None else f"{gt['val_test_spearman']:.2f}"
        out += [
            f"**Micro space**: a NAS-Bench-201 cell with {len(space['edges'])} edges "
            f"({', '.join(space['edges'])}) × {{{', '.join(space['ops'])}}} = {gt['n_archs']} architectures "
            f"(stem conv → cell of {space['channels']} channels → 2×2 average pool → linear), each trained alone "
            f"on {len(gt['seeds'])} seed(s): {gt['converged']}/{gt['runs']} runs converged (training accuracy "
            f"≥ 0.95 or a flat loss curve). Optimum `{gt['best']['arch']}` {_pct(gt['best']['test'])} %, "
            f"worst `{gt['worst']['arch']}` {_pct(gt['worst']['test'])} %, mean (random architecture) "
            f"{_pct(gt['random_test'])} %; seed-to-seed std of an architecture {_ms_pct(gt['seed_noise'])} %; "
            f"Spearman ρ(validation, test) over architectures = {rho}.",
            "",
        ]
        sup = micro.get("supernets", {})
        if sup:
            out.append("Supernets: " + "; ".join(
                f"{v} α: {r['converged']}/{r['n']} converged, validation accuracy {_ms_pct(r['val_acc'])} %"
                for v, r in sup.items()) + ".")
            out.append("")
        body = []
        for sel, row in micro["selectors"].items():
            picks = {}
            for v in row["per_seed"].values():
                picks[v["arch"]] = picks.get(v["arch"], 0) + 1
            common = ", ".join(f"`{a}` ×{n}" for a, n in sorted(picks.items(), key=lambda kv: -kv[1])[:3])
            body.append([LABELS[sel], row["seeds"], _ms_pct(row["test"]), fmt_ms(row["percentile"], 1),
                         f"{row['optimum_hits']}/{row['seeds']}", common])
        body.append(["random architecture", "–", _pct(gt["random_test"]), "50.0", f"1/{gt['n_archs']} (expected)", "–"])
        body.append(["optimum", "–", _pct(gt["best"]["test"]), "100.0", "–", f"`{gt['best']['arch']}`"])
        out.append(markdown_table(["selector (last checkpoint)", "supernet seeds", "test acc. of pick (%)",
                                   "percentile", "picked the optimum", "most frequent picks"], body))
        out.append("")
    if gt and micro.get("selectors"):
        edges = micro["edges"]
        sels = list(micro["selectors"])
        body = [[f"`{e}`", f"`{edges['best_ops'][e]}`", f"`{edges['marginal_best'][e]}`"]
                + [f"{100 * micro['selectors'][s]['agreement'][e]['optimum']:.0f} % / "
                   f"{100 * micro['selectors'][s]['agreement'][e]['marginal']:.0f} %" for s in sels]
                for e in edges["best_ops"]]
        out.append("Per edge (the paper's Fig. 1 question): the op of the optimum, the op with the best mean "
                   "accuracy over all architectures (marginal), and how often each selector picks the optimum's "
                   "op / the marginal best op (last checkpoint, share of supernet seeds). Near the top the "
                   "ranking is within seed noise, so the marginal best op is the steadier target.")
        out.append("")
        out.append(markdown_table(["edge", "optimum's op", "marginal best op", *[LABELS[s] for s in sels]], body))
        out.append("")
    figs = _figures(summary, save_figure)
    out += figs[1:] if len(figs) > 1 else []
    if micro.get("claims"):
        out += ["", "**Claims on the micro space** (paired per supernet seed, test accuracy as a fraction):", ""]
        out += _claims(micro["claims"])
        out.append("")
    pgt = pe.get("gt")
    if pgt:
        out += [
            "**Positional-encoding search** (`posenc.search.PESearchNet`: a 2-block ViT on the 8×8 digits "
            "with 2×2 patches, i.e. a 4×4 grid of tokens; the supernet mixes the input encodings, each "
            "RMS-normalised, and per block the attention position terms; no anchor paper has this space). "
            f"Ground truth: each of the {pgt['n_archs']} architectures trained alone "
            f"({pgt['converged']}/{pgt['runs']} runs converged); best `{pgt['best']}`.",
            "",
        ]
        body = [[f"`{a}`", _pct(r["test"]), r["seeds"], f"{r['converged']}/{r['seeds']}"]
                for a, r in pgt["table"].items()]
        out.append(markdown_table(["architecture (encoding | attention per block)", "test acc. (%)", "seeds",
                                   "converged"], body))
        out.append("")
        if pe.get("supernets"):
            out.append("PE supernets: " + "; ".join(
                f"{v} α: {r['converged']}/{r['n']} converged, validation accuracy {_ms_pct(r['val_acc'])} %"
                for v, r in pe["supernets"].items()) + ".")
            out.append("")
        body = [[LABELS[s], r["seeds"], _ms_pct(r["test"]), f"{r['optimum_hits']}/{r['seeds']}",
                 f"{r['encoding_hits']}/{r['seeds']}",
                 ", ".join(f"`{a}` ×{n}" for a, n in sorted(r["picks"].items(), key=lambda kv: -kv[1]))]
                for s, r in pe["selectors"].items()]
        if body:
            out.append(markdown_table(["selector", "seeds", "test acc. of pick (%)", "picked the optimum",
                                       "picked the best encoding", "picks"], body))
            out.append("")
        if pe.get("claims"):
            out += ["Claims on the PE space (paired per seed):", ""]
            out += _claims(pe["claims"])
            out.append("")
    if figs:
        out.append(figs[0])
    return "\n".join(out) + "\n"


SECTION = Section(
    name="search",
    title="Architecture selection: perturbation (DARTS-PT) vs α magnitude, on trained ground truths",
    plan=plan,
    summarize=summarize,
    render=render,
    quick_budget_s=80.0,
)
