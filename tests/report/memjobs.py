"""Job functions for the memory-refusal tests: importable by name in worker processes
(the tests put this folder on sys.path, which spawned workers inherit)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from posenc.experiments.job import Job
from posenc.report.section import Section


@dataclass(frozen=True)
class MemCfg:
    value: int
    giant: bool = False  # ask the library for an encoding far beyond any worker's limit


def mem_job(cfg: MemCfg) -> dict:
    """A tiny job that reports the memory limit its process sees; ``giant`` asks for 2**31 - 2 features."""
    from posenc._resources import LIMIT_ENV, LIMIT_SOURCE_ENV, library_limit

    if cfg.giant:
        from posenc.encodings import create_encoding

        create_encoding("rff", in_dim=3, num_features=2**31 - 2)  # ~36 GiB of frequencies: refused
    limit = library_limit()
    return {"value": cfg.value, "pid": os.getpid(), "env": os.environ.get(LIMIT_ENV),
            "env_source": os.environ.get(LIMIT_SOURCE_ENV), "limit": None if limit is None else int(limit),
            "source": None if limit is None else limit.source}


def section(memory: dict[int, float] | None = None, giant: tuple[int, ...] = (), n: int = 4) -> Section:
    """A section ``mem`` of ``n`` jobs ``m0..``; ``memory`` gives some of them an estimate (bytes)."""
    memory = memory or {}

    def plan(profile, seeds):
        return [Job(f"m{i}", mem_job, MemCfg(i, i in giant), memory=memory.get(i)) for i in range(n)]

    def summarize(results):
        return {"values": sorted(r["value"] for r in results.values())}

    def render(summary, save_figure):
        return f"values: {summary['values']}\n"

    return Section("mem", "Memory", plan, summarize, render, quick_budget_s=1.0)
