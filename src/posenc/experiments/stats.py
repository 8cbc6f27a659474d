"""Small statistics shared by the experiment summaries."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable


def mean_std(values: Iterable[float | None]) -> dict:
    """``{"mean", "std", "n"}`` over the finite values (sample std, 0 for one value).

    ``None`` and non-finite values are dropped; with none left, mean and std are None.
    """
    vals = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not vals:
        return {"mean": None, "std": None, "n": 0}
    return {"mean": statistics.fmean(vals), "std": statistics.stdev(vals) if len(vals) > 1 else 0.0, "n": len(vals)}
