"""What made a job record: the code, the torch build and the floating-point paths it ran on.

A job's result is a function of its config *and* the code that computed it. The store keys a
record on both: a record made by other code (another posenc source, another torch, other
numerics) is recomputed, never mixed with this code's results.

**Code.** :func:`source_digest` hashes the source files a section's jobs can run: the
section's experiment module (or package), the shared statistics, and every posenc module they
import, transitively (:func:`module_closure`, read from the source with :mod:`ast`). Editing
a module no job of a section imports leaves its records valid; editing one it imports
invalidates them.

**Numerics.** The same code and config gave different numbers on two machines of one kind:
torch's CPU kernels are compiled for several instruction sets and pick the widest the CPU
has at the first call (AVX-512 here, AVX2 on a CPU without it), and MKL and oneDNN dispatch
the same way. The vector width changes the order of floating-point sums, so the rounding,
and a training run amplifies a rounding difference into another architecture pick (on the
``search`` section's seed 1, AVX-512 and AVX2 retrain different picks). Job workers
therefore pin one path that every x86-64 machine of the last decade has
(:data:`NUMERICS_ENV`: AVX2 for torch's kernels, MKL and oneDNN), before torch runs its
first operation, and every record names the paths it actually ran on
(:func:`numerics_label`). What is left: MKL's kernels for Intel and for AMD CPUs are not
the same code (its bitwise ``MKL_CBWR=COMPATIBLE`` mode would close that gap, at 1.2-1.9x
the time of the quick profile's jobs), and oneDNN sizes some blocks by the cache; runs on
one vendor's CPUs with AVX2 agree bit for bit. The settings are
read once per process, at the first operation that needs them, so they must be in the
environment before anything is computed: the job workers set them in their initialiser, and
``posenc reproduce`` at its start.
"""

from __future__ import annotations

import functools
import hashlib
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = [
    "NUMERICS_ENV",
    "code_signature",
    "describe_code",
    "git_commit",
    "module_closure",
    "numerics_label",
    "pin_numerics",
    "same_code",
    "source_digest",
]

#: The floating-point paths job workers pin (environment variables read once per process at
#: the first operation that needs them): torch's vectorised CPU kernels, MKL and oneDNN.
NUMERICS_ENV: dict[str, str] = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
}

#: The fields of a record's ``code`` that must match for the record to be reused (``commit``
#: and ``posenc`` are informational: a dirty tree has the commit of a clean one).
MATCHED = ("source", "torch", "numerics")

_PACKAGE = Path(__file__).resolve().parents[1]  # .../posenc
#: Parts of the package that never change a job's result: the report layer (it stores and
#: renders results) and the command line.
_NOT_COMPUTING = ("report", "cli.py", "__main__.py")


def pin_numerics(environ: dict[str, str] | None = None) -> None:
    """Put :data:`NUMERICS_ENV` into ``environ`` (default ``os.environ``).

    Takes effect only in a process that has not yet run the operations that read them
    (:func:`numerics_label` tells what a process actually runs on).
    """
    env = os.environ if environ is None else environ
    env.update(NUMERICS_ENV)


@functools.cache
def numerics_label() -> str:
    """The floating-point paths of this process, e.g. ``"cpu=AVX2 mkl=AVX2 onednn=AVX2"``.

    Reading torch's CPU capability fixes it for the process (as any operation would). MKL and
    oneDNN read their variables once, at their first use, so the label is read once too: a
    later :func:`pin_numerics` in the same process changes none of the three paths, and does not
    change the label.
    """
    import torch

    cap = str(torch.backends.cpu.get_cpu_capability())
    mkl = os.environ.get("MKL_ENABLE_INSTRUCTIONS", "auto") if torch.backends.mkl.is_available() else "none"
    onednn = os.environ.get("ONEDNN_MAX_CPU_ISA", "auto") if torch.backends.mkldnn.is_available() else "none"
    return f"cpu={cap} mkl={mkl} onednn={onednn}"


def _module_path(name: str) -> Path | None:
    """The source file of the posenc module ``name`` (a package's ``__init__.py``), or None."""
    parts = name.split(".")
    if parts[0] != "posenc":
        return None
    base = _PACKAGE.joinpath(*parts[1:])
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    path = base.with_suffix(".py")
    return path if path.is_file() else None


def _module_name(path: Path) -> str:
    rel = path.relative_to(_PACKAGE).with_suffix("")
    parts = ["posenc", *rel.parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(path: Path) -> set[str]:
    """The posenc modules ``path`` imports anywhere in its body (module level or inside functions):
    ``import a.b`` and ``from a import b`` give ``a.b`` when it is a module, else ``a``."""
    return set(_imported_from(str(path), path.read_bytes()))


@functools.lru_cache(maxsize=512)
def _imported_from(path_str: str, source: bytes) -> frozenset[str]:
    """:func:`_imported` of the file ``path_str`` whose content is ``source``: parsed once per content
    (a digest of every section walks the same modules again and again)."""
    import ast

    path = Path(path_str)
    tree = ast.parse(source)
    here = _module_name(path)
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the package of this module
                pkg = here.split(".") if path.name == "__init__.py" else here.split(".")[:-1]
                base = ".".join(pkg[:len(pkg) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            names.add(base)
            names.update(f"{base}.{a.name}" for a in node.names)
    return frozenset(n for n in names if n.startswith("posenc") and _module_path(n) is not None)


def module_closure(module: str) -> list[Path]:
    """The source files that importing and running ``module`` can execute: the module, every posenc
    module it imports (at module level or in a function), transitively, and the ``__init__`` of
    every package on the way (importing ``posenc.a.b`` runs ``posenc/a/__init__.py``)."""
    todo = [module]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            prefix = ".".join(parts[:i])
            if prefix in seen or _module_path(prefix) is None:
                continue
            seen.add(prefix)
            todo.extend(_imported(_module_path(prefix)))
    return sorted({p for p in (_module_path(n) for n in seen) if p is not None})


@functools.lru_cache(maxsize=64)
def source_digest(module: str | None = None) -> str:
    """sha256 (16 hex digits) of the source files a job whose function lives in ``module`` can run
    (:func:`module_closure`): editing a module that the section never imports leaves its records
    valid, editing one it imports (or an ``__init__`` on the way) invalidates them.

    Args:
        module: the module of a job's function (``job.run.__module__``); a module of an experiment
            package (``posenc.experiments.search.stacked``) counts with its whole package (its
            summary lives beside it). ``None`` or a module outside posenc: the whole library but
            the report layer and the command line.
    """
    if module is not None and module.startswith("posenc.experiments."):
        package = ".".join(module.split(".")[:3])
        files = set(module_closure(module))
        pkg_path = _module_path(package)
        if pkg_path is not None and pkg_path.name == "__init__.py":
            for path in pkg_path.parent.rglob("*.py"):
                files.update(module_closure(_module_name(path)))
        files.update(module_closure("posenc.experiments.stats"))
    else:
        files = {p for p in _PACKAGE.rglob("*.py") if p.relative_to(_PACKAGE).parts[0] not in _NOT_COMPUTING}
    h = hashlib.sha256()
    for path in sorted(files):
        h.update(path.relative_to(_PACKAGE).as_posix().encode("utf-8") + b"\0")
        h.update(path.read_bytes().replace(b"\r\n", b"\n") + b"\0")
    return h.hexdigest()[:16]


@functools.lru_cache(maxsize=1)
def git_commit() -> str | None:
    """The commit of the git checkout the package runs from (``+dirty`` when its source differs),
    or ``None`` outside a checkout (an installed wheel)."""
    root = _PACKAGE.parents[1]
    if not (root / ".git").exists():
        return None
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--", "src/posenc"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{head}{'+dirty' if dirty else ''}" if head else None


def code_signature(run: Callable[[Any], dict] | str | None, numerics: str) -> dict[str, Any]:
    """The ``code`` field of a record of a job whose function is ``run`` (or its module name),
    computed on the paths ``numerics`` (:func:`numerics_label` of the process that ran it)."""
    import torch

    import posenc

    module = run if isinstance(run, str) or run is None else getattr(run, "__module__", None)
    return {"posenc": posenc.__version__, "source": source_digest(module), "torch": torch.__version__,
            "numerics": numerics, "commit": git_commit()}


def same_code(a: Any, b: Any) -> bool:
    """Whether two ``code`` fields name the same code (:data:`MATCHED` fields equal)."""
    return isinstance(a, dict) and isinstance(b, dict) and all(a.get(k) == b.get(k) for k in MATCHED)


def describe_code(code: Any) -> str:
    """``"source 1a2b3c4d..., torch 2.13.0+cpu, cpu=AVX2 ..."`` for messages."""
    if not isinstance(code, dict):
        return "no code version (written before records named their code)"
    return (f"source {str(code.get('source'))[:8]}, torch {code.get('torch')}, {code.get('numerics')}"
            + (f", commit {str(code['commit'])[:10]}" if code.get("commit") else ""))
