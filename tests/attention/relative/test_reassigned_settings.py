"""Reassigned settings of the relative-position modules (issue #40, part 5): a setting that derived
state depends on either takes effect (the module then computes what a fresh one built with the new
value computes) or is read-only with a clear error; never a stale table."""

import pytest
import torch

from posenc.attention import RotaryEmbedding
from posenc.attention.relative._settings import ReadOnlySettingError
from posenc.attention.relative.relative_attention import RelativeSelfAttention
from posenc.attention.relative.relative_bias import RelativePositionBias
from posenc.attention.relative.rope_scaling import RopeScaling
from posenc.attention.relative.rotary_nd import AxialRotaryEmbedding


def _x(n=12, dim=16, seed=0):
    return torch.randn(2, n, dim, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("position", ["rope", "xpos"])
def test_reassigned_rotary_base_gives_the_outputs_of_a_fresh_module(position):
    # the reported case: outputs 0.61-0.75 (relative) away from a fresh module with the same weights
    torch.manual_seed(0)
    m = RelativeSelfAttention(16, 2, position=position)
    x = _x()
    before = m(x)  # builds the table at base 10000
    m.rotary.base = 100.0
    fresh = RelativeSelfAttention(16, 2, position=position, rope_base=100.0)
    fresh.load_state_dict(m.state_dict())
    after = m(x)
    assert torch.equal(after, fresh(x))
    assert not torch.allclose(before, after)
    assert m.rotary.base == 100.0 and "base=100" in repr(m.rotary)


def test_reassigned_base_keeps_the_scaling_the_dtype_and_the_decode_path():
    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(1, 2, 3, 16, generator=g, dtype=torch.float64), torch.randn(1, 2, 5, 16, generator=g,
                                                                                    dtype=torch.float64)
    sc = RopeScaling("linear", 512, 2048)
    rope = RotaryEmbedding(16, scaling=sc).double()
    rope(q, k, offset=7)
    rope.base = 500.0
    fresh = RotaryEmbedding(16, base=500.0, scaling=sc).double()
    for off in (None, 7, 5000):
        a, b = rope(q, k, offset=off), fresh(q, k, offset=off)
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]), off
    assert torch.equal(rope.freqs, fresh.freqs) and rope._cos.dtype == torch.float64


def test_assigning_scaling_is_set_scaling():
    g = torch.Generator().manual_seed(2)
    q, k = torch.randn(1, 2, 4, 16, generator=g), torch.randn(1, 2, 4, 16, generator=g)
    rope = RotaryEmbedding(16)
    rope(q, k)
    rope.scaling = RopeScaling("linear", 512, 2048)
    fresh = RotaryEmbedding(16, scaling=RopeScaling("linear", 512, 2048))
    assert torch.equal(rope(q, k)[1], fresh(q, k)[1]) and torch.equal(rope.freqs, fresh.freqs)
    assert not torch.equal(rope(q, k)[1], RotaryEmbedding(16)(q, k)[1])
    rope.scaling = None
    assert torch.equal(rope(q, k)[1], RotaryEmbedding(16)(q, k)[1])


def test_reassigned_axial_base_rebuilds_the_frequencies():
    g = torch.Generator().manual_seed(3)
    q, k = torch.randn(1, 2, 6, 16, generator=g), torch.randn(1, 2, 6, 16, generator=g)
    pos = torch.randint(0, 8, (6, 2), generator=g)
    axial = AxialRotaryEmbedding(16, 2)
    before = axial(q, k, pos)[0]
    axial.base = 10.0
    after = axial(q, k, pos)[0]
    assert torch.equal(after, AxialRotaryEmbedding(16, 2, base=10.0)(q, k, pos)[0])
    assert not torch.equal(before, after)


def test_settings_the_state_is_built_for_are_read_only():
    rope = RotaryEmbedding(16)
    attn = RelativeSelfAttention(16, 2, position="rope")
    axial = AxialRotaryEmbedding(16, 2)
    cases = [(rope, "rotary_dim", 8), (rope, "head_dim", 32), (attn, "num_heads", 4), (attn, "dim", 32),
             (attn, "head_dim", 4), (attn, "position", "alibi"), (axial, "head_dim", 32), (axial, "num_axes", 4)]
    for module, name, value in cases:
        old = getattr(module, name)
        with pytest.raises(ReadOnlySettingError, match=rf"{type(module).__name__}\.{name} is fixed at construction "
                                                       rf".*got an assignment of {value!r} \(current value {old!r}\)"):
            setattr(module, name, value)
        assert getattr(module, name) == old
    with pytest.raises(ValueError):  # a ValueError and an AttributeError
        rope.rotary_dim = 4
    with pytest.raises(AttributeError):
        rope.rotary_dim = 4
    attn(_x())  # still works


def test_reassigned_settings_are_checked():
    rope = RotaryEmbedding(16)
    with pytest.raises(ValueError, match="base must be > 1, got 0.5"):
        rope.base = 0.5
    with pytest.raises(TypeError, match="base must be"):
        rope.base = "100"
    with pytest.raises(ValueError, match="layout must be one of"):
        rope.layout = "halves"
    with pytest.raises(ValueError, match="max_seq_len"):
        rope.max_seq_len = 0
    with pytest.raises(TypeError, match="scaling must be a RopeScaling or None, got str"):
        rope.scaling = "linear"
    assert rope.base == 10000.0 and rope.layout == "half" and rope.max_seq_len == 2048 and rope.scaling is None
    axial = AxialRotaryEmbedding(16, 2)
    with pytest.raises(ValueError, match="base must be > 1"):
        axial.base = 1.0
    assert axial.base == 100.0


def test_a_clipped_bias_refuses_a_max_distance_its_table_cannot_serve():
    x = _x(40)
    m = RelativeSelfAttention(16, 2, position="learned", max_distance=8)
    with torch.no_grad():
        m.rel_bias.table.normal_()
    for d in (4, 20):  # fewer offsets read the wrong entries; more read past the table
        m.rel_bias.max_distance = d
        for grad in (True, False):
            with torch.set_grad_enabled(grad), pytest.raises(
                    ValueError, match=rf"clipped bias with max_distance={d} has 2 \* max_distance \+ 1 = {2 * d + 1} "
                                      rf"buckets, but num_buckets=17"):
                m(x)
        with pytest.raises(ValueError, match="num_buckets=17"):
            m.rel_bias(q_positions=torch.arange(5))
    m.rel_bias.max_distance = 8
    m(x)
    bias = RelativePositionBias(2, kind="t5", num_buckets=8, max_distance=16)
    bias.toeplitz(6)
    bias.max_distance = 4
    with pytest.raises(ValueError, match="num_buckets must be < max_distance"):
        bias.toeplitz(6)
    bias.max_distance = 16
    bias.table = torch.nn.Parameter(torch.zeros(2, 5))  # a replaced table narrower than num_buckets
    with pytest.raises(ValueError, match=r"table must have num_heads=2 rows and at least num_buckets=8 columns, "
                                         r"got shape \(2, 5\)"):
        bias.toeplitz(6)
    bias.table = torch.nn.Parameter(torch.zeros(2, 8))
    bias.kind = "clipped"
    with pytest.raises(ValueError, match="clipped bias with max_distance=16"):
        bias.toeplitz(6)
    bias.kind = "alibi"
    with pytest.raises(ValueError, match="kind must be one of"):
        bias.toeplitz(6)


def test_a_reassigned_t5_max_distance_takes_effect():
    x = _x(200)
    torch.manual_seed(0)
    m = RelativeSelfAttention(16, 2, position="t5")
    with torch.no_grad():
        m.rel_bias.table.normal_()
    with torch.no_grad():
        m(x)  # caches the bias
        m.rel_bias.max_distance = 64
        fresh = RelativeSelfAttention(16, 2, position="t5", max_distance=64)
        fresh.load_state_dict(m.state_dict())
        assert torch.equal(m(x), fresh(x))
