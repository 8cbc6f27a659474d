"""Every Python block of README.md and docs/*.md runs as written.

Blocks of one file run in order in one shared namespace (like a notebook), in a
temporary working directory. A block preceded by the line
``<!-- doctest: skip (reason) -->`` is not run (it needs a cluster, is too slow,
or is a fragment); the reason is required. A failure names the file and the
line of the block.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SKIP = re.compile(r"^\s*<!--\s*doctest:\s*skip\s*\((?P<reason>[^)]+)\)\s*-->\s*$")
FENCE = re.compile(r"^(?P<indent>\s*)```(?P<info>[^`]*)$")


def python_blocks(text: str) -> list[tuple[int, str, str | None]]:
    """``(line number of the fence, code, skip reason or None)`` for each ```python block."""
    lines = text.splitlines()
    blocks = []
    i = 0
    pending_skip = None
    while i < len(lines):
        m = FENCE.match(lines[i])
        s = SKIP.match(lines[i])
        if s:
            pending_skip = s.group("reason").strip()
        elif m and m.group("info").strip().split(" ")[0] in ("python", "py"):
            indent = len(m.group("indent"))
            j = i + 1
            while j < len(lines) and not re.match(r"^\s*```\s*$", lines[j]):
                j += 1
            if j == len(lines):
                raise ValueError(f"unclosed ```python block at line {i + 1}")
            code = "\n".join(line[indent:] if len(line) >= indent else line.lstrip() for line in lines[i + 1 : j])
            blocks.append((i + 1, code, pending_skip))
            pending_skip = None
            i = j
        elif m:  # another fenced block: skip to its end
            j = i + 1
            while j < len(lines) and not re.match(r"^\s*```\s*$", lines[j]):
                j += 1
            pending_skip = None
            i = j
        elif lines[i].strip():
            pending_skip = None  # the marker must sit right before its block
        i += 1
    return blocks


def test_block_parser():
    text = "x\n```python\na = 1\n```\n<!-- doctest: skip (slow) -->\n```python\nb = 2\n```\n```bash\nls\n```\n"
    assert python_blocks(text) == [(2, "a = 1", None), (6, "b = 2", "slow")]
    with pytest.raises(ValueError, match="unclosed"):
        python_blocks("```python\na = 1\n")


@pytest.mark.slow
@pytest.mark.parametrize("path", DOCS, ids=[p.name for p in DOCS])
def test_doc_blocks_run(path: Path, tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    blocks = python_blocks(path.read_text(encoding="utf-8"))
    if not blocks:
        pytest.skip(f"{path.name} has no Python blocks")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": f"doc_{path.stem}"}
    for line, code, skip in blocks:
        if skip is not None:
            continue
        try:
            exec(compile(code, f"{path.name}:{line}", "exec"), namespace)
        except Exception as err:  # noqa: BLE001 - report which block failed, with its error
            raise AssertionError(
                f"{path.relative_to(ROOT)}: the Python block at line {line} failed: {type(err).__name__}: {err}"
            ) from err
    assert os.getcwd() == str(tmp_path)
