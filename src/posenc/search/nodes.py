"""Node position encodings as a candidate of :func:`~posenc.search.choose_encoding` for a graph model.

:class:`NodeEncoding` adds a learned projection of a position encoding of the graph's nodes to the
node features: ``x -> x + W pe`` with ``pe`` one of :data:`posenc.graph.node_pe.NODE_ENCODINGS`
(Laplacian eigenvectors, random-walk return probabilities, inverse distances to anchors),
``(num_nodes, k)``, computed from the graph the model is called with.

The model does not pass the graph to it: the model is a plain PyG-style model whose ``forward``
takes ``edge_index`` (``forward(self, x, edge_index)``, or a ``Data`` object with an ``edge_index``),
and :func:`feed_graph` registers a forward pre-hook on it that hands that ``edge_index`` to the
encoding before every call. :func:`~posenc.search.with_encoding` does both. A mini-batch of
several graphs (PyG's ``Batch``) is encoded graph by graph when the call also carries PyG's
``batch`` vector (an argument named ``batch``, or the ``Data`` object's ``batch``), and as the
disjoint union it is otherwise (which changes the Laplacian eigenvectors and the anchors, not the
random walk).

Choices made here (the papers' models feed the raw encodings to a learned linear map, as this does):

* each column of ``pe`` is scaled to unit root mean square over the nodes of the graph (a column
  of zeros stays zero), so that every encoding reaches the learned map at the same scale (unit
  eigenvectors of a large graph have entries near ``1 / sqrt(n)``);
* ``laplacian_pe``'s eigenvector signs are flipped at random (per column, per forward pass) in
  training mode, as Dwivedi et al. (JMLR 2023) train; in eval mode the deterministic signs of
  :func:`~posenc.graph.node_pe.laplacian_pe` are used;
* the encoding of the last graph seen is kept (with a copy of its ``edge_index``, compared by
  content, and its node count), so training on one graph computes it once, also when every step
  moves the graph to the model's device.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import nn

from posenc._checks import check_choice, check_positive_int
from posenc.search.batches import IGNORE_INDEX

__all__ = ["DEFAULT_K", "GRAPH_CANDIDATES", "NodeEncoding", "feed_graph", "node_split"]

#: Candidates of :func:`~posenc.search.choose_encoding` for a graph model: no encoding and the three node encodings.
GRAPH_CANDIDATES: tuple[str, ...] = ("none", "laplacian_pe", "random_walk_pe", "anchor_pe")
#: The default ``k`` of each encoding: 8 eigenvectors (Dwivedi et al., JMLR 2023), 16 walk lengths
#: (the random-walk encoding of GraphGPS), 16 anchors (:class:`~posenc.graph.AddAnchorPE`).
DEFAULT_K: dict[str, int] = {"laplacian_pe": 8, "random_walk_pe": 16, "anchor_pe": 16}


class NodeEncoding(nn.Module):
    """``x (num_nodes, dim) -> x + W pe(graph)`` (module docstring).

    Args:
        kind: ``'laplacian_pe'``, ``'random_walk_pe'`` or ``'anchor_pe'``.
        dim: the node feature width.
        k: columns of the encoding; default :data:`DEFAULT_K`.
        seed: the anchors' draw (``'anchor_pe'``).
        sign_flip: flip the Laplacian eigenvectors' signs at random in training mode.

    The graph comes from :func:`feed_graph` (set :attr:`edge_index` by hand to call it alone).
    """

    def __init__(self, kind: str, dim: int, k: int | None = None, *, seed: int = 0, sign_flip: bool = True,
                 device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        from posenc.graph.node_pe import NODE_ENCODINGS

        self.kind = check_choice("kind", kind, NODE_ENCODINGS)
        self.dim = check_positive_int("dim", dim)
        self.k = check_positive_int("k", DEFAULT_K[kind] if k is None else k)
        if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
            raise ValueError(f"seed must be a non-negative int, got {seed!r}")
        self.seed = seed
        self.sign_flip = bool(sign_flip)
        self.proj = nn.Linear(self.k, self.dim, device=device, dtype=dtype)
        #: the graph of the next call (set by :func:`feed_graph`'s hook)
        self.edge_index: torch.Tensor | None = None
        #: the graph of each node in a batch of graphs (PyG's ``batch``), or None for one graph
        self.batch: torch.Tensor | None = None
        self._cached: tuple[Any, ...] | None = None

    def reset_parameters(self) -> None:
        self.proj.reset_parameters()

    @torch.compiler.disable  # scipy / numpy on the graph: torch.compile runs it eagerly (a graph break)
    def encoding(self, edge_index: torch.Tensor, num_nodes: int, batch: torch.Tensor | None = None) -> torch.Tensor:
        """The column-normalised ``(num_nodes, k)`` encoding of the graph, or of each graph of a batch
        (``batch[i]``: the graph of node ``i``), cached for the last call's graph (compared by content,
        so a graph moved to the model's device at every step is still computed once)."""
        c = self._cached
        if (c is not None and c[2] == num_nodes and _same(c[0], edge_index)
                and ((c[1] is None) if batch is None else (c[1] is not None and _same(c[1], batch)))):
            return c[3]
        with torch.inference_mode(False), torch.no_grad():  # usable in training when first met under evaluation
            pe = self._normalised(edge_index, num_nodes) if batch is None else self._per_graph(edge_index, num_nodes,
                                                                                              batch)
            self._cached = (edge_index.detach().clone(), None if batch is None else batch.detach().clone(),
                            num_nodes, pe)
        return pe

    def _normalised(self, edge_index: torch.Tensor, num_nodes: int) -> torch.Tensor:
        from posenc.graph.node_pe import node_pe

        pe = node_pe(self.kind, edge_index, num_nodes, self.k, seed=self.seed)
        rms = pe.pow(2).mean(0, keepdim=True).sqrt()
        return torch.where(rms > 0, pe / rms.clamp_min(1e-30), pe)

    def _per_graph(self, edge_index: torch.Tensor, num_nodes: int, batch: torch.Tensor) -> torch.Tensor:
        if (not isinstance(batch, torch.Tensor) or batch.dtype.is_floating_point or batch.dim() != 1
                or batch.shape[0] != num_nodes):
            raise ValueError(f"batch must hold the graph index (integers) of each of the {num_nodes} nodes, got "
                             f"{getattr(batch, 'dtype', type(batch).__name__)} {tuple(getattr(batch, 'shape', ()))}")
        b = batch.detach().cpu().long()
        ei = edge_index.detach().cpu().long()
        if ei.numel() and bool((b[ei[0]] != b[ei[1]]).any()):
            raise ValueError("edge_index joins nodes of different graphs of batch: batch must give each node's graph")
        out = torch.zeros(num_nodes, self.k)
        local = torch.empty(num_nodes, dtype=torch.long)
        for g in torch.unique(b).tolist():
            nodes = (b == g).nonzero().flatten()
            local[nodes] = torch.arange(nodes.numel())
            edges = ei[:, b[ei[0]] == g]
            out[nodes] = self._normalised(local[edges], nodes.numel())
        return out.to(edge_index.device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dim() != 2 or x.shape[1] != self.dim:
            raise ValueError(f"x must be floating-point node features of shape (num_nodes, {self.dim}), got "
                             f"{getattr(x, 'dtype', type(x).__name__)} {tuple(getattr(x, 'shape', ()))}")
        ei = self.edge_index
        if not isinstance(ei, torch.Tensor):
            raise ValueError("NodeEncoding has no graph: call the model with an edge_index argument (or a Data "
                             "object holding one) after feed_graph(model, ...), which with_encoding does, or set "
                             ".edge_index")
        pe = self.encoding(ei, x.shape[0], self.batch).to(device=x.device, dtype=x.dtype)
        if self.training and self.sign_flip and self.kind == "laplacian_pe":
            pe = pe * (torch.randint(0, 2, (1, self.k), device=x.device) * 2 - 1).to(x.dtype)
        return x + self.proj(pe)

    def __getstate__(self) -> dict[str, Any]:  # a copy (deepcopy, pickle) holds no graph of the original
        state = self.__dict__.copy()
        state["edge_index"] = state["batch"] = None
        state["_cached"] = None
        return state

    def extra_repr(self) -> str:
        return f"kind={self.kind!r}, dim={self.dim}, k={self.k}, seed={self.seed}, sign_flip={self.sign_flip}"


def _same(kept: torch.Tensor, t: torch.Tensor) -> bool:
    return (kept.shape == t.shape and kept.dtype == t.dtype and kept.device == t.device
            and bool(torch.equal(kept, t)))


def _graph_of(module: nn.Module, args: tuple, kwargs: dict) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """``(edge_index, batch)`` of a call: arguments of those names, else a ``Data`` object's attributes."""
    try:
        bound = inspect.signature(module.forward).bind_partial(*args, **kwargs).arguments
    except (TypeError, ValueError):
        bound = {}
    found = {**bound, **kwargs}
    ei, batch = found.get("edge_index"), found.get("batch")
    if not isinstance(ei, torch.Tensor):
        for value in (*args, *kwargs.values()):
            if isinstance(getattr(value, "edge_index", None), torch.Tensor):  # a PyG Data / Batch
                ei, batch = value.edge_index, getattr(value, "batch", None)
                break
    return (ei if isinstance(ei, torch.Tensor) else None), (batch if isinstance(batch, torch.Tensor) else None)


class _GraphFeed:
    """The forward pre-hook of :func:`feed_graph` (an object, so that a deep copy of the model feeds its own
    encoding: the path is looked up on the module the hook is called with)."""

    posenc_graph_feed = True

    def __init__(self, path: str) -> None:
        self.path = path

    def __call__(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        slot = module.get_submodule(self.path)
        if isinstance(slot, NodeEncoding):
            slot.edge_index, slot.batch = _graph_of(module, args, kwargs)


def node_split(data: Any, mask: torch.Tensor | str, *, inputs: tuple[str, ...] = ("x", "edge_index"),
               target: str = "y") -> list[tuple[dict[str, torch.Tensor], torch.Tensor]]:
    """One graph's nodes of a split as data for :func:`~posenc.search.choose_encoding`: the batch
    ``[({"x": data.x, "edge_index": data.edge_index}, targets)]`` (the whole graph, used whole) whose
    targets are ``data.y`` on the nodes of ``mask`` and -100 (ignored) elsewhere.

    Args:
        data: a PyG ``Data`` (or any object with those attributes).
        mask: a boolean node mask, node indices (OGB's ``split_idx["train"]``), or the name of an
            attribute holding either (``"train_mask"``).
        inputs: the attributes given to the model, as keywords.
        target: the attribute holding the node classes (``(num_nodes,)``, or OGB's ``(num_nodes, 1)``).

    Example::

        choose_encoding(gnn, node_split(data, "train_mask"), node_split(data, "val_mask"),
                        candidates=GRAPH_CANDIDATES, encoding_at="pos", steps=200)
    """
    if isinstance(mask, str):
        name, mask = mask, getattr(data, mask, None)
    else:
        name = "mask"
    y = getattr(data, target, None)
    if isinstance(y, torch.Tensor) and y.dim() == 2 and y.shape[1] == 1:  # OGB's (num_nodes, 1) labels
        y = y[:, 0]
    if not isinstance(y, torch.Tensor) or y.dim() != 1 or y.dtype != torch.int64:
        raise ValueError(f"target: data.{target} must hold one int64 class per node, got "
                         f"{getattr(y, 'dtype', type(y).__name__)} {tuple(getattr(y, 'shape', ()))}")
    n = y.shape[0]
    if (isinstance(mask, torch.Tensor) and mask.dim() == 1 and not mask.is_floating_point()
            and mask.dtype != torch.bool):  # node indices (OGB's split_idx)
        if mask.numel() and (int(mask.min()) < 0 or int(mask.max()) >= n):
            raise ValueError(f"{name}: node indices must lie in [0, {n}), got values in "
                             f"[{int(mask.min())}, {int(mask.max())}]")
        mask = torch.zeros(n, dtype=torch.bool, device=y.device).index_fill_(0, mask.to(y.device), True)
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or mask.shape != y.shape:
        raise ValueError(f"{name} must be a boolean mask of the {n} nodes (or their indices), got "
                         f"{getattr(mask, 'dtype', type(mask).__name__)} {tuple(getattr(mask, 'shape', ()))}")
    if not bool(mask.any()):
        raise ValueError(f"{name} selects no node: nothing to train or measure on")
    found = {k: getattr(data, k, None) for k in inputs}
    missing = [k for k, v in found.items() if not isinstance(v, torch.Tensor)]
    if missing:
        raise ValueError(f"inputs: data has no tensor {missing}")
    return [(found, torch.where(mask, y, torch.full_like(y, IGNORE_INDEX)))]


def feed_graph(model: nn.Module, encoding_at: str) -> nn.Module:
    """Register (once) the forward pre-hook that hands each call's ``edge_index`` to the
    :class:`NodeEncoding` at ``encoding_at``; returns ``model``."""
    for hook in list(model._forward_pre_hooks.values()):
        if getattr(hook, "posenc_graph_feed", False) and hook.path == encoding_at:
            return model
    model.register_forward_pre_hook(_GraphFeed(encoding_at), with_kwargs=True)
    return model
