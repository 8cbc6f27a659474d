"""The Optuna comparison benchmark: its plumbing on a tiny run (the study's completed trials equal
their stand-alone trainings, the pruner stops trials), its summary against hand-computed regrets,
and its line count."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import bench_optuna, choice_tasks, tables  # noqa: E402
from posenc.search.choose import HOLD_LIMIT  # noqa: E402

pytest.importorskip("optuna")


@pytest.mark.slow
def test_tiny_run_and_its_table():
    r = bench_optuna.run(quick=True, tasks=("wine",), seeds=(0,))
    s = r["summary"]
    assert set(s["policies"]) == set(bench_optuna.POLICIES)
    unit = r["units"][0]
    trials = unit["optuna"]["trials"]
    assert set(trials) == set(choice_tasks.CANDIDATES)  # the grid sampler tries each candidate once
    assert s["optuna_completed_trials_equal_standalone"] is True
    assert unit["optuna"]["choice"] in trials and trials[unit["optuna"]["choice"]].get("completed")
    # steps: each trial's steps plus a third of a step per evaluation batch
    assert unit["optuna"]["steps"] >= sum(t["steps"] for t in trials.values())
    assert s["policies"]["train all, pick by validation"]["step_ratio"] == pytest.approx(4.0)
    assert s["policies"]["race (choose_encoding)"]["step_ratio_max"] <= HOLD_LIMIT * 2.0 + 1e-9  # cuts held: up to 2x
    assert "Optuna successive halving" in tables.FORMATTERS["optuna"](r)


def _unit(task, accs, vals, race, opt):
    gt = {c: {"test_accuracy": a, "val_accuracy": v, "val_loss": 1.0, "steps": 10, "cpu_s": 1.0}
          for c, a, v in zip(choice_tasks.CANDIDATES, accs, vals)}
    return {"task": task, "seed": 0, "ground_truth": gt,
            "race": {"choice": race, "step_ratio": 2.0, "cpu_s": 2.0},
            "optuna": {"choice": opt, "step_ratio": 3.0, "cpu_s": 3.0, "completed_equal_standalone": True,
                       "trials": {"none": {"completed": True}, "lff": {"completed": False}}}}


def test_summary_regrets_by_hand():
    # candidates: none, sinusoidal, learned_table, lff; task A means 40, 80, 90, 90; task B 70, 70, 60, 70
    units = [_unit("A", [0.4, 0.8, 0.9, 0.9], [0.1, 0.2, 0.3, 0.9], race="sinusoidal", opt="lff"),
             _unit("B", [0.7, 0.7, 0.6, 0.7], [0.5, 0.9, 0.1, 0.1], race="learned_table", opt="learned_table")]
    s = bench_optuna.summarise(units)
    pol = s["policies"]
    assert pol["race (choose_encoding)"]["mean_regret"] == pytest.approx((10 + 10) / 2)
    assert pol["race (choose_encoding)"]["within_1_point_count"] == 0
    assert pol["Optuna successive halving"]["mean_regret"] == pytest.approx((0 + 10) / 2)
    assert pol["train all, pick by validation"]["mean_regret"] == pytest.approx(0.0)  # lff in A, sinusoidal in B
    assert pol["Optuna successive halving"]["step_ratio"] == pytest.approx(3.0)
    assert s["race_minus_optuna_regret"]["mean"] == pytest.approx(5.0) and s["same_pick"] == 1
    assert s["optuna_trials_completed_mean"] == pytest.approx(1.0)


def test_code_lines_leaves_out_docstring_comments_and_blanks():
    def f(x):
        """Two
        lines."""
        # a comment

        return x  # trailing

    assert bench_optuna.code_lines(f) == 2


def test_the_search_guide_shows_the_recorded_comparison():
    import json
    import re

    r = json.loads((ROOT / "benchmarks" / "results" / "optuna.json").read_text(encoding="utf-8"))
    guide = (ROOT / "docs" / "search.md").read_text(encoding="utf-8")
    for line in tables.FORMATTERS["optuna"](r).strip().splitlines():
        assert line in guide, f"docs/search.md does not show this line of `python -m benchmarks.tables`: {line}"
    reading = re.sub(r"\s+", " ", guide[guide.index("### Against Optuna"):])
    s, pol = r["summary"], r["summary"]["policies"]
    race, opt = pol["race (choose_encoding)"], pol["Optuna successive halving"]
    d = s["race_minus_optuna_regret"]
    expected = (f"({race['mean_regret']:.2f} against {opt['mean_regret']:.2f} on average; the paired difference "
                f"{d['mean']:+.2f} [{d['low']:+.2f}, {d['high']:+.2f}]").replace("-", "−")
    assert expected in reading
    assert f"at {race['step_ratio']:.2f} trainings against {opt['step_ratio']:.2f}" in reading
    assert f"up to {opt['step_ratio_max']:.2f}" in reading
