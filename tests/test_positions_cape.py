"""cape_augment and grid_spacing (posenc.positions): formula, distributions, order, masks, generators."""

import math

import pytest
import torch
from scipy import stats

from posenc.models import patch_positions
from posenc.positions import LIMIT_MAX, cape_augment, grid_cell, grid_spacing


def reference_augment(x, mask, dmax, emax, lmax, center, spacing, gen):
    """The paper's order written as loops in float64, the draws replayed from ``gen``.

    Draws, as documented: Delta (per sample and axis), eps (per token and axis),
    log lambda (per sample), each as one torch.rand call.
    """
    b, n, d = x.shape
    u_delta = torch.rand((b, 1, d), generator=gen, dtype=torch.float64)
    u_eps = torch.rand((b, n, d), generator=gen, dtype=torch.float64)
    u_lam = torch.rand((b, 1, 1), generator=gen, dtype=torch.float64)
    out = [[[0.0] * d for _ in range(n)] for _ in range(b)]
    for s in range(b):
        real = [i for i in range(n) if not mask[s][i]]
        lam = math.exp((2 * float(u_lam[s, 0, 0]) - 1) * math.log(lmax))
        for a in range(d):
            mean = sum(float(x[s, i, a]) for i in real) / len(real) if center else 0.0
            delta = (2 * float(u_delta[s, 0, a]) - 1) * dmax
            for i in range(n):
                if mask[s][i]:
                    out[s][i][a] = float(x[s, i, a])
                    continue
                eps = (2 * float(u_eps[s, i, a]) - 1) * emax * spacing[a]
                out[s][i][a] = lam * (float(x[s, i, a]) - mean + delta + eps)
    return torch.tensor(out, dtype=torch.float64)


@pytest.mark.parametrize("center", [False, True])
def test_matches_loop_reference(center):
    x = torch.randn(3, 5, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(1)) * 4
    mask = torch.tensor([[False, False, True, False, True], [False] * 5, [True, False, False, False, False]])
    gen = torch.Generator().manual_seed(7)
    ref_gen = torch.Generator().manual_seed(7)
    got = cape_augment(x, max_global_shift=0.7, max_local_shift=0.4, max_global_scaling=1.5, mean_center=center,
                       spacing=(0.25, 0.5), key_padding_mask=mask, generator=gen)
    want = reference_augment(x, mask.tolist(), 0.7, 0.4, 1.5, center, (0.25, 0.5), ref_gen)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


def _ks(values: torch.Tensor, dist: str, args: tuple) -> float:
    return stats.kstest(values.double().numpy(), dist, args=args).pvalue


def test_global_shift_is_uniform_per_sample_and_axis():
    gen = torch.Generator().manual_seed(0)
    out = cape_augment(torch.zeros(20000, 4, 2), max_global_shift=2.0, generator=gen)
    # one draw per sample: identical across the tokens of a sample
    assert torch.equal(out, out[:, :1].expand_as(out))
    for a in range(2):
        assert _ks(out[:, 0, a], "uniform", (-2.0, 4.0)) > 1e-3
    # per axis: x and y shifts are independent draws
    assert not torch.equal(out[:, 0, 0], out[:, 0, 1])
    assert abs(float(torch.corrcoef(out[:, 0].T)[0, 1])) < 0.03
    # the test can fail: a shift twice too wide is rejected
    assert _ks(out[:, 0, 0], "uniform", (-4.0, 8.0)) < 1e-6


def test_local_shift_is_uniform_per_token_in_spacing_units():
    gen = torch.Generator().manual_seed(1)
    out = cape_augment(torch.zeros(500, 40, 2), max_local_shift=0.5, spacing=(0.25, 0.1), generator=gen)
    assert _ks(out[..., 0].flatten(), "uniform", (-0.125, 0.25)) > 1e-3
    assert _ks(out[..., 1].flatten(), "uniform", (-0.05, 0.1)) > 1e-3
    # per token: neighbouring tokens are not equal and not correlated
    assert abs(float(torch.corrcoef(torch.stack((out[:, 0, 0], out[:, 1, 0])))[0, 1])) < 0.15
    assert not torch.equal(out[:, 0], out[:, 1])


def test_scaling_is_log_uniform_and_shared_by_axes():
    gen = torch.Generator().manual_seed(2)
    out = cape_augment(torch.ones(20000, 3, 2), max_global_scaling=1.4, generator=gen)
    assert torch.equal(out, out[:, :1, :1].expand_as(out))  # one lambda per sample, both axes
    lam = out[:, 0, 0]
    assert _ks(lam.log(), "uniform", (-math.log(1.4), 2 * math.log(1.4))) > 1e-3
    # the test can fail: a lambda uniform on [1/1.4, 1.4] (gcambara's CAPE2d code, the
    # authors' ViT code) is a different distribution and is rejected at this size
    assert _ks(lam, "uniform", (1 / 1.4, 1.4 - 1 / 1.4)) < 1e-6


def test_scaling_uniform_on_a_range():
    # the authors' 2D code: lambda = 0.7 + 0.7 u, uniform on [0.7, 1.4]
    gen = torch.Generator().manual_seed(2)
    out = cape_augment(torch.ones(20000, 3, 2), max_global_scaling=1.4, min_global_scaling=0.7,
                       scaling_distribution="uniform", generator=gen)
    assert torch.equal(out, out[:, :1, :1].expand_as(out))
    lam = out[:, 0, 0]
    assert float(lam.min()) >= 0.7 and float(lam.max()) <= 1.4
    assert _ks(lam, "uniform", (0.7, 0.7)) > 1e-3
    assert _ks(lam, "uniform", (1 / 1.4, 1.4 - 1 / 1.4)) < 1e-6  # [1/1.4, 1.4] is rejected at this size
    # the same draw u maps to 0.7 + 0.7 u: replayed from the generator
    g = torch.Generator().manual_seed(3)
    torch.rand((5, 1, 2), generator=g, dtype=torch.float64)  # global shift, then local shift, then the scale
    torch.rand((5, 2, 2), generator=g, dtype=torch.float64)
    u = torch.rand((5, 1, 1), generator=g, dtype=torch.float64)
    got = cape_augment(torch.ones(5, 2, 2, dtype=torch.float64), max_global_scaling=1.4, min_global_scaling=0.7,
                       scaling_distribution="uniform", generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(got[:, :1, :1], 0.7 + 0.7 * u, rtol=0, atol=1e-12)


def test_scaling_log_uniform_on_an_asymmetric_range():
    gen = torch.Generator().manual_seed(4)
    out = cape_augment(torch.ones(20000, 1, 1), max_global_scaling=2.0, min_global_scaling=0.9, generator=gen)
    assert _ks(out[:, 0, 0].log(), "uniform", (math.log(0.9), math.log(2.0) - math.log(0.9))) > 1e-3
    # the default minimum 1/max gives the symmetric draw, bit for bit
    a = cape_augment(torch.ones(7, 3, 1), max_global_scaling=1.3, generator=torch.Generator().manual_seed(1))
    b = cape_augment(torch.ones(7, 3, 1), max_global_scaling=1.3, min_global_scaling=None,
                     generator=torch.Generator().manual_seed(1))
    assert torch.equal(a, b)


def test_order_shift_then_scale():
    # x = (0, 1): with shift-then-scale, out0 = lambda * Delta, whose range exceeds
    # max_global_shift; with scale-then-shift, out0 = Delta could never leave it.
    gen = torch.Generator().manual_seed(3)
    x = torch.tensor([0.0, 1.0]).reshape(1, 2, 1).expand(5000, 2, 1)
    out = cape_augment(x, max_global_shift=1.0, max_global_scaling=2.0, generator=gen, spacing=1.0)
    lam = out[:, 1, 0] - out[:, 0, 0]
    assert lam.min() >= 0.5 - 1e-6 and lam.max() <= 2.0 + 1e-6
    assert out[:, 0, 0].abs().max() > 1.5
    torch.testing.assert_close((out[:, 0, 0] / lam).abs().max(), torch.tensor(1.0), atol=1e-3, rtol=0)


def test_order_local_shift_then_scale():
    gen = torch.Generator().manual_seed(4)
    x = torch.tensor([0.0, 10.0]).reshape(1, 2, 1).expand(5000, 2, 1)
    out = cape_augment(x, max_local_shift=0.5, max_global_scaling=2.0, generator=gen)
    assert out[:, 0, 0].abs().max() > 0.75  # lambda * eps leaves [-0.5, 0.5]; eps alone could not


def test_order_centre_before_shift():
    # centring after the shift would cancel it; before, the shift survives
    gen = torch.Generator().manual_seed(5)
    x = torch.tensor([1.0, 3.0]).reshape(1, 2, 1).expand(1000, 2, 1)
    out = cape_augment(x, max_global_shift=1.0, mean_center=True, generator=gen)
    centred = torch.tensor([-1.0, 1.0]).reshape(1, 2, 1)
    shift = out - centred
    assert torch.allclose(shift[:, 0], shift[:, 1])  # a pure global shift of the centred positions
    assert shift.abs().max() > 0.9 and shift.abs().max() <= 1.0


def test_switching_one_augmentation_off_keeps_the_other_draws():
    x = torch.randn(4, 6, 1, generator=torch.Generator().manual_seed(0))
    a = cape_augment(x, max_global_shift=1.0, max_local_shift=0.5, max_global_scaling=1.0,
                     generator=torch.Generator().manual_seed(9))
    b = cape_augment(x, max_global_shift=1.0, max_local_shift=0.5, max_global_scaling=1.3,
                     generator=torch.Generator().manual_seed(9))
    lam = b / a  # same Delta and eps; only the scale differs
    torch.testing.assert_close(lam, lam[:, :1].expand_as(lam))


def test_padding_untouched_and_never_moves_the_mean():
    x = torch.randn(3, 6, 2, generator=torch.Generator().manual_seed(0))
    mask = torch.zeros(3, 6, dtype=torch.bool)
    mask[0, 4:] = True
    mask[2, 0] = True
    kw = dict(max_global_shift=0.5, max_local_shift=0.5, max_global_scaling=1.2, mean_center=True, key_padding_mask=mask)
    out = cape_augment(x, generator=torch.Generator().manual_seed(1), **kw)
    assert torch.equal(out[mask], x[mask])
    moved = x.clone()
    moved[mask] = 1e6
    out2 = cape_augment(moved, generator=torch.Generator().manual_seed(1), **kw)
    torch.testing.assert_close(out2[~mask], out[~mask], rtol=0, atol=1e-6)
    assert torch.equal(out2[mask], moved[mask])
    # centring only: the real tokens' mean is zero
    c = cape_augment(x, mean_center=True, key_padding_mask=mask)
    real = (~mask)[..., None].float()
    torch.testing.assert_close((c * real).sum(1) / real.sum(1), torch.zeros(3, 2), atol=1e-6, rtol=0)


def test_generator_rules():
    x = torch.randn(2, 5, 1)
    kw = dict(max_global_shift=1.0, max_local_shift=0.5, max_global_scaling=1.1)
    a = cape_augment(x, generator=torch.Generator().manual_seed(3), **kw)
    b = cape_augment(x, generator=torch.Generator().manual_seed(3), **kw)
    c = cape_augment(x, generator=torch.Generator().manual_seed(4), **kw)
    assert torch.equal(a, b) and not torch.equal(a, c)
    state = torch.get_rng_state()
    cape_augment(x, generator=torch.Generator().manual_seed(3), **kw)
    assert torch.equal(torch.get_rng_state(), state)  # the given generator, not the global one
    torch.manual_seed(11)
    d = cape_augment(x, **kw)
    torch.manual_seed(11)
    assert torch.equal(d, cape_augment(x, **kw))  # without a generator: torch's default one


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_draws_on_the_positions_device():  # pragma: no cover - no GPU in CI
    x = torch.zeros(2, 4, 2, device="cuda")
    out = cape_augment(x, max_global_shift=1.0, generator=torch.Generator(device="cuda").manual_seed(0))
    assert out.device == x.device
    with pytest.raises(ValueError, match="generator"):
        cape_augment(x, max_global_shift=1.0, generator=torch.Generator().manual_seed(0))


def test_generator_on_another_device_is_rejected():
    x = torch.zeros(2, 4, 1, device="meta")
    with pytest.raises(ValueError, match="generator must be on the positions' device meta"):
        cape_augment(x, max_global_shift=1.0, generator=torch.Generator())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_positions_are_augmented_in_float32(dtype):
    x = torch.arange(12.0).reshape(2, 6, 1)
    kw = dict(max_global_shift=3.0, max_local_shift=0.5, max_global_scaling=1.1)
    half = cape_augment(x.to(dtype), generator=torch.Generator().manual_seed(0), **kw)
    full = cape_augment(x, generator=torch.Generator().manual_seed(0), **kw)
    assert half.dtype == dtype
    torch.testing.assert_close(half, full.to(dtype))


def test_float64_end_to_end():
    x = torch.randn(2, 3, 1, dtype=torch.float64)
    out = cape_augment(x, max_global_shift=1.0, generator=torch.Generator().manual_seed(0))
    assert out.dtype == torch.float64


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(max_global_shift=-1.0), ValueError, "max_global_shift"),
        (dict(max_global_shift=math.inf), ValueError, "max_global_shift"),
        (dict(max_local_shift=math.nan), ValueError, "max_local_shift"),
        (dict(max_local_shift=-0.1), ValueError, "max_local_shift"),
        (dict(max_global_scaling=0.9), ValueError, "max_global_scaling must be finite and >= 1"),
        (dict(max_global_scaling=math.inf), ValueError, "max_global_scaling"),
        (dict(max_global_shift=True), TypeError, "max_global_shift"),
        (dict(max_global_shift="1"), TypeError, "max_global_shift"),
        (dict(mean_center=1), TypeError, "mean_center"),
        (dict(spacing=(1.0, 2.0, 3.0)), ValueError, "spacing"),
        (dict(spacing=-1.0), ValueError, "spacing"),
        (dict(spacing=torch.tensor([1.0, -2.0])), ValueError, "spacing"),
        (dict(spacing=object()), TypeError, "spacing"),
        (dict(key_padding_mask=torch.zeros(2, 4)), TypeError, "key_padding_mask must be a bool"),
        (dict(key_padding_mask=torch.zeros(2, 5, dtype=torch.bool)), ValueError, r"key_padding_mask must have .*\(2, 4\)"),
        (dict(key_padding_mask=torch.tensor([[True] * 4, [False] * 4])), ValueError, "pads every token"),
        (dict(key_padding_mask=[[False] * 4] * 2), TypeError, "key_padding_mask"),
        (dict(generator=1), TypeError, "generator"),
        (dict(min_global_scaling=1.2), ValueError, "min_global_scaling"),
        (dict(min_global_scaling=-0.5), ValueError, "min_global_scaling"),
        (dict(min_global_scaling=1e-300), ValueError, "min_global_scaling"),
        (dict(scaling_distribution="gaussian"), ValueError, "scaling_distribution"),
        # issue #23 section 5: finite but beyond float32: NaN/inf before, refused now
        (dict(max_global_shift=1e300), ValueError, "max_global_shift must be <= 1e"),
        (dict(max_local_shift=1e300), ValueError, "max_local_shift must be <= 1e"),
        (dict(max_global_scaling=1e300), ValueError, "max_global_scaling must be <= 1e"),
        (dict(spacing=1e300), ValueError, "spacing must be <= 1e"),
    ],
)
def test_bad_input(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        cape_augment(torch.zeros(2, 4, 2), **kwargs)


def test_bad_positions():
    with pytest.raises(ValueError, match=r"positions must have shape \(\.\.\., N, D\)"):
        cape_augment(torch.zeros(4), max_global_shift=1.0)
    with pytest.raises(TypeError, match="positions must be a floating"):
        cape_augment(torch.zeros(2, 4, 1, dtype=torch.long))
    with pytest.raises(ValueError, match="positions contains 1 non-finite"):
        cape_augment(torch.tensor([[[0.0], [math.nan]]]))
    with pytest.raises(TypeError, match="positions must be a torch.Tensor"):
        cape_augment([[0.0]])


def test_grid_spacing():
    for rows, cols in ((4, 4), (3, 7), (1, 5), (1, 1)):
        pos = patch_positions(rows, cols, "continuous", dtype=torch.float64)
        got = grid_spacing(pos[None])
        want = torch.tensor([[[2 / rows if rows > 1 else 2.0, 2 / cols if cols > 1 else 2.0]]], dtype=torch.float64)
        torch.testing.assert_close(got, want)
    # with 1 patch per axis the local shift is +-1/N = +-1 = half of 2, as for any N
    pos = patch_positions(2, 4, "continuous")[None].expand(3, -1, -1).clone()
    mask = torch.zeros(3, 8, dtype=torch.bool)
    mask[1, 4:] = True  # second sample: only the first row is real
    pos[1, 4:] = 123.0
    got = grid_spacing(pos, mask)
    torch.testing.assert_close(got[:, 0], torch.tensor([[1.0, 0.5], [2.0, 0.5], [1.0, 0.5]]))


def test_grid_spacing_of_expanded_positions_equals_the_copy():
    # a batch sharing one grid through expand() is measured once; same answer as a real copy
    grid = patch_positions(3, 5, "continuous")
    shared = grid.expand(4, 2, *grid.shape)
    out = grid_spacing(shared)
    assert out.shape == (4, 2, 1, 2)
    torch.testing.assert_close(out, grid_spacing(shared.contiguous()))
    torch.testing.assert_close(out[0, 0, 0], torch.tensor([2 / 3, 2 / 5]))


def test_largest_limits_stay_finite_or_are_refused():
    x = torch.randn(3, 4, 2)
    out = cape_augment(x, max_global_shift=LIMIT_MAX, max_local_shift=1.0, max_global_scaling=LIMIT_MAX,
                       generator=torch.Generator().manual_seed(0))
    assert bool(torch.isfinite(out).all())
    # limits that overflow float32 only together (local shift 1e15 patch widths of 1e15, scaled by 1e15)
    with pytest.raises(ValueError, match="positions overflow torch.float32 once augmented"):
        cape_augment(x, max_local_shift=LIMIT_MAX, spacing=LIMIT_MAX, max_global_scaling=LIMIT_MAX,
                     generator=torch.Generator().manual_seed(0))
    # float64 positions are augmented in float64: no overflow there
    out = cape_augment(x.double(), max_local_shift=LIMIT_MAX, spacing=LIMIT_MAX, max_global_scaling=LIMIT_MAX,
                       generator=torch.Generator().manual_seed(0))
    assert bool(torch.isfinite(out).all())
    with pytest.raises(ValueError, match="positions overflow"):
        cape_augment(torch.full((10, 2, 1), 3e38), max_global_scaling=LIMIT_MAX,
                     generator=torch.Generator().manual_seed(0))


def test_grid_cell():
    for n in (2, 3, 7):
        lin = patch_positions(n, n, "continuous", endpoint=True, dtype=torch.float64)[None]
        cen = patch_positions(n, n, "continuous", dtype=torch.float64)[None]
        want = torch.full((1, 1, 2), 2 / n, dtype=torch.float64)
        torch.testing.assert_close(grid_cell(lin, endpoint=True), want)   # width 2/n, not the spacing 2/(n-1)
        torch.testing.assert_close(grid_cell(cen), want)
        torch.testing.assert_close(grid_spacing(lin), torch.full((1, 1, 2), 2 / (n - 1), dtype=torch.float64))
    one = patch_positions(1, 4, "continuous", endpoint=True)[None]
    torch.testing.assert_close(grid_cell(one, endpoint=True), torch.tensor([[[2.0, 0.5]]]))
    shared = patch_positions(3, 5, "continuous", endpoint=True).expand(4, 15, 2)
    torch.testing.assert_close(grid_cell(shared, endpoint=True), grid_cell(shared.contiguous(), endpoint=True))
    with pytest.raises(TypeError, match="endpoint"):
        grid_cell(one, endpoint="yes")
