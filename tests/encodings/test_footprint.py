"""Sizes from the arguments alone (#23 §1): ``encoding_footprint`` against the built modules, and a
memory guard that refuses before it allocates (peak RSS of a subprocess, Python API and CLI)."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from posenc.encodings import available_encodings, create_encoding, encoding_footprint
from posenc.encodings.base import MAX_OUT_DIM, Footprint

# (name, arguments): every registered encoding, in the layouts that change its sizes
CASES = [
    ("gaussian", {}), ("gaussian", dict(in_dim=2, num_features=64)), ("gaussian", dict(in_dim=2, mode="product",
                                                                                    num_features=12)),
    ("gaussian", dict(in_dim=2, num_features=64, mode="four_direction")),
    ("triangle", dict(in_dim=3, num_features=30)), ("triangle", dict(num_features=7, mode="product")),
    ("circulant", dict(generator="sine", num_features=40, in_dim=2)), ("impulse", dict(num_features=9)),
    ("square", dict(in_dim=2, num_features=32, mode="four_direction")), ("sine", {}), ("random", dict(in_dim=4,
                                                                                                     num_features=8)),
    ("basic", {}), ("basic", dict(in_dim=3)), ("basic", dict(in_dim=2, mode="four_direction")),
    ("basic", dict(in_dim=3, mode="product")),
    ("linf", dict(in_dim=2, num_features=20)), ("logf", dict(num_features=6, in_dim=3, mode="product")),
    ("rff", {}), ("rff", dict(in_dim=3, num_features=20)), ("rff", dict(in_dim=2, num_features=24, mode="separable")),
    ("rff", dict(in_dim=2, num_features=16, mode="four_direction")), ("rff", dict(in_dim=2, num_features=4,
                                                                                  mode="product")),
    ("sinusoidal", {}), ("sinusoidal", dict(in_dim=3, num_features=48)),
    ("learned_table", {}), ("learned_table", dict(in_dim=2, grid_size=(3, 5), num_features=7)),
    ("lff", {}), ("lff", dict(num_groups=4, num_features=64, fourier_dim=10, hidden_dim=5)),
    ("lff", dict(learnable_freqs=False, in_dim=4)), ("lff", dict(use_mlp=False, num_features=16, in_dim=3)),
    ("coord_mlp", {}), ("coord_mlp", dict(in_dim=3, num_groups=2, num_features=10, hidden_dim=3)),
    ("cape", {}), ("cape", dict(in_dim=2, num_features=32)),
]


def test_every_registered_encoding_has_a_case():
    assert {name for name, _ in CASES} == set(available_encodings())


@pytest.mark.parametrize("name,kw", CASES)
def test_footprint_matches_the_built_module(name, kw):
    fp = encoding_footprint(name, **kw)
    enc = create_encoding(name, **kw)
    params = sum(p.numel() for p in enc.parameters())
    buffers = sum(b.numel() for b in enc.buffers())
    assert isinstance(fp, Footprint)
    assert (fp.out_dim, fp.parameters, fp.buffers) == (enc.out_dim, params, buffers)
    assert fp.numel == params + buffers and fp.nbytes(torch.float64) == 8 * fp.numel
    assert fp.output_nbytes(10) == 10 * enc.out_dim * 4
    # on the meta device the module has the same shapes and no data
    meta = create_encoding(name, device="meta", **kw)
    assert [t.shape for t in meta.parameters()] == [t.shape for t in enc.parameters()]
    assert [t.shape for t in meta.buffers()] == [t.shape for t in enc.buffers()]
    assert all(t.is_meta for t in [*meta.parameters(), *meta.buffers()])


@pytest.mark.parametrize("name,kw", [
    ("gaussian", dict(num_features=0)), ("gaussian", dict(num_features=2.5)), ("gaussian", dict(mode="diagonal")),
    ("gaussian", dict(in_dim=2, num_features=9)), ("gaussian", dict(in_dim=3, mode="four_direction")),
    ("gaussian", dict(in_dim=8, num_features=64, mode="product")), ("linf", dict(num_features=7)),
    ("rff", dict(num_features=2**31)), ("basic", dict(in_dim=0)), ("learned_table", dict(in_dim=3)),
    ("learned_table", dict(grid_size=(2, 2))), ("learned_table", dict(grid_size="8")),
    ("lff", dict(num_features=10, num_groups=3)), ("lff", dict(fourier_dim=7)),
    ("lff", dict(use_mlp=False, fourier_dim=8)), ("coord_mlp", dict(hidden_dim=0)),
    ("sinusoidal", dict(in_dim=2, num_features=6)), ("cape", dict(num_features=5)), ("cape", dict(in_dim=3)),
    ("gaussian", dict(dtype=torch.int64)), ("gaussian", dict(normalize="yes")), ("rff", dict(seed=-1)),
    ("gaussian", dict(bandwidth=3)), ("impulse", dict(generator="sine")),
    ("learned_table", dict(in_dim=2, grid_size=(2**31 - 1, 2**31 - 1), num_features=1)),  # overflows torch's sizes
    ("lff", dict(hidden_dim=10**30)), ("coord_mlp", dict(hidden_dim=2**50)), ("lff", dict(fourier_dim=2**60)),
])
def test_footprint_refuses_what_the_constructor_refuses(name, kw):
    with pytest.raises((ValueError, TypeError)) as built:
        create_encoding(name, **kw)
    with pytest.raises(built.type) as estimated:
        encoding_footprint(name, **kw)
    assert str(estimated.value) == str(built.value)


def test_footprint_of_unknown_name_names_the_known_ones():
    with pytest.raises(ValueError, match="unknown encoding 'fourrier'.*gaussian"):
        encoding_footprint("fourrier")


def test_product_of_huge_dimension_is_refused_without_computing_it():
    # 1000 ** 10**6 has three million digits: refused from its logarithm, at once
    for make in (encoding_footprint, create_encoding):
        with pytest.raises(ValueError, match=r"num_features \*\* in_dim = 1000\*\*1000000 = about 10\^3e\+06"):
            make("gaussian", in_dim=10**6, num_features=1000, mode="product")


def test_out_dim_limit_is_exact():
    assert encoding_footprint("rff", num_features=MAX_OUT_DIM - 1, in_dim=1).out_dim == MAX_OUT_DIM - 1
    with pytest.raises(ValueError, match="out_dim would be 2.15e\\+09"):
        encoding_footprint("gaussian", num_features=MAX_OUT_DIM + 1)
    assert encoding_footprint("gaussian", in_dim=3, num_features=1290, mode="product").out_dim == 1290**3
    with pytest.raises(ValueError, match="1291\\*\\*3 = 2.15e\\+09"):
        encoding_footprint("gaussian", in_dim=3, num_features=1291, mode="product")


# ------------------------------------------------------------- a refusal allocates next to nothing
_GUARD_SCRIPT = textwrap.dedent('''
    import contextlib, io, json, resource, sys
    import torch
    from posenc.cli import app
    from posenc.encodings import available_encodings, create_encoding, encoding_footprint

    def hwm_mb():
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0

    def vm_mb():
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) / 1024.0

    def cli(*args):
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                app([str(a) for a in args])
                code = 0
            except SystemExit as stop:
                code = stop.code
        return code, err.getvalue()

    def api(name, n, **kw):
        kw = dict(kw, **({} if name == "basic" else {"num_features": n}))
        out = []
        for make in (encoding_footprint, lambda nm, **k: create_encoding(nm, device="meta", **k)):
            try:
                make(name, **kw)
                out.append("ok")
            except ValueError as err:
                out.append("refused: " + str(err))
        if n > 2**31 - 1 and name != "basic":  # refused on the CPU too, before any buffer exists
            try:
                create_encoding(name, **kw)
                out.append("built")
            except ValueError as err:
                out.append("refused: " + str(err))
        return out

    # warm up every import and lazy initialisation with small refused cases, then measure
    cli("analyze", "--set", "num_features=64", "--max-memory", "1K")
    for name in available_encodings():
        api(name, 64)
    base = hwm_mb()
    # a regression fails with an allocation error here instead of exhausting the machine
    cap = int((vm_mb() + 4096) * 2**20)
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    rows = []
    for n in [10**8, 2**31 - 2, 2**31, 10**30]:
        for name in available_encodings():
            res = api(name, n)
            rows.append({"case": f"api {name} {n}", "result": res, "delta_mb": hwm_mb() - base})
        for args in (["analyze", "--set", f"num_features={n}"],
                     ["analyze", "--set", f"num_features={n}", "--set", "normalize=false"],
                     ["fit-image", "--encoding", "rff", "--set", f"num_features={n}"],
                     ["fit-image", "--set", f"num_features={n}", "--model", "lstsq"],
                     ["fit-signal", "--set", f"num_features={n}"],
                     ["fit-signal", "--encoding", "sinusoidal", "--set", f"num_features={n}"]):
            code, err = cli(*args)
            rows.append({"case": " ".join(args), "code": code, "stderr": err, "delta_mb": hwm_mb() - base})
    print(json.dumps(rows))
''')


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmHWM from /proc (Linux)")
def test_refusals_allocate_next_to_nothing():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2] / "src"),
                                                         os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", _GUARD_SCRIPT], capture_output=True, text=True, timeout=600,
                          env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(proc.stdout.splitlines()[-1])
    assert len(rows) == 4 * (len(available_encodings()) + 6)
    for row in rows:
        assert row["delta_mb"] < 300, row  # peak RSS above the warmed-up baseline
        if "code" in row:  # the CLI: one error line, exit 2, from the estimate (not an allocation failure)
            lines = row["stderr"].splitlines()
            assert row["code"] == 2 and len(lines) == 1 and lines[0].startswith("error: "), row
            assert "out of memory" not in lines[0] and "allocate" not in lines[0], row
            assert ("would need about" in lines[0] or "out_dim would be" in lines[0]
                    or "must be divisible" in lines[0] or "outside the 64-bit integer range" in lines[0]), row
        else:
            assert not any("allocate" in r for r in row["result"]), row
    # the estimate is refused for the sizes beyond the limit, for every encoding that takes num_features
    big = [r for r in rows if "code" not in r and r["case"].endswith(f" {2**31}") and " basic " not in r["case"]]
    assert big and all(all(x.startswith("refused: out_dim would be") for x in r["result"]) for r in big), big


def test_every_registered_class_computes_its_footprint_from_arguments():
    from posenc.encodings import encoding_class
    from posenc.encodings.base import CoordinateEncoding, Encoding

    for name in available_encodings():
        cls = encoding_class(name)
        # its own arithmetic, not the base class's fallback that builds on the meta device
        assert cls._footprint.__func__ is not Encoding._footprint.__func__, name
        if issubclass(cls, CoordinateEncoding) and cls._footprint.__func__ is CoordinateEncoding._footprint.__func__:
            assert cls._buffer_numel.__func__ is not CoordinateEncoding._buffer_numel.__func__, name


def test_footprint_fallback_for_an_encoding_defined_elsewhere():
    from torch import nn

    from posenc.encodings.base import Encoding

    class Outside(Encoding):
        def __init__(self, in_dim: int = 2, width: int = 6, device=None, dtype=None) -> None:
            super().__init__(in_dim, width)
            self.proj = nn.Linear(in_dim, width, device=device, dtype=dtype)

        def encode(self, positions):
            return self.proj(positions)

    assert Outside.footprint(width=10) == Footprint(10, 2 * 10 + 10, 0)

    class NoDevice(Encoding):
        def __init__(self, in_dim: int = 1) -> None:
            super().__init__(in_dim, 3)

    with pytest.raises(NotImplementedError, match="override Encoding._footprint"):
        NoDevice.footprint()
