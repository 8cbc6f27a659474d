"""Fourier-feature coordinate encodings.

``basic`` ([sin 2*pi*x, cos 2*pi*x]), ``linf`` (linearly spaced frequencies),
``logf`` (log-spaced, NeRF-style) and ``rff`` (random Fourier features, Tancik et
al. 2020) as used and compared by Zheng, Ramasinghe and Lucey, "Rethinking
Positional Encoding" (arXiv 2107.02561) and its follow-up (ECCV 2022).

Every map sends unit coordinates ``t`` to ``[sin(2*pi*f*t), cos(2*pi*f*t)]`` for a
set of frequencies ``f`` (sines first, then cosines).
"""

from __future__ import annotations

import math

import torch

from posenc._checks import _compiling, check_choice, check_positive_float, check_positive_int, check_width
from posenc.encodings._forward_memory import autograd_on, check_forward_memory, coordinate_feature_bytes
from posenc.encodings.base import CoordinateEncoding, Footprint, compute_dtype, resolve_width
from posenc.encodings.registry import register_encoding


#: Elements of one phase block on the CPU (1 MiB of float32): the phases of a block are
#: computed into the output, read by cos and overwritten by their sines while in cache.
PHASE_BLOCK = 2**18


def fourier_features(t: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """``[sin(2*pi*t*f), cos(2*pi*t*f)]`` for each entry of ``t``.

    Args:
        t: coordinates ``(..., K)``.
        freqs: frequencies ``(F/2,)`` shared by all K directions, or ``(K, F/2)``.

    Returns:
        ``(..., K, F)`` with the F/2 sines first, then the F/2 cosines. Without
        autograd on the CPU the output is the only allocation: the phases are made
        block by block (:data:`PHASE_BLOCK`) in the output itself.
    """
    dtype = compute_dtype(t.dtype)
    return sincos_of_products((2.0 * math.pi) * t.to(dtype), freqs.to(device=t.device, dtype=dtype))


def sincos_of_products(x: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
    """``[sin(x_k f), cos(x_k f)]`` for each entry of ``x (..., K)`` -> ``(..., K, 2H)``.

    ``f``: ``(H,)`` or ``(K, H)``, in ``x``'s dtype and device. Without autograd on the CPU
    the output is the only allocation: the phases are made block by block
    (:data:`PHASE_BLOCK`) in the output itself (:func:`_sincos_blocks`); otherwise sin and
    cos of one phase tensor are concatenated. Both give the same values, bit for bit.
    """
    if not _blocked(x, f) or x.dim() == 0:
        phase = x[..., None] * f
        return torch.cat((torch.sin(phase), torch.cos(phase)), dim=-1)
    k, half = x.shape[-1], f.shape[-1]
    rows = x.reshape(-1, k, 1)
    out = torch.empty((rows.shape[0], k, 2 * half), dtype=x.dtype, device=x.device)
    _sincos_blocks(out, lambda start, stop, buf: torch.mul(rows[start:stop], f, out=buf))
    return out.reshape(*x.shape, 2 * half)


def _blocked(*tensors: torch.Tensor) -> bool:
    """Whether the block-wise, in-place path applies: CPU tensors, no autograd, not traced."""
    return (not _compiling() and all(x.device.type == "cpu" and not x.requires_grad for x in tensors))


def _sincos_blocks(out: torch.Tensor, phase_into) -> None:
    """Fill ``out`` ``(N, K, 2H)`` with ``[sin(phase), cos(phase)]``, a block of rows at a time.

    ``phase_into(start, stop, buf)`` writes the phases of rows ``start:stop`` into
    ``buf`` ``(stop - start, K, H)``: the sines' half of ``out``, where the cosines are read
    from and the sines then taken in place. The output is the only memory the call touches
    (no phase buffer: a first call in a process pays for no page but the output's).
    """
    n, k, width = out.shape
    half = width // 2
    step = max(1, PHASE_BLOCK // max(1, k * half))
    for start in range(0, n, step):
        stop = min(n, start + step)
        sines = out[start:stop, :, :half]
        phase_into(start, stop, sines)
        torch.cos(sines, out=out[start:stop, :, half:])
        sines.sin_()


class _FourierBase(CoordinateEncoding):
    feature_multiple = 2

    def encode(self, positions: torch.Tensor) -> torch.Tensor:
        """:meth:`CoordinateEncoding.encode`, refused first when its features would exceed the memory limit."""
        # the block-wise path holds the output only; with autograd, the phases, their sin and cos and the output
        item = compute_dtype(positions.dtype).itemsize
        per_direction = 3 * item if autograd_on(positions) else item
        check_forward_memory(self, positions, coordinate_feature_bytes(self, positions, per_direction))
        return super().encode(positions)

    def max_sq_norm_1d(self) -> torch.Tensor:
        # sin^2 + cos^2 = 1 for every frequency: the norm is the same everywhere.
        half = self.features_per_direction // 2
        return torch.full((self.num_directions,), float(half), dtype=torch.float64)

    def encode_1d(self, t: torch.Tensor) -> torch.Tensor:
        return fourier_features(t, self.freqs)


@register_encoding("basic")
class BasicFourierEncoding(_FourierBase):
    """``[sin(2*pi*x), cos(2*pi*x)]`` per direction: the simplest Fourier encoding.

    ``(..., in_dim) -> (..., 2 * K)`` where K is the number of directions.

    Args:
        in_dim: number of coordinates.
        mode, domain, normalize, strict: see :class:`CoordinateEncoding`.
        device, dtype: of the frequency buffer.
    """

    def __init__(
        self,
        in_dim: int = 1,
        mode: str = "separable",
        domain: tuple[float, float] = (0.0, 1.0),
        normalize: bool = False,
        strict: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(in_dim, self._width(in_dim, mode), mode, domain, normalize, strict)
        self.register_buffer("freqs", torch.ones(1, device=device, dtype=dtype or torch.get_default_dtype()),
                             persistent=False)
        self._finalize()

    @classmethod
    def _width(cls, in_dim: int, mode: str) -> int:
        """``num_features``: one sine/cosine pair per direction (per axis in mode 'product')."""
        check_positive_int("in_dim", in_dim)
        check_choice("mode", mode, cls.supported_modes)
        return 2 if mode == "product" else 2 * (4 if mode == "four_direction" else in_dim)

    @classmethod
    def _footprint(cls, arguments: dict) -> Footprint:
        return super()._footprint({**arguments, "num_features": cls._width(arguments["in_dim"], arguments["mode"])})

    @classmethod
    def _buffer_numel(cls, arguments: dict, num_dirs: int, per_dir: int) -> int:
        return 1  # the frequency 1


class _SpacedFourier(_FourierBase):
    """Fourier features with F/2 fixed frequencies from 1 to ``max_freq`` (subclasses space them)."""

    width_param = "max_freq"
    width_increases_smoothness = False

    def __init__(
        self,
        in_dim: int = 1,
        num_features: int = 256,
        max_freq: float = 64.0,
        mode: str = "separable",
        domain: tuple[float, float] = (0.0, 1.0),
        normalize: bool = False,
        strict: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(in_dim, num_features, mode, domain, normalize, strict)
        self.max_freq = check_width("max_freq", max_freq)
        if self.max_freq < 1.0:
            raise ValueError(f"max_freq must be >= 1 (the lowest frequency is 1), got {max_freq}")
        freqs = self.spaced(self.max_freq, self.features_per_direction // 2, device)
        self.register_buffer("freqs", freqs.to(dtype or torch.get_default_dtype()), persistent=False)
        self._finalize()

    @staticmethod
    def spaced(max_freq: float, half: int, device) -> torch.Tensor:  # pragma: no cover - abstract
        """The ``(half,)`` float64 frequencies from 1 to ``max_freq``."""
        raise NotImplementedError

    @classmethod
    def _buffer_numel(cls, arguments: dict, num_dirs: int, per_dir: int) -> int:
        return per_dir // 2  # frequencies

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, max_freq={self.max_freq:g}"


@register_encoding("linf")
class LinearFourierEncoding(_SpacedFourier):
    """Fourier features with F/2 linearly spaced frequencies ``linspace(1, max_freq)``.

    ``(..., in_dim) -> (..., num_features)``.

    Args:
        in_dim: number of coordinates.
        num_features: output width (F per direction, an even number).
        max_freq: highest frequency in cycles per unit domain (``2**p`` in the paper).
        mode, domain, normalize, strict: see :class:`CoordinateEncoding`.
        device, dtype: of the frequency buffer.
    """

    @staticmethod
    def spaced(max_freq: float, half: int, device) -> torch.Tensor:
        return torch.linspace(1.0, max_freq, half, dtype=torch.float64, device=device)


@register_encoding("logf")
class LogFourierEncoding(_SpacedFourier):
    """Fourier features with F/2 log-spaced frequencies ``2**linspace(0, log2(max_freq))``.

    The NeRF-style encoding. ``(..., in_dim) -> (..., num_features)``.

    Args:
        in_dim: number of coordinates.
        num_features: output width (F per direction, an even number).
        max_freq: highest frequency in cycles per unit domain (``2**p`` in the paper).
        mode, domain, normalize, strict: see :class:`CoordinateEncoding`.
        device, dtype: of the frequency buffer.
    """

    @staticmethod
    def spaced(max_freq: float, half: int, device) -> torch.Tensor:
        return 2.0 ** torch.linspace(0.0, math.log2(max_freq), half, dtype=torch.float64, device=device)


@register_encoding("rff")
class RandomFourierEncoding(_FourierBase):
    """Random Fourier features: frequencies drawn from N(0, sigma^2), seeded.

    In ``"full"`` mode (the default) a frequency matrix ``B`` of shape
    ``(num_features/2, in_dim)`` mixes all coordinates:
    ``[sin(2*pi*u B^T), cos(2*pi*u B^T)]``. In ``"separable"``/``"four_direction"``/
    ``"product"`` mode each direction has its own ``F/2`` frequencies.

    The expected inner product of two encodings is
    ``(F/2) * exp(-2 * pi^2 * sigma^2 * |x - y|^2)``, the same kernel as a Gaussian
    basis of width ``1 / (2 * sqrt(2) * pi * sigma)``.

    Args:
        in_dim: number of coordinates.
        num_features: output width (an even number per direction).
        sigma: standard deviation of the frequencies, in cycles per unit domain (an
            *inverse* width: larger is sharper; default 10).
        seed: seed of the frequency draw (``reset_parameters`` redraws it).
        mode, domain, normalize, strict: see :class:`CoordinateEncoding`.
        device, dtype: of the frequency buffer.
        kernel_width: the kernel width ``w`` shared by the encodings (a Gaussian basis of width
            ``w`` has the same kernel): ``sigma = 1 / (2 sqrt(2) pi w)``; pass this or ``sigma``.
    """

    supported_modes = ("full", "separable", "four_direction", "product")
    width_param = "sigma"
    width_increases_smoothness = False

    def __init__(
        self,
        in_dim: int = 1,
        num_features: int = 256,
        sigma: float | None = None,
        seed: int = 0,
        mode: str = "full",
        domain: tuple[float, float] = (0.0, 1.0),
        normalize: bool = False,
        strict: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        kernel_width: float | None = None,
    ) -> None:
        super().__init__(in_dim, num_features, mode, domain, normalize, strict)
        self.sigma = resolve_width("sigma", sigma, kernel_width, lambda w: 1.0 / (2.0 * math.sqrt(2.0) * math.pi * w),
                                   10.0)
        self.seed = check_positive_int("seed", seed, minimum=0)
        half = self.features_per_direction // 2
        shape = (half, in_dim) if mode == "full" else (self.num_directions, half)
        dtype = dtype or torch.get_default_dtype()
        self.register_buffer("freqs", torch.empty(shape, device=device, dtype=dtype),
                             persistent=False)
        self.reset_parameters()
        self._finalize()

    @classmethod
    def _buffer_numel(cls, arguments: dict, num_dirs: int, per_dir: int) -> int:
        return (per_dir // 2) * (arguments["in_dim"] if arguments["mode"] == "full" else num_dirs)  # frequencies

    def reset_parameters(self) -> None:
        """Redraw the frequencies from N(0, sigma^2) with ``seed`` (on the CPU, then moved)."""
        if self.freqs.is_meta:  # shapes only: nothing to draw
            return
        gen = torch.Generator().manual_seed(self.seed)
        draw = torch.randn(self.freqs.shape, generator=gen, dtype=torch.float64) * self.sigma
        with torch.no_grad():
            self.freqs.copy_(draw.to(self.freqs.dtype))

    def compute_row_scale(self) -> torch.Tensor:
        if self.mode == "full":
            return torch.tensor(self.num_features / 2.0, dtype=torch.float64).rsqrt()
        return super().compute_row_scale()

    def encode_full(self, u: torch.Tensor) -> torch.Tensor:
        b_t = self.freqs.to(device=u.device, dtype=u.dtype).T  # (in_dim, F/2)
        if not _blocked(u, b_t):
            phase = (u @ b_t) * (2.0 * math.pi)
            return torch.cat((torch.sin(phase), torch.cos(phase)), dim=-1)
        rows = u.reshape(-1, u.shape[-1])
        out = torch.empty((rows.shape[0], 1, 2 * b_t.shape[1]), dtype=u.dtype, device=u.device)

        def phase_into(start: int, stop: int, buf: torch.Tensor) -> None:
            if b_t.shape[0] == 1:  # one coordinate: each phase is one product, no matrix product to call
                torch.mul(rows[start:stop], b_t, out=buf[:, 0]).mul_(2.0 * math.pi)
            else:
                torch.mm(rows[start:stop], b_t, out=buf[:, 0]).mul_(2.0 * math.pi)

        _sincos_blocks(out, phase_into)
        return out.reshape(*u.shape[:-1], out.shape[-1])

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, sigma={self.sigma:g}, seed={self.seed}"
