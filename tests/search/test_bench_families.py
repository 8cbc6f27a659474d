"""The families benchmark: its tasks' labels against loops over the tokens, its plumbing on a tiny run, and its
summary against hand-computed regrets."""

import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import bench_families, family_tasks, tables  # noqa: E402
from posenc.search.choose import HOLD_LIMIT  # noqa: E402


def _label(name: str, seq: list[int]) -> int:
    """What each task's label should be, read off one sequence with a plain loop."""
    if name.startswith("first-token"):
        return seq[0]
    if name == "majority":
        counts = [seq.count(t) for t in range(4)]
        return counts.index(max(counts))
    if name == "adjacent-pair":
        return int(any(a == 1 and b == 2 for a, b in zip(seq, seq[1:])))
    if name == "after-marker":
        assert seq.count(0) == 1 and seq[-1] != 0
        return seq[seq.index(0) + 1] - 1
    raise KeyError(name)


@pytest.mark.parametrize("name", sorted(family_tasks.TASKS))
def test_every_task_labels_what_it_says(name):
    task = family_tasks.load_task(name, 3)
    info = family_tasks.TASKS[name]
    for split, n in family_tasks.SIZES.items():
        x, y = task[split]
        length = info["train_len"] if split == "train" else info["test_len"]
        assert x.shape == (n, length) and y.shape == (n,) and y.dtype == torch.int64
        assert int(y.min()) >= 0 and int(y.max()) < info["classes"]
        for i in range(0, n, 7):
            assert int(y[i]) == _label(name, x[i].tolist()), (split, i)
    # the data differ per seed, and are the same for the same seed
    assert not torch.equal(task["train"][0], family_tasks.load_task(name, 4)["train"][0])
    assert torch.equal(task["train"][0], family_tasks.load_task(name, 3)["train"][0])


def test_the_model_is_plain():
    model = family_tasks.build_model(family_tasks.load_task("majority", 0), 0)
    assert isinstance(model.pos, torch.nn.Identity)
    assert not any(type(m).__module__.startswith("posenc") for m in model.modules())


@pytest.mark.slow
def test_tiny_run_and_its_table():
    r = bench_families.run(quick=True, tasks=("adjacent-pair",), seeds=(0,))
    s = r["summary"]
    assert set(s["policies"]) == {bench_families.RACE, bench_families.RACE_LARGER, bench_families.BRUTE,
                                  *(f"always {c}" for c in family_tasks.CANDIDATES)}
    for p in s["policies"].values():
        assert p["task_seeds"] == 1 and 0 <= p["within_1_point"] <= 1 and p["mean_regret"] >= 0
    assert s["policies"][bench_families.BRUTE]["step_ratio"] == pytest.approx(8.0)
    assert s["policies"][bench_families.RACE]["step_ratio_max"] <= HOLD_LIMIT * 2.0 + 1e-9
    assert s["race_model_equals_its_standalone_training"] is True
    text = tables.FORMATTERS["families"](r)
    assert "race (default), budget 2" in text and "best − none" in text


def _unit(task, seed, tests, race, race3, vals=None):
    vals = vals or {c: 0.5 for c in tests}
    gt = {c: {"val_accuracy": vals[c], "val_loss": 1.0, "test_accuracy": tests[c], "steps": 10, "cpu_s": 1.0}
          for c in tests}
    return {"task": task, "seed": seed, "ground_truth": gt,
            "race": {"choice": race, "step_ratio": 2.0, "cpu_s": 2.0, "test_accuracy": tests[race]},
            "race_larger": {"choice": race3, "step_ratio": 3.0, "cpu_s": 3.0, "test_accuracy": tests[race3]}}


def test_summary_regrets_by_hand(monkeypatch):
    monkeypatch.setattr(bench_families, "CANDIDATES", ("none", "rope"))
    units = [_unit("a", 0, {"none": 0.50, "rope": 0.90}, "rope", "rope", {"none": 0.6, "rope": 0.5}),
             _unit("a", 1, {"none": 0.52, "rope": 0.94}, "none", "rope", {"none": 0.4, "rope": 0.9})]
    s = bench_families.summarise(units)
    # task means: none 51, rope 92 -> best rope; the race's regrets 0 and 41
    assert s["tasks"]["a"]["best"] == "rope" and s["tasks"]["a"]["best_mean"] == pytest.approx(92.0)
    race = s["policies"][bench_families.RACE]
    assert race["mean_regret"] == pytest.approx(20.5) and race["within_1_point_count"] == 1
    brute = s["policies"][bench_families.BRUTE]  # picks by validation: none (0.6), then rope (0.9)
    assert brute["picks"] == {"a/0": "none", "a/1": "rope"} and brute["mean_regret"] == pytest.approx(20.5)
    assert s["policies"][bench_families.RACE_LARGER]["mean_regret"] == 0.0
    assert s["tasks"]["a"]["best_minus_none"]["mean"] == pytest.approx(41.0)
    assert s["goal"]["median_cost_at_most_2x"] and not s["goal"]["within_1_point_at_least_85pct"]


def test_the_search_guide_shows_the_recorded_benchmark():
    import json
    import re

    r = json.loads((ROOT / "benchmarks" / "results" / "families.json").read_text(encoding="utf-8"))
    assert {u["task"] for u in r["units"]} == set(family_tasks.TASKS) and r["seeds"] == list(family_tasks.SEEDS)
    guide = (ROOT / "docs" / "search.md").read_text(encoding="utf-8")
    for line in tables.FORMATTERS["families"](r).strip().splitlines():
        assert line in guide, f"docs/search.md does not show this line of `python -m benchmarks.tables`: {line}"
    reading = re.sub(r"\s+", " ", guide[guide.index("### Across families: `python -m benchmarks families`"):])
    pol = r["summary"]["policies"]
    race, larger, brute = pol[bench_families.RACE], pol[bench_families.RACE_LARGER], pol[bench_families.BRUTE]
    assert f"At budget 2 the race loses {race['mean_regret']:.2f} points" in reading
    assert f"({larger['mean_regret']:.2f} against {brute['mean_regret']:.2f};" in reading
    assert f"median cost is {race['step_ratio']:.2f}" in reading
    assert f"at {larger['step_ratio']:.2f} trainings instead of {brute['step_ratio']:.0f}" in reading
