import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from posenc.attention.kernelized.toeplitz import even_ranges, next_fast_len, toeplitz_dense, toeplitz_matmul

D = torch.float64


def loop_reference(c, x, n_q, causal=False):
    """y_i = sum_j c_{j-i} x_j with plain loops (obviously correct)."""
    n_k = x.shape[-2]
    y = torch.zeros(*torch.broadcast_shapes(c.shape[:-1], x.shape[:-2]), n_q, x.shape[-1], dtype=D)
    for i in range(n_q):
        for j in range(n_k):
            if causal and j > i:
                continue
            y[..., i, :] += c[..., j - i + n_q - 1, None] * x[..., j, :]
    return y


@given(
    n_q=st.integers(1, 13), n_k=st.integers(1, 13), ch=st.integers(1, 4),
    heads=st.integers(1, 3), seed=st.integers(0, 2**16),
)
def test_fft_matches_loops(n_q, n_k, ch, heads, seed):
    g = torch.Generator().manual_seed(seed)
    c = torch.randn(heads, n_q + n_k - 1, dtype=D, generator=g)
    x = torch.randn(2, heads, n_k, ch, dtype=D, generator=g)
    ref = loop_reference(c, x, n_q)
    for method in ("fft", "direct", "auto"):
        y = toeplitz_matmul(c, x, n_out=n_q, method=method)
        assert y.shape == (2, heads, n_q, ch)
        torch.testing.assert_close(y, ref, rtol=0, atol=1e-12)


@pytest.mark.parametrize("c_shape,x_shape,out", [((7,), (4, 0), (4, 0)), ((7,), (0, 4, 3), (0, 4, 3)),
                                                  ((0, 7), (4, 3), (0, 4, 3)), ((3, 1, 7), (3, 0, 4, 3), (3, 0, 4, 3))])
@pytest.mark.parametrize("method", ["fft", "direct", "auto"])
def test_empty_products_are_empty_results_with_gradients(c_shape, x_shape, out, method):
    # no channels or an empty batch: an empty result of the right shape on every path (the FFT
    # path raised a reshape error), and backward gives zero-size gradients
    c = torch.rand(c_shape, dtype=D, requires_grad=True)
    x = torch.rand(x_shape, dtype=D, requires_grad=True)
    y = toeplitz_matmul(c, x, method=method)
    assert y.shape == out
    y.sum().backward()
    assert c.grad.shape == c.shape and x.grad.shape == x.shape


@pytest.mark.parametrize("n", [1, 2, 7, 31, 100])
def test_causal(n):
    g = torch.Generator().manual_seed(n)
    c = torch.randn(n * 2 - 1, dtype=D, generator=g)
    x = torch.randn(3, n, 2, dtype=D, generator=g)
    torch.testing.assert_close(
        toeplitz_matmul(c, x, causal=True, method="fft"), loop_reference(c, x, n, causal=True), rtol=0, atol=1e-12
    )


def test_large_n_matches_dense():
    g = torch.Generator().manual_seed(0)
    n = 517  # odd, not a power of two, above the auto crossover
    c = torch.randn(2, 2 * n - 1, dtype=D, generator=g)
    x = torch.randn(2, n, 3, dtype=D, generator=g)
    torch.testing.assert_close(toeplitz_matmul(c, x), toeplitz_dense(c, n, n) @ x, rtol=0, atol=1e-11)


@pytest.mark.parametrize("n_q,n_k", [(1, 1), (4, 4), (5, 3), (2, 6)])
def test_gradcheck(n_q, n_k):
    g = torch.Generator().manual_seed(1)
    c = torch.randn(2, n_q + n_k - 1, dtype=D, generator=g, requires_grad=True)
    x = torch.randn(2, n_k, 19, dtype=D, generator=g, requires_grad=True)
    # tiny block_bytes: the 19 channels go in blocks of at most MIN_LINES (7, 6, 6)
    assert torch.autograd.gradcheck(
        lambda c, x: toeplitz_matmul(c, x, n_out=n_q, method="fft", block_bytes=1), (c, x)
    )


@given(total=st.integers(1, 300), most=st.integers(1, 40))
def test_even_ranges_partition(total, most):
    r = even_ranges(total, most)
    assert r[0][0] == 0 and r[-1][1] == total
    assert all(b0 == a1 for (_, a1), (b0, _) in zip(r, r[1:]))
    sizes = [b - a for a, b in r]
    assert max(sizes) <= most and max(sizes) - min(sizes) <= 1


def test_blocked_gradients_match_dense():
    g = torch.Generator().manual_seed(4)
    n_q, n_k = 300, 211
    c = torch.randn(3, n_q + n_k - 1, dtype=D, generator=g, requires_grad=True)
    x = torch.randn(3, n_k, 37, dtype=D, generator=g, requires_grad=True)
    w = torch.randn(3, n_q, 37, dtype=D, generator=g)
    got = toeplitz_matmul(c, x, n_out=n_q, method="fft", block_bytes=1)
    ref = toeplitz_dense(c, n_q, n_k) @ x
    torch.testing.assert_close(got, ref, rtol=0, atol=1e-11)
    for a, b in zip(torch.autograd.grad((got * w).sum(), (c, x)), torch.autograd.grad((ref * w).sum(), (c, x))):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-10)


def test_next_fast_len():
    for n in range(1, 200):
        m = next_fast_len(n)
        assert m >= n
        r = m
        for p in (2, 3, 5):
            while r % p == 0:
                r //= p
        assert r == 1
        assert all(not _smooth(k) for k in range(n, m))


def _smooth(k):
    for p in (2, 3, 5):
        while k % p == 0:
            k //= p
    return k == 1


def test_float32_promotes_and_matches():
    g = torch.Generator().manual_seed(2)
    c = torch.rand(63, generator=g)
    x = torch.randn(32, 4, generator=g)
    y = toeplitz_matmul(c, x, method="fft")
    assert y.dtype == torch.float32
    torch.testing.assert_close(y.double(), toeplitz_dense(c.double(), 32, 32) @ x.double(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        ({"c": torch.zeros(8)}, ValueError, "coeffs"),
        ({"causal": True, "n_out": 3}, ValueError, "causal"),
        ({"method": "magic"}, ValueError, "method"),
        ({"x": torch.zeros(5, dtype=torch.int64)}, TypeError, "x"),
        ({"c": [1.0] * 9}, TypeError, "coeffs"),
    ],
)
def test_bad_input(kwargs, exc, match):
    c = kwargs.pop("c", torch.zeros(9))
    x = kwargs.pop("x", torch.zeros(5, 2))
    if "n_out" in kwargs:
        c = torch.zeros(kwargs["n_out"] + 5 - 1)
    with pytest.raises(exc, match=match):
        toeplitz_matmul(c, x, **kwargs)


@pytest.mark.parametrize("low", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("method", ["fft", "direct"])
def test_half_precision_is_computed_in_float32(low, method):
    g = torch.Generator().manual_seed(9)
    c = torch.rand(2, 2 * 300 - 1, generator=g)
    x = torch.randn(2, 300, 5, generator=g)
    ref = toeplitz_matmul(c.to(low).float(), x.to(low).float(), method=method)
    out = toeplitz_matmul(c.to(low), x.to(low), method=method)
    assert out.dtype == low
    torch.testing.assert_close(out.float(), ref.to(low).float(), rtol=0, atol=0)


# ------------------------------------------------------------------ the FFT path's checks, block by block
def _fused_shape(n=600, ch=64, dtype=D):
    """Inputs large enough for the FFT path's checks to read x block by block (see _fused_checks_pay)."""
    from posenc.attention.kernelized.toeplitz import _fused_checks_pay

    assert _fused_checks_pay(n, n, ch, dtype, 2 * 2**20)
    g = torch.Generator().manual_seed(n + ch)
    return torch.rand(3, 2 * n - 1, dtype=dtype, generator=g), torch.randn(2, 3, n, ch, dtype=dtype, generator=g)


@pytest.mark.parametrize("layout", ["rows", "channel_major"])
def test_fused_checks_path_matches_dense_and_the_unchecked_call(layout):
    c, x = _fused_shape()
    if layout == "channel_major":  # x[g].T contiguous: the lines are copied without the staging gather
        x = x.transpose(-1, -2).contiguous().transpose(-1, -2)
    y = toeplitz_matmul(c, x)
    assert torch.equal(y, toeplitz_matmul(c, x, check_inputs=False))
    torch.testing.assert_close(y, toeplitz_dense(c, 600, 600)[None] @ x, rtol=0, atol=1e-11)


@pytest.mark.parametrize("dtype", [torch.float32, D])
@pytest.mark.parametrize("layout", ["rows", "channel_major"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("where", [(0, 0, 0, 0), (1, 2, 599, 63), (1, 1, 300, 31)])
def test_fused_checks_refuse_a_non_finite_entry_naming_x(dtype, layout, value, where):
    c, x = _fused_shape(dtype=dtype)
    x = x.clone()
    x[where] = value
    if layout == "channel_major":
        x = x.transpose(-1, -2).contiguous().transpose(-1, -2)
    with pytest.raises(ValueError, match="x contains 1 non-finite value"):
        toeplitz_matmul(c, x)
    assert not torch.isfinite(toeplitz_matmul(c, x, check_inputs=False)).all()  # the opt-out lets it through


def test_fused_checks_accept_finite_entries_whose_squares_overflow():
    n, ch = 600, 64
    x = torch.full((n, ch), 1e20)  # x^2 = 1e40 > float32 max: the sum of squares is inf, the entries are finite
    x[::2] = -1e20
    c = torch.zeros(2 * n - 1)
    c[n - 1] = 1.0  # the identity: y = x
    y = toeplitz_matmul(c, x)
    torch.testing.assert_close(y, x, rtol=1e-5, atol=1e14)


def test_fused_checks_still_refuse_a_result_that_overflows():
    n, ch = 600, 64
    c, x = torch.full((2 * n - 1,), 3e38), torch.ones(n, ch)
    with pytest.raises(ValueError, match="overflows torch.float32"):
        toeplitz_matmul(c, x)
    c16 = torch.ones(2 * n - 1, dtype=torch.float16)  # float16 out: the cast can overflow where float32 did not
    with pytest.raises(ValueError, match="overflows torch.float16"):
        toeplitz_matmul(c16, torch.full((n, ch), 200.0, dtype=torch.float16))


def test_result_bound_is_conservative():
    from posenc.attention.kernelized.toeplitz import _result_bounded

    assert _result_bounded(1e6, 600, 1200, 1.0, torch.float32, torch.float32)
    for squares in (float("nan"), float("inf")):
        assert not _result_bounded(squares, 600, 1200, 1.0, torch.float32, torch.float32)
    # the bound 16 sqrt(n S) L^2 max(1, scale) against the smaller maximum of the two dtypes
    assert not _result_bounded(1e6, 600, 1200, 2.0**100, torch.float32, torch.float32)
    assert _result_bounded(1e6, 600, 1200, 2.0**100, D, D)
    assert not _result_bounded(1.0, 600, 1200, 1.0, torch.float32, torch.float16)


def test_fused_checks_path_gradients_match_dense():
    c, x = _fused_shape(n=300, ch=128)
    c.requires_grad_()
    x.requires_grad_()
    w = torch.randn(2, 3, 300, 128, dtype=D, generator=torch.Generator().manual_seed(1))
    (toeplitz_matmul(c, x) * w).sum().backward()
    gc, gx = c.grad.clone(), x.grad.clone()
    c.grad, x.grad = None, None
    (toeplitz_dense(c, 300, 300)[None] @ x * w).sum().backward()
    torch.testing.assert_close(gc, c.grad, rtol=0, atol=1e-9)
    torch.testing.assert_close(gx, x.grad, rtol=0, atol=1e-10)


def test_allocator_is_primed_once_per_size_and_only_on_the_cpu(monkeypatch):
    from posenc.attention.kernelized import toeplitz as T

    monkeypatch.setattr(T, "_PRIMED_BYTES", 0)
    sizes = []
    real_empty = torch.empty
    monkeypatch.setattr(torch, "empty", lambda *a, **k: sizes.append(a[0]) or real_empty(*a, **k))
    T._prime_allocator(1000, torch.device("cpu"))
    T._prime_allocator(1000, torch.device("cpu"))  # this size or less: nothing more
    T._prime_allocator(10**12, torch.device("cpu"))  # capped at glibc's largest mmap threshold
    T._prime_allocator(10**9, torch.device("meta"))
    assert sizes == [1000, T.PRIME_MAX_BYTES] and T._PRIMED_BYTES == T.PRIME_MAX_BYTES
