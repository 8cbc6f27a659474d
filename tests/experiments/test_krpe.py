import json

import pytest

from posenc.experiments import krpe as exp
from posenc.report.registry import get_section


@pytest.fixture(scope="module")
def results():
    res = {
        "approx": exp.run_approx(exp.ApproxConfig(features=(8, 32), norms=(1.0, 8.0), pairs=16, draws=2, n=8)),
        "numerics": exp.run_numerics(exp.NumericsConfig(n=32, ranges=(0.0, 5.0, 40.0))),
        "speed": exp.run_speed(exp.SpeedConfig(lengths=(32, 64), heads=1, head_dim=8, features=4, repeats=1)),
    }
    for task in ("copy", "recall"):
        for variant in exp.VARIANTS:
            for seed in (0, 1):
                cfg = exp.TrainConfig(task=task, variant=variant, seed=seed, steps=4, length=10, batch=4,
                                      embed_dim=8, layers=1, features=4, eval_batches=1)
                res[f"train-{task}-{variant}-s{seed}"] = exp.run_train(cfg)
    return res


def test_results_are_json_and_sane(results):
    json.dumps(results)
    k = results["approx"]["kernel"]
    assert k["8.0"][-1] > k["1.0"][-1]  # large norms estimate worse
    rows = results["numerics"]["rows"]
    assert all(r["err_float32"] <= r["bound_float32"] for r in rows)
    assert all(r["err_float64"] < 1e-6 for r in rows if r["range"] <= 5)
    run = results["train-copy-norm_rpe-s0"]
    assert 0.0 <= run["accuracy"] <= 1.0 and len(run["losses"]) == 4
    # the validation curve the gate reads: every steps // evals steps, and the task's chance level
    assert [p[0] for p in run["val_curve"]] == [1, 2, 3, 4] and run["chance"] == 1 / 16
    assert results["train-recall-norm_rpe-s0"]["chance"] == 1 / 4


def test_train_is_deterministic():
    cfg = exp.TrainConfig(task="copy", variant="norm_rpe", steps=3, length=8, batch=4, embed_dim=8, layers=1,
                          features=4, eval_batches=1)
    a, b = exp.run_train(cfg), exp.run_train(cfg)
    assert a["losses"] == b["losses"] and a["accuracy"] == b["accuracy"]


def test_summarize_and_render(results, tmp_path):
    summary = exp.summarize(results)
    json.dumps(summary)
    assert set(summary["train"]) == {"copy", "recall"}
    assert summary["train"]["copy"]["norm_rpe"]["accuracy"]["n"] == 2
    assert "approx_large_norm_useless" in summary["claims"]
    saved = []

    def save(name, fig):
        saved.append(name)
        return f"krpe_{name}.png"

    md = get_section("krpe").render(summary, save)
    assert "Approximation" in md and "copy" in md and "confirmed" in md
    assert {"approx", "train"} <= set(saved)


@pytest.mark.parametrize("profile", ["quick", "full"])
def test_plan(profile):
    jobs = exp.plan(profile, None)
    keys = [j.key for j in jobs]
    assert len(keys) == len(set(keys))
    seeds = {j.config.seed for j in jobs if j.key.startswith("train-")}
    assert len(seeds) >= 2
    assert all(j.config_dict() is not None for j in jobs)


def test_make_batch_targets():
    import torch

    g = torch.Generator().manual_seed(0)
    cfg = exp.TrainConfig(task="copy", shift=3, length=10, batch=2)
    x, y = exp.make_batch(cfg, g)
    assert (y[:, 3:] == x[:, :-3]).all() and (y[:, :3] == -100).all()
    cfg = exp.TrainConfig(task="recall", pairs=4, vocab=8, batch=3)
    x, y = exp.make_batch(cfg, g)
    assert x.shape == (3, 9)
    for b in range(3):
        keys, vals = x[b, 0:8:2], x[b, 1:8:2]
        assert y[b, -1] == vals[(keys == x[b, -1]).nonzero()[0, 0]]


def test_speed_records_cpu_time_and_load_and_the_claim_reads_cpu_time(results):
    sp = results["speed"]
    assert sp["threads"] == 1 and "load_before" in sp and "load_after" in sp
    for row in sp["rows"]:
        assert set(row["cpu"]) == {"fft", "no_rpe", "dense", "softmax", "floor"}
        assert all(v >= 0 for v in row["cpu"].values())

    def speed(wall_fft, cpu_fft, with_cpu=True, floor=None):
        rows = []
        for i, (n, w, c) in enumerate(zip((256, 1024, 4096), wall_fft, cpu_fft)):
            row = {"n": n, "fft": w, "no_rpe": w / 10, "dense": 4 * w, "softmax": 3 * w}
            if with_cpu:
                row["cpu"] = {"fft": c, "no_rpe": c / 10, "dense": 4 * c, "softmax": 3 * c}
                if floor is not None:
                    row["cpu"]["floor"] = floor[i]
            rows.append(row)
        return {"speed": {"heads": 1, "head_dim": 8, "features": 4, "rows": rows,
                          "load_before": [9.0, 8.0, 7.0], "load_after": [9.5, 8.0, 7.0], "cpu_count": 2}}

    # wall time inflated by load at the largest n (slope 2), CPU time growing like n (slope 1)
    claim = exp.summarize(speed([0.01, 0.04, 0.64], [0.01, 0.04, 0.16]))["claims"]["fft_grows_subquadratically"]
    assert claim["basis"] == "cpu" and claim["holds"] and abs(claim["slope"] - 1.0) < 1e-9
    assert claim["slope_fft_n_ge_1024"] > 1.9 and claim["load_before"] == [9.0, 8.0, 7.0]
    assert abs(claim["dense_over_fft"]["dense_over_fft"] - 4.0) < 1e-9
    # a result stored before CPU time was recorded: the wall-time slope, and the report says so
    old = exp.summarize(speed([0.01, 0.04, 0.64], [0, 0, 0], with_cpu=False))
    claim = old["claims"]["fft_grows_subquadratically"]
    assert claim["basis"] == "wall" and not claim["holds"]
    md = get_section("krpe").render(old, lambda name, fig: f"{name}.png")
    assert "log-log slope of wall time" in md
    md = get_section("krpe").render(exp.summarize(speed([0.01, 0.04, 0.64], [0.01, 0.04, 0.16])),
                                    lambda name, fig: f"{name}.png")
    assert "log-log slope of CPU time" in md and "Load average (1 min) 9.00 before and 9.50 after" in md

    # with the FFT floor timed in the same run, the claim reads the ratio to it: a load that
    # inflates both (slope 1.5 each) leaves the ratio flat; a quadratic path relative to an
    # n log n floor does not pass
    loaded = exp.summarize(speed([0.01, 0.08, 1.28], [0.01, 0.08, 0.64], floor=[0.02, 0.16, 1.28]))
    claim = loaded["claims"]["fft_grows_subquadratically"]
    assert claim["basis"] == "cpu_ratio_to_floor" and claim["holds"] and abs(claim["slope"]) < 1e-9
    assert claim["slope_fft_cpu_n_ge_1024"] > 1.4  # the absolute slope alone would have said no
    quad = exp.summarize(speed([0.01, 0.16, 2.56], [0.01, 0.16, 2.56], floor=[0.01, 0.045, 0.2]))
    assert not quad["claims"]["fft_grows_subquadratically"]["holds"]
    md = get_section("krpe").render(loaded, lambda name, fig: f"{name}.png")
    assert "CPU-time ratio of the FFT path to the FFT floor" in md and "FFT floor (s)" not in md  # no wall-time floor column


def test_training_claims_are_paired_gated_and_holm_adjusted():
    def run(variant, seed, acc, curve=None, diverged=False):
        curve = curve or [acc] * 10  # a plateau unless told otherwise
        return {"task": "copy", "variant": variant, "seed": seed, "accuracy": acc, "final_loss": 0.1,
                "losses": [2.0] * 10 + [0.5] * 30, "val_curve": [[10 * (i + 1), v] for i, v in enumerate(curve)],
                "chance": 1 / 16, "diverged": diverged, "spikes": 0, "max_grad_norm": 1.0, "seconds": 1.0}

    res = {}
    for s in range(3):
        res[f"train-copy-norm_rpe-s{s}"] = run("norm_rpe", s, 0.95 + 0.01 * s)
        res[f"train-copy-norm_nope-s{s}"] = run("norm_nope", s, 0.40 + 0.02 * s)
        # softmax still rising at the end on every seed
        res[f"train-copy-softmax_rpe-s{s}"] = run("softmax_rpe", s, 0.97, curve=[0.1 * i for i in range(1, 11)])
        # the raw Performer stuck at chance: failed to learn, compared as measured
        res[f"train-copy-performer_raw-s{s}"] = run("performer_raw", s, 0.06, curve=[0.06] * 10)
    summary = exp.summarize(res)
    c = summary["claims"]
    nope = c["copy_rpe_beats_nope"]
    assert nope["verdict"] == "holds" and nope["n"] == 3
    assert nope["diffs"] == pytest.approx([0.95 + 0.01 * s - (0.40 + 0.02 * s + exp.MARGIN) for s in range(3)])
    assert "holm_verdict" in nope
    soft = c["copy_norm_rpe_close_to_softmax"]  # softmax was still learning on every seed: no verdict
    assert soft["verdict"] == "not decided" and soft["n"] == 0
    raw = c["copy_norm_rpe_beats_raw_performer"]
    assert raw["verdict"] == "holds" and raw["n"] == 3 and len(raw["gate"]["failed_runs"]) == 3
    assert summary["not_converged"] == [f"train-copy-softmax_rpe-s{s}" for s in range(3)]
    assert summary["failed_to_learn"] == [f"train-copy-performer_raw-s{s}" for s in range(3)]
    assert summary["gate"]["copy"]["chance"] == 1 / 16 and "0.02" in summary["gate"]["copy"]["rule"]
    # a diverged run failed, whatever its curve
    res["train-copy-norm_nope-s0"] = run("norm_nope", 0, 0.0, diverged=True)
    assert "train-copy-norm_nope-s0" in exp.summarize(res)["failed_to_learn"]
    md = get_section("krpe").render(exp.summarize(res), lambda name, fig: f"{name}.png")
    assert "Still learning (3" in md and "Failed to learn (4" in md
