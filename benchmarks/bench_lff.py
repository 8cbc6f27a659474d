"""Benchmarks for the transformer encodings and the testbed (area ``lff``).

1. Forward + backward time of each encoding on 4096 positions x batch 32 (2D
   positions, width 128), as a ratio to the sinusoidal encoding timed in the
   same run. Continuous encodings get positions with ``requires_grad`` so the
   parameter-free sinusoidal one has a backward pass too; tables get indices.
   Each encoding's first call (its warm-up, timed) is reported beside it; the
   encodings have no ``check_inputs`` switch (one reduction over the positions).
2. Training throughput (tokens/second, forward + backward + AdamW step) of the
   tiny transformer testbed on the 8x8 grid task with each encoding.
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from benchmarks.common import peak_rss_mb, timed_first
from posenc.data.grid_tasks import grid_radius_task
from posenc.encodings import (
    CoordinateMLPEncoding,
    LearnableFourierEncoding,
    LearnedTableEncoding,
    SinusoidalEncoding,
)
from posenc.experiments.lff import ENCODINGS, build_encoding, encoding_input
from posenc.models import TransformerEncoder, encode_positions


def _encodings(dim: int, side: int) -> dict:
    return {
        "sinusoidal": (SinusoidalEncoding(in_dim=2, num_features=dim), "cell"),
        "learned_table": (LearnedTableEncoding(in_dim=2, grid_size=side, num_features=dim), "index"),
        "learned_table_bicubic_from_half": (
            LearnedTableEncoding(in_dim=2, grid_size=side // 2, num_features=dim, interpolation="bicubic"), "table"),
        "coord_mlp": (CoordinateMLPEncoding(in_dim=2, num_features=dim), "coord"),
        "rff_mlp": (LearnableFourierEncoding(in_dim=2, num_features=dim, learnable_freqs=False), "coord"),
        "lff_nomlp": (LearnableFourierEncoding(in_dim=2, num_features=dim, use_mlp=False), "coord"),
        "lff_mlp": (LearnableFourierEncoding(in_dim=2, num_features=dim), "coord"),
    }


def bench_encodings(batch: int, positions: int, dim: int, repeat: int) -> dict:
    """Forward + backward of each encoding, timed round-robin ``repeat`` times.

    In each round every encoding runs once in the same order; its ratio to the
    sinusoidal encoding is taken within the round, and the median over rounds is
    reported (with the per-round ratios), so a change of machine load hits all alike.
    """
    import statistics

    side = int(round(positions**0.5))
    gen = torch.Generator().manual_seed(0)
    idx = torch.randint(side, (batch, positions, 2), generator=gen)
    coords = torch.rand(batch, positions, 2, generator=gen) * 2 - 1
    steps = {}
    for name, (enc, kind) in _encodings(dim, side).items():
        def step(enc=enc, kind=kind) -> None:
            enc.zero_grad(set_to_none=True)
            if kind == "table":
                feats = enc.table((side, side)).expand(batch, -1, -1)
            elif kind == "index":
                feats = enc(idx)
            else:
                pos = (idx.float() if kind == "cell" else coords).requires_grad_(True)
                feats = encode_positions(enc, pos)
            feats.square().mean().backward()

        steps[name] = step
    first = timed_first(steps)  # the warm-up, timed: each encoding's first call at this shape
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(repeat):
        for name, step in steps.items():
            t0 = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - t0)
    out = {}
    for name, ts in times.items():
        ratios = [t / r for t, r in zip(ts, times["sinusoidal"])]
        out[name] = {"median_s": statistics.median(ts), "min_s": min(ts), "runs": len(ts),
                     "ratio_to_sinusoidal": statistics.median(ratios), "ratios_per_round": ratios,
                     "first_s": first[name]}
    return out


def bench_testbed(grid: int, batch: int, steps: int, dim: int) -> dict:
    out = {}
    for name in ENCODINGS:
        torch.manual_seed(0)
        enc = build_encoding(name, dim, grid, 32, 3.0, 0)
        model = TransformerEncoder(2, 1, dim=dim, depth=2, num_heads=4, encoding=enc)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        data = grid_radius_task(batch, torch.Generator().manual_seed(0), grid=grid)
        pos = encoding_input(name, data["coords"], grid)

        def step() -> None:
            logits = model(data["tokens"], pos)[..., 0]
            loss = F.binary_cross_entropy_with_logits(logits, data["labels"])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        step()
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        sec = time.perf_counter() - t0
        out[name] = {"tokens_per_s": steps * batch * grid * grid / sec, "s_per_step": sec / steps}
    ref = out["sine2d"]["tokens_per_s"]
    for v in out.values():
        v["ratio_to_sine2d"] = v["tokens_per_s"] / ref
    return out


def run(quick: bool) -> dict:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        if quick:
            enc = bench_encodings(batch=4, positions=1024, dim=64, repeat=3)
            testbed = bench_testbed(grid=6, batch=16, steps=10, dim=32)
            params = {"batch": 4, "positions": 1024, "dim": 64}
        else:
            enc = bench_encodings(batch=32, positions=4096, dim=128, repeat=7)
            testbed = bench_testbed(grid=8, batch=32, steps=40, dim=32)
            params = {"batch": 32, "positions": 4096, "dim": 128}
    finally:
        torch.set_num_threads(threads)
    import os

    return {
        "load_average_after": os.getloadavg(),
        "encodings_fwd_bwd": {"params": params, "results": enc},
        "testbed_train_step": {"params": {"grid": 6 if quick else 8, "dim": 32, "depth": 2, "heads": 4},
                               "results": testbed},
        "threads": 1,
        "peak_rss_mb": peak_rss_mb(),
    }
