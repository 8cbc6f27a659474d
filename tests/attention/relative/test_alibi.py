"""ALiBi: slopes (closed form), the bias against an explicit loop, FlexAttention, and the kernelized path."""

import math

import pytest
import torch
import torch.nn.functional as F

from posenc.attention import KernelizedAttention, dense_kernelized_attention
from posenc.attention.relative.alibi import (
    alibi_bias,
    alibi_decoder,
    alibi_kernelized_attention,
    alibi_score_mod,
    alibi_slopes,
    relative_distance,
)


def test_slopes_power_of_two():
    torch.testing.assert_close(alibi_slopes(8, dtype=torch.float64),
                               torch.tensor([2.0 ** -(h + 1) for h in range(8)], dtype=torch.float64))
    torch.testing.assert_close(alibi_slopes(1, dtype=torch.float64), torch.tensor([2.0 ** -8], dtype=torch.float64))
    assert alibi_slopes(16, dtype=torch.float64)[0] == 2.0 ** -0.5


def test_slopes_not_power_of_two_follow_the_paper():
    # 12 heads: the 8 slopes of 8 heads, then every other slope of 16 heads (2^-0.5, 2^-1.5, ...)
    expect = [2.0 ** -(h + 1) for h in range(8)] + [2.0 ** -0.5, 2.0 ** -1.5, 2.0 ** -2.5, 2.0 ** -3.5]
    torch.testing.assert_close(alibi_slopes(12, dtype=torch.float64), torch.tensor(expect, dtype=torch.float64))
    s = alibi_slopes(6, dtype=torch.float64)
    assert s.tolist() == pytest.approx([2 ** -2, 2 ** -4, 2 ** -6, 2 ** -8, 2 ** -1, 2 ** -3])


def test_bias_against_loop():
    slopes = alibi_slopes(3, dtype=torch.float64)
    b = alibi_bias(slopes, 4, 6)
    for h in range(3):
        for i in range(4):
            for j in range(6):
                qpos = i + 2  # the last query is aligned with the last key
                assert float(b[h, i, j]) == -float(slopes[h]) * abs(j - qpos)
    c = alibi_bias(slopes, 5, causal=True)
    assert bool(torch.isneginf(c[:, 0, 1:]).all()) and bool(torch.isfinite(c.tril()).all())
    assert relative_distance(2, 3, q_offset=0).tolist() == [[0, 1, 2], [-1, 0, 1]]


def test_sdpa_with_bias_matches_explicit_softmax():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 7, 8, dtype=torch.float64) for _ in range(3))
    bias = alibi_bias(alibi_slopes(4, dtype=torch.float64), 7, causal=True)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    logits = q @ k.transpose(-1, -2) / math.sqrt(8) + bias
    torch.testing.assert_close(out, torch.softmax(logits, -1) @ v)


@pytest.mark.filterwarnings("ignore:flex_attention called without")
def test_flex_attention_score_mod():
    flex = pytest.importorskip("torch.nn.attention.flex_attention")
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 4, 16, 8) for _ in range(3))
    slopes = alibi_slopes(4)
    out = flex.flex_attention(q, k, v, score_mod=alibi_score_mod(slopes))
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=alibi_bias(slopes, 16))
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)
    out_c = flex.flex_attention(q, k, v, score_mod=alibi_score_mod(slopes, causal=True))
    ref_c = F.scaled_dot_product_attention(q, k, v, attn_mask=alibi_bias(slopes, 16, causal=True))
    torch.testing.assert_close(out_c, ref_c, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
def test_kernelized_alibi_against_dense_reference(causal):
    g = torch.Generator().manual_seed(1)
    phi_q = torch.rand(2, 3, 37, 5, generator=g, dtype=torch.float64) + 0.1
    phi_k = torch.rand(2, 3, 37, 5, generator=g, dtype=torch.float64) + 0.1
    v = torch.randn(2, 3, 37, 4, generator=g, dtype=torch.float64)
    slopes = alibi_slopes(3, dtype=torch.float64)
    out = alibi_kernelized_attention(phi_q, phi_k, v, slopes, causal=causal)
    t = torch.arange(-36, 37, dtype=torch.float64)
    bias = -slopes[:, None] * t.abs()
    ref = dense_kernelized_attention(phi_q, phi_k, v, bias, causal=causal)
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-12)


def test_decoder_steps_match_causal_attention():
    g = torch.Generator().manual_seed(2)
    phi_q = torch.rand(1, 2, 9, 4, generator=g, dtype=torch.float64) + 0.1
    phi_k = torch.rand(1, 2, 9, 4, generator=g, dtype=torch.float64) + 0.1
    v = torch.randn(1, 2, 9, 3, generator=g, dtype=torch.float64)
    slopes = alibi_slopes(2, dtype=torch.float64)
    full = alibi_kernelized_attention(phi_q, phi_k, v, slopes, causal=True)
    dec = alibi_decoder(slopes, 1, 4, 3)
    steps = torch.stack([dec.step(phi_q[:, :, i], phi_k[:, :, i], v[:, :, i]) for i in range(9)], dim=2)
    torch.testing.assert_close(steps, full)


@pytest.mark.parametrize("causal", [False, True])
def test_kernelized_layer_alibi(causal):
    torch.manual_seed(0)
    layer = KernelizedAttention(2, 8, num_features=16, rpe="alibi", causal=causal).double()
    q, k, v = (torch.randn(1, 2, 12, 8, dtype=torch.float64) for _ in range(3))
    out = layer(q, k, v)
    qn, kn = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
    phi_q, phi_k = layer._features(qn, kn, None)
    ref = dense_kernelized_attention(phi_q, phi_k, v, layer.bias_values(12, 12), causal=causal)
    torch.testing.assert_close(out, ref)
    soft = KernelizedAttention(2, 8, rpe="alibi", causal=causal, mode="softmax").double()
    logits = qn @ kn.transpose(-1, -2) + alibi_bias(soft.slopes, 12, causal=causal)
    torch.testing.assert_close(soft(q, k, v), torch.softmax(logits, -1) @ v)


def test_bad_input():
    with pytest.raises(ValueError, match="num_heads"):
        alibi_slopes(0)
    with pytest.raises(TypeError, match="num_heads"):
        alibi_slopes(2.0)
    with pytest.raises(ValueError, match="slopes"):
        alibi_bias(torch.tensor([[0.5]]), 4)
    with pytest.raises(ValueError, match="slopes"):
        alibi_bias(torch.tensor([-0.5]), 4)
    with pytest.raises(ValueError, match="n_q"):
        alibi_bias(alibi_slopes(2), 0)


def test_edge_cases_are_refused_with_the_argument_named():
    # #23 §4: non-float dtypes gave garbage, q_offset=1.7 was truncated, q_offset=nan named nothing
    slopes = alibi_slopes(4)
    for dtype in (torch.int64, torch.bool):
        with pytest.raises(TypeError, match="dtype"):
            alibi_bias(slopes, 4, dtype=dtype)
        with pytest.raises(TypeError, match="dtype"):
            alibi_slopes(4, dtype=dtype)
    with pytest.raises(TypeError, match="slopes"):
        alibi_bias(slopes.long(), 4)
    with pytest.raises(ValueError, match="q_offset"):
        alibi_bias(slopes, 4, q_offset=1.7)
    with pytest.raises(ValueError, match="q_offset"):
        alibi_bias(slopes, 4, q_offset=float("nan"))
    with pytest.raises(TypeError, match="q_offset"):
        alibi_bias(slopes, 4, q_offset="1")
    with pytest.raises(ValueError, match="q_offset"):
        alibi_bias(slopes, 4, q_offset=2**63)
    # an integer-valued float is an integer
    torch.testing.assert_close(alibi_bias(slopes, 3, 5, q_offset=2.0), alibi_bias(slopes, 3, 5, q_offset=2))
