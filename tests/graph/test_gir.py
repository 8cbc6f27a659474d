import networkx as nx
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from posenc.graph.anchors import AnchorSets, bourgain_anchor_sets
from posenc.graph.distances import anchor_distances
from posenc.graph.gir import GIR, build_path_plan

from .conftest import nx_edge_index


def _graph(seed=0):
    g = nx.connected_caveman_graph(4, 5)
    g.add_edges_from([(20, 21), (21, 22)])  # a second component
    g.add_edge(0, 7)  # break symmetry
    return g, 23


def _lin(mod, v):
    return mod.weight.detach().numpy() @ v + mod.bias.detach().numpy()


def _relu(v):
    return np.maximum(v, 0.0)


def _depths(g, members):
    return nx.multi_source_dijkstra_path_length(g, set(members.tolist()))


def ref_path_states(model, x, g, n, sets):
    """Eq. (1)-(2) by explicit loops over nodes in BFS order (float64)."""
    hdim = model.hidden_channels
    w_ind = model.w_ind.detach().numpy()
    out = np.zeros((n, sets.num_sets, hdim))
    for k in range(sets.num_sets):
        depth = _depths(g, sets.nodes[sets.set_index == k])
        h = {}
        for v in sorted(depth, key=depth.get):
            xv = _lin(model.lin_x, x[v])
            if depth[v] == 0:
                h[v] = _relu(xv + w_ind)
            else:
                parents = [u for u in g.neighbors(v) if depth.get(u) == depth[v] - 1]
                h[v] = _relu(xv + _lin(model.lin_h, np.mean([h[u] for u in parents], axis=0)))
            out[v, k] = h[v]
    return out


def _setup(seed, readout="anchor", variant="path", **kw):
    g, n = _graph()
    torch.manual_seed(seed)
    x = torch.randn(n, 3, dtype=torch.float64)
    sets = bourgain_anchor_sets(n, c=0.5, generator=seed)
    ei = nx_edge_index(g)
    dist = anchor_distances(ei, n, sets, dtype=torch.float64)
    model = GIR(3, 4, variant=variant, readout=readout, dtype=torch.float64, **kw)
    return g, n, x.numpy(), torch.as_tensor(x), sets, ei, dist, model


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_path_variant_matches_loop_reference(seed):
    g, n, xn, x, sets, ei, dist, model = _setup(seed)
    states = ref_path_states(model, xn, g, n, sets)
    expect = np.einsum("nkh,h->nk", states, model.lin_pos.weight.detach().numpy()[0]) + model.lin_pos.bias.item()
    got = model(x, ei, dist)
    np.testing.assert_allclose(got.detach().numpy(), expect, rtol=1e-10, atol=1e-12)
    # unreachable pairs carry zero state -> z = bias exactly
    unreach = torch.isinf(dist)
    assert unreach.any()
    assert torch.allclose(got[unreach], model.lin_pos.bias.expand(int(unreach.sum())))


def test_mean_and_concat_readouts_match_reference():
    g, n, xn, x, sets, ei, dist, _ = _setup(0)
    for readout in ("mean", "concat"):
        torch.manual_seed(5)
        model = GIR(3, 4, readout=readout, dtype=torch.float64)
        states = ref_path_states(model, xn, g, n, sets)
        expect = states.mean(1) if readout == "mean" else states.reshape(n, -1)
        np.testing.assert_allclose(model(x, ei, dist).detach().numpy(), expect, rtol=1e-10, atol=1e-12)


def test_indication_variant_matches_loop_reference():
    g, n, xn, x, sets, ei, dist, model = _setup(1, variant="indication", readout="mean", rounds=3)
    w_ind = model.w_ind.detach().numpy()
    base = np.zeros((n, sets.num_sets, 4))
    ind = sets.indicator().numpy()
    for v in range(n):
        for k in range(sets.num_sets):
            base[v, k] = _lin(model.lin_x, xn[v]) + ind[v, k] * w_ind
    h = _relu(base)
    for _ in range(3):
        new = np.zeros_like(h)
        for v in range(n):
            nb = list(g.neighbors(v))
            for k in range(sets.num_sets):
                m = np.mean([h[u, k] for u in nb], axis=0) if nb else np.zeros(4)
                new[v, k] = _relu(base[v, k] + _lin(model.lin_h, m))
        h = new
    np.testing.assert_allclose(model(x, ei, dist).detach().numpy(), h.mean(1), rtol=1e-10, atol=1e-12)


def test_distance_variant_matches_reference():
    g, n, xn, x, sets, ei, dist, model = _setup(2, variant="distance", readout="mean", max_label=2)
    emb = model.label.weight.detach().numpy()
    expect = np.zeros((n, 4))
    for v in range(n):
        for k in range(sets.num_sets):
            d = dist[v, k].item()
            lab = 3 if np.isinf(d) else min(int(d), 2)
            expect[v] += _relu(_lin(model.lin_x, xn[v]) + emb[lab]) / sets.num_sets
    np.testing.assert_allclose(model(x, ei, dist).detach().numpy(), expect, rtol=1e-10, atol=1e-12)


@given(seed=st.integers(0, 1000), n=st.integers(2, 25))
def test_path_variant_is_permutation_equivariant(seed, n):
    g = nx.gnp_random_graph(n, 0.25, seed=seed)
    rng = np.random.default_rng(seed)
    perm = rng.permutation(n)
    anchors = torch.tensor([0, n - 1])
    torch.manual_seed(seed)
    x = torch.randn(n, 2, dtype=torch.float64)
    model = GIR(2, 3, dtype=torch.float64)
    ei = nx_edge_index(g)
    z = model(x, ei, anchor_distances(ei, n, anchors, dtype=torch.float64))
    inv = np.argsort(perm)  # new label of old node v is inv[v]
    gp = nx.relabel_nodes(g, {v: int(inv[v]) for v in range(n)})
    eip = nx_edge_index(gp) if gp.number_of_edges() else torch.empty(2, 0, dtype=torch.long)
    xp = x[torch.from_numpy(perm)]
    ap = torch.from_numpy(inv[anchors.numpy()])
    zp = model(xp, eip, anchor_distances(eip, n, ap, dtype=torch.float64))
    torch.testing.assert_close(zp, z[torch.from_numpy(perm)])


def test_plan_structure_on_path_graph():
    g = nx.path_graph(5)
    ei = nx_edge_index(g)
    dist = anchor_distances(ei, 5, torch.tensor([0]))
    plan = build_path_plan(ei, dist)
    assert plan.max_depth == 4
    assert [t.tolist() for t in plan.level_nodes] == [[0], [1], [2], [3], [4]]
    assert all(e.tolist() == [[0], [0]] for e in plan.level_edges)


def test_gradients_flow_and_out_channels():
    g, n, xn, x, sets, ei, dist, _ = _setup(0)
    model = GIR(3, 4, out_channels=6, num_anchors=sets.num_sets, dtype=torch.float64)
    out = model(x, ei, dist)
    assert out.shape == (n, 6)
    out.square().sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
    assert "variant='path'" in repr(model)


@pytest.mark.parametrize(
    "make, exc, match",
    [
        (lambda: GIR(3, variant="rnn"), ValueError, "variant"),
        (lambda: GIR(3, readout="max"), ValueError, "readout"),
        (lambda: GIR(0), ValueError, "in_channels"),
        (lambda: GIR(3, out_channels=4), ValueError, "num_anchors"),
        (lambda: GIR(3, readout="concat", out_channels=4), ValueError, "num_anchors"),
    ],
)
def test_bad_constructor_arguments(make, exc, match):
    with pytest.raises(exc, match=match):
        make()


def test_bad_forward_input():
    ei = nx_edge_index(nx.path_graph(4))
    dist = anchor_distances(ei, 4, torch.tensor([0]))
    model = GIR(2)
    with pytest.raises(ValueError, match="x"):
        model(torch.ones(4, 3), ei, dist)
    with pytest.raises(ValueError, match="anchor_dist"):
        model(torch.ones(4, 2), ei, dist[:3])
    with pytest.raises(TypeError, match="anchor_dist"):
        model(torch.ones(4, 2), ei, dist.long())
    with pytest.raises(ValueError, match="anchor_dist"):
        model(torch.ones(4, 2), ei, torch.full((4, 1), float("nan")))
    with pytest.raises(ValueError, match="edge_index"):
        model(torch.ones(4, 2), torch.tensor([[0], [9]]), dist)
    singles = AnchorSets.singletons(torch.tensor([0]), 4)
    assert singles.num_sets == 1


def test_plan_is_independent_of_anchor_chunking(monkeypatch):
    import posenc.graph.gir as gir_mod

    g, n, xn, x, sets, ei, dist, model = _setup(0)
    whole = build_path_plan(ei, dist)
    monkeypatch.setattr(gir_mod, "_PLAN_CHUNK", 1)  # one anchor per chunk
    chunked = build_path_plan(ei, dist)
    assert torch.equal(whole.order, chunked.order)
    for a, b in zip(whole.level_edges, chunked.level_edges):
        assert sorted(map(tuple, a.T.tolist())) == sorted(map(tuple, b.T.tolist()))
    torch.testing.assert_close(model(x, ei, dist, whole), model(x, ei, dist, chunked))
