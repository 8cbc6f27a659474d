"""The coords section end to end on tiny configs: jobs, summary, claims, rendering."""

import json
import math

import pytest

from posenc.experiments import coords
from posenc.report.coords import render


def _fit(name, params, model, **kw):
    cfg = coords.Fit1DConfig(name, coords._params(**params), model, length=64, num_rows=1, seed=0, iters=30,
                             mlp_signals=("china0",), **kw)
    return coords.run_fit_1d(cfg)


def test_run_fit_1d_reports_every_signal_and_theory_numbers():
    res = _fit("gaussian", dict(sigma=0.02, num_features=64), "lstsq")
    assert set(res["signals"]) == {"china0", "flower0", "multitone", "steps", "chirp"}
    assert res["stable_rank"] > 1 and res["dp_width"] > 0
    for sig in res["signals"].values():
        assert sig["train_psnr"] > sig["test_psnr"] - 1e-6
    json.dumps(res)  # JSON-serialisable
    mlp = _fit("gaussian", dict(sigma=0.02, num_features=64), "mlp")
    assert set(mlp["signals"]) == {"china0"}


def test_batched_linear_fit_equals_one_fit_per_signal():
    import torch

    from posenc.models.coordinate import fit_coordinates
    from posenc.positions import grid_1d

    res = _fit("gaussian", dict(sigma=0.02, num_features=64), "linear")
    enc = coords._encoding("gaussian", coords._params(sigma=0.02, num_features=64))
    sig = coords.signals_1d(64, 1, 0)["steps"].float()
    x = grid_1d(64)
    single = fit_coordinates(enc, x[::2], sig[::2], x[1::2], sig[1::2], "linear", iters=30, seed=0)
    # Adam is per-parameter, so only the initial weights differ: compare loosely
    assert res["signals"]["steps"]["train_psnr"] == pytest.approx(single.train_psnr, abs=3.0)


def test_summary_claims_and_render(tmp_path):
    results = {}
    for name, params in [("gaussian", dict(sigma=0.02, num_features=64)), ("rff", dict(sigma=8.0, num_features=64)),
                         ("impulse", dict(num_features=64)), ("random", dict(num_features=64))]:
        for model in ("lstsq",):
            results[f"table-{name}-{model}-s0"] = _fit(name, params, model)
    for sigma in (0.005, 0.02):
        results[f"sweep-n64-gaussian-{sigma:.3e}-s0"] = _fit("gaussian", dict(sigma=sigma, num_features=64), "lstsq")
    theory_cfg = coords.TheoryConfig(num_points=64, num_features=64, sigmas=(0.02, 0.05), sample_counts=(16, 32),
                                     rff_features=(16, 32))
    results["theory"] = coords.run_theory(theory_cfg)
    img = coords.Fit2DConfig("gaussian", coords._params(sigma=0.05, num_features=16), "lstsq", size=8)
    results["image-gaussian-lstsq-s0"] = coords.run_fit_2d(img)
    summary = coords.summarize(results)
    json.dumps(summary)
    assert {"gaussian_vs_rff_lstsq", "impulse_memorises_lstsq", "best_sigma_where_theory_puts_it"} <= set(summary["claims"])
    claim = summary["claims"]["gaussian_vs_rff_lstsq"]
    # paired per (seed, signal): the same signals of the two fits, one difference each
    g = {k: v["test_psnr"] for k, v in results["table-gaussian-lstsq-s0"]["signals"].items()}
    r = {k: v["test_psnr"] for k, v in results["table-rff-lstsq-s0"]["signals"].items()}
    assert claim["diffs"] == pytest.approx([g[k] - r[k] for k in sorted(g)])
    assert claim["n"] == len(g) >= 3 and claim["verdict"] in ("holds", "not confirmed at this scale", "contradicted")
    assert "holm_verdict" in claim and "holm_verdict" in summary["claims"]["impulse_memorises_lstsq"]
    saved = []

    def save(name, fig):
        saved.append(name)
        return f"coords_{name}.png"

    md = render(summary, save)
    assert "| encoding | model |" in md and "coords_sweep.png" in md and saved == ["sweep"]


def test_plans_have_unique_keys_and_quick_is_smaller():
    quick = coords.plan("quick", None)
    assert len({j.key for j in quick}) == len(quick)
    full = coords.plan("full", None)
    assert len(full) > 3 * len(quick)
    assert len(coords.plan("quick", 1)) < len(quick)


def test_embedders_job_matches_closed_forms_and_is_full_only():
    """The authors' all-embedder notebook (#9 Sec. 4): SR/DP of the +-1 square and sin + 0.7."""
    res = coords.run_embedders(coords.EmbeddersConfig(num_features=400, sample_counts=(1, 4, 10)))
    json.dumps(res)
    assert res["impulse"]["stable_rank"] == pytest.approx([1.0, 4.0, 10.0])
    # similarity to the middle row: +-1 square 1 - 4|d|; 0/1 square 1 - 2|d|; sin + 0.7 (cos(2 pi d)/2 + 0.49)/0.99
    assert res["square +-1"]["dp_width"] == pytest.approx(0.9 / 4, abs=2.5e-3)
    assert res["square 0/1"]["dp_width"] == pytest.approx(0.9 / 2, abs=2.5e-3)
    d_sine = math.acos((0.1 * 0.99 - 0.49) / 0.5) / (2 * math.pi)
    assert res["sine + 0.7"]["dp_width"] == pytest.approx(d_sine, abs=2.5e-3)
    assert "embedders" in {j.key for j in coords.plan("full", 1)}
    assert "embedders" not in {j.key for j in coords.plan("quick", 1)}
    md = render(coords.summarize({"embedders": res, "theory": None}), lambda name, fig: f"{name}.png")
    assert "square +-1" in md and "all-embedder" in md
