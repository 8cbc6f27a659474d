"""RoPE and xPos against rotation matrices built in a loop (float64)."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from posenc.attention.relative.rotary import (
    RotaryEmbedding,
    apply_rope,
    apply_rope_qk,
    convert_rope_layout,
    layout_permutation,
    rope_frequencies,
    rotate,
)


def rotation_matrix(p: float, d: int, r: int, base: float, layout: str) -> torch.Tensor:
    """The d x d block rotation of RoFormer Eq. 15 for position p (pairs per layout; channels >= r fixed)."""
    R = torch.eye(d, dtype=torch.float64)
    for i in range(r // 2):
        th = p * base ** (-2.0 * i / r)
        a, b = (2 * i, 2 * i + 1) if layout == "interleaved" else (i, i + r // 2)
        R[a, a], R[a, b] = math.cos(th), -math.sin(th)
        R[b, a], R[b, b] = math.sin(th), math.cos(th)
    return R


def reference(x: torch.Tensor, positions, base=10000.0, r=None, layout="half") -> torch.Tensor:
    d = x.shape[-1]
    r = d if r is None else r
    out = torch.empty_like(x, dtype=torch.float64)
    flat = x.reshape(-1, x.shape[-2], d).double()
    o = out.view(-1, x.shape[-2], d)
    for b in range(flat.shape[0]):
        for t in range(flat.shape[1]):
            o[b, t] = rotation_matrix(float(positions[t]), d, r, base, layout) @ flat[b, t]
    return out


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("r", [None, 4])
def test_apply_rope_matches_rotation_matrices(layout, r):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 7, 8, generator=g, dtype=torch.float64)
    pos = torch.tensor([0, 1, 2, 5, 9, 100, 12345])
    out = apply_rope(x, pos, rotary_dim=r, layout=layout)
    torch.testing.assert_close(out, reference(x, pos, r=r, layout=layout), rtol=1e-12, atol=1e-12)
    if r is not None:  # the unrotated channels pass through unchanged
        assert torch.equal(out[..., r:], x[..., r:])


def test_continuous_positions_and_base():
    x = torch.randn(5, 6, dtype=torch.float64)
    pos = torch.tensor([0.25, -1.5, 3.75, 10.1, 7.0], dtype=torch.float64)
    torch.testing.assert_close(apply_rope(x, pos, base=500.0), reference(x, pos, base=500.0), rtol=1e-12, atol=1e-12)


def test_default_positions_are_token_indices():
    x = torch.randn(1, 2, 9, 16, dtype=torch.float64)
    torch.testing.assert_close(apply_rope(x), apply_rope(x, torch.arange(9)))


def test_per_sample_positions_broadcast_over_heads():
    x = torch.randn(2, 3, 4, 8, dtype=torch.float64)
    pos = torch.tensor([[0, 1, 2, 3], [10, 11, 12, 13]])
    out = apply_rope(x, pos[:, None, :])
    for b in range(2):
        torch.testing.assert_close(out[b], apply_rope(x[b], pos[b]))


@settings(max_examples=25, deadline=None)
@given(m=st.integers(-500, 5000), n=st.integers(-500, 5000), shift=st.integers(-1000, 1000),
       layout=st.sampled_from(["half", "interleaved"]))
def test_relative_property_float64(m, n, shift, layout):
    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(16, generator=g, dtype=torch.float64), torch.randn(16, generator=g, dtype=torch.float64)

    def score(a, b):
        qa = apply_rope(q[None], torch.tensor([a]), layout=layout)[0]
        kb = apply_rope(k[None], torch.tensor([b]), layout=layout)[0]
        return float(qa @ kb)

    assert score(m, n) == pytest.approx(score(m + shift, n + shift), rel=1e-9, abs=1e-9)


def test_angles_are_accurate_at_long_positions():
    # angles in float64: a float32 input at position 1e5 is rotated as accurately as at position 1
    x = torch.randn(1, 64, dtype=torch.float32)
    pos = torch.tensor([100_000])
    out = apply_rope(x, pos)
    ref = reference(x.double(), pos)
    assert float((out.double() - ref).abs().max()) < 1e-5


def test_layout_conversion_permutation():
    perm = layout_permutation(8, "interleaved", "half")
    assert perm.tolist() == [0, 2, 4, 6, 1, 3, 5, 7]
    back = layout_permutation(8, "half", "interleaved")
    assert torch.equal(perm[back], torch.arange(8))
    x = torch.randn(3, 5, 8, dtype=torch.float64)
    pos = torch.arange(5) * 7
    torch.testing.assert_close(apply_rope(x[..., perm], pos, layout="half"),
                               apply_rope(x, pos, layout="interleaved")[..., perm])


def test_convert_rope_layout_keeps_attention_scores():
    torch.manual_seed(0)
    H, hd, E, n = 2, 8, 16, 6
    wq, wk = torch.randn(H * hd, E, dtype=torch.float64), torch.randn(H * hd, E, dtype=torch.float64)
    x = torch.randn(n, E, dtype=torch.float64)

    def scores(wq, wk, layout):
        q = (x @ wq.T).view(n, H, hd).transpose(0, 1)
        k = (x @ wk.T).view(n, H, hd).transpose(0, 1)
        q, k = apply_rope(q, layout=layout, rotary_dim=6), apply_rope(k, layout=layout, rotary_dim=6)
        return q @ k.transpose(-1, -2)

    ref = scores(wq, wk, "interleaved")
    wq2 = convert_rope_layout(wq, H, source="interleaved", target="half", rotary_dim=6)
    wk2 = convert_rope_layout(wk, H, source="interleaved", target="half", rotary_dim=6)
    torch.testing.assert_close(scores(wq2, wk2, "half"), ref)
    assert not torch.allclose(scores(wq, wk, "half"), ref)  # without conversion the checkpoint is wrong


def xpos_reference(q, k, m, n, scale_base=512.0, gamma=0.4):
    d = q.shape[-1]
    total = 0.0
    qm = rotation_matrix(m, d, d, 10000.0, "half") @ q
    kn = rotation_matrix(n, d, d, 10000.0, "half") @ k
    for i in range(d // 2):
        zeta = (2 * i / d + gamma) / (1 + gamma)
        f = zeta ** ((m - n) / scale_base)
        total += f * (qm[i] * kn[i] + qm[i + d // 2] * kn[i + d // 2])
    return float(total)


@pytest.mark.parametrize("m,n", [(0, 0), (10, 3), (3, 10), (700, 20), (2000, 1999)])
def test_xpos_against_formula(m, n):
    g = torch.Generator().manual_seed(2)
    q, k = torch.randn(8, generator=g, dtype=torch.float64), torch.randn(8, generator=g, dtype=torch.float64)
    qr, kr = apply_rope_qk(q[None], k[None], torch.tensor([m]), torch.tensor([n]), xpos_scale_base=512.0)
    assert float(qr[0] @ kr[0]) == pytest.approx(xpos_reference(q, k, m, n), rel=1e-10)


def test_xpos_centre_cancels_and_keeps_long_sequences_finite():
    q, k = torch.randn(1, 4096, 8), torch.randn(1, 4096, 8)
    far = torch.arange(4096) + 200_000
    a = apply_rope_qk(q, k, far, far, xpos_scale_base=512.0, xpos_center=float(far.float().mean()))
    assert all(bool(torch.isfinite(t).all()) for t in a)
    b = apply_rope_qk(q.double(), k.double(), far, far, xpos_scale_base=512.0, xpos_center=200_000.0)
    # xPos is meant for causal attention (m >= n), where its factor decays; compare there
    sa, sb = (a[0] @ a[1].transpose(-1, -2)).double().tril(), (b[0] @ b[1].transpose(-1, -2)).tril()
    torch.testing.assert_close(sa, sb, rtol=0, atol=1e-5 * float(sb.abs().max()))


def test_module_cache_grows_and_matches_function():
    rope = RotaryEmbedding(16, layout="interleaved")
    for n in (4, 32, 8):
        q, k = torch.randn(2, 2, n, 16), torch.randn(2, 2, n, 16)
        rq, rk = rope(q, k)
        torch.testing.assert_close(rq, apply_rope(q, layout="interleaved"))
        torch.testing.assert_close(rk, apply_rope(k, layout="interleaved"))
    assert rope._cos.shape[0] >= 32
    assert "_cos" not in rope.state_dict()


def test_module_explicit_positions_and_unequal_lengths():
    rope = RotaryEmbedding(8)
    q, k = torch.randn(1, 3, 8, dtype=torch.float64), torch.randn(1, 5, 8, dtype=torch.float64)
    rq, rk = rope(q, k, torch.tensor([4, 5, 6]), torch.arange(5) + 2)
    torch.testing.assert_close(rq, apply_rope(q, torch.tensor([4, 5, 6])))
    torch.testing.assert_close(rk, apply_rope(k, torch.arange(5) + 2))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_inputs(dtype):
    x = torch.randn(2, 10, 32)
    out = apply_rope(x.to(dtype), torch.arange(10) * 3)
    assert out.dtype == dtype
    ref = apply_rope(x.to(dtype).float(), torch.arange(10) * 3)
    torch.testing.assert_close(out, ref.to(dtype))
    rope = RotaryEmbedding(32)
    rq, _ = rope(x.to(dtype)[None], x.to(dtype)[None])
    assert rq.dtype == dtype and torch.equal(rq[0], apply_rope(x.to(dtype)))


def test_compile_fullgraph():
    rope = RotaryEmbedding(16)
    q, k = torch.randn(2, 4, 12, 16), torch.randn(2, 4, 12, 16)
    fn = torch.compile(lambda q, k, p: apply_rope_qk(q, k, p, p), fullgraph=True, backend="eager")
    out = fn(q, k, torch.arange(12))
    torch.testing.assert_close(out[0], apply_rope(q))
    mod = torch.compile(rope, fullgraph=True, backend="eager")
    torch.testing.assert_close(mod(q, k)[1], apply_rope(k))


def test_frequencies_closed_form():
    f = rope_frequencies(8, 10000.0)
    torch.testing.assert_close(f, torch.tensor([1.0, 0.1, 0.01, 0.001], dtype=torch.float64))


def test_bad_input():
    x = torch.randn(2, 4, 7)
    with pytest.raises(ValueError, match="even"):
        apply_rope(x)
    with pytest.raises(ValueError, match="rotary_dim"):
        apply_rope(torch.randn(2, 4, 8), rotary_dim=10)
    with pytest.raises(ValueError, match="rotary_dim"):
        apply_rope(torch.randn(2, 4, 8), rotary_dim=3)
    with pytest.raises(ValueError, match="positions"):
        apply_rope(torch.randn(2, 4, 8), torch.arange(5))
    with pytest.raises(ValueError, match="positions"):
        apply_rope(torch.randn(2, 4, 8), torch.tensor([0.0, float("nan"), 1.0, 2.0]))
    with pytest.raises(TypeError, match="positions"):
        apply_rope(torch.randn(2, 4, 8), torch.ones(4, dtype=torch.bool))
    with pytest.raises(TypeError, match="floating"):
        apply_rope(torch.ones(2, 4, 8, dtype=torch.int64))
    with pytest.raises(ValueError, match="layout"):
        apply_rope(torch.randn(2, 4, 8), layout="neox")
    with pytest.raises(ValueError, match="base"):
        apply_rope(torch.randn(2, 4, 8), base=1.0)
    with pytest.raises(ValueError, match="head dim"):
        apply_rope_qk(torch.randn(4, 8), torch.randn(4, 6))
    with pytest.raises(ValueError, match="head_dim"):
        RotaryEmbedding(0)
    with pytest.raises(ValueError, match="rotary_dim"):
        RotaryEmbedding(8, rotary_dim=16)
    with pytest.raises(ValueError, match="head dim"):
        RotaryEmbedding(8)(torch.randn(1, 4, 6), torch.randn(1, 4, 6))
    with pytest.raises(TypeError, match="scaling"):
        RotaryEmbedding(8, scaling="yarn")
    with pytest.raises(ValueError, match="num_heads"):
        convert_rope_layout(torch.randn(10, 4), 3)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("r", [None, 4])
def test_gradients_fast_path(layout, r):
    # the fast kernels' backward (rotation by -angle) against torch.autograd.gradcheck
    x = torch.randn(2, 5, 8, dtype=torch.float64, requires_grad=True)
    pos = torch.tensor([0.0, 1.5, 3.0, 7.0, 11.0], dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda t: apply_rope(t, pos, layout=layout, rotary_dim=r), (x,))


def test_non_contiguous_inputs():
    # q as it comes out of a fused qkv projection: (B, n, 3, H, d) permuted to (B, H, n, d)
    qkv = torch.randn(2, 6, 3, 2, 8, dtype=torch.float64)
    q = qkv.permute(2, 0, 3, 1, 4)[0]
    for layout in ("half", "interleaved"):
        torch.testing.assert_close(apply_rope(q, layout=layout), apply_rope(q.contiguous(), layout=layout))
        torch.testing.assert_close(apply_rope(q, layout=layout), reference(q.contiguous(), torch.arange(6), layout=layout))


# ------------------------------------------------------------------ in-place and blocked kernels
def test_blocks_cover_every_row_once():
    from posenc.attention.relative.rotary_kernels import _blocks

    for shape, row, target in [((3, 5, 7), 8, 8), ((3, 5, 7), 8, 24), ((3, 5, 7), 8, 8 * 35),
                               ((3, 5, 7), 8, 10**9), ((2, 9), 4, 12), ((4,), 4, 1), ((1, 1, 13), 4, 20)]:
        seen = torch.zeros(shape, dtype=torch.int64)
        for idx in _blocks(torch.Size(shape), row, target):
            seen[idx] += 1
            assert seen[idx].numel() * row <= max(target, row), (shape, target, idx)
        assert bool((seen == 1).all()), (shape, target)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("r", [None, 6])
def test_blocked_kernels_match_the_loop_reference(monkeypatch, layout, r):
    # blocks far smaller than the tensor: runs cut inside the token dim
    import posenc.attention.relative.rotary_kernels as rot

    monkeypatch.setattr(rot, "BLOCK_BYTES", 3 * 10 * 8)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 3, 7, 10, generator=g, dtype=torch.float64)
    pos = torch.tensor([0, 1, 2, 5, 9, 100, 12345])
    ref = reference(x, pos, r=r, layout=layout)
    torch.testing.assert_close(apply_rope(x, pos, rotary_dim=r, layout=layout), ref, rtol=1e-12, atol=1e-12)
    y = x.clone()
    out = apply_rope(y, pos, rotary_dim=r, layout=layout, inplace=True)
    assert out is y
    torch.testing.assert_close(y, ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
def test_inplace_equals_out_of_place(layout, dtype):
    g = torch.Generator().manual_seed(2)
    q, k = torch.randn(2, 3, 9, 8, generator=g).to(dtype), torch.randn(2, 3, 9, 8, generator=g).to(dtype)
    rope = RotaryEmbedding(8, layout=layout)
    eq, ek = rope(q, k)
    q2, k2 = q.clone(), k.clone()
    rq, rk = rope(q2, k2, inplace=True)
    assert rq is q2 and rk is k2
    assert torch.equal(q2, eq) and torch.equal(k2, ek)
    # the functional forms, explicit positions and xPos (the non-cached path)
    pos = torch.arange(9) * 2 + 1
    fq, fk = apply_rope_qk(q, k, pos, layout=layout, xpos_scale_base=64.0)
    q3, k3 = q.clone(), k.clone()
    apply_rope_qk(q3, k3, pos, layout=layout, xpos_scale_base=64.0, inplace=True)
    assert torch.equal(q3, fq) and torch.equal(k3, fk)


def test_inplace_on_non_contiguous_views():
    # q and k as views of one fused qkv tensor: rotated in place, v untouched
    qkv = torch.randn(2, 6, 3, 2, 8, dtype=torch.float64)
    before = qkv.clone()
    for layout in ("half", "interleaved"):
        x = qkv.clone()
        q, k, v = x.permute(2, 0, 3, 1, 4).unbind(0)
        rq, rk = RotaryEmbedding(8, layout=layout)(q, k, inplace=True)
        bq, bk, bv = before.permute(2, 0, 3, 1, 4).unbind(0)
        torch.testing.assert_close(q, reference(bq.contiguous(), torch.arange(6), layout=layout))
        torch.testing.assert_close(k, reference(bk.contiguous(), torch.arange(6), layout=layout))
        assert torch.equal(v, bv)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_inplace_gradients(layout):
    # a non-leaf tensor rotated in place: the gradient is the out-of-place one
    leaf = torch.randn(2, 5, 8, dtype=torch.float64, requires_grad=True)
    pos = torch.tensor([0.0, 1.5, 3.0, 7.0, 11.0], dtype=torch.float64)
    w = torch.randn(2, 5, 8, dtype=torch.float64)
    (apply_rope(leaf * 1.0, pos, layout=layout) * w).sum().backward()
    expected = leaf.grad.clone()
    leaf.grad = None
    (apply_rope(leaf * 1.0, pos, layout=layout, inplace=True) * w).sum().backward()
    torch.testing.assert_close(leaf.grad, expected, rtol=1e-12, atol=1e-12)
    assert torch.autograd.gradcheck(lambda t: apply_rope(t * 1.0, pos, layout=layout, inplace=True), (leaf,))


def test_inplace_compile_fullgraph():
    q, k = torch.randn(2, 4, 12, 16), torch.randn(2, 4, 12, 16)
    rope = RotaryEmbedding(16)
    expected = rope(q, k)
    mod = torch.compile(lambda a, b: rope(a, b, inplace=True), fullgraph=True, backend="eager")
    q2, k2 = q.clone(), k.clone()
    mod(q2, k2)
    torch.testing.assert_close(q2, expected[0])
    torch.testing.assert_close(k2, expected[1])


def test_inplace_bad_input():
    leaf = torch.randn(2, 4, 8, requires_grad=True)
    with pytest.raises(ValueError, match="inplace=True cannot overwrite x: it is a leaf"):
        apply_rope(leaf, inplace=True)
    with pytest.raises(ValueError, match="inplace=True cannot overwrite q"):
        RotaryEmbedding(8)(leaf, leaf.detach().clone(), inplace=True)
    with pytest.raises(TypeError, match="inplace"):
        apply_rope(torch.randn(2, 4, 8), inplace="yes")
    with pytest.raises(TypeError, match="inplace"):
        RotaryEmbedding(8)(torch.randn(1, 4, 8), torch.randn(1, 4, 8), inplace=1)
    ang = torch.zeros(2, 4, 4, requires_grad=True)
    with pytest.raises(ValueError, match="angles require grad"):
        rotate(torch.randn(2, 4, 8) * torch.ones(1, requires_grad=True), ang, inplace=True)
    with pytest.raises(ValueError, match="angles of shape"):
        rotate(torch.randn(4, 8), torch.zeros(3, 4, 4))
    # nothing was overwritten by a refused call
    x = torch.randn(2, 4, 8)
    before = x.clone()
    with pytest.raises(ValueError):
        apply_rope(x, torch.arange(5), inplace=True)
    assert torch.equal(x, before)


# ------------------------------------------------------------------ KV-cache decoding (#22 §3)
def _attention(q, k, v, causal=True):
    logits = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        n_q, n_k = q.shape[-2], k.shape[-2]
        i = torch.arange(n_q)[:, None] + (n_k - n_q)
        logits = logits.masked_fill(torch.arange(n_k)[None, :] > i, float("-inf"))
    return torch.softmax(logits, -1) @ v


SCALINGS = [None, ("linear", 8, 32), ("ntk", 8, 32), ("yarn", 8, 32), ("dynamic", 8, 2.0), ("llama3", 8, 4.0),
            ("longrope", 8, 4.0)]


def _scaling(spec):
    from posenc.attention.relative.rope_scaling import RopeScaling

    if spec is None:
        return None
    kind, L, x = spec
    if kind in ("dynamic", "llama3"):
        return RopeScaling(kind, L, factor=x)
    if kind == "longrope":
        return RopeScaling(kind, L, factor=x, short_factor=[1.0, 1.5, 2.0, 3.0], long_factor=[1.0, 2.0, 4.0, 8.0])
    return RopeScaling(kind, L, x)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("spec", SCALINGS, ids=lambda s: "plain" if s is None else s[0])
def test_decode_step_equals_the_last_row_of_the_full_sequence(layout, spec):
    g = torch.Generator().manual_seed(3)
    n = 20
    q, k, v = (torch.randn(1, 2, n, 8, generator=g, dtype=torch.float64) for _ in range(3))
    rope = RotaryEmbedding(8, layout=layout, scaling=_scaling(spec))
    rq, rk = rope(q, k)
    full = _attention(rq, rk, v)
    for t in (0, 5, n - 1):  # q: the newest token only; k: the whole cache so far (unrotated)
        sq, sk = rope(q[..., t:t + 1, :], k[..., : t + 1, :])
        step = _attention(sq, sk, v[..., : t + 1, :])
        if spec is None or spec[0] not in ("dynamic", "longrope"):
            torch.testing.assert_close(step, full[..., t:t + 1, :])
            torch.testing.assert_close(sk, rk[..., : t + 1, :])
        else:  # length-dependent: the step uses the frequencies of length t + 1, as HF's cache positions do
            ref_q, ref_k = rope(q[..., : t + 1, :], k[..., : t + 1, :])
            torch.testing.assert_close(step, _attention(ref_q, ref_k, v[..., : t + 1, :])[..., -1:, :])
    # the same query at its true position, against an explicit rotation (the silent position-0 bug)
    sq, _ = rope(q[..., -1:, :], k)
    torch.testing.assert_close(sq, rq[..., -1:, :])


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_decode_loop_with_a_cache_of_rotated_keys(layout):
    # the usual KV cache: rotate each new token at offset t, append its key, attend
    g = torch.Generator().manual_seed(4)
    n = 12
    q, k, v = (torch.randn(2, 2, n, 16, generator=g, dtype=torch.float64) for _ in range(3))
    rope = RotaryEmbedding(16, layout=layout, max_seq_len=4)  # the table grows past 4
    rq, rk = rope(q, k)
    full = _attention(rq, rk, v)
    cache = torch.empty(2, 2, 0, 16, dtype=torch.float64)
    for t in range(n):
        qt, kt = rope(q[..., t:t + 1, :], k[..., t:t + 1, :], offset=t)
        cache = torch.cat((cache, kt), dim=-2)
        torch.testing.assert_close(_attention(qt, cache, v[..., : t + 1, :]), full[..., t:t + 1, :])
    # a prefill of 5 tokens then single steps, in place
    cache = rope(q[..., :5, :], k[..., :5, :])[1]
    for t in range(5, n):
        qt, kt = q[..., t:t + 1, :].clone(), k[..., t:t + 1, :].clone()
        rope(qt, kt, offset=t, inplace=True)
        cache = torch.cat((cache, kt), dim=-2)
        torch.testing.assert_close(_attention(qt, cache, v[..., : t + 1, :]), full[..., t:t + 1, :])


def test_xpos_decode_step_and_fixed_centre_cache():
    g = torch.Generator().manual_seed(5)
    n = 30
    q, k, v = (torch.randn(1, 2, n, 16, generator=g, dtype=torch.float64) for _ in range(3))
    auto = RotaryEmbedding(16, xpos_scale_base=64.0)
    rq, rk = auto(q, k)
    full = _attention(rq, rk, v)
    # q_new against the whole (unrotated) cache: one call, one centre: exact
    for t in (3, n - 1):
        sq, sk = auto(q[..., t:t + 1, :], k[..., : t + 1, :])
        torch.testing.assert_close(_attention(sq, sk, v[..., : t + 1, :]), full[..., t:t + 1, :])
    # caching rotated keys needs one centre for every call: fix it
    fixed = RotaryEmbedding(16, xpos_scale_base=64.0, xpos_center=0.0)
    cache = torch.empty(1, 2, 0, 16, dtype=torch.float64)
    for t in range(n):
        qt, kt = fixed(q[..., t:t + 1, :], k[..., t:t + 1, :], offset=t)
        cache = torch.cat((cache, kt), dim=-2)
        torch.testing.assert_close(_attention(qt, cache, v[..., : t + 1, :]), full[..., t:t + 1, :])


def test_apply_rope_qk_aligns_queries_to_the_end_and_takes_an_offset():
    q, k = torch.randn(1, 3, 8, dtype=torch.float64), torch.randn(1, 10, 8, dtype=torch.float64)
    oq, ok = apply_rope_qk(q, k)
    torch.testing.assert_close(oq, apply_rope(q, torch.arange(7, 10)))
    torch.testing.assert_close(ok, apply_rope(k))
    oq, ok = apply_rope_qk(q, k, offset=100)
    torch.testing.assert_close(oq, apply_rope(q, torch.arange(107, 110)))
    torch.testing.assert_close(ok, apply_rope(k, offset=100))
    torch.testing.assert_close(apply_rope(k, offset=100), apply_rope(k, torch.arange(100, 110)))
    # only k_positions given: the queries take the last ones
    kp = torch.arange(10) * 3
    oq, _ = apply_rope_qk(q, k, k_positions=kp)
    torch.testing.assert_close(oq, apply_rope(q, kp[-3:]))


def test_offset_bad_input():
    rope = RotaryEmbedding(8)
    q = torch.randn(1, 4, 8)
    with pytest.raises(ValueError, match="more positions"):
        rope(torch.randn(1, 5, 8), q)
    with pytest.raises(ValueError, match="more positions"):
        apply_rope_qk(torch.randn(1, 5, 8), q)
    with pytest.raises(ValueError, match="offset"):
        rope(q, q, offset=-1)
    with pytest.raises(TypeError, match="offset"):
        rope(q, q, offset=1.5)
    with pytest.raises(TypeError, match="offset"):
        rope(q, q, offset=True)
    with pytest.raises(ValueError, match="offset"):
        rope(q, q, torch.arange(4), offset=2)
    with pytest.raises(ValueError, match="offset"):
        apply_rope(q, torch.arange(4), offset=2)


# ------------------------------------------------------------------ the pre-sized table (#22 §3, #25)
def test_table_is_pre_sized_and_rebuilt_exactly_on_conversion():
    rope = RotaryEmbedding(16, max_seq_len=64)
    assert rope._cos.shape == (64, 8) and rope._cos.dtype == torch.float32
    ang = torch.arange(64, dtype=torch.float64)[:, None] * rope_frequencies(16)
    rope.double()  # float64 inputs: the table is rebuilt from float64 angles, not cast from float32
    assert rope._cos.dtype == torch.float64
    torch.testing.assert_close(rope._cos, torch.cos(ang), rtol=0, atol=1e-15)
    rope.half()  # half inputs compute in float32: the table stays float32
    assert rope._cos.dtype == torch.float32
    torch.testing.assert_close(rope._cos, torch.cos(ang).float())
    lazy = RotaryEmbedding(16, max_seq_len=None)
    assert lazy._cos.shape[0] == 0
    q = torch.randn(1, 5, 16)
    torch.testing.assert_close(lazy(q, q)[0], rope.float()(q, q)[0])
    with pytest.raises(ValueError, match="max_seq_len"):
        RotaryEmbedding(16, max_seq_len=0)


def test_compiled_rope_does_not_recompile_for_each_length():
    import torch._dynamo.testing

    from posenc.attention import RelativeSelfAttention

    torch._dynamo.reset()
    mod = RelativeSelfAttention(16, 2, position="rope")
    counter = torch._dynamo.testing.CompileCounter()
    fn = torch.compile(mod, backend=counter)
    lengths = (8, 9, 10, 11, 12, 13, 40, 100)
    for n in lengths:
        x = torch.randn(2, n, 16)
        torch.testing.assert_close(fn(x), mod(x))
    # the first length compiles a static graph, the second a dynamic one; no more after that
    # (the table used to be rebuilt for longer sequences, recompiling each time: 5 graphs here)
    assert counter.frame_count <= 2
    torch._dynamo.reset()
    counter = torch._dynamo.testing.CompileCounter()
    fn = torch.compile(mod, backend=counter, dynamic=True)
    for n in lengths:
        fn(torch.randn(2, n, 16))
    assert counter.frame_count == 1


# ------------------------------------------------------------------ xPos at long lengths (#22 §4)
def test_xpos_default_centre_is_the_middle_of_the_keys():
    from posenc.attention.relative.rotary import xpos_scales

    q, k = torch.randn(1, 30, 8, dtype=torch.float64), torch.randn(1, 30, 8, dtype=torch.float64)
    auto = apply_rope_qk(q, k, xpos_scale_base=512.0)
    fixed = apply_rope_qk(q, k, xpos_scale_base=512.0, xpos_center=15.0)
    torch.testing.assert_close(auto[0], fixed[0])
    torch.testing.assert_close(auto[1], fixed[1])
    # the centre cancels in the logits
    zero = apply_rope_qk(q, k, xpos_scale_base=512.0, xpos_center=0.0)
    torch.testing.assert_close(auto[0] @ auto[1].mT, zero[0] @ zero[1].mT)
    assert float(xpos_scales(torch.tensor([15.0]), 8, center=15.0).sub(1).abs().max()) == 0.0
    rope = RotaryEmbedding(8, xpos_scale_base=512.0)
    torch.testing.assert_close(rope(q, k)[0], auto[0])
    assert "xpos_center=auto" in repr(rope)


def test_xpos_default_centre_matches_rotary_embedding_torch():
    ret = pytest.importorskip("rotary_embedding_torch")
    q, k = torch.randn(1, 2, 31, 16), torch.randn(1, 2, 31, 16)
    tq, tk = ret.RotaryEmbedding(dim=16, use_xpos=True).rotate_queries_and_keys(q, k)
    oq, ok = apply_rope_qk(q, k, layout="interleaved", xpos_scale_base=512.0)  # no centre given
    torch.testing.assert_close(oq, tq, rtol=1e-5, atol=2e-5)
    torch.testing.assert_close(ok, tk, rtol=1e-5, atol=2e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_xpos_at_64k_positions_against_float64(dtype):
    # 16 tokens spread over 64k positions: their scales span e^+-80 around the centre
    g = torch.Generator().manual_seed(6)
    pos = torch.linspace(0, 65535, 16).round().long()
    q, k = torch.randn(16, 64, generator=g, dtype=torch.float64), torch.randn(16, 64, generator=g, dtype=torch.float64)
    rq, rk = apply_rope_qk(q, k, pos, pos, xpos_scale_base=512.0)
    ref = (rq @ rk.T).tril()  # causal logits: the factor decays, every entry is representable
    if dtype == torch.float32:
        oq, ok = apply_rope_qk(q.float(), k.float(), pos, pos, xpos_scale_base=512.0)
        assert bool(torch.isfinite(oq).all() and torch.isfinite(ok).all())
        torch.testing.assert_close((oq.double() @ ok.double().T).tril(), ref, rtol=1e-5, atol=1e-5 * float(ref.abs().max()))
    else:  # float16 holds e^+-9.7 only: a clear error, not inf
        with pytest.raises(ValueError, match="beyond the range of torch.float16"):
            apply_rope_qk(q.to(dtype), k.to(dtype), pos, pos, xpos_scale_base=512.0)
        # within ~4,000 positions of the centre float16 is fine
        near = pos[:2] // 30
        oq, ok = apply_rope_qk(q[:2].to(dtype), k[:2].to(dtype), near, near, xpos_scale_base=512.0)
        rq2, rk2 = apply_rope_qk(q[:2], k[:2], near, near, xpos_scale_base=512.0)
        torch.testing.assert_close(oq.double(), rq2, rtol=2e-3, atol=2e-3)


def test_xpos_refuses_scales_that_even_centred_cannot_be_represented():
    q, k = torch.randn(4, 8), torch.randn(4, 8)
    pos = torch.tensor([0, 30_000, 60_000, 100_000])  # +-50,000 from the centre: e^+-122 > float32's e^+-87
    with pytest.raises(ValueError, match="xPos scales reach e\\^122.*float32"):
        apply_rope_qk(q, k, pos, pos, xpos_scale_base=512.0)
    with pytest.raises(ValueError, match="xPos scales"):
        RotaryEmbedding(8, xpos_scale_base=512.0)(q, k, pos, pos)
    # float64 holds it (e^+-708)
    out = apply_rope_qk(q.double(), k.double(), pos, pos, xpos_scale_base=512.0)
    assert all(bool(torch.isfinite(t).all()) for t in out)
    with pytest.raises(ValueError, match="xpos_center"):
        apply_rope_qk(q, k, xpos_scale_base=512.0, xpos_center=float("nan"))


# ------------------------------------------------------------------ edge cases (#23 §4)
def test_inplace_refuses_q_and_k_sharing_memory():
    x = torch.randn(1, 4, 8)
    before = x.clone()
    with pytest.raises(ValueError, match="share memory"):
        RotaryEmbedding(8)(x, x, inplace=True)
    with pytest.raises(ValueError, match="share memory"):
        apply_rope_qk(x, x.view(1, 4, 8), inplace=True)
    y = torch.randn(1, 4, 12)
    with pytest.raises(ValueError, match="share memory"):
        RotaryEmbedding(8)(y[..., :8], y[..., 4:], inplace=True)
    assert torch.equal(x, before)
    # disjoint views of one buffer are fine (q and k of a fused projection)
    z = torch.randn(1, 4, 16)
    RotaryEmbedding(8)(z[..., :8], z[..., 8:], inplace=True)
    # and out of place, q may be k
    torch.testing.assert_close(RotaryEmbedding(8)(x, x)[0], apply_rope(x))


def test_inplace_refuses_views_autograd_cannot_follow():
    leaf = torch.randn(3, 4, 8, requires_grad=True)
    with pytest.raises(ValueError, match="view of a leaf"):
        apply_rope(leaf[0], inplace=True)
    with pytest.raises(ValueError, match="view of a leaf"):
        RotaryEmbedding(8)(leaf[0], leaf[1], inplace=True)
    q, k, _ = (leaf * 1.0).unbind(0)
    with pytest.raises(ValueError, match="unbind"):
        RotaryEmbedding(8)(q, k, inplace=True)
    with pytest.raises(ValueError, match="unbind"):
        apply_rope((leaf * 1.0).split(1)[0], inplace=True)
    expanded = torch.randn(1, 1, 8).expand(2, 4, 8)
    with pytest.raises(ValueError, match="expanded"):
        apply_rope(expanded, inplace=True)
    with pytest.raises(ValueError, match="expanded"):
        RotaryEmbedding(8)(expanded, torch.randn(2, 4, 8), inplace=True)
    # without autograd, unbind() views are fine (a fused qkv buffer rotated in place)
    with torch.no_grad():
        q, k, _ = (leaf * 1.0).unbind(0)
        RotaryEmbedding(8)(q, k, inplace=True)


def test_apply_rope_qk_checks_freqs_like_apply_rope():
    q = torch.randn(1, 4, 8)
    for fn in (lambda f: apply_rope(q, freqs=f), lambda f: apply_rope_qk(q, q, freqs=f)):
        with pytest.raises(ValueError, match="freqs"):
            fn(torch.tensor([1.0, float("nan")], dtype=torch.float64))
        with pytest.raises(TypeError, match="freqs"):
            fn([1.0, 0.1])
        with pytest.raises(ValueError, match="freqs"):
            fn(torch.ones(5, dtype=torch.float64))
        with pytest.raises(TypeError, match="freqs"):
            fn(torch.ones(2, dtype=torch.int64))


def test_non_finite_angles_are_refused():
    q = torch.randn(1, 2, 8, dtype=torch.float64)
    pos = torch.tensor([0.0, 1e308], dtype=torch.float64)
    with pytest.raises(ValueError, match="angles"):
        apply_rope_qk(q, q, pos, pos, position_scale=10.0)
    with pytest.raises(ValueError, match="angles"):
        rotate(q, torch.tensor([[0.0] * 4, [float("inf")] * 4], dtype=torch.float64))
