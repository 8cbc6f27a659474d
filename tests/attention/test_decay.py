import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from posenc.attention.decay import DecayDecoder, decay_coeffs, decay_kernelized_attention, decay_toeplitz
from posenc.attention.kernelized import kernelized_attention
from posenc.attention.toeplitz import toeplitz_matmul

D = torch.float64


def params(g, H, R):
    return torch.rand(H, R, dtype=D, generator=g), torch.rand(H, R, dtype=D, generator=g) * 0.5


@given(n=st.integers(1, 40), chunk=st.integers(2, 9), R=st.integers(1, 3), future=st.booleans(),
       seed=st.integers(0, 2**16))
def test_scan_equals_toeplitz(n, chunk, R, future, seed):
    g = torch.Generator().manual_seed(seed)
    a, lam = params(g, 2, R)
    fut = params(g, 2, R) if future else None
    x = torch.randn(2, n, 3, dtype=D, generator=g)
    y = decay_toeplitz(x, a, lam, fut, chunk=chunk)
    ref = toeplitz_matmul(decay_coeffs(a, lam, n, n, fut), x, method="direct")
    torch.testing.assert_close(y, ref, rtol=0, atol=1e-12)


def test_alibi_is_one_term():
    n, alpha = 9, 0.3
    c = decay_coeffs(torch.ones(1, 1, dtype=D), torch.full((1, 1), alpha, dtype=D), n, n,
                     (torch.ones(1, 1, dtype=D), torch.full((1, 1), alpha, dtype=D)))
    t = torch.arange(-(n - 1), n, dtype=D)
    torch.testing.assert_close(torch.log(c[0]), -alpha * t.abs())


@pytest.mark.parametrize("future", [False, True])
def test_attention_equals_dense_and_grads(future):
    g = torch.Generator().manual_seed(1)
    B, H, n, m, d = 2, 2, 37, 3, 2
    pq = (torch.rand(B, H, n, m, dtype=D, generator=g) + 0.1).requires_grad_()
    pk = torch.rand(B, H, n, m, dtype=D, generator=g) + 0.1
    v = torch.randn(B, H, n, d, dtype=D, generator=g)
    a, lam = params(g, H, 2)
    lam.requires_grad_()
    fut = params(g, H, 2) if future else None
    mask = torch.zeros(B, n, dtype=torch.bool)
    mask[1, -3:] = True
    out = decay_kernelized_attention(pq, pk, v, a, lam, fut, key_padding_mask=mask, chunk=8)
    ref = kernelized_attention(pq, pk, v, decay_coeffs(a, lam, n, n, fut), key_padding_mask=mask, method="dense")
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)
    w = torch.randn(out.shape, dtype=D, generator=g)
    g1 = torch.autograd.grad((out * w).sum(), (pq, lam))
    g2 = torch.autograd.grad((ref * w).sum(), (pq, lam))
    for x, y in zip(g1, g2):
        torch.testing.assert_close(x, y, rtol=1e-9, atol=1e-11)


def test_gradcheck_scan():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(1, 7, 2, dtype=D, generator=g, requires_grad=True)
    a, lam = params(g, 1, 2)
    a.requires_grad_()
    lam.requires_grad_()
    assert torch.autograd.gradcheck(lambda x, a, lam: decay_toeplitz(x, a, lam, chunk=3), (x, a, lam))


def test_decoder_matches_causal_attention():
    g = torch.Generator().manual_seed(3)
    B, H, n, m, d = 2, 3, 25, 4, 3
    pq = torch.rand(B, H, n, m, dtype=D, generator=g) + 0.1
    pk = torch.rand(B, H, n, m, dtype=D, generator=g) + 0.1
    v = torch.randn(B, H, n, d, dtype=D, generator=g)
    a, lam = params(g, H, 2)
    dec = DecayDecoder(a, lam, B, m, d)
    steps = torch.stack([dec.step(pq[:, :, i], pk[:, :, i], v[:, :, i]) for i in range(n)], dim=2)
    full = kernelized_attention(pq, pk, v, decay_coeffs(a, lam, n, n), causal=True, method="fft")
    torch.testing.assert_close(steps, full, rtol=0, atol=1e-12)
    assert dec.state.shape == (B, H, 2, m, d + 1)  # constant size, independent of n


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda x, a, l: decay_toeplitz(x, a, l[:, :1]), "amplitudes and rates"),
        (lambda x, a, l: decay_toeplitz(x, -a, l), ">= 0"),
        (lambda x, a, l: decay_toeplitz(x, a, l * float("nan")), "non-finite"),
        (lambda x, a, l: decay_toeplitz(x, a, l, chunk=1), "chunk"),
    ],
)
def test_bad_input(call, match):
    x = torch.zeros(1, 5, 2, dtype=D)
    a = torch.ones(1, 2, dtype=D)
    with pytest.raises(ValueError, match=match):
        call(x, a, a.clone())


def test_unequal_lengths_rejected():
    z = torch.rand(1, 1, 4, 2, dtype=D)
    with pytest.raises(ValueError, match="n_q == n_k"):
        decay_kernelized_attention(z, torch.rand(1, 1, 5, 2, dtype=D), torch.rand(1, 1, 5, 2, dtype=D),
                                   torch.ones(1, 1, dtype=D), torch.ones(1, 1, dtype=D))
