"""Position-aware attention: two families, one namespace.

``posenc.attention.kernelized`` -- kernelized attention with relative positional encoding
(Luo et al., NeurIPS 2021):

* ``toeplitz`` -- Toeplitz products ``y_i = sum_j c_{j-i} x_j`` by FFT; ``features`` -- positive
  (FAVOR+) and trigonometric random features; ``kernelized`` -- the O(n log n) kernelized
  attention with RPE; ``decay`` -- exponential-decay biases as recurrences (O(1) decoding);
  ``rpe2d`` -- 2D relative positions on patch grids by 2D FFT; ``reference`` -- exact dense
  references (kernelized and softmax); ``layers`` -- ``KernelizedAttention`` (on heads) and
  ``KernelizedAttentionLayer`` (posenc's layer with projections); ``kernelized_mha`` --
  ``KernelizedMHA``, the ``nn.MultiheadAttention`` drop-in.

``posenc.attention.relative`` -- relative encodings that act inside softmax attention:

* ``rotary`` -- RoPE (both channel layouts, partial rotation) and xPos, with ``frequencies``,
  ``rotary_kernels`` and ``xpos`` below it; ``rotary_nd`` -- axial N-D RoPE and mixed learnable
  2D RoPE; ``rope_scaling`` -- context extension: position interpolation, NTK, dynamic NTK, YaRN,
  Llama 3, LongRoPE, which ``rope_hf`` reads from Hugging Face configs; ``alibi`` -- ALiBi as an
  SDPA bias, a FlexAttention score_mod, and in linear attention; ``relative_bias`` -- learned
  biases over T5 buckets or clipped offsets; ``relative_attention`` -- ``RelativeSelfAttention``,
  one module for all of them; ``relative_mha`` -- ``RelativeMHA``, the ``nn.MultiheadAttention``
  drop-in.

What both families use lives here, below them: ``posenc.attention.mha`` (the drop-in
machinery: masks, nested tensors, ``from_torch``) and ``posenc.attention.slopes`` (ALiBi's
head slopes). The relative family may import the kernelized one (ALiBi in linear attention
is a decay RPE), never the reverse.

Every name is exported here. The modules' former paths (``posenc.attention.rotary``,
``posenc.attention.toeplitz``, ...) still import, as the same module objects, so code and
pickles (``torch.save`` of a whole model) that name them keep working.
"""

import sys as _sys

import posenc.attention.mha as _mha
from posenc.attention.kernelized import (
    DecayDecoder,
    KernelizedAttention,
    KernelizedAttentionLayer,
    KernelizedMHA,
    PositiveRandomFeatures,
    TrigRandomFeatures,
    decay_coeffs,
    decay_kernelized_attention,
    decay_toeplitz,
    dense_kernelized_attention,
    kernel_estimate,
    kernelized_attention,
    kernelized_attention_2d,
    rpe2d_matrix,
    rpe_coeffs,
    rpe_matrix,
    softmax_rpe_attention,
    toeplitz2d_matmul,
    toeplitz_dense,
    toeplitz_matmul,
)
from posenc.attention.relative import (
    AxialRotaryEmbedding,
    MixedRotaryEmbedding,
    RelativeMHA,
    RelativePositionBias,
    RelativeSelfAttention,
    RopeScaling,
    RotaryEmbedding,
    alibi_bias,
    alibi_decay_terms,
    alibi_decoder,
    alibi_kernelized_attention,
    alibi_score_mod,
    alibi_slopes,
    apply_rope,
    apply_rope_qk,
    axial_frequencies,
    bias_score_mod,
    clipped_buckets,
    convert_rope_layout,
    layout_permutation,
    linear_position_scale,
    mixed_frequencies,
    ntk_base,
    relative_attention_factory,
    rope_frequencies,
    rope_from_hf_config,
    set_rope_scaling,
    t5_buckets,
    yarn_frequencies,
)

#: The modules' paths before the two families had subpackages: ``posenc.attention.<old>`` is the
#: module ``posenc.attention.<new>`` (``posenc.attention.kernelized``, once a module, is the
#: kernelized package, which exports that module's names).
FORMER_MODULES = {
    **{name: f"kernelized.{name}" for name in ("decay", "features", "layers", "reference", "rpe2d", "toeplitz")},
    **{name: f"relative.{name}" for name in ("alibi", "relative_attention", "relative_bias", "rope_hf",
                                             "rope_scaling", "rotary", "rotary_kernels", "rotary_nd", "xpos")},
}
for _old, _new in FORMER_MODULES.items():
    # `import posenc.attention.rotary` finds the module in sys.modules once this package has run;
    # `from posenc.attention import rotary` and `posenc.attention.rotary` find the attribute
    _sys.modules[f"{__name__}.{_old}"] = globals()[_old] = _sys.modules[f"{__name__}.{_new}"]
# posenc.attention.mha held both drop-ins before each moved to its family
_mha.RelativeMHA, _mha.KernelizedMHA = RelativeMHA, KernelizedMHA
del _old, _new

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
    from posenc.attention.kernelized.layers import _RENAMED, renamed

    if name in _RENAMED:  # deprecated names: importable, with a DeprecationWarning
        return renamed(__name__, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
