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


def verdict(holds: bool | str) -> str:
    """The report's wording for a checked claim: a verdict string of
    :mod:`posenc.experiments.stats` (holds / not confirmed at this scale /
    contradicted), or a bool (confirmed / not confirmed at this scale)."""
    if isinstance(holds, str):
        return f"**{holds}**"
    return "**confirmed at this scale**" if holds else "**not confirmed at this scale**"


def fmt_diff(diff: dict | None, digits: int = 3) -> str:
    """``+0.031 [+0.010, +0.052] (n=5): holds`` from :func:`posenc.experiments.stats.paired_difference`."""
    if not diff or diff.get("mean") is None:
        return "n/a"
    lo, hi = diff.get("low"), diff.get("high")
    interval = "[n/a]" if lo is None or hi is None else f"[{lo:+.{digits}f}, {hi:+.{digits}f}]"
    return f"{diff['mean']:+.{digits}f} {interval} (n={diff['n']}): {diff['verdict']}"


def fmt_interval(diff: dict, digits: int = 3, empty: str = "– (no converged pair)") -> str:
    """``+0.031 [+0.010, +0.052] (n = 5)``; ``+0.031 (n = 1)`` without an interval; ``empty`` without a mean."""
    if diff.get("mean") is None:
        return empty
    if diff.get("low") is None or diff.get("high") is None:
        return f"{diff['mean']:+.{digits}f} (n = {diff['n']})"
    return f"{diff['mean']:+.{digits}f} [{diff['low']:+.{digits}f}, {diff['high']:+.{digits}f}] (n = {diff['n']})"


def fmt_holm(diff: dict) -> str:
    """The Holm-adjusted verdict of a comparison (:func:`posenc.experiments.stats.holm_verdicts`):
    ``"holds (p_Holm = 0.012)"``, or ``"–"`` for a comparison outside the family."""
    if diff.get("holm_verdict") is None:
        return "–"
    p = diff.get("p_holm")
    return f"{diff['holm_verdict']}" + (f" (p_Holm = {p:.2g})" if p is not None else "")


def claims_markdown(claims: dict, text: dict[str, str]) -> list[str]:
    """Markdown lines for claims made of paired comparisons: the claim's verdict, then each
    comparison's mean [95% interval] (n) and verdict (``claims[name]["comparisons"]``)."""
    out = ["**Claims** (paired per-seed differences over the seeds neither of whose runs is still learning, mean "
           "[95% interval] (n): verdict; after Holm: the verdict with every comparison of the section in one family; "
           "no verdict from fewer than 3 usable pairs; a comparison with a smallest difference that matters (δ) is "
           "also contradicted when its whole interval falls short of δ in the claimed direction).", ""]
    for name, claim in claims.items():
        out.append(f"- {text.get(name, name)}: **{claim['verdict']}**.")
        for c in claim["comparisons"]:
            note = f" — {c['note']}" if c.get("note") else ""
            holm = f"; after Holm: {fmt_holm(c)}" if c.get("holm_verdict") is not None else ""
            sesoi = f", δ = {c['sesoi']:g}" if c.get("sesoi") else ""
            out.append(f"  - `{c['task']}`: {c['method']} − {c['baseline']} ({c['metric']}{sesoi}): {fmt_diff(c)}{holm}"
                       f"{note}")
    return out


def gate_lines(summary: dict) -> list[str]:
    """The convergence gate's paragraph: its rule per task (``summary["gate"]``: ``{task: Gate.as_dict()}``),
    the runs still learning (``"not_converged"``) and those that failed to learn (``"failed_to_learn"``);
    either may be a list of run keys or ``{task: [keys]}``."""
    def flat(v: Any) -> list[str]:
        if isinstance(v, dict):
            return [k for keys in v.values() for k in (keys or [])]
        return list(v or [])

    gates = summary.get("gate") or {}
    out = ["**Convergence gate.** Each run's curve of the metric its claims read is one of: *converged* "
           "(it plateaued, at any level), *failed to learn* (it stayed at chance, or diverged: a result, read as "
           "measured) or *still learning*. Only a still-learning run keeps its pair out of a claim, and a "
           "comparison with fewer than 3 usable pairs reads \"not decided\"."]
    for task, g in gates.items():
        rule = g.get("rule") if isinstance(g, dict) else None
        if rule:
            out.append(f"- {task}: {rule}.")
    learning, failed = flat(summary.get("not_converged")), flat(summary.get("failed_to_learn"))
    out.append("")
    out.append(f"Still learning ({len(learning)}; left out of the claims that use them): "
               + ", ".join(f"`{k}`" for k in learning) + "." if learning else "No run was still learning.")
    if failed:
        out.append(f"Failed to learn ({len(failed)}; compared as measured): " + ", ".join(f"`{k}`" for k in failed) + ".")
    return out


def fmt_states(states: dict | None) -> str:
    """``"3 / 1 / 0"``: the runs the gate read as converged / failed to learn / still learning."""
    if not states:
        return "n/a"
    return " / ".join(str(states.get(k, 0)) for k in ("converged", "failed to learn", "still learning"))
