"""Drop-in replacements for ``torch.nn.MultiheadAttention`` with a position term.

:class:`~posenc.attention.RelativeMHA` (softmax attention with RoPE / xPos / ALiBi / T5 /
learned offsets, :mod:`posenc.attention.relative.relative_mha`) and
:class:`~posenc.attention.KernelizedMHA` (kernelized attention with RPE, Luo et al. NeurIPS
2021, :mod:`posenc.attention.kernelized.kernelized_mha`) take ``nn.MultiheadAttention``'s constructor
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
This module holds what the two share; each family's subpackage holds its class.

**Nested tensors.** ``nn.TransformerEncoder`` (``enable_nested_tensor=True``, its
default) turns a padded batch into a nested tensor in eval mode under ``no_grad``
when a padding mask is given, and hands that to ``self_attn``. Both classes accept
nested ``query``/``key``/``value``: they pad them, mask the padding, and return a
nested output with the same sequence lengths, so the plain swap
``layer.self_attn = RelativeMHA.from_torch(layer.self_attn, ...)`` works in a
default-constructed encoder, in training and evaluation, with and without padding.

What has no meaning here is refused with a clear error instead of being ignored:
``kdim``/``vdim`` different from ``embed_dim``, ``add_bias_kv``, ``add_zero_attn``, inputs
of another dtype than the parameters (outside autocast); for :class:`KernelizedMHA` also
attention dropout and attention masks other than padding and causal ones. Its weights
are always None (the ``n x n`` map is what kernelized attention never forms): with
``need_weights=True``, ``nn.MultiheadAttention``'s default, it returns ``(output, None)``
and warns once per process.

``_qkv_same_embed_dim`` is deliberately False: ``nn.TransformerEncoderLayer`` has a
fused inference fast path that reads ``in_proj_weight`` and computes plain softmax
attention itself, which would silently drop the position term.
"""

from __future__ import annotations

import torch
from torch import nn

from posenc._checks import check_tensor


def _refuse_unsupported(embed_dim, kdim, vdim, add_bias_kv, add_zero_attn) -> None:
    for name, val in (("kdim", kdim), ("vdim", vdim)):
        if val is not None and val != embed_dim:
            raise ValueError(f"{name} must equal embed_dim ({embed_dim}) for position-aware attention, got {val}")
    if add_bias_kv:
        raise ValueError("add_bias_kv=True is not supported: an extra key/value has no position")
    if add_zero_attn:
        raise ValueError("add_zero_attn=True is not supported: a zero key has no position")


def check_input_dtype(name: str, x: torch.Tensor, weight: torch.Tensor) -> None:
    """Refuse an input whose dtype differs from the projection's (outside autocast), naming both."""
    if x.dtype != weight.dtype and not torch.is_autocast_enabled(x.device.type):
        raise TypeError(f"{name} has dtype {x.dtype} but the module's parameters are {weight.dtype}: convert one of "
                        f"them (e.g. module.to({x.dtype}) or {name}.to({weight.dtype}))")


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
    if a.dtype == b.dtype and a.device == b.device and torch.equal(a, b):
        return True  # one pass, no temporary; False for NaN, whose positions are compared below
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


def _from_torch(cls, mha: nn.MultiheadAttention, kwargs: dict, keep_dropout: bool = False):
    """``cls`` built with ``mha``'s projections; ``keep_dropout``: also its dropout, unless ``kwargs`` sets one."""
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
    if keep_dropout:
        kw.setdefault("dropout", mha.dropout)
    new = cls(mha.embed_dim, mha.num_heads, **kw)
    with torch.no_grad():
        new.in_proj_weight.copy_(mha.in_proj_weight)
        new.out_proj.weight.copy_(mha.out_proj.weight)
        if bias:
            new.in_proj_bias.copy_(mha.in_proj_bias)
            new.out_proj.bias.copy_(mha.out_proj.bias)
    return new
