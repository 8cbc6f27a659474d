"""The library refuses, before it allocates, every call whose size arguments exceed the memory limit.

One subprocess runs every refusal (the reported ones and one per guarded function) under an
address-space cap, and reports each call's peak RSS above a warmed-up baseline; a hypothesis
test draws sizes beyond the limit and checks the refusal names the argument and both sizes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from posenc._resources import LIMIT_ENV, FootprintError, format_bytes

# name -> a call, run in the subprocess with posenc's public functions in scope. Under a limit of
# 1 GiB each asks for between 2 GB and a few hundred GB (the range that can take a machine down).
CASES = {
    "gaussian num_features=2**31-1": "create_encoding('gaussian', num_features=2**31 - 1)",
    "rff num_features=2**28": "create_encoding('rff', num_features=2**28)",
    "sinusoidal num_features=2**28": "create_encoding('sinusoidal', num_features=2**28)",
    "learned_table grid_size=2**28": "create_encoding('learned_table', grid_size=2**28, num_features=4)",
    "lff hidden_dim=2**26": "create_encoding('lff', hidden_dim=2**26)",
    "alibi_bias n=100000": "alibi_bias(alibi_slopes(8), 100000)",
    "relative_distance": "relative_distance(100000, 100000)",
    "RelativeSelfAttention alibi n=60000": "RelativeSelfAttention(16, 8, position='alibi')(torch.zeros(1, 60000, 16))",
    "RelativeSelfAttention t5 n=60000": "RelativeSelfAttention(16, 8, position='t5')(torch.zeros(1, 60000, 16))",
    "RelativeSelfAttention learned n=60000":
        "RelativeSelfAttention(16, 8, position='learned')(torch.zeros(1, 60000, 16))",
    "RelativeMHA rope need_weights n=30000": "RelativeMHA(16, 8)(*(torch.zeros(30000, 1, 16),) * 3)",
    "RelativeSelfAttention t5 positions":
        "RelativeSelfAttention(16, 8, position='t5')(torch.zeros(1, 30000, 16), positions=torch.arange(30000.)[:, None])",
    "RelativePositionBias max_distance=10**9": "RelativePositionBias(8, kind='clipped', max_distance=10**9)",
    "RelativePositionBias toeplitz": "RelativePositionBias(8).toeplitz(100000)",
    "RelativePositionBias positions": "RelativePositionBias(8)(q_positions=torch.arange(100000))",
    "RotaryEmbedding max_seq_len=10**8": "RotaryEmbedding(128, max_seq_len=10**8)",
    "toeplitz_dense": "toeplitz_dense(torch.zeros(2 * 10**5 - 1), 10**5, 10**5)",
    "rpe_matrix": "rpe_matrix(torch.zeros(2 * 10**5 - 1), 10**5, 10**5)",
    "rpe2d_matrix": "rpe2d_matrix(torch.zeros(599, 599), (300, 300))",
    "dense_kernelized_attention":
        "dense_kernelized_attention(*(torch.ones(1, 2, 40000, 4),) * 3, torch.zeros(1, 2, 79999))",
    "softmax_rpe_attention": "softmax_rpe_attention(*(torch.ones(1, 2, 40000, 4),) * 3, torch.zeros(1, 2, 79999))",
    "kernelized_attention method='dense'": "kernelized_attention(*(torch.ones(1, 2, 40000, 4),) * 3, "
                                            "torch.ones(1, 2, 79999), method='dense')",
    "decay_coeffs": "decay_coeffs(torch.ones(8, 1), torch.ones(8, 1), 10**9, 10**9)",
    "DecayDecoder": "DecayDecoder(torch.ones(8, 1), torch.ones(8, 1), 10**4, 10**3, 10**3)",
    "relative_offsets": "relative_offsets(10**10, 10**10, 128)",
    "grid": "grid((100000, 100000))",
    "grid_1d": "grid_1d(10**10)",
    "index_grid": "index_grid((100000, 100000))",
    "subsample_mask": "subsample_mask((100000, 100000))",
    "embedding_matrix": "embedding_matrix('gaussian', 10**8)",
    "similarity_profile": "similarity_profile('gaussian', 10**8)",
    "suggest_bandwidth": "suggest_bandwidth(10**8)",
    "adjacency_csr": "adjacency_csr(torch.zeros(2, 0, dtype=torch.long), 10**10)",
    "anchor_distances": "anchor_distances(torch.zeros(2, 0, dtype=torch.long), 10**9, torch.arange(100))",
    "random_anchors": "random_anchors(10**10, 3, generator=0)",
    "bourgain_anchor_sets": "bourgain_anchor_sets(10**9, generator=0)",
    "TransformerEncoder": "TransformerEncoder(4, 4, dim=2**15, depth=8)",
    "make_mlp": "make_mlp(4, 4, hidden=10**5, depth=8)",
    "TinyViT": "TinyViT(patch_size=10**4)",
    "patch_positions": "patch_positions(10**5, 10**5)",
    "fit_coordinates": "fit_coordinates(create_encoding('gaussian'), torch.rand(10**6, 1), torch.rand(10**6), "
                       "model='mlp')",
    "resample_table": "resample_table(torch.zeros(4, 4, 8), (10**5, 10**5), 'linear')",
    "pos_embed_from_encoding":
        "pos_embed_from_encoding(create_encoding('gaussian', in_dim=2, num_features=64), (10**5, 10**5))",
    "synthetic_signal": "synthetic_signal(length=10**6)",
    "grid_cells": "grid_cells(10**5)",
    "grid_radius_task": "grid_radius_task(10**4, torch.Generator(), grid=1000)",
    "point_set_task": "point_set_task(10**9, torch.Generator())",
    "grid_graph": "grid_graph(10**5)",
    "sample_image": "sample_image(size=10**5)",
}
# decoding far from position 0: no refusal, and next to no memory (it used to build offset + n rows)
DECODES = [10**6, 10**8, 2 * 10**9]  # the largest offsets RoPE's float64 angles keep to 1e-6 rad

_SCRIPT = textwrap.dedent('''
    import json, os, resource, sys
    import torch
    from posenc.analysis import embedding_matrix, similarity_profile, suggest_bandwidth
    from posenc.attention import (RelativeMHA, RelativePositionBias, RelativeSelfAttention, RotaryEmbedding,
                                  alibi_bias, alibi_slopes)
    from posenc.attention.kernelized.decay import DecayDecoder, decay_coeffs
    from posenc.attention.kernelized.kernelized import kernelized_attention, relative_offsets
    from posenc.attention.kernelized.reference import dense_kernelized_attention, rpe_matrix, softmax_rpe_attention
    from posenc.attention.kernelized.rpe2d import rpe2d_matrix
    from posenc.attention.kernelized.toeplitz import toeplitz_dense
    from posenc.attention.relative.alibi import relative_distance
    from posenc.data.graphs import grid_graph
    from posenc.data.grid_tasks import grid_cells, grid_radius_task, point_set_task
    from posenc.data.images import sample_image
    from posenc.data.signals import synthetic_signal
    from posenc.encodings import create_encoding
    from posenc.encodings.learnable import resample_table
    from posenc.graph._validate import adjacency_csr
    from posenc.graph.anchors import bourgain_anchor_sets, random_anchors
    from posenc.graph.distances import anchor_distances
    from posenc.interop import pos_embed_from_encoding
    from posenc.models import TinyViT, TransformerEncoder
    from posenc.models.coordinate import fit_coordinates, make_mlp
    from posenc.models.vit import patch_positions
    from posenc.positions import grid, grid_1d, index_grid, subsample_mask
    from posenc._resources import FootprintError

    def hwm_mb():
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0

    def vm_mb():
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) / 1024.0

    cases, decodes = json.loads(sys.argv[1]), json.loads(sys.argv[2])
    torch.set_num_threads(1)
    rope = RotaryEmbedding(128)
    x = torch.randn(1, 8, 1, 128)
    rope(x, x, offset=3)
    # from here on a regression fails with an allocation error instead of exhausting the machine
    cap = int((vm_mb() + 2048) * 2**20)
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    for name, call in cases.items():  # warm every lazy initialisation once
        try:
            eval(call)
        except Exception:
            pass
    base = hwm_mb()
    rows = []
    for name, call in cases.items():
        try:
            eval(call)
            result, message = "ran", ""
        except FootprintError as err:
            result, message = "refused", str(err)
        except Exception as err:
            result, message = type(err).__name__, str(err)[:300]
        rows.append({"case": name, "result": result, "message": message, "delta_mb": hwm_mb() - base})
    for off in decodes:
        rope(x, x, offset=off)
        rows.append({"case": f"decode offset={off}", "result": "ran", "message": "", "delta_mb": hwm_mb() - base})
    print(json.dumps(rows))
''')


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmHWM from /proc (Linux)")
def test_library_refusals_allocate_next_to_nothing():
    env = {**os.environ, LIMIT_ENV: "1G", "PYTHONPATH": os.pathsep.join(
        [str(Path(__file__).parents[1] / "src"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, json.dumps(CASES), json.dumps(DECODES)],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(proc.stdout.splitlines()[-1])
    assert len(rows) == len(CASES) + len(DECODES)
    for row in rows:
        assert row["delta_mb"] < 64, row  # peak RSS above the warmed-up baseline
        if row["case"].startswith("decode"):
            assert row["result"] == "ran", row
            continue
        assert row["result"] == "refused", row
        msg = row["message"]
        assert "would need about" in msg and "more than the limit of 1 GiB" in msg and "=" in msg, row


# ------------------------------------------------------------------ fuzz: sizes beyond the limit
def _alibi(n):
    from posenc.attention import alibi_bias, alibi_slopes

    return alibi_bias(alibi_slopes(4), n, n + 7)


def _attention(n):
    from posenc.attention import RelativeSelfAttention

    return RelativeSelfAttention(8, 4, position="t5")(torch.zeros(1, n, 8))


def _grid(n):
    from posenc.positions import grid

    return grid((n, n + 3))


def _encoding(n):
    from posenc.encodings import create_encoding

    return create_encoding("gaussian", num_features=2**29 + n)


def _toeplitz(n):
    from posenc.attention.kernelized.toeplitz import toeplitz_dense

    return toeplitz_dense(torch.zeros(3, 2 * n - 1), n, n)


def _rope(n):
    from posenc.attention import RotaryEmbedding

    return RotaryEmbedding(64, max_seq_len=n * 2**8)


def _embedding(n):
    from posenc.analysis import embedding_matrix

    return embedding_matrix("gaussian", n * 64)


GUARDED = [_alibi, _attention, _grid, _encoding, _toeplitz, _rope, _embedding]
for _fn, _arg in zip(GUARDED, ("n_q=", "sequence length n=", "shape=", "num_features=", "n_q=", "max_seq_len=",
                              "num_points=")):
    _fn.argument = _arg


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fn=st.sampled_from(GUARDED), n=st.integers(2**15, 2**22), limit_mib=st.integers(260, 4096))
def test_sizes_beyond_the_limit_are_refused_naming_the_argument(monkeypatch, fn, n, limit_mib):
    monkeypatch.setenv(LIMIT_ENV, f"{limit_mib}M")
    try:
        fn(n)
    except FootprintError as err:
        assert err.nbytes > err.limit == limit_mib * 2**20
        assert isinstance(err, MemoryError) and isinstance(err, ValueError)
        msg = str(err)
        assert f"would need about {format_bytes(err.nbytes)}" in msg, msg
        assert f"more than the limit of {format_bytes(err.limit)}" in msg, msg
        assert f"({err.argument})" in msg and err.argument.startswith(fn.argument), msg
        return
    pytest.fail(f"{fn.__name__}({n}) ran under a limit of {limit_mib} MiB")
