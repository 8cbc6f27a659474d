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

Parity with the official code (JiaxuanYou/P-GNN ``model.py``), which produced the
paper's numbers: its layer defaults to ``dist_trainable=True``, i.e. ``s`` first
passes through a learned scalar map ``g(s) = W_2 relu(W_1 s + b_1) + b_2``
(``Linear(1 -> out) -> ReLU -> Linear(out -> 1)``) and the message uses
``g(s) h_u``; and it initialises every linear map of the layer with
``xavier_uniform`` (ReLU gain ``sqrt 2``) and zero biases. Both are options here
(``dist_trainable=True``, ``init="official"``); the defaults (``False``,
``"torch"``) give the plain equations above. Two behaviours differ from the
official code and are kept on purpose: an isolated node ``v`` in ``S_k`` gets
``s(v, v) = 1`` (the official graph is built from edges only, so an isolated node
is absent from it and its ``s`` stays 0), and ties between equally close members
of a set are broken by BFS order, not by the set's random order (``s`` is the
same; only which tied member's features are used can differ).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn.functional as F
from torch import nn

from posenc._checks import check_positive_float, check_positive_int, check_tensor

#: Initialisations of :class:`PGNNLayer`: ``"torch"`` (``nn.Linear``'s default) or
#: ``"official"`` (xavier_uniform with ReLU gain, zero biases, as the official code).
PGNN_INITS = ("torch", "official")
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


def _check_init(init: str) -> str:
    if not isinstance(init, str) or init not in PGNN_INITS:
        raise ValueError(f"init must be one of {PGNN_INITS}, got {init!r}")
    return init


class PGNNLayer(nn.Module):
    """One P-GNN layer: ``(h (n, F), weight (n, K), index (n, K)) -> (z (n, K), h' (n, out))``.

    ``M_v[k] = relu(W [g(s_vk) h_{u_k(v)} || h_v] + b)``, ``z_v[k] = w^T M_v[k] + c``,
    ``h'_v = mean_k M_v[k]``, with ``g`` the identity, or with ``dist_trainable`` the
    learned map ``g(s) = W_2 relu(W_1 s + b_1) + b_2`` (``W_1`` ``(out, 1)``, ``W_2``
    ``(1, out)``) of the official code.

    Args:
        in_channels: ``F``.
        out_channels: message width (also the hidden width of ``g``).
        dist_trainable: learn ``g`` (official code's default ``True``); ``False`` = paper eq. 1.
        init: ``"torch"`` (``nn.Linear`` default) or ``"official"`` (xavier_uniform with
            ReLU gain, zero biases) for every linear map of the layer.
        device, dtype: of the parameters.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        *,
        dist_trainable: bool = False,
        init: str = "torch",
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.in_channels = check_positive_int("in_channels", in_channels)
        self.out_channels = check_positive_int("out_channels", out_channels)
        if not isinstance(dist_trainable, bool):
            raise TypeError(f"dist_trainable must be a bool, got {type(dist_trainable).__name__}")
        self.dist_trainable = dist_trainable
        self.init = _check_init(init)
        fk = {"device": device, "dtype": dtype}
        self.lin_msg = nn.Linear(2 * in_channels, out_channels, **fk)
        self.lin_pos = nn.Linear(out_channels, 1, **fk)
        if dist_trainable:
            self.dist_map = nn.Sequential(nn.Linear(1, out_channels, **fk), nn.ReLU(), nn.Linear(out_channels, 1, **fk))
        else:
            self.dist_map = None
        if init == "official":  # "torch": nn.Linear already initialised itself
            self.reset_parameters()

    def reset_parameters(self) -> None:
        for m in self.modules():
            if isinstance(m, nn.Linear):
                if self.init == "official":
                    nn.init.xavier_uniform_(m.weight, gain=nn.init.calculate_gain("relu"))
                    nn.init.zeros_(m.bias)
                else:
                    m.reset_parameters()

    def extra_repr(self) -> str:
        return (
            f"in_channels={self.in_channels}, out_channels={self.out_channels}, "
            f"dist_trainable={self.dist_trainable}, init={self.init!r}"
        )

    def forward(
        self, h: torch.Tensor, weight: torch.Tensor, index: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        n, k = weight.shape
        if self.dist_map is not None:
            weight = self.dist_map(weight.unsqueeze(-1)).squeeze(-1)
        member = h[index.reshape(-1)].view(n, k, -1) * weight.unsqueeze(-1)
        own = h.unsqueeze(1).expand(n, k, h.shape[1])
        msg = torch.relu(self.lin_msg(torch.cat([member, own], dim=-1)))
        return self.lin_pos(msg).squeeze(-1), msg.mean(1)


class PGNN(nn.Module):
    """P-GNN: a linear input map then ``num_layers`` :class:`PGNNLayer`; output ``(n, K)``.

    The output is the last layer's position output, L2-normalised per node as in
    the original code (which skips the normalisation for a 1-layer model). Dropout
    acts between layers. The input map keeps ``nn.Linear``'s default initialisation
    (as in the official code); ``init`` applies to the P-GNN layers.

    Args:
        in_channels: node feature width.
        hidden_channels: width of the structure outputs passed between layers.
        num_layers: number of P-GNN layers (``>= 1``).
        dropout: dropout probability between layers.
        dist_trainable: learned distance map in every layer (see :class:`PGNNLayer`;
            the official code's default, used by the ``gir`` section).
        init: ``"torch"`` or ``"official"`` initialisation of the layers.
        device, dtype: of the parameters.
    """

    def __init__(
        self,
        in_channels: int,
        hidden_channels: int = 32,
        num_layers: int = 2,
        *,
        dropout: float = 0.5,
        dist_trainable: bool = False,
        init: str = "torch",
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
        self.layers = nn.ModuleList(
            PGNNLayer(hidden_channels, hidden_channels, dist_trainable=dist_trainable, init=init, **fk)
            for _ in range(num_layers)
        )

    def reset_parameters(self) -> None:
        self.lin_pre.reset_parameters()
        for layer in self.layers:
            layer.reset_parameters()

    def extra_repr(self) -> str:
        layer = self.layers[0]
        return (
            f"hidden_channels={self.hidden_channels}, num_layers={self.num_layers}, dropout={self.dropout}, "
            f"dist_trainable={layer.dist_trainable}, init={layer.init!r}"
        )

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
