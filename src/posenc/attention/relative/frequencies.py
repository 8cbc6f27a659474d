"""RoPE's inverse frequencies ``theta_i = base ** (-2 i / r)`` (Su et al., RoFormer, Eq. 15).

The bottom of the rope modules, which depend one way: these frequencies, then their
context-extension scalings (:mod:`~posenc.attention.relative.rope_scaling`), then the reader
of Hugging Face configs (:mod:`~posenc.attention.relative.rope_hf`), then the module
(:mod:`~posenc.attention.relative.rotary`).
"""

from __future__ import annotations

import torch

from posenc._checks import check_positive_float, check_positive_int


def rope_frequencies(
    rotary_dim: int, base: float = 10000.0, *, device=None, dtype: torch.dtype = torch.float64
) -> torch.Tensor:
    """``theta_i = base ** (-2 i / rotary_dim)`` for ``i = 0 .. rotary_dim/2 - 1``: ``(rotary_dim/2,)``."""
    check_positive_int("rotary_dim", rotary_dim)
    if rotary_dim % 2:
        raise ValueError(f"rotary_dim must be even (channels are rotated in pairs), got {rotary_dim}")
    base = check_positive_float("base", base)
    if base <= 1.0:
        raise ValueError(f"base must be > 1, got {base}")
    i = torch.arange(rotary_dim // 2, device=device, dtype=torch.float64)
    return (base ** (-2.0 * i / rotary_dim)).to(dtype)
