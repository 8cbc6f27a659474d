"""A tiny pre-LayerNorm transformer encoder with a pluggable positional encoding.

The testbed of Li et al. (NeurIPS 2021)-style comparisons: tokens are embedded
linearly, a positional encoding (any :class:`~posenc.encodings.Encoding`, e.g.
from :func:`~posenc.encodings.create_encoding`) is **added** to them, and a stack
of pre-LN blocks (Xiong et al., 2020: ``x + Attn(LN(x))``, ``x + MLP(LN(x))``)
follows, with a final LayerNorm and a linear head per token.

The attention is replaceable: ``attention`` is a factory
``(dim, num_heads) -> nn.Module`` whose module is called as
``module(x, positions=positions)`` with ``x`` of shape ``(B, N, dim)`` and the
positions the model was given (``(B, N, P)``, ``(N, P)`` or ``None``); it must
return ``(B, N, dim)``. Relative-position attentions use the positions; the
default :class:`SelfAttention` ignores them.
"""

from __future__ import annotations

import contextlib

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from posenc._checks import check_divisible, check_positive_int, check_tensor
from posenc._resources import check_footprint
from posenc.models.seeding import seeded_reset_parameters

AttentionFactory = Callable[[int, int], nn.Module]


def encode_positions(encoding: nn.Module, positions: torch.Tensor) -> torch.Tensor:
    """Encode per-token positions ``(..., P) -> (..., out_dim)``.

    Grouped encodings with ``G > 1`` groups (a ``num_groups`` attribute, input
    ``(..., G, M)``, such as :class:`~posenc.encodings.LearnableFourierEncoding`) take
    flat per-token positions with ``P = G * M`` coordinates, unflattened here to
    ``(..., G, M)``. Other encodings (and grouped ones with one group, which take
    ``(..., M)``) receive ``positions`` unchanged.
    """
    groups = getattr(encoding, "num_groups", None)
    if groups is not None and groups > 1:
        m = encoding.in_dim
        if positions.dim() == 0 or positions.shape[-1] != groups * m:
            raise ValueError(
                f"positions must have shape (..., G*M) = (..., {groups * m}) for a grouped encoding "
                f"(num_groups={groups}, in_dim={m}), got {tuple(positions.shape)}"
            )
        positions = positions.unflatten(-1, (groups, m))
    return encoding(positions)


class SelfAttention(nn.Module):
    """Multi-head softmax self-attention (``scaled_dot_product_attention``).

    ``(B, N, dim) -> (B, N, dim)``; ``positions`` is accepted and ignored.

    Args:
        dim: model width.
        num_heads: heads (must divide ``dim``).
        device, dtype: of the projections.
    """

    def __init__(self, dim: int, num_heads: int, device=None, dtype=None) -> None:
        super().__init__()
        check_positive_int("dim", dim)
        check_positive_int("num_heads", num_heads)
        check_divisible("dim", dim, num_heads, f"split over num_heads={num_heads}")
        self.dim, self.num_heads = dim, num_heads
        self.qkv = nn.Linear(dim, 3 * dim, device=device, dtype=dtype)
        self.proj = nn.Linear(dim, dim, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.num_heads, d // self.num_heads).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(q, k, v)
        return self.proj(out.transpose(1, 2).reshape(b, n, d))

    def extra_repr(self) -> str:
        return f"dim={self.dim}, num_heads={self.num_heads}"


class Block(nn.Module):
    """Pre-LN transformer block: ``x + Attn(LN(x), positions)``, then ``x + MLP(LN(x))``."""

    def __init__(self, dim: int, num_heads: int, mlp_ratio: float, attention: AttentionFactory,
                 dropout: float = 0.0, device=None, dtype=None) -> None:
        super().__init__()
        hidden = max(1, int(round(dim * mlp_ratio)))
        self.norm1 = nn.LayerNorm(dim, device=device, dtype=dtype)
        self.attn = attention(dim, num_heads)
        self.norm2 = nn.LayerNorm(dim, device=device, dtype=dtype)
        self.mlp = nn.Sequential(
            nn.Linear(dim, hidden, device=device, dtype=dtype), nn.GELU(), nn.Dropout(dropout),
            nn.Linear(hidden, dim, device=device, dtype=dtype), nn.Dropout(dropout),
        )

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), positions=positions)
        return x + self.mlp(self.norm2(x))


def transformer_bytes(in_features: int, out_features: int, dim: int, depth: int, mlp_ratio: float,
                      dtype: torch.dtype | None = None) -> float:
    """Bytes of a :class:`TransformerEncoder`'s parameters (attention ``4 dim^2``, MLP ``2 dim hidden`` per
    block), with the initialisation's temporaries (one parameter's worth)."""
    item = getattr(dtype or torch.get_default_dtype(), "itemsize", 4)
    hidden = max(1.0, float(dim) * mlp_ratio)
    block = 4.0 * dim * (dim + 1) + 2.0 * dim * hidden + hidden + 5.0 * dim
    return item * ((in_features + 1.0) * dim + depth * block + (dim + 1.0) * out_features + max(dim * hidden, dim * dim))


class TransformerEncoder(nn.Module):
    """Tiny pre-LN transformer encoder over token sets, positional encoding added.

    ``tokens (B, N, in_features)``, ``positions (B, N, P)`` or ``(N, P)`` ->
    ``(B, N, out_features)``.

    Args:
        in_features: width of each input token.
        out_features: width of the per-token output (logits).
        dim: model width (the encoding's ``out_dim`` must equal it).
        depth: number of blocks.
        num_heads: attention heads.
        encoding: positional encoding module (``None``: no positional information).
        mlp_ratio: hidden width of the block MLP relative to ``dim``.
        attention: factory ``(dim, num_heads) -> module`` (see the module docstring);
            default :class:`SelfAttention`.
        dropout: in the block MLPs.
        init_seed: seed of the trunk's initial weights (every parameter but the
            encoding's; see :func:`~posenc.models.seeding.seeded_reset_parameters`), so that
            models with the same ``init_seed`` and different encodings start from the same
            transformer (paired comparisons); the encoding keeps its own seed. ``None``: the
            trunk draws from torch's global RNG in construction order (PyTorch's default).
        device, dtype: of the parameters created here.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        dim: int = 64,
        depth: int = 2,
        num_heads: int = 4,
        encoding: nn.Module | None = None,
        mlp_ratio: float = 2.0,
        attention: AttentionFactory | None = None,
        dropout: float = 0.0,
        init_seed: int | None = None,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        if init_seed is not None:
            check_positive_int("init_seed", init_seed, minimum=0)
        check_positive_int("in_features", in_features)
        check_positive_int("out_features", out_features)
        check_positive_int("dim", dim)
        check_positive_int("depth", depth)
        check_positive_int("num_heads", num_heads)
        check_divisible("dim", dim, num_heads, f"split over num_heads={num_heads}")
        if encoding is not None and getattr(encoding, "out_dim", dim) != dim:
            raise ValueError(f"encoding must have out_dim == dim = {dim}, got out_dim={encoding.out_dim}")
        if isinstance(mlp_ratio, (int, float)) and 0 < mlp_ratio < float("inf"):
            check_footprint(transformer_bytes(in_features, out_features, dim, depth, mlp_ratio, dtype),
                            f"dim={dim}, depth={depth}", "the transformer's parameters")
        if attention is None:
            def attention(d: int, h: int) -> nn.Module:
                return SelfAttention(d, h, device=device, dtype=dtype)
        self.dim, self.depth, self.num_heads = dim, depth, num_heads
        # with init_seed every parameter is redrawn from it below: the layers' default draws must not
        # consume the caller's RNG
        with contextlib.nullcontext() if init_seed is None else torch.random.fork_rng(devices=[]):
            self.embed = nn.Linear(in_features, dim, device=device, dtype=dtype)
            self.encoding = encoding
            self.blocks = nn.ModuleList(
                Block(dim, num_heads, mlp_ratio, attention, dropout, device, dtype) for _ in range(depth)
            )
            self.norm = nn.LayerNorm(dim, device=device, dtype=dtype)
            self.head = nn.Linear(dim, out_features, device=device, dtype=dtype)
        self.init_seed = init_seed
        if init_seed is not None:
            seeded_reset_parameters(self, init_seed, skip=[encoding])

    def reset_parameters(self) -> None:
        """Redraw the trunk: from ``init_seed`` if set, else from the global RNG.

        The encoding is left alone (it has its own seed and ``reset_parameters``), so a
        model that nests this encoder can redraw its trunk without touching the encoding.
        """
        seeded_reset_parameters(self, self.init_seed, skip=[self.encoding])

    def position_features(self, positions: torch.Tensor) -> torch.Tensor:
        """The encoding of ``positions`` (``(..., P) -> (..., dim)``)."""
        assert self.encoding is not None
        return encode_positions(self.encoding, positions)

    def features(self, tokens: torch.Tensor, positions: torch.Tensor | None = None,
                 pos_features: torch.Tensor | None = None) -> torch.Tensor:
        """Final normalised token features ``(B, N, dim)`` (before the head).

        ``pos_features`` (``(B, N, dim)`` or ``(N, dim)``) overrides the encoding,
        e.g. a learned table resampled to a new grid.
        """
        check_tensor("tokens", tokens)
        if tokens.dim() != 3:
            raise ValueError(f"tokens must have shape (B, N, in_features), got {tuple(tokens.shape)}")
        x = self.embed(tokens)
        if pos_features is None and self.encoding is not None:
            if positions is None:
                raise ValueError("positions must be given when the model has an encoding")
            enc_positions = positions
            if (getattr(self.encoding, "per_sample_positions", False) and self.encoding.training
                    and positions.dim() == 2):  # one row per sample: per-sample augmentation (CAPE)
                enc_positions = positions.expand(x.shape[0], *positions.shape)
            pos_features = self.position_features(enc_positions)
        if pos_features is not None:
            if pos_features.shape[-2:] != x.shape[-2:]:
                raise ValueError(
                    f"positions must give one encoding per token: expected (..., {x.shape[1]}, {self.dim}) "
                    f"features, got {tuple(pos_features.shape)}"
                )
            x = x + pos_features.to(x.dtype)
        for block in self.blocks:
            x = block(x, positions)
        return self.norm(x)

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor | None = None,
                pos_features: torch.Tensor | None = None) -> torch.Tensor:
        """Per-token outputs ``(B, N, out_features)``."""
        return self.head(self.features(tokens, positions, pos_features))

    def extra_repr(self) -> str:
        seed = "" if self.init_seed is None else f", init_seed={self.init_seed}"
        return f"dim={self.dim}, depth={self.depth}, num_heads={self.num_heads}{seed}"
