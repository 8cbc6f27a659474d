"""The defaults benchmark runs on tiny sizes and its table renders (timings are not checked)."""

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import bench_defaults, tables  # noqa: E402


@pytest.mark.parametrize("case", sorted(bench_defaults.CASES))
def test_every_case_builds_and_its_calls_run(case):
    fns = bench_defaults.build(case, 64)
    assert callable(fns["default"])
    for key in ("default", "unchecked", "checks"):
        if fns[key] is not None:
            fns[key]()


def test_child_summary_and_table():
    procs = [bench_defaults.child("toeplitz", 256, rounds=2), bench_defaults.child("toeplitz_dense", 256, rounds=2)]
    for p in procs:
        assert p["first_s"] > 0 and p["rounds"] == 2 and set(p["new_shapes"]) == {"shorter", "longer"}
    row = bench_defaults.summarise(procs[:1])
    assert row["first_over_warm"] > 0 and "check_cost" in row and "checks_alone_fraction" in row
    assert isinstance(row["checks_within_goal"], bool) and isinstance(row["first_call_within_goal"], bool)
    dense = bench_defaults.summarise(procs[1:])
    assert "check_cost" not in dense and dense["checks_within_goal"] is None  # no switch, no checks
    result = {"settings": {"threads": 1, "processes": 1, "rounds": 2, "lengths": [256], "toeplitz_channels": 256},
              "goals": {"check_cost_max": 0.05, "first_over_warm_max": 2.0, "fft_over_dense_min": 5.0},
              "rows": [{"case": "toeplitz", "call": "toeplitz_matmul", "n": 256, **row},
                       {"case": "rff", "call": "rff", "n": 256, "error": "boom"}],
              "toeplitz_vs_dense": {"256": {"fft_default_s": 0.01, "fft_first_s": 0.02, "dense_s": 0.1,
                                            "dense_first_s": 0.1, "speedup_warm": 10.0, "speedup_first_call": 5.0,
                                            "within_goal": True}},
              "verdicts": {"checks_within_goal": True, "first_call_within_goal": False,
                           "fft_over_dense_within_goal": True, "misses": ["toeplitz n=256"]}}
    text = tables.defaults(result)
    assert "checks alone (share)" in text and "error: boom" in text and "dense ÷ FFT first call" in text
    assert "misses: toeplitz n=256" in text


def test_summary_of_failed_processes():
    assert bench_defaults.summarise([{"error": "x", "returncode": 1}]) == {"error": "x"}


def test_saved_result_renders():
    path = ROOT / "benchmarks" / "results" / "defaults.json"
    if not path.exists():
        pytest.skip("benchmarks/results/defaults.json not produced yet")
    r = json.loads(path.read_text())
    assert r["benchmark"] == "defaults" and r["rows"]
    assert "first call" in tables.defaults(r)
