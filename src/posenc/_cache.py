"""What the library's caches key on: the values a cached result was computed from.

A cache keyed on a tensor's version counter or storage pointer goes stale after a write
that bypasses autograd (``p.data.copy_(...)``, an EMA update through ``.data``, a NumPy
view, a collective writing into ``p.data``). posenc's caches instead keep a copy of the
small tensor a result was built from (ALiBi slopes, a learned bias table, a circulant
generator) and use the result only while the two are equal bit for bit.
"""

from __future__ import annotations

import torch

_SAME_SIZE_INT = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def same_bits(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    """Whether ``a`` and ``b`` have the same shape, dtype, device and bits.

    NaN equals a NaN with the same bits and ``-0.0`` differs from ``0.0`` (unlike ``==``);
    strides do not matter. None equals nothing.
    """
    if a is None or b is None:
        return False
    if a.shape != b.shape or a.dtype != b.dtype or a.device != b.device:
        return False
    if a.is_floating_point():
        ints = _SAME_SIZE_INT[a.element_size()]
        return torch.equal(a.view(ints), b.view(ints))
    return torch.equal(a, b)
