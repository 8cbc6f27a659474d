import pytest
import torch
from torch import nn

from posenc.search import NB201_OPS, ReLUConvBN, make_op


def _x(seed=0, shape=(3, 4, 6, 5), dtype=torch.float64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def test_none_and_skip():
    x = _x()
    assert torch.equal(make_op("none", 4)(x), torch.zeros_like(x))
    assert torch.equal(make_op("skip", 4)(x), x)


def test_avgpool_matches_loop():
    x = _x()
    out = make_op("avgpool", 4)(x)
    ref = torch.zeros_like(x)
    H, W = x.shape[-2:]
    for i in range(H):
        for j in range(W):
            win = x[..., max(i - 1, 0):i + 2, max(j - 1, 0):j + 2]
            ref[..., i, j] = win.mean(dim=(-2, -1))  # padding not counted
    torch.testing.assert_close(out, ref)


@pytest.mark.parametrize("name,k", [("conv1x1", 1), ("conv3x3", 3)])
def test_relu_conv_bn_matches_formula(name, k):
    x = _x()
    op = make_op(name, 4, dtype=torch.float64)
    assert isinstance(op, ReLUConvBN)
    op.train()
    out = op(x)
    w = op.conv.weight
    r = x.clamp_min(0)
    rp = nn.functional.pad(r, (k // 2,) * 4)
    conv = torch.zeros_like(x)
    H, W = x.shape[-2:]
    for i in range(H):
        for j in range(W):
            patch = rp[:, :, i:i + k, j:j + k]  # (B, Cin, k, k)
            conv[:, :, i, j] = torch.einsum("bcuv,ocuv->bo", patch, w)
    mean = conv.mean(dim=(0, 2, 3), keepdim=True)
    var = conv.var(dim=(0, 2, 3), unbiased=False, keepdim=True)
    ref = (conv - mean) / torch.sqrt(var + op.bn.eps)
    ref = ref * op.bn.weight.view(1, -1, 1, 1) + op.bn.bias.view(1, -1, 1, 1)
    torch.testing.assert_close(out, ref)
    # Batch statistics in eval mode too (track_running_stats=False, as in DARTS supernets).
    op.eval()
    torch.testing.assert_close(op(x), ref)


def test_every_op_keeps_shape():
    x = _x(dtype=torch.float32)
    for name in NB201_OPS:
        assert make_op(name, 4)(x).shape == x.shape


def test_bad_input():
    with pytest.raises(ValueError, match="name"):
        make_op("conv5x5", 4)
    with pytest.raises(ValueError, match="channels"):
        make_op("conv3x3", 0)
    with pytest.raises(ValueError, match="kernel_size"):
        ReLUConvBN(4, 2)
