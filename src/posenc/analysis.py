"""The theory of Zheng, Ramasinghe and Lucey (arXiv 2107.02561): stable rank and
distance preservation, and what they predict about a coordinate encoding.

* :func:`stable_rank` of an embedded matrix ``Psi`` (N positions x D features):
  ``||Psi||_F^2 / ||Psi||_2^2``, a smooth count of the directions the embedding
  spans. High stable rank lets a linear layer fit (and memorise) the samples.
* :func:`similarity_profile` / :func:`distance_preservation`: how the cosine
  similarity between the embedding of a point and of the centre of the domain
  falls with their distance; the scalar is the half-width of the region where
  the similarity stays above a threshold (0.1 by default). Good distance
  preservation lets the model interpolate between the training samples.
* :func:`tradeoff_curve` and :func:`stable_rank_curve` reproduce the paper's
  trade-off sweeps; the Gaussian closed forms are :func:`gaussian_stable_rank`
  (``1 / (2 sigma sqrt(pi))`` for dense sampling) and :func:`gaussian_dp_width`
  (``2 sigma sqrt(ln(1/threshold))``).
* :func:`suggest_bandwidth` goes beyond the paper: it proposes the width of an
  encoding for a given number of regularly spaced samples from the trade-off
  alone, without training (see its docstring for the criterion).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from posenc._checks import (
    check_finite,
    check_positive_float,
    check_positive_int,
    check_tensor,
)
from posenc._resources import analysis_bytes, check_footprint, embedding_bytes, suggest_bytes
from posenc.encodings.registry import create_encoding, encoding_class, encoding_footprint
from posenc.positions import grid_1d

__all__ = [
    "stable_rank",
    "embedding_matrix",
    "similarity_profile",
    "distance_preservation",
    "gaussian_stable_rank",
    "gaussian_dp_width",
    "rff_sigma_for_gaussian",
    "tradeoff_curve",
    "stable_rank_curve",
    "match_width",
    "suggest_bandwidth",
]


def stable_rank(matrix: torch.Tensor) -> float:
    """Stable rank ``||A||_F^2 / ||A||_2^2`` of a 2-D matrix, computed in float64.

    Uses the eigenvalues of the smaller Gram matrix (``A A^T`` or ``A^T A``).

    Args:
        matrix: ``(N, D)``, finite, not all zero.

    Returns:
        A float in ``[1, min(N, D)]``.
    """
    check_tensor("matrix", matrix)
    if matrix.dim() != 2 or matrix.numel() == 0:
        raise ValueError(f"matrix must be a non-empty 2-D tensor, got shape {tuple(matrix.shape)}")
    check_finite("matrix", matrix)
    a = matrix.detach().to(torch.float64)
    gram = a @ a.T if a.shape[0] <= a.shape[1] else a.T @ a
    frob = float(torch.diagonal(gram).sum())
    if frob == 0.0:
        raise ValueError("matrix is all zeros: its stable rank is undefined")
    top = float(torch.linalg.eigvalsh(gram)[-1])
    return frob / top


def _as_encoding(encoding: Any, kwargs: dict) -> torch.nn.Module:
    if isinstance(encoding, str):
        return create_encoding(encoding, **kwargs)
    if kwargs:
        raise TypeError("keyword arguments are only accepted with an encoding name")
    if not isinstance(encoding, torch.nn.Module) or not hasattr(encoding, "in_dim"):
        raise TypeError(f"encoding must be an encoding name or an Encoding module, got {type(encoding).__name__}")
    return encoding


def _check_analysis(estimate, num_points: int, enc: Any, what: str, argument: str = "num_points") -> None:
    out_dim = int(getattr(enc, "out_dim", 0) or 0)
    check_footprint(estimate(num_points, out_dim), f"{argument}={num_points}",
                    f"{what} of {num_points:,} points x {out_dim:,} features")


def _domain(enc: torch.nn.Module) -> tuple[float, float]:
    return tuple(getattr(enc, "domain", (0.0, 1.0)))  # type: ignore[return-value]


def embedding_matrix(encoding: Any, num_points: int, **kwargs: Any) -> torch.Tensor:
    """Embed ``num_points`` regularly spaced 1D positions of the encoding's domain.

    Args:
        encoding: an encoding module with ``in_dim == 1``, or a registered name
            (then ``kwargs`` are its constructor arguments).
        num_points: N.

    Returns:
        ``Psi`` of shape ``(N, out_dim)`` in float64.

    Refused before anything is allocated when ``N x out_dim`` exceeds the memory limit
    (:func:`posenc._resources.check_footprint`; the CLI's estimate).
    """
    enc = _as_encoding(encoding, kwargs)
    check_positive_int("num_points", num_points)
    if enc.in_dim != 1:
        raise ValueError(f"encoding must have in_dim=1 for this analysis, got in_dim={enc.in_dim}")
    _check_analysis(embedding_bytes, num_points, enc, "embedding_matrix")
    x = grid_1d(num_points, _domain(enc), dtype=torch.float64)
    with torch.no_grad():
        return enc(x).to(torch.float64)


def similarity_profile(
    encoding: Any, num_points: int = 1024, centre: float = 0.5, **kwargs: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """Cosine similarity of unit-normalised embeddings to the point nearest ``centre``.

    Args:
        encoding: an encoding with ``in_dim == 1``, or a registered name (+ kwargs).
        num_points: resolution of the regular grid over the domain.
        centre: the reference point, as a fraction of the domain (0.5 = middle).

    Returns:
        ``(displacement, similarity)``, each ``(num_points,)`` float64; displacement
        is in domain units, similarity in ``[-1, 1]`` (exactly 1 at displacement 0).
    """
    enc = _as_encoding(encoding, kwargs)
    if not 0.0 <= float(centre) <= 1.0:
        raise ValueError(f"centre must be a fraction of the domain in [0, 1], got {centre}")
    check_positive_int("num_points", num_points)
    _check_analysis(analysis_bytes, num_points, enc, "similarity_profile")
    psi = embedding_matrix(enc, num_points)
    norms = psi.norm(dim=1, keepdim=True)
    if bool((norms == 0).any()):
        raise ValueError("some positions embed to the zero vector: the cosine similarity is undefined")
    unit = psi / norms
    c = min(int(round(centre * num_points)), num_points - 1)
    low, high = _domain(enc)
    x = grid_1d(num_points, (low, high), dtype=torch.float64)[:, 0]
    return x - x[c], unit @ unit[c]


def distance_preservation(
    displacement: torch.Tensor, similarity: torch.Tensor, threshold: float = 0.1
) -> float:
    """Half-width of the contiguous region around displacement 0 where similarity > threshold.

    The crossings on each side are linearly interpolated and the two half-widths
    averaged. If the similarity never drops below the threshold on a side, that
    side's extent of the sampled range is used (the value is then a lower bound).

    Args:
        displacement: ``(N,)`` sorted, containing 0.
        similarity: ``(N,)``.
        threshold: in ``(-1, 1)``.
    """
    check_tensor("displacement", displacement)
    check_tensor("similarity", similarity)
    if displacement.shape != similarity.shape or displacement.dim() != 1:
        raise ValueError(
            f"displacement and similarity must be 1-D of equal length, got {tuple(displacement.shape)} "
            f"and {tuple(similarity.shape)}"
        )
    if not -1.0 < float(threshold) < 1.0:
        raise ValueError(f"threshold must lie in (-1, 1), got {threshold}")
    check_finite("similarity", similarity)
    d = displacement.to(torch.float64)
    s = similarity.to(torch.float64)
    c = int(torch.argmin(d.abs()))
    if abs(float(d[c])) > 1e-9 * max(1.0, float(d.abs().max())):
        raise ValueError("displacement must contain 0 (the reference point)")

    def walk(step: int) -> float:
        i = c
        while 0 <= i + step < len(s):
            j = i + step
            if s[j] <= threshold:
                # interpolate between i (above) and j (at/below)
                frac = float((s[i] - threshold) / (s[i] - s[j]))
                return abs(float(d[i] + frac * (d[j] - d[i])))
            i = j
        return abs(float(d[i]))

    return 0.5 * (walk(1) + walk(-1))


def gaussian_stable_rank(sigma: float) -> float:
    """Closed-form stable rank of a densely sampled Gaussian embedding: ``1 / (2 sigma sqrt(pi))``.

    For positions and centres densely covering the unit interval the Gram
    operator's eigenvalues follow the Gaussian's spectrum ``exp(-4 pi^2 sigma^2 k^2)``,
    whose sum over integer ``k`` (max 1) is ``~ 1 / (2 sigma sqrt(pi))`` for
    ``sigma << 1``.
    """
    return 1.0 / (2.0 * check_positive_float("sigma", sigma) * math.sqrt(math.pi))


def gaussian_dp_width(sigma: float, threshold: float = 0.1) -> float:
    """Distance-preservation half-width of the Gaussian embedding: ``2 sigma sqrt(ln(1/t))``.

    The cosine similarity of two dense Gaussian embeddings at distance ``d`` is
    ``exp(-d^2 / (4 sigma^2))``.
    """
    if not 0.0 < float(threshold) < 1.0:
        raise ValueError(f"threshold must lie in (0, 1), got {threshold}")
    return 2.0 * check_positive_float("sigma", sigma) * math.sqrt(math.log(1.0 / threshold))


def rff_sigma_for_gaussian(sigma: float) -> float:
    """Frequency std of random Fourier features with the same kernel as a Gaussian of width ``sigma``.

    Both give ``exp(-d^2 / (4 sigma^2))``: ``sigma_f = 1 / (2 sqrt(2) pi sigma)``.
    """
    return 1.0 / (2.0 * math.sqrt(2.0) * math.pi * check_positive_float("sigma", sigma))


def tradeoff_curve(
    name: str,
    values: Sequence[float],
    num_points: int = 512,
    threshold: float = 0.1,
    **kwargs: Any,
) -> list[dict[str, float]]:
    """Stable rank and distance preservation of ``name`` across its width parameter.

    Args:
        name: a registered encoding with a width parameter (``gaussian``: sigma,
            ``rff``: sigma, ``triangle``: width, ``linf``/``logf``: max_freq).
        values: the width values to evaluate.
        num_points: positions used for both measures.
        threshold: distance-preservation threshold.
        **kwargs: other constructor arguments (e.g. ``num_features``).

    Returns:
        One dict per value: ``{"value", "stable_rank", "dp_width"}``.
    """
    param = _width_param(name)
    rows = []
    for value in values:
        enc = create_encoding(name, **{param: value}, **kwargs)
        psi = embedding_matrix(enc, num_points)
        disp, sim = similarity_profile(enc, num_points)
        rows.append(
            {
                "value": float(value),
                "stable_rank": stable_rank(psi),
                "dp_width": distance_preservation(disp, sim, threshold),
            }
        )
    return rows


def stable_rank_curve(name: str, sample_counts: Sequence[int], **kwargs: Any) -> list[dict[str, float]]:
    """Stable rank of ``name``'s embedding of N regular samples, for each N in ``sample_counts``."""
    enc = create_encoding(name, **kwargs)
    return [{"num_samples": int(n), "stable_rank": stable_rank(embedding_matrix(enc, int(n)))} for n in sample_counts]


def _width_param(name: str) -> str:
    param = encoding_class(name).width_param
    if param is None:
        raise ValueError(f"encoding {name!r} has no width parameter to sweep")
    return param


def _solve_log(fn, low: float, high: float, rtol: float = 1e-3) -> float:
    """Root of a monotone-ish ``fn`` on ``[low, high]``: a log-grid scan, then log bisection to ``rtol``."""
    grid = torch.logspace(math.log10(low), math.log10(high), 17, dtype=torch.float64).tolist()
    iters = max(1, math.ceil(math.log2(math.log(grid[1] / grid[0]) / rtol)))
    vals = [fn(v) for v in grid]
    for a, b, fa, fb in zip(grid, grid[1:], vals, vals[1:]):
        if fa == 0.0:
            return a
        if (fa < 0) != (fb < 0):
            for _ in range(iters):
                mid = math.sqrt(a * b)
                fm = fn(mid)
                if (fm < 0) == (fa < 0):
                    a, fa = mid, fm
                else:
                    b = mid
            return math.sqrt(a * b)
    raise ValueError(
        f"no crossing found for the width in [{low:.3g}, {high:.3g}]; pass bounds=(low, high) explicitly"
    )


def match_width(
    name: str,
    target_width: float,
    threshold: float = 0.1,
    num_points: int = 1024,
    bounds: tuple[float, float] | None = None,
    **kwargs: Any,
) -> float:
    """The width parameter of ``name`` whose distance-preservation half-width equals ``target_width``.

    Used to compare encodings at a *matched kernel width* (e.g. a triangle or
    LinF encoding as wide as a given Gaussian).
    """
    check_positive_float("target_width", target_width)
    param = _width_param(name)
    smooth = encoding_class(name).width_increases_smoothness

    def width_of(v: float) -> float:
        enc = create_encoding(name, **{param: v}, **kwargs)
        if bool((embedding_matrix(enc, num_points).norm(dim=1) == 0).any()):
            return 0.0  # a basis too narrow to cover the domain preserves no distance
        disp, sim = similarity_profile(enc, num_points)
        return distance_preservation(disp, sim, threshold)

    if bounds is None:
        bounds = (target_width / 100.0, target_width * 100.0) if smooth else (1.0, 100.0 / target_width)
    return _solve_log(lambda v: width_of(v) - target_width, *bounds)


def suggest_bandwidth(
    num_samples: int,
    encoding: str = "gaussian",
    bounds: tuple[float, float] | None = None,
    **kwargs: Any,
) -> dict[str, float]:
    """Propose a width for ``encoding`` given ``num_samples`` regular training samples, without training.

    The criterion balances the two quantities of the paper's trade-off, each
    normalised to ``[0, 1]``:

    * capacity: the stable rank of the embedded training samples divided by
      ``num_samples`` (1 = the embedding can memorise every sample);
    * interpolation: the cosine similarity between the embeddings of two
      neighbouring training samples (1 = a test point between them is embedded
      like its neighbours).

    Narrowing the kernel raises the first and lowers the second; the suggestion
    is the width where they are equal. For the dense Gaussian this has the closed
    form ``sigma* ~ 0.59 * h`` (spacing ``h = 1 / num_samples``), from
    ``u / sqrt(pi) = exp(-u^2)`` with ``u = h / (2 sigma)``. How well this matches
    the sigma that the training sweep finds best is measured in the ``coords``
    section of the reproduction report.

    Args:
        num_samples: number of regularly spaced training samples on the domain.
        encoding: a registered encoding name with a width parameter.
        bounds: search interval for the width (default: derived from the spacing).
        **kwargs: other constructor arguments (``num_features``, ...).

    Returns:
        ``{"value", "param", "stable_rank", "normalised_stable_rank", "neighbour_similarity"}``.
    """
    check_positive_int("num_samples", num_samples, minimum=2)
    param = _width_param(encoding)
    out_dim = encoding_footprint(encoding, **kwargs).out_dim  # from the arguments alone, as the CLI
    check_footprint(suggest_bytes(num_samples, out_dim), f"num_samples={num_samples}",
                    f"suggest_bandwidth of {num_samples:,} samples x {out_dim:,} features")
    smooth = encoding_class(encoding).width_increases_smoothness

    def measures(v: float) -> tuple[float, float]:
        enc = create_encoding(encoding, **{param: v}, **kwargs)
        psi = embedding_matrix(enc, num_samples)
        unit = psi / psi.norm(dim=1, keepdim=True).clamp_min(1e-300)
        neighbour = float((unit[1:] * unit[:-1]).sum(dim=1).mean())
        return stable_rank(psi) / num_samples, neighbour

    h = 1.0 / num_samples
    if bounds is None:
        bounds = (h / 64.0, 64.0 * h) if smooth else (max(1e-3, 1.0 / (64.0 * h) / 64.0), 64.0 / h)
        if param == "max_freq":  # the Fourier encodings' lowest frequency is 1: max_freq >= 1
            bounds = (max(1.0, bounds[0]), max(2.0, bounds[1]))
    def gap(v: float) -> float:
        sr_norm, neighbour = measures(v)
        return sr_norm - neighbour

    value = _solve_log(gap, *bounds)
    sr_norm, neighbour = measures(value)
    return {
        "param": param,
        "value": value,
        "stable_rank": sr_norm * num_samples,
        "normalised_stable_rank": sr_norm,
        "neighbour_similarity": neighbour,
    }
