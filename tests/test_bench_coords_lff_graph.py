"""The coords, lff and graph benchmarks run on tiny sizes and check what they compare (timings not checked)."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import bench_coords, bench_graph, bench_lff  # noqa: E402


def test_tiny_coordinate_throughput_round_robin():
    res = bench_coords.throughput(n=512, d=40, threads=1, rounds=2)
    assert res["rounds"] == 2 and len(res["load_average_before"]) == 3
    for label, row in res["encodings"].items():
        assert len(row["ratios_per_round"]) == 2 and row["ratio_to_floor"] > 0, label
    assert res["encodings"]["basic"]["out_dim"] == 2 and res["encodings"]["rff"]["out_dim"] == 40


def test_tiny_lff_forward_backward_round_robin():
    res = bench_lff.bench_encodings(batch=2, positions=16, dim=8, repeat=2)
    assert res["sinusoidal"]["ratio_to_sinusoidal"] == 1.0
    assert {"lff_mlp", "rff_mlp", "lff_nomlp"} <= set(res)


def test_tiny_anchor_distances_agree_with_scipy():
    res = bench_graph.bench_grid_distances(side=12, k=3, rounds=1)
    assert res["results_agree_with_scipy"] and res["nodes"] == 144 and res["anchors"] == 3
    assert set(res["seconds_per_round"]) >= {"ours_anchor_distances", "scipy_breadth_first_order_x_k"}


def test_tables_render_the_new_fields():
    from benchmarks import tables

    graph = {"anchor_distances": bench_graph.bench_grid_distances(side=8, k=2, rounds=1),
             "pgnn_precompute": {"graph": "g", "networkx_all_pairs_extrapolated_s": 1.0, "networkx_sources_timed": 1,
                                 "ours_one_resampling_s": 0.1, "ratio_networkx_over_ours": 10.0},
             "gir_epoch": {"graph": "g", "nodes": 1, "anchors": 1, "epoch_s": 0.1, "peak_rss_mb": 1.0}}
    assert "breadth_first_order" in tables.graph(graph)
    lff = {"encodings_fwd_bwd": {"params": {"positions": 16, "batch": 2, "dim": 8},
                                 "results": bench_lff.bench_encodings(batch=2, positions=16, dim=8, repeat=1)}}
    assert "lff_mlp" in tables.lff(lff)
