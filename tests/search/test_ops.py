import pytest
import torch
from torch import nn

from posenc.search import OPS, FactorizedReduce, Noise, ReLUConvBN, SepConv, Zero, make_op


def _x(seed=0, shape=(3, 4, 6, 6), dtype=torch.float64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def test_none_and_skip():
    x = _x()
    assert torch.equal(make_op("none", 4)(x), torch.zeros_like(x))
    assert torch.equal(make_op("skip", 4)(x), x)
    assert make_op("none", 4, stride=2)(x).shape == (3, 4, 3, 3)


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


def test_pool_bn_normalises_with_batch_statistics_and_no_affine():
    x = _x()
    op = make_op("maxpool", 4, pool_bn=True, dtype=torch.float64)
    assert isinstance(op, nn.Sequential) and op[1].weight is None  # affine=False, as DARTS-PT's space
    pooled = nn.functional.max_pool2d(x, 3, 1, 1)
    ref = (pooled - pooled.mean((0, 2, 3), keepdim=True)) / torch.sqrt(pooled.var((0, 2, 3), unbiased=False,
                                                                               keepdim=True) + 1e-5)
    torch.testing.assert_close(op(x), ref)


@pytest.mark.parametrize("name,k", [("conv1x1", 1), ("conv3x3", 3)])
def test_relu_conv_bn_matches_formula(name, k):
    x = _x()
    op = make_op(name, 4, dtype=torch.float64)
    assert isinstance(op, ReLUConvBN)
    assert op.bn.weight is None and op.bn.bias is None  # affine=False by default (search supernets)
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
    torch.testing.assert_close(out, ref)
    # batch statistics in eval mode too (track_running_stats=False, as in DARTS supernets)
    op.eval()
    torch.testing.assert_close(op(x), ref)
    affine = make_op(name, 4, affine=True, dtype=torch.float64)
    assert affine.bn.weight is not None


def test_every_op_keeps_shape_and_halves_it_at_stride_two():
    x = _x(dtype=torch.float32, shape=(3, 4, 8, 8))
    for name in OPS:
        assert make_op(name, 4)(x).shape == x.shape, name
        assert make_op(name, 4, stride=2)(x).shape == (3, 4, 4, 4), name


def test_sepconv_is_two_stacks_and_dilconv_one():
    sep, dil = make_op("sepconv3x3", 4), make_op("dilconv3x3", 4)
    assert isinstance(sep, SepConv) and sep.repeats == 2 and len(sep.op) == 8
    assert isinstance(dil, SepConv) and dil.repeats == 1 and dil.dilation == 2
    assert make_op("sepconv3x3", 4, sep_repeats=1).repeats == 1
    assert make_op("dilconv5x5", 4).op[1].padding == (4, 4)  # dilation 2 x (5 // 2)


def test_factorized_reduce_matches_formula():
    x = _x(shape=(2, 4, 6, 6))
    op = FactorizedReduce(4, 6, dtype=torch.float64)
    out = op(x)
    r = x.clamp_min(0)
    a = torch.einsum("bchw,oc->bohw", r[:, :, ::2, ::2], op.conv_1.weight[:, :, 0, 0])
    b = torch.einsum("bchw,oc->bohw", r[:, :, 1::2, 1::2], op.conv_2.weight[:, :, 0, 0])
    cat = torch.cat([a, b], 1)
    ref = (cat - cat.mean((0, 2, 3), keepdim=True)) / torch.sqrt(cat.var((0, 2, 3), unbiased=False, keepdim=True)
                                                                + 1e-5)
    torch.testing.assert_close(out, ref)
    assert FactorizedReduce(4, 4)(_x(shape=(2, 4, 7, 7)).float()).shape == (2, 4, 4, 4)  # odd sizes too


def test_noise_is_standard_normal_of_the_input_shape_and_ignores_it():
    # RobustDARTS S4: N(0, 1) noise of the input's shape, whatever the input
    g = torch.Generator().manual_seed(3)
    op = Noise(generator=g)
    x = torch.full((64, 4, 8, 8), 7.0, requires_grad=True)
    out = op(x)
    assert out.shape == x.shape and not out.requires_grad
    assert abs(float(out.mean())) < 0.03 and abs(float(out.std()) - 1.0) < 0.03
    from scipy import stats

    assert stats.kstest(out.flatten()[:4000].numpy(), "norm").pvalue > 1e-3
    # ignores the input: the same draw for any input
    a = Noise(generator=torch.Generator().manual_seed(5))(torch.zeros(2, 3, 4, 4))
    b = Noise(generator=torch.Generator().manual_seed(5))(torch.randn(2, 3, 4, 4) * 100)
    assert torch.equal(a, b)
    assert Noise(2)(torch.zeros(2, 3, 8, 8, dtype=torch.float64)).dtype == torch.float64
    assert Noise(2)(torch.zeros(2, 3, 8, 8)).shape == (2, 3, 4, 4)
    assert not torch.equal(op(x), op(x))  # a fresh draw per call
    assert make_op("noise", 4).__class__ is Noise


def test_zero_flags_itself():
    assert Zero.is_zero and Zero(2).stride == 2


def test_bad_input():
    with pytest.raises(ValueError, match="name"):
        make_op("conv7x7", 4)
    with pytest.raises(ValueError, match="channels"):
        make_op("conv3x3", 0)
    with pytest.raises(ValueError, match="kernel_size"):
        ReLUConvBN(4, 2)
    with pytest.raises(ValueError, match="stride"):
        make_op("skip", 4, stride=3)
    with pytest.raises(ValueError, match="std"):
        Noise(std=-1.0)
    with pytest.raises(TypeError, match="floating"):
        Noise()(torch.zeros(2, 2, dtype=torch.int64))
    with pytest.raises(ValueError, match="out_channels"):
        FactorizedReduce(4, 5)
    with pytest.raises(ValueError, match="repeats"):
        SepConv(4, repeats=0)
