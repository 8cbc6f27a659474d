"""The choice benchmark: its plumbing on a tiny run, its summary against hand-computed regrets, and the
UCR/UEA reader against the archive's published sizes."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import bench_choice, choice_tasks, tables  # noqa: E402
from posenc.search.choose import HOLD_LIMIT  # noqa: E402


@pytest.mark.slow
def test_tiny_run_and_its_table():
    r = bench_choice.run(quick=True, tasks=("wine",), seeds=(0,))
    s = r["summary"]
    assert set(s["policies"]) == {*r["selectors"], *bench_choice.BASELINES}
    for p in s["policies"].values():
        assert p["task_seeds"] == 1 and 0 <= p["within_1_point"] <= 1 and p["mean_regret"] >= 0
    assert s["policies"]["train all, pick by validation"]["step_ratio"] == pytest.approx(4.0)
    for sel in r["selectors"]:
        # a race that holds its cuts while no candidate has learned may spend up to HOLD_LIMIT times the budget
        limit = HOLD_LIMIT * 2.0 if sel == "race" else 2.0
        assert s["policies"][sel]["step_ratio_max"] <= limit + 1e-9
    assert s["race_model_equals_its_standalone_training"] is True
    text = tables.choice(r)
    assert "within 1 point" in text and "vs train all + pick" in text and "| wine | tabular set |" in text


def _unit(task, seed, accs, vals, picks):
    gt = {c: {"test_accuracy": a, "val_accuracy": v, "val_loss": 1.0, "steps": 10, "cpu_s": 1.0}
          for c, a, v in zip(choice_tasks.CANDIDATES, accs, vals)}
    sels = {s: {"choice": c, "step_ratio": 2.0, "cpu_s": 2.0} for s, c in picks.items()}
    return {"task": task, "seed": seed, "ground_truth": gt, "selectors": sels}


def test_summary_regrets_by_hand():
    # candidates: none, sinusoidal, learned_table, lff; task A means 50, 80, 90, 89.5; task B 70, 70, 60, 70
    units = [_unit("A", 0, [0.4, 0.8, 0.9, 0.9], [0.1, 0.2, 0.3, 0.9], {"race": "lff", "pt": "none", "magnitude": "sinusoidal"}),
             _unit("A", 1, [0.6, 0.8, 0.9, 0.89], [0.1, 0.2, 0.9, 0.3], {"race": "learned_table", "pt": "none", "magnitude": "lff"}),
             _unit("B", 0, [0.7, 0.7, 0.6, 0.7], [0.5, 0.9, 0.1, 0.1], {"race": "none", "pt": "learned_table", "magnitude": "none"})]
    s = bench_choice.summarise(units)
    assert s["tasks"]["A"]["best"] == "learned_table" and s["tasks"]["A"]["best_mean"] == pytest.approx(90.0)
    pol = s["policies"]
    # race: lff (A: 0.5 lost), learned_table (0), none (B: 0) -> all within 1 point
    assert pol["race"]["mean_regret"] == pytest.approx(0.5 / 3) and pol["race"]["within_1_point_count"] == 3
    # pt: none (40 lost) twice, learned_table in B (10 lost)
    assert pol["pt"]["mean_regret"] == pytest.approx(90 / 3) and pol["pt"]["within_1_point_count"] == 0
    # train all + pick by validation: lff, learned_table, sinusoidal -> 0.5, 0, 0
    assert pol["train all, pick by validation"]["mean_regret"] == pytest.approx(0.5 / 3)
    assert pol["always sinusoidal"]["mean_regret"] == pytest.approx(20 / 3)
    v = pol["race"]["versus"]["always sinusoidal"]
    assert v["mean"] == pytest.approx((0.5 - 10 + 0 - 10 + 0 - 0) / 3) and v["n"] == 3


def test_t_interval_against_the_closed_form():
    out = bench_choice.t_interval([1.0, 2.0, 3.0])
    # mean 2, sd 1, t_{0.975, 2} = 4.302653: half-width 4.302653 / sqrt(3)
    assert out["mean"] == 2.0 and out["high"] - 2.0 == pytest.approx(4.302653 / 3 ** 0.5, rel=1e-6)
    assert bench_choice.t_interval([1.0])["low"] is None


def test_ts_reader_and_the_shipped_sets():
    pytest.importorskip("sktime")
    xs, labels = choice_tasks.read_ts(choice_tasks._sktime_file("GunPoint", "TRAIN"))
    assert len(xs) == 50 and all(x.shape == (1, 150) for x in xs) and set(labels) == {"1", "2"}
    xs, labels = choice_tasks.read_ts(choice_tasks._sktime_file("JapaneseVowels", "TEST"))
    assert len(xs) == 370 and {x.shape[0] for x in xs} == {12} and max(x.shape[1] for x in xs) <= 29
    t = choice_tasks.load_task("BasicMotions")
    assert t["num_classes"] == 4 and t["train"][0].shape[1:] == (10, 60) and len(t["test"][1]) == 40
    assert len(t["train"][1]) + len(t["val"][1]) == 40
    for name, task in choice_tasks.TASKS.items():  # the frozen epochs follow the documented rule
        n = len(choice_tasks.load_task(name)["train"][1])
        assert task["epochs"] == choice_tasks.frozen_epochs(n), name


def test_the_default_selector_is_the_benchmarks_winner():
    import json

    from posenc.search import CHOICE_SELECTORS, DEFAULT_CHOICE_SELECTOR

    r = json.loads((ROOT / "benchmarks" / "results" / "choice.json").read_text())
    pol = r["summary"]["policies"]
    assert r["default"] == DEFAULT_CHOICE_SELECTOR and r["summary"]["tasks"].keys() == choice_tasks.TASKS.keys()
    assert len(r["units"]) == len(choice_tasks.TASKS) * len(choice_tasks.SEEDS)
    assert DEFAULT_CHOICE_SELECTOR == min(CHOICE_SELECTORS, key=lambda s: pol[s]["mean_regret"])
