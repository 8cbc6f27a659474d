"""A supernet whose right answer is known by construction.

Inputs ``x`` in R^d, label ``argmax(x)``. Three chained edges, each mixing ``'none'``,
``'skip'`` (the identity the target needs) and two fixed random linear maps (noise). Only
the all-skip architecture keeps the label readable from the output logits.
"""

import torch
from torch import nn

from posenc.search import MixedOp, Zero

D = 10


class Fixed(nn.Module):
    def __init__(self, seed):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.register_buffer("w", torch.randn(D, D, generator=g) / D ** 0.5)

    def forward(self, x):
        return x @ self.w.T


class Chain(nn.Module):
    def __init__(self, n_edges=3, seed=0):
        super().__init__()
        self.edges = nn.ModuleList(
            MixedOp([("none", Zero()), ("skip", nn.Identity()), ("noise_a", Fixed(seed + 10 * k)),
                     ("noise_b", Fixed(seed + 10 * k + 1))], alpha_init="zeros")
            for k in range(n_edges))
        self.scale = nn.Parameter(torch.tensor(8.0))

    def forward(self, x):
        for e in self.edges:
            x = e(x)
        return self.scale * x


def data(n=256, seed=0):
    x = torch.randn(n, D, generator=torch.Generator().manual_seed(seed))
    return x, x.argmax(-1)
