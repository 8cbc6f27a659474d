import math

import pytest
from scipy import stats as sps

from posenc.experiments.stats import (
    CONTRADICTED,
    HOLDS,
    NOT_CONFIRMED,
    combine_verdicts,
    mean_std,
    paired_difference,
    read_verdict,
    t_interval,
)


def test_t_interval_matches_scipy():
    vals = [0.3, 0.1, 0.25, 0.4, 0.05]
    mean, lo, hi = t_interval(vals)
    ref = sps.t.interval(0.95, len(vals) - 1, loc=sum(vals) / len(vals), scale=sps.sem(vals))
    assert mean == pytest.approx(0.22)
    assert (lo, hi) == pytest.approx(ref, rel=1e-12)


def test_t_interval_hand_computed():
    # two values 0 and 2: mean 1, sd sqrt(2), se 1, t_{0.975, 1} = 12.7062...
    mean, lo, hi = t_interval([0.0, 2.0])
    assert mean == 1.0
    assert hi - mean == pytest.approx(12.706204736, rel=1e-8)
    assert mean - lo == pytest.approx(12.706204736, rel=1e-8)


def test_t_interval_edge_cases():
    assert t_interval([1.5]) == (1.5, -math.inf, math.inf)
    assert all(math.isnan(v) for v in t_interval([]))
    with pytest.raises(ValueError, match="level"):
        t_interval([1.0, 2.0], level=1.5)


def test_paired_difference_pairs_by_seed():
    method = {0: 0.9, 1: 0.9, 2: 0.98, 3: None}
    base = {0: 0.7, 1: 0.75, 2: 0.8, 4: 0.5}
    r = paired_difference(method, base)
    assert r["n"] == 3 and r["dropped"] == 2
    assert r["diffs"] == pytest.approx([0.2, 0.15, 0.18])
    assert r["mean"] == pytest.approx(0.53 / 3)
    assert r["verdict"] == HOLDS and r["holds"] is True


def test_verdicts_three_ways():
    assert read_verdict(0.1, 0.3) == HOLDS
    assert read_verdict(-0.3, -0.1) == CONTRADICTED
    assert read_verdict(-0.1, 0.3) == NOT_CONFIRMED
    assert read_verdict(-0.3, -0.1, "less") == HOLDS
    assert read_verdict(0.1, 0.3, "less") == CONTRADICTED
    assert read_verdict(-0.01, 0.02, "equal", margin=0.05) == HOLDS
    assert read_verdict(0.06, 0.1, "equal", margin=0.05) == CONTRADICTED
    assert read_verdict(0.01, 0.1, "equal", margin=0.05) == NOT_CONFIRMED
    assert read_verdict(-math.inf, math.inf) == NOT_CONFIRMED
    # a margin makes "greater" stricter
    assert read_verdict(0.01, 0.3, margin=0.02) == NOT_CONFIRMED


def test_single_pair_is_never_confirmed():
    r = paired_difference({0: 1.0}, {0: 0.0})
    assert r["verdict"] == NOT_CONFIRMED and r["low"] is None and r["high"] is None


def test_bad_direction_and_margin():
    with pytest.raises(ValueError, match="direction"):
        read_verdict(0.0, 1.0, "bigger")
    with pytest.raises(ValueError, match="margin"):
        read_verdict(-0.1, 0.1, "equal", margin=0.0)


def test_combine_verdicts():
    assert combine_verdicts([HOLDS, HOLDS]) == HOLDS
    assert combine_verdicts([HOLDS, NOT_CONFIRMED]) == NOT_CONFIRMED
    assert combine_verdicts([HOLDS, CONTRADICTED]) == CONTRADICTED
    assert combine_verdicts([]) == NOT_CONFIRMED
    with pytest.raises(ValueError, match="verdict"):
        combine_verdicts(["yes"])


def test_mean_std_drops_non_finite():
    assert mean_std([1.0, None, float("nan"), 3.0]) == {"mean": 2.0, "std": math.sqrt(2.0), "n": 2}
    assert mean_std([]) == {"mean": None, "std": None, "n": 0}
