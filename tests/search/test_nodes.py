"""Node encodings of a graph model as choose_encoding candidates: the encodings against PyG's transforms and
dense float64 references, NodeEncoding fed by the model's own edge_index, targets of -100 ignored, and
the race choosing among them on a plain PyG model; bad input fails naming the argument."""

import copy

import numpy as np
import pytest
import torch
from torch import nn

pytest.importorskip("torch_geometric")
nx = pytest.importorskip("networkx")

import torch_geometric.transforms as T  # noqa: E402
from torch_geometric.data import Data  # noqa: E402
from torch_geometric.nn import GCNConv  # noqa: E402
from torch_geometric.utils import from_networkx  # noqa: E402

from posenc.graph import AddAnchorPE  # noqa: E402
from posenc.graph import node_pe as npe  # noqa: E402
from posenc.graph.node_pe import anchor_pe, laplacian_pe, random_walk_pe  # noqa: E402
from posenc.search import (  # noqa: E402
    GRAPH_CANDIDATES,
    NodeEncoding,
    choose_encoding,
    evaluate,
    feed_graph,
    parse_candidate,
    train_network,
    with_encoding,
)
from posenc.search.batches import Batches  # noqa: E402


def _graph(n=40, p=0.12, seed=1):
    """A connected random graph (no isolated node)."""
    d = from_networkx(nx.connected_watts_strogatz_graph(n, 4, max(p, 0.2), seed=seed))
    return d.edge_index, d.num_nodes


def _same_up_to_sign(a, b, atol=1e-5):
    a, b = torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64)
    return all(min(float((a[:, j] - b[:, j]).abs().max()), float((a[:, j] + b[:, j]).abs().max())) < atol
               for j in range(a.shape[1]))


# ------------------------------------------------------------------ the encodings
def test_laplacian_pe_matches_a_dense_float64_reference_and_pyg():
    ei, n = _graph()
    pe = laplacian_pe(ei, n, 6)
    assert pe.shape == (n, 6) and pe.dtype == torch.float32
    a = np.zeros((n, n))
    for s, t in ei.t().tolist():
        a[s, t] = 1.0
    deg = a.sum(1)
    lap = np.eye(n) - a / np.sqrt(np.outer(deg, deg))
    vals, vecs = np.linalg.eigh(lap)
    assert np.min(np.diff(vals[:8])) > 1e-6  # distinct eigenvalues: each eigenvector is defined up to its sign
    assert _same_up_to_sign(pe, vecs[:, 1:7])
    ref = T.AddLaplacianEigenvectorPE(6, is_undirected=True)(Data(edge_index=ei, num_nodes=n)).laplacian_eigenvector_pe
    assert _same_up_to_sign(pe, ref)
    # the sign convention: the entry of largest magnitude of each column is positive
    top = pe.abs().argmax(0)
    assert bool((pe[top, torch.arange(6)] > 0).all())


def test_laplacian_pe_sparse_path_agrees_with_the_dense_one(monkeypatch):
    ei, n = _graph(60, 0.1, seed=3)
    dense = laplacian_pe(ei, n, 4)
    monkeypatch.setattr(npe, "DENSE_LIMIT", 10)
    sparse = laplacian_pe(ei, n, 4)
    assert _same_up_to_sign(dense, sparse, atol=1e-4)


def test_laplacian_pe_pads_small_graphs_and_handles_isolated_nodes():
    pe = laplacian_pe(torch.tensor([[0, 1], [1, 0]]), 3, 4)  # an edge and an isolated node
    assert pe.shape == (3, 4)
    assert torch.equal(pe[:, 2:], torch.zeros(3, 2))  # only 2 eigenvectors after the first exist
    assert bool(torch.isfinite(pe).all())


def test_random_walk_pe_matches_matrix_powers_and_pyg():
    ei, n = _graph(30, 0.2, seed=5)
    pe = random_walk_pe(ei, n, 5)
    a = np.zeros((n, n))
    for s, t in ei.t().tolist():
        a[s, t] += 1.0
    p = a / np.maximum(a.sum(1, keepdims=True), 1.0)
    ref = np.stack([np.diagonal(np.linalg.matrix_power(p, t)) for t in range(1, 6)], 1)
    assert np.allclose(pe.numpy(), ref, atol=1e-6)
    pyg = T.AddRandomWalkPE(5)(Data(edge_index=ei, num_nodes=n)).random_walk_pe
    assert torch.allclose(pe, pyg, atol=1e-6)
    # on a cycle of length L the first return is possible only at even steps and at step L
    c5 = from_networkx(nx.cycle_graph(5)).edge_index
    r = random_walk_pe(c5, 5, 5)
    assert float(r[0, 0]) == 0.0 and float(r[0, 2]) == 0.0 and float(r[0, 4]) > 0.0


def test_random_walk_pe_sparse_path_agrees(monkeypatch):
    ei, n = _graph(50, 0.1, seed=2)
    dense = random_walk_pe(ei, n, 4)
    monkeypatch.setattr(npe, "DENSE_LIMIT", 5)
    assert torch.allclose(random_walk_pe(ei, n, 4), dense, atol=1e-6)


def test_anchor_pe_is_add_anchor_pe():
    ei, n = _graph()
    ref = AddAnchorPE(8, seed=3, clamp=True, symmetrize=True)(Data(edge_index=ei, num_nodes=n)).anchor_pe
    assert torch.equal(anchor_pe(ei, n, 8, seed=3), ref)
    assert not torch.equal(anchor_pe(ei, n, 8, seed=4), ref)


@pytest.mark.parametrize("fn", [laplacian_pe, random_walk_pe, anchor_pe])
def test_node_pe_bad_input_names_the_argument(fn):
    ei, n = _graph()
    with pytest.raises((TypeError, ValueError), match="k"):
        fn(ei, n, 0)
    with pytest.raises(ValueError, match="edge_index"):
        fn(torch.zeros(3, 4, dtype=torch.long), n, 2)
    with pytest.raises(ValueError, match="edge_index"):
        fn(torch.tensor([[0], [n]]), n, 2)
    with pytest.raises(TypeError, match="edge_index"):
        fn(ei.float(), n, 2)
    with pytest.raises(ValueError, match="num_nodes"):
        fn(torch.zeros(2, 0, dtype=torch.long), 0, 2)


def test_laplacian_pe_refuses_a_dense_decomposition_over_the_memory_limit(monkeypatch):
    from posenc._resources import FootprintError

    monkeypatch.setenv("POSENC_MAX_MEMORY", "100M")
    monkeypatch.setattr(npe, "DENSE_LIMIT", 10**6)
    with pytest.raises(FootprintError, match="num_nodes=4000"):
        laplacian_pe(torch.zeros(2, 0, dtype=torch.long), 4000, 4)
    with pytest.raises(FootprintError, match="num_nodes=4000"):
        random_walk_pe(torch.zeros(2, 0, dtype=torch.long), 4000, 4)


# ------------------------------------------------------------------ NodeEncoding and its feed
class PlainGCN(nn.Module):
    def __init__(self, classes=3, dim=16, in_dim=1):
        super().__init__()
        self.inp = nn.Linear(in_dim, dim)
        self.pos = nn.Identity()
        self.conv = GCNConv(dim, dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x, edge_index):
        return self.head(torch.relu(self.conv(self.pos(self.inp(x)), edge_index)))


class DataGCN(PlainGCN):
    def forward(self, data):  # a model that takes a PyG Data object
        return super().forward(data.x, data.edge_index)


def test_node_encoding_adds_a_projection_of_the_normalised_encoding():
    ei, n = _graph()
    enc = NodeEncoding("random_walk_pe", 8, k=4).eval()
    enc.edge_index = ei
    x = torch.randn(n, 8)
    pe = random_walk_pe(ei, n, 4)
    assert torch.equal(pe[:, 0], torch.zeros(n))  # no self-loops: no return after one step
    rms = pe.pow(2).mean(0, keepdim=True).sqrt()
    pe = pe / torch.where(rms > 0, rms, torch.ones_like(rms))  # a column of zeros stays zero
    assert torch.allclose(enc(x), x + pe @ enc.proj.weight.t() + enc.proj.bias, atol=1e-5)


def test_node_encoding_flips_laplacian_signs_in_training_only():
    ei, n = _graph()
    enc = NodeEncoding("laplacian_pe", 4, k=6)
    enc.edge_index = ei
    x = torch.zeros(n, 4)
    enc.eval()
    a, b = enc(x), enc(x)
    assert torch.equal(a, b)
    enc.train()
    torch.manual_seed(0)
    outs = {tuple(enc(x)[0].tolist()) for _ in range(8)}
    assert len(outs) > 1


def _count_encodings(monkeypatch) -> list:
    """A list that grows by one at every computation of a node encoding."""
    calls = []
    real = npe.node_pe
    monkeypatch.setattr(npe, "node_pe", lambda *a, **k: calls.append(1) or real(*a, **k))
    return calls


def test_node_encoding_computes_a_graph_once(monkeypatch):
    calls = _count_encodings(monkeypatch)
    ei, n = _graph()
    enc = NodeEncoding("anchor_pe", 4, k=4)
    enc.edge_index = ei
    for _ in range(3):
        enc(torch.zeros(n, 4))
    assert len(calls) == 1
    ei[1, 0] = (int(ei[1, 0]) + 1) % n  # changed in place: the same tensor, another graph
    enc(torch.zeros(n, 4))
    assert len(calls) == 2


@pytest.mark.parametrize("call", ["positional", "keyword", "data"])
def test_feed_graph_hands_the_call_s_edge_index_to_the_encoding(call):
    ei, n = _graph()
    x = torch.ones(n, 1)
    model = (DataGCN if call == "data" else PlainGCN)()
    with_encoding(model, "random_walk_pe", encoding_at="pos", dim=16, seed=0)
    assert isinstance(model.pos, NodeEncoding)
    if call == "positional":
        out = model(x, ei)
    elif call == "keyword":
        out = model(x=x, edge_index=ei)
    else:
        out = model(Data(x=x, edge_index=ei))
    assert model.pos.edge_index is ei and out.shape == (n, 3)
    # a deep copy feeds its own encoding, and does not carry the original's graph
    twin = copy.deepcopy(model)
    assert twin.pos.edge_index is None
    other, m = _graph(20, 0.3, seed=9)
    if call == "data":
        twin(Data(x=torch.ones(m, 1), edge_index=other))
    else:
        twin(torch.ones(m, 1), other)
    assert twin.pos.edge_index is other and model.pos.edge_index is ei
    feed_graph(model, "pos")  # registering again adds no second hook
    assert sum(getattr(h, "posenc_graph_feed", False) for h in model._forward_pre_hooks.values()) == 1


def test_node_encoding_without_a_graph_or_with_bad_features_says_so():
    enc = NodeEncoding("laplacian_pe", 4)
    with pytest.raises(ValueError, match="edge_index"):
        enc(torch.zeros(5, 4))
    enc.edge_index = torch.tensor([[0, 1], [1, 0]])
    with pytest.raises(ValueError, match=r"x must be .*\(num_nodes, 4\)"):
        enc(torch.zeros(5, 3))
    with pytest.raises(ValueError, match="kind"):
        NodeEncoding("lap", 4)
    with pytest.raises((TypeError, ValueError), match="dim"):
        NodeEncoding("laplacian_pe", 0)
    with pytest.raises((TypeError, ValueError), match="k"):
        NodeEncoding("laplacian_pe", 4, k=0)
    with pytest.raises(ValueError, match="seed"):
        NodeEncoding("anchor_pe", 4, seed=-1)


def test_graph_candidates_parse_and_refuse_attention_parts():
    assert parse_candidate("laplacian_pe").family == "graph"
    assert [parse_candidate(c).family for c in GRAPH_CANDIDATES] == ["additive", "graph", "graph", "graph"]
    with pytest.raises(ValueError, match="node encoding and an attention part"):
        parse_candidate("rope+laplacian_pe")


# ------------------------------------------------------------------ ignored targets
def test_targets_of_minus_100_count_in_no_loss_and_no_accuracy():
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    x, y = torch.randn(20, 4), torch.randint(0, 3, (20,))
    keep = torch.arange(20) % 3 != 0
    masked = torch.where(keep, y, torch.full_like(y, -100))
    full = evaluate(model, [(x, masked)])
    sub = evaluate(model, (x[keep], y[keep]))
    assert full[0] == pytest.approx(sub[0], rel=1e-6) and full[1] == pytest.approx(sub[1])
    with pytest.raises(ValueError, match="every target"):
        evaluate(model, [(x, torch.full_like(y, -100))])
    with pytest.raises(ValueError, match=r"or -100, ignored"):
        evaluate(model, [(x, torch.where(keep, y, torch.full_like(y, -7)))])


def test_a_graph_is_one_batch_used_whole_and_an_in_memory_graph_pair_says_how():
    ei, n = _graph()
    inputs = {"x": torch.ones(n, 1), "edge_index": ei}
    y = torch.zeros(n, dtype=torch.long)
    batches = list(Batches("train", [(inputs, y)]).epoch(4))
    assert len(batches) == 1 and batches[0][0]["edge_index"] is ei
    with pytest.raises(ValueError, match=r"list of batches, \[\(inputs, targets\)\]"):
        Batches("train", (inputs, y))


# ------------------------------------------------------------------ the race over node encodings
def _cycles_task():
    lengths = [length for length in (3, 4, 6) for _ in range(6)]
    d = from_networkx(nx.disjoint_union_all([nx.cycle_graph(length) for length in lengths]))
    y = torch.tensor([i for i, length in enumerate((3, 4, 6)) for _ in range(6) for _ in range(length)])
    n = y.shape[0]
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(0))
    inputs = {"x": torch.ones(n, 1), "edge_index": d.edge_index}
    out = {}
    for name, idx in (("train", perm[: n // 2]), ("val", perm[n // 2:])):
        t = torch.full((n,), -100)
        t[idx] = y[idx]
        out[name] = [(inputs, t)]
    return out


def test_choose_encoding_picks_the_node_encoding_that_tells_the_cycles_apart():
    torch.set_num_threads(1)
    data = _cycles_task()
    recipe = {"steps": 120, "lr": 1e-2}
    torch.manual_seed(0)
    model = PlainGCN()
    before = copy.deepcopy(model.state_dict())
    sel = choose_encoding(model, data["train"], data["val"], candidates=list(GRAPH_CANDIDATES), encoding_at="pos",
                          **recipe)
    # every node has degree 2: message passing alone cannot tell the cycles apart; return probabilities can
    assert sel.choices["encoding"] == "random_walk_pe"
    assert sel.candidates["encoding"]["none"]["val_accuracy"] < 0.5
    assert sel.cost["ratio"] <= 2.0 + 1e-9
    assert isinstance(model.pos, NodeEncoding)
    won = evaluate(model, data["val"])
    assert won[1] == pytest.approx(sel.candidates["encoding"]["random_walk_pe"]["val_accuracy"])
    # the winner is what a stand-alone training of the candidate gives
    torch.manual_seed(0)
    alone = with_encoding(PlainGCN(), "random_walk_pe", encoding_at="pos", dim=16, seed=0)
    alone.load_state_dict(before, strict=False)
    train_network(alone, data["train"], seed=0, batch_size=64, optimizer="adamw", lr=1e-2, lr_min=1e-5,
                  weight_decay=0.05, grad_clip=5.0, steps=120)
    assert evaluate(alone, data["val"]) == pytest.approx(won)
    # saved and rebuilt from a fresh plain model
    rebuilt = with_encoding(PlainGCN(), **sel.rebuild)
    rebuilt.load_state_dict(model.state_dict())
    inputs = data["val"][0][0]
    model.eval()
    rebuilt.eval()
    assert torch.equal(rebuilt(**inputs), model(**inputs))


def test_choose_encoding_refuses_graph_and_sequence_candidates_together():
    data = _cycles_task()
    with pytest.raises(ValueError, match="mix node encodings"):
        choose_encoding(PlainGCN(), data["train"], data["val"], candidates=["laplacian_pe", "sinusoidal"],
                        encoding_at="pos", steps=4)
    with pytest.raises(ValueError, match="max_len is for sequence candidates"):
        choose_encoding(PlainGCN(), data["train"], data["val"], candidates=list(GRAPH_CANDIDATES),
                        encoding_at="pos", max_len=8, steps=4)


# ------------------------------------------------------------------ batches of graphs, PyG splits
class PooledGCN(PlainGCN):
    def forward(self, x, edge_index, batch=None):  # PyG's convention for a mini-batch of graphs
        return super().forward(x, edge_index)


@pytest.mark.parametrize("kind", ["laplacian_pe", "random_walk_pe", "anchor_pe"])
def test_a_batch_of_graphs_is_encoded_graph_by_graph(kind):
    from torch_geometric.data import Batch

    graphs = [Data(x=torch.ones(n, 1), edge_index=from_networkx(g).edge_index, num_nodes=n)
              for n, g in ((6, nx.cycle_graph(6)), (9, nx.path_graph(9)), (7, nx.star_graph(6)))]
    batch = Batch.from_data_list(graphs)
    model = with_encoding(PooledGCN(), kind, encoding_at="pos", dim=16, seed=0).eval()
    model(batch.x, batch.edge_index, batch.batch)
    assert model.pos.batch is batch.batch
    got = model.pos.encoding(batch.edge_index, batch.num_nodes, batch.batch)
    alone = NodeEncoding(kind, 16, seed=0)
    want = torch.cat([alone.encoding(g.edge_index, g.num_nodes) for g in graphs])
    assert torch.allclose(got, want, atol=1e-6)
    whole = alone.encoding(batch.edge_index, batch.num_nodes)  # as one disjoint union
    if kind == "random_walk_pe":
        assert torch.allclose(torch.cat([random_walk_pe(g.edge_index, g.num_nodes, 16) for g in graphs]),
                              random_walk_pe(batch.edge_index, batch.num_nodes, 16))
    else:
        assert not torch.allclose(whole, want, atol=1e-3)
    with pytest.raises(ValueError, match="different graphs"):
        alone.encoding(batch.edge_index, batch.num_nodes, torch.zeros(batch.num_nodes, dtype=torch.long).index_fill_(
            0, torch.tensor([0]), 1))
    with pytest.raises(ValueError, match="batch must hold"):
        alone.encoding(batch.edge_index, batch.num_nodes, torch.zeros(3, dtype=torch.long))


def test_node_split_masks_the_targets_outside_the_split():
    from posenc.search import node_split

    ei, n = _graph()
    y = torch.arange(n) % 3
    mask = torch.arange(n) < 10
    data = Data(x=torch.ones(n, 1), edge_index=ei, y=y, train_mask=mask)
    (inputs, targets), = node_split(data, "train_mask")
    assert inputs["x"] is data.x and inputs["edge_index"] is ei
    assert torch.equal(targets[:10], y[:10]) and bool((targets[10:] == -100).all())
    assert torch.equal(node_split(data, mask)[0][1], targets)
    with pytest.raises(ValueError, match="val_mask must be a boolean mask"):
        node_split(data, "val_mask")
    with pytest.raises(ValueError, match="mask selects no node"):
        node_split(data, torch.zeros(n, dtype=torch.bool))
    with pytest.raises(ValueError, match="target: data.y"):
        node_split(Data(x=torch.ones(n, 1), edge_index=ei, y=y.float()), mask)
    with pytest.raises(ValueError, match=r"inputs: data has no tensor \['pe'\]"):
        node_split(data, mask, inputs=("x", "pe"))


# ------------------------------------------------------------------ found in review
def test_laplacian_pe_sparse_path_on_regular_graphs_with_repeated_eigenvalues(monkeypatch):
    # a constant start vector is the eigenvector of 0 on a regular graph: ARPACK broke down or lost copies
    for g in (nx.cycle_graph(150), nx.grid_2d_graph(12, 12, periodic=True)):
        d = from_networkx(g)
        n = d.num_nodes
        dense = laplacian_pe(d.edge_index, n, 6).double()
        monkeypatch.setattr(npe, "DENSE_LIMIT", 10)
        sparse = laplacian_pe(d.edge_index, n, 6).double()
        monkeypatch.setattr(npe, "DENSE_LIMIT", 2048)
        a = np.zeros((n, n))
        for s, t in d.edge_index.t().tolist():
            a[s, t] = 1.0
        lap = torch.from_numpy(np.eye(n) - a / np.sqrt(np.outer(a.sum(1), a.sum(1))))
        rq = lambda v: torch.einsum("ij,ik,kj->j", v, lap, v) / v.pow(2).sum(0)  # noqa: E731
        assert torch.allclose(rq(sparse), rq(dense), atol=1e-6)  # the same eigenvalues 2..7, copies included
        assert torch.allclose(sparse.t() @ sparse, torch.eye(6, dtype=torch.float64), atol=1e-5)


def test_laplacian_pe_sign_rule_takes_the_first_of_tied_entries():
    pe = laplacian_pe(torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]]), 3, 1)  # a path: (-1, 0, 1) / sqrt 2 up to sign
    assert float(pe[0, 0]) > 0 and float(pe[2, 0]) < 0


@pytest.mark.parametrize("kind", ["anchor_pe", "random_walk_pe", "laplacian_pe"])
def test_training_after_an_evaluation_on_the_same_graph(kind):
    # evaluate runs under inference_mode: the encoding it caches must still serve a training step
    ei, n = _graph()
    data = [({"x": torch.ones(n, 1), "edge_index": ei}, torch.arange(n) % 3)]
    model = with_encoding(PlainGCN(), kind, encoding_at="pos", dim=16, seed=0)
    evaluate(model, data)
    hist = train_network(model, data, steps=2)
    assert hist["steps"] == 2


def test_a_graph_moved_at_every_step_is_encoded_once(monkeypatch):
    calls = _count_encodings(monkeypatch)
    ei, n = _graph()
    enc = NodeEncoding("random_walk_pe", 4, k=4)
    for _ in range(3):
        enc.edge_index = ei.clone()  # a new tensor each time, as a move to the model's device makes
        enc(torch.zeros(n, 4))
    assert len(calls) == 1
    changed = ei.clone()
    changed[1, 0] = (int(changed[1, 0]) + 1) % n
    enc.edge_index = changed
    enc(torch.zeros(n, 4))
    assert len(calls) == 2


def test_token_accuracy_with_padding_is_a_share_of_the_kept_tokens():
    from posenc.search.supernet import _correct, counted

    logits = torch.zeros(2, 3, 4)  # (batch, classes, length): class 0 everywhere
    logits[:, 0] = 1.0
    targets = torch.tensor([[0, 0, 1, -100], [0, -100, -100, -100]])
    # 3 of the 4 kept tokens are right; the batch counts as 2 * 4/8 = 1 example
    assert counted(targets) == pytest.approx(1.0) and _correct(logits, targets) == pytest.approx(0.75)
    assert _correct(logits.transpose(1, 2), targets) == pytest.approx(0.75)  # classes last
    assert _correct(logits[:, :, 0], targets[:, 0]) == 2.0


def test_node_split_takes_ogb_labels_and_index_splits():
    from posenc.search import node_split

    ei, n = _graph()
    data = Data(x=torch.ones(n, 1), edge_index=ei, y=(torch.arange(n) % 3)[:, None])
    (_, targets), = node_split(data, torch.tensor([0, 5, 7]))
    assert torch.equal(targets[[0, 5, 7]], torch.tensor([0, 2, 1])) and int((targets == -100).sum()) == n - 3
    with pytest.raises(ValueError, match=r"node indices must lie in \[0, 40\)"):
        node_split(data, torch.tensor([0, 40]))


def test_a_graph_race_labels_none_as_none():
    data = _cycles_task()
    sel = choose_encoding(PlainGCN(), data["train"], data["val"], candidates=list(GRAPH_CANDIDATES),
                          encoding_at="pos", steps=12)
    assert sel.candidates["encoding"]["none"]["family"] == "none"
    assert {sel.candidates["encoding"][c]["family"] for c in GRAPH_CANDIDATES[1:]} == {"graph"}
