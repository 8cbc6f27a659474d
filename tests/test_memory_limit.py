"""One memory limit from every source (#40 part 1): ``MemAvailable``, ``RLIMIT_AS`` less the mapped
address space, the cgroup's limit less its usage (v2 and v1, every level up to the root) and
``$POSENC_MAX_MEMORY``; the smallest wins and every refusal names it.

The cgroup is faked with a temporary file tree (``$POSENC_CGROUP_ROOT``), the address-space limit
is set in a subprocess; there, the giant requests of the library and the CLI are refused before
they allocate (peak RSS of the refusing process).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from posenc import _memory_sources as sources
from posenc import _resources
from posenc._memory_sources import Headroom, cgroup_headroom, memory_headroom, rlimit_headroom
from posenc._resources import LIMIT_ENV, Limit, default_limit, library_limit, memory_limit

GiB, MiB = 2**30, 2**20
ROOT = Path(__file__).resolve().parents[1]


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


# ------------------------------------------------------------------ the cgroup, faked
def test_cgroup_v2_reads_every_level_and_the_tightest_wins(tmp_path):
    # /a/b (this process) has no limit of its own; /a has 4 GiB with 3 GiB in use; the root has 6 GiB, 1 in use
    write(tmp_path / "a" / "b" / "memory.max", "max\n")
    write(tmp_path / "a" / "b" / "memory.current", str(GiB))
    write(tmp_path / "a" / "memory.max", str(4 * GiB))
    write(tmp_path / "a" / "memory.current", str(3 * GiB))
    write(tmp_path / "a" / "memory.stat", f"anon 123\ninactive_file {512 * MiB}\nactive_file 7\n")
    write(tmp_path / "memory.max", str(6 * GiB))
    write(tmp_path / "memory.current", str(GiB))
    room = cgroup_headroom(tmp_path, "0::/a/b\n")
    assert room.nbytes == 4 * GiB - (3 * GiB - 512 * MiB)  # reclaimable page cache is not counted as usage
    assert room.source == f"the cgroup's memory.max of 4 GiB less the 2.5 GiB in use ({tmp_path / 'a'})"
    write(tmp_path / "memory.current", str(5 * GiB + 1))  # now the root is tighter
    assert cgroup_headroom(tmp_path, "0::/a/b\n").nbytes == GiB - 1


def test_cgroup_v1_and_the_hybrid_layout(tmp_path):
    v1 = tmp_path / "memory"
    write(v1 / "job" / "memory.limit_in_bytes", str(2 * GiB))
    write(v1 / "job" / "memory.usage_in_bytes", str(GiB + 256 * MiB))
    write(v1 / "job" / "memory.stat", f"cache 5\ntotal_inactive_file {256 * MiB}\n")
    write(v1 / "memory.limit_in_bytes", "9223372036854771712")  # the kernel's "no limit"
    write(v1 / "memory.usage_in_bytes", str(10 * GiB))
    proc = "12:cpu,cpuacct:/x\n4:memory:/job\n0::/\n"
    room = cgroup_headroom(tmp_path, proc)
    assert room.nbytes == GiB and "memory.limit_in_bytes of 2 GiB less the 1 GiB in use" in room.source
    # cgroup v2 mounted at unified/ beside v1 (systemd's hybrid layout), with a tighter limit
    write(tmp_path / "unified" / "svc" / "memory.max", str(GiB))
    write(tmp_path / "unified" / "svc" / "memory.current", str(768 * MiB))
    room = cgroup_headroom(tmp_path, proc.replace("0::/", "0::/svc"))
    assert room.nbytes == 256 * MiB and "memory.max of 1 GiB" in room.source


def test_cgroup_path_missing_from_the_mount_falls_back_to_its_root(tmp_path):
    # inside a container the mount's root is the container's cgroup, whatever /proc/self/cgroup names
    write(tmp_path / "memory.max", str(4 * GiB))
    write(tmp_path / "memory.current", str(100 * MiB))
    assert cgroup_headroom(tmp_path, "0::/docker/0123abcd\n").nbytes == 4 * GiB - 100 * MiB
    assert cgroup_headroom(tmp_path, "").nbytes == 4 * GiB - 100 * MiB  # /proc/self/cgroup unreadable


@pytest.mark.parametrize("proc", ["garbage", "0::/../../etc\n", "4:memory\n", ":::\n", "0::/a\n0::/b\n"])
def test_cgroup_odd_input_reads_nothing_outside_the_tree_and_never_raises(tmp_path, proc):
    assert cgroup_headroom(tmp_path, proc) is None  # an empty tree: no limit anywhere
    write(tmp_path / "memory.max", "not a number")
    assert cgroup_headroom(tmp_path, proc) is None


def test_cgroup_over_its_limit_has_no_room(tmp_path):
    write(tmp_path / "memory.max", str(GiB))
    write(tmp_path / "memory.current", str(2 * GiB))
    assert cgroup_headroom(tmp_path, "0::/\n").nbytes == 0


def test_cgroup_root_comes_from_the_environment(tmp_path, monkeypatch):
    write(tmp_path / "memory.max", str(3 * GiB))
    monkeypatch.setenv(sources.CGROUP_ROOT_ENV, str(tmp_path))
    room = cgroup_headroom()
    assert room is not None and room.nbytes == 3 * GiB and str(tmp_path) in room.source
    assert room in memory_headroom()


# ------------------------------------------------------------------ the address-space limit
def test_rlimit_is_read_only_when_set():
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    room = rlimit_headroom()
    if soft == resource.RLIM_INFINITY:
        assert room is None
    else:
        assert room is not None and 0 <= room.nbytes < soft and "RLIMIT_AS" in room.source


def test_rlimit_less_the_mapped_address_space(monkeypatch):
    monkeypatch.setattr(sources.resource, "getrlimit", lambda which: (8 * GiB, 8 * GiB))
    monkeypatch.setattr(sources, "mapped_bytes", lambda: 3 * GiB)
    room = rlimit_headroom()
    assert room == Headroom(5 * GiB, "the address-space limit RLIMIT_AS (ulimit -v) of 8 GiB less the 3 GiB "
                                     "already mapped")


# ------------------------------------------------------------------ the smallest source wins
@pytest.fixture
def fake_sources(monkeypatch):
    rooms = [Headroom(20 * GiB, "the memory available now (MemAvailable, 20 GiB)"),
             Headroom(6 * GiB, "the address-space limit RLIMIT_AS (ulimit -v) of 8 GiB less the 2 GiB already mapped"),
             Headroom(3 * GiB, "the cgroup's memory.max of 4 GiB less the 1 GiB in use (/sys/fs/cgroup)")]
    monkeypatch.setattr(_resources, "memory_headroom", lambda: list(rooms))
    monkeypatch.delenv(LIMIT_ENV, raising=False)
    return rooms


def test_the_smallest_source_sets_the_limit_and_is_named(fake_sources, monkeypatch):
    lib = library_limit()
    assert int(lib) == int(0.8 * 3 * GiB) and lib.source == f"80% of {fake_sources[2].source}"
    assert int(default_limit()) == int(0.5 * 3 * GiB) and default_limit().source.startswith("50% of the cgroup's")
    assert _resources.available_memory() == 3 * GiB
    fake_sources.pop()  # no cgroup limit: the address space decides
    assert library_limit().source.startswith("80% of the address-space limit RLIMIT_AS")
    monkeypatch.setenv(LIMIT_ENV, "1G")  # below every measured share: the variable decides
    assert int(library_limit()) == GiB and library_limit().source == "set by $POSENC_MAX_MEMORY"
    assert int(default_limit()) == GiB
    monkeypatch.setenv(LIMIT_ENV, "64G")  # above them: it cannot raise the limit past what the process may take
    assert int(library_limit()) == int(0.8 * 6 * GiB)
    monkeypatch.setenv(LIMIT_ENV, "off")  # the library's guard off; the CLI keeps its measured default
    assert library_limit() is None and int(default_limit()) == int(0.5 * 6 * GiB)


def test_nothing_measurable_falls_back(monkeypatch):
    monkeypatch.setattr(_resources, "memory_headroom", lambda: [])
    monkeypatch.delenv(LIMIT_ENV, raising=False)
    lim = library_limit()
    assert int(lim) == int(0.8 * _resources.FALLBACK_BYTES) and "could not be read" in lim.source


@pytest.mark.parametrize("bad", [0, -0.5, 1.5, float("nan"), True, "0.5", None])
def test_memory_limit_bad_fraction(bad):
    with pytest.raises(ValueError, match="fraction must be a number in \\(0, 1\\]"):
        memory_limit(bad)


def test_refusal_names_the_measured_source(fake_sources):
    with pytest.raises(_resources.FootprintError) as info:
        _resources.check_footprint(10 * GiB, "num_features=10", "the thing")
    msg = str(info.value)
    assert "more than the limit of 2.4 GiB (80% of the cgroup's memory.max of 4 GiB less the 1 GiB in use" in msg
    assert msg.endswith("reduce num_features, or run where more memory is free, or turn the check off with "
                        "POSENC_MAX_MEMORY=off")
    with pytest.raises(ValueError, match=r"limit of 1\.5 GiB \(50% of the cgroup's memory\.max"):
        _resources.check_budget(10 * GiB, default_limit(), "analysing", "--num-points")


# ------------------------------------------------------------------ giant requests, in a subprocess
_SCRIPT = textwrap.dedent('''
    import contextlib, io, json, resource, sys
    import torch
    from posenc._resources import FootprintError, available_memory
    from posenc.cli import app
    from posenc.encodings import create_encoding

    def status(key):
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024

    def cli(*args):
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                app([str(a) for a in args])
                code = 0
            except SystemExit as stop:
                code = stop.code
        return code, err.getvalue()

    mode = sys.argv[1]
    torch.set_num_threads(1)
    sin = create_encoding("sinusoidal", num_features=2**17)
    rff = create_encoding("rff", in_dim=3, num_features=2**14)
    circ = create_encoding("circulant", num_features=2**15)
    cape = create_encoding("cape", in_dim=2, num_features=2**15)
    cape.train()
    small = torch.rand(4, 3)
    # warm up every lazy initialisation with small calls and small refused ones
    sin(small[:, :1]); rff(small); circ(small[:, :1]); cape(small[None, :, :2]);
    for command in ("analyze", "fit-image", "fit-signal"):
        cli(command, "--set", "num_features=64", "--max-memory", "1K")
    if mode == "rlimit":  # ulimit -v 8000000 (8 GB), as a new user would try (less on a machine with less free)
        vm = status("VmSize")
        cap = vm + min(8000000 * 1024 - vm, available_memory() // 2)
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    base = status("VmHWM")
    api = {
        "create_encoding rff num_features=2**30+2": lambda: create_encoding("rff", in_dim=3, num_features=2**30 + 2),
        "sinusoidal forward": lambda: sin(torch.arange(10**6.0)[:, None]),                      # ~488 GiB
        "rff forward": lambda: rff(torch.rand(2 * 10**6, 3)),                                  # ~122 GiB
        "circulant forward": lambda: circ(torch.rand(10**6, 1)),                               # ~600 GiB
        "cape 2D forward": lambda: cape(torch.rand(64, 10**4, 2) * 2 - 1),                     # ~240 GiB
    }
    rows = []
    for name, call in api.items():
        try:
            call()
            rows.append({"case": name, "result": "ran"})
        except FootprintError as err:
            rows.append({"case": name, "result": "refused", "message": str(err)})
        except Exception as err:
            rows.append({"case": name, "result": type(err).__name__, "message": str(err)[:400]})
        rows[-1]["delta_mb"] = (status("VmHWM") - base) / 2**20
    for args in (["analyze", "--set", "num_features=100000000"], ["analyze", "--num-points", "2000000000"],
                 ["fit-image", "--encoding", "rff", "--set", "num_features=100000000"],
                 ["fit-image", "--size", "100000"],
                 ["fit-signal", "--encoding", "sinusoidal", "--set", "num_features=100000000"]):
        code, err = cli(*args)
        rows.append({"case": " ".join(args), "code": code, "stderr": err, "delta_mb": (status("VmHWM") - base) / 2**20})
    print(json.dumps({"rows": rows, "peak_mb": status("VmHWM") / 2**20}))
''')

#: what each mode's refusals must name as the limit's source
SOURCE = {"cgroup": "memory.max of 4 GiB less the", "rlimit": "address-space limit RLIMIT_AS (ulimit -v) of "}


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmHWM from /proc (Linux)")
@pytest.mark.parametrize("mode", ["cgroup", "rlimit"])
def test_giant_requests_are_refused_before_allocation_naming_the_source(mode, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != LIMIT_ENV}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])
    if mode == "cgroup":  # a container with memory.max of 4 GB, 200 MiB of it in use (more where less is free)
        write(tmp_path / "memory.max", str(4 * GiB))
        write(tmp_path / "memory.current", str(4 * GiB - min(4 * GiB - 200 * MiB, _resources.available_memory() // 2)))
        env[sources.CGROUP_ROOT_ENV] = str(tmp_path)
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, mode], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.splitlines()[-1])
    rows = out["rows"]
    assert len(rows) == 10
    for row in rows:
        assert row["delta_mb"] < 64, row  # nothing was allocated: peak RSS above the warmed-up process
        if "code" in row:  # the CLI: one error line, exit 2, naming the option or argument and the source
            lines = row["stderr"].splitlines()
            assert row["code"] == 2 and len(lines) == 1 and lines[0].startswith("error: "), row
            assert "would need about" in lines[0] and SOURCE[mode] in lines[0], row
            assert "num_features" in lines[0] or "--num-points" in lines[0] or "--size" in lines[0], row
        else:
            assert row["result"] == "refused", row
            assert SOURCE[mode] in row["message"], row
            arg = "num_features=1073741826" if row["case"].startswith("create") else "positions.shape=("
            assert arg in row["message"], row
    assert out["peak_mb"] < 600, out["peak_mb"]  # the whole process, torch included


@pytest.mark.skipif(not Path("/proc/meminfo").exists(), reason="reads /proc/meminfo (Linux)")
def test_meminfo_is_read_and_always_a_source():
    room = sources.meminfo_headroom()
    assert room is not None and room.nbytes > 0 and "MemAvailable" in room.source
    assert any("MemAvailable" in h.source for h in memory_headroom())


def test_no_room_left_refuses_everything_checked(monkeypatch):
    monkeypatch.setattr(_resources, "memory_headroom", lambda: [Headroom(0, "the cgroup's memory.max of 1 GiB less "
                                                                            "the 1 GiB in use (/x)")])
    monkeypatch.delenv(LIMIT_ENV, raising=False)
    assert library_limit() == 0 and default_limit() == 0 and default_limit().source.startswith("50% of the cgroup")
    with pytest.raises(_resources.FootprintError, match=r"limit of 0 B \(80% of the cgroup's memory\.max"):
        _resources.check_footprint(_resources.CHECK_ABOVE + 1, "n=1", "x")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmHWM from /proc (Linux)")
@pytest.mark.parametrize("mode", ["rlimit", "cgroup"])
def test_every_guarded_library_call_names_the_source_that_binds(mode, tmp_path):
    """The library's guarded calls (tests/test_footprint_library.py's cases, run by its script, which caps
    RLIMIT_AS at 2 GiB above the warmed-up process) refused under an address-space limit, and in a
    cgroup of 4 GiB with 3 GiB in use, each naming the source that set the limit."""
    sys.path.insert(0, str(Path(__file__).parent))
    try:
        import test_footprint_library as lib
    finally:
        sys.path.pop(0)
    env = {k: v for k, v in os.environ.items() if k != LIMIT_ENV}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])
    expected = "of RLIMIT_AS" if mode == "rlimit" else "the cgroup's memory.max of 4 GiB less the 3 GiB in use"
    expected = "the address-space limit RLIMIT_AS (ulimit -v)" if mode == "rlimit" else expected
    if mode == "cgroup":
        write(tmp_path / "memory.max", str(4 * GiB))
        write(tmp_path / "memory.current", str(3 * GiB))
        env[sources.CGROUP_ROOT_ENV] = str(tmp_path)
    proc = subprocess.run([sys.executable, "-c", lib._SCRIPT, json.dumps(lib.CASES), "[]"], capture_output=True,
                          text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(proc.stdout.splitlines()[-1])
    assert len(rows) == len(lib.CASES)
    for row in rows:
        assert row["result"] == "refused" and row["delta_mb"] < 64, row
        assert "would need about" in row["message"] and expected in row["message"] and "=" in row["message"], row
