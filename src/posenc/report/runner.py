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
import heapq
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from posenc.report.decided import count_decided
from posenc.report.executors import InlineExecutor, LocalExecutor, RayExecutor, Task, make_executor
from posenc.report.registry import SECTIONS, get_section
from posenc.experiments.job import Job
from posenc.report.section import PROFILES
from posenc.report.store import (
    Claim,
    ClaimKeeper,
    JobStore,
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    OTHER_CODE,
    read_summary,
)

Executor = InlineExecutor | LocalExecutor | RayExecutor

#: ``progress(section, key, done_cost, total_cost, skipped, jobs_done, jobs_total)`` after each job.
ProgressFn = Callable[[str, str, float, float, bool, int, int], None]

#: The most seeds a run may ask for (``--seeds``). Every section plans jobs in proportion to its
#: seeds (coords about 46 per seed, 4,600 at this bound); a bound keeps ``--seeds 10**12`` from
#: planning, listing and claiming without end (planning is not free: ~0.7 ms per coords job).
MAX_SEEDS = 100

#: ``notice(message)``: something the run found and handled (a stored record that is torn or
#: invalid, hence recomputed); the CLI prints it as a ``warning:`` line.
NoticeFn = Callable[[str], None]


class JobsFailed(RuntimeError):
    """Some jobs raised (or their workers died) or were refused; the others finished and are stored.

    Attributes:
        failures: ``{"section/key": "ExceptionType: message"}``.
        payload: what :func:`reproduce` would have returned (the finished sections and job lists).
        refused: ``{"section/key": reason}``: jobs refused over their worker's memory limit (not run).
    """

    def __init__(self, failures: dict[str, str], payload: dict | None = None,
                 refused: dict[str, str] | None = None) -> None:
        self.failures, self.payload, self.refused = failures, payload or {}, refused or {}
        problems = {**self.failures, **self.refused}
        if not problems:
            raise ValueError("JobsFailed needs at least one failed or refused job, got none")
        parts = ([f"{len(self.failures)} job(s) failed"] if self.failures else []) + (
            [f"{len(self.refused)} job(s) refused over their memory limit"] if self.refused else [])
        first, why = next(iter(problems.items()))
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        super().__init__(f"{' and '.join(parts)}; {first}: {why}{more}")


#: How a job refused over the memory limit is reported (the error line of a
#: :class:`posenc._resources.FootprintError` raised inside a job starts with it too).
REFUSED = "FootprintError: "


def refusal_reason(job: Job, limit: int) -> str:
    """Why ``job`` is refused: its estimate, its worker's limit and that limit's source."""
    from posenc._resources import Limit, format_bytes

    source = f" ({limit.source})" if isinstance(limit, Limit) else ""
    return (f"it would need about {format_bytes(job.memory or 0)} of memory, more than its worker's limit of "
            f"{format_bytes(limit)}{source}")


def refusal_notice(section: str, key: str, reason: str) -> str:
    """The one line a run prints when it refuses job ``section/key`` for ``reason``."""
    return f"job {section}/{key} refused: {reason}; the run goes on with the other jobs"


def refuse_over_limit(section: str, jobs: Sequence[Job], limit: int | None) -> tuple[list[Job], dict[str, str]]:
    """Split ``jobs`` into those that may run and those whose ``memory`` estimate exceeds ``limit``.

    Args:
        section: the section name (checked to be a string, for the callers' lines).
        jobs: the jobs to run.
        limit: one worker's memory limit in bytes (None: no limit, nothing refused).

    Returns:
        ``(runnable jobs in their order, {key: reason})`` (see :func:`refusal_reason`).
    """
    if not isinstance(section, str):
        raise TypeError(f"section must be a str, got {type(section).__name__}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ValueError(f"limit must be a number of bytes >= 0 or None, got {limit!r}")
    if limit is None:
        return list(jobs), {}
    keep, refused = [], {}
    for job in jobs:
        if job.memory is not None and job.memory > limit:
            refused[job.key] = refusal_reason(job, limit)
        else:
            keep.append(job)
    return keep, refused


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


def balance_shards(costs: Sequence[float], n: int) -> list[list[int]]:
    """Split job indices into ``n`` shards of near-equal total cost.

    Greedy longest-processing-time: jobs in order of decreasing cost (ties: plan
    order) each go to the shard with the smallest load so far (ties: the lower
    shard). Deterministic, so every worker of an array computes the same split;
    each shard lists its indices in plan order. The largest load is at most
    4/3 of the optimum (Graham 1969). Time O(m log m + n) for m jobs: only the
    min(m, n) lowest shards can receive a job, the others stay empty (see
    :func:`shard_of`, which never builds them).

    Args:
        costs: the jobs' ``cost`` values, in plan order (finite, >= 0).
        n: the number of shards (>= 1).

    Returns:
        ``n`` lists of indices into ``costs``; together a partition of ``range(len(costs))``.
    """
    return _balance(costs, n) + [[] for _ in range(n - min(n, len(costs)))]


def shard_of(costs: Sequence[float], i: int, n: int) -> list[int]:
    """Shard ``i`` (0-based) of :func:`balance_shards` ``(costs, n)``, without building the empty shards."""
    bins = _balance(costs, n)
    if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n:
        raise ValueError(f"i must be an integer in [0, n), got {i!r}")
    return bins[i] if i < len(bins) else []


def _balance(costs: Sequence[float], n: int) -> list[list[int]]:
    """The first min(len(costs), n) shards of :func:`balance_shards` (the rest are empty)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    for c in costs:
        if not (isinstance(c, (int, float)) and c >= 0 and c != float("inf")):
            raise ValueError(f"costs must be finite and >= 0, got {c!r}")
    used = min(n, len(costs))  # a job goes to the lowest of the least loaded: never beyond index m - 1
    heap = [(0.0, k) for k in range(used)]  # (load, shard): the least loaded, then the lowest, on top
    bins: list[list[int]] = [[] for _ in range(used)]
    for i in sorted(range(len(costs)), key=lambda j: (-costs[j], j)):
        load, b = heapq.heappop(heap)
        bins[b].append(i)
        heapq.heappush(heap, (load + costs[i], b))
    return [sorted(b) for b in bins]


def check_seeds(seeds: int | None, name: str = "seeds") -> None:
    """``None`` (the profile's default) or an integer from 1 to :data:`MAX_SEEDS`."""
    if seeds is not None and (isinstance(seeds, bool) or not isinstance(seeds, int)
                              or not 1 <= seeds <= MAX_SEEDS):
        raise ValueError(f"{name} must be an integer from 1 to {MAX_SEEDS}, got {seeds!r}")


def plan_jobs(name: str, profile: str, seeds: int | None) -> list[Job]:
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {', '.join(PROFILES)}, got {profile!r}")
    check_seeds(seeds)
    jobs = get_section(name).plan(profile, seeds)
    keys = [job.key for job in jobs]
    if len(set(keys)) != len(keys):
        raise RuntimeError(f"section {name!r} planned duplicate job keys")
    return jobs


def select_jobs(jobs: Sequence[Job], shard: tuple[int, int] | None = None,
                keys: Sequence[str] | None = None) -> list[Job]:
    """The jobs of one shard (balanced by cost, see :func:`balance_shards`) or with the given keys."""
    if keys:
        known = {job.key for job in jobs}
        unknown = [k for k in keys if k not in known]
        if unknown:
            raise ValueError(f"job {unknown[0]!r} is not planned (see --list-jobs)")
        wanted = set(keys)
        jobs = [job for job in jobs if job.key in wanted]
    if shard is None:
        return list(jobs)
    return [jobs[i] for i in shard_of([job.cost for job in jobs], shard[0], shard[1])]


def submission_order(jobs: Sequence[Job], slots: int) -> list[Job]:
    """The order in which a run submits ``jobs`` to an engine with ``slots`` jobs in flight.

    First the ``slots`` cheapest jobs, one per worker, so that every worker finishes a job
    (and the run prints its first progress line) as early as possible; then the rest by
    decreasing cost (longest-processing-time first, which keeps one long job from running
    alone at the end); ``alone`` (timing) jobs last, each waiting until nothing else runs.
    Ties keep plan order. Results do not depend on the order: jobs are independent.

    Args:
        jobs: the jobs to run, in plan order.
        slots: the engine's jobs in flight (>= 1).

    Returns:
        The same jobs, reordered.
    """
    if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
        raise ValueError(f"slots must be a positive integer, got {slots!r}")
    shared = [i for i, job in enumerate(jobs) if not job.alone]
    first = sorted(sorted(shared, key=lambda i: (jobs[i].cost, i))[:slots])  # the cheapest, in plan order
    taken = set(first)
    rest = sorted((i for i in shared if i not in taken), key=lambda i: (-jobs[i].cost, i))
    alone = [i for i, job in enumerate(jobs) if job.alone]
    return [jobs[i] for i in (*first, *rest, *alone)]


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


def _execute_jobs(
    name: str,
    todo: list[Job],
    store: JobStore,
    executor: Executor,
    threads: int,
    wait_for_others: bool,
    claim_timeout: float,
    on_done: Callable[[Job, dict, bool], None],
    lists: dict[str, Any],
    code_of: Callable[[Job, str], dict],
    numerics: str,
    notice: NoticeFn | None = None,
) -> None:
    """Claim, submit and store ``todo`` through ``executor``; the driver alone writes the store.

    Jobs are claimed one at a time as slots free up, in :func:`submission_order` (a cheap job
    first on every worker), so several drivers on one directory split the work. An ``alone`` job waits until nothing else is in
    flight and runs with nothing beside it. Jobs another live driver holds are
    waited for (``wait_for_others``) or listed as ``claimed_elsewhere``. A job the library refused
    inside its worker (a :class:`posenc._resources.FootprintError`) is listed as ``refused``, with
    one ``notice`` line.
    """
    keeper = ClaimKeeper(interval=max(0.05, claim_timeout / 5))
    held: dict[str, tuple[Job, Claim]] = {}
    queue = submission_order(todo, executor.slots)
    elsewhere: list[Job] = []
    running_alone = False
    try:
        while queue or held or elsewhere:
            # fill free slots, in plan order, claiming each job as it is submitted
            progressed = False
            i = 0
            while i < len(queue) and not running_alone and len(held) < executor.slots:
                job = queue[i]
                if job.alone and held:
                    break  # wait until everything in flight has finished
                claim = store.claim(name, job.key, claim_timeout)
                if claim is None:
                    elsewhere.append(queue.pop(i))
                    continue
                # look for the record once the claim is ours: owners save, then release, so a job
                # another driver finished meanwhile is seen here (a look before claiming could miss
                # one saved and released between that look and the claim)
                record = store.load(name, job.key, job.config_dict(), code_of(job, numerics), job.schema)
                if record is not None:  # finished by another driver meanwhile
                    claim.release()
                    queue.pop(i)
                    lists["skipped"].append(job.key)
                    on_done(job, record, True)
                    progressed = True
                    continue
                keeper.add(claim)
                queue.pop(i)
                held[job.key] = (job, claim)
                executor.submit(Task(job.key, job.run, job.config, threads, name))
                progressed = True
                if job.alone:
                    running_alone = True
            if held:
                for outcome in executor.wait(timeout=1.0):
                    job, claim = held.pop(outcome.key)
                    if outcome.error is None and outcome.numerics not in (None, numerics):
                        lists["failed"][job.key] = (f"NumericsMismatch: ran on {outcome.numerics}, not on the run's "
                                                    f"{numerics} (not stored)")
                    elif outcome.error is None:
                        record = store.save(name, job.key, job.config_dict(), outcome.result, outcome.seconds,
                                            code_of(job, outcome.numerics or numerics))
                        lists["computed"].append(job.key)
                        on_done(job, record, False)
                    elif outcome.error.startswith(REFUSED):  # the library refused it inside its worker
                        lists["refused"][job.key] = outcome.error[len(REFUSED):]
                        if notice is not None:
                            notice(refusal_notice(name, job.key, lists["refused"][job.key]))
                    else:
                        lists["failed"][job.key] = outcome.error
                    keeper.discard(claim)
                    claim.release()
                    if job.alone:
                        running_alone = False
                continue
            if elsewhere and not queue:
                if not wait_for_others:
                    lists["claimed_elsewhere"].extend(job.key for job in elsewhere)
                    elsewhere.clear()
                    continue
                # look again: finished there (skip), or free / stale again (take it over)
                queue, elsewhere = elsewhere, []
                if not progressed:
                    time.sleep(min(1.0, claim_timeout / 10))
    finally:
        keeper.stop()


def run_section(
    name: str,
    profile: str,
    out: Path,
    seeds: int | None = None,
    shard: tuple[int, int] | None = None,
    progress: ProgressFn | None = None,
    argv: Sequence[str] | None = None,
    executor: Executor | None = None,
    threads: int = 1,
    keys: Sequence[str] | None = None,
    wait_for_others: bool | None = None,
    claim_timeout: float = 300.0,
    notice: NoticeFn | None = None,
) -> dict:
    """Run (or resume) one section.

    Args:
        name, profile, out, seeds: what to run and where (``out`` holds the job store).
        shard: ``(i, n)`` (0-based): run shard i of n, balanced by cost; no summary.
        progress: called after every job (see :data:`ProgressFn`).
        argv: the command recorded in the report.
        executor: the engine (default: one job at a time in this process).
        threads: torch threads per job (what one worker owns).
        keys: run only these jobs (no summary).
        wait_for_others: wait for jobs that another live driver has claimed (default:
            only when the section is summarised, i.e. no shard and no keys).
        claim_timeout: seconds after which a claim nobody refreshed is taken over.
        notice: called with one line for each stored job record that is torn or not a valid
            record (see :func:`posenc.report.store.check_job_record`), one line for the
            records made by other code (see :mod:`posenc.report.provenance`): they are recomputed;
            and one line for each job refused over its worker's memory limit.

    A job whose ``memory`` estimate exceeds its worker's limit (``executor.memory_limit()``) is
    refused before it runs, and so is a job the library refuses inside its worker
    (:class:`posenc._resources.FootprintError`): each is reported by one ``notice`` line naming
    the job and the limit (:func:`refusal_notice`) and listed in ``refused`` (key -> reason); the
    other jobs run and are stored, and the section is not summarised (as when a job failed).

    Returns:
        ``{"record": summary record or None, "jobs": {"computed", "skipped",
        "claimed_elsewhere": [keys], "failed": {key: error}, "refused": {key: reason},
        "invalid": {key: why}}, "results": {key: stored record}}`` (``invalid``: records found torn
        or invalid and recomputed; ``other_code``: records made by other code, recomputed;
        ``results``: the records of this run's jobs that finished).
    """
    from posenc.report.provenance import code_signature, describe_code

    section = get_section(name)
    jobs = plan_jobs(name, profile, seeds)
    mine = select_jobs(jobs, shard, keys)
    partial = shard is not None or bool(keys)
    if wait_for_others is None:
        wait_for_others = not partial
    store = JobStore(out)
    total = sum(job.cost for job in mine) or 1.0
    state = {"done": 0.0, "count": 0, "computed_s": 0.0}
    results: dict[str, dict] = {}
    records: dict[str, dict] = {}
    lists: dict[str, Any] = {"computed": [], "skipped": [], "claimed_elsewhere": [], "failed": {}, "refused": {},
                             "invalid": {}, "other_code": {}}
    start = time.perf_counter()
    own = executor is None
    executor = executor or InlineExecutor()
    numerics = executor.numerics()  # the paths this engine's jobs run on

    def code_of(job: Job, ran_on: str) -> dict:
        return code_signature(job.run, ran_on)

    def on_done(job: Job, record: dict, skipped: bool) -> None:
        results[job.key] = record["result"]
        records[job.key] = record
        state["done"] += job.cost
        state["count"] += 1
        if not skipped:
            state["computed_s"] += record["seconds"]
        if progress is not None:
            progress(name, job.key, state["done"], total, skipped, state["count"], len(mine))

    todo = []
    for job in mine:
        record, problem = store.lookup(name, job.key, job.config_dict(), code_of(job, numerics), job.schema)
        if problem is not None and problem.startswith(OTHER_CODE):
            lists["other_code"][job.key] = problem[len(OTHER_CODE):]
        elif problem is not None:
            lists["invalid"][job.key] = problem
            if notice is not None:
                notice(f"{store.path(name, job.key)} is not a valid job record ({problem}); recomputing it")
        if record is None:
            todo.append(job)
        else:
            lists["skipped"].append(job.key)
            on_done(job, record, True)
    if lists["other_code"] and notice is not None:
        olds = sorted(set(lists["other_code"].values()))
        notice(f"{len(lists['other_code'])} stored record(s) of section {name!r} in {out} were made by other code "
               f"({'; '.join(olds[:2])}{' ...' if len(olds) > 2 else ''}), not by this code "
               f"({describe_code(code_of(mine[0], numerics))}); recomputing them (keep the old results by "
               f"running the code that made them, or use a fresh --out)")
    try:
        limit_of = getattr(executor, "memory_limit", None)  # an engine written elsewhere may not say
        todo, lists["refused"] = refuse_over_limit(name, todo, limit_of() if todo and limit_of else None)
        if notice is not None:
            for key, reason in lists["refused"].items():
                notice(refusal_notice(name, key, reason))
        _execute_jobs(name, todo, store, executor, threads, wait_for_others, claim_timeout, on_done, lists,
                      code_of, numerics, notice)
    finally:
        if own:
            executor.close()
    order = {job.key: i for i, job in enumerate(jobs)}
    for name_ in ("computed", "skipped", "claimed_elsewhere"):
        lists[name_].sort(key=order.__getitem__)  # plan order, whatever order the jobs finished in
    for name_ in ("failed", "refused"):
        lists[name_] = dict(sorted(lists[name_].items(), key=lambda kv: order[kv[0]]))
    done = {job.key: records[job.key] for job in jobs if job.key in records}
    if partial or lists["failed"] or lists["refused"] or lists["claimed_elsewhere"]:
        return {"record": None, "jobs": lists, "results": done}
    # plan order, whatever order the jobs finished in: the same summary from every run
    summary = section.summarize({job.key: results[job.key] for job in jobs if job.key in results})
    markdown = section.render(summary, _save_figure_factory(out, name))
    job_seconds = {job.key: records[job.key]["seconds"] if job.key in records else None for job in jobs}
    codes = {f"{r['code']['source']} {r['code']['numerics']}" for r in records.values()}
    if len(codes) > 1:  # pragma: no cover - every record was checked against one code above
        raise RuntimeError(f"section {name!r} mixes records of {len(codes)} code versions: {sorted(codes)}")
    record = {
        "section": name,
        "title": section.title,
        "profile": profile,
        "seeds": seeds,
        "command": " ".join(argv) if argv else None,
        "versions": versions(),
        # what made every job record of this summary (they all match it: see posenc.report.provenance)
        "code": code_of(jobs[0], numerics) if jobs else None,
        "quick_budget_s": section.quick_budget_s,
        "compute_seconds": sum(v for v in job_seconds.values() if v),
        "wall_seconds_this_run": time.perf_counter() - start,
        "computed_seconds_this_run": state["computed_s"],
        # when the summary was made and how busy the machine was (1, 5, 15 min), for docs/results.md
        "finished": _dt.datetime.now().isoformat(timespec="seconds"),
        "load_average": [round(v, 2) for v in os.getloadavg()] if hasattr(os, "getloadavg") else None,
        "summary": summary,
        "markdown": markdown,
        "jobs": job_seconds,
    }
    atomic_write_json(out / f"{name}.json", record)
    return {"record": record, "jobs": lists, "results": done}


def run_job(
    section: str,
    key: str,
    out: str | os.PathLike,
    profile: str = "quick",
    seeds: int | None = None,
    threads: int = 1,
    force: bool = False,
) -> dict:
    """Run one planned job by key into the job store of ``out`` and return its stored record.

    This is the unit an external scheduler runs (``posenc reproduce SECTION --job KEY``).
    A job already stored with the same config is returned without recomputing
    (``force=True`` recomputes it); the job is claimed while it runs.

    Args:
        section: the section name (``posenc reproduce --list-jobs``).
        key: the job key.
        out: the run directory shared by all workers.
        profile, seeds: as for :func:`reproduce` (they decide the job's config).
        threads: torch threads for the job.
        force: recompute even if a stored result exists.

    Returns:
        ``{"key", "digest", "config", "seconds", "result"}`` as stored in
        ``out/jobs/<section>/<key>.json``.

    Raises:
        ValueError: unknown section, profile or key; RuntimeError: another live process holds
            the job's claim; JobsFailed: the job raised, or was refused over the memory limit.
    """
    from posenc.report.provenance import pin_numerics

    pin_numerics()  # as reproduce does, for the job run in this process
    jobs = select_jobs(plan_jobs(section, profile, seeds), keys=[key])
    job = jobs[0]
    store = JobStore(out)
    if force:
        path = store.path(section, key)
        if (path.exists() or path.is_symlink()) and not path.is_dir():  # a directory there: save keeps the result beside it
            path.unlink()
    res = run_section(section, profile, Path(out), seeds, keys=[key], threads=threads, wait_for_others=False)
    if res["jobs"]["failed"] or res["jobs"]["refused"]:
        raise JobsFailed({f"{section}/{k}": v for k, v in res["jobs"]["failed"].items()},
                         refused={f"{section}/{k}": v for k, v in res["jobs"]["refused"].items()})
    record = res["results"].get(key)
    if record is None:
        raise RuntimeError(f"job {section}/{key} is claimed by another live process")
    return record


def check_summaries(out: Path, names: Sequence[str] | None = None) -> dict[str, dict]:
    """Read and validate the section summaries ``out/<section>.json`` that exist (of ``names``, default all).

    Raises:
        InvalidSummary: one is not a valid summary (the message names the file and the
            command that rebuilds it).
    """
    found = {}
    for name in SECTIONS if names is None else names:
        path = out / f"{name}.json"
        if path.exists():
            found[name] = read_summary(path, name, out)
    return found


def write_report(out: Path, argv: Sequence[str] | None = None) -> Path:
    """Assemble ``report.md`` from every ``<section>.json`` in ``out`` (each validated first).

    Raises:
        InvalidSummary: a summary file is not valid (nothing is written).
    """
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
    records = check_summaries(out)
    for name, rec in records.items():
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
        counts = count_decided({name: rec["summary"] for name, rec in records.items()})
        lines += [f"**Claims decided** (every comparison of the claim reads holds or contradicted): "
                  f"{counts['claims_decided']} of {counts['claims']} claims, {counts['comparisons_decided']} of "
                  f"{counts['comparisons']} comparisons"
                  + (f"; not decided: {', '.join(f'`{k}`' for k in counts['undecided'])}." if counts["undecided"]
                     else "."), ""]
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
    workers: int = 1,
    executor: str = "local",
    address: str | None = None,
    threads: int | None = None,
    jobs: Sequence[str] | None = None,
    notice: NoticeFn | None = None,
) -> dict:
    """Run the named sections (all when empty) and write the report.

    Puts :data:`posenc.report.provenance.NUMERICS_ENV` into ``os.environ`` first (see
    :func:`~posenc.report.provenance.pin_numerics`), for the jobs run in this process; it stays
    there, so processes started from this one afterwards run on the same pinned paths.

    Args:
        names: section names (``None``/empty: all registered sections).
        profile: ``"quick"`` or ``"full"``.
        out: the run directory (re-use it to resume; share it between workers).
        seeds: override the profile's number of seeds.
        shard: ``"i/n"``: run shard i of n (balanced by cost); no report.
        progress: called after each job (see :data:`ProgressFn`).
        argv: the command recorded in the report.
        workers: local worker processes (``executor="local"``); on Ray, when > 1, the most
            jobs in flight at once (default there: the cluster's CPUs // threads).
        executor: ``"local"`` or ``"ray"``.
        address: Ray cluster address (``"auto"``, ``"ray://host:port"``); ``None`` starts or joins a local one.
        threads: torch threads per job (default: cores // workers, at least 1; 1 on Ray,
            where it is also the CPUs each task reserves).
        jobs: run only these job keys (one section); no report.
        notice: called with one line for each stored job record found torn or invalid (recomputed).

    Returns:
        ``{"out": dir, "report": path or None, "sections": {name: summary},
        "jobs": {name: {"computed", "skipped", "claimed_elsewhere": [keys], "failed": {key: error},
        "invalid": {key: why}}}}``; with ``jobs``, also ``"results": {name: {key: stored record}}``.

    Raises:
        JobsFailed: after every other job finished and was stored, when some jobs raised or were
            refused over their worker's memory limit (``refused``; see :func:`run_section`).
        InvalidSummary: before any work, when the report would include another section's
            summary file that is not valid.
    """
    from posenc.report.executors import default_threads
    from posenc.report.provenance import pin_numerics

    pin_numerics()  # for jobs run in this process: takes effect if it has not computed anything yet
    names = list(names) if names else list(SECTIONS)
    for name in names:
        get_section(name)  # fail early on an unknown name
    shard_t = parse_shard(shard)
    if jobs and len(names) != 1:
        raise ValueError("--job needs exactly one section")
    if threads is None:  # what one worker owns; a Ray task asks for one CPU unless told otherwise
        threads = 1 if executor == "ray" else default_threads(workers)
    if out is None:
        out = Path("runs") / _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = Path(out)
    partial = shard_t is not None or bool(jobs)
    if not partial:  # the report will include the other sections' summaries: check them before any work
        check_summaries(out, [name for name in SECTIONS if name not in names])
    engine = make_executor(executor, workers, threads, address)
    summaries: dict[str, Any] = {}
    job_lists: dict[str, Any] = {}
    job_results: dict[str, Any] = {}
    failures: dict[str, str] = {}
    refused: dict[str, str] = {}
    created = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
        if isinstance(engine, LocalExecutor):
            engine.start()  # the workers start (and import torch) while the first section is planned
        for name in names:
            res = run_section(name, profile, out, seeds, shard_t, progress, argv or sys.argv,
                              executor=engine, threads=threads, keys=jobs, notice=notice)
            job_lists[name] = res["jobs"]
            job_results[name] = res["results"]
            failures.update({f"{name}/{k}": v for k, v in res["jobs"]["failed"].items()})
            refused.update({f"{name}/{k}": v for k, v in res["jobs"]["refused"].items()})
            record = res["record"]
            if record is not None:
                summaries[name] = {
                    "summary": record["summary"],
                    "compute_seconds": record["compute_seconds"],
                }
    except BaseException:
        if created and out.is_dir() and not any(out.iterdir()):
            out.rmdir()  # refused before any work: leave no empty run directory behind
        raise
    finally:
        engine.close()
    report = None if partial or failures or refused else write_report(out, argv or sys.argv)
    payload = {"out": str(out), "report": None if report is None else str(report), "sections": summaries,
               "jobs": job_lists}
    if jobs:
        payload["results"] = job_results
    if failures or refused:
        raise JobsFailed(failures, payload, refused)
    return payload
