"""Which optional extra installs each optional dependency, and the one-line message that says so.

posenc's core needs torch, numpy and scipy only. The rest comes in extras (``pyproject.toml``):
``cli`` (the ``posenc`` command, the report and the embedded data), ``graph`` (``posenc.graph``)
and ``ray`` (``posenc reproduce --executor ray``). Code that finds one of them missing names
the extra to install instead of showing a raw ``ModuleNotFoundError``.
"""

from __future__ import annotations

import importlib.util

__all__ = ["EXTRAS", "PACKAGES", "install_hint", "missing_extra", "missing_modules"]

#: top-level module -> the extra that installs it
EXTRAS: dict[str, str] = {
    "typer": "cli",
    "rich": "cli",
    "matplotlib": "cli",
    "PIL": "cli",
    "sklearn": "cli",
    "torch_geometric": "graph",
    "networkx": "graph",
    "ray": "ray",
}

#: top-level module -> the distribution that provides it, where the names differ
PACKAGES: dict[str, str] = {"PIL": "pillow", "sklearn": "scikit-learn", "torch_geometric": "torch-geometric"}


def install_hint(module: str, needed_by: str) -> str:
    """``'<needed_by> needs <package> (the "<extra>" extra): pip install "posenc[<extra>]"'``."""
    top = module.split(".")[0]
    extra = EXTRAS[top]
    return f'{needed_by} needs {PACKAGES.get(top, top)} (the "{extra}" extra): pip install "posenc[{extra}]"'


def missing_extra(err: BaseException) -> str | None:
    """The top-level module of an optional dependency that ``err`` (an ImportError) says is missing, else None."""
    if not isinstance(err, ModuleNotFoundError) or not err.name:
        return None
    top = err.name.split(".")[0]
    return top if top in EXTRAS else None


def missing_modules(modules: tuple[str, ...] | list[str]) -> list[str]:
    """Those of ``modules`` (top-level names) that cannot be imported here (without importing them)."""
    out = []
    for name in modules:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a blocked or half-installed module
            found = False
        if not found:
            out.append(name)
    return out
