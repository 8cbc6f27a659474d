"""Relative position encodings that act inside softmax attention.

* :mod:`~posenc.attention.relative.rotary` -- RoPE (both channel layouts, partial rotation) and xPos;
  its inverse frequencies are in :mod:`~posenc.attention.relative.frequencies`, the rotation kernels
  in :mod:`~posenc.attention.relative.rotary_kernels`, xPos's scales in :mod:`~posenc.attention.relative.xpos`.
* :mod:`~posenc.attention.relative.rotary_nd` -- axial N-D RoPE and mixed learnable 2D RoPE.
* :mod:`~posenc.attention.relative.rope_scaling` -- context extension: position interpolation, NTK,
  dynamic NTK, YaRN, Llama 3, LongRoPE; :mod:`~posenc.attention.relative.rope_hf` reads them from
  Hugging Face configs.
* :mod:`~posenc.attention.relative.alibi` -- ALiBi as an SDPA bias, a FlexAttention score_mod, and
  in linear attention.
* :mod:`~posenc.attention.relative.relative_bias` -- learned biases over T5 buckets or clipped offsets.
* :mod:`~posenc.attention.relative.relative_attention` -- ``RelativeSelfAttention``, one module for all of them.
* :mod:`~posenc.attention.relative.relative_mha` -- ``RelativeMHA``, the ``nn.MultiheadAttention`` drop-in.

The rope modules depend one way: frequencies, then scaling, then the HF config reader, then
the module. Every name is also exported by :mod:`posenc.attention`.
"""

from posenc.attention.relative.alibi import (
    alibi_bias,
    alibi_decay_terms,
    alibi_decoder,
    alibi_kernelized_attention,
    alibi_score_mod,
    alibi_slopes,
)
from posenc.attention.relative.relative_attention import (
    RelativeSelfAttention,
    relative_attention_factory,
    set_rope_scaling,
)
from posenc.attention.relative.relative_bias import RelativePositionBias, bias_score_mod, clipped_buckets, t5_buckets
from posenc.attention.relative.relative_mha import RelativeMHA
from posenc.attention.relative.rope_hf import rope_from_hf_config
from posenc.attention.relative.rope_scaling import RopeScaling, linear_position_scale, ntk_base, yarn_frequencies
from posenc.attention.relative.rotary import (
    RotaryEmbedding,
    apply_rope,
    apply_rope_qk,
    convert_rope_layout,
    layout_permutation,
    rope_frequencies,
)
from posenc.attention.relative.rotary_nd import (
    AxialRotaryEmbedding,
    MixedRotaryEmbedding,
    axial_frequencies,
    mixed_frequencies,
)

__all__ = [
    "AxialRotaryEmbedding",
    "MixedRotaryEmbedding",
    "RelativeMHA",
    "RelativePositionBias",
    "RelativeSelfAttention",
    "RopeScaling",
    "RotaryEmbedding",
    "alibi_bias",
    "alibi_decay_terms",
    "alibi_decoder",
    "alibi_kernelized_attention",
    "alibi_score_mod",
    "alibi_slopes",
    "apply_rope",
    "apply_rope_qk",
    "axial_frequencies",
    "bias_score_mod",
    "clipped_buckets",
    "convert_rope_layout",
    "layout_permutation",
    "linear_position_scale",
    "mixed_frequencies",
    "ntk_base",
    "relative_attention_factory",
    "rope_frequencies",
    "rope_from_hf_config",
    "set_rope_scaling",
    "t5_buckets",
    "yarn_frequencies",
]
