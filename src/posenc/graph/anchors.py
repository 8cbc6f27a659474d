"""Anchor selection: single anchors (uniform or degree-weighted) and Bourgain-style anchor sets.

Every draw takes a ``torch.Generator`` (or an int seed), so the same seed gives
the same anchors. Anchor *sets* follow P-GNN (You et al., ICML 2019, Sec. 4.2,
after Bourgain's theorem): ``m = floor(log2 n)`` sizes, ``floor(c * m)`` copies of
each, the i-th size (i = 0..m-1) being ``floor(n / 2^(i+1))`` nodes drawn
uniformly without replacement.

A single anchor is the special case of a set of size one, so everything
downstream (distances, GIR, P-GNN) takes an :class:`AnchorSets`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from posenc._checks import check_positive_float
from posenc._resources import check_footprint
from posenc.graph._validate import check_edge_index, check_num_anchors, check_num_nodes


def _generator(generator: torch.Generator | int | None) -> torch.Generator:
    if isinstance(generator, torch.Generator):
        return generator
    if generator is None:
        raise TypeError("generator must be a torch.Generator or an int seed (randomness is explicit)")
    if isinstance(generator, bool) or not isinstance(generator, int):
        raise TypeError(f"generator must be a torch.Generator or an int seed, got {type(generator).__name__}")
    return torch.Generator().manual_seed(generator)


@dataclass(frozen=True)
class AnchorSets:
    """``K`` anchor sets in PyG's "batch vector" layout.

    Attributes:
        nodes: ``(M,)`` long, member node ids, grouped by set.
        set_index: ``(M,)`` long, the set (in ``[0, K)``) of each member, non-decreasing.
        num_sets: ``K``.
        num_nodes: ``n``, the size of the graph the sets were drawn for.
    """

    nodes: torch.Tensor
    set_index: torch.Tensor
    num_sets: int
    num_nodes: int

    def __post_init__(self) -> None:
        if self.nodes.shape != self.set_index.shape or self.nodes.dim() != 1:
            raise ValueError(
                f"nodes and set_index must be 1-D of equal length, got {tuple(self.nodes.shape)} "
                f"and {tuple(self.set_index.shape)}"
            )
        if self.nodes.numel() and (int(self.nodes.min()) < 0 or int(self.nodes.max()) >= self.num_nodes):
            raise ValueError(f"nodes must lie in [0, num_nodes={self.num_nodes})")
        counts = torch.bincount(self.set_index, minlength=self.num_sets)
        if counts.numel() != self.num_sets or bool((counts == 0).any()):
            raise ValueError(f"set_index must give every one of the num_sets={self.num_sets} sets >= 1 member")
        if self.set_index.numel() > 1 and bool((self.set_index[1:] < self.set_index[:-1]).any()):
            raise ValueError("set_index must be non-decreasing (members grouped by set)")

    @classmethod
    def singletons(cls, anchors: torch.Tensor, num_nodes: int) -> AnchorSets:
        """One set per anchor node. ``anchors``: ``(K,)`` long."""
        anchors = torch.as_tensor(anchors, dtype=torch.long).reshape(-1)
        return cls(anchors, torch.arange(anchors.numel()), anchors.numel(), num_nodes)

    @classmethod
    def from_list(cls, sets: list[torch.Tensor], num_nodes: int) -> AnchorSets:
        nodes = torch.cat([torch.as_tensor(s, dtype=torch.long).reshape(-1) for s in sets])
        set_index = torch.repeat_interleave(torch.arange(len(sets)), torch.tensor([len(s) for s in sets]))
        return cls(nodes, set_index, len(sets), num_nodes)

    def sizes(self) -> torch.Tensor:
        """``(K,)`` number of members per set."""
        return torch.bincount(self.set_index, minlength=self.num_sets)

    def indicator(self) -> torch.Tensor:
        """``(n, K)`` float, 1 where node v belongs to set k (the GIR anchor indication)."""
        check_footprint(4.0 * self.num_nodes * self.num_sets, f"num_nodes={self.num_nodes}, {self.num_sets} sets",
                        "the (n, K) anchor indicator")
        out = torch.zeros(self.num_nodes, self.num_sets)
        out[self.nodes, self.set_index] = 1.0
        return out


def random_anchors(num_nodes: int, k: int, *, generator: torch.Generator | int) -> torch.Tensor:
    """``k`` distinct nodes drawn uniformly. Returns ``(k,)`` long, sorted."""
    check_num_nodes(num_nodes)
    check_num_anchors("k", k, num_nodes)
    check_footprint(8.0 * num_nodes, f"num_nodes={num_nodes}", "a permutation of the nodes")
    g = _generator(generator)
    return torch.randperm(num_nodes, generator=g)[:k].sort().values


def degree_anchors(
    edge_index: torch.Tensor, num_nodes: int, k: int, *, generator: torch.Generator | int
) -> torch.Tensor:
    """``k`` distinct nodes drawn with probability proportional to ``degree + 1``.

    The ``+ 1`` keeps isolated nodes eligible. Returns ``(k,)`` long, sorted.
    """
    ei = check_edge_index(edge_index, num_nodes)
    check_num_anchors("k", k, num_nodes)
    g = _generator(generator)
    deg = torch.bincount(ei[0], minlength=num_nodes).double() + 1.0
    return torch.multinomial(deg, k, replacement=False, generator=g).sort().values


def bourgain_anchor_sets(num_nodes: int, *, c: float = 1.0, generator: torch.Generator | int) -> AnchorSets:
    """P-GNN's Bourgain-style anchor sets: ``floor(log2 n)`` sizes x ``floor(c log2 n)`` copies.

    Set sizes are ``floor(n / 2^(i+1))`` for ``i = 0 .. floor(log2 n) - 1`` (largest first).
    Needs ``n >= 2``.

    Args:
        num_nodes: ``n``.
        c: copies per size as a multiple of ``log2 n`` (P-GNN uses ``c = 1``).
        generator: torch.Generator or int seed.
    """
    check_num_nodes(num_nodes)
    check_positive_float("c", c)
    if num_nodes < 2:
        raise ValueError(f"num_nodes must be >= 2 for Bourgain anchor sets, got {num_nodes}")
    m = int(math.log2(num_nodes))
    copies = max(1, int(c * m))
    # one permutation at a time, and the members of every set (about n per copy), with their set index
    check_footprint(8.0 * num_nodes + 2 * 8.0 * num_nodes * copies, f"num_nodes={num_nodes}, c={c}",
                    f"{m * copies:,} Bourgain anchor sets")
    g = _generator(generator)
    sets = []
    for i in range(m):
        size = max(1, int(num_nodes / 2 ** (i + 1)))
        for _ in range(copies):
            sets.append(torch.randperm(num_nodes, generator=g)[:size].sort().values)
    return AnchorSets.from_list(sets, num_nodes)


def select_anchors(
    method: str,
    edge_index: torch.Tensor,
    num_nodes: int,
    k: int,
    *,
    generator: torch.Generator | int,
) -> AnchorSets:
    """Dispatch: ``"random"``/``"degree"`` give ``k`` singleton sets; ``"bourgain"`` ignores ``k``."""
    if method == "random":
        return AnchorSets.singletons(random_anchors(num_nodes, k, generator=generator), num_nodes)
    if method == "degree":
        return AnchorSets.singletons(degree_anchors(edge_index, num_nodes, k, generator=generator), num_nodes)
    if method == "bourgain":
        return bourgain_anchor_sets(num_nodes, generator=generator)
    raise ValueError(f"method must be one of 'random', 'degree', 'bourgain'; got {method!r}")
