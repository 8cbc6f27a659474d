"""Differentiable architecture search and perturbation-based architecture selection.

DARTS supernets (Liu et al., ICLR 2019) of :class:`MixedOp` edges, first-order bilevel
training, and two ways to read an architecture off a trained supernet: the magnitude of
``alpha`` (DARTS) and the perturbation-based selection of DARTS-PT (Wang et al., "Rethinking
Architecture Selection in Differentiable NAS", ICLR 2021), with the defaults of the authors'
code. Any ``nn.Module`` holding :class:`MixedOp` edges is a supernet; :class:`EncodingSearch`
searches the position encoding of a user's own transformer (:func:`choose_encoding` picks it
in one call, within a training budget, also across families for a plain model built from
standard parts: additive, CAPE, rotary, bias and kernelized, or node encodings of a graph model;
:func:`with_encoding`) and :func:`apply_selection` turns
a discretised supernet into a plain network. Search spaces: NAS-Bench-201-like and DARTS
cells for small images (stacked, with normal and reduction cells), the RobustDARTS spaces
S1-S4, and a positional-encoding space over the transformer testbed.
"""

from posenc.search.apply import apply_selection
from posenc.search.batches import Batches, check_data
from posenc.search.choose import CHOICE_SELECTORS, DEFAULT_CHOICE_SELECTOR, choose_encoding, race_plan
from posenc.search.darts import ROBUST_DARTS, DartsCell, DartsNet, robust_darts_ops
from posenc.search.encoding import ENCODING_CANDIDATES, AddEncoding, EncodingSearch
from posenc.search.families import (
    ATTENTION_CANDIDATES,
    FAMILY_CANDIDATES,
    NODE_CANDIDATES,
    Candidate,
    SequenceEncoding,
    parse_candidate,
    with_encoding,
)
from posenc.search.nodes import GRAPH_CANDIDATES, NodeEncoding, feed_graph, node_split
from posenc.search.mixed import ALPHA_INITS, MixedOp, PrunedEdge
from posenc.search.nb201 import NB201Cell, NB201MicroNet
from posenc.search.ops import (
    DARTS_OPS,
    NB201_OPS,
    OPS,
    PARAMETER_FREE,
    FactorizedReduce,
    Noise,
    ReLUConvBN,
    SepConv,
    Zero,
    make_op,
)
from posenc.search.pe import PE_ATTENTION, PE_ENCODINGS, PESearchNet
from posenc.search.run import SELECTORS, darts_pt, derive_settings, digits_splits, run_search
from posenc.search.selection import (
    CRITERIA,
    TIES,
    Selection,
    magnitude_select,
    perturbation_select,
    topology_select,
)
from posenc.search.spaces import (
    CONV_SPACES,
    SPACE_TRAINING,
    SPACES,
    STANDALONE_TRAINING,
    architecture_id,
    build_space,
    enumerate_architectures,
    is_darts_space,
)
from posenc.search.supernet import (
    ALPHA_TRAVEL,
    BN_MODES,
    DARTS_RECIPE,
    ENCODING_RECIPE,
    alpha_lr,
    arch_parameters,
    batch_statistics,
    evaluate,
    mixed_ops,
    search_space,
    train_darts,
    train_network,
    weight_parameters,
)
from posenc.search.tuning import SCHEDULES, Finetune, make_finetune, tuning_epochs

__all__ = [
    "ALPHA_INITS",
    "ATTENTION_CANDIDATES",
    "ALPHA_TRAVEL",
    "BN_MODES",
    "CHOICE_SELECTORS",
    "DARTS_RECIPE",
    "DEFAULT_CHOICE_SELECTOR",
    "ENCODING_RECIPE",
    "CONV_SPACES",
    "CRITERIA",
    "DARTS_OPS",
    "ENCODING_CANDIDATES",
    "FAMILY_CANDIDATES",
    "GRAPH_CANDIDATES",
    "NODE_CANDIDATES",
    "NB201_OPS",
    "OPS",
    "PARAMETER_FREE",
    "PE_ATTENTION",
    "PE_ENCODINGS",
    "ROBUST_DARTS",
    "SCHEDULES",
    "SELECTORS",
    "SPACES",
    "SPACE_TRAINING",
    "STANDALONE_TRAINING",
    "TIES",
    "AddEncoding",
    "Batches",
    "Candidate",
    "DartsCell",
    "DartsNet",
    "EncodingSearch",
    "FactorizedReduce",
    "Finetune",
    "MixedOp",
    "NB201Cell",
    "NB201MicroNet",
    "NodeEncoding",
    "Noise",
    "PESearchNet",
    "PrunedEdge",
    "ReLUConvBN",
    "Selection",
    "SequenceEncoding",
    "SepConv",
    "Zero",
    "alpha_lr",
    "apply_selection",
    "arch_parameters",
    "architecture_id",
    "batch_statistics",
    "build_space",
    "check_data",
    "choose_encoding",
    "darts_pt",
    "derive_settings",
    "digits_splits",
    "enumerate_architectures",
    "evaluate",
    "feed_graph",
    "is_darts_space",
    "magnitude_select",
    "make_finetune",
    "make_op",
    "mixed_ops",
    "node_split",
    "parse_candidate",
    "perturbation_select",
    "race_plan",
    "robust_darts_ops",
    "run_search",
    "search_space",
    "topology_select",
    "train_darts",
    "train_network",
    "tuning_epochs",
    "weight_parameters",
    "with_encoding",
]
