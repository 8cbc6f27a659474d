"""Shifted-basis coordinate encodings (Zheng, Ramasinghe, Lucey, arXiv 2107.02561).

A shifted-basis encoding evaluates one function at F shifts:
``psi_i(x) = g(x - t_i)`` for centres ``t_i = i / F`` on the unit interval.

* ``gaussian``: ``g(u) = exp(-u^2 / (2 sigma^2))`` (no wrap-around), optionally
  truncated to exact zeros beyond ``truncate * sigma``;
* ``triangle``: ``g(u) = max(0, 1 - |u| / width)``;
* the *circulant* family of the paper (Sec. 4): the rows of ``circulant(c)`` for a
  unit-norm generator ``c`` of length F (``impulse``, ``gaussian``, ``square``,
  ``sine``, ``random``); positions are snapped to the nearest of the F grid points
  and the basis wraps around the unit interval.
"""

from __future__ import annotations

import math

import torch

from posenc._cache import same_bits
from posenc._checks import _compiling, check_choice, check_positive_float, check_positive_int, check_width
from posenc.encodings._forward_memory import autograd_on, check_forward_memory, coordinate_feature_bytes
from posenc.encodings.base import CoordinateEncoding, compute_dtype, resolve_width
from posenc.encodings.registry import register_encoding


def _is_unit_grid(centres: torch.Tensor) -> bool:
    """Whether ``centres`` is exactly the grid ``i / F`` that the banded path assumes (reads 3 values)."""
    num = centres.numel()
    return bool(getattr(centres, "_posenc_unit_grid", False)) or (
        num > 0 and abs(float(centres[-1]) - (num - 1) / num) < 1e-6 and abs(float(centres[0])) < 1e-12
        and (num < 2 or abs(float(centres[1]) - 1.0 / num) < 1e-6)
    )


def grid_centres(num: int, *, device=None, dtype=torch.float64) -> torch.Tensor:
    """``num`` centres ``i / num`` on ``[0, 1)`` (the paper's ``linspace(0, 1, num+1)[:-1]``)."""
    return torch.arange(num, device=device, dtype=dtype) / num


def _centres(num: int, device, dtype) -> torch.Tensor:
    """The centre buffer, computed in float64 on ``device`` and cast (nothing is allocated on ``meta``)."""
    return grid_centres(num, device=device).to(dtype or torch.get_default_dtype())


def banded_basis(t: torch.Tensor, num: int, half_width: float, profile,
                 centres: torch.Tensor | None = None) -> torch.Tensor:
    """A compactly supported shifted basis on the grid ``i / num``, computed only inside its band.

    ``out[..., k, i] = profile(t[..., k] - c_i)`` where ``|t - c_i| <= half_width``
    and 0 elsewhere, ``c_i = i / num``. Each position touches a window of
    ``ceil(2 * half_width * num) + 2`` consecutive centres (moved inside ``[0, num)``
    at the ends), so the work is that band plus writing the zeros, instead of one
    kernel evaluation per feature.

    Args:
        t: unit coordinates ``(..., K)``.
        num: number of centres F.
        half_width: support radius of ``profile`` in unit coordinates.
        profile: elementwise function of the displacement ``t - centre``.
        centres: the ``(F,)`` grid itself (values are gathered from it, so the result is
            bit-identical to evaluating ``profile`` densely on these centres); default ``i / num``.

    Returns:
        ``(..., K, F)``.
    """
    dtype = compute_dtype(t.dtype)
    t = t.to(dtype)
    band = min(num, int(math.ceil(2.0 * half_width * num)) + 2)
    # first centre of each window; every centre within half_width of t lies in [start, start + band)
    start = torch.floor((t - half_width) * num).clamp_(0, num - band).long()
    idx = start[..., None] + torch.arange(band, device=t.device)
    if centres is None:
        c = idx.to(dtype) / num
    else:
        c = centres.to(device=t.device, dtype=dtype)[idx]
    diff = t[..., None] - c
    vals = profile(diff)
    far = diff.abs_() > half_width if not diff.requires_grad else diff.abs() > half_width
    vals = vals.masked_fill_(far, 0.0) if not vals.requires_grad else vals.masked_fill(far, 0.0)
    out = torch.zeros((*t.shape, num), dtype=dtype, device=t.device)
    return out.scatter_(-1, idx, vals)  # the indices of a row are distinct


def _use_band(half_width: float, num: int) -> bool:
    return 2.0 * half_width * num + 2 < num / 4


def _check_bump_forward(encoding: CoordinateEncoding, positions: torch.Tensor) -> None:
    """Refuse a forward pass of a Gaussian or triangle basis whose features would exceed the memory limit.

    Per feature: the output, computed in place, and a byte of the ``truncate`` mask; with
    autograd, the displacement and each elementwise step are kept (five tensors).
    """
    item = compute_dtype(positions.dtype).itemsize
    per_direction = (5 * item if autograd_on(positions) else item) + 1
    check_forward_memory(encoding, positions, coordinate_feature_bytes(encoding, positions, per_direction))


#: ``-log`` of a value far below the smallest subnormal, per compute dtype: ``exp(-x)`` is
#: exactly 0 beyond it (float32: 2^-149 = e^-103.3; float64: 2^-1074 = e^-744.4).
_UNDERFLOW = {torch.float32: 110.0, torch.float64: 750.0}


def gaussian_support(sigma: float, dtype: torch.dtype, truncate: float | None = None) -> float:
    """Radius beyond which the Gaussian of width ``sigma`` is exactly 0 in ``dtype`` (or ``truncate * sigma``).

    ``exp(-u^2 / (2 sigma^2))`` underflows to 0 in float32 for ``|u| > 14.8 sigma`` and in
    float64 for ``|u| > 38.7 sigma``: past that radius the dense formula writes zeros, so a
    banded evaluation within it gives the same tensor.
    """
    radius = sigma * math.sqrt(2.0 * _UNDERFLOW.get(compute_dtype(dtype), _UNDERFLOW[torch.float64]))
    return radius if truncate is None else min(radius, truncate * sigma)


def gaussian_basis(
    t: torch.Tensor, centres: torch.Tensor, sigma: float, truncate: float | None = None, *,
    unit_grid: bool | None = None,
) -> torch.Tensor:
    """Gaussian bumps ``exp(-(t - c)^2 / (2 sigma^2))``: ``(..., K) -> (..., K, F)``.

    On the grid ``c_i = i / F`` with a narrow Gaussian, only the band of centres where
    the value is not exactly zero in the compute dtype is evaluated
    (:func:`gaussian_support`); the result is the same tensor as the dense formula.

    Args:
        t: unit coordinates ``(..., K)``.
        centres: ``(F,)``.
        sigma: width (> 0).
        truncate: if given, set entries with ``|t - c| > truncate * sigma`` to exactly 0.
        unit_grid: whether ``centres`` is the grid ``i / F`` (``None``: read it from the
            values; the encodings pass ``True``, which keeps compiled graphs free of reads).
    """
    dtype = compute_dtype(t.dtype)
    num = centres.numel()
    radius = gaussian_support(sigma, dtype, truncate)
    if _use_band(radius, num) and (_is_unit_grid(centres) if unit_grid is None else unit_grid):
        scale = -0.5 / sigma**2
        return banded_basis(t, num, radius, lambda d: torch.exp(d.square() * scale), centres)
    diff = t.to(dtype)[..., None] - centres.to(device=t.device, dtype=dtype)
    far = diff.abs() > truncate * sigma if truncate is not None else None
    if diff.requires_grad:
        out = torch.exp(diff.square() * (-0.5 / sigma**2))
    else:  # one buffer, three in-place passes: the output is the only large allocation
        out = diff.square_().mul_(-0.5 / sigma**2).exp_()
    if far is not None:
        out = out.masked_fill_(far, 0.0) if not out.requires_grad else out.masked_fill(far, 0.0)
    return out


def triangle_basis(t: torch.Tensor, centres: torch.Tensor, width: float, *,
                   unit_grid: bool | None = None) -> torch.Tensor:
    """Hat functions ``max(0, 1 - |t - c| / width)``: ``(..., K) -> (..., K, F)``.

    ``unit_grid``: whether ``centres`` is the grid ``i / F`` (then a narrow hat is
    evaluated in its band only); ``None`` reads it from the values.
    """
    if _use_band(width, centres.numel()) and (_is_unit_grid(centres) if unit_grid is None else unit_grid):
        return banded_basis(t, centres.numel(), width, lambda d: d.abs().mul(-1.0 / width).add(1.0).clamp_min(0.0),
                            centres)
    dtype = compute_dtype(t.dtype)
    diff = t.to(dtype)[..., None] - centres.to(device=t.device, dtype=dtype)
    if diff.requires_grad:
        return diff.abs().mul(-1.0 / width).add(1.0).clamp_min(0.0)
    return diff.abs_().mul_(-1.0 / width).add_(1.0).clamp_min_(0.0)


@register_encoding("gaussian")
class GaussianEncoding(CoordinateEncoding):
    """Shifted Gaussian basis: ``psi_i(x) = exp(-(x - t_i)^2 / (2 sigma^2))``.

    ``(..., in_dim) -> (..., num_features)``. For dense sampling its stable rank is
    about ``1 / (2 sigma sqrt(pi))`` and its distance-preservation half-width at
    similarity 0.1 is ``2 sigma sqrt(ln 10)`` (see :mod:`posenc.analysis`).

    Args:
        in_dim: number of coordinates.
        num_features: output width (F centres per direction).
        sigma: width of each Gaussian in unit-domain coordinates (> 0; default 0.01).
        truncate: zero the basis beyond ``truncate * sigma`` (sparse, banded features).
        mode, domain, normalize, strict: see :class:`CoordinateEncoding`.
        device, dtype: of the centre buffer.
        kernel_width: the kernel width ``w`` shared by the encodings (the induced kernel is
            ``exp(-|x - y|^2 / (4 w^2))``; equal to ``sigma`` here); pass this or ``sigma``.
    """

    width_param = "sigma"

    def __init__(
        self,
        in_dim: int = 1,
        num_features: int = 256,
        sigma: float | None = None,
        truncate: float | None = None,
        mode: str = "separable",
        domain: tuple[float, float] = (0.0, 1.0),
        normalize: bool = False,
        strict: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        kernel_width: float | None = None,
    ) -> None:
        super().__init__(in_dim, num_features, mode, domain, normalize, strict)
        self.sigma = resolve_width("sigma", sigma, kernel_width, lambda w: w, 0.01)
        self.truncate = None if truncate is None else check_positive_float("truncate", truncate)
        self.register_buffer("centres", _centres(self.features_per_direction, device, dtype), persistent=False)
        self._finalize()

    @classmethod
    def _buffer_numel(cls, arguments: dict, num_dirs: int, per_dir: int) -> int:
        return per_dir  # centres

    def encode(self, positions: torch.Tensor) -> torch.Tensor:
        """:meth:`CoordinateEncoding.encode`, refused first when its features would exceed the memory limit."""
        _check_bump_forward(self, positions)
        return super().encode(positions)

    def encode_1d(self, t: torch.Tensor) -> torch.Tensor:
        return gaussian_basis(t, self.centres, self.sigma, self.truncate, unit_grid=True)

    def extra_repr(self) -> str:
        extra = f", truncate={self.truncate:g}" if self.truncate is not None else ""
        return f"{super().extra_repr()}, sigma={self.sigma:g}{extra}"


@register_encoding("triangle")
class TriangleEncoding(CoordinateEncoding):
    """Shifted hat functions: ``psi_i(x) = max(0, 1 - |x - t_i| / width)``.

    ``(..., in_dim) -> (..., num_features)``; the features are banded (each
    position touches about ``2 * width * F`` of them).

    Args:
        in_dim: number of coordinates.
        num_features: output width (F centres per direction).
        width: half-width ``d`` of each hat in unit-domain coordinates (> 0).
        mode, domain, normalize, strict: see :class:`CoordinateEncoding`.
        device, dtype: of the centre buffer.
    """

    width_param = "width"

    def __init__(
        self,
        in_dim: int = 1,
        num_features: int = 256,
        width: float = 0.02,
        mode: str = "separable",
        domain: tuple[float, float] = (0.0, 1.0),
        normalize: bool = False,
        strict: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(in_dim, num_features, mode, domain, normalize, strict)
        self.width = check_width("width", width)
        self.register_buffer("centres", _centres(self.features_per_direction, device, dtype), persistent=False)
        self._finalize()

    @classmethod
    def _buffer_numel(cls, arguments: dict, num_dirs: int, per_dir: int) -> int:
        return per_dir  # centres

    def encode(self, positions: torch.Tensor) -> torch.Tensor:
        """:meth:`CoordinateEncoding.encode`, refused first when its features would exceed the memory limit."""
        _check_bump_forward(self, positions)
        return super().encode(positions)

    def encode_1d(self, t: torch.Tensor) -> torch.Tensor:
        return triangle_basis(t, self.centres, self.width, unit_grid=True)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, width={self.width:g}"


GENERATORS = ("impulse", "gaussian", "square", "sine", "random")


def circulant_generator(
    kind: str,
    num: int,
    *,
    sigma: float = 0.01,
    freq: float = 1.0,
    seed: int = 0,
    offset: float = 0.0,
    bipolar: bool = False,
) -> torch.Tensor:
    """Unit-norm generator ``c`` (length ``num``, float64) of a circulant embedding.

    ``c = (g + offset) / ||g + offset||`` for the base generator ``g`` of ``kind``.

    Args:
        kind: ``"impulse"`` (``g[0] = 1``), ``"gaussian"`` (periodic Gaussian of width
            ``sigma``), ``"square"`` (``1[sin(2 pi freq (k + 1/2) / num) > 0]``, or with
            ``bipolar`` its ``+-1`` version ``sign(sin(...))``), ``"sine"``
            (``sin(2 pi freq k / num)``) or ``"random"`` (``N(0, I)`` with ``seed``).
        num: length F.
        sigma, freq, seed: parameters of the ``"gaussian"``, ``"square"``/``"sine"`` and
            ``"random"`` generators.
        offset: constant added to ``g`` before normalising (Zheng et al.'s all-embedder
            SR/DP notebook uses a sine with ``offset=0.7``; default 0).
        bipolar: ``"square"`` only: ``+-1`` instead of ``0/1`` (that notebook's square wave).

    Returns:
        ``(num,)`` float64 with unit L2 norm.
    """
    check_choice("kind", kind, GENERATORS)
    check_positive_int("num", num)
    if not isinstance(bipolar, bool):
        raise TypeError(f"bipolar must be a bool, got {type(bipolar).__name__}")
    if bipolar and kind != "square":
        raise ValueError(f"bipolar applies to the 'square' generator only, got kind={kind!r}")
    if isinstance(offset, bool) or not isinstance(offset, (int, float)) or not math.isfinite(offset):
        raise ValueError(f"offset must be a finite number, got {offset!r}")
    k = torch.arange(num, dtype=torch.float64)
    if kind == "impulse":
        c = torch.zeros(num, dtype=torch.float64)
        c[0] = 1.0
    elif kind == "gaussian":
        u = torch.remainder(k / num + 0.5, 1.0) - 0.5  # wrapped displacement
        c = torch.exp(-(u**2) / (2 * check_width("sigma", sigma) ** 2))
    elif kind == "square":
        # Shift by half a sample so the comparison never lands exactly on a zero of sin.
        c = (torch.sin(2 * math.pi * check_positive_float("freq", freq) * (k + 0.5) / num) > 0).double()
        if bipolar:
            c = 2.0 * c - 1.0
    elif kind == "sine":
        c = torch.sin(2 * math.pi * check_positive_float("freq", freq) * k / num)
    else:
        gen = torch.Generator().manual_seed(check_positive_int("seed", seed, minimum=0))
        c = torch.randn(num, generator=gen, dtype=torch.float64)
    if offset:
        c = c + float(offset)
    norm = c.norm()
    if norm == 0:
        raise ValueError(f"the {kind!r} generator of length {num} is identically zero (freq={freq}, offset={offset})")
    return c / norm


@register_encoding("circulant")
@register_encoding("impulse", generator="impulse")
@register_encoding("square", generator="square")
@register_encoding("sine", generator="sine")
@register_encoding("random", generator="random")
class CirculantEncoding(CoordinateEncoding):
    """Rows of ``circulant(c)``: ``psi_i(x) = c[(round(x F) - i) mod F]``.

    The paper's circulant family (Sec. 4): every row is a cyclic shift of one
    unit-norm generator ``c``, so the encoding is defined on the grid of F points
    of the unit interval; other positions snap to the nearest grid point, and the
    basis is periodic. The impulse and random generators have the highest possible
    stable rank and no distance preservation; the Gaussian, square and sine ones
    trade rank for smoothness.

    ``(..., in_dim) -> (..., num_features)``.

    Args:
        in_dim: number of coordinates.
        num_features: output width (F grid points per direction).
        generator: ``"impulse"``, ``"gaussian"``, ``"square"``, ``"sine"`` or ``"random"``.
        sigma: width of the ``"gaussian"`` generator.
        freq: frequency of the ``"square"`` and ``"sine"`` generators (cycles per domain).
        seed: seed of the ``"random"`` generator.
        offset: constant added to the generator before normalising (``0.7`` with ``"sine"``
            is the sine of Zheng et al.'s all-embedder SR/DP notebook).
        bipolar: ``"square"`` only: a ``+-1`` square wave (that notebook's) instead of ``0/1``.
        mode, domain, normalize, strict: see :class:`CoordinateEncoding`.
        device, dtype: of the generator buffer.
    """

    #: Up to this many features per direction, the F x F circulant matrix is cached
    #: and positions gather its rows (16 MiB in float32 at the limit).
    table_limit = 2048

    def __init__(
        self,
        in_dim: int = 1,
        num_features: int = 256,
        generator: str = "impulse",
        sigma: float = 0.01,
        freq: float = 1.0,
        seed: int = 0,
        mode: str = "separable",
        domain: tuple[float, float] = (0.0, 1.0),
        normalize: bool = False,
        strict: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        offset: float = 0.0,
        bipolar: bool = False,
    ) -> None:
        super().__init__(in_dim, num_features, mode, domain, normalize, strict)
        self.generator = check_choice("generator", generator, GENERATORS)
        self.sigma, self.freq, self.seed = sigma, freq, seed
        self.offset, self.bipolar = offset, bipolar
        dtype = dtype or torch.get_default_dtype()
        if device is not None and torch.device(device).type == "meta":  # shapes only: nothing to compute
            c = torch.empty(self.features_per_direction, device="meta", dtype=dtype)
        else:
            c = circulant_generator(generator, self.features_per_direction, sigma=sigma, freq=freq, seed=seed,
                                    offset=offset, bipolar=bipolar).to(device=device, dtype=dtype)
        self.register_buffer("generator_vector", c, persistent=False)
        # the cached circulant matrix and the generator it was built from (not saved in state_dict)
        self._table: tuple[torch.Tensor, torch.Tensor] | None = None
        self._finalize()

    @classmethod
    def _buffer_numel(cls, arguments: dict, num_dirs: int, per_dir: int) -> int:
        return per_dir  # the generator vector

    def max_sq_norm_1d(self) -> torch.Tensor:
        # Every row of a circulant matrix is a permutation of the unit-norm generator.
        return torch.ones(self.num_directions, dtype=torch.float64)

    def encode(self, positions: torch.Tensor) -> torch.Tensor:
        """:meth:`CoordinateEncoding.encode`, refused first when its features would exceed the memory limit.

        Per feature: the gathered output; above :attr:`table_limit` features per direction, also
        the two int64 index tensors (the shifts and their remainder) the gather reads.
        """
        item = compute_dtype(positions.dtype).itemsize
        per_direction = item + (0 if self.features_per_direction <= self.table_limit else 2 * 8)
        check_forward_memory(self, positions, coordinate_feature_bytes(self, positions, per_direction))
        return super().encode(positions)

    def encode_1d(self, t: torch.Tensor) -> torch.Tensor:
        num = self.features_per_direction
        dtype = compute_dtype(t.dtype)
        idx = torch.remainder(torch.round(t.to(dtype) * num).long(), num)
        c = self.generator_vector.to(device=t.device, dtype=dtype)
        if num <= self.table_limit:
            # Gather whole rows of the F x F circulant matrix (one contiguous copy per position).
            # cached with a copy of the generator it came from: a write to generator_vector (through
            # .data too) is seen at the next call (compared bit for bit: F numbers)
            source, table = self._table if self._table is not None else (None, None)
            if (table is None or table.device != c.device or table.dtype != dtype
                    or _compiling() or not same_bits(source, self.generator_vector)):
                shift = torch.remainder(torch.arange(num, device=c.device)[:, None] - torch.arange(num, device=c.device), num)
                table = c[shift]
                if not _compiling():
                    self._table = (self.generator_vector.detach().clone(), table)
            return table[idx]
        shift = torch.remainder(idx[..., None] - torch.arange(num, device=t.device), num)
        return c[shift]

    def extra_repr(self) -> str:
        extra = {"gaussian": f", sigma={self.sigma:g}", "square": f", freq={self.freq:g}",
                 "sine": f", freq={self.freq:g}", "random": f", seed={self.seed}"}.get(self.generator, "")
        if self.bipolar:
            extra += ", bipolar=True"
        if self.offset:
            extra += f", offset={self.offset:g}"
        return f"{super().extra_repr()}, generator={self.generator!r}{extra}"
