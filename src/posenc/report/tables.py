"""Markdown helpers shared by the report sections."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def fmt_ms(stat: dict | None, digits: int = 2) -> str:
    """``mean ± std`` from ``{"mean", "std", "n"}`` (``n/a`` when missing)."""
    if not stat or stat.get("mean") is None:
        return "n/a"
    return f"{stat['mean']:.{digits}f} ± {stat['std']:.{digits}f}"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub-flavoured markdown table (pipes in cells are escaped)."""
    def cell(v: Any) -> str:
        return str(v).replace("|", "\\|")

    lines = ["| " + " | ".join(cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def verdict(holds: bool) -> str:
    """The report's wording for a checked claim."""
    return "**confirmed at this scale**" if holds else "**not confirmed at this scale**"
