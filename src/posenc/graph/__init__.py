"""Node positions in graphs: anchors, anchor distances, GIR, P-GNN, PyG transforms.

This subpackage needs torch-geometric, networkx and scipy and is *not* imported
by ``import posenc``; import it explicitly (``import posenc.graph``). Without them
(``pip install "posenc[graph]"``), the import raises a ``ModuleNotFoundError`` whose
message names the extra.

Methods: GIR (Lu et al., "Graph Inference Representation", arXiv 2105.03821;
reconstructed, see :mod:`posenc.graph.gir`) and the P-GNN baseline (You et al.,
ICML 2019).
"""

from __future__ import annotations

from posenc._extras import install_hint, missing_extra

try:
    from posenc.graph.anchors import (
        AnchorSets,
        bourgain_anchor_sets,
        degree_anchors,
        random_anchors,
        select_anchors,
    )
    from posenc.graph.distances import anchor_distances, bfs_from_sets
    from posenc.graph.gir import GIR, PathPlan, build_path_plan
    from posenc.graph.models import FusedGIR, StandardGNN
    from posenc.graph.pgnn import PGNN, PGNNLayer, pgnn_anchor_inputs
    from posenc.graph.transforms import AddAnchorPE
except ModuleNotFoundError as _err:  # torch-geometric missing: name the extra, not a raw traceback
    if missing_extra(_err) is None:
        raise
    raise ModuleNotFoundError(install_hint(_err.name or "torch_geometric", "posenc.graph"), name=_err.name) from None

__all__ = [
    "AddAnchorPE",
    "AnchorSets",
    "FusedGIR",
    "GIR",
    "PGNN",
    "PGNNLayer",
    "PathPlan",
    "StandardGNN",
    "anchor_distances",
    "bfs_from_sets",
    "bourgain_anchor_sets",
    "build_path_plan",
    "degree_anchors",
    "pgnn_anchor_inputs",
    "random_anchors",
    "select_anchors",
]
