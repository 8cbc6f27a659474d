"""The ``posenc`` command: thin — parse, call the library, print.

Numbers go to stdout (a rich table, or one JSON object with ``--json``);
progress bars and errors go to stderr. A bad argument or input file (including
a usage error: unknown option or command, a value of the wrong type) ends with
one ``error: ...`` line on stderr and exit code 2, never a traceback; so does
a command whose estimated memory exceeds ``--max-memory`` (checked before any
work starts) and a fit that diverged. Numbers are bounded where they are parsed:
every integer option lies in int64 (a ``--seed`` in ``[0, 2**63 - 1]``), every
float option is finite, counts that multiply work (``--seeds``, local
``--workers``, ``--threads``) have upper bounds. A missing optional dependency
is one line naming the extra that installs it (``pip install "posenc[cli]"``).
Any other exception is a bug and shows its traceback; ``posenc --debug COMMAND``
shows the traceback of bad-input errors too.
"""

from __future__ import annotations

import json
import math
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from typer.core import HAS_RICH, TyperCommand, TyperGroup

import posenc
from posenc.report.registry import SECTIONS

#: Exceptions that come from bad input (arguments, files, resources) and end in one
#: ``error:`` line with exit code 2. Library validation raises ValueError/TypeError
#: naming the argument; OSError covers the user's paths (missing, a directory, under
#: a regular file, unwritable); EOFError a truncated file.
BAD_INPUT: tuple[type[BaseException], ...] = (ValueError, TypeError, OSError, EOFError)

_state = {"debug": False}


def _one_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else err.__class__.__name__


#: the range of every integer option: what torch and numpy take (int64)
INT64 = (-(2**63), 2**63 - 1)
#: integer options with a narrower range, by parameter name (a seed is a non-negative int64)
INT_RANGES = {"seed": (0, 2**63 - 1)}


def check_numbers(ctx: Any, params: list) -> None:
    """Refuse parsed numeric option values no command can use, naming the option.

    Every integer lies in int64 (a seed in ``[0, 2**63 - 1]``), every float is finite:
    ``--seed 18446744073709551616`` or ``--lr 1e400`` is a usage error here, before any
    command runs, not an ``OverflowError`` (or a NaN) deep inside.
    """
    for param in params:
        value = ctx.params.get(param.name)
        for v in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(v, bool):
                continue
            if isinstance(v, int):
                lo, hi = INT_RANGES.get(param.name or "", INT64)
                if not lo <= v <= hi:
                    raise typer.BadParameter(f"must be an integer from {lo} to {hi}, got {v}", ctx=ctx, param=param)
            elif isinstance(v, float) and not math.isfinite(v):
                raise typer.BadParameter(f"must be a finite number, got {v}", ctx=ctx, param=param)


def _tidy_help(command: Any, params: list) -> list:
    """Help as written: flags get no ``<bool>`` type, and ``[...]`` in help texts (``posenc[ray]``)
    is not taken for rich markup and swallowed."""
    rich = HAS_RICH and getattr(command, "rich_markup_mode", None) == "rich"
    for param in params:
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
        if rich and getattr(param, "help", None) and not getattr(param, "_posenc_escaped", False):
            from rich.markup import escape

            param.help, param._posenc_escaped = escape(param.help), True
    if rich and command.help and not getattr(command, "_posenc_escaped", False):
        from rich.markup import escape

        command.help, command._posenc_escaped = escape(command.help), True
    return params


class _Command(TyperCommand):
    """Every ``posenc`` command: its numbers checked (:func:`check_numbers`), its help tidied."""

    def get_params(self, ctx: Any) -> list:
        return _tidy_help(self, super().get_params(ctx))

    def invoke(self, ctx: Any) -> Any:
        check_numbers(ctx, self.params)
        return super().invoke(ctx)


class _OneLineErrors(TyperGroup):
    """Usage errors (unknown option or command, a bad value) as one ``error:`` line, exit 2."""

    def get_params(self, ctx: Any) -> list:
        for command in self.commands.values():  # their one-line help is listed here
            _tidy_help(command, [])
        return _tidy_help(self, super().get_params(ctx))

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):  # type: ignore[override]
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except typer.Abort:
            sys.stderr.write("error: aborted\n")
            sys.exit(1)
        except typer.TyperException as err:  # typer's (vendored click's) usage errors
            ctx = getattr(err, "ctx", None)
            if type(err).__name__ == "NoArgsIsHelpError":  # the help is already printed
                sys.exit(2)
            message = err.format_message() if hasattr(err, "format_message") else str(err)
            hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
            sys.stderr.write(f"error: {_one_line(Exception(message))}{hint}\n")
            sys.exit(2)
        sys.exit(rv if isinstance(rv, int) else 0)


app = typer.Typer(
    name="posenc",
    help="Positional encodings across modalities (six published methods): fit, analyse, and reproduce the papers' claims.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    cls=_OneLineErrors,
)
out_console = Console()
err_console = Console(stderr=True)


def _to_json(payload: Any) -> str:
    from posenc.report.store import to_json

    return to_json(payload, indent=None)


class CliError(Exception):
    """A user error: printed as one line, exit code 2."""


def _check_count(option: str, value: int) -> int:
    """A count of threads or local workers: 1 to 4 x the cores (see ``executors.check_count``);
    0 or a negative count is a usage error, not raised to 1."""
    from posenc.report.executors import check_count

    if value < 1:
        raise CliError(f"{option} must be >= 1, got {value}")
    try:
        return check_count(option, value)
    except ValueError as err:
        raise CliError(str(err)) from None


def _set_threads(threads: int) -> None:
    """``torch.set_num_threads(threads)`` after :func:`_check_count`."""
    import torch

    torch.set_num_threads(_check_count("--threads", threads))


def _version(value: bool) -> None:
    if value:
        out_console.print(f"posenc {posenc.__version__}", highlight=False)
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
    debug: Annotated[
        bool, typer.Option("--debug", help="Show the traceback of errors instead of one line.")
    ] = False,
) -> None:
    """posenc: six published positional-encoding methods (coordinate encodings, learnable Fourier
    features, CAPE, kernelized attention with RPE, GIR for graphs, architecture selection), their
    theory, and reproductions of the papers' claims."""
    _state["debug"] = debug


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


#: ``--set`` keys whose value names a torch dtype (``float16``, ``torch.float64``).
DTYPE_KEYS = ("dtype", "compute_dtype")


def _parse_dtype(key: str, text: Any) -> Any:
    import torch

    name = str(text).removeprefix("torch.")
    value = getattr(torch, name, None)
    if not isinstance(value, torch.dtype):
        raise CliError(f"--set {key}= must name a torch dtype such as float32 or float64, got {text!r}")
    return value


def parse_sets(items: list[str] | None) -> dict[str, Any]:
    """``["sigma=0.01", "num_features=512"]`` -> ``{"sigma": 0.01, "num_features": 512}``.

    ``true``/``false`` become bools, numbers ints or floats, ``a,b`` tuples,
    ``dtype=float16`` a ``torch.dtype``; a key given twice takes the last value;
    any other text stays a string, for the
    encoding to accept or refuse (``normalize=maybe`` is refused there, not coerced).
    """
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise CliError(f"--set expects key=value, got {item!r}")
        key = key.strip()  # a key given twice: the last value wins
        out[key] = _parse_dtype(key, value.strip()) if key in DTYPE_KEYS else _parse_value(value.strip())
        for v in out[key] if isinstance(out[key], tuple) else (out[key],):
            if isinstance(v, int) and not isinstance(v, bool) and not INT64[0] <= v <= INT64[1]:
                raise CliError(f"--set {key}={value.strip()}: {v} is outside the 64-bit integer range")
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


#: seconds between two plain progress lines of a fit (and before the first one)
PLAIN_PROGRESS_EVERY = 5.0


class PlainProgress:
    """Progress as plain lines on a stream that is not a terminal (CI logs, nohup, a Ray worker).

    One line per :meth:`update` that ``force``s it (a finished job), else at most one
    every ``every`` seconds, each with the item, done/total, elapsed time and an ETA
    extrapolated from the work done *in this run* (``skipped`` work is not timed).
    """

    def __init__(self, description: str, stream: Any = None, every: float = 5.0, unit: str = "",
                 start: float | None = None, rate_from_first: bool = False, quiet_start: bool = False,
                 eta_after: float = 0.0) -> None:
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
        # quiet_start: nothing at all before ``every`` seconds have passed, so a short
        # command (or one that fails at once) leaves stderr to its result or its error line
        self._quiet_start = quiet_start
        # eta_after: no ETA ("?") before this fraction of the work to do in this run is done
        # (the first jobs of a run are its cheapest: their rate is mostly start-up, not work)
        self._eta_after = eta_after
        self._lines = 0

    def update(self, done: float, total: float, item: str = "", force: bool = False, skipped: bool = False,
               count: str = "") -> None:
        """``done`` of ``total`` (any unit); ``skipped``: the work since the last call took no time."""
        now = self._clock()
        if skipped:
            self._skipped += done - self._done
        self._done = done
        if self._first is None:
            self._first = (now, done)
        if self._quiet_start and self._lines == 0 and now - self.start < self.every:
            return
        if not force and now - self._last < self.every and done < total:
            return
        self._last = now
        self._lines += 1
        elapsed = now - self.start
        if self._rate_from_first:
            spent, worked = now - self._first[0], done - self._first[1]
        else:
            spent, worked = elapsed, done - self._skipped
        left = max(0.0, total - done)
        todo = total - self._skipped
        early = todo > 0 and (done - self._skipped) < self._eta_after * todo
        eta = "0s" if left == 0 else (_duration(spent / worked * left) if worked > 0 and not early else "?")
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
    a plain line every few seconds (see :class:`PlainProgress`): rich would draw only the
    final state there, and leave a blank line behind before an ``error:`` line."""
    if not enabled:
        yield lambda done, total: None
        return
    if not _stderr_is_terminal():
        plain = PlainProgress(description, every=PLAIN_PROGRESS_EVERY, unit=" steps", rate_from_first=True,
                              quiet_start=True)
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


def _fail(err: BaseException) -> None:
    sys.stderr.write(f"error: {_one_line(err)}\n")
    raise typer.Exit(code=2)


def _run(fn, *args, **kwargs):
    """Call ``fn``; a bad-input exception (:data:`BAD_INPUT`, :class:`CliError`, out of
    memory) becomes one ``error:`` line and exit code 2. Anything else propagates (a bug)."""
    try:
        return fn(*args, **kwargs)
    except (CliError, *BAD_INPUT, MemoryError) as err:
        if _state["debug"]:
            raise
        _fail(err)
    except ModuleNotFoundError as err:  # an optional dependency: name the extra that installs it
        from posenc._extras import install_hint, missing_extra

        module = missing_extra(err)
        if _state["debug"] or module is None:
            raise
        _fail(err if "pip install" in str(err) else ImportError(install_hint(module, "this command")))
    except RuntimeError as err:  # torch's CPU allocator reports exhaustion as a RuntimeError
        if _state["debug"] or "can't allocate memory" not in str(err):
            raise
        _fail(MemoryError(f"out of memory ({_one_line(err)}); lower the sizes or --max-memory"))


MaxMemoryOpt = Annotated[
    Optional[str],
    typer.Option("--max-memory", help="Refuse to start when the estimated peak memory exceeds this "
                 "(e.g. 4G, 512M; default: half of the memory this process may still take: the least of "
                 "MemAvailable, ulimit -v and the cgroup's limit, capped by $POSENC_MAX_MEMORY)."),
]


def _memory_limit(text: str | None) -> int:
    """``--max-memory`` as a :class:`posenc._resources.Limit` naming its source (default: ``default_limit()``)."""
    from posenc._resources import Limit, default_limit, parse_bytes

    return default_limit() if text is None else Limit(parse_bytes(text), "set by --max-memory")


def _check_output(option: str, path: Path | None, suffixes: dict | None = None) -> None:
    """Refuse an output path before any work: under a regular file, a directory, a bad suffix."""
    if path is None:
        return
    for parent in path.parents:
        if parent.exists() and not parent.is_dir():
            raise CliError(f"{option} {str(path)!r}: {str(parent)!r} is a file, not a directory")
    if path.is_dir():
        raise CliError(f"{option} {str(path)!r} is a directory; give a file name")
    if suffixes is not None and path.suffix.lower() not in suffixes:
        raise CliError(f"{option} {str(path)!r} must end in one of {', '.join(sorted(suffixes))} "
                       "(the format to write)")


def _index_domain(enc, num_points: int):
    """Wrap an encoding of index positions (no ``domain``) so the 1D analyses sample ``0..num_points-1``."""
    import torch

    class IndexPositions(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoding, self.in_dim, self.domain = enc, enc.in_dim, (0.0, float(num_points))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.encoding(x)

    return IndexPositions()


def _make_encoding(name: str, settings: dict, in_dim: int, *, command: str, limit: int,
                   train_samples: int | None = None, num_positions: int | None = None, budget=None):
    """Build the encoding for ``command``; when its width is not given, take ``suggest_bandwidth``'s proposal.

    ``normalize=True`` is the default only for encodings that take ``normalize``.
    Encodings without a coordinate ``domain`` get index positions (``0 .. n-1``).
    Its ``out_dim`` and parameter count come from its arguments alone
    (``encoding_footprint``: nothing is built) and are checked against ``limit``
    first; then it is built on the ``meta`` device (no memory) to inspect it; fit
    commands refuse encodings with trainable parameters (they would stay at their
    random initialisation: the fit trains only the model on top). ``budget(out_dim)``,
    when given, checks the command's own estimate before any real work.

    Returns ``(encoding, suggested, info)``: the encoding (in eval mode), the
    proposed width or None, and ``{"out_dim", "params", "positions"}``.
    """
    from posenc._resources import check_budget, encoding_bytes, suggest_bytes
    from posenc.analysis import suggest_bandwidth
    from posenc.encodings import create_encoding, encoding_class, encoding_footprint, encoding_parameters

    params = encoding_parameters(name)  # ValueError naming the known encodings
    settings = dict(settings)
    settings.setdefault("in_dim", in_dim)
    if settings["in_dim"] != in_dim:
        raise CliError(f"--set in_dim={settings['in_dim']} does not match the data's {in_dim} coordinate(s)")
    if "normalize" in params:
        settings.setdefault("normalize", True)
    from posenc._checks import check_device

    device = check_device("device", settings.get("device"))
    if device is not None and device.type != "cpu":
        raise CliError(f"--set device={device}: the CLI computes on the CPU (its data are CPU tensors); "
                       "use the Python API for other devices")
    if "grid_size" in params and num_positions is not None:
        settings.setdefault("grid_size", num_positions if in_dim == 1 else (num_positions,) * in_dim)
    probe_settings = {**settings, "device": "meta"}
    if "normalize" in params:
        probe_settings["normalize"] = False
    size = encoding_footprint(name, **probe_settings)  # from the arguments alone: nothing is built yet
    out_dim, numel = size.out_dim, size.numel
    check_budget(encoding_bytes(numel, out_dim, bool(settings.get("normalize", False))), limit,
                 f"the encoding {name!r} (out_dim={out_dim:,}, {numel:,} parameters and buffers)",
                 "num_features (or mode, grid_size)")
    if budget is not None:
        budget(out_dim)
    probe = create_encoding(name, **probe_settings)  # shapes only (meta): allocates nothing
    trainable = [n for n, p in probe.named_parameters() if p.requires_grad]
    if command.startswith("fit-") and trainable:
        hint = " or --set learnable_freqs=false --set use_mlp=false" if "learnable_freqs" in params else ""
        raise CliError(f"encoding {name!r} has trainable parameters ({', '.join(trainable[:3])}) that {command} "
                       f"would leave at their random initialisation (it trains only the model on top); use a "
                       f"fixed encoding{hint}")
    if command == "analyze" and trainable and encoding_class(name).__dict__.get("positions_kind") == "index":
        raise CliError(f"encoding {name!r} is a table of trainable vectors, random until trained: "
                       "analyze has nothing to measure")
    coordinate = hasattr(probe, "domain")
    suggested = None
    param = encoding_class(name).width_param
    if (train_samples is not None and coordinate and param is not None and param not in settings
            and "kernel_width" not in settings):
        check_budget(suggest_bytes(train_samples, out_dim), limit,
                     f"suggest_bandwidth for {train_samples:,} samples (out_dim={out_dim:,})", "the sizes or num_features")
        extra = {k: v for k, v in settings.items() if k in ("num_features", "seed")}
        try:
            suggested = suggest_bandwidth(train_samples, name, **extra)["value"]
        except ValueError as err:
            raise CliError(f"suggest_bandwidth found no {param} for {name!r} with {train_samples} training samples "
                           f"per axis ({_one_line(err)}); pass --set {param}=VALUE") from None
        settings[param] = suggested
    enc = create_encoding(name, **settings).eval()  # eval: CAPE does not augment
    return enc, suggested, {"out_dim": out_dim, "coordinate": coordinate}


def _npy_length(path: Path) -> int | None:
    """Number of values a ``.npy`` file's header announces (None: not a readable .npy header)."""
    import numpy as np

    if path.suffix.lower() != ".npy" or not path.is_file():
        return None
    try:
        with open(path, "rb") as fh:
            version = np.lib.format.read_magic(fh)
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape, _, _ = read(fh)  # the header only: no data is read
    except (ValueError, OSError, EOFError, SyntaxError, TypeError, AttributeError):
        return None  # load_signal reports the problem
    return int(np.prod(shape, dtype=np.float64))


def _check_fit(res, model: str, lr: float) -> None:
    """A diverged fit (NaN/inf loss or predictions) is an error, not ``null`` PSNRs."""
    import math

    values = [res.train_mse, res.test_mse]
    if all(v is not None and math.isfinite(v) for v in values) and (
            res.predictions is None or bool(res.predictions.isfinite().all())):
        return
    how = f"lower --lr (now {lr:g})" if model != "lstsq" else "add --ridge or use fewer features"
    raise CliError(f"the fit diverged: the {model} model's error is not finite (train MSE {res.train_mse}); {how}")


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


def _json_value(value: Any) -> Any:
    """``value`` with its JSON type: numbers, booleans, null, strings, lists (from tuples) and objects
    stay what they are; anything else (a ``torch.dtype``, a class) becomes its ``repr``."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, (list, tuple)):
        return [_json_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    return repr(value)


@app.command("encodings")
def encodings_cmd(
    name: Annotated[Optional[str], typer.Argument(help="Show what each argument of this encoding means.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """List the registered encodings and their arguments (with NAME: what each argument means)."""
    from posenc.encodings import available_encodings, encoding_parameter_docs, encoding_parameters

    if name is not None:
        def one() -> dict:
            if name not in available_encodings():
                raise CliError(f"unknown encoding {name!r}; available: {', '.join(available_encodings())}")
            docs = encoding_parameter_docs(name)
            return {"name": name, "arguments": {k: {"default": v, "meaning": docs.get(k, "")}
                                                for k, v in encoding_parameters(name).items()}}

        detail = _run(one)
        if as_json:
            sys.stdout.write(json.dumps(_json_value(detail)) + "\n")
            return
        table = Table(title=f"encoding {name!r}: create_encoding({name!r}, ...) / --set ARG=VALUE")
        for col in ("argument", "default", "meaning"):
            table.add_column(col)
        for arg, info in detail["arguments"].items():
            table.add_row(arg, repr(info["default"]), " ".join(info["meaning"].split()))
        out_console.print(table)
        return
    payload = {name: encoding_parameters(name) for name in available_encodings()}
    if as_json:
        sys.stdout.write(json.dumps(_json_value(payload)) + "\n")
        return
    table = Table(title="encodings")
    table.add_column("name")
    table.add_column("arguments (defaults)")
    for name, params in payload.items():
        table.add_row(name, ", ".join(f"{k}={v!r}" for k, v in params.items()))
    out_console.print(table)
    out_console.print("What each argument means: posenc encodings NAME", highlight=False)


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
    max_memory: MaxMemoryOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Fit a 1D signal from its even samples and test on the odd ones.

    Without --set for the encoding's width (sigma, width, max_freq), the width
    proposed by suggest_bandwidth for the number of training samples is used.
    Encodings without a coordinate domain (sinusoidal, cape) see sample indices.
    """

    def go() -> dict:
        import torch

        from posenc._resources import analysis_bytes, check_budget, fit_bytes
        from posenc.analysis import distance_preservation, embedding_matrix, similarity_profile, stable_rank
        from posenc.data.signals import image_rows, load_signal
        from posenc.models.coordinate import fit_coordinates
        from posenc.positions import grid_1d

        _check_model(model)
        limit = _memory_limit(max_memory)
        _set_threads(threads)
        if signal is not None and signal.exists() and not signal.is_file():  # load_signal: "no such file"
            what = "a directory" if signal.is_dir() else "not a regular file"
            raise CliError(f"--signal {str(signal)!r} is {what}; give a .npy or .csv file")
        if signal is None:
            sig, rescaled, source = image_rows(1, 512, seed=0)[0], False, "embedded: china.jpg row (512 samples)"
        else:
            length = _npy_length(signal)
            if length is not None:
                check_budget(3 * 8.0 * length, limit, f"reading {length:,} samples from {str(signal)!r}",
                             "the signal's length")
            (sig, rescaled), source = load_signal(signal), str(signal)
        n = sig.shape[0]
        def budget(out_dim: int) -> None:
            check_budget(fit_bytes((n + 1) // 2, n, out_dim, 1, model) + analysis_bytes(n, out_dim), limit,
                         f"fit-signal on {n:,} samples with out_dim={out_dim:,} ({model})",
                         "num_features or the signal's length")

        enc, suggested, info = _make_encoding(encoding, parse_sets(sets), 1, command="fit-signal", limit=limit,
                                              train_samples=(n + 1) // 2, num_positions=n, budget=budget)
        domain = enc.domain if info["coordinate"] else (0.0, float(n))
        x = grid_1d(n, domain, dtype=torch.float32)
        y = sig.to(torch.float32)
        with _progress(f"fit {encoding} ({model})", iters, not as_json) as update:
            res = fit_coordinates(enc, x[::2], y[::2], x[1::2], y[1::2], model, iters=iters, lr=lr, seed=seed,
                                  ridge=ridge, progress=update)
        _check_fit(res, model, lr)
        probe = enc if info["coordinate"] else _index_domain(enc, n)
        psi = embedding_matrix(probe, n)
        disp, sim = similarity_profile(probe, n)
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
    image: Annotated[Optional[Path], typer.Argument(help="An image file (default: the embedded china.jpg).")] = None,
    encoding: EncodingOpt = "gaussian",
    sets: SetOpt = None,
    model: Annotated[str, typer.Option(help="linear | mlp | lstsq")] = "mlp",
    size: Annotated[int, typer.Option(help="Centre-crop and resize to size x size.")] = 256,
    grayscale: Annotated[bool, typer.Option(help="Fit one luminance channel.")] = False,
    iters: Annotated[int, typer.Option(help="Adam steps (linear, mlp); the paper uses 2000.")] = 500,
    lr: Annotated[float, typer.Option(help="Adam learning rate.")] = 1e-3,
    seed: Annotated[int, typer.Option(help="Seed of the model initialisation.")] = 0,
    save: Annotated[Optional[Path], typer.Option(help="Write the full reconstruction here (.png, .jpg, .bmp, .tif, .webp: the suffix picks the format).")] = None,
    compare: Annotated[bool, typer.Option("--compare", help="With --save: write original | reconstruction | error side by side, PSNR in the title.")] = False,
    ridge: Annotated[float, typer.Option(help="lstsq: Tikhonov weight relative to the largest eigenvalue (0 = minimum-norm).")] = 0.0,
    threads: Annotated[int, typer.Option(help="torch threads.")] = 2,
    max_memory: MaxMemoryOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Fit an image from its [::2, ::2] pixels and test on the other three quarters.

    Without --set for the encoding's width, suggest_bandwidth's proposal for
    size/2 samples per axis is used. Pixel values are read by bit depth (8-bit,
    16-bit, float) into [0, 1]; alpha is discarded.
    """

    def go() -> dict:
        import torch

        from posenc._resources import check_budget, fit_bytes
        from posenc.data.images import SAVE_FORMATS, image_size, load_image, sample_image, save_image
        from posenc.models.coordinate import fit_coordinates
        from posenc.positions import grid, subsample_mask

        _check_model(model)
        _check_output("--save", save, SAVE_FORMATS)
        if compare and save is None:
            raise CliError("--compare needs --save PATH (the file to write the comparison to)")
        if compare and save is not None and save.suffix.lower() != ".png":
            raise CliError(f"--compare writes a PNG figure: give --save a .png path, got {str(save)!r}")
        if size < 4:
            raise CliError(f"--size must be >= 4, got {size}")
        limit = _memory_limit(max_memory)
        channels = 1 if grayscale else 3
        if image is not None:
            w, h = image_size(image)
            check_budget(8.0 * w * h * 4 * 3, limit, f"reading the {w}x{h} image {str(image)!r}", "the image's size")
        settings = parse_sets(sets)
        params = _encoding_params(encoding)
        if "num_features" in params:
            settings.setdefault("num_features", 256)
        # the width is suggested per axis: size / 2 training samples along each
        def budget(out_dim: int) -> None:
            n_train = ((size + 1) // 2) ** 2
            check_budget(fit_bytes(n_train, size * size, out_dim, channels, model) + 8.0 * size * size * 8, limit,
                         f"fit-image at --size {size:,} with out_dim={out_dim:,} ({model})",
                         "--size, num_features or mode")

        enc, suggested, info = _make_encoding(encoding, settings, 2, command="fit-image", limit=limit,
                                              train_samples=(size + 1) // 2, num_positions=size, budget=budget)
        _set_threads(threads)
        if image is None:
            img, source = sample_image("china", size=size, grayscale=grayscale), "embedded: china.jpg"
        else:
            img, source = load_image(image, size=size, grayscale=grayscale), str(image)
        domain = enc.domain if info["coordinate"] else (0.0, float(size))
        pos = grid((size, size), domain=domain, dtype=torch.float32)
        mask = subsample_mask((size, size), 2)
        y = img.to(torch.float32)
        with _progress(f"fit {encoding} ({model})", iters, not as_json) as update:
            res = fit_coordinates(enc, pos[mask], y[mask], pos[~mask], y[~mask], model, iters=iters, lr=lr,
                                  seed=seed, ridge=ridge, predict_x=pos.reshape(-1, 2) if save else None,
                                  progress=update)
        _check_fit(res, model, lr)
        if save is not None and compare:
            from posenc.report.pictures import compare_figure
            from posenc.report.plotting import png_bytes
            from posenc.report.store import atomic_write_bytes

            fig = compare_figure(y, res.predictions.reshape(size, size, -1), train_psnr=res.train_psnr,
                                 test_psnr=res.test_psnr, title=f"{source}: {encoding} ({model})")
            atomic_write_bytes(save, png_bytes(fig))
        elif save is not None:
            save_image(save, res.predictions.reshape(size, size, -1))
        return {
            "image": source, "size": size, "channels": int(img.shape[-1]), "encoding": encoding,
            "encoding_repr": repr(enc), "width_from_suggest_bandwidth": suggested is not None, "model": model,
            "train_psnr": res.train_psnr, "test_psnr": res.test_psnr,
            "seconds": res.seconds, "saved": None if save is None else str(save),
        }

    _emit(_run(go), as_json, "fit-image")


def _encoding_params(name: str) -> dict:
    from posenc.encodings import encoding_parameters

    return encoding_parameters(name)


@app.command("analyze")
def analyze_cmd(
    encoding: EncodingOpt = "gaussian",
    sets: SetOpt = None,
    num_points: Annotated[int, typer.Option(help="Regular samples of the domain.")] = 512,
    threshold: Annotated[float, typer.Option(help="Similarity threshold of the distance-preservation width.")] = 0.1,
    suggest: Annotated[Optional[int], typer.Option(help="Also suggest a width for this many training samples.")] = None,
    plot: Annotated[Optional[Path], typer.Option(help="Save the similarity profile (zoomed on the kernel's width) and spectrum as PNG, with the stable rank and width written on it.")] = None,
    max_memory: MaxMemoryOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Stable rank and distance preservation of a 1D encoding (no training).

    Coordinate encodings are sampled over their domain; encodings of index
    positions (sinusoidal, cape, lff, coord_mlp) at 0 .. num_points-1.
    """

    def go() -> dict:
        import torch

        from posenc._resources import analysis_bytes, check_budget, suggest_bytes
        from posenc.analysis import distance_preservation, embedding_matrix, similarity_profile, stable_rank, suggest_bandwidth

        if num_points < 2:
            raise CliError(f"--num-points must be >= 2, got {num_points}")
        _check_output("--plot", plot, {".png": "PNG"})
        limit = _memory_limit(max_memory)
        settings = parse_sets(sets)
        def budget(out_dim: int) -> None:
            check_budget(analysis_bytes(num_points, out_dim), limit,
                         f"analyze at --num-points {num_points:,} with out_dim={out_dim:,}",
                         "--num-points or num_features")

        enc, _, info = _make_encoding(encoding, settings, 1, command="analyze", limit=limit,
                                      num_positions=num_points, budget=budget)
        if suggest is not None:
            if not info["coordinate"] or enc.width_param is None:
                raise CliError(f"--suggest needs a coordinate encoding with a width parameter; {encoding!r} has none")
            check_budget(suggest_bytes(suggest, info["out_dim"]), limit,
                         f"--suggest {suggest:,} with out_dim={info['out_dim']:,}", "--suggest or num_features")
        probe = enc if info["coordinate"] else _index_domain(enc, num_points)
        psi = embedding_matrix(probe, num_points)
        disp, sim = similarity_profile(probe, num_points)
        payload: dict[str, Any] = {
            "encoding": encoding, "encoding_repr": repr(enc), "num_points": num_points,
            "positions": "domain" if info["coordinate"] else f"indices 0..{num_points - 1}",
            "stable_rank": stable_rank(psi), "dp_width": distance_preservation(disp, sim, threshold),
            "threshold": threshold,
        }
        if suggest is not None:
            kwargs = {k: v for k, v in settings.items() if k not in ("normalize", enc.width_param, "kernel_width")}
            payload["suggestion"] = suggest_bandwidth(suggest, encoding, **kwargs)
        if plot is not None:
            from posenc.report.pictures import analysis_figure
            from posenc.report.plotting import png_bytes
            from posenc.report.store import atomic_write_bytes

            fig = analysis_figure(disp, sim, torch.linalg.svdvals(psi), stable_rank=payload["stable_rank"],
                                  dp_width=payload["dp_width"], threshold=threshold, title=repr(enc))
            atomic_write_bytes(plot, png_bytes(fig))
            payload["plot"] = str(plot)
        return payload

    _emit(_run(go), as_json, "analyze")


#: Upper bounds of the counts ``posenc search`` multiplies (cells x edges x ops, steps x batches, ...).
_SEARCH_MAX = {"cells": 1000, "steps": 10**6, "proj_intv": 1000, "finetune_epochs": 1000}


@app.command("search")
def search_cmd(
    space: Annotated[str, typer.Option(help="Search space: nb201-micro | nb201 | darts | s1 | s2 | s3 | s4 | pe.")] = "nb201-micro",
    cells: Annotated[Optional[int], typer.Option(help="Stacked cells of a convolutional space (default: 1 for nb201*, 3 for darts and s1-s4).")] = None,
    selector: Annotated[str, typer.Option(help="pt (DARTS+PT) | pt-fixed (PT with fixed alpha) | magnitude (DARTS).")] = "pt",
    seed: Annotated[int, typer.Option(help="Seed of the weights, batches, edge order and tie breaks.")] = 0,
    steps: Annotated[int, typer.Option(help="Supernet training steps (batches of 64 digits).")] = 100,
    proj_intv: Annotated[int, typer.Option(help="Tuning epochs between two PT decisions (the authors' 5).")] = 5,
    finetune_epochs: Annotated[Optional[float], typer.Option(help="Instead: this many tuning epochs after every PT decision (0: none).")] = None,
    criterion: Annotated[str, typer.Option(help="PT criterion: accuracy (the authors') | loss.")] = "accuracy",
    threads: Annotated[int, typer.Option(help="torch threads (1 is fastest for these tiny models).")] = 1,
    max_memory: MaxMemoryOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Search an architecture on 8x8 digits: train a supernet, select (DARTS-PT or magnitude)."""

    def go() -> dict:
        import torch

        from posenc.search import (
            CONV_SPACES,
            CRITERIA,
            SELECTORS,
            SPACE_TRAINING,
            SPACES,
            build_space,
            digits_splits,
            evaluate,
            run_search,
        )

        from posenc._resources import FootprintError, check_budget, format_bytes
        from posenc.search.spaces import space_bytes

        if space not in SPACES:
            raise CliError(f"--space must be one of {', '.join(SPACES)}, got {space!r}")
        if cells is not None and not 1 <= cells <= _SEARCH_MAX["cells"]:
            raise CliError(f"--cells must be in [1, {_SEARCH_MAX['cells']}], got {cells}")
        if cells is not None and space not in CONV_SPACES:
            raise CliError(f"--cells applies to the convolutional spaces ({', '.join(CONV_SPACES)}), not {space!r}")
        if selector not in SELECTORS:
            raise CliError(f"--selector must be one of {', '.join(SELECTORS)}, got {selector!r}")
        if criterion not in CRITERIA:
            raise CliError(f"--criterion must be one of {', '.join(CRITERIA)}, got {criterion!r}")
        if not 0 <= steps <= _SEARCH_MAX["steps"]:
            raise CliError(f"--steps must be in [0, {_SEARCH_MAX['steps']:,}], got {steps}")
        if not 1 <= proj_intv <= _SEARCH_MAX["proj_intv"]:
            raise CliError(f"--proj-intv must be in [1, {_SEARCH_MAX['proj_intv']}], got {proj_intv}")
        if finetune_epochs is not None and not 0 <= finetune_epochs <= _SEARCH_MAX["finetune_epochs"]:
            raise CliError(f"--finetune-epochs must be in [0, {_SEARCH_MAX['finetune_epochs']}], got {finetune_epochs}")
        if not 0 <= seed <= 2**63 - 1:
            raise CliError(f"--seed must be in [0, 2**63 - 1], got {seed}")
        check_budget(space_bytes(space, cells), _memory_limit(max_memory),
                     f"search --space {space}" + (f" --cells {cells}" if cells is not None else ""), "--cells")
        _set_threads(threads)
        data = digits_splits(seed=0)
        torch.manual_seed(seed)
        try:
            model = build_space(space, **({} if cells is None else {"num_cells": cells}))
        except FootprintError as err:  # the library names its own arguments ("reduce channels"): name ours
            raise CliError(f"search --space {space}" + (f" --cells {cells}" if cells is not None else "")
                           + f": the network's parameters would need about {format_bytes(err.nbytes)} of memory, "
                           f"more than the library's limit of {format_bytes(err.limit)} "
                           f"({getattr(err.limit, 'source', 'given')}); reduce --cells, or raise the limit with "
                           f"$POSENC_MAX_MEMORY") from None
        with _progress(f"search {space} ({selector})", steps, not as_json) as update:
            res = run_search(model, data["train"], data["val"], selector=selector, steps=steps, proj_intv=proj_intv,
                             finetune_epochs=finetune_epochs, criterion=criterion, seed=seed,
                             train_kwargs=SPACE_TRAINING[space],
                             progress=lambda stage, done, total: update(done, total))
        test_loss, test_acc = evaluate(model, data["test"], bn="batch")
        return {"space": space, "cells": cells, "selector": selector, "seed": seed, "steps": steps, **res,
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
        if "edge" not in dec:  # a node of magnitude's DARTS genotype
            arch.add_row(dec["node"], "pruned: " + ", ".join(dec["pruned"]),
                         ", ".join(f"{k}={v:.4g}" for k, v in dec["scores"].items()))
            continue
        scores = ", ".join(f"{k}={v:.4g}" for k, v in dec["scores"].items())
        arch.add_row(dec["edge"], dec["chosen"], scores)
    for dec in (payload.get("topology") or {}).get("decisions", []):
        arch.add_row(dec["node"], "pruned: " + ", ".join(dec["pruned"]),
                     "; ".join(", ".join(f"{k}={v:.4g}" for k, v in r["scores"].items()) for r in dec["rounds"]))
    out_console.print(arch)
    out_console.print(
        f"supernet: val accuracy {sup['val_accuracy']:.3f}, train loss {sup['train_loss_first'] or float('nan'):.3f} -> "
        f"{sup['train_loss_last'] or float('nan'):.3f} ({sup['steps']} steps)\n"
        f"selected: val accuracy {sel['val_accuracy']:.3f}, test accuracy {sel['test_accuracy']:.3f} "
        f"(supernet weights, not retrained)", highlight=False)


@app.command("reproduce")
def reproduce_cmd(
    sections: Annotated[Optional[list[str]], typer.Argument(help=f"Sections to run (default: all): {', '.join(SECTIONS)}.")] = None,
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
        from posenc.report.provenance import pin_numerics

        pin_numerics()  # before this process computes anything: jobs run inline with --workers 1
        import torch

        from posenc.report.executors import EXECUTORS, available_cores, default_threads
        from posenc.report.registry import available_sections
        from posenc.report.runner import check_seeds, parse_shard, plan_jobs, reproduce, select_jobs

        if workers < 1:
            raise CliError(f"--workers must be >= 1, got {workers}")
        if threads is not None and threads < 1:
            raise CliError(f"--threads must be >= 1, got {threads}")
        if executor != "ray":  # on Ray: jobs in flight and a task's CPUs on the cluster (checked there)
            _check_count("--workers", workers)
            if threads is not None:
                _check_count("--threads", threads)
        check_seeds(seeds, "--seeds")  # before planning: 10**12 seeds would plan without end
        torch.set_num_threads(min(threads or default_threads(workers), available_cores()))  # this driver's own
        if executor not in EXECUTORS:  # before --list-jobs, which would otherwise accept any engine
            raise CliError(f"--executor must be one of {', '.join(EXECUTORS)}, got {executor!r}")
        names = list(sections or available_sections())
        parse_shard(shard)  # "a/b" and "4/3" are refused before anything runs
        if job and len(names) != 1:  # a key is looked up in one section's plan, listing or not
            owner = next((n for n in names if job[0] in {j.key for j in plan_jobs(n, profile, seeds)}), None)
            hint = (f"; job {job[0]!r} is {owner}'s: posenc reproduce {owner} --job {job[0]}" if owner is not None
                    else f", and none of them plans a job {job[0]!r} (see posenc reproduce SECTION --list-jobs)")
            raise CliError(f"--job needs exactly one section, got {len(names)} ({', '.join(names)}){hint}")
        if not list_jobs:
            _check_reproduce_extras(names)
        if list_jobs:
            shard_t = parse_shard(shard)
            return {name: [{"key": j.key, "cost": j.cost, "alone": j.alone, "config": j.config_dict()}
                           for j in select_jobs(plan_jobs(name, profile, seeds), shard_t, job)]
                    for name in names}
        if out is not None:
            for parent in (out, *out.parents):
                if parent.exists() and not parent.is_dir():
                    raise CliError(f"--out {str(out)!r}: {str(parent)!r} is a file, not a directory")
        argv = ["posenc", *sys.argv[1:]]
        kwargs = dict(argv=argv, workers=workers, executor=executor, address=address, threads=threads, jobs=job)
        if not _stderr_is_terminal():
            import time

            plain: dict[str, PlainProgress] = {}
            began = {"t": time.monotonic()}

            def progress(section: str, key: str, done: float, total: float, skipped: bool,
                         count: int = 0, of: int = 0) -> None:
                if section not in plain:  # a section's clock starts when the previous one ended
                    plain[section] = PlainProgress(f"reproduce {section}", start=began["t"], eta_after=0.05)
                bar = plain[section]
                bar.update(done, total, f"{key}{' (done before)' if skipped else ''}", force=True,
                           skipped=skipped, count=f"{count}/{of} jobs")
                if count == of:
                    began["t"] = time.monotonic()

            def notice(message: str) -> None:
                sys.stderr.write(f"warning: {message}\n")
                sys.stderr.flush()

            return reproduce(names, profile, out, seeds, shard, progress, notice=notice, **kwargs)
        state = {"bar": None, "task": None}
        with Progress(
            TextColumn("{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
            TimeElapsedColumn(), console=err_console, transient=False, disable=not err_console.is_terminal,
        ) as bar:
            def progress(section: str, key: str, done: float, total: float, skipped: bool,
                         count: int = 0, of: int = 0) -> None:
                if state["task"] is None or state["bar"] != section:
                    state["bar"], state["task"] = section, bar.add_task(section, total=total)
                bar.update(state["task"], completed=done, total=total,
                           description=f"{section} {count}/{of}: {key}{' (done before)' if skipped else ''}")

            def notice(message: str) -> None:
                bar.console.print(f"warning: {message}", markup=False, highlight=False)

            result = reproduce(names, profile, out, seeds, shard, progress, notice=notice, **kwargs)
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
                sys.stdout.write(f"{name}: {len(jobs)} jobs\n" + "".join(f"  {item['key']}\n" for item in jobs))
            return
        sys.stdout.write(_to_json(payload) + "\n")
        return
    out_console.print(f"report: {payload['report'] or '(shard or --job run: no report)'}", highlight=False)
    for name, lists in payload.get("jobs", {}).items():
        if shard or job:
            out_console.print(f"{name}: computed {len(lists['computed'])}, skipped {len(lists['skipped'])}, "
                              f"claimed by another run {len(lists['claimed_elsewhere'])}", highlight=False)
    for name, records in payload.get("results", {}).items():
        for key, record in records.items():
            _print_job(name, key, record, computed=key in payload["jobs"][name]["computed"], out=payload["out"])
    for name, rec in payload["sections"].items():
        claims = rec["summary"].get("claims", {}) if isinstance(rec["summary"], dict) else {}
        verdicts = ", ".join(f"{k}: {_claim_word(v)}" for k, v in claims.items())
        out_console.print(f"{name}: {rec['compute_seconds']:.0f} s of compute; {verdicts}", highlight=False)


#: a job result's value longer than this is cut in the table (``--json`` and the stored file have it all)
RESULT_CELL = 120


def _print_job(section: str, key: str, record: dict, computed: bool, out: str) -> None:
    """One job's stored result (``reproduce --job KEY``) as a table of its fields."""
    how = f"computed in {record['seconds']:.2f} s" if computed else f"stored before ({record['seconds']:.2f} s)"
    table = Table(title=f"{section}/{key}: {how}", show_header=False)
    cut = False
    for field, value in record["result"].items():
        text = f"{value:.6g}" if isinstance(value, float) else json.dumps(value) if not isinstance(value, str) else value
        if len(text) > RESULT_CELL:
            text, cut = text[:RESULT_CELL - 1] + "…", True
        table.add_row(str(field), text)
    out_console.print(table)
    if cut:
        path = Path(out) / "jobs" / section / f"{key}.json"
        out_console.print(f"(long values cut; the whole result: --json, or {path})", highlight=False)


def _check_reproduce_extras(names: list[str]) -> None:
    """What the jobs and the report import, checked before any of them runs: the ``cli`` extra
    (figures, embedded images and digits) and, for the gir section, the ``graph`` extra."""
    from posenc._extras import install_hint, missing_modules

    missing = missing_modules(("matplotlib", "PIL", "sklearn"))
    if missing:
        raise CliError(install_hint(missing[0], "posenc reproduce"))
    missing = missing_modules(("torch_geometric", "networkx")) if "gir" in names else []
    if missing:
        raise CliError(install_hint(missing[0], "the gir section") + " (or leave gir out)")


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


# every command (the ones registered above included) checks its numbers and tidies its help
for _info in app.registered_commands:
    if _info.cls in (None, TyperCommand):
        _info.cls = _Command


def main() -> None:
    """The ``posenc`` command (installed as ``posenc.__main__:main``, which checks the ``cli`` extra first)."""
    app(prog_name="posenc")


if __name__ == "__main__":  # pragma: no cover
    main()
