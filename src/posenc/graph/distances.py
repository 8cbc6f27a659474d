"""Shortest-path distances from anchors (or anchor sets) by one batched multi-source BFS.

The frontier of *all* ``K`` anchors is advanced together: at step ``t`` the
frontier is the set of pairs ``(k, u)`` with ``d(S_k, u) = t - 1``; one vectorised
expansion over the CSR adjacency gives every candidate pair ``(k, v)``, the ones
not yet visited get distance ``t``. Work is ``O(K (n + m))`` in total and memory
``O(K n)``; nothing is all-pairs. Distances to a *set* ``S_k`` (P-GNN's anchor
sets) come for free by seeding the BFS with every member of the set, and the
member each node is closest to (P-GNN's ``argmax`` of ``1/(d+1)``) is carried
along as the "origin" of each pair.

Three ways to compute it:

* ``method="scipy"`` (single anchors only): one compiled breadth-first traversal
  per anchor (``scipy.sparse.csgraph.breadth_first_order`` on the symmetric
  adjacency as a directed graph, so no transpose is built per call); the depths
  follow from the traversal order and the BFS tree (:func:`bfs_per_anchor`).
* ``method="gather"``: the batched search above; the candidates are gathered from a
  padded neighbour table (bounded degree) or by a CSR expansion (skewed degree),
  and duplicates are resolved by a stamp trick, all in numpy.
* ``method="spgemm"``: the frontier is a sparse ``(K, n)`` matrix ``F`` and the
  candidates are ``F @ A`` (scipy sparse product); no origins.

``method="auto"`` (default) takes ``"scipy"`` for single anchors without a
``max_distance`` (it is faster there: each traversal stays in cache) and
``"gather"`` otherwise (anchor sets, q-hop cut-offs).

Unreachable pairs (another connected component, or farther than
``max_distance``) get distance ``inf`` (``-1`` in the integer routine).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch
from scipy.sparse.csgraph import breadth_first_order

from posenc._checks import check_choice, check_positive_int
from posenc._resources import check_footprint
from posenc.graph._validate import adjacency_csr
from posenc.graph.anchors import AnchorSets


def _check_anchor_sets(anchors: AnchorSets | torch.Tensor, num_nodes: int) -> AnchorSets:
    if isinstance(anchors, AnchorSets):
        if anchors.num_nodes != num_nodes:
            raise ValueError(
                f"anchors were drawn for num_nodes={anchors.num_nodes}, the graph has {num_nodes} nodes"
            )
        return anchors
    if not isinstance(anchors, torch.Tensor):
        raise TypeError(f"anchors must be a LongTensor (K,) or AnchorSets, got {type(anchors).__name__}")
    if anchors.dim() != 1 or anchors.numel() == 0 or anchors.is_floating_point():
        raise ValueError(f"anchors must be a non-empty 1-D integer tensor, got shape {tuple(anchors.shape)}")
    if int(anchors.min()) < 0 or int(anchors.max()) >= num_nodes:
        raise ValueError(f"anchors must lie in [0, num_nodes={num_nodes})")
    return AnchorSets.singletons(anchors, num_nodes)


def _expand_csr(indptr: np.ndarray, indices: np.ndarray, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Neighbours of every ``u`` (concatenated) and the position in ``u`` each came from."""
    start = indptr[u]
    deg = indptr[u + 1] - start
    total = int(deg.sum())
    parent = np.repeat(np.arange(u.shape[0]), deg)
    offset = np.arange(total) - np.repeat(np.cumsum(deg) - deg, deg)
    return indices[start[parent] + offset], parent


def bfs_from_sets(
    adj: sp.csr_matrix,
    anchors: AnchorSets,
    *,
    max_distance: int | None = None,
    return_origin: bool = False,
) -> tuple[np.ndarray, np.ndarray | None]:
    """Batched multi-source BFS on a validated CSR adjacency (the integer core).

    Args:
        adj: ``(n, n)`` symmetric CSR, sorted indices (see ``adjacency_csr``).
        anchors: ``K`` anchor sets.
        max_distance: stop after this many steps (P-GNN-F's q-hop cutoff).
        return_origin: also return, per pair, the member of ``S_k`` that reached it.

    Returns:
        ``dist`` ``(K, n)`` int32 (``-1`` = unreachable) and ``origin`` ``(K, n)`` int32 or None.
    """
    n = adj.shape[0]
    k_sets = anchors.num_sets
    stride = n + 1  # column n of every row is a sentinel ("already visited")
    itype = np.int32 if k_sets * stride < 2**31 - 1 else np.int64  # halves memory traffic
    indptr = adj.indptr.astype(np.int64)
    indices = adj.indices.astype(itype)
    deg = np.diff(indptr)
    dmax = int(deg.max()) if n else 0
    padded = dmax > 0 and n * dmax <= 4 * indices.shape[0] + n
    if padded:
        nbr = np.full((n + 1, dmax), n, dtype=itype)
        rows = np.repeat(np.arange(n), deg)
        nbr[rows, np.arange(indices.shape[0]) - indptr[rows]] = indices

    dist = np.full(k_sets * stride, -1, dtype=np.int32)
    dist[np.arange(k_sets, dtype=np.int64) * stride + n] = 0
    key = np.unique(anchors.set_index.numpy().astype(np.int64) * stride + anchors.nodes.numpy()).astype(itype)
    dist[key] = 0
    origin = front_origin = None
    if return_origin:
        origin = np.full(k_sets * stride, -1, dtype=np.int32)
        front_origin = (key % stride).astype(np.int32)
        origin[key] = front_origin
    t = 0
    while key.shape[0] and (max_distance is None or t < max_distance):
        t += 1
        u = key % stride
        base = key - u
        if padded:
            cand = (np.take(nbr, u, axis=0) + base[:, None]).ravel()  # take: ~2x faster than nbr[u]
            parent = np.repeat(np.arange(key.shape[0]), dmax) if return_origin else None
        else:
            cand, parent = _expand_csr(indptr, indices, u)
            cand += base[parent]
        fresh = np.take(dist, cand) < 0
        cand = np.compress(fresh, cand)
        stamp = np.arange(-2, -2 - cand.shape[0], -1, dtype=np.int32)
        np.put(dist, cand, stamp)  # among duplicates exactly one stamp survives
        first = np.take(dist, cand) == stamp
        cand = np.compress(first, cand)
        np.put(dist, cand, t)
        if return_origin:
            front_origin = front_origin[parent[fresh][first]]
            origin[cand] = front_origin
        key = cand
    dist = dist.reshape(k_sets, stride)[:, :n]
    if origin is not None:
        origin = origin.reshape(k_sets, stride)[:, :n]
    return dist, origin


def bfs_per_anchor(adj: sp.csr_matrix, anchors: np.ndarray, *, max_distance: int | None = None,
                   dtype=np.int32) -> np.ndarray:
    """Hop distances from each single anchor, one compiled traversal per anchor.

    ``scipy.sparse.csgraph.breadth_first_order`` returns the nodes in BFS order and the
    BFS tree (each node's predecessor). In BFS order depths never decrease and the
    tree children of the first ``p`` nodes are exactly the nodes at positions
    ``1 .. c_p``, where ``c_p`` counts those children. So if depth ``l + 1`` starts at
    position ``s`` (every node before it has depth ``<= l``), depth ``l + 2`` starts at
    ``1 + c_s``. One count of children (``bincount`` of the predecessors), one gather
    and a cumulative sum give every depth, with no frontier bookkeeping.

    Args:
        adj: ``(n, n)`` symmetric CSR (see ``adjacency_csr``): traversed as a directed
            graph, which on a symmetric matrix is the undirected traversal.
        anchors: ``(K,)`` node ids (repeats allowed).
        max_distance: pairs farther than this are reported unreachable.
        dtype: of the result: an integer dtype (``-1`` where unreachable) or a floating
            one (``inf`` where unreachable), written directly (no conversion pass).

    Returns:
        ``(K, n)`` of ``dtype``.
    """
    n = adj.shape[0]
    # breadth_first_order works on float64 data and int32 indices: convert once, not per call
    graph = sp.csr_matrix((np.ones(adj.indices.shape[0]), adj.indices.astype(np.int32, copy=False),
                           adj.indptr.astype(np.int32, copy=False)), shape=adj.shape)
    anchors = np.asarray(anchors, dtype=np.int64).reshape(-1)
    dtype = np.dtype(dtype)
    missing = np.inf if dtype.kind == "f" else -1
    dist = np.empty((anchors.shape[0], n), dtype=dtype)
    for row, source in zip(dist, anchors):
        order, pred = breadth_first_order(graph, int(source), directed=True, return_predecessors=True)
        m = order.shape[0]
        np.maximum(pred, -1, out=pred)  # unreached nodes (and the root) have no parent: bin 0
        pred[source] = -1
        pred += 1
        children = np.bincount(pred, minlength=n + 1)[1:]  # BFS-tree children of each node
        reach = np.cumsum(np.take(children, order))  # children of the first p + 1 nodes of the order
        starts = [0, 1]  # positions in the order where each depth begins
        while starts[-1] < m:
            starts.append(1 + int(reach[starts[-1] - 1]))
        depth = np.repeat(np.arange(len(starts) - 1, dtype=np.int32), np.diff(starts))
        if m < n:
            row.fill(missing)
        row[order] = depth
    if max_distance is not None:
        dist[dist > max_distance] = missing
    return dist


def bfs_from_sets_spgemm(adj: sp.csr_matrix, anchors: AnchorSets, *, max_distance: int | None = None) -> np.ndarray:
    """Same distances as :func:`bfs_from_sets`, each step one sparse product ``F @ A``.

    ``F`` is the ``(K, n)`` boolean frontier matrix. Returns ``(K, n)`` int32, ``-1`` unreachable.
    """
    n = adj.shape[0]
    k_sets = anchors.num_sets
    a_bool = adj.astype(np.bool_)
    dist = np.full(k_sets * n, -1, dtype=np.int32)
    key = np.unique(anchors.set_index.numpy().astype(np.int64) * n + anchors.nodes.numpy())
    dist[key] = 0
    rows = key // n
    frontier = sp.csr_matrix((np.ones(key.shape[0], bool), (rows, key % n)), shape=(k_sets, n))
    set_ids = np.arange(k_sets, dtype=np.int64)
    t = 0
    while frontier.nnz and (max_distance is None or t < max_distance):
        t += 1
        prod = frontier @ a_bool
        counts = np.diff(prod.indptr)
        cand = np.repeat(set_ids * n, counts) + prod.indices
        fresh = dist[cand] < 0
        dist[cand[fresh]] = t
        rows = np.repeat(set_ids, counts)[fresh]
        indptr = np.zeros(k_sets + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=k_sets), out=indptr[1:])
        frontier = sp.csr_matrix(
            (np.ones(rows.shape[0], bool), prod.indices[fresh], indptr), shape=(k_sets, n)
        )
    return dist.reshape(k_sets, n)


def anchor_distances(
    edge_index: torch.Tensor,
    num_nodes: int,
    anchors: AnchorSets | torch.Tensor,
    *,
    max_distance: int | None = None,
    return_origin: bool = False,
    symmetrize: bool = False,
    method: str = "auto",
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Hop distance from every node to every anchor (set), ``d(v, S_k) = min_{s in S_k} d(v, s)``.

    Args:
        edge_index: ``(2, E)`` undirected edges (PyG convention). Self-loops and
            duplicates are ignored; a directed graph raises unless ``symmetrize``.
        num_nodes: ``n >= 1``.
        anchors: ``(K,)`` anchor nodes or :class:`AnchorSets`.
        max_distance: if given, pairs farther than this are reported unreachable.
        return_origin: also return the closest member of each set.
        symmetrize: add reverse edges instead of rejecting a directed graph.
        method: ``"auto"`` (default: ``"scipy"`` for single anchors without
            ``max_distance``, else ``"gather"``), ``"scipy"`` (single anchors only),
            ``"gather"`` or ``"spgemm"`` (no origins); all give the same distances.
        dtype: floating dtype of the distances.
        device: where to put the outputs.

    Returns:
        ``dist`` ``(n, K)`` with ``inf`` where unreachable; with ``return_origin``
        also ``origin`` ``(n, K)`` long, ``-1`` where unreachable. Both are transposed
        views of ``(K, n)`` buffers (call ``.contiguous()`` for a node-major copy).
    """
    check_choice("method", method, ("auto", "scipy", "gather", "spgemm"))
    if max_distance is not None:
        check_positive_int("max_distance", max_distance, minimum=0)
    if not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating dtype (inf marks unreachable), got {dtype}")
    sets = _check_anchor_sets(anchors, num_nodes)
    # the BFS's (K, n) int64 distances (and origins), the float copy and its move to the output dtype
    per_pair = 8.0 * (2 if return_origin else 1) + 8.0 + dtype.itemsize + (8.0 if return_origin else 0.0)
    check_footprint(per_pair * sets.num_sets * num_nodes, f"num_nodes={num_nodes}, {sets.num_sets} anchors",
                    "the (n, K) anchor distances")
    adj = adjacency_csr(edge_index, num_nodes, symmetrize=symmetrize)
    single = sets.nodes.numel() == sets.num_sets  # every set has one member
    if method == "auto":
        method = "scipy" if single and max_distance is None else "gather"
    if method == "scipy":
        if not single:
            raise ValueError("method='scipy' takes single anchors, not anchor sets; use method='gather' "
                             "(or 'auto') for sets")
        # written as floats with inf directly: no integer array to convert afterwards
        dist_f = bfs_per_anchor(adj, sets.nodes.numpy(), max_distance=max_distance,
                                dtype=np.float64 if dtype == torch.float64 else np.float32)
        dist = torch.from_numpy(dist_f).to(device=device, dtype=dtype).t()
        if not return_origin:
            return dist
        # the origin of a single anchor is the anchor itself, wherever it is reachable
        origin = np.where(np.isfinite(dist_f), sets.nodes.numpy()[:, None], -1)
        return dist, torch.from_numpy(origin).to(device).t()
    if method == "spgemm":
        if return_origin:
            raise ValueError("return_origin is supported by method='gather' and 'scipy', not 'spgemm'")
        dist_i = bfs_from_sets_spgemm(adj, sets, max_distance=max_distance)
        origin_i = None
    else:
        dist_i, origin_i = bfs_from_sets(adj, sets, max_distance=max_distance, return_origin=return_origin)
    # Convert in the (K, n) layout of the BFS (streaming, no transposing copy) and return a
    # transposed view: (n, K), non-contiguous; .contiguous() if a dense node-major copy is needed.
    dist_f = dist_i.astype(np.float64 if dtype == torch.float64 else np.float32)
    dist_f[dist_i < 0] = np.inf
    dist = torch.from_numpy(dist_f).to(device=device, dtype=dtype).t()
    if return_origin:
        return dist, torch.from_numpy(origin_i.astype(np.int64)).to(device).t()
    return dist
