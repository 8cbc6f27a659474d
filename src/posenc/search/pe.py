"""A positional-encoding search space over the transformer testbed.

:class:`PESearchNet` is a small ViT (patch embedding with LayerNorm, pre-LN blocks of
:class:`posenc.models.transformer.Block`, mean pooling, linear head) whose position
handling is searched:

* one mixed edge ``"encoding"`` over absolute encodings added to the patch tokens — an
  explicit ``'none'`` branch (zeros) and any name of :func:`posenc.create_encoding` that
  takes 2D positions (default ``'sinusoidal'``, ``'learned_table'``, ``'lff'``,
  ``'cape'``). Each encoding's output is RMS-normalised per token (no parameters), so
  the mixing weights do not merely track the candidates' very different output scales
  (a learned table starts at std 0.02, a sinusoid at about 0.7);
* per block, a mixed edge ``"blocks.<i>.attn"`` over the position term inside attention
  (:class:`posenc.attention.RelativeSelfAttention`): ``'plain'`` (none), the 2D terms
  ``'rope_axial'`` / ``'rope_mixed'``, and the 1D terms ``'alibi'`` / ``'t5'`` /
  ``'learned'``, which see patches in raster order. Each candidate is a whole attention
  with its own projections, as every op of a DARTS edge has its own weights; their
  outputs have the same initial scale, so they are not normalised.

This space is ours (no DARTS-PT anchor has one); the selection methods are those of
DARTS-PT (Wang et al., ICLR 2021). With ``choices`` the model is the stand-alone network.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from posenc._checks import check_divisible, check_positive_int
from posenc.search.encoding import EncodingBranch, encoding_candidate, grid_positions
from posenc.search.mixed import MixedOp
from posenc.search.ops import Zero

__all__ = ["PE_ATTENTION", "PE_ENCODINGS", "AttentionBranch", "EncodingBranch", "PESearchNet"]

#: Default candidate encodings of the ``"encoding"`` edge.
PE_ENCODINGS: tuple[str, ...] = ("none", "sinusoidal", "learned_table", "lff", "cape")
#: Default candidate position terms of each attention edge.
PE_ATTENTION: tuple[str, ...] = ("plain", "rope_axial", "alibi")
_ATTENTION_TERMS = {"plain": "none", "rope_axial": "rope_axial", "rope_mixed": "rope_mixed",
                    "alibi": "alibi", "t5": "t5", "learned": "learned"}
_ONE_D = ("alibi", "t5", "learned")


def _grid(rows: int, cols: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Integer ``(row, col)`` indices and patch centres in ``[-1, 1]``, both ``(rows*cols, 2)``."""
    return grid_positions((rows, cols), device)


class AttentionBranch(nn.Module):
    """``RelativeSelfAttention`` with one position term, fed the positions it needs.

    ``x (B, N, D)``, ``positions (N, 2)`` integer grid indices -> ``(B, N, D)``; the 1D
    terms get raster-order indices ``(N, 1)``.
    """

    def __init__(self, term: str, dim: int, num_heads: int, *, device=None, dtype=None) -> None:
        super().__init__()
        from posenc.attention import RelativeSelfAttention

        self.term = term
        position = _ATTENTION_TERMS[term]
        self.attn = RelativeSelfAttention(dim, num_heads, position=position, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        if positions is None:
            raise ValueError("positions must be given (the patch grid)")
        if self.term == "plain":
            return self.attn(x)
        if self.term in _ONE_D:
            raster = torch.arange(positions.shape[0], device=x.device)[:, None]
            return self.attn(x, positions=raster)
        return self.attn(x, positions=positions.to(x.dtype))

    def extra_repr(self) -> str:
        return f"term={self.term!r}"


def _check_names(arg: str, names: Sequence[str], known: Sequence[str] | None = None) -> tuple[str, ...]:
    if isinstance(names, str) or not isinstance(names, Sequence) or not names:
        raise ValueError(f"{arg} must be a non-empty sequence of names, got {names!r}")
    if len(set(names)) != len(names):
        raise ValueError(f"{arg} must not repeat a name, got {list(names)}")
    if known is not None:
        bad = [n for n in names if n not in known]
        if bad:
            raise ValueError(f"{arg}: unknown {bad}; known: {list(known)}")
    return tuple(names)


class PESearchNet(nn.Module):
    """A tiny ViT whose absolute encoding and per-block attention position terms are searched.

    Args:
        image_size: ``(H, W)`` or an int (square); multiples of ``patch_size``.
        num_classes: output logits.
        patch_size: side of the square patches.
        dim, depth, num_heads, mlp_ratio: of the encoder.
        in_channels: image channels.
        encodings: candidates of the ``"encoding"`` edge: ``'none'`` and names of
            :func:`posenc.create_encoding` that accept ``in_dim=2, num_features=dim``.
        attention: candidates of every ``"blocks.<i>.attn"`` edge (see the module docstring).
        encoding_kwargs: extra constructor arguments per encoding name.
        choices: ``{edge: op}`` over every edge for the stand-alone network (``None``:
            the supernet). The edges are ``"encoding"`` and ``"blocks.<i>.attn"``.
        seed: seed of the encodings' own initial draws.
        device, dtype: of the parameters.

    Shapes: ``(B, in_channels, H, W) -> (B, num_classes)``.
    """

    def __init__(self, image_size: int | tuple[int, int] = 8, num_classes: int = 10, *, patch_size: int = 2,
                 dim: int = 32, depth: int = 2, num_heads: int = 4, mlp_ratio: float = 2.0, in_channels: int = 1,
                 encodings: Sequence[str] = PE_ENCODINGS, attention: Sequence[str] = PE_ATTENTION,
                 encoding_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
                 choices: Mapping[str, str] | None = None, seed: int = 0, device=None, dtype=None) -> None:
        super().__init__()
        from posenc.encodings import available_encodings
        from posenc.models.transformer import Block

        size = (image_size, image_size) if isinstance(image_size, int) else tuple(image_size)
        if len(size) != 2:
            raise ValueError(f"image_size must be an int or (H, W), got {image_size!r}")
        for arg, v in (("image_size", size[0]), ("image_size", size[1]), ("num_classes", num_classes),
                       ("patch_size", patch_size), ("dim", dim), ("depth", depth), ("num_heads", num_heads),
                       ("in_channels", in_channels)):
            check_positive_int(arg, v)
        for s in size:
            check_divisible("image_size", s, patch_size, "whole patches")
        check_divisible("dim", dim, num_heads, f"split over num_heads={num_heads}")
        encodings = _check_names("encodings", encodings, ("none", *available_encodings()))
        attention = _check_names("attention", attention, tuple(_ATTENTION_TERMS))
        self.grid = (size[0] // patch_size, size[1] // patch_size)
        self.image_size, self.patch_size, self.dim, self.depth = size, patch_size, dim, depth
        self.encoding_names, self.attention_names = encodings, attention
        enc_kwargs = {k: dict(v) for k, v in (encoding_kwargs or {}).items()}
        unknown = [k for k in enc_kwargs if k not in encodings]
        if unknown:
            raise ValueError(f"encoding_kwargs names encodings that are not candidates: {unknown}")
        space = self.space(depth=depth, encodings=encodings, attention=attention)
        if choices is not None:
            if not isinstance(choices, Mapping):
                raise TypeError(f"choices must be a mapping edge -> op, got {type(choices).__name__}")
            missing = [e for e in space if e not in choices]
            extra = [e for e in choices if e not in space]
            if missing or extra:
                raise ValueError(f"choices must name every edge: missing {missing}, unknown {extra}")
            for e, op in choices.items():
                if op not in space[e]:
                    raise ValueError(f"choices[{e!r}] must be one of {list(space[e])}, got {op!r}")

        def make_encoding(name: str) -> nn.Module:
            return encoding_candidate(name, dim, self.grid, seed=seed, **enc_kwargs.get(name, {})).to(
                device=device, dtype=dtype)

        def make_attention(term: str) -> nn.Module:
            return AttentionBranch(term, dim, num_heads, device=device, dtype=dtype)

        def edge(name: str, make, names: Sequence[str]) -> nn.Module:
            if choices is not None:
                return make(choices[name])
            return MixedOp([(n, make(n)) for n in names], device=device, dtype=dtype)

        self.patch_embed = nn.Conv2d(in_channels, dim, patch_size, stride=patch_size, device=device, dtype=dtype)
        # Patch features normalised too, so content and (unit-RMS) position features start
        # on the same scale whatever the image range.
        self.embed_norm = nn.LayerNorm(dim, device=device, dtype=dtype)
        self.encoding = edge("encoding", make_encoding, encodings)
        attn_iter = iter(range(depth))

        def attention_factory(d: int, h: int) -> nn.Module:
            return edge(f"blocks.{next(attn_iter)}.attn", make_attention, attention)

        self.blocks = nn.ModuleList(Block(dim, num_heads, mlp_ratio, attention_factory, 0.0, device, dtype)
                                    for _ in range(depth))
        self.norm = nn.LayerNorm(dim, device=device, dtype=dtype)
        self.head = nn.Linear(dim, num_classes, device=device, dtype=dtype)

    @staticmethod
    def space(*, depth: int = 2, encodings: Sequence[str] = PE_ENCODINGS,
              attention: Sequence[str] = PE_ATTENTION) -> dict[str, tuple[str, ...]]:
        """``{edge: candidates}`` of the supernet, without building it."""
        check_positive_int("depth", depth)
        return {"encoding": tuple(encodings), **{f"blocks.{i}.attn": tuple(attention) for i in range(depth)}}

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        if images.dim() != 4 or tuple(images.shape[-2:]) != self.image_size:
            raise ValueError(f"images must have shape (B, C, {self.image_size[0]}, {self.image_size[1]}), "
                             f"got {tuple(images.shape)}")
        x = self.embed_norm(self.patch_embed(images).flatten(2).transpose(1, 2))  # (B, N, dim)
        if not isinstance(self.encoding, Zero):
            x = x + self.encoding(x)
        index, _ = _grid(*self.grid, x.device)
        for block in self.blocks:
            x = block(x, index)
        return self.head(self.norm(x).mean(dim=1))

    def extra_repr(self) -> str:
        return (f"grid={self.grid}, dim={self.dim}, depth={self.depth}, encodings={list(self.encoding_names)}, "
                f"attention={list(self.attention_names)}")
