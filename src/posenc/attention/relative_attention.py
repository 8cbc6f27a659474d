"""Multi-head self-attention with a relative position term: RoPE, xPos, N-D RoPE, ALiBi, T5, learned bias.

:class:`RelativeSelfAttention` is the softmax attention of
:class:`posenc.models.SelfAttention` with one relative position term, chosen by
``position``:

==============  ==========================================================  =========================
``position``    what it does                                                positions it reads
==============  ==========================================================  =========================
``"none"``      nothing (plain attention)                                    --
``"rope"``      RoPE on q and k (:mod:`posenc.attention.rotary`)             1D, integer or continuous
``"xpos"``      RoPE with xPos decay (Sun et al. 2022)                       1D, integer or continuous
``"rope_axial"`` axial N-D RoPE (:mod:`posenc.attention.rotary_nd`)          ``(..., n, num_axes)``
``"rope_mixed"`` mixed learnable 2D RoPE (Heo et al. 2024)                   ``(..., n, 2)``
``"alibi"``     ``-m_h |p_j - p_i|`` (:mod:`posenc.attention.alibi`)        1D, integer or continuous
``"t5"``        learned bias over T5 buckets                                 1D integer
``"learned"``   learned bias per clipped offset (Shaw et al. 2018)           1D integer
==============  ==========================================================  =========================

It plugs into the testbed (``posenc.models.TransformerEncoder(attention=relative_attention_factory("rope"))``),
which calls ``module(x, positions=positions)``; without positions, token indices
``0..n-1`` are used. ALiBi in linear attention is
``posenc.attention.KernelizedAttentionLayer(..., rpe="alibi")``.

Masks: ``key_padding_mask (B, n)`` bool, True = padded key (as in
``nn.MultiheadAttention``); ``attn_mask`` follows ``scaled_dot_product_attention``
(bool True = may attend, or a float added to the logits), broadcastable to
``(B, H, n, n)``; ``causal`` / ``is_causal`` mask future keys.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from posenc._checks import check_choice, check_divisible, check_positive_int, check_tensor
from posenc.attention.alibi import alibi_slopes
from posenc.attention.relative_bias import RelativePositionBias
from posenc.attention.rotary import RotaryEmbedding, check_positions
from posenc.attention.rotary_nd import AxialRotaryEmbedding, MixedRotaryEmbedding

POSITIONS = ("none", "rope", "xpos", "rope_axial", "rope_mixed", "alibi", "t5", "learned")
ONE_D = ("rope", "xpos", "alibi", "t5", "learned")


class RelativeSelfAttention(nn.Module):
    """``x (B, n, dim)``, optional positions -> ``(B, n, dim)``: softmax self-attention with a relative term.

    Args:
        dim: model width (divisible by ``num_heads``).
        num_heads: heads.
        position: one of :data:`POSITIONS` (see the module docstring).
        causal: always mask future keys.
        rope_base: RoPE base (10000 for 1D; the N-D variants default to Heo et al.'s 100 / 10).
        rotary_dim: rotated channels per head for ``"rope"``/``"xpos"`` (default all).
        rope_layout: ``"half"`` or ``"interleaved"``.
        xpos_scale_base: xPos scale base (512).
        num_axes: coordinates per position for ``"rope_axial"``.
        num_buckets, max_distance, bidirectional: of the T5 buckets; ``max_distance`` is
            also the clip distance of ``"learned"``. ``bidirectional`` defaults to ``not causal``.
        dropout: attention dropout (training only).
        bias: biases in the input and output projections.
        seed: seed of ``"rope_mixed"``'s initial directions.
        device, dtype: of the parameters.
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        *,
        position: str = "rope",
        causal: bool = False,
        rope_base: float | None = None,
        rotary_dim: int | None = None,
        rope_layout: str = "half",
        xpos_scale_base: float = 512.0,
        num_axes: int = 2,
        num_buckets: int = 32,
        max_distance: int = 128,
        bidirectional: bool | None = None,
        dropout: float = 0.0,
        bias: bool = True,
        seed: int = 0,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        check_positive_int("dim", dim)
        check_positive_int("num_heads", num_heads)
        check_divisible("dim", dim, num_heads, f"split over num_heads={num_heads}")
        self.dim, self.num_heads, self.head_dim = dim, num_heads, dim // num_heads
        self.position = check_choice("position", position, POSITIONS)
        self.causal = bool(causal)
        if not (isinstance(dropout, (int, float)) and 0.0 <= dropout < 1.0):
            raise ValueError(f"dropout must be in [0, 1), got {dropout!r}")
        self.dropout = float(dropout)
        factory = {"device": device, "dtype": dtype}
        # nn.MultiheadAttention's parameter names and layout, so its checkpoints load as they are
        self.in_proj_weight = nn.Parameter(torch.empty(3 * dim, dim, **factory))
        self.in_proj_bias = nn.Parameter(torch.empty(3 * dim, **factory)) if bias else None
        self.out_proj = nn.Linear(dim, dim, bias=bias, **factory)
        self.rotary: nn.Module | None = None
        self.rel_bias: RelativePositionBias | None = None
        if position in ("rope", "xpos"):
            self.rotary = RotaryEmbedding(
                self.head_dim, rotary_dim=rotary_dim, base=10000.0 if rope_base is None else rope_base,
                layout=rope_layout, xpos_scale_base=xpos_scale_base if position == "xpos" else None, device=device,
            )
        elif position == "rope_axial":
            self.rotary = AxialRotaryEmbedding(self.head_dim, num_axes, base=100.0 if rope_base is None else rope_base,
                                               layout=rope_layout, device=device)
        elif position == "rope_mixed":
            self.rotary = MixedRotaryEmbedding(self.head_dim, num_heads, base=10.0 if rope_base is None else rope_base,
                                               layout=rope_layout, seed=seed, **factory)
        elif position == "alibi":
            self.register_buffer("slopes", alibi_slopes(num_heads, device=device), persistent=False)
        elif position in ("t5", "learned"):
            self.rel_bias = RelativePositionBias(
                num_heads, kind="t5" if position == "t5" else "clipped", num_buckets=num_buckets,
                max_distance=max_distance, bidirectional=(not causal) if bidirectional is None else bidirectional,
                **factory,
            )

        self._reset_projections()

    def _reset_projections(self) -> None:
        # as nn.MultiheadAttention: xavier-uniform in-projection, zero biases
        nn.init.xavier_uniform_(self.in_proj_weight)
        if self.in_proj_bias is not None:
            nn.init.zeros_(self.in_proj_bias)
            nn.init.zeros_(self.out_proj.bias)

    def reset_parameters(self) -> None:
        self._reset_projections()
        self.out_proj.reset_parameters()
        if self.out_proj.bias is not None:
            nn.init.zeros_(self.out_proj.bias)
        for m in (self.rotary, self.rel_bias):
            if m is not None and hasattr(m, "reset_parameters"):
                m.reset_parameters()

    def set_rope_scaling(self, scaling) -> None:
        """Context extension for ``"rope"``/``"xpos"`` (a :class:`~posenc.attention.rope_scaling.RopeScaling` or None)."""
        if not isinstance(self.rotary, RotaryEmbedding):
            raise ValueError(f"set_rope_scaling needs position='rope' or 'xpos', this module has {self.position!r}")
        self.rotary.set_scaling(scaling)

    # ------------------------------------------------------------------ positions
    def _positions(self, positions: torch.Tensor | None, B: int, n: int) -> torch.Tensor | None:
        """``(B or 1, n, P)`` positions, or None for token indices."""
        if positions is None:
            if self.position in ("rope_axial", "rope_mixed"):
                raise ValueError(f"position={self.position!r} needs N-D positions (..., n, axes), got None")
            return None
        check_positions(positions)
        if positions.dim() == 2:
            positions = positions[None]
        if positions.dim() != 3 or positions.shape[1] != n or positions.shape[0] not in (1, B):
            raise ValueError(
                f"positions must have shape (B, n, P) or (n, P) with n={n}, B={B}, got {tuple(positions.shape)}"
            )
        want = self.rotary.num_axes if self.position == "rope_axial" else 2 if self.position == "rope_mixed" else 1
        if self.position != "none" and positions.shape[-1] != want:
            if self.position in ONE_D:
                raise ValueError(
                    f"position={self.position!r} is 1D and needs positions (..., n, 1), got {tuple(positions.shape)}; "
                    "use 'rope_axial' or 'rope_mixed' for N-D positions"
                )
            raise ValueError(f"position={self.position!r} needs positions (..., n, {want}), got {tuple(positions.shape)}")
        return positions

    # ------------------------------------------------------------------ masks
    def _bias(self, pos: torch.Tensor | None, n: int, device, dtype) -> torch.Tensor | None:
        """The ``(1 or B, H, n, n)`` position bias of the bias kinds, else None."""
        if self.position == "alibi":
            p = torch.arange(n, device=device, dtype=torch.float64) if pos is None else pos[..., 0].to(torch.float64)
            dist = (p[..., None, :] - p[..., :, None]).abs()
            bias = -self.slopes.to(torch.float64)[:, None, None] * dist[..., None, :, :]
            return (bias if bias.dim() == 4 else bias[None]).to(dtype)
        if self.rel_bias is not None:
            bias = self.rel_bias(n) if pos is None else self.rel_bias(q_positions=pos[..., 0])
            return (bias if bias.dim() == 4 else bias[None]).to(dtype)
        return None

    def _mask(self, bias, B, n, key_padding_mask, attn_mask, causal, device, dtype):
        if key_padding_mask is not None:
            check_tensor("key_padding_mask", key_padding_mask)
            if key_padding_mask.dtype != torch.bool or key_padding_mask.shape != (B, n):
                raise ValueError(
                    f"key_padding_mask must be a bool tensor of shape (B, n) = ({B}, {n}), got "
                    f"{key_padding_mask.dtype} {tuple(key_padding_mask.shape)}"
                )
            if bool(key_padding_mask.all(dim=-1).any()):
                raise ValueError("key_padding_mask pads every key of some sample: nothing to attend to")
            pad = torch.zeros(B, 1, 1, n, device=device, dtype=dtype).masked_fill(
                key_padding_mask[:, None, None, :], float("-inf"))
            bias = pad if bias is None else bias + pad
        if causal:
            fut = torch.ones(n, n, dtype=torch.bool, device=device).triu(1)
            cm = torch.zeros(n, n, device=device, dtype=dtype).masked_fill(fut, float("-inf"))
            bias = cm if bias is None else bias + cm
        if attn_mask is not None:
            check_tensor("attn_mask", attn_mask)
            if attn_mask.dtype == torch.bool:
                am = torch.zeros(attn_mask.shape, device=device, dtype=dtype).masked_fill(~attn_mask, float("-inf"))
            elif attn_mask.is_floating_point():
                am = attn_mask.to(dtype)
            else:
                raise TypeError(f"attn_mask must be bool or floating, got dtype {attn_mask.dtype}")
            try:
                torch.broadcast_shapes(am.shape, (B, self.num_heads, n, n))
            except RuntimeError:
                raise ValueError(
                    f"attn_mask must broadcast to (B, H, n, n) = ({B}, {self.num_heads}, {n}, {n}), got {tuple(am.shape)}"
                ) from None
            bias = am if bias is None else bias + am
        return bias

    def forward(
        self,
        x: torch.Tensor,
        positions: torch.Tensor | None = None,
        key_padding_mask: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
        is_causal: bool = False,
    ) -> torch.Tensor:
        check_tensor("x", x)
        if x.dim() != 3 or x.shape[-1] != self.dim:
            raise ValueError(f"x must have shape (B, n, {self.dim}), got {tuple(x.shape)}")
        B, n, _ = x.shape
        q, k, v = F.linear(x, self.in_proj_weight, self.in_proj_bias).view(
            B, n, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        out = self.attend(q, k, v, positions, key_padding_mask, attn_mask, is_causal)
        return self.out_proj(out.transpose(1, 2).reshape(B, n, self.dim))

    def attend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        positions: torch.Tensor | None = None,
        key_padding_mask: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
    ):
        """Attention of projected ``q, k, v (B, H, n, head_dim)`` with the position term -> ``(B, H, n, head_dim)``.

        With ``need_weights`` the attention probabilities ``(B, H, n, n)`` are computed
        explicitly and returned too (``(out, weights)``).
        """
        B, n = q.shape[0], q.shape[-2]
        pos = self._positions(positions, B, n)
        if self.position in ("rope", "xpos"):
            p = None if pos is None else pos[..., 0][:, None, :]  # (B or 1, 1, n): broadcast over heads
            q, k = self.rotary(q, k, p, p)
        elif self.position in ("rope_axial", "rope_mixed"):
            q, k = self.rotary(q, k, pos if pos.shape[0] > 1 else pos[0])
        causal = self.causal or bool(is_causal)
        bias = self._bias(pos, n, q.device, q.dtype)
        drop = self.dropout if self.training else 0.0
        mask = None
        if bias is not None or key_padding_mask is not None or attn_mask is not None or need_weights:
            mask = self._mask(bias, B, n, key_padding_mask, attn_mask, causal, q.device, q.dtype)
            if mask is not None:
                # a query row with every key masked (e.g. a left-padded query under a causal mask) would
                # give 0/0 = NaN in the softmax and in every gradient: let it attend uniformly instead
                dead = torch.isneginf(mask).all(dim=-1, keepdim=True)
                mask = mask.masked_fill(dead, 0.0)
        if need_weights:
            logits = q @ k.transpose(-1, -2) * (self.head_dim ** -0.5)
            if mask is not None:
                logits = logits + mask
            weights = torch.softmax(logits, dim=-1)
            if drop:
                weights = F.dropout(weights, drop)
            return weights @ v, weights
        if mask is None:
            return F.scaled_dot_product_attention(q, k, v, dropout_p=drop, is_causal=causal)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=drop)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, num_heads={self.num_heads}, position={self.position!r}, causal={self.causal}"


def relative_attention_factory(position: str = "rope", **kwargs):
    """An attention factory ``(dim, num_heads) -> RelativeSelfAttention`` for :class:`posenc.models.TransformerEncoder`."""
    check_choice("position", position, POSITIONS)

    def make(dim: int, num_heads: int) -> RelativeSelfAttention:
        return RelativeSelfAttention(dim, num_heads, position=position, **kwargs)

    return make


def set_rope_scaling(model: nn.Module, scaling) -> int:
    """Apply a context-extension ``scaling`` (or None to undo) to every 1D RoPE in ``model``; returns how many."""
    count = 0
    for m in model.modules():
        if isinstance(m, RotaryEmbedding):
            m.set_scaling(scaling)
            count += 1
    return count
