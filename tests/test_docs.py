"""Every Python block of README.md and docs/*.md runs as written.

Each block runs alone, in its own interpreter (forked from one that has only imported torch and
posenc; ``POSENC_DOCS_FRESH=1`` starts a fresh one per block) and an empty temporary working
directory, as a reader who pastes that one block would run it: a block that needs a name from an
earlier block fails. A block preceded by the line
``<!-- doctest: skip (reason) -->`` is not run (it needs a cluster, is too slow,
or is a fragment); the reason is required. A failure names the file and the
line of the block.
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
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


#: The parent of the forked interpreters: it imports what nearly every block imports (torch, its
#: compiler front end, posenc), then forks one child per block, so a block pays for its own work, not
#: for ~2 s of imports. The child runs the block as ``python -c`` would: ``__main__`` is a fresh
#: module, ``sys.argv == ["-c"]``, the block's directory is the working directory, SystemExit is its
#: exit code and an uncaught exception prints its traceback to stderr and exits 1.
#: ``POSENC_DOCS_FRESH=1`` runs every block in a fresh ``python -c`` instead.
ZYGOTE = r"""
import json, os, sys, traceback, types
import torch, torch._dynamo, posenc, posenc.attention, posenc.encodings  # noqa: F401
for line in sys.stdin:
    req = json.loads(line)
    out, err = req["cwd"] + "/.stdout", req["cwd"] + "/.stderr"
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.chdir(req["cwd"])
            for fd, name in ((1, out), (2, err)):
                f = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.dup2(f, fd)
                os.close(f)
            sys.stdin = open(os.devnull)
            sys.argv = ["-c"]
            sys.path[0] = ""
            main = types.ModuleType("__main__")
            main.__builtins__ = __builtins__
            sys.modules["__main__"] = main
            try:
                exec(compile(req["code"], "<string>", "exec"), main.__dict__)
                code = 0
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
                if not isinstance(e.code, (int, type(None))):
                    print(e.code, file=sys.stderr)
            except BaseException:
                traceback.print_exc()
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)
    _, status = os.waitpid(pid, 0)
    print(json.dumps({"rc": os.waitstatus_to_exitcode(status), "out": out, "err": err}), flush=True)
"""

_zygote: subprocess.Popen | None = None
#: seconds a block may run (forked or fresh) before it counts as hung
BLOCK_TIMEOUT = 600


def _env() -> dict:
    # one thread per block: the suite runs two xdist workers on two cores
    return {**os.environ, "MPLBACKEND": "Agg", "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1"}


def _fresh(code: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=_env(), capture_output=True, text=True,
                          timeout=BLOCK_TIMEOUT)


def run_alone(code: str, cwd: Path) -> subprocess.CompletedProcess:
    """Run one block as a pasted script: its own interpreter (forked from one that has imported
    torch and posenc, see :data:`ZYGOTE`), no shared namespace, Agg backend."""
    global _zygote
    if os.environ.get("POSENC_DOCS_FRESH") == "1":
        return _fresh(code, cwd)
    if _zygote is None or _zygote.poll() is not None:
        _zygote = subprocess.Popen([sys.executable, "-c", ZYGOTE], cwd=ROOT, env=_env(), stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, text=True, start_new_session=True)
    _zygote.stdin.write(json.dumps({"code": code, "cwd": str(cwd)}) + "\n")
    _zygote.stdin.flush()
    ready, _, _ = select.select([_zygote.stdout], [], [], BLOCK_TIMEOUT)
    if not ready:  # a block that hangs: stop the parent and its child, fail like a timed-out run
        os.killpg(_zygote.pid, signal.SIGKILL)
        _zygote.wait()
        _zygote = None
        raise subprocess.TimeoutExpired([sys.executable, "-c", code], BLOCK_TIMEOUT)
    reply = json.loads(_zygote.stdout.readline())
    out, err = Path(reply["out"]), Path(reply["err"])
    proc = subprocess.CompletedProcess([sys.executable, "-c", code], reply["rc"], out.read_text(), err.read_text())
    out.unlink()
    err.unlink()
    return proc


def test_run_alone_sees_no_earlier_block(tmp_path):
    assert run_alone("x = 1", tmp_path).returncode == 0
    proc = run_alone("print(x)", tmp_path)
    assert proc.returncode != 0 and "NameError" in proc.stderr


def test_run_alone_is_what_python_c_sees(tmp_path):
    probe = ("import os, sys\nprint(__name__, sys.argv, repr(sys.path[0]), os.getcwd() == os.path.realpath('.'))\n"
             "print(sorted(k for k in globals() if not k.startswith('__')))\nprint('to stderr', file=sys.stderr)\n"
             "sys.exit(3)")
    forked, fresh = run_alone(probe, tmp_path), _fresh(probe, tmp_path)
    assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
    assert forked.returncode == 3 and forked.stdout.startswith("__main__ ['-c'] ''")
    boom = run_alone("raise KeyError('boom')", tmp_path)
    assert boom.returncode == 1 and "KeyError: 'boom'" in boom.stderr and "Traceback" in boom.stderr
    assert not list(tmp_path.iterdir())  # nothing left behind in the block's directory


@pytest.mark.slow
@pytest.mark.parametrize(("path", "line", "code"), BLOCKS,
                         ids=[f"{path.name}:{line}" for path, line, _ in BLOCKS])
def test_doc_block_runs_alone(path: Path, line: int, code: str, tmp_path):
    proc = run_alone(code, tmp_path)
    tail = "\n".join(proc.stderr.strip().splitlines()[-6:])
    assert proc.returncode == 0, f"{path.relative_to(ROOT)}: the Python block at line {line} fails when run alone:\n{tail}"
