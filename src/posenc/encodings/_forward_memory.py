"""The memory a forward pass of an encoding will hold, checked before it allocates.

An encoding's output is ``(..., out_dim)``: a million positions through 2**17 sinusoidal
features is 512 GiB of float32, and on the CPU such a request ends in an allocation error
(under ``ulimit -v``) or an OOM kill (in a cgroup) rather than a message. Each encoding
states the bytes it holds per output feature (its output, its working copies, the
autograd graph's saved tensors); :func:`check_forward_memory` multiplies by the number of
features and refuses, through :func:`posenc._resources.check_footprint`, a call above the
memory limit, naming the positions' shape and the limit's source.

Only CPU tensors are checked: the limit describes this host's memory, and a GPU reports an
allocation it cannot make with ``torch.OutOfMemoryError`` without harming the process.
"""

from __future__ import annotations

import torch

from posenc._checks import _compiling
from posenc._resources import CHECK_ABOVE, check_footprint

#: What a refused forward pass advises instead of a smaller argument.
ADVICE = "the number of positions per call (encode in chunks: Encoding.iter_chunks)"


def autograd_on(positions: torch.Tensor, *tensors: torch.Tensor) -> bool:
    """Whether this call records an autograd graph (grad mode on and some input requires grad)."""
    return torch.is_grad_enabled() and any(t.requires_grad for t in (positions, *tensors))


def check_forward_memory(encoding: torch.nn.Module, positions: torch.Tensor, bytes_per_feature: float,
                         bytes_per_position: float = 0.0) -> None:
    """Refuse a forward pass whose features would exceed the memory limit, before it allocates.

    Args:
        encoding: the encoding (its ``out_dim`` and class name are used).
        positions: ``(..., in_dim)``, as passed to ``encode``; CPU tensors only are checked.
        bytes_per_feature: bytes the call holds at its peak per output element (``out_dim``
            per position): the output and the working copies of the encoding's computation.
        bytes_per_position: bytes per position beyond that (augmented copies of the positions).

    Raises:
        posenc._resources.FootprintError: the estimate exceeds the limit (the message names the
            positions' shape, ``out_dim``, both sizes and the limit's source).
    """
    if _compiling() or positions.dim() == 0:
        return  # traced (no shapes to specialise on), or a scalar (refused by the input checks)
    rows = positions.numel() // max(1, positions.shape[-1])
    out_dim = int(encoding.out_dim)  # type: ignore[arg-type]
    nbytes = float(rows) * (out_dim * float(bytes_per_feature) + float(bytes_per_position))
    if nbytes <= CHECK_ABOVE or positions.device.type != "cpu":
        return  # small (the common case: nothing more is read), or not this host's memory
    check_footprint(nbytes, f"positions.shape={tuple(int(n) for n in positions.shape)}",
                    f"{type(encoding).__name__}'s features of {rows:,} positions (out_dim={out_dim:,})",
                    advice=ADVICE)


def coordinate_feature_bytes(encoding: torch.nn.Module, positions: torch.Tensor, per_direction: float) -> float:
    """Bytes per output feature of :meth:`~posenc.encodings.base.CoordinateEncoding.encode`.

    Args:
        encoding: a coordinate encoding (``mode``, ``normalize``).
        positions: the floating positions of the call.
        per_direction: bytes per feature of its 1D map (``encode_1d``) or of ``encode_full``,
            in the compute dtype (the output and its working copies).

    Returns:
        ``per_direction`` (in mode ``"product"``: the output, the product before the last factor,
        ``1 / F`` of it, and the ``K F`` 1D features per position), plus the normalised copy when
        autograd keeps the unnormalised one, and the cast back to the positions' dtype when it
        differs from the compute dtype.
    """
    size = positions.dtype.itemsize
    item = max(size, 4)  # the compute dtype: at least float32 (positions are floating here)
    total = float(per_direction)
    if encoding.mode == "product":  # type: ignore[attr-defined]
        per_dir, dirs = encoding.features_per_direction, encoding.num_directions  # type: ignore[attr-defined]
        total = item + item / per_dir + float(per_direction) * dirs * per_dir / encoding.out_dim  # type: ignore
    if encoding.normalize and autograd_on(positions):  # type: ignore[attr-defined]
        total += item
    if size < 4:
        total += size  # the cast back to half precision
    return total
