"""Fuzz harness for the input contract (#10 §5).

For generated bad inputs every public entry point must do one of three things:

* raise a clean ``ValueError``/``TypeError`` whose message names the argument;
* (CLI) print exactly one ``error: ...`` line on stderr and exit with code 2;
* return a correct, finite result (finite, valid input).

Never NaN from finite input, never a traceback, never a silent wrong answer.
Tensors are drawn with NaN/inf, empty and 0-d shapes, wrong dtypes and the
``meta`` device; constructors get non-finite, negative, zero, huge, tiny and
wrongly typed arguments; the CLI gets a table of bad invocations and bad files
generated in a temporary directory. Budgets are small (``max_examples``) so the
module stays within a few seconds of CPU.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from posenc.attention.kernelized import kernelized_attention
from posenc.attention.layers import KernelizedAttention
from posenc.attention.toeplitz import toeplitz_matmul
from posenc.cli import app
from posenc.encodings import available_encodings, create_encoding, encoding_parameters

FUZZ = settings(max_examples=25, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

DTYPES = [torch.float32, torch.float64, torch.float16, torch.int64, torch.bool, torch.complex64]


@st.composite
def tensors(draw, shape=None, min_dims=0, max_dims=4, max_side=5, dtypes=DTYPES):
    """A tensor with a drawn shape (possibly 0-d or empty), dtype, device and special values."""
    if shape is None:
        shape = tuple(draw(st.lists(st.integers(0, max_side), min_size=min_dims, max_size=max_dims)))
    dtype = draw(st.sampled_from(dtypes))
    if draw(st.integers(0, 9)) == 0:
        return torch.empty(shape, dtype=dtype, device="meta")
    seed = draw(st.integers(0, 2**16))
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(shape, generator=gen, dtype=torch.float64)
    if x.numel() and draw(st.booleans()):
        special = draw(st.sampled_from([math.nan, math.inf, -math.inf]))
        x.view(-1)[draw(st.integers(0, x.numel() - 1))] = special
    if dtype.is_complex:
        return x.to(dtype)
    return x.to(dtype)


def is_clean_finite(t: torch.Tensor) -> bool:
    """Data (not meta), floating point, finite (an empty tensor is fine: empty in, empty out)."""
    return t.device.type != "meta" and t.is_floating_point() and bool(torch.isfinite(t).all())


def check_contract(call, names: tuple[str, ...], inputs_ok: bool):
    """Run ``call``; assert the contract. Returns the result or None when refused."""
    try:
        out = call()
    except (ValueError, TypeError) as err:
        msg = str(err)
        assert any(n in msg for n in names), f"error does not name any of {names}: {msg}"
        return None
    assert inputs_ok, "bad input accepted"
    assert torch.isfinite(out).all(), "finite input gave a non-finite result"
    return out


# --------------------------------------------------------------------------- encodings
ENCODINGS = available_encodings()
_BUILT: dict[str, torch.nn.Module] = {}


def built(name: str) -> torch.nn.Module:
    if name not in _BUILT:
        _BUILT[name] = create_encoding(name, in_dim=1).eval()
    return _BUILT[name]


@pytest.mark.parametrize("name", ENCODINGS)
@FUZZ
@given(x=tensors(max_dims=3))
def test_encodings_on_fuzzed_positions(name, x):
    enc = built(name)
    # index encodings (learned tables, sinusoidal) also take integer positions
    dtypes = (torch.float32, torch.float64, torch.float16)
    if getattr(type(enc), "positions_kind", "continuous") in ("index", "any"):
        dtypes += (torch.int64,)
    ok = (x.device.type != "meta" and x.dtype in dtypes and bool(torch.isfinite(x).all())
          and x.dim() >= 1 and x.shape[-1] == 1)
    domain = getattr(enc, "domain", None)
    if ok and domain is not None and getattr(enc, "strict", False):
        ok = bool(((x >= domain[0]) & (x <= domain[1])).all())
    out = check_contract(lambda: enc(x), ("positions",), inputs_ok=True)
    if out is not None:
        assert ok, f"accepted bad positions {x}"
        assert out.shape == (*x.shape[:-1], enc.out_dim)


BAD_VALUES = [math.nan, math.inf, -math.inf, -1, 0, 1e308, 1e-308, 1e20, 1e-20, "x", True, None]
SKIP_ARGS = {"device", "dtype", "in_dim"}


def _numeric_args():
    for name in ENCODINGS:
        for arg, default in encoding_parameters(name).items():
            if arg in SKIP_ARGS or isinstance(default, bool) or not (default is None or isinstance(default, (int, float))):
                continue
            yield name, arg


@pytest.mark.parametrize("name,arg", list(_numeric_args()))
def test_encoding_constructors_on_bad_numbers(name, arg):
    x = torch.linspace(0.0, 0.99, 7, dtype=torch.float64)[:, None]
    for value in BAD_VALUES:
        try:
            enc = create_encoding(name, in_dim=1, dtype=torch.float64, **{arg: value}).eval()
        except (ValueError, TypeError) as err:
            msg = str(err)
            assert arg in msg or "range" in msg or "pass" in msg, f"{name}({arg}={value!r}): {msg}"
            continue
        # accepted: it must give finite features on valid positions (or refuse the positions cleanly),
        # float32 positions included (computed in float32 against float64 buffers)
        check_contract(lambda: enc(x), ("positions",), inputs_ok=True)
        check_contract(lambda: enc(x.float()), ("positions",), inputs_ok=True)


# --------------------------------------------------------------------------- attention
FLOATS = [torch.float32, torch.float64]


@FUZZ
@given(c=tensors(max_dims=2, max_side=9), x=tensors(min_dims=1, max_dims=3, max_side=5),
       method=st.sampled_from(["fft", "direct", "auto"]))
def test_toeplitz_matmul_fuzz(c, x, method):
    n = x.shape[-2] if x.dim() >= 2 else -1
    ok = (is_clean_finite(c) and is_clean_finite(x) and x.dim() >= 2 and n >= 1 and c.dim() >= 1
          and c.shape[-1] == 2 * n - 1)
    if ok:
        try:
            torch.broadcast_shapes(c.shape[:-1], x.shape[:-2])
        except RuntimeError:
            ok = False
    out = check_contract(lambda: toeplitz_matmul(c, x, method=method), ("coeffs", "x"), inputs_ok=True)
    if out is not None:
        assert ok
        ref = toeplitz_matmul(c.double(), x.double(), method="direct")
        assert torch.allclose(out.double(), ref, rtol=1e-4, atol=1e-5)


@FUZZ
@given(pq=tensors(shape=(1, 2, 3, 4), dtypes=FLOATS + [torch.int64]), pk=tensors(shape=(1, 2, 3, 4), dtypes=FLOATS),
       v=tensors(shape=(1, 2, 3, 2), dtypes=FLOATS), with_c=st.booleans(), zero_keys=st.booleans(),
       method=st.sampled_from(["fft", "dense"]))
def test_kernelized_attention_fuzz(pq, pk, v, with_c, zero_keys, method):
    if zero_keys and pk.device.type != "meta":
        pk = torch.zeros_like(pk)
    coeffs = torch.rand(2, 5, dtype=torch.float64) if with_c else None
    ok = all(is_clean_finite(t) for t in (pq, pk, v))
    check_contract(lambda: kernelized_attention(pq.abs() if pq.is_floating_point() else pq, pk.abs(), v,
                                                coeffs, method=method),
                   ("phi_q", "phi_k", "v", "coeffs"), inputs_ok=ok)


@pytest.mark.parametrize("rpe", ["none", "table", "decay", "alibi"])
@pytest.mark.parametrize("mode", ["softmax", "kernelized"])
@settings(max_examples=8, deadline=None, derandomize=True)
@given(q=tensors(shape=(1, 2, 3, 4), dtypes=FLOATS), k=tensors(shape=(1, 2, 3, 4), dtypes=FLOATS + [torch.bool]),
       v=tensors(shape=(1, 2, 3, 4), dtypes=FLOATS))
def test_kernelized_attention_module_fuzz(rpe, mode, q, k, v):
    att = KernelizedAttention(2, 4, 8, rpe=rpe, mode=mode, dtype=torch.float64)
    ok = all(is_clean_finite(t) for t in (q, k, v))
    check_contract(lambda: att(q.double() if q.is_floating_point() else q, k.double() if k.is_floating_point() else k,
                               v.double() if v.is_floating_point() else v),
                   ("q", "k", "v"), inputs_ok=ok)


# --------------------------------------------------------------------------- CLI
runner = CliRunner()


def one_error_line(args):
    res = runner.invoke(app, [str(a) for a in args])
    lines = res.stderr.splitlines()
    assert res.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (
        args, res.exit_code, res.stderr, res.exception)


def _bad_files(d):
    from PIL import Image

    files = {}
    np.save(d / "nan.npy", np.array([0.1, np.nan, 0.3, 0.4, 0.5]))
    np.save(d / "twod.npy", np.zeros((4, 4)))
    np.save(d / "strings.npy", np.array(["a", "b", "c", "d"]))
    np.save(d / "obj.npy", np.array([1, "a", None, 2.0], dtype=object), allow_pickle=True)
    np.save(d / "scalar.npy", np.float64(3.0))
    good = d / "good.npy"
    np.save(good, np.linspace(0, 1, 16))
    (d / "trunc.npy").write_bytes(good.read_bytes()[:90])
    (d / "zero.npy").write_bytes(b"")
    (d / "text.csv").write_text("0.1\nhello\n0.3\n")
    (d / "inf.csv").write_text("0.1\ninf\n0.3\n0.5\n")
    (d / "x.wav").write_bytes(b"RIFF")
    for name in ("nan.npy", "twod.npy", "strings.npy", "obj.npy", "scalar.npy", "trunc.npy", "zero.npy",
                 "text.csv", "inf.csv", "x.wav"):
        files[name] = ["fit-signal", "--signal", d / name]
    files["dir-signal"] = ["fit-signal", "--signal", d]
    (d / "fake.png").write_text("not an image")
    (d / "empty.png").write_bytes(b"")
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(d / "real.png")
    (d / "trunc.png").write_bytes((d / "real.png").read_bytes()[:40])
    Image.fromarray(np.full((8, 8), 7.0, np.float32)).save(d / "hot.tif")  # float outside [0, 1]
    for name in ("fake.png", "empty.png", "trunc.png", "hot.tif"):
        files[name] = ["fit-image", d / name, "--size", "8"]
    files["dir-image"] = ["fit-image", d, "--size", "8"]
    files["missing"] = ["fit-image", d / "missing.png", "--size", "8"]
    return files


BAD_INVOCATIONS = [
    ["fit-signal", "--model", "svm"],
    ["fit-signal", "--iters", "0"],
    ["fit-signal", "--iters", "-5"],
    ["fit-signal", "--lr", "nan"],
    ["fit-signal", "--lr", "-1"],
    ["fit-signal", "--ridge", "-1", "--model", "lstsq"],
    ["fit-signal", "--set", "sigma"],
    ["fit-signal", "--set", "=3"],
    ["fit-signal", "--set", "in_dim=2"],
    ["fit-signal", "--set", "bogus=1"],
    ["fit-signal", "-e", "nope"],
    ["fit-signal", "--set", "sigma=nan"],
    ["fit-signal", "--set", "sigma=-1"],
    ["fit-signal", "--set", "num_features=0"],
    ["fit-signal", "--set", "num_features=abc"],
    ["fit-signal", "--set", "mode=diagonal"],
    ["fit-signal", "--set", "strict=yes"],
    ["fit-image", "--size", "2"],
    ["fit-image", "--size", "-1"],
    ["fit-image", "--set", "mode=four_direction", "--set", "num_features=6", "--size", "8"],
    ["analyze", "--num-points", "1"],
    ["analyze", "--threshold", "nan"],
    ["analyze", "--threshold", "2"],
    ["analyze", "--suggest", "1"],
    ["analyze", "-e", "sinusoidal", "--suggest", "64"],
    ["analyze", "--set", "domain=1,0"],
    ["analyze", "--set", "domain=a,b"],
    ["analyze", "--max-memory", "0"],
    ["reproduce", "nosuchsection", "--list-jobs"],
    ["reproduce", "--profile", "medium", "--list-jobs"],
    ["reproduce", "--shard", "0/3", "--list-jobs"],
    ["reproduce", "--seeds", "1.5"],
    ["encodings", "--bogus"],
    ["--no-such-flag"],
]


@pytest.mark.parametrize("args", BAD_INVOCATIONS, ids=lambda a: " ".join(map(str, a)))
def test_bad_cli_invocations(args):
    one_error_line([*args, "--threads", "1"] if args[0] in ("fit-signal", "fit-image") else args)


def test_bad_cli_files(tmp_path):
    for args in _bad_files(tmp_path).values():
        one_error_line(args)


@settings(max_examples=15, deadline=None, derandomize=True)
@given(pq=tensors(shape=(1, 2, 6, 3), dtypes=FLOATS), pk=tensors(shape=(1, 2, 6, 3), dtypes=FLOATS + [torch.int64]),
       v=tensors(shape=(1, 2, 6, 2), dtypes=FLOATS), zero_keys=st.booleans(), causal=st.booleans())
def test_decay_and_alibi_attention_fuzz(pq, pk, v, zero_keys, causal):
    from posenc.attention.alibi import alibi_kernelized_attention, alibi_slopes
    from posenc.attention.decay import decay_kernelized_attention

    if zero_keys and pk.device.type != "meta":
        pk = torch.zeros_like(pk)
    ok = all(is_clean_finite(t) for t in (pq, pk, v))
    a = torch.full((2, 1), 1.0, dtype=torch.float64)
    lam = torch.full((2, 1), 0.5, dtype=torch.float64)
    fut = None if causal else (a, lam)
    names = ("phi_q", "phi_k", "v")
    absq = pq.abs() if pq.is_floating_point() else pq
    absk = pk.abs() if pk.is_floating_point() else pk
    check_contract(lambda: decay_kernelized_attention(absq, absk, v, a.to(v.dtype), lam.to(v.dtype), fut),
                   names, inputs_ok=ok)
    check_contract(lambda: alibi_kernelized_attention(absq, absk, v, alibi_slopes(2).to(v.dtype), causal=causal),
                   names, inputs_ok=ok)


@pytest.mark.parametrize("command", [["fit-signal"], ["fit-image", "--size", "8"], ["search", "--steps", "0"],
                                     ["reproduce", "coords", "--list-jobs"]])
@pytest.mark.parametrize("threads", ["0", "-2"])
def test_thread_counts_below_one_are_refused(command, threads):
    # refused with the flag's name, never raised to 1 behind the user's back
    res = runner.invoke(app, [*command, "--threads", threads])
    assert res.exit_code == 2 and res.stderr.strip() == f"error: --threads must be >= 1, got {threads}", res.stderr


# =========================================================================== CAPE (issue #23 §5)
# CAPE's augmentation and encoding on fuzzed limits and positions: a clean error naming the
# argument, or finite output of the right shape; huge finite limits (1e300) must never turn
# into NaN/inf features. Appended by the CAPE work; keep this section at the end of the file.
from posenc.encodings import CAPEEncoding  # noqa: E402
from posenc.positions import cape_augment, grid_cell  # noqa: E402

CAPE_LIMITS = st.one_of(st.sampled_from([math.nan, math.inf, -math.inf, -1.0, 0.0, 1e300, 1e16, 1e15, "x", True,
                                         None]), st.floats(0.0, 1e6, allow_nan=False))
CAPE_ARGS = ("positions", "max_global_shift", "max_local_shift", "max_global_scaling", "min_global_scaling",
             "scaling_distribution", "spacing", "base", "freq_scale", "convention", "num_features")


@settings(max_examples=40, deadline=None, derandomize=True)
@given(x=tensors(max_dims=3, max_side=4), shift=CAPE_LIMITS, local=CAPE_LIMITS, scale=CAPE_LIMITS,
       low=st.sampled_from([None, 0.7, 1.0, 1.5, 0.0, math.nan]), dist=st.sampled_from(["uniform", "log_uniform",
                                                                                      "normal"]),
       spacing=st.sampled_from([1.0, 0.25, 1e300, -1.0, 0.0]))
def test_cape_augment_fuzz(x, shift, local, scale, low, dist, spacing):
    kw = {"max_global_shift": shift, "max_local_shift": local, "max_global_scaling": scale}
    kw = {k: v for k, v in kw.items() if v is not None}
    out = check_contract(lambda: cape_augment(x, min_global_scaling=low, scaling_distribution=dist, spacing=spacing,
                                              generator=torch.Generator().manual_seed(0), **kw),
                         CAPE_ARGS, inputs_ok=True)
    if out is not None:
        assert out.shape == x.shape and out.dtype == x.dtype
        assert is_clean_finite(x) and x.dim() >= 2


@settings(max_examples=40, deadline=None, derandomize=True)
@given(in_dim=st.sampled_from([1, 2]), shift=CAPE_LIMITS, base=st.sampled_from([None, 1e300, 1e15, 10.0, 1.0, 0.5]),
       freq_scale=st.sampled_from([None, 1e15, 1e16, 1.0, -1.0]), scale=st.sampled_from([None, 1.0, 1.4, 1e15, 1e300]),
       convention=st.sampled_from(["authors", "text", "paper"]), width=st.sampled_from([6, 8, 16]),
       train=st.booleans(), magnitude=st.sampled_from([1.0, 1e10, 1e20, 1e30, 1e38]))
def test_cape_encoding_fuzz(in_dim, shift, base, freq_scale, scale, convention, width, train, magnitude):
    kw = {"max_global_shift": shift, "base": base, "freq_scale": freq_scale, "max_global_scaling": scale}
    kw = {k: v for k, v in kw.items() if v is not None}
    try:
        enc = CAPEEncoding(in_dim=in_dim, num_features=width, convention=convention, seed=0, **kw)
    except (ValueError, TypeError) as err:
        assert any(n in str(err) for n in CAPE_ARGS), str(err)
        return
    enc.train(train)
    x = (torch.rand(2, 5, in_dim, generator=torch.Generator().manual_seed(1)) * 2 - 1) * magnitude
    out = check_contract(lambda: enc(x), CAPE_ARGS, inputs_ok=True)
    if out is not None:
        assert out.shape == (2, 5, width)


@settings(max_examples=25, deadline=None, derandomize=True)
@given(x=tensors(max_dims=3, max_side=4, dtypes=FLOATS), endpoint=st.booleans())
def test_grid_cell_fuzz(x, endpoint):
    out = check_contract(lambda: grid_cell(x, endpoint=endpoint), ("positions",), inputs_ok=True)
    if out is not None:
        assert out.shape == (*x.shape[:-2], 1, x.shape[-1]) and bool((out > 0).all())
