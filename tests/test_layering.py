"""The import order library -> experiments -> report -> CLI holds without exception.

Every ``import`` / ``from ... import`` in ``src/posenc`` (top-level or inside a function) is
read from the syntax tree, so a lazy import inside a function counts as much as one at the top.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "posenc"
# Rank of each layer: a module may import only from layers of lower or equal rank.
LAYERS = {"cli": 3, "__main__": 3, "report": 2, "experiments": 1}  # __main__: the command's entry point


def _layer(module: str) -> int:
    parts = module.split(".")
    if parts[0] != "posenc" or len(parts) == 1:
        return 0
    return LAYERS.get(parts[1], 0)


def _module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _import_statements(path: Path) -> list[tuple[int, str, list[str]]]:
    """``(line, module, names)`` of every import in ``path``: ``import a.b`` gives ``a.b`` and no
    names, ``from .x import y, z`` the absolute module of ``.x`` and ``["y", "z"]``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = _module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            found.append((node.lineno, name, [alias.name for alias in node.names]))
    return found


def _imports(path: Path) -> list[tuple[int, str]]:
    return [(line, name) for line, name, _ in _import_statements(path)]

FILES = sorted(SRC.rglob("*.py"))


def test_the_tree_is_found():
    assert len(FILES) > 50 and (SRC / "experiments" / "job.py") in FILES


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(SRC)))
def test_no_import_runs_up_the_layers(path):
    own = _layer(_module_name(path))
    bad = [f"line {line}: {name}" for line, name in _imports(path) if _layer(name) > own]
    assert not bad, f"{path.relative_to(SRC)} (layer {own}) imports a higher layer: {bad}"


def test_the_check_catches_an_upward_import(tmp_path):
    probe = SRC / "encodings" / "base.py"
    assert _layer(_module_name(probe)) == 0
    assert _layer("posenc.report.section") == 2 > _layer(_module_name(probe))


def test_job_is_shared_from_the_experiments_layer():
    from posenc.experiments.job import Job
    from posenc.report.section import Job as ReportJob

    assert ReportJob is Job


# --- no import cycle among posenc modules ----------------------------------------------------

MODULES = {_module_name(p): p for p in FILES}


def _targets(path: Path) -> set[str]:
    """The posenc modules that ``path`` imports, at module level or inside a function.

    ``from a.b import c`` names ``a.b``, and ``a.b.c`` too where that is a module. The parent
    packages that Python runs on the way (``a`` for ``a.b``) are not edges: every module would
    otherwise import ``posenc/__init__``.
    """
    found: set[str] = set()
    for _, name, names in _import_statements(path):
        found.add(name)
        found |= {f"{name}.{alias}" for alias in names if f"{name}.{alias}" in MODULES}
    return {name for name in found if name == "posenc" or name.startswith("posenc.")}


GRAPH = {name: _targets(path) for name, path in MODULES.items()}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of ``graph``: its strongly connected components of two or more modules
    (or one that imports itself), each sorted, found by Tarjan's algorithm."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1 or node in graph.get(node, ()):
                circles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(circles)


def test_every_posenc_import_names_a_module_of_the_tree():
    unknown = {f"{name} -> {t}" for name, ts in GRAPH.items() for t in ts if t not in MODULES}
    assert not unknown, f"imports of posenc modules that are not files of the tree (old paths?): {sorted(unknown)}"


def test_no_import_cycle_in_the_package():
    circles = _circles(GRAPH)
    assert not circles, "modules that import each other, directly or in a loop: " + "; ".join(
        " <-> ".join(c) for c in circles)


def test_the_cycle_check_finds_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a", "e"}, "e": {"e"}, "f": {"d"}}
    assert _circles(graph) == [["a", "b", "c"], ["e"]]
    assert _circles({"a": {"b"}, "b": {"c"}, "d": {"a", "c"}}) == []


def _room(module: str) -> str:
    """The package a module lives in (a top-level module such as ``posenc.cli`` is its own room)."""
    path = MODULES.get(module)
    parts = module.split(".")
    if path is None or path.name == "__init__.py" or len(parts) <= 2:
        return module
    return ".".join(parts[:-1])


def _rooms() -> dict[str, set[str]]:
    """Rooms and the rooms they import, from every module but the packages' ``__init__`` faces."""
    rooms: dict[str, set[str]] = {}
    for name, targets in GRAPH.items():
        if MODULES[name].name == "__init__.py":
            continue
        room = _room(name)
        rooms.setdefault(room, set()).update(_room(t) for t in targets if _room(t) != room and t in MODULES)
    return rooms


def test_no_import_cycle_between_rooms():
    circles = _circles(_rooms())
    assert not circles, "packages that import each other, directly or in a loop: " + "; ".join(
        " <-> ".join(c) for c in circles)


def test_attention_families_sit_on_their_shared_floor():
    rooms = _rooms()
    shared, kernelized, relative = "posenc.attention", "posenc.attention.kernelized", "posenc.attention.relative"
    assert not rooms[shared] & {kernelized, relative}, "posenc.attention's own modules import a family"
    assert relative not in rooms[kernelized], "the kernelized family imports the relative one"
    assert {shared, kernelized} <= rooms[relative] and shared in rooms[kernelized]
