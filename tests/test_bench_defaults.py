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
    assert procs[0]["output_bytes"] == 256 * 256 * 4  # the (n, channels) float32 result
    assert procs[0]["output_first_touch_cpu_s"] >= 0
    row = bench_defaults.summarise(procs[:1])
    assert row["first_over_warm"] > 0 and "check_cost" in row and "checks_alone_fraction" in row
    assert row["first_call_floor"] >= 1 and isinstance(row["first_call_goal_below_floor"], bool)
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
                           "fft_over_dense_within_goal": True, "misses": ["toeplitz n=256"],
                           "first_call_goal_below_floor": ["rff n=256"], "first_call_misses_above_floor": []}}
    text = tables.defaults(result)
    assert "checks alone (share)" in text and "error: boom" in text and "dense ÷ FFT first call" in text
    assert "misses: toeplitz n=256" in text
    assert "below the floor" in text and "rff n=256" in text and "room above the floor: none" in text


def _proc(warm_s: float, first_s: float, touch_s: float) -> dict:
    rounds = [warm_s] * 3
    return {"case": "x", "n": 8, "setup_s": 0.0, "load_before": 0.0, "load_after": 0.0, "first_s": first_s,
            "first_cpu_s": first_s, "first_page_faults": 10, "first_sys_s": 0.0, "imported_by_first_call": [],
            "second_s": warm_s, "rounds": 3, "wall_s": {"default": rounds}, "cpu_s": {"default": rounds},
            "warm_page_faults_per_call": 0, "warm_sys_s": 0.0, "output_bytes": 4096,
            "output_first_touch_cpu_s": touch_s}


def test_floor_separates_a_goal_out_of_reach_from_a_miss_of_the_call():
    # a call of 1 ms whose output takes 1.5 ms to fault in: no first call can be within 2x
    out_of_reach = bench_defaults.summarise([_proc(1e-3, 3e-3, 1.5e-3)])
    assert out_of_reach["first_call_floor"] == pytest.approx(2.5)
    assert out_of_reach["first_call_goal_below_floor"] is True and out_of_reach["first_call_within_goal"] is False
    assert out_of_reach["first_call_above_floor"] == pytest.approx(0.5)
    # the same first call with a cheap output: the miss is the call's own
    own = bench_defaults.summarise([_proc(1e-3, 3e-3, 0.1e-3)])
    assert own["first_call_goal_below_floor"] is False and own["first_call_within_goal"] is False
    assert own["first_call_above_floor"] == pytest.approx(1.9)


def test_first_touch_of_fresh_memory_is_measured():
    # 64 MiB of fresh pages: the kernel's zero-filling of 16,384 pages is not free
    assert bench_defaults.first_touch_cpu_s(64 * 2**20) > 0
    assert bench_defaults.first_touch_cpu_s(0) >= 0  # one page at least, never an error


def test_summary_of_failed_processes():
    assert bench_defaults.summarise([{"error": "x", "returncode": 1}]) == {"error": "x"}


def test_saved_result_renders():
    path = ROOT / "benchmarks" / "results" / "defaults.json"
    if not path.exists():
        pytest.skip("benchmarks/results/defaults.json not produced yet")
    r = json.loads(path.read_text())
    assert r["benchmark"] == "defaults" and r["rows"]
    assert "first call" in tables.defaults(r)
