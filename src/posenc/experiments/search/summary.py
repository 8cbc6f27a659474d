"""Summary of the ``search`` section: the mechanism and outcome claims of DARTS-PT, paired per
supernet seed, against a ground truth with its own spread where the space is enumerated.

Every verdict leaves out the runs still learning (the convergence gate, :data:`GATE`: a run that
fits its training data or whose training loss plateaued has converged, one whose loss stayed at
chance failed to learn, and is read as measured), states the smallest difference its own seeds
detect, and carries a Holm-adjusted verdict over the claims of its space. The space's mean is
over every architecture of the space, those that failed to learn included: they are part of what
a random pick draws from. Nothing here is borrowed from another run: the power of a claim comes
from that claim's differences.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence

from posenc.experiments.gate import CONVERGED, FAILED, LEARNING, Gate
from posenc.experiments.search._common import PRUNED, SEP
from posenc.experiments.stats import (
    NOT_CONFIRMED,
    crossed_difference,
    holm_verdicts,
    mean_std,
    paired_difference,
    seeds_for,
)

#: ops without parameters that magnitude selection is said to drift towards
PARAM_FREE = ("none", "skip", "noise")
#: selector -> (supernet variant, pick)
SELECTORS = {"magnitude": ("darts", "magnitude"), "pt": ("darts", "pt"), "pt_fixed": ("fixed", "pt_fixed")}
#: The convergence gate on a network's per-epoch training loss (digits: 10 classes, chance ln 10): it
#: has converged when the least-squares line through the last third of its epochs falls by at most
#: 0.02 nats over them, or when it fits its training data (training accuracy >= the job's ``fit_at``,
#: 0.95: what a stand-alone network can learn, it has); failed to learn when that third averages
#: within 0.1 nats of chance.
GATE = Gate("training loss per epoch", chance=math.log(10.0), learned=0.1, tol=0.02, higher_is_better=False)
#: Training accuracy at which a network counts as fitted (the jobs' ``fit_at`` default).
FIT_AT = 0.95
#: The smallest difference in stand-alone test accuracy that matters (``sesoi`` of the accuracy
#: claims): half a point, about 2 of the 360 test digits. An interval wholly short of it contradicts
#: "this selector picks better".
ACC_SESOI = 0.005


def run_state(loss_curve: Sequence[float | None], train_acc: float | None) -> str:
    """The gate's reading of a network from its per-epoch training loss and training accuracy."""
    if train_acc is not None and math.isfinite(train_acc) and train_acc >= FIT_AT:
        return CONVERGED
    return GATE.read([[i + 1, v] for i, v in enumerate(loss_curve)])


#: how ties with the best architecture are read (shown in the report)
TIE_RULE = ("an architecture is tied with the best when the 95 % t interval of its paired difference to the best "
            "over the ground-truth training seeds contains 0 (with fewer than 3 seeds, only an equal mean ties)")


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


def compare(method: Mapping[object, float | None], baseline: Mapping[object, float | None], *,
            direction: str = "greater", margin: float = 0.0,
            states: Mapping[object, str] | None = None, sesoi: float | None = None) -> dict:
    """:func:`posenc.experiments.stats.paired_difference` (gated on ``states``, the gate's reading
    of the runs behind each seed, when given), :func:`significance` of its differences, their
    spread ``sd`` and the seeds this spread needs to detect the observed mean (``seeds_needed``).
    """
    diff = paired_difference(method, baseline, direction=direction, margin=margin,
                             method_state=states, baseline_state=states, sesoi=sesoi)
    diff["test"] = significance(diff["diffs"])
    diff["sd"] = statistics.stdev(diff["diffs"]) if diff["n"] > 1 else None
    diff["seeds_needed"] = (seeds_for(abs(diff["mean"]), diff["sd"]) if diff["sd"] is not None
                            and diff["mean"] not in (None, 0.0) else None)
    return diff


def compare_crossed(cells: Mapping[object, Mapping[object, float | None]], *, direction: str = "greater",
                    excluded: Sequence[object] = (), sesoi: float | None = None) -> dict:
    """:func:`posenc.experiments.stats.crossed_difference` of ``{supernet seed: {ground-truth seed:
    difference}}``, with ``excluded`` (the supernet seeds left out by the convergence gate)
    listed; fewer than 3 rows left read "not decided"."""
    diff = crossed_difference(cells, direction=direction, sesoi=sesoi)
    diff["excluded"] = list(excluded)
    if excluded and diff["rows"] < 3:
        diff["verdict"], diff["holds"] = "not decided", False
        diff["note"] = (f"not decided: {len(excluded)} of {len(excluded) + diff['rows']} supernet seeds picked an "
                        f"architecture with a ground-truth run still learning")
    return diff


# ------------------------------------------------------------------ ground truth
def _share(arch: str, ops: Sequence[str] = PARAM_FREE) -> float:
    kept = [p for p in arch.split(SEP) if p != PRUNED]
    return sum(p in ops for p in kept) / len(kept) if kept else 0.0


def ground_truth(results: Mapping[str, dict], space: str) -> dict[str, dict]:
    """Per architecture of ``space``: its stand-alone test accuracy per ground-truth seed
    (``per_seed``), their mean and spread, how many of its runs converged, and its percentile
    (of the means)."""
    runs: dict[str, dict[int, dict]] = {}
    for r in results.values():
        if r.get("kind") == "gt" and r.get("space") == space:
            for a in r["archs"]:
                runs.setdefault(a["arch"], {})[r["seed"]] = a
    table = {}
    for arch, by_seed in runs.items():
        test = mean_std(a["test_acc"] for a in by_seed.values())
        states = [run_state(a.get("loss_curve", []), a.get("train_acc")) for a in by_seed.values()]
        table[arch] = {"test": test["mean"], "test_std": test["std"], "seeds": len(by_seed),
                       "converged": states.count(CONVERGED), "failed": states.count(FAILED),
                       "learning": states.count(LEARNING),
                       "per_seed": {str(s): by_seed[s]["test_acc"] for s in sorted(by_seed)}}
    pop = [t["test"] for t in table.values()]
    for t in table.values():
        t["percentile"] = percentile(t["test"], pop) if len(pop) > 1 else None
    return table


def usable(g: Mapping) -> bool:
    """An architecture of the ground truth whose runs can be read: none of them still learning."""
    return not g.get("learning", g["seeds"] - g["converged"])


def tied_with_best(gt: Mapping[str, dict]) -> tuple[str | None, list[str]]:
    """``(best, tied)``: the architecture with the best mean among those whose runs can be read
    (:func:`usable`), and every architecture tied with it by :data:`TIE_RULE` (the best included)."""
    complete = [a for a, g in gt.items() if usable(g)]
    if not complete:
        return None, []
    best = max(sorted(complete), key=lambda a: gt[a]["test"])
    tied = []
    for a in sorted(complete):
        seeds = sorted(set(gt[a]["per_seed"]) & set(gt[best]["per_seed"]))
        if a == best:
            tied.append(a)
        elif len(seeds) >= 3:
            d = paired_difference({s: gt[best]["per_seed"][s] for s in seeds},
                                  {s: gt[a]["per_seed"][s] for s in seeds})
            if d["low"] is not None and d["low"] <= 0.0:
                tied.append(a)
        elif gt[a]["test"] == gt[best]["test"]:
            tied.append(a)
    return best, tied


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
            st = {r["seed"]: super_state(r) for r in rs}
            out["supernets"][variant] = {"n": len(rs), "converged": sum(v != LEARNING for v in st.values()),
                                         "not_converged": sorted(s for s, v in st.items() if v == LEARNING),
                                         "failed": sorted(s for s, v in st.items() if v == FAILED),
                                         "val_acc": mean_std(r["val_acc"] for r in rs),
                                         "train_acc": mean_std(r["train_acc"] for r in rs)}
    picks: dict[str, dict[int, str]] = {s: {} for s in SELECTORS}
    retrained: dict[str, dict[int, dict | None]] = {s: {} for s in SELECTORS}
    for r in supers:
        for sel, (variant, key) in SELECTORS.items():
            if r["variant"] == variant and key in r["picks"]:
                picks[sel][r["seed"]] = r["picks"][key]
                retrained[sel][r["seed"]] = r["retrained"].get(key)
    darts = [r for r in supers if r["variant"] == "darts"]
    epochs = sorted({int(e) for r in darts for e in r["magnitude"]})
    for e in epochs:
        archs = [r["magnitude"][str(e)]["arch"] for r in darts if str(e) in r["magnitude"]]
        out["magnitude_by_epoch"][str(e)] = {
            "param_free": mean_std(_share(a) for a in archs),
            "op_share": {op: statistics.fmean(_share(a, (op,)) for a in archs) for op in out["ops"]}}
    gt = ground_truth(results, space)
    if gt:
        best, tied = tied_with_best(gt)
        ranked = sorted(gt, key=lambda a: -gt[a]["test"])
        out["gt"] = {"n_archs": len(gt), "best": best, "tied": tied, "tie_rule": TIE_RULE,
                     "table": {a: gt[a] for a in ranked},
                     "seeds": max(g["seeds"] for g in gt.values()),
                     # every architecture of the space: a random pick draws from all of them
                     "random_test": statistics.fmean(gt[a]["test"] for a in ranked),
                     "unconverged_archs": [a for a in ranked if not usable(gt[a])],
                     "failed_archs": [a for a in ranked if gt[a].get("failed")],
                     "runs": sum(g["seeds"] for g in gt.values()),
                     "converged": sum(g["converged"] for g in gt.values()),
                     "failed": sum(g.get("failed", 0) for g in gt.values())}
    for sel, by_seed in picks.items():
        if not by_seed:
            continue
        counts: dict[str, int] = {}
        for a in by_seed.values():
            counts[a] = counts.get(a, 0) + 1
        row = {"seeds": len(by_seed), "picks": dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))),
               "param_free": mean_std(_share(a) for a in by_seed.values()),
               "per_seed_arch": {str(k): v for k, v in sorted(by_seed.items())}}
        tests = {s: (None if rr is None else rr["test_acc"]) for s, rr in retrained[sel].items()}
        if any(v is not None for v in tests.values()):
            row["test"] = mean_std(tests.values())
            row["per_seed"] = {str(k): v for k, v in sorted(tests.items())}
            row["retrain_converged"] = sum(bool(rr) and retrain_state(rr) != LEARNING for rr in retrained[sel].values())
        if gt:
            row["gt_test"] = mean_std(gt[a]["test"] for a in by_seed.values() if a in gt)
            row["gt_percentile"] = mean_std(gt[a]["percentile"] for a in by_seed.values() if a in gt)
            row["per_seed"] = {str(k): gt[a]["test"] for k, a in sorted(by_seed.items()) if a in gt}
            row["optimum_hits"] = sum(a in out["gt"]["tied"] for a in by_seed.values())
        out["selectors"][sel] = row
    out["claims"] = space_claims(picks, retrained, supers, gt)
    holm_verdicts(out["claims"])
    return out


def space_claims(picks: Mapping[str, Mapping[int, str]], retrained: Mapping[str, Mapping[int, dict | None]],
                 supers: Sequence[dict], gt: Mapping[str, dict]) -> dict:
    """The claims of one space.

    Mechanism (share of parameter-free ops ``none``/``skip``/``noise`` among the kept edges,
    paired per supernet seed, read from supernets that converged): ``param_free_gap``
    magnitude − PT on the same supernet at the last epoch, ``param_free_gap_fixed`` magnitude −
    PT with fixed α (same seed), ``magnitude_drift`` magnitude at the last checkpoint − at the
    first.

    Outcome (stand-alone test accuracy of the picks). Where the space is enumerated, from the
    ground truth: every supernet seed's pick scored by every ground-truth training seed, a
    crossed design whose interval carries both spreads (:func:`compare_crossed`):
    ``pt_beats_magnitude``, ``pt_fixed_beats_magnitude``, ``pt_fixed_vs_pt`` and
    ``<selector>_beats_random`` (the mean of every architecture of the space, per training seed);
    a pick with a ground-truth run still learning is left out. Elsewhere from the picks retrained
    in the supernet job, paired per seed and gated by the retraining's state.
    """
    claims: dict = {}
    state = {(r["variant"], r["seed"]): super_state(r) for r in supers}
    darts_state = {s: st for (v, s), st in state.items() if v == "darts"}
    free = {s: {k: _share(a) for k, a in p.items()} for s, p in picks.items()}
    if picks.get("magnitude") and picks.get("pt"):
        claims["param_free_gap"] = compare(free["magnitude"], free["pt"], states=darts_state)
    if picks.get("magnitude") and picks.get("pt_fixed"):
        both = {s: LEARNING if LEARNING in (st, state.get(("fixed", s), LEARNING)) else st
                for s, st in darts_state.items()}
        claims["param_free_gap_fixed"] = compare(free["magnitude"], free["pt_fixed"], states=both)
    drift = {}
    for r in supers:
        e = sorted(int(k) for k in r["magnitude"]) if r["variant"] == "darts" else []
        if len(e) > 1:
            drift[r["seed"]] = r["magnitude"][str(e[-1])]["param_free"] - r["magnitude"][str(e[0])]["param_free"]
    if drift:
        claims["magnitude_drift"] = compare(drift, {s: 0.0 for s in drift}, states=darts_state)
    pairs = [(f"{sel}_beats_magnitude", sel, "magnitude") for sel in ("pt", "pt_fixed")] + [
        ("pt_fixed_vs_pt", "pt_fixed", "pt")]
    if gt:
        seeds = sorted({s for g in gt.values() for s in g["per_seed"]}, key=int)
        # the space's mean on each training seed, over every architecture of the space
        mean_of = {s: statistics.fmean(g["per_seed"][s] for g in gt.values() if s in g["per_seed"]) for s in seeds}

        def readable(arch: str) -> bool:
            return arch in gt and usable(gt[arch])

        for name, sel, base in pairs:
            if picks.get(sel) and picks.get(base):
                common = sorted(set(picks[sel]) & set(picks[base]))
                ok = [s for s in common if readable(picks[sel][s]) and readable(picks[base][s])
                      and darts_state.get(s) != LEARNING]
                cells = {s: {g: gt[picks[sel][s]]["per_seed"][g] - gt[picks[base][s]]["per_seed"][g] for g in seeds}
                         for s in ok}
                claims[name] = compare_crossed(cells, excluded=[s for s in common if s not in ok], sesoi=ACC_SESOI)
        for sel, p in picks.items():
            if p and mean_of:
                ok = [s for s in sorted(p) if readable(p[s])]
                cells = {s: {g: gt[p[s]]["per_seed"][g] - mean_of[g] for g in seeds} for s in ok}
                claims[f"{sel}_beats_random"] = compare_crossed(cells, excluded=[s for s in sorted(p) if s not in ok],
                                                                sesoi=ACC_SESOI)
        return claims
    for name, sel, base in pairs:
        a, b = retrained.get(sel) or {}, retrained.get(base) or {}
        if a and b and any(v is not None for v in b.values()):
            acc = {k: {s: (None if r is None else r["test_acc"]) for s, r in side.items()}
                   for k, side in (("a", a), ("b", b))}
            ok = {s: CONVERGED if (a.get(s) and b.get(s) and LEARNING not in (retrain_state(a[s]), retrain_state(b[s])))
                  else LEARNING for s in set(a) | set(b)}
            claims[name] = compare(acc["a"], acc["b"], states=ok, sesoi=ACC_SESOI)
    return claims


def super_state(result: Mapping) -> str:
    """The gate's reading of a supernet job (its per-epoch training loss and training accuracy)."""
    return run_state(result.get("train_loss_curve", []), result.get("train_acc"))


def retrain_state(result: Mapping) -> str:
    """The gate's reading of a retrained pick (its per-epoch training loss and training accuracy)."""
    return run_state(result.get("loss_curve", []), result.get("train_acc"))


def design(claims: Mapping[str, dict]) -> dict:
    """What each claim's own seeds can detect: ``{claim: {"n", "sd", "detectable", "seeds_needed"}}``."""
    return {k: {"n": c.get("n"), "sd": c.get("sd", c.get("se")), "detectable": c.get("detectable"),
                "seeds_needed": c.get("seeds_needed")} for k, c in claims.items()}


def summarize(results: Mapping[str, dict]) -> dict:
    """The section's summary: one entry per space, and every claim under ``<space>.<claim>``
    (the CLI's one-line verdicts and the README table read ``claims``, as in every section)."""
    spaces = sorted({r["space"] for r in results.values() if r.get("kind") in ("super", "gt")})
    per = {space: summarize_space(results, space) for space in spaces}
    claims = {f"{space}.{k}": v for space, part in per.items() for k, v in part.get("claims", {}).items()}
    cpu = [r["cpu_s"] for r in results.values() if r.get("kind") in ("super", "gt") and "cpu_s" in r]
    return {"spaces": per, "claims": claims, "design": design(claims), "gate": GATE.as_dict(), "fit_at": FIT_AT,
            "acc_sesoi": ACC_SESOI,
            "cpu_s": sum(cpu) if cpu else None, "jobs": len(cpu),
            "verdicts": {v: sum(c["verdict"] == v for c in claims.values())
                         for v in ("holds", NOT_CONFIRMED, "contradicted", "not decided")}}
