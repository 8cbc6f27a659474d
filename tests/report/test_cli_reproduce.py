"""`posenc reproduce` with workers, --job, failures and plain progress lines."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))
import toyjobs  # noqa: E402

from posenc import cli  # noqa: E402
from posenc.report import runner  # noqa: E402

invoke = CliRunner().invoke


@pytest.fixture
def toy(monkeypatch):
    holder = {"section": toyjobs.section(n=4)}
    monkeypatch.setattr(runner, "get_section", lambda name: holder["section"] if name == "toy" else
                        (_ for _ in ()).throw(ValueError(f"unknown section {name!r}")))
    monkeypatch.setattr(runner, "SECTIONS", {"toy": "x:y"})
    return holder


def test_failed_job_is_one_error_line_exit_1_and_json_lists_jobs(toy, tmp_path):
    toy["section"] = toyjobs.section(n=4, fail=(2,))
    res = invoke(cli.app, ["reproduce", "toy", "--out", str(tmp_path), "--json"])
    assert res.exit_code == 1
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert errors == ["error: 1 job(s) failed; toy/j2: ValueError: bad value 2"]
    assert "Traceback" not in res.stderr
    payload = json.loads(res.stdout)
    assert payload["jobs"]["toy"]["computed"] == ["j0", "j1", "j3"] and payload["failed"] == {
        "toy/j2": "ValueError: bad value 2"}
    toy["section"] = toyjobs.section(n=4)
    res = invoke(cli.app, ["reproduce", "toy", "--out", str(tmp_path), "--shard", "1/2", "--json"])
    assert res.exit_code == 0, res.stderr
    lists = json.loads(res.stdout)["jobs"]["toy"]
    assert lists["computed"] == ["j2"] and lists["skipped"] == ["j0"]


def test_job_option_list_jobs_shard_and_bad_options(toy, tmp_path):
    res = invoke(cli.app, ["reproduce", "toy", "--out", str(tmp_path), "--job", "j1", "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout)["jobs"]["toy"]["computed"] == ["j1"]
    res = invoke(cli.app, ["reproduce", "toy", "--list-jobs", "--shard", "2/2", "--json"])
    assert [j["key"] for j in json.loads(res.stdout)["toy"]] == ["j1", "j3"]
    for args, match in ((["--workers", "0"], "--workers"), (["--threads", "0"], "--threads"),
                        (["--executor", "dask"], "executor"), (["--job", "nope"], "not planned"),
                        (["--address", "auto"], "--address")):
        res = invoke(cli.app, ["reproduce", "toy", "--out", str(tmp_path), *args])
        assert res.exit_code == 2 and match in res.stderr, (args, res.stderr)
        assert len(res.stderr.strip().splitlines()) == 1


def test_plain_progress_lines_when_stderr_is_not_a_terminal(toy, tmp_path):
    res = invoke(cli.app, ["reproduce", "toy", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.stderr
    lines = [line for line in res.stderr.splitlines() if line.startswith("reproduce toy")]
    assert len(lines) == 4 and "j0, 1/4 jobs (25%)" in lines[0] and "4/4 jobs (100%)" in lines[-1]
    assert all("elapsed" in line and "ETA" in line for line in lines)
    res = invoke(cli.app, ["reproduce", "toy", "--out", str(tmp_path)])
    assert "(done before)" in res.stderr and "ETA ?" in res.stderr  # nothing timed: no ETA claimed


def test_plain_progress_throttles_and_extrapolates():
    clock = iter([0.0, 1.0, 2.0, 10.0, 12.0]).__next__
    buf = io.StringIO()
    bar = cli.PlainProgress("fit", stream=buf, every=5.0, unit=" steps")
    bar._clock = clock
    bar.start = clock()  # t = 0
    bar.update(10, 100)  # t = 1: first line
    bar.update(20, 100)  # t = 2: throttled
    bar.update(50, 100)  # t = 10: printed; 50 steps in 10 s -> ETA 10 s
    bar.update(100, 100)  # t = 12: the last one always
    lines = buf.getvalue().splitlines()
    assert lines[0] == "fit: 10/100 steps (10%), elapsed 1s, ETA 9s"
    assert lines[1] == "fit: 50/100 steps (50%), elapsed 10s, ETA 10s"
    assert lines[2].startswith("fit: 100/100 steps (100%), elapsed 12s, ETA 0s") and len(lines) == 3
    # a loop with one-off set-up before its first step: the rate is taken from the first update on
    clock = iter([0.0, 8.0, 18.0]).__next__
    buf = io.StringIO()
    bar = cli.PlainProgress("fit", stream=buf, every=0.0, unit=" steps", rate_from_first=True)
    bar._clock = clock
    bar.start = clock()
    bar.update(1, 101)  # t = 8: 8 s of set-up and the first step
    bar.update(51, 101)  # t = 18: 50 steps in 10 s -> 50 left take 10 s
    assert buf.getvalue().splitlines() == ["fit: 1/101 steps (1%), elapsed 8s, ETA ?",
                                           "fit: 51/101 steps (50%), elapsed 18s, ETA 10s"]


def test_plain_progress_quiet_start_prints_nothing_for_a_short_run():
    clock = iter([0.0, 1.0, 3.0, 7.0, 8.0]).__next__
    buf = io.StringIO()
    bar = cli.PlainProgress("fit", stream=buf, every=5.0, unit=" steps", quiet_start=True)
    bar._clock = clock
    bar.start = clock()  # t = 0
    bar.update(10, 100)  # t = 1: quiet
    bar.update(100, 100)  # t = 3: done, but nothing was printed and the run was short: quiet
    assert buf.getvalue() == ""
    bar.update(50, 100)  # t = 7: past `every`: printed
    bar.update(100, 100)  # t = 8: the last one
    assert len(buf.getvalue().splitlines()) == 2


def test_fit_signal_prints_plain_progress(monkeypatch):
    monkeypatch.setattr(cli, "PLAIN_PROGRESS_EVERY", 0.0)
    res = invoke(cli.app, ["fit-signal", "--model", "linear", "--iters", "30", "--set", "sigma=0.004",
                             "--set", "num_features=64"])
    assert res.exit_code == 0, res.stderr
    lines = [line for line in res.stderr.splitlines() if line.startswith("fit gaussian (linear)")]
    assert lines and lines[-1].startswith("fit gaussian (linear): 30/30 steps (100%)")


def test_plain_progress_gives_no_eta_before_a_share_of_the_work():
    # a run's first jobs are its cheapest (see runner.submission_order): their rate is mostly start-up
    clock = iter([0.0, 20.0, 20.5, 40.0]).__next__
    buf = io.StringIO()
    bar = cli.PlainProgress("reproduce s", stream=buf, every=0.0, eta_after=0.05)
    bar._clock = clock
    bar.start = clock()
    bar.update(0.5, 100, "a", force=True)  # 0.5 %: no estimate yet
    bar.update(1.0, 100, "b", force=True)
    bar.update(10.0, 100, "c", force=True)  # 10 % in 40 s: 360 s to go
    lines = buf.getvalue().splitlines()
    assert lines[0].endswith("ETA ?") and lines[1].endswith("ETA ?") and lines[2].endswith("ETA 6m00s"), lines
    # work done before (skipped) does not count towards the share
    clock = iter([0.0, 1.0, 30.0]).__next__
    buf = io.StringIO()
    bar = cli.PlainProgress("reproduce s", stream=buf, every=0.0, eta_after=0.05)
    bar._clock = clock
    bar.start = clock()
    bar.update(50.0, 100, "done before", force=True, skipped=True)
    bar.update(51.0, 100, "x", force=True)  # 1 of 50 to do: 2 %
    assert buf.getvalue().splitlines()[-1].endswith("ETA ?")
