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


def test_uniform_at_init_and_gradient_reaches_alpha():
    edge = _edge()
    torch.testing.assert_close(edge.weights(), torch.full((4,), 0.25))
    edge(torch.randn(4, 2)).sum().backward()
    assert edge.alpha.grad is not None and edge.alpha.grad.abs().sum() > 0


def test_mask_zeroes_weight_without_renormalising():
    edge = _edge()
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
