"""How many claims a run decided: every comparison of a claim read "holds" or "contradicted".

A claim is made of one comparison (a paired difference with a verdict), several (``"comparisons"``:
a list, or ``"vs"``: one per baseline), or is a single check (``{"holds": bool}``, read yes / no).
A comparison is *decided* when its verdict is ``holds`` or ``contradicted`` (a check always is);
``not confirmed at this scale`` and ``not decided`` are not. A claim is decided when every one of
its comparisons is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["DECIDED", "claim_comparisons", "comparison_verdict", "count_decided"]

#: the verdicts that decide a comparison (``yes`` / ``no``: a single check)
DECIDED = ("holds", "contradicted", "yes", "no")


def claim_comparisons(claim: Any) -> list[Any]:
    """The comparisons a claim is made of (itself when it is one)."""
    if isinstance(claim, Mapping):
        if isinstance(claim.get("comparisons"), list):
            return list(claim["comparisons"])
        if isinstance(claim.get("vs"), Mapping):
            return list(claim["vs"].values())
    return [claim]


def comparison_verdict(comparison: Any) -> str:
    """A comparison's verdict: its ``verdict`` text, or yes / no for a check with ``holds`` only."""
    if isinstance(comparison, Mapping):
        if isinstance(comparison.get("verdict"), str):
            return comparison["verdict"]
        if isinstance(comparison.get("holds"), bool):
            return "yes" if comparison["holds"] else "no"
    return "n/a"


def count_decided(summaries: Mapping[str, Any]) -> dict:
    """Over ``{section: summary}`` (each with its ``"claims"``): ``{"claims", "claims_decided",
    "comparisons", "comparisons_decided", "undecided": ["section/claim", ...], "by_section":
    {section: {"claims", "claims_decided", "comparisons", "comparisons_decided"}}}``."""
    out: dict = {"claims": 0, "claims_decided": 0, "comparisons": 0, "comparisons_decided": 0,
                 "undecided": [], "by_section": {}}
    for section, summary in summaries.items():
        claims = summary.get("claims", {}) if isinstance(summary, Mapping) else {}
        row = {"claims": 0, "claims_decided": 0, "comparisons": 0, "comparisons_decided": 0}
        for name, claim in (claims.items() if isinstance(claims, Mapping) else []):
            verdicts = [comparison_verdict(c) for c in claim_comparisons(claim)]
            decided = [v in DECIDED for v in verdicts]
            row["claims"] += 1
            row["comparisons"] += len(verdicts)
            row["comparisons_decided"] += sum(decided)
            if decided and all(decided):
                row["claims_decided"] += 1
            else:
                out["undecided"].append(f"{section}/{name}")
        out["by_section"][section] = row
        for k in row:
            out[k] += row[k]
    return out
