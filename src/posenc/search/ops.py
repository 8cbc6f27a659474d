"""Candidate operations of NAS-Bench-201-style cells for small images.

Every op maps ``(batch, channels, H, W) -> (batch, channels, H, W)`` (stride 1), so any
subset of them can be mixed on one edge (:class:`posenc.search.MixedOp`). The convolutions
are ReLU-Conv-BN as in NAS-Bench-201 (Dong & Yang, ICLR 2020) and the supernets of DARTS
(Liu et al., ICLR 2019) and DARTS-PT (Wang et al., ICLR 2021).

BatchNorm: ``track_running_stats=False`` (the default here, as in the DARTS search
supernets) makes BatchNorm normalise every batch with that batch's own statistics, in
train and eval mode alike. This matters for perturbation-based selection: once an op is
masked, running statistics gathered with the op present no longer describe the perturbed
network, while batch statistics follow it.
"""

from __future__ import annotations

import torch
from torch import nn

from posenc._checks import check_choice, check_positive_int

__all__ = ["DARTS_OPS", "NB201_OPS", "OPS", "ReLUConvBN", "SepConv", "Zero", "make_op"]

#: The NAS-Bench-201 candidate set, ``'none'`` first (index 0, as in the benchmark).
NB201_OPS: tuple[str, ...] = ("none", "skip", "conv1x1", "conv3x3", "avgpool")
#: A small DARTS-like candidate set (DARTS uses 3x3/5x5 separable and dilated convolutions).
DARTS_OPS: tuple[str, ...] = ("none", "skip", "sepconv3x3", "dilconv3x3", "maxpool", "avgpool")
#: Every op :func:`make_op` builds.
OPS: tuple[str, ...] = ("none", "skip", "conv1x1", "conv3x3", "sepconv3x3", "dilconv3x3", "maxpool", "avgpool")


class Zero(nn.Module):
    """The ``'none'`` op: ``x -> 0`` with the shape, dtype and device of ``x``.

    Its output is zero whatever its weight, so masking it never changes a mixed edge; the
    class attribute ``is_zero`` tells selection code so (any op may set it).
    """

    is_zero = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(x)


class ReLUConvBN(nn.Module):
    """``BN(Conv_k(ReLU(x)))`` with stride 1 and 'same' padding.

    Args:
        channels: input and output channels ``C``.
        kernel_size: odd kernel size ``k``.
        affine: learnable BatchNorm scale and shift.
        track_running_stats: BatchNorm keeps running statistics (``False``: always batch
            statistics; see the module docstring).
        device, dtype: of the parameters.

    Shapes: ``(B, C, H, W) -> (B, C, H, W)``.
    """

    def __init__(self, channels: int, kernel_size: int, *, affine: bool = True,
                 track_running_stats: bool = False, device=None, dtype=None) -> None:
        super().__init__()
        check_positive_int("channels", channels)
        check_positive_int("kernel_size", kernel_size)
        if kernel_size % 2 == 0:
            raise ValueError(f"kernel_size must be odd ('same' padding), got {kernel_size}")
        self.channels = channels
        self.kernel_size = kernel_size
        self.conv = nn.Conv2d(channels, channels, kernel_size, padding=kernel_size // 2, bias=False,
                              device=device, dtype=dtype)
        self.bn = nn.BatchNorm2d(channels, affine=affine, track_running_stats=track_running_stats,
                                 device=device, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.conv(torch.relu(x)))

    def extra_repr(self) -> str:
        return f"channels={self.channels}, kernel_size={self.kernel_size}"


class SepConv(nn.Module):
    """ReLU - depthwise 3x3 conv (dilation ``d``) - pointwise conv - BN, as DARTS's
    ``sep_conv``/``dil_conv`` (one stack; DARTS's separable conv repeats it twice).

    Shapes: ``(B, C, H, W) -> (B, C, H, W)``.
    """

    def __init__(self, channels: int, dilation: int = 1, *, affine: bool = True, track_running_stats: bool = False,
                 device=None, dtype=None) -> None:
        super().__init__()
        check_positive_int("channels", channels)
        check_positive_int("dilation", dilation)
        self.channels, self.dilation = channels, dilation
        self.depthwise = nn.Conv2d(channels, channels, 3, padding=dilation, dilation=dilation, groups=channels,
                                   bias=False, device=device, dtype=dtype)
        self.pointwise = nn.Conv2d(channels, channels, 1, bias=False, device=device, dtype=dtype)
        self.bn = nn.BatchNorm2d(channels, affine=affine, track_running_stats=track_running_stats,
                                 device=device, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.pointwise(self.depthwise(torch.relu(x))))

    def extra_repr(self) -> str:
        return f"channels={self.channels}, dilation={self.dilation}"


def make_op(name: str, channels: int, *, affine: bool = True, track_running_stats: bool = False,
            device=None, dtype=None) -> nn.Module:
    """Build one candidate op by name.

    Args:
        name: one of :data:`OPS` — ``'none'`` (zeros), ``'skip'`` (identity),
            ``'conv1x1'`` / ``'conv3x3'`` (ReLU-Conv-BN), ``'sepconv3x3'`` /
            ``'dilconv3x3'`` (:class:`SepConv`, dilation 1 / 2), ``'avgpool'`` (3x3 average
            pool, stride 1, padding not counted), ``'maxpool'`` (3x3 max pool, stride 1).
        channels: ``C``; every op maps ``(B, C, H, W) -> (B, C, H, W)``.
        affine, track_running_stats: BatchNorm settings of the convolutions.
        device, dtype: of the parameters.
    """
    check_choice("name", name, OPS)
    check_positive_int("channels", channels)
    if name == "none":
        return Zero()
    if name == "skip":
        return nn.Identity()
    if name == "avgpool":
        return nn.AvgPool2d(3, stride=1, padding=1, count_include_pad=False)
    if name == "maxpool":
        return nn.MaxPool2d(3, stride=1, padding=1)
    if name in ("sepconv3x3", "dilconv3x3"):
        return SepConv(channels, 1 if name == "sepconv3x3" else 2, affine=affine,
                       track_running_stats=track_running_stats, device=device, dtype=dtype)
    kernel = 1 if name == "conv1x1" else 3
    return ReLUConvBN(channels, kernel, affine=affine, track_running_stats=track_running_stats,
                      device=device, dtype=dtype)
