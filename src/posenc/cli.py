"""The ``posenc`` command: thin — parse, call the library, print.

Numbers go to stdout (a rich table, or one JSON object with ``--json``);
progress bars and errors go to stderr. A bad argument or input file ends with
one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

import posenc

app = typer.Typer(
    name="posenc",
    help="Positional encodings across modalities: fit, analyse, and reproduce the papers' claims.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
out_console = Console()
err_console = Console(stderr=True)


def _to_json(payload: Any) -> str:
    from posenc.report.store import to_json

    return to_json(payload, indent=None)


class CliError(Exception):
    """A user error: printed as one line, exit code 2."""


def _version(value: bool) -> None:
    if value:
        out_console.print(f"posenc {posenc.__version__}", highlight=False)
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """posenc: positional encodings, their theory, and reproductions of six papers."""


# ----------------------------------------------------------------------------- helpers
def _parse_value(text: str) -> Any:
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    if "," in text:
        return tuple(_parse_value(t) for t in text.split(","))
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def parse_sets(items: list[str] | None) -> dict[str, Any]:
    """``["sigma=0.01", "num_features=512"]`` -> ``{"sigma": 0.01, "num_features": 512}``."""
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise CliError(f"--set expects key=value, got {item!r}")
        out[key.strip()] = _parse_value(value.strip())
    return out


def _emit(payload: dict, as_json: bool, title: str) -> None:
    if as_json:
        sys.stdout.write(_to_json(payload) + "\n")
        return
    table = Table(title=title, show_header=False)
    for key, value in payload.items():
        if isinstance(value, float):
            value = f"{value:.4g}"
        elif isinstance(value, dict):
            value = ", ".join(f"{k}={v}" for k, v in value.items())
        table.add_row(key, str(value))
    out_console.print(table)


def _duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    h, rem = divmod(seconds, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}h{m:02d}m{sec:02d}s" if h else (f"{m}m{sec:02d}s" if m else f"{sec}s")


class PlainProgress:
    """Progress as plain lines on a stream that is not a terminal (CI logs, nohup, a Ray worker).

    One line per :meth:`update` that ``force``s it (a finished job), else at most one
    every ``every`` seconds, each with the item, done/total, elapsed time and an ETA
    extrapolated from the work done *in this run* (``skipped`` work is not timed).
    """

    def __init__(self, description: str, stream: Any = None, every: float = 5.0, unit: str = "",
                 start: float | None = None, rate_from_first: bool = False) -> None:
        import time

        self.description, self.every, self.unit = description, every, unit
        self.stream = stream if stream is not None else sys.stderr
        self._clock = time.monotonic
        self.start = self._clock() if start is None else start  # a time.monotonic() value
        self._last = -float("inf")
        self._done = 0.0
        self._skipped = 0.0
        # rate_from_first: measure the rate from the first update on (a loop whose first
        # step carries one-off set-up time), not from ``start``
        self._rate_from_first = rate_from_first
        self._first: tuple[float, float] | None = None

    def update(self, done: float, total: float, item: str = "", force: bool = False, skipped: bool = False,
               count: str = "") -> None:
        """``done`` of ``total`` (any unit); ``skipped``: the work since the last call took no time."""
        now = self._clock()
        if skipped:
            self._skipped += done - self._done
        self._done = done
        if not force and now - self._last < self.every and done < total:
            return
        if self._first is None:
            self._first = (now, done)
        self._last = now
        elapsed = now - self.start
        if self._rate_from_first:
            spent, worked = now - self._first[0], done - self._first[1]
        else:
            spent, worked = elapsed, done - self._skipped
        left = max(0.0, total - done)
        eta = "0s" if left == 0 else (_duration(spent / worked * left) if worked > 0 else "?")
        pct = 100.0 * done / total if total else 100.0
        head = f"{self.description}: {item}, " if item else f"{self.description}: "
        amount = count or f"{done:g}/{total:g}{self.unit}"
        self.stream.write(f"{head}{amount} ({pct:.0f}%), elapsed {_duration(elapsed)}, ETA {eta}\n")
        self.stream.flush()


def _stderr_is_terminal() -> bool:
    return err_console.is_terminal


@contextmanager
def _progress(description: str, total: int, enabled: bool = True):
    """Yield ``update(done, total)``; a bar on a terminal (it vanishes when done), else
    a plain line every few seconds (see :class:`PlainProgress`)."""
    if not enabled:
        yield lambda done, total: None
        return
    if not _stderr_is_terminal():
        plain = PlainProgress(description, unit=" steps", rate_from_first=True)
        yield lambda done, tot: plain.update(done, tot)
        return
    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=err_console, transient=True,
    ) as bar:
        task = bar.add_task(description, total=total)

        def update(done: float, tot: float) -> None:
            bar.update(task, completed=done, total=tot)

        yield update


def _run(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except (CliError, ValueError, TypeError, FileNotFoundError, IsADirectoryError, PermissionError) as err:
        msg = str(err).splitlines()[0] if str(err) else err.__class__.__name__
        sys.stderr.write(f"error: {msg}\n")
        raise typer.Exit(code=2) from None


def _make_encoding(name: str, settings: dict, in_dim: int, train_samples: int | None = None):
    """Build the encoding; when its width is not given, take ``suggest_bandwidth``'s proposal.

    Returns ``(encoding, suggested)`` where ``suggested`` is the proposed width or None.
    """
    from posenc.analysis import suggest_bandwidth
    from posenc.encodings import create_encoding, encoding_class

    settings = dict(settings)
    settings.setdefault("in_dim", in_dim)
    settings.setdefault("normalize", True)
    if settings["in_dim"] != in_dim:
        raise CliError(f"--set in_dim={settings['in_dim']} does not match the data's {in_dim} coordinate(s)")
    suggested = None
    param = encoding_class(name).width_param
    if train_samples is not None and param is not None and param not in settings:
        extra = {k: v for k, v in settings.items() if k in ("num_features", "seed")}
        suggested = suggest_bandwidth(train_samples, name, **extra)["value"]
        settings[param] = suggested
    return create_encoding(name, **settings), suggested


def _check_model(model: str) -> str:
    from posenc.models.coordinate import MODELS

    if model not in MODELS:
        raise CliError(f"--model must be one of {', '.join(MODELS)}, got {model!r}")
    return model


# ----------------------------------------------------------------------------- commands
EncodingOpt = Annotated[str, typer.Option("--encoding", "-e", help="Encoding name (see `posenc encodings`).")]
SetOpt = Annotated[
    Optional[list[str]], typer.Option("--set", "-s", help="Encoding argument key=value (repeatable).")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout and nothing else.")]


@app.command("encodings")
def encodings_cmd(as_json: JsonOpt = False) -> None:
    """List the registered encodings and their arguments."""
    from posenc.encodings import available_encodings, encoding_parameters

    payload = {name: {k: repr(v) for k, v in encoding_parameters(name).items()} for name in available_encodings()}
    if as_json:
        sys.stdout.write(json.dumps(payload) + "\n")
        return
    table = Table(title="encodings")
    table.add_column("name")
    table.add_column("arguments (defaults)")
    for name, params in payload.items():
        table.add_row(name, ", ".join(f"{k}={v}" for k, v in params.items()))
    out_console.print(table)


@app.command("fit-signal")
def fit_signal_cmd(
    encoding: EncodingOpt = "gaussian",
    signal: Annotated[Optional[Path], typer.Option(help="A 1D signal as .npy or .csv (default: a row of the embedded photograph).")] = None,
    sets: SetOpt = None,
    model: Annotated[str, typer.Option(help="linear | mlp | lstsq")] = "linear",
    iters: Annotated[int, typer.Option(help="Adam steps (linear, mlp).")] = 2000,
    lr: Annotated[float, typer.Option(help="Adam learning rate.")] = 1e-3,
    seed: Annotated[int, typer.Option(help="Seed of the model initialisation.")] = 0,
    ridge: Annotated[float, typer.Option(help="lstsq: Tikhonov weight relative to the largest eigenvalue (0 = minimum-norm, as in the paper).")] = 0.0,
    threads: Annotated[int, typer.Option(help="torch threads.")] = 2,
    as_json: JsonOpt = False,
) -> None:
    """Fit a 1D signal from its even samples and test on the odd ones.

    Without --set for the encoding's width (sigma, width, max_freq), the width
    proposed by suggest_bandwidth for the number of training samples is used.
    """

    def go() -> dict:
        import torch

        from posenc.analysis import distance_preservation, embedding_matrix, similarity_profile, stable_rank
        from posenc.data.signals import image_rows, load_signal
        from posenc.models.coordinate import fit_coordinates
        from posenc.positions import grid_1d

        _check_model(model)
        torch.set_num_threads(max(1, threads))
        if signal is None:
            sig, rescaled, source = image_rows(1, 512, seed=0)[0], False, "embedded: china.jpg row (512 samples)"
        else:
            (sig, rescaled), source = load_signal(signal), str(signal)
        n = sig.shape[0]
        enc, suggested = _make_encoding(encoding, parse_sets(sets), 1, train_samples=(n + 1) // 2)
        x = grid_1d(n, enc.domain if hasattr(enc, "domain") else (0.0, 1.0), dtype=torch.float32)
        y = sig.to(torch.float32)
        with _progress(f"fit {encoding} ({model})", iters, not as_json) as update:
            res = fit_coordinates(enc, x[::2], y[::2], x[1::2], y[1::2], model, iters=iters, lr=lr, seed=seed,
                                  ridge=ridge, progress=update)
        psi = embedding_matrix(enc, n)
        disp, sim = similarity_profile(enc, n)
        return {
            "signal": source, "samples": n, "rescaled_to_unit_range": rescaled, "encoding": encoding,
            "encoding_repr": repr(enc), "width_from_suggest_bandwidth": suggested is not None, "model": model,
            "train_psnr": res.train_psnr, "test_psnr": res.test_psnr,
            "stable_rank": stable_rank(psi[::2]), "dp_width": distance_preservation(disp, sim),
            "seconds": res.seconds,
        }

    _emit(_run(go), as_json, "fit-signal")


@app.command("fit-image")
def fit_image_cmd(
    image: Annotated[Optional[Path], typer.Argument(help="A PNG/JPEG file (default: the embedded china.jpg).")] = None,
    encoding: EncodingOpt = "gaussian",
    sets: SetOpt = None,
    model: Annotated[str, typer.Option(help="linear | mlp | lstsq")] = "mlp",
    size: Annotated[int, typer.Option(help="Centre-crop and resize to size x size.")] = 256,
    grayscale: Annotated[bool, typer.Option(help="Fit one luminance channel.")] = False,
    iters: Annotated[int, typer.Option(help="Adam steps (linear, mlp); the paper uses 2000.")] = 500,
    lr: Annotated[float, typer.Option(help="Adam learning rate.")] = 1e-3,
    seed: Annotated[int, typer.Option(help="Seed of the model initialisation.")] = 0,
    save: Annotated[Optional[Path], typer.Option(help="Write the full reconstruction as PNG here.")] = None,
    ridge: Annotated[float, typer.Option(help="lstsq: Tikhonov weight relative to the largest eigenvalue (0 = minimum-norm).")] = 0.0,
    threads: Annotated[int, typer.Option(help="torch threads.")] = 2,
    as_json: JsonOpt = False,
) -> None:
    """Fit an image from its [::2, ::2] pixels and test on the other three quarters.

    Without --set for the encoding's width, suggest_bandwidth's proposal for
    size/2 samples per axis is used.
    """

    def go() -> dict:
        import torch

        from posenc.data.images import load_image, sample_image, save_image
        from posenc.models.coordinate import fit_coordinates
        from posenc.positions import grid, subsample_mask

        _check_model(model)
        if size < 4:
            raise CliError(f"--size must be >= 4, got {size}")
        torch.set_num_threads(max(1, threads))
        if image is None:
            img, source = sample_image("china", size=size, grayscale=grayscale), "embedded: china.jpg"
        else:
            img, source = load_image(image, size=size, grayscale=grayscale), str(image)
        settings = parse_sets(sets)
        settings.setdefault("num_features", 256)
        # the width is suggested per axis: size / 2 training samples along each
        enc, suggested = _make_encoding(encoding, settings, 2, train_samples=(size + 1) // 2)
        pos = grid((size, size), dtype=torch.float32)
        mask = subsample_mask((size, size), 2)
        y = img.to(torch.float32)
        with _progress(f"fit {encoding} ({model})", iters, not as_json) as update:
            res = fit_coordinates(enc, pos[mask], y[mask], pos[~mask], y[~mask], model, iters=iters, lr=lr,
                                  seed=seed, ridge=ridge, predict_x=pos.reshape(-1, 2) if save else None,
                                  progress=update)
        if save is not None:
            save_image(save, res.predictions.reshape(size, size, -1))
        return {
            "image": source, "size": size, "channels": int(img.shape[-1]), "encoding": encoding,
            "encoding_repr": repr(enc), "width_from_suggest_bandwidth": suggested is not None, "model": model,
            "train_psnr": res.train_psnr, "test_psnr": res.test_psnr,
            "seconds": res.seconds, "saved": None if save is None else str(save),
        }

    _emit(_run(go), as_json, "fit-image")


@app.command("analyze")
def analyze_cmd(
    encoding: EncodingOpt = "gaussian",
    sets: SetOpt = None,
    num_points: Annotated[int, typer.Option(help="Regular samples of the domain.")] = 512,
    threshold: Annotated[float, typer.Option(help="Similarity threshold of the distance-preservation width.")] = 0.1,
    suggest: Annotated[Optional[int], typer.Option(help="Also suggest a width for this many training samples.")] = None,
    plot: Annotated[Optional[Path], typer.Option(help="Save the similarity profile and spectrum as PNG.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Stable rank and distance preservation of a 1D encoding (no training)."""

    def go() -> dict:
        import torch

        from posenc.analysis import distance_preservation, embedding_matrix, similarity_profile, stable_rank, suggest_bandwidth

        if num_points < 2:
            raise CliError(f"--num-points must be >= 2, got {num_points}")
        settings = parse_sets(sets)
        enc, _ = _make_encoding(encoding, settings, 1)
        psi = embedding_matrix(enc, num_points)
        disp, sim = similarity_profile(enc, num_points)
        payload: dict[str, Any] = {
            "encoding": encoding, "encoding_repr": repr(enc), "num_points": num_points,
            "stable_rank": stable_rank(psi), "dp_width": distance_preservation(disp, sim, threshold),
            "threshold": threshold,
        }
        if suggest is not None:
            kwargs = {k: v for k, v in settings.items() if k not in ("normalize", enc.width_param)}
            payload["suggestion"] = suggest_bandwidth(suggest, encoding, **kwargs)
        if plot is not None:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt

            from posenc.report.store import atomic_write_bytes

            sv = torch.linalg.svdvals(psi)
            fig, ax = plt.subplots(1, 2, figsize=(10, 3.5))
            ax[0].plot(disp.numpy(), sim.numpy())
            ax[0].axhline(threshold, ls=":", c="gray")
            ax[0].set_xlabel("displacement")
            ax[0].set_ylabel("cosine similarity to the centre")
            ax[1].semilogy((sv / sv[0]).numpy())
            ax[1].set_xlabel("index")
            ax[1].set_ylabel("singular value / largest")
            fig.suptitle(repr(enc), fontsize=8)
            import io

            buf = io.BytesIO()
            fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
            plt.close(fig)
            atomic_write_bytes(plot, buf.getvalue())
            payload["plot"] = str(plot)
        return payload

    _emit(_run(go), as_json, "analyze")


@app.command("reproduce")
def reproduce_cmd(
    sections: Annotated[Optional[list[str]], typer.Argument(help="Sections to run (default: all).")] = None,
    profile: Annotated[str, typer.Option(help="quick (minutes) | full (faithful, more seeds).")] = "quick",
    out: Annotated[Optional[Path], typer.Option(help="Run directory (default runs/<timestamp>); re-use it to resume.")] = None,
    seeds: Annotated[Optional[int], typer.Option(help="Override the profile's number of seeds.")] = None,
    shard: Annotated[Optional[str], typer.Option(help="Run only shard i/n of the jobs, balanced by cost (for external schedulers).")] = None,
    job: Annotated[Optional[list[str]], typer.Option("--job", help="Run only the job with this key (repeatable; one section).")] = None,
    list_jobs: Annotated[bool, typer.Option("--list-jobs", help="List the planned jobs (of --shard, if given) and exit.")] = False,
    workers: Annotated[int, typer.Option(help="Jobs at once: local worker processes.")] = 1,
    executor: Annotated[str, typer.Option(help="local (this machine) | ray (pip install 'posenc[ray]').")] = "local",
    address: Annotated[Optional[str], typer.Option(help="Ray cluster: auto | ray://host:port (default: start or join a local one).")] = None,
    threads: Annotated[Optional[int], typer.Option(help="torch threads per job (default: cores // workers, at least 1).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Run the registered reproduction sections and write DIR/report.md.

    Jobs are claimed in DIR before they run, so several runs (or an array of
    --shard runs) on one DIR split the work; a failed job is reported after the
    others finished and were stored (exit code 1).
    """
    from posenc.report.runner import JobsFailed

    def go() -> dict:
        import torch

        from posenc.report.executors import default_threads
        from posenc.report.registry import available_sections
        from posenc.report.runner import parse_shard, plan_jobs, reproduce, select_jobs

        if workers < 1:
            raise CliError(f"--workers must be >= 1, got {workers}")
        if threads is not None and threads < 1:
            raise CliError(f"--threads must be >= 1, got {threads}")
        torch.set_num_threads(threads or default_threads(workers))
        names = list(sections or available_sections())
        if list_jobs:
            shard_t = parse_shard(shard)
            return {name: [{"key": j.key, "cost": j.cost, "alone": j.alone, "config": j.config_dict()}
                           for j in select_jobs(plan_jobs(name, profile, seeds), shard_t, job)]
                    for name in names}
        argv = ["posenc", *sys.argv[1:]]
        kwargs = dict(argv=argv, workers=workers, executor=executor, address=address, threads=threads, jobs=job)
        if not _stderr_is_terminal():
            import time

            plain: dict[str, PlainProgress] = {}
            began = {"t": time.monotonic()}

            def progress(section: str, key: str, done: float, total: float, skipped: bool,
                         count: int = 0, of: int = 0) -> None:
                if section not in plain:  # a section's clock starts when the previous one ended
                    plain[section] = PlainProgress(f"reproduce {section}", start=began["t"])
                bar = plain[section]
                bar.update(done, total, f"{key}{' (done before)' if skipped else ''}", force=True,
                           skipped=skipped, count=f"{count}/{of} jobs")
                if count == of:
                    began["t"] = time.monotonic()

            return reproduce(names, profile, out, seeds, shard, progress, **kwargs)
        state = {"bar": None, "task": None}
        with Progress(
            TextColumn("{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
            TimeElapsedColumn(), console=err_console, transient=False,
        ) as bar:
            def progress(section: str, key: str, done: float, total: float, skipped: bool,
                         count: int = 0, of: int = 0) -> None:
                if state["task"] is None or state["bar"] != section:
                    state["bar"], state["task"] = section, bar.add_task(section, total=total)
                bar.update(state["task"], completed=done, total=total,
                           description=f"{section} {count}/{of}: {key}{' (done before)' if skipped else ''}")

            result = reproduce(names, profile, out, seeds, shard, progress, **kwargs)
        return result

    try:
        payload = _run(go)
    except JobsFailed as err:
        if as_json:
            sys.stdout.write(_to_json({**err.payload, "failed": err.failures}) + "\n")
        sys.stderr.write(f"error: {err}\n")
        raise typer.Exit(code=1) from None
    if as_json or list_jobs:
        if not as_json:
            for name, jobs in payload.items():
                out_console.print(f"[bold]{name}[/]: {len(jobs)} jobs")
                for item in jobs:
                    out_console.print(f"  {item['key']}", highlight=False)
            return
        sys.stdout.write(_to_json(payload) + "\n")
        return
    out_console.print(f"report: {payload['report'] or '(shard or --job run: no report)'}", highlight=False)
    for name, lists in payload.get("jobs", {}).items():
        if shard or job:
            out_console.print(f"{name}: computed {len(lists['computed'])}, skipped {len(lists['skipped'])}, "
                              f"claimed by another run {len(lists['claimed_elsewhere'])}", highlight=False)
    for name, rec in payload["sections"].items():
        claims = rec["summary"].get("claims", {}) if isinstance(rec["summary"], dict) else {}
        verdicts = ", ".join(f"{k}: {_claim_word(v)}" for k, v in claims.items())
        out_console.print(f"{name}: {rec['compute_seconds']:.0f} s of compute; {verdicts}", highlight=False)


def _claim_holds(claim: Any) -> bool | None:
    """``claim["holds"]``, or for a claim checked per dataset, whether it holds on all."""
    if not isinstance(claim, dict):
        return None
    if "holds" in claim:
        return bool(claim["holds"])
    parts = [_claim_holds(v) for v in claim.values() if isinstance(v, dict)]
    parts = [p for p in parts if p is not None]
    return all(parts) if parts else None


def _claim_word(claim: Any) -> str:
    """A claim's verdict: its ``verdict`` text (holds / not confirmed at this scale /
    contradicted) when it has one, else yes / no / n/a from ``holds``."""
    if isinstance(claim, dict) and isinstance(claim.get("verdict"), str):
        return claim["verdict"]
    return {True: "yes", False: "no", None: "n/a"}[_claim_holds(claim)]


def main() -> None:
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
