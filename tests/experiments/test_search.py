import dataclasses
import math
import statistics

import pytest
import torch

from posenc.experiments import search as exp
from posenc.experiments.search import (
    PILOT,
    SEP,
    GroundTruthConfig,
    RetrainConfig,
    SupernetConfig,
    arch_choices,
    arch_key,
    compare,
    detectable,
    digits_splits,
    ground_truth,
    percentile,
    pilot_design,
    plan,
    plateaued,
    run_ground_truth,
    run_supernet,
    seeds_for,
    share,
    significance,
    space_archs,
    summarize,
)
from posenc.experiments.stats import CONTRADICTED, HOLDS, NOT_CONFIRMED
from posenc.report.registry import get_section

TINY = dict(channels=4, epochs=2, checkpoints=(1, 2), proj_intv=1, retrain=RetrainConfig(epochs=1), subset=96)


# ------------------------------------------------------------------ data and helpers
def test_digits_splits_are_disjoint_fixed_and_complete():
    a, b = digits_splits(0), digits_splits(0)
    sizes = {k: len(v[1]) for k, v in a.items()}
    assert sum(sizes.values()) == 1797 and sizes["val"] == sizes["test"] == 359
    for k in a:
        assert torch.equal(a[k][0], b[k][0]) and torch.equal(a[k][1], b[k][1])
    from sklearn.datasets import load_digits

    data = load_digits()
    full = sorted(tuple(row) + (int(t),) for row, t in zip((data.images.reshape(-1, 64) / 16.0).round(6).tolist(),
                                                           data.target))
    parts = sorted(tuple(row) + (int(t),) for v in a.values()
                   for row, t in zip(v[0].reshape(-1, 64).double().round(decimals=6).tolist(), v[1].tolist()))
    assert parts == full
    assert not torch.equal(a["test"][1], digits_splits(1)["test"][1])


@pytest.mark.parametrize("kw", [{"val_fraction": 0.0}, {"test_fraction": 1.2}, {"val_fraction": 0.5, "test_fraction": 0.45}])
def test_digits_splits_bad_fractions(kw):
    with pytest.raises(ValueError, match="fraction"):
        digits_splits(0, **kw)


def test_percentile_against_a_sorting_reference():
    gen = torch.Generator().manual_seed(0)
    pop = [round(float(v), 1) for v in torch.rand(40, generator=gen)]  # ties on purpose
    ranks = sorted(pop)
    for v in pop:
        lo = ranks.index(v)
        hi = len(ranks) - 1 - ranks[::-1].index(v)
        assert percentile(v, pop) == pytest.approx(100 * ((lo + hi) / 2) / (len(pop) - 1))
    assert statistics.fmean(percentile(v, pop) for v in pop) == pytest.approx(50.0)
    with pytest.raises(ValueError, match="population"):
        percentile(1.0, [1.0])
    with pytest.raises(ValueError, match="value"):
        percentile(5.0, [1.0, 2.0])


def test_significance_matches_scipy_and_handles_degenerate_cases():
    from scipy import stats

    d = [0.3, -0.1, 0.5, 0.2, 0.4, 0.0]
    s = significance(d)
    assert s["t_p"] == pytest.approx(stats.ttest_1samp(d, 0.0).pvalue)
    assert s["wilcoxon_p"] == pytest.approx(stats.wilcoxon(d).pvalue)
    assert (s["wins"], s["ties"], s["losses"]) == (4, 1, 1)
    assert significance([0.0, 0.0, 0.0])["t_p"] is None
    assert significance([0.2, 0.2, 0.2])["t_p"] == 0.0


def test_detectable_difference_has_the_stated_power():
    # a Monte Carlo check of the closed form: at the detectable difference, a paired t-test at 5 %
    # rejects about 80 % of the time
    from scipy import stats

    n, sd = 8, 0.1
    delta = detectable(sd, n)
    d = delta + sd * torch.randn(20000, n, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    tstat = d.mean(1) / (d.std(1) / math.sqrt(n))
    reject = float((tstat.abs() > stats.t.ppf(0.975, n - 1)).double().mean())
    assert abs(reject - 0.8) < 0.02
    assert detectable(sd, 1) is None and detectable(0.0, 5) == 0.0
    assert seeds_for(0.167, 0.085) is not None and detectable(0.085, seeds_for(0.167, 0.085)) <= 0.167
    assert detectable(0.085, seeds_for(0.167, 0.085) - 1) > 0.167
    with pytest.raises(ValueError, match="effect"):
        seeds_for(0.0, 0.1)


def test_pilot_design_reads_the_pilot_interval():
    d = pilot_design(8)
    # the pilot's interval [+0.03, +0.30] over 4 seeds is a t interval: its spread is recovered
    from scipy.stats import t

    half = d["pilot_sd"] / math.sqrt(PILOT["n"]) * t.ppf(0.975, PILOT["n"] - 1)
    assert half == pytest.approx((PILOT["high"] - PILOT["low"]) / 2)
    assert d["pilot_would_hold"] and d["detectable"] < PILOT["mean"]
    assert not pilot_design(2)["pilot_would_hold"]


def test_arch_keys_round_trip():
    edges = ["a", "b", "c"]
    key = arch_key({"a": "skip", "c": "conv3x3"}, edges, pruned=["b"])
    assert key == "skip|-|conv3x3" and arch_choices(key, edges) == {"a": "skip", "c": "conv3x3"}
    assert share(key, ("skip",)) == 0.5
    with pytest.raises(ValueError, match="decide every edge"):
        arch_key({"a": "skip"}, edges)
    with pytest.raises(ValueError, match="arch"):
        arch_choices("skip", edges)


def test_plateaued():
    assert plateaued([2.0, 1.0, 0.5, 0.5, 0.5, 0.5, 0.49, 0.49])
    assert not plateaued([2.0, 1.6, 1.3, 1.1, 0.9, 0.7, 0.5, 0.3])


def test_compare_needs_three_pairs_and_states_what_it_detects():
    c = compare({0: 0.9, 1: 0.9}, {0: 0.5, 1: 0.5})
    assert c["verdict"] == NOT_CONFIRMED and "seeds" in c["note"]
    c = compare({0: 0.9, 1: 0.8, 2: 0.95}, {0: 0.5, 1: 0.5, 2: 0.5})
    assert c["verdict"] == HOLDS and c["detectable"] == pytest.approx(detectable(c["sd"], 3))


# ------------------------------------------------------------------ tiny runs of every job kind
@pytest.mark.parametrize("variant", ["darts", "fixed"])
def test_run_supernet_selects_and_retrains(variant):
    cfg = SupernetConfig(variant=variant, **TINY)
    r = run_supernet(cfg)
    assert r["kind"] == "super" and r["edges"] == ["cells.0.edges.1<-0", "cells.0.edges.2<-0", "cells.0.edges.2<-1"]
    archs = set(space_archs(cfg)[1])
    key = "pt_fixed" if variant == "fixed" else "pt"
    assert r["picks"][key] in archs and len(r["pt_decisions"]) == 3
    for d in r["pt_decisions"]:
        # the kept op is the one whose masking lowers the validation accuracy most
        assert d["scores"][d["chosen"]] == min(d["scores"].values())
    if variant == "darts":
        assert set(r["magnitude"]) == {"1", "2"} and r["picks"]["magnitude"] == r["magnitude"]["2"]["arch"]
        for e, op in arch_choices(r["picks"]["magnitude"], r["edges"]).items():
            w = r["alpha"][e]
            assert w[r["ops"][e].index(op)] == max(w)  # magnitude keeps the largest softmax(alpha)
    else:
        assert r["magnitude"] == {} and "magnitude" not in r["picks"]
    for k, a in r["picks"].items():
        assert r["retrained"][k]["arch"] == a and 0 <= r["retrained"][k]["test_acc"] <= 1
        assert r["param_free"][k] == share(a, ("none", "skip", "noise"))
    again = run_supernet(cfg)  # a pure function of its config (but for the CPU time it took)
    assert r.pop("cpu_s") > 0 and again.pop("cpu_s") > 0 and r == again


def test_run_supernet_on_a_darts_space():
    r = run_supernet(SupernetConfig(space="s3", ops=None, num_nodes=2, **TINY))
    assert len(r["edges"]) == 10 and len(r["pt_pruned"]) == 2
    for k in ("pt", "magnitude"):
        parts = r["picks"][k].split(SEP)
        assert parts.count("-") == 2 and "none" not in parts  # DARTS's genotype never keeps 'none'


def test_run_ground_truth_and_bad_input():
    cfg = GroundTruthConfig(archs=("conv3x3|skip|conv3x3", "skip|skip|skip"), channels=4,
                            retrain=RetrainConfig(epochs=1), subset=64)
    r = run_ground_truth(cfg)
    assert [a["arch"] for a in r["archs"]] == list(cfg.archs)
    with pytest.raises(ValueError, match="archs"):
        run_ground_truth(dataclasses.replace(cfg, archs=("avgpool|skip|skip",)))
    with pytest.raises(ValueError, match="archs"):
        run_ground_truth(dataclasses.replace(cfg, archs=()))
    with pytest.raises(ValueError, match="variant"):
        run_supernet(SupernetConfig(variant="random"))
    with pytest.raises(ValueError, match="checkpoints"):
        run_supernet(SupernetConfig(epochs=2, checkpoints=(3,)))
    with pytest.raises(ValueError, match="checkpoints"):
        run_supernet(SupernetConfig(epochs=3, checkpoints=(1, 2)))
    with pytest.raises(ValueError, match="enumerated"):
        space_archs(SupernetConfig(space="s2", ops=None))


# ------------------------------------------------------------------ plan
def test_plan_shapes_and_order():
    quick, full = plan("quick"), plan("full")
    for jobs in (quick, full):
        keys = [j.key for j in jobs]
        assert len(keys) == len(set(keys))
        assert all(set(k) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.=") for k in keys)
    assert sum(j.key.startswith("super.nb201.darts") for j in quick) == 8
    gt = [a for j in quick if j.key.startswith("gt.") for a in j.config.archs]
    assert sorted(gt) == sorted(space_archs(exp.QUICK["nb201"].supernet)[1]) and len(gt) == 8
    assert {j.key.split(".")[1] for j in full if j.key.startswith("super.")} == {"nb201", "s1", "s2", "s3", "s4"}
    keys = [j.key for j in full]
    # the cheap NB201 space first (its ground truth included), then the DARTS spaces seed-major
    assert keys[:2] == ["super.nb201.darts.s0", "super.nb201.fixed.s0"] and keys[26].startswith("gt.nb201.")
    assert keys[27:35] == [f"super.{s}.{v}.s0" for s in ("s1", "s2", "s3", "s4") for v in ("darts", "fixed")]
    assert sum(k.startswith("super.") for k in [j.key for j in plan("quick", seeds=3)]) == 3
    with pytest.raises(ValueError, match="profile"):
        plan("medium")


def test_section_is_registered_with_an_honest_budget():
    sec = get_section("search")
    assert sec.name == "search" and sec.plan is plan and sec.quick_budget_s <= 160


# ------------------------------------------------------------------ summary and claims on synthetic results
EDGES = ["e0", "e1", "e2"]


def _super(seed, variant, mag_first, mag_last, pt, test):
    picks = {"pt_fixed" if variant == "fixed" else "pt": pt}
    mags = {}
    if variant == "darts":
        picks["magnitude"] = mag_last
        mags = {"5": {"arch": mag_first, "param_free": share(mag_first, exp.PARAM_FREE)},
                "30": {"arch": mag_last, "param_free": share(mag_last, exp.PARAM_FREE)}}
    return {"kind": "super", "space": "nb201", "variant": variant, "seed": seed, "edges": EDGES,
            "ops": {e: ["skip", "conv3x3"] for e in EDGES}, "converged": True, "val_acc": 0.95, "train_acc": 0.99,
            "magnitude": mags, "picks": picks,
            "retrained": {k: {"arch": a, "test_acc": test[a], "converged": True} for k, a in picks.items()}}


def _synthetic(n=8):
    conv, skip = "conv3x3|conv3x3|conv3x3", "skip|skip|conv3x3"
    test = {conv: 0.98, skip: 0.95, "conv3x3|skip|conv3x3": 0.97}
    res = {}
    for s in range(n):
        res[f"super.nb201.darts.s{s}"] = _super(s, "darts", conv, skip if s % 4 else "conv3x3|skip|conv3x3",
                                                conv, test)
        res[f"super.nb201.fixed.s{s}"] = _super(s, "fixed", None, None, "conv3x3|skip|conv3x3", test)
    table = {a: v for a, v in test.items()}
    table["skip|skip|skip"] = 0.5
    res["gt.nb201.b0.s0"] = {"kind": "gt", "space": "nb201", "seed": 0, "edges": EDGES,
                             "archs": [{"arch": a, "test_acc": v, "converged": True} for a, v in table.items()]}
    return res, table


def test_summarize_claims_on_a_known_answer():
    res, table = _synthetic()
    s = summarize(res)
    part = s["spaces"]["nb201"]
    c = part["claims"]
    # magnitude keeps 2/3 (or 1/3) skip edges, PT none: the mechanism holds
    assert c["param_free_gap"]["verdict"] == HOLDS
    assert c["param_free_gap"]["mean"] == pytest.approx((6 * 2 / 3 + 2 * 1 / 3) / 8)
    assert c["magnitude_drift"]["verdict"] == HOLDS
    assert c["pt_beats_magnitude"]["verdict"] == HOLDS and c["pt_beats_magnitude"]["test"]["wins"] == 8
    assert c["pt_fixed_vs_pt"]["verdict"] == CONTRADICTED  # PT-fixed's pick is worse on every seed
    assert c["pt_fixed_beats_magnitude"]["verdict"] == HOLDS
    assert c["pt_beats_random"]["verdict"] == HOLDS
    assert part["gt"]["best"] == "conv3x3|conv3x3|conv3x3" and part["gt"]["n_archs"] == 4
    assert part["selectors"]["pt"]["optimum_hits"] == 8 and part["selectors"]["magnitude"]["optimum_hits"] == 0
    assert part["selectors"]["pt"]["gt_percentile"]["mean"] == 100.0
    assert part["magnitude_by_epoch"]["5"]["param_free"]["mean"] == 0.0
    assert s["claims"]["nb201.param_free_gap"] is c["param_free_gap"]
    assert s["design"]["n"] == 8 and part["design"]["n"] == 8
    gt = ground_truth(res, "nb201")
    assert gt["skip|skip|skip"]["percentile"] == 0.0


def test_summarize_with_few_seeds_is_not_confirmed():
    res, _ = _synthetic(n=2)
    c = summarize(res)["spaces"]["nb201"]["claims"]
    assert c["param_free_gap"]["verdict"] == NOT_CONFIRMED
    assert summarize({}) == {"spaces": {}, "claims": {}, "design": None, "cpu_s": None, "jobs": 0}


def test_render_writes_the_power_statement_claims_and_figure(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    saved = []

    def save(name, fig):
        fname = f"search_{name}.png"
        fig.savefig(tmp_path / fname)
        saved.append(fname)
        return fname

    res, _ = _synthetic()
    md = get_section("search").render(summarize(res), save)
    assert saved == ["search_picks.png"]
    for text in ("Power.", "mechanism", "outcome", "detects ≥", "holds", "Wilcoxon", "Ground truth", "retrained"):
        assert text in md, text
    assert "Perturbation-based" in get_section("search").render(summarize({}), save)
