"""Context extension (position interpolation, NTK, YaRN) against the papers' formulas, and
interop with rotary-embedding-torch (code we did not write) where it is installed."""

import math

import pytest
import torch

from posenc.attention.rope_scaling import (
    RopeScaling,
    extension_factor,
    linear_position_scale,
    ntk_base,
    yarn_frequencies,
)
from posenc.attention.rotary import RotaryEmbedding, apply_rope, apply_rope_qk, rope_frequencies


def test_linear_interpolation_divides_positions():
    assert linear_position_scale(512, 2048) == 0.25
    rope = RotaryEmbedding(16, scaling=RopeScaling("linear", 512, 2048))
    q = torch.randn(1, 10, 16, dtype=torch.float64)
    rq, _ = rope(q, q)
    torch.testing.assert_close(rq, apply_rope(q, torch.arange(10) / 4.0))


def test_ntk_base_closed_form():
    assert ntk_base(10000.0, 64, 1024, 4096) == pytest.approx(10000.0 * 4.0 ** (64 / 62))
    scaled = rope_frequencies(64, ntk_base(10000.0, 64, 1024, 4096))
    plain = rope_frequencies(64, 10000.0)
    # the highest frequency is unchanged, the lowest divided by s = 4
    assert float(scaled[0]) == 1.0
    assert float(plain[-1] / scaled[-1]) == pytest.approx(4.0, rel=1e-12)


def yarn_loop(dim, base, L, target, alpha, beta):
    s = target / L
    out = []
    for i in range(dim // 2):
        theta = base ** (-2 * i / dim)
        turns = L / (2 * math.pi / theta)
        g = 0.0 if turns < alpha else 1.0 if turns > beta else (turns - alpha) / (beta - alpha)
        out.append((1 - g) * theta / s + g * theta)
    return out, 0.1 * math.log(s) + 1


@pytest.mark.parametrize("L,target", [(64, 256), (2048, 8192), (100, 100)])
def test_yarn_against_loop(L, target):
    freqs, factor = yarn_frequencies(32, 10000.0, L, target)
    ref, ref_factor = yarn_loop(32, 10000.0, L, target, 1.0, 32.0)
    torch.testing.assert_close(freqs, torch.tensor(ref, dtype=torch.float64), rtol=1e-13, atol=0)
    assert factor == pytest.approx(ref_factor)


def test_yarn_keeps_fast_pairs_and_interpolates_slow_ones():
    freqs, _ = yarn_frequencies(64, 10000.0, 2048, 8192)
    plain = rope_frequencies(64)
    assert float(freqs[0]) == float(plain[0])  # many turns: kept
    assert float(freqs[-1]) == pytest.approx(float(plain[-1]) / 4)  # under one turn: interpolated


def test_yarn_temperature_scales_logits_by_its_square():
    sc = RopeScaling("yarn", 64, 512)
    rope = RotaryEmbedding(16, scaling=sc)
    q, k = torch.randn(1, 8, 16, dtype=torch.float64), torch.randn(1, 8, 16, dtype=torch.float64)
    rq, rk = rope(q, k)
    freqs, _, factor = sc.frequencies(16, 10000.0)
    pq, pk = apply_rope(q, freqs=freqs), apply_rope(k, freqs=freqs)
    torch.testing.assert_close(rq @ rk.transpose(-1, -2), factor ** 2 * (pq @ pk.transpose(-1, -2)))


def test_scaling_none_is_plain_rope():
    q = torch.randn(2, 5, 8)
    rope = RotaryEmbedding(8, scaling=RopeScaling("none", 10, 40))
    torch.testing.assert_close(rope(q, q)[0], apply_rope(q))


def test_bad_scaling():
    with pytest.raises(ValueError, match="target_length"):
        extension_factor(1024, 512)
    with pytest.raises(ValueError, match="target_length"):
        RopeScaling("linear", 1024, 512)
    with pytest.raises(ValueError, match="kind"):
        RopeScaling("dynamic", 10, 20)
    with pytest.raises(ValueError, match="trained_length"):
        RopeScaling("ntk", 0, 20)
    with pytest.raises(ValueError, match="beta"):
        yarn_frequencies(16, 10000.0, 10, 20, alpha=4.0, beta=2.0)
    with pytest.raises(ValueError, match="rotary_dim"):
        ntk_base(10000.0, 2, 10, 20)


# ---------------------------------------------------------------- rotary-embedding-torch
ret = pytest.importorskip("rotary_embedding_torch", reason="rotary-embedding-torch is in the test extra")


def test_matches_rotary_embedding_torch_default():
    torch.manual_seed(0)
    theirs = ret.RotaryEmbedding(dim=32)
    q = torch.randn(2, 4, 50, 64)
    out = theirs.rotate_queries_or_keys(q)
    ours = apply_rope(q, layout="interleaved", rotary_dim=32)  # their dim = rotated channels
    torch.testing.assert_close(ours, out, rtol=1e-5, atol=2e-5)


def test_matches_rotary_embedding_torch_interpolation_and_ntk():
    q = torch.randn(1, 2, 40, 16)
    pi = ret.RotaryEmbedding(dim=16, interpolate_factor=4.0).rotate_queries_or_keys(q)
    rope = RotaryEmbedding(16, layout="interleaved", scaling=RopeScaling("linear", 10, 40))
    torch.testing.assert_close(rope(q, q)[0], pi, rtol=1e-5, atol=2e-5)
    ntk = ret.RotaryEmbedding(dim=16, theta_rescale_factor=4.0).rotate_queries_or_keys(q)
    rope = RotaryEmbedding(16, layout="interleaved", scaling=RopeScaling("ntk", 10, 40))
    torch.testing.assert_close(rope(q, q)[0], ntk, rtol=1e-5, atol=2e-5)


def test_matches_rotary_embedding_torch_xpos():
    q, k = torch.randn(1, 2, 30, 16), torch.randn(1, 2, 30, 16)
    tq, tk = ret.RotaryEmbedding(dim=16, use_xpos=True).rotate_queries_and_keys(q, k)
    # rotary-embedding-torch measures the xPos exponent from len // 2
    oq, ok = apply_rope_qk(q, k, layout="interleaved", xpos_scale_base=512.0, xpos_center=15.0)
    torch.testing.assert_close(oq, tq, rtol=1e-5, atol=2e-5)
    torch.testing.assert_close(ok, tk, rtol=1e-5, atol=2e-5)
