"""The package can be published: the sdist carries tests, docs and the pinned versions; the
wheel carries the license and ``py.typed``; the declared lower bounds are the tested ones."""

from __future__ import annotations

import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_sdist_and_wheel_contents(built_dists):
    src, sdist, wheel = built_dists["source"], built_dists["sdist"], built_dists["wheel"]
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    tests = {n for n in names if n.startswith("tests/") and n.endswith(".py")}
    repo_tests = {str(p.relative_to(src)) for p in (src / "tests").rglob("*.py")}
    assert tests == repo_tests, f"tests missing from the sdist: {sorted(repo_tests - tests)[:5]}"
    for required in ("LICENSE", "README.md", "Makefile", "constraints.txt", "constraints-oldest.txt", "setup.py",
                     "mkdocs.yml", "tools/griffe_docstrings.py", "tools/mkdocs_hooks.py",
                     "src/posenc/py.typed", "pyproject.toml"):
        assert required in names, required
    docs = {str(p.relative_to(src)) for p in (src / "docs").glob("*.md")}
    assert docs and docs <= names
    with zipfile.ZipFile(wheel) as zf:
        wnames = zf.namelist()
    assert "posenc/py.typed" in wnames
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in wnames)
    assert not any(n.startswith(("tests/", "benchmarks/", "tools/")) or n == "setup.py" for n in wnames)


def _pins(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, ver = line.split("==")
            pins[name.strip().lower()] = ver.strip()
    return pins


def test_declared_lower_bounds_are_the_tested_oldest_versions():
    import tomllib

    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    oldest = _pins(ROOT / "constraints-oldest.txt")
    newest = _pins(ROOT / "constraints.txt")
    reqs = list(meta["dependencies"])
    for extra, items in meta["optional-dependencies"].items():
        reqs += [r for r in items if not r.startswith("posenc[")]
    checked = 0
    for req in reqs:
        name, _, bound = req.partition(">=")
        name = name.strip().lower()
        bound = bound.split(",")[0].strip()
        assert bound, f"{req}: every dependency declares a lower bound"
        assert name in oldest, f"{name} has no pin in constraints-oldest.txt"
        assert oldest[name] == bound, f"{name}: pyproject says >={bound}, the oldest tested is {oldest[name]}"
        assert name in newest, f"{name} has no pin in constraints.txt"
        checked += 1
    assert checked >= 11
