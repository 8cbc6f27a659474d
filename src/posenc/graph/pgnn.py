"""P-GNN baseline (You, Ying, Leskovec, "Position-aware Graph Neural Networks", ICML 2019).

For ``K`` anchor sets ``S_k`` (Bourgain-style, resampled at every step) and
``s(u, v) = 1 / (d(u, v) + 1)`` (``0`` beyond ``q`` hops for P-GNN-F, exact for
P-GNN-E), a layer computes for every node ``v`` and set ``k`` the message from
the member ``u_k(v) = argmax_{u in S_k} s(u, v)`` (its closest member):

    M_v[k] = relu(W [s(u_k(v), v) h_{u_k(v)} || h_v])            (paper eq. 1-2, AGG = mean)
    z_v[k] = w^T M_v[k]                                           position output in R^K
    h'_v  = mean_k M_v[k]                                         structure output, fed to the next layer

Unlike the original code, which precomputes all-pairs BFS (``O(n (n + m))``
time, ``n^2`` memory), the per-set inputs ``s`` and ``u_k(v)`` come from one
batched multi-source BFS from the sets (:func:`pgnn_anchor_inputs`), i.e.
``O(K (n + m))`` per resampling.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn.functional as F
from torch import nn

from posenc._checks import check_positive_float, check_positive_int, check_tensor
from posenc.graph.anchors import AnchorSets
from posenc.graph.distances import bfs_from_sets


def pgnn_anchor_inputs(
    adj: sp.csr_matrix,
    anchors: AnchorSets,
    *,
    q: int | None = None,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``s(u_k(v), v)`` and ``u_k(v)`` for every node and anchor set.

    Args:
        adj: validated CSR adjacency (``posenc.graph._validate.adjacency_csr``).
        anchors: ``K`` anchor sets.
        q: hop cutoff (P-GNN-F); ``None`` = exact (P-GNN-E).

    Returns:
        ``weight`` ``(n, K)`` (``0`` where unreachable / beyond ``q``) and ``index``
        ``(n, K)`` long (the closest member; the set's first member when ``weight`` is 0,
        as ``argmax`` of an all-zero row gives in the original code).
    """
    dist, origin = bfs_from_sets(adj, anchors, max_distance=q, return_origin=True)
    reach = dist >= 0
    weight = np.where(reach, 1.0 / (np.maximum(dist, 0).astype(np.float64) + 1.0), 0.0)
    sizes = anchors.sizes().numpy()
    first = anchors.nodes.numpy()[np.cumsum(sizes) - sizes]
    index = np.where(reach, origin, first[:, None])
    return (
        torch.from_numpy(weight.T.copy()).to(device=device, dtype=dtype),
        torch.from_numpy(index.T.astype(np.int64)).to(device),
    )


class PGNNLayer(nn.Module):
    """One P-GNN layer: ``(h (n, F), weight (n, K), index (n, K)) -> (z (n, K), h' (n, out))``.

    Args:
        in_channels: ``F``.
        out_channels: message width.
        device, dtype: of the parameters.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.in_channels = check_positive_int("in_channels", in_channels)
        self.out_channels = check_positive_int("out_channels", out_channels)
        self.lin_msg = nn.Linear(2 * in_channels, out_channels, device=device, dtype=dtype)
        self.lin_pos = nn.Linear(out_channels, 1, device=device, dtype=dtype)

    def reset_parameters(self) -> None:
        self.lin_msg.reset_parameters()
        self.lin_pos.reset_parameters()

    def extra_repr(self) -> str:
        return f"in_channels={self.in_channels}, out_channels={self.out_channels}"

    def forward(
        self, h: torch.Tensor, weight: torch.Tensor, index: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        n, k = weight.shape
        member = h[index.reshape(-1)].view(n, k, -1) * weight.unsqueeze(-1)
        own = h.unsqueeze(1).expand(n, k, h.shape[1])
        msg = torch.relu(self.lin_msg(torch.cat([member, own], dim=-1)))
        return self.lin_pos(msg).squeeze(-1), msg.mean(1)


class PGNN(nn.Module):
    """P-GNN: a linear input map then ``num_layers`` :class:`PGNNLayer`; output ``(n, K)``.

    The output is the last layer's position output, L2-normalised per node as in
    the original code. Dropout acts between layers.

    Args:
        in_channels: node feature width.
        hidden_channels: width of the structure outputs passed between layers.
        num_layers: number of P-GNN layers (``>= 1``).
        dropout: dropout probability between layers.
        device, dtype: of the parameters.
    """

    def __init__(
        self,
        in_channels: int,
        hidden_channels: int = 32,
        num_layers: int = 2,
        *,
        dropout: float = 0.5,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.in_channels = check_positive_int("in_channels", in_channels)
        self.hidden_channels = check_positive_int("hidden_channels", hidden_channels)
        self.num_layers = check_positive_int("num_layers", num_layers)
        self.dropout = check_positive_float("dropout", dropout, allow_zero=True)
        if self.dropout >= 1:
            raise ValueError(f"dropout must be < 1, got {dropout}")
        fk = {"device": device, "dtype": dtype}
        self.lin_pre = nn.Linear(in_channels, hidden_channels, **fk)
        self.layers = nn.ModuleList(PGNNLayer(hidden_channels, hidden_channels, **fk) for _ in range(num_layers))

    def reset_parameters(self) -> None:
        self.lin_pre.reset_parameters()
        for layer in self.layers:
            layer.reset_parameters()

    def extra_repr(self) -> str:
        return f"hidden_channels={self.hidden_channels}, num_layers={self.num_layers}, dropout={self.dropout}"

    def forward(self, x: torch.Tensor, weight: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """Args: ``x`` ``(n, F)``; ``weight``, ``index`` ``(n, K)`` from :func:`pgnn_anchor_inputs`.

        Returns ``(n, K)`` unit-norm position embeddings.
        """
        check_tensor("x", x)
        if x.dim() != 2 or x.shape[1] != self.in_channels:
            raise ValueError(f"x must have shape (n, {self.in_channels}), got {tuple(x.shape)}")
        if weight.shape != index.shape or weight.shape[0] != x.shape[0]:
            raise ValueError(
                f"weight and index must both have shape ({x.shape[0]}, K), got "
                f"{tuple(weight.shape)} and {tuple(index.shape)}"
            )
        h = self.lin_pre(x)
        pos = h
        for i, layer in enumerate(self.layers):
            pos, h = layer(h, weight, index)
            if i + 1 < self.num_layers:
                h = F.dropout(h, self.dropout, self.training)
        return F.normalize(pos, p=2, dim=-1)
