"""Executors, balanced shards, claims, run_job and file modes of the report runner."""

from __future__ import annotations

import itertools
import json
import os
import random
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # workers import toyjobs by name (they inherit sys.path)
import toyjobs  # noqa: E402

from posenc.report import runner  # noqa: E402
from posenc.report.executors import InlineExecutor, LocalExecutor, Task, default_threads, make_executor  # noqa: E402
from posenc.report.store import JobStore, acquire_claim, atomic_write_json, file_mode  # noqa: E402


@pytest.fixture
def toy(monkeypatch):
    holder = {"section": toyjobs.section()}

    def get(name):
        if name != "toy":
            raise ValueError(f"unknown section {name!r}")
        return holder["section"]

    monkeypatch.setattr(runner, "get_section", get)
    monkeypatch.setattr(runner, "SECTIONS", {"toy": "x:y"})
    return holder


def stored(out: Path) -> dict:
    return {p.stem: json.loads(p.read_text())["result"] for p in sorted((out / "jobs" / "toy").glob("*.json"))}


# ------------------------------------------------------------------ balanced shards
def brute_force_best(costs, n):
    best = float("inf")
    for assign in itertools.product(range(n), repeat=len(costs)):
        loads = [0.0] * n
        for c, b in zip(costs, assign):
            loads[b] += c
        best = min(best, max(loads))
    return best


def test_balance_shards_partitions_and_is_near_optimal():
    rnd = random.Random(0)
    for _ in range(30):
        m, n = rnd.randint(0, 7), rnd.randint(1, 3)
        costs = [rnd.choice([0.5, 1.0, 2.0, 3.0, 5.0]) for _ in range(m)]
        bins = runner.balance_shards(costs, n)
        assert len(bins) == n and sorted(i for b in bins for i in b) == list(range(m))
        assert all(b == sorted(b) for b in bins)
        assert bins == runner.balance_shards(costs, n)  # deterministic
        if m:
            worst = max(sum(costs[i] for i in b) for b in bins)
            assert worst <= 4 / 3 * brute_force_best(costs, n) + 1e-9  # Graham's bound for LPT


def test_balance_shards_example_and_bad_input():
    # longest first: 8 -> A, 5 -> B, 4 -> B (9), 3 -> A (11), 1 -> B (10)
    assert runner.balance_shards([3.0, 8.0, 1.0, 5.0, 4.0], 2) == [[0, 1], [2, 3, 4]]
    assert runner.balance_shards([1.0] * 4, 2) == [[0, 2], [1, 3]]  # equal costs: round robin
    with pytest.raises(ValueError, match="n must"):
        runner.balance_shards([1.0], 0)
    with pytest.raises(ValueError, match="costs"):
        runner.balance_shards([float("nan")], 1)
    with pytest.raises(ValueError, match="costs"):
        runner.balance_shards([-1.0], 1)


def test_shards_are_balanced_by_cost(toy, tmp_path):
    toy["section"] = toyjobs.section(n=4, costs=(8.0, 1.0, 1.0, 6.0))
    res = [runner.reproduce(["toy"], out=tmp_path, shard=f"{i}/2")["jobs"]["toy"]["computed"] for i in (1, 2)]
    assert res == [["j0"], ["j1", "j2", "j3"]]  # 8 vs 1 + 1 + 6; a round robin would give 9 vs 7


# ------------------------------------------------------------------ executors
def test_make_executor_and_default_threads():
    assert isinstance(make_executor("local", 1), InlineExecutor)
    ex = make_executor("local", 2, 1)
    assert isinstance(ex, LocalExecutor) and ex.slots == 2 and "workers=2" in repr(ex)
    ex.close()
    assert default_threads(1) >= 1 and default_threads(10_000) == 1
    with pytest.raises(ValueError, match="executor"):
        make_executor("dask", 1)
    with pytest.raises(ValueError, match="workers"):
        make_executor("local", 0)
    with pytest.raises(ValueError, match="threads"):
        make_executor("local", 2, 0)
    with pytest.raises(ValueError, match="address"):
        make_executor("local", 2, address="auto")


def test_local_workers_match_inline_compose_with_shards_and_run_alone(toy, tmp_path):
    toy["section"] = toyjobs.section(n=6, sleep=0.15, alone=(3,))
    inline = runner.reproduce(["toy"], out=tmp_path / "a")
    # two shards, each with two local workers of one thread, into one directory
    for i in (1, 2):
        part = runner.reproduce(["toy"], out=tmp_path / "b", shard=f"{i}/2", workers=2, threads=1)
        assert part["report"] is None and part["jobs"]["toy"]["skipped"] == []
    final = runner.reproduce(["toy"], out=tmp_path / "b", workers=2)
    assert final["jobs"]["toy"]["computed"] == [] and len(final["jobs"]["toy"]["skipped"]) == 6
    assert final["sections"]["toy"]["summary"] == inline["sections"]["toy"]["summary"]
    a, b = stored(tmp_path / "a"), stored(tmp_path / "b")
    assert {k: v["draw"] for k, v in a.items()} == {k: v["draw"] for k, v in b.items()}
    assert {v["pid"] for v in a.values()} == {os.getpid()}
    assert os.getpid() not in {v["pid"] for v in b.values()}
    assert {v["threads"] for v in b.values()} == {1}
    # with 2 workers and no shard: jobs overlap, except the one marked alone
    runner.reproduce(["toy"], out=tmp_path / "c", workers=2, threads=1)
    c = stored(tmp_path / "c")
    overlaps = [(k1, k2) for k1, k2 in itertools.combinations(sorted(c), 2)
                if c[k1]["start"] < c[k2]["end"] and c[k2]["start"] < c[k1]["end"]]
    assert overlaps, "two workers never ran side by side"
    assert not [p for p in overlaps if "j3" in p], f"the alone job overlapped: {overlaps}"


def test_failing_and_killed_jobs_on_workers(toy, tmp_path):
    marker = tmp_path / "died-once"
    toy["section"] = toyjobs.section(n=5, fail=(1,), die_once={3: str(marker)})
    with pytest.raises(runner.JobsFailed) as info:
        runner.reproduce(["toy"], out=tmp_path, workers=2, threads=1)
    err = info.value
    assert list(err.failures) == ["toy/j1"] and "ValueError: bad value 1" in str(err)
    assert marker.exists()  # j3's first worker died, and the job was retried
    assert sorted(stored(tmp_path)) == ["j0", "j2", "j3", "j4"]
    assert err.payload["jobs"]["toy"]["failed"] == {"j1": "ValueError: bad value 1"}
    assert not (tmp_path / "report.md").exists()
    assert not list((tmp_path / "jobs" / "toy").glob("*.claim"))  # every claim released


def test_inline_failure_reports_and_keeps_the_others(toy, tmp_path):
    toy["section"] = toyjobs.section(n=3, fail=(0,))
    with pytest.raises(runner.JobsFailed, match="toy/j0: ValueError: bad value 0"):
        runner.reproduce(["toy"], out=tmp_path)
    assert sorted(stored(tmp_path)) == ["j1", "j2"]
    toy["section"] = toyjobs.section(n=3)
    res = runner.reproduce(["toy"], out=tmp_path)
    assert res["jobs"]["toy"]["computed"] == ["j0"] and res["report"]


def test_local_executor_protocol_directly(tmp_path):
    ex = LocalExecutor(2, 1)
    try:
        for i in range(3):
            ex.submit(Task(f"k{i}", toyjobs.toy_job, toyjobs.Cfg(i), 1))
        got = {}
        while ex.pending():
            got.update({o.key: o for o in ex.wait(timeout=30)})
    finally:
        ex.close()
    assert sorted(got) == ["k0", "k1", "k2"] and all(o.error is None for o in got.values())
    assert got["k2"].result["value"] == 2 and got["k2"].seconds >= 0
    with pytest.raises(ValueError, match="context"):
        LocalExecutor(2, context="fork")


# ------------------------------------------------------------------ one job by key
def test_run_job_and_job_selection(toy, tmp_path):
    rec = runner.run_job("toy", "j2", tmp_path)
    assert rec["result"]["value"] == 2 and rec["key"] == "j2"
    again = runner.run_job("toy", "j2", tmp_path)
    assert again["result"]["start"] == rec["result"]["start"]  # stored: not recomputed
    forced = runner.run_job("toy", "j2", tmp_path, force=True)
    assert forced["result"]["start"] > rec["result"]["start"]
    res = runner.reproduce(["toy"], out=tmp_path, jobs=["j1", "j2"])
    assert res["jobs"]["toy"]["computed"] == ["j1"] and res["jobs"]["toy"]["skipped"] == ["j2"]
    assert res["report"] is None
    with pytest.raises(ValueError, match="job 'nope' is not planned"):
        runner.run_job("toy", "nope", tmp_path)


# ------------------------------------------------------------------ claims
def test_two_drivers_on_one_directory_split_the_work(toy, tmp_path):
    toy["section"] = toyjobs.section(n=8, sleep=0.1)
    results = {}

    def drive(name):
        results[name] = runner.reproduce(["toy"], out=tmp_path)

    threads = [threading.Thread(target=drive, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ca, cb = (set(results[n]["jobs"]["toy"]["computed"]) for n in ("a", "b"))
    assert not ca & cb and ca | cb == {f"j{i}" for i in range(8)}  # each job computed once
    assert ca and cb  # and both drivers computed some
    assert results["a"]["sections"]["toy"]["summary"] == results["b"]["sections"]["toy"]["summary"]  # both assembled the section


def test_a_job_finished_elsewhere_between_the_look_and_the_claim_is_not_computed_again(toy, tmp_path, monkeypatch):
    # the window two drivers hit: B looks (no record), A saves j3 and releases its claim, B claims j3
    toy["section"] = toyjobs.section(n=4)
    first = runner.reproduce(["toy"], out=tmp_path / "a")
    donor = tmp_path / "a" / "jobs" / "toy" / "j3.json"
    real_claim = JobStore.claim

    def claim_after_the_other_finished(self, section, key, timeout=300.0):
        if key == "j3":
            target = self.path(section, key)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(donor.read_bytes())  # the other driver saved, then released
        return real_claim(self, section, key, timeout)

    monkeypatch.setattr(JobStore, "claim", claim_after_the_other_finished)
    res = runner.reproduce(["toy"], out=tmp_path / "b")
    assert "j3" in res["jobs"]["toy"]["skipped"] and "j3" not in res["jobs"]["toy"]["computed"]
    assert sorted(res["jobs"]["toy"]["computed"]) == ["j0", "j1", "j2"]
    assert res["sections"]["toy"]["summary"] == first["sections"]["toy"]["summary"]
    assert not list((tmp_path / "b" / "jobs" / "toy").glob("*.claim"))  # the claim taken for j3 is let go


def test_claims_respect_live_owners_and_take_over_dead_or_silent_ones(toy, tmp_path):
    store = JobStore(tmp_path)
    path = store.path("toy", "j0").with_suffix(".claim")
    path.parent.mkdir(parents=True)
    host = socket.gethostname()
    # a live owner (this test's parent process) holds j0: a shard run leaves it to them
    atomic_write_json(path, {"host": host, "pid": os.getppid(), "time": time.time(), "token": "x"})
    res = runner.reproduce(["toy"], out=tmp_path, shard="1/1")
    assert res["jobs"]["toy"]["claimed_elsewhere"] == ["j0"] and "j0" not in res["jobs"]["toy"]["computed"]
    assert acquire_claim(path) is None
    # the owner died: taken over
    dead = os.fork()
    if dead == 0:  # pragma: no cover - child
        os._exit(0)
    os.waitpid(dead, 0)
    atomic_write_json(path, {"host": host, "pid": dead, "time": time.time(), "token": "x"})
    claim = acquire_claim(path)
    assert claim is not None and claim.owned()
    claim.release()
    assert not path.exists()
    # another host's claim that nobody refreshed for longer than the timeout: taken over
    atomic_write_json(path, {"host": "elsewhere", "pid": 1, "time": 0, "token": "x"})
    assert acquire_claim(path, timeout=60) is None
    old = time.time() - 120
    os.utime(path, (old, old))
    assert acquire_claim(path, timeout=60) is not None


def test_files_keep_the_umask_mode(toy, tmp_path):
    old = os.umask(0o022)
    try:
        assert file_mode() == 0o644
        runner.reproduce(["toy"], out=tmp_path)
        files = [p for p in tmp_path.rglob("*") if p.is_file()]
        assert files and {p.stat().st_mode & 0o777 for p in files} == {0o644}
        os.umask(0o077)
        atomic_write_json(tmp_path / "private.json", {})
        assert (tmp_path / "private.json").stat().st_mode & 0o777 == 0o600
    finally:
        os.umask(old)


def test_import_posenc_and_the_runner_do_not_import_ray():
    import subprocess

    code = ("import sys, posenc, posenc.report.runner, posenc.report.executors; "
            "print(sorted(m for m in ('ray', 'matplotlib', 'typer') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert out.stdout.strip() == "[]"
