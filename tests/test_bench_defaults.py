"""The defaults benchmark runs on tiny sizes and its table renders (timings are not checked)."""

import json
import sys
from pathlib import Path

import pytest
import torch

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


def test_kernel_setups_are_measured_and_a_call_that_used_a_kernel_first_has_its_setup_in_its_floor():
    setup = bench_defaults.kernel_setup_child()
    assert set(setup["setups_cpu_s"]) == set(bench_defaults.SETUP_OPS)
    assert all(v >= 0 for v in setup["setups_cpu_s"].values())
    # warm 1 ms, the output's pages 1 ms, the first product's setup 0.4 ms and a reduction's 0.1 ms, the call
    # used both (their tiny calls after it were warm) but no division: floor 2.5, and 2.7 is within 10 %
    warm = {"first_cpu_s": 1e-5, "warm_cpu_s": 1e-5}
    cold = {"first_cpu_s": 0.3e-3, "warm_cpu_s": 1e-5}
    setups = {"matmul": 0.4e-3, "sum": 0.1e-3, "div": 0.1e-3}
    made = {**_proc(1e-3, 2.7e-3, 1e-3), "ops_after_first": {"matmul": warm, "sum": warm, "div": cold}}
    row = bench_defaults.summarise([made], setups)
    assert row["first_call_used_kernels"] == {"matmul": True, "sum": True, "div": False}
    assert row["first_call_made_matmul"] is True and row["first_call_floor"] == pytest.approx(2.0)
    assert row["first_call_setup_cpu_s"] == pytest.approx(0.5e-3)
    assert row["first_call_floor_setup"] == pytest.approx(2.5) and row["first_call_above_floor"] == pytest.approx(0.2)
    assert row["first_call_within_goal"] is False and row["first_call_within_floor"] is True
    assert row["first_call_met"] is True
    # the tiny calls after the first call paid the setups: the call used none, its floor is the pages' alone
    none = {**made, "ops_after_first": {"matmul": cold, "sum": cold, "div": cold}}
    row = bench_defaults.summarise([none], setups)
    assert row["first_call_made_matmul"] is False and row["first_call_floor_setup"] == pytest.approx(2.0)
    assert row["first_call_within_floor"] is False and row["first_call_met"] is False
    # without the setups measured the floor is the pages' (the records before it)
    row = bench_defaults.summarise([made])
    assert row["first_call_used_kernels"] is None and row["first_call_floor_setup"] == pytest.approx(2.0)


@pytest.mark.parametrize("position_scale", [1.0, 0.37])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_rope_table_made_in_one_buffer_is_the_cast_of_the_float64_cos_and_sin(position_scale, dtype):
    # RotaryEmbedding's first call at a length builds its cos/sin table; cast tables are made through one
    # float64 buffer (less fresh memory for a first call): the same bits as cos/sin of the angles, cast
    from posenc.attention.relative.rotary import RotaryEmbedding, rope_angles

    rope = RotaryEmbedding(64, base=500.0)
    rope._position_scale = position_scale
    cos, sin = rope._build_table(300, "cpu", dtype, start=7)
    ang = rope_angles(torch.arange(7, 307), rope._freqs) * position_scale
    assert cos.dtype == sin.dtype == dtype
    assert torch.equal(cos, torch.cos(ang).to(dtype)) and torch.equal(sin, torch.sin(ang).to(dtype))
