"""The convergence gate: what a run's learning curve says about the run.

A claim about trained models compares their metric at an equal budget. Before a pair of runs
enters that comparison, each run's curve of the claim's metric (evaluated on held-out data
during training) is read as one of three states:

* :data:`CONVERGED` -- the metric has **plateaued**: the least-squares line through the
  evaluations of the last ``tail`` share of training gains at most ``tol`` over that stretch
  (falling back, e.g. over-fitting, is not "still improving"). A plateau at any level counts,
  high or low: an accuracy that sits at 0.999 while the training loss still falls has converged
  for an accuracy claim, and so has one that stalled half-way.
* :data:`FAILED` -- the run **did not leave chance**: the mean of its tail evaluations is within
  ``learned`` of the metric's chance level (stated per task: the value a model that learned
  nothing gets), or the run diverged. (The tail's mean, not the best evaluation: one noisy
  evaluation above chance is not learning.) That is a result, not a missing value: the
  comparison reads the run's metric as measured.
* :data:`LEARNING` -- anything else: the run left chance and its metric was still improving by
  more than ``tol`` at the end of training. Only these runs keep a pair out of a claim
  (:func:`posenc.experiments.stats.paired_difference`), and a claim with fewer than three
  usable pairs reads "not decided".

The rule, its thresholds and the chance level go into every summary (:meth:`Gate.as_dict`)
and every report (:meth:`Gate.describe`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass

__all__ = ["CONVERGED", "FAILED", "Gate", "LEARNING", "STATES", "count_states", "read_states"]

CONVERGED = "converged"
FAILED = "failed to learn"
LEARNING = "still learning"
STATES = (CONVERGED, FAILED, LEARNING)


def _number(name: str, value: object, *, minimum: float | None = None, strict: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    if minimum is not None and (value <= minimum if strict else value < minimum):
        raise ValueError(f"{name} must be {'>' if strict else '>='} {minimum}, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class Gate:
    """How the curve of one claim metric is read (see the module docstring).

    Args:
        metric: what the curve holds, for the report (e.g. ``"validation accuracy at 16 px"``).
        chance: the metric of a model that learned nothing (e.g. ``1 / classes`` for accuracy).
        learned: how far past ``chance``, in the better direction, the best evaluation must get
            for the run to have left chance (> 0).
        tol: the plateau tolerance: the most the least-squares line through the tail's
            evaluations may gain from the tail's first step to its last (>= 0).
        tail: the share of training whose evaluations form the tail, in (0, 1].
        higher_is_better: the metric's direction (accuracy, AUC: True; a loss: False).
        min_tail: the fewest evaluations the tail needs to be read (>= 2); a shorter tail reads
            :data:`LEARNING` (nothing can be said of it).
        running_best: read the plateau on the best-so-far curve, for a claim whose metric is
            taken at the best validation evaluation (model selection): the run has converged
            when the best evaluation improved by at most ``tol`` during the tail (the best
            before the tail against the best at the end). Its chance reading stays on the
            raw evaluations.
    """

    metric: str
    chance: float
    learned: float
    tol: float
    tail: float = 1.0 / 3.0
    higher_is_better: bool = True
    min_tail: int = 3
    running_best: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.metric, str) or not self.metric:
            raise ValueError(f"metric must be a non-empty string, got {self.metric!r}")
        _number("chance", self.chance)
        _number("learned", self.learned, minimum=0.0, strict=True)
        _number("tol", self.tol, minimum=0.0)
        tail = _number("tail", self.tail, minimum=0.0, strict=True)
        if tail > 1.0:
            raise ValueError(f"tail must lie in (0, 1], got {self.tail!r}")
        if not isinstance(self.higher_is_better, bool):
            raise TypeError(f"higher_is_better must be a bool, got {self.higher_is_better!r}")
        if isinstance(self.min_tail, bool) or not isinstance(self.min_tail, int) or self.min_tail < 2:
            raise ValueError(f"min_tail must be an int >= 2, got {self.min_tail!r}")
        if not isinstance(self.running_best, bool):
            raise TypeError(f"running_best must be a bool, got {self.running_best!r}")

    # ------------------------------------------------------------------ reading
    def _points(self, curve: Iterable[Sequence[float]]) -> list[tuple[float, float | None]]:
        points: list[tuple[float, float | None]] = []
        for i, point in enumerate(curve):
            try:
                step, value = point[0], point[1]
            except (TypeError, IndexError, KeyError):
                raise ValueError(f"curve[{i}] must be a (step, value) pair, got {point!r}") from None
            if isinstance(step, bool) or not isinstance(step, (int, float)) or not math.isfinite(step):
                raise ValueError(f"curve[{i}] has a step that is not a finite number: {step!r}")
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise ValueError(f"curve[{i}] has a value that is not a number or None: {value!r}")
            points.append((float(step), None if value is None or not math.isfinite(value) else float(value)))
        if any(b[0] <= a[0] for a, b in zip(points, points[1:])):
            raise ValueError("curve must be in increasing step order")
        return points

    def _tail(self, points: list[tuple[float, float | None]]) -> tuple[float, list[tuple[float, float]]]:
        """The tail's first step and its finite evaluations (training starts at step 0, so the
        tail is the last ``tail`` share of ``[0, last step]``)."""
        start = (1.0 - self.tail) * points[-1][0]
        start -= 1e-9 * max(1.0, abs(start))
        return start, [(s, v) for s, v in points if s >= start and v is not None]

    def gain(self, curve: Iterable[Sequence[float]]) -> float | None:
        """How much the run gained over the tail in the better direction, or ``None`` when the
        tail has fewer than ``min_tail`` finite evaluations: the least-squares slope times the
        tail's span of steps, or, with ``running_best``, the best evaluation at the end minus the
        best before the tail."""
        points = self._points(curve)
        if not points:
            return None
        start, tail = self._tail(points)
        if len(tail) < self.min_tail:
            return None
        sign = 1.0 if self.higher_is_better else -1.0
        if self.running_best:
            before = [sign * v for s, v in points if s < start and v is not None]
            end = max(sign * v for _, v in points if v is not None)
            return end - max(before) if before else None
        ms = sum(s for s, _ in tail) / len(tail)
        mv = sum(v for _, v in tail) / len(tail)
        sxx = sum((s - ms) ** 2 for s, _ in tail)
        slope = sum((s - ms) * (v - mv) for s, v in tail) / sxx if sxx > 0 else 0.0
        return sign * slope * (tail[-1][0] - tail[0][0])

    def tail_mean(self, curve: Iterable[Sequence[float]]) -> float | None:
        """The mean of the tail's finite evaluations (None if there is none)."""
        points = self._points(curve)
        if not points:
            return None
        _, tail = self._tail(points)
        return sum(v for _, v in tail) / len(tail) if tail else None

    def read(self, curve: Iterable[Sequence[float]], diverged: bool = False) -> str:
        """The state of a run from its curve of ``(step, value)`` evaluations (step order).

        Args:
            curve: the evaluations of the claim's metric during training; ``None`` or a
                non-finite value is an evaluation that failed (it never counts as progress).
            diverged: the run's loss became non-finite or ran away (reads :data:`FAILED`).

        Returns:
            :data:`CONVERGED`, :data:`FAILED` or :data:`LEARNING`.
        """
        if not isinstance(diverged, bool):
            raise TypeError(f"diverged must be a bool, got {diverged!r}")
        points = self._points(curve)
        if diverged:
            return FAILED
        if not points:
            return LEARNING
        if points[-1][1] is None:  # the last evaluation failed: the run broke down at the end
            return FAILED
        mean = self.tail_mean(points)
        beyond = mean - self.chance if self.higher_is_better else self.chance - mean
        if beyond <= self.learned:
            return FAILED
        gain = self.gain(points)
        if gain is None:
            return LEARNING
        return CONVERGED if gain <= self.tol + 1e-12 else LEARNING

    # ------------------------------------------------------------------ reporting
    def as_dict(self) -> dict:
        """The gate's settings (for a summary), with :meth:`describe`'s sentence as ``"rule"``."""
        return {**asdict(self), "rule": self.describe()}

    def describe(self) -> str:
        """One sentence stating the rule with this gate's numbers."""
        better = "above" if self.higher_is_better else "below"
        gains = "gain" if self.higher_is_better else "fall"
        plateau = (f"the best evaluation improved by at most {self.tol:g} during the last {self.tail:.0%} of training"
                   if self.running_best else
                   f"the least-squares line through the evaluations of the last {self.tail:.0%} of training would "
                   f"{gains} at most {self.tol:g} over that stretch")
        return (f"{self.metric}: converged when {plateau}; failed to learn when the mean of those evaluations is "
                f"not more than {self.learned:g} {better} chance ({self.chance:.4g}) or the run diverged; still "
                f"learning otherwise (only still-learning runs keep a pair out of a claim)")


def read_states(gate: Gate, curves: Mapping[object, Sequence[Sequence[float]]],
                diverged: Mapping[object, bool] | None = None) -> dict[object, str]:
    """``{key: state}`` of several runs' curves read by one gate."""
    diverged = diverged or {}
    return {k: gate.read(c, bool(diverged.get(k, False))) for k, c in curves.items()}


def count_states(states: Iterable[str]) -> dict[str, int]:
    """How many runs are in each state, ``{state: count}`` in :data:`STATES` order."""
    values = list(states)
    for s in values:
        if s not in STATES:
            raise ValueError(f"unknown state {s!r}; expected one of {', '.join(STATES)}")
    return {s: values.count(s) for s in STATES}
