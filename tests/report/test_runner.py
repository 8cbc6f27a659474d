"""The report framework: atomic writes, resumable jobs, shards, report assembly."""

import json
from dataclasses import dataclass

import pytest

from posenc.report import runner
from posenc.experiments.job import Job
from posenc.report.section import Section
from posenc.report.store import JobStore, atomic_write_json, read_json, to_json

CALLS: list[str] = []


@dataclass(frozen=True)
class ToyConfig:
    value: int
    fail: bool = False


def toy_run(cfg: ToyConfig) -> dict:
    CALLS.append(f"v{cfg.value}")
    if cfg.fail:
        raise KeyboardInterrupt("killed")
    return {"square": cfg.value**2, "nan": float("nan")}


def make_section(fail_at: int | None = None, shift: int = 0) -> Section:
    def plan(profile, seeds):
        n = seeds or 4
        return [Job(f"job{i}", toy_run, ToyConfig(i + shift, fail=(i == fail_at))) for i in range(n)]

    def summarize(results):
        return {"total": sum(r["square"] for r in results.values()), "n": len(results)}

    def render(summary, save_figure):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots()
        ax.plot([0, 1], [0, summary["total"]])
        return f"total = {summary['total']}\n\n![fig]({save_figure('line', fig)})\n"

    return Section("toy", "A toy section", plan, summarize, render, quick_budget_s=1.0)


@pytest.fixture
def toy(monkeypatch):
    holder = {"section": make_section()}
    monkeypatch.setattr(runner, "get_section", lambda name: holder["section"] if name == "toy" else
                        (_ for _ in ()).throw(ValueError(f"unknown section {name!r}")))
    monkeypatch.setattr(runner, "SECTIONS", {"toy": "x:y"})
    CALLS.clear()
    return holder


def test_atomic_json_is_strict_and_leaves_no_temp_files(tmp_path):
    atomic_write_json(tmp_path / "a.json", {"x": float("inf"), "t": (1, 2)})
    assert read_json(tmp_path / "a.json") == {"x": None, "t": [1, 2]}
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]
    assert json.loads(to_json({"n": float("nan")})) == {"n": None}


def test_job_store_rejects_changed_config_and_torn_files(tmp_path):
    store = JobStore(tmp_path)
    store.save("s", "k", {"a": 1}, {"r": 2}, 0.1, {"posenc": "0", "source": "s", "torch": "t", "numerics": "n", "commit": None})
    assert store.load("s", "k", {"a": 1})["result"] == {"r": 2}
    assert store.load("s", "k", {"a": 2}) is None
    store.path("s", "k").write_text("{torn")
    assert store.load("s", "k", {"a": 1}) is None


def test_reproduce_writes_report_json_and_figure(toy, tmp_path):
    res = runner.reproduce(["toy"], "quick", tmp_path, argv=["posenc", "reproduce", "toy"])
    assert res["sections"]["toy"]["summary"] == {"total": 0 + 1 + 4 + 9, "n": 4}
    report = (tmp_path / "report.md").read_text()
    assert "## A toy section" in report and "total = 14" in report and "posenc reproduce toy" in report
    assert "torch" in report  # versions
    assert (tmp_path / "toy_line.png").read_bytes()[:4] == b"\x89PNG"
    rec = read_json(tmp_path / "toy.json")
    assert rec["summary"]["total"] == 14 and set(rec["jobs"]) == {"job0", "job1", "job2", "job3"}


def test_killed_run_resumes_without_recomputing(toy, tmp_path):
    toy["section"] = make_section(fail_at=2)
    with pytest.raises(KeyboardInterrupt):
        runner.reproduce(["toy"], "quick", tmp_path)
    assert CALLS == ["v0", "v1", "v2"]
    assert not (tmp_path / "report.md").exists()
    toy["section"] = make_section()
    CALLS.clear()
    runner.reproduce(["toy"], "quick", tmp_path)
    assert CALLS == ["v2", "v3"]  # jobs 0 and 1 were kept
    CALLS.clear()
    runner.reproduce(["toy"], "quick", tmp_path)
    assert CALLS == []  # everything done: nothing recomputed
    toy["section"] = make_section(shift=10)  # configs changed: recompute all
    runner.reproduce(["toy"], "quick", tmp_path)
    assert len(CALLS) == 4


def test_shards_partition_the_jobs(toy, tmp_path):
    runner.reproduce(["toy"], "quick", tmp_path, shard="1/2")
    assert CALLS == ["v0", "v2"] and not (tmp_path / "report.md").exists()
    runner.reproduce(["toy"], "quick", tmp_path, shard="2/2")
    assert CALLS == ["v0", "v2", "v1", "v3"]
    runner.reproduce(["toy"], "quick", tmp_path)
    assert len(CALLS) == 4 and (tmp_path / "report.md").exists()


@pytest.mark.parametrize("kwargs,match", [
    (dict(profile="slow"), "profile"),
    (dict(seeds=0), "seeds"),
    (dict(shard="3/2"), "shard"),
    (dict(shard="x"), "shard"),
])
def test_bad_arguments(toy, tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        runner.reproduce(["toy"], out=tmp_path, **kwargs)


def test_unknown_section(toy, tmp_path):
    with pytest.raises(ValueError, match="unknown section 'nope'"):
        runner.reproduce(["nope"], out=tmp_path)


def test_registered_sections_load():
    from posenc.report.registry import available_sections, get_section

    for name in available_sections():
        section = get_section(name)
        assert section.name == name and section.quick_budget_s > 0


def test_a_run_refused_before_any_work_leaves_no_empty_directory(toy, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default --out is runs/<timestamp> under the working directory
    with pytest.raises(ValueError, match="no-such-job"):
        runner.reproduce(["toy"], "quick", None, jobs=["no-such-job"])
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
    existing = tmp_path / "mine"
    existing.mkdir()
    with pytest.raises(ValueError):
        runner.reproduce(["toy"], "quick", existing, jobs=["no-such-job"])
    assert existing.is_dir()  # a directory the user made is kept, empty or not


def test_summaries_see_the_results_in_plan_order(toy, tmp_path):
    seen = []
    section = make_section()
    toy["section"] = Section("toy", "A toy section", section.plan,
                             lambda results: (seen.append(list(results)), section.summarize(results))[1],
                             section.render, quick_budget_s=1.0)
    runner.reproduce(["toy"], "quick", tmp_path, jobs=["job2"])  # stored first: found before the others run
    runner.reproduce(["toy"], "quick", tmp_path)
    assert seen == [["job0", "job1", "job2", "job3"]]
