import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from posenc.attention.kernelized.kernelized import KernelizedRPEFunction, _blocks, kernelized_attention, rpe_coeffs
from posenc.attention.kernelized.reference import dense_kernelized_attention
from posenc.attention.kernelized.toeplitz import next_fast_len

D = torch.float64


def loop_reference(pq, pk, v, bias, causal=False, mask=None):
    """Eq. 10 with explicit loops over (i, j) (independent of every vectorised path)."""
    B, H, n_q, _ = pq.shape
    n_k = pk.shape[-2]
    out = torch.zeros(B, H, n_q, v.shape[-1], dtype=D)
    for b in range(B):
        for h in range(H):
            for i in range(n_q):
                num = torch.zeros(v.shape[-1], dtype=D)
                den = torch.zeros((), dtype=D)
                for j in range(n_k):
                    if (causal and j > i) or (mask is not None and mask[b, j]):
                        continue
                    w = (pq[b, h, i] @ pk[b, h, j]) * math.exp(bias[h, j - i + n_q - 1])
                    num += w * v[b, h, j]
                    den += w
                out[b, h, i] = num / den
    return out


def draw(g, B, H, n_q, n_k, m, d, dtype=D):
    pq = torch.rand(B, H, n_q, m, dtype=dtype, generator=g) + 0.05
    pk = torch.rand(B, H, n_k, m, dtype=dtype, generator=g) + 0.05
    v = torch.randn(B, H, n_k, d, dtype=dtype, generator=g)
    bias = 3 * (2 * torch.rand(H, n_q + n_k - 1, dtype=dtype, generator=g) - 1)  # range <= 6 nats
    return pq, pk, v, bias


@given(
    B=st.integers(1, 2), H=st.integers(1, 3), n_q=st.integers(1, 9), n_k=st.integers(1, 9),
    m=st.integers(1, 4), d=st.integers(1, 3), causal=st.booleans(), masked=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_fft_equals_loops_and_dense(B, H, n_q, n_k, m, d, causal, masked, seed):
    if causal:
        n_k = n_q
    g = torch.Generator().manual_seed(seed)
    pq, pk, v, bias = draw(g, B, H, n_q, n_k, m, d)
    mask = None
    if masked and n_k > 1:
        mask = torch.rand(B, n_k, generator=g) < 0.3
        mask[:, 0] = False  # keep one key per row (causal row 0 sees only key 0)
    ref = loop_reference(pq, pk, v, bias, causal, mask)
    dense = dense_kernelized_attention(pq, pk, v, bias, causal=causal, key_padding_mask=mask)
    torch.testing.assert_close(dense, ref, rtol=0, atol=1e-12)
    for method in ("fft", "dense"):
        out = kernelized_attention(
            pq, pk, v, rpe_coeffs(bias, n_q, causal), causal=causal, key_padding_mask=mask, method=method
        )
        torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)


@pytest.mark.parametrize("n_q,n_k", [(301, 301), (257, 130), (64, 200)])
def test_fft_equals_dense_long(n_q, n_k):
    g = torch.Generator().manual_seed(n_q)
    pq, pk, v, bias = draw(g, 2, 2, n_q, n_k, 5, 3)
    ref = dense_kernelized_attention(pq, pk, v, bias)
    out = kernelized_attention(pq, pk, v, rpe_coeffs(bias, n_q), method="fft", block_bytes=4096)
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)


def test_no_rpe_equals_unit_bias():
    g = torch.Generator().manual_seed(3)
    pq, pk, v, _ = draw(g, 2, 2, 11, 11, 4, 3)
    zero = torch.zeros(2, 21, dtype=D)
    for causal in (False, True):
        torch.testing.assert_close(
            kernelized_attention(pq, pk, v, None, causal=causal),
            dense_kernelized_attention(pq, pk, v, zero, causal=causal), rtol=0, atol=1e-12,
        )


@pytest.mark.parametrize("n_q,n_k,block", [(1, 1, 10**6), (6, 6, 1), (5, 8, 1), (7, 3, 10**6)])
def test_gradcheck(n_q, n_k, block):
    g = torch.Generator().manual_seed(n_q * 10 + n_k)
    G, m, d = 2, 3, 2
    args = (
        (torch.rand(G, n_q, m, dtype=D, generator=g) + 0.1).requires_grad_(),
        (torch.rand(G, n_k, m, dtype=D, generator=g) + 0.1).requires_grad_(),
        torch.randn(G, n_k, d, dtype=D, generator=g).requires_grad_(),
        (torch.rand(G, n_q + n_k - 1, dtype=D, generator=g) + 0.1).requires_grad_(),
    )
    assert torch.autograd.gradcheck(lambda *a: KernelizedRPEFunction.apply(*a, block), args)


@given(m=st.integers(1, 5), d1=st.integers(1, 70), lines=st.integers(1, 200))
def test_blocks_cover_every_channel_once(m, d1, lines):
    seen = torch.zeros(m, d1, dtype=torch.int64)
    for a0, a1, f0, f1 in _blocks(m, d1, lines):
        assert 0 <= a0 < a1 <= m and 0 <= f0 < f1 <= d1
        assert (a1 - a0) * (f1 - f0) <= max(lines, f1 - f0)  # never more than a block's lines
        seen[a0:a1, f0:f1] += 1
    assert bool((seen == 1).all())


@pytest.mark.parametrize("block_bytes", [1, 4096, 10**9])
def test_split_features_match_dense_with_gradients(block_bytes):
    """d + 1 = 21 channels per feature: tiny blocks split each feature into channel ranges."""
    g = torch.Generator().manual_seed(11)
    pq, pk, v, bias = draw(g, 2, 2, 150, 97, 3, 20)
    leaves = [t.clone().requires_grad_() for t in (pq, pk, v, bias)]
    w = torch.randn(2, 2, 150, 20, dtype=D, generator=g)
    grads = []
    for method in ("fft", "dense"):
        q, k, vv, b = (t.detach().clone().requires_grad_() for t in leaves)
        out = kernelized_attention(q, k, vv, rpe_coeffs(b, 150), method=method, block_bytes=block_bytes)
        grads.append((out, *torch.autograd.grad((out * w).sum(), (q, k, vv, b))))
    for x, y in zip(*grads):
        torch.testing.assert_close(x, y, rtol=0, atol=1e-11)


def test_gradients_through_bias_match_dense():
    g = torch.Generator().manual_seed(5)
    pq, pk, v, bias = draw(g, 1, 2, 40, 40, 3, 2)
    grads = []
    for method in ("fft", "dense"):
        b = bias.clone().requires_grad_()
        q = pq.clone().requires_grad_()
        out = kernelized_attention(q, pk, v, rpe_coeffs(b, 40, causal=True), causal=True, method=method)
        (out * torch.linspace(-1, 1, out.numel(), dtype=D).reshape(out.shape)).sum().backward()
        grads.append((b.grad, q.grad))
    torch.testing.assert_close(grads[0][0], grads[1][0], rtol=0, atol=1e-12)
    torch.testing.assert_close(grads[0][1], grads[1][1], rtol=0, atol=1e-12)


def bias_profile(kind, B, L, g):
    if kind == "random":
        return -B * torch.rand(2, L, generator=g, dtype=D)
    # worst case seen: small coefficients near the diagonal, large far away
    return -B * (1 - torch.linspace(-1, 1, L, dtype=D).abs())[None].repeat(2, 1)


@pytest.mark.parametrize("n", [200, 1000])
@pytest.mark.parametrize("B", [0.0, 4.0, 8.0, 12.0, 20.0])
@pytest.mark.parametrize("kind", ["random", "grow"])
def test_float32_error_bound(n, B, kind):
    """Documented guarantee: |z32 - z| <= eps32 * log2(L) * exp(B) * max|v| for c in [e^-B, 1]."""
    g = torch.Generator().manual_seed(int(B) + n)
    pq, pk, v, _ = draw(g, 1, 2, n, n, 8, 4, dtype=torch.float32)
    bias = bias_profile(kind, B, 2 * n - 1, g)
    z = kernelized_attention(pq, pk, v, rpe_coeffs(bias.float(), n), method="fft")
    ref = dense_kernelized_attention(pq.double(), pk.double(), v.double(), bias)
    err = float((z.double() - ref).abs().max())
    bound = 2.0**-24 * math.log2(next_fast_len(2 * n - 1)) * math.exp(B) * float(v.abs().max())
    assert err <= bound


def test_float64_accumulation_rescues_wide_bias():
    g = torch.Generator().manual_seed(9)
    n = 300
    pq, pk, v, _ = draw(g, 1, 2, n, n, 8, 4, dtype=torch.float32)
    bias = bias_profile("grow", 40.0, 2 * n - 1, g)
    ref = dense_kernelized_attention(pq.double(), pk.double(), v.double(), bias)
    z32 = kernelized_attention(pq, pk, v, rpe_coeffs(bias.float(), n), method="fft")
    z64 = kernelized_attention(pq, pk, v, rpe_coeffs(bias, n), method="fft", compute_dtype=D)
    assert z64.dtype == torch.float32
    assert float((z32.double() - ref).abs().max()) > 1e-2  # float32 breaks down ...
    assert float((z64.double() - ref).abs().max()) < 1e-6  # ... float64 accumulation does not


def test_max_subtraction_is_exact():
    g = torch.Generator().manual_seed(4)
    pq, pk, v, bias = draw(g, 1, 2, 9, 9, 3, 2)
    a = kernelized_attention(pq, pk, v, torch.exp(bias))
    b = kernelized_attention(pq, pk, v, rpe_coeffs(bias + 30.0, 9))
    torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    assert float(rpe_coeffs(bias + 30.0, 9).max()) == 1.0


@pytest.mark.parametrize("low", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("method", ["fft", "dense"])
def test_half_precision_inputs_are_computed_in_float32(low, method):
    g = torch.Generator().manual_seed(12)
    pq, pk, v, bias = (t.to(low) for t in draw(g, 1, 2, 200, 200, 4, 3, dtype=torch.float32))
    c = rpe_coeffs(bias.float(), 200).to(low)
    out = kernelized_attention(pq, pk, v, c, method=method)
    ref = kernelized_attention(pq.float(), pk.float(), v.float(), c.float(), method=method)
    assert out.dtype == low and bool(torch.isfinite(out).all())
    torch.testing.assert_close(out.float(), ref.to(low).float(), rtol=0, atol=0)


@pytest.mark.parametrize("n", [1, 63, 64, 65, 200])
def test_causal_without_rpe_is_chunkwise_and_matches_loops(n):
    # causal linear attention runs the chunkwise form (decay factor 1): values and gradients
    # against the explicit loops / the dense float64 path, n below, at and off the chunk length
    g = torch.Generator().manual_seed(n)
    pq, pk, v, _ = draw(g, 2, 2, n, n, 3, 2)
    mask = torch.zeros(2, n, dtype=torch.bool)
    if n > 3:
        mask[1, -3:] = True
    leaves = [t.requires_grad_() for t in (pq, pk, v)]
    out = kernelized_attention(pq, pk, v, None, causal=True, key_padding_mask=mask)
    ref = dense_kernelized_attention(pq, pk, v, torch.zeros(2, 2 * n - 1, dtype=D), causal=True,
                                     key_padding_mask=mask)
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)
    if n <= 65:
        torch.testing.assert_close(out, loop_reference(pq.detach(), pk.detach(), v.detach(),
                                                       torch.zeros(2, 2 * n - 1, dtype=D), True, mask),
                                   rtol=0, atol=1e-12)
    w = torch.randn(out.shape, dtype=D, generator=g)
    for a, b in zip(torch.autograd.grad((out * w).sum(), leaves), torch.autograd.grad((ref * w).sum(), leaves)):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-11)


def test_fft_blocks_with_several_features_and_split_channels_match_dense():
    # the reworked FFT path: blocks of whole features (d small) and blocks that split one
    # feature's channels (d large), values and every gradient against the dense float64 path
    for m, d, block in ((5, 2, 10**6), (3, 40, 2048), (4, 6, 4096)):
        g = torch.Generator().manual_seed(m * d)
        pq, pk, v, bias = draw(g, 1, 2, 77, 77, m, d)
        leaves = [t.requires_grad_() for t in (pq, pk, v, bias)]
        out = kernelized_attention(pq, pk, v, rpe_coeffs(bias, 77), method="fft", block_bytes=block)
        ref = dense_kernelized_attention(pq, pk, v, bias)
        torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)
        w = torch.randn(out.shape, dtype=D, generator=g)
        for a, b in zip(torch.autograd.grad((out * w).sum(), leaves), torch.autograd.grad((ref * w).sum(), leaves)):
            torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_linear_attention_without_autograd_is_the_autograd_path_and_the_dense_reference(dtype):
    # without autograd, numerators and denominators are separate products and the division is in
    # place; with it, one product with [v, 1] and the custom ratio. Both are eq. 10 without RPE.
    g = torch.Generator().manual_seed(11)
    pq = torch.rand(2, 3, 70, 5, generator=g, dtype=dtype)
    pk = torch.rand(2, 3, 90, 5, generator=g, dtype=dtype)
    v = torch.randn(2, 3, 90, 4, generator=g, dtype=dtype)
    pq[0, 1, 7] = 0.0  # a query with zero weight on every key: its output is 0, not 0/0
    mask = torch.zeros(2, 90, dtype=torch.bool)
    mask[1, 60:] = True
    for kpm in (None, mask):
        fast = kernelized_attention(pq, pk, v, key_padding_mask=kpm)
        slow = kernelized_attention(pq, pk, v.clone().requires_grad_(), key_padding_mask=kpm).detach()
        ref = dense_kernelized_attention(pq.double(), pk.double(), v.double(), key_padding_mask=kpm)
        assert ref[0, 1, 7].isnan().all()  # the plain formula's 0/0, which posenc reads as 0
        ref[0, 1, 7] = 0.0
        tol = 1e-12 if dtype == torch.float64 else 1e-5
        torch.testing.assert_close(fast, slow, rtol=tol, atol=tol)
        torch.testing.assert_close(fast.double(), ref, rtol=tol, atol=tol)
        assert torch.equal(fast[0, 1, 7], torch.zeros(4, dtype=dtype))
        assert fast.dtype == dtype and fast.shape == (2, 3, 70, 4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("zero_rows", [False, True])
def test_linear_attention_checked_path_divides_unguarded_and_matches_the_guarded_one(dtype, zero_rows):
    # checked, the no-autograd path divides by the denominators as they are and remakes a result that
    # is not finite with the zero guard: the same bits as the unchecked (guarded) call, either way
    from posenc.attention.kernelized.kernelized import _linear_attention

    g = torch.Generator().manual_seed(12)
    pq = torch.rand(2, 3, 70, 5, generator=g, dtype=dtype)
    pk = torch.rand(2, 3, 90, 5, generator=g, dtype=dtype)
    v = torch.randn(2, 3, 90, 4, generator=g, dtype=dtype)
    if zero_rows:
        pq[1, 2, 30] = 0.0
    checked = kernelized_attention(pq, pk, v)
    assert torch.equal(checked, kernelized_attention(pq, pk, v, check_inputs=False))
    assert torch.equal(checked, _linear_attention(pq, pk, v))
    unguarded = _linear_attention(pq, pk, v, guard=False)
    assert torch.isfinite(unguarded).all() != zero_rows  # 0 / 0 where a query has zero weight on every key
    if zero_rows:
        assert torch.equal(checked[1, 2, 30], torch.zeros(4, dtype=dtype))
        unguarded[1, 2, 30] = 0.0
    assert torch.equal(unguarded, checked)
    ref = dense_kernelized_attention(pq.double(), pk.double(), v.double())
    ref[1, 2, 30] = 0.0 if zero_rows else ref[1, 2, 30]
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    torch.testing.assert_close(checked.double(), ref, rtol=tol, atol=tol)
