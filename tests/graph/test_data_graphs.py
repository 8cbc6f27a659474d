import networkx as nx
import numpy as np
import pytest
import torch

from posenc.data.graphs import communities_graph, grid_graph, link_prediction_task, pairwise_task


def _edge_set(ei):
    return {tuple(e) for e in ei.T.tolist()}


def test_grid_is_pgnn_grid():
    ei, n = grid_graph()
    assert n == 400 and ei.shape[1] == 2 * 760
    ref = nx.convert_node_labels_to_integers(nx.grid_2d_graph(20, 20))
    assert _edge_set(ei) == {(u, v) for u, v in ref.edges()} | {(v, u) for u, v in ref.edges()}


def test_communities_rewiring_is_seeded_and_small():
    a, n, comm = communities_graph(0)
    b, _, _ = communities_graph(0)
    c, _, _ = communities_graph(1)
    assert torch.equal(a, b) and not torch.equal(a, c)
    ref = nx.connected_caveman_graph(20, 20)
    base = {(u, v) for u, v in ref.edges()} | {(v, u) for u, v in ref.edges()}
    changed = len(base ^ _edge_set(a)) / 2
    assert 0 < changed < 0.05 * len(base)  # ~1% of 3800 edges rewired (each rewire changes 2 entries)
    assert n == 400 and torch.equal(comm, torch.arange(400) // 20)
    assert (a[0] != a[1]).all()


@pytest.mark.parametrize("dataset", ["grid", "communities"])
def test_link_split_protocol(dataset):
    task = link_prediction_task(dataset, transductive=True, seed=3)
    e = task.train_pos.shape[1] + task.val_pos.shape[1] + task.test_pos.shape[1]
    assert abs(task.val_pos.shape[1] - 0.1 * e) <= 1 and abs(task.test_pos.shape[1] - 0.1 * e) <= 1
    assert task.val_neg.shape == task.val_pos.shape and task.test_neg.shape == task.test_pos.shape
    pos = _edge_set(torch.cat([task.train_pos, task.val_pos, task.test_pos], 1))
    pos |= {(v, u) for u, v in pos}
    negs = _edge_set(torch.cat([task.val_neg, task.test_neg], 1))
    assert not (negs & pos) and all(u != v for u, v in negs)
    # message passing sees only training edges, both directions
    assert _edge_set(task.edge_index) == _edge_set(task.train_pos) | {(v, u) for u, v in _edge_set(task.train_pos)}
    assert task.x.shape == (400, 400)
    assert link_prediction_task(dataset, transductive=False, seed=3).x.shape == (400, 1)


def test_pairwise_task_labels_are_communities():
    task = pairwise_task(seed=0)
    comm = np.arange(400) // 20
    for pairs, same in ((task.train_pos, True), (task.test_pos, True), (task.test_neg, False)):
        p = pairs.numpy()
        assert ((comm[p[0]] == comm[p[1]]) == same).all()
    assert task.train_pos.shape[1] + task.val_pos.shape[1] + task.test_pos.shape[1] == 20 * 190
    assert task.x.shape == (400, 1)
