"""CAPEEncoding: 1D / 2D embeddings against loop references, train/eval behaviour, masks, presets, bad input."""

import copy
import math

import pytest
import torch

from posenc.encodings import CAPE_PRESETS, CAPEEncoding, SinusoidalEncoding, create_encoding
from posenc.encodings.cape import cape_features
from posenc.models import TinyViT, TransformerEncoder, patch_positions
from posenc.positions import cape_augment, grid_spacing


def reference_2d(y: float, x: float, num_features: int) -> list[float]:
    """The paper's 2D embedding written out: w_{k,x} = rho_k cos k, w_{k,y} = rho_k sin k, rho_k = 10^(2k/D)."""
    half = num_features // 2
    phases = [math.pi * (10 ** (2 * k / num_features)) * (math.cos(k) * x + math.sin(k) * y) for k in range(half)]
    return [math.sin(p) for p in phases] + [math.cos(p) for p in phases]


def reference_1d(p: float, num_features: int, scale: float = 1.0) -> list[float]:
    half = num_features // 2
    phases = [scale * p * 10000 ** (-2 * k / num_features) for k in range(half)]
    return [math.sin(t) for t in phases] + [math.cos(t) for t in phases]


def test_2d_matches_the_papers_isotropic_directions():
    enc = CAPEEncoding(in_dim=2, num_features=24).eval()
    pos = torch.tensor([[0.0, 0.0], [0.25, -0.75], [-1.0, 1.0], [0.6, 0.1]], dtype=torch.float64)
    want = torch.tensor([reference_2d(float(y), float(x), 24) for y, x in pos], dtype=torch.float64)
    torch.testing.assert_close(enc(pos), want, rtol=0, atol=1e-12)


def test_2d_channels_mix_both_axes_unlike_the_per_axis_split():
    w = CAPEEncoding(in_dim=2, num_features=64).frequencies()  # (2, K): rows w_y, w_x
    k = torch.arange(32, dtype=torch.float64)
    rho = 10 ** (2 * k / 64)
    torch.testing.assert_close(w.norm(dim=0), math.pi * rho)  # |w_k| = pi rho_k
    torch.testing.assert_close(torch.atan2(w[0], w[1]), torch.atan2(torch.sin(k), torch.cos(k)))  # angle k
    # the per-axis split has every channel along one axis; CAPE's are not
    assert bool(((w[0].abs() > 1e-3) & (w[1].abs() > 1e-3)).sum() > 28)
    # and the embedding of (y, x) differs from that of (x, y)
    enc = CAPEEncoding(in_dim=2, num_features=64).eval()
    a, b = enc(torch.tensor([[0.2, 0.7], [0.7, 0.2]]))
    assert not torch.allclose(a, b)


def test_1d_eval_equals_sinusoidal_encoding():
    enc = CAPEEncoding(in_dim=1, num_features=32).eval()
    pos = torch.arange(50.0).reshape(2, 25, 1)
    torch.testing.assert_close(enc(pos), SinusoidalEncoding(in_dim=1, num_features=32)(pos), rtol=0, atol=0)
    ref = torch.tensor([reference_1d(float(p), 32) for p in pos.flatten()], dtype=torch.float64).reshape(2, 25, 32)
    torch.testing.assert_close(enc(pos.double()), ref, rtol=0, atol=1e-10)


def test_1d_step_changes_the_unit_not_the_embedding():
    # positions in frames, limits in seconds; one frame is still one radian at k = 0
    speech = CAPEEncoding(in_dim=1, num_features=16, preset="speech", mean_center=False).eval()
    assert speech.step == pytest.approx(1 / 30) and speech.freq_scale == pytest.approx(30.0)
    frames = torch.arange(40.0).reshape(1, 40, 1)
    torch.testing.assert_close(speech(frames), SinusoidalEncoding(1, 16)(frames), atol=1e-5, rtol=0)
    # a global shift of 1 s moves the positions by 30 frames
    fixed = CAPEEncoding(in_dim=1, num_features=16, preset="speech", max_global_shift=0.0, max_local_shift=0.0,
                         mean_center=False, freq_scale=30.0)
    assert fixed.augments is False


def test_integer_positions_and_dtype():
    enc = CAPEEncoding(in_dim=1, num_features=8, dtype=torch.float64).eval()
    out = enc(torch.arange(5)[:, None])
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, enc(torch.arange(5.0, dtype=torch.float64)[:, None]))


def test_eval_is_deterministic_and_draws_nothing():
    enc = CAPEEncoding(in_dim=1, num_features=16, max_global_shift=5.0, seed=None)
    pos = torch.arange(20.0).reshape(2, 10, 1)
    enc.eval()
    state = torch.get_rng_state()
    a, b = enc(pos), enc(pos)
    assert torch.equal(a, b) and torch.equal(torch.get_rng_state(), state)
    enc.train()
    c, d = enc(pos), enc(pos)
    assert not torch.equal(c, d) and not torch.equal(torch.get_rng_state(), state)


def test_eval_still_centres():
    enc = CAPEEncoding(in_dim=1, num_features=16, mean_center=True).eval()
    pos = torch.arange(8.0).reshape(1, 8, 1)
    torch.testing.assert_close(enc(pos), enc(pos + 100.0), atol=1e-4, rtol=0)
    torch.testing.assert_close(enc(pos), SinusoidalEncoding(1, 16)(pos - 3.5))


def test_training_is_augment_then_embed():
    enc = CAPEEncoding(in_dim=2, num_features=32, seed=5, dtype=torch.float64).train()
    pos = patch_positions(3, 5, "continuous", dtype=torch.float64)[None].expand(4, -1, -1)
    got = enc(pos)
    aug = cape_augment(pos, max_global_shift=0.5, max_local_shift=0.5, max_global_scaling=1.4,
                       spacing=grid_spacing(pos), generator=torch.Generator().manual_seed(5))
    torch.testing.assert_close(got, cape_features(aug, enc.frequencies()), rtol=0, atol=1e-12)
    torch.testing.assert_close(grid_spacing(pos)[0, 0], torch.tensor([2 / 3, 2 / 5], dtype=torch.float64))
    # an explicit spacing and generator override the measured spacing and the module's generator
    g = torch.Generator().manual_seed(1)
    got = enc(pos, generator=g, spacing=(0.1, 0.2))
    aug = cape_augment(pos, max_global_shift=0.5, max_local_shift=0.5, max_global_scaling=1.4,
                       spacing=(0.1, 0.2), generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(got, cape_features(aug, enc.frequencies()), rtol=0, atol=1e-12)


def test_module_seed_reproducible_and_per_sample():
    pos = torch.arange(10.0).reshape(1, 10, 1).expand(3, 10, 1)
    enc = CAPEEncoding(in_dim=1, num_features=16, seed=3).train()
    a = enc(pos)
    assert not torch.equal(a[0], a[1])  # each sample has its own shift
    enc.reset_generator()
    assert torch.equal(enc(pos), a)
    enc.reset_generator(4)
    assert not torch.equal(enc(pos), a)
    twin = copy.deepcopy(CAPEEncoding(in_dim=1, num_features=16, seed=3).train())
    assert torch.equal(twin(pos), a)
    assert len(enc.state_dict()) == 0


def test_without_limits_training_draws_nothing():
    enc = CAPEEncoding(in_dim=2, num_features=16, max_global_shift=0.0, max_local_shift=0.0,
                       max_global_scaling=1.0, seed=None).train()
    pos = patch_positions(2, 2, "continuous")[None]
    state = torch.get_rng_state()
    out = enc(pos)
    assert torch.equal(torch.get_rng_state(), state)
    torch.testing.assert_close(out, enc.eval()(pos))


def test_padding_mask():
    enc = CAPEEncoding(in_dim=1, num_features=16, mean_center=True, seed=0)
    pos = torch.arange(12.0).reshape(2, 6, 1)
    mask = torch.tensor([[False] * 4 + [True] * 2, [False] * 6])
    for mode in ("train", "eval"):
        getattr(enc, mode)()
        enc.reset_generator()
        out = enc(pos, mask)
        moved = pos.clone()
        moved[mask] = 500.0
        enc.reset_generator()
        out2 = enc(moved, mask)
        torch.testing.assert_close(out2[~mask], out[~mask], atol=1e-5, rtol=0)
        # padded tokens carry the embedding of their raw position
        torch.testing.assert_close(out2[mask], SinusoidalEncoding(1, 16)(moved[mask]))
    # shared (N, 1) positions expand to the mask's batch
    enc.eval()
    shared = enc(torch.arange(6.0)[:, None], mask)
    assert shared.shape == (2, 6, 16)
    torch.testing.assert_close(shared[0, :4], SinusoidalEncoding(1, 16)(torch.arange(4.0)[:, None] - 1.5))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_inputs(dtype):
    pos = patch_positions(4, 4, "continuous")[None].expand(2, -1, -1)
    enc = CAPEEncoding(in_dim=2, num_features=32)
    for mode in ("train", "eval"):
        getattr(enc, mode)()
        enc.reset_generator()
        half = enc(pos.to(dtype))
        enc.reset_generator()
        full = enc(pos)
        assert half.dtype == dtype and bool(torch.isfinite(half).all())
        torch.testing.assert_close(half.float(), full, atol=2e-2 if dtype == torch.bfloat16 else 3e-3, rtol=0)


def test_compile_eval_mode():
    enc = CAPEEncoding(in_dim=2, num_features=32, mean_center=True).eval()
    pos = patch_positions(4, 6, "continuous")[None].expand(3, -1, -1)
    compiled = torch.compile(enc, backend="eager", fullgraph=True)
    torch.testing.assert_close(compiled(pos), enc(pos))
    enc1 = CAPEEncoding(in_dim=1, num_features=16, preset="speech").eval()
    frames = torch.arange(30.0).reshape(1, 30, 1)
    torch.testing.assert_close(torch.compile(enc1, backend="eager", fullgraph=True)(frames), enc1(frames))


@pytest.mark.slow
def test_compile_inductor_eval_mode():
    enc = CAPEEncoding(in_dim=1, num_features=16).eval()
    pos = torch.arange(40.0).reshape(2, 20, 1)
    torch.testing.assert_close(torch.compile(enc)(pos), enc(pos), atol=1e-5, rtol=0)


def test_create_encoding_and_presets():
    enc = create_encoding("cape", in_dim=2, num_features=16)
    assert isinstance(enc, CAPEEncoding) and enc.preset == "vision"
    assert (enc.max_global_shift, enc.max_local_shift, enc.max_global_scaling) == (0.5, 0.5, 1.4)
    text = create_encoding("cape", num_features=16)
    assert (text.max_global_shift, text.max_local_shift, text.max_global_scaling) == (5.0, 0.5, 1.03)
    speech = create_encoding("cape", num_features=16, preset="speech", max_global_shift=10.0)
    assert speech.max_global_shift == 10.0 and speech.mean_center and speech.max_global_scaling == 1.0
    assert set(CAPE_PRESETS) == {"text", "speech", "vision"}
    assert "preset='speech'" in repr(speech) and "step=0.0333" in repr(speech)
    with pytest.raises(TypeError, match="unexpected argument"):
        create_encoding("cape", num_features=16, max_shift=1.0)


def test_models_draw_per_sample():
    torch.manual_seed(0)
    model = TransformerEncoder(2, 1, dim=16, encoding=CAPEEncoding(in_dim=1, num_features=16, max_local_shift=0.0))
    tokens = torch.randn(1, 7, 2).expand(4, 7, 2)
    pos = torch.arange(7.0)[:, None]
    model.train()
    out = model(tokens, pos)
    assert not torch.allclose(out[0], out[1])  # each sample its own shift
    model.eval()
    out = model(tokens, pos)
    torch.testing.assert_close(out[0], out[1])


@pytest.mark.parametrize("cls_token", [True, False])
def test_tinyvit_with_cape_at_any_size(cls_token):
    torch.manual_seed(0)
    vit = TinyViT(num_classes=3, patch_size=4, dim=16, num_heads=2, positions="continuous", cls_token=cls_token,
                  encoding=create_encoding("cape", in_dim=2, num_features=16))
    images = torch.randn(1, 1, 16, 16).expand(3, 1, 16, 16)
    for h, w in ((4, 4), (8, 8), (16, 12), (4, 32), (32, 32)):
        x = torch.randn(2, 1, h, w)
        vit.train()
        assert vit(x).shape == (2, 3)
        vit.eval()
        assert torch.equal(vit(x), vit(x))
    vit.train()
    out = vit(images)
    assert not torch.allclose(out[0], out[1])  # a different augmentation per image
    with pytest.raises(TypeError, match="positions='continuous'"):
        TinyViT(patch_size=4, dim=16, num_heads=2, encoding=CAPEEncoding(in_dim=2, num_features=16))(
            torch.randn(1, 1, 8, 8))


def test_tinyvit_cls_token_has_no_position():
    vit = TinyViT(num_classes=3, patch_size=4, dim=16, num_heads=2, positions="continuous",
                  encoding=CAPEEncoding(in_dim=2, num_features=16)).eval()
    seen = {}
    vit.encoder.blocks[0].register_forward_pre_hook(lambda m, args: seen.setdefault("x", args[0]))
    vit(torch.randn(2, 1, 8, 8))
    torch.testing.assert_close(seen["x"][:, 0], vit.cls[0].expand(2, -1))


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(in_dim=3), ValueError, "in_dim must be 1 or 2"),
        (dict(num_features=15), ValueError, "num_features must be even"),
        (dict(preset="music"), ValueError, "preset"),
        (dict(in_dim=1, preset="vision"), ValueError, "preset 'vision' is for in_dim=2"),
        (dict(in_dim=2, step=0.5), ValueError, "step applies to 1D"),
        (dict(in_dim=1, spacing=0.5), ValueError, "spacing applies to 2D"),
        (dict(in_dim=2, spacing=(0.1, 0.2, 0.3)), ValueError, "spacing"),
        (dict(in_dim=2, spacing=-0.1), ValueError, "spacing"),
        (dict(max_global_shift=-1.0), ValueError, "max_global_shift"),
        (dict(max_local_shift=math.nan), ValueError, "max_local_shift"),
        (dict(max_global_scaling=0.5), ValueError, "max_global_scaling"),
        (dict(mean_center="yes"), TypeError, "mean_center"),
        (dict(step=0.0), ValueError, "step"),
        (dict(base=1.0), ValueError, "base"),
        (dict(freq_scale=-1.0), ValueError, "freq_scale"),
        (dict(seed=-1), ValueError, "seed"),
    ],
)
def test_bad_construction(kwargs, exc, match):
    kwargs.setdefault("num_features", 16)
    with pytest.raises(exc, match=match):
        CAPEEncoding(**kwargs)


def test_bad_forward_input():
    enc = CAPEEncoding(in_dim=1, num_features=16).train()
    with pytest.raises(ValueError, match=r"positions must have shape \(\.\.\., 1\)"):
        enc(torch.zeros(2, 5, 2))
    with pytest.raises(ValueError, match="token axis"):
        enc(torch.zeros(1))
    with pytest.raises(ValueError, match="non-finite"):
        enc(torch.tensor([[[0.0], [math.inf]]]))
    with pytest.raises(TypeError, match="real integer or floating"):
        enc(torch.zeros(2, 1, dtype=torch.bool))
    with pytest.raises(TypeError, match="key_padding_mask must be a bool"):
        enc(torch.zeros(2, 4, 1), torch.zeros(2, 4))
    with pytest.raises(ValueError, match="key_padding_mask must have"):
        enc(torch.zeros(2, 4, 1), torch.zeros(2, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="pads every token"):
        enc(torch.zeros(2, 4, 1), torch.tensor([[False] * 4, [True] * 4]))
    with pytest.raises(TypeError, match="generator"):
        enc(torch.zeros(2, 4, 1), generator="cpu")
    with pytest.raises(ValueError, match="spacing applies to 2D"):
        enc(torch.zeros(2, 4, 1), spacing=0.5)
    enc2 = CAPEEncoding(in_dim=2, num_features=16).train()
    with pytest.raises(TypeError, match="patch centres"):
        enc2(torch.zeros(1, 4, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="spacing"):
        enc2(torch.zeros(1, 4, 2), spacing=(0.1, 0.2, 0.3))
