"""The RoPE benchmark runs on tiny sizes and its tables render (timings are not checked)."""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import bench_rope, tables  # noqa: E402


def test_tiny_benchmark_and_its_table():
    r = bench_rope.bench_rope(batch=1, heads=2, n=16, d=8, repeat=1, compiled=False)
    cases = r["cases"]
    assert cases[bench_rope.COPY_FLOOR]["ratio_to_floor"] == 1.0
    assert cases[bench_rope.ALLOC_FLOOR]["ratio_to_alloc_floor"] == 1.0
    assert "posenc RotaryEmbedding, half-split, in place" in cases
    assert all(c["min_s"] > 0 for c in cases.values())
    text = tables.rope({"cpu": r})
    assert "÷ copy floor" in text and "n = 16" in text


def test_saved_results_render():
    for name, key in (("rope.json", "cpu"), ("rope_cuda.json", "cuda")):
        r = json.loads((ROOT / "benchmarks" / "results" / name).read_text())
        assert r["benchmark"] == "rope" and key in r
        assert "n = 4,096" in tables.rope(r)
