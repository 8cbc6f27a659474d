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


def _two_components():
    # a path 0-1-2 and a separate edge 3-4: nodes 3, 4 cannot reach 0, 1, 2
    ei = torch.tensor([[0, 1, 1, 2, 3, 4], [1, 0, 2, 1, 4, 3]])
    return Data(edge_index=ei, num_nodes=5)


def test_add_anchor_pe_distance_is_finite_for_unreachable_nodes():
    data = _two_components()
    t = AddAnchorPE(5, seed=0, encoding="distance")
    pe = t(data.clone()).anchor_pe
    ref = anchor_distances(data.edge_index, 5, random_anchors(5, 5, generator=0))
    assert torch.isinf(ref).any()                                  # the graph does have unreachable pairs
    assert torch.isfinite(pe).all()
    torch.testing.assert_close(pe[torch.isfinite(ref)], ref[torch.isfinite(ref)])
    assert torch.equal(pe[torch.isinf(ref)], torch.full_like(pe[torch.isinf(ref)], -1.0))  # default: -1
    cut = AddAnchorPE(5, seed=0, encoding="distance", max_distance=1)(data.clone()).anchor_pe
    ref_cut = anchor_distances(data.edge_index, 5, random_anchors(5, 5, generator=0), max_distance=1)
    assert torch.equal(cut, torch.where(torch.isinf(ref_cut), 2.0, ref_cut))  # default with a cutoff: L + 1
    own = AddAnchorPE(5, seed=0, encoding="distance", unreachable=99)(data.clone()).anchor_pe
    assert torch.equal(own, torch.where(torch.isinf(ref), 99.0, ref))
    with pytest.raises(ValueError, match="unreachable"):
        AddAnchorPE(encoding="distance", unreachable=float("inf"))
    with pytest.raises(ValueError, match="unreachable"):
        AddAnchorPE(encoding="inverse", unreachable=0.0)
    with pytest.raises(TypeError, match="unreachable"):
        AddAnchorPE(encoding="distance", unreachable="far")


def test_add_anchor_pe_distance_unreachable_is_one_value_across_a_batch():
    # graphs of 9, 8 and 7 nodes, each with an isolated part: an unreachable anchor reads the
    # same in every graph of the batch (it was each graph's own node count: 9 / 8 / 7)
    from torch_geometric.data import Batch

    from posenc.graph.transforms import UNREACHABLE

    graphs, refs = [], []
    for n in (9, 8, 7):
        g = nx.disjoint_union(nx.path_graph(n - 3), nx.path_graph(3))   # two components
        graphs.append(Data(edge_index=nx_edge_index(g), num_nodes=n))
        refs.append(g)
    t = AddAnchorPE(4, seed=0, encoding="distance")
    batch = Batch.from_data_list([t(d.clone()) for d in graphs])
    assert batch.anchor_pe.shape == (24, 4)
    for i, (data, g) in enumerate(zip(graphs, refs)):
        n, start = data.num_nodes, int(batch.ptr[i])
        pe = batch.anchor_pe[start:start + n]
        anchors = batch.anchor_index[4 * i:4 * i + 4] - start          # PyG shifted the ids by `start`
        # reference: networkx hop counts, unreachable pairs absent from its dictionary
        for j, a in enumerate(anchors.tolist()):
            lengths = nx.single_source_shortest_path_length(g, a)
            want = torch.tensor([float(lengths.get(v, UNREACHABLE)) for v in range(n)])
            assert torch.equal(pe[:, j], want), (n, a)
    unreachable = batch.anchor_pe[batch.anchor_pe < 0]
    assert unreachable.numel() > 0 and torch.equal(unreachable, torch.full_like(unreachable, -1.0))
    assert UNREACHABLE == -1.0 and t.unreachable_value == -1.0
    # with a cutoff the default is max_distance + 1 in every graph, and unreachable= overrides both
    cut = Batch.from_data_list([AddAnchorPE(4, seed=0, encoding="distance", max_distance=2)(d.clone())
                                for d in graphs]).anchor_pe
    assert set(cut.unique().tolist()) <= {0.0, 1.0, 2.0, 3.0} and (cut == 3.0).any()
    own = AddAnchorPE(4, seed=0, encoding="distance", unreachable=50.0)
    assert own.unreachable_value == 50.0 and (own(graphs[0].clone()).anchor_pe == 50.0).any()


def test_add_anchor_pe_clamp_pads_missing_anchors_as_unreachable():
    small = Data(edge_index=torch.tensor([[0, 1], [1, 0]]), num_nodes=2)
    with pytest.raises(ValueError, match="num_anchors"):
        AddAnchorPE(4)(small.clone())
    inv = AddAnchorPE(4, clamp=True, seed=3)(small.clone())
    assert inv.anchor_pe.shape == (2, 4) and inv.anchor_index.numel() == 2
    assert sorted(inv.anchor_index.tolist()) == [0, 1]             # every node is an anchor
    d = anchor_distances(small.edge_index, 2, inv.anchor_index)
    torch.testing.assert_close(inv.anchor_pe[:, :2], 1.0 / (d + 1.0))
    assert torch.equal(inv.anchor_pe[:, 2:], torch.zeros(2, 2))     # unreachable: s = 0
    dist = AddAnchorPE(4, clamp=True, seed=3, encoding="distance")(small.clone()).anchor_pe
    assert torch.equal(dist[:, 2:], torch.full((2, 2), -1.0))       # the default unreachable value
    oh = AddAnchorPE(4, clamp=True, seed=3, encoding="onehot", max_distance=1)(small.clone()).anchor_pe
    assert oh.shape == (2, 4 * 3) and torch.equal(oh.view(2, 4, 3)[:, 2:, 2], torch.ones(2, 2))
    # graphs of mixed sizes batch: same width everywhere
    from torch_geometric.data import Batch

    t = AddAnchorPE(4, clamp=True, seed=0)
    big = Data(edge_index=nx_edge_index(nx.path_graph(6)), num_nodes=6)
    batch = Batch.from_data_list([t(small.clone()), t(big)])
    assert batch.anchor_pe.shape == (8, 4)
    # a graph with enough nodes is not affected by clamp
    torch.testing.assert_close(AddAnchorPE(4, clamp=True, seed=0)(big.clone()).anchor_pe,
                               AddAnchorPE(4, seed=0)(big.clone()).anchor_pe)


def test_add_anchor_pe_resample_draws_new_anchors_each_call(grid):
    ei, n = grid
    data = Data(edge_index=ei, num_nodes=n)
    fixed = AddAnchorPE(4, seed=0)
    assert torch.equal(fixed(data.clone()).anchor_index, fixed(data.clone()).anchor_index)
    t = AddAnchorPE(4, seed=0, resample=True)
    draws = [t(data.clone()).anchor_index for _ in range(4)]
    assert len({tuple(d.tolist()) for d in draws}) > 1                  # 16 choose 4 draws: not all equal
    # reproducible: the same seed gives the same sequence, and each draw is what random_anchors gives
    again = AddAnchorPE(4, seed=0, resample=True)
    for d in draws:
        assert torch.equal(again(data.clone()).anchor_index, d)
    gen = torch.Generator().manual_seed(0)
    assert torch.equal(draws[0], random_anchors(n, 4, generator=gen))
    assert torch.equal(draws[1], random_anchors(n, 4, generator=gen))
    # set_epoch: the draws depend on (seed, epoch) only, not on what was drawn before
    a, b = AddAnchorPE(4, seed=0, resample=True), AddAnchorPE(4, seed=0, resample=True)
    a(data.clone()), a(data.clone())
    a.set_epoch(3), b.set_epoch(3)
    assert torch.equal(a(data.clone()).anchor_index, b(data.clone()).anchor_index)
    with pytest.raises(ValueError, match="epoch"):
        a.set_epoch(-1)
    with pytest.raises(TypeError, match="resample"):
        AddAnchorPE(resample=1)


def test_add_anchor_pe_repr_names_every_setting():
    r = repr(AddAnchorPE(3, attr_name="pe", symmetrize=True))
    assert "attr_name='pe'" in r and "symmetrize=True" in r and "num_anchors=3" in r
    assert "clamp" not in r                                           # defaults stay out of the way
    r = repr(AddAnchorPE(3, encoding="distance", clamp=True, resample=True, unreachable=-1.0))
    assert "clamp=True" in r and "resample=True" in r and "unreachable=-1.0" in r
    assert "attr_name=None" in repr(AddAnchorPE(attr_name=None))
    with pytest.raises(ValueError, match="attr_name"):
        AddAnchorPE(attr_name="anchor pe")
    with pytest.raises(ValueError, match="seed"):
        AddAnchorPE(seed=-1)
