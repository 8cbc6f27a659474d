"""`posenc search`: --json contract, the table, errors as one line with exit code 2."""

import json

import pytest
from typer.testing import CliRunner

from posenc.cli import app

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def test_search_json():
    selector = "pt"
    res = invoke("search", "--space", "nb201-micro", "--selector", selector, "--seed", 1, "--steps", 8,
                 "--proj-intv", 1, "--json")
    assert res.exit_code == 0, res.stderr
    payload = json.loads(res.stdout)  # exactly one JSON object on stdout
    edges = ["cells.0.edges.1<-0", "cells.0.edges.2<-0", "cells.0.edges.2<-1"]
    assert sorted(payload["choices"]) == edges
    assert payload["selector"] == selector and payload["supernet"]["steps"] == 8
    decisions = payload["selection"]["decisions"]
    assert sorted(d["edge"] for d in decisions) == edges
    for d in decisions:
        assert set(d["scores"]) == {"none", "skip", "conv1x1", "conv3x3", "avgpool"}
        assert payload["choices"][d["edge"]] == d["chosen"]
    assert 0.0 <= payload["selected"]["val_accuracy"] <= 1.0
    assert 0.0 <= payload["selected"]["test_accuracy"] <= 1.0


def test_search_same_seed_same_answer_and_table():
    a = json.loads(invoke("search", "--steps", 5, "--seed", 2, "--selector", "magnitude", "--json").stdout)
    b = json.loads(invoke("search", "--steps", 5, "--seed", 2, "--selector", "magnitude", "--json").stdout)
    assert a["selection"] == b["selection"] and a["criterion"] == "alpha"
    assert sum(a["selection"]["decisions"][0]["scores"].values()) == pytest.approx(1.0)
    res = invoke("search", "--steps", 5, "--selector", "pt-fixed", "--space", "pe", "--finetune-epochs", 0)
    assert res.exit_code == 0, res.stderr
    assert "encoding" in res.stdout and "val accuracy" in res.stdout


def test_search_stacked_darts_cells_with_topology():
    res = invoke("search", "--space", "s2", "--cells", 3, "--steps", 1, "--finetune-epochs", 0, "--json")
    assert res.exit_code == 0, res.stderr
    payload = json.loads(res.stdout)
    assert payload["cells"] == 3 and len(payload["pruned"]) == 2  # node 3 of the normal and the reduction cell
    assert len(payload["choices"]) == 8 and set(payload["choices"].values()) <= {"skip", "sepconv3x3"}
    assert payload["topology"]["decisions"]
    table = invoke("search", "--space", "s4", "--cells", 3, "--steps", 1, "--finetune-epochs", 0,
                   "--selector", "magnitude")
    assert table.exit_code == 0 and "pruned" in table.stdout


@pytest.mark.parametrize("args,needle", [
    (("--space", "cifar"), "--space"),
    (("--selector", "random"), "--selector"),
    (("--criterion", "f1"), "--criterion"),
    (("--steps", -1), "--steps"),
    (("--finetune-epochs", -1), "--finetune-epochs"),
    (("--cells", 0), "--cells"),
    (("--space", "pe", "--cells", 2), "--cells"),
    (("--proj-intv", 0), "--proj-intv"),
    # every count the command multiplies is bounded before any work
    (("--space", "nb201", "--cells", 100000), "--cells must be in [1, 1000], got 100000"),
    (("--steps", 10**7), "--steps must be in [0, 1,000,000]"),
    (("--proj-intv", 10**6), "--proj-intv must be in [1, 1000]"),
    (("--finetune-epochs", 1e9), "--finetune-epochs must be in [0, 1000]"),
    (("--seed", 2**63), "--seed"),
    # the memory estimate against --max-memory
    (("--space", "nb201", "--cells", 900), "search --space nb201 --cells 900 would need about"),
    (("--space", "darts", "--cells", 3, "--max-memory", "1M"), "reduce --cells, or raise the limit with --max-memory"),
])
def test_search_bad_input(args, needle):
    res = invoke("search", *args)
    assert res.exit_code == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0]
    assert "Traceback" not in res.output
