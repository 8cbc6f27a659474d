"""Memory estimates made before work starts, and the limit they are checked against.

The CLI estimates the bytes a command will hold at its peak from its arguments
(sizes, the encoding's ``out_dim``, the model) and refuses to start when the
estimate exceeds ``--max-memory`` (default: :data:`DEFAULT_FRACTION` of the memory this
process may still take); the library's constructors and functions check their own
estimates against :func:`library_limit`. Both limits come from one reading,
:func:`memory_limit`: the smallest of ``MemAvailable``, ``RLIMIT_AS`` less the mapped
address space, the cgroup's limit less its usage (:mod:`posenc._memory_sources`) and
``$POSENC_MAX_MEMORY``, and each refusal names the source that set it. The estimates
are deliberately simple upper-bound-ish sums of the largest tensors; they are not a
profiler.
"""

from __future__ import annotations

import math
import os
import re

from posenc._memory_sources import Headroom, format_bytes, memory_headroom

#: Share of the available memory a command may plan to use by default.
DEFAULT_FRACTION = 0.5
#: Used when the available memory cannot be read.
FALLBACK_BYTES = 8 * 2**30

_UNITS = {"": 1, "b": 1, "k": 2**10, "kb": 2**10, "kib": 2**10, "m": 2**20, "mb": 2**20, "mib": 2**20,
          "g": 2**30, "gb": 2**30, "gib": 2**30, "t": 2**40, "tb": 2**40, "tib": 2**40}

#: Environment variable that caps the limit (a size such as ``8G``; ``0`` or ``off``: no library limit).
#: The executors set it in their workers to each worker's share.
LIMIT_ENV = "POSENC_MAX_MEMORY"
#: Environment variable that says, in refusals, where ``$POSENC_MAX_MEMORY`` came from (the
#: executors set it beside their share: ``"a worker's share: 1/4 of ..."``); optional.
LIMIT_SOURCE_ENV = "POSENC_MAX_MEMORY_SOURCE"
_OFF = ("0", "off", "none", "no")


class Limit(int):
    """A memory limit in bytes (an ``int``) that remembers where it came from.

    Args:
        nbytes: the limit.
        source: what set it, for messages (``"set by $POSENC_MAX_MEMORY"``,
            ``"80% of the cgroup's memory.max of 4 GiB less the 1 GiB in use (...)"``).
    """

    source: str

    def __new__(cls, nbytes: int, source: str) -> Limit:
        if isinstance(nbytes, bool) or not isinstance(nbytes, int):
            raise TypeError(f"nbytes must be an int, got {type(nbytes).__name__}")
        if not isinstance(source, str) or not source:
            raise TypeError(f"source must be a non-empty str, got {source!r}")
        obj = super().__new__(cls, nbytes)
        obj.source = source
        return obj

    def __getnewargs__(self) -> tuple[int, str]:  # pickled with its source (sent to worker processes)
        return int(self), self.source

    def __repr__(self) -> str:
        return f"Limit({int(self)}, {self.source!r})"


def available_memory() -> int | None:
    """Bytes this process may still take now: the smallest :class:`~posenc._memory_sources.Headroom`
    of :func:`~posenc._memory_sources.memory_headroom` (``MemAvailable``, ``RLIMIT_AS`` less the mapped
    address space, the cgroup's limit less its usage), or None if none can be read."""
    rooms = memory_headroom()
    return min(h.nbytes for h in rooms) if rooms else None


def env_limit() -> Limit | None | bool:
    """``$POSENC_MAX_MEMORY`` as a :class:`Limit`; ``False`` when it is unset or empty, ``None`` when it
    turns the library's limit off (``0``, ``off``, ``none``, ``no``).

    Raises:
        ValueError: it is set to something that is not a size (the message names the variable).
    """
    text = os.environ.get(LIMIT_ENV, "").strip()
    if not text:
        return False
    if text.lower() in _OFF:
        return None
    why = os.environ.get(LIMIT_SOURCE_ENV, "").strip()
    return Limit(parse_bytes(text, name=LIMIT_ENV), f"set by ${LIMIT_ENV}" + (f": {why}" if why else ""))


def memory_limit(fraction: float, *, use_env: bool = True) -> Limit | None:
    """The limit: ``fraction`` of the smallest measured headroom, capped by ``$POSENC_MAX_MEMORY``.

    Args:
        fraction: share of the measured headroom (``MemAvailable``, ``RLIMIT_AS`` less the mapped
            address space, the cgroup's limit less its usage) that may be planned, in ``(0, 1]``.
        use_env: read ``$POSENC_MAX_MEMORY`` (``False``: the measured share alone).

    Returns:
        The smallest candidate, as a :class:`Limit` naming its source; :data:`FALLBACK_BYTES`
        (times ``fraction``) when nothing can be measured; None when ``$POSENC_MAX_MEMORY``
        is ``off`` (and ``use_env``).

    Raises:
        ValueError: ``fraction`` out of range, or ``$POSENC_MAX_MEMORY`` not a size.
    """
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:
        raise ValueError(f"fraction must be a number in (0, 1], got {fraction!r}")
    env = env_limit() if use_env else False
    if env is None:
        return None
    rooms = memory_headroom() or [Headroom(FALLBACK_BYTES, f"{format_bytes(FALLBACK_BYTES)} assumed (the available "
                                                           "memory could not be read)")]
    room = min(rooms, key=lambda h: h.nbytes)
    measured = Limit(int(fraction * room.nbytes), f"{fraction:.0%} of {room.source}")
    return env if env is not False and env <= measured else measured


def default_limit() -> Limit:
    """The CLI's ``--max-memory`` default: :func:`memory_limit` of :data:`DEFAULT_FRACTION` (when
    ``$POSENC_MAX_MEMORY`` is ``off``, the measured share alone)."""
    limit = memory_limit(DEFAULT_FRACTION)
    return limit if limit is not None else memory_limit(DEFAULT_FRACTION, use_env=False)  # type: ignore[return-value]


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


def check_budget(estimate: float, limit: int, what: str, options: str) -> None:
    """Raise a ValueError naming ``options`` when ``estimate`` bytes exceed ``limit``.

    Args:
        estimate: the estimated peak bytes.
        limit: bytes; a :class:`Limit` names its source in the message.
        what: what would be built (``"analysing 10,000 points"``).
        options: the options to reduce (``"--num-points or num_features"``).
    """
    if estimate > limit:
        source = f" ({limit.source})" if isinstance(limit, Limit) else ""
        raise ValueError(
            f"{what} would need about {format_bytes(estimate)} of memory, more than the limit of "
            f"{format_bytes(limit)}{source}; reduce {options}, or raise the limit with --max-memory"
        )


def encoding_bytes(num_params: int, out_dim: int, normalize: bool, dtype_bytes: int = 4) -> float:
    """Construction of an encoding: its parameters and buffers, computed in float64 with up to two
    float64 temporaries of the same size (an index grid, a random draw, a quotient) and cast to their
    dtype (``3 * 8 + dtype_bytes`` bytes per element: 16-24 bytes of resident memory and up to 28 of
    address space were measured, and the address space is what ``ulimit -v`` counts), plus the
    row-normalisation scan, which evaluates its 322 points in blocks of at most ``max(out_dim, 2**22)``
    float64 features (the block, its square and the encoding's work buffer). The CLI and the
    encodings' constructors check this same estimate."""
    return (3 * 8.0 + dtype_bytes) * num_params + (3 * 8.0 * max(out_dim, 2**22) if normalize else 0.0)


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
#: Requests below this many bytes are never checked (reading the limit costs ~0.1 ms).
CHECK_ABOVE = 2**28


class FootprintError(MemoryError, ValueError):
    """A call refused before it allocated: its estimated footprint exceeds the memory limit.

    A ``MemoryError`` (what an allocation that failed would raise) and a ``ValueError``
    (an argument out of range), so ``except MemoryError`` and ``except ValueError`` both
    catch it. The message names the argument(s) to reduce, both sizes and what set the limit.

    Attributes:
        nbytes: the estimated bytes.
        limit: the limit it was checked against.
        argument: the argument(s) that set the size.
    """

    def __init__(self, message: str, nbytes: float, limit: int, argument: str) -> None:
        super().__init__(message)
        self.nbytes, self.limit, self.argument = nbytes, limit, argument


def library_limit() -> Limit | None:
    """Bytes one library call may plan to hold: :func:`memory_limit` of :data:`LIBRARY_FRACTION`,
    the smallest of :data:`LIBRARY_FRACTION` of the measured headroom (``MemAvailable``,
    ``RLIMIT_AS``, the cgroup) and ``$POSENC_MAX_MEMORY``; None when ``$POSENC_MAX_MEMORY`` is
    ``off``."""
    return memory_limit(LIBRARY_FRACTION)


def check_footprint(nbytes: float, argument: str, what: str, limit: int | None = None,
                    advice: str | None = None) -> None:
    """Refuse, before anything is allocated, a call whose estimate ``nbytes`` exceeds the limit.

    Every constructor and function of the library that can allocate a large share of the
    machine's memory calls this with an estimate made from its arguments alone. The CLI
    checks the same estimates against its ``--max-memory``.

    Args:
        nbytes: the estimated peak bytes (a float: products of large counts do not overflow).
        argument: the argument(s) that set the size, as the user wrote them (``"n=60000"``).
        what: what would be built (``"the ALiBi bias of 8 heads"``).
        limit: bytes (default: :func:`library_limit`); a :class:`Limit` names its source.
        advice: what to reduce (default: the name in ``argument`` before ``=``).

    Raises:
        FootprintError: ``nbytes`` exceeds the limit (the message names ``argument``, both sizes
            and the limit's source).
    """
    if not nbytes > CHECK_ABOVE and limit is None:
        return
    if limit is None:
        limit = library_limit()
        if limit is None:
            return
    if nbytes > limit:
        source = limit.source if isinstance(limit, Limit) else "given"
        if source.startswith(f"set by ${LIMIT_ENV}"):
            remedy = f"raise ${LIMIT_ENV} (e.g. {LIMIT_ENV}=64G, or off)"
        else:
            remedy = f"run where more memory is free, or turn the check off with {LIMIT_ENV}=off"
        raise FootprintError(
            f"{what} would need about {format_bytes(nbytes)} of memory ({argument}), more than the limit of "
            f"{format_bytes(limit)} ({source}); reduce {advice or argument.split('=')[0]}, or {remedy}",
            nbytes, limit, argument)
