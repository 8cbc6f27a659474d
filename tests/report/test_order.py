"""The order a run submits its jobs in (#25, `make demo`'s first finished job within a minute):
a cheap job first on every worker, then longest first, timing jobs last."""

from __future__ import annotations

import itertools
import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import toyjobs  # noqa: E402

from posenc.experiments.job import Job  # noqa: E402
from posenc.report import runner  # noqa: E402
from posenc.report.executors import InlineExecutor, LocalExecutor  # noqa: E402
from posenc.report.runner import submission_order  # noqa: E402


def jobs_of(costs, alone=()):
    return [Job(f"j{i}", toyjobs.toy_job, toyjobs.Cfg(i), cost=c, alone=i in alone) for i, c in enumerate(costs)]


def keys(jobs):
    return [j.key for j in jobs]


def test_the_cheapest_job_goes_first_on_each_worker_then_the_longest():
    jobs = jobs_of([3.0, 2.0, 0.5, 2.0, 6.0, 0.5, 1.0])
    assert keys(submission_order(jobs, 1)) == ["j2", "j4", "j0", "j1", "j3", "j6", "j5"]
    assert keys(submission_order(jobs, 2)) == ["j2", "j5", "j4", "j0", "j1", "j3", "j6"]
    assert keys(submission_order(jobs, 3)) == ["j2", "j5", "j6", "j4", "j0", "j1", "j3"]
    assert keys(submission_order(jobs, 100)) == ["j0", "j1", "j2", "j3", "j4", "j5", "j6"]  # all at once: plan order
    assert submission_order([], 2) == []


def test_timing_jobs_go_last_in_plan_order():
    jobs = jobs_of([0.1, 5.0, 1.0, 0.2, 4.0], alone=(0, 4))
    assert keys(submission_order(jobs, 1)) == ["j3", "j1", "j2", "j0", "j4"]
    assert keys(submission_order(jobs, 2)) == ["j2", "j3", "j1", "j0", "j4"]


def test_the_order_is_a_permutation_with_the_promised_shape():
    rnd = random.Random(3)
    for _ in range(200):
        n, slots = rnd.randint(0, 12), rnd.randint(1, 4)
        jobs = jobs_of([rnd.choice([0.5, 1.0, 2.0, 3.0]) for _ in range(n)],
                       alone=tuple(i for i in range(n) if rnd.random() < 0.2))
        order = submission_order(jobs, slots)
        assert sorted(keys(order)) == sorted(keys(jobs))
        shared = [j for j in jobs if not j.alone]
        head, tail = order[:min(slots, len(shared))], order[min(slots, len(shared)):len(shared)]
        # the head holds the cheapest jobs (no job left out is cheaper than one taken)
        assert max((j.cost for j in head), default=0) <= min((j.cost for j in tail), default=float("inf"))
        assert [j.cost for j in tail] == sorted((j.cost for j in tail), reverse=True)
        for a, b in itertools.pairwise(tail):  # ties in plan order
            if a.cost == b.cost:
                assert jobs.index(a) < jobs.index(b)
        assert all(j.alone for j in order[len(shared):])
    with pytest.raises(ValueError, match="slots"):
        submission_order(jobs_of([1.0]), 0)


@pytest.fixture
def toy(monkeypatch):
    holder = {"section": toyjobs.section(n=5, costs=(3.0, 2.0, 0.5, 6.0, 1.0))}
    monkeypatch.setattr(runner, "get_section", lambda name: holder["section"])
    monkeypatch.setattr(runner, "SECTIONS", {"toy": "x:y"})
    return holder


def test_a_run_submits_in_that_order_and_reports_in_plan_order(toy, tmp_path, monkeypatch):
    submitted = []
    original = InlineExecutor.submit
    monkeypatch.setattr(InlineExecutor, "submit", lambda self, task: (submitted.append(task.key), original(self, task)))
    seen = []
    res = runner.reproduce(["toy"], out=tmp_path, progress=lambda s, key, *rest: seen.append(key))
    assert submitted == ["j2", "j3", "j0", "j1", "j4"] and seen == submitted  # the cheap one is the first done
    assert res["jobs"]["toy"]["computed"] == ["j0", "j1", "j2", "j3", "j4"]  # lists stay in plan order
    assert res["sections"]["toy"]["summary"] == {"values": [0, 1, 2, 3, 4]}


def test_local_workers_start_before_the_first_job_is_planned(toy, tmp_path, monkeypatch):
    started = []
    original_start = LocalExecutor.start

    def start(self):
        original_start(self)
        started.append(len(self._pool._processes))

    monkeypatch.setattr(LocalExecutor, "start", start)
    planned = []
    original_plan = runner.plan_jobs
    monkeypatch.setattr(runner, "plan_jobs", lambda *a: (planned.append(len(started)), original_plan(*a))[1])
    res = runner.reproduce(["toy"], out=tmp_path, workers=2, threads=1)
    assert started == [2] and planned == [1]  # both workers were spawned, before the plan
    assert res["sections"]["toy"]["summary"] == {"values": [0, 1, 2, 3, 4]}


def test_local_workers_fork_with_the_jobs_heavy_imports_done():
    # scikit-learn's import was most of a fresh worker's first job (5 s of 6 on a loaded machine)
    from posenc.report.executors import PRELOAD, Task

    ex = LocalExecutor(2, threads=1, context="forkserver")
    try:
        ex.start()
        ex.submit(Task("k", toyjobs.modules_at_start, toyjobs.Cfg(0)))
        got = []
        while not got:
            got = ex.wait(timeout=60)
    finally:
        ex.close()
    assert got[0].error is None and got[0].result["modules"] == ["PIL.Image", "sklearn.datasets", "torch", "torch._dynamo"]
    assert {"sklearn.datasets", "PIL.Image", "torch", "torch._dynamo"} <= set(PRELOAD)
