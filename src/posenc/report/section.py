"""What a reproduction section is: a plan of independent jobs, a summary, a rendering.

A section ties one experiment module (``posenc.experiments.<name>``: frozen
configs and pure ``run(config) -> dict`` functions) to the report. The runner
executes the planned jobs one by one (skipping those already on disk), passes
every job's result to ``summarize`` (pure data in, JSON-serialisable data out)
and hands the summary to ``render``, which returns markdown and saves figures
through the :class:`FigureSaver` it is given.

Because jobs are independent pure functions of their config, a sweep can be run
by any engine: ``posenc reproduce SECTION --shard i/n`` runs one of n shards
balanced by the jobs' costs, ``--job KEY`` runs one job, ``--workers N`` /
``--executor ray`` run them in parallel (see :mod:`posenc.report.executors`), and
``posenc reproduce --list-jobs --json`` lists them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from posenc.experiments.job import Job

PROFILES = ("quick", "full")

__all__ = ["PROFILES", "FigureSaver", "Job", "Section"]


class FigureSaver(Protocol):
    def __call__(self, name: str, figure: Any) -> str:
        """Save a matplotlib figure as PNG and return its file name for markdown."""


@dataclass(frozen=True)
class Section:
    """A registered reproduction section.

    Args:
        name: the CLI name (``posenc reproduce NAME``).
        title: the heading in ``report.md``.
        plan: ``(profile, seeds) -> list[Job]``; ``seeds`` is ``None`` for the
            profile's default number of seeds.
        summarize: ``{job key: result} -> summary`` (JSON-serialisable).
        render: ``(summary, save_figure) -> markdown`` (no heading; the runner adds it).
        quick_budget_s: the section's share of the quick profile's 10-minute budget.
    """

    name: str
    title: str
    plan: Callable[[str, int | None], list[Job]]
    summarize: Callable[[dict[str, dict]], dict]
    render: Callable[[dict, FigureSaver], str]
    quick_budget_s: float = 150.0
