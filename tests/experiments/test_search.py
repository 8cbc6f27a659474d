import dataclasses
import itertools
import statistics

import pytest
import torch

from posenc.experiments import search as exp
from posenc.experiments.search import (
    SEP,
    DigitsCellNet,
    GroundTruthConfig,
    PEAloneConfig,
    PESearchConfig,
    SupernetConfig,
    arch_of,
    choices_of,
    digits_splits,
    ground_truth,
    percentile,
    plan,
    plateaued,
    run_ground_truth,
    run_pe_alone,
    run_pe_search,
    run_supernet,
    significance,
    space_archs,
    summarize,
)
from posenc.experiments.stats import CONTRADICTED, HOLDS, NOT_CONFIRMED
from posenc.report.registry import get_section

OPS = ("none", "skip", "conv3x3")


# ------------------------------------------------------------------ data and helpers
def test_digits_splits_are_disjoint_fixed_and_complete():
    a, b = digits_splits(0), digits_splits(0)
    sizes = {k: len(v[1]) for k, v in a.items()}
    assert sum(sizes.values()) == 1797 and sizes["val"] == sizes["test"] == 359
    for k in a:
        assert torch.equal(a[k][0], b[k][0]) and torch.equal(a[k][1], b[k][1])
    # a partition: the three splits together are the data set, each image exactly once
    from sklearn.datasets import load_digits

    data = load_digits()
    full = sorted(tuple(row) + (int(t),) for row, t in zip((data.images.reshape(-1, 64) / 16.0).round(6).tolist(), data.target))
    parts = sorted(tuple(row) + (int(t),) for v in a.values()
                   for row, t in zip(v[0].reshape(-1, 64).double().round(decimals=6).tolist(), v[1].tolist()))
    assert parts == full
    assert not torch.equal(a["test"][1], digits_splits(1)["test"][1])
    assert all(0.0 <= float(v[0].min()) and float(v[0].max()) <= 1.0 for v in a.values())


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
    assert percentile(max(pop), pop) == pytest.approx(100.0 if pop.count(max(pop)) == 1 else percentile(max(pop), pop))
    assert percentile(3.0, [1.0, 2.0, 3.0]) == 100.0 and percentile(1.0, [1.0, 2.0, 3.0]) == 0.0


def test_percentile_bad_input():
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
    assert significance([0.1])["wilcoxon_p"] is None
    assert significance([0.2, 0.2, 0.2])["t_p"] == 0.0


def test_arch_keys_round_trip_and_enumerate_the_space():
    archs = space_archs(OPS, 3)
    assert len(archs) == 27 == len(set(archs))
    assert archs[0] == "none|none|none" and archs[-1] == "conv3x3|conv3x3|conv3x3"
    for a in archs[::5]:
        ch = choices_of(a, 3)
        assert list(ch) == ["1<-0", "2<-0", "2<-1"]
        assert arch_of({f"cell.edges.{e}": op for e, op in ch.items()}, 3) == a
    with pytest.raises(ValueError, match="arch"):
        choices_of("skip|skip", 3)


def test_plateaued():
    assert plateaued([2.0, 1.0, 0.5, 0.5, 0.5, 0.5, 0.49, 0.49])
    assert not plateaued([2.0, 1.6, 1.3, 1.1, 0.9, 0.7, 0.5, 0.3])
    assert not plateaued([1.0])


def test_digits_cell_net_supernet_and_stand_alone():
    from posenc.search import mixed_ops

    net = DigitsCellNet(4, OPS)
    assert list(mixed_ops(net)) == ["cell.edges.1<-0", "cell.edges.2<-0", "cell.edges.2<-1"]
    x = torch.rand(5, 1, 8, 8)
    assert net(x).shape == (5, 10)
    alone = DigitsCellNet(4, OPS, choices=choices_of("conv3x3|none|skip", 3))
    with pytest.raises(ValueError, match="mixed"):
        mixed_ops(alone)
    assert alone(x).shape == (5, 10)
    # every path from input to output is cut: the cell outputs zeros and the logits are the bias
    dead = DigitsCellNet(4, OPS, choices=choices_of("conv3x3|none|none", 3))
    out = dead(x)
    torch.testing.assert_close(out, dead.classifier.bias.expand(5, -1))


# ------------------------------------------------------------------ tiny runs of every job kind
def test_run_ground_truth_is_deterministic_and_reports_convergence():
    cfg = GroundTruthConfig(archs=("conv3x3|skip|conv3x3", "none|none|none"), channels=4, epochs=2)
    a, b = run_ground_truth(cfg), run_ground_truth(cfg)
    assert a == b
    assert a["kind"] == "gt" and a["space"]["edges"] == ["1<-0", "2<-0", "2<-1"]
    good, dead = a["archs"]
    assert good["arch"] == "conv3x3|skip|conv3x3" and len(good["loss_curve"]) == 2
    assert good["converged"] == (good["fits"] or good["plateaued"])
    assert dead["test_acc"] < 0.2  # constant logits: chance level
    with pytest.raises(ValueError, match="ops"):
        run_ground_truth(dataclasses.replace(cfg, archs=("avgpool|skip|skip",)))
    with pytest.raises(ValueError, match="archs"):
        run_ground_truth(dataclasses.replace(cfg, archs=()))


@pytest.mark.parametrize("variant", ["darts", "fixed"])
def test_run_supernet_selects_at_every_checkpoint(variant):
    cfg = SupernetConfig(variant=variant, channels=4, epochs=2, checkpoints=(1, 2), finetune_epochs=0.2)
    r = run_supernet(cfg)
    assert r["kind"] == "super" and [c["epoch"] for c in r["checkpoints"]] == [1, 2]
    archs = set(space_archs(OPS, 3))
    for c in r["checkpoints"]:
        assert c["pt"] in archs and len(c["pt_decisions"]) == 3
        assert sorted(d["edge"] for d in c["pt_decisions"]) == ["1<-0", "2<-0", "2<-1"]
        if variant == "darts":
            assert c["magnitude"] in archs
            # magnitude keeps the largest softmax(alpha) on every edge
            for e, op in choices_of(c["magnitude"], 3).items():
                w = c["alpha"][e]
                assert w[OPS.index(op)] == max(w)
        else:
            assert "magnitude" not in c
            for w in c["alpha"].values():
                assert w == pytest.approx([1 / 3] * 3)
        for d in c["pt_decisions"]:
            # the kept op is the one whose masking raises the validation loss most (ties at random)
            assert d["scores"][d["chosen"]] == pytest.approx(max(d["scores"].values()))
            assert d["scores"]["none"] == pytest.approx(d["base"])  # masking 'none' changes nothing
    assert isinstance(r["converged"], bool)


def test_run_supernet_bad_input():
    with pytest.raises(ValueError, match="variant"):
        run_supernet(SupernetConfig(variant="random", epochs=1, checkpoints=(1,)))
    with pytest.raises(ValueError, match="checkpoints"):
        run_supernet(SupernetConfig(epochs=2, checkpoints=(3,)))
    with pytest.raises(ValueError, match="checkpoints"):
        run_supernet(SupernetConfig(epochs=2, checkpoints=(2, 1)))


def test_run_pe_jobs():
    kw = dict(encodings=("none", "learned_table"), attention=("plain",), depth=1, dim=8, heads=2, epochs=1)
    alone = run_pe_alone(PEAloneConfig(arch="learned_table|plain", **kw))
    assert alone["kind"] == "pe_gt" and alone["archs"][0]["arch"] == "learned_table|plain"
    with pytest.raises(ValueError, match="arch"):
        run_pe_alone(PEAloneConfig(arch="learned_table", **kw))
    r = run_pe_search(PESearchConfig(variant="darts", finetune_epochs=0.1, **kw))
    assert r["kind"] == "pe_search"
    assert r["magnitude"].split(SEP)[0] in kw["encodings"] and r["pt"].split(SEP)[1] == "plain"
    fixed = run_pe_search(PESearchConfig(variant="fixed", finetune_epochs=0.1, **kw))
    assert "magnitude" not in fixed and fixed["alpha"]["encoding"] == pytest.approx([0.5, 0.5])
    with pytest.raises(ValueError, match="variant"):
        run_pe_search(PESearchConfig(variant="x", **kw))


# ------------------------------------------------------------------ plan
def test_plan_shapes_and_shards():
    quick, full = plan("quick"), plan("full")
    for jobs in (quick, full):
        keys = [j.key for j in jobs]
        assert len(keys) == len(set(keys))
        assert all(set(k) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.=") for k in keys)
    # every architecture of the space is trained exactly once per ground-truth seed
    for jobs, n_ops, seeds in ((quick, 3, 1), (full, 5, 3)):
        gt = [j.config for j in jobs if j.key.startswith("gt.")]
        for s in range(seeds):
            archs = [a for c in gt if c.seed == s for a in c.archs]
            assert sorted(archs) == sorted(space_archs(gt[0].ops, 3)) and len(archs) == n_ops**3
    kinds = lambda jobs, p: sum(j.key.startswith(p) for j in jobs)  # noqa: E731
    assert kinds(quick, "super.") == 8 and kinds(full, "super.") == 40
    assert kinds(quick, "pe_gt.") == 4 and kinds(full, "pe_gt.") == 60
    assert kinds(plan("quick", seeds=3), "super.") == 6 and kinds(plan("quick", seeds=3), "pe.") == 6
    with pytest.raises(ValueError, match="profile"):
        plan("medium")


def test_section_is_registered():
    sec = get_section("search")
    assert sec.name == "search" and sec.plan is plan


# ------------------------------------------------------------------ summary and claims on synthetic results
def _gt_result(seed, table, noise=0.0):
    return {"kind": "gt", "seed": seed,
            "space": {"ops": list(OPS), "edges": ["1<-0", "2<-0", "2<-1"], "channels": 4},
            "archs": [{"arch": a, "test_acc": v + noise, "val_acc": v, "train_acc": 1.0, "converged": True}
                      for a, v in table.items()]}


def _synthetic(n_seeds=6):
    # ground truth: accuracy = 0.5 + 0.15 * (#conv3x3) - 0.1 * (#none), a strict optimum at conv3x3 x 3
    table = {a: 0.5 + 0.15 * a.split(SEP).count("conv3x3") - 0.1 * a.split(SEP).count("none")
             + 0.001 * i for i, a in enumerate(space_archs(OPS, 3))}
    res = {"gt.s0": _gt_result(0, table), "gt.s1": _gt_result(1, table, noise=0.01)}
    best = "conv3x3|conv3x3|conv3x3"
    drifted = ["skip|none|skip", "none|skip|skip", "skip|skip|none", "none|none|skip", "skip|conv3x3|none", "skip|skip|skip"]
    for s in range(n_seeds):
        res[f"super.darts.s{s}"] = {
            "kind": "super", "variant": "darts", "seed": s, "converged": True, "val_acc": 0.9, "train_acc": 0.95,
            "checkpoints": [{"epoch": 2, "magnitude": best, "pt": best},
                            {"epoch": 10, "magnitude": drifted[s % len(drifted)], "pt": best}]}
        res[f"super.fixed.s{s}"] = {
            "kind": "super", "variant": "fixed", "seed": s, "converged": s % 2 == 0, "val_acc": 0.9, "train_acc": 0.9,
            "checkpoints": [{"epoch": 2, "pt": best}, {"epoch": 10, "pt": "conv3x3|skip|conv3x3"}]}
    pe_table = {"none|plain": 0.5, "sinusoidal|plain": 0.9, "learned_table|plain": 0.95}
    for a, v in pe_table.items():
        for s in range(2):
            res[f"pe_gt.{a}.s{s}"] = {"kind": "pe_gt", "seed": s,
                                      "archs": [{"arch": a, "test_acc": v, "val_acc": v, "train_acc": v,
                                                 "converged": True}]}
    for s in range(5):
        res[f"pe.darts.s{s}"] = {"kind": "pe_search", "variant": "darts", "seed": s, "converged": True,
                                 "val_acc": 0.9, "train_acc": 0.9,
                                 "magnitude": "none|plain" if s else "sinusoidal|plain", "pt": "learned_table|plain"}
        res[f"pe.fixed.s{s}"] = {"kind": "pe_search", "variant": "fixed", "seed": s, "converged": True,
                                 "val_acc": 0.9, "train_acc": 0.9, "pt": "learned_table|plain"}
    return res, table


def test_ground_truth_table_and_percentiles():
    res, table = _synthetic()
    gt = ground_truth(res)
    assert len(gt) == 27 and all(r["seeds"] == 2 for r in gt.values())
    for a, r in gt.items():
        assert r["test"] == pytest.approx(table[a] + 0.005)
    assert gt["conv3x3|conv3x3|conv3x3"]["percentile"] == 100.0
    assert statistics.fmean(r["percentile"] for r in gt.values()) == pytest.approx(50.0)


def test_summarize_claims_on_a_known_answer():
    res, table = _synthetic()
    s = summarize(res)
    micro = s["micro"]
    assert micro["gt"]["best"]["arch"] == "conv3x3|conv3x3|conv3x3"
    assert micro["gt"]["random_test"] == pytest.approx(statistics.fmean(table.values()) + 0.005)
    sel = micro["selectors"]
    assert sel["pt"]["optimum_hits"] == 6 and sel["magnitude"]["optimum_hits"] == 0
    assert sel["pt"]["percentile"]["mean"] == 100.0
    assert set(sel["magnitude"]["by_epoch"]) == {"2", "10"}
    assert sel["magnitude"]["by_epoch"]["2"]["param_free"]["mean"] == 0.0
    assert sel["magnitude"]["agreement"]["1<-0"]["optimum"] == 0.0 and sel["pt"]["agreement"]["2<-1"]["optimum"] == 1.0
    c = micro["claims"]
    assert c["pt_beats_magnitude"]["verdict"] == HOLDS and c["pt_beats_magnitude"]["n"] == 6
    assert c["pt_beats_magnitude"]["test"]["wins"] == 6
    assert c["pt_fixed_vs_pt"]["verdict"] == CONTRADICTED  # fixed picks a worse arch than PT on every seed
    assert c["magnitude_drifts"]["verdict"] == HOLDS and c["pt_stable"]["verdict"] == HOLDS
    assert c["drift_gap"]["verdict"] == HOLDS
    assert c["pt_beats_random"]["verdict"] == HOLDS and c["magnitude_beats_random"]["verdict"] != HOLDS
    assert micro["supernets"]["fixed"]["converged"] == 3
    early = c["pt_beats_magnitude_at_epoch_2"]  # both pick the optimum at epoch 2
    assert early["epoch"] == 2 and early["mean"] == 0.0 and early["verdict"] == NOT_CONFIRMED
    assert "pt_beats_magnitude_at_epoch_10" not in c  # the last checkpoint is pt_beats_magnitude itself
    pe = s["pe"]
    assert pe["gt"]["best"] == "learned_table|plain"
    assert pe["selectors"]["pt"]["optimum_hits"] == 5 and pe["selectors"]["magnitude"]["encoding_hits"] == 0
    assert pe["claims"]["pt_beats_magnitude"]["verdict"] == HOLDS
    assert pe["selectors"]["magnitude"]["picks"] == {"sinusoidal|plain": 1, "none|plain": 4}
    # both spaces' claims, gathered under one key as in every section
    assert s["claims"]["pe.pt_beats_magnitude"] is pe["claims"]["pt_beats_magnitude"]
    assert set(s["claims"]) == {f"micro.{k}" for k in c} | {f"pe.{k}" for k in pe["claims"]}


def test_summarize_without_seeds_to_pair_is_not_confirmed():
    res, _ = _synthetic(n_seeds=1)
    c = summarize(res)["micro"]["claims"]
    assert c["pt_beats_magnitude"]["verdict"] == NOT_CONFIRMED
    assert summarize({}) == {"micro": {"gt": {}, "selectors": {}, "claims": {}, "edges": {}, "supernets": {}},
                             "pe": {"gt": {}, "selectors": {}, "claims": {}, "supernets": {}}, "claims": {}}


def test_render_writes_tables_claims_and_figures(tmp_path):
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
    assert sorted(saved) == ["search_epochs.png", "search_picks.png"]
    for text in ("PT, α trained", "magnitude drifts", "Positional-encoding search", "picked the optimum",
                 "holds", "Wilcoxon"):
        assert text in md
    # a summary with no results renders without figures or errors
    assert "Perturbation-based" in get_section("search").render(summarize({}), save)


def test_space_enumeration_matches_itertools():
    assert space_archs(("a", "b"), 3) == [SEP.join(p) for p in itertools.product("ab", repeat=3)]
    assert exp.edge_names(4) == ["1<-0", "2<-0", "2<-1", "3<-0", "3<-1", "3<-2"]


def test_two_identical_pairs_give_no_verdict():
    c = exp.compare({0: 0.9, 1: 0.9}, {0: 0.5, 1: 0.5})
    assert c["verdict"] == NOT_CONFIRMED and "seeds" in c["note"]
    assert exp.compare({0: 0.9, 1: 0.9, 2: 0.9}, {0: 0.5, 1: 0.5, 2: 0.5})["verdict"] == HOLDS
