import math

import pytest
from scipy import stats as sps

from posenc.experiments.stats import (
    CONTRADICTED,
    HOLDS,
    NOT_CONFIRMED,
    NOT_DECIDED,
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


def test_single_pair_is_never_decided():
    r = paired_difference({0: 1.0}, {0: 0.0})
    assert r["verdict"] == NOT_DECIDED and r["low"] is None and r["high"] is None


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


# ------------------------------------------------------------------ gate, power, multiplicity
from posenc.experiments.stats import (  # noqa: E402
    MIN_PAIRS,
    NOT_DECIDED,
    decision_p,
    detectable_difference,
    holm,
    holm_verdicts,
    seeds_for,
)


def test_fewer_than_three_pairs_read_no_verdict_even_with_a_tight_interval():
    r = paired_difference({0: 0.9, 1: 0.91}, {0: 0.5, 1: 0.5})
    assert r["low"] > 0  # the interval alone would say "holds"
    assert r["verdict"] == NOT_DECIDED and "fewer than 3" in r["note"]
    wide = paired_difference({0: 0.9, 1: 0.1}, {0: 0.5, 1: 0.5})  # no "not confirmed" from two pairs either
    assert wide["verdict"] == NOT_DECIDED and wide["low"] < 0 < wide["high"]
    r = paired_difference({0: 0.9, 1: 0.91, 2: 0.92}, {0: 0.5, 1: 0.5, 2: 0.5})
    assert r["verdict"] == HOLDS and "note" not in r and MIN_PAIRS == 3


def test_gate_pairs_only_converged_runs_and_withholds_below_three():
    m = {0: 0.9, 1: 0.91, 2: 0.95, 3: 0.2}
    b = {0: 0.5, 1: 0.52, 2: 0.49, 3: 0.8}
    conv_m = {0: True, 1: True, 2: True, 3: False}
    conv_b = {0: True, 1: True, 2: True, 3: True}
    r = paired_difference(m, b, method_converged=conv_m, baseline_converged=conv_b)
    # seed 3's unconverged method run would have contradicted the claim: it is left out
    assert r["seeds"] == [0, 1, 2] and r["verdict"] == HOLDS
    assert r["gate"] == {"pairs": [0, 1, 2], "runs": 8, "unconverged": 1, "unconverged_runs": ["method:3"],
                         "failed_runs": []}
    conv_m = {0: True, 1: False, 2: False}
    r = paired_difference(m, b, method_converged=conv_m, baseline_converged=conv_b)
    assert r["verdict"] == NOT_DECIDED and r["holds"] is False
    assert r["note"].startswith("not decided: 3 of 8 runs still learning")
    # one mapping alone gates too; a seed absent from it counts as not converged
    r = paired_difference(m, b, baseline_converged={0: True})
    assert r["verdict"] == NOT_DECIDED and r["n"] == 1


def test_gate_rejects_non_bool_flags():
    with pytest.raises(TypeError, match="method_converged"):
        paired_difference({0: 1.0}, {0: 0.0}, method_converged={0: 1})
    with pytest.raises(TypeError, match="baseline_converged"):
        paired_difference({0: 1.0}, {0: 0.0}, baseline_converged=[True])
    with pytest.raises(ValueError, match="min_pairs"):
        paired_difference({0: 1.0}, {0: 0.0}, min_pairs=1)


def test_decision_p_is_the_level_at_which_the_interval_decides():
    diffs = [0.12, 0.03, 0.2, 0.07, 0.15]
    p = decision_p(diffs)
    # the two-sided one-sample t-test of mean 0
    assert p == pytest.approx(sps.ttest_1samp(diffs, 0.0).pvalue, rel=1e-10)
    # an interval at level 1 - p just touches 0
    _, lo, _ = t_interval(diffs, level=1 - p)
    assert lo == pytest.approx(0.0, abs=1e-12)
    # a margin shifts the null
    assert decision_p(diffs, margin=0.01) == pytest.approx(sps.ttest_1samp(diffs, 0.01).pvalue, rel=1e-10)
    # the side does not matter for the p-value of the decision (contradicted is a decision too)
    assert decision_p([-d for d in diffs]) == pytest.approx(p)
    # equivalence: the level at which the interval just fits inside (-margin, margin)
    small = [0.01, -0.02, 0.015, 0.0, 0.005]
    pe = decision_p(small, "equal", margin=0.05)
    _, lo, hi = t_interval(small, level=1 - pe)
    assert max(hi - 0.05, -0.05 - lo) == pytest.approx(0.0, abs=1e-12)
    assert decision_p([0.3], "greater") == 1.0
    assert decision_p([0.2, 0.2, 0.2]) == 0.0 and decision_p([0.0, 0.0, 0.0]) == 1.0


def test_decision_p_agrees_with_read_verdict():
    for diffs in ([0.1, 0.2, 0.15], [0.1, -0.05, 0.2, 0.0], [-0.3, -0.2, -0.35, -0.1], [0.01, 0.002, -0.004]):
        for direction, margin in (("greater", 0.0), ("less", 0.0), ("greater", 0.02), ("equal", 0.05)):
            _, lo, hi = t_interval(diffs)
            decided = read_verdict(lo, hi, direction, margin) != NOT_CONFIRMED
            assert decided == (decision_p(diffs, direction, margin) < 0.05), (diffs, direction, margin)


def test_holm_against_a_hand_computed_family():
    # sorted: 0.01 (x3 = 0.03), 0.02 (x2 = 0.04), 0.04 (x1 = 0.04)
    r = holm({"a": 0.04, "b": 0.01, "c": 0.02})
    assert r["b"]["p_holm"] == pytest.approx(0.03)
    assert r["c"]["p_holm"] == pytest.approx(0.04)
    assert r["a"]["p_holm"] == pytest.approx(0.04)
    assert all(v["rejected"] for v in r.values())
    # step-down stops at the first acceptance; monotone adjusted p-values; capped at 1
    r = holm({"a": 0.01, "b": 0.03, "c": 0.6})
    assert [r[k]["p_holm"] for k in "abc"] == pytest.approx([0.03, 0.06, 0.6])
    assert [r[k]["rejected"] for k in "abc"] == [True, False, False]
    assert holm({"x": 0.9, "y": 0.8})["x"]["p_holm"] == 1.0
    assert holm({}) == {}


def test_holm_matches_an_independent_step_down_loop():
    import random

    rng = random.Random(3)
    for _ in range(50):
        ps = {i: rng.random() ** 3 for i in range(rng.randint(1, 9))}
        got = holm(ps, alpha=0.05)
        # the textbook procedure: reject p_(k) while p_(k) <= alpha / (m - k + 1)
        order = sorted(ps, key=ps.get)
        rejected = set()
        for k, name in enumerate(order):
            if ps[name] < 0.05 / (len(ps) - k):
                rejected.add(name)
            else:
                break
        assert {n for n, v in got.items() if v["rejected"]} == rejected


def test_holm_bad_input():
    with pytest.raises(ValueError, match="alpha"):
        holm({"a": 0.1}, alpha=0.0)
    with pytest.raises(ValueError, match=r"pvalues\['a'\]"):
        holm({"a": 1.5})
    with pytest.raises(ValueError, match=r"pvalues\['a'\]"):
        holm({"a": float("nan")})


def test_holm_verdicts_withdraw_a_verdict_that_does_not_survive():
    strong = paired_difference({s: 0.5 + 0.01 * s for s in range(6)}, {s: 0.0 for s in range(6)})
    weak = paired_difference({0: 0.1, 1: 0.02, 2: 0.09, 3: 0.01, 4: 0.12, 5: 0.03}, {s: 0.0 for s in range(6)})
    assert strong["verdict"] == HOLDS and weak["verdict"] == HOLDS and 0.0125 < weak["p"] < 0.05
    fam = {"strong": strong, "weak": weak, "null1": paired_difference({s: (-1) ** s * 0.1 for s in range(6)},
                                                                       {s: 0.0 for s in range(6)}),
           "null2": paired_difference({s: (-1) ** (s // 2) * 0.1 for s in range(6)}, {s: 0.0 for s in range(6)})}
    holm_verdicts(fam)
    assert fam["strong"]["holm_verdict"] == HOLDS
    assert fam["weak"]["holm_verdict"] == NOT_CONFIRMED and fam["weak"]["p_holm"] > 0.05
    assert all(c["holm_family"] == 4 for c in fam.values())
    # a not-decided comparison keeps its verdict and does not count towards the family
    gated = paired_difference({0: 1.0, 1: 1.0, 2: 1.0}, {0: 0.0, 1: 0.0, 2: 0.0}, method_converged={0: True})
    fam2 = holm_verdicts({"g": gated, "weak": dict(weak)})
    assert fam2["g"]["holm_verdict"] == NOT_DECIDED and fam2["weak"]["holm_family"] == 1
    assert fam2["weak"]["holm_verdict"] == HOLDS


def test_detectable_difference_closed_form_and_bad_input():
    diffs = [0.1, 0.3, 0.2, 0.25]
    sd = sps.tstd(diffs)
    expect = (sps.t.ppf(0.975, 3) + sps.t.ppf(0.8, 3)) * sd / 2.0
    assert detectable_difference(diffs) == pytest.approx(expect, rel=1e-12)
    assert paired_difference(dict(enumerate(diffs)), dict.fromkeys(range(4), 0.0))["detectable"] == pytest.approx(expect, rel=1e-12)
    assert detectable_difference([0.3]) is None
    with pytest.raises(ValueError, match="power"):
        detectable_difference(diffs, power=1.0)
    with pytest.raises(ValueError, match="diffs"):
        detectable_difference([0.1, float("inf")])
    # seeds_for inverts it
    n = seeds_for(expect, sd)
    assert n == 4 and seeds_for(expect * 1.01, sd) <= 4 and seeds_for(expect * 0.99, sd) == 5
    with pytest.raises(ValueError, match="effect"):
        seeds_for(0.0, sd)
    with pytest.raises(ValueError, match="sd"):
        seeds_for(0.1, -1.0)


def test_paired_difference_needs_mappings():
    with pytest.raises(TypeError, match="method"):
        paired_difference([0.1, 0.2], {0: 0.0})
    with pytest.raises(TypeError, match="baseline"):
        paired_difference({0: 0.1}, (0.0,))


# ------------------------------------------------------------------ crossed designs
def test_crossed_difference_with_one_column_is_the_paired_t_interval():
    from posenc.experiments.stats import crossed_difference

    vals = [0.3, 0.1, 0.25, 0.4, 0.05]
    r = crossed_difference({i: {"g0": v} for i, v in enumerate(vals)})
    mean, lo, hi = t_interval(vals)
    assert r["mean"] == pytest.approx(mean) and (r["low"], r["high"]) == pytest.approx((lo, hi), rel=1e-12)
    assert r["df"] == pytest.approx(4.0)
    # one column: the second factor is not replicated, so no verdict is read (min_pairs of each)
    assert r["verdict"] == NOT_DECIDED and "5 x 1" in r["note"]
    assert crossed_difference({i: {"g0": v} for i, v in enumerate(vals)}, min_pairs=1)["verdict"] == HOLDS


def test_crossed_difference_against_a_hand_computed_two_way_interval():
    from posenc.experiments.stats import crossed_difference

    cells = {0: {0: 1.0, 1: 2.0, 2: 3.0}, 1: {0: 1.0, 1: 2.0, 2: 3.0}, 2: {0: 2.0, 1: 3.0, 2: 4.0},
             3: {0: 0.0, 1: 1.0, 2: 3.0}}
    rows = [sum(v.values()) / 3 for v in cells.values()]  # 2, 2, 3, 4/3
    cols = [sum(cells[r][c] for r in cells) / 4 for c in range(3)]  # 1, 2, 3.25
    var_r = sum((x - sum(rows) / 4) ** 2 for x in rows) / 3 / 4
    var_c = sum((x - sum(cols) / 3) ** 2 for x in cols) / 2 / 3
    se = math.sqrt(var_r + var_c)
    df = (var_r + var_c) ** 2 / (var_r ** 2 / 3 + var_c ** 2 / 2)
    r = crossed_difference(cells)
    assert r["mean"] == pytest.approx(sum(rows) / 4)
    assert r["se"] == pytest.approx(se) and r["df"] == pytest.approx(df)
    half = sps.t.ppf(0.975, df) * se
    assert (r["low"], r["high"]) == pytest.approx((r["mean"] - half, r["mean"] + half))
    assert r["rows"] == 4 and r["columns"] == 3 and r["n"] == 12


def test_crossed_difference_keeps_the_columns_spread_when_every_row_agrees():
    from posenc.experiments.stats import crossed_difference

    # every supernet seed picked the same architecture: the rows agree, the training seeds do not
    cells = {s: {0: 0.010, 1: 0.020, 2: 0.004, 3: 0.015} for s in range(8)}
    r = crossed_difference(cells)
    assert r["high"] - r["low"] > 0.01  # the ground truth's spread is in the interval
    mean, lo, hi = t_interval([0.010, 0.020, 0.004, 0.015])
    assert (r["low"], r["high"]) == pytest.approx((lo, hi))
    none = crossed_difference({s: {0: 0.01, 1: 0.01, 2: 0.01} for s in range(4)})
    assert none["verdict"] == NOT_DECIDED and "zero-width" in none["note"]


def test_crossed_difference_drops_incomplete_rows_and_needs_three_of_each():
    from posenc.experiments.stats import crossed_difference

    r = crossed_difference({0: {0: 1.0, 1: 1.2}, 1: {0: 1.1, 1: 1.3}, 2: {0: 0.9, 1: None}, 3: {0: 1.0, 1: 1.25}})
    assert r["rows"] == 3 and r["dropped"] == 1
    assert r["verdict"] == NOT_DECIDED and "fewer than 3" in r["note"]  # two columns only
    assert crossed_difference({})["note"] == "no complete row of cells"
    with pytest.raises(TypeError, match="cells"):
        crossed_difference([1, 2])
    with pytest.raises(ValueError, match="direction"):
        crossed_difference({0: {0: 1.0}}, direction="up")


def test_a_run_that_failed_to_learn_is_a_finding_and_only_still_learning_runs_drop_a_pair():
    m = {0: 0.99, 1: 0.98, 2: 0.99, 3: 0.97}
    b = {0: 0.16, 1: 0.15, 2: 0.18, 3: 0.95}
    m_state = {0: "converged", 1: "converged", 2: "converged", 3: "converged"}
    b_state = {0: "failed to learn", 1: "failed to learn", 2: "failed to learn", 3: "still learning"}
    r = paired_difference(m, b, method_state=m_state, baseline_state=b_state)
    # the three failures are compared as measured; seed 3's baseline, still learning, drops its pair
    assert r["seeds"] == [0, 1, 2] and r["verdict"] == HOLDS
    assert r["gate"]["failed_runs"] == ["baseline:0", "baseline:1", "baseline:2"]
    assert r["gate"]["unconverged_runs"] == ["baseline:3"]
    # with a second still-learning run only two pairs are left: not decided, naming why
    b_state[2] = "still learning"
    r = paired_difference(m, b, method_state=m_state, baseline_state=b_state)
    assert r["verdict"] == NOT_DECIDED and r["note"].startswith("not decided: 2 of 8 runs still learning")
    # both sides failed: the pair is read (a tie at chance), never dropped
    r = paired_difference({0: 0.1, 1: 0.11, 2: 0.1}, {0: 0.1, 1: 0.1, 2: 0.11},
                          method_state=dict.fromkeys(range(3), "failed to learn"),
                          baseline_state=dict.fromkeys(range(3), "failed to learn"))
    assert r["n"] == 3 and r["verdict"] != NOT_DECIDED


def test_states_are_checked():
    with pytest.raises(ValueError, match="method_state\\[0\\] must be one of"):
        paired_difference({0: 1.0}, {0: 0.0}, method_state={0: "done"})
    with pytest.raises(TypeError, match="baseline_state must be a mapping"):
        paired_difference({0: 1.0}, {0: 0.0}, baseline_state=[("0", "converged")])
    with pytest.raises(ValueError, match="method_converged or method_state, not both"):
        paired_difference({0: 1.0}, {0: 0.0}, method_converged={0: True}, method_state={0: "converged"})


def test_the_smallest_difference_that_matters_lets_a_null_effect_read_contradicted():
    from posenc.experiments.stats import read_verdict

    # a tight interval around zero: "not confirmed" without a sesoi, contradicted with one
    assert read_verdict(-0.004, 0.006, "greater") == NOT_CONFIRMED
    assert read_verdict(-0.004, 0.006, "greater", sesoi=0.01) == CONTRADICTED
    assert read_verdict(-0.006, 0.004, "less", sesoi=0.01) == CONTRADICTED
    # wider than the sesoi: still not confirmed; a sure effect holds, however small
    assert read_verdict(-0.004, 0.012, "greater", sesoi=0.01) == NOT_CONFIRMED
    assert read_verdict(0.002, 0.006, "greater", sesoi=0.01) == HOLDS
    assert read_verdict(-0.006, -0.002, "less", sesoi=0.01) == HOLDS
    diffs = {s: 0.001 * ((-1) ** s) for s in range(8)}
    r = paired_difference(diffs, dict.fromkeys(range(8), 0.0), sesoi=0.01)
    assert r["verdict"] == CONTRADICTED and r["sesoi"] == 0.01 and r["p"] < 0.05
    assert paired_difference(diffs, dict.fromkeys(range(8), 0.0))["verdict"] == NOT_CONFIRMED
    with pytest.raises(ValueError, match="sesoi must be a finite number > 0"):
        read_verdict(0.0, 1.0, "greater", sesoi=0.0)
    with pytest.raises(ValueError, match="not to an equivalence claim"):
        paired_difference({0: 1.0}, {0: 0.0}, direction="equal", margin=0.1, sesoi=0.1)
