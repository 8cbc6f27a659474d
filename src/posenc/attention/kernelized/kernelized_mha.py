"""``KernelizedMHA``: ``nn.MultiheadAttention`` computed as kernelized attention with RPE.

The drop-in machinery it shares with :class:`~posenc.attention.RelativeMHA` (masks, nested
tensors, ``from_torch``) is in :mod:`posenc.attention.mha`, whose docstring describes the contract.
"""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch import nn

from posenc._checks import _compiling, check_divisible, check_positive_int, check_tensor
from posenc.attention.kernelized.layers import KernelizedAttention
from posenc.attention.mha import (
    _any_nested,
    _causal,
    _from_torch,
    _MHAShape,
    _nested_forward,
    _refuse_unsupported,
    canonical_key_padding_mask,
    check_input_dtype,
)

_warned_need_weights = False


def _warn_no_weights() -> None:
    """Once per process: ``need_weights=True`` (``nn.MultiheadAttention``'s default) gives no weights here."""
    global _warned_need_weights
    if _warned_need_weights or _compiling():
        return
    _warned_need_weights = True
    warnings.warn("KernelizedMHA has no attention weights (kernelized attention never forms the n x n map): "
                  "need_weights=True returns (output, None); pass need_weights=False to say so (this warning is "
                  "shown once)", UserWarning, stacklevel=5)  # the caller of module(...)


class KernelizedMHA(nn.Module, _MHAShape):
    """``nn.MultiheadAttention`` computed as kernelized attention with RPE (Luo et al., NeurIPS 2021).

    Args:
        embed_dim, num_heads, dropout, bias, add_bias_kv, add_zero_attn, kdim, vdim,
        batch_first, device, dtype: as in ``nn.MultiheadAttention`` (``dropout`` must be 0:
            there is no attention matrix to drop from; :meth:`from_torch` refuses a source
            with dropout unless told ``dropout=0.0``).
        **kwargs: :class:`~posenc.attention.KernelizedAttention` options (``num_features``,
            ``rpe``, ``max_distance``, ``causal``, ``normalize_qk``, ...).

    This is the drop-in: same constructor, call signature, masks, return value
    ``(output, None)`` and parameter names as ``nn.MultiheadAttention``. posenc's own layer
    with the same attention, :class:`~posenc.attention.KernelizedAttentionLayer`, is called
    ``layer(x, context=None, key_padding_mask=None) -> tensor`` and is what
    :class:`posenc.models.TransformerEncoder` plugs in.

    Under ``torch.compile(fullgraph=True)`` and ``torch.export`` it traces without graph
    breaks: the data-dependent input checks (finite values, a fully masked row, the
    values of ``attn_mask``) run in eager mode only, and ``compute_dtype="auto"`` resolves
    to float64 accumulation in traced code (see :class:`~posenc.attention.KernelizedAttention`).

    ``forward(query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
    average_attn_weights=True, is_causal=False) -> (output, None)``: the weights are always
    None (with ``need_weights=True``, ``nn.MultiheadAttention``'s default, a warning says so
    once per process); ``attn_mask`` may only be the causal mask. ``query``, ``key`` and
    ``value`` must have the parameters' dtype (a ``TypeError`` otherwise, outside autocast).
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
        **kwargs,
    ) -> None:
        super().__init__()
        check_positive_int("embed_dim", embed_dim)
        check_positive_int("num_heads", num_heads)
        check_divisible("embed_dim", embed_dim, num_heads, f"split over num_heads={num_heads}")
        _refuse_unsupported(embed_dim, kdim, vdim, add_bias_kv, add_zero_attn)
        if dropout:
            raise ValueError(f"dropout must be 0 for kernelized attention (no attention matrix), got {dropout}")
        self.embed_dim, self.num_heads, self.head_dim = embed_dim, num_heads, embed_dim // num_heads
        self.batch_first = bool(batch_first)
        self.kdim = self.vdim = embed_dim
        self.dropout = 0.0
        factory = {"device": device, "dtype": dtype}
        self.in_proj_weight = nn.Parameter(torch.empty(3 * embed_dim, embed_dim, **factory))
        self.in_proj_bias = nn.Parameter(torch.empty(3 * embed_dim, **factory)) if bias else None
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias, **factory)
        self.attention = KernelizedAttention(num_heads, self.head_dim, **factory, **kwargs)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.xavier_uniform_(self.in_proj_weight)
        self.out_proj.reset_parameters()
        if self.in_proj_bias is not None:
            nn.init.zeros_(self.in_proj_bias)
            nn.init.zeros_(self.out_proj.bias)
        self.attention.reset_parameters()

    @classmethod
    def from_torch(cls, mha: nn.MultiheadAttention, **kwargs) -> KernelizedMHA:
        """A :class:`KernelizedMHA` with ``mha``'s projections (its RPE parameters at their initial values).

        ``mha``'s attention dropout cannot be honoured (it drops entries of the ``n x n``
        attention matrix, which kernelized attention never forms), so a source with
        ``dropout > 0`` is refused unless the call says ``dropout=0.0`` explicitly (for
        example to convert a model used only in eval mode, where the dropout is off).

        Raises:
            ValueError: ``mha.dropout > 0`` without an explicit ``dropout=0.0``, or a source
                layer that the constructor refuses.
        """
        if isinstance(mha, nn.MultiheadAttention) and mha.dropout and "dropout" not in kwargs:
            raise ValueError(
                f"mha has attention dropout {mha.dropout}, which kernelized attention cannot apply (it never "
                "forms the attention matrix); pass dropout=0.0 to convert it without dropout"
            )
        return _from_torch(cls, mha, kwargs)

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
        need_weights: bool = True,
        attn_mask: torch.Tensor | None = None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
    ) -> tuple[torch.Tensor, None]:
        if _any_nested(query, key, value):  # nn.TransformerEncoder's nested fast path (module docstring)
            return _nested_forward(self, query, key, value, key_padding_mask, need_weights, attn_mask,
                                   average_attn_weights, is_causal)
        if need_weights:
            _warn_no_weights()
        q_in, k_in, v_in = self._batch("query", query), self._batch("key", key), self._batch("value", value)
        for name, t in (("query", q_in), ("key", k_in), ("value", v_in)):
            check_input_dtype(name, t, self.in_proj_weight)
        if k_in.shape[:2] != v_in.shape[:2] or q_in.shape[0] != k_in.shape[0]:
            raise ValueError(f"key and value must have the same batch and length, and the query's batch; got "
                             f"query {tuple(query.shape)}, key {tuple(key.shape)}, value {tuple(value.shape)}")
        B, n_q, _ = q_in.shape
        n_k = k_in.shape[1]
        causal = self.attention.causal
        if attn_mask is not None:
            check_tensor("attn_mask", attn_mask)
            if attn_mask.shape != (n_q, n_k) or n_q != n_k:
                raise ValueError("attn_mask: kernelized attention supports only the causal mask (L, S) with L == S; "
                                 f"got {tuple(attn_mask.shape)} for L={n_q}, S={n_k}; use causal=True or is_causal=True")
            if not _compiling():  # its values are data: checked in eager mode, trusted in traced code
                mask = attn_mask if attn_mask.dtype == torch.bool else torch.isneginf(attn_mask)
                if attn_mask.is_floating_point() and not bool(((attn_mask == 0) | mask).all()):
                    raise ValueError("attn_mask: kernelized attention takes only 0/-inf masks (no additive bias)")
                if not torch.equal(mask, _causal(n_q, mask.device)):
                    raise ValueError("attn_mask: kernelized attention supports only the causal mask (L, S) with "
                                     "L == S; use causal=True or is_causal=True")
            causal = True
        elif is_causal:
            causal = True
        if causal and not self.attention.causal:
            raise ValueError("a causal mask needs KernelizedMHA(..., causal=True) (the RPE and the O(n) scan are "
                             "built for one direction)")
        if key_padding_mask is not None and _compiling() and key_padding_mask.is_floating_point():
            # traced code: a float mask's 0 / -inf values cannot be checked (data); its shape can
            if key_padding_mask.shape != (B, n_k):
                raise ValueError(f"key_padding_mask must have shape (B, S) = ({B}, {n_k}), "
                                 f"got {tuple(key_padding_mask.shape)}")
            kpm = torch.isneginf(key_padding_mask)
        else:
            kpm = canonical_key_padding_mask(key_padding_mask, B, n_k)
        w_q, w_k, w_v = self.in_proj_weight.chunk(3)
        b_q, b_k, b_v = (None, None, None) if self.in_proj_bias is None else self.in_proj_bias.chunk(3)

        def split(t: torch.Tensor) -> torch.Tensor:
            return t.view(t.shape[0], t.shape[1], self.num_heads, self.head_dim).transpose(1, 2)

        z = self.attention(split(F.linear(q_in, w_q, b_q)), split(F.linear(k_in, w_k, b_k)),
                           split(F.linear(v_in, w_v, b_v)), key_padding_mask=kpm)
        out = self.out_proj(z.transpose(1, 2).reshape(B, n_q, self.embed_dim))
        return self._unbatch(out), None

    def extra_repr(self) -> str:
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, batch_first={self.batch_first}"
