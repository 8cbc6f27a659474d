import json
import math
import statistics

import pytest
import torch

from posenc.experiments import lff
from posenc.report.lff import COLORS, SECTION, render

TINY_GRID = dict(grid=4, test_grids=(6,), steps=6, batch=4, eval_every=3, eval_samples=8, dim=16, heads=2, hidden=8)
TINY_DIGITS = dict(steps=4, batch=8, eval_every=2, dim=16, heads=2, hidden=8)


def test_build_encoding_and_inputs_cover_all_names():
    coords = torch.tensor([[-0.9, -0.9], [0.9, 0.1]])
    for name in lff.ENCODINGS:
        enc = lff.build_encoding(name, 16, 4, 8, 3.0, 0)
        pos = lff.encoding_input(name, coords, 4)
        assert (enc is None) == (name == "none")
        if enc is not None:
            out = lff.TransformerEncoder(2, 1, dim=16, num_heads=2, encoding=enc).position_features(pos)
            assert out.shape == (2, 16)
    assert lff.encoding_input("table2d", coords, 4).tolist() == [[0, 0], [3, 2]]
    torch.testing.assert_close(lff.encoding_input("sine2d", coords, 4), torch.tensor([[-0.3, -0.3], [3.3, 1.7]]))
    with pytest.raises(ValueError, match="encoding"):
        lff.build_encoding("table1d", 16, 4, 8, 3.0, 0)


def test_token_metrics_against_hand_count():
    logits = torch.tensor([2.0, -1.0, 3.0, -2.0, 1.0])
    labels = torch.tensor([1.0, 1.0, 0.0, 0.0, 0.0])
    m = lff.token_metrics(logits, labels)
    # TPR = 1/2, TNR = 1/3
    assert abs(m["bacc"] - (0.5 + 1 / 3) / 2) < 1e-6 and abs(m["acc"] - 2 / 5) < 1e-6


def test_centred_isotropy_against_a_hand_computed_case():
    """f(x, y) = (1 + x, y^2, 3): centring removes (1, m, 3), m = mean of y^2 over the cell centres."""
    grid = 4  # cell centres at +-1/4, +-3/4: m = (1/16 + 9/16) / 2; the centred reference f(0) - mean = (0, -m, 0)
    res = lff.centred_isotropy(lambda c: torch.stack([1 + c[..., 0], c[..., 1] ** 2, 3 + 0 * c[..., 0]], -1),
                               grid, steps=3)
    m = 0.3125
    assert res["distance"] == pytest.approx([0.5, 1.0, 1.5])
    for d, axis, diag in zip(res["distance"], res["axis"], res["diagonal"]):
        u = d * 2 / grid  # the distance in coordinates (one cell = 2 / grid)
        # along +-x: (+-u, -m, 0) -> cos = m / sqrt(u^2 + m^2); along +-y: (0, u^2 - m, 0) -> cos = -sign(u^2 - m)
        cos_x = m / math.sqrt(u**2 + m**2)
        cos_y = -math.copysign(1.0, u**2 - m)
        assert axis == pytest.approx((2 * cos_x + 2 * cos_y) / 4, abs=1e-6)
        # along a diagonal: (+-a, a^2 - m, 0), a = u / sqrt 2 -> cos = -(a^2 - m) / sqrt(a^2 + (a^2 - m)^2)
        a = u / math.sqrt(2)
        cos_d = -(a**2 - m) / math.sqrt(a**2 + (a**2 - m) ** 2)
        assert diag == pytest.approx(cos_d, abs=1e-6)
    assert res["anisotropy"] == pytest.approx(
        sum(abs(a - b) for a, b in zip(res["axis"], res["diagonal"])) / 3)


def test_centred_isotropy_ignores_the_constant_part():
    """A huge constant added to isotropic features changes nothing once centred (raw cosine would be ~1)."""
    def radial(c):
        return torch.stack([torch.cos(3 * c.norm(dim=-1)), torch.sin(3 * c.norm(dim=-1))], -1)

    plain = lff.centred_isotropy(radial, 8)
    shifted = lff.centred_isotropy(lambda c: radial(c) + 100.0, 8)
    assert plain["anisotropy"] == pytest.approx(shifted["anisotropy"], abs=1e-6)  # float32 features
    assert plain["anisotropy"] < 0.05  # a radial function: axis and diagonal agree up to the grid mean


def test_run_grid_and_digits_tiny_are_json_and_deterministic():
    res = lff.run_grid(lff.GridConfig(encoding="lff_mlp", **TINY_GRID))
    assert [e["step"] for e in res["evals"]] == [3, 6]
    assert set(res["finer"]) == {"6"} and 0 <= res["finer_bacc"] <= 1
    assert res["anisotropy"] >= 0 and res["w_r_change"] > 0
    json.dumps(res)
    assert lff.run_grid(lff.GridConfig(encoding="lff_mlp", **TINY_GRID))["evals"] == res["evals"]
    table = lff.run_grid(lff.GridConfig(encoding="table2d", **TINY_GRID))  # resampled to 6x6
    assert table["anisotropy"] is None and 0 <= table["finer"]["6"]["bacc"] <= 1
    dig = lff.run_digits(lff.DigitsConfig(encoding="table2d", **TINY_DIGITS))
    assert [e["step"] for e in dig["evals"]] == [2, 4] and 0 <= dig["final_acc"] <= 1
    assert {"val_acc", "val_loss", "test_acc", "test_loss"} <= set(dig["evals"][-1])
    assert 0 < dig["cpu_seconds"] and 0 < res["cpu_seconds"]
    assert dig["val_acc"] == dig["evals"][-1]["val_acc"] and dig["final_acc"] == dig["evals"][-1]["test_acc"]
    assert {"val_bce", "test_bce", "val_bacc"} <= set(res["evals"][-1]) and res["final_bce"] == res["evals"][-1]["test_bce"]
    json.dumps(dig)


def test_digits_split_is_disjoint_and_fixed():
    cfg = lff.DigitsConfig()
    a, b = lff._digits_split(cfg), lff._digits_split(lff.DigitsConfig(seed=5))
    assert (a["x_train"].shape[0], a["x_val"].shape[0], a["x_test"].shape[0]) == (1078, 270, 449)
    assert torch.equal(a["x_val"], b["x_val"]) and torch.equal(a["y_train"], b["y_train"])  # seeds share the data
    flat = {split: {tuple(x.flatten().tolist()) + (int(y),) for x, y in zip(a[f"x_{split}"], a[f"y_{split}"])}
            for split in ("train", "val", "test")}
    # distinct images of the digits can coincide; nearly none are shared across splits
    assert len(flat["val"] & flat["test"]) <= 2 and len(flat["train"] & flat["val"]) <= 5
    with pytest.raises(ValueError, match="val_fraction"):
        lff._digits_split(lff.DigitsConfig(val_fraction=1.0))


def _trunk(model):
    return {k: v for k, v in model.named_parameters() if "encoding" not in k.split(".")}


def test_runs_of_one_seed_share_the_transformer_across_encodings():
    """Paired initialisation: same seed, different encodings -> identical transformer weights."""
    for build, cfg in ((lff.build_digits_model, lff.DigitsConfig), (lff.build_grid_model, lff.GridConfig)):
        trunks = {enc: _trunk(build(cfg(encoding=enc, seed=3, **({"dim": 16, "heads": 2}))))
                  for enc in lff.ENCODINGS}
        ref = trunks["none"]
        for enc, t in trunks.items():
            assert t.keys() == ref.keys()
            assert all(torch.equal(t[k], ref[k]) for k in ref), enc
        other = _trunk(build(cfg(encoding="lff_mlp", seed=4, dim=16, heads=2)))
        assert not torch.equal(other["encoder.head.weight" if "encoder.head.weight" in other else "head.weight"],
                               ref["encoder.head.weight" if "encoder.head.weight" in ref else "head.weight"])
    # LFF and fixed RFF of one seed also start from the same W_r and MLP (only learning W_r differs)
    a = lff.build_digits_model(lff.DigitsConfig(encoding="lff_mlp", seed=2)).encoder.encoding
    b = lff.build_digits_model(lff.DigitsConfig(encoding="rff_mlp", seed=2)).encoder.encoding
    assert torch.equal(a.w_r, b.w_r) and all(torch.equal(p, q) for p, q in zip(a.mlp.parameters(), b.mlp.parameters()))


def _evals(values, key="val_acc"):
    return [{"step": 10 * (i + 1), key: v} for i, v in enumerate(values)]


def test_the_gate_reads_each_tasks_validation_metric():
    # digits: validation accuracy, chance 0.1, plateau tolerance 0.03 over the last third (steps 70-100)
    assert lff.GATES["digits"].chance == 0.1 and lff.GATES["digits"].tol == 0.03
    dig = {"task": "digits", "evals": _evals([0.3, 0.6, 0.8, 0.9, 0.93, 0.95, 0.955, 0.96, 0.955, 0.96])}
    assert lff.run_state(dig) == "converged"
    rising = {**dig, "evals": _evals([0.3, 0.6, 0.8, 0.85, 0.87, 0.89, 0.91, 0.93, 0.95, 0.97])}
    assert lff.run_state(rising) == "still learning"
    at_chance = {**dig, "evals": _evals([0.1, 0.11, 0.09, 0.12, 0.1, 0.11, 0.1, 0.12, 0.09, 0.11])}
    assert lff.run_state(at_chance) == "failed to learn"
    # grid: validation BCE (lower is better), chance ln 2
    grid = {"task": "grid", "evals": _evals([0.6, 0.3, 0.1, 0.05, 0.04, 0.036, 0.038, 0.035, 0.036, 0.035], "val_bce")}
    assert lff.run_state(grid) == "converged"
    falling = {**grid, "evals": _evals([0.6, 0.5, 0.4, 0.3, 0.25, 0.2, 0.15, 0.1, 0.07, 0.05], "val_bce")}
    assert lff.run_state(falling) == "still learning"
    flat = {**grid, "evals": _evals([0.69, 0.70, 0.69, 0.69, 0.68, 0.69, 0.7, 0.69, 0.69, 0.69], "val_bce")}
    assert lff.run_state(flat) == "failed to learn"
    assert lff.run_state({**dig, "evals": _evals([0.3, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, math.nan])}) == \
        "failed to learn"  # the last evaluation broke down


def test_detectable_difference_against_table_values_and_the_noncentral_t():
    diffs = [0.01, -0.02, 0.03, 0.0, 0.015, -0.005]
    s = statistics.stdev(diffs)
    # t_{0.975, 5} = 2.5706, t_{0.80, 5} = 0.9195 (printed t tables)
    assert lff.detectable_difference(diffs) == pytest.approx((2.5706 + 0.9195) * s / math.sqrt(6), rel=1e-4)
    # t_{0.975, 7} = 2.3646, t_{0.90, 7} = 1.4149
    d8 = [0.1, 0.3, -0.2, 0.0, 0.05, 0.12, -0.07, 0.2]
    assert lff.detectable_difference(d8, power=0.9) == pytest.approx(
        (2.3646 + 1.4149) * statistics.stdev(d8) / math.sqrt(8), rel=1e-4)
    # the exact power of the t test at that true difference (noncentral t) is close to 80 %
    from scipy.stats import nct, t

    for n in (6, 8, 20):
        delta = lff.detectable_difference([1.0, -1.0] * (n // 2))  # s = 1.0 * sqrt(n / (n - 1))
        sigma = math.sqrt(n / (n - 1))
        crit = t.ppf(0.975, n - 1)
        power = 1 - nct.cdf(crit, n - 1, delta / sigma * math.sqrt(n))
        assert 0.75 < power < 0.82, (n, power)
    assert lff.detectable_difference([0.1]) is None and lff.detectable_difference([]) is None
    assert lff.detectable_difference([0.2, 0.2, 0.2]) == 0.0
    for kw in ({"level": 1.0}, {"power": 0.0}, {"power": True}, {"level": "0.9"}):
        with pytest.raises(ValueError, match=next(iter(kw))):
            lff.detectable_difference([0.1, 0.2], **kw)
    with pytest.raises(ValueError, match="diffs"):
        lff.detectable_difference([0.1, math.nan])


def test_learning_rate_rule():
    # medians: 1e-3 -> 0.90, 3e-3 -> 0.95, 1e-2 -> 0.93 (one diverged run does not move a median)
    scores = {1e-3: [0.9, 0.8, 0.95], 3e-3: [0.95, 0.97, 0.5], 1e-2: [0.93, math.nan, 0.99, 0.92]}
    assert lff.choose_lr(scores, higher_is_better=True) == 3e-3
    assert lff.choose_lr({1e-3: [0.2, 0.3], 1e-2: [0.25, 0.1]}, higher_is_better=False) == 1e-2  # a loss
    assert lff.choose_lr({1e-2: [0.9], 1e-3: [0.9]}, higher_is_better=True) == 1e-3  # a tie: the smaller rate
    assert lff.choose_lr({1e-3: [0.5, 0.5, 0.5], 1e-2: [math.nan, math.nan, 0.9]}, True) == 1e-3  # NaN is worst
    with pytest.raises(ValueError, match="scores"):
        lff.choose_lr({}, True)
    with pytest.raises(ValueError, match="scores"):
        lff.choose_lr({1e-3: []}, True)


def _fake(task, enc, seed, value, converged=True, lr=None):
    """A result; unconverged runs still improve their validation metric by 0.05 per evaluation at the end."""
    rise = [0.0] * 10 if converged else [-0.05 * (9 - i) for i in range(10)]
    evals = [{"step": i + 1, "test_acc": value, "test_bacc": value, "val_acc": value + r, "val_bce": 1 - value - r}
             for i, r in enumerate(rise)]
    base = {"task": task, "encoding": enc, "seed": seed, "lr": lr or lff.LR[task],
            "loss_curve": [[1, 1.0], [2, value]], "evals": evals,
            "auc_loss": 1 - value, "state": "converged", "w_r_change": 0.1 if enc == "lff_mlp" else None,
            "cpu_seconds": 2.5}
    if task == "digits":
        return {**base, "final_acc": value, "final_test_loss": 1 - value, "val_acc": value}
    iso = {"distance": [0.5], "axis": [0.5], "diagonal": [0.5 - (1 - value) / 10], "anisotropy": (1 - value) / 10}
    return {**base, "final_bacc": value, "final_bce": 1 - value, "val_bce": 1 - value,
            "finer": {"9": {"bacc": value}}, "finer_bacc": value, "isotropy": iso if enc in lff.CONTINUOUS else None,
            "anisotropy": iso["anisotropy"] if enc in lff.CONTINUOUS else None}


def _save(tmp_path, saved):
    def save(name, fig):
        saved.append(name)
        fig.savefig(tmp_path / f"{name}.png")
        return f"lff_{name}.png"
    return save


def test_summary_pairs_seeds_and_reads_verdicts(tmp_path):
    results = {}
    for seed in range(4):
        for enc, v in (("lff_mlp", 0.9), ("table2d", 0.6), ("sine2d", 0.95), ("mlp", 0.9)):
            noise = 0.03 * seed if enc == "mlp" else 0.0  # LFF - MLP straddles 0 and the 0.01 that matters
            for task in ("digits", "grid"):
                results[f"{task}.{enc}.s{seed}"] = _fake(task, enc, seed, v + noise - 0.015)
    summary = lff.summarize(results)
    json.dumps(summary)
    final = summary["claims"]["digits_final"]["vs"]
    assert final["table2d"]["verdict"] == "holds" and final["table2d"]["mean"] == pytest.approx(0.3)
    assert final["table2d"]["detectable"] == pytest.approx(0.0, abs=1e-12)  # identical differences
    assert final["sine2d"]["verdict"] == "contradicted"
    assert final["mlp"]["verdict"] == "not confirmed at this scale"
    assert final["mlp"]["detectable"] == pytest.approx(
        (3.1824 + 0.9785) * statistics.stdev(final["mlp"]["diffs"]) / 2, rel=1e-4)  # t_{.975,3}, t_{.80,3}
    assert summary["claims"]["digits_faster"]["vs"]["table2d"]["verdict"] == "holds"  # lower loss is better
    # LFF within 0.005 of the sinusoids on every seed: "LFF is better" is contradicted by its smallest
    # difference that matters (0.01 of accuracy), not merely "not confirmed"
    results_tie = dict(results)
    for seed in range(4):
        results_tie[f"digits.sine2d.s{seed}"] = _fake("digits", "sine2d", seed, 0.9 - 0.015 + 0.001 * (seed % 2))
    tie = lff.summarize(results_tie)["claims"]["digits_final"]["vs"]["sine2d"]
    assert tie["sesoi"] == 0.01 and tie["high"] < 0.01 < tie["high"] + 0.02 and tie["verdict"] == "contradicted"
    assert "grid_final" not in summary["claims"]  # solved by every converged run: a tie by construction
    assert "table2d" not in summary["claims"]["grid_isotropy"]["vs"]  # tables have no continuous isotropy
    assert summary["claims"]["grid_isotropy"]["vs"]["sine2d"]["verdict"] == "contradicted"
    assert summary["table"]["grid"]["lff_mlp"]["states"]["converged"] == 4 and summary["seeds"] == 4
    assert summary["not_converged"] == {"digits": [], "grid": []} and summary["sweep"] == {}
    saved = []
    md = render(summary, _save(tmp_path, saved))
    assert saved == ["curves", "isotropy"]
    assert "+0.300 [+0.300, +0.300] (n = 4)" in md and "No run was still learning." in md
    assert summary["cost"] == {"runs": 32, "timed": 32, "cpu_seconds": 80.0} and "80 s of CPU" in md
    assert "**holds**" in md and "**contradicted**" in md and "δ₈₀" in md
    assert set(COLORS) == set(lff.ENCODINGS)


def test_convergence_gate_drops_still_learning_runs_from_every_claim(tmp_path):
    """A run still learning leaves every pairing it is in; the summary and report name it."""
    results = {}
    for seed in range(5):
        for enc, v in (("lff_mlp", 0.9), ("table2d", 0.7 + 0.01 * seed), ("sine2d", 0.8)):
            bad = (enc == "lff_mlp" and seed == 1) or (enc == "sine2d" and seed == 3)
            # an unconverged run with a wild value: if it leaked into a claim, the mean would move
            results[f"digits.{enc}.s{seed}"] = _fake("digits", enc, seed, 0.45 if bad else v, converged=not bad)
    summary = lff.summarize(results)
    assert summary["not_converged"]["digits"] == ["digits.sine2d.s3", "digits.lff_mlp.s1"]
    vs_table = summary["claims"]["digits_final"]["vs"]["table2d"]
    assert vs_table["n"] == 4 and vs_table["excluded"] == [1] and vs_table["dropped"] == 1
    assert vs_table["diffs"] == pytest.approx([0.2, 0.18, 0.17, 0.16])
    vs_sine = summary["claims"]["digits_final"]["vs"]["sine2d"]
    assert vs_sine["n"] == 3 and vs_sine["excluded"] == [1, 3] and vs_sine["mean"] == pytest.approx(0.1)
    assert summary["table"]["digits"]["lff_mlp"]["states"] == {"converged": 4, "failed to learn": 0,
                                                               "still learning": 1}
    md = render(summary, _save(tmp_path, []))
    assert "Still learning (2; left out of the claims that use them): `digits.sine2d.s3`, `digits.lff_mlp.s1`." in md
    assert "| 1, 3 |" in md
    # with every seed of a pair gated out the claim is not decided, with no interval
    for seed in range(5):
        results[f"digits.lff_mlp.s{seed}"] = _fake("digits", "lff_mlp", seed, 0.9, converged=False)
    d = lff.summarize(results)["claims"]["digits_final"]["vs"]["table2d"]
    assert d["n"] == 0 and d["verdict"] == "not decided" and d["detectable"] is None and "still learning" in d["note"]
    assert "no converged pair" in render(lff.summarize(results), _save(tmp_path, []))


def test_sweep_summary_applies_the_rule_and_checks_the_frozen_rate(tmp_path):
    results = {}
    for lr, v in ((1e-3, 0.90), (3e-3, 0.95), (1e-2, 0.93)):
        for seed in lff.SWEEP_SEEDS:
            for enc in lff.COMPARED:
                val = v + (0.03 if (enc == "table2d" and lr == 1e-2) else 0.0)  # one encoding prefers 1e-2
                results[f"sweep.digits.lr{lr:g}.{enc}.s{seed}"] = _fake("digits", enc, seed, val, lr=lr)
    for seed in range(2):
        for enc in ("lff_mlp", "table2d"):
            results[f"digits.{enc}.s{seed}"] = _fake("digits", enc, seed, 0.9)
    summary = lff.summarize(results)
    s = summary["sweep"]["digits"]
    assert s["chosen"] == 3e-3 and s["median"] == {"0.001": pytest.approx(0.9), "0.003": pytest.approx(0.95),
                                                     "0.01": pytest.approx(0.93)}
    assert s["per_encoding"]["table2d"]["0.01"] == pytest.approx(0.96) and s["runs"]["0.003"] == 18
    assert s["agrees"] == (lff.LR["digits"] == 3e-3)
    assert summary["table"]["digits"].keys() == {"table2d", "lff_mlp"}  # sweep runs stay out of the claims
    assert summary["claims"]["digits_final"]["vs"]["table2d"]["n"] == 2
    saved = []
    md = render(summary, _save(tmp_path, saved))
    assert "sweep" in saved and "chosen **0.003**" in md


def test_plans_profiles_and_budget():
    quick, full = lff.plan("quick"), lff.plan("full")
    assert len({j.key for j in quick}) == len(quick) and len({j.key for j in full}) == len(full)
    claim_seeds = {j.config.seed for j in quick if not j.key.startswith("sweep.")}
    assert len(claim_seeds) >= 3 and {j.key.split(".")[0] for j in quick} == {"digits"}
    assert len({j.config.seed for j in full if not j.key.startswith("sweep.")}) >= 8
    assert all(j.config.lr_scales == lff.LR_SCALES for j in quick + full)  # one W_r choice for all
    assert {j.config.encoding for j in full} == set(lff.ENCODINGS)
    for j in quick + full:  # one learning rate per task for every encoding (the sweep's runs aside)
        if not j.key.startswith("sweep."):
            assert j.config.lr == lff.LR[j.key.split(".")[0]]
    sweep = [j for j in full if j.key.startswith("sweep.")]
    assert {j.config.lr for j in sweep} == set(lff.LR_SWEEP) and {j.config.seed for j in sweep} == set(lff.SWEEP_SEEDS)
    assert not {j.config.seed for j in sweep} & (claim_seeds | {j.config.seed for j in full if j not in sweep})
    assert len(sweep) == 2 * len(lff.LR_SWEEP) * len(lff.SWEEP_SEEDS) * len(lff.COMPARED)
    assert {j.key.split(".")[1] for j in sweep} == {"digits", "grid"}
    # quick's runs are the full profile's runs with the same keys (a subset of it)
    full_by_key = {j.key: j for j in full}
    assert all(full_by_key[j.key].config == j.config for j in quick)
    assert SECTION.quick_budget_s <= 300
    with pytest.raises(ValueError, match="profile"):
        lff.plan("medium")


def test_claim_summary_line_names_each_baseline_verdict():
    results = {}
    for seed in range(3):
        for enc, v in (("lff_mlp", 0.9), ("table2d", 0.5)):
            results[f"digits.{enc}.s{seed}"] = _fake("digits", enc, seed, v + 0.01 * seed * (enc == "table2d"))
    line = lff.summarize(results)["claims"]["digits_final"]["verdict"]
    assert line == "holds vs table2d"
