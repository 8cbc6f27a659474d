"""Validation of graph input shared by :mod:`posenc.graph`.

Policy (documented in ``docs/graph.md``):

* ``edge_index`` must be an integer tensor of shape ``(2, E)`` with entries in
  ``[0, num_nodes)``; anything else raises ``ValueError``/``TypeError`` naming
  ``edge_index``.
* ``num_nodes`` must be ``>= 1`` (an empty graph has no positions to encode).
* Self-loops are dropped and duplicate edges merged: neither changes a shortest
  path, and both would only double-count messages.
* The graph is assumed undirected. A non-symmetric ``edge_index`` raises a
  ``ValueError`` unless ``symmetrize=True`` is passed, which adds the reverse of
  every edge (PyG's ``to_undirected``).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch

from posenc._checks import check_positive_int, check_tensor
from posenc._resources import check_footprint


def check_num_nodes(num_nodes: int) -> int:
    """Return ``num_nodes`` if it is an int ``>= 1`` (an empty graph is rejected)."""
    if isinstance(num_nodes, bool) or not isinstance(num_nodes, int):
        raise TypeError(f"num_nodes must be an int, got {type(num_nodes).__name__} ({num_nodes!r})")
    if num_nodes < 1:
        raise ValueError(f"num_nodes must be >= 1 (empty graphs have no positions), got {num_nodes}")
    return num_nodes


def check_edge_index(edge_index: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """Check shape, dtype and range of ``edge_index`` (shape ``(2, E)``); return it on CPU."""
    check_tensor("edge_index", edge_index)
    check_num_nodes(num_nodes)
    if edge_index.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8, torch.int8):
        raise TypeError(f"edge_index must be an integer tensor, got dtype {edge_index.dtype}")
    if edge_index.dim() != 2 or edge_index.shape[0] != 2:
        raise ValueError(f"edge_index must have shape (2, E), got {tuple(edge_index.shape)}")
    if edge_index.numel():
        lo, hi = int(edge_index.min()), int(edge_index.max())
        if lo < 0 or hi >= num_nodes:
            raise ValueError(
                f"edge_index entries must lie in [0, num_nodes={num_nodes}), got values in [{lo}, {hi}]"
            )
    return edge_index.detach().to("cpu", torch.int64)


def check_num_anchors(name: str, k: int, num_nodes: int) -> int:
    """Return ``k`` if ``1 <= k <= num_nodes``."""
    check_positive_int(name, k)
    if k > num_nodes:
        raise ValueError(f"{name} must be <= num_nodes ({num_nodes}), got {k}")
    return k


def adjacency_csr(edge_index: torch.Tensor, num_nodes: int, *, symmetrize: bool = False) -> sp.csr_matrix:
    """Validated, simple, undirected adjacency as a scipy CSR matrix (int8 ones, sorted indices).

    Args:
        edge_index: ``(2, E)`` integer tensor (PyG convention: row = source, col = target).
        num_nodes: number of nodes ``n >= 1``.
        symmetrize: add reverse edges instead of rejecting a directed ``edge_index``.

    Returns:
        ``(n, n)`` CSR matrix without self-loops or duplicates, symmetric.
    """
    ei = check_edge_index(edge_index, num_nodes).numpy()
    # indptr and scipy's work arrays per node; the COO triplets, their sorted copy and the transpose per edge
    check_footprint(3 * 8.0 * (num_nodes + 1) + 6 * 8.0 * ei.shape[1] * (2 if symmetrize else 1),
                    f"num_nodes={num_nodes}", f"the adjacency of {num_nodes:,} nodes")
    keep = ei[0] != ei[1]
    row, col = ei[0, keep], ei[1, keep]
    if symmetrize:
        row, col = np.concatenate([row, col]), np.concatenate([col, row])
    a = sp.csr_matrix((np.ones(row.shape[0], np.int8), (row, col)), shape=(num_nodes, num_nodes))
    a.sum_duplicates()
    a.data[:] = 1
    if not symmetrize and (a != a.T).nnz:
        raise ValueError(
            "edge_index must be undirected (every edge present in both directions); "
            f"{(a != a.T).nnz} entries lack their reverse. Pass symmetrize=True to add them"
        )
    a.sort_indices()
    return a


def clean_edge_index(edge_index: torch.Tensor, num_nodes: int, *, symmetrize: bool = False) -> torch.Tensor:
    """``edge_index`` (2, E') after :func:`adjacency_csr`: both directions, no loops, no duplicates."""
    a = adjacency_csr(edge_index, num_nodes, symmetrize=symmetrize).tocoo()
    return torch.from_numpy(np.stack([a.row, a.col]).astype(np.int64))
