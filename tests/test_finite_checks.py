"""The input checks at the cost of one reduction: the same verdicts as the element-wise tests.

``all_finite`` (a sum, falling back to ``torch.isfinite(x).all()`` when the sum is not finite;
the extremes for float16), ``check_finite`` on top of it, ``broadcast_shape`` (no sympy import)
and the power-of-two coefficient scaling are compared with the element-wise forms they replace
on fuzzed tensors: NaN and infinities anywhere, values near the dtype's maximum (finite inputs
whose sum overflows), empty, 0-d and non-contiguous tensors. Then every public hot path that
checks its inputs is shown to refuse NaN, +inf and -inf wherever they sit, with the argument
named, and to accept a finite input whose sum overflows.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from posenc._checks import all_finite, broadcast_shape, check_finite, check_in_domain
from posenc.attention import (
    KernelizedMHA,
    RelativeMHA,
    RotaryEmbedding,
    alibi_kernelized_attention,
    alibi_slopes,
    apply_rope,
    apply_rope_qk,
    decay_kernelized_attention,
    kernelized_attention,
    kernelized_attention_2d,
    toeplitz2d_matmul,
    toeplitz_matmul,
)
from posenc.attention.kernelized.toeplitz import _pow2_scale
from posenc.attention.relative.rotary import _check_angles, rotate
from posenc.encodings import create_encoding

FUZZ = settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
SPECIAL = [math.nan, math.inf, -math.inf]


def old_finite(x: torch.Tensor) -> bool:
    """The element-wise test the checks used before (the reference verdict)."""
    return not x.is_floating_point() or bool(torch.isfinite(x).all())


def old_pow2_scale(x: torch.Tensor) -> torch.Tensor:
    top = x.detach().abs().amax()
    _, exponent = torch.frexp(torch.where(top > 0, top, torch.ones_like(top)))
    return torch.ldexp(torch.ones_like(top), exponent - 1)


@st.composite
def fuzzed(draw):
    """A float tensor: random shape (0-d and empty included), magnitudes up to the dtype's maximum,
    special values at drawn positions, and possibly a non-contiguous view of it."""
    dtype = draw(st.sampled_from(FLOATS))
    shape = tuple(draw(st.lists(st.integers(0, 40), min_size=0, max_size=3)))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    top = torch.finfo(dtype).max
    scale = draw(st.sampled_from([1.0, 1e3, top / 4, top / 2, top]))
    x = (torch.rand(shape, generator=gen, dtype=torch.float64) * 2 - 1) * scale
    if draw(st.booleans()):
        x = x.abs()  # one sign: the sum of many large entries overflows
    x = x.clamp(-top, top).to(dtype)
    if x.numel():
        for _ in range(draw(st.integers(0, 3))):
            x.view(-1)[draw(st.integers(0, x.numel() - 1))] = draw(st.sampled_from(SPECIAL))
    view = draw(st.sampled_from(["plain", "transpose", "stride", "expand"]))
    if view == "transpose" and x.dim() >= 2:
        x = x.transpose(0, -1)
    elif view == "stride" and x.dim() >= 1:
        x = x[..., ::2]
    elif view == "expand" and x.dim() >= 1 and x.shape[0] == 1:
        x = x.expand(3, *x.shape[1:])
    return x


@FUZZ
@given(fuzzed())
def test_all_finite_agrees_with_the_element_wise_test(x):
    assert all_finite(x) == old_finite(x)


@FUZZ
@given(fuzzed())
def test_check_finite_refuses_exactly_what_it_refused_before(x):
    bad = int((~torch.isfinite(x)).sum())
    if bad:
        with pytest.raises(ValueError, match=rf"^t contains {bad} non-finite value\(s\) \(NaN or inf\)$"):
            check_finite("t", x)
    else:
        check_finite("t", x)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("special", SPECIAL)
def test_a_single_special_value_is_found_in_every_position(dtype, special):
    # every lane of the vectorised reductions, and the tail after the last full vector
    for size in (1, 7, 8, 9, 31, 33, 65):
        for pos in range(size):
            x = torch.ones(size, dtype=dtype)
            x[pos] = special
            assert not all_finite(x), (dtype, size, pos)


@pytest.mark.parametrize("dtype", FLOATS)
def test_finite_values_whose_sum_overflows_pass(dtype):
    top = torch.finfo(dtype).max
    x = torch.full((64,), top / 2, dtype=dtype)
    assert not torch.isfinite(x.sum())  # the fast path's sum overflows: the exact test decides
    assert all_finite(x)
    check_finite("x", x)


def test_non_floating_and_empty_tensors_are_finite():
    assert all_finite(torch.arange(5))
    assert all_finite(torch.ones(3, dtype=torch.bool))
    assert all_finite(torch.empty(0, 3))
    assert all_finite(torch.tensor(2.0))
    assert not all_finite(torch.tensor(math.nan))


def test_all_finite_ignores_autograd():
    x = torch.ones(4, requires_grad=True)
    assert all_finite(x * 2)
    assert x.grad is None


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.lists(st.lists(st.integers(0, 4), max_size=4), min_size=1, max_size=3))
def test_broadcast_shape_matches_torch(shapes):
    try:
        want = torch.broadcast_shapes(*shapes)
    except RuntimeError:
        with pytest.raises(RuntimeError):
            broadcast_shape(*shapes)
        return
    got = broadcast_shape(*shapes)
    assert got == want and isinstance(got, torch.Size)


def test_broadcast_shape_of_torch_sizes():
    assert broadcast_shape(torch.Size([4]), torch.Size([2, 1])) == (2, 4)
    assert broadcast_shape() == torch.Size([])


def test_no_sympy_import_on_the_first_call():
    """torch.broadcast_shapes imports sympy on its first call (about half a second): not on these paths."""
    import subprocess
    import sys

    code = (
        "import sys, torch\n"
        "from posenc.attention import toeplitz_matmul, kernelized_attention, apply_rope\n"
        "assert 'sympy' not in sys.modules, 'imported by posenc itself'\n"
        "toeplitz_matmul(torch.rand(2, 511), torch.randn(3, 2, 256, 4))\n"
        "kernelized_attention(torch.rand(1, 2, 256, 4), torch.rand(1, 2, 256, 4), torch.randn(1, 2, 256, 3),"
        " torch.rand(2, 511))\n"
        "apply_rope(torch.randn(1, 2, 16, 8))\n"
        "print('sympy' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


@FUZZ
@given(fuzzed())
def test_pow2_scale_matches_the_abs_max_form(x):
    if x.numel() == 0 or not old_finite(x):
        return
    assert torch.equal(_pow2_scale(x), old_pow2_scale(x))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_check_in_domain_reads_the_extremes_in_one_pass(dtype):
    x = torch.linspace(-1, 1, 11, dtype=dtype)
    check_in_domain("positions", x, -1.0, 1.0)
    with pytest.raises(ValueError, match=r"got values in \[-1, 1\.5\]"):
        check_in_domain("positions", torch.cat((x, x.new_tensor([1.5]))), -1.0, 1.0)
    with pytest.raises(ValueError, match=r"got values in \[-2, 1\]"):
        check_in_domain("positions", torch.cat((x.new_tensor([-2.0]), x)), -1.0, 1.0)


# ------------------------------------------------------------------ every hot path refuses non-finite input
POSITIONS = ("first", "middle", "last")


def _poison(t: torch.Tensor, where: str, value: float) -> torch.Tensor:
    t = t.detach().clone(memory_format=torch.contiguous_format)
    flat = t.view(-1)
    flat[{"first": 0, "middle": flat.numel() // 2, "last": flat.numel() - 1}[where]] = value
    return t


def _refuses(call, name: str) -> None:
    with pytest.raises(ValueError, match=rf"{name} contains 1 non-finite value"):
        call()


def _gen():
    return torch.Generator().manual_seed(0)


def _qkv(n=64, m=4, d=3, heads=2):
    g = _gen()
    return (torch.rand(1, heads, n, m, generator=g) + 0.1, torch.rand(1, heads, n, m, generator=g) + 0.1,
            torch.randn(1, heads, n, d, generator=g))


@pytest.mark.parametrize("where", POSITIONS)
@pytest.mark.parametrize("value", SPECIAL)
@pytest.mark.parametrize("method", ["direct", "fft"])
def test_toeplitz_matmul_refuses(where, value, method):
    g = _gen()
    c, x = torch.rand(2, 2 * 40 - 1, generator=g), torch.randn(2, 40, 3, generator=g)
    _refuses(lambda: toeplitz_matmul(_poison(c, where, value), x, method=method), "coeffs")
    _refuses(lambda: toeplitz_matmul(c, _poison(x, where, value), method=method), "x")
    toeplitz_matmul(c, _poison(x, where, value), method=method, check_inputs=False)  # unchecked: no error


def test_toeplitz_matmul_accepts_finite_input_whose_sum_overflows():
    n = 64
    x = torch.full((n, 2), 1e37)  # sum 1.3e39: beyond float32
    c = torch.zeros(2 * n - 1)
    c[n - 1] = 1.0  # the identity: y = x
    assert not torch.isfinite(x.sum())
    torch.testing.assert_close(toeplitz_matmul(c, x), x)
    big_c = torch.full((2 * n - 1,), 3e38)  # the coefficients' sum overflows too; scaled, the product is finite
    y = toeplitz_matmul(big_c, torch.full((n, 1), 1e-30, dtype=torch.float64).float())
    assert bool(torch.isfinite(y).all())


def test_toeplitz_matmul_overflowing_result_is_still_refused():
    n = 64
    with pytest.raises(ValueError, match="result overflows torch.float32"):
        toeplitz_matmul(torch.ones(2 * n - 1), torch.full((n, 1), 1e37))


@pytest.mark.parametrize("where", POSITIONS)
@pytest.mark.parametrize("value", SPECIAL)
@pytest.mark.parametrize("kind", ["rpe", "rpe_causal", "none", "none_causal"])
def test_kernelized_attention_refuses(where, value, kind):
    pq, pk, v = _qkv()
    c = None if kind.startswith("none") else torch.rand(2, 2 * 64 - 1, generator=_gen()) + 0.1
    causal = kind.endswith("causal")
    for name, i in (("phi_q", 0), ("phi_k", 1), ("v", 2)):
        args = [pq, pk, v]
        args[i] = _poison(args[i], where, value)
        _refuses(lambda args=args: kernelized_attention(*args, c, causal=causal), name)
    if c is not None:
        _refuses(lambda: kernelized_attention(pq, pk, v, _poison(c, where, value), causal=causal), "coeffs")


@pytest.mark.parametrize("grad", [False, True], ids=["no_grad_path", "autograd_path"])
@pytest.mark.parametrize("value", SPECIAL)
def test_linear_attention_reads_its_checks_from_the_result_and_misses_nothing(value, grad):
    # plain linear attention checks its result instead of its inputs: the cases where a special
    # value meets only zeros still surface, naming the input, on both of its paths (without
    # autograd the numerators and the denominators are separate products)
    pq, pk, v = _qkv()
    if grad:
        v.requires_grad_()
    cases = []
    k0, v0 = pk.clone(), v.clone()
    k0[0, 0, 5] = 0.0  # key 5 has all-zero features: its value meets only zeros
    v0[0, 0, 5, 1] = value
    cases.append(((pq, k0, v0), "v"))
    k1, q1 = pk.clone(), pq.clone()
    k1[0, 1, :, 2] = 0.0  # feature 2 is zero for every key: a query's entry there meets only zeros
    q1[0, 1, 9, 2] = value
    cases.append(((q1, k1, v), "phi_q"))
    q2 = pq.clone()
    q2[0, 0, 3] = 0.0  # a query with zero features elsewhere: the denominator would be 0 without it
    q2[0, 0, 3, 0] = value
    cases.append(((q2, pk, v), "phi_q"))
    for args, name in cases:
        _refuses(lambda args=args: kernelized_attention(*args), name)
    mask = torch.zeros(1, 64, dtype=torch.bool)
    mask[0, 7] = True  # a padded key never reaches the result: its features are checked directly
    _refuses(lambda: kernelized_attention(pq, _at(pk, 7, value), v, key_padding_mask=mask), "phi_k")
    _refuses(lambda: kernelized_attention(pq, pk, _at(v, 7, value), key_padding_mask=mask), "v")
    z = kernelized_attention(pq, pk, v, key_padding_mask=mask)
    torch.testing.assert_close(z, kernelized_attention(pq, pk, v, key_padding_mask=mask, check_inputs=False),
                               rtol=0, atol=0)


def _at(t, key, value):
    t = t.clone()
    t[0, 0, key, 0] = value
    return t


def test_kernelized_attention_accepts_finite_input_whose_sum_overflows():
    pq, pk, v = _qkv(n=128, d=4)
    v = torch.full_like(v, 1e36)  # sum 1e39: beyond float32; a weighted mean of v is 1e36
    assert not torch.isfinite(v.sum())
    for c, causal in ((None, False), (None, True), (torch.rand(2, 255) + 0.1, False)):
        z = kernelized_attention(0.01 * pq, 0.01 * pk, v, c, causal=causal)
        torch.testing.assert_close(z, torch.full_like(z, 1e36))


@pytest.mark.parametrize("where", POSITIONS)
@pytest.mark.parametrize("value", SPECIAL)
def test_decay_path_refuses(where, value):
    pq, pk, v = _qkv()
    a, lam = torch.full((2, 2), 0.5), torch.full((2, 2), 0.1)
    for name, i in (("phi_q", 0), ("phi_k", 1), ("v", 2)):
        args = [pq, pk, v]
        args[i] = _poison(args[i], where, value)
        _refuses(lambda args=args: decay_kernelized_attention(*args, a, lam, (a, lam)), name)
        _refuses(lambda args=args: alibi_kernelized_attention(*args, alibi_slopes(2), causal=True), name)
    _refuses(lambda: decay_kernelized_attention(pq, pk, v, _poison(a, where, value), lam), "past amplitudes")


def test_decay_path_accepts_finite_input_whose_sum_overflows():
    pq, pk, v = _qkv(n=128, d=4)
    v = torch.full_like(v, 1e36)
    a, lam = torch.full((2, 2), 0.5), torch.full((2, 2), 0.1)
    z = decay_kernelized_attention(0.01 * pq, 0.01 * pk, v, a, lam, (a, lam))
    torch.testing.assert_close(z, torch.full_like(z, 1e36))


@pytest.mark.parametrize("where", POSITIONS)
@pytest.mark.parametrize("value", SPECIAL)
def test_rpe2d_refuses(where, value):
    grid = (4, 5)
    pq, pk, v = _qkv(n=20)
    c = torch.rand(2, 7, 9, generator=_gen()) + 0.1
    for name, i in (("phi_q", 0), ("phi_k", 1), ("v", 2)):
        args = [pq, pk, v]
        args[i] = _poison(args[i], where, value)
        _refuses(lambda args=args: kernelized_attention_2d(*args, c, grid), name)
    _refuses(lambda: kernelized_attention_2d(pq, pk, v, _poison(c, where, value), grid), "coeffs")
    x = torch.randn(2, 20, 3, generator=_gen())
    _refuses(lambda: toeplitz2d_matmul(c, _poison(x, where, value), grid), "x")
    _refuses(lambda: toeplitz2d_matmul(_poison(c, where, value), x, grid), "coeffs")
    # unchecked: the NaN/inf goes through (the caller vouched for its inputs)
    out = kernelized_attention_2d(_poison(pq, where, value), pk, v, c, grid, check_inputs=False)
    assert not bool(torch.isfinite(out).all())


def test_rpe2d_accepts_finite_input_whose_sum_overflows():
    grid = (8, 16)
    pq, pk, v = _qkv(n=128, d=4)
    v = torch.full_like(v, 1e36)
    z = kernelized_attention_2d(0.01 * pq, 0.01 * pk, v, torch.rand(2, 15, 31) + 0.1, grid)
    torch.testing.assert_close(z, torch.full_like(z, 1e36))


@pytest.mark.parametrize("where", POSITIONS)
@pytest.mark.parametrize("value", SPECIAL)
def test_rope_refuses_non_finite_positions_and_angles(where, value):
    q = torch.randn(1, 2, 16, 8, generator=_gen())
    pos = torch.arange(16.0)
    _refuses(lambda: apply_rope(q, _poison(pos, where, value)), "positions")
    _refuses(lambda: apply_rope_qk(q, q, _poison(pos, where, value), pos), "q_positions")
    _refuses(lambda: RotaryEmbedding(8)(q, q, pos, _poison(pos, where, value)), "k_positions")
    angles = torch.zeros(16, 4, dtype=torch.float64)
    with pytest.raises(ValueError, match="rotation angles"):
        rotate(q, _poison(angles, where, value))


def test_rope_checks_finite_positions_whose_sum_overflows_and_refuses_them_for_precision():
    pos = torch.full((16,), 1e308, dtype=torch.float64)
    assert not torch.isfinite(pos.sum())
    _check_angles(pos[:, None].expand(16, 4))  # the finiteness check does not overflow on the sum
    with pytest.raises(ValueError, match="too far from 0 for RoPE's precision"):
        apply_rope(torch.randn(1, 2, 16, 8, dtype=torch.float64, generator=_gen()), pos)


@pytest.mark.parametrize("where", POSITIONS)
@pytest.mark.parametrize("value", SPECIAL)
@pytest.mark.parametrize("name", ["sinusoidal", "gaussian", "rff"])
def test_encodings_refuse(where, value, name):
    enc = create_encoding(name, num_features=8)
    pos = torch.rand(10, enc.in_dim, generator=_gen())
    _refuses(lambda: enc(_poison(pos, where, value)), "positions")


def test_encodings_accept_finite_positions_whose_sum_overflows():
    enc = create_encoding("sinusoidal", num_features=8)
    pos = torch.full((16, 1), 3e38)
    assert not torch.isfinite(pos.sum())
    assert bool(torch.isfinite(enc(pos)).all())


@pytest.mark.parametrize("where", POSITIONS)
@pytest.mark.parametrize("value", SPECIAL)
def test_kernelized_mha_refuses(where, value):
    mha = KernelizedMHA(8, 2, batch_first=True, num_features=4)
    x = torch.randn(1, 16, 8, generator=_gen())
    with pytest.raises(ValueError, match="non-finite"):
        mha(_poison(x, where, value), _poison(x, where, value), _poison(x, where, value), need_weights=False)


@pytest.mark.parametrize("where", POSITIONS)
@pytest.mark.parametrize("value", SPECIAL)
def test_relative_mha_refuses_a_key_that_is_not_the_query(where, value):
    """RelativeMHA's data check on its inputs: ``key``/``value`` must hold the query's values."""
    mha = RelativeMHA(8, 2, batch_first=True)
    x = torch.randn(1, 16, 8, generator=_gen())
    mha(x, x.clone(), x.clone(), need_weights=False)  # equal values: accepted (one torch.equal pass)
    bad = _poison(x, where, value)
    with pytest.raises(ValueError, match="key must be the query itself"):
        mha(x, bad, bad, need_weights=False)


def old_same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape:
        return False
    same = a == b
    if a.is_floating_point() or a.is_complex():
        same = same | (a.isnan() & b.isnan())
    return bool(same.all())


@FUZZ
@given(fuzzed(), st.sampled_from(["same", "copy", "poisoned", "changed", "other_dtype"]))
def test_same_values_agrees_with_the_element_wise_form(x, how):
    from posenc.attention.mha import _same_values

    y = {"same": x, "copy": x.clone(), "poisoned": _poison(x, "middle", math.nan) if x.numel() else x,
         "changed": x + 1, "other_dtype": x.double()}[how]
    assert _same_values(x, y) == old_same_values(x, y)
