"""The graph example of docs/search.md runs as written and prints what the guide shows: the winner, every
candidate's validation scores, the cost, and the same test accuracy after a rebuild."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

pytest.importorskip("torch_geometric")

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "search.md"
HEADING = "### A graph model: node encodings"


def _blocks() -> tuple[str, str]:
    text = GUIDE.read_text(encoding="utf-8")
    start = text.index(HEADING)
    section = text[start:text.index("\n### ", start + len(HEADING))]
    code = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    shown = re.search(r"```text\n(.*?)```", section[code.end():], re.DOTALL)
    assert code and shown, "docs/search.md: the graph example or its output is missing"
    return code.group(1), shown.group(1)


def _read(output: str) -> dict:
    return {"chosen": re.search(r"choose_encoding:race: encoding = (\S+)", output).group(1),
            "cost": float(re.search(r"= ([\d.]+)x one training", output).group(1)),
            "test": float(re.search(r"test accuracy: ([\d.]+)", output).group(1)),
            "rebuilt": float(re.search(r"rebuilt: ([\d.]+)", output).group(1)),
            "val": {k: float(v) for k, v in re.findall(r"^\s+\*?\s*(\w+)\s+val accuracy ([\d.]+)", output, re.M)}}


def test_the_guides_graph_example_prints_what_the_guide_shows(tmp_path, monkeypatch):
    code, shown = _blocks()
    assert len([line for line in code.splitlines() if line.strip()]) <= 30
    monkeypatch.chdir(tmp_path)
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        exec(compile(code, str(GUIDE), "exec"), {"__name__": "docs_search_graph"})
    ran, doc = _read(stdout.getvalue()), _read(shown)
    assert ran["chosen"] == doc["chosen"] == "random_walk_pe"
    assert set(ran["val"]) == set(doc["val"]) == {"none", "laplacian_pe", "random_walk_pe", "anchor_pe"}
    assert ran["rebuilt"] == ran["test"]
    assert abs(ran["cost"] - doc["cost"]) <= 0.01 and abs(ran["test"] - doc["test"]) <= 0.02
    for name, acc in doc["val"].items():
        assert abs(ran["val"][name] - acc) <= 0.05, name
