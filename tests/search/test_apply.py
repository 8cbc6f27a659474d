import io

import pytest
import torch
from torch import nn

from posenc.search import (
    DartsNet,
    MixedOp,
    NB201MicroNet,
    apply_selection,
    build_space,
    magnitude_select,
    mixed_ops,
    perturbation_select,
    topology_select,
)

from ._known import Chain, data


def _images(n=16, seed=0):
    return torch.rand(n, 1, 8, 8, generator=torch.Generator().manual_seed(seed))


def _assert_plain_and_equal(sup, plain, x):
    assert not any(isinstance(m, MixedOp) for m in plain.modules())
    assert not any(n.endswith("alpha") for n, _ in plain.named_parameters())
    sup.eval()
    plain.eval()
    with torch.no_grad():
        torch.testing.assert_close(plain(x), sup(x), rtol=0, atol=0)


def test_apply_selection_equals_the_discretised_stacked_nb201_supernet():
    torch.manual_seed(0)
    sup = NB201MicroNet(4, 10, num_cells=3, ops=("none", "skip", "conv3x3"), pool=2)
    for name, op in zip(mixed_ops(sup), ("conv3x3", "none", "skip")):
        mixed_ops(sup)[name].discretize(op)
    plain = apply_selection(sup)
    _assert_plain_and_equal(sup, plain, _images())
    assert any(isinstance(m, MixedOp) for m in sup.modules())  # the supernet itself is left alone
    n_sup = sum(p.numel() for p in sup.parameters())
    assert sum(p.numel() for p in plain.parameters()) < n_sup  # unchosen candidates are gone


def test_apply_selection_equals_a_darts_supernet_with_pruned_edges():
    torch.manual_seed(1)
    sup = DartsNet(4, 10, ops=("none", "skip", "sepconv3x3"), num_nodes=2, num_cells=3, in_channels=1)
    x = _images(24)
    y = torch.randint(0, 10, (24,), generator=torch.Generator().manual_seed(1))
    perturbation_select(sup, (x, y), groups=sup.decision_groups(), exclude=sup.derive_exclude)
    topology_select(sup, (x, y), sup.node_inputs(), groups=sup.node_groups())
    plain = apply_selection(sup)
    _assert_plain_and_equal(sup, plain, x)
    pruned = [n for n, e in mixed_ops(sup).items() if e.pruned]
    assert len(pruned) == 2
    # the magnitude genotype (two inputs per node, no 'none') gives a plain network too
    sup2 = DartsNet(4, 10, ops=("none", "skip", "sepconv3x3"), num_nodes=2, num_cells=3, in_channels=1)
    sel = magnitude_select(sup2, exclude=("none",), nodes=sup2.node_inputs())
    assert len(sel.pruned) == 2 and "none" not in sel.choices.values()
    _assert_plain_and_equal(sup2, apply_selection(sup2), x)


def test_apply_selection_on_a_users_module_keeps_trained_weights_and_survives_a_round_trip():
    model, val = Chain(), data()
    perturbation_select(model, val, criterion="loss")
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    fresh = Chain()
    fresh.load_state_dict(torch.load(io.BytesIO(buf.getvalue()), weights_only=True))
    assert {n: e.chosen for n, e in mixed_ops(fresh).items()} == {n: e.chosen for n, e in mixed_ops(model).items()}
    plain = apply_selection(fresh)
    x = val[0]
    torch.testing.assert_close(plain(x), model(x))
    assert isinstance(plain.edges[0], nn.Identity)  # 'skip'
    same = apply_selection(model, inplace=True)
    assert same is model and not any(isinstance(m, MixedOp) for m in model.modules())


def test_apply_selection_refuses_undecided_edges():
    model = Chain()
    mixed_ops(model)["edges.0"].discretize("skip")
    with pytest.raises(ValueError, match="undecided.*edges.1"):
        apply_selection(model)
    with pytest.raises(ValueError, match="no mixed edges"):
        apply_selection(nn.Linear(2, 2))
    with pytest.raises(TypeError, match="model"):
        apply_selection("net")
    with pytest.raises(TypeError, match="selected_module"):
        apply_selection(model.edges[0])


def test_space_supernet_round_trip_keeps_the_discretisation(tmp_path):
    torch.manual_seed(0)
    sup = build_space("s3", channels=4)
    x = _images(16)
    y = torch.randint(0, 10, (16,))
    perturbation_select(sup, (x, y), groups=sup.decision_groups(), exclude=("none",))
    topology_select(sup, (x, y), sup.node_inputs(), groups=sup.node_groups())
    torch.save(sup.state_dict(), tmp_path / "s3.pt")
    torch.manual_seed(5)
    again = build_space("s3", channels=4)
    again.load_state_dict(torch.load(tmp_path / "s3.pt", weights_only=True))
    state = lambda m: {n: (e.chosen, e.pruned) for n, e in mixed_ops(m).items()}  # noqa: E731
    assert state(again) == state(sup)
    _assert_plain_and_equal(sup, apply_selection(again), x)
