"""The graph families benchmark: its tasks' labels against the generated graphs, the plain model, its plumbing
on a tiny run, and the recorded run shown in the search guide."""

import json
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("torch_geometric")

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import bench_families, bench_graph_families, graph_family_tasks, tables  # noqa: E402


def _components(edge_index, n):
    parent = list(range(n))

    def find(a):
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for s, t in edge_index.t().tolist():
        parent[find(s)] = find(t)
    return [find(v) for v in range(n)]


@pytest.mark.parametrize("name", sorted(graph_family_tasks.TASKS))
def test_every_task_labels_what_it_says(name):
    task = graph_family_tasks.load_task(name, 3)
    n = task["num_nodes"]
    (inputs, train), = task["train"]
    (_, val), = task["val"]
    (_, test), = task["test"]
    ei = inputs["edge_index"]
    labelled = [t != -100 for t in (train, val, test)]
    # the splits cover every node once: a half, a quarter, a quarter
    assert torch.equal(sum(m.long() for m in labelled), torch.ones(n, dtype=torch.long))
    assert [int(m.sum()) for m in labelled] == [n // 2, 3 * n // 4 - n // 2, n - 3 * n // 4]
    y = torch.where(labelled[0], train, torch.where(labelled[1], val, test))
    assert int(y.min()) >= 0 and int(y.max()) < task["classes"]
    comp = _components(ei, n)
    if name == "cycle-length":  # each component is a cycle whose length is the class + 3
        for c in set(comp):
            members = [v for v in range(n) if comp[v] == c]
            assert {int(y[v]) for v in members} == {len(members) - 3}
            assert all(int((ei[0] == v).sum()) == 2 for v in members)
    if name == "grid-quadrant":  # node r * 16 + c sits in row r, column c
        for v in range(0, n, 5):
            r, c = divmod(v, 16)
            assert int(y[v]) == 2 * (r >= 8) + (c >= 8)
    if name == "caves":  # cave i holds nodes 12 i .. 12 i + 11, class i mod 4
        assert all(int(y[v]) == (v // 12) % 4 for v in range(n))
    if name == "features":  # block b holds nodes 60 b .. 60 b + 59; its one-hot lifts feature b by 1
        assert torch.equal(y, torch.arange(n) // 60)
        means = torch.stack([inputs["x"][y == b].mean(0) for b in range(4)])
        assert torch.equal(means[:, :4].argmax(1), torch.arange(4))
        assert float(means[:, :4].diagonal().min()) > 0.6 and float(means[:, 4:].abs().max()) < 0.4
    if name != "features":
        assert torch.equal(inputs["x"], torch.ones(n, 1))
    # the split differs per seed and is the same for the same seed
    assert not torch.equal(train, graph_family_tasks.load_task(name, 4)["train"][0][1])
    assert torch.equal(train, graph_family_tasks.load_task(name, 3)["train"][0][1])


def test_the_model_is_plain():
    task = graph_family_tasks.load_task("caves", 0)
    model = graph_family_tasks.build_model(task, 0)
    assert isinstance(model.pos, torch.nn.Identity)
    assert not any(type(m).__module__.startswith("posenc") for m in model.modules())


@pytest.mark.slow
def test_tiny_run_and_its_table():
    r = bench_graph_families.run(quick=True, tasks=("cycle-length",), seeds=(0,))
    s = r["summary"]
    assert set(s["policies"]) == {bench_families.RACE, bench_families.RACE_LARGER, bench_families.BRUTE,
                                  *(f"always {c}" for c in graph_family_tasks.CANDIDATES)}
    assert s["policies"][bench_families.BRUTE]["step_ratio"] == pytest.approx(4.0)
    assert s["race_model_equals_its_standalone_training"] is True
    text = tables.FORMATTERS["graph_families"](r)
    assert "race (default), budget 2" in text and "random_walk_pe" in text


def test_the_search_guide_shows_the_recorded_benchmark():
    r = json.loads((ROOT / "benchmarks" / "results" / "graph_families.json").read_text(encoding="utf-8"))
    assert {u["task"] for u in r["units"]} == set(graph_family_tasks.TASKS)
    assert r["seeds"] == list(graph_family_tasks.SEEDS) and not r["quick"]
    guide = (ROOT / "docs" / "search.md").read_text(encoding="utf-8")
    for line in tables.FORMATTERS["graph_families"](r).strip().splitlines():
        assert line in guide, f"docs/search.md does not show this line of `python -m benchmarks.tables`: {line}"
