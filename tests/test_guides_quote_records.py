"""The numbers the guides and the README quote from the reproduction records are the records' own.

The guides' results sections quote paired differences with their 95 % intervals, written
``+0.120 [+0.073, +0.167]`` (or, for the architecture picks, ``+0.09 points [−0.21, +0.39]``),
and the compute each full profile took. Each test below finds those quotes in a guide's results
(from its current-results marker to the next heading; the collapsed history sections, which hold
numbers of earlier code, left out) and looks them
up in the section's saved records, ``docs/data/<section>.json`` (quick profile) and
``docs/data/full/<section>.json`` (full profile): a quote that no comparison of either record has,
rounded as quoted, fails here. The tables of the full profiles' accuracies in the cape, krpe, graph
and relative guides are compared with the records cell by cell, and the README's totals for
``make demo`` are recomputed from the quick records.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from posenc.report.decided import claim_comparisons, count_decided

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "docs" / "data"
MARKER = "<!-- current results"
HISTORY = re.compile(r"<details><summary>History: results of earlier code</summary>(.*?)</details>", re.DOTALL)
#: guide -> the section whose records it quotes
GUIDES = {"cape": "cape", "lff": "lff", "krpe": "krpe", "graph": "gir", "relative": "relative", "search": "search"}
SIGNED = r"[+\-−]\d+\.\d+"
INTERVAL = re.compile(rf"({SIGNED})( points| nats| of accuracy)? \[({SIGNED}), ({SIGNED})\]")


def number(s: str) -> float:
    return float(s.replace("−", "-"))


def current(guide: str) -> str:
    """The guide's results: from its current-results marker to the next heading, history left out."""
    body = HISTORY.sub("", (ROOT / "docs" / f"{guide}.md").read_text(encoding="utf-8"))
    start = body.index(MARKER)
    end = re.compile(r"^#", re.MULTILINE).search(body, start)
    return re.sub(r"\s+", " ", body[start:end.start() if end else len(body)])


def records(section: str) -> list[dict]:
    out = []
    for path in (DATA / f"{section}.json", DATA / "full" / f"{section}.json"):
        if path.exists():
            out.append(json.loads(path.read_text(encoding="utf-8")))
    return out


def triples(record: dict) -> list[tuple[float, float, float]]:
    """Every comparison's (mean, low, high) in the record, where it has all three."""
    out = []
    for claim in record["summary"]["claims"].values():
        for c in claim_comparisons(claim):
            if isinstance(c, dict) and all(isinstance(c.get(k), (int, float)) for k in ("mean", "low", "high")):
                out.append((float(c["mean"]), float(c["low"]), float(c["high"])))
    return out


def quoted(value: float, text: str, scale: float) -> bool:
    """``value`` (a record's number) rounds to ``text`` (as quoted) at the quote's decimals."""
    decimals = len(text.split(".")[1])
    return abs(round(value * scale, decimals) - number(text)) <= 10 ** -decimals / 2 + 1e-12


@pytest.mark.parametrize("guide", sorted(GUIDES))
def test_every_quoted_interval_is_a_comparison_of_the_sections_records(guide):
    text = current(guide)
    found = list(INTERVAL.finditer(text))
    assert found, f"docs/{guide}.md quotes no interval: this test no longer reads it"
    known = [t for r in records(GUIDES[guide]) for t in triples(r)]
    missing = []
    for m in found:
        mean, unit, low, high = m.group(1), m.group(2), m.group(3), m.group(4)
        scale = 100.0 if unit == " points" else 1.0
        if not any(quoted(a, mean, scale) and quoted(b, low, scale) and quoted(c, high, scale) for a, b, c in known):
            missing.append(m.group(0))
    assert not missing, f"docs/{guide}.md quotes intervals no saved record of `{GUIDES[guide]}` has: {missing}"


@pytest.mark.parametrize("guide", sorted(GUIDES))
def test_the_full_profiles_compute_is_the_records(guide):
    path = DATA / "full" / f"{GUIDES[guide]}.json"
    record = json.loads(path.read_text(encoding="utf-8"))
    m = re.search(rf"`docs/data/full/{GUIDES[guide]}\.json`[^)]*?([\d,]+) s of job CPU time", current(guide))
    assert m, f"docs/{guide}.md no longer states its full profile's CPU time next to its record"
    assert int(m.group(1).replace(",", "")) == round(record["compute_seconds"])


def test_readme_totals_are_the_quick_records():
    readme = re.sub(r"\s+", " ", (ROOT / "README.md").read_text(encoding="utf-8"))
    quick = [json.loads(p.read_text(encoding="utf-8")) for p in sorted(DATA.glob("*.json"))]
    quick = [r for r in quick if r.get("profile") == "quick"]
    m = re.search(r"quick profiles: ([\d,]+) jobs, ([\d,]+) s of compute and ([\d,]+) s of wall time", readme)
    assert m, "README.md no longer states make demo's jobs, compute and wall time"
    jobs, compute, wall = (int(g.replace(",", "")) for g in m.groups())
    assert jobs == sum(len(r["jobs"]) for r in quick)
    assert compute == round(sum(r["compute_seconds"] for r in quick))
    assert wall == round(sum(r["wall_seconds_this_run"] for r in quick))

    counts = count_decided({r["section"]: r["summary"] for r in quick})
    m = re.search(r"decides (\d+) of the (\d+) claims .*? and (\d+) of their (\d+) comparisons", readme)
    assert m, "README.md no longer states how many claims make demo decides"
    assert [int(g) for g in m.groups()] == [counts["claims_decided"], counts["claims"],
                                            counts["comparisons_decided"], counts["comparisons"]]

    full = {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in (DATA / "full").glob("*.json")}
    for section, record in full.items():
        m = re.search(rf"\b{section} ([\d,]+) s\b", readme)
        assert m, f"README.md does not state the CPU time of {section}'s full profile"
        assert int(m.group(1).replace(",", "")) == round(record["compute_seconds"]), section


def table_after(guide: str, anchor: str) -> list[list[str]]:
    """The cells of the first Markdown table after ``anchor`` in the guide's results (header and
    separator rows left out)."""
    body = HISTORY.sub("", (ROOT / "docs" / f"{guide}.md").read_text(encoding="utf-8"))
    start = body.index(anchor, body.index(MARKER))
    rows, seen = [], False
    for line in body[start:].splitlines():
        if line.startswith("|"):
            seen = True
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not set("".join(cells)) <= set("-: "):
                rows.append(cells)
        elif seen:
            break
    assert rows, f"docs/{guide}.md: no table after {anchor!r}"
    return rows[1:]  # the header row left out


def full(section: str) -> dict:
    return json.loads((DATA / "full" / f"{section}.json").read_text(encoding="utf-8"))["summary"]


def agrees(cell: str, value: float) -> bool:
    """``cell`` (``0.851``, or ``0.851 ± 0.011``: the mean is compared) is ``value`` rounded as quoted."""
    return quoted(value, cell.split("±")[0].strip(), 1.0)


def test_the_cape_guides_full_table_is_the_record():
    labels = {"no position": "none", "learned table, bicubic": "table", "sinusoids": "sine", "CAPE": "cape",
              "CAPE without scaling": "cape_noscale", "CAPE, mixed resolutions": "cape_mixed"}
    table = full("cape")["table"]
    rows = table_after("cape", "`docs/data/full/cape.json`")
    assert [r[0] for r in rows] == list(labels)
    for label, at16, away in rows:
        v = table[labels[label]]
        assert agrees(at16, v["accuracy"]["16"]["mean"]) and agrees(away, v["away"]["mean"]), label


def test_the_krpe_guides_full_table_is_the_record():
    train = full("krpe")["train"]
    rows = table_after("krpe", "`docs/data/full/krpe.json`")
    variants = ["performer_raw", "norm_nope", "norm_rpe", "softmax_rpe"]
    assert [r[0].split()[0] for r in rows] == ["copy", "recall"]
    for row in rows:
        for variant, cell in zip(variants, row[1:], strict=True):
            v = train[row[0].split()[0]][variant]["accuracy"]
            assert agrees(cell, v["mean"]) and quoted(v["std"], cell.split("±")[1].strip(), 1.0), (row[0], variant)


def test_the_graph_guides_full_table_is_the_record():
    settings = ["communities-link-I", "communities-link-T", "communities-pair-I", "grid-link-I", "grid-link-T"]
    models = {"GCN": "gcn", "P-GNN-E": "pgnn-e", "GIR": "gir"}
    table = full("gir")["table"]
    rows = table_after("graph", "`docs/data/full/gir.json`")
    assert [r[0] for r in rows] == list(models)
    for row in rows:
        for setting, cell in zip(settings, row[1:], strict=True):
            v = table[setting][models[row[0]]]
            assert agrees(cell, v["mean"]) and quoted(v["std"], cell.split("±")[1].strip(), 1.0), (row[0], setting)


def test_the_relative_guides_full_table_is_the_record():
    labels = {"none": "none", "sinusoidal": "sinusoidal", "learned table": "table", "CAPE": "cape",
              "CAPE, no global shift": "cape_noshift", "CAPE, scaling": "cape_scale", "RoPE": "rope",
              "RoPE + linear": "rope+linear", "RoPE + NTK": "rope+ntk", "RoPE + YaRN": "rope+yarn", "xPos": "xpos",
              "ALiBi": "alibi", "T5 buckets": "t5", "learned offsets": "learned", "FFT-RPE": "fft_rpe",
              "decay RPE": "decay_rpe"}
    table = full("relative")["table"]
    rows = table_after("relative", "`docs/data/full/relative.json`")
    assert [r[0] for r in rows] == list(labels)
    for row in rows:
        for i, task in enumerate(("shift", "recent", "first")):
            v = table[task][labels[row[0]]]
            at_l, beyond = row[1 + 2 * i], row[2 + 2 * i]
            assert agrees(at_l, v["accuracy"]["16"]["mean"]) and agrees(beyond, v["extrapolation"]["mean"]), (row[0], task)
