import json
import math

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
    json.dumps(dig)


def _fake(task, enc, seed, value):
    base = {"task": task, "encoding": enc, "seed": seed, "loss_curve": [[1, 1.0], [2, value]],
            "evals": [{"step": 2, "acc": value, "bacc": value, "loss": 1 - value, "bce": 1 - value}],
            "auc_loss": 1 - value, "converged": True, "w_r_change": 0.1 if enc == "lff_mlp" else None}
    if task == "digits":
        return {**base, "final_acc": value, "final_test_loss": 1 - value}
    iso = {"distance": [0.5], "axis": [0.5], "diagonal": [0.5 - (1 - value) / 10], "anisotropy": (1 - value) / 10}
    return {**base, "final_bacc": value, "final_bce": 1 - value, "finer": {"9": {"bacc": value}},
            "finer_bacc": value, "isotropy": iso if enc in lff.CONTINUOUS else None,
            "anisotropy": iso["anisotropy"] if enc in lff.CONTINUOUS else None}


def test_summary_pairs_seeds_and_reads_verdicts(tmp_path):
    results = {}
    for seed in range(4):
        for enc, v in (("lff_mlp", 0.9), ("table2d", 0.6), ("sine2d", 0.95), ("mlp", 0.9)):
            noise = 0.01 * seed if enc == "mlp" else 0.0  # LFF - MLP straddles 0
            for task in ("digits", "grid"):
                results[f"{task}.{enc}.s{seed}"] = _fake(task, enc, seed, v + noise - 0.015)
    summary = lff.summarize(results)
    json.dumps(summary)
    final = summary["claims"]["digits_final"]["vs"]
    assert final["table2d"]["verdict"] == "holds" and final["table2d"]["mean"] == pytest.approx(0.3)
    assert final["sine2d"]["verdict"] == "contradicted"
    assert final["mlp"]["verdict"] == "not confirmed at this scale"
    assert summary["claims"]["digits_faster"]["vs"]["table2d"]["verdict"] == "holds"  # lower loss is better
    assert "table2d" not in summary["claims"]["grid_isotropy"]["vs"]  # tables have no continuous isotropy
    assert summary["claims"]["grid_isotropy"]["vs"]["sine2d"]["verdict"] == "contradicted"
    assert summary["table"]["grid"]["lff_mlp"]["converged"] == "4/4" and summary["seeds"] == 4
    saved = []

    def save(name, fig):
        saved.append(name)
        fig.savefig(tmp_path / f"{name}.png")
        return f"lff_{name}.png"

    md = render(summary, save)
    assert saved == ["curves", "isotropy"]
    assert "indicative" in md and "+0.300 [+0.300, +0.300] (n = 4)" in md
    assert "**holds**" in md and "**contradicted**" in md
    assert set(COLORS) == set(lff.ENCODINGS)


def test_plans_profiles_and_budget():
    quick, full = lff.plan("quick"), lff.plan("full")
    assert len({j.key for j in quick}) == len(quick) and len({j.key for j in full}) == len(full)
    assert len({j.config.seed for j in full}) >= 8
    assert all(j.config.lr_scales == lff.LR_SCALES for j in quick + full)  # one W_r choice for all
    assert {j.config.encoding for j in full} == set(lff.ENCODINGS)
    assert SECTION.quick_budget_s <= 100
    with pytest.raises(ValueError, match="profile"):
        lff.plan("medium")


def test_claim_summary_line_names_each_baseline_verdict():
    results = {}
    for seed in range(3):
        for enc, v in (("lff_mlp", 0.9), ("table2d", 0.5)):
            results[f"digits.{enc}.s{seed}"] = _fake("digits", enc, seed, v + 0.01 * seed * (enc == "table2d"))
    line = lff.summarize(results)["claims"]["digits_final"]["verdict"]
    assert line == "holds vs table2d"
