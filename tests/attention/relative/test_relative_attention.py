"""RelativeSelfAttention against a dense float64 reference, masks, the testbed and TinyViT."""

import math

import pytest
import torch

from posenc.attention.relative.alibi import alibi_slopes
from posenc.attention.relative.relative_attention import (
    POSITIONS,
    RelativeSelfAttention,
    relative_attention_factory,
    set_rope_scaling,
)
from posenc.attention.relative.rope_scaling import RopeScaling
from posenc.attention.relative.rotary import apply_rope, apply_rope_qk
from posenc.models import TinyViT, TransformerEncoder


@torch.no_grad()
def dense_reference(mod, x, pos=None, key_padding_mask=None, causal=False):
    """Explicit projections, rotation/bias per token pair, masked softmax in float64."""
    B, n, E = x.shape
    H, hd = mod.num_heads, mod.head_dim
    qkv = x.double() @ mod.in_proj_weight.double().T + mod.in_proj_bias.double()
    q, k, v = qkv.view(B, n, 3, H, hd).permute(2, 0, 3, 1, 4)
    p1 = torch.arange(n, dtype=torch.float64) if pos is None else pos[..., 0].double()
    if mod.position == "rope":
        q, k = apply_rope(q, p1), apply_rope(k, p1)
    elif mod.position == "xpos":
        q, k = apply_rope_qk(q, k, p1, p1, xpos_scale_base=512.0)
    logits = torch.empty(B, H, n, n, dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            for i in range(n):
                for j in range(n):
                    s = float(q[b, h, i] @ k[b, h, j]) / math.sqrt(hd)
                    if mod.position == "alibi":
                        s -= float(mod.slopes[h]) * abs(float(p1[j] - p1[i]))
                    elif mod.position in ("t5", "learned"):  # buckets are tested on their own
                        rel = torch.tensor(int(p1[j] - p1[i]))
                        s += float(mod.rel_bias.table[h, mod.rel_bias.buckets(rel)])
                    if causal and j > i:
                        s = -math.inf
                    if key_padding_mask is not None and key_padding_mask[b, j]:
                        s = -math.inf
                    logits[b, h, i, j] = s
    out = torch.softmax(logits, -1) @ v
    return out.transpose(1, 2).reshape(B, n, E) @ mod.out_proj.weight.double().T + mod.out_proj.bias.double()


@pytest.mark.parametrize("position", ["none", "rope", "xpos", "alibi", "t5", "learned"])
@pytest.mark.parametrize("causal", [False, True])
def test_against_dense_reference(position, causal):
    torch.manual_seed(0)
    mod = RelativeSelfAttention(16, 2, position=position, causal=causal, max_distance=8, num_buckets=4).double()
    if mod.rel_bias is not None:
        with torch.no_grad():
            mod.rel_bias.table.normal_()
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    pos = torch.tensor([0, 1, 3, 4, 8, 9])[:, None]
    kpm = torch.tensor([[False] * 6, [False] * 4 + [True] * 2])
    out = mod(x, positions=pos, key_padding_mask=kpm)
    torch.testing.assert_close(out, dense_reference(mod, x, pos, kpm, causal))


def test_default_positions_are_token_indices():
    mod = RelativeSelfAttention(8, 2, position="alibi").double()
    x = torch.randn(1, 5, 8, dtype=torch.float64)
    torch.testing.assert_close(mod(x), mod(x, positions=torch.arange(5)[:, None]))


def test_rope_attention_is_shift_invariant():
    mod = RelativeSelfAttention(16, 2, position="rope").double()
    x = torch.randn(2, 7, 16, dtype=torch.float64)
    pos = torch.arange(7)[:, None]
    torch.testing.assert_close(mod(x, positions=pos), mod(x, positions=pos + 1000))


def test_attn_mask_bool_and_float_agree():
    mod = RelativeSelfAttention(8, 2, position="rope").double()
    x = torch.randn(1, 5, 8, dtype=torch.float64)
    allow = torch.ones(5, 5, dtype=torch.bool).tril()
    a = mod(x, attn_mask=allow)
    b = mod(x, attn_mask=torch.zeros(5, 5, dtype=torch.float64).masked_fill(~allow, float("-inf")))
    torch.testing.assert_close(a, b)
    torch.testing.assert_close(a, mod(x, is_causal=True))


def test_fully_masked_rows_stay_finite():
    # a left-padded sequence under a causal mask: query 0 sees only its padded self
    mod = RelativeSelfAttention(8, 2, position="rope", causal=True)
    x = torch.randn(1, 4, 8, requires_grad=True)
    out = mod(x, key_padding_mask=torch.tensor([[True, False, False, False]]))
    assert bool(torch.isfinite(out).all())
    out[:, 1:].sum().backward()
    assert bool(torch.isfinite(x.grad).all())


def test_rope_scaling_on_a_model():
    model = TransformerEncoder(3, 2, dim=16, depth=2, num_heads=2, attention=relative_attention_factory("rope"))
    assert set_rope_scaling(model, RopeScaling("linear", 8, 32)) == 2
    x, pos = torch.randn(1, 32, 3), torch.arange(32)[:, None]
    out = model(x, pos)
    set_rope_scaling(model, None)
    # position interpolation by 4 equals plain RoPE on positions / 4
    torch.testing.assert_close(out, model(x, pos / 4.0))


@pytest.mark.parametrize("position", POSITIONS)
def test_plugs_into_testbed(position):
    kw = {"num_axes": 1} if position == "rope_axial" else {}
    if position == "rope_mixed":
        return  # 2D only: covered by the ViT test
    model = TransformerEncoder(3, 2, dim=16, num_heads=2, attention=relative_attention_factory(position, **kw))
    out = model(torch.randn(2, 9, 3), torch.arange(9)[:, None])
    assert out.shape == (2, 9, 2) and bool(torch.isfinite(out).all())


@pytest.mark.parametrize("position", ["rope_axial", "rope_mixed"])
@pytest.mark.parametrize("kind", ["index", "continuous"])
def test_tinyvit_any_resolution(position, kind):
    vit = TinyViT(1, 3, patch_size=4, dim=16, num_heads=2, positions=kind,
                  attention=relative_attention_factory(position))
    for size in (8, 16, 12):
        assert vit(torch.randn(2, 1, size, size)).shape == (2, 3)


def test_compile_fullgraph():
    mod = RelativeSelfAttention(16, 2, position="t5")
    x = torch.randn(2, 6, 16)
    out = torch.compile(mod, fullgraph=True, backend="eager")(x, torch.arange(6)[:, None])
    torch.testing.assert_close(out, mod(x, torch.arange(6)[:, None]))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision(dtype):
    mod = RelativeSelfAttention(16, 2, position="alibi")
    x = torch.randn(1, 6, 16)
    ref = mod(x)
    out = mod.to(dtype)(x.to(dtype))
    assert out.dtype == dtype
    torch.testing.assert_close(out.float(), ref, rtol=0.05, atol=0.05)


def test_bad_input():
    with pytest.raises(ValueError, match="position"):
        RelativeSelfAttention(8, 2, position="sinusoidal")
    with pytest.raises(ValueError, match="num_heads"):
        RelativeSelfAttention(8, 0)
    with pytest.raises(ValueError, match="dim"):
        RelativeSelfAttention(10, 4)
    mod = RelativeSelfAttention(8, 2, position="rope")
    x = torch.randn(1, 4, 8)
    with pytest.raises(ValueError, match="1D"):
        mod(x, positions=torch.zeros(4, 2))
    with pytest.raises(ValueError, match="positions"):
        mod(x, positions=torch.zeros(5, 1))
    with pytest.raises(ValueError, match="positions"):
        mod(x, positions=torch.full((4, 1), float("nan")))
    with pytest.raises(ValueError, match="key_padding_mask"):
        mod(x, key_padding_mask=torch.ones(1, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="key_padding_mask"):
        mod(x, key_padding_mask=torch.zeros(1, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="attn_mask"):
        mod(x, attn_mask=torch.zeros(3, 3))
    with pytest.raises(ValueError, match="N-D positions"):
        RelativeSelfAttention(8, 2, position="rope_axial")(x)
    with pytest.raises(ValueError, match="set_rope_scaling"):
        RelativeSelfAttention(8, 2, position="alibi").set_rope_scaling(None)
    with pytest.raises(ValueError, match="x must"):
        mod(torch.randn(4, 8))


# ------------------------------------------------------------------ masks: one convention per name (#22 §6)
def test_attn_mask_that_blocks_a_whole_row_is_an_error():
    mod = RelativeSelfAttention(8, 2, position="rope")
    x = torch.randn(1, 4, 8)
    blocked = torch.ones(4, 4, dtype=torch.bool).triu(1)  # nn.MultiheadAttention's convention (True = blocked)
    with pytest.raises(ValueError, match=r"query row\(s\) \[3\].*True = may attend"):
        mod(x, attn_mask=blocked)  # read as "may attend": the last query may attend nothing
    with pytest.raises(ValueError, match="no key to attend to"):
        mod(x, attn_mask=torch.full((4, 4), float("-inf")))
    # with the causal mask: a row allowed only future keys is empty too
    allow_future = torch.zeros(4, 4, dtype=torch.bool)
    allow_future[0, 1] = allow_future[1:, 0] = True
    with pytest.raises(ValueError, match="with the causal mask"):
        mod(x, attn_mask=allow_future, is_causal=True)
    # padding alone may still empty a row: that row attends everywhere instead of giving NaN
    out = RelativeSelfAttention(8, 2, position="alibi", causal=True)(x, key_padding_mask=torch.tensor([[True, False, False, False]]))
    assert bool(torch.isfinite(out).all())


@pytest.mark.parametrize("position", ["alibi", "t5", "learned"])
def test_cached_bias_equals_the_dense_reference_in_every_mode(position):
    torch.manual_seed(0)
    mod = RelativeSelfAttention(16, 2, position=position, causal=True, max_distance=8, num_buckets=4).double()
    if mod.rel_bias is not None:
        with torch.no_grad():
            mod.rel_bias.table.normal_()
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    kpm = torch.tensor([[False] * 6, [True] + [False] * 5])
    ref = dense_reference(mod, x, None, None, True)
    torch.testing.assert_close(mod(x), ref)
    with torch.no_grad():  # cached expansion, twice
        torch.testing.assert_close(mod(x), ref)
        torch.testing.assert_close(mod(x), ref)
    torch.testing.assert_close(mod(x, key_padding_mask=kpm)[0], dense_reference(mod, x, None, kpm, True)[0])


def test_learned_bias_cache_follows_autograd_and_optimizer_steps():
    torch.manual_seed(0)
    mod = RelativeSelfAttention(16, 2, position="t5", causal=True, max_distance=8, num_buckets=4)
    opt = torch.optim.SGD(mod.parameters(), lr=0.1)
    x, w = torch.randn(2, 6, 16), torch.randn(2, 6, 16)
    for _ in range(3):  # training: every step's bias is part of the graph, the gradient reaches the table
        opt.zero_grad()
        (mod(x) * w).sum().backward()
        assert mod.rel_bias.table.grad is not None and float(mod.rel_bias.table.grad.abs().sum()) > 0
        opt.step()
        with torch.no_grad():  # evaluation after the step sees the new table, not a stale cached bias
            cached = mod(x)
            cached_again = mod(x)
        torch.testing.assert_close(cached, dense_reference(mod, x, None, None, True).float(), rtol=1e-4, atol=1e-5)
        assert torch.equal(cached, cached_again)
    with torch.no_grad():
        mod.rel_bias.table.add_(1.0)  # an in-place edit bumps the version: recomputed
        torch.testing.assert_close(mod(x), dense_reference(mod, x, None, None, True).float(), rtol=1e-4, atol=1e-5)


def test_learned_bias_gradient_equals_the_dense_gather():
    # the Toeplitz expansion sums the gradient per offset: the same as gathering table[:, buckets(j - i)]
    from posenc.attention.relative.relative_bias import RelativePositionBias

    torch.manual_seed(1)
    rb = RelativePositionBias(3, kind="t5", num_buckets=8, max_distance=16).double()
    with torch.no_grad():
        rb.table.normal_()
    w = torch.randn(3, 20, 20, dtype=torch.float64)
    (rb.toeplitz(20, causal=True).nan_to_num(neginf=0.0) * w).sum().backward()
    g1 = rb.table.grad.clone()
    rb.table.grad = None
    offsets = torch.arange(20)[None, :] - torch.arange(20)[:, None]
    dense = rb.table[:, rb.buckets(offsets)].masked_fill(offsets > 0, 0.0)
    (dense * w).sum().backward()
    torch.testing.assert_close(g1, rb.table.grad)


def test_dtype_mismatch_is_a_type_error_naming_the_input():
    mod = RelativeSelfAttention(8, 2)
    with pytest.raises(TypeError, match="x has dtype torch.float64"):
        mod(torch.randn(1, 4, 8, dtype=torch.float64))


def test_rope_scaling_and_xpos_center_on_the_module():
    sc = RopeScaling("yarn", 8, 32)
    mod = RelativeSelfAttention(16, 2, position="rope", rope_scaling=sc)
    assert mod.rotary.scaling == sc
    mod = RelativeSelfAttention(16, 2, position="xpos", xpos_center=0.0)
    assert mod.rotary.xpos_center == 0.0
    with pytest.raises(ValueError, match="rope_scaling"):
        RelativeSelfAttention(16, 2, position="alibi", rope_scaling=sc)


# ------------------------------------------------------------------ xPos at long lengths (#22 §4)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_xpos_attention_at_64k_positions_against_float64(dtype):
    # before: NaN from ~37k positions (keys scaled from position 0 overflow), wrong at 100k
    torch.manual_seed(0)
    mod = RelativeSelfAttention(32, 2, position="xpos", causal=True).double()
    x = torch.randn(2, 12, 32, dtype=torch.float64)
    pos = torch.linspace(0, 65535, 12).round()[:, None]
    kpm = torch.tensor([[False] * 12, [False] * 10 + [True] * 2])
    for mask in (None, kpm):
        ref = mod(x, positions=pos, key_padding_mask=mask)
        low = RelativeSelfAttention(32, 2, position="xpos", causal=True)
        low.load_state_dict(mod.state_dict())
        out = low.to(dtype)(x.to(dtype), positions=pos, key_padding_mask=mask)
        assert out.dtype == dtype and bool(torch.isfinite(out).all())
        tol = 1e-4 if dtype == torch.float32 else 2e-2
        torch.testing.assert_close(out.double(), ref, rtol=tol, atol=tol)


def test_xpos_attention_refuses_what_cannot_be_represented():
    mod = RelativeSelfAttention(16, 2, position="xpos", causal=True)
    x = torch.randn(1, 4, 16)
    with pytest.raises(ValueError, match="xPos scales"):
        mod(x, positions=torch.tensor([0.0, 40_000.0, 80_000.0, 120_000.0])[:, None])
    # without a causal mask, far-future keys overflow the logits themselves
    bi = RelativeSelfAttention(16, 2, position="xpos")
    with pytest.raises(ValueError, match="causal"):
        bi(x, positions=torch.tensor([0.0, 20_000.0, 40_000.0, 60_000.0])[:, None])


@pytest.mark.parametrize("position", ["t5", "learned"])
@pytest.mark.parametrize("causal", [True, False])
def test_training_path_with_reversed_keys_equals_the_materialised_bias(position, causal):
    # training a learned bias attends over reversed keys with a copy-free bias view: same values, same gradients
    torch.manual_seed(0)
    mod = RelativeSelfAttention(16, 2, position=position, causal=causal, max_distance=8, num_buckets=4).double()
    with torch.no_grad():
        mod.rel_bias.table.normal_()
    x = torch.randn(2, 7, 16, dtype=torch.float64, requires_grad=True)
    w = torch.randn(2, 7, 16, dtype=torch.float64)
    grads = []
    for kpm in (None, torch.zeros(2, 7, dtype=torch.bool)):  # an all-False padding mask takes the materialised path
        mod.zero_grad()
        x.grad = None
        out = mod(x, key_padding_mask=kpm)
        (out * w).sum().backward()
        grads.append((out.detach(), x.grad.clone(), mod.rel_bias.table.grad.clone(), mod.in_proj_weight.grad.clone()))
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b)
    torch.testing.assert_close(grads[0][0], dense_reference(mod, x.detach(), None, None, causal))
    view = mod.rel_bias.toeplitz(7, causal=causal, keys_reversed=True)
    torch.testing.assert_close(view, mod.rel_bias.toeplitz(7, causal=causal).flip(-1))
    rect = mod.rel_bias.toeplitz(3, 9, keys_reversed=True)
    torch.testing.assert_close(rect, mod.rel_bias.toeplitz(3, 9).flip(-1))
