"""Random feature maps with ``E[phi(q) . phi(k)] = exp(q . k)``.

* :class:`PositiveRandomFeatures` -- FAVOR+ of Choromanski et al., "Rethinking
  Attention with Performers" (ICLR 2021, Lemma 1): ``phi(x) = exp(w_r . x -
  |x|^2 / 2) / sqrt(m)``, ``w_r ~ N(0, I)``, optionally orthogonal blocks. This is
  the map used by Luo et al. (NeurIPS 2021, Sec. 3.1).
* :class:`TrigRandomFeatures` -- random Fourier features of the Gaussian kernel
  scaled by ``exp(|x|^2/2)`` (Rahimi & Recht 2007; Performer's "trig" map):
  ``phi(x) = exp(|x|^2/2) / sqrt(m/2) [sin(W x), cos(W x)]``; unbiased but not
  positive.

Both hold the projection ``W (m_or_m/2, dim)`` as a buffer drawn from an explicit
``torch.Generator`` or seed, and redraw it only when :meth:`redraw` is called.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from posenc._checks import check_even, check_last_dim, check_positive_int


def gaussian_projection(
    rows: int,
    dim: int,
    *,
    orthogonal: bool = False,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """``(rows, dim)`` with rows ``~ N(0, I_dim)``; orthogonal within blocks of ``dim`` rows.

    The orthogonal variant (Performer's ORF) takes Q from the QR decomposition of a
    Gaussian matrix per block and rescales each row by the norm of an independent
    Gaussian vector, so every row is still marginally ``N(0, I)``.
    """
    check_positive_int("rows", rows)
    check_positive_int("dim", dim)
    dtype = dtype or torch.get_default_dtype()
    if not orthogonal:
        return torch.randn(rows, dim, generator=generator, dtype=torch.float64).to(device=device, dtype=dtype)
    blocks = []
    for _ in range(math.ceil(rows / dim)):
        g = torch.randn(dim, dim, generator=generator, dtype=torch.float64)
        q, r = torch.linalg.qr(g)
        q = q * torch.sign(torch.diagonal(r))[None, :]  # Haar-distributed
        blocks.append(q.T)
    w = torch.cat(blocks, dim=0)[:rows]
    norms = torch.randn(rows, dim, generator=generator, dtype=torch.float64).norm(dim=-1)
    return (w * norms[:, None]).to(device=device, dtype=dtype)


class _RandomFeatures(nn.Module):
    def __init__(
        self,
        dim: int,
        num_features: int,
        *,
        orthogonal: bool = False,
        seed: int | None = 0,
        generator: torch.Generator | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.dim = check_positive_int("dim", dim)
        self.num_features = check_positive_int("num_features", num_features)
        self.orthogonal = bool(orthogonal)
        self.seed = seed
        self.register_buffer(
            "weight", torch.empty(self._rows(), dim, device=device, dtype=dtype or torch.get_default_dtype())
        )
        self.redraw(generator)

    def _rows(self) -> int:
        return self.num_features

    @torch.no_grad()
    def redraw(self, generator: torch.Generator | None = None) -> None:
        """Draw a fresh projection from ``generator`` (default: a generator seeded with ``seed``,
        advanced on every call so successive redraws differ but are reproducible)."""
        if generator is None:
            if not hasattr(self, "_gen"):
                self._gen = torch.Generator().manual_seed(0 if self.seed is None else int(self.seed))
            generator = self._gen
        w = gaussian_projection(
            self._rows(), self.dim, orthogonal=self.orthogonal, generator=generator, dtype=torch.float64
        )
        self.weight.copy_(w)

    def _check(self, x: torch.Tensor) -> None:
        check_last_dim("x", x, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, num_features={self.num_features}, orthogonal={self.orthogonal}, seed={self.seed}"


class PositiveRandomFeatures(_RandomFeatures):
    """FAVOR+ positive random features: ``(..., dim) -> (..., num_features)``.

    Args:
        dim: input dimension d.
        num_features: m, the number of random features.
        orthogonal: draw ``W`` in orthogonal blocks (lower variance).
        seed / generator: source of the draw (``generator`` wins).
        device, dtype: of the projection buffer.
    """

    def log_features(self, x: torch.Tensor) -> torch.Tensor:
        """``w_r . x - |x|^2/2 - log(m)/2``; ``exp`` of it is :meth:`forward`."""
        self._check(x)
        w = self.weight.to(x.dtype)
        return x @ w.T - 0.5 * (x * x).sum(-1, keepdim=True) - 0.5 * math.log(self.num_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.exp(self.log_features(x))


class TrigRandomFeatures(_RandomFeatures):
    """Trigonometric random features: ``(..., dim) -> (..., num_features)`` (m even).

    ``phi(x) = exp(|x|^2/2) sqrt(2/m) [sin(W x), cos(W x)]`` with ``W (m/2, dim)``.
    Unbiased for ``exp(q . k)`` but signed, so attention denominators can vanish.
    """

    def __init__(self, dim: int, num_features: int, **kwargs) -> None:
        check_positive_int("num_features", num_features)
        check_even("num_features", num_features)
        super().__init__(dim, num_features, **kwargs)

    def _rows(self) -> int:
        return self.num_features // 2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._check(x)
        proj = x @ self.weight.to(x.dtype).T
        scale = torch.exp(0.5 * (x * x).sum(-1, keepdim=True)) * math.sqrt(2.0 / self.num_features)
        return scale * torch.cat((torch.sin(proj), torch.cos(proj)), dim=-1)


def kernel_estimate(feature_map: nn.Module, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """``phi(q) . phi(k)``, the feature-map estimate of ``exp(q . k)``: ``(..., d) x (..., d) -> (...)``."""
    return (feature_map(q) * feature_map(k)).sum(-1)
