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


# ------------------------------------------------------------------ the limit and its source (#40)
def test_limit_is_an_int_that_names_its_source_and_pickles():
    import pickle

    from posenc._resources import Limit

    lim = Limit(3 * 2**30, "set by $POSENC_MAX_MEMORY")
    assert lim == 3 * 2**30 and isinstance(lim, int) and lim // 3 == 2**30
    back = pickle.loads(pickle.dumps(lim))
    assert type(back) is Limit and back == lim and back.source == lim.source
    assert repr(lim) == "Limit(3221225472, 'set by $POSENC_MAX_MEMORY')"


@pytest.mark.parametrize("nbytes,source", [(1.5, "x"), ("1G", "x"), (True, "x"), (10, ""), (10, None), (10, 3)])
def test_limit_bad_input(nbytes, source):
    from posenc._resources import Limit

    with pytest.raises(TypeError, match="nbytes must be an int|source must be a non-empty str"):
        Limit(nbytes, source)


def test_environment_limit_with_its_source_and_the_off_words(monkeypatch):
    from posenc._resources import LIMIT_SOURCE_ENV, env_limit

    monkeypatch.delenv(LIMIT_ENV, raising=False)
    assert env_limit() is False
    monkeypatch.setenv(LIMIT_ENV, "  ")
    assert env_limit() is False
    for word in ("0", "off", "OFF", "none", "no"):
        monkeypatch.setenv(LIMIT_ENV, word)
        assert env_limit() is None
    monkeypatch.setenv(LIMIT_ENV, "2G")
    monkeypatch.setenv(LIMIT_SOURCE_ENV, "a worker's share: 1/4 of 8 GiB")
    lim = env_limit()
    assert lim == 2 * 2**30 and lim.source == "set by $POSENC_MAX_MEMORY: a worker's share: 1/4 of 8 GiB"


def test_explicit_limits_and_the_advice(monkeypatch):
    from posenc._resources import Limit

    with pytest.raises(FootprintError, match=r"limit of 5 B \(given\); reduce n, or run where"):
        check_footprint(10, "n=3", "x", limit=5)
    with pytest.raises(FootprintError, match=r"limit of 5 B \(set by --max-memory\); reduce the positions, or"):
        check_footprint(10, "n=3", "x", limit=Limit(5, "set by --max-memory"), advice="the positions")
    monkeypatch.setenv(LIMIT_ENV, "1G")
    with pytest.raises(FootprintError, match=r"reduce n, or raise \$POSENC_MAX_MEMORY \(e\.g\. POSENC_MAX_MEMORY=64G"):
        check_footprint(2e9, "n=3", "x")


def test_cli_budget_names_the_source_only_when_it_has_one():
    from posenc._resources import Limit, check_budget

    with pytest.raises(ValueError, match=r"limit of 1 KiB; reduce --size, or raise the limit with --max-memory"):
        check_budget(4096, 1024, "fitting", "--size")
    with pytest.raises(ValueError, match=r"limit of 1 KiB \(set by --max-memory\); reduce --size"):
        check_budget(4096, Limit(1024, "set by --max-memory"), "fitting", "--size")
    check_budget(1024, Limit(1024, "x"), "fitting", "--size")  # at the limit: allowed
