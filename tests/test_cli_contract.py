"""The CLI's promise (#10 §2-§4): bad input -> one ``error:`` line on stderr and exit 2;
a bug -> its traceback; memory estimated and refused before work; every listed encoding
works where it makes sense and is refused with a reason where it does not."""

import json

import numpy as np
import pytest
import torch
from PIL import Image
from typer.testing import CliRunner

from posenc import _resources
from posenc.cli import app, parse_sets
from posenc.data.images import save_image
from posenc.encodings import available_encodings

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def assert_one_error_line(res, *fragments):
    assert res.exit_code == 2, (res.exit_code, res.stdout, res.stderr, res.exception)
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    assert res.stdout == ""
    for frag in fragments:
        assert frag in lines[0], lines[0]


@pytest.mark.parametrize("args,fragment", [
    (["reproduce", "--seeds", "abc"], "--seeds"),
    (["bogus"], "No such command 'bogus'"),
    (["fit-signal", "--bogus"], "No such option: --bogus"),
    (["fit-signal", "--iters"], "--iters"),
    (["analyze", "--num-points", "1.5"], "--num-points"),
])
def test_usage_errors_are_one_line(args, fragment):
    assert_one_error_line(invoke(*args), fragment)


def test_debug_shows_the_traceback_and_bugs_are_not_swallowed(monkeypatch):
    res = invoke("--debug", "analyze", "--set", "normalize=maybe")
    assert isinstance(res.exception, TypeError) and "normalize" in str(res.exception)

    def broken(*args, **kwargs):
        raise IndexError("a bug")

    monkeypatch.setattr("posenc.analysis.stable_rank", broken)
    res = invoke("analyze", "--num-points", "16")
    assert isinstance(res.exception, IndexError) and res.exit_code == 1  # a traceback, not "error:"


@pytest.mark.parametrize("sets,fragment", [
    (["normalize=maybe"], "normalize must be True or False"),
    (["dtype=int32"], "dtype must be a floating-point"),
    (["dtype=bogus"], "must name a torch dtype"),
    (["device=bogus"], "device must be a torch device"),
    (["sigma=1e308"], "sigma must be in"),
    (["sigma=1e-300"], "sigma must be in"),
    (["num_features=-3"], "num_features"),
    (["device=meta"], "the CLI computes on the CPU"),
    (["sigma=1e20"], "sigma must be in"),
])
def test_set_values_are_validated_not_coerced(sets, fragment):
    args = ["analyze", "--num-points", "16"]
    for item in sets:
        args += ["--set", item]
    assert_one_error_line(invoke(*args), fragment)


def test_set_seed_and_dtype_conversion():
    assert_one_error_line(invoke("analyze", "-e", "rff", "--set", "seed=-1"), "seed must be >= 0")
    assert parse_sets(["dtype=float16", "compute_dtype=torch.float64"]) == {
        "dtype": torch.float16, "compute_dtype": torch.float64}
    res = invoke("analyze", "--num-points", "16", "--set", "dtype=float64", "--json")
    assert res.exit_code == 0, res.stderr


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    np.save(d / "s.npy", 0.5 + 0.4 * np.sin(np.linspace(0, 6, 64)))
    save_image(d / "i.png", torch.rand(8, 8, 3, generator=torch.Generator().manual_seed(0)))
    return d


REFUSED = {  # encoding -> (command prefix, reason) where it does not make sense
    "learned_table": ("", "trainable"),  # fit-*: trainable; analyze: a random table
    "coord_mlp": ("fit-", "trainable parameters"),
    "lff": ("fit-", "learnable_freqs=false"),
}


@pytest.mark.parametrize("name", available_encodings())
def test_every_listed_encoding_works_or_is_refused_with_a_reason(name, files):
    cases = {
        "analyze": ["analyze", "-e", name, "--num-points", "32", "--json"],
        "fit-signal": ["fit-signal", "-e", name, "--signal", files / "s.npy", "--model", "lstsq", "--json"],
    }
    for command, args in cases.items():
        res = invoke(*args)
        refused = name in REFUSED and command.startswith(REFUSED[name][0])
        if refused:
            assert_one_error_line(res, name)
            assert REFUSED[name][1] in res.stderr or "random until trained" in res.stderr
        else:
            assert res.exit_code == 0, (command, res.stderr)
            payload = json.loads(res.stdout)
            assert np.isfinite(payload["stable_rank"])
            if command == "fit-signal":
                assert np.isfinite(payload["test_psnr"])


def test_lff_works_when_fixed(files):
    res = invoke("fit-signal", "-e", "lff", "--signal", files / "s.npy", "--model", "lstsq", "--set",
                 "learnable_freqs=false", "--set", "use_mlp=false", "--json")
    assert res.exit_code == 0, res.stderr
    assert "normalize" not in json.loads(res.stdout)["encoding_repr"]


@pytest.mark.parametrize("name", ["sinusoidal", "basic", "cape"])
def test_fit_image_with_encodings_without_num_features_or_domain(name, files):
    res = invoke("fit-image", files / "i.png", "-e", name, "--size", "8", "--model", "lstsq", "--json")
    assert res.exit_code == 0, res.stderr
    assert np.isfinite(json.loads(res.stdout)["train_psnr"])


@pytest.mark.parametrize("args", [
    ["fit-signal", "--lr", "1e30", "--iters", "30", "--set", "sigma=0.003", "--threads", "1"],
    ["fit-image", "--size", "8", "--model", "linear", "--lr", "1e30", "--iters", "20", "--set", "sigma=0.05",
     "--threads", "1"],
])
def test_diverged_fit_is_an_error(args):
    assert_one_error_line(invoke(*args), "diverged", "--lr")


def test_output_paths_under_a_regular_file(tmp_path, files):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert_one_error_line(invoke("analyze", "--num-points", "16", "--plot", blocker / "p.png"), "is a file")
    assert_one_error_line(invoke("fit-image", files / "i.png", "--size", "8", "--model", "lstsq",
                                 "--save", blocker / "r.png"), "is a file")
    assert_one_error_line(invoke("reproduce", "coords", "--out", blocker / "run"), "is a file")
    assert_one_error_line(invoke("fit-image", "--size", "8", "--save", tmp_path / "r.xyz"), "must end in one of")
    assert_one_error_line(invoke("analyze", "--num-points", "16", "--plot", tmp_path), "is a directory")


def test_save_uses_the_suffix_format(tmp_path, files):
    out = tmp_path / "rec.jpg"
    res = invoke("fit-image", files / "i.png", "--size", "8", "--model", "lstsq", "--set", "sigma=0.05",
                 "--save", out, "--json")
    assert res.exit_code == 0, res.stderr
    assert Image.open(out).format == "JPEG"


def test_bad_signal_and_image_files(tmp_path, monkeypatch):
    (tmp_path / "zero.npy").write_bytes(b"")
    np.save(tmp_path / "empty.npy", np.array([]))
    assert_one_error_line(invoke("fit-signal", "--signal", tmp_path / "zero.npy"), "zero.npy")
    assert_one_error_line(invoke("fit-signal", "--signal", tmp_path / "empty.npy"), "at least 4 samples")
    Image.fromarray(np.zeros((64, 64), np.uint8)).save(tmp_path / "bomb.png")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 100)
    assert_one_error_line(invoke("fit-image", tmp_path / "bomb.png", "--size", "8"), "decompression bomb")


def test_list_jobs_honours_the_shard():
    from posenc.report.runner import balance_shards, plan_jobs

    assert_one_error_line(invoke("reproduce", "--list-jobs", "--shard", "a/b"), "shard")
    assert_one_error_line(invoke("reproduce", "--list-jobs", "--shard", "4/3"), "shard")
    res = invoke("reproduce", "coords", "--list-jobs", "--shard", "2/3", "--threads", "1", "--json")
    assert res.exit_code == 0, res.stderr
    keys = [j["key"] for j in json.loads(res.stdout)["coords"]]
    jobs = plan_jobs("coords", "quick", None)
    mine = balance_shards([j.cost for j in jobs], 3)[1]  # shard 2 of 3, balanced by cost as the runner runs it
    assert keys == [jobs[i].key for i in mine] and 0 < len(keys) < len(jobs)


@pytest.mark.parametrize("args,fragment", [
    (["analyze", "--set", "num_features=10000000"], "num_features"),
    (["analyze", "--num-points", "1000000"], "--num-points"),
    (["analyze", "--suggest", "1000000000"], "--suggest"),
    (["fit-image", "--size", "100000"], "--size"),
    (["fit-image", "--set", "mode=product", "--model", "lstsq"], "mode"),
    (["fit-signal", "--set", "num_features=4000000", "--model", "lstsq"], "num_features"),
])
def test_memory_is_estimated_before_work(args, fragment):
    res = invoke(*args, "--max-memory", "1G")
    assert_one_error_line(res, fragment, "--max-memory", "GiB")


def test_product_mode_with_many_dimensions_is_refused():
    from posenc.encodings import create_encoding

    with pytest.raises(ValueError, match="num_features \\*\\* in_dim"):
        create_encoding("gaussian", in_dim=8, num_features=64, mode="product")


def test_memory_limit_parsing_and_default():
    assert _resources.parse_bytes("512M") == 512 * 2**20
    assert _resources.parse_bytes("1.5GiB") == int(1.5 * 2**30)
    assert _resources.parse_bytes("1000") == 1000
    for bad in ("12x", "-1G", "", "0"):
        with pytest.raises(ValueError, match="--max-memory"):
            _resources.parse_bytes(bad)
    avail = _resources.available_memory()
    assert avail is None or avail > 0
    assert 0 < _resources.default_limit()
    assert_one_error_line(invoke("analyze", "--max-memory", "lots"), "--max-memory")


def test_readme_examples_fit_the_default_limit():
    # the estimates of the README's analyze / fit-image examples are far below any machine's half memory
    from posenc._resources import analysis_bytes, fit_bytes

    assert analysis_bytes(512, 1024) + analysis_bytes(256, 1024) < 2**30
    assert fit_bytes(64 * 64, 128 * 128, 256, 3, "mlp") < 2**30


def test_signal_length_is_read_from_the_npy_header_before_loading(tmp_path):
    path = tmp_path / "huge.npy"
    with open(path, "wb") as fh:  # a header announcing 1e10 samples, and almost no data
        np.lib.format.write_array_header_1_0(fh, {"descr": "<f8", "fortran_order": False, "shape": (10**10,)})
        fh.write(b"\0" * 64)
    assert_one_error_line(invoke("fit-signal", "--signal", path, "--max-memory", "1G"),
                          "10,000,000,000 samples", "--max-memory")
