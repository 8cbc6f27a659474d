"""Record paths that are not regular files, records too large to read, and records relabelled
as another job's (#40 part 6).

A record path that is a FIFO blocked the reader forever; a symlink to ``/dev/zero`` or
``/dev/urandom`` was read until the memory ran out; a directory there lost the job just
computed (``[Errno 21]`` from the rename). Each is now refused unread with a reason that says
what the path is, the job is recomputed, and its result is kept: written over the FIFO or the
symlink, or beside the directory. A record holding another job's config under this job's key
and digest (its checksum recomputed) is refused.

The tests that would block or exhaust memory on a faulty store run under a watchdog: a thread
with a timeout (FIFOs, unblocked by opening their write end) or a child process with a bounded
address space (devices).
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))
import toyjobs  # noqa: E402

from posenc import cli  # noqa: E402
from posenc.report import runner  # noqa: E402
from posenc.report import store as store_module  # noqa: E402
from posenc.report.store import (  # noqa: E402
    JOB_FIELDS,
    InvalidSummary,
    JobStore,
    acquire_claim,
    read_summary,
)

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
CODE = {"posenc": "0.1.0", "source": "0123456789abcdef", "torch": "2.13.0+cpu",
        "numerics": "cpu=AVX2 mkl=AVX2 onednn=AVX2", "commit": None}
needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
needs_devices = pytest.mark.skipif(not (os.path.exists("/dev/zero") and os.path.exists("/dev/urandom")),
                                   reason="no /dev/zero or /dev/urandom")


@pytest.fixture
def toy(monkeypatch):
    section = toyjobs.section(n=3)
    monkeypatch.setattr(runner, "get_section", lambda name: section if name == "toy" else
                        (_ for _ in ()).throw(ValueError(f"unknown section {name!r}")))
    monkeypatch.setattr(runner, "SECTIONS", {"toy": "x:y"})
    return section


def _unblock(fifo: Path) -> None:
    """Let a reader blocked opening ``fifo`` go on: open its write end and close it (EOF)."""
    try:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        pass


def _within(seconds: float, fn: Callable[[], Any], fifo: Path) -> Any:
    """``fn()`` run in a thread; the test fails (after unblocking ``fifo``) when it is still running
    after ``seconds``: it would have blocked on the FIFO forever."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as err:  # noqa: BLE001 -- re-raised in the test's thread
            box["error"] = err

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        _unblock(fifo)
        thread.join(30)
        pytest.fail(f"still blocked after {seconds} s: the FIFO {fifo} was opened for reading")
    if "error" in box:
        raise box["error"]
    return box.get("value")


#: the address space a child that reads a device may take (a faulty reader dies at it, not the machine)
CHILD_ADDRESS_SPACE = 3 * 2**30


def _bounded_child(code: str, timeout: float = 120.0) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter whose address space is bounded by :data:`CHILD_ADDRESS_SPACE`."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (CHILD_ADDRESS_SPACE, CHILD_ADDRESS_SPACE))

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT / "src")])}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout, preexec_fn=limit, env=env, check=False)


def _saved(tmp_path: Path) -> tuple[JobStore, dict, dict]:
    store = JobStore(tmp_path)
    config = {"a": 1, "b": [0.5, None]}
    return store, config, store.save("s", "k", config, {"r": 2.5}, 0.25, CODE)


# ------------------------------------------------------------------ FIFOs, devices, directories
@needs_fifo
def test_a_fifo_at_a_record_path_is_refused_unread_and_the_record_replaces_it(tmp_path):
    store, config, record = _saved(tmp_path)
    path = store.path("s", "k")
    path.unlink()
    os.mkfifo(path)
    got, why = _within(20, lambda: store.lookup("s", "k", config, CODE), path)
    assert got is None and "FIFO" in why and "not a regular file" in why and "replaces it" in why, why
    store.save("s", "k", config, {"r": 2.5}, 0.25, CODE)
    assert path.is_file() and store.lookup("s", "k", config, CODE)[0]["result"] == {"r": 2.5}


@needs_devices
@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_a_symlink_to_a_device_is_refused_unread(tmp_path, device):
    # in a child with a bounded address space: a reader that reads the device to its end dies there
    res = _bounded_child(f"""
        import json, os
        from posenc.report.store import JobStore
        store = JobStore({str(tmp_path)!r})
        config = {{"a": 1}}
        code = {CODE!r}
        store.save("s", "k", config, {{"r": 1.0}}, 0.5, code)
        path = store.path("s", "k")
        path.unlink()
        path.symlink_to({device!r})
        got, why = store.lookup("s", "k", config, code)
        store.save("s", "k", config, {{"r": 2.0}}, 0.5, code)  # the record replaces the symlink
        print(json.dumps({{"got": got, "why": why, "after": store.lookup("s", "k", config, code)[0]["result"],
                          "is_link": path.is_symlink()}}))
    """)
    assert res.returncode == 0, res.stderr[-2000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["got"] is None and "character device" in out["why"] and device in out["why"], out
    assert out["after"] == {"r": 2.0} and not out["is_link"]


def test_a_directory_at_a_record_path_keeps_the_computed_result_beside_it(toy, tmp_path):
    runner.reproduce(["toy"], out=tmp_path)
    store = JobStore(tmp_path)
    path = store.path("toy", "j1")
    config = json.loads(path.read_text())["config"]
    path.unlink()
    path.mkdir()
    (path / "inside").write_text("the user's")
    notices: list[str] = []
    res = runner.reproduce(["toy"], out=tmp_path, notice=notices.append)  # was IsADirectoryError: [Errno 21]
    assert res["jobs"]["toy"]["computed"] == ["j1"]
    assert res["sections"]["toy"]["summary"] == {"values": [0, 1, 2]}  # the computed result is used
    assert len(notices) == 1 and str(path) in notices[0] and "a directory" in notices[0], notices
    assert "j1.json.kept" in notices[0], notices[0]
    kept = store_module.kept_path(path)
    assert json.loads(kept.read_text())["result"]["value"] == 1  # ... and kept
    assert (path / "inside").read_text() == "the user's"  # the directory is left alone
    assert store.lookup("toy", "j1", config)[1].startswith("a directory")


def test_a_record_larger_than_the_bound_is_refused_unread(tmp_path, monkeypatch):
    store, config, record = _saved(tmp_path)
    size = store.path("s", "k").stat().st_size
    monkeypatch.setattr(store_module, "MAX_RECORD_BYTES", size - 1)
    got, why = store.lookup("s", "k", config, CODE)
    assert got is None and f"{size:,} bytes" in why and f"{size - 1:,}" in why, why
    monkeypatch.setattr(store_module, "MAX_RECORD_BYTES", size)
    assert store.lookup("s", "k", config, CODE) == (record, None)


@needs_fifo
def test_a_fifo_record_does_not_block_the_command(toy, tmp_path):
    invoke = CliRunner().invoke
    assert invoke(cli.app, ["reproduce", "toy", "--out", str(tmp_path)]).exit_code == 0
    path = tmp_path / "jobs" / "toy" / "j0.json"
    path.unlink()
    os.mkfifo(path)
    res = _within(60, lambda: invoke(cli.app, ["reproduce", "toy", "--out", str(tmp_path), "--json"]), path)
    assert res.exit_code == 0, (res.stderr, res.exception)
    warnings = [line for line in res.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and str(path) in warnings[0] and "FIFO" in warnings[0], res.stderr
    assert json.loads(res.stdout)["jobs"]["toy"]["computed"] == ["j0"] and path.is_file()


@needs_fifo
def test_a_fifo_summary_is_refused_unread(toy, tmp_path):
    runner.reproduce(["toy"], out=tmp_path)
    summary = tmp_path / "toy.json"
    summary.unlink()
    os.mkfifo(summary)

    def read() -> str:
        with pytest.raises(InvalidSummary) as err:
            read_summary(summary, "toy", tmp_path)
        return str(err.value)

    message = _within(20, read, summary)
    assert str(summary) in message and "FIFO" in message and "posenc reproduce toy" in message, message


@needs_fifo
def test_a_fifo_claim_does_not_block_and_is_taken_over_when_old(tmp_path):
    path = tmp_path / "k.claim"
    os.mkfifo(path)
    old = time.time() - 3600
    os.utime(path, (old, old))
    claim = _within(20, lambda: acquire_claim(path, timeout=60), path)
    assert claim is not None and claim.owned() and path.is_file()
    claim.release()


# ------------------------------------------------------------------ records relabelled as another job's
def _relabelled(record: dict, key: str, digest: str) -> dict:
    """``record`` claiming to be job ``key`` of the config with ``digest``, its checksum recomputed."""
    fields = {**record, "key": key, "digest": digest}
    fields.pop("checksum")
    blob = json.dumps({f: fields[f] for f in JOB_FIELDS[:-1]}, indent=None, allow_nan=False).encode("utf-8")
    return {**fields, "checksum": hashlib.sha256(blob).hexdigest()}


def test_another_jobs_record_relabelled_with_this_jobs_key_and_digest_is_refused(tmp_path):
    store = JobStore(tmp_path)
    a = store.save("s", "a", {"seed": 0}, {"r": 0.0}, 0.5, CODE)
    b = store.save("s", "b", {"seed": 1}, {"r": 1.0}, 0.5, CODE)
    store.path("s", "a").write_text(json.dumps(_relabelled(b, "a", a["digest"])))
    got, why = store.lookup("s", "a", {"seed": 0}, CODE)
    assert got is None and "another job's" in why, why
    # a record that names its key and config as save() writes them still loads (records of earlier runs)
    store.path("s", "a").write_text(json.dumps(a))
    assert store.lookup("s", "a", {"seed": 0}, CODE) == (a, None)


def test_a_relabelled_record_is_recomputed_not_summarised(toy, tmp_path):
    runner.reproduce(["toy"], out=tmp_path)
    store = JobStore(tmp_path)
    j1 = json.loads(store.path("toy", "j1").read_text())
    j2 = json.loads(store.path("toy", "j2").read_text())
    store.path("toy", "j1").write_text(json.dumps(_relabelled(j2, "j1", j1["digest"])))
    notices: list[str] = []
    res = runner.reproduce(["toy"], out=tmp_path, notice=notices.append)
    assert res["sections"]["toy"]["summary"] == {"values": [0, 1, 2]}  # not [0, 2, 2]
    assert res["jobs"]["toy"]["computed"] == ["j1"]
    assert len(notices) == 1 and "j1.json" in notices[0] and "another job's" in notices[0], notices


def test_a_directory_at_a_claim_path_is_one_error_naming_it(tmp_path):
    path = tmp_path / "k.claim"
    path.mkdir()
    old = time.time() - 3600
    os.utime(path, (old, old))
    with pytest.raises(OSError, match="k.claim is a directory, not a claim file"):
        acquire_claim(path, timeout=60)  # was IsADirectoryError from unlink()
    assert path.is_dir()
