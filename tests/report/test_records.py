"""Every job, claim and summary record is validated when it is read (#23 §2).

A record that parses but is not a valid record (``null``, a list, no ``"result"``, an empty
result, a string ``"seconds"``, a changed value) is recomputed like a torn one, and the run
says so; an invalid section summary is one ``error:`` line naming the file and what to do.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))
import toyjobs  # noqa: E402

from posenc import cli  # noqa: E402
from posenc.report import runner  # noqa: E402
from posenc.report.store import (  # noqa: E402
    InvalidSummary,
    JobStore,
    acquire_claim,
    atomic_write_json,
    check_job_record,
    check_summary_record,
    config_digest,
)

invoke = CliRunner().invoke


@pytest.fixture
def toy(monkeypatch):
    holder = {"section": toyjobs.section(n=3)}
    monkeypatch.setattr(runner, "get_section", lambda name: holder["section"] if name == "toy" else
                        (_ for _ in ()).throw(ValueError(f"unknown section {name!r}")))
    monkeypatch.setattr(runner, "SECTIONS", {"toy": "x:y"})
    return holder


CODE = {"posenc": "0.1.0", "source": "0123456789abcdef", "torch": "2.13.0+cpu",
        "numerics": "cpu=AVX2 mkl=AVX2 onednn=AVX2", "commit": None}


def _valid(tmp_path) -> tuple[JobStore, dict, dict]:
    store = JobStore(tmp_path)
    config = {"a": 1, "b": [0.5, None]}
    record = store.save("s", "k", config, {"r": 2.5, "curve": [1, 2]}, 0.25, CODE)
    return store, config, record


def _corruptions(record: dict) -> dict[str, object]:
    """Records that parse as JSON but are not valid job records (each must be refused)."""
    out: dict[str, object] = {
        "null": None, "list": [record], "string": "done", "number": 3, "empty object": {},
    }
    for field in ("key", "digest", "config", "code", "seconds", "result", "checksum"):
        out[f"no {field}"] = {k: v for k, v in record.items() if k != field}
    bad_values = {
        "key": ["k", 3, None, "other"], "digest": [None, 7, "0" * 16], "config": [None, [1], "x", {"a": 2}],
        "seconds": ["0.25", None, -1.0, True, [0.25]], "result": [None, {}, [], "ok", 3, {"r": "2.5", "curve": [1, 2]}],
        "checksum": [None, 5, "f" * 64],
        "code": [None, "abc", {}, {**CODE, "source": 3}, {k: v for k, v in CODE.items() if k != "torch"},
                 {**CODE, "extra": "x"}, {**CODE, "commit": 5}],
    }
    for field, values in bad_values.items():
        for value in values:
            out[f"{field}={value!r}"] = {**record, field: value}
    out["extra field"] = {**record, "extra": 1}
    return out


def test_a_valid_record_round_trips(tmp_path):
    store, config, record = _valid(tmp_path)
    assert store.load("s", "k", config) == record
    assert store.lookup("s", "k", config) == (record, None)
    assert check_job_record(record, "k", config_digest(config)) is None
    assert store.lookup("s", "missing", config) == (None, None)
    assert store.lookup("s", "k", {"a": 2}) == (None, None)  # another config: recomputed, not a fault
    assert store.lookup("s", "k", config, CODE) == (record, None)
    assert store.lookup("s", "k", config, {**CODE, "commit": "abc+dirty", "posenc": "9"}) == (record, None)


@pytest.mark.parametrize("field", ["source", "torch", "numerics"])
def test_a_record_of_other_code_is_not_reused_and_says_what_made_it(tmp_path, field):
    from posenc.report.store import OTHER_CODE

    store, config, record = _valid(tmp_path)
    got, why = store.lookup("s", "k", config, {**CODE, field: "other"})
    assert got is None and why.startswith(OTHER_CODE) and CODE["torch"] in why and "01234567" in why


def test_a_result_of_the_wrong_type_is_refused_by_its_schema(tmp_path):
    store, config, record = _valid(tmp_path)
    schema = {"r": float, "curve": [int]}
    assert store.lookup("s", "k", config, CODE, schema) == (record, None)
    for bad_schema, where in (({"r": str}, "result['r']"), ({"curve": [str]}, "result['curve'][0]"),
                              ({"missing": int}, "no 'missing'")):
        got, why = store.lookup("s", "k", config, CODE, bad_schema)
        assert got is None and where in why, why


def test_every_corrupt_job_record_is_refused_with_a_reason(tmp_path):
    store, config, record = _valid(tmp_path)
    digest = config_digest(config)
    for name, bad in _corruptions(record).items():
        if name == "key='k'":
            continue  # the valid value itself
        reason = check_job_record(bad, "k", digest)
        assert isinstance(reason, str) and reason, name
        store.path("s", "k").write_text(json.dumps(bad))
        assert store.load("s", "k", config) is None, name
        got, why = store.lookup("s", "k", config)
        assert got is None and why, name
    for text in ("", "{torn", "[1, 2", "\x00\xff", "NaN"):
        store.path("s", "k").write_text(text)
        got, why = store.lookup("s", "k", config)
        assert got is None and why, text


@pytest.mark.parametrize("bad", ["null", "[]", "{}", '{"host": 3}', '"x"'])
def test_claims_that_are_not_objects_are_treated_as_torn(tmp_path, bad):
    import os
    import time

    path = tmp_path / "j.claim"
    path.write_text(bad)
    old = time.time() - 60
    os.utime(path, (old, old))
    claim = acquire_claim(path, timeout=300)  # torn for long enough: taken over, no AttributeError
    assert claim is not None and claim.owned()
    path.write_text(bad)
    assert not claim.owned()  # someone else's garbage: not ours, no AttributeError
    claim.release()
    assert path.exists()


def test_invalid_job_records_are_recomputed_and_the_run_says_so(toy, tmp_path):
    runner.reproduce(["toy"], out=tmp_path)
    store = JobStore(tmp_path)
    original = json.loads(store.path("toy", "j1").read_text())
    for name, bad in _corruptions(original).items():
        if name == "key='k'":
            bad = {**original, "key": "k"}
        store.path("toy", "j1").write_text(json.dumps(bad))
        notices: list[str] = []
        res = runner.reproduce(["toy"], out=tmp_path, notice=notices.append)
        lists = res["jobs"]["toy"]
        assert lists["computed"] == ["j1"] and lists["skipped"] == ["j0", "j2"], name
        assert list(lists["invalid"]) == ["j1"], name
        assert len(notices) == 1 and "j1.json" in notices[0] and "recomput" in notices[0], (name, notices)
        assert res["sections"]["toy"]["summary"] == {"values": [0, 1, 2]}
        assert store.load("toy", "j1", original["config"])["result"]["value"] == 1


def test_cli_recomputes_invalid_records_with_one_warning_line(toy, tmp_path):
    assert invoke(cli.app, ["reproduce", "toy", "--out", str(tmp_path)]).exit_code == 0
    path = tmp_path / "jobs" / "toy" / "j0.json"
    for bad in ("null", "[]", '{"digest": "x"}', json.dumps({**json.loads(path.read_text()), "seconds": "1"})):
        path.write_text(bad)
        res = invoke(cli.app, ["reproduce", "toy", "--out", str(tmp_path), "--json"])
        assert res.exit_code == 0, (bad, res.stderr, res.exception)
        warnings = [line for line in res.stderr.splitlines() if line.startswith("warning:")]
        assert len(warnings) == 1 and str(path) in warnings[0], res.stderr
        assert "Traceback" not in res.stderr
        assert json.loads(res.stdout)["jobs"]["toy"]["computed"] == ["j0"]


# ------------------------------------------------------------------ section summaries
def _summary(tmp_path, toy) -> dict:
    runner.reproduce(["toy"], out=tmp_path)
    return json.loads((tmp_path / "toy.json").read_text())


def summary_corruptions(rec: dict) -> dict[str, object]:
    out: dict[str, object] = {"null": None, "list": [rec], "string": "x", "empty": {}}
    for field in ("title", "profile", "compute_seconds", "quick_budget_s", "markdown", "command", "section", "summary"):
        out[f"no {field}"] = {k: v for k, v in rec.items() if k != field}
    for field, values in {"title": [None, 3], "profile": ["slow", None], "compute_seconds": ["1", None, -1, True],
                          "quick_budget_s": ["1", None, float("nan")], "markdown": [None, ["x"]],
                          "command": [3, ["posenc"]], "section": ["other", None], "summary": [None, [1], "x"]}.items():
        for value in values:
            out[f"{field}={value!r}"] = {**rec, field: value}
    return out


def test_every_corrupt_summary_is_refused_with_a_reason(toy, tmp_path):
    rec = _summary(tmp_path, toy)
    assert check_summary_record(rec, "toy") is None
    for name, bad in summary_corruptions(rec).items():
        assert check_summary_record(bad, "toy"), name


def test_a_corrupt_summary_of_another_section_is_one_error_line_naming_the_file(toy, monkeypatch, tmp_path):
    rec = _summary(tmp_path, toy)
    other = toyjobs.section(n=2)
    sections = {"toy": toy["section"], "other": other}
    monkeypatch.setattr(runner, "get_section", lambda name: sections[name] if name in sections else
                        (_ for _ in ()).throw(ValueError(f"unknown section {name!r}")))
    monkeypatch.setattr(runner, "SECTIONS", {"toy": "x:y", "other": "x:z"})
    for text in ("null", "[]", json.dumps({**rec, "compute_seconds": "3"}), '{"title": "x"}', "{torn"):
        (tmp_path / "toy.json").write_text(text)
        with pytest.raises(InvalidSummary) as err:
            runner.reproduce(["other"], out=tmp_path)
        assert str(tmp_path / "toy.json") in str(err.value) and "posenc reproduce toy" in str(err.value)
        assert not (tmp_path / "jobs" / "other").exists()  # refused before any work
        res = invoke(cli.app, ["reproduce", "other", "--out", str(tmp_path)])
        lines = res.stderr.splitlines()
        assert res.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), res.stderr
        assert str(tmp_path / "toy.json") in lines[0] and "posenc reproduce toy" in lines[0]
    # rerunning the named section rebuilds its summary: no error
    res = invoke(cli.app, ["reproduce", "toy", "other", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.stderr
    assert check_summary_record(json.loads((tmp_path / "toy.json").read_text()), "toy") is None


def test_write_report_refuses_an_invalid_summary(toy, tmp_path):
    _summary(tmp_path, toy)
    (tmp_path / "toy.json").write_text('{"section": "toy"}')
    with pytest.raises(InvalidSummary, match="toy.json"):
        runner.write_report(tmp_path)
