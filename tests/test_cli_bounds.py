"""Bounds on the CLI's numbers (#23 §3): a count that multiplies work, an integer beyond int64
or a non-finite float is one ``error:`` line naming the option, before any work starts."""

from __future__ import annotations

import random

import pytest
import typer.main
from typer.testing import CliRunner

from posenc import cli
from posenc.report import runner
from posenc.report.executors import available_cores, max_per_machine

invoke = CliRunner().invoke
GROUP = typer.main.get_command(cli.app)
MOST = max_per_machine()


def assert_one_error_line(res, *fragments):
    lines = res.stderr.splitlines()
    assert res.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (
        res.exit_code, res.stderr, res.exception)
    assert res.stdout == ""
    for frag in fragments:
        assert frag in lines[0], lines[0]


def options(kind: type) -> list[tuple[str, str]]:
    """``(command, --option)`` for every option of ``kind`` (int or float) of every command."""
    out = []
    for name, command in GROUP.commands.items():
        for param in command.params:
            if param.type_descriptor.annotation is kind and param.opts[0].startswith("--"):
                out.append((name, param.opts[0]))
    return out


def test_the_option_tables_are_not_empty():
    ints, floats = options(int), options(float)
    assert ("fit-signal", "--seed") in ints and ("search", "--seed") in ints and ("reproduce", "--seeds") in ints
    assert ("fit-image", "--lr") in floats and ("search", "--finetune-epochs") in floats
    assert len(ints) >= 12 and len(floats) >= 5


@pytest.mark.parametrize("command,option", options(int))
@pytest.mark.parametrize("value", [str(2**64), str(2**63), str(-(2**63) - 1), "1" + "0" * 40])
def test_every_integer_option_refuses_values_beyond_int64(command, option, value):
    assert_one_error_line(invoke(cli.app, [command, option, value]), option, value)


@pytest.mark.parametrize("command,option", options(float))
@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "1e400"])
def test_every_float_option_refuses_non_finite_values(command, option, value):
    assert_one_error_line(invoke(cli.app, [command, option, value]), option, "finite")


@pytest.mark.parametrize("command", ["fit-signal", "fit-image", "search"])
@pytest.mark.parametrize("value", ["18446744073709551616", "-1", "1e30", "9223372036854775808"])
def test_seeds_beyond_int64_or_negative_name_the_option(command, value):
    assert_one_error_line(invoke(cli.app, [command, "--seed", value]), "--seed")


@pytest.mark.parametrize("value", ["1000000000000", "100000", str(runner.MAX_SEEDS + 1), "0", "-3"])
def test_seeds_are_bounded_before_any_planning(value, monkeypatch):
    def no_planning(*args, **kwargs):  # a refusal must come before any section is planned
        raise AssertionError("planned")

    monkeypatch.setattr(runner, "get_section", no_planning)
    assert_one_error_line(invoke(cli.app, ["reproduce", "--seeds", value, "--list-jobs"]), "--seeds")
    assert_one_error_line(invoke(cli.app, ["reproduce", "--seeds", value, "--list-jobs", "--json"]), "--seeds")
    with pytest.raises(ValueError, match="seeds"):
        runner.plan_jobs("coords", "quick", int(value))


def test_the_seed_bound_admits_the_largest_count():
    jobs = runner.plan_jobs("cape", "quick", runner.MAX_SEEDS)
    assert len({j.key for j in jobs}) == len(jobs) > runner.MAX_SEEDS


@pytest.mark.parametrize("args", [["fit-signal"], ["fit-image", "--size", "8"], ["search", "--steps", "0"],
                                  ["reproduce", "cape", "--list-jobs"]])
@pytest.mark.parametrize("threads", [str(MOST + 1), "100000000", "50000000"])
def test_thread_counts_are_bounded_by_the_cores(args, threads):
    # --threads 100000000 crashed torch (SIGSEGV); reproduce --threads 50000000 hung
    assert_one_error_line(invoke(cli.app, [*args, "--threads", threads]), "--threads", f"at most {MOST}",
                          f"{available_cores()} cores")


@pytest.mark.parametrize("workers", [str(MOST + 1), "1000000"])
def test_local_workers_are_bounded_by_the_cores(workers):
    assert_one_error_line(invoke(cli.app, ["reproduce", "cape", "--workers", workers, "--list-jobs"]),
                          "--workers", f"at most {MOST}")
    from posenc.report.executors import LocalExecutor, make_executor

    with pytest.raises(ValueError, match="workers must be at most"):
        make_executor("local", int(workers))
    with pytest.raises(ValueError, match="workers must be at most"):
        LocalExecutor(int(workers))
    with pytest.raises(ValueError, match="threads must be at most"):
        LocalExecutor(1, threads=int(workers))


def test_set_integers_beyond_int64_and_infinite_max_memory_are_refused():
    assert_one_error_line(invoke(cli.app, ["analyze", "-e", "rff", "--set", f"seed={2**64}"]), "--set seed=")
    assert_one_error_line(invoke(cli.app, ["analyze", "--set", f"domain=0,{2**70}"]), "--set domain=")
    assert_one_error_line(invoke(cli.app, ["analyze", "--max-memory", "1e400G"]), "--max-memory", "finite")


# ------------------------------------------------------------------ shards of any count
def reference_shards(costs, n):
    """The greedy longest-processing-time split, written as plainly as possible (O(m n))."""
    loads = [0.0] * n
    bins = [[] for _ in range(n)]
    for i in sorted(range(len(costs)), key=lambda j: (-costs[j], j)):
        b = min(range(n), key=lambda k: (loads[k], k))
        bins[b].append(i)
        loads[b] += costs[i]
    return [sorted(b) for b in bins]


def test_balance_shards_matches_the_plain_greedy_split():
    rnd = random.Random(1)
    for _ in range(300):
        m, n = rnd.randint(0, 30), rnd.randint(1, 40)
        costs = [rnd.choice([0.0, 0.5, 1.0, 2.0, 3.0, rnd.random()]) for _ in range(m)]
        want = reference_shards(costs, n)
        assert runner.balance_shards(costs, n) == want
        assert all(runner.shard_of(costs, i, n) == want[i] for i in range(n))


def test_a_huge_shard_count_is_not_built():
    costs = [1.0, 3.0, 2.0]
    n = 10**30  # the old split built n lists and scanned them per job: `--shard 1/100000000` hung
    assert runner.shard_of(costs, 0, n) == [1] and runner.shard_of(costs, 2, n) == [0]
    assert runner.shard_of(costs, n - 1, n) == []
    with pytest.raises(ValueError, match="i must be"):
        runner.shard_of(costs, n, n)
    res = invoke(cli.app, ["reproduce", "cape", "--shard", f"1/{10**30}", "--list-jobs", "--json"])
    assert res.exit_code == 0 and len(__import__("json").loads(res.stdout)["cape"]) == 1, res.stderr
