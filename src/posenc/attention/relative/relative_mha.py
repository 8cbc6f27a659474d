"""``RelativeMHA``: ``nn.MultiheadAttention`` with a relative position term (softmax attention).

The drop-in machinery it shares with :class:`~posenc.attention.KernelizedMHA` (masks, nested
tensors, ``from_torch``) is in :mod:`posenc.attention.mha`, whose docstring describes the contract.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from posenc._checks import check_tensor
from posenc.attention.mha import (
    _any_nested,
    _from_torch,
    _MHAShape,
    _nested_forward,
    _refuse_unsupported,
    _same_values,
    canonical_key_padding_mask,
)
from posenc.attention.relative.relative_attention import RelativeSelfAttention


class RelativeMHA(RelativeSelfAttention, _MHAShape):
    """``nn.MultiheadAttention`` with a relative position term (self-attention).

    Args:
        embed_dim, num_heads, dropout, bias, add_bias_kv, add_zero_attn, kdim, vdim,
        batch_first, device, dtype: as in ``nn.MultiheadAttention``.
        position: ``"rope"``, ``"xpos"``, ``"alibi"``, ``"t5"``, ``"learned"`` or ``"none"``
            (see :class:`~posenc.attention.RelativeSelfAttention`); token ``i`` sits at position ``i``.
            The N-D kinds (``"rope_axial"``, ``"rope_mixed"``) need positions, which this
            call signature cannot pass: use :class:`~posenc.attention.RelativeSelfAttention`.
        **kwargs: further :class:`~posenc.attention.RelativeSelfAttention` options
            (``causal``, ``rope_base``, ``rotary_dim``, ``max_distance``, ``xpos_center``, ...).

    ``forward(query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
    average_attn_weights=True, is_causal=False) -> (output, weights or None)``; ``key`` and
    ``value`` must be ``query`` itself (or equal to it): relative positions are those of one sequence.
    Masks follow ``nn.MultiheadAttention``: a bool ``attn_mask`` is **True = blocked** (not
    allowed to attend; the opposite of ``scaled_dot_product_attention`` and of
    :class:`~posenc.attention.RelativeSelfAttention`), a float one is added to the logits;
    ``key_padding_mask`` True (or ``-inf``) = padded. A query row that ``attn_mask`` blocks
    entirely is an error (``nn.MultiheadAttention`` would return NaN there).
    """

    _qkv_same_embed_dim = False  # keeps nn.TransformerEncoderLayer off its fused fast path (module docstring)

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        add_bias_kv: bool = False,
        add_zero_attn: bool = False,
        kdim: int | None = None,
        vdim: int | None = None,
        batch_first: bool = False,
        device=None,
        dtype=None,
        *,
        position: str = "rope",
        **kwargs,
    ) -> None:
        _refuse_unsupported(embed_dim, kdim, vdim, add_bias_kv, add_zero_attn)
        if position in ("rope_axial", "rope_mixed"):
            raise ValueError(f"position={position!r} needs N-D positions, which nn.MultiheadAttention's call signature "
                             "cannot pass: use RelativeSelfAttention(..., position=...) with positions=")
        super().__init__(embed_dim, num_heads, position=position, dropout=dropout, bias=bias, device=device,
                         dtype=dtype, **kwargs)
        self.embed_dim = embed_dim
        self.batch_first = bool(batch_first)
        self.kdim = self.vdim = embed_dim

    @classmethod
    def from_torch(cls, mha: nn.MultiheadAttention, **kwargs) -> RelativeMHA:
        """A :class:`RelativeMHA` with ``mha``'s projections (its position parameters at their initial values)."""
        return _from_torch(cls, mha, kwargs, keep_dropout=True)

    def forward(  # type: ignore[override]
        self,
        query: torch.Tensor,
        key: torch.Tensor | None = None,
        value: torch.Tensor | None = None,
        key_padding_mask: torch.Tensor | None = None,
        need_weights: bool = True,
        attn_mask: torch.Tensor | None = None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Self-attention of ``query`` ``(B, L, E)`` (``(L, B, E)`` unless ``batch_first``), or nested ``(B, *, E)``.

        Args:
            query: the sequence; ``key`` and ``value`` must be ``query`` itself (or equal to it), or None.
            key_padding_mask: ``(B, L)`` bool **True = padded**, or float (``-inf`` = padded, 0 = keep).
            need_weights: also return the attention weights (averaged over heads if
                ``average_attn_weights``).
            attn_mask: ``(L, L)`` or ``(B * H, L, L)``: bool **True = blocked** (as
                ``nn.MultiheadAttention``; the opposite of ``scaled_dot_product_attention``), or a
                float added to the logits. A row it blocks entirely is a ``ValueError``.
            is_causal: without ``attn_mask``, mask future keys (with it, a hint that it is causal).
        """
        if _any_nested(query, key, value):
            return _nested_forward(self, query, key, value, key_padding_mask, need_weights, attn_mask,
                                   average_attn_weights, is_causal)
        x = self._batch("query", query)
        for name, t in (("key", key), ("value", value)):
            if t is None or t is query:
                continue
            check_tensor(name, t)
            if not _same_values(t, query):
                raise ValueError(f"{name} must be the query itself: RelativeMHA is self-attention "
                                 "(relative positions of one sequence)")
        self._check_dtype("query", x)
        B, n, _ = x.shape
        kpm = canonical_key_padding_mask(key_padding_mask, B, n)
        mask = None
        causal = False
        if attn_mask is not None:
            check_tensor("attn_mask", attn_mask)
            if attn_mask.shape == (B * self.num_heads, n, n):
                attn_mask = attn_mask.view(B, self.num_heads, n, n)
            elif attn_mask.shape != (n, n):
                raise ValueError(f"attn_mask must have shape (L, S) = ({n}, {n}) or (B*H, L, S), "
                                 f"got {tuple(attn_mask.shape)}")
            mask = ~attn_mask if attn_mask.dtype == torch.bool else attn_mask  # SDPA: True = may attend
        elif is_causal:
            causal = True
        q, k, v = F.linear(x, self.in_proj_weight, self.in_proj_bias).view(
            B, n, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        res = self.attend(q, k, v, None, kpm, mask, causal, need_weights=need_weights)
        out, weights = res if need_weights else (res, None)
        out = self.out_proj(out.transpose(1, 2).reshape(B, n, self.dim))
        if weights is not None and average_attn_weights:
            weights = weights.mean(dim=1)
        return self._unbatch(out), weights

    def extra_repr(self) -> str:
        return super().extra_repr() + f", batch_first={self.batch_first}"
