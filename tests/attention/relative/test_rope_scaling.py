"""Context extension (position interpolation, NTK, YaRN) against the papers' formulas, and
interop with rotary-embedding-torch (code we did not write) where it is installed."""

import math

import pytest
import torch

from posenc.attention.relative.rope_scaling import (
    RopeScaling,
    extension_factor,
    linear_position_scale,
    ntk_base,
    yarn_frequencies,
)
from posenc.attention.relative.rotary import RotaryEmbedding, apply_rope, apply_rope_qk, rope_frequencies


def test_linear_interpolation_divides_positions():
    assert linear_position_scale(512, 2048) == 0.25
    rope = RotaryEmbedding(16, scaling=RopeScaling("linear", 512, 2048))
    q = torch.randn(1, 10, 16, dtype=torch.float64)
    rq, _ = rope(q, q)
    torch.testing.assert_close(rq, apply_rope(q, torch.arange(10) / 4.0))
    # explicit positions take the same route
    torch.testing.assert_close(rope(q, q, torch.arange(10) + 3)[0], apply_rope(q, (torch.arange(10) + 3) / 4.0))


def test_ntk_base_closed_form():
    assert ntk_base(10000.0, 64, 1024, 4096) == pytest.approx(10000.0 * 4.0 ** (64 / 62))
    scaled = rope_frequencies(64, ntk_base(10000.0, 64, 1024, 4096))
    plain = rope_frequencies(64, 10000.0)
    # the highest frequency is unchanged, the lowest divided by s = 4
    assert float(scaled[0]) == 1.0
    assert float(plain[-1] / scaled[-1]) == pytest.approx(4.0, rel=1e-12)


def yarn_turns_loop(dim, base, L, target, alpha, beta):
    """The paper's text (Eq. 17-18): the ramp is linear in the number of turns."""
    s = target / L
    out = []
    for i in range(dim // 2):
        theta = base ** (-2 * i / dim)
        turns = L / (2 * math.pi / theta)
        g = 0.0 if turns < alpha else 1.0 if turns > beta else (turns - alpha) / (beta - alpha)
        out.append((1 - g) * theta / s + g * theta)
    return out, 0.1 * math.log(s) + 1


def hf_yarn(dim, base, L, factor, beta_fast=32.0, beta_slow=1.0, truncate=True):
    """An independent transcription of the YaRN frequencies of the authors' code and HF
    (find_correction_dim / find_correction_range / linear ramp over the pair index), in plain floats."""

    def corr_dim(rot):  # the pair index whose pair turns `rot` times over L tokens
        return dim * math.log(L / (rot * 2 * math.pi)) / (2 * math.log(base))

    low, high = corr_dim(beta_fast), corr_dim(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    out = []
    for i in range(dim // 2):
        extrap = 1.0 / base ** (2 * i / dim)
        interp = extrap / factor
        ramp = min(max((i - low) / (high - low), 0.0), 1.0)
        w_extrap = 1.0 - ramp
        out.append(interp * (1 - w_extrap) + extrap * w_extrap)
    return out, 0.1 * math.log(factor) + 1.0


def hf_llama3(dim, base, factor, low_ff, high_ff, L):
    out = []
    for i in range(dim // 2):
        f = 1.0 / base ** (2 * i / dim)
        wl = 2 * math.pi / f
        if wl < L / high_ff:
            out.append(f)
        elif wl > L / low_ff:
            out.append(f / factor)
        else:
            smooth = (L / wl - low_ff) / (high_ff - low_ff)
            out.append((1 - smooth) * f / factor + smooth * f)
    return out


def hf_dynamic(dim, base, factor, max_pos, seq_len):
    seq_len = max(seq_len, max_pos)
    b = base * ((factor * seq_len / max_pos) - (factor - 1)) ** (dim / (dim - 2))
    return [1.0 / b ** (2 * i / dim) for i in range(dim // 2)]


def hf_longrope(dim, base, short, long, L, max_pos, seq_len=None, factor=None):
    factor = max_pos / L if factor is None else factor
    att = 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(L))
    ext = long if seq_len is not None and seq_len > L else short
    return [1.0 / (ext[i] * base ** (2 * i / dim)) for i in range(dim // 2)], att


def t64(values):
    return torch.tensor(values, dtype=torch.float64)


@pytest.mark.parametrize("dim,base,L,target", [(64, 10000.0, 2048, 8192), (128, 10000.0, 4096, 32768),
                                               (32, 10000.0, 64, 256), (128, 1e6, 32768, 131072),
                                               (16, 10000.0, 16, 64), (64, 500.0, 100, 100)])
def test_yarn_matches_the_authors_code(dim, base, L, target):
    freqs, factor = yarn_frequencies(dim, base, L, target)
    ref, ref_factor = hf_yarn(dim, base, L, target / L)
    torch.testing.assert_close(freqs, t64(ref), rtol=1e-13, atol=0)
    assert factor == pytest.approx(ref_factor, rel=1e-15)
    sc = RopeScaling("yarn", L, target)
    f2, pscale, att = sc.frequencies(dim, base)
    torch.testing.assert_close(f2, t64(ref), rtol=1e-13, atol=0)
    assert pscale == 1.0 and att == pytest.approx(ref_factor)
    # truncate=False (HF's option) uses the fractional correction dims
    f3, _ = yarn_frequencies(dim, base, L, target, truncate=False)
    torch.testing.assert_close(f3, t64(hf_yarn(dim, base, L, target / L, truncate=False)[0]), rtol=1e-13, atol=0)


def test_yarn_dims_and_turns_readings_differ_where_the_issue_says():
    # d = 64, s = 4 (L = 2048): the readings differ on 12 of the 32 pairs (the authors' frequencies
    # are 15-80 % above the per-turn reading's there)
    dims, _ = yarn_frequencies(64, 10000.0, 2048, 8192)
    turns, _ = yarn_frequencies(64, 10000.0, 2048, 8192, ramp="turns")
    rel = ((dims - turns).abs() / turns)
    differ = rel > 0.01
    assert int(differ.sum()) == 12
    assert bool((dims[differ] > turns[differ]).all())
    assert 0.1 < float(rel[differ].min()) and 0.75 < float(rel.max()) < 0.85
    # and the ends of the ramp agree: fast pairs kept, slow pairs interpolated by s
    assert float(dims[0]) == float(turns[0]) == 1.0
    assert float(dims[-1]) == pytest.approx(float(turns[-1]))


@pytest.mark.parametrize("L,target", [(64, 256), (2048, 8192), (100, 100)])
def test_yarn_turns_reading_against_loop(L, target):
    freqs, factor = yarn_frequencies(32, 10000.0, L, target, ramp="turns")
    ref, ref_factor = yarn_turns_loop(32, 10000.0, L, target, 1.0, 32.0)
    torch.testing.assert_close(freqs, t64(ref), rtol=1e-13, atol=0)
    assert factor == pytest.approx(ref_factor)
    sc = RopeScaling("yarn", L, target, yarn_ramp="turns")
    torch.testing.assert_close(sc.frequencies(32, 10000.0)[0], t64(ref), rtol=1e-13, atol=0)


def test_yarn_keeps_fast_pairs_and_interpolates_slow_ones():
    freqs, _ = yarn_frequencies(64, 10000.0, 2048, 8192)
    plain = rope_frequencies(64)
    assert float(freqs[0]) == float(plain[0])  # many turns: kept
    assert float(freqs[-1]) == pytest.approx(float(plain[-1]) / 4)  # under one turn: interpolated


def test_yarn_attention_factor_variants():
    # an explicit attention_factor wins; DeepSeek's mscale / mscale_all_dim ratio otherwise
    s = 40.0
    a = RopeScaling("yarn", 4096, factor=s, attention_factor=0.7).frequencies(64, 10000.0)[2]
    assert a == 0.7
    m = RopeScaling("yarn", 4096, factor=s, mscale=1.0, mscale_all_dim=0.707).frequencies(64, 10000.0)[2]
    assert m == pytest.approx((0.1 * math.log(s) + 1) / (0.1 * 0.707 * math.log(s) + 1), rel=1e-14)
    assert RopeScaling("yarn", 64, 512, yarn_temperature=False).frequencies(16, 10000.0)[2] == 1.0


@pytest.mark.parametrize("dim,base,factor,lo,hi,L", [(128, 500000.0, 8.0, 1.0, 4.0, 8192), (64, 10000.0, 4.0, 1.0, 4.0, 256),
                                                     (128, 500000.0, 32.0, 1.0, 4.0, 8192)])
def test_llama3_against_transcription(dim, base, factor, lo, hi, L):
    sc = RopeScaling("llama3", L, factor=factor, low_freq_factor=lo, high_freq_factor=hi)
    freqs, pscale, att = sc.frequencies(dim, base)
    torch.testing.assert_close(freqs, t64(hf_llama3(dim, base, factor, lo, hi, L)), rtol=1e-13, atol=0)
    assert pscale == 1.0 and att == 1.0


@pytest.mark.parametrize("seq_len", [10, 2048, 2049, 5000, 100_000])
def test_dynamic_ntk_against_transcription(seq_len):
    sc = RopeScaling("dynamic", 2048, factor=4.0)
    freqs, _, att = sc.frequencies(64, 10000.0, seq_len)
    torch.testing.assert_close(freqs, t64(hf_dynamic(64, 10000.0, 4.0, 2048, seq_len)), rtol=1e-12, atol=0)
    assert att == 1.0
    # up to the trained length it is plain RoPE
    if seq_len <= 2048:
        torch.testing.assert_close(freqs, rope_frequencies(64))


def test_longrope_against_transcription():
    g = torch.Generator().manual_seed(0)
    short = (1.0 + torch.rand(16, generator=g)).tolist()
    long = (1.0 + 10 * torch.rand(16, generator=g)).tolist()
    sc = RopeScaling("longrope", 4096, 131072, factor=32.0, short_factor=short, long_factor=long)
    for seq_len in (None, 100, 4096, 4097, 100_000):
        freqs, _, att = sc.frequencies(32, 10000.0, seq_len)
        ref, ref_att = hf_longrope(32, 10000.0, short, long, 4096, 131072, seq_len, factor=32.0)
        torch.testing.assert_close(freqs, t64(ref), rtol=1e-13, atol=0)
        assert att == pytest.approx(ref_att, rel=1e-15)


def test_linear_divides_frequencies():
    freqs, pscale, att = RopeScaling("linear", 512, 2048).frequencies(16, 10000.0)
    torch.testing.assert_close(freqs, rope_frequencies(16) / 4)
    assert (pscale, att) == (1.0, 1.0)


def test_yarn_temperature_scales_logits_by_its_square():
    sc = RopeScaling("yarn", 64, 512)
    rope = RotaryEmbedding(16, scaling=sc)
    q, k = torch.randn(1, 8, 16, dtype=torch.float64), torch.randn(1, 8, 16, dtype=torch.float64)
    rq, rk = rope(q, k)
    freqs, _, factor = sc.frequencies(16, 10000.0)
    pq, pk = apply_rope(q, freqs=freqs), apply_rope(k, freqs=freqs)
    torch.testing.assert_close(rq @ rk.transpose(-1, -2), factor ** 2 * (pq @ pk.transpose(-1, -2)))


def test_scaling_none_is_plain_rope():
    q = torch.randn(2, 5, 8)
    rope = RotaryEmbedding(8, scaling=RopeScaling("none", 10, 40))
    torch.testing.assert_close(rope(q, q)[0], apply_rope(q))


def test_length_dependent_scalings_in_the_module():
    # dynamic NTK and LongRoPE pick their frequencies from the current length (max position + 1)
    q = torch.randn(1, 2, 40, 8, dtype=torch.float64)
    rope = RotaryEmbedding(8, scaling=RopeScaling("dynamic", 16, factor=2.0))
    for n in (10, 16, 40):
        f = t64(hf_dynamic(8, 10000.0, 2.0, 16, n))
        torch.testing.assert_close(rope(q[..., :n, :], q[..., :n, :])[0], apply_rope(q[..., :n, :], freqs=f))
    # a decode step at position 39 uses the frequencies of length 40 (as HF's cache positions)
    last = rope(q[..., 39:, :], q, offset=0)[0]
    torch.testing.assert_close(last, apply_rope(q, freqs=t64(hf_dynamic(8, 10000.0, 2.0, 16, 40)))[..., 39:, :])
    short, long = [1.0, 2.0], [3.0, 5.0]
    lr = RotaryEmbedding(4, scaling=RopeScaling("longrope", 16, 64, factor=4.0, short_factor=short, long_factor=long))
    x = torch.randn(1, 20, 4, dtype=torch.float64)
    f_short, att = hf_longrope(4, 10000.0, short, long, 16, 64, 16, factor=4.0)
    f_long, _ = hf_longrope(4, 10000.0, short, long, 16, 64, 20, factor=4.0)
    torch.testing.assert_close(lr(x[:, :16], x[:, :16])[0], att * apply_rope(x[:, :16], freqs=t64(f_short)))
    torch.testing.assert_close(lr(x, x)[0], att * apply_rope(x, freqs=t64(f_long)))


def test_bad_scaling():
    with pytest.raises(ValueError, match="target_length"):
        extension_factor(1024, 512)
    with pytest.raises(ValueError, match="target_length"):
        RopeScaling("linear", 1024, 512)
    with pytest.raises(ValueError, match="kind"):
        RopeScaling("rerope", 10, 20)
    with pytest.raises(ValueError, match="trained_length"):
        RopeScaling("ntk", 0, 20)
    with pytest.raises(ValueError, match="target_length or factor"):
        RopeScaling("yarn", 10)
    with pytest.raises(ValueError, match="beta"):
        yarn_frequencies(16, 10000.0, 10, 20, alpha=4.0, beta=2.0)
    with pytest.raises(ValueError, match="rotary_dim"):
        ntk_base(10000.0, 2, 10, 20)
    # refused at construction, not when first used (#23)
    with pytest.raises(ValueError, match="alpha"):
        RopeScaling("yarn", 10, 20, alpha=float("nan"))
    with pytest.raises(ValueError, match="beta must be > alpha"):
        RopeScaling("yarn", 10, 20, alpha=40.0)
    with pytest.raises(ValueError, match="alpha"):
        RopeScaling("yarn", 10, 20, alpha=0.0)  # dims ramp: zero turns has no correction dim
    with pytest.raises(ValueError, match="yarn_ramp"):
        RopeScaling("yarn", 10, 20, yarn_ramp="linear")
    with pytest.raises(ValueError, match="factor"):
        RopeScaling("linear", 10, factor=0.5)
    with pytest.raises(ValueError, match="factor"):
        RopeScaling("linear", 10, factor=float("inf"))
    with pytest.raises(ValueError, match="high_freq_factor"):
        RopeScaling("llama3", 10, factor=8.0, low_freq_factor=4.0, high_freq_factor=1.0)
    with pytest.raises(ValueError, match="short_factor and long_factor"):
        RopeScaling("longrope", 10, 40)
    with pytest.raises(ValueError, match="long_factor"):
        RopeScaling("longrope", 10, 40, short_factor=[1.0], long_factor=[float("nan")])
    with pytest.raises(TypeError, match="short_factor"):
        RopeScaling("longrope", 10, 40, short_factor="abc", long_factor=[1.0])
    with pytest.raises(ValueError, match="attention_factor"):
        RopeScaling("yarn", 10, 40, attention_factor=-1.0)
    with pytest.raises(ValueError, match="entries"):
        RopeScaling("longrope", 10, 40, short_factor=[1.0], long_factor=[1.0]).frequencies(8, 10000.0)
    with pytest.raises(ValueError, match="rotary_dim >= 4"):
        RotaryEmbedding(2, scaling=RopeScaling("ntk", 10, 40))


# ---------------------------------------------------------------- Hugging Face configs
LLAMA31 = {  # the rope fields of Llama 3.1 8B's config.json
    "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8, "max_position_embeddings": 131072,
    "rope_theta": 500000.0, "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                             "original_max_position_embeddings": 8192, "rope_type": "llama3"},
}


def test_from_hf_config_llama3():
    rope = RotaryEmbedding.from_hf_config(LLAMA31)
    assert (rope.head_dim, rope.rotary_dim, rope.base, rope.layout) == (128, 128, 500000.0, "half")
    torch.testing.assert_close(rope.freqs, t64(hf_llama3(128, 500000.0, 8.0, 1.0, 4.0, 8192)), rtol=1e-13, atol=0)
    assert rope.attention_factor == 1.0
    # an object with the same attributes (e.g. a transformers PretrainedConfig) reads the same
    from types import SimpleNamespace

    obj = SimpleNamespace(**LLAMA31)
    torch.testing.assert_close(RotaryEmbedding.from_hf_config(obj).freqs, rope.freqs)


@pytest.mark.parametrize("scaling,max_pos,expect", [
    ({"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}, 32768,
     dict(L=32768, factor=4.0)),  # Qwen2.5's recipe, old "type" key
    ({"rope_type": "yarn", "original_max_position_embeddings": 4096}, 16384, dict(L=4096, factor=4.0)),  # factor implied
    ({"rope_type": "yarn", "factor": 8.0, "beta_fast": 16.0, "beta_slow": 2.0, "truncate": False}, 2048,
     dict(L=2048, factor=8.0, beta_fast=16.0, beta_slow=2.0, truncate=False)),  # original = max_position_embeddings
])
def test_from_hf_config_yarn(scaling, max_pos, expect):
    cfg = {"hidden_size": 1024, "num_attention_heads": 8, "rope_theta": 1e6, "max_position_embeddings": max_pos,
           "rope_scaling": scaling}
    rope = RotaryEmbedding.from_hf_config(cfg)
    L, factor = expect["L"], expect["factor"]
    ref, att = hf_yarn(128, 1e6, L, factor, expect.get("beta_fast", 32.0), expect.get("beta_slow", 1.0),
                       expect.get("truncate", True))
    torch.testing.assert_close(rope.freqs, t64(ref), rtol=1e-13, atol=0)
    assert rope.attention_factor == pytest.approx(att, rel=1e-15)


def test_from_hf_config_yarn_mscale_and_attention_factor():
    base = {"hidden_size": 2048, "num_attention_heads": 16, "head_dim": 64, "max_position_embeddings": 163840}
    cfg = dict(base, rope_scaling={"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096,
                                   "mscale": 1.0, "mscale_all_dim": 1.0})
    rope = RotaryEmbedding.from_hf_config(cfg)
    assert rope.attention_factor == 1.0  # DeepSeek's equal mscales cancel
    torch.testing.assert_close(rope.freqs, t64(hf_yarn(64, 10000.0, 4096, 40.0)[0]), rtol=1e-13, atol=0)
    cfg = dict(base, rope_scaling={"rope_type": "yarn", "factor": 40.0, "attention_factor": 1.5,
                                   "original_max_position_embeddings": 4096})
    assert RotaryEmbedding.from_hf_config(cfg).attention_factor == 1.5


def test_from_hf_config_linear_dynamic_default():
    cfg = {"hidden_size": 256, "num_attention_heads": 4, "max_position_embeddings": 1024, "rope_theta": 10000.0}
    plain = RotaryEmbedding.from_hf_config(cfg)
    assert plain.scaling is None
    torch.testing.assert_close(plain.freqs, t64([1.0 / 10000.0 ** (2 * i / 64) for i in range(32)]))
    lin = RotaryEmbedding.from_hf_config(dict(cfg, rope_scaling={"rope_type": "linear", "factor": 4.0}))
    torch.testing.assert_close(lin.freqs, plain.freqs / 4)
    dyn = RotaryEmbedding.from_hf_config(dict(cfg, rope_scaling={"type": "dynamic", "factor": 2.0}))
    for T in (500, 3000):
        freqs = dyn._frequencies(dyn.scaling, T)[0]
        torch.testing.assert_close(freqs, t64(hf_dynamic(64, 10000.0, 2.0, 1024, T)), rtol=1e-12, atol=0)


def test_from_hf_config_partial_rotary_and_head_dim():
    cfg = {"hidden_size": 2560, "num_attention_heads": 32, "partial_rotary_factor": 0.4, "rope_theta": 10000.0}
    rope = RotaryEmbedding.from_hf_config(cfg)
    assert (rope.head_dim, rope.rotary_dim) == (80, 32)
    torch.testing.assert_close(rope.freqs, t64([1.0 / 10000.0 ** (2 * i / 32) for i in range(16)]))
    rope = RotaryEmbedding.from_hf_config({"hidden_size": 2048, "num_attention_heads": 8, "head_dim": 256})
    assert (rope.head_dim, rope.base) == (256, 10000.0)  # transformers' default rope_theta


def test_from_hf_config_longrope_phi3():
    g = torch.Generator().manual_seed(1)
    short, long = (1 + torch.rand(48, generator=g)).tolist(), (1 + 20 * torch.rand(48, generator=g)).tolist()
    cfg = {"hidden_size": 3072, "num_attention_heads": 32, "max_position_embeddings": 131072,
           "original_max_position_embeddings": 4096,  # Phi-3 keeps it at the top level
           "rope_scaling": {"type": "longrope", "short_factor": short, "long_factor": long}}
    rope = RotaryEmbedding.from_hf_config(cfg)
    for T in (None, 4096, 4097):
        freqs, _, att = rope._frequencies(rope.scaling, T)
        ref, ref_att = hf_longrope(96, 10000.0, short, long, 4096, 131072, T)
        torch.testing.assert_close(freqs, t64(ref), rtol=1e-13, atol=0)
        assert att == pytest.approx(ref_att, rel=1e-15)
    assert rope.attention_factor == pytest.approx(math.sqrt(1 + math.log(32) / math.log(4096)))


def test_from_hf_config_v5_rope_parameters_and_per_layer():
    cfg = {"hidden_size": 512, "num_attention_heads": 8, "max_position_embeddings": 4096,
           "rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1000.0}}
    rope = RotaryEmbedding.from_hf_config(cfg)
    torch.testing.assert_close(rope.freqs, t64([1.0 / 1000.0 ** (2 * i / 64) for i in range(32)]) / 2)
    per_layer = {"hidden_size": 512, "num_attention_heads": 8, "max_position_embeddings": 4096,
                 "rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
                                     "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}}
    full = RotaryEmbedding.from_hf_config(per_layer, layer_type="full_attention")
    local = RotaryEmbedding.from_hf_config(per_layer, layer_type="sliding_attention")
    assert full.base == 1e6 and local.base == 1e4 and local.scaling is None
    with pytest.raises(ValueError, match="layer_type"):
        RotaryEmbedding.from_hf_config(per_layer)
    with pytest.raises(ValueError, match="layer_type"):
        RotaryEmbedding.from_hf_config(per_layer, layer_type="global")


def test_from_hf_config_errors_name_the_field():
    base = {"hidden_size": 256, "num_attention_heads": 4, "max_position_embeddings": 1024}
    with pytest.raises(ValueError, match="rope_type.*'mrope'"):
        RotaryEmbedding.from_hf_config(dict(base, rope_scaling={"rope_type": "mrope", "factor": 2.0}))
    with pytest.raises(ValueError, match="lacks 'factor'"):
        RotaryEmbedding.from_hf_config(dict(base, rope_scaling={"rope_type": "linear"}))
    with pytest.raises(ValueError, match="lacks 'low_freq_factor'"):
        RotaryEmbedding.from_hf_config(dict(base, rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                                                "high_freq_factor": 4.0}))
    with pytest.raises(ValueError, match="lacks 'short_factor'"):
        RotaryEmbedding.from_hf_config(dict(base, rope_scaling={"rope_type": "longrope", "factor": 4.0}))
    with pytest.raises(ValueError, match="long_factor"):
        RotaryEmbedding.from_hf_config(dict(base, rope_scaling={"rope_type": "longrope", "short_factor": [1.0] * 32,
                                                                "long_factor": [1.0] * 3}))
    with pytest.raises(ValueError, match="head_dim"):
        RotaryEmbedding.from_hf_config({"max_position_embeddings": 1024})
    with pytest.raises(ValueError, match="factor"):
        RotaryEmbedding.from_hf_config(dict(base, rope_scaling={"rope_type": "linear", "factor": "8"}))
    with pytest.raises(ValueError, match="rope_theta"):
        RotaryEmbedding.from_hf_config(dict(base, rope_theta=float("nan")))
    with pytest.raises(ValueError, match="even"):
        RotaryEmbedding.from_hf_config(dict(base, partial_rotary_factor=0.3))
    with pytest.raises(ValueError, match="max_position_embeddings"):
        RotaryEmbedding.from_hf_config({"hidden_size": 256, "num_attention_heads": 4,
                                        "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}})
    with pytest.raises(ValueError, match="rope_scaling"):
        RotaryEmbedding.from_hf_config(dict(base, rope_scaling=[1, 2]))
    with pytest.raises(TypeError, match="config"):
        RotaryEmbedding.from_hf_config(42)


# ---------------------------------------------------------------- rotary-embedding-torch
ret = pytest.importorskip("rotary_embedding_torch", reason="rotary-embedding-torch is in the test extra")


def test_matches_rotary_embedding_torch_default():
    torch.manual_seed(0)
    theirs = ret.RotaryEmbedding(dim=32)
    q = torch.randn(2, 4, 50, 64)
    out = theirs.rotate_queries_or_keys(q)
    ours = apply_rope(q, layout="interleaved", rotary_dim=32)  # their dim = rotated channels
    torch.testing.assert_close(ours, out, rtol=1e-5, atol=2e-5)


def test_matches_rotary_embedding_torch_interpolation_and_ntk():
    q = torch.randn(1, 2, 40, 16)
    pi = ret.RotaryEmbedding(dim=16, interpolate_factor=4.0).rotate_queries_or_keys(q)
    rope = RotaryEmbedding(16, layout="interleaved", scaling=RopeScaling("linear", 10, 40))
    torch.testing.assert_close(rope(q, q)[0], pi, rtol=1e-5, atol=2e-5)
    ntk = ret.RotaryEmbedding(dim=16, theta_rescale_factor=4.0).rotate_queries_or_keys(q)
    rope = RotaryEmbedding(16, layout="interleaved", scaling=RopeScaling("ntk", 10, 40))
    torch.testing.assert_close(rope(q, q)[0], ntk, rtol=1e-5, atol=2e-5)


def test_matches_rotary_embedding_torch_xpos():
    q, k = torch.randn(1, 2, 30, 16), torch.randn(1, 2, 30, 16)
    tq, tk = ret.RotaryEmbedding(dim=16, use_xpos=True).rotate_queries_and_keys(q, k)
    # rotary-embedding-torch measures the xPos exponent from len // 2
    oq, ok = apply_rope_qk(q, k, layout="interleaved", xpos_scale_base=512.0, xpos_center=15.0)
    torch.testing.assert_close(oq, tq, rtol=1e-5, atol=2e-5)
    torch.testing.assert_close(ok, tk, rtol=1e-5, atol=2e-5)
