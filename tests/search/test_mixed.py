import pytest
import torch
from torch import nn

from posenc.search import MixedOp, Zero


class Scale(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c

    def forward(self, x):
        return self.c * x


def _edge():
    return MixedOp([("none", Zero()), ("skip", nn.Identity()), ("double", Scale(2.0)), ("neg", Scale(-3.0))])


def test_forward_is_softmax_weighted_sum():
    edge = _edge()
    with torch.no_grad():
        edge.alpha.copy_(torch.tensor([0.3, -1.0, 0.5, 2.0]))
    x = torch.randn(5, 3, dtype=torch.float64)
    a = edge.alpha.detach().double()
    w = torch.exp(a) / torch.exp(a).sum()
    ref = w[0] * 0 + w[1] * x + w[2] * 2 * x + w[3] * (-3) * x
    torch.testing.assert_close(edge(x.float()).double(), ref, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(edge.weights().double(), w, rtol=1e-6, atol=1e-7)


def test_alpha_init_is_small_gaussian_as_the_authors_and_zeros_on_request():
    # DARTS / DARTS-PT: alpha = 1e-3 * randn (drawn from the given generator)
    ops = [(f"op{i}", nn.Identity()) for i in range(4000)]
    edge = MixedOp(ops, generator=torch.Generator().manual_seed(0))
    a = edge.alpha.detach()
    assert abs(float(a.mean())) < 1e-4 and abs(float(a.std()) - 1e-3) < 5e-5
    ref = torch.randn(4000, generator=torch.Generator().manual_seed(0)) * 1e-3
    torch.testing.assert_close(a, ref)
    zero = _edge_zeros()
    torch.testing.assert_close(zero.weights(), torch.full((4,), 0.25))
    assert MixedOp([("a", nn.Identity())], alpha_std=0.0).alpha.item() == 0.0
    before = edge.alpha.detach().clone()
    edge.reset_parameters()
    assert not torch.equal(before, edge.alpha.detach())


def _edge_zeros():
    return MixedOp([("none", Zero()), ("skip", nn.Identity()), ("double", Scale(2.0)), ("neg", Scale(-3.0))],
                   alpha_init="zeros")


def test_uniform_at_init_and_gradient_reaches_alpha():
    edge = _edge_zeros()
    torch.testing.assert_close(edge.weights(), torch.full((4,), 0.25))
    edge(torch.randn(4, 2)).sum().backward()
    assert edge.alpha.grad is not None and edge.alpha.grad.abs().sum() > 0


def test_mask_zeroes_weight_without_renormalising():
    edge = _edge_zeros()
    x = torch.randn(6, 2)
    full = edge(x)
    with edge.masked("double"):
        w = edge.weights()
        assert w.tolist() == [0.25, 0.25, 0.0, 0.25]  # not renormalised
        torch.testing.assert_close(edge(x), full - 0.25 * 2 * x)
        assert edge.masked_ops == {"double"}
    assert edge.masked_ops == set()
    torch.testing.assert_close(edge(x), full)


def test_masking_none_never_changes_output():
    edge = _edge()
    with torch.no_grad():
        edge.alpha.normal_()
    x = torch.randn(6, 2)
    full = edge(x)
    with edge.masked("none"):
        assert torch.equal(edge(x), full)


def test_mask_restored_after_exception_and_nesting():
    edge = _edge()
    with pytest.raises(RuntimeError):
        with edge.masked("skip"):
            raise RuntimeError
    assert not edge.masked_ops
    with edge.masked("skip"):
        with edge.masked("skip", "neg"):
            assert edge.masked_ops == {"skip", "neg"}
        assert edge.masked_ops == {"skip"}


def test_discretize_is_one_hot_and_masking_everything_gives_zero():
    edge = _edge()
    x = torch.randn(3, 2)
    edge.discretize("neg")
    assert edge.chosen == "neg"
    assert edge.weights().tolist() == [0.0, 0.0, 0.0, 1.0]
    torch.testing.assert_close(edge(x), -3 * x)
    with edge.masked(*edge.names):
        assert torch.equal(edge(x), torch.zeros_like(x))
    edge.clear_selection()
    assert edge.chosen is None
    edge.discretize("skip")
    with pytest.warns(DeprecationWarning, match="clear_selection"):
        edge.reset()
    assert edge.chosen is None
    with edge.removed():
        assert torch.equal(edge(x), torch.zeros_like(x))
    assert not edge.pruned


def test_masked_ops_are_not_evaluated():
    calls = []

    class Spy(nn.Module):
        def forward(self, x):
            calls.append(1)
            return x

    edge = MixedOp({"a": Spy(), "b": nn.Identity()})
    with edge.masked("a"):
        edge(torch.ones(2))
    assert calls == []


def test_bad_input():
    with pytest.raises(ValueError, match="candidates"):
        MixedOp([])
    with pytest.raises(ValueError, match="unique"):
        MixedOp([("a", nn.Identity()), ("a", nn.Identity())])
    with pytest.raises(TypeError, match="candidates"):
        MixedOp([("a", lambda x: x)])
    with pytest.raises(TypeError, match="candidates"):
        MixedOp("skip")
    with pytest.raises(ValueError, match="candidates"):
        MixedOp({"": nn.Identity()})
    edge = _edge()
    with pytest.raises(ValueError, match="name"):
        with edge.masked("conv"):
            pass
    with pytest.raises(ValueError, match="name"):
        edge.discretize("conv")


def test_mismatched_output_shapes_name_the_op():
    edge = MixedOp({"skip": nn.Identity(), "proj": nn.Linear(3, 4)})
    with pytest.raises(ValueError, match="'proj'.*shape"):
        edge(torch.randn(2, 3))


def test_shared_edges_follow_their_leader():
    lead = _edge()
    follow = MixedOp([("none", Zero()), ("skip", nn.Identity()), ("double", Scale(2.0)), ("neg", Scale(-3.0))],
                     share_with=lead)
    third = MixedOp([("none", Zero()), ("skip", nn.Identity()), ("double", Scale(2.0)), ("neg", Scale(-3.0))],
                    share_with=follow)  # a follower of a follower follows the leader
    assert follow.alpha is lead.alpha and third.leader is lead and lead.leader is None
    x = torch.randn(5, 2)
    torch.testing.assert_close(follow(x), lead(x))
    with lead.masked("double"):
        assert follow.masked_ops == {"double"} and follow.weights()[2] == 0
    lead.discretize("neg")
    assert follow.chosen == "neg" and third.chosen == "neg"
    torch.testing.assert_close(follow(x), -3 * x)
    follow.prune()
    assert lead.pruned
    lead.clear_selection()
    assert follow.undecided
    with pytest.raises(ValueError, match="same ops"):
        MixedOp([("skip", nn.Identity())], share_with=lead)
    with pytest.raises(TypeError, match="share_with"):
        MixedOp([("skip", nn.Identity())], share_with=nn.Identity())
    # one alpha in the parameters of a module holding both
    holder = nn.ModuleList([lead, follow])
    assert sum(p is lead.alpha for p in holder.parameters()) == 1


def test_selection_state_survives_state_dict_and_torch_save(tmp_path):
    holder = nn.ModuleDict({"a": _edge(), "b": _edge()})
    holder["a"].discretize("double")
    holder["b"].prune()
    path = tmp_path / "sup.pt"
    torch.save(holder.state_dict(), path)
    fresh = nn.ModuleDict({"a": _edge(), "b": _edge()})
    fresh.load_state_dict(torch.load(path, weights_only=True))
    assert fresh["a"].chosen == "double" and not fresh["a"].pruned
    assert fresh["b"].pruned and fresh["b"].chosen is None
    torch.testing.assert_close(fresh["a"].alpha, holder["a"].alpha)
    with pytest.raises(ValueError, match="chosen"):
        _edge().set_extra_state({"chosen": "conv", "pruned": False})
    with pytest.raises(ValueError, match="extra state"):
        _edge().set_extra_state({"chosen": None})


def test_non_finite_alpha_is_reported():
    edge = _edge()
    edge.check_alpha()
    with torch.no_grad():
        edge.alpha[1] = float("nan")
    with pytest.raises(ValueError, match="not finite"):
        edge.check_alpha()


def test_selected_module_and_outputs_zero():
    edge = _edge()
    with pytest.raises(ValueError, match="undecided"):
        edge.selected_module()
    edge.discretize("none")
    assert edge.outputs_zero() and isinstance(edge.selected_module(), Zero)
    edge.discretize("double")
    assert not edge.outputs_zero() and edge.selected_module() is edge.ops["double"]
    edge.prune()
    assert edge.outputs_zero() and edge.selected_module().is_zero
