"""Summary of the ``search`` section: the mechanism and outcome claims of DARTS-PT, paired per
supernet seed, with tests and the smallest difference the seeds can detect."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence

from posenc.experiments.search._common import MIN_PAIRS, PRUNED, SEP
from posenc.experiments.stats import NOT_CONFIRMED, mean_std, paired_difference

#: ops without parameters that magnitude selection is said to drift towards
PARAM_FREE = ("none", "skip", "noise")
#: selector -> (supernet variant, pick)
SELECTORS = {"magnitude": ("darts", "magnitude"), "pt": ("darts", "pt"), "pt_fixed": ("fixed", "pt_fixed")}
#: the paired skip-share difference of a pilot run made before this section existed (3 stacked DARTS-like cells of
#: {skip, sep_conv_3x3}, 50 epochs, 4 seeds): mean +0.167, 95 % interval [+0.03, +0.30]
PILOT = {"mean": 0.167, "low": 0.03, "high": 0.30, "n": 4}


# ------------------------------------------------------------------ statistics
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
    out["wilcoxon_p"] = float(stats.wilcoxon(d, zero_method="wilcox").pvalue)
    return out


def detectable(sd: float | None, n: int, *, level: float = 0.95, power: float = 0.8) -> float | None:
    """The smallest true mean difference that ``n`` paired seeds detect with probability
    ``power`` (two-sided test at ``1 - level``), for differences of standard deviation ``sd``:
    ``(t_{(1+level)/2, n-1} + t_{power, n-1}) * sd / sqrt(n)``. ``None`` for ``n < 2``."""
    if n < 2 or sd is None or not math.isfinite(sd):
        return None
    from scipy.stats import t

    return float((t.ppf(0.5 + level / 2, n - 1) + t.ppf(power, n - 1)) * sd / math.sqrt(n))


def seeds_for(effect: float, sd: float, *, level: float = 0.95, power: float = 0.8, most: int = 200) -> int | None:
    """The fewest paired seeds whose :func:`detectable` difference is at most ``effect``."""
    if effect <= 0 or sd < 0:
        raise ValueError(f"effect must be > 0 and sd >= 0, got effect={effect}, sd={sd}")
    for n in range(2, most + 1):
        d = detectable(sd, n, level=level, power=power)
        if d is not None and d <= effect:
            return n
    return None


def compare(method: Mapping[object, float | None], baseline: Mapping[object, float | None], *,
            direction: str = "greater", margin: float = 0.0) -> dict:
    """:func:`posenc.experiments.stats.paired_difference`, :func:`significance` of its
    differences, and the smallest difference the seeds detect (``detectable``, from the
    differences' spread; ``sd`` is that spread).

    With fewer than :data:`MIN_PAIRS` seeds the verdict is "not confirmed at this scale".
    """
    diff = paired_difference(method, baseline, direction=direction, margin=margin)
    diff["test"] = significance(diff["diffs"])
    diff["sd"] = statistics.stdev(diff["diffs"]) if diff["n"] > 1 else None
    diff["detectable"] = detectable(diff["sd"], diff["n"])
    if diff["n"] < MIN_PAIRS and diff["verdict"] != NOT_CONFIRMED:
        # two identical picks give a zero-width interval: too few seeds to read a verdict from
        diff["verdict"], diff["holds"] = NOT_CONFIRMED, False
        diff["note"] = f"fewer than {MIN_PAIRS} seeds"
    return diff


def pilot_design(n: int) -> dict:
    """What ``n`` paired seeds can detect if the share differences spread as in the pilot:
    the pilot's sd (from its interval), the smallest detectable difference, and the interval
    an effect of the pilot's size would get."""
    from scipy.stats import t

    sd = (PILOT["high"] - PILOT["low"]) / 2 / float(t.ppf(0.975, PILOT["n"] - 1)) * math.sqrt(PILOT["n"])
    half = float(t.ppf(0.975, n - 1)) * sd / math.sqrt(n) if n > 1 else math.inf
    return {"pilot_sd": sd, "n": n, "detectable": detectable(sd, n), "half_width": half,
            "pilot_would_hold": PILOT["mean"] - half > 0, "seeds_needed": seeds_for(PILOT["mean"], sd)}


# ------------------------------------------------------------------ ground truth
def _share(arch: str, ops: Sequence[str] = PARAM_FREE) -> float:
    kept = [p for p in arch.split(SEP) if p != PRUNED]
    return sum(p in ops for p in kept) / len(kept) if kept else 0.0


def ground_truth(results: Mapping[str, dict], space: str) -> dict[str, dict]:
    """Per architecture of ``space``: mean stand-alone test accuracy over the ground-truth
    seeds, its spread, convergence and percentile."""
    runs: dict[str, list[dict]] = {}
    for r in results.values():
        if r.get("kind") == "gt" and r.get("space") == space:
            for a in r["archs"]:
                runs.setdefault(a["arch"], []).append(a)
    table = {}
    for arch, rs in runs.items():
        test = mean_std(a["test_acc"] for a in rs)
        table[arch] = {"test": test["mean"], "test_std": test["std"], "seeds": len(rs),
                       "converged": sum(bool(a["converged"]) for a in rs)}
    pop = [t["test"] for t in table.values()]
    for t in table.values():
        t["percentile"] = percentile(t["test"], pop) if len(pop) > 1 else None
    return table


# ------------------------------------------------------------------ one space
def summarize_space(results: Mapping[str, dict], space: str) -> dict:
    """Supernets, picks, claims (and the ground truth where there is one) of one space."""
    supers = [r for r in results.values() if r.get("kind") == "super" and r.get("space") == space]
    out: dict = {"supernets": {}, "selectors": {}, "magnitude_by_epoch": {}, "claims": {}, "gt": {}}
    if not supers:
        return out
    out["edges"] = supers[0]["edges"]
    out["ops"] = sorted({o for r in supers for ops in r["ops"].values() for o in ops})
    for variant in ("darts", "fixed"):
        rs = [r for r in supers if r["variant"] == variant]
        if rs:
            out["supernets"][variant] = {"n": len(rs), "converged": sum(bool(r["converged"]) for r in rs),
                                         "val_acc": mean_std(r["val_acc"] for r in rs),
                                         "train_acc": mean_std(r["train_acc"] for r in rs)}
    picks: dict[str, dict[int, str]] = {s: {} for s in SELECTORS}
    tests: dict[str, dict[int, float | None]] = {s: {} for s in SELECTORS}
    for r in supers:
        for sel, (variant, key) in SELECTORS.items():
            if r["variant"] == variant and key in r["picks"]:
                picks[sel][r["seed"]] = r["picks"][key]
                re = r["retrained"].get(key)
                tests[sel][r["seed"]] = None if re is None else re["test_acc"]
    darts = [r for r in supers if r["variant"] == "darts"]
    epochs = sorted({int(e) for r in darts for e in r["magnitude"]})
    for e in epochs:
        archs = [r["magnitude"][str(e)]["arch"] for r in darts if str(e) in r["magnitude"]]
        out["magnitude_by_epoch"][str(e)] = {
            "param_free": mean_std(_share(a) for a in archs),
            "op_share": {op: statistics.fmean(_share(a, (op,)) for a in archs) for op in out["ops"]}}
    gt = ground_truth(results, space)
    if gt:
        ranked = sorted(gt, key=lambda a: -gt[a]["test"])
        out["gt"] = {"n_archs": len(gt), "best": ranked[0], "table": {a: gt[a] for a in ranked},
                     "random_test": statistics.fmean(g["test"] for g in gt.values()),
                     "runs": sum(g["seeds"] for g in gt.values()),
                     "converged": sum(g["converged"] for g in gt.values())}
    for sel, by_seed in picks.items():
        if not by_seed:
            continue
        counts: dict[str, int] = {}
        for a in by_seed.values():
            counts[a] = counts.get(a, 0) + 1
        row = {"seeds": len(by_seed), "picks": dict(sorted(counts.items(), key=lambda kv: -kv[1])),
               "param_free": mean_std(_share(a) for a in by_seed.values()),
               "test": mean_std(tests[sel].values()),
               "per_seed": {str(k): v for k, v in sorted(tests[sel].items())},
               "per_seed_arch": {str(k): v for k, v in sorted(by_seed.items())},
               "retrain_converged": sum(bool((r["retrained"].get(SELECTORS[sel][1]) or {}).get("converged"))
                                        for r in supers if r["variant"] == SELECTORS[sel][0])}
        if gt:
            row["gt_test"] = mean_std(gt[a]["test"] for a in by_seed.values() if a in gt)
            row["gt_percentile"] = mean_std(gt[a]["percentile"] for a in by_seed.values() if a in gt)
            row["optimum_hits"] = sum(a == out["gt"]["best"] for a in by_seed.values())
        out["selectors"][sel] = row
    out["claims"] = space_claims(picks, tests, darts, gt)
    n = len(picks.get("pt") or picks.get("pt_fixed") or {})
    out["design"] = pilot_design(n) if n > 1 else None
    return out


def space_claims(picks: Mapping[str, Mapping[int, str]], tests: Mapping[str, Mapping[int, float | None]],
                 darts: Sequence[dict], gt: Mapping[str, dict]) -> dict:
    """The claims of one space, each a paired per-seed difference (see :func:`compare`).

    Mechanism (share of parameter-free ops ``none``/``skip``/``noise`` among the kept edges):
    ``param_free_gap`` magnitude − PT on the same supernet at the last epoch,
    ``param_free_gap_fixed`` magnitude − PT with fixed α (same seed), ``magnitude_drift``
    magnitude at the last checkpoint − at the first. Outcome (stand-alone test accuracy of the
    picks retrained from scratch with one recipe and one initial draw per seed):
    ``pt_beats_magnitude``, ``pt_fixed_beats_magnitude``, ``pt_fixed_vs_pt``; with a ground
    truth, ``<selector>_beats_random`` (its mean over the space).
    """
    claims: dict = {}
    free = {s: {k: _share(a) for k, a in p.items()} for s, p in picks.items()}
    if picks.get("magnitude") and picks.get("pt"):
        claims["param_free_gap"] = compare(free["magnitude"], free["pt"])
    if picks.get("magnitude") and picks.get("pt_fixed"):
        claims["param_free_gap_fixed"] = compare(free["magnitude"], free["pt_fixed"])
    drift = {}
    for r in darts:
        e = sorted(int(k) for k in r["magnitude"])
        if len(e) > 1:
            drift[r["seed"]] = r["magnitude"][str(e[-1])]["param_free"] - r["magnitude"][str(e[0])]["param_free"]
    if drift:
        claims["magnitude_drift"] = compare(drift, {s: 0.0 for s in drift})
    if tests.get("magnitude") and any(v is not None for v in tests["magnitude"].values()):
        for sel in ("pt", "pt_fixed"):
            if tests.get(sel):
                claims[f"{sel}_beats_magnitude"] = compare(tests[sel], tests["magnitude"])
    if tests.get("pt") and tests.get("pt_fixed"):
        claims["pt_fixed_vs_pt"] = compare(tests["pt_fixed"], tests["pt"])
    if gt:
        random_test = statistics.fmean(g["test"] for g in gt.values())
        for sel, p in picks.items():
            m = {s: gt[a]["test"] for s, a in p.items() if a in gt}
            if m:
                claims[f"{sel}_beats_random"] = compare(m, {s: random_test for s in m})
    return claims


def summarize(results: Mapping[str, dict]) -> dict:
    """The section's summary: one entry per space, and every claim under ``<space>.<claim>``
    (the CLI's one-line verdicts and the README table read ``claims``, as in every section)."""
    spaces = sorted({r["space"] for r in results.values() if r.get("kind") in ("super", "gt")})
    per = {space: summarize_space(results, space) for space in spaces}
    claims = {f"{space}.{k}": v for space, part in per.items() for k, v in part.get("claims", {}).items()}
    n = max((part["selectors"].get("pt", {}).get("seeds", 0) for part in per.values()), default=0)
    cpu = [r["cpu_s"] for r in results.values() if r.get("kind") in ("super", "gt") and "cpu_s" in r]
    return {"spaces": per, "claims": claims, "design": pilot_design(n) if n > 1 else None,
            "cpu_s": sum(cpu) if cpu else None, "jobs": len(cpu)}
