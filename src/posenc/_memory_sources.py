"""How much memory this process may still take, read from every source that can cap it.

A process on a laptop is limited by the host's free memory; in a container, under SLURM or
in a Ray worker it is limited by other things, and the tightest one is what decides whether
a large allocation succeeds, fails with an error, or gets the process killed:

* ``MemAvailable`` in ``/proc/meminfo``: what the host can give without swapping;
* the address-space limit ``RLIMIT_AS`` (``ulimit -v``) less the address space already
  mapped (``/proc/self/statm``): beyond it an allocation fails;
* the cgroup's memory limit less its usage: cgroup v2's ``memory.max`` and
  ``memory.current``, or v1's ``memory.limit_in_bytes`` and ``memory.usage_in_bytes``
  (what Docker, Kubernetes and SLURM's ``--mem`` set): beyond it the kernel's OOM killer
  ends the process. Every level from the process's cgroup (``/proc/self/cgroup``) up to
  the root is read, since a parent's limit binds its children too; reclaimable page cache
  (``inactive_file`` of ``memory.stat``) is not counted as usage.

:func:`memory_headroom` returns each of them that can be read; :mod:`posenc._resources`
turns the smallest into the limit the library and the CLI check their estimates against.
"""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass
from pathlib import Path

#: Where the cgroup file systems are mounted: cgroup v2 at this path or at ``unified/`` under
#: it (the hybrid layout), v1's memory controller at ``memory/`` under it.
CGROUP_ROOT = "/sys/fs/cgroup"
#: Environment variable that replaces :data:`CGROUP_ROOT`; meant for tests, which fake a cgroup
#: tree in a temporary directory.
CGROUP_ROOT_ENV = "POSENC_CGROUP_ROOT"
#: The file that names this process's cgroups (one ``id:controllers:path`` line per hierarchy).
PROC_CGROUP = "/proc/self/cgroup"
#: A cgroup v1 limit at or above this many bytes means "no limit" (the kernel writes
#: ``PAGE_COUNTER_MAX`` pages, about 2**63 bytes).
V1_UNLIMITED = 2**62


@dataclass(frozen=True)
class Headroom:
    """Bytes this process could still allocate by one measure, and which measure.

    Attributes:
        nbytes: the bytes left (never negative).
        source: a short description for messages, with the numbers it came from
            (``"the cgroup's memory.max of 4 GiB less the 1.2 GiB in use (/sys/fs/cgroup)"``).
    """

    nbytes: int
    source: str


def format_bytes(n: float) -> str:
    """``n`` bytes in binary units, three significant digits (``"1.5 GiB"``, ``"512 B"``)."""
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{int(n)} B"


def _read_int(path: Path) -> int | None:
    """The integer in ``path``; None if it is missing, unreadable or not an integer (v2's ``max``)."""
    try:
        return int(path.read_text(encoding="ascii").strip())
    except (OSError, ValueError):
        return None


def meminfo_headroom() -> Headroom | None:
    """``MemAvailable`` of ``/proc/meminfo`` (else ``os.sysconf``'s available pages), or None."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    n = int(line.split()[1]) * 1024
                    return Headroom(n, f"the memory available now (MemAvailable, {format_bytes(n)})")
    except (OSError, ValueError, IndexError):
        pass
    try:
        n = int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None
    return Headroom(n, f"the memory available now ({format_bytes(n)} of free pages)")


def mapped_bytes() -> int | None:
    """The address space this process has mapped now (``VmSize``, from ``/proc/self/statm``), or None."""
    try:
        with open("/proc/self/statm", encoding="ascii") as fh:
            pages = int(fh.read().split()[0])
        return pages * int(os.sysconf("SC_PAGE_SIZE"))
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def rlimit_headroom() -> Headroom | None:
    """The soft ``RLIMIT_AS`` (``ulimit -v``) less :func:`mapped_bytes`; None when there is no limit."""
    try:
        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    except (OSError, ValueError):
        return None
    if soft == resource.RLIM_INFINITY or soft < 0:
        return None
    mapped = mapped_bytes() or 0
    return Headroom(max(0, soft - mapped), f"the address-space limit RLIMIT_AS (ulimit -v) of "
                                           f"{format_bytes(soft)} less the {format_bytes(mapped)} already mapped")


def _levels(path: str) -> list[str]:
    """``"/a/b"`` -> ``["a/b", "a", ""]``: the cgroup and its ancestors, relative to the mount."""
    parts = [p for p in path.strip().split("/") if p and p not in (".", "..")]
    return ["/".join(parts[:i]) for i in range(len(parts), -1, -1)]


def _inactive_file(directory: Path, key: str) -> int:
    """Reclaimable page cache of a cgroup (``key`` of its ``memory.stat``), 0 if unreadable."""
    try:
        with open(directory / "memory.stat", encoding="ascii") as fh:
            for line in fh:
                name, _, value = line.partition(" ")
                if name == key:
                    return int(value)
    except (OSError, ValueError):
        pass
    return 0


def cgroup_headroom(root: str | os.PathLike | None = None, proc_cgroup: str | None = None) -> Headroom | None:
    """The tightest cgroup memory limit over this process's cgroup and its ancestors, less usage.

    Args:
        root: where the cgroup file systems are mounted (default ``$POSENC_CGROUP_ROOT``, else
            :data:`CGROUP_ROOT`).
        proc_cgroup: the text of ``/proc/self/cgroup`` (default: read it; when it cannot be
            read, the cgroup is taken to be the mount's root, as inside a container).

    Returns:
        The level with the least room (``limit - (usage - inactive_file)``), or None when no
        level has a limit.
    """
    base = Path(root if root is not None else os.environ.get(CGROUP_ROOT_ENV) or CGROUP_ROOT)
    if proc_cgroup is None:
        try:
            proc_cgroup = Path(PROC_CGROUP).read_text(encoding="utf-8", errors="replace")
        except OSError:
            proc_cgroup = ""
    v2_path = v1_path = "/"
    for line in proc_cgroup.splitlines():
        fields = line.split(":", 2)
        if len(fields) != 3:
            continue
        if fields[0] == "0" and fields[1] == "":
            v2_path = fields[2]
        elif "memory" in fields[1].split(","):
            v1_path = fields[2]
    # (mount, path in it, limit file, usage file, memory.stat key, the limit's name in messages)
    layouts = [(base, v2_path, "memory.max", "memory.current", "inactive_file", "memory.max"),
               (base / "unified", v2_path, "memory.max", "memory.current", "inactive_file", "memory.max"),
               (base / "memory", v1_path, "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file",
                "memory.limit_in_bytes")]
    best: Headroom | None = None
    for mount, path, limit_file, usage_file, stat_key, label in layouts:
        for level in _levels(path):
            directory = mount / level if level else mount
            limit = _read_int(directory / limit_file)
            if limit is None or limit >= V1_UNLIMITED:
                continue  # no such level here, or no limit at it ("max" in v2)
            usage = max(0, (_read_int(directory / usage_file) or 0) - _inactive_file(directory, stat_key))
            room = Headroom(max(0, limit - usage), f"the cgroup's {label} of {format_bytes(limit)} less the "
                                                   f"{format_bytes(usage)} in use ({directory})")
            if best is None or room.nbytes < best.nbytes:
                best = room
    return best


def memory_headroom() -> list[Headroom]:
    """Every measure of the memory this process may still take that can be read here.

    In order: ``MemAvailable``, ``RLIMIT_AS`` less the mapped address space, the cgroup's limit
    less its usage (see the module docstring). Sources that do not apply (no ``ulimit -v``, no
    cgroup limit) or cannot be read are left out; the list may be empty.
    """
    return [h for h in (meminfo_headroom(), rlimit_headroom(), cgroup_headroom()) if h is not None]
