"""ALiBi's head slopes (Press, Smith, Lewis, "Train Short, Test Long", ICLR 2022).

Both families use them: softmax ALiBi (:mod:`posenc.attention.relative.alibi`) and the
``rpe="alibi"`` kernelized attention (:mod:`posenc.attention.kernelized.layers`).
"""

from __future__ import annotations

import math

import torch

from posenc._checks import check_positive_int


def alibi_slopes(num_heads: int, *, device=None, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The ``(num_heads,)`` ALiBi slopes of Press et al. (any head count)."""
    check_positive_int("num_heads", num_heads)
    if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise TypeError(f"dtype must be a floating-point torch.dtype (slopes are fractions), got {dtype}")

    def power_of_two(n: int) -> list[float]:
        return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]

    p = 2 ** int(math.floor(math.log2(num_heads)))
    slopes = power_of_two(p)
    if p < num_heads:
        slopes += power_of_two(2 * p)[0::2][: num_heads - p]
    return torch.tensor(slopes, device=device, dtype=torch.float64).to(dtype)
