import math
import subprocess
import sys

import pytest

from posenc.experiments.gir import MODELS, TIE_TOL, GIRConfig, plan, run_gir, summarize
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
    assert {j.config.seed for j in quick} >= {0, 1, 2} and {j.config.epochs for j in quick} == {100}
    assert {j.config.seed for j in plan("quick", 2)} == {0, 1}
    full = plan("full")
    assert all(j.config.epochs == 2001 for j in full)
    assert {j.config.model for j in full} == set(MODELS)
    with pytest.raises(ValueError, match="profile"):
        plan("huge")


def _fake(task, model, seed, auc, rising=False):
    # a validation curve that has flattened (or is still rising by 0.05 per evaluation)
    curve = [[e, auc - (0.05 * (10 - e) if rising else 0.0), auc] for e in range(11)]
    return {"task": task, "transductive": False, "model": model, "seed": seed, "val_auc": auc,
            "test_auc": auc, "seconds": 1.0, "epochs": 10, "curve": curve}


def test_summarize_claims_as_paired_differences_and_render():
    results = {}
    for s in range(3):
        for model, auc in (("gcn", 0.5), ("pgnn-e", 0.9), ("gir", 0.95), ("gcn+gir", 0.93)):
            results[f"{model}.{s}"] = _fake("grid-link", model, s, auc + 0.01 * s + 0.002 * s * s)
    summ = summarize(results)
    row = summ["table"]["grid-link-I"]
    assert row["gir"]["n"] == 3 and summ["not_converged"] == []
    c = summ["claims"]
    ge = c["gir_ge_pgnn"]["comparisons"][0]
    assert ge["verdict"] == "holds" and ge["n"] == 3 and ge["baseline"] == "pgnn-e"
    assert ge["diffs"] == pytest.approx([0.05 + TIE_TOL] * 3)
    assert c["gir_far_above_gnn"]["verdict"] == "holds" and c["fusion_helps"]["verdict"] == "holds"
    assert all("holm_verdict" in x for claim in c.values() for x in claim["comparisons"])
    for s in range(3):  # GIR below P-GNN on every seed: contradicted, paired
        results[f"gir.{s}"] = _fake("grid-link", "gir", s, 0.6 + 0.01 * s)
    assert summarize(results)["claims"]["gir_ge_pgnn"]["verdict"] == "contradicted"
    for s in range(3):  # 0.004 below P-GNN's: within the tie tolerance, not "below"
        results[f"gir.{s}"] = _fake("grid-link", "gir", s, 0.896 + 0.01 * s + 0.002 * s * s + 0.0001 * s)
    assert summarize(results)["claims"]["gir_ge_pgnn"]["verdict"] == "holds"
    for s in range(2):  # P-GNN still learning on two seeds: one usable pair, no verdict
        results[f"pgnn-e.{s}"] = _fake("grid-link", "pgnn-e", s, 0.9, rising=True)
    gated = summarize(results)
    assert gated["claims"]["gir_ge_pgnn"]["comparisons"][0]["verdict"] == "not decided"
    assert gated["not_converged"] == ["grid-link-I.pgnn-e.s0", "grid-link-I.pgnn-e.s1"]
    assert "0.5" in gated["gate"]["all settings"]["rule"]
    saved = []
    md = get_section("gir").render(gated, lambda name, fig: saved.append(name) or f"gir_{name}.png")
    assert "GIR (path)" in md and "not decided" in md and "Holm" in md and "Still learning (2" in md
    assert saved == ["curves"]
    # a GCN at chance failed to learn: its pairs are read as measured (the failure is the finding)
    for s in range(3):
        results[f"gcn.{s}"] = _fake("grid-link", "gcn", s, 0.5 + 0.003 * s)
    at_chance = summarize(results)
    assert at_chance["failed_to_learn"] == [f"grid-link-I.gcn.s{s}" for s in range(3)]
    far = at_chance["claims"]["gir_far_above_gnn"]["comparisons"][0]
    assert far["n"] == 3 and far["verdict"] == "holds" and len(far["gate"]["failed_runs"]) == 3



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
