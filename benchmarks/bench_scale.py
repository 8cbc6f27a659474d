"""Benchmarks for running sections beyond one process (area ``scale``).

1. ``posenc reproduce coords --profile quick`` with ``--workers 2`` against
   ``--workers 1`` (one torch thread per worker, fresh directories, the CLI as a
   user runs it): wall-clock speed-up, and the CPU seconds of all processes, with
   the load average before and after (on a shared machine the speed-up is bounded
   by the cores other processes leave free).
2. Ray against ``--workers 2``: the overhead per job of each engine on no-op jobs
   (wall time per job, start-up excluded and reported on its own), and the coords
   run on Ray as a ratio to ``--workers 2``.
3. Job-store overhead per job: load (miss) + claim + save + release for a
   result of the size a coords job stores, and the runner's whole per-job path
   (plan, claim, run a no-op in process, store, progress) per job.

``python -m benchmarks scale [--quick]``; ``--quick`` runs a quarter of the coords
jobs (``--shard 1/4``) and fewer no-op jobs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from posenc.report.tables import markdown_table


@dataclass(frozen=True)
class NoopConfig:
    index: int


def noop(cfg: NoopConfig) -> dict:
    """A job that does nothing: what is left of its time is the engine's overhead."""
    return {"index": cfg.index}


def _load() -> float:
    return os.getloadavg()[0]


def _reproduce(args: list[str], out: Path) -> dict:
    """Run the CLI in a subprocess; its wall seconds and the sum of its jobs' seconds."""
    env = dict(os.environ, OMP_NUM_THREADS="1", RAY_USAGE_STATS_ENABLED="0")
    load0, t0 = _load(), time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "posenc.cli", "reproduce", "coords", "--profile", "quick",
                           "--out", str(out), "--json", *args], capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"}
    payload = json.loads(proc.stdout)
    computed = sum(len(v["computed"]) for v in payload["jobs"].values())
    job_s = sum(json.loads(p.read_text())["seconds"] for p in (out / "jobs" / "coords").glob("*.json"))
    return {"args": " ".join(args), "wall_s": wall, "job_seconds": job_s, "jobs": computed,
            "load_before": load0, "load_after": _load()}


def bench_workers(quick: bool, ray: bool) -> dict:
    shard = ["--shard", "1/4"] if quick else []
    out: dict = {"section": "coords", "profile": "quick", "shard": "1/4" if quick else None}
    with tempfile.TemporaryDirectory() as tmp:
        out["workers_1"] = _reproduce([*shard, "--workers", "1", "--threads", "1"], Path(tmp) / "w1")
        out["workers_2"] = _reproduce([*shard, "--workers", "2", "--threads", "1"], Path(tmp) / "w2")
        if ray:
            out["ray"] = _reproduce([*shard, "--executor", "ray", "--threads", "1"], Path(tmp) / "ray")
    w1, w2 = out["workers_1"], out["workers_2"]
    if "error" not in w1 and "error" not in w2:
        out["speedup_2_vs_1"] = w1["wall_s"] / w2["wall_s"]
    if ray and "error" not in out["ray"] and "error" not in w2:
        out["ray_vs_workers_2"] = out["ray"]["wall_s"] / w2["wall_s"]
    return out


def _drain(executor, jobs: int) -> float:
    from posenc.report.executors import Task

    t0 = time.perf_counter()
    submitted = 0
    while submitted < jobs or executor.pending():
        while submitted < jobs and executor.pending() < executor.slots:
            executor.submit(Task(f"n{submitted}", noop, NoopConfig(submitted), 1))
            submitted += 1
        executor.wait(timeout=10)
    return time.perf_counter() - t0


def bench_engines(jobs: int, ray: bool) -> dict:
    from posenc.report.executors import LocalExecutor, RayExecutor

    out: dict = {"noop_jobs": jobs}
    ex = LocalExecutor(2, 1)
    t0 = time.perf_counter()
    _drain(ex, 2)  # start the pool
    out["local_2_startup_s"] = time.perf_counter() - t0
    out["local_2_per_job_ms"] = 1e3 * _drain(ex, jobs) / jobs
    ex.close()
    if ray:
        t0 = time.perf_counter()
        ex = RayExecutor(threads=1, num_cpus=2)
        _drain(ex, 2)
        out["ray_startup_s"] = time.perf_counter() - t0
        out["ray_per_job_ms"] = 1e3 * _drain(ex, jobs) / jobs
        ex.close()
        out["ray_per_job_ratio"] = out["ray_per_job_ms"] / out["local_2_per_job_ms"]
    return out


def bench_store(jobs: int) -> dict:
    from posenc.report import runner
    from posenc.experiments.job import Job
    from posenc.report.section import Section
    from posenc.report.store import JobStore

    # a result of the size a coords job stores (a few hundred numbers)
    result = {"psnr": [float(i) / 7 for i in range(300)], "curve": {str(k): k / 3 for k in range(100)}}
    config = {"encoding": "gaussian", "sigma": 0.01, "num_features": 256, "seed": 3, "model": "linear"}
    with tempfile.TemporaryDirectory() as tmp:
        store = JobStore(tmp)
        t0 = time.perf_counter()
        for i in range(jobs):
            key = f"job{i}"
            assert store.load("s", key, config) is None
            claim = store.claim("s", key)
            store.save("s", key, config, result, 0.1)
            claim.release()
        per_job_store = (time.perf_counter() - t0) / jobs
        t0 = time.perf_counter()
        for i in range(jobs):
            store.load("s", f"job{i}", config)
        per_job_resume = (time.perf_counter() - t0) / jobs

    section = Section("noop", "No-op", lambda p, s: [Job(f"n{i}", noop, NoopConfig(i)) for i in range(jobs)],
                      lambda r: {"n": len(r)}, lambda s, f: "", 1.0)
    original = runner.get_section
    runner.get_section = lambda name: section
    try:
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            runner.run_section("noop", "quick", Path(tmp), progress=lambda *a: None)
            per_job_runner = (time.perf_counter() - t0) / jobs
    finally:
        runner.get_section = original
    return {"jobs": jobs, "store_ms_per_job": 1e3 * per_job_store, "resume_check_ms_per_job": 1e3 * per_job_resume,
            "runner_ms_per_job": 1e3 * per_job_runner}


def run(quick: bool = False) -> dict:
    try:
        import ray  # noqa: F401

        has_ray = True
    except ImportError:
        has_ray = False
    return {
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "workers": bench_workers(quick, has_ray),
        "engines": bench_engines(40 if quick else 200, has_ray),
        "store": bench_store(100 if quick else 500),
        "ray_installed": has_ray,
    }


def markdown(r: dict) -> str:
    """The README table of a saved ``benchmarks/results/scale.json``."""
    w = r["workers"]
    rows = []
    for name in ("workers_1", "workers_2", "ray"):
        e = w.get(name)
        if e and "error" not in e:
            job_s = f"{e['job_seconds']:.1f}" if "job_seconds" in e else "n/a"
            rows.append([f"`{e['args']}`", e["jobs"], f"{e['wall_s']:.1f}", job_s,
                         f"{e['load_before']:.1f} / {e['load_after']:.1f}"])
    out = [f"`posenc reproduce coords --profile quick`{' --shard 1/4' if w['shard'] else ''} on {r['cores']} cores:", "",
           markdown_table(["engine", "jobs", "wall s", "sum of job seconds", "load avg before / after"], rows), ""]
    if "speedup_2_vs_1" in w:
        out.append(f"Speed-up of 2 workers over 1: {w['speedup_2_vs_1']:.2f}x"
                   + (f"; Ray / 2 workers wall time: {w['ray_vs_workers_2']:.2f}" if "ray_vs_workers_2" in w else "")
                   + ".")
    e, s = r["engines"], r["store"]
    line = f"No-op jobs ({e['noop_jobs']}): 2 local workers {e['local_2_per_job_ms']:.2f} ms/job"
    if "ray_per_job_ms" in e:
        line += (f", Ray {e['ray_per_job_ms']:.2f} ms/job ({e['ray_per_job_ratio']:.1f}x); start-up: "
                 f"local pool {e['local_2_startup_s']:.1f} s, Ray {e['ray_startup_s']:.1f} s")
    out += ["", line + ".", "",
            f"Job store per job: {s['store_ms_per_job']:.2f} ms (load miss + claim + atomic save + release), "
            f"{s['resume_check_ms_per_job']:.2f} ms to check a finished job on resume, "
            f"{s['runner_ms_per_job']:.2f} ms through the whole runner path ({s['jobs']} jobs)."]
    return "\n".join(out)


if __name__ == "__main__":
    res = run(quick="--quick" in sys.argv)
    print(json.dumps(res, indent=2))
    print(markdown(res))
