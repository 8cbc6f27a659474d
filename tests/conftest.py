import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

# Two xdist workers on a 2-core machine: one thread each avoids oversubscription.
torch.set_num_threads(int(os.environ.get("POSENC_TEST_THREADS", "1")))

try:
    from hypothesis import settings

    settings.register_profile("posenc", max_examples=40, deadline=None)
    settings.load_profile("posenc")
except ImportError:  # pragma: no cover
    pass


@pytest.fixture(autouse=True)
def _environment_restored():
    """Each test starts from the session's environment: what one test puts into ``os.environ``
    (``runner.reproduce`` pins the floating-point paths there for the jobs it runs inline)
    would otherwise reach the subprocesses of whichever tests follow it on the same worker."""
    before = dict(os.environ)
    yield
    if dict(os.environ) != before:
        os.environ.clear()
        os.environ.update(before)


@pytest.fixture
def rng() -> torch.Generator:
    return torch.Generator().manual_seed(1234)


# --------------------------------------------------------------------------- built artifacts
# The site (mkdocs build --strict) and the distributions (sdist, wheel) are built once per test
# session, however many modules and xdist workers use them: the first worker builds into the
# session's shared temporary directory under a file lock, the others wait and reuse it.
ROOT = Path(__file__).resolve().parents[1]

#: Environment of the builds: a proxy that refuses every connection, so a build that reaches
#: for the network fails instead of fetching.
OFFLINE = {"HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9", "http_proxy": "http://127.0.0.1:9",
           "https_proxy": "http://127.0.0.1:9", "NO_PROXY": "", "no_proxy": ""}

DOCS_MISSING = [m for m in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python")
                if importlib.util.find_spec(m.split(".")[0]) is None
                or (m.count(".") and importlib.util.find_spec(m) is None)]


def _once(tmp_path_factory, name: str, build) -> Path:
    """``build(dir)`` run once per session into a directory shared by the xdist workers."""
    from filelock import FileLock

    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent
    out = shared / name
    with FileLock(str(out) + ".lock"):
        failed = out.with_suffix(".failed")
        if failed.exists():
            pytest.fail(failed.read_text())
        if not (out / ".done").exists():
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir(parents=True)
            try:
                build(out)
            except BaseException as exc:
                failed.write_text(f"building {name} failed (in another test): {exc}")
                raise
            (out / ".done").touch()
    return out


def _git_files() -> list[str]:
    try:
        return subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                              capture_output=True, text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")


@pytest.fixture(scope="session")
def built_site(tmp_path_factory) -> Path:
    """``mkdocs build --strict`` of the repository, offline: the site directory."""
    if DOCS_MISSING:
        pytest.skip(f"the docs extra is not installed (no {', '.join(DOCS_MISSING)}): pip install \".[docs]\"")

    def build(out: Path) -> None:
        env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", **OFFLINE}
        proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out / "site")],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        assert proc.returncode == 0, f"mkdocs build --strict failed:\n{tail}"

    return _once(tmp_path_factory, "site", build) / "site"


@pytest.fixture(scope="session")
def built_dists(tmp_path_factory) -> dict[str, Path]:
    """The sdist and the wheel, built by setuptools from a copy of the checkout's files:
    ``{"source": copy, "sdist": path, "wheel": path}``."""
    files = _git_files()

    def build(out: Path) -> None:
        src = out / "src"
        for f in files:
            if (ROOT / f).is_file():
                (src / f).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / f, src / f)
        (out / "dist").mkdir()
        for kind in ("sdist", "wheel"):
            code = f"from setuptools import build_meta as b; print(b.build_{kind}({str(out / 'dist')!r}))"
            res = subprocess.run([sys.executable, "-c", code], cwd=src, capture_output=True, text=True,
                                 env={**os.environ, **OFFLINE}, timeout=600)
            assert res.returncode == 0, res.stderr[-2000:]

    out = _once(tmp_path_factory, "dists", build)
    (sdist,) = (out / "dist").glob("*.tar.gz")
    (wheel,) = (out / "dist").glob("*.whl")
    return {"source": out / "src", "sdist": sdist, "wheel": wheel}
