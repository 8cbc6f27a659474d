"""Node position encodings computed from the graph alone: Laplacian eigenvectors, random-walk return
probabilities and inverse distances to anchors, each ``(num_nodes, k)``.

* :func:`laplacian_pe`: the eigenvectors of the symmetric normalised Laplacian
  ``L = I - D^{-1/2} A D^{-1/2}`` of the undirected simple graph, for its ``k`` smallest eigenvalues
  after the first (Dwivedi et al., "Benchmarking Graph Neural Networks", JMLR 2023; PyG's
  ``AddLaplacianEigenvectorPE``). Each eigenvector is defined up to its sign: the one returned has
  its entry of largest magnitude positive (ties within rounding: the first), a deterministic choice;
  PyG's transform flips signs at random instead, and models flip them at random in training (as
  :class:`~posenc.search.NodeEncoding` does). Within an eigenvalue of multiplicity above one the
  basis is LAPACK's (ARPACK's above :data:`DENSE_LIMIT` nodes). A graph with fewer than ``k + 1`` nodes gets zero columns for the missing ones.
* :func:`random_walk_pe`: ``[P_ii, (P^2)_ii, ..., (P^k)_ii]`` with ``P = D^{-1} A`` over the edges as
  given (Dwivedi et al., "Graph Neural Networks with Learnable Structural and Positional
  Representations", ICLR 2022; PyG's ``AddRandomWalkPE``, whose degree of a node without out-edges
  is taken as 1).
* :func:`anchor_pe`: ``1 / (d(v, a) + 1)`` to ``k`` random anchor nodes, 0 when unreachable (P-GNN's
  ``s``, You et al., ICML 2019): :class:`~posenc.graph.AddAnchorPE` with ``clamp=True`` and
  ``symmetrize=True``.

Every function takes ``edge_index`` ``(2, E)`` (PyG's convention) and ``num_nodes``, and returns a
float32 tensor on ``edge_index``'s device; the work is done in float64 on the CPU.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch

from posenc._checks import check_positive_int
from posenc._resources import check_footprint
from posenc.graph._validate import check_edge_index

__all__ = ["DENSE_LIMIT", "NODE_ENCODINGS", "anchor_pe", "laplacian_pe", "node_pe", "random_walk_pe"]

#: Graphs up to this many nodes are decomposed densely (``numpy.linalg.eigh``); larger ones with
#: ``scipy.sparse.linalg.eigsh`` (the ``k + 1`` smallest eigenpairs).
DENSE_LIMIT = 2048
#: The encodings by name (:func:`node_pe`).
NODE_ENCODINGS = ("laplacian_pe", "random_walk_pe", "anchor_pe")


def _adjacency(edge_index: torch.Tensor, num_nodes: int, symmetric: bool) -> sp.csr_matrix:
    ei = check_edge_index(edge_index, num_nodes).numpy()
    check_footprint(6 * 8.0 * (ei.shape[1] * 2 + num_nodes + 1), f"num_nodes={num_nodes}",
                    f"the adjacency of {num_nodes:,} nodes")
    keep = ei[0] != ei[1]
    row, col = ei[0, keep], ei[1, keep]
    if symmetric:
        row, col = np.concatenate([row, col]), np.concatenate([col, row])
    a = sp.csr_matrix((np.ones(row.shape[0]), (row, col)), shape=(num_nodes, num_nodes))
    a.sum_duplicates()
    if symmetric:
        a.data[:] = 1.0
    return a


def _out(pe: np.ndarray, edge_index: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(pe)).to(device=edge_index.device, dtype=torch.float32)


def laplacian_pe(edge_index: torch.Tensor, num_nodes: int, k: int = 8) -> torch.Tensor:
    """``(num_nodes, k)``: eigenvectors 2 .. k+1 of the symmetric normalised Laplacian (module docstring).

    The graph is taken as undirected and simple: each edge counts in both directions once,
    self-loops are dropped. An isolated node has a row of ``L`` equal to the identity's.

    Raises:
        TypeError / ValueError: ``edge_index`` not a ``(2, E)`` integer tensor with entries in
            ``[0, num_nodes)``, ``num_nodes`` or ``k`` not a positive int.
        FootprintError: the dense decomposition's ``(n, n)`` float64 matrices exceed the memory limit.
    """
    check_positive_int("k", k)
    a = _adjacency(edge_index, num_nodes, symmetric=True)
    n = num_nodes
    deg = np.asarray(a.sum(1)).ravel()
    inv_sqrt = np.where(deg > 0, 1.0 / np.sqrt(np.maximum(deg, 1e-300)), 0.0)
    norm = sp.diags(inv_sqrt) @ a @ sp.diags(inv_sqrt)
    m = min(k + 1, n)
    if n <= DENSE_LIMIT or m >= n - 1:
        check_footprint(3 * 8.0 * n * n, f"num_nodes={n}", f"the dense Laplacian of {n:,} nodes and its eigenvectors")
        lap = np.eye(n) - norm.toarray()
        vals, vecs = np.linalg.eigh(lap)
    else:
        from scipy.sparse.linalg import eigsh

        lap = sp.identity(n, format="csr") - norm
        # a random start (fixed seed): a constant one is the eigenvector of 0 on a regular graph, where
        # ARPACK breaks down or misses the other copies of repeated eigenvalues
        start = np.random.default_rng(0).standard_normal(n)
        vals, vecs = eigsh(lap, k=m, which="SA", v0=start, tol=0, ncv=min(n, max(4 * m, 40)))
    order = np.argsort(vals, kind="stable")
    vecs = vecs[:, order[1:m]]
    if vecs.shape[1]:
        mag = np.abs(vecs)
        # the first entry whose magnitude is the column's largest, up to rounding (symmetric graphs tie)
        top = (mag >= mag.max(0) * (1.0 - 1e-9)).argmax(0)
        vecs = vecs * np.where(vecs[top, np.arange(vecs.shape[1])] < 0, -1.0, 1.0)
    pe = np.zeros((n, k))
    pe[:, :vecs.shape[1]] = vecs
    return _out(pe, edge_index)


def random_walk_pe(edge_index: torch.Tensor, num_nodes: int, k: int = 16) -> torch.Tensor:
    """``(num_nodes, k)``: the return probabilities of 1 .. k steps of the random walk (module docstring).

    The walk follows the edges as given: a self-loop counts, and a duplicated edge counts twice (the
    transition probabilities of the multigraph). PyG's ``AddRandomWalkPE`` gives the same on graphs
    without duplicate edges (its dense path writes a duplicated edge once, at the weight of one copy).

    Raises:
        TypeError / ValueError: as :func:`laplacian_pe`.
        FootprintError: the ``(n, n)`` powers exceed the memory limit (graphs above
            :data:`DENSE_LIMIT` nodes are multiplied as sparse matrices, whose fill-in is not bounded).
    """
    check_positive_int("k", k)
    ei = check_edge_index(edge_index, num_nodes).numpy()
    n = num_nodes
    check_footprint(6 * 8.0 * (ei.shape[1] + n + 1), f"num_nodes={n}", f"the adjacency of {n:,} nodes")
    a = sp.csr_matrix((np.ones(ei.shape[1]), (ei[0], ei[1])), shape=(n, n))
    a.sum_duplicates()
    out_deg = np.maximum(np.asarray(a.sum(1)).ravel(), 1.0)
    p = sp.diags(1.0 / out_deg) @ a
    pe = np.zeros((n, k))
    if n <= DENSE_LIMIT:
        check_footprint(3 * 8.0 * n * n, f"num_nodes={n}", f"the dense random-walk powers of {n:,} nodes")
        dense = p.toarray()
        power = dense
        for t in range(k):
            if t:
                power = power @ dense
            pe[:, t] = np.diagonal(power)
    else:
        power = p
        for t in range(k):
            if t:
                power = power @ p
            pe[:, t] = power.diagonal()
    return _out(pe, edge_index)


def anchor_pe(edge_index: torch.Tensor, num_nodes: int, k: int = 16, *, seed: int = 0) -> torch.Tensor:
    """``(num_nodes, k)``: ``1 / (d + 1)`` to ``k`` random anchors drawn from ``seed`` (0: unreachable).

    A graph with fewer than ``k`` nodes uses every node as an anchor and gets zero columns for the
    rest (:class:`~posenc.graph.AddAnchorPE` with ``clamp=True``). Directed edges count both ways.
    """
    from torch_geometric.data import Data

    from posenc.graph.transforms import AddAnchorPE

    check_positive_int("k", k)
    check_edge_index(edge_index, num_nodes)
    data = Data(edge_index=edge_index.detach().cpu().long(), num_nodes=num_nodes)
    pe = AddAnchorPE(k, seed=seed, clamp=True, symmetrize=True)(data).anchor_pe
    return pe.to(device=edge_index.device, dtype=torch.float32)


def node_pe(name: str, edge_index: torch.Tensor, num_nodes: int, k: int, *, seed: int = 0) -> torch.Tensor:
    """The encoding ``name`` (one of :data:`NODE_ENCODINGS`) of the graph: ``(num_nodes, k)``."""
    if name == "laplacian_pe":
        return laplacian_pe(edge_index, num_nodes, k)
    if name == "random_walk_pe":
        return random_walk_pe(edge_index, num_nodes, k)
    if name == "anchor_pe":
        return anchor_pe(edge_index, num_nodes, k, seed=seed)
    raise ValueError(f"name must be one of {list(NODE_ENCODINGS)}, got {name!r}")
