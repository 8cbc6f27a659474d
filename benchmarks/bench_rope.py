"""RoPE on q and k against the memory floor (area ``rope``).

Shape: batch 8, 8 heads, n = 4,096, d = 64, float32, forward. Two floors, both
timed in the same round-robin as the implementations so the ratios are side by side:

* **copy floor**: copying q and k into preallocated outputs (one read and one write
  of each) — what an in-place rotation can reach;
* **allocation floor**: ``q.clone(), k.clone()`` — the same bytes written to fresh
  memory, which every out-of-place implementation pays. On Linux, fresh CPU tensors
  of this size come from ``mmap`` and are paged in on first write; with transparent
  huge pages that cost drops, so the CPU cases are run twice: as they come, and in a
  fresh process with ``THP_MEM_ALLOC_ENABLE=1`` (PyTorch then asks for huge pages).

Also counted: the graphs ``torch.compile`` builds for a RoPE attention module fed
eight sequence lengths (:func:`compile_graphs`; the pre-sized cos/sin table keeps it
at one static and one dynamic graph).

Implementations: posenc's module (both layouts, out of place and in place), the
functional form, ``torch.compile`` of the module (inductor; skipped with the reason
if it cannot compile here), and rotary-embedding-torch when it is installed. When a
CUDA device is present the same cases run there too (caching allocator: no page
faults, so the two floors coincide).

Every case's first call (its warm-up, timed: the first call at this shape in the process,
after the cases before it) is reported beside its warm time. RoPE has no ``check_inputs``
switch: its only data check is one reduction over the ``n x d/2`` angles (area ``defaults``
times it, and the first call in a fresh process).
"""

from __future__ import annotations

import os
import statistics
import time

import torch

from benchmarks.isolated import run_isolated

SHAPE = {"batch": 8, "heads": 8, "n": 4096, "d": 64}
TARGET_RATIO = 2.0
COPY_FLOOR = "floor: copy q, k into preallocated outputs"
ALLOC_FLOOR = "allocation floor: clone q, k"


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bench_rope(batch: int, heads: int, n: int, d: int, repeat: int, device: str = "cpu",
               compiled: bool = True) -> dict:
    """Time every case round-robin ``repeat`` times; minimum times and ratios to both floors."""
    from posenc.attention.relative.rotary import RotaryEmbedding, apply_rope

    dev = torch.device(device)
    torch.set_num_threads(1)
    g = torch.Generator(device=dev).manual_seed(0)
    q = torch.randn(batch, heads, n, d, generator=g, device=dev)
    k = torch.randn(batch, heads, n, d, generator=g, device=dev)
    oq, ok = torch.empty_like(q), torch.empty_like(k)
    iq, ik = q.clone(), k.clone()  # rotated in place again and again (rotations keep norms)
    half = RotaryEmbedding(d, device=dev)
    inter = RotaryEmbedding(d, layout="interleaved", device=dev)
    cases = {
        COPY_FLOOR: lambda: (oq.copy_(q), ok.copy_(k)),
        ALLOC_FLOOR: lambda: (q.clone(), k.clone()),
        "posenc RotaryEmbedding, half-split": lambda: half(q, k),
        "posenc RotaryEmbedding, interleaved": lambda: inter(q, k),
        "posenc RotaryEmbedding, half-split, in place": lambda: half(iq, ik, inplace=True),
        "posenc RotaryEmbedding, interleaved, in place": lambda: inter(iq, ik, inplace=True),
        "posenc apply_rope (functional), half-split": lambda: (apply_rope(q), apply_rope(k)),
    }
    skipped: dict[str, str] = {}
    if compiled:
        for layout, mod in (("half-split", half), ("interleaved", inter)):
            name = f"torch.compile(RotaryEmbedding), {layout}"
            try:
                fn = torch.compile(mod, dynamic=False)
                fn(q, k)
                cases[name] = lambda fn=fn: fn(q, k)
            except Exception as exc:  # no C++ compiler / Triton here: say so in the result
                skipped[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    try:
        import rotary_embedding_torch as ret

        theirs = ret.RotaryEmbedding(dim=d).to(dev)
        cases["rotary-embedding-torch 0.9 (interleaved)"] = lambda: (
            theirs.rotate_queries_or_keys(q), theirs.rotate_queries_or_keys(k))
    except ImportError:
        skipped["rotary-embedding-torch"] = "not installed"
    first: dict[str, float] = {}
    for name, fn in cases.items():  # warm-up: caches, first-touch of the outputs (timed: the first call)
        _sync(dev)
        t0 = time.perf_counter()
        fn()
        _sync(dev)
        first[name] = time.perf_counter() - t0
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeat):  # round-robin: every case sees the same machine state
        for name, fn in cases.items():
            _sync(dev)
            t0 = time.perf_counter()
            fn()
            _sync(dev)
            times[name].append(time.perf_counter() - t0)
    floor, alloc = min(times[COPY_FLOOR]), min(times[ALLOC_FLOOR])
    out = {
        "shape": {"batch": batch, "heads": heads, "n": n, "d": d}, "threads": 1, "device": str(dev),
        "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
        "thp_mem_alloc": os.environ.get("THP_MEM_ALLOC_ENABLE", ""),
        "bytes_moved_floor": 4 * q.numel() * q.element_size(),
        "cases": {name: {"min_s": min(ts), "median_s": statistics.median(ts), "ratio_to_floor": min(ts) / floor,
                         "ratio_to_alloc_floor": min(ts) / alloc, "first_s": first[name]}
                  for name, ts in times.items()},
        "skipped": skipped,
        "target_ratio": TARGET_RATIO,
    }
    return out


COMPILE_LENGTHS = (8, 9, 10, 11, 12, 13, 40, 100)


def compile_graphs(lengths: tuple[int, ...] = COMPILE_LENGTHS) -> dict:
    """Graphs ``torch.compile`` builds for a RoPE attention module fed these sequence lengths (#25).

    Dynamo frames counted with its ``CompileCounter`` backend (the count does not depend
    on the backend): with the pre-sized cos/sin table a model compiles once static and
    once dynamic, however many lengths follow.
    """
    import torch._dynamo
    import torch._dynamo.testing

    from posenc.attention import RelativeSelfAttention

    out = {"lengths": list(lengths), "graphs": {}}
    for label, dynamic in (("default (automatic dynamic shapes)", None), ("dynamic=True", True)):
        torch._dynamo.reset()
        mod = RelativeSelfAttention(16, 2, position="rope")
        counter = torch._dynamo.testing.CompileCounter()
        fn = torch.compile(mod, backend=counter, dynamic=dynamic)
        for n in lengths:
            fn(torch.randn(2, n, 16))
        out["graphs"][label] = counter.frame_count
    torch._dynamo.reset()
    return out


def run(quick: bool = False) -> dict:
    shape = dict(SHAPE, batch=2, n=512) if quick else SHAPE
    repeat = 3 if quick else 9
    result = {"cpu": bench_rope(**shape, repeat=repeat, compiled=not quick), "compile_graphs": compile_graphs(),
              "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None}
    if not quick and os.name == "posix":
        os.environ["THP_MEM_ALLOC_ENABLE"] = "1"  # read by the child at start-up
        try:
            result["cpu_thp"] = run_isolated("bench_rope", "bench_rope", **shape, repeat=repeat, compiled=False)
        finally:
            del os.environ["THP_MEM_ALLOC_ENABLE"]
    if torch.cuda.is_available():
        result["cuda"] = bench_rope(**shape, repeat=max(repeat, 20), device="cuda", compiled=not quick)
    return result


def _main() -> None:
    """``python -m benchmarks.bench_rope --device cuda --out FILE``: one device's cases alone."""
    import argparse
    import json

    from benchmarks.common import environment

    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_rope")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", required=True)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    key = torch.device(args.device).type
    result = {"benchmark": "rope", "quick": False, "environment": environment(),
              key: bench_rope(**SHAPE, repeat=args.repeat, device=args.device)}
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    _main()
