"""GIR: position-aware node embeddings from path encoding along anchor shortest-path DAGs.

Reconstruction of "Graph Inference Representation" (Lu, Chen, Sun, Hu; arXiv
2105.03821). The paper publishes neither code nor equations; its abstract states
the idea (encode *path* information from pre-selected anchors, convey distance
implicitly along message passing, anchor indication, core variants, fusion with
ordinary GNNs). This module implements the following reconstruction (see
``docs/graph.md``):

* anchors: ``K`` anchors (or anchor sets) ``S_k`` selected once;
* anchor indication: the state of node ``v`` for anchor ``k`` starts from
  ``[x_v || 1(v in S_k)]`` (eq. 1 below uses the linear map of it);
* path encoding (variant ``"path"``): with ``d_k(v)`` the BFS depth of ``v`` from
  ``S_k`` and ``P_k(v) = {u in N(v) : d_k(u) = d_k(v) - 1}`` its parents in the
  shortest-path DAG rooted at ``S_k``,

      h_v^k = relu(W x_v + w_ind 1(v in S_k))                          if d_k(v) = 0   (1)
      h_v^k = relu(W x_v + U mean_{u in P_k(v)} h_u^k + b)             if d_k(v) = t   (2)

  evaluated level by level (t = 1, 2, ...), so ``h_v^k`` summarises every shortest
  path from the anchor to ``v`` *and the features along it*, not only its length;
  pairs with no path keep a zero state;
* readout over anchors into ``z_v``: ``"anchor"`` (one scalar per anchor,
  ``z_v[k] = w^T h_v^k``, P-GNN's position output in ``R^K``), ``"mean"`` (pool
  over anchors) or ``"concat"``; an optional final linear map to ``out_channels``.

Core variants (``variant=``): ``"path"`` (above); ``"indication"`` (anchor
indication + an *unrestricted* mean-aggregation MPNN, eq. (2) with ``P_k(v)``
replaced by all neighbours, run for as many rounds as the deepest BFS level so
the receptive field matches); ``"distance"`` (distance labels only:
``h_v^k = relu(W x_v + E[min(d_k(v), L)])`` with a learned embedding ``E`` of
the hop count, ``L + 1`` for unreachable).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch_geometric.nn import MessagePassing

from posenc._checks import check_choice, check_positive_int, check_tensor
from posenc.graph._validate import check_edge_index

VARIANTS = ("path", "indication", "distance")
READOUTS = ("anchor", "mean", "concat")
_PLAN_CHUNK = 1 << 24


@dataclass(frozen=True)
class PathPlan:
    """Index structure of the shortest-path DAGs of all anchors (built once per graph + anchors).

    Pairs ``(v, k)`` are flattened as ``p = v * K + k``. Level ``t`` holds the pairs at depth ``t``.

    Attributes:
        num_nodes, num_anchors: ``n`` and ``K``.
        level_nodes: per level, ``(n_t,)`` node id of each pair.
        level_edges: per level ``t >= 1``, ``(2, E_t)`` DAG edges as (index in level t-1, index in level t).
        order: ``(sum n_t,)`` pair ids of all reachable pairs, level after level.
        max_depth: deepest level.
    """

    num_nodes: int
    num_anchors: int
    level_nodes: list[torch.Tensor]
    level_edges: list[torch.Tensor]
    order: torch.Tensor
    max_depth: int

    def to(self, device: torch.device | str) -> PathPlan:
        return PathPlan(
            self.num_nodes,
            self.num_anchors,
            [t.to(device) for t in self.level_nodes],
            [t.to(device) for t in self.level_edges],
            self.order.to(device),
            self.max_depth,
        )


def _check_dist(anchor_dist: torch.Tensor, num_nodes: int) -> torch.Tensor:
    check_tensor("anchor_dist", anchor_dist)
    if anchor_dist.dim() != 2 or anchor_dist.shape[0] != num_nodes or anchor_dist.shape[1] < 1:
        raise ValueError(f"anchor_dist must have shape ({num_nodes}, K>=1), got {tuple(anchor_dist.shape)}")
    if not anchor_dist.is_floating_point():
        raise TypeError(f"anchor_dist must be floating point (inf = unreachable), got {anchor_dist.dtype}")
    finite = anchor_dist[torch.isfinite(anchor_dist)]
    if bool(torch.isnan(anchor_dist).any()) or (finite.numel() and float(finite.min()) < 0):
        raise ValueError("anchor_dist must hold hop counts >= 0 or inf (no NaN, no negatives)")
    return anchor_dist


def build_path_plan(edge_index: torch.Tensor, anchor_dist: torch.Tensor) -> PathPlan:
    """Levels and DAG edges from BFS depths (``anchor_distances`` output).

    Args:
        edge_index: ``(2, E)`` undirected edges (both directions present).
        anchor_dist: ``(n, K)`` hop distances, ``inf`` where unreachable.
    """
    n, k = anchor_dist.shape
    ei = check_edge_index(edge_index, n)
    _check_dist(anchor_dist, n)
    d = torch.where(torch.isfinite(anchor_dist), anchor_dist, torch.full_like(anchor_dist, -1)).long().cpu()
    ei = ei[:, ei[0] != ei[1]]
    flat = d.reshape(-1)
    reach = torch.nonzero(flat >= 0).squeeze(1)
    depth = flat[reach]
    perm = torch.argsort(depth, stable=True)
    order = reach[perm]
    counts = torch.bincount(depth, minlength=1)
    starts = torch.cumsum(counts, 0) - counts
    local = torch.full((n * k,), -1, dtype=torch.long)
    local[order] = torch.arange(order.numel()) - starts[flat[order]]
    # DAG edges: (u -> v) for anchor k iff d_k(v) = d_k(u) + 1.
    # Anchors in chunks so the (E, chunk) comparison stays ~_PLAN_CHUNK entries.
    chunk = max(1, _PLAN_CHUNK // max(1, ei.shape[1]))
    srcs, dsts = [], []
    for k0 in range(0, k, chunk):
        du, dv = d[ei[0], k0 : k0 + chunk], d[ei[1], k0 : k0 + chunk]
        e_id, k_id = torch.nonzero((du >= 0) & (dv == du + 1), as_tuple=True)
        srcs.append(ei[0, e_id] * k + k0 + k_id)
        dsts.append(ei[1, e_id] * k + k0 + k_id)
    src, dst = torch.cat(srcs), torch.cat(dsts)
    lvl = flat[dst]
    eperm = torch.argsort(lvl, stable=True)
    src, dst, lvl = src[eperm], dst[eperm], lvl[eperm]
    ecounts = torch.bincount(lvl, minlength=counts.numel())
    level_nodes = list(torch.split(order // k, counts.tolist()))
    pieces = torch.split(torch.stack([local[src], local[dst]]), ecounts.tolist(), dim=1)
    return PathPlan(n, k, level_nodes, list(pieces[1:]), order, counts.numel() - 1)


class DAGMean(MessagePassing):
    """Mean of parent states over one level of the DAG (a bipartite PyG propagation)."""

    def __init__(self) -> None:
        super().__init__(aggr="mean")

    def forward(self, h_src: torch.Tensor, edges: torch.Tensor, num_dst: int) -> torch.Tensor:
        return self.propagate(edges, x=(h_src, None), size=(h_src.shape[0], num_dst))

    def message(self, x_j: torch.Tensor) -> torch.Tensor:
        return x_j


class GIR(nn.Module):
    """GIR encoder: ``(x (n, F), edge_index, anchor_dist (n, K)) -> z (n, out)``.

    Args:
        in_channels: node feature width ``F``.
        hidden_channels: per-(node, anchor) state width ``H``.
        out_channels: width of a final linear map; ``None`` keeps the readout
            (``K`` for ``"anchor"``, ``H`` for ``"mean"``, ``K*H`` for ``"concat"``, the
            latter needs ``num_anchors``).
        variant: ``"path"`` (DAG path encoding), ``"indication"`` or ``"distance"``.
        readout: ``"anchor"``, ``"mean"`` or ``"concat"``.
        num_anchors: ``K``, needed only for ``readout="concat"`` with ``out_channels``.
        max_label: largest distance label of the ``"distance"`` variant (larger are clipped).
        rounds: message-passing rounds of ``"indication"`` (default: the deepest BFS level).
        device, dtype: of the parameters.
    """

    def __init__(
        self,
        in_channels: int,
        hidden_channels: int = 32,
        out_channels: int | None = None,
        *,
        variant: str = "path",
        readout: str = "anchor",
        num_anchors: int | None = None,
        max_label: int = 64,
        rounds: int | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.in_channels = check_positive_int("in_channels", in_channels)
        self.hidden_channels = check_positive_int("hidden_channels", hidden_channels)
        self.variant = check_choice("variant", variant, VARIANTS)
        self.readout = check_choice("readout", readout, READOUTS)
        self.max_label = check_positive_int("max_label", max_label)
        self.rounds = None if rounds is None else check_positive_int("rounds", rounds)
        fk = {"device": device, "dtype": dtype}
        self.lin_x = nn.Linear(in_channels, hidden_channels, **fk)
        self.w_ind = nn.Parameter(torch.empty(hidden_channels, **fk))
        self.lin_h = nn.Linear(hidden_channels, hidden_channels, **fk)
        self.label = nn.Embedding(max_label + 2, hidden_channels, **fk) if variant == "distance" else None
        self.lin_pos = nn.Linear(hidden_channels, 1, **fk) if readout == "anchor" else None
        self.aggr = DAGMean()
        if readout == "concat" and out_channels is not None:
            if num_anchors is None:
                raise ValueError("num_anchors is required for readout='concat' with out_channels")
            width = check_positive_int("num_anchors", num_anchors) * hidden_channels
        elif readout == "anchor":
            if out_channels is not None and num_anchors is None:
                raise ValueError("num_anchors is required for readout='anchor' with out_channels")
            width = num_anchors or 0
        else:
            width = hidden_channels
        self.out_channels = out_channels
        self.lin_out = nn.Linear(width, out_channels, **fk) if out_channels is not None else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.lin_x.reset_parameters()
        self.lin_h.reset_parameters()
        nn.init.normal_(self.w_ind, std=1.0)
        for mod in (self.label, self.lin_pos, self.lin_out):
            if mod is not None:
                mod.reset_parameters()

    def extra_repr(self) -> str:
        return (
            f"in_channels={self.in_channels}, hidden_channels={self.hidden_channels}, "
            f"out_channels={self.out_channels}, variant={self.variant!r}, readout={self.readout!r}"
        )

    # -- per-(node, anchor) states ------------------------------------------------------
    def _states_path(self, xw: torch.Tensor, plan: PathPlan) -> torch.Tensor:
        levels = [torch.relu(xw[plan.level_nodes[0]] + self.w_ind)]
        for t in range(1, plan.max_depth + 1):
            msg = self.aggr(levels[-1], plan.level_edges[t - 1], plan.level_nodes[t].numel())
            levels.append(torch.relu(xw[plan.level_nodes[t]] + self.lin_h(msg)))
        states = torch.cat(levels)
        full = states.new_zeros(plan.num_nodes * plan.num_anchors, states.shape[1])
        full = full.index_copy(0, plan.order, states)
        return full.view(plan.num_nodes, plan.num_anchors, -1)

    def _states_indication(
        self, xw: torch.Tensor, edge_index: torch.Tensor, ind: torch.Tensor, rounds: int
    ) -> torch.Tensor:
        n, k = ind.shape
        base = xw[:, None, :] + ind[:, :, None] * self.w_ind
        h = torch.relu(base)
        for _ in range(rounds):
            msg = self.aggr(h.reshape(n, -1), edge_index, n).view(n, k, -1)
            h = torch.relu(base + self.lin_h(msg))
        return h

    def _states_distance(self, xw: torch.Tensor, anchor_dist: torch.Tensor) -> torch.Tensor:
        lab = torch.where(
            torch.isfinite(anchor_dist), anchor_dist.clamp(max=self.max_label), float(self.max_label + 1)
        ).long()
        return torch.relu(xw[:, None, :] + self.label(lab))

    def forward(
        self,
        x: torch.Tensor,
        edge_index: torch.Tensor,
        anchor_dist: torch.Tensor,
        plan: PathPlan | None = None,
    ) -> torch.Tensor:
        """Args:
            x: ``(n, F)`` node features.
            edge_index: ``(2, E)`` undirected edges (both directions).
            anchor_dist: ``(n, K)`` hop distances to the anchors, ``inf`` unreachable
                (from :func:`~posenc.graph.distances.anchor_distances`).
            plan: precomputed :func:`build_path_plan` (variant ``"path"``); built if None.

        Returns:
            ``(n, out)`` position-aware embeddings.
        """
        check_tensor("x", x)
        if x.dim() != 2 or x.shape[1] != self.in_channels:
            raise ValueError(f"x must have shape (n, {self.in_channels}), got {tuple(x.shape)}")
        n = x.shape[0]
        _check_dist(anchor_dist, n)
        xw = self.lin_x(x)
        if self.variant == "path":
            if plan is None:
                plan = build_path_plan(edge_index, anchor_dist)
                plan = plan.to(x.device)
            if plan.num_nodes != n or plan.num_anchors != anchor_dist.shape[1]:
                raise ValueError("plan does not match x / anchor_dist")
            h = self._states_path(xw, plan)
        elif self.variant == "indication":
            ind = (anchor_dist == 0).to(xw.dtype)
            finite = anchor_dist[torch.isfinite(anchor_dist)]
            rounds = self.rounds or max(1, int(finite.max()) if finite.numel() else 1)
            h = self._states_indication(xw, edge_index, ind, rounds)
        else:
            h = self._states_distance(xw, anchor_dist)
        if self.readout == "anchor":
            z = self.lin_pos(h).squeeze(-1)
        elif self.readout == "mean":
            z = h.mean(1)
        else:
            z = h.reshape(n, -1)
        return self.lin_out(z) if self.lin_out is not None else z
