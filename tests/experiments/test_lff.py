import json

import torch

from posenc.experiments import lff
from posenc.report.lff import SECTION, render

TINY = dict(grid=4, steps=6, batch=4, eval_every=3, eval_samples=8, dim=16, heads=2, hidden=8)


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
    assert lff.encoding_input("table1d", coords, 4).tolist() == [[0], [14]]
    torch.testing.assert_close(lff.encoding_input("sine2d", coords, 4), torch.tensor([[-0.3, -0.3], [3.3, 1.7]]))


def test_token_metrics_against_hand_count():
    logits = torch.tensor([2.0, -1.0, 3.0, -2.0, 1.0])
    labels = torch.tensor([1.0, 1.0, 0.0, 0.0, 0.0])
    m = lff.token_metrics(logits, labels)
    # TPR = 1/2, TNR = 1/3
    assert abs(m["bacc"] - (0.5 + 1 / 3) / 2) < 1e-6 and abs(m["acc"] - 2 / 5) < 1e-6


def test_steps_to_target():
    evals = [{"step": 10, "bacc": 0.5}, {"step": 20, "bacc": 0.95}]
    assert lff.steps_to_target(evals, "bacc", 0.9) == 20
    assert lff.steps_to_target(evals, "bacc", 0.99) is None


def test_isotropy_of_sinusoidal_is_separable_and_lff_init_is_isotropic():
    sine = lff.TransformerEncoder(2, 1, dim=64, num_heads=2, encoding=lff.build_encoding("sine2d", 64, 8, 8, 3.0, 0))
    lffm = lff.TransformerEncoder(2, 1, dim=512, num_heads=2, encoding=lff.LearnableFourierEncoding(
        in_dim=2, num_features=512, use_mlp=False, gamma=1 / 3.0))
    s = lff.isotropy(sine, "sine2d", 8)
    f = lff.isotropy(lffm, "lff_nomlp", 8)
    assert f["anisotropy"] < s["anisotropy"]
    assert lff.isotropy(sine, "table2d", 8) is None


def test_run_signal_shows_the_mlp_shrinks_the_position_dependent_part():
    res = lff.run_signal(lff.SignalConfig(grid=4, dim=16, heads=2, hidden=8, samples=8))
    assert set(res) == set(lff.ENCODINGS) - {"none"}
    for r in res.values():
        assert 0 <= r["position_dependent"] <= r["total"] + 1e-9
    json.dumps(res)


def test_run_grid_and_holdout_tiny_and_json():
    res = lff.run_grid(lff.GridConfig(encoding="lff_mlp", **TINY))
    assert len(res["loss_curve"]) == 6 and [e["step"] for e in res["evals"]] == [3, 6]
    assert res["isotropy_trained"]["anisotropy"] >= 0
    again = lff.run_grid(lff.GridConfig(encoding="lff_mlp", **TINY))
    assert again["loss_curve"] == res["loss_curve"]  # seeded
    hold = lff.run_holdout(lff.HoldoutConfig(encoding="table2d", grid=4, steps=4, batch=4, num_points=8,
                                             eval_samples=16, dim=16, heads=2, hidden=8))
    assert set(hold) >= {"heldout", "seen"}
    json.dumps(res), json.dumps(hold)


def test_plan_keys_unique_and_profiles():
    quick = lff.plan("quick")
    keys = [j.key for j in quick]
    assert len(keys) == len(set(keys))
    assert any(k.startswith("scale.") for k in keys) and any(k.startswith("holdout.") for k in keys)
    assert any(k.startswith("signal.") for k in keys)
    assert len(lff.plan("quick", 3)) == 3 * len(quick) // 2
    assert len(lff.plan("full")) > len(quick)


def _fake(enc, task, seed, bacc):
    curve = [1.0 / (s + 1) for s in range(5)]
    iso = {"distance": [0.5, 1.0], "axis": [0.9, 0.8], "diagonal": [0.9, 0.7], "anisotropy": 0.05}
    return {
        "loss_curve": curve, "evals": [{"step": 5, "bce": 0.1, "acc": 0.9, "bacc": bacc}],
        "auc_loss": 1.0 - bacc, "auc_test_bce": 0.1, "steps_to_target": 5 if bacc >= 0.9 else None,
        "final": {"bce": 0.1, "acc": 0.9, "bacc": bacc}, "isotropy_init": iso if enc in lff.CONTINUOUS else None,
        "isotropy_trained": iso if enc in lff.CONTINUOUS else None, "seconds": 1.0, "tokens_per_s": 100.0,
        "pos_to_token_rms_init": 0.5,
    }


def test_summarize_and_render_on_fake_results(tmp_path):
    results = {}
    for seed in range(2):
        for task in lff.TASKS:
            for enc in lff.ENCODINGS:
                bacc = 0.95 if enc == "lff_mlp" else 0.7 + 0.01 * seed
                results[f"grid.{task}.{enc}.s{seed}"] = _fake(enc, task, seed, bacc)
        for std in (0.3, 30.0):
            results[f"scale.std={std:g}.s{seed}"] = _fake("lff_mlp", "disk", seed, 0.6)
        results[f"signal.s{seed}"] = {e: {"total": 1.0, "position_dependent": 0.1 * (seed + 1)}
                                      for e in lff.ENCODINGS if e != "none"}
        for enc in ("table2d", "lff_mlp"):
            m = {"bce": 0.2, "acc": 0.8, "bacc": 0.6 if enc == "table2d" else 0.9}
            results[f"holdout.{enc}.s{seed}"] = {"heldout": m, "seen": {**m, "bacc": 0.9}}
    summary = lff.summarize(results)
    json.dumps(summary)
    c = summary["claims"]
    assert c["faster_convergence"]["holds"] and c["best_final_disk"]["holds"]
    assert c["tables_fail_on_unseen"]["holds"] and c["u_shaped_scale"]["holds"]
    assert summary["grid"]["disk"]["table2d"]["final_bacc"]["std"] > 0
    assert abs(summary["signal"]["lff_mlp"]["position_dependent"]["mean"] - 0.15) < 1e-9
    saved = []

    def save(name, fig):
        saved.append(name)
        return f"lff_{name}.png"

    md = render(summary, save)
    assert "± " in md and "confirmed at this scale" in md and "![" in md and "Positional signal" in md
    assert set(saved) == {"curves", "isotropy", "scale"}
    assert SECTION.name == "lff" and SECTION.quick_budget_s <= 120
