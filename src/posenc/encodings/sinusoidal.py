"""Transformer sinusoidal position embeddings: 1D, 2D and N-D.

The 1D embedding of Vaswani et al. ("Attention Is All You Need", NeurIPS 2017,
Sec. 3.5) sends a position ``p`` (integer or continuous) to

    ``[sin(p * w_0), ..., sin(p * w_{K-1}), cos(p * w_0), ..., cos(p * w_{K-1})]``,
    ``w_k = scale * base ** (-k / K)``,  ``K = F / 2``

(the paper's ``w_k = 10000^(-2i/d)`` with ``i = k``; sines first, then cosines,
a fixed permutation of the paper's interleaved layout).

For N coordinates the channels are **split per axis**: axis ``a`` gets its own
block of ``F / N`` channels holding the 1D embedding of coordinate ``a``, and
the blocks are concatenated in axis order. The embedding therefore depends on
the pair ``(x, y)``, not on ``x + y``: a popular 2D implementation reuses the
same frequency rows for both axes *and sums them*, which makes
``PE(3, 5) = PE(5, 3) = PE(8, 0)``; the per-axis split cannot do that.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from posenc._checks import (
    check_finite,
    check_last_dim,
    check_positive_float,
    check_positive_int,
    check_tensor,
    check_width,
)
from posenc.encodings._forward_memory import autograd_on, check_forward_memory
from posenc.encodings.base import Encoding, Footprint, check_out_dim, compute_dtype
from posenc.encodings.fourier import sincos_of_products
from posenc.encodings.registry import register_encoding


def sinusoidal_frequencies(
    num_features: int, base: float = 10000.0, scale: float = 1.0, *, device=None, dtype=torch.float64
) -> torch.Tensor:
    """The ``F/2`` angular frequencies ``scale * base ** (-k / (F/2))``, ``k = 0..F/2-1``."""
    half = num_features // 2
    k = torch.arange(half, device=device, dtype=torch.float64)
    return (scale * base ** (-k / half)).to(dtype)


def sinusoidal_features(positions: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """Per-axis sinusoidal embedding, axis blocks concatenated.

    Args:
        positions: ``(..., N)`` coordinates (any real values; integers are cast).
        freqs: ``(K,)`` angular frequencies shared by the axes.

    Returns:
        ``(..., N * 2K)``: for each axis in order, ``K`` sines then ``K`` cosines.
        Computed in at least float32.
    """
    dtype = compute_dtype(positions.dtype) if positions.is_floating_point() else compute_dtype(freqs.dtype)
    f = freqs.to(device=positions.device, dtype=dtype)
    return sincos_of_products(positions.to(dtype), f).flatten(-2)  # (..., N, 2K) -> (..., N * 2K)


@register_encoding("sinusoidal")
class SinusoidalEncoding(Encoding):
    """Fixed sinusoidal embedding of 1D, 2D or N-D positions (per-axis channel split).

    ``(..., in_dim) -> (..., num_features)``; each axis gets ``num_features / in_dim``
    channels. Positions may be integer tensors (token or patch indices, returned
    in ``dtype``) or floating tensors (continuous positions, returned in their own
    dtype). No domain restriction: any finite position is valid.

    Args:
        in_dim: number of coordinates per position (1 for sequences, 2 for images).
        num_features: output width ``F``; ``F / in_dim`` must be even.
        base: the wavelength base (10000 in Vaswani et al.); wavelengths range
            from ``2*pi/scale`` to about ``2*pi*base/scale``.
        scale: multiplies the positions before the sinusoids (e.g. ``2*pi`` for
            positions normalised to [0, 1], as in DETR).
        device, dtype: of the frequency buffer (and output dtype for integer input).

    Example:
        >>> enc = SinusoidalEncoding(in_dim=2, num_features=64)
        >>> enc(torch.tensor([[3.0, 5.0], [5.0, 3.0]])).shape
        torch.Size([2, 64])
    """

    positions_kind: ClassVar[str] = "any"

    def __init__(
        self,
        in_dim: int = 1,
        num_features: int = 128,
        base: float = 10000.0,
        scale: float = 1.0,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        self._check_sizes(in_dim, num_features)
        super().__init__(in_dim, num_features)
        self.num_features = num_features
        self.base = check_positive_float("base", base)
        if self.base <= 1.0:
            raise ValueError(f"base must be > 1, got {base}")
        self.scale = check_width("scale", scale)
        dtype = dtype or torch.get_default_dtype()
        freqs = sinusoidal_frequencies(num_features // in_dim, self.base, self.scale, device=device)
        self.register_buffer("freqs", freqs.to(dtype), persistent=False)

    @staticmethod
    def _check_sizes(in_dim: int, num_features: int) -> None:
        check_positive_int("in_dim", in_dim)
        check_out_dim(check_positive_int("num_features", num_features), "reduce num_features")
        if num_features % (2 * in_dim):
            raise ValueError(
                f"num_features must be divisible by 2 * in_dim = {2 * in_dim} (a sine/cosine block per axis), "
                f"got num_features={num_features}"
            )

    @classmethod
    def _footprint(cls, arguments: dict) -> Footprint:
        cls._check_sizes(arguments["in_dim"], arguments["num_features"])
        return Footprint(arguments["num_features"], 0, arguments["num_features"] // arguments["in_dim"] // 2)

    def check_input(self, positions: torch.Tensor) -> None:
        check_tensor("positions", positions)
        check_last_dim("positions", positions, self.in_dim)
        if positions.dtype == torch.bool or positions.is_complex():
            raise TypeError(f"positions must be a real integer or floating tensor, got dtype {positions.dtype}")
        check_finite("positions", positions)

    def encode(self, positions: torch.Tensor) -> torch.Tensor:
        out_dtype = positions.dtype if positions.is_floating_point() else self.freqs.dtype
        self._check_memory(positions, out_dtype)
        return sinusoidal_features(positions, self.freqs).to(out_dtype)

    def _check_memory(self, positions: torch.Tensor, out_dtype: torch.dtype) -> None:
        """Refuse, before it allocates, a call whose features would exceed the memory limit.

        Per feature: the output in the compute dtype (the block-wise path makes the phases in it);
        with autograd, the phases, their sin and cos and the concatenation; the cast to ``out_dtype``.
        """
        compute = compute_dtype(positions.dtype) if positions.is_floating_point() else compute_dtype(self.freqs.dtype)
        per_feature = (3 if autograd_on(positions, self.freqs) else 1) * compute.itemsize
        if out_dtype != compute:
            per_feature += out_dtype.itemsize
        check_forward_memory(self, positions, per_feature)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, base={self.base:g}, scale={self.scale:g}"
