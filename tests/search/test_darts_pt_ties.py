"""darts_pt passes ties= to operation and topology selection (issue #39, part 4): with
ties='official' it decides tied scores by the authors' rule (the lowest op index; for topology the
last of the tied edges) whatever the seed, where ties='random' draws with the seed."""

import pytest
import torch
from torch import nn

from posenc.search import MixedOp, darts_pt

from ._known import data


class Parallel(nn.Module):
    """Three parallel edges of three identical ops into one node: every perturbation ties."""

    def __init__(self):
        super().__init__()
        self.edges = nn.ModuleList(
            MixedOp([("a", nn.Identity()), ("b", nn.Identity()), ("c", nn.Identity())], alpha_init="zeros")
            for _ in range(3))
        self.scale = nn.Parameter(torch.tensor(8.0))

    def forward(self, x):
        return self.scale * sum(e(x) for e in self.edges)

    def node_inputs(self):
        return {"node": ["edges.0", "edges.1", "edges.2"]}


def _run(seed, ties):
    split = data(64, seed=5)
    return darts_pt(Parallel(), split, split, finetune_epochs=0, seed=seed, ties=ties)


def test_official_ties_make_the_authors_decisions_for_every_seed():
    for seed in range(6):
        sel, topo = _run(seed, "official")
        assert sel.choices == {"edges.0": "a", "edges.1": "a", "edges.2": "a"}, seed
        assert topo is not None and topo.pruned == ["edges.2"], seed
        # every score tied: the rule, not the scores, decided
        for d in sel.decisions:
            assert len(set(d["scores"].values())) == 1


def test_random_ties_draw_with_the_seed():
    outcomes = set()
    for seed in range(6):
        sel, topo = _run(seed, "random")
        again = _run(seed, "random")
        assert (sel.choices, topo.pruned) == (again[0].choices, again[1].pruned)  # the seed decides
        outcomes.add((tuple(sorted(sel.choices.items())), tuple(topo.pruned)))
    assert len(outcomes) > 1
    assert _run(0, "random")[0].choices == darts_pt(Parallel(), data(64, seed=5), data(64, seed=5),
                                                    finetune_epochs=0, seed=0)[0].choices  # the default


def test_bad_ties():
    with pytest.raises(ValueError, match="ties must be one of"):
        _run(0, "lowest")
    with pytest.raises(ValueError, match="ties must be one of"):
        _run(0, None)
