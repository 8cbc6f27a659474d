"""posenc's DARTS-PT defaults against a port of the authors' code, written here independently.

The port follows ``pt_project`` of ruocwang/darts-pt (``nasbench201/projection.py``): the
weights' SGD is replaced once by one at a tenth of the learning rate (constant, momentum kept);
``tune_epochs = proj_intv * (edges - 1)``; a decision at every epoch that is a multiple of
``proj_intv`` and at the last one; a decision masks each op of a random edge in turn (weight 0,
no renormalisation) and scores the supernet's validation accuracy in train mode over batches of
64, keeping the op whose removal lowers it most (the first on ties); every tuning step takes an
Adam step of the architecture weights on a validation batch, then an SGD step of the weights with
gradient clipping 5. Its forward pass is written out here with an explicit weight matrix, as the
authors' ``forward(inputs, weights)``, rather than through ``MixedOp``.
"""

import copy
import math

import pytest
import torch
from torch import nn

from posenc.search import (
    DartsNet,
    Finetune,
    NB201MicroNet,
    darts_pt,
    mixed_ops,
    perturbation_select,
    topology_select,
    train_darts,
    tuning_epochs,
)

OPS = ("none", "skip", "conv3x3")


def _data(n, seed, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 1, 8, 8, generator=g, dtype=dtype)
    # a learnable label: which quadrant is brightest
    q = torch.stack([x[:, 0, :4, :4].mean((1, 2)), x[:, 0, :4, 4:].mean((1, 2)),
                     x[:, 0, 4:, :4].mean((1, 2)), x[:, 0, 4:, 4:].mean((1, 2))], 1)
    return x, q.argmax(1)


class Stream:
    """Batches of a pair: one random permutation per epoch, the last batch smaller (a DataLoader
    with a random sampler), drawn from a generator shared by the train and validation streams."""

    def __init__(self, data, batch_size, gen):
        self.x, self.y, self.bs, self.gen, self.queue = data[0], data[1], batch_size, gen, []

    def next(self):
        if not self.queue:
            perm = torch.randperm(len(self.y), generator=self.gen)
            self.queue = [perm[s:s + self.bs] for s in range(0, len(perm), self.bs)]
        idx = self.queue.pop(0)
        return self.x[idx], self.y[idx]


def port_forward(net, x, weights, edge_index):
    """TinyNetwork.forward(inputs, weights) of the authors, on posenc's NB201MicroNet modules."""
    h = net.stem(x)
    for cell in net.cells:
        nodes = [h]
        for j in range(1, cell.num_nodes):
            inter = []
            for i in range(j):
                name = f"{j}<-{i}"
                w = weights[edge_index[name]]
                inter.append(sum(layer(nodes[i]) * w[k] for k, layer in enumerate(cell.edges[name].candidates)))
            nodes.append(sum(inter))
        h = nodes[-1]
    h = torch.relu(net.head_bn(h))
    return net.classifier(nn.functional.adaptive_avg_pool2d(h, net.pool).flatten(1))


def port_pt_project(net, alpha, train, val, *, order, proj_intv, lr, seed, batch_size=32, val_batch=64):
    """The authors' ``pt_project`` loop with the edge order given (they draw it at random)."""
    names = [e.split(".edges.")[1] for e in mixed_ops(net)]
    edge_index = {name: k for k, name in enumerate(names)}
    num_edges = len(names)
    weights_params = [p for p in net.parameters() if all(p is not e.alpha for e in mixed_ops(net).values())]
    optimizer = torch.optim.SGD(weights_params, lr, momentum=0.9, weight_decay=3e-4)
    architect = torch.optim.Adam([alpha], lr=3e-4, betas=(0.5, 0.999), weight_decay=1e-3)
    proj_weights = torch.zeros_like(alpha)
    candidate = [True] * num_edges

    def projected():
        w = torch.softmax(alpha, dim=-1)
        rows = [proj_weights[e] if not candidate[e] else w[e] for e in range(num_edges)]
        return torch.stack(rows)

    def infer(weights):
        net.train()  # infer(..., eval=False): batch statistics
        correct = 0
        with torch.no_grad():
            for s in range(0, len(val[1]), val_batch):
                out = port_forward(net, val[0][s:s + val_batch], weights, edge_index)
                correct += int((out.argmax(-1) == val[1][s:s + val_batch]).sum())
        return correct / len(val[1])

    gen = torch.Generator().manual_seed(seed)
    vq, tq = Stream(val, batch_size, gen), Stream(train, batch_size, gen)
    tune_epochs = proj_intv * (num_edges - 1)
    decisions, order = [], list(order)
    for epoch in range(tune_epochs):
        if epoch % proj_intv == 0 or epoch == tune_epochs - 1:
            eid = edge_index[order.pop(0)]
            best, extrema, scores = 0, None, []
            for opid in range(len(OPS)):
                w = projected().detach().clone()
                mask = torch.ones_like(w[eid])
                mask[opid] = 0
                w[eid] = w[eid] * mask
                crit = infer(w)
                scores.append(crit)
                if extrema is None or crit < extrema:
                    extrema, best = crit, opid
            proj_weights[eid][best] = 1
            candidate[eid] = False
            decisions.append((names[eid], OPS[best], scores))
        for _ in range(math.ceil(len(train[1]) / batch_size)):
            net.train()
            xv, yv = vq.next()
            optimizer.zero_grad()
            architect.zero_grad()
            nn.functional.cross_entropy(port_forward(net, xv, projected(), edge_index), yv).backward()
            architect.step()
            xt, yt = tq.next()
            optimizer.zero_grad()
            architect.zero_grad()
            nn.functional.cross_entropy(port_forward(net, xt, projected(), edge_index), yt).backward()
            nn.utils.clip_grad_norm_(weights_params, 5.0)
            optimizer.step()
    return decisions


@pytest.mark.parametrize("seed", [0, 1])
def test_darts_pt_defaults_make_the_decisions_of_the_authors_rule(seed):
    train, val = _data(96, 10 + seed), _data(130, 20 + seed)
    torch.manual_seed(seed)
    net = NB201MicroNet(4, 4, ops=OPS, num_nodes=3, num_cells=2, pool=2, dtype=torch.float64)
    train_darts(net, train, val, epochs=6, batch_size=32, lr=0.05, a_lr=3e-2, seed=seed)
    port_net = copy.deepcopy(net)
    alpha = torch.stack([e.alpha.detach() for e in mixed_ops(port_net).values()]).clone().requires_grad_(True)
    proj_intv, lr = 2, 0.005
    tune = Finetune(train, val, epochs=tuning_epochs(3, proj_intv), lr=lr, batch_size=32, seed=seed)
    sel = perturbation_select(net, val, finetune=tune, seed=seed, ties="official")  # defaults: accuracy, batch 64
    order = [d["edge"].split(".edges.")[1] for d in sel.decisions]
    ported = port_pt_project(port_net, alpha, train, val, order=order, proj_intv=proj_intv, lr=lr, seed=seed)
    assert [(e, d["chosen"]) for e, d in zip(order, sel.decisions)] == \
        [(name, op) for name, op, _ in ported]
    for d, (_, _, scores) in zip(sel.decisions, ported):
        assert [d["scores"][op] for op in OPS] == pytest.approx(scores, abs=1e-12)
    # the same tuning: every weight the derived network uses ends where the authors' loop puts it
    # (an op left out of the cell keeps drifting there on momentum and weight decay, at weight 0)
    chosen = {name.split(".edges.")[1]: OPS.index(op) for name, op in sel.choices.items()}
    compared = 0
    for (k, p), q in zip(net.named_parameters(), port_net.parameters()):
        if k.endswith("alpha"):
            continue
        if ".candidates." in k:
            edge, idx = k.split(".edges.")[1].split(".candidates.")
            if int(idx.split(".")[0]) != chosen[edge]:
                continue
        torch.testing.assert_close(p, q, rtol=1e-9, atol=1e-11, msg=k)
        compared += 1
    assert compared >= 5
    # 4 tuning epochs of 3 steps; alpha updated at every step while an edge is undecided
    assert tune.calls == 3 and len(tune.history["train_loss"]) == 4 * 3 and len(tune.history["val_loss"]) == 3 * 3


def test_tuning_schedule_matches_the_authors_loops():
    def nb201(edges, intv):  # nasbench201/projection.py
        total = intv * (edges - 1)
        at = [e for e in range(total) if e % intv == 0 or e == total - 1]
        return [b - a for a, b in zip(at, at[1:] + [total])]

    def darts(projections, intv):  # sota/cnn/projection.py: tune_epochs = intv * (projections - 1) + 1
        total = intv * (projections - 1) + 1
        at = [e for e in range(total) if e % intv == 0 or e == total - 1]
        return [b - a for a, b in zip(at, at[1:] + [total])]

    for edges in range(2, 9):
        for intv in (2, 3, 5):
            assert tuning_epochs(edges, intv) == nb201(edges, intv)
            assert tuning_epochs(edges, intv, space="darts") == darts(edges, intv)
    assert tuning_epochs(6) == [5, 5, 5, 5, 4, 1] and sum(tuning_epochs(6)) == 25


def test_finetune_keeps_one_sgd_with_constant_lr_and_updates_alpha():
    train, val = _data(64, 1, torch.float32), _data(64, 2, torch.float32)
    torch.manual_seed(0)
    net = NB201MicroNet(4, 4, ops=OPS, num_cells=2, pool=2)
    edges = list(mixed_ops(net).values())
    edges[0].discretize("conv3x3")
    tune = Finetune(train, val, epochs=1, batch_size=32)
    before = edges[1].alpha.detach().clone()
    tune(net)
    opt = tune._w_opt
    assert opt.param_groups[0]["lr"] == 0.0025 and opt.param_groups[0]["momentum"] == 0.9
    buf = {id(p): opt.state[p]["momentum_buffer"].clone() for p in opt.param_groups[0]["params"] if p in opt.state}
    assert buf
    tune(net)
    assert tune._w_opt is opt  # persistent: the momentum carried over
    assert not torch.equal(before, edges[1].alpha.detach())  # DARTS+PT: alpha keeps training
    assert torch.equal(edges[0].alpha.detach(), edges[0].alpha.detach())
    fixed = Finetune(train, val, epochs=1, batch_size=32, fixed_alpha=True, persistent=False, schedule="cosine")
    alpha = edges[2].alpha.detach().clone()
    fixed(net)
    first = fixed._w_opt
    fixed(net)
    assert fixed._w_opt is not first and torch.equal(alpha, edges[2].alpha.detach())
    assert fixed.history["val_loss"] == []
    with pytest.raises(ValueError, match="called 2 times"):
        once = Finetune(train, val, epochs=[1])
        once(net)
        once(net)


def test_darts_space_decides_a_normal_and_a_reduction_edge_per_step_then_topology():
    x, y = _data(64, 3, torch.float32)
    torch.manual_seed(0)
    net = DartsNet(4, 4, ops=("skip", "sepconv3x3"), num_nodes=2, num_cells=3, in_channels=1)
    calls = []
    sel = perturbation_select(net, (x, y), groups=net.decision_groups(), seed=1,
                              finetune=lambda m: calls.append(sum(not e.undecided for e in mixed_ops(m).values())))
    assert calls == [2, 4, 6, 8, 10]  # one normal and one reduction edge per step, then tuning
    kinds = [d["edge"].split(".")[1] for d in sel.decisions]
    assert kinds == ["0", "1"] * 5  # cell 0 is the normal cell, cell 1 the first reduction cell
    assert [d["step"] for d in sel.decisions] == [1, 1, 2, 2, 3, 3, 4, 4, 5, 5]
    topo = topology_select(net, (x, y), net.node_inputs(), groups=net.node_groups(), seed=1)
    assert len(topo.pruned) == 2 and {p.split(".")[1] for p in topo.pruned} == {"0", "1"}
    for node in net.node_inputs():
        live = [e for e in net.node_inputs()[node] if not mixed_ops(net)[e].pruned]
        assert len(live) == 2


def _none_dominant_s3(seed=0):
    x, y = _data(64, 4, torch.float32)
    torch.manual_seed(seed)
    net = DartsNet(4, 4, ops=("none", "skip", "sepconv3x3"), num_nodes=2, num_cells=3, in_channels=1)
    for e in mixed_ops(net).values():
        with torch.no_grad():
            e.alpha.copy_(torch.tensor([5.0, 0.0, 0.0]))  # 'none' dominant: masking it changes nothing
    return net, x, y


def _project_op(scores: dict, base: float, names: list[str]) -> str:
    """The authors' project_op on one edge: the op whose masking gives the lowest accuracy, ties to the lowest
    index ('none' is op 0 and its masked accuracy is the unmasked one)."""
    masked = [base if n == "none" else scores[n] for n in names]
    return names[min(range(len(names)), key=lambda i: (masked[i], i))]


def test_darts_pt_keeps_none_where_the_authors_project_op_does():
    net, x, y = _none_dominant_s3()
    sel, topo = darts_pt(net, (x, y), (x, y), finetune_epochs=0, seed=0)
    names = ["none", "skip", "sepconv3x3"]
    kept_none = 0
    for d in sel.decisions:
        assert d["scores"]["none"] == d["base"]
        want = _project_op(d["scores"], d["base"], names)
        lowest = min(d["scores"].values())
        if want == "none":  # no other op's removal lowers the accuracy: the authors keep 'none'
            kept_none += 1
            assert lowest == d["base"] and d["chosen"] in [n for n in names if d["scores"][n] == lowest]
        else:
            assert d["chosen"] == want or d["scores"][d["chosen"]] == d["scores"][want]  # up to a tie
    assert kept_none > 0  # the case this test is about happens on this supernet
    assert topo is not None and len(topo.pruned) == 2


def test_darts_pt_keep_none_false_never_keeps_none():
    net, x, y = _none_dominant_s3()
    sel, topo = darts_pt(net, (x, y), (x, y), finetune_epochs=0, seed=0, keep_none=False)
    assert "none" not in sel.choices.values() and topo is not None and len(topo.pruned) == 2
    assert all(d["scores"]["none"] == d["base"] for d in sel.decisions)
    with pytest.raises(TypeError, match="keep_none"):
        darts_pt(*_none_dominant_s3()[:1], (x, y), (x, y), keep_none="no")
