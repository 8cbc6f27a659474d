"""Drop-in replacements for ``torch.nn.MultiheadAttention`` with a position term.

:class:`RelativeMHA` (softmax attention with RoPE / xPos / ALiBi / T5 / learned
offsets, :mod:`posenc.attention.relative_attention`) and :class:`KernelizedMHA`
(kernelized attention with RPE, Luo et al. NeurIPS 2021,
:mod:`posenc.attention.layers`) take ``nn.MultiheadAttention``'s constructor
arguments and call signature, return ``(output, weights)``, hold their
projections under the same names and layout (``in_proj_weight (3E, E)``,
``in_proj_bias``, ``out_proj``), and accept PyTorch's masks:

* ``key_padding_mask (B, S)``: bool (True = ignore) or float (``-inf`` = ignore, 0 = keep);
* ``attn_mask (L, S)`` or ``(B * H, L, S)``: bool (True = NOT allowed, as in
  ``nn.MultiheadAttention`` — the opposite of ``scaled_dot_product_attention``) or
  float (added to the logits);
* ``is_causal``: a hint that ``attn_mask`` is the causal mask (or the mask itself when
  ``attn_mask`` is None).

So they slot into ``nn.TransformerEncoderLayer`` (``layer.self_attn = RelativeMHA(...)``)
and load ``nn.MultiheadAttention`` checkpoints (:meth:`RelativeMHA.from_torch`; the
position parameters keep their initial values).

**Nested tensors.** ``nn.TransformerEncoder`` (``enable_nested_tensor=True``, its
default) turns a padded batch into a nested tensor in eval mode under ``no_grad``
when a padding mask is given, and hands that to ``self_attn``. Both classes accept
nested ``query``/``key``/``value``: they pad them, mask the padding, and return a
nested output with the same sequence lengths, so the plain swap
``layer.self_attn = RelativeMHA.from_torch(layer.self_attn, ...)`` works in a
default-constructed encoder, in training and evaluation, with and without padding.

What has no meaning here is refused with a clear error instead of being ignored:
``kdim``/``vdim`` different from ``embed_dim``, ``add_bias_kv``, ``add_zero_attn``;
for :class:`KernelizedMHA` also ``need_weights=True`` (the ``n x n`` map is what
kernelized attention never forms), attention dropout, and attention masks other
than padding and causal ones.

``_qkv_same_embed_dim`` is deliberately False: ``nn.TransformerEncoderLayer`` has a
fused inference fast path that reads ``in_proj_weight`` and computes plain softmax
attention itself, which would silently drop the position term.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from posenc._checks import _compiling, check_divisible, check_positive_int, check_tensor
from posenc.attention.layers import KernelizedAttention
from posenc.attention.relative_attention import RelativeSelfAttention


def _refuse_unsupported(embed_dim, kdim, vdim, add_bias_kv, add_zero_attn) -> None:
    for name, val in (("kdim", kdim), ("vdim", vdim)):
        if val is not None and val != embed_dim:
            raise ValueError(f"{name} must equal embed_dim ({embed_dim}) for position-aware attention, got {val}")
    if add_bias_kv:
        raise ValueError("add_bias_kv=True is not supported: an extra key/value has no position")
    if add_zero_attn:
        raise ValueError("add_zero_attn=True is not supported: a zero key has no position")


def canonical_key_padding_mask(mask: torch.Tensor | None, batch: int, n: int) -> torch.Tensor | None:
    """``(B, S)`` bool (True = padded) from a bool or float (``-inf`` = padded, 0 = keep) mask."""
    if mask is None:
        return None
    check_tensor("key_padding_mask", mask)
    if mask.shape != (batch, n):
        raise ValueError(f"key_padding_mask must have shape (B, S) = ({batch}, {n}), got {tuple(mask.shape)}")
    if mask.dtype == torch.bool:
        return mask
    if not mask.is_floating_point():
        raise TypeError(f"key_padding_mask must be bool or floating, got dtype {mask.dtype}")
    pad = torch.isneginf(mask)
    if not bool(((mask == 0) | pad).all()):
        raise ValueError("a float key_padding_mask must hold only 0 (keep) and -inf (pad)")
    return pad


def _causal(n: int, device) -> torch.Tensor:
    return torch.ones(n, n, dtype=torch.bool, device=device).triu(1)


def _any_nested(*tensors) -> bool:
    return any(isinstance(t, torch.Tensor) and t.is_nested for t in tensors)


def _unnest(name: str, t: torch.Tensor) -> tuple[torch.Tensor, list[int]]:
    """A nested ``(B, *, E)`` tensor -> its zero-padded ``(B, L, E)`` form and the lengths."""
    if t.dim() != 3:
        raise ValueError(f"a nested {name} must be (B, *, E), got {t.dim()} dims")
    parts = t.unbind()
    lengths = [int(c.shape[0]) for c in parts]
    if not lengths or min(lengths) < 1:
        raise ValueError(f"a nested {name} must hold at least one sequence, each of at least one token")
    return t.to_padded_tensor(0.0), lengths


def _nested_forward(module, query, key, value, key_padding_mask, need_weights, attn_mask, average_attn_weights,
                    is_causal):
    """Run ``module`` on nested inputs: pad them, mask the padded keys, return a nested output.

    ``nn.TransformerEncoder`` builds nested tensors (batch first) in evaluation under
    ``no_grad`` with a padding mask (``enable_nested_tensor=True``); the tokens of each
    sequence keep their positions ``0..len-1``.
    """
    q, q_len = _unnest("query", query) if query.is_nested else (query, None)
    padded = {id(query): q}
    lens = {id(query): q_len}
    for name, t in (("key", key), ("value", value)):
        if t is not None and id(t) not in padded:
            padded[id(t)], lens[id(t)] = _unnest(name, t) if t.is_nested else (t, None)
    k = q if key is None else padded[id(key)]
    v = k if value is None else padded[id(value)]
    k_len = q_len if key is None else lens[id(key)]
    if q_len is None or any(t is not None and not t.is_nested for t in (key, value)):
        raise ValueError("nested inputs must be nested together: query, key and value (as nn.TransformerEncoder "
                         "passes them)")
    B = q.shape[0]
    kpm = key_padding_mask
    if k_len is not None:
        S = k.shape[1]
        pad = torch.arange(S, device=k.device)[None, :] >= torch.tensor(k_len, device=k.device)[:, None]
        if kpm is not None:
            kpm = canonical_key_padding_mask(kpm, B, S) | pad
        else:
            kpm = pad
    if not module.batch_first:  # nested tensors are batch first; the module may expect (L, B, E)
        q, k, v = (t.transpose(0, 1) for t in (q, k, v))
        if key is None or key is query:
            k = q
        if value is None or value is key or value is query:
            v = k
    out, weights = module.forward(q, k, v, key_padding_mask=kpm, need_weights=need_weights, attn_mask=attn_mask,
                                  average_attn_weights=average_attn_weights, is_causal=is_causal)
    if not module.batch_first:
        out = out.transpose(0, 1)
    if q_len is not None:
        out = torch.nested.as_nested_tensor([out[b, : q_len[b]] for b in range(len(q_len))], layout=torch.strided)
    return out, weights


def _same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal shapes and values, NaN equal to NaN (a NaN in the query must not look like a different key)."""
    if a.shape != b.shape:
        return False
    same = a == b
    if a.is_floating_point() or a.is_complex():
        same = same | (a.isnan() & b.isnan())
    return bool(same.all())


class _MHAShape:
    """Shared handling of ``batch_first`` and the ``(query, key, value)`` inputs."""

    batch_first: bool
    embed_dim: int

    def _batch(self, name: str, t: torch.Tensor) -> torch.Tensor:
        check_tensor(name, t)
        if t.dim() == 2:
            raise ValueError(f"{name} must be batched (3-D); unbatched input is not supported, got {tuple(t.shape)}")
        if t.dim() != 3 or t.shape[-1] != self.embed_dim:
            layout = "(B, L, E)" if self.batch_first else "(L, B, E)"
            raise ValueError(f"{name} must have shape {layout} with E={self.embed_dim}, got {tuple(t.shape)}")
        return t if self.batch_first else t.transpose(0, 1)

    def _unbatch(self, out: torch.Tensor) -> torch.Tensor:
        return out if self.batch_first else out.transpose(0, 1)


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
        return _from_torch(cls, mha, kwargs)

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
    average_attn_weights=True, is_causal=False) -> (output, None)``; ``need_weights`` must be
    False, ``attn_mask`` may only be the causal mask.
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
            raise ValueError("need_weights=True is not supported: kernelized attention never forms the n x n "
                             "attention map (pass need_weights=False)")
        q_in, k_in, v_in = self._batch("query", query), self._batch("key", key), self._batch("value", value)
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


def _from_torch(cls, mha: nn.MultiheadAttention, kwargs: dict):
    if not isinstance(mha, nn.MultiheadAttention):
        raise TypeError(f"mha must be an nn.MultiheadAttention, got {type(mha).__name__}")
    if not mha._qkv_same_embed_dim:
        raise ValueError("mha must have kdim == vdim == embed_dim (a packed in_proj_weight)")
    if mha.bias_k is not None:
        raise ValueError("mha has add_bias_kv=True, which has no counterpart here")
    if mha.add_zero_attn:
        raise ValueError("mha has add_zero_attn=True, which has no counterpart here (a zero key has no position)")
    bias = mha.in_proj_bias is not None
    p = mha.in_proj_weight
    kw = {"bias": bias, "batch_first": mha.batch_first, "device": p.device, "dtype": p.dtype, **kwargs}
    if cls is RelativeMHA:
        kw.setdefault("dropout", mha.dropout)
    new = cls(mha.embed_dim, mha.num_heads, **kw)
    with torch.no_grad():
        new.in_proj_weight.copy_(mha.in_proj_weight)
        new.out_proj.weight.copy_(mha.out_proj.weight)
        if bias:
            new.in_proj_bias.copy_(mha.in_proj_bias)
            new.out_proj.bias.copy_(mha.out_proj.bias)
    return new
