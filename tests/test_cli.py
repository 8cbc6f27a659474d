"""The posenc command: --json contracts, errors as one line with exit code 2."""

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

import posenc
from posenc.cli import app, parse_sets
from posenc.data.images import save_image

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def test_version_and_help():
    assert invoke("--version").stdout.strip() == f"posenc {posenc.__version__}"
    res = invoke("--help")
    assert res.exit_code == 0
    for cmd in ("reproduce", "fit-signal", "fit-image", "analyze", "encodings"):
        assert cmd in res.stdout


def test_parse_sets():
    assert parse_sets(["sigma=0.01", "num_features=64", "normalize=false", "domain=-1,1", "mode=product"]) == {
        "sigma": 0.01, "num_features": 64, "normalize": False, "domain": (-1, 1), "mode": "product"}


def test_fit_signal_json_default_signal():
    res = invoke("fit-signal", "--model", "lstsq", "--set", "sigma=0.004", "--json")
    assert res.exit_code == 0, res.stderr
    payload = json.loads(res.stdout)  # exactly one JSON object on stdout
    for key in ("train_psnr", "test_psnr", "stable_rank", "dp_width"):
        assert isinstance(payload[key], float)
    assert payload["train_psnr"] > payload["test_psnr"] > 15


def test_fit_signal_user_file_linear(tmp_path):
    sig = 0.5 + 0.4 * np.sin(np.linspace(0, 6, 64))
    np.save(tmp_path / "s.npy", sig)
    res = invoke("fit-signal", "--signal", tmp_path / "s.npy", "--model", "linear", "--iters", "50",
                 "--set", "num_features=64", "--json")
    assert res.exit_code == 0, res.stderr
    assert json.loads(res.stdout)["samples"] == 64


def test_fit_image_saves_reconstruction(tmp_path):
    save_image(tmp_path / "in.png", torch.rand(16, 16, 3))
    out = tmp_path / "rec.png"
    res = invoke("fit-image", tmp_path / "in.png", "--size", "16", "--model", "lstsq", "--encoding", "gaussian",
                 "--set", "num_features=32", "--set", "mode=product", "--set", "num_features=8",
                 "--save", out, "--json")
    assert res.exit_code == 0, res.stderr
    payload = json.loads(res.stdout)
    assert payload["channels"] == 3 and payload["saved"] == str(out)
    assert out.read_bytes()[:4] == b"\x89PNG"


def test_analyze_json_and_plot(tmp_path):
    res = invoke("analyze", "--encoding", "rff", "--set", "sigma=20", "--plot", tmp_path / "p.png", "--json")
    assert res.exit_code == 0, res.stderr
    payload = json.loads(res.stdout)
    assert payload["stable_rank"] > 1 and payload["dp_width"] > 0
    assert (tmp_path / "p.png").exists()


def test_encodings_json():
    payload = json.loads(invoke("encodings", "--json").stdout)
    assert "sigma" in payload["gaussian"]


@pytest.mark.parametrize("args,match", [
    (["fit-signal", "--model", "cnn"], "--model"),
    (["fit-signal", "--encoding", "nope"], "unknown encoding"),
    (["fit-signal", "--set", "sigma=-1"], "sigma"),
    (["fit-signal", "--set", "sigma"], "key=value"),
    (["fit-signal", "--set", "num_features=7", "--encoding", "rff"], "num_features"),
    (["analyze", "--set", "in_dim=2"], "in_dim"),
    (["reproduce", "nope"], "unknown section"),
    (["reproduce", "--profile", "slow"], "profile"),
])
def test_errors_are_one_line_exit_2(args, match):
    res = invoke(*args)
    assert res.exit_code == 2
    assert match in res.stderr
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_bad_files(tmp_path):
    np.save(tmp_path / "nan.npy", np.array([0.1, np.nan, 0.2, 0.3]))
    res = invoke("fit-signal", "--signal", tmp_path / "nan.npy")
    assert res.exit_code == 2 and "NaN" in res.stderr
    (tmp_path / "x.png").write_text("nope")
    res = invoke("fit-image", tmp_path / "x.png")
    assert res.exit_code == 2 and "not a readable image" in res.stderr
    res = invoke("fit-image", tmp_path / "missing.png")
    assert res.exit_code == 2 and "no such file" in res.stderr


def test_console_script_entry_point_errors_cleanly(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "posenc.cli", "fit-signal", "--model", "cnn"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().startswith("error:") and "Traceback" not in proc.stderr


def test_import_posenc_stays_light():
    code = ("import sys, posenc; bad = [m for m in ('matplotlib', 'typer', 'rich', 'sklearn', 'posenc.cli', "
            "'posenc.report', 'posenc.experiments', 'torch_geometric') if m in sys.modules]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120).stdout
    assert out.strip() == "[]"


def test_fit_signal_suggests_the_width_when_not_given():
    res = invoke("fit-signal", "--model", "lstsq", "--set", "num_features=512", "--json")
    payload = json.loads(res.stdout)
    assert payload["width_from_suggest_bandwidth"] is True and "sigma=0.002" in payload["encoding_repr"]
    res = invoke("fit-signal", "--model", "lstsq", "--set", "sigma=0.01", "--json")
    assert json.loads(res.stdout)["width_from_suggest_bandwidth"] is False


def test_claim_summary_handles_nested_claims():
    from posenc.cli import _claim_word

    assert _claim_word({"holds": True, "x": 1}) == "yes"
    assert _claim_word({"a": {"holds": True}, "b": {"holds": False}}) == "no"
    assert _claim_word({"a": {"holds": True}, "b": {"holds": True}}) == "yes"
    assert _claim_word({"note": "text"}) == "n/a"


def test_ridge_option_regularises_lstsq():
    base = json.loads(invoke("fit-signal", "--encoding", "rff", "--set", "sigma=50", "--model", "lstsq", "--json").stdout)
    ridge = json.loads(invoke("fit-signal", "--encoding", "rff", "--set", "sigma=50", "--model", "lstsq",
                              "--ridge", "1e-8", "--json").stdout)
    assert ridge["test_psnr"] > base["test_psnr"]  # min-norm RFF lstsq is ill-conditioned
    res = invoke("fit-signal", "--model", "lstsq", "--ridge", "-1")
    assert res.exit_code == 2 and "ridge" in res.stderr


def test_encodings_name_says_what_each_argument_means():
    payload = json.loads(invoke("encodings", "gaussian", "--json").stdout)
    args = payload["arguments"]
    assert payload["name"] == "gaussian" and "sigma" in args and "kernel_width" in args
    assert args["sigma"]["meaning"] and args["kernel_width"]["meaning"]  # from the class's Args block
    assert args["num_features"]["default"] == create_encoding_default("gaussian", "num_features")  # a JSON number
    res = invoke("encodings", "bogus")
    assert res.exit_code == 2 and res.stderr.strip().startswith("error: unknown encoding 'bogus'")


def create_encoding_default(name, arg):
    from posenc.encodings import encoding_parameters

    return encoding_parameters(name)[arg]
