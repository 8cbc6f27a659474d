"""Refusals in the job runner (#40 part 2): a job over its worker's memory limit is refused with one
line naming the job and the limit, the run goes on, the result lists it, and nothing computed is lost.
The executors give their workers a share of the limit (``$POSENC_MAX_MEMORY``)."""

from __future__ import annotations

import json
import math
import os
import sys
import types
from pathlib import Path

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))  # workers import memjobs by name (they inherit sys.path)
import memjobs  # noqa: E402

from posenc import cli  # noqa: E402
from posenc._resources import LIMIT_ENV, LIMIT_SOURCE_ENV, Limit, library_limit  # noqa: E402
from posenc.experiments.job import Job  # noqa: E402
from posenc.report import executors, runner  # noqa: E402
from posenc.report.executors import (  # noqa: E402
    InlineExecutor,
    LocalExecutor,
    memory_env,
    ray_task_share,
    worker_share,
)

GiB = 2**30


@pytest.fixture
def mem(monkeypatch):
    holder = {"section": memjobs.section()}

    def get(name):
        if name != "mem":
            raise ValueError(f"unknown section {name!r}")
        return holder["section"]

    monkeypatch.setattr(runner, "get_section", get)
    monkeypatch.setattr(runner, "SECTIONS", {"mem": "x:y"})
    return holder


def stored(out: Path) -> dict:
    return {p.stem: json.loads(p.read_text())["result"] for p in sorted((out / "jobs" / "mem").glob("*.json"))}


# ------------------------------------------------------------------ Job.memory
def test_job_memory_defaults_to_none_and_accepts_bytes():
    assert Job("a", memjobs.mem_job, memjobs.MemCfg(0)).memory is None
    assert Job("a", memjobs.mem_job, memjobs.MemCfg(0), memory=0).memory == 0
    assert Job("a", memjobs.mem_job, memjobs.MemCfg(0), memory=3.5e9).memory == 3.5e9


@pytest.mark.parametrize("bad,err", [("1G", TypeError), (True, TypeError), ([1], TypeError), (-1, ValueError),
                                     (math.inf, ValueError), (math.nan, ValueError)])
def test_job_memory_bad_values_name_the_argument(bad, err):
    with pytest.raises(err, match="memory must be"):
        Job("a", memjobs.mem_job, memjobs.MemCfg(0), memory=bad)


# ------------------------------------------------------------------ the refusal itself
def test_refuse_over_limit_splits_and_names_job_and_limit():
    jobs = [Job(f"m{i}", memjobs.mem_job, memjobs.MemCfg(i), memory=m)
            for i, m in enumerate([None, 5 * GiB, GiB, 2 * GiB + 1])]
    limit = Limit(2 * GiB, "50% of the cgroup's memory.max of 4 GiB")
    keep, refused = runner.refuse_over_limit("mem", jobs, limit)
    assert [j.key for j in keep] == ["m0", "m2"] and list(refused) == ["m1", "m3"]
    assert refused["m1"] == ("it would need about 5 GiB of memory, more than its worker's limit of 2 GiB "
                             "(50% of the cgroup's memory.max of 4 GiB)")
    line = runner.refusal_notice("mem", "m1", refused["m1"])
    assert line.startswith("job mem/m1 refused: it would need about 5 GiB") and "\n" not in line
    assert runner.refuse_over_limit("mem", jobs, None) == (jobs, {})  # no limit: nothing refused
    keep, refused = runner.refuse_over_limit("mem", jobs, 2 * GiB)  # a plain int: no source to name
    assert list(refused) == ["m1", "m3"] and refused["m1"].endswith("limit of 2 GiB")


@pytest.mark.parametrize("kw,err", [(dict(limit=-1), ValueError), (dict(limit=1.5), ValueError),
                                    (dict(limit=True), ValueError), (dict(section=3), TypeError)])
def test_refuse_over_limit_bad_input(kw, err):
    args = dict(section="mem", jobs=[], limit=1) | kw
    with pytest.raises(err, match="limit must be|section must be"):
        runner.refuse_over_limit(**args)


def test_jobs_failed_names_refusals_and_needs_one():
    err = runner.JobsFailed({}, {}, {"mem/m1": "it would need about 5 GiB"})
    assert str(err) == "1 job(s) refused over their memory limit; mem/m1: it would need about 5 GiB"
    err = runner.JobsFailed({"mem/m2": "ValueError: x"}, {}, {"mem/m1": "it would"})
    assert str(err) == ("1 job(s) failed and 1 job(s) refused over their memory limit; mem/m2: ValueError: x "
                        "(and 1 more)")
    with pytest.raises(ValueError, match="at least one"):
        runner.JobsFailed({}, {})


def test_run_goes_on_lists_the_refused_and_loses_nothing(mem, tmp_path, monkeypatch):
    monkeypatch.setenv(LIMIT_ENV, "1G")
    # m1: an estimate over the limit (refused before it runs); m3: refused by the library inside the job
    mem["section"] = memjobs.section(memory={1: 100 * GiB, 2: 1e6}, giant=(3,))
    notices = []
    with pytest.raises(runner.JobsFailed) as info:
        runner.reproduce(["mem"], out=tmp_path, notice=notices.append)
    err = info.value
    lists = err.payload["jobs"]["mem"]
    assert lists["computed"] == ["m0", "m2"] and lists["failed"] == {} and list(lists["refused"]) == ["m1", "m3"]
    assert list(err.refused) == ["mem/m1", "mem/m3"] and err.failures == {}
    assert err.payload["report"] is None and not (tmp_path / "report.md").exists()
    assert set(stored(tmp_path)) == {"m0", "m2"}  # what finished is stored
    # one line per refused job, naming the job and the limit (and what set it)
    assert len(notices) == 2 and all("\n" not in n for n in notices)
    assert notices[0].startswith("job mem/m1 refused: it would need about 100 GiB of memory, more than its "
                                 "worker's limit of 1 GiB (set by $POSENC_MAX_MEMORY)")
    assert notices[1].startswith("job mem/m3 refused: RandomFourierEncoding") and "limit of 1 GiB" in notices[1]
    assert "num_features=2147483646" in notices[1]
    # with room, a rerun computes the refused jobs only and summarises the section
    monkeypatch.setenv(LIMIT_ENV, "off")
    mem["section"] = memjobs.section(memory={1: 100 * GiB, 2: 1e6})
    res = runner.reproduce(["mem"], out=tmp_path)
    lists = res["jobs"]["mem"]
    assert lists["skipped"] == ["m0", "m2"] and lists["computed"] == ["m1", "m3"] and lists["refused"] == {}
    assert res["report"] and res["sections"]["mem"]["summary"] == {"values": [0, 1, 2, 3]}


def test_run_job_raises_jobs_failed_for_a_refused_job(mem, tmp_path, monkeypatch):
    monkeypatch.setenv(LIMIT_ENV, "1G")
    mem["section"] = memjobs.section(memory={1: 100 * GiB})
    with pytest.raises(runner.JobsFailed, match="1 job\\(s\\) refused over their memory limit; mem/m1: it would"):
        runner.run_job("mem", "m1", tmp_path)
    assert runner.run_job("mem", "m0", tmp_path)["result"]["value"] == 0


def test_cli_reproduce_reports_a_refusal_in_one_line_and_exit_1(mem, tmp_path, monkeypatch):
    monkeypatch.setenv(LIMIT_ENV, "1G")
    mem["section"] = memjobs.section(memory={2: 64 * GiB})
    res = CliRunner().invoke(cli.app, ["reproduce", "mem", "--out", str(tmp_path), "--json"])
    assert res.exit_code == 1 and "Traceback" not in res.stderr
    warnings = [line for line in res.stderr.splitlines() if line.startswith("warning: job mem/m2 refused")]
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert len(warnings) == 1 and "worker's limit of 1 GiB (set by $POSENC_MAX_MEMORY)" in warnings[0]
    assert errors == [f"error: 1 job(s) refused over their memory limit; mem/m2: it would need about 64 GiB of "
                      f"memory, more than its worker's limit of 1 GiB (set by $POSENC_MAX_MEMORY)"]
    payload = json.loads(res.stdout)
    lists = payload["jobs"]["mem"]
    assert lists["computed"] == ["m0", "m1", "m3"] and list(lists["refused"]) == ["m2"]


# ------------------------------------------------------------------ a worker's share
def test_worker_share_divides_and_names_the_whole():
    whole = Limit(8 * GiB, "80% of the memory available now (MemAvailable, 10 GiB)")
    share = worker_share(whole, 4, "local workers")
    assert int(share) == 2 * GiB
    assert share.source == ("a worker's share: 1/4 of 8 GiB (80% of the memory available now (MemAvailable, 10 GiB)) "
                            "for each of 4 local workers")
    assert worker_share(whole, 1, "local workers") is whole and worker_share(None, 4, "x") is None
    for bad in (0, -2, 1.5, True, "4"):
        with pytest.raises(ValueError, match="workers must be a positive integer"):
            worker_share(whole, bad, "x")


def test_memory_env_passes_the_share_or_off():
    assert memory_env(Limit(123, "a worker's share")) == {LIMIT_ENV: "123", LIMIT_SOURCE_ENV: "a worker's share"}
    assert memory_env(None) == {LIMIT_ENV: "off", LIMIT_SOURCE_ENV: ""}


def test_ray_task_share_from_the_cluster_memory(monkeypatch):
    monkeypatch.delenv(LIMIT_ENV, raising=False)
    share = ray_task_share({"CPU": 8.0, "memory": 16.0 * GiB}, threads=2, slots=4)
    assert int(share) == 4 * GiB and "2 of the cluster's 8 CPUs' 16 GiB" in share.source
    assert int(ray_task_share({"CPU": 2.0, "memory": 4.0 * GiB}, threads=4, slots=1)) == 4 * GiB  # never above all
    monkeypatch.setenv(LIMIT_ENV, "6G")  # no memory resource: this process's limit between the tasks in flight
    share = ray_task_share({"CPU": 8.0}, threads=1, slots=3)
    assert int(share) == 2 * GiB and "1/3 of 6 GiB (set by $POSENC_MAX_MEMORY)" in share.source
    # set here, it caps the tasks in flight together, as it caps local workers
    share = ray_task_share({"CPU": 8.0, "memory": 16.0 * GiB}, threads=2, slots=4)
    assert int(share) == 6 * GiB // 4 and "1/4 of 6 GiB (set by $POSENC_MAX_MEMORY)" in share.source
    monkeypatch.setenv(LIMIT_ENV, "64G")  # above the cluster's share: the share
    assert int(ray_task_share({"CPU": 8.0, "memory": 16.0 * GiB}, threads=2, slots=4)) == 4 * GiB
    monkeypatch.setenv(LIMIT_ENV, "off")
    assert ray_task_share({"CPU": 8.0, "memory": 16.0 * GiB}, threads=2, slots=4) is None


def test_ray_executor_gives_its_tasks_the_share(monkeypatch):
    options = []

    class Remote:
        def __init__(self, fn):
            self.fn = fn

        def options(self, **kw):
            options.append(kw)
            return self

    monkeypatch.delenv(LIMIT_ENV, raising=False)
    fake = types.SimpleNamespace(is_initialized=lambda: True, remote=Remote,
                                 cluster_resources=lambda: {"CPU": 4.0, "memory": 8.0 * GiB})
    monkeypatch.setitem(sys.modules, "ray", fake)
    ex = executors.RayExecutor(threads=1)
    assert int(ex.memory_limit()) == 2 * GiB and ex.slots == 4
    envs = [kw["runtime_env"]["env_vars"] for kw in options]
    assert len(envs) == 2 and all(e[LIMIT_ENV] == str(2 * GiB) and "Ray task's share" in e[LIMIT_SOURCE_ENV]
                                  for e in envs)


def test_inline_executor_uses_this_process_limit(monkeypatch):
    monkeypatch.setenv(LIMIT_ENV, "3G")
    assert int(InlineExecutor().memory_limit()) == 3 * GiB == int(library_limit())


def test_local_workers_run_under_their_share(mem, tmp_path, monkeypatch):
    monkeypatch.setenv(LIMIT_ENV, "4G")
    ex = LocalExecutor(2, threads=1)
    try:
        share = ex.memory_limit()
        assert int(share) == 2 * GiB and share.source.startswith("a worker's share: 1/2 of 4 GiB (set by $POSENC")
        mem["section"] = memjobs.section(memory={1: 3 * GiB}, n=3)  # 3 GiB fits the host's limit, not a worker's
        res = runner.run_section("mem", "quick", tmp_path, executor=ex)
    finally:
        ex.close()
    lists = res["jobs"]
    assert lists["computed"] == ["m0", "m2"] and list(lists["refused"]) == ["m1"] and res["record"] is None
    assert "more than its worker's limit of 2 GiB (a worker's share: 1/2 of 4 GiB" in lists["refused"]["m1"]
    for key in ("m0", "m2"):  # the jobs ran in the workers, under the share
        result = res["results"][key]["result"]
        assert result["pid"] != os.getpid() and result["env"] == str(2 * GiB)
        assert result["limit"] <= 2 * GiB and result["source"].startswith("set by $POSENC_MAX_MEMORY: a worker's share")
