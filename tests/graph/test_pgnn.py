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


def test_layer_with_learned_distance_map_matches_loop_reference():
    torch.manual_seed(1)
    n, k, f, out = 7, 4, 3, 5
    h = torch.randn(n, f, dtype=torch.float64)
    weight = torch.rand(n, k, dtype=torch.float64)
    weight[0, 1] = 0.0  # unreachable pair: the map still applies, g(0) = W2 relu(b1) + b2
    index = torch.randint(0, n, (n, k))
    layer = PGNNLayer(f, out, dist_trainable=True, dtype=torch.float64)
    with torch.no_grad():  # non-zero biases so that g(0) != 0 is exercised
        for p in layer.parameters():
            p.add_(0.1 * torch.randn_like(p))
    pos, struct = layer(h, weight, index)
    W, b = layer.lin_msg.weight.detach(), layer.lin_msg.bias.detach()
    wp, bp = layer.lin_pos.weight.detach()[0], layer.lin_pos.bias.detach()[0]
    w1, b1 = layer.dist_map[0].weight.detach()[:, 0], layer.dist_map[0].bias.detach()
    w2, b2 = layer.dist_map[2].weight.detach()[0], layer.dist_map[2].bias.detach()[0]
    for v in range(n):
        msgs = []
        for j in range(k):
            s = weight[v, j].item()
            g = sum(w2[c].item() * max(0.0, w1[c].item() * s + b1[c].item()) for c in range(out)) + b2.item()
            m = torch.relu(W @ torch.cat([g * h[index[v, j]], h[v]]) + b)
            msgs.append(m)
            torch.testing.assert_close(pos[v, j], wp @ m + bp)
        torch.testing.assert_close(struct[v], torch.stack(msgs).mean(0))
    assert "dist_trainable=True" in repr(layer)


def test_official_init_is_xavier_relu_gain_with_zero_bias():
    torch.manual_seed(0)
    layer = PGNNLayer(16, 32, dist_trainable=True, init="official", dtype=torch.float64)
    linears = [layer.lin_msg, layer.lin_pos, layer.dist_map[0], layer.dist_map[2]]
    for lin in linears:
        assert torch.count_nonzero(lin.bias) == 0
        fan_out, fan_in = lin.weight.shape
        bound = 2**0.5 * (6.0 / (fan_in + fan_out)) ** 0.5  # xavier_uniform, gain sqrt(2)
        assert lin.weight.abs().max() <= bound
    w = layer.lin_msg.weight  # 32 x 32: the empirical std is close to bound / sqrt(3)
    bound = 2**0.5 * (6.0 / 64) ** 0.5
    assert abs(w.std().item() - bound / 3**0.5) < 0.1 * bound
    # the torch default bound is 1/sqrt(fan_in): 4.5x narrower on lin_msg than xavier's
    default = PGNNLayer(16, 32, dtype=torch.float64)
    assert default.lin_msg.weight.abs().max() <= 1 / 32**0.5
    assert torch.count_nonzero(default.lin_msg.bias) > 0
    model = PGNN(1, 8, init="official", dist_trainable=True)
    assert all(torch.count_nonzero(layer.lin_msg.bias) == 0 for layer in model.layers)


def test_pgnn_options_bad_input():
    with pytest.raises(ValueError, match="init"):
        PGNNLayer(2, 3, init="xavier")
    with pytest.raises(TypeError, match="dist_trainable"):
        PGNNLayer(2, 3, dist_trainable="yes")
    with pytest.raises(ValueError, match="init"):
        PGNN(2, init=None)


def test_isolated_node_gets_s_one_for_itself():
    """Departure from the official code (documented): an isolated anchor has s(v, v) = 1."""
    from posenc.graph.anchors import AnchorSets

    edge_index = torch.tensor([[0, 1], [1, 0]])
    adj = adjacency_csr(edge_index, 3)  # node 2 isolated
    sets = AnchorSets(torch.tensor([2, 0]), torch.tensor([0, 1]), num_sets=2, num_nodes=3)
    weight, index = pgnn_anchor_inputs(adj, sets, dtype=torch.float64)
    assert weight[2, 0] == 1.0 and index[2, 0] == 2
    assert weight[0, 0] == 0.0 and weight[1, 1] == 0.5
