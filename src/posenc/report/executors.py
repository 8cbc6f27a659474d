"""Engines that run a section's jobs: in this process, in N local processes, or on Ray.

The runner never cares which engine computes a job. It submits :class:`Task`s
(a job's pure function, its config and the threads it may use), collects
:class:`Outcome`s as they finish, and *writes every result itself* into the job
store, so resume, config-change detection, claims and shards work the same with
every engine, and a job that ran twice (a retry) cannot tear a file.

Engines:

- :class:`InlineExecutor`: one job at a time in the calling process (``--workers 1``,
  the default; nothing is pickled).
- :class:`LocalExecutor`: ``workers`` processes on this machine (``forkserver`` or
  ``spawn``); each sets ``torch`` to the threads it owns; a worker that dies is
  replaced and its job retried (``max_retries``).
- :class:`RayExecutor`: one Ray task per job with ``num_cpus=threads`` and Ray's
  retries on worker failure; joins ``address`` or starts a local instance
  (``pip install posenc[ray]``).

All three share one small protocol: ``slots`` (how many jobs may be in flight),
``submit(task)``, ``wait(timeout)`` -> finished outcomes, ``close()``, and
``memory_limit()``: the memory one job may plan to hold on one of the engine's workers.
The local and Ray engines give each worker its share of the limit (not the host's
whole limit: several jobs run beside each other) through ``$POSENC_MAX_MEMORY`` in the
worker's environment, so the library's own checks inside a job use the share too.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor
from concurrent.futures import wait as futures_wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any

from posenc._resources import LIMIT_ENV, LIMIT_SOURCE_ENV, Limit, env_limit, format_bytes, library_limit

EXECUTORS = ("local", "ray")


@dataclass(frozen=True)
class Task:
    """One job handed to an engine.

    Args:
        key: the job key (unique within ``section``).
        run: the job's pure function ``config -> dict`` (picklable by reference).
        config: its frozen config.
        threads: torch threads the job may use (what its worker owns).
        section: the section name (for messages).
    """

    key: str
    run: Callable[[Any], dict]
    config: Any
    threads: int = 1
    section: str = ""


@dataclass(frozen=True)
class Outcome:
    """What came back for a task: a result, its seconds and the floating-point paths it ran on
    (:func:`posenc.report.provenance.numerics_label`), or an error line."""

    key: str
    result: dict | None
    seconds: float
    error: str | None = None
    numerics: str | None = None


def available_cores() -> int:
    """CPU cores this process may run on (affinity-aware)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


#: what the forkserver imports before it forks the local workers: torch, and what the jobs of the
#: report import on their first call (torch._dynamo, which torch.optim pulls in: ~1.2 s per worker;
#: scikit-learn's datasets, for the embedded images and digits, cost ~1.5 s per worker on an idle
#: core and ~5 s on a loaded one; Pillow). A module that is not installed is skipped (by
#: multiprocessing).
PRELOAD = ("torch", "torch._dynamo", "posenc.report.executors", "sklearn.datasets", "PIL.Image")

#: at most this many local workers, or torch threads per job, per core this process may use:
#: beyond it nothing runs faster, and every worker is a process holding torch (~200 MB), every
#: thread a stack (``--threads 100000000`` crashed torch, ``--workers 10**6`` would fork as many
#: processes as there are jobs)
PER_CORE = 4


def max_per_machine() -> int:
    """The most local workers, or threads per job, that :func:`check_count` accepts: ``PER_CORE`` x cores."""
    return PER_CORE * available_cores()


def check_count(name: str, value: Any) -> int:
    """``value`` as a count of local workers or threads: an integer from 1 to :func:`max_per_machine`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    most = max_per_machine()
    if value > most:
        raise ValueError(f"{name} must be at most {most} ({PER_CORE} x the {available_cores()} cores this "
                         f"process may use), got {value}")
    return value


def default_threads(workers: int) -> int:
    """Threads per worker so that ``workers`` workers do not oversubscribe: cores // workers, >= 1."""
    return max(1, available_cores() // max(1, workers))


def worker_share(limit: Limit | None, workers: int, who: str) -> Limit | None:
    """``limit`` split evenly between ``workers`` that run beside each other.

    Args:
        limit: the limit of all of them together (None: no limit, and none for each).
        workers: how many run at once (>= 1).
        who: what they are, for the source (``"local workers"``).

    Returns:
        ``limit // workers``, naming ``limit`` and its source; ``limit`` itself for one worker.
    """
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a positive integer, got {workers!r}")
    if limit is None or workers == 1:
        return limit
    source = limit.source if isinstance(limit, Limit) else "given"
    return Limit(int(limit) // workers, f"a worker's share: 1/{workers} of {format_bytes(limit)} ({source}) "
                                        f"for each of {workers} {who}")


def memory_env(limit: Limit | None) -> dict[str, str]:
    """The environment that gives a worker process ``limit`` (``$POSENC_MAX_MEMORY`` and its source)."""
    if limit is None:
        return {LIMIT_ENV: "off", LIMIT_SOURCE_ENV: ""}
    return {LIMIT_ENV: str(int(limit)), LIMIT_SOURCE_ENV: limit.source if isinstance(limit, Limit) else ""}


def _error_line(err: BaseException) -> str:
    msg = str(err).strip().splitlines()
    return f"{type(err).__name__}: {msg[0]}" if msg else type(err).__name__


def execute(run: Callable[[Any], dict], config: Any, threads: int) -> tuple[dict, float, str]:
    """Run one job with ``threads`` torch threads; return ``(result, seconds, numerics)``.

    The result is made strict-JSON here (NaN -> None, tensors -> lists), so what
    travels back to the driver is plain data; ``numerics`` names the floating-point
    paths it ran on (:func:`posenc.report.provenance.numerics_label`).
    """
    import torch

    from posenc.report.provenance import numerics_label
    from posenc.report.store import _clean

    old = torch.get_num_threads()
    torch.set_num_threads(max(1, int(threads)))
    try:
        t0 = time.perf_counter()
        result = run(config)
        seconds = time.perf_counter() - t0
    finally:
        torch.set_num_threads(old)
    return _clean(result), seconds, numerics_label()


def probe_numerics() -> str:
    """:func:`posenc.report.provenance.numerics_label` of the process it runs in (a worker's)."""
    from posenc.report.provenance import numerics_label

    return numerics_label()


def _init_worker(threads: int, env: dict[str, str] | None = None) -> None:
    from posenc.report.provenance import pin_numerics

    pin_numerics()  # before this process runs any operation (the forkserver only imported torch)
    os.environ.update(env or {})  # the worker's share of the memory limit
    os.environ["OMP_NUM_THREADS"] = str(threads)
    os.environ["MKL_NUM_THREADS"] = str(threads)
    import torch

    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # already set in this process
        pass


class InlineExecutor:
    """Runs each submitted job in this process when :meth:`wait` is called (one slot).

    Exceptions (``Exception`` subclasses) become failed outcomes; ``KeyboardInterrupt``
    and ``SystemExit`` propagate, as they would for a killed run.
    """

    slots = 1
    name = "inline"

    def __init__(self) -> None:
        self._queue: list[Task] = []

    def submit(self, task: Task) -> None:
        self._queue.append(task)

    def pending(self) -> int:
        return len(self._queue)

    def wait(self, timeout: float | None = None) -> list[Outcome]:
        if not self._queue:
            return []
        task = self._queue.pop(0)
        try:
            result, seconds, numerics = execute(task.run, task.config, task.threads)
        except Exception as err:  # noqa: BLE001 - reported as the job's failure
            return [Outcome(task.key, None, 0.0, _error_line(err))]
        return [Outcome(task.key, result, seconds, numerics=numerics)]

    def numerics(self) -> str:
        """The floating-point paths jobs run on here (this process's)."""
        return probe_numerics()

    def memory_limit(self) -> Limit | None:
        """The memory a job may plan to hold: this process's library limit, read now."""
        return library_limit()

    def close(self) -> None:
        self._queue.clear()

    def __repr__(self) -> str:
        return "InlineExecutor()"


class LocalExecutor:
    """``workers`` processes on this machine, each with ``threads`` torch threads.

    Args:
        workers: number of worker processes (>= 1).
        threads: torch threads per worker (default: cores // workers, at least 1).
        context: ``"forkserver"`` (default on Linux) or ``"spawn"``; never ``fork``,
            which copies the driver's torch thread pools and locks.
        max_retries: how often a job whose worker *died* (not one that raised) is resubmitted.
    """

    name = "local"

    def __init__(self, workers: int, threads: int | None = None, context: str | None = None,
                 max_retries: int = 2) -> None:
        check_count("workers", workers)
        if threads is None:
            threads = default_threads(workers)
        check_count("threads", threads)
        if context is None:
            context = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
        if context not in ("forkserver", "spawn"):
            raise ValueError(f"context must be 'forkserver' or 'spawn', got {context!r}")
        self.workers, self.threads, self.context, self.max_retries = workers, threads, context, max_retries
        self.slots = workers
        # each worker's share of this process's limit, read once: the workers run beside each other
        self._memory = worker_share(library_limit(), workers, "local workers")
        self._pool: ProcessPoolExecutor | None = None
        self._futures: dict[Future, Task] = {}
        self._attempts: dict[str, int] = {}
        self._unstarted: set[Future] = set()
        self._numerics: str | None = None

    def _get_pool(self) -> ProcessPoolExecutor:
        if self._pool is None:
            ctx = multiprocessing.get_context(self.context)
            if self.context == "forkserver":
                # workers fork from a server that has imported these once, instead of each importing them
                ctx.set_forkserver_preload(list(PRELOAD))
            self._pool = ProcessPoolExecutor(
                max_workers=self.workers, mp_context=ctx,
                initializer=_init_worker, initargs=(self.threads, memory_env(self._memory)),
            )
        return self._pool

    def start(self) -> None:
        """Start the worker processes now instead of at the first :meth:`submit`.

        A run calls this before it plans its first section, so the workers' start-up
        (a fork from the server, torch's thread pools) overlaps the planning. Idempotent.
        """
        if self._pool is not None:
            return
        pool = self._get_pool()
        try:
            for _ in range(self.workers):  # a process per worker: the pool spawns one per waiting task
                pool.submit(os.getpid)
        except BrokenProcessPool:  # noticed (and the pool replaced) at the first real wait()
            pass

    def memory_limit(self) -> Limit | None:
        """The memory a job may plan to hold: each worker's share of this process's limit
        (``$POSENC_MAX_MEMORY`` in the workers)."""
        return self._memory

    def numerics(self) -> str:
        """The floating-point paths the workers run jobs on (asked of one of them, once)."""
        if self._numerics is None:
            for attempt in range(self.max_retries + 1):
                try:
                    self._numerics = self._get_pool().submit(probe_numerics).result()
                    break
                except BrokenProcessPool:
                    if attempt == self.max_retries:
                        raise RuntimeError("the local workers died before they could run a job") from None
                    self._pool = None
        return self._numerics

    def submit(self, task: Task) -> None:
        self._attempts.setdefault(task.key, 0)
        try:
            future = self._get_pool().submit(execute, task.run, task.config, task.threads)
        except BrokenProcessPool as err:  # a worker died since the last wait(): handled there
            future = Future()
            future.set_exception(err)
            self._unstarted.add(future)
        self._futures[future] = task

    def pending(self) -> int:
        return len(self._futures)

    def wait(self, timeout: float | None = None) -> list[Outcome]:
        if not self._futures:
            return []
        done, _ = futures_wait(list(self._futures), timeout=timeout, return_when=FIRST_COMPLETED)
        out: list[Outcome] = []
        broken: list[Task] = []
        for future in done:
            task = self._futures.pop(future)
            try:
                result, seconds, numerics = future.result()
            except BrokenProcessPool:
                broken.append((task, future in self._unstarted))
                continue
            except Exception as err:  # noqa: BLE001 - the job raised in its worker
                out.append(Outcome(task.key, None, 0.0, _error_line(err)))
                continue
            out.append(Outcome(task.key, result, seconds, numerics=numerics))
        if broken:
            # A worker died (killed, out of memory, segfault): the pool is unusable. Replace it
            # and resubmit every job that was in flight, counting an attempt for each.
            broken += [(task, future in self._unstarted) for future, task in self._futures.items()]
            self._futures.clear()
            self._unstarted.clear()
            if self._pool is not None:
                self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
            for task, unstarted in broken:
                self._attempts[task.key] += 0 if unstarted else 1
                if self._attempts[task.key] > self.max_retries:
                    out.append(Outcome(task.key, None, 0.0,
                                       f"WorkerDied: its worker process died {self._attempts[task.key]} time(s)"))
                else:
                    self.submit(task)
        return out

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        self._futures.clear()

    def __repr__(self) -> str:
        return f"LocalExecutor(workers={self.workers}, threads={self.threads}, context={self.context!r})"


class RayExecutor:
    """One Ray task per job, ``num_cpus=threads``, retried on worker failure.

    Args:
        address: ``None`` joins a running local instance or starts one; ``"auto"``
            joins a running cluster; ``"ray://host:port"`` connects a client.
        threads: CPUs reserved per task, and torch threads inside it.
        num_cpus: CPUs of a local instance this executor starts (default: all cores).
        max_retries: Ray's retries of a task whose worker process died.
        max_in_flight: jobs submitted at once (default: the cluster's CPUs // threads).
    """

    name = "ray"

    def __init__(self, address: str | None = None, threads: int = 1, num_cpus: int | None = None,
                 max_retries: int = 2, max_in_flight: int | None = None) -> None:
        try:
            import ray
        except ImportError:
            raise ValueError("--executor ray needs Ray: pip install 'posenc[ray]'") from None
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise ValueError(f"threads must be a positive integer, got {threads!r}")
        self._ray = ray
        self.threads, self.address = threads, address
        self._started = False
        if not ray.is_initialized():
            kwargs: dict[str, Any] = dict(include_dashboard=False, log_to_driver=False, logging_level="ERROR")
            if address is None:
                try:
                    ray.init(address="auto", **kwargs)
                except (ConnectionError, RuntimeError, ValueError):
                    self._start_local(num_cpus, kwargs)
            else:
                if address.startswith("ray://"):
                    kwargs = {}
                try:
                    ray.init(address=address, **kwargs)
                except (ConnectionError, RuntimeError) as err:
                    raise ValueError(f"--address {address!r}: cannot join the Ray cluster ({_error_line(err)})") from None
        cpus = int(ray.cluster_resources().get("CPU", 1))
        if threads > cpus:
            raise ValueError(f"threads ({threads}) exceeds the Ray cluster's {cpus} CPUs")
        self.slots = max_in_flight or max(1, cpus // threads)
        from posenc.report.provenance import NUMERICS_ENV

        self._memory = ray_task_share(ray.cluster_resources(), threads, self.slots)
        # every task's worker pins the same floating-point paths before it computes anything, and
        # gets its share of the memory limit
        runtime_env = {"env_vars": {**NUMERICS_ENV, **memory_env(self._memory)}}
        self._remote = ray.remote(execute).options(num_cpus=threads, max_retries=max_retries,
                                                   retry_exceptions=False, runtime_env=runtime_env)
        self._probe = ray.remote(probe_numerics).options(num_cpus=threads, runtime_env=runtime_env)
        self._numerics: str | None = None
        self._refs: dict[Any, Task] = {}

    def _start_local(self, num_cpus: int | None, kwargs: dict) -> None:
        # Workers of an instance we start import what the driver imports (its sys.path).
        old = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        try:
            self._ray.init(num_cpus=num_cpus or available_cores(), **kwargs)
        finally:
            if old is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = old
        self._started = True

    def memory_limit(self) -> Limit | None:
        """The memory a job may plan to hold: a task's share (:func:`ray_task_share`), given to its
        worker as ``$POSENC_MAX_MEMORY``."""
        return self._memory

    def numerics(self) -> str:
        """The floating-point paths Ray's workers run jobs on (asked of one of them, once)."""
        if self._numerics is None:
            self._numerics = self._ray.get(self._probe.remote())
        return self._numerics

    def submit(self, task: Task) -> None:
        ref = self._remote.remote(task.run, task.config, task.threads)
        self._refs[ref] = task

    def pending(self) -> int:
        return len(self._refs)

    def wait(self, timeout: float | None = None) -> list[Outcome]:
        if not self._refs:
            return []
        ray = self._ray
        ready, _ = ray.wait(list(self._refs), num_returns=1, timeout=timeout)
        if ready:  # collect everything else that is already done too
            ready, _ = ray.wait(list(self._refs), num_returns=len(self._refs), timeout=0)
        out = []
        for ref in ready:
            task = self._refs.pop(ref)
            try:
                result, seconds, numerics = ray.get(ref)
            except ray.exceptions.RayTaskError as err:
                cause = err.cause if getattr(err, "cause", None) is not None else err
                out.append(Outcome(task.key, None, 0.0, _error_line(cause)))
            except ray.exceptions.RayError as err:  # worker died more than max_retries times, etc.
                out.append(Outcome(task.key, None, 0.0, f"{type(err).__name__}: {str(err).splitlines()[0]}"))
            else:
                out.append(Outcome(task.key, result, seconds, numerics=numerics))
        return out

    def close(self) -> None:
        for ref in list(self._refs):
            try:
                self._ray.cancel(ref, force=True)
            except Exception:  # noqa: BLE001 - best effort on the way out
                pass
        self._refs.clear()
        if self._started:
            self._ray.shutdown()
            self._started = False

    def __repr__(self) -> str:
        return f"RayExecutor(address={self.address!r}, threads={self.threads}, slots={self.slots})"


def ray_task_share(resources: dict[str, float], threads: int, slots: int) -> Limit | None:
    """The memory limit of one Ray task that reserves ``threads`` CPUs.

    Ray lists each node's memory for tasks as its ``memory`` resource; a task that reserves
    ``threads`` of the cluster's CPUs gets that fraction of it (a node runs as many tasks beside
    each other as it has CPUs for). Without a ``memory`` resource: :func:`worker_share` of this
    process's limit between the ``slots`` tasks in flight. A ``$POSENC_MAX_MEMORY`` set here caps
    the tasks in flight together, as it caps local workers (``off``: no limit in the tasks).

    Args:
        resources: ``ray.cluster_resources()``.
        threads: CPUs each task reserves (>= 1).
        slots: tasks in flight at once (>= 1).
    """
    env = env_limit()
    if env is None:
        return None
    memory, cpus = resources.get("memory"), resources.get("CPU")
    if not memory or not cpus or memory <= 0 or cpus <= 0:
        return worker_share(library_limit(), slots, "Ray tasks in flight")
    share = Limit(int(memory * min(1.0, threads / cpus)), f"a Ray task's share: {threads} of the cluster's "
                                                          f"{cpus:g} CPUs' {format_bytes(memory)} of memory for tasks")
    capped = worker_share(env, slots, "Ray tasks in flight") if env is not False else None
    return capped if capped is not None and capped < share else share


def make_executor(kind: str = "local", workers: int = 1, threads: int | None = None,
                  address: str | None = None) -> InlineExecutor | LocalExecutor | RayExecutor:
    """The executor for ``--executor kind --workers N --threads T --address A``.

    ``local`` with one worker runs jobs in this process; with more, in worker processes.
    """
    if kind not in EXECUTORS:
        raise ValueError(f"executor must be one of {', '.join(EXECUTORS)}, got {kind!r}")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a positive integer, got {workers!r}")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise ValueError(f"threads must be a positive integer, got {threads!r}")
    if kind == "local":  # on Ray, threads are a task's CPUs on the cluster (checked there), workers jobs in flight
        check_count("workers", workers)
        if threads is not None:
            check_count("threads", threads)
    if kind == "ray":
        return RayExecutor(address=address, threads=threads or 1, max_in_flight=workers if workers > 1 else None)
    if address is not None:
        raise ValueError("--address is for --executor ray")
    if workers == 1:
        return InlineExecutor()
    return LocalExecutor(workers, threads)

