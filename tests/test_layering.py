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


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = _module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            found.append((node.lineno, name))
    return found


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
