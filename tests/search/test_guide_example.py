"""The `choose_encoding` example at the top of docs/search.md runs as written and prints what the
guide says it prints: a choice that means something (the winner well above chance, the encodings
that cannot solve the task cut), within the budget."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "search.md"


def _blocks() -> tuple[str, str]:
    """The example's code and the output the guide shows for it."""
    text = GUIDE.read_text(encoding="utf-8")
    section = text[text.index("## Which position encoding for my model?"):]
    code = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    shown = re.search(r"```text\n(.*?)```", section[code.end():], re.DOTALL)
    assert code and shown, "docs/search.md: the choose_encoding example or its output is missing"
    return code.group(1), shown.group(1)


def _lines(output: str) -> dict:
    out = {"chosen": re.search(r"chosen: \{'pos': '(\w+)'\}", output).group(1),
           "cost": float(re.search(r"cost: ([\d.]+) trainings", output).group(1)),
           "test": float(re.search(r"test accuracy: ([\d.]+)", output).group(1)),
           "retrained": float(re.search(r"retrained from scratch: ([\d.]+)", output).group(1))}
    out["val"] = {m.group(1): float(m.group(2)) for m in re.finditer(r"^\s+(\w+)\s+val acc ([\d.]+)", output, re.MULTILINE)}
    return out


@pytest.mark.slow
def test_the_guides_choose_encoding_example_prints_what_the_guide_shows():
    code, shown = _blocks()
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        exec(compile(code, str(GUIDE), "exec"), {"__name__": "docs_search_example"})
    ran, doc = _lines(stdout.getvalue()), _lines(shown)

    assert ran["chosen"] == doc["chosen"]
    assert set(ran["val"]) == set(doc["val"]) == {"none", "sinusoidal", "learned_table", "lff"}
    # a choice that means something: the winner far above chance (1/4), `none` (a bag of patches) at chance
    assert ran["val"][ran["chosen"]] >= 0.9 and ran["val"]["none"] <= 0.4
    assert ran["cost"] <= 2.0
    for key in ("test", "retrained", "cost"):
        assert abs(ran[key] - doc[key]) <= 0.02, key
    for name, acc in doc["val"].items():
        assert abs(ran["val"][name] - acc) <= 0.05, name
