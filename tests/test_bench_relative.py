"""The relative-bias benchmark runs on tiny sizes and its tables render (timings are not checked)."""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import bench_relative, bench_rope, tables  # noqa: E402


def test_tiny_mha_comparison_and_its_table():
    r = bench_relative.mha_vs_sdpa([16], ["alibi", "learned"], embed_dim=32, heads=2, repeat=1)
    assert {(row["kind"], row["mode"]) for row in r["rows"]} == {
        (k, m) for k in ("alibi", "learned") for m in ("forward (no_grad)", "forward + backward")}
    assert all(row["ours_s"] > 0 and row["floor_s"] > 0 for row in r["rows"])
    saved = json.loads((ROOT / "benchmarks" / "results" / "relative.json").read_text())
    text = tables.relative(dict(saved, mha=r))
    assert "÷ the same projections around SDPA" in text and "learned clipped-offset bias" in text
    assert "load average" in text
    assert "RelativeMHA" in tables.relative(saved)  # the saved result carries the comparison


def test_compile_graph_count():
    r = bench_rope.compile_graphs((8, 9, 30))
    assert r["graphs"]["dynamic=True"] == 1
    assert r["graphs"]["default (automatic dynamic shapes)"] <= 2
    assert "graphs built" in tables.rope({"compile_graphs": r})
