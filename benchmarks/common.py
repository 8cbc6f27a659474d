"""Timing helpers shared by the benchmarks."""

from __future__ import annotations

import gc
import os
import platform
import resource
import statistics
import sys
import time
from collections.abc import Callable

import torch


def environment() -> dict:
    import posenc

    return {
        "posenc": posenc.__version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        # 1, 5 and 15 min load averages when the benchmark started (timings are noisy on a busy machine)
        "load_average": [round(v, 2) for v in os.getloadavg()] if hasattr(os, "getloadavg") else None,
        "command": command(),
    }


def command() -> str:
    """The command line that is running, as typed: ``python -m benchmarks cape`` (docs/results.md shows it)."""
    import __main__

    spec = getattr(__main__, "__spec__", None)
    head = f"python -m {spec.name.removesuffix('.__main__')}" if spec is not None else f"python {sys.argv[0]}"
    return " ".join([head, *sys.argv[1:]])


def timeit(fn: Callable[[], object], *, repeat: int = 5, warmup: int = 1, min_time: float = 0.0) -> dict:
    """Median/min wall time of ``fn()`` over ``repeat`` runs after ``warmup`` runs.

    ``first_s`` is the first warm-up call's time: the first call in this process at this
    shape (None without warm-up).
    """
    first = None
    for i in range(warmup):
        t0 = time.perf_counter()
        fn()
        if i == 0:
            first = time.perf_counter() - t0
    times = []
    start = time.perf_counter()
    while len(times) < repeat or time.perf_counter() - start < min_time:
        gc.collect()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return {"median_s": statistics.median(times), "min_s": min(times), "runs": len(times), "first_s": first}


def timed_first(fns: dict[str, Callable[[], object]]) -> dict[str, float]:
    """Call each function once (the warm-up of a round-robin) and return each call's wall time: the
    first call at this shape in this process (the earlier functions have run before the later ones)."""
    first = {}
    for name, fn in fns.items():
        t0 = time.perf_counter()
        fn()
        first[name] = time.perf_counter() - t0
    return first


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far, in MiB.

    Linux: ``VmHWM`` of ``/proc/self/status``, this process's own high-water mark
    (``ru_maxrss`` carries the parent's peak over ``fork``/``exec``, so a child
    started by a large parent would report the parent's peak). Elsewhere
    ``ru_maxrss`` (KiB on Linux, bytes on macOS).
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 2**20 if sys.platform == "darwin" else rss / 1024.0
