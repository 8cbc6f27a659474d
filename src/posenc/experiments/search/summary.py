"""Summary of the ``search`` section: ground-truth lookups, percentiles, paired claims with tests."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence

from posenc.experiments.search._common import MIN_PAIRS, SEP, VARIANTS
from posenc.experiments.stats import NOT_CONFIRMED, mean_std, paired_difference


# ------------------------------------------------------------------ ground-truth lookups
def arch_key(choices: Sequence[str]) -> str:
    """``("skip", "conv3x3")`` -> ``"skip|conv3x3"`` (edge order of the space)."""
    return SEP.join(choices)


def percentile(value: float, population: Sequence[float]) -> float:
    """Mid-rank percentile of ``value`` among ``population`` (which contains it), in ``[0, 100]``.

    ``100 * (#below + (#equal - 1) / 2) / (N - 1)``: the best of the population is 100, the
    worst 0, and an architecture drawn uniformly at random has expected percentile exactly 50.
    """
    n = len(population)
    if n < 2:
        raise ValueError(f"population must hold at least two values, got {n}")
    below = sum(1 for p in population if p < value)
    equal = sum(1 for p in population if p == value)
    if equal == 0:
        raise ValueError("value must be one of the population")
    return 100.0 * (below + (equal - 1) / 2.0) / (n - 1)


def ground_truth(results: Mapping[str, dict], kind: str = "gt") -> dict[str, dict]:
    """Per architecture: mean test / validation accuracy over the ground-truth seeds.

    Args:
        results: every job result of the section (only those with ``result["kind"] == kind``
            are read); each holds ``{"seed", "archs": [{"arch", "test_acc", "val_acc",
            "train_acc", "converged"}]}``.

    Returns:
        ``{arch: {"test": mean, "val": mean, "test_std", "seeds", "converged", "percentile"}}``
        (percentile of the mean test accuracy among all architectures).
    """
    runs: dict[str, list[dict]] = {}
    for r in results.values():
        if r.get("kind") != kind:
            continue
        for a in r["archs"]:
            runs.setdefault(a["arch"], []).append(a)
    table = {}
    for arch, rs in runs.items():
        test = mean_std(a["test_acc"] for a in rs)
        table[arch] = {"test": test["mean"], "test_std": test["std"],
                       "val": mean_std(a["val_acc"] for a in rs)["mean"],
                       "train": mean_std(a["train_acc"] for a in rs)["mean"],
                       "seeds": len(rs), "converged": sum(bool(a["converged"]) for a in rs)}
    pop = [t["test"] for t in table.values()]
    for t in table.values():
        t["percentile"] = percentile(t["test"], pop) if len(pop) > 1 else None
    return table


# ------------------------------------------------------------------ significance
def significance(diffs: Sequence[float]) -> dict:
    """Two-sided p-values of paired differences: Student t (mean 0) and Wilcoxon signed-rank.

    ``None`` where the test is undefined (fewer than two differences, or all zero).
    """
    d = [float(v) for v in diffs if v is not None and math.isfinite(float(v))]
    out: dict = {"t_p": None, "wilcoxon_p": None, "n": len(d), "wins": sum(v > 0 for v in d),
                 "ties": sum(v == 0 for v in d), "losses": sum(v < 0 for v in d)}
    if len(d) < 2 or all(v == 0 for v in d):
        return out
    from scipy import stats

    if statistics.stdev(d) > 0:
        out["t_p"] = float(stats.ttest_1samp(d, 0.0).pvalue)
    elif statistics.fmean(d) != 0:
        out["t_p"] = 0.0
    if any(v != 0 for v in d):
        out["wilcoxon_p"] = float(stats.wilcoxon(d, zero_method="wilcox").pvalue)
    return out


def compare(method: Mapping[object, float | None], baseline: Mapping[object, float | None], *,
            direction: str = "greater", margin: float = 0.0) -> dict:
    """:func:`posenc.experiments.stats.paired_difference` plus :func:`significance` of its differences.

    With fewer than :data:`MIN_PAIRS` seeds the verdict is "not confirmed at this scale".
    """
    diff = paired_difference(method, baseline, direction=direction, margin=margin)
    diff["test"] = significance(diff["diffs"])
    if diff["n"] < MIN_PAIRS and diff["verdict"] != NOT_CONFIRMED:
        # two identical picks give a zero-width interval: too few seeds to read a verdict from
        diff["verdict"], diff["holds"] = NOT_CONFIRMED, False
        diff["note"] = f"fewer than {MIN_PAIRS} seeds"
    return diff


# ------------------------------------------------------------------ summary of the micro space
#: selector -> (supernet variant, selection method)
SELECTORS = {"magnitude": ("darts", "magnitude"), "pt": ("darts", "pt"), "pt_fixed": ("fixed", "pt")}
#: ops without parameters that magnitude selection is said to drift towards
PARAM_FREE = ("none", "skip")


def _lookup(gt: Mapping[str, dict], arch: str | None, field: str = "test") -> float | None:
    row = gt.get(arch) if arch is not None else None
    return None if row is None else row[field]


def _share(arch: str, ops: Sequence[str]) -> float:
    parts = arch.split(SEP)
    return sum(p in ops for p in parts) / len(parts)


def selections(results: Mapping[str, dict]) -> dict[str, dict[int, dict[int, str]]]:
    """``{selector: {seed: {epoch: arch}}}`` from the supernet jobs."""
    out: dict[str, dict[int, dict[int, str]]] = {s: {} for s in SELECTORS}
    for r in results.values():
        if r.get("kind") != "super":
            continue
        for sel, (variant, method) in SELECTORS.items():
            if r["variant"] != variant:
                continue
            out[sel][r["seed"]] = {int(c["epoch"]): c[method] for c in r["checkpoints"]}
    return out


def summarize_micro(results: Mapping[str, dict]) -> dict:
    """Ground truth, the selections' ground-truth accuracy and percentile, the claims."""
    gt = ground_truth(results)
    gt_runs = [r for r in results.values() if r.get("kind") == "gt"]
    supers = [r for r in results.values() if r.get("kind") == "super"]
    out: dict = {"gt": {}, "selectors": {}, "claims": {}, "edges": {}, "supernets": {}}
    if not gt:
        return out
    tests = [row["test"] for row in gt.values()]
    best = max(gt, key=lambda a: gt[a]["test"])
    worst = min(gt, key=lambda a: gt[a]["test"])
    ranked = sorted(gt, key=lambda a: -gt[a]["test"])
    space = next(iter(gt_runs))["space"]
    random_test = statistics.fmean(tests)
    out["gt"] = {
        "n_archs": len(gt), "space": space,
        "seeds": sorted({r["seed"] for r in gt_runs}),
        "runs": sum(row["seeds"] for row in gt.values()),
        "converged": sum(row["converged"] for row in gt.values()),
        "best": {"arch": best, **gt[best]}, "worst": {"arch": worst, **gt[worst]},
        "random_test": random_test, "tests": sorted(tests),
        "top": [{"arch": a, **gt[a]} for a in ranked[:8]],
        "rank": {a: i + 1 for i, a in enumerate(ranked)},
        "val_test_spearman": _spearman([gt[a]["val"] for a in gt], [gt[a]["test"] for a in gt]),
        "seed_noise": mean_std(row["test_std"] for row in gt.values() if row["seeds"] > 1),
    }
    # the op of each edge in the optimum, and each op's marginal mean over the space
    edges = space["edges"]
    best_ops = best.split(SEP)
    marginal = {}
    for i, e in enumerate(edges):
        marginal[e] = {op: statistics.fmean(gt[a]["test"] for a in gt if a.split(SEP)[i] == op)
                       for op in space["ops"]}
    out["edges"] = {"best_ops": dict(zip(edges, best_ops)), "marginal": marginal,
                    "marginal_best": {e: max(m, key=m.get) for e, m in marginal.items()}}
    sels = selections(results)
    final: dict[str, dict[int, dict]] = {}
    for sel, by_seed in sels.items():
        if not by_seed:
            continue
        epochs = sorted({e for ch in by_seed.values() for e in ch})
        last = {s: ch[max(ch)] for s, ch in by_seed.items()}
        final[sel] = {s: {"arch": a, "test": _lookup(gt, a), "percentile": _lookup(gt, a, "percentile")}
                      for s, a in last.items()}
        by_epoch = {}
        for e in epochs:
            archs = [ch[e] for ch in by_seed.values() if e in ch]
            by_epoch[str(e)] = {
                "test": mean_std(_lookup(gt, a) for a in archs),
                "percentile": mean_std(_lookup(gt, a, "percentile") for a in archs),
                "param_free": mean_std(_share(a, PARAM_FREE) for a in archs),
                "op_share": {op: statistics.fmean(_share(a, (op,)) for a in archs) for op in space["ops"]},
            }
        agree = {}
        for i, e in enumerate(edges):
            picks = [a.split(SEP)[i] for a in last.values()]
            agree[e] = {"optimum": sum(p == best_ops[i] for p in picks) / len(picks),
                        "marginal": sum(p == out["edges"]["marginal_best"][e] for p in picks) / len(picks)}
        out["selectors"][sel] = {
            "seeds": len(last),
            "test": mean_std(v["test"] for v in final[sel].values()),
            "percentile": mean_std(v["percentile"] for v in final[sel].values()),
            "optimum_hits": sum(v["arch"] == best for v in final[sel].values()),
            "per_seed": {str(s): v for s, v in sorted(final[sel].items())},
            "by_epoch": by_epoch, "agreement": agree,
        }
    for variant in ("darts", "fixed"):
        rs = [r for r in supers if r["variant"] == variant]
        if rs:
            out["supernets"][variant] = {
                "n": len(rs), "converged": sum(bool(r["converged"]) for r in rs),
                "val_acc": mean_std(r["val_acc"] for r in rs),
                "train_acc": mean_std(r["train_acc"] for r in rs),
            }
    out["claims"] = micro_claims(final, sels, random_test)
    # the same comparison on the selections taken earlier in supernet training
    if sels.get("magnitude") and sels.get("pt"):
        epochs = sorted({e for ch in sels["magnitude"].values() for e in ch})
        for e in epochs[:-1]:
            pt = {s: _lookup(gt, ch[e]) for s, ch in sels["pt"].items() if e in ch}
            mag = {s: _lookup(gt, ch[e]) for s, ch in sels["magnitude"].items() if e in ch}
            c = compare(pt, mag)
            c["epoch"] = e
            out["claims"][f"pt_beats_magnitude_at_epoch_{e}"] = c
    return out


def _spearman(a: Sequence[float], b: Sequence[float]) -> float | None:
    if len(a) < 3:
        return None
    from scipy.stats import spearmanr

    rho = spearmanr(a, b).statistic
    return None if rho is None or not math.isfinite(float(rho)) else float(rho)


def micro_claims(final: Mapping[str, Mapping[int, dict]], sels: Mapping[str, Mapping[int, Mapping[int, str]]],
                 random_test: float) -> dict:
    """The paper's claims on the micro space, each a paired per-seed difference with a test.

    * ``pt_beats_magnitude``, ``pt_fixed_beats_magnitude``: ground-truth test accuracy of
      the selected architecture, method − magnitude, per supernet seed;
    * ``pt_fixed_vs_pt``: PT with α fixed − PT with α trained (the paper finds fixed α
      better on NAS-Bench-201);
    * ``beats_random``: each selector's accuracy − the mean over the space (the expected
      accuracy of a uniformly random architecture);
    * ``magnitude_drifts`` / ``pt_stable``: the share of ``none``/``skip`` in magnitude's
      (PT's) selection at the last checkpoint − at the first; ``drift_gap``: magnitude's
      drift − PT's drift on the same supernet.
    """
    def metric(sel: str, field: str = "test") -> dict[int, float | None]:
        return {s: v[field] for s, v in final.get(sel, {}).items()}

    claims: dict = {}
    if "magnitude" in final:
        for sel in ("pt", "pt_fixed"):
            if sel in final:
                c = compare(metric(sel), metric("magnitude"))
                c["percentile"] = compare(metric(sel, "percentile"), metric("magnitude", "percentile"))
                claims[f"{sel}_beats_magnitude"] = c
    if "pt" in final and "pt_fixed" in final:
        c = compare(metric("pt_fixed"), metric("pt"))
        c["percentile"] = compare(metric("pt_fixed", "percentile"), metric("pt", "percentile"))
        claims["pt_fixed_vs_pt"] = c
    for sel in final:
        m = metric(sel)
        claims[f"{sel}_beats_random"] = compare(m, {s: random_test for s in m})

    def drift(sel: str) -> dict[int, float]:
        """Per seed: share of none/skip at the last checkpoint − at the first."""
        return {s: _share(ch[max(ch)], PARAM_FREE) - _share(ch[min(ch)], PARAM_FREE)
                for s, ch in sels.get(sel, {}).items() if len(ch) > 1}

    if any(len(ch) > 1 for ch in sels.get("magnitude", {}).values()):
        d_mag, d_pt = drift("magnitude"), drift("pt")
        claims["magnitude_drifts"] = compare(d_mag, {s: 0.0 for s in d_mag})
        if d_pt:
            claims["pt_stable"] = compare(d_pt, {s: 0.0 for s in d_pt}, direction="equal", margin=1.0 / 6.0)
            claims["drift_gap"] = compare(d_mag, d_pt)
    return claims


# ------------------------------------------------------------------ summary of the PE space
def summarize_pe(results: Mapping[str, dict]) -> dict:
    """Ground truth of the positional-encoding space and where the searches land in it."""
    gt = ground_truth(results, kind="pe_gt")
    runs = [r for r in results.values() if r.get("kind") == "pe_search"]
    out: dict = {"gt": {}, "selectors": {}, "claims": {}, "supernets": {}}
    if not gt:
        return out
    ranked = sorted(gt, key=lambda a: -gt[a]["test"])
    best = ranked[0]
    random_test = statistics.fmean(row["test"] for row in gt.values())
    out["gt"] = {"table": {a: gt[a] for a in ranked}, "best": best, "random_test": random_test,
                 "n_archs": len(gt), "runs": sum(row["seeds"] for row in gt.values()),
                 "converged": sum(row["converged"] for row in gt.values())}
    final: dict[str, dict[int, dict]] = {}
    for sel, (variant, method) in SELECTORS.items():
        picks = {r["seed"]: r[method] for r in runs if r["variant"] == variant and method in r}
        if not picks:
            continue
        final[sel] = {s: {"arch": a, "test": _lookup(gt, a), "percentile": _lookup(gt, a, "percentile")}
                      for s, a in sorted(picks.items())}
        counts: dict[str, int] = {}
        for a in picks.values():
            counts[a] = counts.get(a, 0) + 1
        out["selectors"][sel] = {
            "seeds": len(picks), "picks": counts,
            "test": mean_std(v["test"] for v in final[sel].values()),
            "percentile": mean_std(v["percentile"] for v in final[sel].values()),
            "optimum_hits": sum(a == best for a in picks.values()),
            "encoding_hits": sum(a.split(SEP)[0] == best.split(SEP)[0] for a in picks.values()),
            "per_seed": {str(s): v for s, v in final[sel].items()},
        }
    for variant in VARIANTS:
        rs = [r for r in runs if r["variant"] == variant]
        if rs:
            out["supernets"][variant] = {"n": len(rs), "converged": sum(bool(r["converged"]) for r in rs),
                                         "val_acc": mean_std(r["val_acc"] for r in rs),
                                         "train_acc": mean_std(r["train_acc"] for r in rs)}
    claims: dict = {}
    if "magnitude" in final:
        for sel in ("pt", "pt_fixed"):
            if sel in final:
                claims[f"{sel}_beats_magnitude"] = compare({s: v["test"] for s, v in final[sel].items()},
                                                           {s: v["test"] for s, v in final["magnitude"].items()})
    for sel, per in final.items():
        m = {s: v["test"] for s, v in per.items()}
        claims[f"{sel}_beats_random"] = compare(m, {s: random_test for s in m})
    out["claims"] = claims
    return out


def summarize(results: Mapping[str, dict]) -> dict:
    """The section's summary: the micro space and the positional-encoding space.

    ``claims`` gathers both spaces' claims under ``micro.<name>`` / ``pe.<name>`` (the
    CLI's one-line verdicts and the README table read that key, as in every section).
    """
    micro, pe = summarize_micro(results), summarize_pe(results)
    claims = {f"{space}.{k}": v for space, part in (("micro", micro), ("pe", pe))
              for k, v in part.get("claims", {}).items()}
    return {"micro": micro, "pe": pe, "claims": claims}
