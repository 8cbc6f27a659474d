import networkx as nx
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from posenc.graph.anchors import AnchorSets, bourgain_anchor_sets
from posenc.graph.distances import anchor_distances

from .conftest import all_pairs, nx_edge_index


def _random_graph(seed, n, p):
    g = nx.gnp_random_graph(n, p, seed=seed)
    return g, nx_edge_index(g)


@given(seed=st.integers(0, 10_000), n=st.integers(2, 40), p=st.floats(0.0, 0.3), k=st.integers(1, 6))
def test_matches_all_pairs_reference(seed, n, p, k):
    g, ei = _random_graph(seed, n, p)
    ref = all_pairs(g, n)
    anchors = torch.from_numpy(np.random.default_rng(seed).choice(n, size=min(k, n), replace=False))
    for method in ("auto", "scipy", "gather", "spgemm"):
        d = anchor_distances(ei, n, anchors, method=method, dtype=torch.float64)
        np.testing.assert_array_equal(d.numpy(), ref[:, anchors.numpy()])
    for method in ("scipy", "gather"):
        _, origin = anchor_distances(ei, n, anchors, method=method, return_origin=True)
        expect = np.where(np.isfinite(ref[:, anchors.numpy()]), anchors.numpy()[None, :], -1)
        np.testing.assert_array_equal(origin.numpy(), expect)


def test_disconnected_nodes_are_inf():
    g = nx.path_graph(4)
    g.add_nodes_from([4, 5])
    g.add_edge(4, 5)
    d = anchor_distances(nx_edge_index(g), 6, torch.tensor([0, 5]))
    assert d[:4, 1].isinf().all() and d[4:, 0].isinf().all()
    assert d[:, 0][:4].tolist() == [0, 1, 2, 3] and d[4, 1] == 1


def test_isolated_anchor_and_no_edges():
    d = anchor_distances(torch.empty(2, 0, dtype=torch.long), 3, torch.tensor([1]))
    assert d[:, 0].tolist() == [float("inf"), 0.0, float("inf")]


def test_max_distance_cutoff():
    g = nx.path_graph(10)
    d = anchor_distances(nx_edge_index(g), 10, torch.tensor([0]), max_distance=3)
    assert d[:4, 0].tolist() == [0, 1, 2, 3] and d[4:, 0].isinf().all()


def test_skewed_degree_uses_csr_expansion_and_is_correct():
    g = nx.star_graph(50)  # max degree 50 >> mean: not the padded table
    g.add_edges_from([(1, 51), (51, 52)])
    ref = all_pairs(g, 53)
    for method in ("gather", "scipy"):
        d = anchor_distances(nx_edge_index(g), 53, torch.tensor([52, 3]), dtype=torch.float64, method=method)
        np.testing.assert_array_equal(d.numpy(), ref[:, [52, 3]])


@pytest.mark.parametrize("make", [
    lambda: nx.path_graph(3000),  # 3000 depths of one node each
    lambda: nx.balanced_tree(3, 7),  # depths that triple
    lambda: nx.disjoint_union(nx.grid_2d_graph(30, 40), nx.cycle_graph(17)),  # two components
    lambda: nx.barabasi_albert_graph(3000, 3, seed=1),  # hubs: few, wide levels
    lambda: nx.convert_node_labels_to_integers(nx.random_geometric_graph(800, 0.05, seed=2)),
])
def test_per_anchor_traversal_matches_networkx_and_the_batched_search(make):
    from posenc.graph._validate import adjacency_csr
    from posenc.graph.distances import bfs_per_anchor

    g = nx.convert_node_labels_to_integers(make())
    n = g.number_of_nodes()
    ei = nx_edge_index(g)
    anchors = np.random.default_rng(n).choice(n, 7, replace=True)  # repeats allowed
    adj = adjacency_csr(ei, n)
    ours = bfs_per_anchor(adj, anchors)
    for row, a in zip(ours, anchors):
        want = np.full(n, -1)
        for v, d in nx.single_source_shortest_path_length(g, int(a)).items():
            want[v] = d
        np.testing.assert_array_equal(row, want)
    batched = anchor_distances(ei, n, torch.from_numpy(anchors), method="gather")
    np.testing.assert_array_equal(anchor_distances(ei, n, torch.from_numpy(anchors), method="scipy").numpy(),
                                  batched.numpy())
    cut = bfs_per_anchor(adj, anchors, max_distance=4)
    np.testing.assert_array_equal(cut, np.where(ours > 4, -1, ours))
    as_float = bfs_per_anchor(adj, anchors, max_distance=4, dtype=np.float32)  # inf where unreachable
    assert as_float.dtype == np.float32
    np.testing.assert_array_equal(as_float, np.where(cut < 0, np.inf, cut).astype(np.float32))


def test_auto_method_picks_the_per_anchor_traversal_only_for_single_anchors(monkeypatch):
    import posenc.graph.distances as distances

    calls = []
    real = distances.bfs_per_anchor
    monkeypatch.setattr(distances, "bfs_per_anchor", lambda *a, **k: calls.append(1) or real(*a, **k))
    g = nx.connected_caveman_graph(4, 5)
    ei, n = nx_edge_index(g), 20
    anchor_distances(ei, n, torch.tensor([0, 7]))
    assert calls == [1]
    anchor_distances(ei, n, torch.tensor([0, 7]), max_distance=2)  # q-hop cut-off: the batched search
    anchor_distances(ei, n, bourgain_anchor_sets(n, generator=0))  # sets: the batched search
    assert calls == [1]
    with pytest.raises(ValueError, match="method='scipy' takes single anchors"):
        anchor_distances(ei, n, bourgain_anchor_sets(n, generator=0), method="scipy")


@pytest.mark.parametrize("seed", range(4))
def test_anchor_sets_distance_and_origin(seed):
    g = nx.connected_caveman_graph(5, 6)
    g.add_node(30)  # isolated
    n = 31
    ref = all_pairs(g, n)
    sets = bourgain_anchor_sets(n, generator=seed)
    d, origin = anchor_distances(nx_edge_index(g), n, sets, return_origin=True, dtype=torch.float64)
    for k in range(sets.num_sets):
        members = sets.nodes[sets.set_index == k].numpy()
        expect = ref[:, members].min(1)
        np.testing.assert_array_equal(d[:, k].numpy(), expect)
        o = origin[:, k].numpy()
        reach = np.isfinite(expect)
        assert (o[~reach] == -1).all()
        assert np.isin(o[reach], members).all()
        np.testing.assert_array_equal(ref[np.arange(n)[reach], o[reach]], expect[reach])


def test_symmetrize_flag():
    ei = torch.tensor([[0, 1], [1, 2]])  # 0->1->2 only
    with pytest.raises(ValueError, match="edge_index"):
        anchor_distances(ei, 3, torch.tensor([0]))
    d = anchor_distances(ei, 3, torch.tensor([2]), symmetrize=True)
    assert d[:, 0].tolist() == [2, 1, 0]


def test_self_loops_and_duplicates_ignored():
    ei = torch.tensor([[0, 0, 1, 1, 0, 2], [0, 1, 0, 0, 1, 2]])  # loops (0,0),(2,2), duplicate 0-1
    d = anchor_distances(ei, 3, torch.tensor([0]))
    assert d[:, 0].tolist() == [0, 1, float("inf")]


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        ({"anchors": torch.tensor([5])}, ValueError, "anchors"),
        ({"anchors": torch.tensor([[0]])}, ValueError, "anchors"),
        ({"anchors": [0]}, TypeError, "anchors"),
        ({"method": "dijkstra"}, ValueError, "method"),
        ({"max_distance": -1}, ValueError, "max_distance"),
        ({"dtype": torch.int64}, TypeError, "dtype"),
        ({"method": "spgemm", "return_origin": True}, ValueError, "return_origin"),
    ],
)
def test_bad_arguments(kwargs, exc, match):
    ei = nx_edge_index(nx.path_graph(4))
    args = {"anchors": torch.tensor([0]), **kwargs}
    with pytest.raises(exc, match=match):
        anchor_distances(ei, 4, **args)


def test_anchor_sets_for_other_graph_rejected():
    sets = AnchorSets.singletons(torch.tensor([0]), 10)
    with pytest.raises(ValueError, match="num_nodes"):
        anchor_distances(nx_edge_index(nx.path_graph(4)), 4, sets)
