"""Job functions for the executor tests: importable by name in worker processes
(the tests put this folder on sys.path, which spawned workers inherit)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from posenc.experiments.job import Job
from posenc.report.section import Section


@dataclass(frozen=True)
class Cfg:
    value: int
    sleep: float = 0.0
    fail: bool = False
    die_once_marker: str = ""  # a path: the first attempt creates it and kills its worker


def toy_job(cfg: Cfg) -> dict:
    import torch

    start = time.time()
    if cfg.die_once_marker and not os.path.exists(cfg.die_once_marker):
        Path(cfg.die_once_marker).write_text("died")
        os._exit(3)  # a killed worker: no exception, the process is gone
    if cfg.fail:
        raise ValueError(f"bad value {cfg.value}")
    time.sleep(cfg.sleep)
    g = torch.Generator().manual_seed(cfg.value)
    return {"value": cfg.value, "draw": torch.rand(3, generator=g, dtype=torch.float64).tolist(),
            "pid": os.getpid(), "threads": torch.get_num_threads(), "start": start, "end": time.time()}


def section(n: int = 6, sleep: float = 0.0, fail: tuple[int, ...] = (), alone: tuple[int, ...] = (),
            die_once: dict[int, str] | None = None, costs: tuple[float, ...] | None = None) -> Section:
    die_once = die_once or {}

    def plan(profile, seeds):
        return [Job(f"j{i}", toy_job, Cfg(i, sleep, i in fail, die_once.get(i, "")),
                    cost=costs[i] if costs else 1.0, alone=i in alone) for i in range(n)]

    def summarize(results):
        return {"values": sorted(r["value"] for r in results.values())}

    def render(summary, save_figure):
        return f"values: {summary['values']}\n"

    return Section("toy", "Toy", plan, summarize, render, quick_budget_s=1.0)


def modules_at_start(cfg: Cfg) -> dict:
    """Which heavy modules a worker holds when its job starts (imported by the forkserver, not here)."""
    import sys

    return {"modules": sorted(m for m in ("torch", "torch._dynamo", "sklearn.datasets", "PIL.Image") if m in sys.modules)}
