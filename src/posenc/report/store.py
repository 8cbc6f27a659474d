"""Results on disk: atomic JSON/PNG writes and a resumable store of finished jobs.

A write goes to a temporary file in the same directory, is flushed to disk and
renamed over the target, so a run killed at any moment leaves either the old
file or the new one, never a torn one. Files get the mode a plain ``open()``
would give them (``0666`` less the umask), not the temporary file's ``0600``.

A read opens only a regular file of bounded size (:func:`read_record_bytes`): a record path
that is a FIFO, a device (a symlink to ``/dev/zero``), a directory or a huge file is refused
unread, with a reason naming what it is, and the job is recomputed.

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
import stat
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


#: The most bytes a stored record (a job record, a section summary, a claim) may hold. The largest
#: records of the full profile hold a few hundred kB; a file beyond this bound is refused unread.
MAX_RECORD_BYTES = 64 * 2**20


class NotARecordFile(OSError):
    """A record path that is not a regular file (a directory, a FIFO, a device, a socket) or that
    is larger than :data:`MAX_RECORD_BYTES`: refused without reading it (a FIFO would block the
    reader, ``/dev/zero`` would fill its memory).

    Attributes:
        path: the refused path.
        what: what it is, without the path (``"a FIFO (named pipe), not a regular file"``).
        directory: whether it is a directory (which no record can be written over).
    """

    def __init__(self, path: Path, what: str, directory: bool = False) -> None:
        super().__init__(f"{path} is {what}")
        self.path, self.what, self.directory = path, what, directory


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _kind(mode: int) -> str:
    """What a file of ``mode`` (``st_mode``) is, in words: ``"a regular file"``, ``"a FIFO (named pipe)"``, ..."""
    if stat.S_ISREG(mode):
        return "a regular file"
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _not_regular(path: Path, mode: int) -> NotARecordFile:
    try:
        link = f" (a symlink to {os.readlink(path)!r})" if path.is_symlink() else ""
    except OSError:  # replaced meanwhile
        link = ""
    return NotARecordFile(path, f"{_kind(mode)}{link}, not a regular file", stat.S_ISDIR(mode))


def read_record_bytes(path: str | os.PathLike, limit: int | None = None) -> bytes:
    """The bytes of the record file ``path``: a regular file (a symlink to one is followed) of at
    most ``limit`` bytes (default :data:`MAX_RECORD_BYTES`).

    The path is examined before it is opened (opening a FIFO blocks until a writer comes, and a
    device may act on being opened), opened without blocking, examined again through the open
    descriptor (the path may have been replaced meanwhile) and read up to ``limit + 1`` bytes.

    Raises:
        FileNotFoundError: nothing is there.
        NotARecordFile: a directory, FIFO, device or socket, or a file over ``limit`` bytes
            (an :class:`OSError`; the message names the path and what it is).
        OSError: it cannot be read (permissions, I/O).
    """
    path = Path(path)
    limit = MAX_RECORD_BYTES if limit is None else limit
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        raise _not_regular(path, mode)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fh.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise _not_regular(path, info.st_mode)
        size = info.st_size
        blob = b"" if size > limit else fh.read(limit + 1)  # a file that grows meanwhile: read to the bound
    if size > limit or len(blob) > limit:
        raise NotARecordFile(path, f"a file of {max(size, len(blob)):,} bytes or more, more than the "
                                   f"{limit:,} a record may hold")
    return blob


def read_json(path: str | os.PathLike, limit: int | None = None) -> Any:
    """Parse the JSON record file ``path`` (UTF-8), read with :func:`read_record_bytes`.

    Raises:
        FileNotFoundError, NotARecordFile, OSError: as :func:`read_record_bytes`.
        ValueError: not UTF-8 (:class:`UnicodeDecodeError`) or not JSON.
        RecursionError: JSON nested deeper than the parser goes.
    """
    return json.loads(read_record_bytes(path, limit).decode("utf-8"))


def config_digest(config: Any) -> str:
    """A short stable hash of a JSON-serialisable config."""
    blob = to_json(config, indent=None).encode("utf-8")
    return hashlib.sha256(blob).hexdigest()[:16]


#: why a record whose ``digest`` is this job's but whose ``config`` is another's is refused
RELABELLED = "its 'config' is another job's, not the config its 'digest' names (a relabelled record)"
#: the fields of a job record, in the order they are written (``checksum`` last)
JOB_FIELDS = ("key", "digest", "config", "code", "seconds", "result", "checksum")
#: the fields of a record's ``code`` (:func:`posenc.report.provenance.code_signature`) and their types
CODE_FIELDS: dict[str, tuple[type, ...]] = {"posenc": (str,), "source": (str,), "torch": (str,), "numerics": (str,),
                                            "commit": (str, type(None))}


def _checksum(fields: dict) -> str:
    """sha256 of a record's other fields as compact strict JSON (what :meth:`JobStore.save` writes)."""
    blob = json.dumps(fields, indent=None, allow_nan=False, sort_keys=False).encode("utf-8")
    return hashlib.sha256(blob).hexdigest()


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_job_record(record: Any, key: str, digest: str | None = None,
                     schema: Any = None) -> str | None:
    """Why ``record`` (parsed JSON) is not a valid job record of ``key``; ``None`` if it is.

    Schema: an object with exactly the fields of :data:`JOB_FIELDS`: ``key`` (this key),
    ``digest`` (a string; when ``digest`` is given, equal to it), ``config`` (an object),
    ``code`` (what made it: an object with the fields of :data:`CODE_FIELDS`; a record
    written before records named their code has none, and is recomputed), ``seconds`` (a
    finite number >= 0), ``result`` (a non-empty object; with ``schema``, one that
    :func:`posenc.report.schema.check` accepts: every value of the type the section's
    summary reads) and ``checksum`` (the sha256 of the other fields, so that a value
    changed by hand or by a bad disk is caught too). The record names its job twice over: its
    ``key`` must be this key, and (when ``digest`` is given) the ``config`` it holds must be
    the config of that digest, not only its ``digest`` field: anyone can recompute a checksum,
    and another job's record relabelled with this key and this digest still holds the other
    job's config (:data:`RELABELLED`).
    """
    if not isinstance(record, dict):
        return f"not a JSON object but {type(record).__name__ if record is not None else 'null'}"
    missing = [f for f in JOB_FIELDS if f not in record]
    if missing:
        return f"no {missing[0]!r} field"
    extra = [f for f in record if f not in JOB_FIELDS]
    if extra:
        return f"an unknown field {extra[0]!r}"
    if record["key"] != key:
        return f"its key is {record['key']!r}, not {key!r}"
    if not isinstance(record["digest"], str):
        return f"'digest' is not a string: {record['digest']!r}"
    if digest is not None and record["digest"] != digest:
        return "made by another config (its digest differs)"
    if not isinstance(record["config"], dict):
        return f"'config' is not an object: {record['config']!r}"[:200]
    code = record["code"]
    if not isinstance(code, dict) or set(code) != set(CODE_FIELDS) \
            or not all(isinstance(code[f], types) for f, types in CODE_FIELDS.items()):
        return f"'code' is not an object with string fields {', '.join(CODE_FIELDS)}: {code!r}"[:200]
    if not _is_number(record["seconds"]) or record["seconds"] < 0:
        return f"'seconds' is not a finite number >= 0: {record['seconds']!r}"
    if not isinstance(record["result"], dict) or not record["result"]:
        return f"'result' is not a non-empty object: {record['result']!r}"[:200]
    if not isinstance(record["checksum"], str):
        return f"'checksum' is not a string: {record['checksum']!r}"
    try:
        expected = _checksum({f: record[f] for f in JOB_FIELDS[:-1]})
    except ValueError:  # NaN/inf cannot be in a record we wrote
        return "a value that strict JSON does not allow"
    if record["checksum"] != expected:
        return "its checksum does not match its contents (changed after it was written)"
    if digest is not None and config_digest(record["config"]) != digest:
        return RELABELLED
    if schema is not None:
        from posenc.report.schema import check

        problem = check(record["result"], schema, "result")
        if problem is not None:
            return problem
    return None


#: how :meth:`JobStore.lookup` starts the reason of a valid record made by other code
OTHER_CODE = "made by other code: "


class InvalidSummary(ValueError):
    """A section summary ``DIR/<section>.json`` that is not valid: the message names the file and what to do."""


#: a summary's fields that the report reads, with their checks
_SUMMARY_FIELDS: dict[str, tuple[str, Any]] = {
    "section": ("the section's name", None),
    "title": ("a string", lambda v: isinstance(v, str)),
    "profile": ("quick or full", lambda v: v in ("quick", "full")),
    "command": ("a string or null", lambda v: v is None or isinstance(v, str)),
    "quick_budget_s": ("a finite number >= 0", lambda v: _is_number(v) and v >= 0),
    "compute_seconds": ("a finite number >= 0", lambda v: _is_number(v) and v >= 0),
    "markdown": ("a string", lambda v: isinstance(v, str)),
    "summary": ("an object", lambda v: isinstance(v, dict)),
}


def check_summary_record(record: Any, section: str, optional: tuple[str, ...] = ()) -> str | None:
    """Why ``record`` (parsed JSON) is not a valid summary of ``section``; ``None`` if it is.

    Args:
        record: the parsed file.
        section: the section it must be the summary of.
        optional: fields that may be absent (``("markdown",)`` for the snapshots in
            ``docs/data/``, which leave the rendered markdown out); present, they are checked.
    """
    if not isinstance(record, dict):
        return f"not a JSON object but {type(record).__name__ if record is not None else 'null'}"
    for field, (what, ok) in _SUMMARY_FIELDS.items():
        if field not in record:
            if field in optional:
                continue
            return f"no {field!r} field"
        value = record[field]
        if (value != section) if ok is None else not ok(value):
            return f"{field!r} is not {what}: {value!r}"[:200]
    return None


def read_summary(path: str | os.PathLike, section: str, out: str | os.PathLike | None = None,
                 optional: tuple[str, ...] = ()) -> dict:
    """Read and validate the summary of ``section`` at ``path``.

    The file is read as a record (:func:`read_json`: a regular file of at most
    :data:`MAX_RECORD_BYTES`; a FIFO, a device or a directory is refused unread).

    Args:
        path: the summary file.
        section: the section it must be the summary of.
        out: the run directory, named in the command the message suggests.
        optional: fields that may be absent (see :func:`check_summary_record`).

    Raises:
        InvalidSummary: the file is unreadable, not JSON, or not a valid summary; the
            message names the file and the command that rebuilds it.
    """
    path = Path(path)
    try:
        record = read_json(path)
        problem = check_summary_record(record, section, optional)
    except NotARecordFile as err:  # refused unread (a FIFO, a device, a directory, too large)
        problem = err.what
    except UnicodeDecodeError:
        problem = "not UTF-8 text"
    except (ValueError, RecursionError) as err:
        problem = f"not JSON ({(str(err).splitlines() or [type(err).__name__])[0]})"
    except OSError as err:
        problem = f"unreadable ({err.strerror or err})"
    if problem is None:
        return record
    where = f" --out {out}" if out is not None else ""
    raise InvalidSummary(f"{path} is not a valid summary of section {section!r} ({problem}); delete it or "
                         f"rebuild it with `posenc reproduce {section}{where}` (its stored jobs are reused)")


def kept_path(path: Path) -> Path:
    """Where :meth:`JobStore.save` keeps the record of a job whose record path is a directory:
    ``<key>.json.kept`` beside it (no job's record or claim has that suffix)."""
    return path.with_name(path.name + ".kept")


class JobStore:
    """Finished jobs of one run directory: ``DIR/jobs/<section>/<key>.json``.

    A job counts as finished only if its file exists, parses, is a valid record
    (:func:`check_job_record`: every field of the right type, its checksum intact, its
    result of the section's schema), was produced by the same config (its digest
    matches) and by the same code (its ``code`` names this source, torch and
    numerics; see :mod:`posenc.report.provenance`); anything else is recomputed.

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

    def load(self, section: str, key: str, config: Any, code: dict | None = None,
             schema: Any = None) -> dict | None:
        """The finished record of ``key`` for ``config`` (and ``code``), or ``None`` (missing,
        another config or code, invalid)."""
        return self.lookup(section, key, config, code, schema)[0]

    def lookup(self, section: str, key: str, config: Any, code: dict | None = None,
               schema: Any = None) -> tuple[dict | None, str | None]:
        """``(record, None)`` for a finished job; ``(None, None)`` when it is missing or was made by
        another config (both simply recomputed); ``(None, why)`` when its file is torn or not a
        valid record (:func:`check_job_record`, with the section's result ``schema``), which a run
        reports before recomputing it.

        With ``code`` (:func:`posenc.report.provenance.code_signature`), a valid record made by
        other code is not reused: ``(None, OTHER_CODE + description)``, which a run counts and
        reports once per section before recomputing those jobs.

        A path that is not a regular file (a directory, a FIFO, a device such as a symlink to
        ``/dev/zero``) or that is larger than :data:`MAX_RECORD_BYTES` is refused unread, with a
        reason that says where the recomputed result will go (see :meth:`save`).
        """
        path = self.path(section, key)
        try:
            blob = read_record_bytes(path)
        except FileNotFoundError:
            return None, None
        except NotARecordFile as err:  # refused unread: a FIFO would block, /dev/zero fill the memory
            where = (f"the result computed now is kept beside it, in {kept_path(path).name}" if err.directory
                     else "the record computed now replaces it")
            return None, f"{err.what}; {where}"
        except OSError as err:
            return None, f"unreadable ({err.strerror or err})"
        try:
            record = json.loads(blob.decode("utf-8"))
        except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
            return None, "torn or not JSON"
        problem = check_job_record(record, key, schema=schema)
        if problem is not None:
            return None, problem
        digest = config_digest(config)
        if record["digest"] != digest:
            return None, None  # a valid record of another config: recompute, nothing to report
        if config_digest(record["config"]) != digest:  # this job's digest over another job's config
            return None, RELABELLED
        if code is not None:
            from posenc.report.provenance import describe_code, same_code

            if not same_code(record["code"], code):
                return None, OTHER_CODE + describe_code(record["code"])
        return record, None

    def save(self, section: str, key: str, config: Any, result: Any, seconds: float, code: dict) -> dict:
        """Write the record of a finished job (``code``: what computed it, see
        :func:`posenc.report.provenance.code_signature`) and return it.

        The record replaces whatever is at :meth:`path` (a torn record, a FIFO, a symlink to a
        device). Where a directory is in the way, no record can replace it: the record goes to
        :func:`kept_path` beside it instead, and is returned all the same, so that the computed
        result is neither lost nor an error (:meth:`lookup` has already said so).
        """
        record = {
            "key": key,
            "digest": config_digest(config),
            "config": _clean(config),
            "code": _clean(code),
            "seconds": seconds,
            "result": _clean(result),
        }
        record["checksum"] = _checksum(record)
        # compact JSON: the C encoder (indent falls back to the pure-Python one, 5x slower)
        text = to_json(record, indent=None) + "\n"
        path = self.path(section, key)
        try:
            atomic_write_text(path, text, fsync=self.fsync)
        except IsADirectoryError:  # rename(2) puts no file over a directory
            atomic_write_text(kept_path(path), text, fsync=self.fsync)
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
            info = _read_claim(self.path)
        except OSError:
            return False
        return info is not None and info.get("token") == self.token

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


def _read_claim(path: Path) -> dict | None:
    """A claim file's ``{"host", "pid", "time", "token"}``; ``None`` when it is torn or not a claim
    (not an object, or ``host`` or ``token`` not a string).

    Raises:
        FileNotFoundError: there is no claim file.
    """
    try:
        info = read_json(path)
    except FileNotFoundError:
        raise
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(info, dict) or not isinstance(info.get("host"), str) or not isinstance(info.get("token"), str):
        return None
    return info


def claim_is_stale(info: dict, age: float, timeout: float) -> bool:
    """A claim is stale when its owner died on this host, or nobody refreshed it for ``timeout`` s."""
    if age > timeout:
        return True
    if info.get("host") == HOST:
        pid = info.get("pid")
        if isinstance(pid, bool) or not isinstance(pid, int) or not 0 < pid < 2**31:
            return True  # not a process id: no live owner can be behind it
        return not _pid_alive(pid)
    return False


def acquire_claim(path: Path, timeout: float = 300.0) -> Claim | None:
    """Create the claim file ``path`` for this process; ``None`` when a live owner holds it.

    The claim file is created with ``O_CREAT | O_EXCL`` (atomic on local and NFSv3+
    file systems) and holds ``{"host", "pid", "time", "token"}``. A claim whose
    owner died on this host, or that was not refreshed for ``timeout`` seconds
    (owners refresh every ``timeout / 5``; see :class:`ClaimKeeper`), is taken
    over. At worst (two takers of one stale claim at the same instant) a job is
    computed twice; results are written atomically, so nothing is torn. A FIFO or a device
    there is read as a torn claim (never opened: see :func:`read_record_bytes`).

    Raises:
        NotARecordFile: a directory is at ``path`` (an :class:`OSError` naming it): it would
            hold the job forever.
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
                held = _read_claim(path)  # None: torn (its writer is between create and write, or died there)
            except FileNotFoundError:
                continue  # released meanwhile: try again
            except OSError:
                held = None
            if held is None:
                if age < 5.0:
                    return None
            elif not claim_is_stale(held, age, timeout):
                return None
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            except IsADirectoryError:  # no claim can be taken there, nor would one ever be released
                raise NotARecordFile(path, "a directory, not a claim file: remove it to run this job",
                                     directory=True) from None
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(to_json(info) + "\n")
        return Claim(path, token)
    return None

