"""Candidate operations of DARTS and NAS-Bench-201 cells for small images.

Every op maps ``(B, C, H, W) -> (B, C, H / stride, W / stride)``, so any subset of them can
be mixed on one edge (:class:`posenc.search.MixedOp`). The convolutions are ReLU-Conv-BN as
in NAS-Bench-201 (Dong & Yang, ICLR 2020), DARTS (Liu et al., ICLR 2019) and the supernets of
DARTS-PT (Wang et al., ICLR 2021; code ruocwang/darts-pt); ``'noise'`` is the op of the
RobustDARTS space S4 (Zela et al., ICLR 2020).

BatchNorm, as in the authors' search code:

* ``affine=False`` (the default here): candidate ops of a supernet have no learnable BN
  scale and shift, so an op cannot grow or shrink its output to play against ``alpha``;
* ``track_running_stats=False`` (the default here) makes BatchNorm normalise every batch
  with that batch's own statistics, in train and eval mode alike. The authors' code keeps
  running statistics but measures every perturbation in train mode, i.e. with batch
  statistics too: once an op is masked, statistics gathered with the op present no longer
  describe the perturbed network;
* ``pool_bn=True`` (the DARTS space) follows a pooling op with ``BatchNorm(affine=False)``,
  as ``sota/cnn/model_search.py`` of DARTS-PT does; NAS-Bench-201 pools have none.
"""

from __future__ import annotations

import torch
from torch import nn

from posenc._checks import check_choice, check_positive_int

__all__ = [
    "DARTS_OPS",
    "NB201_OPS",
    "OPS",
    "PARAMETER_FREE",
    "FactorizedReduce",
    "Noise",
    "ReLUConvBN",
    "SepConv",
    "Zero",
    "make_op",
]

#: The NAS-Bench-201 candidate set, ``'none'`` first (index 0, as in the benchmark).
NB201_OPS: tuple[str, ...] = ("none", "skip", "conv1x1", "conv3x3", "avgpool")
#: The DARTS space as DARTS-PT searches it (its ``s5``): DARTS's eight ops without ``'none'``.
DARTS_OPS: tuple[str, ...] = ("maxpool", "avgpool", "skip", "sepconv3x3", "sepconv5x5", "dilconv3x3", "dilconv5x5")
#: Every op :func:`make_op` builds.
OPS: tuple[str, ...] = ("none", "skip", "noise", "conv1x1", "conv3x3", "sepconv3x3", "sepconv5x5", "dilconv3x3",
                        "dilconv5x5", "maxpool", "avgpool")
#: Ops without parameters that magnitude selection is said to drift towards (DARTS-PT, Sec. 3;
#: RobustDARTS): their ``alpha`` can grow without the op doing anything useful.
PARAMETER_FREE: tuple[str, ...] = ("none", "skip", "noise")


def _check_stride(stride: int) -> int:
    check_positive_int("stride", stride)
    if stride not in (1, 2):
        raise ValueError(f"stride must be 1 or 2, got {stride}")
    return stride


class Zero(nn.Module):
    """The ``'none'`` op: ``x -> 0`` of the shape ``x[..., ::stride, ::stride]`` has.

    Its output is zero whatever its weight, so masking it never changes a mixed edge; the
    class attribute ``is_zero`` tells selection code so (any op may set it).

    Args:
        stride: 1, or 2 on the input edges of a reduction cell.
    """

    is_zero = True

    def __init__(self, stride: int = 1) -> None:
        super().__init__()
        self.stride = _check_stride(stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride == 1:
            return torch.zeros_like(x)
        return torch.zeros_like(x[..., ::self.stride, ::self.stride])

    def extra_repr(self) -> str:
        return f"stride={self.stride}" if self.stride != 1 else ""


class Noise(nn.Module):
    """The ``'noise'`` op of RobustDARTS S4 (Zela et al., ICLR 2020): ``x -> N(0, 1)`` noise of
    the shape ``x[..., ::stride, ::stride]`` has, ignoring the values of ``x``.

    A fresh draw on every call, from ``generator`` if one is given, else from torch's default
    generator (as the authors' ``NoiseOp`` does). No gradient flows to ``x``.

    Args:
        stride: 1, or 2 on the input edges of a reduction cell.
        mean, std: of the Gaussian (0 and 1 in RobustDARTS).
        generator: an optional ``torch.Generator`` on the input's device.
    """

    def __init__(self, stride: int = 1, *, mean: float = 0.0, std: float = 1.0,
                 generator: torch.Generator | None = None) -> None:
        super().__init__()
        self.stride = _check_stride(stride)
        if not (isinstance(std, (int, float)) and std >= 0):
            raise ValueError(f"std must be a number >= 0, got {std!r}")
        self.mean, self.std, self.generator = float(mean), float(std), generator

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not x.is_floating_point():
            raise TypeError(f"x must be a floating-point tensor, got {x.dtype}")
        shape = x[..., ::self.stride, ::self.stride].shape if self.stride != 1 else x.shape
        noise = torch.randn(shape, generator=self.generator, device=x.device, dtype=x.dtype)
        return noise * self.std + self.mean if (self.std != 1.0 or self.mean != 0.0) else noise

    def extra_repr(self) -> str:
        return f"stride={self.stride}, mean={self.mean}, std={self.std}"


def _bn(channels: int, affine: bool, track_running_stats: bool, device, dtype) -> nn.BatchNorm2d:
    return nn.BatchNorm2d(channels, affine=affine, track_running_stats=track_running_stats, device=device, dtype=dtype)


class ReLUConvBN(nn.Module):
    """``BN(Conv_k(ReLU(x)))`` with 'same' padding.

    Args:
        channels: input channels ``C`` (and output channels unless ``out_channels``).
        kernel_size: odd kernel size ``k``.
        out_channels: output channels (default ``channels``; DARTS's 1x1 preprocessing
            of a cell's inputs changes the width).
        stride: 1, or 2 (reduction).
        affine: learnable BatchNorm scale and shift (default ``False``, as in search supernets).
        track_running_stats: BatchNorm keeps running statistics (``False``: always batch
            statistics; see the module docstring).
        device, dtype: of the parameters.

    Shapes: ``(B, C, H, W) -> (B, out_channels, H / stride, W / stride)``.
    """

    def __init__(self, channels: int, kernel_size: int, *, out_channels: int | None = None, stride: int = 1,
                 affine: bool = False, track_running_stats: bool = False, device=None, dtype=None) -> None:
        super().__init__()
        check_positive_int("channels", channels)
        check_positive_int("kernel_size", kernel_size)
        out_channels = channels if out_channels is None else check_positive_int("out_channels", out_channels)
        if kernel_size % 2 == 0:
            raise ValueError(f"kernel_size must be odd ('same' padding), got {kernel_size}")
        self.channels, self.out_channels, self.kernel_size = channels, out_channels, kernel_size
        self.stride = _check_stride(stride)
        self.conv = nn.Conv2d(channels, out_channels, kernel_size, stride=stride, padding=kernel_size // 2,
                              bias=False, device=device, dtype=dtype)
        self.bn = _bn(out_channels, affine, track_running_stats, device, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.conv(torch.relu(x)))

    def extra_repr(self) -> str:
        out = f", out_channels={self.out_channels}" if self.out_channels != self.channels else ""
        return f"channels={self.channels}{out}, kernel_size={self.kernel_size}, stride={self.stride}"


class SepConv(nn.Module):
    """``repeats`` stacks of ReLU - depthwise ``k x k`` conv (dilation ``d``) - pointwise conv - BN.

    DARTS's ``sep_conv_kxk`` is two stacks (the first one strided), its ``dil_conv_kxk`` one
    stack with dilation 2 (Liu et al., ICLR 2019; ``operations.py`` of DARTS and DARTS-PT).

    Args:
        channels: ``C``.
        kernel_size: odd ``k``.
        dilation: of the depthwise convolutions.
        repeats: stacks (1 or more); only the first is strided.
        stride: 1, or 2 (reduction).
        affine, track_running_stats: BatchNorm settings.
        device, dtype: of the parameters.

    Shapes: ``(B, C, H, W) -> (B, C, H / stride, W / stride)``.
    """

    def __init__(self, channels: int, kernel_size: int = 3, *, dilation: int = 1, repeats: int = 1,
                 stride: int = 1, affine: bool = False, track_running_stats: bool = False, device=None,
                 dtype=None) -> None:
        super().__init__()
        check_positive_int("channels", channels)
        check_positive_int("kernel_size", kernel_size)
        check_positive_int("dilation", dilation)
        check_positive_int("repeats", repeats)
        if kernel_size % 2 == 0:
            raise ValueError(f"kernel_size must be odd ('same' padding), got {kernel_size}")
        self.channels, self.kernel_size, self.dilation = channels, kernel_size, dilation
        self.repeats, self.stride = repeats, _check_stride(stride)
        pad = dilation * (kernel_size // 2)
        layers: list[nn.Module] = []
        for r in range(repeats):
            layers += [nn.ReLU(),
                       nn.Conv2d(channels, channels, kernel_size, stride=stride if r == 0 else 1, padding=pad,
                                 dilation=dilation, groups=channels, bias=False, device=device, dtype=dtype),
                       nn.Conv2d(channels, channels, 1, bias=False, device=device, dtype=dtype),
                       _bn(channels, affine, track_running_stats, device, dtype)]
        self.op = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.op(x)

    def extra_repr(self) -> str:
        return (f"channels={self.channels}, kernel_size={self.kernel_size}, dilation={self.dilation}, "
                f"repeats={self.repeats}, stride={self.stride}")


class FactorizedReduce(nn.Module):
    """DARTS's stride-2 ``skip_connect``: ``BN(cat(conv1x1_s2(relu(x)), conv1x1_s2(relu(x)[..., 1:, 1:])))``.

    Shapes: ``(B, C_in, H, W) -> (B, C_out, ceil(H / 2), ceil(W / 2))``; ``C_out`` even.
    """

    def __init__(self, in_channels: int, out_channels: int, *, affine: bool = False,
                 track_running_stats: bool = False, device=None, dtype=None) -> None:
        super().__init__()
        check_positive_int("in_channels", in_channels)
        check_positive_int("out_channels", out_channels)
        if out_channels % 2:
            raise ValueError(f"out_channels must be even (two halves), got {out_channels}")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.conv_1 = nn.Conv2d(in_channels, out_channels // 2, 1, stride=2, bias=False, device=device, dtype=dtype)
        self.conv_2 = nn.Conv2d(in_channels, out_channels // 2, 1, stride=2, bias=False, device=device, dtype=dtype)
        self.bn = _bn(out_channels, affine, track_running_stats, device, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(x)
        # the shifted copy is padded back to H x W: for even sizes this is DARTS's op exactly
        # (the padded row and column are never sampled), and odd sizes work too
        shifted = nn.functional.pad(x[..., 1:, 1:], (0, 1, 0, 1))
        return self.bn(torch.cat([self.conv_1(x), self.conv_2(shifted)], dim=1))

    def extra_repr(self) -> str:
        return f"in_channels={self.in_channels}, out_channels={self.out_channels}"


def make_op(name: str, channels: int, *, stride: int = 1, affine: bool = False, track_running_stats: bool = False,
            pool_bn: bool = False, sep_repeats: int = 2, device=None, dtype=None) -> nn.Module:
    """Build one candidate op by name.

    Args:
        name: one of :data:`OPS` — ``'none'`` (zeros, :class:`Zero`), ``'skip'`` (identity;
            :class:`FactorizedReduce` at stride 2), ``'noise'`` (:class:`Noise`),
            ``'conv1x1'`` / ``'conv3x3'`` (:class:`ReLUConvBN`), ``'sepconv3x3'`` /
            ``'sepconv5x5'`` (:class:`SepConv`, ``sep_repeats`` stacks), ``'dilconv3x3'`` /
            ``'dilconv5x5'`` (:class:`SepConv`, one stack, dilation 2), ``'avgpool'`` (3x3
            average pool, padding not counted), ``'maxpool'`` (3x3 max pool).
        channels: ``C``; every op maps ``(B, C, H, W) -> (B, C, H / stride, W / stride)``.
        stride: 1, or 2 on the input edges of a reduction cell.
        affine, track_running_stats: BatchNorm settings of the ops with a BatchNorm.
        pool_bn: follow a pool with ``BatchNorm(affine=False)`` (the DARTS space).
        sep_repeats: stacks of a separable convolution (DARTS: 2).
        device, dtype: of the parameters.
    """
    check_choice("name", name, OPS)
    check_positive_int("channels", channels)
    _check_stride(stride)
    check_positive_int("sep_repeats", sep_repeats)
    kw = dict(affine=affine, track_running_stats=track_running_stats, device=device, dtype=dtype)
    if name == "none":
        return Zero(stride)
    if name == "noise":
        return Noise(stride)
    if name == "skip":
        return nn.Identity() if stride == 1 else FactorizedReduce(channels, channels, **kw)
    if name in ("avgpool", "maxpool"):
        pool = (nn.AvgPool2d(3, stride=stride, padding=1, count_include_pad=False) if name == "avgpool"
                else nn.MaxPool2d(3, stride=stride, padding=1))
        if not pool_bn:
            return pool
        return nn.Sequential(pool, _bn(channels, False, track_running_stats, device, dtype))
    if name.startswith("sepconv"):
        return SepConv(channels, int(name[-1]), repeats=sep_repeats, stride=stride, **kw)
    if name.startswith("dilconv"):
        return SepConv(channels, int(name[-1]), dilation=2, repeats=1, stride=stride, **kw)
    kernel = 1 if name == "conv1x1" else 3
    return ReLUConvBN(channels, kernel, stride=stride, **kw)
