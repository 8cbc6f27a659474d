"""RelativeSelfAttention against a dense float64 reference, masks, the testbed and TinyViT."""

import math

import pytest
import torch

from posenc.attention.alibi import alibi_slopes
from posenc.attention.relative_attention import (
    POSITIONS,
    RelativeSelfAttention,
    relative_attention_factory,
    set_rope_scaling,
)
from posenc.attention.rope_scaling import RopeScaling
from posenc.attention.rotary import apply_rope, apply_rope_qk
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
