"""RoPE for N-D positions: axial (fixed, per-axis channels) and mixed (learnable 2D frequencies).

Both write the angle of channel pair ``k`` as a linear function of the position,
``angle_k(p) = sum_a F[k, a] p_a``, so ``<R(p) q, R(p') k>`` depends only on
``p' - p`` (the relative property holds in any dimension):

* **axial** (Heo, Park, Han, Yun, "Rotary Position Embedding for Vision
  Transformer", ECCV 2024, "RoPE-Axial"; the form of timm's EVA and of
  rotary-embedding-torch's axial mode): the pairs are split evenly between the
  axes and each block holds a 1D RoPE of one coordinate, ``F`` block-diagonal;
  frequencies ``theta_t = base ** (-t / K_a)`` for the ``K_a`` pairs of an axis
  (Heo et al. use base 100 for 2D patch indices).
* **mixed** (Heo et al., "RoPE-Mixed"): ``F`` is a learnable ``(heads, K, 2)``
  tensor, every pair seeing both axes. Initialised as in the paper: magnitudes
  ``base ** (-4 t / d)`` for ``t < d/4`` (base 10), each used along two orthogonal
  directions ``phi_h`` and ``phi_h + pi/2`` with a random angle ``phi_h`` per head.

Positions are the integer patch indices or any continuous coordinates; for
:class:`posenc.models.TinyViT` either ``"index"`` or ``"continuous"`` positions work.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from posenc._checks import check_choice, check_positive_float, check_positive_int
from posenc.attention.relative._settings import fixed_setting
from posenc.attention.relative.rotary import LAYOUTS, _check_x, check_angle_precision, check_positions, rotate


def axial_frequencies(head_dim: int, num_axes: int, base: float = 100.0, *, dtype=torch.float64) -> torch.Tensor:
    """The block-diagonal frequency matrix ``F (head_dim/2, num_axes)`` of axial RoPE.

    Axis ``a`` owns pairs ``a*K .. (a+1)*K - 1`` with ``K = head_dim / (2 num_axes)``
    and frequencies ``base ** (-t / K)``.
    """
    check_positive_int("head_dim", head_dim)
    check_positive_int("num_axes", num_axes)
    check_positive_float("base", base)
    if base <= 1.0:
        raise ValueError(f"base must be > 1, got {base}")
    if head_dim % (2 * num_axes):
        raise ValueError(
            f"head_dim must be divisible by 2 * num_axes = {2 * num_axes} (channel pairs split per axis), got {head_dim}"
        )
    K = head_dim // (2 * num_axes)
    theta = base ** (-torch.arange(K, dtype=torch.float64) / K)
    F = torch.zeros(num_axes * K, num_axes, dtype=torch.float64)
    for a in range(num_axes):
        F[a * K : (a + 1) * K, a] = theta
    return F.to(dtype)


def mixed_frequencies(
    head_dim: int, num_heads: int, base: float = 10.0, *, generator: torch.Generator | None = None,
    rotate_heads: bool = True, dtype=torch.float64,
) -> torch.Tensor:
    """Heo et al.'s RoPE-Mixed initialisation: ``(num_heads, head_dim/2, 2)``.

    Args:
        head_dim: divisible by 4 (two directions per magnitude).
        num_heads: one random direction per head.
        base: magnitude base (10 in the paper).
        generator: for the random angles.
        rotate_heads: draw a random angle per head (False: angle 0 for all heads).
    """
    check_positive_int("head_dim", head_dim)
    check_positive_int("num_heads", num_heads)
    check_positive_float("base", base)
    if head_dim % 4:
        raise ValueError(f"head_dim must be divisible by 4 for mixed 2D RoPE, got {head_dim}")
    mag = base ** (-4.0 * torch.arange(head_dim // 4, dtype=torch.float64) / head_dim)
    if rotate_heads:
        phi = torch.rand(num_heads, 1, generator=generator, dtype=torch.float64) * 2.0 * math.pi
    else:
        phi = torch.zeros(num_heads, 1, dtype=torch.float64)
    ang = torch.cat((phi.expand(-1, mag.numel()), (phi + math.pi / 2).expand(-1, mag.numel())), dim=1)
    m = torch.cat((mag, mag))
    return torch.stack((m * torch.cos(ang), m * torch.sin(ang)), dim=-1).to(dtype)


def nd_angles(positions: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """``angle_k = sum_a F[..., k, a] p_a``: ``positions (..., n, A)``, ``F (K, A)`` or ``(H, K, A)``.

    Returns ``(..., n, K)`` or, for per-head ``F``, ``(..., H, n, K)`` (positions
    broadcast over heads), in float64.
    """
    p = positions.to(torch.float64)
    F = freqs.to(device=p.device, dtype=torch.float64)
    if F.dim() == 2:
        return p @ F.transpose(0, 1)
    return torch.einsum("...na,hka->...hnk", p, F)


def _check_nd_positions(positions: torch.Tensor, n: int, num_axes: int) -> torch.Tensor:
    check_positions(positions)
    if positions.dim() < 2 or positions.shape[-1] != num_axes or positions.shape[-2] != n:
        raise ValueError(
            f"positions must have shape (..., n, {num_axes}) = (..., {n}, {num_axes}), got {tuple(positions.shape)}"
        )
    return positions


class AxialRotaryEmbedding(nn.Module):
    """Axial N-D RoPE: ``q, k (B, H, n, d)`` and positions ``(n, A)`` or ``(B, n, A)`` -> rotated ``(q, k)``.

    Args:
        head_dim: ``d`` (divisible by ``2 * num_axes``).
        num_axes: ``A`` coordinates per position (2 for images).
        base: frequency base (100 in Heo et al. for 2D patch indices); may be reassigned
            (the frequencies are rebuilt). ``head_dim`` and ``num_axes`` are fixed.
        layout: ``"half"`` or ``"interleaved"`` pairs.

    Angles beyond :data:`~posenc.attention.relative.rotary.MAX_ANGLE` are refused (a
    ``ValueError`` naming ``positions``), as in 1D RoPE.
    """

    head_dim = fixed_setting("head_dim", "the pairs are split between the axes from it")
    num_axes = fixed_setting("num_axes", "the frequencies have one block per axis")

    def __init__(self, head_dim: int, num_axes: int = 2, *, base: float = 100.0, layout: str = "half",
                 device=None) -> None:
        super().__init__()
        self._head_dim = check_positive_int("head_dim", head_dim)
        self._num_axes = check_positive_int("num_axes", num_axes)
        self._base = float(base)
        self.layout = check_choice("layout", layout, LAYOUTS)
        self.register_buffer("freqs", axial_frequencies(head_dim, num_axes, base).to(device), persistent=False)

    @property
    def base(self) -> float:
        """The frequency base; assigning it rebuilds :attr:`freqs` (on their device, in their dtype)."""
        return self._base

    @base.setter
    def base(self, value: float) -> None:
        freqs = axial_frequencies(self.head_dim, self.num_axes, value)  # checks value
        self.freqs = freqs.to(device=self.freqs.device, dtype=self.freqs.dtype)
        self._base = float(value)

    def angles(self, positions: torch.Tensor, n: int) -> torch.Tensor:
        pos = _check_nd_positions(positions, n, self.num_axes)
        ang = nd_angles(pos, self.freqs)
        check_angle_precision(ang, "positions")
        return ang[:, None] if ang.dim() == 3 else ang  # (B, n, K) -> (B, 1, n, K) over heads

    def forward(self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, *,
                inplace: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotated ``(q, k)``; ``inplace=True`` writes them into ``q`` and ``k`` (no new memory)."""
        _check_x("q", q)
        _check_x("k", k)
        if q.shape[-1] != self.head_dim or k.shape[-1] != self.head_dim:
            raise ValueError(f"q and k must have head dim {self.head_dim}, got {q.shape[-1]} and {k.shape[-1]}")
        if q.shape[-2] != k.shape[-2]:
            raise ValueError(f"q and k must have the same length for shared positions, got {q.shape[-2]} and {k.shape[-2]}")
        ang = self.angles(positions, q.shape[-2])
        return rotate(q, ang, self.layout, inplace=inplace), rotate(k, ang, self.layout, inplace=inplace)

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, num_axes={self.num_axes}, base={self.base:g}, layout={self.layout!r}"


class MixedRotaryEmbedding(nn.Module):
    """Mixed 2D RoPE with learnable per-head frequencies (Heo et al., ECCV 2024).

    ``q, k (B, H, n, d)`` and positions ``(n, 2)`` or ``(B, n, 2)`` -> rotated ``(q, k)``.

    Args:
        head_dim: ``d`` (divisible by 4).
        num_heads: ``H``.
        base: magnitude base (10 in the paper).
        layout: ``"half"`` or ``"interleaved"`` pairs.
        seed: seed of the random initial directions.
        device, dtype: of the frequency parameter.

    ``base`` and ``seed`` set the initial frequencies only (:meth:`reset_parameters` reads them):
    the learned ``freqs`` are the module's state, so reassigning them changes nothing until a reset.
    """

    def __init__(self, head_dim: int, num_heads: int, *, base: float = 10.0, layout: str = "half",
                 seed: int = 0, device=None, dtype=None) -> None:
        super().__init__()
        self.head_dim = check_positive_int("head_dim", head_dim)
        self.num_heads = check_positive_int("num_heads", num_heads)
        self.base = check_positive_float("base", base)
        self.layout = check_choice("layout", layout, LAYOUTS)
        self.seed = check_positive_int("seed", seed, minimum=0)
        mixed_frequencies(head_dim, num_heads, base)  # validate early
        self.freqs = nn.Parameter(torch.empty(num_heads, head_dim // 2, 2, device=device, dtype=dtype))
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        gen = torch.Generator().manual_seed(self.seed)
        self.freqs.copy_(mixed_frequencies(self.head_dim, self.num_heads, self.base, generator=gen))

    def forward(self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, *,
                inplace: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotated ``(q, k)``; ``inplace=True`` writes them into ``q`` and ``k`` (no new memory)."""
        _check_x("q", q)
        _check_x("k", k)
        if q.dim() != 4 or q.shape[1] != self.num_heads or q.shape[-1] != self.head_dim:
            raise ValueError(f"q must have shape (B, {self.num_heads}, n, {self.head_dim}), got {tuple(q.shape)}")
        if k.shape != q.shape[:-2] + (k.shape[-2], self.head_dim) or k.shape[-2] != q.shape[-2]:
            raise ValueError(f"k must have the shape of q {tuple(q.shape)}, got {tuple(k.shape)}")
        pos = _check_nd_positions(positions, q.shape[-2], 2)
        # angles in the parameter's dtype (at least float32) so gradients reach the frequencies
        dt = torch.promote_types(self.freqs.dtype, torch.float32)
        ang = torch.einsum("...na,hka->...hnk", pos.to(dt), self.freqs.to(dt))
        return rotate(q, ang, self.layout, inplace=inplace), rotate(k, ang, self.layout, inplace=inplace)

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, num_heads={self.num_heads}, base={self.base:g}, layout={self.layout!r}"
