"""Axial and mixed N-D RoPE against per-axis rotation loops; the 2D relative property."""

import math

import pytest
import torch

from posenc.attention.relative.rotary import apply_rope
from posenc.attention.relative.rotary_nd import (
    AxialRotaryEmbedding,
    MixedRotaryEmbedding,
    axial_frequencies,
    mixed_frequencies,
)


def rotate_pairs_loop(x, angles):
    """Half layout: pair k = channels (k, k + K); rotate by angles[..., k] with explicit 2x2 matrices."""
    K = angles.shape[-1]
    out = x.clone().double()
    for idx in torch.cartesian_prod(*[torch.arange(s) for s in x.shape[:-1]]).reshape(-1, x.dim() - 1):
        idx = tuple(int(i) for i in idx)
        for k in range(K):
            a = float(angles[idx[-angles.dim() + 1:] + (k,)] if angles.dim() > 1 else angles[k])
            R = torch.tensor([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]], dtype=torch.float64)
            v = torch.stack((x[idx + (k,)], x[idx + (k + K,)])).double()
            out[idx + (k,)], out[idx + (k + K,)] = R @ v
    return out


def test_axial_frequency_matrix_is_block_diagonal():
    F = axial_frequencies(16, 2, base=100.0)
    assert F.shape == (8, 2)
    K = 4
    torch.testing.assert_close(F[:K, 0], 100.0 ** (-torch.arange(K, dtype=torch.float64) / K))
    assert bool((F[:K, 1] == 0).all()) and bool((F[K:, 0] == 0).all())


def test_axial_equals_per_axis_1d_rope_blocks():
    # each axis block of channels is a 1D RoPE (half layout within the whole pair set)
    torch.manual_seed(0)
    rope = AxialRotaryEmbedding(8, 2, base=100.0)
    q = torch.randn(1, 1, 6, 8, dtype=torch.float64)
    pos = torch.tensor([[0, 0], [0, 1], [1, 0], [2, 3], [5, 1], [3, 3]])
    rq, _ = rope(q, q, pos)
    F = axial_frequencies(8, 2, base=100.0)
    ang = pos.double() @ F.T  # (n, K)
    torch.testing.assert_close(rq, rotate_pairs_loop(q, ang))


def test_axial_one_axis_is_plain_rope():
    rope = AxialRotaryEmbedding(16, 1, base=10000.0)
    q = torch.randn(2, 2, 7, 16, dtype=torch.float64)
    pos = torch.arange(7)[:, None]
    torch.testing.assert_close(rope(q, q, pos)[0], apply_rope(q, torch.arange(7)))


@pytest.mark.parametrize("kind", ["axial", "mixed"])
def test_2d_relative_property(kind):
    torch.manual_seed(1)
    mod = AxialRotaryEmbedding(16, 2) if kind == "axial" else MixedRotaryEmbedding(16, 2).double()
    q, k = torch.randn(1, 2, 2, 16, dtype=torch.float64), torch.randn(1, 2, 2, 16, dtype=torch.float64)

    def score(p, p2):
        pos = torch.tensor([p, p2], dtype=torch.float64)
        rq, rk = mod(q, k, pos)
        return (rq[:, :, 0] * rk[:, :, 1]).sum(-1)

    a = score([1.0, 2.0], [4.0, -3.0])
    b = score([11.5, -7.0], [14.5, -12.0])  # same displacement
    torch.testing.assert_close(a, b)
    assert not torch.allclose(a, score([1.0, 2.0], [-3.0, 4.0]))  # other displacement, other score


def test_mixed_init_matches_paper_recipe():
    g = torch.Generator().manual_seed(3)
    F = mixed_frequencies(16, 3, base=10.0, generator=g)
    assert F.shape == (3, 8, 2)
    mag = 10.0 ** (-4.0 * torch.arange(4, dtype=torch.float64) / 16)
    norms = F.norm(dim=-1)
    torch.testing.assert_close(norms, torch.cat((mag, mag)).expand(3, 8))
    # the two directions of each magnitude are orthogonal
    dots = (F[:, :4] * F[:, 4:]).sum(-1)
    torch.testing.assert_close(dots, torch.zeros_like(dots), atol=1e-12, rtol=0)
    fixed = mixed_frequencies(16, 2, rotate_heads=False)
    torch.testing.assert_close(fixed[:, :4, 1], torch.zeros(2, 4, dtype=torch.float64))


def test_mixed_frequencies_learn():
    mod = MixedRotaryEmbedding(8, 2)
    q = torch.randn(1, 2, 5, 8)
    pos = torch.rand(5, 2)
    rq, rk = mod(q, q, pos)
    (rq * rk.flip(2)).sum().backward()
    assert mod.freqs.grad is not None and bool(mod.freqs.grad.abs().sum() > 0)
    assert "freqs" in mod.state_dict()


def test_mixed_against_loop_and_batched_positions():
    mod = MixedRotaryEmbedding(8, 2, seed=5).double()
    q = torch.randn(3, 2, 4, 8, dtype=torch.float64)
    pos = torch.randn(3, 4, 2, dtype=torch.float64)
    rq, _ = mod(q, q, pos)
    for b in range(3):
        ang = torch.einsum("na,hka->hnk", pos[b], mod.freqs.detach())
        torch.testing.assert_close(rq[b], rotate_pairs_loop(q[b], ang))


def test_compile_fullgraph():
    mod = AxialRotaryEmbedding(16, 2)
    q = torch.randn(2, 2, 9, 16)
    pos = torch.stack(torch.meshgrid(torch.arange(3), torch.arange(3), indexing="ij"), -1).reshape(-1, 2)
    out = torch.compile(mod, fullgraph=True, backend="eager")(q, q, pos)
    torch.testing.assert_close(out[0], mod(q, q, pos)[0])


def test_bad_input():
    with pytest.raises(ValueError, match="head_dim"):
        AxialRotaryEmbedding(10, 2)
    with pytest.raises(ValueError, match="head_dim"):
        MixedRotaryEmbedding(6, 2)
    with pytest.raises(ValueError, match="num_heads"):
        MixedRotaryEmbedding(8, 0)
    rope = AxialRotaryEmbedding(8, 2)
    q = torch.randn(1, 1, 4, 8)
    with pytest.raises(ValueError, match="positions"):
        rope(q, q, torch.zeros(4, 3))
    with pytest.raises(ValueError, match="positions"):
        rope(q, q, torch.zeros(5, 2))
    with pytest.raises(ValueError, match="positions"):
        rope(q, q, torch.full((4, 2), float("inf")))
    with pytest.raises(ValueError, match="head dim"):
        rope(torch.randn(1, 1, 4, 6), torch.randn(1, 1, 4, 6), torch.zeros(4, 2))
    mixed = MixedRotaryEmbedding(8, 2)
    with pytest.raises(ValueError, match="q must have shape"):
        mixed(torch.randn(1, 3, 4, 8), torch.randn(1, 3, 4, 8), torch.zeros(4, 2))


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_inplace_matches_out_of_place(layout):
    g = torch.Generator().manual_seed(3)
    q, k = torch.randn(2, 2, 6, 8, generator=g), torch.randn(2, 2, 6, 8, generator=g)
    pos = torch.rand(2, 6, 2, generator=g) * 5
    for mod in (AxialRotaryEmbedding(8, 2, layout=layout), MixedRotaryEmbedding(8, 2, layout=layout)):
        eq, ek = mod(q, k, pos)
        q2, k2 = q.clone(), k.clone()
        rq, rk = mod(q2, k2, pos, inplace=True)
        assert rq is q2 and rk is k2
        torch.testing.assert_close(q2, eq)
        torch.testing.assert_close(k2, ek)


def test_inplace_keeps_mixed_frequency_gradients():
    # in place on inputs without grad: the learnable frequencies still get their gradient
    mod = MixedRotaryEmbedding(8, 2)
    q, pos = torch.randn(1, 2, 5, 8), torch.rand(5, 2)
    rq, rk = mod(q.clone(), q.clone(), pos)
    (rq * rk.flip(2)).sum().backward()
    expected = mod.freqs.grad.clone()
    mod.freqs.grad = None
    rq, rk = mod(q.clone(), q.clone(), pos, inplace=True)
    (rq * rk.flip(2)).sum().backward()
    torch.testing.assert_close(mod.freqs.grad, expected)
    # inputs that need grad cannot be overwritten while the angles need theirs
    with pytest.raises(ValueError, match="angles require grad"):
        mod(q * torch.ones(1, requires_grad=True), q.clone(), pos, inplace=True)
