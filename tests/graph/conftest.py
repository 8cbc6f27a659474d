import networkx as nx
import numpy as np
import torch


def nx_edge_index(g: nx.Graph) -> torch.Tensor:
    """Both directions, int64 (2, 2E)."""
    e = np.array(list(g.edges()), dtype=np.int64).reshape(-1, 2)
    return torch.from_numpy(np.concatenate([e, e[:, ::-1]]).T.copy())


def all_pairs(g: nx.Graph, n: int) -> np.ndarray:
    """Dense float64 all-pairs hop distances with inf (networkx, the obviously-correct reference)."""
    d = np.full((n, n), np.inf)
    for s, lengths in nx.all_pairs_shortest_path_length(g):
        for t, v in lengths.items():
            d[s, t] = v
    return d
