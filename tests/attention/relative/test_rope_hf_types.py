"""from_hf_config: the proportional rope type, the old names of LongRoPE, and values HF reinterprets."""

import math

import pytest
import torch

from posenc.attention import RotaryEmbedding
from posenc.attention.relative.rope_scaling import RopeScaling

GEMMA4_LIKE = {  # per-layer rope parameters with a proportional global layer (Gemma 4's layout)
    "hidden_size": 1024, "num_attention_heads": 8, "head_dim": 32, "global_head_dim": 64,
    "max_position_embeddings": 64,
    "rope_parameters": {
        "full_attention": {"partial_rotary_factor": 0.25, "rope_theta": 1e6, "rope_type": "proportional"},
        "sliding_attention": {"rope_theta": 1e4, "rope_type": "default"},
    },
}


def _hf_proportional(head_dim: int, base: float, share: float, factor: float) -> list[float]:
    """HF's proportional inverse frequencies, transcribed in Python floats."""
    turning = int(share * head_dim // 2)
    return [(1.0 / base ** (2 * i / head_dim) if i < turning else 0.0) / factor for i in range(head_dim // 2)]


def _rotate_half_reference(x: torch.Tensor, positions, inv_freq: list[float]) -> torch.Tensor:
    """HF's rotation: angles ``p * inv_freq`` repeated over both halves, ``x cos + rotate_half(x) sin``."""
    h = len(inv_freq)
    out = torch.empty_like(x, dtype=torch.float64)
    for t, p in enumerate(positions):
        ang = torch.tensor([p * f for f in inv_freq] * 2, dtype=torch.float64)
        xt = x[..., t, :].double()
        rot = torch.cat((-xt[..., h:], xt[..., :h]), dim=-1)
        out[..., t, :] = xt * ang.cos() + rot * ang.sin()
    return out


@pytest.mark.parametrize("share,factor", [(0.25, None), (0.5, 2.0), (1.0, None), (0.3, 1.5)])
def test_proportional_against_hf_formula(share, factor):
    params = {"partial_rotary_factor": share, "rope_theta": 1e6, "rope_type": "proportional"}
    if factor is not None:
        params["factor"] = factor
    cfg = {**GEMMA4_LIKE, "rope_parameters": {**GEMMA4_LIKE["rope_parameters"], "full_attention": params}}
    rope = RotaryEmbedding.from_hf_config(cfg, layer_type="full_attention", head_dim_key="global_head_dim")
    want = _hf_proportional(64, 1e6, share, factor or 1.0)
    assert (rope.head_dim, rope.rotary_dim) == (64, 64)  # the whole head rotates; the share sets the turning pairs
    torch.testing.assert_close(rope.freqs, torch.tensor(want, dtype=torch.float64), rtol=1e-15, atol=0)
    assert rope.attention_factor == 1.0
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 2, 5, 64, generator=g, dtype=torch.float64)
    torch.testing.assert_close(rope(q, q)[0], _rotate_half_reference(q, range(5), want), rtol=0, atol=1e-12)
    # the channels of frequency 0 (the tail of each half) pass through unchanged
    turning = int(share * 64 // 2)
    still = [i for i in range(32) if i >= turning] + [32 + i for i in range(32) if i >= turning]
    assert torch.equal(rope(q, q)[0][..., still], q[..., still])


def test_the_sliding_layer_and_the_default_head_dim_are_unchanged():
    rope = RotaryEmbedding.from_hf_config(GEMMA4_LIKE, layer_type="sliding_attention")
    assert (rope.head_dim, rope.rotary_dim, rope.base, rope.scaling) == (32, 32, 1e4, None)
    with pytest.raises(TypeError, match="head_dim_key"):
        RotaryEmbedding.from_hf_config(GEMMA4_LIKE, layer_type="sliding_attention", head_dim_key=3)


def test_proportional_scaling_refuses_more_pairs_than_the_width():
    with pytest.raises(ValueError, match=r"rotated_pairs must be <= rotary_dim / 2 = 4, got 5"):
        RopeScaling("proportional", 8, rotated_pairs=5).frequencies(8, 10000.0)
    with pytest.raises(ValueError, match="rotated_pairs is an option of kind='proportional'"):
        RopeScaling("linear", 8, factor=2.0, rotated_pairs=2)
    with pytest.raises(ValueError, match="rotated_pairs"):
        RopeScaling("proportional", 8, rotated_pairs=-1)


PHI3 = {"hidden_size": 256, "num_attention_heads": 4, "max_position_embeddings": 131072,
        "original_max_position_embeddings": 4096, "rope_theta": 10000.0}
FACTORS = {"short_factor": [1.0 + 0.05 * i for i in range(32)], "long_factor": [1.0 + 0.5 * i for i in range(32)]}


@pytest.mark.parametrize("old", [{"type": "su"}, {"rope_type": "su"}, {"type": "yarn", "model_type": "phi3"}])
def test_old_phi3_names_are_longrope(old):
    model_type = old.pop("model_type", None)
    cfg = {**PHI3, "rope_scaling": {**old, **FACTORS}}
    if model_type:
        cfg["model_type"] = model_type
    new = RotaryEmbedding.from_hf_config({**PHI3, "rope_scaling": {"rope_type": "longrope", **FACTORS}})
    got = RotaryEmbedding.from_hf_config(cfg)
    assert got.scaling == new.scaling and got.scaling.kind == "longrope"
    torch.testing.assert_close(got.freqs, new.freqs, rtol=0, atol=0)
    assert got.attention_factor == new.attention_factor == pytest.approx(
        math.sqrt(1 + math.log(32) / math.log(4096)), rel=1e-15)


def test_yarn_outside_phi3_stays_yarn():
    cfg = {**PHI3, "model_type": "qwen2", "rope_scaling": {"type": "yarn", "factor": 4.0}}
    assert RotaryEmbedding.from_hf_config(cfg).scaling.kind == "yarn"


YARN = {"hidden_size": 1024, "num_attention_heads": 8, "max_position_embeddings": 8192,
        "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048}}


@pytest.mark.parametrize("value", ["false", "False", "", 0, 1, [True]])
def test_truncate_must_be_a_json_boolean(value):
    cfg = {**YARN, "rope_scaling": {**YARN["rope_scaling"], "truncate": value}}
    with pytest.raises(ValueError, match=r"\['truncate'\] must be true or false \(a JSON boolean\), got"):
        RotaryEmbedding.from_hf_config(cfg)


@pytest.mark.parametrize("key", ["beta_fast", "beta_slow"])
@pytest.mark.parametrize("value", [0, 0.0, -1.0])
def test_beta_must_be_positive(key, value):
    cfg = {**YARN, "rope_scaling": {**YARN["rope_scaling"], key: value}}
    with pytest.raises(ValueError, match=rf"\['{key}'\] must be > 0, got {value!r} \(Hugging Face would silently"):
        RotaryEmbedding.from_hf_config(cfg)


def test_valid_truncate_and_betas_still_read():
    for truncate in (True, False):
        cfg = {**YARN, "rope_scaling": {**YARN["rope_scaling"], "truncate": truncate, "beta_fast": 16, "beta_slow": 2}}
        s = RotaryEmbedding.from_hf_config(cfg).scaling
        assert (s.truncate, s.beta, s.alpha) == (truncate, 16.0, 2.0)
