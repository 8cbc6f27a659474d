"""CLI refusals that named the wrong cause (#40 part 6): each is one ``error:`` line, exit code 2,
naming the argument and the value received.

``--job`` with two sections said "not planned" (with ``--list-jobs``), a directory given as
``--signal`` said "no such file", ``--executor slurm --list-jobs`` exited 0, and the library's
refusal of a network of ``--cells`` cells said "reduce channels", which is no option of
``posenc search``. (``make results --runs FILE`` is in ``tests/test_results_page.py``.)
"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from posenc.cli import app

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def assert_one_error_line(res, *fragments: str, absent: tuple[str, ...] = ()) -> str:
    assert res.exit_code == 2, (res.exit_code, res.stdout, res.stderr, res.exception)
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    assert res.stdout == ""
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    for fragment in absent:
        assert fragment not in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def krpe_key() -> str:
    from posenc.report.runner import plan_jobs

    return plan_jobs("krpe", "quick", None)[0].key


@pytest.mark.parametrize("sections", [["coords", "krpe"], []])
@pytest.mark.parametrize("listing", [True, False])
def test_job_with_several_sections_names_the_section_to_pick(krpe_key, sections, listing):
    args = ["reproduce", *sections, "--job", krpe_key] + (["--list-jobs"] if listing else [])
    assert_one_error_line(invoke(*args), "--job needs exactly one section",
                          f"posenc reproduce krpe --job {krpe_key}", absent=("not planned",))


def test_job_with_several_sections_and_an_unknown_key():
    assert_one_error_line(invoke("reproduce", "coords", "lff", "--job", "no-such-job", "--list-jobs"),
                          "--job needs exactly one section", "'no-such-job'", "--list-jobs")


def test_a_directory_as_signal_is_named_a_directory(tmp_path):
    assert_one_error_line(invoke("fit-signal", "--signal", tmp_path, "--iters", 1),
                          f"--signal {str(tmp_path)!r} is a directory", absent=("no such file",))


@pytest.mark.parametrize("listing", [True, False])
def test_an_unknown_executor_is_refused_even_when_listing(listing):
    args = ["reproduce", "krpe", "--executor", "slurm"] + (["--list-jobs"] if listing else [])
    assert_one_error_line(invoke(*args), "--executor", "'slurm'", "local, ray")


def test_the_librarys_refusal_of_a_cell_network_names_cells_not_channels(monkeypatch):
    # the library's guard checks a network's parameters against $POSENC_MAX_MEMORY when they exceed
    # CHECK_ABOVE (256 MiB); lower both so that 1,000 cells of nb201-micro (29 MiB) are refused there
    from posenc import _resources
    from posenc.search import footprint

    monkeypatch.setenv("POSENC_MAX_MEMORY", "10M")
    monkeypatch.setattr(_resources, "CHECK_ABOVE", 0)
    monkeypatch.setattr(footprint, "CHECK_ABOVE", 0)
    line = assert_one_error_line(invoke("search", "--space", "nb201-micro", "--cells", 1000, "--max-memory", "10T",
                                        "--steps", 0),
                                 "--cells 1000", "reduce --cells", "POSENC_MAX_MEMORY", absent=("channels",))
    assert "MiB" in line
