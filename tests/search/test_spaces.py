import pytest
import torch

from posenc.search import (
    PE_ATTENTION,
    PE_ENCODINGS,
    SELECTORS,
    SPACE_TRAINING,
    SPACES,
    STANDALONE_TRAINING,
    DartsNet,
    robust_darts_ops,
    PESearchNet,
    build_space,
    enumerate_architectures,
    evaluate,
    mixed_ops,
    perturbation_select,
    run_search,
    search_space,
    topology_select,
    train_darts,
    train_network,
)
from posenc.search.pe import EncodingBranch


def _digits(n=96, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 1, 8, 8, generator=g)
    return x, (x[:, 0, :4].mean((-1, -2)) * 10).long().clamp(0, 9)


def test_pe_space_edges_and_shapes():
    net = PESearchNet(depth=2)
    assert search_space(net) == {"encoding": PE_ENCODINGS, "blocks.0.attn": PE_ATTENTION,
                                 "blocks.1.attn": PE_ATTENTION}
    assert len(enumerate_architectures(net)) == 5 * 3 * 3
    x, _ = _digits(4)
    assert net(x).shape == (4, 10)


def test_pe_candidates_are_rms_normalised_and_none_is_zero():
    net = PESearchNet()
    tokens = torch.zeros(3, 16, 32)
    net.eval()
    for name, op in net.encoding.ops.items():
        out = op(tokens)
        assert out.shape == tokens.shape
        if name == "none":
            assert torch.equal(out, tokens)
        else:
            assert isinstance(op, EncodingBranch)
            rms = out.pow(2).mean(-1).sqrt()
            torch.testing.assert_close(rms, torch.ones_like(rms), atol=1e-4, rtol=0)


def test_pe_position_matters_and_standalone_matches_discretised_supernet():
    torch.manual_seed(0)
    sup = PESearchNet()
    choices = {"encoding": "sinusoidal", "blocks.0.attn": "rope_axial", "blocks.1.attn": "plain"}
    torch.manual_seed(0)
    alone = PESearchNet(choices=choices)
    edges = mixed_ops(sup)
    for e, op in choices.items():
        edges[e].discretize(op)
    # copy weights: supernet names carry 'candidates.<i>.' where the stand-alone has none
    sd = sup.state_dict()
    mapped = {}
    for k in alone.state_dict():
        for e, op in choices.items():
            if k.startswith(e + "."):
                i = edges[e].names.index(op)
                k2 = f"{e}.candidates.{i}." + k[len(e) + 1:]
                break
        else:
            k2 = k
        mapped[k] = sd[k2]
    alone.load_state_dict(mapped)
    sup.eval()
    alone.eval()
    x, _ = _digits(5)
    torch.testing.assert_close(sup(x), alone(x))
    # permuting the patches changes the output only through the position terms
    perm = x.reshape(5, 1, 4, 2, 4, 2).flip(2).reshape(5, 1, 8, 8)
    assert not torch.allclose(alone(x), alone(perm))
    plain = PESearchNet(choices={"encoding": "none", "blocks.0.attn": "plain", "blocks.1.attn": "plain"})
    plain.eval()
    torch.testing.assert_close(plain(x), plain(perm), atol=1e-5, rtol=1e-5)


def test_darts_net_has_normal_and_reduction_cells_and_shared_alpha():
    torch.manual_seed(0)
    net = DartsNet(4, num_nodes=2, num_cells=3, in_channels=1, ops=("skip", "sepconv3x3"))
    assert net.cell_types == ["normal", "reduce", "reduce"]  # DARTS: cells L//3 and 2L//3 reduce
    assert DartsNet(4, num_cells=8, in_channels=1).cell_types == ["normal"] * 2 + ["reduce"] + ["normal"] * 2 + \
        ["reduce"] + ["normal"] * 2
    edges = mixed_ops(net)
    assert len(edges) == 10 and {e.split(".")[1] for e in edges} == {"0", "1"}  # cell 2 follows cell 1
    assert net.cells[2].edges["3<-1"].alpha is net.cells[1].edges["3<-1"].alpha
    x, _ = _digits(4)
    h = net.stem(x)
    s1 = net.cells[0](h, h)
    assert s1.shape == (4, 2 * 4, 8, 8)  # concatenation of the 2 intermediate nodes
    s2 = net.cells[1](h, s1)
    assert s2.shape == (4, 2 * 8, 4, 4)  # reduction: half the side, twice the channels
    assert net(x).shape == (4, 10)
    assert net.decision_groups() == [[e for e in edges if e.startswith("cells.0.")],
                                     [e for e in edges if e.startswith("cells.1.")]]
    assert net.node_groups() == [["cells.0.node3"], ["cells.1.node3"]]
    unshared = DartsNet(4, num_nodes=2, num_cells=3, in_channels=1, share_alpha=False)
    assert len(mixed_ops(unshared)) == 15


def test_darts_cell_topology_keeps_two_inputs_per_node_and_derived_net_builds():
    torch.manual_seed(0)
    net = DartsNet(4, num_nodes=2, num_cells=3, in_channels=1, ops=("none", "skip", "dilconv3x3"))
    data = _digits(48)
    train_darts(net, data, data, steps=1, batch_size=32)
    perturbation_select(net, data, groups=net.decision_groups(), exclude=net.derive_exclude)
    sel = topology_select(net, data, net.node_inputs(), keep=2, groups=net.node_groups())
    assert len(sel.pruned) == 2 and all(".edges.3<-" in p for p in sel.pruned)
    assert "none" not in sel.choices.values()
    alone = DartsNet(4, num_nodes=2, num_cells=3, in_channels=1, ops=("none", "skip", "dilconv3x3"),
                     choices=sel.choices)
    assert len(list(alone.cells[0].edges)) == 4 and len(list(alone.cells[2].edges)) == 4
    assert alone(data[0][:2]).shape == (2, 10)


def test_robust_darts_spaces():
    s1 = robust_darts_ops("s1", 4)
    # the first and last pairs of RobustDARTS S1 as the DARTS-PT code lists them
    assert s1["normal"][0] == ("skip", "dilconv3x3") and s1["normal"][-1] == ("dilconv3x3", "dilconv5x5")
    assert s1["reduce"][0] == ("maxpool", "avgpool") and s1["reduce"][-1] == ("skip", "dilconv5x5")
    assert len(s1["normal"]) == len(s1["reduce"]) == 14
    assert robust_darts_ops("s1", 2)["reduce"] == s1["reduce"][:5]
    assert robust_darts_ops("s2", 2)["normal"] == [("skip", "sepconv3x3")] * 5
    assert robust_darts_ops("s3", 2)["reduce"][0] == ("none", "skip", "sepconv3x3")
    assert robust_darts_ops("s4", 2)["normal"][0] == ("noise", "sepconv3x3")
    net = build_space("s1")
    assert search_space(net)["cells.1.edges.2<-0"] == ("maxpool", "avgpool")
    with pytest.raises(ValueError, match="num_nodes"):
        robust_darts_ops("s1", 5)
    with pytest.raises(ValueError, match="space"):
        robust_darts_ops("s5")


@pytest.mark.parametrize("space", SPACES)
def test_build_space_and_run_search(space):
    torch.manual_seed(0)
    small = {"channels": 4} if space != "pe" else {"dim": 16, "depth": 1}
    if space == "darts":
        small["ops"] = ("maxpool", "skip", "dilconv3x3")
    model = build_space(space, **small)
    data = _digits(48)
    kw = dict(SPACE_TRAINING[space])
    res = run_search(model, data, data, selector="pt", steps=1, finetune_epochs=0.0, train_kwargs=kw)
    assert set(res["choices"]) | set(res["pruned"]) == set(search_space(build_space(space, **small)))
    assert all(not e.undecided for e in mixed_ops(model).values())
    if space != "s4":  # the noise op draws afresh at every pass
        assert res["selected"]["val_accuracy"] == pytest.approx(evaluate(model, data, bn="batch")[1])


def test_run_search_selectors_and_bad_input():
    data = _digits()
    for selector in SELECTORS:
        torch.manual_seed(0)
        res = run_search(build_space("nb201-micro", channels=4), data, data, selector=selector, steps=1,
                         proj_intv=1)
        assert res["selector"] == selector
        if selector == "pt-fixed":
            assert res["supernet"]["alpha"]["cells.0.edges.1<-0"] == pytest.approx([0.2] * 5, abs=1e-2)
    with pytest.raises(ValueError, match="selector"):
        run_search(build_space("nb201-micro", channels=4), data, data, selector="random", steps=1)
    with pytest.raises(ValueError, match="finetune_epochs"):
        run_search(build_space("nb201-micro", channels=4), data, data, steps=1, finetune_epochs=-1)
    with pytest.raises(ValueError, match="train_kwargs"):
        run_search(build_space("nb201-micro", channels=4), data, data, steps=1, train_kwargs={"seed": 1})
    with pytest.raises(ValueError, match="space"):
        build_space("cifar")
    with pytest.raises(ValueError, match="encodings"):
        PESearchNet(encodings=("none", "nope"))
    with pytest.raises(ValueError, match="attention"):
        PESearchNet(attention=("rope",))
    with pytest.raises(ValueError, match="choices"):
        PESearchNet(choices={"encoding": "lff"})
    with pytest.raises(ValueError, match="images"):
        PESearchNet()(torch.rand(2, 1, 6, 6))
    with pytest.raises(ValueError, match="choices"):
        DartsNet(choices={"cells.0.edges.9<-0": "skip"})
    with pytest.raises(ValueError, match="num_cells"):
        build_space("pe", num_cells=2)
    with pytest.raises(ValueError, match="train_kwargs"):
        run_search(build_space("nb201-micro", channels=4), data, data, steps=1, train_kwargs={"lrr": 1})


@pytest.mark.parametrize("space", ["nb201-micro", "pe"])
def test_standalone_architecture_trains_with_standalone_settings(space):
    torch.manual_seed(0)
    arch = enumerate_architectures(build_space(space))[-1]
    model = build_space(space, choices=arch)
    data = _digits()
    before = evaluate(model, data)[0]
    hist = train_network(model, data, steps=6, **STANDALONE_TRAINING[space])
    assert len(hist["train_loss"]) == 6
    assert evaluate(model, data)[0] < before


def test_run_search_and_topology_accept_dataloaders():
    from torch.utils.data import DataLoader, TensorDataset

    x, y = _digits(64)
    train = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True)
    val = DataLoader(TensorDataset(x, y), batch_size=32)
    torch.manual_seed(0)
    res = run_search(build_space("s3", channels=4), train, val, steps=2, proj_intv=1)
    assert len(res["pruned"]) == 2 and res["supernet"]["steps"] == 2
    torch.manual_seed(0)
    a = build_space("s3", channels=4)
    torch.manual_seed(0)
    b = build_space("s3", channels=4)
    sa = perturbation_select(a, val, groups=a.decision_groups(), seed=3)
    sb = perturbation_select(b, (x, y), groups=b.decision_groups(), seed=3, batch_size=32)
    assert [d["scores"] for d in sa.decisions] == [d["scores"] for d in sb.decisions]
