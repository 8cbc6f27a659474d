"""The CAPE benchmark's functions and README table run on tiny sizes (timings are not checked)."""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import bench_cape, tables  # noqa: E402


def test_tiny_benchmark_and_its_table():
    emb = bench_cape.bench_embedding(batch=2, n=16, dim=8, repeat=1)
    tb = bench_cape.bench_testbed((8,), dim=8, repeat=1)
    res = emb["results"]
    assert res["1d_sinusoidal"]["ratio_to_sinusoidal"] == 1.0
    assert res["2d_cape_no_augmentation"]["ratio_to_sinusoidal"] == 1.0
    assert set(emb["meets_target"]) == {"1d", "2d"}
    assert set(tb["results"]["8"]) == {"sinusoidal", "cape", "relative_bias"}
    text = tables.cape({"embedding_forward": emb, "testbed_fwd_bwd": tb})
    assert "n = 8" in text and "1D CAPE" in text


def test_saved_results_render():
    saved = ROOT / "benchmarks" / "results" / "cape.json"
    r = json.loads(saved.read_text())
    assert r["benchmark"] == "cape" and not r["quick"]
    assert "n = 4,096" in tables.cape(r)
