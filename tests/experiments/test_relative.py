import dataclasses
import math

import pytest
import torch

from posenc.experiments.relative import (
    TASKS,
    VARIANTS,
    LengthConfig,
    build_model,
    make_batch,
    plan,
    run_length,
    summarize,
)
from posenc.report.registry import get_section


def test_shift_targets():
    cfg = LengthConfig(vocab=5, offset=3)
    x, y, scored = make_batch("shift", 4, 10, cfg, torch.Generator().manual_seed(0))
    tok = x.argmax(-1)
    for b in range(4):
        for i in range(10):
            assert bool(scored[b, i]) == (i >= 3)
            if i >= 3:
                assert y[b, i] == tok[b, i - 3]


def test_recent_targets_against_loop():
    cfg = LengthConfig(vocab=6)
    x, y, scored = make_batch("recent", 8, 12, cfg, torch.Generator().manual_seed(1))
    tok = x.argmax(-1)
    for b in range(8):
        last = None
        for i in range(12):
            if tok[b, i] < 3:
                last = int(tok[b, i])
            assert bool(scored[b, i]) == (last is not None)
            if last is not None:
                assert int(y[b, i]) == last


def test_first_targets():
    cfg = LengthConfig(anchor=2)
    x, y, scored = make_batch("first", 3, 7, cfg, torch.Generator().manual_seed(2))
    tok = x.argmax(-1)
    assert bool((y == tok[:, 2:3]).all())
    assert scored[0].tolist() == [False, False] + [True] * 5


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_variant_builds_and_runs_causally(variant):
    cfg = LengthConfig(variant=variant, dim=16, test_factors=(1, 2))
    model = build_model(cfg).eval()
    x, _, _ = make_batch("shift", 2, 16, cfg, torch.Generator().manual_seed(0))
    pos = torch.arange(16)[:, None] if variant == "table" else torch.arange(16.0)[:, None]
    out = model(x, pos)
    assert out.shape == (2, 16, cfg.vocab) and bool(torch.isfinite(out).all())
    # causal: changing the last token never changes earlier outputs
    x2 = x.clone()
    x2[:, -1] = x2[:, -1].flip(-1)
    out2 = model(x2, pos)
    torch.testing.assert_close(out2[:, :-1], out[:, :-1], rtol=1e-4, atol=1e-5)


def test_run_is_deterministic_and_reports_extensions():
    cfg = LengthConfig(variant="rope", steps=3, dim=16, test_factors=(1, 2), eval_batch=8)
    a, b = run_length(cfg), run_length(cfg)
    assert a["accuracy"] == b["accuracy"] and a["loss_curve"] == b["loss_curve"]
    assert set(a["accuracy"]) == {"16", "32"}
    assert set(a["extended"]) == {"linear", "ntk", "yarn"}
    # the validation curve the gate reads: every step // evals steps, on sequences of the training length
    assert [p[0] for p in a["val_curve"]] == [1, 2, 3] and a["val_curve"] == b["val_curve"]
    assert a["state"] in ("converged", "failed to learn", "still learning")


def test_bad_task_and_variant():
    with pytest.raises(ValueError, match="task"):
        run_length(LengthConfig(task="copy", steps=1))
    with pytest.raises(ValueError, match="variant"):
        build_model(LengthConfig(variant="absolute"))
    with pytest.raises(ValueError, match="profile"):
        plan("medium")


def test_plan_keys_and_shards():
    quick, full = plan("quick"), plan("full")
    assert len({j.key for j in quick}) == len(quick) and len({j.key for j in full}) == len(full)
    assert {j.config.task for j in full} == set(TASKS) and {j.config.variant for j in full} == set(VARIANTS)
    assert all(j.config.threads == 1 for j in quick)
    assert get_section("relative").plan("quick", 3)[0].config.seed == 0
    # --seeds 2 plans two seeds of every (task, variant) of the quick profile
    pairs = {(j.config.task, j.config.variant) for j in quick}
    assert len(get_section("relative").plan("quick", 2)) == 2 * len(pairs)
    # the profile's numbers come from profiles.toml: the `first` task trains longer in the quick profile
    steps = {j.config.task: j.config.steps for j in quick}
    assert steps["first"] > steps["shift"] and max(j.config.test_factors[-1] for j in full) == 16


def _fake(task, variant, seed, acc, state="converged"):
    # a validation curve the gate reads as `state`: a plateau at the final accuracy, a rise still
    # going on at the end, or flat at chance (the task's chance is 1/8 for shift)
    top = acc["16"]
    values = {"converged": [top] * 10, "still learning": [top - 0.05 * (10 - i) for i in range(10)],
              "failed to learn": [0.125] * 10}[state]
    return {"task": task, "variant": variant, "seed": seed, "train_length": 16, "accuracy": acc,
            "train_accuracy": top, "val_curve": [[10 * (i + 1), v] for i, v in enumerate(values)],
            "loss_curve": [1.0, 0.5], "extended": {}}


def test_summary_claims_from_paired_seeds():
    res = {}
    for s in range(4):
        res[f"a{s}"] = _fake("shift", "cape", s, {"16": 1.0, "32": 0.9 + 0.01 * s, "64": 0.8})
        res[f"b{s}"] = _fake("shift", "sinusoidal", s, {"16": 1.0, "32": 0.5 + 0.02 * s, "64": 0.3})
        res[f"c{s}"] = _fake("shift", "cape_noshift", s, {"16": 1.0, "32": 0.95, "64": 0.9 - 0.01 * s})
        res[f"d{s}"] = _fake("shift", "alibi", s, {"16": 0.9, "32": 0.8, "64": 0.7}, state="still learning")
        res[f"e{s}"] = _fake("shift", "rope", s, {"16": 1.0, "32": 0.2, "64": 0.1})
        res[f"f{s}"] = _fake("shift", "t5", s, {"16": 0.13, "32": 0.12 + 0.001 * s, "64": 0.12}, state="failed to learn")
    out = summarize(res)
    claims = out["claims"]
    assert claims["cape_degrades_less_than_sinusoidal"]["verdict"] == "holds"
    assert claims["cape_matches_sinusoidal_at_train_length"]["verdict"] == "holds"
    assert claims["cape_needs_global_shift"]["verdict"] == "contradicted"
    # alibi was still learning the task: its transfer claim is not read, whatever the numbers (the convergence gate)
    alibi = claims["alibi_extrapolates_beyond_rope"]["comparisons"][0]
    assert alibi["verdict"] == "not decided" and "4 of 8 runs still learning" in alibi["note"]
    assert alibi["n"] == 0
    # T5 failed to learn shift: that is the finding, its comparisons are read as measured
    t5 = next(c for c in claims["relative_beats_absolute_on_relative_tasks"]["comparisons"]
              if c["method"] == "t5" and c["baseline"] == "sinusoidal")
    assert t5["n"] == 4 and t5["verdict"] == "contradicted" and len(t5["gate"]["failed_runs"]) == 4
    assert out["failed_to_learn"] == [f"shift.t5.s{s}" for s in range(4)]
    assert out["not_converged"] == [f"shift.alibi.s{s}" for s in range(4)]
    assert out["gate"]["shift"]["chance"] == 0.125
    # Holm over every comparison of the section, next to each verdict
    cape = claims["cape_degrades_less_than_sinusoidal"]["comparisons"][0]
    assert cape["holm_verdict"] == "holds" and cape["holm_family"] >= 3
    row = out["table"]["shift"]["cape"]
    assert row["states"] == {"converged": 4, "failed to learn": 0, "still learning": 0}
    assert math.isclose(row["extrapolation"]["mean"], (0.915 + 0.8) / 2)


def test_quick_section_runs_end_to_end(tmp_path):
    # the smallest real run: one seed of a shrunken plan through summarize and render
    jobs = [dataclasses.replace(j.config, steps=2, dim=16, eval_batch=4) for j in plan("quick", 1)[:3]]
    res = {f"k{i}": run_length(c) for i, c in enumerate(jobs)}
    summary = summarize(res)
    import matplotlib.pyplot as plt

    saved = []

    def save(name, fig):
        plt.close(fig)
        saved.append(name)
        return f"{name}.png"

    md = get_section("relative").render(summary, save)
    assert "shift" in md and saved == ["length"]


def test_only_rope_jobs_carry_the_yarn_reading():
    # changing YaRN's default recomputes the rope jobs (their config digest changes) and no others
    from posenc.experiments.relative import RopeLengthConfig
    from posenc.report.store import config_digest

    for profile in ("quick", "full"):
        for job in plan(profile):
            cfg = job.config_dict()
            assert ("yarn_ramp" in cfg) == (job.config.variant == "rope"), job.key
            if job.config.variant == "rope":
                assert isinstance(job.config, RopeLengthConfig) and cfg["yarn_ramp"] == "dims"
                turns = dict(cfg, yarn_ramp="turns")
                assert config_digest(turns) != config_digest(cfg)
