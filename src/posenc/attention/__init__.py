"""Kernelized attention with relative positional encoding (Luo et al., NeurIPS 2021).

* :mod:`~posenc.attention.toeplitz` -- Toeplitz products ``y_i = sum_j c_{j-i} x_j`` by FFT.
* :mod:`~posenc.attention.features` -- positive (FAVOR+) and trigonometric random features.
* :mod:`~posenc.attention.kernelized` -- the O(n log n) kernelized attention with RPE.
* :mod:`~posenc.attention.layers` -- ``KernelizedAttention`` and the multi-head module.
* :mod:`~posenc.attention.reference` -- exact dense references (kernelized and softmax).
* :mod:`~posenc.attention.decay` -- exponential-decay biases as recurrences (O(1) decoding).
* :mod:`~posenc.attention.rpe2d` -- 2D relative positions on patch grids by 2D FFT.
"""

from posenc.attention.decay import DecayDecoder, decay_coeffs, decay_kernelized_attention, decay_toeplitz
from posenc.attention.features import PositiveRandomFeatures, TrigRandomFeatures, kernel_estimate
from posenc.attention.kernelized import kernelized_attention, rpe_coeffs
from posenc.attention.layers import KernelizedAttention, KernelizedMultiheadAttention
from posenc.attention.reference import dense_kernelized_attention, rpe_matrix, softmax_rpe_attention
from posenc.attention.rpe2d import kernelized_attention_2d, rpe2d_matrix, toeplitz2d_matmul
from posenc.attention.toeplitz import toeplitz_dense, toeplitz_matmul

__all__ = [
    "DecayDecoder",
    "KernelizedAttention",
    "KernelizedMultiheadAttention",
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
]
