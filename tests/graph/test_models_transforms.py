import networkx as nx
import pytest
import torch
from torch_geometric.data import Data

from posenc.graph.anchors import random_anchors
from posenc.graph.distances import anchor_distances
from posenc.graph.gir import GIR
from posenc.graph.models import FusedGIR, StandardGNN
from posenc.graph.transforms import AddAnchorPE

from .conftest import nx_edge_index


@pytest.fixture
def grid():
    g = nx.convert_node_labels_to_integers(nx.grid_2d_graph(4, 4))
    return nx_edge_index(g), 16


@pytest.mark.parametrize("kind", ["gcn", "sage", "gat", "gin"])
def test_standard_gnn_shapes(grid, kind):
    ei, n = grid
    out = StandardGNN(kind, 3, 8, 5)(torch.randn(n, 3), ei)
    assert out.shape == (n, 5) and torch.isfinite(out).all()


def test_fusion_concat_and_add(grid):
    ei, n = grid
    dist = anchor_distances(ei, n, random_anchors(n, 4, generator=0))
    x = torch.randn(n, 3)
    cat = FusedGIR(StandardGNN("gcn", 3, 8, 5), GIR(3, 8))(x, ei, dist)
    assert cat.shape == (n, 9)
    # each half is unit norm
    torch.testing.assert_close(cat[:, :5].norm(dim=-1), torch.ones(n))
    torch.testing.assert_close(cat[:, 5:].norm(dim=-1), torch.ones(n))
    gnn, gir = StandardGNN("sage", 3, 8, 5), GIR(3, 8, out_channels=5, num_anchors=4)
    add = FusedGIR(gnn, gir, fusion="add").eval()(x, ei, dist)  # eval: no dropout
    torch.testing.assert_close(add, gnn(x, ei) + gir(x, ei, dist))
    with pytest.raises(ValueError, match="fusion"):
        FusedGIR(StandardGNN("gcn", 3, 8, 5), GIR(3, 8), fusion="add")
    with pytest.raises(ValueError, match="kind"):
        StandardGNN("mlp", 3)


def test_add_anchor_pe_encodings(grid):
    ei, n = grid
    data = Data(edge_index=ei, num_nodes=n, x=torch.ones(n, 2))
    out = AddAnchorPE(3, seed=1)(data.clone())
    anchors = random_anchors(n, 3, generator=1)
    d = anchor_distances(ei, n, anchors)
    torch.testing.assert_close(out.anchor_pe, 1.0 / (d + 1.0))
    assert torch.equal(out.anchor_index, anchors)
    dist = AddAnchorPE(3, seed=1, encoding="distance")(data.clone()).anchor_pe
    torch.testing.assert_close(dist, d)
    oh = AddAnchorPE(3, seed=1, encoding="onehot", max_distance=2)(data.clone()).anchor_pe
    assert oh.shape == (n, 3 * 4) and torch.equal(oh.view(n, 3, 4).sum(-1), torch.ones(n, 3))
    assert torch.equal(oh.view(n, 3, 4)[:, :, 3].bool(), d > 2)
    catted = AddAnchorPE(3, seed=1, attr_name=None)(data.clone())
    assert catted.x.shape == (n, 5)
    sets = AddAnchorPE(method="bourgain", seed=0)(data.clone())
    assert sets.anchor_pe.shape == (n, 16) and sets.anchor_set.max() == 15


def test_add_anchor_pe_bad_input():
    with pytest.raises(ValueError, match="max_distance"):
        AddAnchorPE(encoding="onehot")
    with pytest.raises(ValueError, match="encoding"):
        AddAnchorPE(encoding="sin")
    with pytest.raises(ValueError, match="num_anchors"):
        AddAnchorPE(5)(Data(edge_index=torch.tensor([[0, 1], [1, 0]]), num_nodes=2))
    with pytest.raises(ValueError, match="edge_index"):
        AddAnchorPE(1)(Data(edge_index=torch.tensor([[0], [1]]), num_nodes=2))
