"""The convergence gate reads built curves of each kind: converged, failed to learn, still learning."""

from __future__ import annotations

import math

import pytest

from posenc.experiments.gate import CONVERGED, FAILED, LEARNING, STATES, Gate, count_states, read_states

ACC = Gate("validation accuracy", chance=0.1, learned=0.05, tol=0.02)
LOSS = Gate("validation loss", chance=math.log(10), learned=0.1, tol=0.02, higher_is_better=False)


def curve(values, every=10):
    return [[every * (i + 1), v] for i, v in enumerate(values)]


def test_a_plateau_at_the_top_has_converged_even_while_the_loss_falls():
    # accuracy flat at 0.999 for the last third (what krpe's copy runs do while their loss still falls)
    assert ACC.read(curve([0.2, 0.6, 0.9, 0.99, 0.999, 0.999, 0.998, 0.999, 0.999])) == CONVERGED


def test_a_plateau_half_way_has_converged_too():
    assert ACC.read(curve([0.1, 0.25, 0.36, 0.38, 0.39, 0.38, 0.385, 0.38, 0.39])) == CONVERGED


def test_a_run_that_never_left_chance_failed_to_learn():
    # near 1/10 all along, with noise (and even a downward wobble): never beyond chance + 0.05
    assert ACC.read(curve([0.1, 0.12, 0.09, 0.14, 0.11, 0.1, 0.13, 0.12, 0.1])) == FAILED
    # a loss stuck at ln 10 (lower is better)
    assert LOSS.read(curve([2.31, 2.30, 2.29, 2.30, 2.31, 2.28])) == FAILED


def test_one_noisy_evaluation_above_chance_is_not_learning():
    auc = Gate("validation AUC", chance=0.5, learned=0.05, tol=0.02)
    # sage-like: noise around 0.5 with a single 0.59
    assert auc.read(curve([0.49, 0.43, 0.50, 0.50, 0.48, 0.45, 0.50, 0.45, 0.59, 0.48, 0.52])) == FAILED
    # a run that learned and then collapsed back to chance failed too
    assert ACC.read(curve([0.2, 0.6, 0.9, 0.9, 0.5, 0.12, 0.1, 0.11, 0.1])) == FAILED


def test_running_best_reads_the_model_a_claim_selects_by_validation():
    best = Gate("validation AUC (best so far)", chance=0.5, learned=0.05, tol=0.02, running_best=True)
    raw = Gate("validation AUC", chance=0.5, learned=0.05, tol=0.02)
    # P-GNN-like: the validation AUC jumps with the resampled anchors; its best came before the tail
    jumpy = [0.88, 0.91, 0.44, 0.57, 0.88, 0.67, 0.95, 0.60, 0.74, 0.81, 0.92]
    assert best.read(curve(jumpy)) == CONVERGED and best.gain(curve(jumpy)) == 0.0
    assert raw.read(curve(jumpy)) == LEARNING  # the raw line through the noisy tail rises
    # a new best during the tail: still learning
    late = [0.68, 0.71, 0.66, 0.73, 0.66, 0.58, 0.61, 0.77, 0.90, 0.83, 0.86]
    assert best.read(curve(late)) == LEARNING and best.gain(curve(late)) == pytest.approx(0.90 - 0.73)


def test_a_run_still_rising_at_the_end_is_still_learning():
    assert ACC.read(curve([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9])) == LEARNING
    # slowly: 0.04 over the last third (steps 60-90), more than the tolerance
    assert ACC.read(curve([0.5, 0.7, 0.8, 0.85, 0.87, 0.88, 0.89, 0.90, 0.92])) == LEARNING
    # a loss still falling
    assert LOSS.read(curve([2.3, 1.5, 1.0, 0.8, 0.6, 0.4])) == LEARNING


def test_noise_around_a_plateau_is_not_progress_and_falling_back_is_not_learning():
    noisy = [0.5, 0.8, 0.9, 0.95, 0.96, 0.94, 0.96, 0.95, 0.94, 0.96, 0.95]
    assert ACC.read(curve(noisy)) == CONVERGED
    overfit = [0.5, 0.8, 0.9, 0.95, 0.95, 0.94, 0.93, 0.92, 0.91]
    assert ACC.read(curve(overfit)) == CONVERGED
    assert ACC.gain(curve(overfit)) < 0


def test_the_projected_gain_is_the_least_squares_line_over_the_last_third():
    # the last third of [0, 90] is steps >= 60: 60, 70, 80, 90, values 0.6-0.9: slope 0.01 / step over 30 steps
    g = ACC.gain(curve([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]))
    assert g == pytest.approx(0.3)
    # a loss falling 0.1 per evaluation over its tail (steps 40, 50, 60) gains 0.2 (lower is better)
    assert LOSS.gain(curve([1.0, 0.9, 0.8, 0.7, 0.6, 0.5])) == pytest.approx(0.2)


def test_divergence_and_a_failed_last_evaluation_read_failed():
    good = curve([0.2, 0.6, 0.9, 0.95, 0.95, 0.95])
    assert ACC.read(good, diverged=True) == FAILED
    assert ACC.read(good[:-1] + [[60, float("nan")]]) == FAILED
    assert ACC.read(good[:-1] + [[60, None]]) == FAILED
    assert ACC.read([]) == LEARNING  # nothing to read


def test_too_short_a_tail_cannot_be_read():
    assert ACC.read(curve([0.2, 0.9])) == LEARNING
    assert ACC.read(curve([0.2, 0.9, 0.9, 0.9])) == LEARNING  # the tail (steps 30, 40) has 2 evaluations
    assert Gate("acc", 0.1, 0.05, 0.02, min_tail=2).read(curve([0.2, 0.9, 0.9, 0.9])) == CONVERGED


def test_the_rule_is_stated_with_its_numbers():
    d = ACC.as_dict()
    assert d["chance"] == 0.1 and d["tol"] == 0.02 and d["learned"] == 0.05
    assert "0.02" in d["rule"] and "0.1" in d["rule"] and "33%" in d["rule"]
    assert read_states(ACC, {"a": curve([0.1] * 9), "b": curve([0.9] * 9)}) == {"a": FAILED, "b": CONVERGED}
    assert count_states([FAILED, CONVERGED, CONVERGED]) == {CONVERGED: 2, FAILED: 1, LEARNING: 0}
    assert tuple(count_states([])) == STATES


@pytest.mark.parametrize("kwargs, match", [
    ({"metric": ""}, "metric"),
    ({"chance": float("nan")}, "chance"),
    ({"learned": 0.0}, "learned"),
    ({"tol": -0.1}, "tol"),
    ({"tail": 0.0}, "tail"),
    ({"tail": 1.5}, "tail"),
    ({"min_tail": 1}, "min_tail"),
    ({"min_tail": True}, "min_tail"),
    ({"running_best": 1}, "running_best"),
])
def test_bad_settings_are_refused_naming_the_argument(kwargs, match):
    base = {"metric": "acc", "chance": 0.1, "learned": 0.05, "tol": 0.02}
    with pytest.raises(TypeError if match == "running_best" else ValueError, match=match):
        Gate(**{**base, **kwargs})
    with pytest.raises(TypeError, match="higher_is_better"):
        Gate(**base, higher_is_better=1)


def test_bad_curves_are_refused():
    with pytest.raises(ValueError, match="increasing step order"):
        ACC.read([[20, 0.5], [10, 0.6], [30, 0.7]])
    with pytest.raises(ValueError, match=r"curve\[1\] must be a \(step, value\) pair"):
        ACC.read([[10, 0.5], 3])
    with pytest.raises(ValueError, match=r"curve\[0\] has a value"):
        ACC.read([[10, "0.5"]])
    with pytest.raises(ValueError, match=r"curve\[0\] has a step"):
        ACC.read([[float("inf"), 0.5]])
    with pytest.raises(TypeError, match="diverged"):
        ACC.read(curve([0.5] * 3), diverged="no")
    with pytest.raises(ValueError, match="unknown state"):
        count_states(["done"])
