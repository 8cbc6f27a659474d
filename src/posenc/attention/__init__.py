"""Kernelized attention with relative positional encoding (Luo et al., NeurIPS 2021).

* :mod:`~posenc.attention.toeplitz` -- Toeplitz products ``y_i = sum_j c_{j-i} x_j`` by FFT.
* :mod:`~posenc.attention.features` -- positive (FAVOR+) and trigonometric random features.
* :mod:`~posenc.attention.kernelized` -- the O(n log n) kernelized attention with RPE.
* :mod:`~posenc.attention.layers` -- ``KernelizedAttention`` (on heads) and ``KernelizedAttentionLayer``
  (posenc's layer with projections; ``KernelizedMHA`` is the ``nn.MultiheadAttention`` drop-in).
* :mod:`~posenc.attention.reference` -- exact dense references (kernelized and softmax).
* :mod:`~posenc.attention.decay` -- exponential-decay biases as recurrences (O(1) decoding).
* :mod:`~posenc.attention.rpe2d` -- 2D relative positions on patch grids by 2D FFT.

Relative encodings that act inside softmax attention:

* :mod:`~posenc.attention.rotary` -- RoPE (both channel layouts, partial rotation) and xPos.
* :mod:`~posenc.attention.rotary_nd` -- axial N-D RoPE and mixed learnable 2D RoPE.
* :mod:`~posenc.attention.rope_scaling` -- context extension: position interpolation, NTK, dynamic NTK, YaRN,
  Llama 3, LongRoPE; :mod:`~posenc.attention.rope_hf` reads them from Hugging Face configs.
* :mod:`~posenc.attention.alibi` -- ALiBi as an SDPA bias, a FlexAttention score_mod, and in linear attention.
* :mod:`~posenc.attention.relative_bias` -- learned biases over T5 buckets or clipped offsets.
* :mod:`~posenc.attention.relative_attention` -- ``RelativeSelfAttention``, one module for all of them.
* :mod:`~posenc.attention.mha` -- ``RelativeMHA`` / ``KernelizedMHA``: ``nn.MultiheadAttention`` drop-ins.
"""

from posenc.attention.alibi import (
    alibi_bias,
    alibi_decay_terms,
    alibi_decoder,
    alibi_kernelized_attention,
    alibi_score_mod,
    alibi_slopes,
)
from posenc.attention.decay import DecayDecoder, decay_coeffs, decay_kernelized_attention, decay_toeplitz
from posenc.attention.features import PositiveRandomFeatures, TrigRandomFeatures, kernel_estimate
from posenc.attention.kernelized import kernelized_attention, rpe_coeffs
from posenc.attention.layers import KernelizedAttention, KernelizedAttentionLayer
from posenc.attention.reference import dense_kernelized_attention, rpe_matrix, softmax_rpe_attention
from posenc.attention.rpe2d import kernelized_attention_2d, rpe2d_matrix, toeplitz2d_matmul
from posenc.attention.mha import KernelizedMHA, RelativeMHA
from posenc.attention.relative_attention import RelativeSelfAttention, relative_attention_factory, set_rope_scaling
from posenc.attention.relative_bias import RelativePositionBias, bias_score_mod, clipped_buckets, t5_buckets
from posenc.attention.rope_hf import rope_from_hf_config
from posenc.attention.rope_scaling import RopeScaling, linear_position_scale, ntk_base, yarn_frequencies
from posenc.attention.rotary import (
    RotaryEmbedding,
    apply_rope,
    apply_rope_qk,
    convert_rope_layout,
    layout_permutation,
    rope_frequencies,
)
from posenc.attention.rotary_nd import AxialRotaryEmbedding, MixedRotaryEmbedding, axial_frequencies, mixed_frequencies
from posenc.attention.toeplitz import toeplitz_dense, toeplitz_matmul

__all__ = [
    "AxialRotaryEmbedding",
    "DecayDecoder",
    "KernelizedAttention",
    "KernelizedAttentionLayer",
    "KernelizedMHA",
    "MixedRotaryEmbedding",
    "PositiveRandomFeatures",
    "RelativeMHA",
    "RelativePositionBias",
    "RelativeSelfAttention",
    "RopeScaling",
    "RotaryEmbedding",
    "TrigRandomFeatures",
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
    "decay_coeffs",
    "decay_kernelized_attention",
    "decay_toeplitz",
    "dense_kernelized_attention",
    "kernel_estimate",
    "kernelized_attention",
    "kernelized_attention_2d",
    "layout_permutation",
    "linear_position_scale",
    "mixed_frequencies",
    "ntk_base",
    "relative_attention_factory",
    "rope_frequencies",
    "rope_from_hf_config",
    "rpe2d_matrix",
    "rpe_coeffs",
    "rpe_matrix",
    "set_rope_scaling",
    "softmax_rpe_attention",
    "t5_buckets",
    "toeplitz2d_matmul",
    "toeplitz_dense",
    "toeplitz_matmul",
    "yarn_frequencies",
]


def __getattr__(name: str):
    from posenc.attention import layers

    if name in layers._RENAMED:  # deprecated names: importable, with a DeprecationWarning
        return layers.renamed(__name__, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
