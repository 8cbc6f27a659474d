import math

import pytest
import torch

from posenc.graph.anchors import (
    AnchorSets,
    bourgain_anchor_sets,
    degree_anchors,
    random_anchors,
    select_anchors,
)


def test_random_anchors_reproducible_and_distinct():
    a = random_anchors(100, 10, generator=3)
    b = random_anchors(100, 10, generator=torch.Generator().manual_seed(3))
    assert torch.equal(a, b) and a.unique().numel() == 10
    assert not torch.equal(a, random_anchors(100, 10, generator=4))


def test_degree_anchors_prefer_hubs():
    # star: the hub (degree 99) must be drawn almost always when k=1
    ei = torch.stack([torch.zeros(99, dtype=torch.long), torch.arange(1, 100)])
    ei = torch.cat([ei, ei.flip(0)], 1)
    hits = sum(int(degree_anchors(ei, 100, 1, generator=s)[0] == 0) for s in range(200))
    assert hits >= 40  # p(hub) = 100/298 per draw (~67 expected); uniform would give ~2


def test_bourgain_sizes_follow_pgnn():
    n = 400
    sets = bourgain_anchor_sets(n, generator=0)
    m = int(math.log2(n))
    assert sets.num_sets == m * m
    expected = [int(n / 2 ** (i + 1)) for i in range(m) for _ in range(m)]
    assert sets.sizes().tolist() == expected
    for k in range(sets.num_sets):
        members = sets.nodes[sets.set_index == k]
        assert members.unique().numel() == members.numel()
    again = bourgain_anchor_sets(n, generator=0)
    assert torch.equal(sets.nodes, again.nodes)


def test_indicator_and_singletons():
    s = AnchorSets.singletons(torch.tensor([2, 0]), 3)
    assert s.indicator().tolist() == [[0, 1], [0, 0], [1, 0]]


@pytest.mark.parametrize(
    "call, exc, match",
    [
        (lambda: random_anchors(5, 6, generator=0), ValueError, "k"),
        (lambda: random_anchors(5, 0, generator=0), ValueError, "k"),
        (lambda: random_anchors(0, 1, generator=0), ValueError, "num_nodes"),
        (lambda: random_anchors(5, 2, generator=None), TypeError, "generator"),
        (lambda: random_anchors(5, 2, generator=1.5), TypeError, "generator"),
        (lambda: bourgain_anchor_sets(1, generator=0), ValueError, "num_nodes"),
        (lambda: bourgain_anchor_sets(10, c=0, generator=0), ValueError, "c"),
        (lambda: select_anchors("kmeans", torch.zeros(2, 0, dtype=torch.long), 5, 2, generator=0),
         ValueError, "method"),
        (lambda: AnchorSets(torch.tensor([0, 9]), torch.tensor([0, 1]), 2, 5), ValueError, "nodes"),
        (lambda: AnchorSets(torch.tensor([0, 1]), torch.tensor([0, 0]), 2, 5), ValueError, "num_sets"),
        (lambda: AnchorSets(torch.tensor([0, 1]), torch.tensor([1, 0]), 2, 5), ValueError, "set_index"),
    ],
)
def test_bad_anchor_arguments(call, exc, match):
    with pytest.raises(exc, match=match):
        call()
