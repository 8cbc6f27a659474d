"""RoPE far from position 0 (issue #40, part 5): what is accepted is right to a stated tolerance.

An angle ``p * theta * position_scale`` is made in float64 with at most three roundings, so its
error grows with ``|angle|``; beyond :data:`MAX_ANGLE` it could exceed :data:`ANGLE_TOLERANCE`
(1e-6 rad) and the scores would depend on the absolute position (0.9 % at offset 1e15, 13 % at
2**53 - 8). Such positions are refused, naming the argument that set them."""

from fractions import Fraction

import pytest
import torch

from posenc.attention import RotaryEmbedding
from posenc.attention.relative.relative_attention import RelativeSelfAttention
from posenc.attention.relative.rope_scaling import RopeScaling
from posenc.attention.relative.rotary import (
    ANGLE_TOLERANCE,
    MAX_ANGLE,
    apply_rope,
    apply_rope_qk,
    check_angle_precision,
    rope_angles,
    rope_frequencies,
)
from posenc.attention.relative.rotary_nd import AxialRotaryEmbedding

FAR_OFFSETS = [10**15, 2**53 - 8, int(MAX_ANGLE)]  # the last: its 2nd key is one position past the bound


def _qk(n_q=2, n_k=4, d=16, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(1, 2, n_q, d, generator=g, dtype=dtype), torch.randn(1, 2, n_k, d, generator=g, dtype=dtype))


@pytest.mark.parametrize("offset", FAR_OFFSETS)
def test_offsets_beyond_the_precision_bound_are_refused_naming_offset(offset):
    q, k = _qk()
    for call in (lambda: RotaryEmbedding(16)(q, k, offset=offset),
                 lambda: RotaryEmbedding(16, xpos_scale_base=512.0, xpos_center=float(offset))(q, k, offset=offset),
                 lambda: apply_rope(k, offset=offset),
                 lambda: apply_rope_qk(q, k, offset=offset)):
        with pytest.raises(ValueError, match=r"^offset: the positions are too far from 0 for RoPE's precision"):
            call()


def test_explicit_positions_beyond_the_bound_are_refused_naming_them():
    q, k = _qk(4, 4)
    far = torch.arange(4) + (2**53 + 2)  # int64 positions past 2**53 (not even exact in float64)
    near_far = torch.arange(4) + 10**12
    for pos in (far, near_far):
        with pytest.raises(ValueError, match=r"^positions: the positions are too far"):
            apply_rope(k, pos)
        with pytest.raises(ValueError, match=r"^q_positions: the positions are too far"):
            apply_rope_qk(q, k, pos, torch.arange(4))
        with pytest.raises(ValueError, match=r"^k_positions: the positions are too far"):
            apply_rope_qk(q, k, torch.arange(4), pos)
        with pytest.raises(ValueError, match=r"^k_positions: the positions are too far"):
            RotaryEmbedding(16)(q, k, k_positions=pos)  # queries take the keys' positions
        with pytest.raises(ValueError, match="the positions are too far from 0"):
            RelativeSelfAttention(16, 2, position="rope")(torch.randn(1, 4, 16), positions=pos[:, None])
        with pytest.raises(ValueError, match=r"^positions: the positions are too far"):
            AxialRotaryEmbedding(16, 2)(q, k, torch.stack((pos, pos), -1))


def test_the_bound_follows_the_frequencies_and_the_position_scale():
    q, k = _qk()
    # linear interpolation by 4: angles are a quarter, so offsets 4x farther are accepted
    rope = RotaryEmbedding(16, scaling=RopeScaling("linear", 512, 2048))
    rope(q, k, offset=2 * int(MAX_ANGLE))
    with pytest.raises(ValueError, match="^offset"):
        rope(q, k, offset=5 * int(MAX_ANGLE))
    # explicit small frequencies: positions far beyond 2.25e9 are within the bound
    freqs = torch.full((8,), 1e-6, dtype=torch.float64)
    apply_rope(k, offset=10**15, freqs=freqs)
    with pytest.raises(ValueError, match="^offset"):
        apply_rope(k, offset=10**15, freqs=freqs * 1e3)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_scores_at_the_largest_accepted_offset_equal_those_at_0_within_the_tolerance(layout):
    q, k = _qk(2, 4)
    rope = RotaryEmbedding(16, layout=layout)
    off = int(MAX_ANGLE) - 3  # keys off .. off + 3: the last one at the bound
    rq, rk = rope(q, k, offset=off)
    q0, k0 = rope(q, k)
    far, near = rq @ rk.transpose(-1, -2), q0 @ k0.transpose(-1, -2)
    # each angle within ANGLE_TOLERANCE of the exact one: a relative angle within twice that, and a score
    # (a sum of |q_pair| |k_pair| cos(angle)) within 2 * tol * |q| |k|
    bound = 2 * ANGLE_TOLERANCE * q.norm(dim=-1)[..., :, None] * k.norm(dim=-1)[..., None, :]
    assert bool(((far - near).abs() <= bound).all())
    assert float((far - near).abs().max()) > 0  # not the same angles: the bound is doing the work
    with pytest.raises(ValueError, match="^offset"):
        rope(q, k, offset=off + 1)


def test_every_accepted_angle_is_within_the_tolerance_of_the_exact_product():
    # the derivation of MAX_ANGLE, checked against exact rational arithmetic
    g = torch.Generator().manual_seed(3)
    freqs = rope_frequencies(64, 10000.0)
    top = int(MAX_ANGLE)
    pos = torch.cat((torch.randint(top // 2, top, (40,), generator=g), torch.tensor([top, top - 1])))
    for scale in (1.0, 1 / 3, 0.7):
        angles = rope_angles(pos, freqs) * scale
        check_angle_precision(angles)  # all accepted
        for p, row in zip(pos.tolist(), angles.tolist()):
            for th, a in zip(freqs.tolist(), row):
                exact = Fraction(p) * Fraction(th) * Fraction(scale)
                assert abs(Fraction(a) - exact) <= Fraction(ANGLE_TOLERANCE), (p, th, scale)


def test_check_angle_precision_bad_input():
    with pytest.raises(TypeError, match="angles must be a torch.Tensor"):
        check_angle_precision([1.0, 2.0])
    with pytest.raises(TypeError, match="name must be a str"):
        check_angle_precision(torch.zeros(2), name=3)
    with pytest.raises(ValueError, match=r"^offset: .* up to 3e\+09 rad, beyond 2.252e\+09 rad"):
        check_angle_precision(torch.tensor([0.0, -3e9], dtype=torch.float64), "offset")
    check_angle_precision(torch.tensor([float("inf")]))  # non-finite: left to rotate()'s own error
    check_angle_precision(torch.zeros(0))
