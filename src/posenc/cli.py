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


@contextmanager
def _progress(description: str, total: int, enabled: bool = True):
    """Yield ``update(done, total)``; the bar is drawn on stderr, and vanishes when done."""
    if not enabled:
        yield lambda done, total: None
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


@app.command("search")
def search_cmd(
    space: Annotated[str, typer.Option(help="Search space: nb201-micro | nb201 | pe | darts-micro.")] = "nb201-micro",
    selector: Annotated[str, typer.Option(help="pt (DARTS+PT) | pt-fixed (PT with fixed alpha) | magnitude (DARTS).")] = "pt",
    seed: Annotated[int, typer.Option(help="Seed of the weights, batches, edge order and tie breaks.")] = 0,
    steps: Annotated[int, typer.Option(help="Supernet training steps (batches of 64 digits).")] = 100,
    finetune_epochs: Annotated[float, typer.Option(help="Weight fine-tuning epochs after each PT decision.")] = 0.0,
    criterion: Annotated[str, typer.Option(help="PT criterion: loss | accuracy.")] = "loss",
    threads: Annotated[int, typer.Option(help="torch threads (1 is fastest for these tiny models).")] = 1,
    as_json: JsonOpt = False,
) -> None:
    """Search an architecture on 8x8 digits: train a supernet, select (DARTS-PT or magnitude)."""

    def go() -> dict:
        import torch

        from posenc.search import CRITERIA, SELECTORS, SPACE_TRAINING, SPACES, build_space, digits_splits, evaluate
        from posenc.search import run_search

        if space not in SPACES:
            raise CliError(f"--space must be one of {', '.join(SPACES)}, got {space!r}")
        if selector not in SELECTORS:
            raise CliError(f"--selector must be one of {', '.join(SELECTORS)}, got {selector!r}")
        if criterion not in CRITERIA:
            raise CliError(f"--criterion must be one of {', '.join(CRITERIA)}, got {criterion!r}")
        if steps < 0:
            raise CliError(f"--steps must be >= 0, got {steps}")
        if finetune_epochs < 0:
            raise CliError(f"--finetune-epochs must be >= 0, got {finetune_epochs}")
        torch.set_num_threads(max(1, threads))
        data = digits_splits(seed=0)
        torch.manual_seed(seed)
        model = build_space(space)
        with _progress(f"search {space} ({selector})", steps, not as_json) as update:
            res = run_search(model, data["train"], data["val"], selector=selector, steps=steps,
                             finetune_epochs=finetune_epochs, criterion=criterion, seed=seed,
                             train_kwargs=SPACE_TRAINING[space],
                             progress=lambda stage, done, total: update(done, total))
        test_loss, test_acc = evaluate(model, data["test"])
        return {"space": space, "selector": selector, "seed": seed, "steps": steps, **res,
                "selected": {**res["selected"], "test_loss": test_loss, "test_accuracy": test_acc}}

    payload = _run(go)
    if as_json:
        sys.stdout.write(_to_json(payload) + "\n")
        return
    sup, sel = payload["supernet"], payload["selected"]
    arch = Table(title=f"search {payload['space']} ({payload['selector']}, seed {payload['seed']})")
    for col in ("edge", "chosen", "scores (" + payload["criterion"] + ("; masked" if payload["selector"] != "magnitude" else "") + ")"):
        arch.add_column(col)
    for dec in payload["selection"]["decisions"]:
        scores = ", ".join(f"{k}={v:.4g}" for k, v in dec["scores"].items())
        arch.add_row(dec["edge"], dec["chosen"], scores)
    out_console.print(arch)
    out_console.print(
        f"supernet: val accuracy {sup['val_accuracy']:.3f}, train loss {sup['train_loss_first'] or float('nan'):.3f} -> "
        f"{sup['train_loss_last'] or float('nan'):.3f} ({sup['steps']} steps)\n"
        f"selected: val accuracy {sel['val_accuracy']:.3f}, test accuracy {sel['test_accuracy']:.3f} "
        f"(supernet weights, not retrained)", highlight=False)


@app.command("reproduce")
def reproduce_cmd(
    sections: Annotated[Optional[list[str]], typer.Argument(help="Sections to run (default: all).")] = None,
    profile: Annotated[str, typer.Option(help="quick (minutes) | full (faithful, more seeds).")] = "quick",
    out: Annotated[Optional[Path], typer.Option(help="Run directory (default runs/<timestamp>); re-use it to resume.")] = None,
    seeds: Annotated[Optional[int], typer.Option(help="Override the profile's number of seeds.")] = None,
    shard: Annotated[Optional[str], typer.Option(help="Run only shard i/n of the jobs (for external schedulers).")] = None,
    list_jobs: Annotated[bool, typer.Option("--list-jobs", help="List the planned jobs and exit.")] = False,
    threads: Annotated[int, typer.Option(help="torch threads (jobs may set their own).")] = 2,
    as_json: JsonOpt = False,
) -> None:
    """Run the registered reproduction sections and write DIR/report.md."""

    def go() -> dict:
        import torch

        from posenc.report.registry import available_sections
        from posenc.report.runner import plan_jobs, reproduce

        torch.set_num_threads(max(1, threads))
        names = list(sections or available_sections())
        if list_jobs:
            return {name: [{"key": j.key, "config": j.config_dict()} for j in plan_jobs(name, profile, seeds)]
                    for name in names}
        state = {"bar": None, "task": None}
        with Progress(
            TextColumn("{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
            TimeElapsedColumn(), console=err_console, transient=False,
        ) as bar:
            def progress(section: str, key: str, done: float, total: float, skipped: bool) -> None:
                if state["task"] is None or state["bar"] != section:
                    state["bar"], state["task"] = section, bar.add_task(section, total=total)
                bar.update(state["task"], completed=done, total=total,
                           description=f"{section}: {key}{' (done before)' if skipped else ''}")

            result = reproduce(names, profile, out, seeds, shard, progress,
                               argv=["posenc", *sys.argv[1:]])
        return result

    payload = _run(go)
    if as_json or list_jobs:
        if not as_json:
            for name, jobs in payload.items():
                out_console.print(f"[bold]{name}[/]: {len(jobs)} jobs")
                for job in jobs:
                    out_console.print(f"  {job['key']}", highlight=False)
            return
        sys.stdout.write(_to_json(payload) + "\n")
        return
    out_console.print(f"report: {payload['report'] or '(shard run: no report)'}", highlight=False)
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
