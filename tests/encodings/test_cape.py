"""CAPEEncoding: 1D / 2D embeddings against loop references, train/eval behaviour, masks, presets, bad input."""

import copy
import math

import pytest
import torch
from scipy import stats

from posenc.encodings import CAPE_PRESETS, CAPEEncoding, SinusoidalEncoding, create_encoding
from posenc.encodings.cape import cape_features
from posenc.models import TinyViT, TransformerEncoder, patch_positions
from posenc.positions import cape_augment, grid_cell, grid_spacing


def reference_2d_text(y: float, x: float, num_features: int) -> list[float]:
    """The "text" convention written out: w_{k,x} = rho_k cos k, w_{k,y} = rho_k sin k, rho_k = 10^(2k/D),
    k = 0..D/2-1, x the column and y the row."""
    half = num_features // 2
    phases = [math.pi * (10 ** (2 * k / num_features)) * (math.cos(k) * x + math.sin(k) * y) for k in range(half)]
    return [math.sin(p) for p in phases] + [math.cos(p) for p in phases]


def reference_1d(p: float, num_features: int, scale: float = 1.0) -> list[float]:
    half = num_features // 2
    phases = [scale * p * 10000 ** (-2 * k / num_features) for k in range(half)]
    return [math.sin(t) for t in phases] + [math.cos(t) for t in phases]


def authors_2d(n: int, num_features: int, uniforms=None) -> torch.Tensor:
    """An independent float64 transcription of the authors' SinusoidalPositionEmbedding2D (flashlight, `cape`
    branch) for an n x n patch grid, without the CLS token: ``(n * n, F)`` in the authors' token order.

    Their ViT flattens the patch map with its first dimension fastest, and flashlight stores images width
    first (W x H x C), so that dimension is the image's width: their x (fastest) is the column coordinate
    and y the row, and their token order is posenc's row-major one. Where D/2 is odd they emit D + 1
    features (D/2 + 1 sines, D/2 cosines). ``uniforms = (u_shift (2,), u_local (n * n, 2), u_scale)`` replays their training-mode
    draws (randu: global shift, local shift, shrink), else evaluation mode.
    """
    half = num_features // 2
    half_sin = half + 1 if half % 2 == 1 else half
    comps = [k + 1 for k in range(half_sin)]
    scale_x = [math.cos(k) * math.exp(2 * k * math.log(10) / num_features) for k in comps]
    scale_y = [math.sin(k) * math.exp(2 * k * math.log(10) / num_features) for k in comps]
    centre, half_axis = (1 + n) / 2, (n - 1) / 2
    rows = []
    for t in range(n * n):
        x = ((t % n) + 1 - centre) / half_axis
        y = ((t // n) + 1 - centre) / half_axis
        if uniforms is not None:
            u_shift, u_local, u_scale = uniforms
            x, y = x + float(u_shift[0]) - 0.5, y + float(u_shift[1]) - 0.5
            delta = 2.0 / n
            x = x + float(u_local[t, 0]) * delta - delta / 2
            y = y + float(u_local[t, 1]) * delta - delta / 2
            shrink = float(u_scale) * 0.7 + 0.7
            x, y = x * shrink, y * shrink
        sines = [math.sin(math.pi * (x * scale_x[k] + y * scale_y[k])) for k in range(half_sin)]
        cosines = [math.cos(math.pi * (x * scale_x[k] + y * scale_y[k])) for k in range(half)]
        rows.append(sines + cosines)
    return torch.tensor(rows, dtype=torch.float64)


def authors_order(n: int, transposed: bool = False) -> torch.Tensor:
    """Index of posenc's row-major token (r, c) in the authors' order: t = c + n * r (their first dimension,
    the width, fastest), or t = r + n * c when their first dimension is read as the height (transposed)."""
    r, c = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
    return (r + n * c if transposed else c + n * r).reshape(-1)


def drop_extra_sine(feats: torch.Tensor, num_features: int) -> torch.Tensor:
    """The authors' features without the extra sine they emit when D/2 is odd (what posenc returns)."""
    half = num_features // 2
    if half % 2 == 0:
        return feats
    return torch.cat((feats[..., :half], feats[..., half + 1:]), dim=-1)


@pytest.mark.parametrize("num_features", [6, 16, 18, 32, 64])
@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_2d_matches_the_authors_code_on_their_grid(n, num_features):
    enc = CAPEEncoding(in_dim=2, num_features=num_features).eval()
    pos = patch_positions(n, n, "continuous", endpoint=True, dtype=torch.float64)
    theirs = authors_2d(n, num_features)
    assert theirs.shape[-1] == num_features + (1 if (num_features // 2) % 2 else 0)
    want = drop_extra_sine(theirs, num_features)[authors_order(n)]
    got = enc(pos)
    assert got.shape == (n * n, num_features)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("num_features", [6, 18, 32])
@pytest.mark.parametrize("n", [3, 5])
def test_2d_authors_transposed_gives_cos_k_to_the_rows(n, num_features):
    # the earlier default: the authors' formula with their first dimension read as the height
    enc = CAPEEncoding(in_dim=2, num_features=num_features, convention="authors_transposed").eval()
    pos = patch_positions(n, n, "continuous", endpoint=True, dtype=torch.float64)
    want = drop_extra_sine(authors_2d(n, num_features), num_features)[authors_order(n, transposed=True)]
    torch.testing.assert_close(enc(pos), want, rtol=0, atol=1e-12)
    default = CAPEEncoding(in_dim=2, num_features=num_features).eval()(pos)
    assert (default - enc(pos)).abs().max() > 0.5  # the axis matters on a real image
    # exchanging rows and columns of the positions maps one convention onto the other
    torch.testing.assert_close(default, enc(pos.flip(-1)), rtol=0, atol=1e-12)
    assert enc.grid_endpoint and enc.min_global_scaling == 0.7 and enc.scaling_distribution == "uniform"


def test_2d_seed_beyond_a_generator_seed_is_refused_at_construction():
    CAPEEncoding(in_dim=2, num_features=8, seed=2**64 - 1)
    with pytest.raises(ValueError, match="seed must be at most 2\\*\\*64 - 1"):
        CAPEEncoding(in_dim=2, num_features=8, seed=2**64)
    with pytest.raises(ValueError, match="seed"):
        CAPEEncoding(in_dim=1, num_features=8).reset_generator(2**70)


@pytest.mark.parametrize("num_features", [16, 18])
def test_2d_training_matches_the_authors_code_on_the_same_draws(num_features):
    # the same uniforms, fed to their formula and drawn by posenc in its documented order
    # (global shift (B, 1, 2), local shift (B, N, 2), scale (B, 1, 1)): the augmented features agree
    n, batch = 5, 3
    enc = CAPEEncoding(in_dim=2, num_features=num_features, seed=11).train()
    pos = patch_positions(n, n, "continuous", endpoint=True, dtype=torch.float64)
    got = enc(pos.expand(batch, -1, -1))
    g = torch.Generator().manual_seed(11)
    u_shift = torch.rand((batch, 1, 2), generator=g, dtype=torch.float64)
    u_local = torch.rand((batch, n * n, 2), generator=g, dtype=torch.float64)
    u_scale = torch.rand((batch, 1, 1), generator=g, dtype=torch.float64)
    order = authors_order(n)
    for b in range(batch):
        local = torch.empty_like(u_local[b])
        local[order] = u_local[b]  # posenc's token (r, c) is their token c + n r
        # posenc draws (row, col) pairs; their x is the column: the same draws with the axes exchanged
        theirs = authors_2d(n, num_features, (u_shift[b, 0].flip(-1), local.flip(-1), u_scale[b, 0, 0]))
        torch.testing.assert_close(got[b], drop_extra_sine(theirs, num_features)[order], rtol=0, atol=1e-12)


def test_2d_text_convention_is_the_earlier_reading():
    enc = CAPEEncoding(in_dim=2, num_features=24, convention="text").eval()
    assert enc.grid_endpoint is False and enc.scaling_distribution == "log_uniform"
    assert enc.min_global_scaling == pytest.approx(1 / 1.4)
    pos = torch.tensor([[0.0, 0.0], [0.25, -0.75], [-1.0, 1.0], [0.6, 0.1]], dtype=torch.float64)
    want = torch.tensor([reference_2d_text(float(y), float(x), 24) for y, x in pos], dtype=torch.float64)
    torch.testing.assert_close(enc(pos), want, rtol=0, atol=1e-12)
    # the two conventions differ on the same positions (by up to ~2, as measured against the authors' code)
    authors = CAPEEncoding(in_dim=2, num_features=24).eval()
    assert float((authors(pos) - enc(pos)).abs().max()) > 1.0


def test_2d_channels_mix_both_axes_unlike_the_per_axis_split():
    w = CAPEEncoding(in_dim=2, num_features=64).frequencies()  # (2, K): rows w_row, w_col
    k = torch.arange(1, 33, dtype=torch.float64)
    rho = 10 ** (2 * k / 64)
    torch.testing.assert_close(w.norm(dim=0), math.pi * rho)  # |w_k| = pi rho_k, k = 1..D/2
    # angle k measured from the columns (the image's width): w_col = rho cos k, w_row = rho sin k
    torch.testing.assert_close(torch.atan2(w[0], w[1]), torch.atan2(torch.sin(k), torch.cos(k)))
    # the per-axis split has every channel along one axis; CAPE's are not
    assert bool(((w[0].abs() > 1e-3) & (w[1].abs() > 1e-3)).sum() > 28)
    # and the embedding of (y, x) differs from that of (x, y)
    enc = CAPEEncoding(in_dim=2, num_features=64).eval()
    a, b = enc(torch.tensor([[0.2, 0.7], [0.7, 0.2]]))
    assert not torch.allclose(a, b)


def test_scale_is_uniform_on_0_7_1_4_by_default(monkeypatch):
    # capture the augmented positions the encoding embeds; with no shifts they are lambda * positions
    import posenc.encodings.cape as cape_module

    seen = {}
    real = cape_module.cape_features

    def spy(positions, freqs):
        seen["x"] = positions
        return real(positions, freqs)

    monkeypatch.setattr(cape_module, "cape_features", spy)
    enc = CAPEEncoding(in_dim=2, num_features=8, max_global_shift=0.0, max_local_shift=0.0, seed=0).train()
    assert (enc.min_global_scaling, enc.max_global_scaling, enc.scaling_distribution) == (0.7, 1.4, "uniform")
    enc(torch.ones(20000, 1, 2))
    lam = seen["x"][:, 0, 0].double()
    torch.testing.assert_close(seen["x"][:, 0, 1].double(), lam)  # shared by the axes
    assert stats.kstest(lam.numpy(), "uniform", args=(0.7, 0.7)).pvalue > 1e-3
    # the test can fail: the log-uniform reading of the paper's text is rejected at this size
    assert stats.kstest(lam.log().numpy(), "uniform", args=(-math.log(1.4), 2 * math.log(1.4))).pvalue < 1e-6
    assert stats.kstest(lam.numpy(), "uniform", args=(1 / 1.4, 1.4 - 1 / 1.4)).pvalue < 1e-6
    # the "text" convention draws it log-uniform on [1/1.4, 1.4]
    CAPEEncoding(in_dim=2, num_features=8, max_global_shift=0.0, max_local_shift=0.0, seed=0,
                 convention="text").train()(torch.ones(20000, 1, 2))
    lam = seen["x"][:, 0, 0].double()
    assert stats.kstest(lam.log().numpy(), "uniform", args=(-math.log(1.4), 2 * math.log(1.4))).pvalue > 1e-3


def test_scaling_defaults_follow_the_arguments():
    # max given without min: 1 / max (so max = 1 switches scaling off, as before)
    off = CAPEEncoding(in_dim=2, num_features=8, max_global_scaling=1.0)
    assert off.min_global_scaling == 1.0 and off.max_global_shift == 0.5
    only_scale = CAPEEncoding(in_dim=2, num_features=8, max_global_shift=0.0, max_local_shift=0.0,
                              max_global_scaling=1.0)
    assert only_scale.augments is False
    two = CAPEEncoding(in_dim=2, num_features=8, max_global_scaling=2.0)
    assert two.min_global_scaling == 0.5 and two.scaling_distribution == "uniform"
    both = CAPEEncoding(in_dim=2, num_features=8, max_global_scaling=1.4, min_global_scaling=0.7,
                        scaling_distribution="log_uniform")
    assert (both.min_global_scaling, both.scaling_distribution) == (0.7, "log_uniform")
    assert CAPEEncoding(in_dim=1, num_features=8).scaling_distribution == "log_uniform"


def test_rng_follows_torch_manual_seed_unless_seeded():
    pos = torch.arange(10.0).reshape(1, 10, 1).expand(3, 10, 1)
    grid = patch_positions(4, 4, "continuous", endpoint=True)[None].expand(3, -1, -1)
    for in_dim, x in ((1, pos), (2, grid)):
        torch.manual_seed(5)
        a = CAPEEncoding(in_dim=in_dim, num_features=16).train()(x)
        torch.manual_seed(5)
        b = CAPEEncoding(in_dim=in_dim, num_features=16).train()(x)
        torch.manual_seed(6)
        c = CAPEEncoding(in_dim=in_dim, num_features=16).train()(x)
        assert torch.equal(a, b) and not torch.allclose(a, c)
        # a seeded module ignores the global seed and repeats itself after reset_generator()
        torch.manual_seed(5)
        s1 = CAPEEncoding(in_dim=in_dim, num_features=16, seed=2).train()
        d = s1(x)
        torch.manual_seed(6)
        s2 = CAPEEncoding(in_dim=in_dim, num_features=16, seed=2).train()
        assert torch.equal(s2(x), d) and not torch.allclose(d, a)
        s1.reset_generator()
        assert torch.equal(s1(x), d)
    # two default models no longer draw identical augmentations once the global seed moves on
    torch.manual_seed(0)
    enc = CAPEEncoding(in_dim=2, num_features=16).train()
    assert not torch.allclose(enc(grid), enc(grid))


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
    pos = patch_positions(3, 5, "continuous", endpoint=True, dtype=torch.float64)[None].expand(4, -1, -1)
    got = enc(pos)
    kw = dict(max_global_shift=0.5, max_local_shift=0.5, max_global_scaling=1.4, min_global_scaling=0.7,
              scaling_distribution="uniform")
    aug = cape_augment(pos, spacing=grid_cell(pos, endpoint=True), generator=torch.Generator().manual_seed(5), **kw)
    torch.testing.assert_close(got, cape_features(aug, enc.frequencies()), rtol=0, atol=1e-12)
    # the local shift's unit is the patch width 2/n (+-1/n at 0.5), not the linspace spacing 2/(n-1)
    torch.testing.assert_close(grid_cell(pos, endpoint=True)[0, 0], torch.tensor([2 / 3, 2 / 5], dtype=torch.float64))
    torch.testing.assert_close(grid_spacing(pos)[0, 0], torch.tensor([2 / 2, 2 / 4], dtype=torch.float64))
    # an explicit spacing and generator override the measured width and the module's generator
    g = torch.Generator().manual_seed(1)
    got = enc(pos, generator=g, spacing=(0.1, 0.2))
    aug = cape_augment(pos, spacing=(0.1, 0.2), generator=torch.Generator().manual_seed(1), **kw)
    torch.testing.assert_close(got, cape_features(aug, enc.frequencies()), rtol=0, atol=1e-12)
    # the "text" convention: patch centres, their spacing, log-uniform scale on [1/1.4, 1.4]
    text = CAPEEncoding(in_dim=2, num_features=32, seed=5, convention="text").train()
    centres = patch_positions(3, 5, "continuous", dtype=torch.float64)[None].expand(4, -1, -1)
    aug = cape_augment(centres, max_global_shift=0.5, max_local_shift=0.5, max_global_scaling=1.4,
                       spacing=grid_spacing(centres), generator=torch.Generator().manual_seed(5))
    torch.testing.assert_close(text(centres), cape_features(aug, text.frequencies()), rtol=0, atol=1e-12)


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
    enc = CAPEEncoding(in_dim=2, num_features=32, seed=0)
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
        (dict(in_dim=2, convention="paper"), ValueError, "convention"),
        (dict(in_dim=2, min_global_scaling=1.5), ValueError, "min_global_scaling"),
        (dict(in_dim=2, min_global_scaling=0.0), ValueError, "min_global_scaling"),
        (dict(in_dim=2, min_global_scaling="0.7"), TypeError, "min_global_scaling"),
        (dict(in_dim=2, scaling_distribution="normal"), ValueError, "scaling_distribution"),
        # issue #23 section 5: accepted as finite before, then float32 overflowed to NaN features
        (dict(max_global_shift=1e300), ValueError, "max_global_shift must be <= 1e"),
        (dict(in_dim=2, base=1e300), ValueError, "base must be > 1 and <= 1e"),
        (dict(base=1e300), ValueError, "base must be > 1 and <= 1e"),
        (dict(max_local_shift=1e300), ValueError, "max_local_shift must be <= 1e"),
        (dict(max_global_scaling=1e300), ValueError, "max_global_scaling must be <= 1e"),
        (dict(in_dim=2, spacing=1e300), ValueError, "spacing must be <= 1e"),
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
    with pytest.raises(TypeError, match="patch positions"):
        enc2(torch.zeros(1, 4, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="spacing"):
        enc2(torch.zeros(1, 4, 2), spacing=(0.1, 0.2, 0.3))


def test_limits_cannot_overflow_to_nan():
    # issue #23 section 5: the largest accepted limits give finite features, and positions whose
    # phase overflows float32 are refused with an error naming them instead of NaN features
    big = CAPEEncoding(in_dim=2, num_features=16, max_global_shift=1e15, max_local_shift=1e15,
                       max_global_scaling=1e15, base=1e15, seed=0).train()
    grid = patch_positions(3, 3, "continuous", endpoint=True)[None].expand(2, -1, -1)
    with pytest.raises(ValueError, match="positions overflow|positions times CAPE's frequencies overflow"):
        big(grid)
    assert bool(torch.isfinite(big(grid.double())).all())  # float64 positions: computed in float64
    ok = CAPEEncoding(in_dim=2, num_features=16, max_global_shift=1e15, base=1e15, seed=0).train()
    assert bool(torch.isfinite(ok(grid)).all())  # |phase| <= ~1e31: finite in float32
    shift = CAPEEncoding(in_dim=1, num_features=16, max_global_shift=1e15, seed=0).train()
    assert bool(torch.isfinite(shift(torch.arange(6.0).reshape(1, 6, 1))).all())
    one_d = CAPEEncoding(in_dim=1, num_features=16, freq_scale=1e15).eval()
    with pytest.raises(ValueError, match="positions times CAPE's frequencies overflow"):
        one_d(torch.tensor([[1e30]]))
    assert bool(torch.isfinite(one_d(torch.tensor([[1e20]]))).all())


def test_tinyvit_gives_cape_the_authors_grid():
    seen = {}
    enc = CAPEEncoding(in_dim=2, num_features=16).eval()
    enc.register_forward_pre_hook(lambda m, args: seen.setdefault("pos", args[0]))
    vit = TinyViT(num_classes=3, patch_size=4, dim=16, num_heads=2, positions="continuous", encoding=enc).eval()
    vit(torch.randn(2, 1, 12, 20))
    torch.testing.assert_close(seen["pos"], patch_positions(3, 5, "continuous", endpoint=True))
    lin = torch.linspace(-1, 1, 5)
    torch.testing.assert_close(seen["pos"][:5, 1], lin)
    torch.testing.assert_close(seen["pos"][::5, 0], torch.linspace(-1, 1, 3))
    # the "text" convention keeps patch centres
    seen.clear()
    text = CAPEEncoding(in_dim=2, num_features=16, convention="text").eval()
    text.register_forward_pre_hook(lambda m, args: seen.setdefault("pos", args[0]))
    TinyViT(num_classes=3, patch_size=4, dim=16, num_heads=2, positions="continuous", encoding=text).eval()(
        torch.randn(2, 1, 12, 20))
    torch.testing.assert_close(seen["pos"], patch_positions(3, 5, "continuous"))


def test_patch_positions_endpoint():
    pos = patch_positions(1, 4, "continuous", endpoint=True, dtype=torch.float64)
    torch.testing.assert_close(pos, torch.tensor([[0.0, -1.0], [0.0, -1 / 3], [0.0, 1 / 3], [0.0, 1.0]],
                                                 dtype=torch.float64))  # one patch: the centre
    with pytest.raises(TypeError, match="endpoint"):
        patch_positions(2, 2, "continuous", endpoint=1)
