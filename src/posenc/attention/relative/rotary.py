"""Rotary position embeddings (RoPE; Su et al., "RoFormer", arXiv 2104.09864) and xPos.

RoPE rotates each pair of query/key channels by an angle proportional to the
token's position, ``p * theta_i`` with ``theta_i = base ** (-2 i / r)`` for the
``r / 2`` pairs of the ``r = rotary_dim`` rotated channels (Eq. 15 of the paper).
Because rotations compose, ``<R(m) q, R(n) k> = <q, R(n - m) k>``: the attention
logit depends on the positions only through their difference.

Two channel layouts are in use and checkpoints are not interchangeable:

* ``"interleaved"``: pair ``i`` is channels ``(2i, 2i + 1)`` (RoFormer, GPT-J,
  Meta's original LLaMA code, rotary-embedding-torch's default);
* ``"half"``: pair ``i`` is channels ``(i, i + r/2)`` (GPT-NeoX and most
  Hugging Face ports of LLaMA).

They differ by a fixed permutation of channels: :func:`layout_permutation`
gives it, and :func:`convert_rope_layout` applies it to the rows of a q/k
projection so a checkpoint trained in one layout runs in the other with the
same outputs.

xPos (Sun et al., "A Length-Extrapolatable Transformer", 2022) multiplies pair
``i`` of the query at position ``m`` by ``zeta_i ** (m / scale_base)`` and of the
key at ``n`` by ``zeta_i ** (-n / scale_base)``, ``zeta_i = (2i/r + gamma) / (1 + gamma)``,
so the logit gains the factor ``zeta_i ** ((m - n) / scale_base)``, which decays
with distance; it stays relative. The exponent is measured from a centre, which
cancels in every logit: by default the middle of the key positions (``n // 2``
for keys ``0..n-1``, as torchscale and rotary-embedding-torch do), so the scales
stay in floating-point range twice as far as from position 0 (float32: about
36,000 positions either side of the centre; float16: about 4,000). Beyond that a
``ValueError`` says so instead of returning inf or NaN.

Decoding with a KV cache: without explicit positions, keys sit at ``offset ..
offset + n_k - 1`` and a shorter query block at the *end* of the keys (as
Hugging Face's cache positions and rotary-embedding-torch's
``rotate_queries_with_cached_keys``), so ``rope(q_new, k_cache)`` rotates the new
queries at their true positions.

The rotation kernels live in :mod:`posenc.attention.relative.rotary_kernels`, xPos's scales in
:mod:`posenc.attention.relative.xpos`.

Precision: angles are computed in float64 and only the cosines and sines are
cast to the compute dtype (at least float32), so position 100,000 is rotated as
accurately as position 10 (``p * theta`` in float32 loses ~1e-2 rad there).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from posenc._checks import (
    _compiling,
    all_finite,
    broadcast_shape,
    check_bool,
    check_choice,
    check_finite,
    check_has_data,
    check_positive_float,
    check_positive_int,
    check_tensor,
)
from posenc._resources import check_footprint
from posenc.attention.relative._settings import fixed_setting
from posenc.attention.relative.frequencies import rope_frequencies
from posenc.attention.relative.rope_hf import rope_from_hf_config
from posenc.attention.relative.rope_scaling import RopeScaling
from posenc.attention.relative.rotary_kernels import _check_inplace, _check_qk_inplace, _rotate_cast
from posenc.attention.relative.xpos import _check_xpos_range, xpos_default_center, xpos_log_range, xpos_scales
from posenc.encodings.base import compute_dtype

__all__ = [
    "ANGLE_TOLERANCE", "LAYOUTS", "MAX_ANGLE", "RotaryEmbedding", "apply_rope", "apply_rope_qk",
    "check_angle_precision", "check_positions", "check_rotary_dim", "convert_rope_layout", "layout_permutation",
    "rope_angles", "rope_frequencies", "rotate", "xpos_default_center", "xpos_log_range", "xpos_scales",
]

LAYOUTS = ("half", "interleaved")


def check_rotary_dim(head_dim: int, rotary_dim: int | None) -> int:
    """The number of rotated channels: ``rotary_dim`` (default ``head_dim``), even and ``<= head_dim``."""
    r = head_dim if rotary_dim is None else check_positive_int("rotary_dim", rotary_dim)
    if r > head_dim:
        raise ValueError(f"rotary_dim must be <= the head dim {head_dim}, got {r}")
    if r % 2:
        what = "rotary_dim" if rotary_dim is not None else "the head dim (last dim of q/k)"
        raise ValueError(f"{what} must be even (channels are rotated in pairs), got {r}")
    return r


def check_positions(positions: torch.Tensor, name: str = "positions") -> torch.Tensor:
    """A real (integer or floating), finite position tensor."""
    check_tensor(name, positions)
    if positions.dtype == torch.bool or positions.is_complex():
        raise TypeError(f"{name} must be a real integer or floating tensor, got dtype {positions.dtype}")
    check_finite(name, positions)
    return positions


def rope_angles(positions: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """``positions (...) x freqs (K,) -> angles (..., K)`` in float64 (``p * theta_k``)."""
    return positions.to(torch.float64)[..., None] * freqs.to(device=positions.device, dtype=torch.float64)


# ------------------------------------------------------------------ the rotation
def _check_angles(angles: torch.Tensor) -> None:
    if not _compiling() and not all_finite(angles):
        raise ValueError("the rotation angles (positions x frequencies x position_scale) are not finite: positions "
                         "are too large for these frequencies and this position scale")


def rotate(
    x: torch.Tensor, angles: torch.Tensor, layout: str = "half", scale: torch.Tensor | None = None,
    *, inplace: bool = False,
) -> torch.Tensor:
    """Rotate channel pairs of ``x (..., n, d)`` by ``angles`` (broadcastable to ``(..., n, K)``, ``2K <= d``).

    The low-level primitive under :func:`apply_rope` and the N-D variants: angles
    may come from any position map (1D, axial, mixed). ``scale`` (same shape as
    ``angles``) multiplies each rotated pair (xPos, YaRN's temperature). Computed
    in at least float32 and cast back to ``x.dtype``. With ``inplace=True`` the
    result is written into ``x`` and ``x`` is returned (no new memory: the fastest
    form when the unrotated values are not needed again).
    """
    check_choice("layout", layout, LAYOUTS)
    inplace = check_bool("inplace", inplace)
    if 2 * angles.shape[-1] > x.shape[-1]:
        raise ValueError(f"angles cover {2 * angles.shape[-1]} channels but x has only {x.shape[-1]}")
    try:
        grown = broadcast_shape(angles.shape[:-1], x.shape[:-1]) != x.shape[:-1]
    except RuntimeError:
        grown = True
    if grown:
        raise ValueError(f"angles of shape {tuple(angles.shape)} must broadcast to x's leading shape "
                         f"{tuple(x.shape[:-1])} (one angle set per token)")
    if not angles.requires_grad:
        _check_angles(angles)
    dt = compute_dtype(x.dtype)
    cos, sin = torch.cos(angles), torch.sin(angles)
    if scale is not None:
        cos, sin = cos * scale, sin * scale
    cos, sin = cos.to(dt), sin.to(dt)
    if inplace:
        _check_inplace("x", x, cos.requires_grad or sin.requires_grad)
    return _rotate_cast(x, cos, sin, layout, inplace)


#: Positions (``offset + n``) RoPE accepts without explicit positions: integers up to 2**53 are
#: exact in float64, in which the angles are computed. The angles set a tighter bound
#: (:data:`MAX_ANGLE`: about 2.25e9 positions at the usual largest frequency, 1).
MAX_POSITION = 2**53
#: The largest error (radians) RoPE lets a rotation angle have, against ``p * theta * s`` computed
#: exactly from the position ``p``, the float64 frequency ``theta`` in use and the position scale ``s``.
ANGLE_TOLERANCE = 1e-6
#: The largest ``|angle|`` (radians) RoPE accepts. An angle is made with at most three roundings to
#: float64 (the position, the product with ``theta``, the product with ``position_scale``), each
#: within ``2**-53`` of its result, so its error is at most ``(3 + 4e-16) * 2**-53 * |angle|``: below
#: ``ANGLE_TOLERANCE`` for ``|angle| <= ANGLE_TOLERANCE / (4 * 2**-53)`` (about 2.25e9). With the
#: largest frequency 1 (``base ** 0``, every base) that is positions up to 2.25e9; the cosines and
#: sines of accepted angles are then within 1e-6 of those of the exact angles, whatever the offset.
MAX_ANGLE = ANGLE_TOLERANCE / (4 * 2.0**-53)


def check_angle_precision(angles: torch.Tensor, name: str = "positions") -> None:
    """Refuse rotation angles beyond :data:`MAX_ANGLE`, whose float64 value may be off by more than
    :data:`ANGLE_TOLERANCE` (so that scores would depend on the absolute position, not only the relative one).

    Args:
        angles: float64 angles ``position x frequency x position_scale`` (any shape).
        name: the argument that set the positions (``"offset"``, ``"positions"``, ``"q_positions"``, ...).

    Raises:
        ValueError: naming ``name``, the largest angle and the bound. Non-finite angles are left to
            :func:`rotate`'s own check; skipped under ``torch.compile``.
    """
    check_tensor("angles", angles)
    if not isinstance(name, str):
        raise TypeError(f"name must be a str (the argument to name in the error), got {type(name).__name__}")
    if _compiling() or angles.numel() == 0:
        return
    top = float(angles.detach().abs().amax())
    if math.isfinite(top) and top > MAX_ANGLE:
        raise _precision_error(name, top)


def _precision_error(name: str, top: float) -> ValueError:
    """The error of :func:`check_angle_precision` for angles up to ``top`` set by argument ``name``."""
    return ValueError(
        f"{name}: the positions are too far from 0 for RoPE's precision: they give rotation angles (position x "
        f"frequency x position_scale) up to {top:.4g} rad, beyond {MAX_ANGLE:.4g} rad, where the float64 angle may "
        f"be off by more than {ANGLE_TOLERANCE:g} rad and the scores would change with the absolute position (with "
        f"the largest frequency 1: positions must stay within +-{MAX_ANGLE:.4g}). RoPE depends only on position "
        "differences: shift the positions towards 0 (e.g. subtract the first)"
    )


def _check_offset(offset, n: int = 0) -> int:
    """``offset`` (the first default position) as an int in ``[0, 2**53 - n]``."""
    if isinstance(offset, torch.Tensor) or isinstance(offset, bool) or not isinstance(offset, int):
        raise TypeError(f"offset must be an int (the position of the first key), got {type(offset).__name__}")
    if offset < 0:
        raise ValueError(f"offset must be >= 0, got {offset}")
    if offset + n > MAX_POSITION:
        raise ValueError(f"offset must be at most 2**53 - n = {MAX_POSITION - n} for n = {n} positions (larger "
                         f"positions are not exact in float64, in which the angles are computed), got {offset}")
    return offset


def _default_positions(positions: torch.Tensor | None, n: int, device, offset: int = 0) -> torch.Tensor:
    if positions is None:
        return torch.arange(offset, offset + n, device=device)
    return check_positions(positions)


def _check_x(name: str, x: torch.Tensor) -> None:
    check_tensor(name, x)
    check_has_data(name, x)
    if x.dim() < 2:
        raise ValueError(f"{name} must have shape (..., n, d), got {tuple(x.shape)}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")


def _check_broadcast(name: str, positions: torch.Tensor, lead: torch.Size) -> None:
    try:
        shape = broadcast_shape(positions.shape, lead)
    except RuntimeError:
        shape = None
    if shape != lead:
        raise ValueError(
            f"{name} must broadcast to the input's leading shape {tuple(lead)} (one position per token), "
            f"got {tuple(positions.shape)}; for per-sample positions of (B, H, n, d) inputs pass (B, 1, n)"
        )


def _check_freqs(freqs, head_dim: int) -> torch.Tensor:
    check_tensor("freqs", freqs)
    if freqs.dim() != 1 or freqs.shape[0] == 0 or 2 * freqs.shape[0] > head_dim:
        raise ValueError(f"freqs must have shape (K,) with 0 < 2K <= {head_dim} (the head dim), got {tuple(freqs.shape)}")
    if not freqs.is_floating_point():
        raise TypeError(f"freqs must be a floating-point tensor, got dtype {freqs.dtype}")
    check_finite("freqs", freqs)
    return freqs


def apply_rope(
    x: torch.Tensor,
    positions: torch.Tensor | None = None,
    *,
    base: float = 10000.0,
    rotary_dim: int | None = None,
    layout: str = "half",
    freqs: torch.Tensor | None = None,
    offset: int = 0,
    inplace: bool = False,
) -> torch.Tensor:
    """Rotate ``x (..., n, d)`` by its positions: ``(..., n, d) -> (..., n, d)``.

    Args:
        x: queries or keys, any leading dims (e.g. ``(B, H, n, d)``).
        positions: integer or continuous positions broadcastable to ``x.shape[:-1]``
            (``(n,)``, or ``(B, 1, n)`` per sample for ``(B, H, n, d)``); default
            ``offset .. offset + n - 1``.
        base: the wavelength base of ``theta_i`` (10000 in RoFormer).
        rotary_dim: rotate only the first ``rotary_dim`` channels (even, ``<= d``;
            default all); the rest pass through unchanged.
        layout: ``"half"`` or ``"interleaved"`` pairs (see the module docstring).
        freqs: explicit ``(rotary_dim / 2,)`` frequencies (e.g. from
            :mod:`posenc.attention.relative.rope_scaling`); overrides ``base``.
        offset: position of the first token when ``positions`` is None (decoding with a cache).
        inplace: write the result into ``x`` and return it (no new memory; refused
            for a leaf tensor that requires grad, or a view autograd cannot follow).
    """
    _check_x("x", x)
    check_choice("layout", layout, LAYOUTS)
    offset = _check_offset(offset, x.shape[-2])
    if freqs is None:
        r = check_rotary_dim(x.shape[-1], rotary_dim)
        freqs = rope_frequencies(r, base, device=x.device)
    else:
        _check_freqs(freqs, x.shape[-1])
    if positions is not None and offset:
        raise ValueError("offset shifts the default positions: pass positions or offset, not both")
    pos = _default_positions(positions, x.shape[-2], x.device, offset)
    _check_broadcast("positions", pos, x.shape[:-1])
    angles = rope_angles(pos, freqs)
    check_angle_precision(angles, "positions" if positions is not None or not offset else "offset")
    return rotate(x, angles, layout, inplace=inplace)


def _resolve_qk_positions(n_q: int, n_k: int, q_positions, k_positions, offset, device):
    """Positions of queries and keys: keys ``offset..offset+n_k-1``, queries aligned to the end of the keys."""
    if offset is not None:
        offset = _check_offset(offset, n_k)
        if q_positions is not None or k_positions is not None:
            raise ValueError("offset shifts the default positions: pass positions or offset, not both")
    off = offset or 0
    if q_positions is not None:
        check_positions(q_positions, "q_positions")
    if k_positions is not None:
        check_positions(k_positions, "k_positions")
    if q_positions is None and k_positions is None:
        if n_q > n_k:
            raise ValueError(f"q has more positions ({n_q}) than k ({n_k}): queries are aligned to the end of the keys "
                             "(a KV cache); pass q_positions and k_positions explicitly")
        pk = torch.arange(off, off + n_k, device=device)
        return pk[n_k - n_q:], pk
    if k_positions is None:
        k_positions = q_positions if n_q == n_k else torch.arange(n_k, device=device)
    if q_positions is None:
        if n_q == n_k:
            q_positions = k_positions
        elif n_q < n_k and k_positions.dim() > 0 and k_positions.shape[-1] == n_k:
            q_positions = k_positions[..., n_k - n_q:]
        else:
            raise ValueError(f"cannot align {n_q} queries to the keys' positions of shape {tuple(k_positions.shape)}: "
                             "pass q_positions")
    return q_positions, k_positions


def apply_rope_qk(
    q: torch.Tensor,
    k: torch.Tensor,
    q_positions: torch.Tensor | None = None,
    k_positions: torch.Tensor | None = None,
    *,
    base: float = 10000.0,
    rotary_dim: int | None = None,
    layout: str = "half",
    freqs: torch.Tensor | None = None,
    position_scale: float = 1.0,
    attention_factor: float = 1.0,
    xpos_scale_base: float | None = None,
    xpos_gamma: float = 0.4,
    xpos_center: float | None = None,
    offset: int | None = None,
    inplace: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate queries and keys: ``q (..., n_q, d), k (..., n_k, d) -> (q', k')``.

    Args:
        q, k: with the same head dim ``d``.
        q_positions, k_positions: as in :func:`apply_rope`. Without either, keys sit at
            ``offset .. offset + n_k - 1`` and the ``n_q <= n_k`` queries at the **end** of the
            keys (a decode step: ``q`` holds the newest tokens, ``k`` the whole cache). When
            only one is given and ``n_q == n_k`` the other uses it too.
        base, rotary_dim, layout, freqs: as in :func:`apply_rope`.
        position_scale: positions are multiplied by this (linear position
            interpolation uses ``trained / target`` length).
        attention_factor: multiplies both q and k's rotated channels (YaRN's
            ``sqrt(1/t)``); the logits scale by its square.
        xpos_scale_base: enable xPos with this scale base (512 in the paper); None = plain RoPE.
        xpos_gamma: xPos's ``gamma`` (0.4).
        xpos_center: the position xPos's exponent is measured from. It cancels in every
            logit and keeps the scales in floating-point range; None (default) takes the
            middle of the key positions (:func:`xpos_default_center`; ``n // 2`` for keys
            ``0..n-1``, as rotary-embedding-torch and torchscale). Fix it (e.g. 0) when
            rotated keys are cached across calls, so every call uses the same centre.
        offset: position of the first key when no positions are given.
        inplace: write the results into ``q`` and ``k`` and return them (no new memory).

    Raises ``ValueError`` when the xPos scales leave the range of ``q``'s dtype.
    """
    _check_x("q", q)
    _check_x("k", k)
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must have the same head dim, got {q.shape[-1]} and {k.shape[-1]}")
    check_choice("layout", layout, LAYOUTS)
    inplace = check_bool("inplace", inplace)
    check_positive_float("position_scale", position_scale)
    check_positive_float("attention_factor", attention_factor)
    if freqs is None:
        freqs = rope_frequencies(check_rotary_dim(q.shape[-1], rotary_dim), base, device=q.device)
    else:
        _check_freqs(freqs, q.shape[-1])
    pq, pk = _resolve_qk_positions(q.shape[-2], k.shape[-2], q_positions, k_positions, offset, q.device)
    _check_broadcast("q_positions", pq, q.shape[:-1])
    _check_broadcast("k_positions", pk, k.shape[:-1])
    aq = rope_angles(pq, freqs) * position_scale
    ak = rope_angles(pk, freqs) * position_scale
    if q_positions is None and k_positions is None:
        name_q = name_k = "offset"
    else:
        name_q = "q_positions" if q_positions is not None else "k_positions"
        name_k = "k_positions" if k_positions is not None else "q_positions"
    check_angle_precision(ak, name_k)
    check_angle_precision(aq, name_q)
    sq = sk = None
    if xpos_scale_base is not None:
        xpos_scale_base = check_positive_float("xpos_scale_base", xpos_scale_base)
        check_positive_float("xpos_gamma", xpos_gamma)
        r = 2 * freqs.shape[0]
        if xpos_center is None:
            center = xpos_default_center(pk)
        else:
            center = check_finite_float("xpos_center", xpos_center)
        _check_xpos_range(pq, pk, center, r, xpos_scale_base, xpos_gamma, q.dtype)
        sq = xpos_scales(pq, r, scale_base=xpos_scale_base, gamma=xpos_gamma, center=center)
        sk = xpos_scales(pk, r, scale_base=xpos_scale_base, gamma=xpos_gamma, center=center).reciprocal()
    if attention_factor != 1.0:
        sq = torch.full_like(aq, attention_factor) if sq is None else sq * attention_factor
        sk = torch.full_like(ak, attention_factor) if sk is None else sk * attention_factor
    if inplace:
        _check_qk_inplace(q, k)
    return rotate(q, aq, layout, sq, inplace=inplace), rotate(k, ak, layout, sk, inplace=inplace)


def check_finite_float(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} ({value!r})")
    if not math.isfinite(float(value)):
        raise ValueError(f"{name} must be finite, got {value}")
    return float(value)


def layout_permutation(rotary_dim: int, source: str = "interleaved", target: str = "half") -> torch.Tensor:
    """Channel index ``perm`` with ``x_target = x_source[..., perm]`` (first ``rotary_dim`` channels).

    Interleaved pair ``i`` is channels ``(2i, 2i+1)``; half-split pair ``i`` is
    ``(i, i + r/2)``. So interleaved -> half is ``[0, 2, 4, ..., 1, 3, 5, ...]``.
    Applying RoPE commutes with the permutation: ``rope_half(x[perm]) == rope_inter(x)[perm]``.
    """
    check_choice("source", source, LAYOUTS)
    check_choice("target", target, LAYOUTS)
    r = check_positive_int("rotary_dim", rotary_dim)
    if r % 2:
        raise ValueError(f"rotary_dim must be even, got {r}")
    ident = torch.arange(r)
    if source == target:
        return ident
    to_half = torch.cat((ident[0::2], ident[1::2]))
    return to_half if target == "half" else torch.argsort(to_half)


def convert_rope_layout(
    weight: torch.Tensor, num_heads: int, *, source: str = "interleaved", target: str = "half",
    rotary_dim: int | None = None,
) -> torch.Tensor:
    """Permute the output rows of a q or k projection between RoPE layouts.

    Args:
        weight: ``(num_heads * head_dim, ...)`` (a Linear weight or bias).
        num_heads: heads in the projection.
        source, target: layouts; rows of every head are permuted the same way.
        rotary_dim: rotated channels per head (default the head dim); the rest keep their place.

    Returns:
        The permuted copy: ``rope_target(W_new x) == permute(rope_source(W x))``, so
        ``q . k`` — and hence attention — is unchanged.
    """
    check_tensor("weight", weight)
    check_positive_int("num_heads", num_heads)
    if weight.dim() == 0 or weight.shape[0] % num_heads:
        raise ValueError(f"weight's first dim must be num_heads * head_dim, got {tuple(weight.shape)} for {num_heads} heads")
    hd = weight.shape[0] // num_heads
    r = check_rotary_dim(hd, rotary_dim)
    perm = torch.cat((layout_permutation(r, source, target), torch.arange(r, hd)))
    w = weight.unflatten(0, (num_heads, hd))
    return w[:, perm.to(weight.device)].flatten(0, 1).clone()


#: Rows of the cos/sin table a :class:`RotaryEmbedding` builds at construction.
DEFAULT_MAX_SEQ_LEN = 2048
#: Beyond ``max_seq_len`` the table grows on demand up to this many angles (rows x rotary_dim/2:
#: 32 MiB of float32 cos and sin); farther positions (a decode step at offset 10**6) get only
#: the rows they need, computed as the table computes them (the same values).
TABLE_GROWTH_ANGLES = 2**22


def rope_table_bytes(rows: int, rotary_dim: int, dtype_bytes: int = 4) -> float:
    """Peak bytes of building a RoPE cos/sin table of ``rows`` positions: the float64 angles,
    their cosines and sines, and the two tables in the compute dtype."""
    angles = float(rows) * (rotary_dim // 2)
    return angles * (3 * 8.0 + 2 * dtype_bytes)


class RotaryEmbedding(nn.Module):
    """RoPE (optionally xPos) for queries and keys, with a pre-sized cos/sin table.

    ``q (..., n_q, d), k (..., n_k, d) -> (q', k')``. For token positions (the
    common case, and decoding with ``offset=``) the cosines and sines come from a
    table built at construction for ``max_seq_len`` positions (the attention factor
    folded in), so a compiled model reads slices of one buffer and does not
    recompile for each new length; a longer sequence grows the table (doubling).
    Explicit or continuous positions and xPos are computed directly.

    Args:
        head_dim: ``d`` of q and k.
        rotary_dim: rotated channels (even, ``<= head_dim``; default all).
        base: wavelength base (10000).
        layout: ``"half"`` or ``"interleaved"``.
        xpos_scale_base: enable xPos (512 in Sun et al.); None = plain RoPE.
        xpos_gamma: xPos's ``gamma`` (0.4).
        xpos_center: where xPos's exponent is measured from; None (default) = the middle
            of each call's key positions (see :func:`apply_rope_qk`). Fix it (e.g. 0)
            when rotated keys are cached across calls.
        scaling: a :class:`~posenc.attention.relative.rope_scaling.RopeScaling` for context
            extension (position interpolation, NTK, dynamic NTK, YaRN, Llama 3, LongRoPE);
            change it later with :meth:`set_scaling`.
        max_seq_len: positions the table covers from the start (2048); None = grow on demand.
        device: of the table.

    Attributes:
        freqs: the ``(rotary_dim/2,)`` float64 inverse frequencies in use (for a
            length-dependent scaling, those of sequences up to its trained length);
            a copy: the table is built from the module's own, which change only
            through :meth:`set_scaling` (so no write can leave the table stale).
        position_scale: the factor positions are multiplied by (position interpolation; else 1).
        attention_factor: the factor q and k are multiplied by (YaRN, LongRoPE; else 1).
        base, scaling: may be reassigned: the frequencies and the table are rebuilt, so the
            module computes what a new one built with the new value computes. ``layout`` and
            ``max_seq_len`` may be reassigned too (checked); ``head_dim`` and ``rotary_dim``
            are fixed (the table's width): assigning them raises
            :class:`~posenc.attention.relative._settings.ReadOnlySettingError`.

    Precision: every angle is refused beyond :data:`MAX_ANGLE` (about 2.25e9 rad: positions up to
    2.25e9 at the largest frequency 1), so that it is within :data:`ANGLE_TOLERANCE` (1e-6 rad) of
    the exact ``p * theta * position_scale``; a ``ValueError`` names ``offset`` or the positions.
    """

    head_dim = fixed_setting("head_dim", "q and k are checked against it and rotary_dim is derived from it")
    rotary_dim = fixed_setting("rotary_dim", "the frequencies and the cos/sin table have rotary_dim / 2 columns")

    @property
    def freqs(self) -> torch.Tensor:
        return self._freqs.clone()

    @property
    def base(self) -> float:
        """The wavelength base; assigning it rebuilds the frequencies and the table."""
        return self._base

    @base.setter
    def base(self, value: float) -> None:
        value = check_positive_float("base", value)
        if value <= 1.0:
            raise ValueError(f"base must be > 1, got {value}")
        old = self._base
        self._base = value
        try:
            self.set_scaling(self._scaling)
        except Exception:
            self._base = old
            raise

    @property
    def scaling(self):
        """The :class:`RopeScaling` in use (or None); assigning it is :meth:`set_scaling`."""
        return self._scaling

    @scaling.setter
    def scaling(self, value) -> None:
        self.set_scaling(value)

    @property
    def layout(self) -> str:
        """``"half"`` or ``"interleaved"`` (checked when assigned)."""
        return self._layout

    @layout.setter
    def layout(self, value: str) -> None:
        self._layout = check_choice("layout", value, LAYOUTS)

    @property
    def max_seq_len(self) -> int | None:
        """Rows the table covers without growing (checked when assigned, as at construction)."""
        return self._max_seq_len

    @max_seq_len.setter
    def max_seq_len(self, value: int | None) -> None:
        value = None if value is None else check_positive_int("max_seq_len", value)
        if value is not None:
            check_footprint(rope_table_bytes(value, self.rotary_dim), f"max_seq_len={value}",
                            f"the RoPE cos/sin table of {self.rotary_dim // 2} frequencies")
        self._max_seq_len = value

    @property
    def position_scale(self) -> float:
        return self._position_scale

    @property
    def attention_factor(self) -> float:
        return self._attention_factor

    def __init__(
        self,
        head_dim: int,
        *,
        rotary_dim: int | None = None,
        base: float = 10000.0,
        layout: str = "half",
        xpos_scale_base: float | None = None,
        xpos_gamma: float = 0.4,
        xpos_center: float | None = None,
        scaling=None,
        max_seq_len: int | None = DEFAULT_MAX_SEQ_LEN,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        self._head_dim = check_positive_int("head_dim", head_dim)
        self._rotary_dim = check_rotary_dim(head_dim, rotary_dim)
        self._base = check_positive_float("base", base)
        if self._base <= 1.0:
            raise ValueError(f"base must be > 1, got {base}")
        self.layout = layout
        self.xpos_scale_base = None if xpos_scale_base is None else check_positive_float("xpos_scale_base", xpos_scale_base)
        self.xpos_gamma = check_positive_float("xpos_gamma", xpos_gamma)
        self.xpos_center = None if xpos_center is None else check_finite_float("xpos_center", xpos_center)
        self.max_seq_len = max_seq_len
        self.register_buffer("_cos", torch.empty(0, self.rotary_dim // 2, device=device), persistent=False)
        self.register_buffer("_sin", torch.empty(0, self.rotary_dim // 2, device=device), persistent=False)
        self._scaling = None
        self.set_scaling(scaling)

    @classmethod
    def from_hf_config(cls, config, *, layer_type: str | None = None, head_dim_key: str = "head_dim",
                       layout: str = "half", max_seq_len: int | None = DEFAULT_MAX_SEQ_LEN,
                       device=None) -> RotaryEmbedding:
        """The RoPE of a Hugging Face model config (``config.json`` as a dict, or a ``PretrainedConfig``).

        Reads ``rope_theta``, ``rope_scaling`` or ``rope_parameters`` (rope types ``default``,
        ``linear``, ``dynamic``, ``yarn``, ``llama3``, ``longrope`` (also under its old name
        ``su``), ``proportional``), ``max_position_embeddings``, ``original_max_position_embeddings``,
        ``head_dim`` (or ``hidden_size / num_attention_heads``) and ``partial_rotary_factor``, and
        gives the inverse frequencies (:attr:`freqs`) and attention factor HF computes (HF
        evaluates them in float32, posenc in float64). ``layer_type`` picks one entry of
        per-layer rope parameters (e.g. Gemma 3's ``"sliding_attention"``); ``head_dim_key`` the
        field holding the head dim (Gemma 4's global layers: ``"global_head_dim"``). ``layout``:
        HF's LLaMA-family models rotate half-split pairs. Values HF would silently reinterpret
        (``truncate: "false"``, ``beta_fast: 0``) are refused. See
        :func:`posenc.attention.relative.rope_hf.rope_from_hf_config`.
        """
        spec = rope_from_hf_config(config, layer_type=layer_type, head_dim_key=head_dim_key)
        return cls(spec["head_dim"], rotary_dim=spec["rotary_dim"], base=spec["base"], layout=layout,
                   scaling=spec["scaling"], max_seq_len=max_seq_len, device=device)

    def set_scaling(self, scaling) -> None:
        """Use ``scaling`` (a :class:`RopeScaling` or None) from now on; rebuilds the table."""
        if scaling is not None and not isinstance(scaling, RopeScaling):
            raise TypeError(f"scaling must be a RopeScaling or None, got {type(scaling).__name__}")
        if scaling is not None and scaling.kind in ("ntk", "dynamic") and self.rotary_dim < 4:
            raise ValueError(f"{scaling.kind} scaling needs rotary_dim >= 4, got {self.rotary_dim}")
        freqs, position_scale, attention_factor = self._frequencies(scaling, None)
        self._scaling = scaling
        self._freqs, self._position_scale, self._attention_factor = freqs, position_scale, attention_factor
        # the largest angular speed (radians per position) of the table: refuses offsets beyond MAX_ANGLE
        self._top_speed = float(freqs.abs().max()) * position_scale
        size = self._cos.shape[0] or (self.max_seq_len or 0)
        dt = torch.float64 if self._cos.dtype == torch.float64 else torch.float32
        self._cos, self._sin = self._build_table(size, self._cos.device, dt)

    def _frequencies(self, scaling, length: int | None) -> tuple[torch.Tensor, float, float]:
        """``(freqs float64 on the CPU, position_scale, attention_factor)`` for sequences of ``length``."""
        if scaling is None:
            return rope_frequencies(self.rotary_dim, self.base), 1.0, 1.0
        return scaling.frequencies(self.rotary_dim, self.base, length)

    def _build_table(self, size: int, device, dtype, start: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """cos/sin of positions ``start .. start + size - 1`` (each row as the full table holds it)."""
        ang = rope_angles(torch.arange(start, start + size, device=device), self._freqs)
        if self._position_scale != 1.0:  # (x * 1.0 is x: skipped, as is a fresh temporary for it)
            ang.mul_(self._position_scale)
        _check_angles(ang)
        if self._attention_factor == 1.0 and dtype != ang.dtype:
            # each of cos and sin made in one float64 buffer and cast into its table: a first call in a
            # process touches the angles, that buffer and the tables (6 MiB at n = 8,192, was 10 MiB)
            cos, sin = ang.new_empty(ang.shape, dtype=dtype), ang.new_empty(ang.shape, dtype=dtype)
            tmp = torch.cos(ang)
            cos.copy_(tmp)
            sin.copy_(torch.sin(ang, out=tmp))
            return cos, sin
        cos, sin = torch.cos(ang), torch.sin(ang)
        if self._attention_factor != 1.0:
            cos, sin = cos * self._attention_factor, sin * self._attention_factor
        return cos.to(dtype), sin.to(dtype)

    def _apply(self, fn, recurse: bool = True):
        # .to() / .double() / .half() move or cast the table: rebuild it there from the float64
        # angles (a cast of float32 values would lose precision; half inputs compute in float32)
        super()._apply(fn, recurse)
        dt = torch.float64 if self._cos.dtype == torch.float64 else torch.float32
        if self._cos.dtype != dt or self._cos.shape[0]:
            self._cos, self._sin = self._build_table(self._cos.shape[0], self._cos.device, dt)
        return self

    def _rows(self, start: int, end: int, device, dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows ``start .. end - 1`` of the cos/sin table, from the table while it reaches there (growing
        it up to ``max(max_seq_len, TABLE_GROWTH_ANGLES / (rotary_dim / 2))`` rows, or to a few times
        the rows asked for); else computed alone, as the table computes them (the same values)."""
        rows = self._cos.shape[0]
        same = self._cos.device == torch.device(device) and self._cos.dtype == dtype
        if same and end <= rows:
            return self._cos[start:end], self._sin[start:end]
        limit = max(self.max_seq_len or 0, TABLE_GROWTH_ANGLES // (self.rotary_dim // 2), 4 * (end - start))
        if end <= limit:
            size = max(end, min(2 * rows, limit) if same else rows)
            self._cos, self._sin = self._build_table(size, device, dtype)
            return self._cos[start:end], self._sin[start:end]
        return self._build_table(end - start, device, dtype, start=start)

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        q_positions: torch.Tensor | None = None,
        k_positions: torch.Tensor | None = None,
        *,
        offset: int | None = None,
        inplace: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotate ``q`` and ``k`` (positions as in :func:`apply_rope_qk`).

        Without positions, keys sit at ``offset .. offset + n_k - 1`` (``offset`` default 0)
        and the ``n_q <= n_k`` queries at the end of the keys: ``rope(q_new, k_cache)``
        rotates the newest queries at their true positions. With ``inplace=True`` the
        results are written into ``q`` and ``k`` (which are returned): no new memory.
        """
        _check_x("q", q)
        _check_x("k", k)
        inplace = check_bool("inplace", inplace)
        for name, t in (("q", q), ("k", k)):
            if t.shape[-1] != self.head_dim:
                raise ValueError(f"{name} must have head dim {self.head_dim} (last dim), got {t.shape[-1]}")
        n_q, n_k = q.shape[-2], k.shape[-2]
        if q_positions is None and k_positions is None:
            off = 0 if offset is None else _check_offset(offset, n_k)
            if n_q > n_k:
                raise ValueError(f"q has more positions ({n_q}) than k ({n_k}): queries are aligned to the end of "
                                 "the keys (a KV cache); pass q_positions and k_positions explicitly")
            end = off + n_k
            long = self.scaling is not None and self.scaling.length_dependent and end > self.scaling.trained_length
            if self.xpos_scale_base is None and not long:
                if (end - 1) * self._top_speed > MAX_ANGLE:
                    raise _precision_error("offset", (end - 1) * self._top_speed)
                # q and k are each rotated at their own precision (a float64 key cache stays float64): the table
                # is built in the wider of the two and cast for the other (the values a table of it would hold)
                dq, dk = compute_dtype(q.dtype), compute_dtype(k.dtype)
                cos, sin = self._rows(off, end, q.device, torch.promote_types(dq, dk))
                if inplace:
                    _check_qk_inplace(q, k)
                cq, sq = cos[n_k - n_q:].to(dq), sin[n_k - n_q:].to(dq)
                return (_rotate_cast(q, cq, sq, self.layout, inplace),
                        _rotate_cast(k, cos.to(dk), sin.to(dk), self.layout, inplace))
            pq = pk = None
            offset, length = off, end
        else:
            if offset is not None:
                raise ValueError("offset shifts the default positions: pass positions or offset, not both")
            pq, pk, length = q_positions, k_positions, None
            if self.scaling is not None and self.scaling.length_dependent and not _compiling():
                p_q, p_k = _resolve_qk_positions(n_q, n_k, pq, pk, offset, q.device)
                length = int(max(float(p_q.amax()), float(p_k.amax()))) + 1
        freqs, position_scale, factor = self._freqs, self._position_scale, self._attention_factor
        if length is not None and self.scaling is not None and self.scaling.length_dependent:
            freqs, position_scale, factor = self._frequencies(self.scaling, max(length, 1))
        return apply_rope_qk(
            q, k, pq, pk, rotary_dim=self.rotary_dim, layout=self.layout,
            freqs=freqs.to(q.device), position_scale=position_scale,
            attention_factor=factor, xpos_scale_base=self.xpos_scale_base,
            xpos_gamma=self.xpos_gamma, xpos_center=self.xpos_center,
            offset=offset if pq is None and pk is None else None, inplace=inplace,
        )

    def extra_repr(self) -> str:
        s = f"head_dim={self.head_dim}, rotary_dim={self.rotary_dim}, base={self.base:g}, layout={self.layout!r}"
        if self.xpos_scale_base is not None:
            s += f", xpos_scale_base={self.xpos_scale_base:g}, xpos_gamma={self.xpos_gamma:g}"
            s += f", xpos_center={'auto' if self.xpos_center is None else f'{self.xpos_center:g}'}"
        if self.scaling is not None:
            s += f", scaling={self.scaling}"
        s += f", max_seq_len={self.max_seq_len}"
        return s
