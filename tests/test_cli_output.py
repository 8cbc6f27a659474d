"""What the CLI prints (#24 §4): help as written (``posenc[ray]``, no ``<bool>`` on flags),
``encodings --json`` with JSON types, and ``reproduce --job KEY`` showing the job's result."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

from posenc import cli
from posenc.encodings import available_encodings, encoding_parameters

invoke = CliRunner().invoke
WIDE = {"COLUMNS": "400", "TERMINAL_WIDTH": "400"}
GROUP = typer.main.get_command(cli.app)
COMMANDS = [[], *([name] for name in GROUP.commands)]


def help_text(args: list[str]) -> str:
    res = invoke(cli.app, [*args, "--help"], env=WIDE)
    assert res.exit_code == 0, res.stderr
    return res.stdout


def test_the_ray_hint_is_rendered_whole():
    text = help_text(["reproduce"])
    assert "pip install 'posenc[ray]'" in text and "'posenc'" not in text


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a) or "posenc")
def test_help_texts_are_rendered_as_written(args):
    text = " ".join(help_text(args).split())
    command = GROUP if not args else GROUP.commands[args[0]]
    params = [p for p in command.params if getattr(p, "help", None)]
    assert params
    for param in params:
        raw = param.help.replace("\\[", "[")  # what the user must see
        for token in re.findall(r"\S*\[[^\]\s]*\]\S*", raw):
            assert token in text, (param.name, token)
    assert "<bool>" not in text  # a flag takes no value: no type shown
    assert "--help" in text


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a) or "posenc")
def test_flags_have_no_type_and_valued_options_keep_theirs(args):
    text = help_text(args)
    for line in text.splitlines():
        if re.search(r"--json\b|--list-jobs\b|--help\b|--compare\b|--version\b|--debug\b", line):
            assert "<" not in line.split("--", 1)[1].split("  ")[0], line
    if args == ["reproduce"]:
        assert re.search(r"--seeds\s+<int>", text) and re.search(r"--out\s+<path>", text)


def test_encodings_json_keeps_the_defaults_types():
    payload = json.loads(invoke(cli.app, ["encodings", "--json"]).stdout)
    assert sorted(payload) == sorted(available_encodings())
    seen = set()
    for name, params in payload.items():
        for arg, default in encoding_parameters(name).items():
            want = list(default) if isinstance(default, tuple) else default
            assert params[arg] == want and type(params[arg]) is type(want), (name, arg, params[arg])
            seen.add(type(want).__name__)
    assert {"int", "float", "bool", "NoneType", "str", "list"} <= seen
    assert payload["rff"]["sigma"] is None and payload["basic"]["domain"] == [0.0, 1.0]
    detail = json.loads(invoke(cli.app, ["encodings", "gaussian", "--json"]).stdout)
    for arg, default in encoding_parameters("gaussian").items():
        want = list(default) if isinstance(default, tuple) else default
        assert detail["arguments"][arg]["default"] == want
    assert cli._json_value({"d": __import__("torch").float32, "x": float("inf")}) == {
        "d": "torch.float32", "x": "inf"}


# ------------------------------------------------------------------ reproduce --job KEY
sys.path.insert(0, str(Path(__file__).parent / "report"))
import toyjobs  # noqa: E402

from posenc.report import runner  # noqa: E402


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setattr(runner, "get_section", lambda name: toyjobs.section(n=3) if name == "toy" else
                        (_ for _ in ()).throw(ValueError(f"unknown section {name!r}")))
    monkeypatch.setattr(runner, "SECTIONS", {"toy": "x:y"})


def test_reproduce_job_prints_its_result(toy, tmp_path):
    res = invoke(cli.app, ["reproduce", "toy", "--out", str(tmp_path), "--job", "j1"], env=WIDE)
    assert res.exit_code == 0, res.stderr
    stored = json.loads((tmp_path / "jobs" / "toy" / "j1.json").read_text())
    assert "toy/j1: computed in" in res.stdout
    for field, value in stored["result"].items():
        shown = f"{value:.6g}" if isinstance(value, float) else json.dumps(value)
        assert re.search(rf"│ {field}\s+│ {re.escape(shown)}\s+│", res.stdout), (field, shown, res.stdout)
    res = invoke(cli.app, ["reproduce", "toy", "--out", str(tmp_path), "--job", "j1", "--job", "j2", "--json"])
    assert res.exit_code == 0, res.stderr
    payload = json.loads(res.stdout)
    assert payload["jobs"]["toy"]["computed"] == ["j2"] and payload["jobs"]["toy"]["skipped"] == ["j1"]
    assert payload["results"]["toy"]["j1"] == stored
    assert payload["results"]["toy"]["j2"]["result"]["value"] == 2
    res = invoke(cli.app, ["reproduce", "toy", "--out", str(tmp_path), "--job", "j2"], env=WIDE)
    assert "toy/j2: stored before" in res.stdout


def test_reproduce_job_cuts_long_values_and_says_where_the_rest_is(toy, tmp_path, monkeypatch):
    monkeypatch.setattr(cli, "RESULT_CELL", 20)
    res = invoke(cli.app, ["reproduce", "toy", "--out", str(tmp_path), "--job", "j0"], env=WIDE)
    assert res.exit_code == 0 and "…" in res.stdout and "j0.json" in res.stdout, res.stdout
