"""Every Python block of README.md and docs/*.md runs as written.

Each block runs alone, in a fresh interpreter and an empty temporary working directory,
exactly as a reader who pastes that one block would run it: a block that needs a name from an
earlier block fails. A block preceded by the line
``<!-- doctest: skip (reason) -->`` is not run (it needs a cluster, is too slow,
or is a fragment); the reason is required. A failure names the file and the
line of the block.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
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


def _blocks(path: Path) -> list[tuple[int, str]]:
    return [(line, code) for line, code, skip in python_blocks(path.read_text(encoding="utf-8")) if skip is None]


BLOCKS = [(path, line, code) for path in DOCS for line, code in _blocks(path)]


def test_every_doc_with_code_is_collected():
    names = {path.name for path, _, _ in BLOCKS}
    assert "README.md" in names and len(BLOCKS) >= 10


def run_alone(code: str, cwd: Path) -> subprocess.CompletedProcess:
    """Run one block as a pasted script: fresh interpreter, no shared namespace, Agg backend."""
    env = {**os.environ, "MPLBACKEND": "Agg", "PYTHONHASHSEED": "0"}
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)


def test_run_alone_sees_no_earlier_block(tmp_path):
    assert run_alone("x = 1", tmp_path).returncode == 0
    proc = run_alone("print(x)", tmp_path)
    assert proc.returncode != 0 and "NameError" in proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize(("path", "line", "code"), BLOCKS,
                         ids=[f"{path.name}:{line}" for path, line, _ in BLOCKS])
def test_doc_block_runs_alone(path: Path, line: int, code: str, tmp_path):
    proc = run_alone(code, tmp_path)
    tail = "\n".join(proc.stderr.strip().splitlines()[-6:])
    assert proc.returncode == 0, f"{path.relative_to(ROOT)}: the Python block at line {line} fails when run alone:\n{tail}"
