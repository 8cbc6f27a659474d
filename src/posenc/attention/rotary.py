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

Precision: angles are computed in float64 and only the cosines and sines are
cast to the compute dtype (at least float32), so position 100,000 is rotated as
accurately as position 10 (``p * theta`` in float32 loses ~1e-2 rad there).
"""

from __future__ import annotations

import itertools
import math

import torch
from torch import nn

from posenc._checks import _compiling, check_bool, check_choice, check_finite, check_positive_float, check_positive_int, check_tensor
from posenc.encodings.base import compute_dtype

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


def _rotate_functional(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str) -> torch.Tensor:
    """Plain tensor expressions (differentiable in every argument; what torch.compile fuses)."""
    K = cos.shape[-1]
    r = 2 * K
    xr, rest = x[..., :r], x[..., r:]
    if layout == "half":
        x1, x2 = xr[..., :K], xr[..., K:]
        out = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
    else:
        pairs = xr.unflatten(-1, (K, 2))
        x1, x2 = pairs[..., 0], pairs[..., 1]
        out = torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)
    return out if rest.shape[-1] == 0 else torch.cat((out, rest), dim=-1)


def _complex_ok(t: torch.Tensor) -> bool:
    return t.stride(-1) == 1 and all(st % 2 == 0 for st in t.stride()[:-1]) and t.storage_offset() % 2 == 0


#: Bytes of ``x`` handled per block by the half-split kernels on the CPU: the block, its
#: output and the scratch copy stay in cache between the passes over it. Accelerators
#: take the whole tensor in one block (there, each block would cost kernel launches).
BLOCK_BYTES = 1 << 20


def _block_bytes(x: torch.Tensor) -> int:
    return BLOCK_BYTES if x.device.type == "cpu" else x.numel() * x.element_size()


def _blocks(shape: torch.Size, row_bytes: int, target: int | None = None) -> list[tuple]:
    """Index tuples cutting a tensor of leading ``shape`` (rows of ``row_bytes``) into blocks of ~``target`` bytes.

    Trailing leading-dims are kept whole as long as they fit; the next one is cut into
    runs; the ones before it are iterated. Every row is covered exactly once.
    ``target`` defaults to :data:`BLOCK_BYTES` (read at call time).
    """
    target = BLOCK_BYTES if target is None else target
    inner, j = 1, len(shape)
    while j > 0 and inner * shape[j - 1] * row_bytes <= target:
        inner *= shape[j - 1]
        j -= 1
    if j == 0:
        return [()]
    step = max(1, target // (inner * row_bytes))
    return [idx + (slice(s, s + step),)
            for idx in itertools.product(*map(range, shape[: j - 1]))
            for s in range(0, shape[j - 1], step)]


def _half_tables(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
    """``[cos, cos]``, ``-sin`` and ``sin`` expanded (views) to ``x``'s leading shape."""
    K = cos.shape[-1]
    lead = x.shape[:-1]
    c2 = torch.cat((cos, cos), dim=-1).expand(lead + (2 * K,))
    return c2, (-sin).expand(lead + (K,)), sin.expand(lead + (K,))


def _rotate_into(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str,
                 out: torch.Tensor) -> torch.Tensor:
    """Write the rotation of ``x`` into ``out`` with few passes over memory (no autograd).

    ``out`` may be ``x`` itself (in place). Interleaved pairs are one complex
    multiplication (read ``x`` once, write ``out`` once). Half-split pairs are
    ``out = x * [cos, cos]`` then one multiply-add per half, done block by block so
    that the later passes hit the cache; in place, each block is first copied to a
    small scratch buffer.
    """
    K = cos.shape[-1]
    r = 2 * K
    inplace = out is x
    if layout == "interleaved" and x.dtype in (torch.float32, torch.float64) and _complex_ok(x) and _complex_ok(out):
        xc = torch.view_as_complex(x[..., :r].unflatten(-1, (K, 2)))
        oc = xc if inplace else torch.view_as_complex(out[..., :r].unflatten(-1, (K, 2)))
        torch.mul(xc, torch.complex(cos, sin), out=oc)
    elif layout == "interleaved":
        out[..., :r].copy_(_rotate_functional(x[..., :r], cos, sin, layout))
    else:
        c2, nsin, psin = _half_tables(x, cos, sin)
        scratch = None
        for idx in _blocks(x.shape[:-1], x.shape[-1] * x.element_size(), _block_bytes(x)):
            xb, ob = x[idx][..., :r], out[idx][..., :r]
            if inplace:
                if scratch is None or scratch.numel() < xb.numel():
                    scratch = torch.empty(xb.numel(), dtype=x.dtype, device=x.device)
                xb = scratch[: xb.numel()].view(xb.shape).copy_(xb)
            torch.mul(xb, c2[idx], out=ob)
            ob[..., :K].addcmul_(xb[..., K:], nsin[idx])
            ob[..., K:].addcmul_(xb[..., :K], psin[idx])
    if r < x.shape[-1] and not inplace:
        out[..., r:].copy_(x[..., r:])
    return out


class _Rotate(torch.autograd.Function):
    """Rotation by fixed angles; backward rotates the gradient back (``R^T = R(-angle)``)."""

    @staticmethod
    def forward(ctx, x, cos, sin, layout, inplace):  # type: ignore[override]
        ctx.save_for_backward(cos, sin)
        ctx.layout = layout
        if inplace:
            ctx.mark_dirty(x)
            return _rotate_into(x, cos, sin, layout, x)
        return _rotate_into(x, cos, sin, layout, torch.empty_like(x))

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        cos, sin = ctx.saved_tensors
        return _rotate_into(grad, cos, -sin, ctx.layout, torch.empty_like(grad)), None, None, None, None


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str, inplace: bool = False) -> torch.Tensor:
    """Rotate the first ``2 K`` channels of ``x (..., d)`` by ``cos, sin (..., K)``; the rest pass through.

    ``cos``/``sin`` must broadcast to ``x[..., :K]`` without growing it. Fast kernels
    write the result into a fresh tensor (or into ``x`` when ``inplace``); when the
    angles need gradients, or under ``torch.compile`` (which fuses the plain
    expressions itself), the plain expressions are used.
    """
    if _compiling() or cos.requires_grad or sin.requires_grad:
        if not inplace:
            return _rotate_functional(x, cos, sin, layout)
        # the angles' gradient reads the unrotated values: keep them when it is needed
        keep = torch.is_grad_enabled() and (cos.requires_grad or sin.requires_grad)
        return x.copy_(_rotate_functional(x.clone() if keep else x, cos, sin, layout))
    if torch.is_grad_enabled() and x.requires_grad:
        return _Rotate.apply(x, cos, sin, layout, inplace)
    return _rotate_into(x, cos, sin, layout, x if inplace else torch.empty_like(x))


def _rotate_cast(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str, inplace: bool) -> torch.Tensor:
    """:func:`_rotate` in the compute dtype of ``x`` (cos/sin already in it), cast back; in place writes ``x``."""
    dt = cos.dtype
    if not inplace:
        return _rotate(x.to(dt), cos, sin, layout).to(x.dtype)
    if x.dtype == dt:
        return _rotate(x, cos, sin, layout, inplace=True)
    return x.copy_(_rotate(x.to(dt), cos, sin, layout))


# ------------------------------------------------------------------ in-place safety
def _creation_meta(x: torch.Tensor):
    try:
        return torch._C._autograd._get_creation_meta(x)
    except (AttributeError, RuntimeError):  # private API: fall back to the autograd node's name
        return None


_MULTI_VIEW_NODES = ("UnbindBackward0", "SplitBackward0", "SplitWithSizesBackward0", "UnsafeSplitBackward0")


def _check_inplace(name: str, x: torch.Tensor, angles_need_grad: bool = False) -> None:
    """``inplace=True`` writes into ``x``: refuse the cases that cannot be written or that autograd cannot follow."""
    if any(st == 0 and sz > 1 for st, sz in zip(x.stride(), x.shape)):
        raise ValueError(f"inplace=True cannot write into {name}: it is an expanded tensor (several of its elements "
                         f"share memory); pass {name}.contiguous() or use inplace=False")
    if _compiling() or not (torch.is_grad_enabled() and x.requires_grad):
        return
    if x.is_leaf:
        raise ValueError(f"inplace=True cannot overwrite {name}: it is a leaf tensor that requires grad "
                         "(rotate a copy, or use inplace=False)")
    if x._is_view():
        base = x._base
        if base is not None and base.is_leaf:
            raise ValueError(f"inplace=True cannot overwrite {name}: it is a view of a leaf tensor that requires grad "
                             "(rotate a copy, or use inplace=False)")
        meta = _creation_meta(x)
        cm = getattr(getattr(torch._C, "_autograd", None), "CreationMeta", None)
        multi = (meta is not None and cm is not None and meta != cm.DEFAULT) or (
            meta is None and type(x.grad_fn).__name__ in _MULTI_VIEW_NODES)
        if multi:
            raise ValueError(f"inplace=True cannot overwrite {name}: it is a view returned by unbind()/split()/chunk() "
                             "(or made under no_grad), which autograd cannot follow when written in place; index "
                             "the tensor instead (e.g. qkv[0]), or use inplace=False")
    if angles_need_grad:
        raise ValueError(f"inplace=True cannot overwrite {name} while the angles require grad "
                         "(their gradient needs the unrotated values); use inplace=False")


def _in_difference_set(delta: int, dims: list[tuple[int, int]], budget: list[int]) -> bool:
    """Whether ``delta = sum_d c_d stride_d`` with ``|c_d| < size_d`` (dims sorted by stride, descending)."""
    if delta == 0:
        return True
    if not dims:
        return False
    budget[0] -= 1
    if budget[0] < 0:
        return True  # too hard to decide: assume they overlap
    (st, sz), rest = dims[0], dims[1:]
    reach = sum((s2 - 1) * st2 for st2, s2 in rest)
    lo, hi = max(-(sz - 1), -((reach - delta) // st)), min(sz - 1, (delta + reach) // st)
    return any(_in_difference_set(delta - c * st, rest, budget) for c in range(lo, hi + 1))


def _share_elements(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``a`` and ``b`` have an element in common (conservative when undecidable)."""
    if a.numel() == 0 or b.numel() == 0 or a.device != b.device:
        return False
    if a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr():
        return False
    if a.shape == b.shape and a.stride() == b.stride() and a.element_size() == b.element_size():
        dims = sorted(((abs(st), sz) for st, sz in zip(a.stride(), a.shape) if sz > 1 and st != 0), reverse=True)
        return _in_difference_set(b.storage_offset() - a.storage_offset(), dims, [10_000])

    def span(t):
        lo = t.storage_offset() + sum(min(0, (sz - 1) * st) for st, sz in zip(t.stride(), t.shape))
        hi = t.storage_offset() + sum(max(0, (sz - 1) * st) for st, sz in zip(t.stride(), t.shape))
        return lo * t.element_size(), (hi + 1) * t.element_size()

    (a0, a1), (b0, b1) = span(a), span(b)
    return a0 < b1 and b0 < a1


def _check_qk_inplace(q: torch.Tensor, k: torch.Tensor, angles_need_grad: bool = False) -> None:
    _check_inplace("q", q, angles_need_grad)
    _check_inplace("k", k, angles_need_grad)
    if not _compiling() and _share_elements(q, k):
        raise ValueError("inplace=True cannot rotate q and k when they share memory (q is k, or overlapping views): "
                         "the shared elements would be rotated twice; pass separate tensors or use inplace=False")


# ------------------------------------------------------------------ the rotation
def _check_angles(angles: torch.Tensor) -> None:
    if not _compiling() and not bool(torch.isfinite(angles).all()):
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
        grown = torch.broadcast_shapes(angles.shape[:-1], x.shape[:-1]) != x.shape[:-1]
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


def _check_offset(offset) -> int:
    if isinstance(offset, torch.Tensor) or isinstance(offset, bool) or not isinstance(offset, int):
        raise TypeError(f"offset must be an int (the position of the first key), got {type(offset).__name__}")
    if offset < 0:
        raise ValueError(f"offset must be >= 0, got {offset}")
    return offset


def _default_positions(positions: torch.Tensor | None, n: int, device, offset: int = 0) -> torch.Tensor:
    if positions is None:
        return torch.arange(offset, offset + n, device=device)
    return check_positions(positions)


def _check_x(name: str, x: torch.Tensor) -> None:
    check_tensor(name, x)
    if x.dim() < 2:
        raise ValueError(f"{name} must have shape (..., n, d), got {tuple(x.shape)}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")


def _check_broadcast(name: str, positions: torch.Tensor, lead: torch.Size) -> None:
    try:
        shape = torch.broadcast_shapes(positions.shape, lead)
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
            :mod:`posenc.attention.rope_scaling`); overrides ``base``.
        offset: position of the first token when ``positions`` is None (decoding with a cache).
        inplace: write the result into ``x`` and return it (no new memory; refused
            for a leaf tensor that requires grad, or a view autograd cannot follow).
    """
    _check_x("x", x)
    check_choice("layout", layout, LAYOUTS)
    offset = _check_offset(offset)
    if freqs is None:
        r = check_rotary_dim(x.shape[-1], rotary_dim)
        freqs = rope_frequencies(r, base, device=x.device)
    else:
        _check_freqs(freqs, x.shape[-1])
    if positions is not None and offset:
        raise ValueError("offset shifts the default positions: pass positions or offset, not both")
    pos = _default_positions(positions, x.shape[-2], x.device, offset)
    _check_broadcast("positions", pos, x.shape[:-1])
    return rotate(x, rope_angles(pos, freqs), layout, inplace=inplace)


# ------------------------------------------------------------------ xPos
def _xpos_zeta(rotary_dim: int, gamma: float, device=None) -> torch.Tensor:
    i = torch.arange(rotary_dim // 2, device=device, dtype=torch.float64)
    return (2.0 * i / rotary_dim + gamma) / (1.0 + gamma)


def xpos_scales(
    positions: torch.Tensor, rotary_dim: int, *, scale_base: float = 512.0, gamma: float = 0.4,
    center: float | torch.Tensor = 0.0,
) -> torch.Tensor:
    """xPos factors ``zeta_i ** ((p - center) / scale_base)``: ``(...) -> (..., rotary_dim/2)`` in float64.

    Queries use these factors, keys their reciprocals.
    """
    check_positive_float("scale_base", scale_base)
    check_positive_float("gamma", gamma)
    zeta = _xpos_zeta(rotary_dim, gamma, positions.device)
    c = center.to(device=positions.device, dtype=torch.float64) if isinstance(center, torch.Tensor) else center
    expo = (positions.to(torch.float64)[..., None] - c) / scale_base
    return torch.exp(expo * torch.log(zeta))


def xpos_default_center(k_positions: torch.Tensor) -> torch.Tensor:
    """The automatic xPos centre: the middle of the key positions, ``floor((min + max + 1) / 2)``.

    For keys ``0..n-1`` this is ``n // 2``, as rotary-embedding-torch (and torchscale, up to
    rounding) measure it. A 0-d float64 tensor (no host synchronisation).
    """
    p = k_positions.to(torch.float64)
    return torch.floor((p.amin() + p.amax() + 1.0) / 2.0)


def xpos_log_range(max_distance: float, rotary_dim: int, *, scale_base: float = 512.0, gamma: float = 0.4) -> float:
    """``max |ln zeta_i| * max_distance / scale_base``: the largest ``|ln|`` of an xPos factor at that distance."""
    zeta0 = gamma / (1.0 + gamma)  # the smallest zeta (pair 0)
    return abs(math.log(zeta0)) * max_distance / scale_base


def _check_xpos_range(pq: torch.Tensor, pk: torch.Tensor, center, rotary_dim: int, scale_base: float, gamma: float,
                      dtype: torch.dtype) -> None:
    """Refuse xPos scales (or their reciprocals) outside the normal range of ``dtype``."""
    if _compiling():
        return
    c = center if isinstance(center, torch.Tensor) else torch.tensor(float(center), dtype=torch.float64)
    c = c.to(torch.float64)
    dist = max(float((p.to(torch.float64) - c.to(p.device)).abs().amax()) for p in (pq, pk))
    e = xpos_log_range(dist, rotary_dim, scale_base=scale_base, gamma=gamma)
    limit = -math.log(torch.finfo(dtype).tiny)
    if e > limit:
        raise ValueError(
            f"xPos scales reach e^{e:.0f} (and e^-{e:.0f}) at {dist:.0f} positions from xpos_center={float(c):g}, beyond "
            f"the range of {dtype} (about e^+-{limit:.0f}): centre the positions (xpos_center), use a wider dtype "
            f"(float32: e^+-87, float64: e^+-708), a larger xpos_scale_base, or shorter sequences"
        )


def _resolve_qk_positions(n_q: int, n_k: int, q_positions, k_positions, offset, device):
    """Positions of queries and keys: keys ``offset..offset+n_k-1``, queries aligned to the end of the keys."""
    if offset is not None:
        offset = _check_offset(offset)
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
        scaling: a :class:`~posenc.attention.rope_scaling.RopeScaling` for context
            extension (position interpolation, NTK, dynamic NTK, YaRN, Llama 3, LongRoPE);
            change it later with :meth:`set_scaling`.
        max_seq_len: positions the table covers from the start (2048); None = grow on demand.
        device: of the table.

    Attributes:
        freqs: the ``(rotary_dim/2,)`` float64 inverse frequencies in use (for a
            length-dependent scaling, those of sequences up to its trained length).
        attention_factor: the factor q and k are multiplied by (YaRN, LongRoPE; else 1).
    """

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
        self.head_dim = check_positive_int("head_dim", head_dim)
        self.rotary_dim = check_rotary_dim(head_dim, rotary_dim)
        self.base = check_positive_float("base", base)
        if self.base <= 1.0:
            raise ValueError(f"base must be > 1, got {base}")
        self.layout = check_choice("layout", layout, LAYOUTS)
        self.xpos_scale_base = None if xpos_scale_base is None else check_positive_float("xpos_scale_base", xpos_scale_base)
        self.xpos_gamma = check_positive_float("xpos_gamma", xpos_gamma)
        self.xpos_center = None if xpos_center is None else check_finite_float("xpos_center", xpos_center)
        self.max_seq_len = None if max_seq_len is None else check_positive_int("max_seq_len", max_seq_len)
        self.register_buffer("_cos", torch.empty(0, self.rotary_dim // 2, device=device), persistent=False)
        self.register_buffer("_sin", torch.empty(0, self.rotary_dim // 2, device=device), persistent=False)
        self.scaling = None
        self.set_scaling(scaling)

    @classmethod
    def from_hf_config(cls, config, *, layer_type: str | None = None, layout: str = "half",
                       max_seq_len: int | None = DEFAULT_MAX_SEQ_LEN, device=None) -> RotaryEmbedding:
        """The RoPE of a Hugging Face model config (``config.json`` as a dict, or a ``PretrainedConfig``).

        Reads ``rope_theta``, ``rope_scaling`` or ``rope_parameters`` (rope types ``default``,
        ``linear``, ``dynamic``, ``yarn``, ``llama3``, ``longrope``), ``max_position_embeddings``,
        ``original_max_position_embeddings``, ``head_dim`` (or ``hidden_size / num_attention_heads``)
        and ``partial_rotary_factor``, and gives the inverse frequencies (:attr:`freqs`) and
        attention factor HF computes (HF evaluates them in float32, posenc in float64).
        ``layer_type`` picks one entry of per-layer rope parameters (e.g. Gemma 3's
        ``"sliding_attention"``). ``layout``: HF's LLaMA-family models rotate half-split pairs.
        See :func:`posenc.attention.rope_hf.rope_from_hf_config`.
        """
        from posenc.attention.rope_hf import rope_from_hf_config

        spec = rope_from_hf_config(config, layer_type=layer_type)
        return cls(spec["head_dim"], rotary_dim=spec["rotary_dim"], base=spec["base"], layout=layout,
                   scaling=spec["scaling"], max_seq_len=max_seq_len, device=device)

    def set_scaling(self, scaling) -> None:
        """Use ``scaling`` (a :class:`RopeScaling` or None) from now on; rebuilds the table."""
        from posenc.attention.rope_scaling import RopeScaling

        if scaling is not None and not isinstance(scaling, RopeScaling):
            raise TypeError(f"scaling must be a RopeScaling or None, got {type(scaling).__name__}")
        if scaling is not None and scaling.kind in ("ntk", "dynamic") and self.rotary_dim < 4:
            raise ValueError(f"{scaling.kind} scaling needs rotary_dim >= 4, got {self.rotary_dim}")
        freqs, position_scale, attention_factor = self._frequencies(scaling, None)
        self.scaling = scaling
        self.freqs, self.position_scale, self.attention_factor = freqs, position_scale, attention_factor
        size = self._cos.shape[0] or (self.max_seq_len or 0)
        dt = torch.float64 if self._cos.dtype == torch.float64 else torch.float32
        self._cos, self._sin = self._build_table(size, self._cos.device, dt)

    def _frequencies(self, scaling, length: int | None) -> tuple[torch.Tensor, float, float]:
        """``(freqs float64 on the CPU, position_scale, attention_factor)`` for sequences of ``length``."""
        if scaling is None:
            return rope_frequencies(self.rotary_dim, self.base), 1.0, 1.0
        return scaling.frequencies(self.rotary_dim, self.base, length)

    def _build_table(self, size: int, device, dtype) -> tuple[torch.Tensor, torch.Tensor]:
        ang = rope_angles(torch.arange(size, device=device), self.freqs) * self.position_scale
        _check_angles(ang)
        cos, sin = torch.cos(ang), torch.sin(ang)
        if self.attention_factor != 1.0:
            cos, sin = cos * self.attention_factor, sin * self.attention_factor
        return cos.to(dtype), sin.to(dtype)

    def _apply(self, fn, recurse: bool = True):
        # .to() / .double() / .half() move or cast the table: rebuild it there from the float64
        # angles (a cast of float32 values would lose precision; half inputs compute in float32)
        super()._apply(fn, recurse)
        dt = torch.float64 if self._cos.dtype == torch.float64 else torch.float32
        if self._cos.dtype != dt or self._cos.shape[0]:
            self._cos, self._sin = self._build_table(self._cos.shape[0], self._cos.device, dt)
        return self

    def _table(self, n: int, device, dtype) -> tuple[torch.Tensor, torch.Tensor]:
        if self._cos.shape[0] < n or self._cos.device != torch.device(device) or self._cos.dtype != dtype:
            size = max(n, self._cos.shape[0] if self._cos.shape[0] >= n else 2 * self._cos.shape[0])
            self._cos, self._sin = self._build_table(size, device, dtype)
        return self._cos, self._sin

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
            off = 0 if offset is None else _check_offset(offset)
            if n_q > n_k:
                raise ValueError(f"q has more positions ({n_q}) than k ({n_k}): queries are aligned to the end of "
                                 "the keys (a KV cache); pass q_positions and k_positions explicitly")
            end = off + n_k
            long = self.scaling is not None and self.scaling.length_dependent and end > self.scaling.trained_length
            if self.xpos_scale_base is None and not long:
                dt = compute_dtype(q.dtype)
                cos, sin = self._table(end, q.device, dt)
                if inplace:
                    _check_qk_inplace(q, k)
                return (_rotate_cast(q, cos[end - n_q: end], sin[end - n_q: end], self.layout, inplace),
                        _rotate_cast(k, cos[off:end], sin[off:end], self.layout, inplace))
            pq = pk = None
            offset, length = off, end
        else:
            if offset is not None:
                raise ValueError("offset shifts the default positions: pass positions or offset, not both")
            pq, pk, length = q_positions, k_positions, None
            if self.scaling is not None and self.scaling.length_dependent and not _compiling():
                p_q, p_k = _resolve_qk_positions(n_q, n_k, pq, pk, offset, q.device)
                length = int(max(float(p_q.amax()), float(p_k.amax()))) + 1
        freqs, position_scale, factor = self.freqs, self.position_scale, self.attention_factor
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
