"""The search benchmark runs on tiny sizes and its tables render (timings are not checked)."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import bench_search, tables  # noqa: E402


def test_tiny_benchmarks_and_their_tables():
    from posenc.search import digits_splits

    data = digits_splits(seed=0)
    small = {k: (x[:32], y[:32]) for k, (x, y) in data.items()}
    d = bench_search.bench_decision("nb201-micro", {"channels": 4}, small["val"], repeat=1)
    assert d["ops"] == 5 and d["decision_s"] > 0 and d["target_ratio"] == 6.0
    s = bench_search.bench_step("s2", "s2", {"num_cells": 3, "channels": 4}, small, repeat=1, warm_steps=1)
    assert s["ops"] == 2 and s["goal_ratio"] == 3 and sum(s["pt_picks"].values()) == 8
    r = {"decision": {"nb201-micro": d}, "step": {"s2": s}, "threads": 1, "loadavg_before": [1.0, 1, 1],
         "loadavg_after": [2.0, 1, 1]}
    text = tables.search(r)
    assert "passes (CPU)" in text and "goal ≤" in text and "load average 1.0" in text
