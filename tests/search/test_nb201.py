import pytest
import torch

from posenc.search import (
    NB201_OPS,
    NB201Cell,
    NB201MicroNet,
    architecture_id,
    enumerate_architectures,
    mixed_ops,
    search_space,
)


def test_cell_edges_and_space_sizes():
    assert NB201Cell.edge_names(4) == ["1<-0", "2<-0", "2<-1", "3<-0", "3<-1", "3<-2"]
    net = NB201MicroNet(4, 10, num_nodes=4)
    assert len(mixed_ops(net)) == 6
    micro = NB201MicroNet(4, 10)
    assert search_space(micro) == NB201MicroNet.space()
    assert len(enumerate_architectures(micro)) == 125
    assert len(enumerate_architectures(NB201MicroNet.space(("skip", "conv1x1", "conv3x3"), num_nodes=4))) == 729


def test_cell_forward_matches_dag_formula():
    torch.manual_seed(0)
    choices = {"1<-0": "conv3x3", "2<-0": "skip", "2<-1": "avgpool"}
    cell = NB201Cell(3, num_nodes=3, choices=choices)
    x = torch.randn(2, 3, 5, 5)
    n1 = cell.edges["1<-0"](x)
    ref = x + cell.edges["2<-1"](n1)
    torch.testing.assert_close(cell(x), ref)


def test_discretised_supernet_equals_standalone_network():
    torch.manual_seed(0)
    sup = NB201MicroNet(4, 10)
    choices = {"cells.0.edges.1<-0": "conv1x1", "cells.0.edges.2<-0": "none", "cells.0.edges.2<-1": "conv3x3"}
    alone = NB201MicroNet(4, 10, choices=choices)
    # copy the chosen ops' weights into the stand-alone network
    sd = {}
    for k, v in sup.state_dict().items():
        sd[k] = v
    edges = mixed_ops(sup)
    for name, op in choices.items():
        edges[name].discretize(op)
        for pk, pv in edges[name].ops[op].state_dict().items():
            sd[f"{name}.{pk}"] = pv
    alone.load_state_dict({k: sd[k] for k in alone.state_dict()})
    x = torch.rand(8, 1, 8, 8)
    torch.testing.assert_close(sup(x), alone(x))
    assert sup(x).shape == (8, 10)


def test_enumeration_order_and_ids():
    space = NB201MicroNet.space(("none", "skip"), num_nodes=3)
    archs = enumerate_architectures(space)
    assert len(archs) == 8 and len({tuple(a.values()) for a in archs}) == 8
    assert [architecture_id(a, space) for a in archs] == list(range(8))


def test_bad_input():
    with pytest.raises(ValueError, match="ops"):
        NB201MicroNet(4, 10, ops=("conv7x7",))
    with pytest.raises(ValueError, match="num_nodes"):
        NB201MicroNet(4, 10, num_nodes=1)
    with pytest.raises(ValueError, match="choices"):
        NB201MicroNet(4, 10, choices={"cells.0.edges.1<-0": "skip"})
    with pytest.raises(ValueError, match="choices"):
        NB201MicroNet(4, 10, choices={e: "pool" for e in NB201MicroNet.space()})
    with pytest.raises(ValueError, match="x must"):
        NB201MicroNet(4, 10)(torch.randn(3, 8, 8))
    with pytest.raises(TypeError, match="space"):
        enumerate_architectures(["a"])
    with pytest.raises(ValueError, match="choices"):
        architecture_id({"x": "skip"}, NB201MicroNet.space())
    assert NB201_OPS[0] == "none"


def test_pooled_head_matches_formula():
    torch.manual_seed(0)
    net = NB201MicroNet(4, 10, pool=2)
    x = torch.rand(3, 1, 8, 8)
    h = net.cells[0](net.stem(x))
    h = torch.relu(net.head_bn(h))
    pooled = h.reshape(3, 4, 2, 4, 2, 4).mean(dim=(3, 5)).flatten(1)  # 2x2 blocks of 4x4 pixels
    torch.testing.assert_close(net(x), net.classifier(pooled))
    with pytest.raises(ValueError, match="pool"):
        NB201MicroNet(4, 10, pool=0)


def test_stacked_cells_share_alpha_and_choices_name_cell_zero():
    torch.manual_seed(0)
    net = NB201MicroNet(4, 10, num_cells=3, ops=("skip", "conv3x3"))
    assert list(mixed_ops(net)) == ["cells.0.edges.1<-0", "cells.0.edges.2<-0", "cells.0.edges.2<-1"]
    assert net.cells[2].edges["2<-1"].alpha is net.cells[0].edges["2<-1"].alpha
    mixed_ops(net)["cells.0.edges.2<-0"].discretize("skip")
    assert net.cells[1].edges["2<-0"].chosen == "skip"
    choices = {"cells.0.edges.1<-0": "conv3x3", "cells.0.edges.2<-0": "skip", "cells.0.edges.2<-1": "conv3x3"}
    alone = NB201MicroNet(4, 10, num_cells=3, ops=("skip", "conv3x3"), choices=choices)
    assert all(type(c.edges["2<-0"]).__name__ == "Identity" for c in alone.cells)
    assert len(mixed_ops(NB201MicroNet(4, 10, num_cells=3, share_alpha=False))) == 9
