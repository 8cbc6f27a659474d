import pytest
import torch

from posenc.search import (
    PE_ATTENTION,
    PE_ENCODINGS,
    SELECTORS,
    SPACE_TRAINING,
    SPACES,
    STANDALONE_TRAINING,
    DartsMicroNet,
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


def test_darts_cell_topology_keeps_two_inputs_per_node():
    torch.manual_seed(0)
    net = DartsMicroNet(4, num_nodes=2)
    assert len(mixed_ops(net)) == 5
    data = _digits()
    train_darts(net, data, data, steps=2, batch_size=32)
    perturbation_select(net, data)
    sel = topology_select(net, data, net.node_inputs(), keep=2)
    assert len(sel.pruned) == 1 and sel.pruned[0].startswith("cells.0.edges.3<-")
    alone = DartsMicroNet(4, choices=sel.choices)
    assert len(list(alone.cells[0].edges)) == 4
    assert alone(data[0][:2]).shape == (2, 10)


@pytest.mark.parametrize("space", SPACES)
def test_build_space_and_run_search(space):
    torch.manual_seed(0)
    model = build_space(space)
    data = _digits()
    kw = dict(SPACE_TRAINING[space])
    res = run_search(model, data, data, selector="pt", steps=2, finetune_epochs=0.1, train_kwargs=kw)
    assert set(res["choices"]) == set(search_space(build_space(space)))
    assert all(e.chosen is not None for e in mixed_ops(model).values())
    assert res["selected"]["val_accuracy"] == pytest.approx(evaluate(model, data)[1])


def test_run_search_selectors_and_bad_input():
    data = _digits()
    for selector in SELECTORS:
        torch.manual_seed(0)
        res = run_search(build_space("nb201-micro", channels=4), data, data, selector=selector, steps=1)
        assert res["selector"] == selector
        if selector == "pt-fixed":
            assert res["supernet"]["alpha"]["cells.0.edges.1<-0"] == pytest.approx([0.2] * 5)
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
        DartsMicroNet(choices={"cells.0.edges.9<-0": "skip"})


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
