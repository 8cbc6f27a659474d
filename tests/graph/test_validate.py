import pytest
import torch

from posenc.graph._validate import adjacency_csr, clean_edge_index


@pytest.mark.parametrize(
    "edge_index, n, exc, match",
    [
        (torch.tensor([[0, 3], [3, 0]]), 3, ValueError, "edge_index"),  # out of range
        (torch.tensor([[-1, 0], [0, -1]]), 3, ValueError, "edge_index"),
        (torch.tensor([0, 1]), 3, ValueError, "edge_index"),  # wrong shape
        (torch.tensor([[0.0, 1.0], [1.0, 0.0]]), 3, TypeError, "edge_index"),
        ([[0, 1], [1, 0]], 3, TypeError, "edge_index"),
        (torch.tensor([[0, 1], [1, 0]]), 0, ValueError, "num_nodes"),  # empty graph
        (torch.tensor([[0, 1], [1, 0]]), 2.0, TypeError, "num_nodes"),
        (torch.tensor([[0], [1]]), 2, ValueError, "undirected"),
    ],
)
def test_bad_graph_input(edge_index, n, exc, match):
    with pytest.raises(exc, match=match):
        adjacency_csr(edge_index, n)


def test_cleaning_drops_loops_and_duplicates():
    ei = torch.tensor([[0, 1, 1, 0, 2, 0], [1, 0, 0, 1, 2, 0]])
    out = clean_edge_index(ei, 3)
    assert sorted(map(tuple, out.T.tolist())) == [(0, 1), (1, 0)]


def test_symmetrize_adds_reverse():
    out = clean_edge_index(torch.tensor([[0], [2]]), 3, symmetrize=True)
    assert sorted(map(tuple, out.T.tolist())) == [(0, 2), (2, 0)]
