import dataclasses
import math
import statistics

import pytest
import torch
from scipy import stats

from posenc.encodings import CAPEEncoding, LearnedTableEncoding
from posenc.experiments.cape import (
    CLAIMS,
    GATE,
    LR,
    LR_GRID,
    VARIANTS,
    ResolutionConfig,
    away_accuracy,
    build_model,
    choose_lr,
    detectable_difference,
    digits_splits,
    plan,
    render,
    run_resolution,
    run_state,
    run_sweep,
    summarize,
    trunk_state,
)
from posenc.experiments.profiles import profile_settings
from posenc.report.registry import get_section

CFG = ResolutionConfig(dim=16, heads=2)


def test_splits_are_disjoint_and_fixed():
    s = digits_splits()
    assert [len(s[k][1]) for k in ("fit", "val", "test")] == [1078, 270, 449]
    rows = {k: {tuple(x.flatten().tolist()) for x in s[k][0]} for k in s}
    # sklearn's digits hold a few duplicate images; the splits are index-disjoint, almost image-disjoint
    assert len(rows["fit"] & rows["test"]) < 10 and len(rows["val"] & rows["test"]) < 5
    assert s["fit"][0].shape[1:] == (1, 8, 8) and float(s["fit"][0].max()) <= 1.0


def test_render_keeps_the_digit_at_every_resolution():
    x = digits_splits()["test"][0][:6]
    for res in (12, 16, 32):
        img = render(x, res)
        assert img.shape == (6, 1, res, res)
        # the same image: the mean intensity and the centroid agree across resolutions
        torch.testing.assert_close(img.mean(dim=(1, 2, 3)), x.mean(dim=(1, 2, 3)), atol=0.03, rtol=0)
        c = (torch.arange(res) + 0.5) / res
        cx = (img[:, 0] * c).sum(dim=(1, 2)) / img[:, 0].sum(dim=(1, 2))
        c8 = (torch.arange(8) + 0.5) / 8
        cx8 = (x[:, 0] * c8).sum(dim=(1, 2)) / x[:, 0].sum(dim=(1, 2))
        torch.testing.assert_close(cx, cx8, atol=0.02, rtol=0)
    assert render(x, 8) is x


@pytest.mark.parametrize("seed", [0, 3])
def test_paired_initialisation(seed):
    # same seed, different encodings: identical transformer weights (only the encoding differs)
    models = {v: build_model(dataclasses.replace(CFG, variant=v, seed=seed)) for v in VARIANTS}
    ref = trunk_state(models["none"])
    assert "patch_embed.weight" in ref and "cls" in ref and any(k.startswith("encoder.blocks.0") for k in ref)
    for v, m in models.items():
        state = trunk_state(m)
        assert state.keys() == ref.keys()
        for k in ref:
            assert torch.equal(state[k], ref[k]), f"{v}: {k} differs from the none variant's"
    other = trunk_state(build_model(dataclasses.replace(CFG, variant="cape", seed=seed + 1)))
    assert not torch.equal(other["patch_embed.weight"], ref["patch_embed.weight"])
    # the encodings themselves
    assert models["none"].encoder.encoding is None
    assert isinstance(models["table"].encoder.encoding, LearnedTableEncoding)
    for v in ("sine", "cape", "cape_noscale", "cape_mixed"):
        assert isinstance(models[v].encoder.encoding, CAPEEncoding)
        assert models[v].encoder.encoding.grid_endpoint  # the authors' linspace grid


def test_building_a_model_leaves_the_global_rng_alone():
    state = torch.get_rng_state()
    build_model(dataclasses.replace(CFG, variant="table"))
    assert torch.equal(torch.get_rng_state(), state)


def test_variants_are_the_papers_settings():
    enc = {v: build_model(dataclasses.replace(CFG, variant=v)).encoder.encoding for v in VARIANTS if v != "none"}
    cape = enc["cape"]
    assert (cape.max_global_shift, cape.max_local_shift) == (0.5, 0.5)
    assert (cape.min_global_scaling, cape.max_global_scaling, cape.scaling_distribution) == (0.7, 1.4, "uniform")
    assert enc["cape_noscale"].min_global_scaling == enc["cape_noscale"].max_global_scaling == 1.0
    assert enc["cape_noscale"].max_global_shift == 0.5
    assert not enc["sine"].augments and enc["cape"].augments
    pos = torch.rand(2, 9, 2) * 2 - 1
    enc["sine"].eval(), cape.eval()
    torch.testing.assert_close(enc["sine"](pos), cape(pos))  # same features, the augmentation aside
    assert enc["table"].grid_size == (8, 8)  # 16 px in 2 x 2-pixel patches: the testbed's 8 x 8 grid
    assert (CFG.patch, CFG.batch, CFG.train_res) == (2, 32, 16)


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_variant_runs_at_every_resolution(variant):
    model = build_model(dataclasses.replace(CFG, variant=variant)).eval()
    x = digits_splits()["test"][0][:3]
    for res in (12, 16, 20, 32):
        out = model(render(x, res))
        assert out.shape == (3, 10) and bool(torch.isfinite(out).all())


def test_the_gate_reads_validation_accuracy_against_chance():
    curve = lambda accs: [[100 * (i + 1), a] for i, a in enumerate(accs)]  # noqa: E731
    assert GATE.chance == 0.1 and GATE.tol == 0.03
    # a plateau over the last third (steps >= 2/3 of 1,000): converged, at any level
    assert run_state({"val_curve": curve([0.1, 0.2, 0.3, 0.4, 0.5, 0.9, 0.93, 0.91, 0.92, 0.93])}) == "converged"
    assert run_state({"val_curve": curve([0.1, 0.3, 0.5, 0.6, 0.7, 0.75, 0.76, 0.75, 0.76, 0.75])}) == "converged"
    # still climbing by more than 0.03 over the last third
    assert run_state({"val_curve": curve([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.85, 0.88, 0.9, 0.93])}) == "still learning"
    # at chance throughout: failed to learn
    assert run_state({"val_curve": curve([0.1, 0.12, 0.09, 0.11, 0.1, 0.1, 0.13, 0.1, 0.11, 0.1])}) == "failed to learn"


def test_tiny_run_is_deterministic_and_complete():
    cfg = dataclasses.replace(CFG, variant="cape_mixed", steps=6, eval_every=1, test_res=(12, 20))
    a, b = run_resolution(cfg), run_resolution(cfg)
    assert a["accuracy"] == b["accuracy"] and a["loss_curve"] == b["loss_curve"] and a["val_curve"] == b["val_curve"]
    assert set(a["accuracy"]) == {"12", "16", "20"} and a["train_accuracy"] == a["accuracy"]["16"]
    assert [s for s, _ in a["val_curve"]] == [1, 2, 3, 4, 5, 6]
    assert a["patch"] == cfg.patch and a["cpu_seconds"] > 0
    sweep = run_sweep(dataclasses.replace(cfg, variant="sine"))
    assert sweep["sweep"] and sweep["lr"] == cfg.lr and 0 <= sweep["val_accuracy"] <= 1


def test_bad_inputs():
    with pytest.raises(ValueError, match="variant"):
        build_model(dataclasses.replace(CFG, variant="rope"))
    with pytest.raises(ValueError, match="patch"):
        build_model(dataclasses.replace(CFG, test_res=(13,)))
    with pytest.raises(ValueError, match="profile"):
        plan("medium")


def test_plan():
    quick, full = plan("quick"), plan("full")
    for jobs in (quick, full):
        assert len({j.key for j in jobs}) == len(jobs)
    main = [j for j in quick if j.key.startswith("digits.")]
    # the quick profile trains the variants whose claim converges in its budget; the full profile all
    assert len(main) == len(quick) and {j.config.variant for j in quick} == set(profile_settings("cape", "quick")["variants"])
    assert {j.config.variant for j in full} == set(VARIANTS)
    assert len({j.config.seed for j in quick}) >= 3 and len({j.config.seed for j in full if not
                                                              j.key.startswith("sweep")}) >= 8
    assert all(j.config.threads == 1 for j in quick + full)
    # one budget and one learning rate for every main run of a profile
    for jobs in (quick, full):
        runs = [j.config for j in jobs if not j.key.startswith("sweep")]
        assert len({(c.steps, c.batch, c.lr, c.train_res, c.test_res) for c in runs}) == 1 and runs[0].lr == LR
        # tests from about 0.7x to 2x the training resolution
        c = runs[0]
        assert min(c.test_res) / c.train_res <= 0.75 and max(c.test_res) / c.train_res >= 2.0
    assert {j.config.steps for j in full} == {8000}
    sweep = [j for j in full if j.key.startswith("sweep")]
    assert {j.config.lr for j in sweep} == set(LR_GRID) and {j.config.variant for j in sweep} == set(VARIANTS)
    assert {j.config.steps for j in sweep} == {8000}  # the sweep runs at the full budget
    assert not {j.config.seed for j in sweep} & {j.config.seed for j in full if not j.key.startswith("sweep")}
    assert len(get_section("cape").plan("quick", 5)) == len(main) // 3 * 5


def test_detectable_difference_closed_form():
    diffs = [0.01, 0.03, -0.02, 0.04, 0.00]
    n, s = len(diffs), statistics.stdev(diffs)
    want = (stats.t.ppf(0.975, n - 1) + stats.t.ppf(0.8, n - 1)) * s / math.sqrt(n)
    assert detectable_difference(diffs) == pytest.approx(want)
    assert detectable_difference([0.1]) is None
    # it shrinks with more seeds of the same spread
    assert detectable_difference(diffs * 2) < detectable_difference(diffs)


def test_choose_lr_rule():
    res = {}
    for lr, accs in ((1e-3, (0.9, 0.5)), (3e-3, (0.8, 0.8)), (8e-3, (0.95, 0.3))):
        for v, a in zip(("sine", "cape"), accs):
            res[f"{lr}{v}"] = {"sweep": True, "lr": lr, "variant": v, "seed": 100, "val_accuracy": a}
    out = choose_lr(res)
    assert out["chosen"] == 3e-3 and out["mean_val_accuracy"]["0.003"] == pytest.approx(0.8)  # best mean, not best max
    assert out["per_variant"]["0.008"]["sine"] == 0.95 and out["agrees"] == (LR == 3e-3)
    assert choose_lr({}) is None


def test_away_accuracy():
    assert away_accuracy({"12": 0.5, "16": 1.0, "24": 0.7}, 16) == pytest.approx(0.6)
    assert math.isnan(away_accuracy({"16": 1.0}, 16))


def _fake(variant, seed, acc, conv=True):
    # a validation curve on its plateau, or one still climbing by 0.05 an evaluation at the end
    top = acc["16"]
    vals = [top] * 9 if conv else [top - 0.05 * (8 - i) for i in range(9)]
    return {"variant": variant, "seed": seed, "train_res": 16, "lr": LR, "accuracy": acc, "train_accuracy": top,
            "val_accuracy": top, "val_curve": [[i + 1, v] for i, v in enumerate(vals)], "patch": 2,
            "loss_curve": [1.0, 0.5], "cpu_seconds": 2.0, "steps": 9}


def test_summary_claims_from_paired_converged_seeds():
    res = {}
    for s in range(5):
        res[f"a{s}"] = _fake("cape", s, {"12": 0.8 + 0.01 * s, "16": 0.97, "32": 0.9}, conv=s != 4)
        res[f"b{s}"] = _fake("sine", s, {"12": 0.5 + 0.02 * s, "16": 0.975 - 0.001 * s, "32": 0.4})
        res[f"c{s}"] = _fake("table", s, {"12": 0.95, "16": 0.98, "32": 0.98 - 0.01 * s})
        res[f"d{s}"] = _fake("none", s, {"12": 0.2, "16": 0.3 + 0.01 * s, "32": 0.2})
    out = summarize(res)
    c = out["claims"]
    assert set(c) == set(CLAIMS)  # every claim is reported; those needing variants not run say so
    for name in ("scaling_helps_resolution_transfer", "mixed_resolutions_help"):
        assert c[name]["verdict"] == "not decided" and "does not train" in c[name]["note"], name
    assert c["task_needs_position"]["verdict"] == "holds" and c["task_needs_position"]["n"] == 5
    assert c["cape_matches_sine_at_train_res"]["verdict"] == "holds"
    deg = c["cape_degrades_less_than_sine"]
    # the convergence gate: seed 4's CAPE run is still learning, so that pair is left out and named
    assert deg["verdict"] == "holds" and deg["n"] == 4 and deg["not_converged"] == {"cape": [4]}
    assert deg["gate"]["unconverged_runs"] == ["method:4"] and deg["seeds"] == [0, 1, 2, 3]
    assert deg["diffs"] == pytest.approx([(0.8 + 0.01 * s + 0.9) / 2 - (0.5 + 0.02 * s + 0.4) / 2 for s in range(4)])
    assert "note" not in c["task_needs_position"]
    assert deg["detectable"] == pytest.approx(detectable_difference(deg["diffs"]))
    # Holm over the section's claims that could reach a verdict, next to each verdict
    assert all(v["holm_family"] == 4 and "holm_verdict" in v for v in c.values())
    assert c["cape_beats_table_away"]["verdict"] == "contradicted"
    row = out["table"]["cape"]
    assert row["states"]["converged"] == 4 and row["seeds"] == 5 and row["not_converged"] == [4]
    assert out["not_converged"] == ["digits.cape.s4"] and out["patch"] == 2
    assert out["seeds"] == 5 and out["train_res"] == 16 and out["lr"] is None and out["cpu_seconds"] == 40.0
    assert sum(out["verdicts"].values()) == len(c)


def test_no_verdict_on_fewer_than_three_converged_pairs():
    res = {}
    for s in range(4):
        res[f"a{s}"] = _fake("cape", s, {"12": 0.8, "16": 0.97 + 0.001 * s, "32": 0.9}, conv=s == 0)
        res[f"b{s}"] = _fake("sine", s, {"12": 0.5, "16": 0.5 + 0.01 * s, "32": 0.4})
    c = summarize(res)["claims"]
    for name in ("cape_matches_sine_at_train_res", "cape_degrades_less_than_sine"):
        assert c[name]["verdict"] == "not decided" and "3 of 8 runs still learning" in c[name]["note"], name


def test_claims_cover_the_papers_comparisons():
    pairs = {(m, b) for m, b, *_ in CLAIMS.values()}
    assert {("cape", "sine"), ("cape", "table"), ("cape", "cape_noscale"), ("cape_mixed", "cape")} <= pairs


def test_section_renders_end_to_end():
    jobs = [dataclasses.replace(j.config, steps=3, eval_every=1, dim=16, test_res=(12, 32))
            for j in plan("full", 1) if not j.key.startswith("sweep")]
    res = {f"k{i}": run_resolution(c) for i, c in enumerate(jobs)}
    res["sw"] = {"sweep": True, "lr": LR, "variant": "cape", "seed": 100, "val_accuracy": 0.5}
    summary = summarize(res)
    import matplotlib.pyplot as plt

    saved = []

    def save(name, fig):
        assert len(fig.axes) == 2 and fig.legends
        plt.close(fig)
        saved.append(name)
        return f"{name}.png"

    md = get_section("cape").render(summary, save)
    assert saved == ["resolution"] and "detectable" in md and "Learning-rate rule" in md and "CPU time" in md
    assert "cape_mixed" in md and "32 px" in md and "2×2-pixel patches, 8×8 of them at the training resolution" in md and "Convergence gate" in md
    # the quick profile's variants: the claims it cannot read say which variants it does not train
    quick = [dataclasses.replace(j.config, steps=3, eval_every=1, dim=16, test_res=(12, 32)) for j in plan("quick", 1)]
    md = get_section("cape").render(summarize({f"q{i}": run_resolution(c) for i, c in enumerate(quick)}), save)
    assert "decided by the full profile" in md and "`cape_mixed`" in md
