"""The command and ``posenc.graph`` without their extras (#24 §4): one ``error:`` line (or an
ImportError) that names the extra to install, never a raw traceback.

Building a core-only environment takes minutes, so a subprocess simulates it: a
``sys.meta_path`` finder, installed before anything is imported, refuses the blocked modules
exactly as an interpreter without them would (``ModuleNotFoundError`` with ``name`` set).
To stay cheap, one subprocess runs a sequence of steps, each with its own blocked set, ordered
so that no step needs blocked a module that an earlier step imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

STEPS_RUNNER = r"""
import contextlib, io, json, sys
BLOCKED = set()
class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Blocker())
results = []
for blocked, kind, arg in json.loads(sys.argv[1]):
    BLOCKED.clear()
    BLOCKED.update(blocked)
    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            if kind == "command":
                sys.argv = ["posenc", *arg]
                from posenc.__main__ import main
                main()
            else:
                exec(arg, {})
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException as exc:
            import traceback
            traceback.print_exc(file=err)
            code = 1
    results.append({"code": code, "stdout": out.getvalue(), "stderr": err.getvalue()})
print(json.dumps(results))
"""

CLI_EXTRA = ["typer", "rich", "matplotlib", "PIL", "sklearn"]
GRAPH_IMPORT = ("try:\n    import posenc.graph\nexcept ImportError as err:\n"
                "    print(type(err).__name__, err.name, '|', err)\nelse:\n    print('imported')\n")


def run_steps(steps: list[tuple[list[str], str, object]]) -> list[dict]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SRC), *sys.path]), COLUMNS="200")
    res = subprocess.run([sys.executable, "-c", STEPS_RUNNER, json.dumps(steps)], capture_output=True, text=True,
                         env=env, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.splitlines()[-1])


def assert_one_error_line(res, *fragments):
    lines = res["stderr"].splitlines()
    assert res["code"] == 2 and len(lines) == 1 and lines[0].startswith("error: "), res
    assert "Traceback" not in res["stderr"] and res["stdout"] == ""
    for frag in fragments:
        assert frag in lines[0], lines[0]


@pytest.fixture(scope="module")
def without_extras(tmp_path_factory):
    """The steps and what each gave: ``{name: result}``."""
    out = tmp_path_factory.mktemp("runs")
    steps = {
        # the blocker works (a module that nothing has imported yet)
        "blocker": (["typer"], "code", "import typer"),
        # no typer / no rich / nothing of the extras: the command cannot start
        **{f"typer {' '.join(a)}": (["typer"], "command", a)
           for a in ([], ["--help"], ["encodings"], ["reproduce", "--list-jobs"], ["--version"])},
        **{f"rich {' '.join(a)}": (["rich"], "command", a) for a in ([], ["encodings"])},
        "everything": ([*CLI_EXTRA, "torch_geometric", "networkx", "ray"], "command", ["--help"]),
        # typer and rich are there: the rest of the cli extra is checked where it is needed
        "reproduce without PIL": (["PIL"], "command", ["reproduce", "cape", "--out", str(out / "a")]),
        "fit-signal without PIL": (["PIL"], "command", ["fit-signal", "--iters", "1", "--threads", "1"]),
        "reproduce without sklearn": (["sklearn"], "command", ["reproduce", "cape", "--out", str(out / "b")]),
        "reproduce without matplotlib": (["matplotlib"], "command", ["reproduce", "cape", "--out", str(out / "c")]),
        # the graph extra
        "gir without graph": (["torch_geometric", "networkx"], "command", ["reproduce", "gir", "--out", str(out / "d")]),
        "gir list without networkx": (["networkx"], "command", ["reproduce", "gir", "--list-jobs"]),
        "import graph without pyg": (["torch_geometric"], "code", GRAPH_IMPORT),
        "gir list without pyg": (["torch_geometric"], "command", ["reproduce", "gir", "--list-jobs"]),
        "cape list without pyg": (["torch_geometric"], "command", ["reproduce", "cape", "--list-jobs"]),
        "core without pyg": (["torch_geometric", "networkx"], "code",
                             "import posenc, posenc.encodings, posenc.attention; print('core ok')"),
        "import graph": ([], "code", GRAPH_IMPORT),
    }
    results = run_steps(list(steps.values()))
    return dict(zip(steps, results)), out


def test_the_blocker_blocks(without_extras):
    res = without_extras[0]["blocker"]
    assert res["code"] == 1 and "ModuleNotFoundError: No module named 'typer'" in res["stderr"]


def test_the_command_without_the_cli_extra_names_it(without_extras):
    results = without_extras[0]
    for name in [n for n in results if n.startswith(("typer", "rich"))] + ["everything"]:
        assert_one_error_line(results[name], 'pip install "posenc[cli]"', "the posenc command")
    assert "needs typer" in results["typer encodings"]["stderr"]
    assert "needs rich" in results["rich encodings"]["stderr"]


def test_the_rest_of_the_cli_extra_is_checked_before_any_work(without_extras):
    results, out = without_extras
    for name, package in (("reproduce without PIL", "pillow"), ("reproduce without sklearn", "scikit-learn"),
                          ("reproduce without matplotlib", "matplotlib")):
        assert_one_error_line(results[name], 'pip install "posenc[cli]"', "posenc reproduce needs " + package)
    assert not any(out.iterdir())  # no run directory was made
    assert_one_error_line(results["fit-signal without PIL"], 'pip install "posenc[cli]"', "pillow")


def test_gir_without_the_graph_extra_names_it(without_extras):
    results, _ = without_extras
    assert_one_error_line(results["gir without graph"], 'pip install "posenc[graph]"', "the gir section needs",
                          "leave gir out")
    assert_one_error_line(results["gir list without networkx"], 'pip install "posenc[graph]"', "networkx")
    assert_one_error_line(results["gir list without pyg"], 'pip install "posenc[graph]"', "torch-geometric")
    res = results["cape list without pyg"]  # other sections do not need it
    assert res["code"] == 0 and res["stdout"].startswith("cape:"), res


def test_import_posenc_graph_without_pyg_names_the_extra(without_extras):
    results, _ = without_extras
    kind, name, message = results["import graph without pyg"]["stdout"].strip().split(" ", 2)
    assert kind == "ModuleNotFoundError" and name.startswith("torch_geometric")  # still an ImportError
    assert message == '| posenc.graph needs torch-geometric (the "graph" extra): pip install "posenc[graph]"'
    assert results["core without pyg"]["stdout"].strip() == "core ok"  # the core never needs it
    assert results["import graph"]["stdout"].strip() == "imported"  # and with it, nothing changed


def test_python_m_posenc_is_the_entry_point():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SRC), *sys.path]))
    res = subprocess.run([sys.executable, "-m", "posenc", "fit-signal", "--seed", "-1"], capture_output=True,
                         text=True, env=env, timeout=120)
    assert res.returncode == 2 and res.stderr.startswith("error: Invalid value for '--seed'"), res.stderr
    assert "(see 'posenc fit-signal --help')" in res.stderr  # the program's name, not __main__.py


def test_the_installed_script_is_the_checking_entry_point():
    import tomllib

    scripts = tomllib.loads((SRC.parent / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"posenc": "posenc.__main__:main"}
