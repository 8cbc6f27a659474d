"""Run reproduction sections into a directory and assemble ``report.md``.

Layout of a run directory::

    DIR/report.md             every finished section, in registry order
    DIR/<section>.json        summary, rendered markdown, timings, job index
    DIR/<section>_<fig>.png   figures
    DIR/jobs/<section>/*.json one file per finished job (the resume points)

Re-running with the same ``DIR`` skips every job whose file exists and was made
by the same config, so a killed run loses nothing that finished.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from posenc.report.registry import SECTIONS, get_section
from posenc.report.section import PROFILES, Job
from posenc.report.store import JobStore, atomic_write_bytes, atomic_write_json, atomic_write_text, read_json

#: ``progress(section, key, done_cost, total_cost, skipped)`` after each job.
ProgressFn = Callable[[str, str, float, float, bool], None]


def parse_shard(shard: str | None) -> tuple[int, int] | None:
    """``"i/n"`` (1-based) -> ``(i - 1, n)``."""
    if shard is None:
        return None
    try:
        i, n = (int(v) for v in shard.split("/"))
    except ValueError:
        raise ValueError(f"shard must look like 'i/n' (e.g. 2/4), got {shard!r}") from None
    if not 1 <= i <= n:
        raise ValueError(f"shard must satisfy 1 <= i <= n, got {shard!r}")
    return i - 1, n


def plan_jobs(name: str, profile: str, seeds: int | None) -> list[Job]:
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {', '.join(PROFILES)}, got {profile!r}")
    if seeds is not None and (isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1):
        raise ValueError(f"seeds must be a positive integer, got {seeds!r}")
    jobs = get_section(name).plan(profile, seeds)
    keys = [job.key for job in jobs]
    if len(set(keys)) != len(keys):
        raise RuntimeError(f"section {name!r} planned duplicate job keys")
    return jobs


def _save_figure_factory(out: Path, section: str) -> Callable[[str, Any], str]:
    def save(name: str, figure: Any) -> str:
        import io

        import matplotlib.pyplot as plt

        buf = io.BytesIO()
        figure.savefig(buf, format="png", dpi=110, bbox_inches="tight")
        plt.close(figure)
        fname = f"{section}_{name}.png"
        atomic_write_bytes(out / fname, buf.getvalue())
        return fname

    return save


def versions() -> dict[str, str]:
    import numpy
    import torch

    import posenc

    return {
        "posenc": posenc.__version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "platform": platform.platform(),
        "cpus": str(os.cpu_count()),
        "torch_threads": str(torch.get_num_threads()),
    }


def run_section(
    name: str,
    profile: str,
    out: Path,
    seeds: int | None = None,
    shard: tuple[int, int] | None = None,
    progress: ProgressFn | None = None,
    argv: Sequence[str] | None = None,
) -> dict | None:
    """Run (or resume) one section; return its summary record, or None for a shard."""
    section = get_section(name)
    jobs = plan_jobs(name, profile, seeds)
    mine = jobs if shard is None else jobs[shard[0] :: shard[1]]
    store = JobStore(out)
    total = sum(job.cost for job in mine) or 1.0
    done = 0.0
    results: dict[str, dict] = {}
    computed_s = 0.0
    start = time.perf_counter()
    for job in mine:
        cfg = job.config_dict()
        record = store.load(name, job.key, cfg)
        skipped = record is not None
        if record is None:
            t0 = time.perf_counter()
            result = job.run(job.config)
            seconds = time.perf_counter() - t0
            record = store.save(name, job.key, cfg, result, seconds)
            computed_s += seconds
        results[job.key] = record["result"]
        done += job.cost
        if progress is not None:
            progress(name, job.key, done, total, skipped)
    if shard is not None:
        return None
    summary = section.summarize(results)
    markdown = section.render(summary, _save_figure_factory(out, name))
    job_seconds = {}
    for job in jobs:
        rec = store.load(name, job.key, job.config_dict())
        job_seconds[job.key] = rec["seconds"] if rec else None
    record = {
        "section": name,
        "title": section.title,
        "profile": profile,
        "seeds": seeds,
        "command": " ".join(argv) if argv else None,
        "versions": versions(),
        "quick_budget_s": section.quick_budget_s,
        "compute_seconds": sum(v for v in job_seconds.values() if v),
        "wall_seconds_this_run": time.perf_counter() - start,
        "computed_seconds_this_run": computed_s,
        "summary": summary,
        "markdown": markdown,
        "jobs": job_seconds,
    }
    atomic_write_json(out / f"{name}.json", record)
    return record


def write_report(out: Path, argv: Sequence[str] | None = None) -> Path:
    """Assemble ``report.md`` from every ``<section>.json`` in ``out``."""
    info = versions()
    lines = [
        "# posenc reproduction report",
        "",
        f"- generated: {_dt.datetime.now().isoformat(timespec='seconds')}",
        f"- this report assembled by: `{' '.join(argv) if argv else 'posenc reproduce'}`",
        "- versions: " + ", ".join(f"{k} {v}" for k, v in info.items()),
        "",
    ]
    index = []
    bodies = []
    for name in SECTIONS:
        path = out / f"{name}.json"
        if not path.exists():
            continue
        rec = read_json(path)
        index.append(
            f"| [{rec['title']}](#{name}) | `{name}` | {rec['profile']} | "
            f"{rec['compute_seconds']:.1f} | {rec['quick_budget_s']:.0f} | `{rec.get('command') or ''}` |"
        )
        bodies.append(f'<a id="{name}"></a>\n\n## {rec["title"]}\n\n{rec["markdown"].rstrip()}\n')
    if index:
        lines += [
            "| section | name | profile | compute (s) | quick budget (s) | produced by |",
            "|---|---|---|---:|---:|---|",
            *index,
            "",
        ]
    lines += bodies
    path = out / "report.md"
    atomic_write_text(path, "\n".join(lines).rstrip() + "\n")
    return path


def reproduce(
    names: Sequence[str] | None,
    profile: str = "quick",
    out: str | os.PathLike | None = None,
    seeds: int | None = None,
    shard: str | None = None,
    progress: ProgressFn | None = None,
    argv: Sequence[str] | None = None,
) -> dict:
    """Run the named sections (all when empty) and write the report.

    Returns ``{"out": dir, "report": path or None, "sections": {name: summary}}``.
    """
    names = list(names) if names else list(SECTIONS)
    for name in names:
        get_section(name)  # fail early on an unknown name
    shard_t = parse_shard(shard)
    if out is None:
        out = Path("runs") / _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    summaries: dict[str, Any] = {}
    for name in names:
        record = run_section(name, profile, out, seeds, shard_t, progress, argv or sys.argv)
        if record is not None:
            summaries[name] = {
                "summary": record["summary"],
                "compute_seconds": record["compute_seconds"],
            }
    report = None if shard_t is not None else write_report(out, argv or sys.argv)
    return {"out": str(out), "report": None if report is None else str(report), "sections": summaries}
