"""Results on disk: atomic JSON/PNG writes and a resumable store of finished jobs.

A write goes to a temporary file in the same directory, is flushed to disk and
renamed over the target, so a run killed at any moment leaves either the old
file or the new one, never a torn one.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
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


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temporary file + fsync + rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    atomic_write_text(path, to_json(obj) + "\n")


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
    """

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)

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
        atomic_write_json(self.path(section, key), record)
        return record
