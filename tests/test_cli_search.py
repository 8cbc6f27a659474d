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
    res = invoke("search", "--space", "nb201-micro", "--selector", selector, "--seed", 1, "--steps", 8, "--json")
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
    res = invoke("search", "--steps", 5, "--selector", "pt-fixed", "--space", "pe")
    assert res.exit_code == 0, res.stderr
    assert "encoding" in res.stdout and "val accuracy" in res.stdout


@pytest.mark.parametrize("args,needle", [
    (("--space", "cifar"), "--space"),
    (("--selector", "random"), "--selector"),
    (("--criterion", "f1"), "--criterion"),
    (("--steps", -1), "--steps"),
    (("--finetune-epochs", -1), "--finetune-epochs"),
])
def test_search_bad_input(args, needle):
    res = invoke("search", *args)
    assert res.exit_code == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0]
    assert "Traceback" not in res.output
