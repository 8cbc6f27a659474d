"""Differentiable architecture search and perturbation-based architecture selection.

DARTS supernets (Liu et al., ICLR 2019) of :class:`MixedOp` edges, first-order bilevel
training, and two ways to read an architecture off a trained supernet: the magnitude of
``alpha`` (DARTS) and the perturbation-based selection of DARTS-PT (Wang et al., "Rethinking
Architecture Selection in Differentiable NAS", ICLR 2021). Any ``nn.Module`` holding
:class:`MixedOp` edges is a supernet. Search spaces: a NAS-Bench-201-like cell for small
images (and its enumerable micro variant) and a positional-encoding space over the
transformer testbed.
"""

from posenc.search.mixed import MixedOp
from posenc.search.nb201 import NB201Cell, NB201MicroNet
from posenc.search.ops import NB201_OPS, ReLUConvBN, Zero, make_op
from posenc.search.selection import (
    CRITERIA,
    Selection,
    magnitude_select,
    perturbation_select,
    topology_select,
)
from posenc.search.spaces import SPACES, architecture_id, enumerate_architectures
from posenc.search.supernet import (
    arch_parameters,
    check_data,
    evaluate,
    make_finetune,
    mixed_ops,
    search_space,
    train_darts,
    weight_parameters,
)

__all__ = [
    "CRITERIA",
    "NB201_OPS",
    "SPACES",
    "MixedOp",
    "NB201Cell",
    "NB201MicroNet",
    "ReLUConvBN",
    "Selection",
    "Zero",
    "arch_parameters",
    "architecture_id",
    "check_data",
    "enumerate_architectures",
    "evaluate",
    "magnitude_select",
    "make_finetune",
    "make_op",
    "mixed_ops",
    "perturbation_select",
    "search_space",
    "topology_select",
    "train_darts",
    "weight_parameters",
]
