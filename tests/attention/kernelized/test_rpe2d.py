import pytest
import torch

from posenc.attention.kernelized.reference import dense_kernelized_attention
from posenc.attention.kernelized.rpe2d import kernelized_attention_2d, rpe2d_matrix, toeplitz2d_matmul

D = torch.float64


@pytest.mark.parametrize("grid", [(1, 1), (1, 5), (4, 1), (3, 5), (6, 7)])
def test_matches_loops(grid):
    H, W = grid
    g = torch.Generator().manual_seed(H * 10 + W)
    c = torch.randn(2, 2 * H - 1, 2 * W - 1, dtype=D, generator=g)
    x = torch.randn(3, 2, H * W, 4, dtype=D, generator=g)
    ref = torch.zeros_like(x)
    for r in range(H):
        for cc in range(W):
            for r2 in range(H):
                for c2 in range(W):
                    ref[..., r * W + cc, :] += c[:, r2 - r + H - 1, c2 - cc + W - 1, None] * x[..., r2 * W + c2, :]
    torch.testing.assert_close(toeplitz2d_matmul(c, x, grid), ref, rtol=0, atol=1e-12)
    torch.testing.assert_close(rpe2d_matrix(c, grid) @ x, ref, rtol=0, atol=1e-12)


def test_attention_2d_and_gradcheck():
    g = torch.Generator().manual_seed(0)
    grid, n = (3, 4), 12
    pq = (torch.rand(1, 2, n, 3, dtype=D, generator=g) + 0.1).requires_grad_()
    pk = torch.rand(1, 2, n, 3, dtype=D, generator=g) + 0.1
    v = torch.randn(1, 2, n, 2, dtype=D, generator=g)
    c = (torch.rand(2, 5, 7, dtype=D, generator=g) + 0.1).requires_grad_()
    s = (pq @ pk.transpose(-1, -2)) * rpe2d_matrix(c, grid)
    ref = (s @ v) / s.sum(-1, keepdim=True)
    torch.testing.assert_close(kernelized_attention_2d(pq, pk, v, c, grid), ref, rtol=0, atol=1e-12)
    assert torch.autograd.gradcheck(lambda pq, c: kernelized_attention_2d(pq, pk, v, c, grid), (pq, c))
    # a 1 x W grid is the 1D case
    b = torch.randn(2, 7, dtype=D, generator=g)
    one = kernelized_attention_2d(pq[..., :4, :], pk[..., :4, :], v[..., :4, :], torch.exp(b)[:, None, :], (1, 4))
    torch.testing.assert_close(one, dense_kernelized_attention(pq[..., :4, :], pk[..., :4, :], v[..., :4, :], b))


def test_bad_input():
    x = torch.zeros(1, 12, 2)
    with pytest.raises(ValueError, match="coeffs"):
        toeplitz2d_matmul(torch.zeros(5, 5), x, (3, 4))
    with pytest.raises(ValueError, match="x"):
        toeplitz2d_matmul(torch.zeros(5, 7), torch.zeros(1, 11, 2), (3, 4))
    with pytest.raises(ValueError, match="grid"):
        toeplitz2d_matmul(torch.zeros(5, 7), x, (0, 4))
