"""Learned relative-position biases: T5 buckets and clipped per-offset tables.

Both add a learned per-head scalar ``b_h[bucket(j - i)]`` to the attention logit
of query ``i`` and key ``j``; they differ in the bucketing of the offset:

* **clipped** (Shaw, Uszkoreit, Vaswani, NAACL 2018, as a scalar bias): every
  offset in ``[-D, D]`` has its own entry and farther offsets share the edge
  entries (``2 D + 1`` buckets; the causal half is all a causal model uses);
* **T5** (Raffel et al., JMLR 2020, Sec. 2.1): ``num_buckets`` buckets (32), half
  of them (per direction, if bidirectional) exact small offsets, the rest
  logarithmically spaced up to ``max_distance`` (128) and shared beyond it.
  The logarithm is evaluated in float32 and truncated, as in the T5 code, so
  bucket boundaries match checkpoints trained with it.

:class:`RelativePositionBias` holds the table and returns the ``(H, n_q, n_k)``
bias for SDPA; :func:`bias_score_mod` turns it into a FlexAttention ``score_mod``.
A learnable bias makes SDPA take its math path and keeps an ``H x n x n`` tensor
for backward: O(n²) memory (see ``benchmarks/bench_relative.py``).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from posenc._checks import _compiling, check_choice, check_finite, check_has_data, check_positive_int, check_tensor
from posenc._resources import check_footprint

KINDS = ("t5", "clipped")
#: Positions a bucketed bias accepts lie strictly within +-MAX_POSITION: offsets between them stay exact in int64.
MAX_POSITION = 2**62


def check_bucket_args(num_buckets: int, max_distance: int, bidirectional: bool) -> None:
    check_positive_int("num_buckets", num_buckets, minimum=2)
    check_positive_int("max_distance", max_distance)
    per_side = num_buckets // 2 if bidirectional else num_buckets
    if bidirectional and num_buckets % 2:
        raise ValueError(f"num_buckets must be even for bidirectional buckets, got {num_buckets}")
    exact = per_side // 2
    if exact < 1:
        raise ValueError(f"num_buckets must leave at least one exact bucket per direction, got {num_buckets}")
    if num_buckets >= max_distance:
        raise ValueError(
            f"num_buckets must be < max_distance (the log-spaced buckets need room), got "
            f"num_buckets={num_buckets}, max_distance={max_distance}"
        )


def t5_buckets(
    relative_position: torch.Tensor, *, bidirectional: bool = True, num_buckets: int = 32, max_distance: int = 128
) -> torch.Tensor:
    """T5's bucket of each offset ``j - i`` (key minus query): int64 in ``[0, num_buckets)``.

    Bidirectional: the upper half of the buckets holds positive offsets (keys after
    the query). Causal (``bidirectional=False``): positive offsets all map to bucket 0
    (they are masked anyway); ``-t`` is bucketed for ``t >= 0``.
    """
    check_tensor("relative_position", relative_position)
    if relative_position.is_floating_point() or relative_position.dtype == torch.bool:
        raise TypeError(f"relative_position must be an integer tensor, got dtype {relative_position.dtype}")
    check_bucket_args(num_buckets, max_distance, bidirectional)
    rel = relative_position.to(torch.int64)
    buckets = torch.zeros_like(rel)
    # -2**63 has no int64 negation: it is (by far) the largest distance
    lowest = rel == torch.iinfo(torch.int64).min
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (rel > 0).to(torch.int64) * num_buckets
        n = torch.where(lowest, torch.iinfo(torch.int64).max, rel.abs())
    else:
        n = torch.where(lowest, torch.iinfo(torch.int64).max, (-rel).clamp_min(0))
    max_exact = num_buckets // 2
    is_small = n < max_exact
    # log-spaced above max_exact, computed in float32 and truncated (as in the T5 code)
    large = max_exact + (
        torch.log(n.float().clamp_min(1.0) / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact)
    ).to(torch.int64)
    large = large.clamp_max(num_buckets - 1)
    return buckets + torch.where(is_small, n, large)


def clipped_buckets(relative_position: torch.Tensor, max_distance: int) -> torch.Tensor:
    """``clamp(j - i, -D, D) + D``: int64 in ``[0, 2 D]``."""
    check_tensor("relative_position", relative_position)
    if relative_position.is_floating_point() or relative_position.dtype == torch.bool:
        raise TypeError(f"relative_position must be an integer tensor, got dtype {relative_position.dtype}")
    check_positive_int("max_distance", max_distance)
    return relative_position.to(torch.int64).clamp(-max_distance, max_distance) + max_distance


def offsets_from_positions(q_positions: torch.Tensor, k_positions: torch.Tensor | None = None) -> torch.Tensor:
    """Integer offsets ``k_pos[j] - q_pos[i]``: ``(..., n_q), (..., n_k) -> (..., n_q, n_k)``.

    Floating positions must hold integers (e.g. token indices as floats). Positions
    must lie strictly within ``+-2**62`` (:data:`MAX_POSITION`), so that every offset
    between them is exactly representable in int64.
    """
    k_positions = q_positions if k_positions is None else k_positions
    out = []
    for name, p in (("q_positions", q_positions), ("k_positions", k_positions)):
        check_tensor(name, p)
        check_has_data(name, p)
        if p.dim() == 0:
            raise ValueError(f"{name} must have shape (..., n), got a 0-d tensor")
        if p.dtype == torch.bool or p.is_complex():
            raise TypeError(f"{name} must be an integer tensor, got dtype {p.dtype}")
        if p.is_floating_point():
            check_finite(name, p)
            if not bool((p == p.round()).all()):
                raise ValueError(f"{name} must hold integer positions for a bucketed bias, got fractional values")
            if bool((p.abs() >= MAX_POSITION).any()):
                raise ValueError(f"{name} must lie strictly within +-2**62 (offsets between positions must be exact int64), "
                                 f"got {float(p.abs().max()):g}")
            p = p.round().to(torch.int64)
        elif not _compiling() and p.numel() and bool(((p.to(torch.int64).abs() >= MAX_POSITION)
                                                        | (p == torch.iinfo(torch.int64).min)).any()):
            raise ValueError(f"{name} must lie strictly within +-2**62 (offsets between positions must be exact int64)")
        out.append(p.to(torch.int64))
    return out[1][..., None, :] - out[0][..., :, None]


def toeplitz_from_offsets(values: torch.Tensor, n_q: int, n_k: int) -> torch.Tensor:
    """``(..., n_q + n_k - 1) -> (..., n_q, n_k)``: ``out[..., i, j] = values[..., j - i + n_q - 1]``.

    A bias that depends on ``j - i`` only, expanded from one value per offset in one
    copy (an ``unfold`` view, then ``flip``); autograd sums the gradient back per offset.
    """
    if values.shape[-1] != n_q + n_k - 1:
        raise ValueError(f"values must have n_q + n_k - 1 = {n_q + n_k - 1} offsets (last dim), got {values.shape[-1]}")
    return values.unfold(-1, n_k, 1).flip(-2)


class RelativePositionBias(nn.Module):
    """A learned per-head bias over bucketed offsets: ``-> (H, n_q, n_k)`` (or ``(B, H, n_q, n_k)``).

    Args:
        num_heads: ``H``.
        kind: ``"t5"`` (log buckets) or ``"clipped"`` (one entry per offset up to ``max_distance``).
        num_buckets: T5 buckets (32); ignored for ``"clipped"``.
        max_distance: T5: where the log buckets end (128); clipped: ``D``.
        bidirectional: T5 only; False for causal models.
        device, dtype: of the table.

    The table starts at zero (no preference), so an untrained model attends as without it.

    ``max_distance``, ``num_buckets`` and ``bidirectional`` may be reassigned: the next call
    buckets with the new values (no cache outlives them). They are checked at that call against
    each other and the table (a clipped bias needs ``num_buckets == 2 * max_distance + 1``; T5
    buckets as at construction; the table needs ``num_heads`` rows and ``num_buckets`` columns at
    least), so a reassignment the table cannot serve is a ``ValueError``, never an index read
    out of place.
    """

    def __init__(
        self, num_heads: int, *, kind: str = "t5", num_buckets: int = 32, max_distance: int = 128,
        bidirectional: bool = True, device=None, dtype=None,
    ) -> None:
        super().__init__()
        self.num_heads = check_positive_int("num_heads", num_heads)
        self.kind = check_choice("kind", kind, KINDS)
        self.max_distance = check_positive_int("max_distance", max_distance)
        self.bidirectional = bool(bidirectional)
        if kind == "t5":
            check_bucket_args(num_buckets, max_distance, self.bidirectional)
            self.num_buckets = num_buckets
        else:
            self.num_buckets = 2 * max_distance + 1
        check_footprint(4.0 * num_heads * self.num_buckets, f"max_distance={max_distance}, num_heads={num_heads}",
                        f"the ({num_heads}, {self.num_buckets}) bias table")
        self.table = nn.Parameter(torch.empty(num_heads, self.num_buckets, device=device, dtype=dtype))
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        self.table.zero_()

    def check_settings(self) -> None:
        """Check the (possibly reassigned) bucket settings against each other and the table.

        Raises:
            ValueError: an unknown ``kind``, T5 bucket arguments out of range, a clipped bias whose
                ``num_buckets`` is not ``2 * max_distance + 1``, or a table without ``num_heads`` rows
                and ``num_buckets`` columns.
        """
        check_choice("kind", self.kind, KINDS)
        check_positive_int("max_distance", self.max_distance)
        if self.kind == "t5":
            check_bucket_args(self.num_buckets, self.max_distance, bool(self.bidirectional))
        elif self.num_buckets != 2 * self.max_distance + 1:
            raise ValueError(
                f"a clipped bias with max_distance={self.max_distance} has 2 * max_distance + 1 = "
                f"{2 * self.max_distance + 1} buckets, but num_buckets={self.num_buckets}: reassign both "
                f"(with a table of that many columns), or build a new RelativePositionBias"
            )
        rows, cols = self.table.shape
        if rows != self.num_heads or cols < self.num_buckets:
            raise ValueError(
                f"the bias table must have num_heads={self.num_heads} rows and at least num_buckets="
                f"{self.num_buckets} columns, got shape {tuple(self.table.shape)}"
            )

    def buckets(self, offsets: torch.Tensor) -> torch.Tensor:
        """The bucket (a column of :attr:`table`) of each integer offset ``j - i``."""
        if not _compiling():
            self.check_settings()
        if self.kind == "t5":
            return t5_buckets(offsets, bidirectional=self.bidirectional, num_buckets=self.num_buckets,
                              max_distance=self.max_distance)
        return clipped_buckets(offsets, self.max_distance)

    def forward(self, n_q: int | None = None, n_k: int | None = None, *, q_positions: torch.Tensor | None = None,
                k_positions: torch.Tensor | None = None) -> torch.Tensor:
        """The bias for lengths ``n_q, n_k`` (offsets of token indices), or for explicit positions.

        Positions ``(n,)`` give ``(H, n_q, n_k)``; batched ``(B, n)`` give ``(B, H, n_q, n_k)``.
        """
        if q_positions is None:
            if n_q is None:
                raise ValueError("pass n_q (and n_k) or q_positions")
            check_positive_int("n_q", n_q)
            n_k = n_q if n_k is None else check_positive_int("n_k", n_k)
            return self.toeplitz(n_q, n_k)
        if not _compiling():
            k_shape = (q_positions if k_positions is None else k_positions).shape
            n_q, n_k = (q_positions.shape[-1] if q_positions.dim() else 1), (k_shape[-1] if len(k_shape) else 1)
            lead = max(q_positions[..., 0].numel() if q_positions.dim() else 1, 1)
            check_footprint(float(lead) * n_q * n_k * (6 * 8.0 + self.num_heads * self.table.element_size()),
                            f"n_q={n_q}, n_k={n_k} positions",
                            f"the bias of {self.num_heads} heads over offsets of the positions")
        offsets = offsets_from_positions(q_positions, k_positions)
        b = self.buckets(offsets.to(self.table.device))
        bias = self.table[:, b]  # (H, ..., n_q, n_k)
        return bias if bias.dim() == 3 else bias.movedim(0, -3)

    def offset_buckets(self, n_q: int, n_k: int) -> torch.Tensor:
        """The bucket of each offset ``j - i`` from ``-(n_q - 1)`` to ``n_k - 1``: ``(n_q + n_k - 1,)`` int64 (cached)."""
        if _compiling():  # traced: no Python-side cache (the graph computes it)
            return self.buckets(torch.arange(-(n_q - 1), n_k, device=self.table.device))
        self.check_settings()  # reassigned settings (or a replaced table) are checked at every call
        # everything the buckets depend on (attributes a user may reassign included)
        key = (n_q, n_k, self.table.device, self.kind, self.num_buckets, self.max_distance, self.bidirectional)
        cache = self.__dict__.setdefault("_offset_cache", {})
        b = cache.get(key)
        if b is None:
            b = self.buckets(torch.arange(-(n_q - 1), n_k, device=self.table.device))
            if len(cache) >= 8:
                cache.pop(next(iter(cache)))
            cache[key] = b
        return b

    def toeplitz(self, n_q: int, n_k: int | None = None, *, causal: bool = False,
                 keys_reversed: bool = False) -> torch.Tensor:
        """The ``(H, n_q, n_k)`` bias for token indices (query ``i`` at ``i``), ``-inf`` above the diagonal if ``causal``.

        One gather of ``n_q + n_k - 1`` values per head and one ``n_q x n_k`` copy
        (:func:`toeplitz_from_offsets`); differentiable in :attr:`table`. With
        ``keys_reversed`` the key axis is reversed (``out[:, i, j] = bias[:, i, n_k - 1 - j]``)
        and the result is a view with no copy at all (``unfold`` of the offsets): attention
        over keys in reverse order, with this mask, is the same attention.
        """
        n_k = n_q if n_k is None else n_k
        if not keys_reversed and not _compiling():  # reversed: a view, no n_q x n_k copy
            check_footprint(float(self.num_heads) * n_q * n_k * self.table.element_size(), f"n_q={n_q}, n_k={n_k}",
                            f"the ({self.num_heads}, n_q, n_k) bias")
        vals = self.table[:, self.offset_buckets(n_q, n_k)]
        if causal:
            future = torch.arange(-(n_q - 1), n_k, device=vals.device) > 0
            vals = vals.masked_fill(future, float("-inf"))
        if keys_reversed:
            return vals.flip(-1).unfold(-1, n_k, 1)  # row i, column j' reads offset (n_k - 1 - j') - i
        return toeplitz_from_offsets(vals, n_q, n_k)

    def extra_repr(self) -> str:
        s = f"num_heads={self.num_heads}, kind={self.kind!r}, max_distance={self.max_distance}"
        if self.kind == "t5":
            s += f", num_buckets={self.num_buckets}, bidirectional={self.bidirectional}"
        return s


def bias_score_mod(table: torch.Tensor, buckets: torch.Tensor):
    """A FlexAttention ``score_mod`` adding ``table[h, buckets[q_idx, kv_idx]]``.

    Args:
        table: ``(H, num_buckets)`` (may require grad where FlexAttention's backward runs).
        buckets: ``(n_q, n_k)`` int64 bucket indices (e.g. ``RelativePositionBias.buckets(offsets)``).
    """
    check_tensor("table", table)
    check_tensor("buckets", buckets)
    if table.dim() != 2 or buckets.dim() != 2:
        raise ValueError(f"table must be (H, num_buckets) and buckets (n_q, n_k), got {tuple(table.shape)} "
                         f"and {tuple(buckets.shape)}")

    def score_mod(score, b, h, q_idx, kv_idx):
        return score + table[h, buckets[q_idx, kv_idx]].to(score.dtype)

    return score_mod
