"""Benchmarks for CAPE (area ``cape``).

1. Augmentation + embedding per forward pass (training mode, 4,096 tokens x batch
   32, width 128, float32) as a ratio to plain sinusoids on the same positions:
   1D (text preset) against :class:`posenc.encodings.SinusoidalEncoding`; 2D (vision
   preset, the authors' convention on their ``linspace(-1, 1, 64)`` grid of 64 x 64
   patches: uniform scale, patch width measured by ``grid_cell``, the float32 phase
   check) against CAPE's own isotropic sinusoids
   without augmentation (evaluation mode: the same features, nothing drawn) and
   against the per-axis :class:`~posenc.encodings.SinusoidalEncoding`. The cases
   are timed round-robin in one process, so the ratios are side by side even on a
   loaded machine. Target (issue #12): <= 1.2x in 1D and 2D.
Times are CPU seconds of this process at one thread (see :func:`round_robin`).

2. Testbed forward + backward (:class:`posenc.models.TransformerEncoder`, dim 64,
   2 layers, 4 heads, batch 1) at n = 256, 1,024, 4,096 with absolute sinusoids,
   with CAPE (training mode), and with a learned relative bias on clipped offsets
   inside attention (``relative_attention_factory("learned")``), as a ratio to the
   sinusoids at the same n.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable

import torch

from benchmarks.common import peak_rss_mb
from posenc.attention import relative_attention_factory
from posenc.encodings import CAPEEncoding, SinusoidalEncoding
from posenc.models import TransformerEncoder, patch_positions

TARGET_RATIO = 1.2


def round_robin(cases: dict[str, Callable[[], object]], repeat: int) -> dict[str, dict]:
    """Median and min CPU seconds of each case, interleaved ``repeat`` times (after one warm-up each).

    CPU time of this process (``time.process_time``) at one thread: unlike wall time it
    does not count the time other processes hold the core, which matters on a shared machine.
    ``first_s``: the CPU seconds of the warm-up call, the case's first call at this shape.
    """
    first = {}
    for name, fn in cases.items():
        t0 = time.process_time()
        fn()
        first[name] = time.process_time() - t0
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeat):
        for name, fn in cases.items():
            gc.collect()
            t0 = time.process_time()
            fn()
            times[name].append(time.process_time() - t0)
    return {name: {"median_s": statistics.median(t), "min_s": min(t), "runs": len(t), "first_s": first[name]}
            for name, t in times.items()}


def bench_embedding(batch: int, n: int, dim: int, repeat: int) -> dict:
    """CAPE (augmentation + embedding) vs plain sinusoids on the same positions, 1D and 2D."""
    side = int(round(n**0.5))
    pos1 = torch.arange(n, dtype=torch.float32)[:, None].expand(batch, n, 1)
    pos2 = patch_positions(side, side, "continuous", endpoint=True).expand(batch, side * side, 2)
    sin1, sin2 = SinusoidalEncoding(in_dim=1, num_features=dim), SinusoidalEncoding(in_dim=2, num_features=dim)
    cape1 = CAPEEncoding(in_dim=1, num_features=dim, preset="text").train()
    cape2 = CAPEEncoding(in_dim=2, num_features=dim, preset="vision").train()
    cape2_fixed = CAPEEncoding(in_dim=2, num_features=dim, preset="vision", spacing=2.0 / side).train()
    plain2 = CAPEEncoding(in_dim=2, num_features=dim, preset="vision").eval()  # same features, no augmentation
    with torch.no_grad():
        res = round_robin({
            "1d_sinusoidal": lambda: sin1(pos1),
            "1d_cape_train": lambda: cape1(pos1),
            "2d_cape_no_augmentation": lambda: plain2(pos2),
            "2d_sinusoidal_per_axis": lambda: sin2(pos2),
            "2d_cape_train": lambda: cape2(pos2),
            "2d_cape_train_given_spacing": lambda: cape2_fixed(pos2),
        }, repeat)
    ref1, ref2 = res["1d_sinusoidal"]["median_s"], res["2d_cape_no_augmentation"]["median_s"]
    ref2_axis = res["2d_sinusoidal_per_axis"]["median_s"]
    for name, r in res.items():
        if name.startswith("1d"):
            r["ratio_to_sinusoidal"] = r["median_s"] / ref1
        else:
            r["ratio_to_sinusoidal"] = r["median_s"] / ref2
            r["ratio_to_per_axis_sinusoidal"] = r["median_s"] / ref2_axis
    return {
        "params": {"batch": batch, "tokens": n, "dim": dim, "grid": [side, side], "dtype": "float32"},
        "results": res,
        "target_ratio": TARGET_RATIO,
        "meets_target": {"1d": res["1d_cape_train"]["ratio_to_sinusoidal"] <= TARGET_RATIO,
                         "2d": res["2d_cape_train"]["ratio_to_sinusoidal"] <= TARGET_RATIO},
    }


def _model(kind: str, dim: int, n: int) -> TransformerEncoder:
    torch.manual_seed(0)
    if kind == "sinusoidal":
        return TransformerEncoder(dim, dim, dim=dim, depth=2, num_heads=4,
                                  encoding=SinusoidalEncoding(in_dim=1, num_features=dim))
    if kind == "cape":
        return TransformerEncoder(dim, dim, dim=dim, depth=2, num_heads=4,
                                  encoding=CAPEEncoding(in_dim=1, num_features=dim, preset="text"))
    return TransformerEncoder(dim, dim, dim=dim, depth=2, num_heads=4,
                              attention=relative_attention_factory("learned", max_distance=128))


def bench_testbed(lengths: tuple[int, ...], dim: int, repeat: int) -> dict:
    """Forward + backward of the testbed at each length with each kind of position information."""
    out: dict[str, dict] = {}
    for n in lengths:
        x = torch.randn(1, n, dim)
        pos = torch.arange(n, dtype=torch.float32)[:, None]
        models = {k: _model(k, dim, n).train() for k in ("sinusoidal", "cape", "relative_bias")}

        def step(m: TransformerEncoder) -> None:
            m.zero_grad(set_to_none=True)
            m(x, pos).square().mean().backward()

        res = round_robin({k: (lambda m=m: step(m)) for k, m in models.items()}, repeat)
        ref = res["sinusoidal"]["median_s"]
        for r in res.values():
            r["ratio_to_sinusoidal"] = r["median_s"] / ref
        out[str(n)] = res
    return {"params": {"batch": 1, "dim": dim, "depth": 2, "heads": 4, "relative_max_distance": 128},
            "results": out}


def run(quick: bool) -> dict:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        if quick:
            emb = bench_embedding(batch=4, n=1024, dim=64, repeat=3)
            tb = bench_testbed((128, 256), dim=32, repeat=2)
        else:
            emb = bench_embedding(batch=32, n=4096, dim=128, repeat=9)
            tb = bench_testbed((256, 1024, 4096), dim=64, repeat=5)
    finally:
        torch.set_num_threads(threads)
    return {"embedding_forward": emb, "testbed_fwd_bwd": tb, "threads": 1, "peak_rss_mb": peak_rss_mb(),
            "note": "CPU seconds at 1 thread, cases interleaved in one run, on a shared 2-core machine under load"}
