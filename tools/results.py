"""``docs/results.md``: the reproduction report and the benchmarks, generated from saved data.

``python -m tools.results [--runs runs/demo] [--check]`` (``make results``):

1. with ``--runs DIR`` (a ``posenc reproduce`` run directory that exists), each finished
   section's summary record ``DIR/<section>.json`` is copied to ``docs/data/<section>.json``
   (the committed snapshot; its rendered markdown is left out: it is rendered again here);
2. the page is rendered from ``docs/data/*.json`` with each section's own renderer
   (:mod:`posenc.report`) and from ``benchmarks/results/*.json`` with
   :mod:`benchmarks.tables`; the sections' figures are written to ``docs/figures/``.

Every input is validated before anything is written: each summary is read as a record
(:func:`posenc.report.store.read_summary`: a regular file of bounded size, every field the page
reads of the right type), must have been made by this checkout's code, and the whole page,
figures included, is rendered in memory first; a summary that fails any of these is one
``error:`` line naming the file (exit code 2), and ``docs/`` is left as it was. The files are
then written atomically (a temporary file renamed over each).

No number on the page is typed by hand: each comes from a saved record, shown with the date
it was produced, the machine's load average then (where recorded) and the command that
produced it. ``--check`` renders without writing anything and exits 1 when the committed page
differs (``tests/test_results_page.py`` does the same).
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from posenc.report.store import (
    InvalidSummary,
    atomic_write_bytes,
    atomic_write_text,
    check_summary_record,
    read_json,
    read_summary,
)

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "docs" / "data"
#: the full profiles' summaries (``posenc reproduce SECTION --profile full``), one per section
FULL = "full"
FIGURES = ROOT / "docs" / "figures"
BENCH = ROOT / "benchmarks" / "results"
PAGE = ROOT / "docs" / "results.md"

#: What a snapshot keeps of a section record (the rendered markdown is rendered again).
DROP = ("markdown",)


class RefusedRecord(ValueError):
    """A summary that ``make results`` cannot use (malformed, unreadable, or not renderable): the
    message names the file and what is wrong with it."""


class OtherVersion(RefusedRecord):
    """A run directory's section summary was made by code other than this checkout's."""


#: What reading a record or rendering it raises when the record is not what its writer wrote (a
#: valid summary record whose ``summary`` has another shape, an unreadable benchmark result):
#: reported as a refused record, naming the file.
RENDER_ERRORS: tuple[type[Exception], ...] = (KeyError, IndexError, TypeError, ValueError, AttributeError,
                                              OSError, RecursionError)


@contextlib.contextmanager
def _blame(path: Path, what: str = "a summary the page can render") -> Iterator[None]:
    """Turn a renderer's failure on the record read from ``path`` into a :class:`RefusedRecord`."""
    try:
        yield
    except RefusedRecord:
        raise
    except RENDER_ERRORS as err:
        text = (str(err).strip().splitlines() or [""])[0][:160]
        raise RefusedRecord(f"{path} is not {what} ({type(err).__name__}: {text}); nothing was written") from None


def check_version(name: str, record: dict, path: Path) -> None:
    """Refuse the summary ``record`` of section ``name`` unless this checkout's code made it: the
    source digest of the code its jobs run (:func:`posenc.report.provenance.source_digest`) and
    the torch version must match what the summary names."""
    import torch

    from posenc.report.provenance import describe_code, source_digest
    from posenc.report.registry import get_section

    code = record.get("code")
    jobs = get_section(name).plan(record.get("profile") or "quick", None)
    want = source_digest(jobs[0].run.__module__) if jobs else None
    if not isinstance(code, dict) or code.get("source") != want or code.get("torch") != torch.__version__:
        raise OtherVersion(f"{path} was made by other code ({describe_code(code)}), not by this checkout "
                           f"(source {str(want)[:8]}, torch {torch.__version__}): rerun it with this code into a fresh "
                           f"--out (e.g. `make demo OUT=runs/fresh`, then `make results OUT=runs/fresh`)")


def read_runs(runs: Path) -> dict[str, tuple[dict, Path]]:
    """The finished section summaries of the run directory ``runs``, validated, without their markdown.

    Returns:
        ``{section: (record without DROP's fields, the file it was read from)}``, in registry order.

    Raises:
        RefusedRecord: a summary is not a valid record (unreadable, not a regular file, too
            large, not JSON, a field of the wrong type; see
            :func:`posenc.report.store.read_summary`); OtherVersion: one was made by other code.
    """
    from posenc.report.registry import SECTIONS

    records = {}
    for name in SECTIONS:
        src = runs / f"{name}.json"
        if not os.path.lexists(src):  # a dangling symlink is there, and refused below
            continue
        try:
            record = read_summary(src, name, runs, optional=DROP)  # what is dropped may be absent
        except InvalidSummary as err:
            raise RefusedRecord(f"{err}; nothing was written") from None
        check_version(name, record, src)
        records[name] = ({k: v for k, v in record.items() if k not in DROP}, src)
    return records


def load_data(data: Path = DATA, profile: str | None = None) -> dict[str, tuple[dict, Path]]:
    """The committed snapshot: ``{section: (record, path)}`` of every ``data/<section>.json``, validated
    (with ``profile``, only the records of that profile).

    Raises:
        RefusedRecord: a snapshot file is not a valid summary record (its rendered markdown
            may be absent: a snapshot leaves it out).
    """
    from posenc.report.registry import SECTIONS

    out = {}
    for name in SECTIONS:
        path = data / f"{name}.json"
        if not os.path.lexists(path):
            continue
        try:
            record = read_json(path)
            problem = check_summary_record(record, name, optional=DROP)
        except UnicodeDecodeError:
            problem = "not UTF-8 text"
        except (ValueError, RecursionError) as err:
            problem = f"not JSON ({(str(err).splitlines() or [type(err).__name__])[0]})"
        except OSError as err:
            problem = getattr(err, "what", None) or f"unreadable ({err.strerror or err})"
        if problem is None and profile is not None and record.get("profile") != profile:
            problem = f"a record of the {record.get('profile')!r} profile where the {profile!r} one belongs"
        if problem is not None:
            raise RefusedRecord(f"{path} is not a valid snapshot of section {name!r} ({problem}); restore it "
                                f"from git, or rebuild it (`make demo`, then `make results`)")
        out[name] = (record, path)
    return out


def write_snapshot(records: dict[str, tuple[dict, Path]], data: Path = DATA) -> list[str]:
    """Write each record to ``data/<section>.json`` atomically; return the sections written."""
    if records:
        data.mkdir(parents=True, exist_ok=True)
    for name, (record, _) in records.items():
        atomic_write_text(data / f"{name}.json", json.dumps(record, indent=1) + "\n")
    return list(records)


def snapshot(runs: Path, data: Path = DATA) -> list[str]:
    """Copy every finished section record of the run directory ``runs`` to ``data``; return their names.

    Every record is validated (:func:`read_runs`) and rendered (figures in memory) before the
    first file is written.

    Raises:
        RefusedRecord: a section summary is not valid or cannot be rendered (nothing is copied).
        OtherVersion: a section summary was made by other code than this checkout's (nothing is copied).
    """
    records = read_runs(runs)
    render_sections(records, None)
    return write_snapshot(records, data)


# --------------------------------------------------------------------------- provenance
def _load(load: Any) -> str:
    if isinstance(load, (list, tuple)) and len(load) == 3:
        return " / ".join(f"{v:.1f}" for v in load)
    return "not recorded"


def _code(code: Any) -> str:
    """What made a section's records: the posenc source digest, the commit and the floating-point paths."""
    if not isinstance(code, dict):
        return "code not recorded"
    commit = f", commit `{str(code['commit'])[:12]}`" if code.get("commit") else ""
    return f"posenc source `{code.get('source')}`{commit}, torch {code.get('torch')}, {code.get('numerics')}"


def _date(record: dict) -> str:
    finished = record.get("finished")
    return finished.replace("T", " ") if finished else "not recorded"


def _bench_command(stem: str, result: dict) -> str:
    env = result.get("environment", {})
    if env.get("command"):
        return env["command"]
    name = result.get("benchmark", stem)
    if stem == name:
        return f"python -m benchmarks {name}"
    # a device's cases run alone (benchmarks/bench_<name>.py's own command line)
    device = next((k for k in ("cuda", "mps", "xpu") if k in result), None)
    if device:
        return f"python -m benchmarks.bench_{name} --device {device} --out benchmarks/results/{stem}.json"
    return f"python -m benchmarks {name} (saved as {stem}.json)"


# --------------------------------------------------------------------------- claims
def _claim_cell(claim: Any) -> str:
    """A claim's verdict, and how its paired comparisons came out when it has several."""
    from posenc.cli import _claim_word

    word = _claim_word(claim)
    if (isinstance(claim, dict) and isinstance(claim.get("comparisons"), list) and len(claim["comparisons"]) > 1
            and " comparisons " not in word):  # the CLI's word may already count them
        verdicts = [c.get("verdict") for c in claim["comparisons"]]
        counts = {v: verdicts.count(v) for v in ("holds", "not confirmed at this scale", "contradicted",
                                                    "not decided")}
        word += (f" ({counts['holds']} of {len(verdicts)} comparisons hold, {counts['not confirmed at this scale']} "
                 f"not confirmed, {counts['contradicted']} contradicted, {counts['not decided']} not decided)")
    return word


def _holm_cell(claim: Any) -> str:
    """The claim's verdicts after Holm's adjustment over its section's comparisons (``–`` where the
    section reads no interval)."""
    if not isinstance(claim, dict):
        return "–"
    if isinstance(claim.get("comparisons"), list):
        parts = claim["comparisons"]
    elif isinstance(claim.get("vs"), dict):
        parts = list(claim["vs"].values())
    else:
        parts = [claim]
    holm = [c.get("holm_verdict") for c in parts if isinstance(c, dict) and c.get("holm_verdict") is not None]
    if not holm:
        return "–"
    if len(holm) == 1:
        return holm[0]
    return f"holds in {holm.count('holds')} of {len(holm)} ({holm.count('contradicted')} contradicted)"


def _claims(records: dict[str, dict], full: dict[str, dict] | None = None) -> list[list[str]]:
    """One row per claim: section, claim, the quick verdict, after Holm, and (when ``full`` is given)
    the full profile's verdict of the same claim (``–``: that section has no full record)."""
    rows = []
    for name, rec in records.items():
        summary = rec.get("summary")
        claims = summary.get("claims", {}) if isinstance(summary, dict) else {}
        fsum = (full or {}).get(name, {}).get("summary")
        fclaims = fsum.get("claims", {}) if isinstance(fsum, dict) else None
        for claim, value in claims.items():
            row = [f"`{name}`", f"`{claim}`", _claim_cell(value), _holm_cell(value)]
            if full is not None:
                row.append("–" if fclaims is None else _claim_cell(fclaims[claim]) if claim in fclaims else "n/a")
            rows.append(row)
    return rows


def _decided_line(what: str, summaries: dict[str, Any]) -> str:
    from posenc.report.decided import count_decided

    c = count_decided(summaries)
    undecided = ", ".join(f"`{k}`" for k in c["undecided"])
    return (f"**{what}**: {c['claims_decided']} of {c['claims']} claims decided (every comparison reads holds or "
            f"contradicted), {c['comparisons_decided']} of {c['comparisons']} comparisons"
            + (f"; not decided: {undecided}." if undecided else "."))


# --------------------------------------------------------------------------- rendering
def _demote(markdown: str, levels: int) -> str:
    """Push every heading ``levels`` deeper (a section's report sits under this page's headings)."""
    return re.sub(r"^(#{1,6}) ", lambda m: "#" * min(6, len(m.group(1)) + levels) + " ", markdown, flags=re.M)


def render_sections(records: dict[str, tuple[dict, Path]], figures: Path | None) -> dict[str, str]:
    """Each section's markdown from its summary (``{name: (record, path read from)}``); the figures
    are written to ``figures`` (``None``: not written) once every section rendered, and the
    figures there that no section draws any more are removed.

    Raises:
        RefusedRecord: a section's renderer fails on its summary (nothing is written).
    """
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from posenc.report.registry import get_section

    out = {}
    drawn: dict[str, bytes] = {}
    for key, (rec, path) in records.items():
        name = key.split("/")[-1]  # "full/<section>": a full profile's record

        def save(fig_name: str, figure: Any, key: str = key) -> str:
            fname = f"{key.replace('/', '_')}_{fig_name}.png"
            try:
                if figures is not None:
                    buf = io.BytesIO()
                    figure.savefig(buf, format="png", dpi=90, bbox_inches="tight", metadata={"Software": None})
                    drawn[fname] = buf.getvalue()
                else:
                    drawn[fname] = b""
            finally:
                plt.close(figure)
            return f"figures/{fname}"

        with _blame(path):
            out[key] = get_section(name).render(rec["summary"], save)
    if figures is not None:
        for fname, png in drawn.items():
            target = figures / fname
            if not (target.is_file() and target.read_bytes() == png):
                atomic_write_bytes(target, png, fsync=False)
        for stale in sorted(figures.glob("*.png")):  # a figure the sections no longer draw
            if stale.name not in drawn:
                stale.unlink()
    return out


def render_page(data: Path = DATA, bench: Path = BENCH, figures: Path | None = None,
                records: dict[str, tuple[dict, Path]] | None = None,
                full: dict[str, tuple[dict, Path]] | None = None) -> str:
    """The whole page, from the snapshot in ``data`` and the benchmark results in ``bench``.

    Args:
        data: the committed snapshot (``<section>.json`` each, validated by :func:`load_data`).
        bench: the benchmark results.
        figures: where the sections' figures go once the whole page rendered (``None``: nowhere).
        records: ``{section: (record, path)}`` to render instead of ``data``'s (a run directory's
            summaries, read by :func:`read_runs`); the other sections come from ``data``.
        full: the same for the full profiles (instead of ``data/full``'s).

    Raises:
        RefusedRecord: a record is not valid or cannot be rendered (the message names its file);
            nothing has been written then.
    """
    from posenc.report.registry import SECTIONS
    from posenc.report.tables import markdown_table

    sys.path.insert(0, str(ROOT)) if str(ROOT) not in sys.path else None
    from benchmarks.tables import FORMATTERS

    loaded = {**load_data(data), **(records or {})}
    records = {name: loaded[name] for name in SECTIONS if name in loaded}
    loaded_full = {**load_data(data / FULL, profile="full"), **(full or {})}
    full = {name: loaded_full[name] for name in SECTIONS if name in loaded_full}
    lines = [
        "# Results",
        "",
        "<!-- generated by `make results` (python -m tools.results) from docs/data/*.json and "
        "benchmarks/results/*.json: do not edit by hand -->",
        "",
        "Every number on this page comes from a saved record: the reproduction report's summaries "
        "(`make demo` = `posenc reproduce --profile quick --out runs/demo --workers 2`, copied to "
        "`docs/data/` by `make results`) and the benchmarks' results (`make bench`, "
        "`benchmarks/results/*.json`). Each part gives the date it was produced, the machine's load average "
        "then (1 / 5 / 15 min, where recorded; the machine has the cores listed with each record) and its "
        "command. The quick profile is small and short: read \"not confirmed\" as \"not confirmed at this "
        "scale\". The full profiles (`posenc reproduce SECTION --profile full`, hours of CPU each) are recorded "
        "in `docs/data/full/` with the same provenance and shown beside the quick verdicts and under each "
        "section.",
        "",
    ]
    if records:
        rows, claims, headers = [], [], {}
        for name, (rec, path) in [*records.items(), *((f"full/{k}", v) for k, v in full.items())]:
            with _blame(path):
                v = rec.get("versions", {})
                jobs = rec.get("jobs") or {}
                wall = rec.get("wall_seconds_this_run")
                anchor = name.replace("/", "-")
                rows.append([f"[`{name.split('/')[-1]}`](#{anchor})", rec.get("profile", ""), len(jobs),
                             f"{rec.get('compute_seconds', 0):.0f}", "–" if wall is None else f"{wall:.0f}",
                             f"{rec.get('quick_budget_s', 0):.0f}",
                             _date(rec), _load(rec.get("load_average")),
                             f"torch {v.get('torch', '?')}, {v.get('cpus', '?')} CPUs",
                             f"`{rec.get('command') or ''}`"])
                if "/" not in name:
                    claims += _claims({name: rec}, {k: v[0] for k, v in full.items()} if full else None)
                    headers[name] = [f'<a id="{anchor}"></a>', "", f"### {rec['title']}", ""]
                else:
                    headers[name] = [f'<a id="{anchor}"></a>', "", "#### Full profile", ""]
                headers[name] += [
                                 f"*Produced by `{rec.get('command') or 'posenc reproduce'}` "
                                 f"({rec.get('profile', '')} profile) with {_code(rec.get('code'))}, finished "
                                 f"{_date(rec)}, load average {_load(rec.get('load_average'))}; "
                                 f"{len(jobs)} jobs, {rec.get('compute_seconds', 0):.0f} s of CPU (the jobs' process "
                                 "time).*", ""]
        lines += ["## Reproduction report", "",
                  markdown_table(["section", "profile", "jobs", "compute (s)", "wall (s)", "quick budget (s)",
                                  "finished", "load average", "machine", "command"], rows), "",
                  "`compute` adds up the seconds of every job (as they were measured, whenever they ran); `wall` is "
                  "the time the section took in the run that finished it (jobs already done were skipped).", ""]
        if claims:
            head = ["section", "claim", "verdict (quick)", "after Holm (quick)"] + (["verdict (full)"] if full else [])
            lines += ["### Claims checked", "",
                      "Verdicts as `posenc reproduce` reads them from each claim's paired per-seed differences "
                      "(yes / no for the claims that are single checks); *after Holm*: the same with every "
                      "comparison of the section in one family (Holm's step-down adjustment at 5 %); no verdict "
                      "is read from fewer than 3 usable pairs (\"not decided\"; the convergence gate and the "
                      "smallest difference that matters are explained in the [guides' introduction](index.md)). "
                      "*Full*: the same claim in the section's full profile (`–`: none recorded).", "",
                      _decided_line("Quick profile", {k: v[0]["summary"] for k, v in records.items()}), ""]
            if full:
                lines += [_decided_line("Full profiles", {k: v[0]["summary"] for k, v in full.items()}), ""]
            lines += [markdown_table(head, claims), ""]
    bench_lines = []
    results = sorted(bench.glob("*.json"))
    if results:
        bench_lines += ["## Performance (`make bench`)", "",
                        "Tables printed by `python -m benchmarks.tables` from `benchmarks/results/*.json`; each "
                        "area's guide discusses its goals. Timings are noisy on a busy machine: compare ratios within "
                        "one table, not across tables.", ""]
        for path in results:
            with _blame(path, "a benchmark result the page can render"):
                r = read_json(path)
                env = r.get("environment", {})
                fmt = FORMATTERS.get(r.get("benchmark", path.stem))
                if fmt is None:
                    continue
                bench_lines += [f"### {path.stem}", "",
                                f"*Produced by `{_bench_command(path.stem, r)}` on "
                                f"{env.get('date', 'a date not recorded')}, load average "
                                f"{_load(env.get('load_average'))}, torch {env.get('torch', '?')}, "
                                f"{env.get('cpus', '?')} CPUs.*", "",
                                fmt(r).rstrip(), ""]
    if records:  # the figures are written once every section rendered, after every other input was read
        bodies = render_sections({**records, **{f"full/{k}": v for k, v in full.items()}}, figures)
        for name in records:
            lines += [*headers[name], _demote(bodies[name].rstrip(), 2), ""]
            if f"full/{name}" in bodies:
                lines += ["<details><summary>The full profile's report</summary>", "",
                          *headers[f"full/{name}"], _demote(bodies[f"full/{name}"].rstrip(), 3), "", "</details>", ""]
    lines += bench_lines
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    """``python -m tools.results``: 0 when written (or, with ``--check``, when the page is current),
    1 when ``--check`` finds it stale, 2 with one ``error:`` line when an input is refused."""
    parser = argparse.ArgumentParser(prog="python -m tools.results", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, default=None,
                        help="a posenc reproduce run directory to snapshot into docs/data/ first (skipped if absent)")
    parser.add_argument("--full", type=Path, default=None,
                        help="a run directory of full profiles to snapshot into docs/data/full/ first (skipped if absent)")
    parser.add_argument("--check", action="store_true", help="compare with docs/results.md instead of writing it")
    args = parser.parse_args(argv)
    try:
        return _main(args)
    except RefusedRecord as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


def _main(args: argparse.Namespace) -> int:
    if args.check:
        text = render_page(data=DATA, bench=BENCH)
        old = PAGE.read_text(encoding="utf-8") if PAGE.exists() else ""
        if old != text:
            sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), text.splitlines(True), str(PAGE),
                                                       "rendered now"))
            return 1
        return 0
    records: dict[str, tuple[dict, Path]] = {}
    if args.runs is not None:
        if args.runs.is_dir():
            records = read_runs(args.runs)
        elif os.path.lexists(args.runs):
            print(f"error: --runs {str(args.runs)!r} is not a directory: give the run directory of "
                  f"`posenc reproduce --out DIR` (it holds <section>.json and jobs/)", file=sys.stderr)
            return 2
        else:
            print(f"{args.runs} does not exist: rendering the committed snapshot in {DATA}", file=sys.stderr)
    full: dict[str, tuple[dict, Path]] = {}
    if args.full is not None:
        if args.full.is_dir():
            full = {k: v for k, v in read_runs(args.full).items() if v[0].get("profile") == "full"}
        elif os.path.lexists(args.full):
            print(f"error: --full {str(args.full)!r} is not a directory: give the run directory of "
                  f"`posenc reproduce SECTION --profile full --out DIR`", file=sys.stderr)
            return 2
        else:
            print(f"{args.full} does not exist: rendering the committed full profiles in {DATA / FULL}", file=sys.stderr)
    # every input is read, validated and rendered (figures in memory) before the first write
    page = render_page(data=DATA, bench=BENCH, records=records, figures=FIGURES, full=full)
    if args.runs is not None and args.runs.is_dir():
        copied = write_snapshot(records, DATA)
        print(f"snapshot of {args.runs}: {', '.join(copied) or 'no finished section'} -> {DATA}", file=sys.stderr)
    if full:
        copied = write_snapshot(full, DATA / FULL)
        print(f"snapshot of {args.full}: {', '.join(copied)} -> {DATA / FULL}", file=sys.stderr)
    atomic_write_text(PAGE, page)
    print(f"wrote {PAGE}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
