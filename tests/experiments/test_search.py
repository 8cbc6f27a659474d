import dataclasses
import math
import statistics

import pytest
import torch

from posenc.experiments import search as exp
from posenc.experiments.search import (
    SEP,
    GroundTruthConfig,
    RetrainConfig,
    SupernetConfig,
    arch_choices,
    arch_key,
    compare,
    digits_splits,
    ground_truth,
    percentile,
    plan,
    plateaued,
    run_ground_truth,
    run_supernet,
    share,
    significance,
    space_archs,
    summarize,
    tied_with_best,
)
from posenc.experiments.stats import CONTRADICTED, HOLDS, NOT_CONFIRMED, NOT_DECIDED, detectable_difference
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
    assert c["verdict"] == NOT_DECIDED and "seeds" in c["note"]
    c = compare({0: 0.9, 1: 0.8, 2: 0.95}, {0: 0.5, 1: 0.5, 2: 0.5})
    assert c["verdict"] == HOLDS and c["detectable"] == pytest.approx(detectable_difference(c["diffs"]))
    gated = compare({0: 0.9, 1: 0.8, 2: 0.95}, {0: 0.5, 1: 0.5, 2: 0.5},
                    states={0: "converged", 1: "converged", 2: "still learning"})
    assert gated["verdict"] == NOT_DECIDED and "still learning" in gated["note"]
    # a run that failed to learn is compared as measured
    failed = compare({0: 0.9, 1: 0.8, 2: 0.95}, {0: 0.5, 1: 0.5, 2: 0.5},
                     states={0: "converged", 1: "converged", 2: "failed to learn"})
    assert failed["verdict"] == HOLDS and failed["n"] == 3


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
        assert parts.count("-") == 2
    assert "none" not in r["picks"]["magnitude"].split(SEP)  # DARTS's genotype never keeps 'none'
    # PT keeps 'none' only where the authors' project_op does: no other op's removal lowers the accuracy
    for d in r["pt_decisions"]:
        if d["chosen"] == "none":
            assert min(v for op, v in d["scores"].items() if op != "none") >= d["base"]
    never = run_supernet(SupernetConfig(space="s3", ops=None, num_nodes=2, keep_none=False, **TINY))
    assert "none" not in never["picks"]["pt"].split(SEP)


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
    from posenc.experiments.profiles import profile_settings

    assert sum(j.key.startswith("super.nb201.darts") for j in quick) == profile_settings("search", "quick")["nb201"]["seeds"]
    gt = [(j.config.seed, a) for j in quick if j.key.startswith("gt.") for a in j.config.archs]
    every = space_archs(exp.space_profiles("quick")["nb201"].supernet)[1]
    assert sorted(gt) == sorted((s, a) for s in range(4) for a in every)  # every architecture on 4 seeds
    # the ground truth scores the picks: the quick supernets do not retrain them
    assert all(j.config.retrain.epochs == 0 for j in quick if j.key.startswith("super."))
    assert all(j.config.retrain.epochs == 15 for j in quick if j.key.startswith("gt."))
    assert {j.key.split(".")[1] for j in full if j.key.startswith("super.")} == {"nb201", "s1", "s2", "s3", "s4"}
    keys = [j.key for j in full]
    # the cheap NB201 space first (its ground truth included), then the DARTS spaces seed-major
    assert keys[:2] == ["super.nb201.darts.s0", "super.nb201.fixed.s0"] and keys[24:28] == [
        f"gt.nb201.b0.s{g}" for g in range(4)]
    assert keys[28:36] == [f"super.{s}.{v}.s0" for s in ("s1", "s2", "s3", "s4") for v in ("darts", "fixed")]
    assert sum(k.startswith("super.") for k in [j.key for j in plan("quick", seeds=3)]) == 3
    with pytest.raises(ValueError, match="profile"):
        plan("medium")


def test_section_is_registered_with_an_honest_budget():
    sec = get_section("search")
    assert sec.name == "search" and sec.plan is plan and sec.quick_budget_s <= 160


# ------------------------------------------------------------------ summary and claims on synthetic results
EDGES = ["e0", "e1", "e2"]
CONV, SKIP, MID = "conv3x3|conv3x3|conv3x3", "skip|skip|conv3x3", "conv3x3|skip|conv3x3"
#: stand-alone accuracy of each architecture on ground-truth training seeds 0-3 (SKIP3 is still learning)
GT = {CONV: [0.980, 0.975, 0.985, 0.978], MID: [0.976, 0.978, 0.981, 0.977], SKIP: [0.950, 0.955, 0.948, 0.952],
      "skip|skip|skip": [0.50, 0.52, 0.49, 0.51]}


#: a per-epoch training loss still falling steadily (the gate reads it as still learning)
FALLING = [2.0 - 0.1 * i for i in range(15)]


def _super(seed, variant, mag_first, mag_last, pt, converged=True):
    picks = {"pt_fixed" if variant == "fixed" else "pt": pt}
    mags = {}
    if variant == "darts":
        picks["magnitude"] = mag_last
        mags = {"5": {"arch": mag_first, "param_free": share(mag_first, exp.PARAM_FREE)},
                "30": {"arch": mag_last, "param_free": share(mag_last, exp.PARAM_FREE)}}
    return {"kind": "super", "space": "nb201", "variant": variant, "seed": seed, "edges": EDGES,
            "ops": {e: ["skip", "conv3x3"] for e in EDGES}, "converged": converged, "val_acc": 0.95,
            "train_acc": 0.99 if converged else 0.6, "train_loss_curve": [0.1] * 15 if converged else FALLING,
            "magnitude": mags, "picks": picks, "retrained": {k: None for k in picks}}


def _synthetic(n=8, gt_seeds=4):
    res = {}
    for s in range(n):
        res[f"super.nb201.darts.s{s}"] = _super(s, "darts", CONV, SKIP if s % 4 else MID, CONV)
        res[f"super.nb201.fixed.s{s}"] = _super(s, "fixed", None, None, MID)
    for g in range(gt_seeds):
        res[f"gt.nb201.b0.s{g}"] = {"kind": "gt", "space": "nb201", "seed": g, "edges": EDGES, "archs": [
            {"arch": a, "test_acc": v[g], "converged": a != "skip|skip|skip",
             "train_acc": 0.6 if a == "skip|skip|skip" else 0.99,
             "loss_curve": FALLING if a == "skip|skip|skip" else [0.05] * 15} for a, v in GT.items()]}
    return res


def test_summarize_claims_on_a_known_answer():
    res = _synthetic()
    s = summarize(res)
    part = s["spaces"]["nb201"]
    c = part["claims"]
    # magnitude keeps 2/3 (or 1/3) skip edges, PT none: the mechanism holds
    assert c["param_free_gap"]["verdict"] == HOLDS
    assert c["param_free_gap"]["mean"] == pytest.approx((6 * 2 / 3 + 2 * 1 / 3) / 8)
    assert c["magnitude_drift"]["verdict"] == HOLDS
    # outcome from the ground truth: every supernet seed x every training seed
    pt = c["pt_beats_magnitude"]
    assert pt["rows"] == 8 and pt["columns"] == 4 and pt["verdict"] == HOLDS
    want = statistics.fmean(statistics.fmean(GT[CONV][g] - GT[SKIP if s % 4 else MID][g] for g in range(4))
                            for s in range(8))
    assert pt["mean"] == pytest.approx(want)
    # PT picks CONV on every seed: the interval still has the training seeds' spread
    rnd = c["pt_beats_random"]
    assert rnd["high"] - rnd["low"] > 0.002 and rnd["verdict"] == HOLDS
    # the space's mean is over every architecture, the one still learning alone included (it is part of the
    # space a random pick draws from); a pick of it would be left out of the claims
    mean4 = [statistics.fmean(GT[a][g] for a in GT) for g in range(4)]
    assert rnd["mean"] == pytest.approx(statistics.fmean(GT[CONV][g] - mean4[g] for g in range(4)))
    assert part["gt"]["unconverged_archs"] == ["skip|skip|skip"]
    assert part["gt"]["random_test"] == pytest.approx(statistics.fmean(mean4))
    # CONV and MID are within the training seeds' spread of each other: a tie, and both count as the optimum
    assert part["gt"]["best"] == CONV and part["gt"]["tied"] == sorted([CONV, MID])
    assert part["selectors"]["pt"]["optimum_hits"] == 8 and part["selectors"]["pt_fixed"]["optimum_hits"] == 8
    assert part["selectors"]["magnitude"]["optimum_hits"] == 2
    # MID is within half a point of CONV on every training seed: "PT-fixed picks better than PT" is
    # contradicted by the smallest difference that matters, not merely unconfirmed
    assert c["pt_fixed_vs_pt"]["verdict"] == "contradicted" and c["pt_fixed_vs_pt"]["high"] < exp.ACC_SESOI
    assert part["selectors"]["pt"]["gt_percentile"]["mean"] == 100.0
    assert part["magnitude_by_epoch"]["5"]["param_free"]["mean"] == 0.0
    assert s["claims"]["nb201.param_free_gap"] is c["param_free_gap"]
    # Holm over the space's claims, next to each verdict; the design is each claim's own
    assert all("holm_verdict" in v and v["holm_family"] >= 1 for v in c.values())
    assert s["design"]["nb201.param_free_gap"]["detectable"] == c["param_free_gap"]["detectable"]
    gt = ground_truth(res, "nb201")
    assert gt["skip|skip|skip"]["percentile"] == 0.0 and gt[CONV]["per_seed"] == {str(g): GT[CONV][g] for g in range(4)}


def test_unconverged_supernets_and_picks_leave_the_claims():
    res = _synthetic()
    for s in range(6):
        res[f"super.nb201.darts.s{s}"].update(train_acc=0.6, train_loss_curve=FALLING)
    c = summarize(res)["spaces"]["nb201"]["claims"]
    assert c["param_free_gap"]["verdict"] == NOT_DECIDED and "2 usable pairs" in c["param_free_gap"]["note"]
    res = _synthetic()
    for s in range(7):
        res[f"super.nb201.fixed.s{s}"]["picks"]["pt_fixed"] = "skip|skip|skip"  # still learning alone
    c = summarize(res)["spaces"]["nb201"]["claims"]
    assert c["pt_fixed_beats_random"]["verdict"] == NOT_DECIDED and c["pt_fixed_beats_random"]["excluded"] == list(range(7))


def test_ties_need_the_ground_truths_spread():
    gt = {a: {"test": statistics.fmean(v), "per_seed": {str(g): x for g, x in enumerate(v)}, "seeds": 4,
              "converged": 4, "learning": 0} for a, v in GT.items() if a != "skip|skip|skip"}
    best, tied = tied_with_best(gt)
    assert best == CONV and tied == sorted([CONV, MID])
    one = {a: {**g, "per_seed": {"0": g["per_seed"]["0"]}, "seeds": 1, "converged": 1} for a, g in gt.items()}
    assert tied_with_best(one)[1] == [CONV]  # one seed: only an equal mean ties


def test_summarize_with_few_seeds_decides_nothing():
    c = summarize(_synthetic(n=2))["spaces"]["nb201"]["claims"]
    assert c["param_free_gap"]["verdict"] == NOT_DECIDED
    assert c["pt_beats_magnitude"]["verdict"] == NOT_DECIDED and c["pt_beats_magnitude"]["rows"] == 2
    empty = summarize({})
    assert empty["spaces"] == {} and empty["claims"] == {} and empty["jobs"] == 0


def test_render_writes_the_claims_ground_truth_and_figure(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    saved = []

    def save(name, fig):
        fname = f"search_{name}.png"
        fig.savefig(tmp_path / fname)
        saved.append(fname)
        return fname

    md = get_section("search").render(summarize(_synthetic()), save)
    assert saved == ["search_picks.png"]
    for text in ("mechanism", "outcome", "detects ≥", "holds", "Holm", "Ground truth", "tied with it",
                 "it stays in the space's mean", "Convergence gate", "8 supernet seeds × 4 training seeds", "per training seed"):
        assert text in md, text
    assert "pilot" not in md.lower()
    assert "Perturbation-based" in get_section("search").render(summarize({}), save)
