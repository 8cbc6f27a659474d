"""The library's memory guard: one estimate, refused before allocation, with a clear message."""

import pytest

from posenc._resources import CHECK_ABOVE, LIMIT_ENV, FootprintError, check_footprint, library_limit


def test_refusal_names_the_argument_and_both_sizes(monkeypatch):
    monkeypatch.setenv(LIMIT_ENV, "1G")
    with pytest.raises(FootprintError, match=r"74\.5 GiB of memory \(n=100000\).*1 GiB \(set by \$POSENC_MAX_MEMORY\)") as info:
        check_footprint(8e10, "n=100000", "the ALiBi bias of 8 heads")
    err = info.value
    assert isinstance(err, MemoryError) and isinstance(err, ValueError)
    assert err.nbytes == 8e10 and err.limit == 2**30 and err.argument == "n=100000"


def test_below_the_limit_and_off_pass(monkeypatch):
    monkeypatch.setenv(LIMIT_ENV, "1G")
    check_footprint(2**30 - 1, "n", "x")
    with pytest.raises(FootprintError):
        check_footprint(2**30 + 1, "n", "x")
    monkeypatch.setenv(LIMIT_ENV, "off")
    assert library_limit() is None
    check_footprint(1e30, "n", "x")


def test_small_requests_are_not_checked_and_explicit_limits_are(monkeypatch):
    monkeypatch.setenv(LIMIT_ENV, "1")  # one byte: every checked request is refused
    check_footprint(CHECK_ABOVE, "n", "x")  # at or below the floor: not even read
    with pytest.raises(FootprintError):
        check_footprint(CHECK_ABOVE + 1, "n", "x")
    with pytest.raises(FootprintError):
        check_footprint(10, "n", "x", limit=5)


def test_default_limit_is_a_share_of_available_memory(monkeypatch):
    monkeypatch.delenv(LIMIT_ENV, raising=False)
    limit = library_limit()
    assert limit is not None and limit > 0


def test_bad_environment_value_names_the_variable(monkeypatch):
    monkeypatch.setenv(LIMIT_ENV, "lots")
    with pytest.raises(ValueError, match=LIMIT_ENV):
        library_limit()
