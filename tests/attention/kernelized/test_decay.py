import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from posenc.attention.kernelized.decay import DecayDecoder, decay_coeffs, decay_kernelized_attention, decay_toeplitz
from posenc.attention.kernelized.kernelized import kernelized_attention
from posenc.attention.kernelized.toeplitz import toeplitz_matmul

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


# --- chunkwise-parallel decay_kernelized_attention -------------------------------------------


def _attn_inputs(seed, B, H, n, m, d, R, future, lam_scale=0.5):
    g = torch.Generator().manual_seed(seed)
    pq = torch.rand(B, H, n, m, dtype=D, generator=g) + 0.1
    pk = torch.rand(B, H, n, m, dtype=D, generator=g) + 0.1
    v = torch.randn(B, H, n, d, dtype=D, generator=g)
    a = torch.rand(H, R, dtype=D, generator=g) + 0.05
    lam = torch.rand(H, R, dtype=D, generator=g) * lam_scale
    fut = None
    if future:
        fut = (torch.rand(H, R, dtype=D, generator=g) + 0.05, torch.rand(H, R, dtype=D, generator=g) * lam_scale)
    return pq, pk, v, a, lam, fut


def _dense(pq, pk, v, a, lam, fut, mask=None):
    n = pq.shape[-2]
    return kernelized_attention(pq, pk, v, decay_coeffs(a, lam, n, n, fut), key_padding_mask=mask, method="dense")


@pytest.mark.parametrize("future", [False, True])
@pytest.mark.parametrize("R", [1, 2, 3])
@pytest.mark.parametrize("n,chunk", [(32, 8), (29, 8), (5, 8), (1, 4), (8, 8), (9, 8), (50, 2)])
def test_chunkwise_equals_dense(future, R, n, chunk):
    pq, pk, v, a, lam, fut = _attn_inputs(n * 10 + R, 2, 2, n, 3, 4, R, future)
    out = decay_kernelized_attention(pq, pk, v, a, lam, fut, chunk=chunk)
    torch.testing.assert_close(out, _dense(pq, pk, v, a, lam, fut), rtol=0, atol=1e-12)


@pytest.mark.parametrize("future", [False, True])
def test_chunkwise_padding_mask(future):
    pq, pk, v, a, lam, fut = _attn_inputs(5, 2, 2, 27, 3, 4, 2, future)
    mask = torch.zeros(2, 27, dtype=torch.bool)
    mask[0, -5:] = True
    mask[1, 3:7] = True  # interior padding too (non-causal meaning; causal still defined: key 0 kept)
    out = decay_kernelized_attention(pq, pk, v, a, lam, fut, key_padding_mask=mask, chunk=4)
    torch.testing.assert_close(out, _dense(pq, pk, v, a, lam, fut, mask), rtol=0, atol=1e-12)


@pytest.mark.parametrize("future", [False, True])
def test_chunkwise_grads_match_dense(future):
    pq, pk, v, a, lam, fut = _attn_inputs(6, 2, 2, 23, 3, 4, 2, future)
    leaves = [pq, pk, v, a, lam] + (list(fut) if fut else [])
    for t in leaves:
        t.requires_grad_()
    mask = torch.zeros(2, 23, dtype=torch.bool)
    mask[1, -4:] = True
    out = decay_kernelized_attention(pq, pk, v, a, lam, fut, key_padding_mask=mask, chunk=5)
    ref = _dense(pq, pk, v, a, lam, fut, mask)
    w = torch.randn(out.shape, dtype=D, generator=torch.Generator().manual_seed(0))
    g1 = torch.autograd.grad((out * w).sum(), leaves)
    g2 = torch.autograd.grad((ref * w).sum(), leaves)
    for name, x, y in zip(["phi_q", "phi_k", "v", "a", "lam", "fa", "flam"], g1, g2):
        assert torch.isfinite(x).all(), name
        torch.testing.assert_close(x, y, rtol=1e-9, atol=1e-11, msg=name)


def test_chunkwise_gradcheck():
    pq, pk, v, a, lam, fut = _attn_inputs(7, 1, 2, 7, 2, 2, 2, True)
    args = [t.requires_grad_() for t in (pq, pk, v, a, lam, *fut)]

    def f(pq, pk, v, a, lam, fa, fl):
        return decay_kernelized_attention(pq, pk, v, a, lam, (fa, fl), chunk=3)

    assert torch.autograd.gradcheck(f, args)


@given(n=st.integers(1, 45), chunk=st.integers(2, 12), R=st.integers(1, 3), future=st.booleans(),
       seed=st.integers(0, 2**16))
def test_chunkwise_property(n, chunk, R, future, seed):
    pq, pk, v, a, lam, fut = _attn_inputs(seed, 1, 2, n, 2, 3, R, future, lam_scale=2.0)
    out = decay_kernelized_attention(pq, pk, v, a, lam, fut, chunk=chunk)
    torch.testing.assert_close(out, _dense(pq, pk, v, a, lam, fut), rtol=0, atol=1e-12)


@pytest.mark.parametrize("rate", [0.0, 50.0])
@pytest.mark.parametrize("future", [False, True])
def test_chunkwise_extreme_rates(rate, future):
    pq, pk, v, a, lam, fut = _attn_inputs(8, 1, 2, 40, 3, 2, 2, future)
    lam = torch.full_like(lam, rate).requires_grad_()
    a.requires_grad_()
    if fut is not None:
        fut = (fut[0], torch.full_like(fut[1], rate))
    out = decay_kernelized_attention(pq, pk, v, a, lam, fut, chunk=8)
    ref = _dense(pq, pk, v, a, lam, fut)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)
    g1 = torch.autograd.grad(out.sum(), (a, lam))
    g2 = torch.autograd.grad(ref.sum(), (a, lam))
    for x, y in zip(g1, g2):
        assert torch.isfinite(x).all()
        torch.testing.assert_close(x, y, rtol=1e-9, atol=1e-11)
    if rate == 50.0 and not future:  # gamma = e^-50: only the diagonal survives -> z_i = v_i
        torch.testing.assert_close(out, v, rtol=0, atol=1e-12)


def test_chunkwise_float32_and_legacy_args():
    pq, pk, v, a, lam, fut = _attn_inputs(9, 1, 2, 100, 4, 3, 2, True)
    out = decay_kernelized_attention(pq.float(), pk.float(), v.float(), a, lam, fut, chunk=16,
                                     checkpoint=True, block_bytes=1024)  # legacy args: ignored
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.double(), _dense(pq, pk, v, a, lam, fut), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "kw,match",
    [
        ({"amplitudes": torch.ones(3, 2, dtype=D)}, "amplitudes"),
        ({"rates": -torch.ones(2, 2, dtype=D)}, "rates"),
        ({"future": (torch.ones(2, 2, dtype=D), torch.ones(2, 3, dtype=D))}, "future"),
        ({"future": (torch.ones(1, 2, dtype=D), torch.ones(1, 2, dtype=D))}, "future"),
        ({"chunk": 1}, "chunk"),
        ({"key_padding_mask": torch.zeros(1, 4, dtype=torch.bool)}, "key_padding_mask"),
        ({"v": torch.ones(1, 2, 6, 3, dtype=D)}, "v"),
        ({"phi_k": torch.ones(1, 2, 5, 3, dtype=D)}, "phi_k"),
    ],
)
def test_chunkwise_bad_input(kw, match):
    args = {"phi_q": torch.ones(1, 2, 5, 2, dtype=D), "phi_k": torch.ones(1, 2, 5, 2, dtype=D),
            "v": torch.ones(1, 2, 5, 3, dtype=D), "amplitudes": torch.ones(2, 2, dtype=D),
            "rates": torch.ones(2, 2, dtype=D)}
    args.update(kw)
    with pytest.raises(ValueError, match=match):
        decay_kernelized_attention(**args)


def test_chunkwise_head_groups():
    # block_bytes=1 forces one head per group: same values and parameter gradients as one group
    pq, pk, v, a, lam, fut = _attn_inputs(10, 2, 3, 30, 3, 2, 2, True)
    mask = torch.zeros(2, 30, dtype=torch.bool)
    mask[0, -7:] = True
    leaves = [a.requires_grad_(), lam.requires_grad_(), fut[1].requires_grad_()]
    outs = [decay_kernelized_attention(pq, pk, v, a, lam, fut, key_padding_mask=mask, chunk=4, block_bytes=bb)
            for bb in (1, None)]
    torch.testing.assert_close(outs[0], _dense(pq, pk, v, a, lam, fut, mask), rtol=0, atol=1e-12)
    g0, g1 = (torch.autograd.grad(o.sum(), leaves) for o in outs)
    for x, y in zip(g0, g1):
        torch.testing.assert_close(x, y, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("future", [False, True])
@pytest.mark.parametrize("block_bytes", [1, 3000, 9000])
def test_chunkwise_segments_hand_on_their_states(future, block_bytes):
    # a small budget cuts one head's sequence into segments of 1, 2 or more chunks whose scan
    # states are handed on (past terms forward, future terms backward): values and every gradient
    # equal the dense float64 reference
    pq, pk, v, a, lam, fut = _attn_inputs(11, 2, 2, 45, 3, 2, 2, future)
    leaves = [pq, pk, v, a, lam] + (list(fut) if fut else [])
    for t in leaves:
        t.requires_grad_()
    out = decay_kernelized_attention(pq, pk, v, a, lam, fut, chunk=4, block_bytes=block_bytes)
    ref = _dense(pq, pk, v, a, lam, fut)
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)
    w = torch.randn(out.shape, dtype=D, generator=torch.Generator().manual_seed(1))
    for x, y in zip(torch.autograd.grad((out * w).sum(), leaves), torch.autograd.grad((ref * w).sum(), leaves)):
        torch.testing.assert_close(x, y, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("reverse", [False, True])
def test_chunk_scan_with_initial_state_gradcheck(reverse):
    from posenc.attention.kernelized.decay import _ChunkScan

    g = torch.Generator().manual_seed(12)
    u = torch.randn(1, 2, 5, 2, 3, dtype=D, generator=g).requires_grad_()
    gam = (torch.rand(2, 2, dtype=D, generator=g) * 0.9 + 0.05).requires_grad_()
    h0 = torch.randn(1, 2, 2, 3, dtype=D, generator=g).requires_grad_()
    h = _ChunkScan.apply(u, gam, reverse, h0)
    # against the recurrence written out: h_first = h0, then h_k = g h_prev + u_prev
    order = list(range(4, -1, -1)) if reverse else list(range(5))
    ref, state = [None] * 5, h0
    for i, k in enumerate(order):
        if i:
            state = gam[None, :, :, None] * state + u[:, :, order[i - 1]]
        ref[k] = state
    torch.testing.assert_close(h, torch.stack(ref, dim=2), rtol=0, atol=1e-14)
    assert torch.autograd.gradcheck(lambda u, gm, h0: _ChunkScan.apply(u, gm, reverse, h0), (u, gam, h0))


@pytest.mark.parametrize("dtypes", [(torch.float32, torch.float64, torch.float64),
                                    (torch.float64, torch.float32, torch.float64),
                                    (torch.float64, torch.float64, torch.float32)])
@pytest.mark.parametrize("causal", [True, False])
def test_mixed_dtypes_are_refused_by_name(dtypes, causal):
    from posenc.attention.relative.alibi import alibi_kernelized_attention, alibi_slopes

    q, k, v = (torch.rand(1, 2, 6, 3 if i < 2 else 2, dtype=dt) for i, dt in enumerate(dtypes))
    a, lam = torch.ones(2, 1, dtype=torch.float64), torch.full((2, 1), 0.5, dtype=torch.float64)
    with pytest.raises(TypeError, match="phi_q, phi_k and v must share one dtype"):
        decay_kernelized_attention(q, k, v, a, lam, None if causal else (a, lam))
    with pytest.raises(TypeError, match="phi_q, phi_k and v must share one dtype"):
        alibi_kernelized_attention(q, k, v, alibi_slopes(2), causal=causal)


@pytest.mark.parametrize("future", [False, True])
@pytest.mark.parametrize("block_bytes", [1, 2500, 60000])
def test_chunkwise_pieces_of_heads_and_segments_give_every_gradient(future, block_bytes):
    # pieces cut from one split of the heads and one of the chunks (the gradients of a piece are
    # gathered by one concatenation, not a zero-filled copy of the whole input per piece): several
    # heads per group or one, several segments per head or one, a padded tail (n = 43, chunk 4);
    # values and every gradient (key padding mask included) equal the dense float64 reference
    pq, pk, v, a, lam, fut = _attn_inputs(13, 2, 3, 43, 3, 2, 2, future)
    mask = torch.zeros(2, 43, dtype=torch.bool)
    mask[1, -5:] = True
    leaves = [pq, pk, v, a, lam] + (list(fut) if fut else [])
    for t in leaves:
        t.requires_grad_()
    out = decay_kernelized_attention(pq, pk, v, a, lam, fut, key_padding_mask=mask, chunk=4, block_bytes=block_bytes)
    ref = _dense(pq, pk, v, a, lam, fut, mask)
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)
    w = torch.randn(out.shape, dtype=D, generator=torch.Generator().manual_seed(2))
    for x, y in zip(torch.autograd.grad((out * w).sum(), leaves), torch.autograd.grad((ref * w).sum(), leaves)):
        torch.testing.assert_close(x, y, rtol=1e-9, atol=1e-11)
