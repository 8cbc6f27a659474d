import math

import pytest
import torch

from posenc.attention.kernelized.kernelized import kernelized_attention, rpe_coeffs
from posenc.attention.kernelized.layers import KernelizedAttention, KernelizedAttentionLayer
from posenc.attention.kernelized.reference import dense_kernelized_attention, rpe_matrix, softmax_rpe_attention

D = torch.float64


def qkv(g, B=2, H=2, n_q=9, n_k=9, d=4, dtype=D):
    return (torch.randn(B, H, n_q, d, dtype=dtype, generator=g), torch.randn(B, H, n_k, d, dtype=dtype, generator=g),
            torch.randn(B, H, n_k, d, dtype=dtype, generator=g))


def softmax_loops(q, k, v, bias, scale, causal=False, mask=None):
    B, H, n_q, _ = q.shape
    n_k = k.shape[-2]
    out = torch.zeros(B, H, n_q, v.shape[-1], dtype=D)
    for b in range(B):
        for h in range(H):
            for i in range(n_q):
                logits = torch.full((n_k,), -math.inf, dtype=D)
                for j in range(n_k):
                    if (causal and j > i) or (mask is not None and mask[b, j]):
                        continue
                    logits[j] = scale * (q[b, h, i] @ k[b, h, j]) + bias[h, j - i + n_q - 1]
                out[b, h, i] = torch.softmax(logits, 0) @ v[b, h]
    return out


@pytest.mark.parametrize("n_q,n_k,causal", [(7, 7, False), (7, 7, True), (4, 9, False), (1, 1, False)])
def test_softmax_reference_matches_loops(n_q, n_k, causal):
    g = torch.Generator().manual_seed(n_q + n_k)
    q, k, v = qkv(g, n_q=n_q, n_k=n_k)
    bias = torch.randn(2, n_q + n_k - 1, dtype=D, generator=g)
    mask = torch.zeros(2, n_k, dtype=torch.bool)
    mask[1, -1] = n_k > 1
    out = softmax_rpe_attention(q, k, v, bias, causal=causal, key_padding_mask=mask, scale=0.7)
    torch.testing.assert_close(out, softmax_loops(q, k, v, bias, 0.7, causal, mask), rtol=0, atol=1e-12)


def test_rpe_matrix():
    b = torch.arange(7.0)
    m = rpe_matrix(b, 3, 5)
    for i in range(3):
        for j in range(5):
            assert m[i, j] == b[j - i + 2]


@pytest.mark.parametrize("causal", [False, True])
def test_module_kernelized_equals_dense_reference(causal):
    g = torch.Generator().manual_seed(0)
    att = KernelizedAttention(2, 4, 6, max_distance=3, causal=causal, method="fft", dtype=D)
    with torch.no_grad():
        att.bias.copy_(torch.randn(2, 7, dtype=D, generator=g))
    q, k, v = qkv(g, n_q=12, n_k=12)
    out = att(q, k, v)
    qn, kn = torch.nn.functional.normalize(q, dim=-1), torch.nn.functional.normalize(k, dim=-1)
    phi = att.features
    ref = dense_kernelized_attention(phi(qn), phi(kn), v, att.bias_values(12, 12), causal=causal)
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-12)


def test_max_distance_shares_edge_values():
    att = KernelizedAttention(1, 4, 4, max_distance=2, dtype=D)
    with torch.no_grad():
        att.bias.copy_(torch.tensor([[-2.0, -1.0, 0.0, 1.0, 2.0]], dtype=D))
    b = att.bias_values(5, 5)[0]  # offsets -4..4
    torch.testing.assert_close(b, torch.tensor([-2, -2, -2, -1, 0, 1, 2, 2, 2], dtype=D))
    g = torch.Generator().manual_seed(1)
    q, k, v = qkv(g, B=1, H=1, n_q=300, n_k=300)
    assert att(q, k, v).shape == (1, 1, 300, 4)  # any length at inference


def test_many_features_approach_softmax():
    g = torch.Generator().manual_seed(2)
    q, k, v = qkv(g, n_q=10, n_k=10, d=8)
    errs = []
    for m in (64, 16384):
        kern = KernelizedAttention(2, 8, m, max_distance=4, seed=3, dtype=D)
        soft = KernelizedAttention(2, 8, m, max_distance=4, mode="softmax", dtype=D)
        with torch.no_grad():
            b = torch.randn(2, 9, dtype=D, generator=g)
            kern.bias.copy_(b)
            soft.bias.copy_(b)
        errs.append(float((kern(q, k, v) - soft(q, k, v)).detach().abs().max()))
    assert errs[1] < 0.05 and errs[1] < errs[0]


def test_unequal_lengths_mask_and_causality():
    g = torch.Generator().manual_seed(4)
    mha = KernelizedAttentionLayer(16, 2, num_features=8, max_distance=5, dtype=D)
    x, ctx = torch.randn(2, 6, 16, dtype=D, generator=g), torch.randn(2, 11, 16, dtype=D, generator=g)
    mask = torch.zeros(2, 11, dtype=torch.bool)
    mask[0, 8:] = True
    out = mha(x, ctx, key_padding_mask=mask)
    assert out.shape == (2, 6, 16)
    ctx2 = ctx.clone()
    ctx2[0, 8:] += 10.0  # padded keys must not matter
    torch.testing.assert_close(mha(x, ctx2, key_padding_mask=mask), out)
    causal = KernelizedAttentionLayer(16, 2, num_features=8, causal=True, dtype=D)
    y = causal(ctx)
    ctx3 = ctx.clone()
    ctx3[:, 7:] = 0.0
    torch.testing.assert_close(causal(ctx3)[:, :7], y[:, :7])  # no peeking at the future


@pytest.mark.parametrize("rpe", ["table", "decay", "none"])
def test_gradcheck_module(rpe):
    g = torch.Generator().manual_seed(5)
    att = KernelizedAttention(2, 3, 4, rpe=rpe, max_distance=2, method="fft", dtype=D)
    q, k, v = (t.requires_grad_() for t in qkv(g, B=1, n_q=5, n_k=5, d=3))
    params = [p for p in att.parameters()]
    assert torch.autograd.gradcheck(lambda q, k, v, *p: att(q, k, v), (q, k, v, *params))


def test_auto_float64_for_wide_bias():
    g = torch.Generator().manual_seed(6)
    n = 200
    q, k, v = qkv(g, B=1, H=1, n_q=n, n_k=n, dtype=torch.float32)
    att = KernelizedAttention(1, 4, 8, max_distance=n, method="fft")
    with torch.no_grad():  # 40-nat bias, large far away: float32 FFT fails here
        att.bias.copy_(-40 * (1 - torch.linspace(-1, 1, 2 * n + 1).abs())[None])
    ref_att = KernelizedAttention(1, 4, 8, max_distance=n, dtype=D)
    ref_att.load_state_dict({kk: t.double() for kk, t in att.state_dict().items()})
    ref = ref_att(q.double(), k.double(), v.double())
    err_auto = float((att(q, k, v).double() - ref).detach().abs().max())
    att.compute_dtype = None
    err_32 = float((att(q, k, v).double() - ref).detach().abs().max())
    assert err_auto < 1e-5 < err_32


def test_redraw_changes_output():
    g = torch.Generator().manual_seed(7)
    att = KernelizedAttention(2, 4, 4, dtype=D)
    q, k, v = qkv(g)
    a = att(q, k, v)
    att.redraw_features()
    assert not torch.allclose(a, att(q, k, v))


def test_bias_range_bounds_the_range():
    att = KernelizedAttention(1, 4, 4, max_distance=3, bias_range=6.0)
    with torch.no_grad():
        att.bias.copy_(torch.tensor([[-100.0, -3, 0, 2, 50, 9, 1]]))
    b = att.bias_values(4, 4)
    assert float((b.max() - b.min()).detach()) <= 6.0
    c = rpe_coeffs(b.detach(), 4)
    assert float(c.min()) >= math.exp(-6.0) - 1e-7


@pytest.mark.parametrize(
    "call,exc,match",
    [
        (lambda q, k, v, a: a(q, k[:, :1], v), ValueError, "heads"),
        (lambda q, k, v, a: a(q, k[..., :3], v), ValueError, "last dim"),
        (lambda q, k, v, a: a(q, k, v[:, :, :4]), ValueError, "n_k"),
        (lambda q, k, v, a: a(q, k, v, key_padding_mask=torch.zeros(2, 5, dtype=torch.bool)), ValueError,
         "key_padding_mask"),
        (lambda q, k, v, a: a(q, k, v, key_padding_mask=torch.zeros(2, 9)), TypeError, "key_padding_mask"),
        (lambda q, k, v, a: a(q, k, v, key_padding_mask=torch.ones(2, 9, dtype=torch.bool)), ValueError,
         "key_padding_mask"),
        (lambda q, k, v, a: a(q[:, :, :4], k, v), ValueError, "causal"),
        (lambda q, k, v, a: a(q[:, :1], k[:, :1], v[:, :1]), ValueError, "heads"),
        (lambda q, k, v, a: a(q[0], k[0], v[0]), ValueError, "q"),
    ],
)
def test_bad_input(call, exc, match):
    g = torch.Generator().manual_seed(8)
    att = KernelizedAttention(2, 4, 4, causal=True, dtype=D)
    q, k, v = qkv(g)
    with pytest.raises(exc, match=match):
        call(q, k, v, att)


def test_bad_construction_and_nonfinite_bias():
    with pytest.raises(ValueError, match="num_features"):
        KernelizedAttention(2, 4, 0)
    with pytest.raises(ValueError, match="rpe"):
        KernelizedAttention(2, 4, 4, rpe="rotary")
    with pytest.raises(ValueError, match="embed_dim"):
        KernelizedAttentionLayer(10, 3)
    att = KernelizedAttention(1, 4, 4, dtype=D)
    with torch.no_grad():
        att.bias[0, 3] = float("nan")
    g = torch.Generator().manual_seed(9)
    q, k, v = qkv(g, H=1)
    with pytest.raises(ValueError, match="bias"):
        att(q, k, v)


def test_functional_bad_input():
    g = torch.Generator().manual_seed(10)
    pq, pk, v = (t.abs() for t in qkv(g))
    with pytest.raises(ValueError, match="coeffs"):
        kernelized_attention(pq, pk, v, torch.ones(2, 16, dtype=D))
    with pytest.raises(ValueError, match="coeffs"):
        kernelized_attention(pq, pk, v, torch.full((2, 17), float("inf"), dtype=D))
    with pytest.raises(ValueError, match="bias"):
        rpe_coeffs(torch.tensor([0.0, float("nan"), 1.0]), 2)
    with pytest.raises(ValueError, match="causal"):
        kernelized_attention(pq[:, :, :3], pk, v, causal=True)
    with pytest.raises(ValueError, match="method"):
        kernelized_attention(pq, pk, v, torch.ones(2, 17, dtype=D), method="fast")
