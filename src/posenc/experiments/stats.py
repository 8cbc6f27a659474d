"""Small statistics shared by the experiment summaries.

Claims are reported as **paired per-seed differences** (method minus baseline on
the same seed and data), with the mean and a 95% Student-t interval, and read as
one of three verdicts:

* ``"holds"``: the whole interval lies on the claimed side (beyond ``margin``);
* ``"contradicted"``: the whole interval lies on the opposite side;
* ``"not confirmed at this scale"``: anything else (the interval straddles, or
  there are fewer than two pairs).

For a claim of equivalence (``direction="equal"``, e.g. "CAPE ≈ sinusoids at the
training length") the claim holds when the interval lies inside
``(-margin, margin)`` and is contradicted when it lies wholly outside it.

A directional claim may also state the **smallest difference that matters** (``sesoi``, set
with the claim before any run): then the claim is also contradicted when the whole interval
lies below ``sesoi`` in the claimed direction (the method is at most ``sesoi`` better, perhaps
worse) and does not hold. Without it, a claim whose true difference is zero can only ever read
"not confirmed", however many seeds; with it, enough seeds reach a verdict either way
(:func:`read_verdict`).

Three rules keep a verdict from being read where the design cannot carry it:

* **at least** :data:`MIN_PAIRS` **pairs**: with fewer, :func:`paired_difference` reads
  :data:`NOT_DECIDED` whatever the interval says (two pairs leave a t interval so wide that
  "not confirmed" would be a tie by construction);
* **a convergence gate**: given each run's state (:mod:`posenc.experiments.gate`: converged,
  failed to learn, still learning), a pair is compared unless one of its runs is still
  learning -- a run that failed to learn enters with its metric as measured (the failure is
  the finding) -- and with fewer than :data:`MIN_PAIRS` usable pairs the verdict is
  :data:`NOT_DECIDED` ("not decided: N of M runs still learning");
* **multiplicity**: a claim read from several comparisons reports Holm-adjusted verdicts
  (:func:`holm`) next to the per-comparison ones.

:func:`detectable_difference` states, from a run's own paired differences, the smallest
true difference its seeds detect with 80% power.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence

from posenc.experiments.gate import CONVERGED as CONVERGED_STATE
from posenc.experiments.gate import FAILED as FAILED_STATE
from posenc.experiments.gate import LEARNING as LEARNING_STATE
from posenc.experiments.gate import STATES as GATE_STATES

HOLDS = "holds"
NOT_CONFIRMED = "not confirmed at this scale"
CONTRADICTED = "contradicted"
#: the verdict of a comparison whose runs had not converged (see :func:`paired_difference`)
NOT_DECIDED = "not decided"
VERDICTS = (HOLDS, NOT_CONFIRMED, CONTRADICTED, NOT_DECIDED)
DIRECTIONS = ("greater", "less", "equal")
#: the fewest pairs (converged pairs, where convergence is known) a holds / contradicted needs
MIN_PAIRS = 3


def mean_std(values: Iterable[float | None]) -> dict:
    """``{"mean", "std", "n"}`` over the finite values (sample std, 0 for one value).

    ``None`` and non-finite values are dropped; with none left, mean and std are None.
    """
    vals = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not vals:
        return {"mean": None, "std": None, "n": 0}
    return {"mean": statistics.fmean(vals), "std": statistics.stdev(vals) if len(vals) > 1 else 0.0, "n": len(vals)}


def t_interval(values: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """Mean and two-sided Student-t interval ``(mean, low, high)`` of ``values``.

    With one value the interval is ``(-inf, inf)``; with none, every entry is NaN.
    """
    vals = [float(v) for v in values]
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    if not vals:
        return math.nan, math.nan, math.nan
    mean = statistics.fmean(vals)
    if len(vals) < 2:
        return mean, -math.inf, math.inf
    from scipy.stats import t

    half = float(t.ppf(0.5 + level / 2.0, len(vals) - 1)) * statistics.stdev(vals) / math.sqrt(len(vals))
    return mean, mean - half, mean + half


def read_verdict(low: float, high: float, direction: str = "greater", margin: float = 0.0,
                 sesoi: float | None = None) -> str:
    """The verdict of an interval ``[low, high]`` for a claim in ``direction``.

    ``"greater"``: holds when ``low > margin``; contradicted when ``high < -margin``, or, with a
    smallest difference that matters ``sesoi`` (> 0), when ``high < sesoi`` and the claim does not
    hold (the method is surely not better by ``sesoi``); otherwise not confirmed. ``"less"`` is
    the mirror image. ``"equal"``: holds inside ``(-margin, margin)``, contradicted wholly
    outside (``sesoi`` does not apply).
    """
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {', '.join(DIRECTIONS)}, got {direction!r}")
    sesoi = _check_sesoi(sesoi, direction)
    if not (math.isfinite(low) and math.isfinite(high)):
        return NOT_CONFIRMED
    if direction == "greater":
        if low > margin:
            return HOLDS
        return CONTRADICTED if high < -margin or (sesoi is not None and high < sesoi) else NOT_CONFIRMED
    if direction == "less":
        if high < -margin:
            return HOLDS
        return CONTRADICTED if low > margin or (sesoi is not None and low > -sesoi) else NOT_CONFIRMED
    if margin <= 0:
        raise ValueError(f"an equivalence claim needs margin > 0, got {margin}")
    if -margin < low and high < margin:
        return HOLDS
    return CONTRADICTED if low >= margin or high <= -margin else NOT_CONFIRMED


def _check_sesoi(sesoi: float | None, direction: str) -> float | None:
    if sesoi is None:
        return None
    if isinstance(sesoi, bool) or not isinstance(sesoi, (int, float)) or not math.isfinite(sesoi) or sesoi <= 0:
        raise ValueError(f"sesoi must be a finite number > 0 or None, got {sesoi!r}")
    if direction == "equal":
        raise ValueError("sesoi applies to a 'greater' or 'less' claim, not to an equivalence claim")
    return float(sesoi)


def _states(side: str, flags: Mapping[object, bool] | None,
            states: Mapping[object, str] | None) -> Mapping[object, str] | None:
    """One side's ``{seed: state}`` from its converged flags or its states (not both)."""
    if flags is not None and states is not None:
        raise ValueError(f"give {side}_converged or {side}_state, not both")
    flags = _flags(f"{side}_converged", flags)
    if flags is not None:
        return {s: CONVERGED_STATE if ok else LEARNING_STATE for s, ok in flags.items()}
    if states is None:
        return None
    if not isinstance(states, Mapping):
        raise TypeError(f"{side}_state must be a mapping {{seed: state}} or None, got {type(states).__name__}")
    for seed, st in states.items():
        if st not in GATE_STATES:
            raise ValueError(f"{side}_state[{seed!r}] must be one of {', '.join(GATE_STATES)}, got {st!r}")
    return states


def _flags(name: str, flags: Mapping[object, bool] | None) -> Mapping[object, bool] | None:
    if flags is None:
        return None
    if not isinstance(flags, Mapping):
        raise TypeError(f"{name} must be a mapping {{seed: bool}} or None, got {type(flags).__name__}")
    for seed, ok in flags.items():
        if not isinstance(ok, bool):
            raise TypeError(f"{name}[{seed!r}] must be a bool, got {ok!r}")
    return flags


def paired_difference(
    method: Mapping[object, float | None],
    baseline: Mapping[object, float | None],
    *,
    direction: str = "greater",
    margin: float = 0.0,
    level: float = 0.95,
    method_converged: Mapping[object, bool] | None = None,
    baseline_converged: Mapping[object, bool] | None = None,
    min_pairs: int = MIN_PAIRS,
    method_state: Mapping[object, str] | None = None,
    baseline_state: Mapping[object, str] | None = None,
    sesoi: float | None = None,
) -> dict:
    """Paired difference ``method[s] - baseline[s]`` over the seeds both have.

    Args:
        method, baseline: ``{seed: value}``; a seed missing from either side, or a
            ``None`` / non-finite value, is left out of the pairing (and counted in
            ``"dropped"``).
        direction: the claim: ``"greater"`` (method > baseline), ``"less"`` or ``"equal"``.
        margin: the smallest difference that counts (``"equal"``: the equivalence margin).
        level: coverage of the interval.
        method_converged, baseline_converged: ``{seed: converged?}`` of each side's runs,
            for claims about trained models (the convergence gate). When either is given,
            only the seeds whose two runs both converged are paired (a seed missing from a
            given mapping counts as not converged), and with fewer than ``min_pairs`` such
            pairs the verdict is :data:`NOT_DECIDED` with a note saying how many runs had
            not converged. ``None`` (both): no gate.
        min_pairs: the fewest pairs any verdict needs (default :data:`MIN_PAIRS`); with
            fewer, the comparison reads :data:`NOT_DECIDED`.
        method_state, baseline_state: ``{seed: state}`` of each side's runs as the convergence
            gate read them (:data:`posenc.experiments.gate.STATES`); they replace
            ``method_converged`` / ``baseline_converged`` (give one or the other per side).
            A pair is used unless one of its runs is ``"still learning"`` (a seed missing from
            a given mapping counts as still learning); a run that ``"failed to learn"`` enters
            with its measured value.
        sesoi: the smallest difference that matters (see :func:`read_verdict`), stated with
            the claim; ``None``: none.

    Returns:
        ``{"mean", "low", "high", "n", "dropped", "diffs", "seeds", "direction", "margin",
        "verdict", "holds", "p", "detectable"}``; ``holds`` is ``verdict == "holds"``,
        ``seeds`` the paired seeds in order, ``p`` the :func:`decision_p` of the comparison
        and ``detectable`` its :func:`detectable_difference`. A gated comparison also has
        ``"gate": {"pairs", "runs", "unconverged", "unconverged_runs", "failed_runs"}``
        (``pairs``: the seeds whose two runs could be read; ``runs``: how many runs had a value;
        ``unconverged_runs``: the runs still learning, ``["method:seed" | "baseline:seed", ...]``;
        ``failed_runs``: those that failed to learn, in the same form); a comparison
        whose verdict was withheld has a ``"note"``.
    """
    for name, side in (("method", method), ("baseline", baseline)):
        if not isinstance(side, Mapping):
            raise TypeError(f"{name} must be a mapping {{seed: value}}, got {type(side).__name__}")
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {', '.join(DIRECTIONS)}, got {direction!r}")
    if isinstance(min_pairs, bool) or not isinstance(min_pairs, int) or min_pairs < 2:
        raise ValueError(f"min_pairs must be an int >= 2, got {min_pairs!r}")
    m_state = _states("method", method_converged, method_state)
    b_state = _states("baseline", baseline_converged, baseline_state)
    gated = m_state is not None or b_state is not None

    def finite(v: float | None) -> bool:
        return v is not None and math.isfinite(float(v))

    def state(states: Mapping[object, str] | None, s: object) -> str:
        return CONVERGED_STATE if states is None else states.get(s, LEARNING_STATE)

    seeds = sorted(set(method) | set(baseline), key=str)
    diffs: list[float] = []
    paired: list[object] = []
    dropped = 0
    runs = 0
    unconverged_runs: list[str] = []
    failed_runs: list[str] = []
    for s in seeds:
        a, b = method.get(s), baseline.get(s)
        if gated:
            for side, value, states in (("method", a, m_state), ("baseline", b, b_state)):
                if finite(value):
                    runs += 1
                    st = state(states, s)
                    if st == LEARNING_STATE:
                        unconverged_runs.append(f"{side}:{s}")
                    elif st == FAILED_STATE:
                        failed_runs.append(f"{side}:{s}")
        if not (finite(a) and finite(b)):
            dropped += 1
            continue
        if gated and LEARNING_STATE in (state(m_state, s), state(b_state, s)):
            dropped += 1
            continue
        diffs.append(float(a) - float(b))
        paired.append(s)
    sesoi = _check_sesoi(sesoi, direction)
    mean, low, high = t_interval(diffs, level) if diffs else (None, None, None)
    verdict = NOT_CONFIRMED if not diffs else read_verdict(low, high, direction, margin, sesoi)
    out = {
        "mean": mean,
        "low": None if low is None or not math.isfinite(low) else low,
        "high": None if high is None or not math.isfinite(high) else high,
        "n": len(diffs),
        "dropped": dropped,
        "diffs": diffs,
        "seeds": paired,
        "direction": direction,
        "margin": margin,
        "sesoi": sesoi,
        "verdict": verdict,
        "holds": verdict == HOLDS,
        "p": decision_p(diffs, direction, margin, sesoi),
        "detectable": detectable_difference(diffs, level=level),
    }
    if gated:
        out["gate"] = {"pairs": paired, "runs": runs, "unconverged": len(unconverged_runs),
                       "unconverged_runs": unconverged_runs, "failed_runs": failed_runs}
        if len(diffs) < min_pairs and unconverged_runs:  # too few pairs because runs were still learning
            out["verdict"], out["holds"] = NOT_DECIDED, False
            out["note"] = (f"not decided: {len(unconverged_runs)} of {runs} runs still learning "
                           f"({len(diffs)} usable pair{'s' if len(diffs) != 1 else ''}, {min_pairs} needed)")
            return out
    if len(diffs) < min_pairs:  # too few pairs to read any verdict, "not confirmed" included
        out["verdict"], out["holds"] = NOT_DECIDED, False
        out["note"] = f"not decided: fewer than {min_pairs} seeds paired ({len(diffs)})"
    return out


def decision_p(diffs: Sequence[float], direction: str = "greater", margin: float = 0.0,
               sesoi: float | None = None) -> float:
    """The smallest ``alpha`` at which the ``1 - alpha`` Student-t interval of ``diffs`` reaches
    a verdict (holds or contradicted) for the claim ``direction`` / ``margin``: the p-value of
    the decision :func:`read_verdict` makes, so that a 95% interval decides exactly when this
    is below 0.05. It is what :func:`holm` adjusts.

    For ``"greater"`` / ``"less"`` it is the two-sided p-value of the mean's distance beyond
    ``±margin``; for ``"equal"`` the smaller of the equivalence test's (interval inside
    ``(-margin, margin)``) and the non-equivalence test's (interval wholly outside). With fewer
    than two differences it is 1; with no spread it is 0 when the constant difference lies on
    a decided side and 1 otherwise. With a ``sesoi``, the decision "contradicted: the interval
    lies below ``sesoi``" has its own p-value, and the smaller of the two is returned.
    """
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {', '.join(DIRECTIONS)}, got {direction!r}")
    sesoi = _check_sesoi(sesoi, direction)
    vals = [float(d) for d in diffs]
    if any(not math.isfinite(v) for v in vals):
        raise ValueError(f"diffs must be finite, got {vals}")
    n = len(vals)
    if n < 2:
        return 1.0
    return _decision_p(statistics.fmean(vals), statistics.stdev(vals) / math.sqrt(n), n - 1, direction, margin, sesoi)


def _decision_p(mean: float, se: float, df: float, direction: str, margin: float,
                sesoi: float | None = None) -> float:
    """:func:`decision_p` of a mean with standard error ``se`` on ``df`` degrees of freedom."""

    def p_beyond(z_num: float) -> float:
        # two-sided p of a t statistic z_num / se (0 / 1 for a zero spread)
        if se == 0.0:
            return 0.0 if z_num > 0 else 1.0
        from scipy.stats import t

        return float(min(1.0, 2.0 * t.sf(z_num / se, df)))

    outside = max(mean - margin, -margin - mean)  # > 0: the mean lies beyond ±margin
    if direction in ("greater", "less"):
        p = p_beyond(outside)
        if sesoi is not None:  # "contradicted": the interval lies short of sesoi in the claimed direction
            short = sesoi - mean if direction == "greater" else mean + sesoi
            p = min(p, p_beyond(short))
        return p
    if margin <= 0:
        raise ValueError(f"an equivalence claim needs margin > 0, got {margin}")
    inside = min(margin - mean, mean + margin)  # > 0: the mean lies inside (-margin, margin)
    return min(p_beyond(inside), p_beyond(outside))


def crossed_difference(
    cells: Mapping[object, Mapping[object, float | None]],
    *,
    direction: str = "greater",
    margin: float = 0.0,
    level: float = 0.95,
    min_pairs: int = MIN_PAIRS,
    sesoi: float | None = None,
) -> dict:
    """The mean of a difference measured in every cell of a crossed design, with an interval that
    carries the spread of both factors.

    Example: a selector's pick on supernet seed ``r`` (rows), scored against the space's mean
    by each stand-alone training seed ``c`` of the ground truth (columns). Averaging over the
    columns first and pairing by row alone would hide the training seeds' spread (with one
    pick on every row the interval would have no width at all); averaging over the rows and
    pairing by column would hide the rows'. Here, with row means ``r_i``, column means ``c_j``,
    ``R`` rows and ``C`` columns, the standard error of the grand mean is
    ``sqrt(var(r)/R + var(c)/C)`` (the two-way random-effects approximation without
    interaction), on Welch-Satterthwaite degrees of freedom, and the interval is Student's t.

    Args:
        cells: ``{row: {column: difference}}``; a row missing a column (or holding ``None``
            or a non-finite value in one) is dropped: the design stays complete.
        direction, margin, level, sesoi: as in :func:`paired_difference`.
        min_pairs: the fewest rows *and* columns any verdict needs (fewer: :data:`NOT_DECIDED`).

    Returns:
        ``{"mean", "low", "high", "se", "df", "rows", "columns", "n", "dropped", "row_means",
        "column_means", "direction", "margin", "verdict", "holds", "p", "detectable"}``
        (``n``: cells used; ``detectable``: the smallest true difference this design detects
        with 80% power, ``(t_{(1+level)/2} + t_{0.8}) * se``), and a ``"note"`` when the
        verdict is withheld.
    """
    if not isinstance(cells, Mapping):
        raise TypeError(f"cells must be a mapping {{row: {{column: value}}}}, got {type(cells).__name__}")
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {', '.join(DIRECTIONS)}, got {direction!r}")
    sesoi = _check_sesoi(sesoi, direction)
    columns = sorted({c for row in cells.values() for c in row}, key=str)

    def finite(v: object) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

    rows = [r for r in sorted(cells, key=str) if all(finite(cells[r].get(c)) for c in columns)]
    dropped = len(cells) - len(rows)
    row_means = [statistics.fmean(float(cells[r][c]) for c in columns) for r in rows]
    col_means = [statistics.fmean(float(cells[r][c]) for r in rows) for c in columns] if rows else []
    out: dict = {"mean": None, "low": None, "high": None, "se": None, "df": None, "rows": len(rows),
                 "columns": len(columns), "n": len(rows) * len(columns), "dropped": dropped,
                 "row_means": dict(zip(rows, row_means)), "column_means": dict(zip(columns, col_means)),
                 "direction": direction, "margin": margin, "sesoi": sesoi, "verdict": NOT_CONFIRMED, "holds": False,
                 "p": 1.0, "detectable": None}
    if not rows or not columns:
        out["note"] = "no complete row of cells"
        return out
    mean = statistics.fmean(row_means)
    parts = [(statistics.variance(v) / len(v), len(v) - 1) for v in (row_means, col_means) if len(v) > 1]
    var = sum(p for p, _ in parts)
    out["mean"] = mean
    if not parts:
        out["note"] = "one cell: no spread to read a verdict from"
        return out
    se = math.sqrt(var)
    den = sum(p * p / d for p, d in parts)
    df = var * var / den if den > 0 else float(min(d for _, d in parts))
    from scipy.stats import t

    half = float(t.ppf(0.5 + level / 2.0, df)) * se
    out.update(se=se, df=df, low=mean - half, high=mean + half,
               detectable=float((t.ppf(0.5 + level / 2.0, df) + t.ppf(0.8, df)) * se),
               p=_decision_p(mean, se, df, direction, margin, sesoi))
    out["verdict"] = read_verdict(mean - half, mean + half, direction, margin, sesoi)
    if se == 0.0:
        out["verdict"] = NOT_DECIDED
        out["note"] = "not decided: no spread in either factor (a zero-width interval)"
    elif min(len(rows), len(columns)) < min_pairs:
        out["verdict"] = NOT_DECIDED
        out["note"] = f"not decided: fewer than {min_pairs} rows or columns ({len(rows)} x {len(columns)})"
    out["holds"] = out["verdict"] == HOLDS
    return out


def holm(pvalues: Mapping[object, float], alpha: float = 0.05) -> dict[object, dict]:
    """Holm's step-down adjustment of a family of comparisons (Holm 1979).

    Sort the ``m`` p-values ascending; the ``k``-th (from 1) has adjusted p-value
    ``max_{j <= k} min(1, (m - j + 1) p_(j))``, and is rejected when that is below
    ``alpha``. Controls the family-wise error rate at ``alpha`` under any dependence.

    Args:
        pvalues: ``{name: p}`` with every ``p`` in [0, 1].
        alpha: the family-wise error rate, in (0, 1).

    Returns:
        ``{name: {"p", "p_holm", "rejected"}}`` in the input's order.
    """
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha!r}")
    for name, p in pvalues.items():
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
            raise ValueError(f"pvalues[{name!r}] must be a number in [0, 1], got {p!r}")
    m = len(pvalues)
    order = sorted(pvalues, key=lambda k: float(pvalues[k]))
    adjusted: dict[object, float] = {}
    running = 0.0
    for rank, name in enumerate(order):
        running = max(running, min(1.0, (m - rank) * float(pvalues[name])))
        adjusted[name] = running
    return {name: {"p": float(p), "p_holm": adjusted[name], "rejected": adjusted[name] < alpha}
            for name, p in pvalues.items()}


def holm_verdicts(comparisons: Mapping[object, dict], alpha: float = 0.05) -> dict[object, dict]:
    """Add Holm-adjusted verdicts to a family of :func:`paired_difference` results, in place.

    Each comparison's decision p-value (``"p"``) is adjusted with :func:`holm` over the
    comparisons that could reach a verdict (those read "not decided" or withheld for too few
    pairs keep their verdict and do not count towards ``m``). A comparison gets
    ``"p_holm"`` and ``"holm_verdict"``: its own verdict when the adjusted p-value is below
    ``alpha``, otherwise "not confirmed at this scale". Returns ``comparisons``.
    """
    family = {k: c["p"] for k, c in comparisons.items()
              if c.get("verdict") != NOT_DECIDED and "note" not in c and c.get("p") is not None}
    adjusted = holm(family, alpha) if family else {}
    for k, c in comparisons.items():
        if k in adjusted:
            c["p_holm"] = adjusted[k]["p_holm"]
            c["holm_verdict"] = c["verdict"] if adjusted[k]["rejected"] else NOT_CONFIRMED
        else:
            c["p_holm"] = None
            c["holm_verdict"] = c.get("verdict", NOT_CONFIRMED)
        c["holm_family"] = len(family)
    return comparisons


def detectable_difference(diffs: Sequence[float], level: float = 0.95, power: float = 0.8) -> float | None:
    """The smallest true mean difference these paired seeds detect with probability ``power``.

    For a two-sided ``level`` t interval over ``n`` paired differences with sample standard
    deviation ``s``, a true difference ``delta`` puts the whole interval on its side of 0 with
    probability about ``power`` when ``delta >= (t_{(1+level)/2, n-1} + t_{power, n-1}) s / sqrt(n)``
    (the usual normal-shift approximation to the noncentral t). Smaller true differences are
    likely to read "not confirmed at this scale" with these seeds. The spread is the run's
    own: never borrow one from another run.

    Args:
        diffs: the paired per-seed differences (``n >= 2`` for an answer).
        level: coverage of the interval, in (0, 1).
        power: detection probability, in (0, 1).

    Returns:
        ``delta`` (>= 0), or ``None`` with fewer than two differences.
    """
    for name, value in (("level", level), ("power", power)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < value < 1.0:
            raise ValueError(f"{name} must lie in (0, 1), got {value!r}")
    vals = [float(d) for d in diffs]
    if any(not math.isfinite(v) for v in vals):
        raise ValueError(f"diffs must be finite, got {vals}")
    n = len(vals)
    if n < 2:
        return None
    from scipy.stats import t

    return float((t.ppf(0.5 + level / 2.0, n - 1) + t.ppf(power, n - 1)) * statistics.stdev(vals) / math.sqrt(n))


def seeds_for(effect: float, sd: float, *, level: float = 0.95, power: float = 0.8, most: int = 200) -> int | None:
    """The fewest paired seeds whose detectable difference (:func:`detectable_difference`'s
    formula with per-seed spread ``sd``) is at most ``effect``; ``None`` beyond ``most``.
    Both ``effect`` and ``sd`` must come from the run at hand."""
    if not (isinstance(effect, (int, float)) and effect > 0 and math.isfinite(effect)):
        raise ValueError(f"effect must be a finite number > 0, got {effect!r}")
    if not (isinstance(sd, (int, float)) and sd >= 0 and math.isfinite(sd)):
        raise ValueError(f"sd must be a finite number >= 0, got {sd!r}")
    from scipy.stats import t

    for n in range(2, most + 1):
        if (t.ppf(0.5 + level / 2.0, n - 1) + t.ppf(power, n - 1)) * sd / math.sqrt(n) <= effect:
            return n
    return None


def combine_verdicts(verdicts: Iterable[str]) -> str:
    """One verdict for a claim made against several baselines at once.

    ``holds`` only if it holds against every baseline, ``contradicted`` if it is
    contradicted against any, ``not decided`` if none is contradicted and any was not
    decided, otherwise not confirmed. Prefer reporting each
    comparison on its own; use this only where the claim itself says "all".
    """
    vs = list(verdicts)
    for v in vs:
        if v not in VERDICTS:
            raise ValueError(f"unknown verdict {v!r}")
    if not vs:
        return NOT_CONFIRMED
    if any(v == CONTRADICTED for v in vs):
        return CONTRADICTED
    if any(v == NOT_DECIDED for v in vs):
        return NOT_DECIDED
    return HOLDS if all(v == HOLDS for v in vs) else NOT_CONFIRMED
