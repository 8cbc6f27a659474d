"""Attention never returns NaN from finite input and refuses NaN/inf input (#10 §1, §2)."""

import pytest
import torch

from posenc.attention.kernelized.kernelized import kernelized_attention
from posenc.attention.kernelized.layers import KernelizedAttention
from posenc.attention.kernelized.reference import softmax_rpe_attention
from posenc.attention.kernelized.toeplitz import toeplitz_dense, toeplitz_matmul

G = torch.Generator().manual_seed(0)


def rand(*shape, dtype=torch.float32):
    return torch.rand(*shape, generator=G, dtype=dtype)


@pytest.mark.parametrize("method", ["fft", "direct"])
def test_toeplitz_refuses_non_finite_inputs(method):
    c, x = rand(2, 9), rand(2, 5, 3)
    for bad in (float("nan"), float("inf")):
        xb = x.clone()
        xb[1, 2, 0] = bad
        with pytest.raises(ValueError, match="x contains 1 non-finite"):
            toeplitz_matmul(c, xb, method=method)
        cb = c.clone()
        cb[0, 4] = bad
        with pytest.raises(ValueError, match="coeffs contains 1 non-finite"):
            toeplitz_matmul(cb, x, method=method)
    # the documented opt-out lets NaN through (hot loops with known-finite inputs)
    xb = x.clone()
    xb[0, 0, 0] = float("nan")
    assert toeplitz_matmul(c, xb, method=method, check_inputs=False).isnan().any()


@pytest.mark.parametrize("method", ["fft", "direct"])
def test_toeplitz_coefficients_near_float32_max_do_not_overflow(method):
    n = 300  # 2n - 1 coefficients of ~1e38: their unscaled spectrum sums to ~6e40 > float32 max
    c = 1e38 * (0.5 + 0.5 * rand(2 * n - 1))
    x = rand(n, 2) / n  # each output is a weighted mean: <= 1e38, representable
    y = toeplitz_matmul(c, x, method=method)
    ref = toeplitz_dense(c.double(), n, n) @ x.double()
    assert torch.isfinite(y).all()
    assert torch.allclose(y.double(), ref, rtol=1e-4)


def test_toeplitz_result_overflow_is_an_error_not_inf():
    c, x = torch.full((7,), 3e38), torch.ones(4, 2)
    with pytest.raises(ValueError, match="overflows torch.float32"):
        toeplitz_matmul(c, x)
    assert torch.isfinite(toeplitz_matmul(c.double(), x.double())).all()


def test_toeplitz_shape_and_block_errors_name_the_argument():
    with pytest.raises(ValueError, match=r"coeffs \(3, 7\) and x \(2, 4, 5\)"):
        toeplitz_matmul(rand(3, 7), rand(2, 4, 5))
    with pytest.raises(ValueError, match="block_bytes"):
        toeplitz_matmul(rand(7), rand(4, 5), method="fft", block_bytes=0)


@pytest.mark.parametrize("method", ["fft", "dense"])
@pytest.mark.parametrize("rpe", [True, False])
def test_zero_weight_rows_give_zero_not_nan(method, rpe):
    pq, pk, v = rand(1, 2, 6, 4), torch.zeros(1, 2, 6, 4), rand(1, 2, 6, 3)
    coeffs = rand(2, 11) if rpe else None
    z = kernelized_attention(pq, pk, v, coeffs, method=method)
    assert torch.equal(z, torch.zeros_like(z))
    if rpe:  # all-zero coefficients
        z = kernelized_attention(pq, rand(1, 2, 6, 4), v, torch.zeros(2, 11), method=method)
        assert torch.equal(z, torch.zeros_like(z))
    # a row with some keys: the guard does not change finite rows
    pk2 = pk.clone()
    pk2[..., 0, :] = 1.0
    z = kernelized_attention(pq, pk2, v, coeffs, method=method)
    assert torch.allclose(z, v[..., :1, :].expand_as(z), atol=1e-5)


def test_zero_rows_causal_and_gradients_are_finite():
    pq, v = rand(1, 1, 5, 3, dtype=torch.float64).requires_grad_(), rand(1, 1, 5, 2, dtype=torch.float64)
    pk = torch.zeros(1, 1, 5, 3, dtype=torch.float64, requires_grad=True)
    for coeffs, method in ((None, "dense"), (rand(9, dtype=torch.float64), "fft"), (rand(9, dtype=torch.float64), "dense")):
        z = kernelized_attention(pq, pk, v, coeffs, causal=True, method=method)
        z.sum().backward()
        assert torch.isfinite(z).all() and torch.isfinite(pq.grad).all() and torch.isfinite(pk.grad).all()
        pq.grad = pk.grad = None


@pytest.mark.parametrize("method", ["fft", "dense"])
def test_kernelized_coefficients_near_float32_max(method):
    n = 200
    pq, pk, v = rand(1, 1, n, 4), rand(1, 1, n, 4), rand(1, 1, n, 2)
    base = 0.5 + 0.5 * rand(2 * n - 1)
    z = kernelized_attention(pq, pk, v, 3e38 * base, method=method)
    ref = kernelized_attention(pq.double(), pk.double(), v.double(), base.double(), method="dense")
    assert torch.isfinite(z).all() and torch.allclose(z.double(), ref, atol=1e-5)


def test_kernelized_attention_refuses_non_finite_and_bad_compute_dtype():
    pq, pk, v = rand(1, 1, 4, 3), rand(1, 1, 4, 3), rand(1, 1, 4, 2)
    for name in ("phi_q", "phi_k", "v"):
        args = {"phi_q": pq.clone(), "phi_k": pk.clone(), "v": v.clone()}
        args[name][0, 0, 1, 1] = float("inf")
        with pytest.raises(ValueError, match=f"{name} contains"):
            kernelized_attention(**args)
    with pytest.raises(ValueError, match="coeffs contains"):
        kernelized_attention(pq, pk, v, torch.full((7,), float("nan")))
    with pytest.raises(TypeError, match="compute_dtype"):
        kernelized_attention(pq, pk, v, compute_dtype=torch.int32)
    with pytest.raises(TypeError, match="compute_dtype"):
        kernelized_attention(pq, pk, v, compute_dtype="bogus")
    with pytest.raises(ValueError, match="coeffs must broadcast"):
        kernelized_attention(pq, pk, v, rand(3, 7))


@pytest.mark.parametrize("rpe", ["none", "table", "decay", "alibi"])
@pytest.mark.parametrize("mode", ["softmax", "kernelized"])
def test_module_refuses_nan_in_every_mode(rpe, mode):
    att = KernelizedAttention(2, 4, 8, rpe=rpe, mode=mode)
    q, k, v = rand(1, 2, 5, 4), rand(1, 2, 5, 4), rand(1, 2, 5, 4)
    assert torch.isfinite(att(q, k, v)).all()
    for name, bad in (("q", float("nan")), ("k", float("inf")), ("v", float("-inf"))):
        args = {"q": q.clone(), "k": k.clone(), "v": v.clone()}
        args[name][0, 1, 2, 3] = bad
        with pytest.raises(ValueError, match=f"{name} contains 1 non-finite"):
            att(**args)


def test_softmax_reference_refuses_nan_query():
    q = rand(1, 1, 3, 2)
    q[0, 0, 1, 0] = float("nan")  # SDPA alone returns an all-zero row here
    with pytest.raises(ValueError, match="q contains"):
        softmax_rpe_attention(q, rand(1, 1, 3, 2), rand(1, 1, 3, 2))


def test_module_constructor_arguments_are_named():
    with pytest.raises(TypeError, match="compute_dtype"):
        KernelizedAttention(2, 4, compute_dtype="bogus")
    with pytest.raises(TypeError, match="compute_dtype"):
        KernelizedAttention(2, 4, compute_dtype=torch.int32)
    with pytest.raises(ValueError, match="device"):
        KernelizedAttention(2, 4, device="bogus")
    with pytest.raises(TypeError, match="dtype"):
        KernelizedAttention(2, 4, dtype=torch.int64)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="device='cuda' is not available"):
            KernelizedAttention(2, 4, device="cuda")


def test_decay_attention_block_bytes_and_zero_keys():
    from posenc.attention.kernelized.decay import decay_kernelized_attention

    p, v = rand(1, 1, 4, 3), rand(1, 1, 4, 2)
    a, lam = torch.ones(1, 1), torch.ones(1, 1)
    for bad in (0, -5):
        with pytest.raises(ValueError, match="block_bytes"):
            decay_kernelized_attention(p, p, v, a, lam, block_bytes=bad)
    z = decay_kernelized_attention(p, torch.zeros_like(p), v, a, lam)
    assert torch.equal(z, torch.zeros_like(z))
