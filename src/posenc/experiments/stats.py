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
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence

HOLDS = "holds"
NOT_CONFIRMED = "not confirmed at this scale"
CONTRADICTED = "contradicted"
VERDICTS = (HOLDS, NOT_CONFIRMED, CONTRADICTED)
DIRECTIONS = ("greater", "less", "equal")


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


def read_verdict(low: float, high: float, direction: str = "greater", margin: float = 0.0) -> str:
    """The verdict of an interval ``[low, high]`` for a claim in ``direction``."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {', '.join(DIRECTIONS)}, got {direction!r}")
    if not (math.isfinite(low) and math.isfinite(high)):
        return NOT_CONFIRMED
    if direction == "greater":
        return HOLDS if low > margin else CONTRADICTED if high < -margin else NOT_CONFIRMED
    if direction == "less":
        return HOLDS if high < -margin else CONTRADICTED if low > margin else NOT_CONFIRMED
    if margin <= 0:
        raise ValueError(f"an equivalence claim needs margin > 0, got {margin}")
    if -margin < low and high < margin:
        return HOLDS
    return CONTRADICTED if low >= margin or high <= -margin else NOT_CONFIRMED


def paired_difference(
    method: Mapping[object, float | None],
    baseline: Mapping[object, float | None],
    *,
    direction: str = "greater",
    margin: float = 0.0,
    level: float = 0.95,
) -> dict:
    """Paired difference ``method[s] - baseline[s]`` over the seeds both have.

    Args:
        method, baseline: ``{seed: value}``; a seed missing from either side, or a
            ``None`` / non-finite value, is left out of the pairing (and counted in
            ``"dropped"``).
        direction: the claim: ``"greater"`` (method > baseline), ``"less"`` or ``"equal"``.
        margin: the smallest difference that counts (``"equal"``: the equivalence margin).
        level: coverage of the interval.

    Returns:
        ``{"mean", "low", "high", "n", "dropped", "diffs", "direction", "margin",
        "verdict", "holds"}``; ``holds`` is ``verdict == "holds"``.
    """
    seeds = sorted(set(method) | set(baseline), key=str)
    diffs, dropped = [], 0
    for s in seeds:
        a, b = method.get(s), baseline.get(s)
        if a is None or b is None or not (math.isfinite(float(a)) and math.isfinite(float(b))):
            dropped += 1
            continue
        diffs.append(float(a) - float(b))
    mean, low, high = t_interval(diffs, level) if diffs else (None, None, None)
    verdict = NOT_CONFIRMED if not diffs else read_verdict(low, high, direction, margin)
    return {
        "mean": mean,
        "low": None if low is None or not math.isfinite(low) else low,
        "high": None if high is None or not math.isfinite(high) else high,
        "n": len(diffs),
        "dropped": dropped,
        "diffs": diffs,
        "direction": direction,
        "margin": margin,
        "verdict": verdict,
        "holds": verdict == HOLDS,
    }


def combine_verdicts(verdicts: Iterable[str]) -> str:
    """One verdict for a claim made against several baselines at once.

    ``holds`` only if it holds against every baseline, ``contradicted`` if it is
    contradicted against any, otherwise not confirmed. Prefer reporting each
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
    return HOLDS if all(v == HOLDS for v in vs) else NOT_CONFIRMED
