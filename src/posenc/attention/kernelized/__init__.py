"""Kernelized attention with relative positional encoding (Luo et al., NeurIPS 2021).

* :mod:`~posenc.attention.kernelized.toeplitz` -- Toeplitz products ``y_i = sum_j c_{j-i} x_j`` by FFT.
* :mod:`~posenc.attention.kernelized.features` -- positive (FAVOR+) and trigonometric random features.
* :mod:`~posenc.attention.kernelized.kernelized` -- the O(n log n) kernelized attention with RPE.
* :mod:`~posenc.attention.kernelized.decay` -- exponential-decay biases as recurrences (O(1) decoding).
* :mod:`~posenc.attention.kernelized.rpe2d` -- 2D relative positions on patch grids by 2D FFT.
* :mod:`~posenc.attention.kernelized.reference` -- exact dense references (kernelized and softmax).
* :mod:`~posenc.attention.kernelized.layers` -- ``KernelizedAttention`` (on heads) and
  ``KernelizedAttentionLayer`` (posenc's layer with projections).
* :mod:`~posenc.attention.kernelized.kernelized_mha` -- ``KernelizedMHA``, the ``nn.MultiheadAttention`` drop-in.

Every name is also exported by :mod:`posenc.attention`. Before the family had its own
subpackage, ``posenc.attention.kernelized`` was the module that is now
:mod:`posenc.attention.kernelized.kernelized`; the names it held are importable from here too.
"""

from posenc.attention.kernelized._common import check_all_finite, ratio_of_last
from posenc.attention.kernelized.decay import DecayDecoder, decay_coeffs, decay_kernelized_attention, decay_toeplitz
from posenc.attention.kernelized.features import PositiveRandomFeatures, TrigRandomFeatures, kernel_estimate
from posenc.attention.kernelized.kernelized import (
    ATTENTION_BLOCK_BYTES,
    DENSE_MAX_N,
    METHODS,
    KernelizedRPEFunction,
    bounded_bias,
    check_key_padding_mask,
    check_output,
    check_qkv,
    feature_scale,
    kernelized_attention,
    relative_offsets,
    rpe_coeffs,
    safe_ratio,
)
from posenc.attention.kernelized.kernelized_mha import KernelizedMHA
from posenc.attention.kernelized.layers import KernelizedAttention, KernelizedAttentionLayer
from posenc.attention.kernelized.reference import dense_kernelized_attention, rpe_matrix, softmax_rpe_attention
from posenc.attention.kernelized.rpe2d import kernelized_attention_2d, rpe2d_matrix, toeplitz2d_matmul
from posenc.attention.kernelized.toeplitz import toeplitz_dense, toeplitz_matmul

__all__ = [
    "DecayDecoder",
    "KernelizedAttention",
    "KernelizedAttentionLayer",
    "KernelizedMHA",
    "PositiveRandomFeatures",
    "TrigRandomFeatures",
    "decay_coeffs",
    "decay_kernelized_attention",
    "decay_toeplitz",
    "dense_kernelized_attention",
    "kernel_estimate",
    "kernelized_attention",
    "kernelized_attention_2d",
    "rpe2d_matrix",
    "rpe_coeffs",
    "rpe_matrix",
    "softmax_rpe_attention",
    "toeplitz2d_matmul",
    "toeplitz_dense",
    "toeplitz_matmul",
    # the public names of the former module posenc.attention.kernelized (now .kernelized.kernelized)
    "ATTENTION_BLOCK_BYTES",
    "DENSE_MAX_N",
    "METHODS",
    "KernelizedRPEFunction",
    "bounded_bias",
    "check_all_finite",
    "check_key_padding_mask",
    "check_output",
    "check_qkv",
    "feature_scale",
    "ratio_of_last",
    "relative_offsets",
    "safe_ratio",
]
