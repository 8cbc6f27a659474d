"""The rotation kernels under RoPE: channel pairs rotated by fixed angles, fast and memory-frugal.

:func:`_rotate` rotates the first ``2 K`` channels of ``x (..., d)`` by ``cos, sin (..., K)``
in either layout (``"half"``: pairs ``(i, i + K)``; ``"interleaved"``: ``(2i, 2i + 1)``),
out of place or into ``x`` itself, with few passes over memory: the interleaved layout
is one complex multiplication; the half-split one runs block by block on the CPU so the
later passes hit the cache. Backward rotates the gradient back (``R^T = R(-angle)``).
Under ``torch.compile``, or when the angles need gradients, plain tensor expressions are
used instead (the compiler fuses them).

In place, the tensor written must be writable and followable by autograd:
:func:`_check_inplace` refuses expanded tensors, leaves (and views of leaves) that
require grad, and the views of ``unbind()`` / ``split()`` that autograd cannot follow;
:func:`_check_qk_inplace` refuses q and k that share elements (they would be rotated
twice). Shared by :mod:`posenc.attention.relative.rotary` and :mod:`posenc.attention.relative.rotary_nd`.
"""

from __future__ import annotations

import itertools

import torch

from posenc._checks import _compiling


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


