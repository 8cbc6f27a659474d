import networkx as nx
import numpy as np
import pytest
import torch

from posenc.graph._validate import adjacency_csr
from posenc.graph.anchors import bourgain_anchor_sets
from posenc.graph.pgnn import PGNN, PGNNLayer, pgnn_anchor_inputs

from .conftest import all_pairs, nx_edge_index


@pytest.mark.parametrize("q", [None, 1, 2])
@pytest.mark.parametrize("seed", [0, 1])
def test_anchor_inputs_match_all_pairs_argmax(q, seed):
    g = nx.connected_caveman_graph(4, 6)
    g.add_node(24)
    n = 25
    ref = all_pairs(g, n)
    s_all = np.where(np.isfinite(ref), 1.0 / (ref + 1.0), 0.0)
    if q is not None:
        s_all[ref > q] = 0.0
    sets = bourgain_anchor_sets(n, generator=seed)
    weight, index = pgnn_anchor_inputs(adjacency_csr(nx_edge_index(g), n), sets, q=q, dtype=torch.float64)
    for k in range(sets.num_sets):
        members = sets.nodes[sets.set_index == k].numpy()
        best = s_all[:, members].max(1)
        np.testing.assert_allclose(weight[:, k].numpy(), best)
        idx = index[:, k].numpy()
        assert np.isin(idx, members).all()
        np.testing.assert_allclose(s_all[np.arange(n), idx], best)
        assert (idx[best == 0] == members[0]).all()


def test_layer_matches_loop_reference():
    torch.manual_seed(0)
    n, k, f = 6, 3, 4
    h = torch.randn(n, f, dtype=torch.float64)
    weight = torch.rand(n, k, dtype=torch.float64)
    index = torch.randint(0, n, (n, k))
    layer = PGNNLayer(f, 5, dtype=torch.float64)
    pos, struct = layer(h, weight, index)
    W, b = layer.lin_msg.weight.detach(), layer.lin_msg.bias.detach()
    wp, bp = layer.lin_pos.weight.detach()[0], layer.lin_pos.bias.detach()[0]
    for v in range(n):
        msgs = []
        for j in range(k):
            m = torch.relu(W @ torch.cat([weight[v, j] * h[index[v, j]], h[v]]) + b)
            msgs.append(m)
            torch.testing.assert_close(pos[v, j], wp @ m + bp)
        torch.testing.assert_close(struct[v], torch.stack(msgs).mean(0))


def test_pgnn_output_is_unit_norm_and_trains():
    g = nx.grid_2d_graph(5, 5)
    g = nx.convert_node_labels_to_integers(g)
    adj = adjacency_csr(nx_edge_index(g), 25)
    w, i = pgnn_anchor_inputs(adj, bourgain_anchor_sets(25, generator=0))
    model = PGNN(1, 8, num_layers=3, dropout=0.0)
    z = model(torch.ones(25, 1), w, i)
    assert z.shape == w.shape
    torch.testing.assert_close(z.norm(dim=-1), torch.ones(25))
    z.sum().backward()
    assert model.lin_pre.weight.grad is not None


def test_pgnn_bad_input():
    model = PGNN(2, 4)
    w, i = torch.ones(3, 2), torch.zeros(3, 2, dtype=torch.long)
    with pytest.raises(ValueError, match="x"):
        model(torch.ones(3, 5), w, i)
    with pytest.raises(ValueError, match="weight"):
        model(torch.ones(3, 2), w[:2], i)
    with pytest.raises(ValueError, match="dropout"):
        PGNN(2, dropout=1.5)
    with pytest.raises(ValueError, match="num_layers"):
        PGNN(2, num_layers=0)
