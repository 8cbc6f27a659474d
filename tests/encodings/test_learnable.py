import inspect
import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from posenc.encodings import (
    CoordinateMLPEncoding,
    LearnableFourierEncoding,
    LearnedTableEncoding,
    create_encoding,
    encoding_class,
    resample_table,
)


# ---------------------------------------------------------------- references
def lff_reference(x: np.ndarray, w_r: np.ndarray, mlp) -> np.ndarray:
    """Algorithm 1 of Li et al. (2021) with explicit loops, float64. x: (N, G, M)."""
    n, g, _ = x.shape
    f2 = w_r.shape[0]
    w1, b1, w2, b2 = (p.detach().double().numpy() for p in (mlp[0].weight, mlp[0].bias, mlp[2].weight, mlp[2].bias))
    out = []
    for i in range(n):
        row = []
        for j in range(g):
            proj = [float(np.dot(x[i, j], w_r[k])) for k in range(f2)]
            feats = np.array([math.cos(p) for p in proj] + [math.sin(p) for p in proj]) / math.sqrt(2 * f2)
            h = w1 @ feats + b1
            h = 0.5 * h * (1.0 + np.vectorize(math.erf)(h / math.sqrt(2.0)))  # exact GeLU
            row.append(w2 @ h + b2)
        out.append(np.concatenate(row))
    return np.array(out)


def linear_1d_reference(table: np.ndarray, n_out: int) -> np.ndarray:
    """Half-pixel linear resampling with a loop (align_corners=False, edge clamp)."""
    n_in = table.shape[0]
    out = np.zeros((n_out, table.shape[1]))
    for i in range(n_out):
        src = max((i + 0.5) * n_in / n_out - 0.5, 0.0)
        i0 = int(math.floor(src))
        i1 = min(i0 + 1, n_in - 1)
        lam = src - i0
        out[i] = (1 - lam) * table[i0] + lam * table[i1]
    return out


def _cubic(t: float, a: float = -0.75) -> float:
    t = abs(t)
    if t <= 1:
        return (a + 2) * t**3 - (a + 3) * t**2 + 1
    if t < 2:
        return a * t**3 - 5 * a * t**2 + 8 * a * t - 4 * a
    return 0.0


def bicubic_reference(table: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Keys cubic convolution (a=-0.75), half-pixel centres, replicated borders; separable loops."""

    def axis(arr: np.ndarray, n_out: int, ax: int) -> np.ndarray:
        arr = np.moveaxis(arr, ax, 0)
        n_in = arr.shape[0]
        out = np.zeros((n_out,) + arr.shape[1:])
        for i in range(n_out):
            src = (i + 0.5) * n_in / n_out - 0.5
            base = int(math.floor(src))
            for k in range(-1, 3):
                idx = min(max(base + k, 0), n_in - 1)
                out[i] += _cubic(src - (base + k)) * arr[idx]
        return np.moveaxis(out, 0, ax)

    return axis(axis(table, size[0], 0), size[1], 1)


# ---------------------------------------------------------------- LFF
def test_lff_matches_algorithm_1_reference():
    enc = LearnableFourierEncoding(in_dim=3, num_features=8, num_groups=2, fourier_dim=6, hidden_dim=5,
                                   gamma=0.7, seed=3, dtype=torch.float64)
    x = torch.randn(4, 2, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    want = lff_reference(x.numpy(), enc.w_r.detach().numpy(), enc.mlp)
    torch.testing.assert_close(enc(x), torch.from_numpy(want), rtol=0, atol=1e-12)


@pytest.mark.parametrize("gamma", [0.1, 1.0, 10.0])
def test_w_r_has_std_one_over_gamma_not_one_over_gamma_squared(gamma):
    enc = LearnableFourierEncoding(in_dim=2, num_features=8192, fourier_dim=8192, use_mlp=False, gamma=gamma)
    std = float(enc.w_r.detach().double().std())
    assert abs(std * gamma - 1.0) < 0.05  # std 1/gamma (variance gamma^-2), as in the paper
    if gamma != 1.0:
        assert abs(std * gamma**2 - 1.0) > 0.5  # the third-party bug (std gamma^-2) would give this


def test_initial_kernel_is_gaussian_of_width_gamma():
    gamma = 0.5
    enc = LearnableFourierEncoding(in_dim=2, num_features=16384, fourier_dim=16384, use_mlp=False,
                                   gamma=gamma, dtype=torch.float64)
    d = torch.tensor([0.0, 0.25, 0.5, 1.0], dtype=torch.float64)
    x = torch.zeros(4, 2, dtype=torch.float64)  # one group: (..., M)
    y = torch.stack((d / math.sqrt(2), d / math.sqrt(2)), dim=-1)
    dots = (enc(x) * enc(y)).sum(-1)
    want = 0.5 * torch.exp(-(d**2) / (2 * gamma**2))
    torch.testing.assert_close(dots, want, atol=0.02, rtol=0)


def test_groups_are_encoded_independently_and_concatenated():
    enc = LearnableFourierEncoding(in_dim=2, num_features=12, num_groups=3, seed=1)
    x = torch.randn(5, 3, 2)
    out = enc(x)
    single = LearnableFourierEncoding(in_dim=2, num_features=4, num_groups=1, fourier_dim=4, seed=1)
    single.load_state_dict(enc.state_dict())
    for g in range(3):
        torch.testing.assert_close(out[:, 4 * g : 4 * (g + 1)], single(x[:, g]))


def test_without_mlp_output_is_the_fourier_features():
    enc = LearnableFourierEncoding(in_dim=2, num_features=8, num_groups=2, use_mlp=False, dtype=torch.float64)
    x = torch.randn(3, 2, 2, dtype=torch.float64)
    proj = x @ enc.w_r.detach().T  # (3, 2, 2)
    want = torch.cat((proj.cos(), proj.sin()), -1) / 2.0  # 1/sqrt(|F|) with |F| = 4
    torch.testing.assert_close(enc(x), want.flatten(-2))
    assert enc.mlp is None


def test_freezing_w_r_and_gradients():
    learn = LearnableFourierEncoding(in_dim=2, num_features=8)
    learn(torch.randn(4, 1, 2)).sum().backward()
    assert learn.w_r.grad is not None and learn.w_r.grad.abs().sum() > 0
    frozen = LearnableFourierEncoding(in_dim=2, num_features=8, learnable_freqs=False)
    names = {n for n, _ in frozen.named_parameters()}
    assert "w_r" not in names and "w_r" in dict(frozen.named_buffers())
    torch.testing.assert_close(frozen.w_r, learn.w_r.detach())  # same seed, same draw


def test_reset_parameters_is_seeded():
    a = LearnableFourierEncoding(in_dim=2, num_features=8, seed=5)
    before = {k: v.clone() for k, v in a.state_dict().items()}
    with torch.no_grad():
        a.w_r.add_(1.0)
    a.reset_parameters()
    for k, v in a.state_dict().items():
        torch.testing.assert_close(v, before[k])
    b = LearnableFourierEncoding(in_dim=2, num_features=8, seed=6)
    assert not torch.allclose(a.w_r, b.w_r)


@given(lead=st.lists(st.integers(1, 3), min_size=0, max_size=3), groups=st.integers(1, 3))
def test_any_leading_shape(lead, groups):
    enc = LearnableFourierEncoding(in_dim=2, num_features=4 * groups, num_groups=groups)
    group_axis = (groups,) if groups > 1 else ()  # one group: the plain (..., M) contract
    x = torch.randn(*lead, *group_axis, 2)
    out = enc(x)
    assert out.shape == (*lead, 4 * groups)
    torch.testing.assert_close(out.reshape(-1, 4 * groups), enc(x.reshape(-1, *group_axis, 2)))


def test_coord_mlp_is_mlp_on_raw_coordinates():
    enc = CoordinateMLPEncoding(in_dim=2, num_features=6, num_groups=2, hidden_dim=4)
    x = torch.randn(3, 2, 2)
    want = torch.cat([enc.mlp(x[:, g]) for g in range(2)], dim=-1)
    torch.testing.assert_close(enc(x), want)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(num_features=10, num_groups=3), "num_features"),
        (dict(num_features=8, fourier_dim=5), "fourier_dim"),
        (dict(num_features=8, fourier_dim=4, use_mlp=False), "fourier_dim"),
        (dict(num_features=8, gamma=0.0), "gamma"),
        (dict(num_features=8, hidden_dim=0), "hidden_dim"),
        (dict(num_features=8, num_groups=0), "num_groups"),
    ],
)
def test_lff_bad_constructor_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LearnableFourierEncoding(in_dim=2, **kwargs)


def test_lff_bad_positions():
    enc = LearnableFourierEncoding(in_dim=2, num_features=8, num_groups=2)
    with pytest.raises(ValueError, match=r"positions.*G, M"):
        enc(torch.zeros(5, 2))  # missing the group axis
    with pytest.raises(ValueError, match="positions"):
        enc(torch.zeros(5, 1, 2))  # wrong G
    with pytest.raises(ValueError, match="positions"):
        enc(torch.zeros(5, 2, 3))  # wrong M
    with pytest.raises(ValueError, match="positions"):
        enc(torch.tensor([[[0.0, float("nan")], [0.0, 0.0]]]))
    with pytest.raises(TypeError, match="positions"):
        enc(torch.zeros(5, 2, 2, dtype=torch.long))


# ---------------------------------------------------------------- tables
def test_table_gathers_rows():
    t = LearnedTableEncoding(in_dim=2, grid_size=(3, 4), num_features=5)
    pos = torch.tensor([[0, 0], [2, 3], [1, 2]])
    out = t(pos)
    for i, (r, c) in enumerate(pos.tolist()):
        torch.testing.assert_close(out[i], t.weight[r, c])
    torch.testing.assert_close(t(pos.float()), out)
    torch.testing.assert_close(t.table(), t.weight.reshape(12, 5))


def test_table_1d_and_2d_coincide_on_a_fixed_grid():
    t1 = LearnedTableEncoding(in_dim=1, grid_size=12, num_features=5, seed=2)
    t2 = LearnedTableEncoding(in_dim=2, grid_size=(3, 4), num_features=5, seed=2)
    torch.testing.assert_close(t1.table(), t2.table())


def test_table_init_is_truncated_normal():
    t = LearnedTableEncoding(in_dim=1, grid_size=4000, num_features=16, init_std=0.02)
    w = t.weight.detach()
    assert float(w.abs().max()) <= 0.04 + 1e-7
    assert 0.012 < float(w.std()) < 0.02  # truncation at 2 std shrinks the std to ~0.88 * 0.02


def test_linear_resample_1d_matches_loop():
    t = LearnedTableEncoding(in_dim=1, grid_size=7, num_features=3, interpolation="linear", dtype=torch.float64)
    for n in (4, 7, 13):
        want = linear_1d_reference(t.weight.detach().numpy(), n)
        torch.testing.assert_close(t.table(n), torch.from_numpy(want), rtol=0, atol=1e-12)


def test_bicubic_resample_2d_matches_loop():
    t = LearnedTableEncoding(in_dim=2, grid_size=(4, 5), num_features=3, interpolation="bicubic",
                             dtype=torch.float64)
    for size in ((8, 10), (3, 7), (4, 5)):
        want = bicubic_reference(t.weight.detach().numpy(), size).reshape(-1, 3)
        torch.testing.assert_close(t.table(size), torch.from_numpy(want), rtol=0, atol=1e-10)


def test_bicubic_resample_1d_matches_loop_along_one_axis():
    table = torch.randn(6, 2, dtype=torch.float64)
    want = bicubic_reference(table.numpy()[:, None, :], (9, 1))[:, 0]
    torch.testing.assert_close(resample_table(table, (9,), "bicubic"), torch.from_numpy(want), rtol=0, atol=1e-10)


def test_resample_runs_in_float32_and_casts_back():
    table = torch.randn(4, 4, 8).to(torch.bfloat16)
    out = resample_table(table, (6, 6), "bicubic")
    assert out.dtype == torch.bfloat16
    ref = resample_table(table.float(), (6, 6), "bicubic")
    torch.testing.assert_close(out.float(), ref, atol=0.05, rtol=0.02)


def test_resampled_table_gets_gradients():
    t = LearnedTableEncoding(in_dim=2, grid_size=4, num_features=3, interpolation="linear")
    t.table((6, 6)).sum().backward()
    assert t.weight.grad is not None and t.weight.grad.abs().sum() > 0


def test_table_smaller_grid_without_interpolation_crops():
    t = LearnedTableEncoding(in_dim=2, grid_size=(4, 5), num_features=2)
    torch.testing.assert_close(t.table((2, 3)), t.weight[:2, :3].reshape(-1, 2))


def test_table_bad_inputs():
    t = LearnedTableEncoding(in_dim=2, grid_size=(4, 5), num_features=2)
    with pytest.raises(ValueError, match="size"):
        t.table((5, 5))  # larger than the table, no resampling
    with pytest.raises(ValueError, match="positions"):
        t(torch.tensor([[4, 0]]))
    with pytest.raises(ValueError, match="positions"):
        t(torch.tensor([[-1, 0]]))
    with pytest.raises(ValueError, match="positions"):
        t(torch.tensor([[0.5, 0.0]]))
    with pytest.raises(ValueError, match="positions"):
        t(torch.tensor([[float("nan"), 0.0]]))
    with pytest.raises(ValueError, match="positions"):
        t(torch.tensor([[0, 0, 0]]))
    with pytest.raises(ValueError, match="grid_size"):
        LearnedTableEncoding(in_dim=2, grid_size=(4,))
    with pytest.raises(ValueError, match="in_dim"):
        LearnedTableEncoding(in_dim=3)
    with pytest.raises(ValueError, match="interpolation"):
        LearnedTableEncoding(interpolation="nearest")


# ---------------------------------------------------------------- registry
@pytest.mark.parametrize("name", ["sinusoidal", "learned_table", "lff", "coord_mlp"])
def test_registered_with_consistent_constructor_names(name):
    params = inspect.signature(encoding_class(name)).parameters
    for arg in ("in_dim", "num_features", "device", "dtype"):
        assert arg in params, (name, arg)
    enc = create_encoding(name, in_dim=2, num_features=8, dtype=torch.float64)
    assert enc.out_dim == 8
    assert all(p.dtype == torch.float64 for p in list(enc.parameters()) + list(enc.buffers()))


def test_one_group_takes_plain_positions():
    # (..., M) -> (..., D) like every other encoding; a group axis is only needed for G > 1
    enc = LearnableFourierEncoding(in_dim=2, num_features=8, seed=2)
    x = torch.randn(4, 5, 2)
    out = enc(x)
    assert out.shape == (4, 5, 8)
    two = LearnableFourierEncoding(in_dim=2, num_features=16, num_groups=2, seed=2)
    with pytest.raises(ValueError, match="G, M"):
        two(x)
    mlp = CoordinateMLPEncoding(in_dim=3, num_features=6)
    assert mlp(torch.randn(7, 3)).shape == (7, 6)
