import math
import subprocess
import sys

import pytest

from posenc.experiments.gir import MODELS, GIRConfig, plan, run_gir, summarize
from posenc.report.registry import get_section


@pytest.mark.parametrize("model", ["gcn", "pgnn-f", "gir", "gir-indication", "gir-distance", "gat+gir"])
def test_run_gir_smoke(model):
    cfg = GIRConfig("grid-link", False, model, seed=0, epochs=3, eval_every=1, num_anchors=8, gir_rounds=2)
    res = run_gir(cfg)
    assert 0.0 <= res["test_auc"] <= 1.0 and 0.0 <= res["val_auc"] <= 1.0
    assert len(res["curve"]) == 3 and math.isfinite(res["final_loss"])


def test_run_gir_is_deterministic():
    cfg = GIRConfig("communities-pair", False, "pgnn-e", seed=1, epochs=2, eval_every=1)
    a, b = run_gir(cfg), run_gir(cfg)
    assert a["curve"] == b["curve"]


def test_bad_model_and_task():
    with pytest.raises(ValueError, match="model"):
        run_gir(GIRConfig("grid-link", False, "mlp", 0, epochs=1))
    with pytest.raises(ValueError, match="task"):
        run_gir(GIRConfig("cora", False, "gcn", 0, epochs=1))


def test_plans():
    quick = plan("quick")
    assert len({j.key for j in quick}) == len(quick) >= 12
    assert {j.config.seed for j in quick} == {0, 1}
    full = plan("full")
    assert all(j.config.epochs == 2001 for j in full)
    assert {j.config.model for j in full} == set(MODELS)
    with pytest.raises(ValueError, match="profile"):
        plan("huge")


def _fake(task, model, seed, auc):
    return {"task": task, "transductive": False, "model": model, "seed": seed, "val_auc": auc,
            "test_auc": auc, "seconds": 1.0, "epochs": 10, "curve": [[0, 0.5, auc]]}


def test_summarize_claims_and_render():
    results = {}
    for s in range(2):
        for model, auc in (("gcn", 0.5), ("pgnn-e", 0.9), ("gir", 0.95), ("gcn+gir", 0.93)):
            results[f"{model}.{s}"] = _fake("grid-link", model, s, auc + 0.01 * s)
    summ = summarize(results)
    row = summ["table"]["grid-link-I"]
    assert row["gir"]["mean"] == pytest.approx(0.955) and row["gir"]["n"] == 2
    assert summ["verdicts"] == {"gir_ge_pgnn": True, "gir_far_above_gnn": True, "fusion_helps": True}
    assert summ["claims"]["fusion_helps"]["grid-link-I.gcn"]["beats_both"] is False  # 0.935 < GIR 0.955
    results["gir.0"] = _fake("grid-link", "gir", 0, 0.6)
    results["gir.1"] = _fake("grid-link", "gir", 1, 0.6)
    assert summarize(results)["verdicts"]["gir_ge_pgnn"] is False
    results["gir.0"] = _fake("grid-link", "gir", 0, 0.898)  # 0.004 below P-GNN's 0.905: a tie
    results["gir.1"] = _fake("grid-link", "gir", 1, 0.904)
    tie = summarize(results)["claims"]["gir_ge_pgnn"]["grid-link-I"]
    assert tie["holds"] is True and tie["strict"] is False
    saved = []
    md = get_section("gir").render(summ, lambda name, fig: saved.append(name) or f"gir_{name}.png")
    assert "GIR (path)" in md and "confirmed" in md and saved == ["curves"]


def test_import_posenc_does_not_import_graph():
    code = "import sys, posenc; assert 'posenc.graph' not in sys.modules; assert 'torch_geometric' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_pgnn_rows_use_the_official_configuration():
    """The section's P-GNN rows default to the code that produced the paper's numbers."""
    cfg = GIRConfig("grid-link", False, "pgnn-e", seed=0, epochs=1, eval_every=1)
    res = run_gir(cfg)
    assert res["pgnn_dist_trainable"] is True and res["pgnn_init"] == "official"
    plain = run_gir(GIRConfig("grid-link", False, "pgnn-e", 0, epochs=1, pgnn_dist_trainable=False))
    # the learned map g: Linear(1->32) + Linear(32->1) per layer, 2 layers: 2 * (64 + 33) more parameters
    assert res["num_parameters"] - plain["num_parameters"] == 2 * (32 + 32 + 32 + 1)
    assert all(job.config.pgnn_dist_trainable and job.config.pgnn_init == "official"
               for job in plan("quick") if job.config.model.startswith("pgnn"))
