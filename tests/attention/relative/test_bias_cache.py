"""The cached position bias of RelativeSelfAttention / RelativeMHA never differs from a fresh one.

Writes that bypass autograd's version counter (``p.data.copy_``, EMA updates through ``.data``,
NumPy views, ``p.data = ...``) used to leave a stale bias in evaluation; the cache now compares
the values it was built from, bit for bit, at every call.
"""

import copy

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from posenc.attention import RelativeMHA, RelativeSelfAttention
from posenc._cache import same_bits
from posenc.attention.relative.relative_bias import RelativePositionBias

FUZZ = settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
KINDS = ("alibi", "t5", "learned")
WRITES = ("data_copy", "data_ema", "copy_no_grad", "load_state_dict", "optimizer_step", "numpy_view", "set_data",
          "zero_", "none")


def _build(cls, position, causal):
    kw = dict(position=position, causal=causal, max_distance=8, num_buckets=4)
    if cls is RelativeMHA:
        return RelativeMHA(16, 2, batch_first=True, **kw)
    return RelativeSelfAttention(16, 2, **kw)


def _source(m):
    return m.slopes if m.position == "alibi" else m.rel_bias.table


def _call(m, x):
    out = m(x, x, x, need_weights=False) if isinstance(m, RelativeMHA) else m(x)
    return out[0] if isinstance(out, tuple) else out


def _fresh(m):
    """A newly built module holding ``m``'s state (the ALiBi slopes are not in the state_dict)."""
    cls = type(m)
    new = _build(cls, m.position, m.causal)
    new.load_state_dict(m.state_dict())
    if m.position == "alibi":
        with torch.no_grad():
            new.slopes.copy_(m.slopes)
    return new.train(m.training)


def _write(m, how, gen):
    src = _source(m)
    new = torch.randn(src.shape, generator=gen, dtype=src.dtype).abs() + 0.01  # slopes stay positive
    if how == "data_copy":
        src.data.copy_(new)
    elif how == "data_ema":  # EMA written through .data, as many training loops do
        src.data.mul_(0.5).add_(new, alpha=0.5)
    elif how == "copy_no_grad":
        with torch.no_grad():
            src.copy_(new)
    elif how == "load_state_dict":
        if m.position == "alibi":  # not in the state_dict: an in-place write of the buffer instead
            src.data[0] = new[0]
        else:
            state = copy.deepcopy(m.state_dict())
            state["rel_bias.table"] = new
            m.load_state_dict(state)
    elif how == "optimizer_step":
        if m.position == "alibi":
            src.data.mul_(1.5)
        else:
            opt = torch.optim.SGD([m.rel_bias.table], lr=0.5)
            x = torch.randn(1, 5, 16, generator=gen)
            _call(m, x).pow(2).sum().backward()
            opt.step()
            opt.zero_grad()
    elif how == "numpy_view":
        src.detach().numpy()[...] = new.numpy()
    elif how == "set_data":
        src.data = new
    elif how == "zero_":
        src.data.zero_()


@FUZZ
@given(cls=st.sampled_from([RelativeSelfAttention, RelativeMHA]), position=st.sampled_from(KINDS),
       causal=st.booleans(), n=st.integers(1, 7), grad=st.booleans(), train=st.booleans(),
       writes=st.lists(st.sampled_from(WRITES), min_size=1, max_size=4), seed=st.integers(0, 2**16))
def test_cached_bias_never_differs_from_a_fresh_module(cls, position, causal, n, grad, train, writes, seed):
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    m = _build(cls, position, causal).train(train)
    if position != "alibi":
        with torch.no_grad():
            m.rel_bias.table.normal_(generator=gen)
    x = torch.randn(2, n, 16, generator=gen)
    for how in writes:
        with torch.set_grad_enabled(grad):
            _call(m, x)  # fills the cache
            _call(m, x)
        _write(m, how, gen)
        fresh = _fresh(m)
        with torch.set_grad_enabled(grad):
            got, want = _call(m, x), _call(fresh, x)
        assert torch.equal(got, want), (how, float((got - want).abs().max()))


@pytest.mark.parametrize("position", KINDS)
def test_write_through_data_is_seen_in_evaluation(position):
    # the reported case: m.rel_bias.table.data.copy_(new); m(x) in eval / no_grad returned the old bias
    torch.manual_seed(0)
    m = _build(RelativeMHA, position, True).eval()
    x = torch.randn(2, 9, 16)
    with torch.no_grad():
        before = m(x, x, x)[0]
        src = _source(m)
        src.data.copy_(torch.rand_like(src) + 0.5)
        after = m(x, x, x)[0]
        want = _fresh(m).eval()(x, x, x)[0]
    assert torch.equal(after, want)
    assert not torch.allclose(before, after)


def test_reassigned_bucket_attributes_are_seen():
    bias = RelativePositionBias(2, kind="clipped", max_distance=8)
    with torch.no_grad():
        bias.table.copy_(torch.arange(34.0).view(2, 17))
    first = bias.toeplitz(12).clone()
    bias.max_distance, bias.num_buckets = 4, 9  # offsets -4..4 now read the table's first 9 entries
    fresh = RelativePositionBias(2, kind="clipped", max_distance=4)
    with torch.no_grad():
        fresh.table.copy_(bias.table[:, :9])
    assert torch.equal(bias.toeplitz(12), fresh.toeplitz(12))
    assert not torch.equal(first, bias.toeplitz(12))


def test_same_bits_compares_bits():
    a = torch.tensor([0.0, 1.0, float("nan")])
    assert same_bits(a, a.clone())
    assert not same_bits(a, torch.tensor([-0.0, 1.0, float("nan")]))  # -0.0 has other bits
    assert not same_bits(a, a.double())
    assert not same_bits(a, a[:2])
    assert same_bits(torch.arange(3), torch.arange(3)) and not same_bits(torch.arange(3), torch.arange(1, 4))
    assert same_bits(torch.ones(2, 3).t(), torch.ones(3, 2))  # strides do not matter
