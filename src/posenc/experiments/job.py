"""A job: one independent, pure unit of an experiment's plan.

Experiment modules build lists of :class:`Job` (``plan(profile, seeds)``); the report layer
runs them, stores their results and renders the summary. ``Job`` lives here, at the lower of
the two layers, so that the library -> experiments -> report -> CLI import order holds
without exception.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Job"]


@dataclass(frozen=True)
class Job:
    """One independent unit of work.

    Args:
        key: unique within the section; letters, digits, ``-``, ``_``, ``.`` and ``=``.
        run: a pure function ``config -> JSON-serialisable dict``.
        config: a frozen dataclass (stored beside the result, hashed to detect changes).
        cost: a rough relative cost: weights the progress bar and balances shards.
        alone: a timing job: never run beside other jobs of the same run (the runner
            waits until nothing else is in flight, runs it, then goes on).
        schema: the types of the result that the section's summary reads, in the plain-data
            spec language of :mod:`posenc.report.schema`; a stored result that does not match
            is recomputed. Default: the ``result_schema`` attribute of ``run`` (experiments
            state it next to each job function), else ``None`` (not checked).
        memory: the bytes the job is estimated to hold at its peak (a number >= 0), or ``None``
            (not estimated). The runner refuses, before it runs, a job whose estimate exceeds
            its worker's memory limit, and goes on with the others.
    """

    key: str
    run: Callable[[Any], dict]
    config: Any
    cost: float = 1.0
    alone: bool = False
    schema: Any = None
    memory: float | None = None

    def __post_init__(self) -> None:
        if self.schema is None:
            object.__setattr__(self, "schema", getattr(self.run, "result_schema", None))
        if self.memory is not None:
            m = self.memory
            if isinstance(m, bool) or not isinstance(m, (int, float)):
                raise TypeError(f"memory must be a number of bytes or None, got {type(m).__name__} {m!r}")
            if not (math.isfinite(m) and m >= 0):
                raise ValueError(f"memory must be a finite number of bytes >= 0 or None, got {m!r}")

    def config_dict(self) -> dict:
        if dataclasses.is_dataclass(self.config):
            return dataclasses.asdict(self.config)
        return dict(self.config)
