"""Models that consume positional encodings: coordinate networks (``coordinate``) and
small transformer testbeds (a pre-LN encoder, a tiny ViT and a training loop)."""

from posenc.models.seeding import seeded_reset_parameters
from posenc.models.train import DistInfo, TrainConfig, lr_factor, parameter_groups, train
from posenc.models.transformer import Block, SelfAttention, TransformerEncoder, encode_positions
from posenc.models.vit import TinyViT, patch_positions

__all__ = [
    "Block",
    "DistInfo",
    "SelfAttention",
    "TinyViT",
    "TrainConfig",
    "TransformerEncoder",
    "encode_positions",
    "lr_factor",
    "parameter_groups",
    "patch_positions",
    "seeded_reset_parameters",
    "train",
]
