import dataclasses
import math

import pytest
import torch

from posenc.experiments.cape import (
    QUICK,
    TASKS,
    VARIANTS,
    ResolutionConfig,
    away_accuracy,
    build_model,
    pixel_centres,
    plan,
    render,
    run_resolution,
    sample_scenes,
    summarize,
)
from posenc.report.registry import get_section

CFG = ResolutionConfig()


def test_pixel_centres_are_symmetric_and_evenly_spaced():
    c = pixel_centres(4)
    torch.testing.assert_close(c, torch.tensor([-0.75, -0.25, 0.25, 0.75]))
    c = pixel_centres(3, 2)
    assert c.shape == (6,) and math.isclose(float(c.sum()), 0.0, abs_tol=1e-6)


def test_relation_labels_match_brightest_pixels():
    scenes = sample_scenes("relation", 64, CFG, torch.Generator().manual_seed(0))
    img, y = render("relation", scenes, 64, CFG)
    assert img.shape == (64, 2, 64, 64)
    c = pixel_centres(64)
    for b in range(64):
        coords = []
        for ch in range(2):
            flat = int(img[b, ch].argmax())
            coords.append((float(c[flat // 64]), float(c[flat % 64])))  # (row, col)
        (ry, rx), (by, bx) = coords
        left, above = rx < bx, ry < by
        assert int(y[b]) == 2 * int(left) + int(above)
        assert abs(rx - bx) > 0.15 and abs(ry - by) > 0.15  # min_gap 0.25, minus pixel rounding
    assert set(y.tolist()) == {0, 1, 2, 3}


@pytest.mark.parametrize("label,area", [(0, math.pi), (1, 1.6**2), (2, 1.8**2 / 2)])
def test_shape_areas_match_closed_forms(label, area):
    scenes = {"centre": torch.zeros(1, 2), "size": torch.tensor([0.5]), "label": torch.tensor([label])}
    img, y = render("shapes", scenes, 96, CFG)
    pixel_area = (2.0 / 96) ** 2
    measured = float(img.sum()) * pixel_area / 0.5**2  # in units of size^2
    assert y.tolist() == [label]
    assert measured == pytest.approx(area, rel=0.02)
    assert float(img.min()) >= 0.0 and float(img.max()) <= 1.0


def test_same_scene_at_every_resolution():
    scenes = sample_scenes("shapes", 8, CFG, torch.Generator().manual_seed(1))
    a, ya = render("shapes", scenes, 8, CFG)
    b, yb = render("shapes", scenes, 32, CFG)
    assert torch.equal(ya, yb)
    # the same shapes: equal areas and centroids (up to the coarse sampling)
    torch.testing.assert_close(a.mean(dim=(1, 2, 3)), b.mean(dim=(1, 2, 3)), atol=0.02, rtol=0.1)
    c8, c32 = pixel_centres(8), pixel_centres(32)
    cx8 = (a[:, 0] * c8).sum(dim=(1, 2)) / a[:, 0].sum(dim=(1, 2))
    cx32 = (b[:, 0] * c32).sum(dim=(1, 2)) / b[:, 0].sum(dim=(1, 2))
    torch.testing.assert_close(cx8, cx32, atol=0.05, rtol=0)


def test_digits_resampled():
    scenes = sample_scenes("digits", 5, CFG, torch.Generator().manual_seed(2))
    for res in (6, 20):
        img, y = render("digits", scenes, res, CFG, split="test")
        assert img.shape == (5, 1, res, res) and y.shape == (5,) and int(y.max()) < 10


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_variant_runs_at_every_resolution(variant):
    cfg = dataclasses.replace(CFG, variant=variant, dim=16)
    model = build_model(cfg).eval()
    scenes = sample_scenes("relation", 3, cfg, torch.Generator().manual_seed(0))
    for res in (6, 12, 24):
        out = model(render("relation", scenes, res, cfg)[0])
        assert out.shape == (3, 4) and bool(torch.isfinite(out).all())


def test_sine_and_cape_differ_only_in_training_mode():
    pos = torch.rand(2, 9, 2) * 2 - 1
    sine = build_model(dataclasses.replace(CFG, variant="sine")).encoder.encoding
    cape = build_model(dataclasses.replace(CFG, variant="cape")).encoder.encoding
    sine.eval(), cape.eval()
    torch.testing.assert_close(sine(pos), cape(pos))
    cape.train()
    assert not torch.allclose(sine(pos), cape(pos))
    assert cape.max_global_scaling == 1.4 and sine.max_global_scaling == 1.0


def test_tiny_run_is_deterministic():
    cfg = dataclasses.replace(CFG, variant="cape_mixed", steps=3, dim=16, eval_size=8, test_res=(6, 12))
    a, b = run_resolution(cfg), run_resolution(cfg)
    assert a["accuracy"] == b["accuracy"] and a["loss_curve"] == b["loss_curve"]
    assert set(a["accuracy"]) == {"6", "12"}
    assert a["converged"] == (a["train_accuracy"] >= 0.95) and a["train_accuracy"] == a["accuracy"]["12"]


def test_bad_inputs():
    with pytest.raises(ValueError, match="task"):
        build_model(dataclasses.replace(CFG, task="copy"))
    with pytest.raises(ValueError, match="task"):
        sample_scenes("copy", 2, CFG, torch.Generator())
    with pytest.raises(ValueError, match="variant"):
        build_model(dataclasses.replace(CFG, variant="rope"))
    with pytest.raises(ValueError, match="patch"):
        build_model(dataclasses.replace(CFG, test_res=(7,)))
    with pytest.raises(ValueError, match="profile"):
        plan("medium")


def test_plan():
    quick, full = plan("quick"), plan("full")
    assert len({j.key for j in quick}) == len(quick) and len({j.key for j in full}) == len(full)
    assert {j.config.variant for j in quick} == set(VARIANTS) and {j.config.task for j in full} == set(TASKS)
    assert len({j.config.seed for j in quick}) >= 2 and len({j.config.seed for j in full}) >= 5
    assert all(j.config.threads == 1 for j in quick) and quick[0].config == dataclasses.replace(QUICK, variant="none")
    assert len(get_section("cape").plan("quick", 3)) == len(quick) // 2 * 3


def test_away_accuracy():
    assert away_accuracy({"6": 0.5, "12": 1.0, "24": 0.7}, 12) == pytest.approx(0.6)
    assert math.isnan(away_accuracy({"12": 1.0}, 12))


def _fake(variant, seed, acc, converged=True, task="relation"):
    return {"task": task, "variant": variant, "seed": seed, "train_res": 12, "accuracy": acc,
            "train_accuracy": acc["12"], "converged": converged, "loss_curve": [1.0, 0.5]}


def test_summary_claims_from_paired_seeds():
    res = {}
    for s in range(4):
        res[f"a{s}"] = _fake("cape", s, {"6": 0.8 + 0.01 * s, "12": 0.99, "24": 0.9})
        res[f"b{s}"] = _fake("sine", s, {"6": 0.5 + 0.02 * s, "12": 0.995 - 0.001 * s, "24": 0.4})
        res[f"c{s}"] = _fake("table", s, {"6": 0.95, "12": 1.0, "24": 0.98 - 0.01 * s})
        res[f"d{s}"] = _fake("none", s, {"6": 0.3, "12": 0.4 + 0.01 * s, "24": 0.3}, converged=False)
        res[f"e{s}"] = _fake("cape_mixed", s, {"6": 0.9, "12": 0.7, "24": 0.95 - 0.01 * s}, converged=False)
    out = summarize(res)
    claims = out["claims"]
    assert claims["cape_matches_sine_at_train_res"]["verdict"] == "holds"
    assert claims["cape_degrades_less_than_sine"]["verdict"] == "holds"
    assert claims["cape_beats_table_away"]["verdict"] == "contradicted"
    # none never learns a positional task and is exempt from the learned check
    none = claims["cape_beats_none_away"]["comparisons"][0]
    assert none["verdict"] == "holds" and "note" not in none
    # cape_mixed did not learn the task at its training resolution: its transfer is not read
    mixed = claims["mixed_resolutions_help"]["comparisons"][0]
    assert mixed["mean"] > 0 and mixed["verdict"] == "not confirmed at this scale" and "cape_mixed" in mixed["note"]
    assert "scaling_helps_resolution_transfer" not in claims  # no cape_noscale runs
    row = out["table"]["relation"]["cape"]
    assert row["converged"] == 4 and row["seeds"] == 4
    assert math.isclose(row["away"]["mean"], statistics_mean([(0.8 + 0.01 * s + 0.9) / 2 for s in range(4)]))
    assert out["not_learned"]["relation"] == {"none": "0/4", "cape_mixed": "0/4"}


def statistics_mean(xs):
    return sum(xs) / len(xs)


def test_quick_section_runs_end_to_end():
    jobs = [dataclasses.replace(j.config, steps=2, dim=16, eval_size=4) for j in plan("quick", 1)[:3]]
    res = {f"k{i}": run_resolution(c) for i, c in enumerate(jobs)}
    summary = summarize(res)
    import matplotlib.pyplot as plt

    saved = []

    def save(name, fig):
        assert len(fig.axes) == 1 and fig.legends  # one panel per task, one legend for all
        plt.close(fig)
        saved.append(name)
        return f"{name}.png"

    md = get_section("cape").render(summary, save)
    assert "relation" in md and saved == ["resolution"] and "not learned" in md.lower()


def test_cape_half_has_half_the_frequencies():
    full = build_model(dataclasses.replace(CFG, variant="cape")).encoder.encoding.eval()
    half = build_model(dataclasses.replace(CFG, variant="cape_half")).encoder.encoding.eval()
    assert half.freq_scale == pytest.approx(math.pi / 2) and full.freq_scale == pytest.approx(math.pi)
    pos = torch.rand(5, 2, dtype=torch.float64) * 2 - 1
    # halving every frequency = embedding half the positions with the paper's frequencies
    torch.testing.assert_close(half(pos), full(pos / 2))
