"""Results on disk: atomic JSON/PNG writes and a resumable store of finished jobs.

A write goes to a temporary file in the same directory, is flushed to disk and
renamed over the target, so a run killed at any moment leaves either the old
file or the new one, never a torn one. Files get the mode a plain ``open()``
would give them (``0666`` less the umask), not the temporary file's ``0600``.

Several processes may share one run directory (two ``posenc reproduce`` runs,
an array of shards, many hosts on a shared file system): before computing a
job, a driver *claims* it (:meth:`JobStore.claim`, an ``O_EXCL``-created file
naming the owner's host, pid and time, refreshed while the owner lives), so the
processes split the work instead of each computing everything.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import socket
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any


def _clean(obj: Any) -> Any:
    """Make ``obj`` strict-JSON: NaN/inf become None, tuples lists, numpy scalars floats."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item) and getattr(obj, "ndim", 1) == 0:
        return _clean(obj.item())
    if hasattr(obj, "tolist"):
        return _clean(obj.tolist())
    return obj


def to_json(obj: Any, *, indent: int | None = 2) -> str:
    """Serialise ``obj`` as strict JSON (non-finite floats become ``null``)."""
    return json.dumps(_clean(obj), indent=indent, allow_nan=False, sort_keys=False)


_UMASK_LOCK = threading.Lock()


def file_mode() -> int:
    """The mode ``open()`` gives a new file: ``0o666`` less the process umask."""
    with _UMASK_LOCK:
        umask = os.umask(0o022)
        os.umask(umask)
    return 0o666 & ~umask


def atomic_write_bytes(path: str | os.PathLike, data: bytes, fsync: bool = True) -> None:
    """Write ``data`` to ``path`` atomically (temporary file + fsync + rename).

    The file ends with the umask's mode (as ``open(path, "wb")`` would create it).
    ``fsync=False`` skips forcing the data to disk before the rename (the rename is
    still atomic; after a power loss the file may be empty or torn, which a reader
    that validates what it reads, like :meth:`JobStore.load`, treats as missing).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, file_mode())
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            if fsync:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def atomic_write_text(path: str | os.PathLike, text: str, fsync: bool = True) -> None:
    atomic_write_bytes(path, text.encode("utf-8"), fsync)


def atomic_write_json(path: str | os.PathLike, obj: Any, fsync: bool = True) -> None:
    atomic_write_text(path, to_json(obj) + "\n", fsync)


def read_json(path: str | os.PathLike) -> Any:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def config_digest(config: Any) -> str:
    """A short stable hash of a JSON-serialisable config."""
    blob = to_json(config, indent=None).encode("utf-8")
    return hashlib.sha256(blob).hexdigest()[:16]


class JobStore:
    """Finished jobs of one run directory: ``DIR/jobs/<section>/<key>.json``.

    A job counts as finished only if its file exists, parses and was produced
    by the same config (its digest matches); anything else is recomputed.

    Args:
        root: the run directory.
        fsync: force each job record to disk before its rename. Off by default: a
            record is validated when read, so one torn by a power loss is simply
            recomputed, and an fsync per job costs ~10 ms on a virtual disk (more
            on network file systems), twice the per-job budget of the store.
    """

    def __init__(self, root: str | os.PathLike, fsync: bool = False) -> None:
        self.root = Path(root)
        self.fsync = fsync

    def path(self, section: str, key: str) -> Path:
        return self.root / "jobs" / section / f"{key}.json"

    def load(self, section: str, key: str, config: Any) -> dict | None:
        path = self.path(section, key)
        if not path.exists():
            return None
        try:
            record = read_json(path)
        except (OSError, ValueError):
            return None
        if record.get("digest") != config_digest(config):
            return None
        return record

    def save(self, section: str, key: str, config: Any, result: Any, seconds: float) -> dict:
        record = {
            "key": key,
            "digest": config_digest(config),
            "config": _clean(config),
            "seconds": seconds,
            "result": _clean(result),
        }
        # compact JSON: the C encoder (indent falls back to the pure-Python one, 5x slower)
        atomic_write_text(self.path(section, key), to_json(record, indent=None) + "\n", fsync=self.fsync)
        return record

    def claim(self, section: str, key: str, timeout: float = 300.0) -> Claim | None:
        """Claim a job before computing it (see :func:`acquire_claim`); ``None`` if another holds it."""
        return acquire_claim(self.path(section, key).with_suffix(".claim"), timeout)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


HOST = socket.gethostname()


class Claim:
    """A held claim on one job: ``DIR/jobs/<section>/<key>.claim`` (see :meth:`JobStore.claim`)."""

    def __init__(self, path: Path, token: str) -> None:
        self.path, self.token = path, token

    def owned(self) -> bool:
        try:
            return read_json(self.path).get("token") == self.token
        except (OSError, ValueError):
            return False

    def refresh(self) -> None:
        """Touch the file so that others see its owner is alive."""
        if self.owned():
            try:
                os.utime(self.path)
            except OSError:
                pass

    def release(self) -> None:
        if self.owned():
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass

    def __repr__(self) -> str:
        return f"Claim({str(self.path)!r})"


class ClaimKeeper:
    """Refreshes held claims every ``interval`` seconds from a daemon thread."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._claims: set[Claim] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="posenc-claims", daemon=True)
        self._thread.start()

    def add(self, claim: Claim) -> None:
        with self._lock:
            self._claims.add(claim)

    def discard(self, claim: Claim) -> None:
        with self._lock:
            self._claims.discard(claim)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            with self._lock:
                claims = list(self._claims)
            for claim in claims:
                claim.refresh()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        with self._lock:
            claims, self._claims = list(self._claims), set()
        for claim in claims:
            claim.release()


def claim_is_stale(info: dict, age: float, timeout: float) -> bool:
    """A claim is stale when its owner died on this host, or nobody refreshed it for ``timeout`` s."""
    if age > timeout:
        return True
    if info.get("host") == HOST and isinstance(info.get("pid"), int):
        return not _pid_alive(info["pid"])
    return False


def acquire_claim(path: Path, timeout: float = 300.0) -> Claim | None:
    """Create the claim file ``path`` for this process; ``None`` when a live owner holds it.

    The claim file is created with ``O_CREAT | O_EXCL`` (atomic on local and NFSv3+
    file systems) and holds ``{"host", "pid", "time", "token"}``. A claim whose
    owner died on this host, or that was not refreshed for ``timeout`` seconds
    (owners refresh every ``timeout / 5``; see :class:`ClaimKeeper`), is taken
    over. At worst (two takers of one stale claim at the same instant) a job is
    computed twice; results are written atomically, so nothing is torn.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    token = uuid.uuid4().hex
    info = {"host": HOST, "pid": os.getpid(), "time": time.time(), "token": token}
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, file_mode())
        except FileExistsError:
            try:
                age = time.time() - path.stat().st_mtime
                held = read_json(path)
            except FileNotFoundError:
                continue  # released meanwhile: try again
            except (OSError, ValueError):
                held = None  # torn: its writer is between create and write, or died there
            if held is None:
                if age < 5.0:
                    return None
            elif not claim_is_stale(held, age, timeout):
                return None
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(to_json(info) + "\n")
        return Claim(path, token)
    return None

