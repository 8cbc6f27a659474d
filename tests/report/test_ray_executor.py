"""The Ray executor against a local Ray instance (started once, 2 CPUs, no dashboard).

Skipped only where Ray is not installed (``pip install 'posenc[ray]'``; ``make test``
installs it with the ``all`` extra). One test function, so that pytest-xdist cannot
split it over two workers that would each start their own instance.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed: pip install 'posenc[ray]' (make test installs it)")

sys.path.insert(0, str(Path(__file__).parent))
import toyjobs  # noqa: E402

from posenc.report import runner  # noqa: E402
from posenc.report.executors import RayExecutor, make_executor  # noqa: E402


@pytest.fixture(scope="module")
def local_ray():
    # the instance's workers import what this process imports (toyjobs, posenc from src/)
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH")
        else:
            os.environ["PYTHONPATH"] = old
    yield
    ray.shutdown()


@pytest.fixture
def toy(monkeypatch):
    holder = {"section": toyjobs.section()}
    monkeypatch.setattr(runner, "get_section", lambda name: holder["section"])
    monkeypatch.setattr(runner, "SECTIONS", {"toy": "x:y"})
    return holder


def stored(out: Path) -> dict:
    import json

    return {p.stem: json.loads(p.read_text())["result"] for p in sorted((out / "jobs" / "toy").glob("*.json"))}


def test_ray_executor(local_ray, toy, tmp_path):
    ex = make_executor("ray", threads=1)
    assert isinstance(ex, RayExecutor) and ex.slots == 2
    ex.close()  # joined, not started: leaves the instance running
    assert ray.is_initialized()

    # 1. identical results to the local executors for the same plan
    toy["section"] = toyjobs.section(n=4)
    local = runner.reproduce(["toy"], out=tmp_path / "local")
    on_ray = runner.reproduce(["toy"], out=tmp_path / "ray", executor="ray")
    assert on_ray["sections"]["toy"]["summary"] == local["sections"]["toy"]["summary"]
    a, b = stored(tmp_path / "local"), stored(tmp_path / "ray")
    assert {k: v["draw"] for k, v in a.items()} == {k: v["draw"] for k, v in b.items()}
    assert os.getpid() not in {v["pid"] for v in b.values()} and {v["threads"] for v in b.values()} == {1}

    # 2. a job that raises is reported by key and reason; the others finish and are stored;
    #    a job whose worker is killed is retried by Ray
    marker = tmp_path / "died-once"
    toy["section"] = toyjobs.section(n=4, fail=(2,), die_once={1: str(marker)})
    with pytest.raises(runner.JobsFailed) as info:
        runner.reproduce(["toy"], out=tmp_path / "fail", executor="ray")
    assert info.value.failures == {"toy/j2": "ValueError: bad value 2"}
    assert marker.exists() and sorted(stored(tmp_path / "fail")) == ["j0", "j1", "j3"]

    # 3. --executor ray and --workers 2 compose with --shard into one directory
    toy["section"] = toyjobs.section(n=5, costs=(3.0, 1.0, 1.0, 2.0, 1.0))
    one = runner.reproduce(["toy"], out=tmp_path / "mix", shard="1/2", executor="ray")
    two = runner.reproduce(["toy"], out=tmp_path / "mix", shard="2/2", workers=2, threads=1)
    assert sorted(one["jobs"]["toy"]["computed"] + two["jobs"]["toy"]["computed"]) == [f"j{i}" for i in range(5)]
    final = runner.reproduce(["toy"], out=tmp_path / "mix", executor="ray")
    assert final["jobs"]["toy"]["computed"] == [] and final["report"]
