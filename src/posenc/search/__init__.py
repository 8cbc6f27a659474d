"""Differentiable architecture search and perturbation-based architecture selection.

DARTS supernets (Liu et al., ICLR 2019) of :class:`MixedOp` edges, first-order bilevel
training, and two ways to read an architecture off a trained supernet: the magnitude of
``alpha`` (DARTS) and the perturbation-based selection of DARTS-PT (Wang et al., "Rethinking
Architecture Selection in Differentiable NAS", ICLR 2021). Any ``nn.Module`` holding
:class:`MixedOp` edges is a supernet. Search spaces: a NAS-Bench-201-like cell for small
images (and its enumerable micro variant) and a positional-encoding space over the
transformer testbed.
"""

from posenc.search.darts import DartsCell, DartsMicroNet
from posenc.search.mixed import MixedOp
from posenc.search.nb201 import NB201Cell, NB201MicroNet
from posenc.search.ops import DARTS_OPS, NB201_OPS, OPS, ReLUConvBN, SepConv, Zero, make_op
from posenc.search.selection import (
    CRITERIA,
    Selection,
    magnitude_select,
    perturbation_select,
    topology_select,
)
from posenc.search.pe import PE_ATTENTION, PE_ENCODINGS, PESearchNet
from posenc.search.run import SELECTORS, digits_splits, run_search
from posenc.search.spaces import SPACE_TRAINING, SPACES, STANDALONE_TRAINING, architecture_id, build_space, enumerate_architectures
from posenc.search.supernet import (
    arch_parameters,
    check_data,
    evaluate,
    make_finetune,
    mixed_ops,
    search_space,
    train_darts,
    train_network,
    weight_parameters,
)

__all__ = [
    "CRITERIA",
    "DARTS_OPS",
    "OPS",
    "DartsCell",
    "DartsMicroNet",
    "SepConv",
    "NB201_OPS",
    "PE_ATTENTION",
    "PE_ENCODINGS",
    "SELECTORS",
    "SPACES",
    "SPACE_TRAINING",
    "STANDALONE_TRAINING",
    "PESearchNet",
    "MixedOp",
    "NB201Cell",
    "NB201MicroNet",
    "ReLUConvBN",
    "Selection",
    "Zero",
    "arch_parameters",
    "architecture_id",
    "build_space",
    "check_data",
    "digits_splits",
    "enumerate_architectures",
    "evaluate",
    "magnitude_select",
    "make_finetune",
    "make_op",
    "mixed_ops",
    "perturbation_select",
    "run_search",
    "search_space",
    "topology_select",
    "train_darts",
    "train_network",
    "weight_parameters",
]
