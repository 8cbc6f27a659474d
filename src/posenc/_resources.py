"""Memory estimates made before work starts, and the limit they are checked against.

The CLI estimates the bytes a command will hold at its peak from its arguments
(sizes, the encoding's ``out_dim``, the model) and refuses to start when the
estimate exceeds ``--max-memory`` (default: :data:`DEFAULT_FRACTION` of the
memory available when the command starts, read from ``/proc/meminfo`` or
``os.sysconf``). The estimates are deliberately simple upper-bound-ish sums of
the largest tensors; they are not a profiler.
"""

from __future__ import annotations

import math
import os
import re

#: Share of the available memory a command may plan to use by default.
DEFAULT_FRACTION = 0.5
#: Used when the available memory cannot be read.
FALLBACK_BYTES = 8 * 2**30

_UNITS = {"": 1, "b": 1, "k": 2**10, "kb": 2**10, "kib": 2**10, "m": 2**20, "mb": 2**20, "mib": 2**20,
          "g": 2**30, "gb": 2**30, "gib": 2**30, "t": 2**40, "tb": 2**40, "tib": 2**40}


def available_memory() -> int | None:
    """Bytes of memory available to new work now (``MemAvailable``), or None if unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def default_limit() -> int:
    """:data:`DEFAULT_FRACTION` of :func:`available_memory` (or :data:`FALLBACK_BYTES`)."""
    avail = available_memory()
    return int(DEFAULT_FRACTION * avail) if avail else FALLBACK_BYTES


def parse_bytes(text: str, name: str = "--max-memory") -> int:
    """``"512M"``, ``"8G"``, ``"1.5GiB"``, ``"1000000"`` -> bytes (binary units)."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z]*)\s*", str(text))
    if not match or match.group(2).lower() not in _UNITS:
        raise ValueError(f"{name} must be a size such as 512M, 8G or 2.5GiB, got {text!r}")
    value = float(match.group(1)) * _UNITS[match.group(2).lower()]
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite size such as 512M, 8G or 2.5GiB, got {text!r}")
    if not value >= 1:
        raise ValueError(f"{name} must be at least 1 byte, got {text!r}")
    return int(value)


def format_bytes(n: float) -> str:
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{int(n)} B"


def check_budget(estimate: float, limit: int, what: str, options: str) -> None:
    """Raise a ValueError naming ``options`` when ``estimate`` bytes exceed ``limit``."""
    if estimate > limit:
        raise ValueError(
            f"{what} would need about {format_bytes(estimate)} of memory, more than the limit of "
            f"{format_bytes(limit)}; reduce {options}, or raise the limit with --max-memory"
        )


def encoding_bytes(num_params: int, out_dim: int, normalize: bool, dtype_bytes: int = 4) -> float:
    """Construction of an encoding: its parameters and buffers, computed in float64 and cast to
    their dtype (``8 + dtype_bytes`` bytes per element), plus the row-normalisation scan, which
    evaluates its 322 points in blocks of at most ``max(out_dim, 2**22)`` float64 features
    (the block, its square and the encoding's work buffer). The CLI and the encodings'
    constructors check this same estimate."""
    return (8.0 + dtype_bytes) * num_params + (3 * 8.0 * max(out_dim, 2**22) if normalize else 0.0)


def embedding_bytes(num_points: int, out_dim: int) -> float:
    """``embedding_matrix``: the float64 grid and the ``(N, D)`` float64 features, with the
    encoding's work copy of them."""
    return 8.0 * num_points * (2.0 * out_dim + 2)


def analysis_bytes(num_points: int, out_dim: int) -> float:
    """``embedding_matrix`` + ``similarity_profile`` (float64 N x D, twice, plus a normalised copy),
    the stable rank's Gram matrix ``min(N, D)^2`` and the spectrum's SVD workspace."""
    n, d = float(num_points), float(out_dim)
    return 8.0 * (4 * n * d + 2 * min(n, d) ** 2 + n + d)


def suggest_bytes(num_samples: int, out_dim: int) -> float:
    """``suggest_bandwidth``: one embedding of ``num_samples`` points per trial width (sequential)."""
    return analysis_bytes(num_samples, out_dim)


def fit_bytes(n_train: int, n_eval: int, out_dim: int, channels: int, model: str, *, hidden: int = 256,
              depth: int = 4, chunk_size: int = 16384, max_feature_bytes: int = 2**30) -> float:
    """``fit_coordinates`` with the CLI's settings.

    * features of the training set (float32, cached up to ``max_feature_bytes``, else one chunk);
    * ``lstsq``: the float64 design matrix and LAPACK's copy for small problems, else the
      ``(D+1)^2`` normal equations, their eigenvectors and workspace;
    * ``linear``/``mlp``: parameters with Adam's two moments and the gradient (x4), and the
      MLP's activations and their gradients over the training set;
    * evaluation: one chunk of float64 features and the predictions of every evaluated point.
    """
    n, d, c = float(n_train), float(out_dim), float(channels)
    chunk = float(min(chunk_size, max(n_train, n_eval, 1)))
    total = 8.0 * chunk * d * 2 + 8.0 * (n + n_eval) * c * 2
    if model == "lstsq":
        if n * (d + 1) <= 2**24:
            total += 3 * 8.0 * n * (d + 1)
        else:
            total += 4 * 8.0 * (d + 1) ** 2 + 8.0 * chunk * (d + 1)
    else:
        total += min(4.0 * n * d, float(max_feature_bytes)) if 4.0 * n * d <= max_feature_bytes else 4.0 * chunk * d
        if model == "linear":
            total += 4 * 4.0 * (d + 1) * c + 3 * 4.0 * n * c
        else:
            params = (d + 1) * hidden + (depth - 1) * (hidden + 1) * hidden + (hidden + 1) * c
            total += 4 * 4.0 * params + 2 * 4.0 * n * hidden * depth * 2
    return total


# ------------------------------------------------------------------ the library's guard
#: Share of the available memory one library call may plan to hold before it is refused
#: (the CLI's default, :data:`DEFAULT_FRACTION`, is stricter: a command holds more than one tensor).
LIBRARY_FRACTION = 0.8
#: Requests below this many bytes are never checked (reading ``/proc/meminfo`` costs ~30 us).
CHECK_ABOVE = 2**28
#: Environment variable that sets the library's limit (a size such as ``8G``; ``0`` or ``off``: no limit).
LIMIT_ENV = "POSENC_MAX_MEMORY"


class FootprintError(MemoryError, ValueError):
    """A call refused before it allocated: its estimated footprint exceeds the memory limit.

    A ``MemoryError`` (what an allocation that failed would raise) and a ``ValueError``
    (an argument out of range), so ``except MemoryError`` and ``except ValueError`` both
    catch it. The message names the argument(s) to reduce and both sizes.

    Attributes:
        nbytes: the estimated bytes.
        limit: the limit it was checked against.
        argument: the argument(s) that set the size.
    """

    def __init__(self, message: str, nbytes: float, limit: int, argument: str) -> None:
        super().__init__(message)
        self.nbytes, self.limit, self.argument = nbytes, limit, argument


def library_limit() -> int | None:
    """Bytes one library call may plan to hold: ``$POSENC_MAX_MEMORY`` when set (``0``/``off``:
    no limit, ``None``), else :data:`LIBRARY_FRACTION` of :func:`available_memory` (or of
    :data:`FALLBACK_BYTES` when it cannot be read)."""
    text = os.environ.get(LIMIT_ENV, "").strip()
    if text:
        if text.lower() in ("0", "off", "none", "no"):
            return None
        return parse_bytes(text, name=LIMIT_ENV)
    avail = available_memory()
    return int(LIBRARY_FRACTION * (avail if avail else FALLBACK_BYTES))


def check_footprint(nbytes: float, argument: str, what: str, limit: int | None = None) -> None:
    """Refuse, before anything is allocated, a call whose estimate ``nbytes`` exceeds the limit.

    Every constructor and function of the library that can allocate a large share of the
    machine's memory calls this with an estimate made from its arguments alone. The CLI
    checks the same estimates against its ``--max-memory``.

    Args:
        nbytes: the estimated peak bytes (a float: products of large counts do not overflow).
        argument: the argument(s) that set the size, as the user wrote them (``"n=60000"``).
        what: what would be built (``"the ALiBi bias of 8 heads"``).
        limit: bytes (default: :func:`library_limit`).

    Raises:
        FootprintError: ``nbytes`` exceeds the limit (the message names ``argument`` and both sizes).
    """
    if not nbytes > CHECK_ABOVE and limit is None:
        return
    source = "given"
    if limit is None:
        limit = library_limit()
        if limit is None:
            return
        source = (f"set by ${LIMIT_ENV}" if os.environ.get(LIMIT_ENV, "").strip()
                  else f"{LIBRARY_FRACTION:.0%} of the memory available now")
    if nbytes > limit:
        raise FootprintError(
            f"{what} would need about {format_bytes(nbytes)} of memory ({argument}), more than the limit of "
            f"{format_bytes(limit)} ({source}); reduce {argument.split('=')[0]}, or raise the limit with "
            f"{LIMIT_ENV} (e.g. {LIMIT_ENV}=64G, or off)",
            nbytes, limit, argument)
