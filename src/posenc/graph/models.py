"""Standard GNN encoders (PyG's GCN / SAGE / GAT / GIN layers) and their fusion with GIR.

The standard encoder follows the P-GNN baselines: a linear input map, then
``num_layers`` convolutions with ReLU and dropout between them. Fusion
(GIR paper, "complementarity between GIRs and typical GNNs") trains both
branches jointly and combines their embeddings by concatenation or addition.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn import GATConv, GCNConv, GINConv, SAGEConv

from posenc._checks import check_choice, check_positive_float, check_positive_int
from posenc.graph.gir import GIR, PathPlan

GNN_KINDS = ("gcn", "sage", "gat", "gin")
FUSIONS = ("concat", "add")


def _conv(kind: str, cin: int, cout: int) -> nn.Module:
    if kind == "gcn":
        return GCNConv(cin, cout)
    if kind == "sage":
        return SAGEConv(cin, cout)
    if kind == "gat":
        return GATConv(cin, cout, heads=1)
    return GINConv(nn.Sequential(nn.Linear(cin, cout), nn.ReLU(), nn.Linear(cout, cout)))


class StandardGNN(nn.Module):
    """``(x (n, F), edge_index) -> (n, out_channels)`` with PyG convolutions.

    Args:
        kind: ``"gcn"``, ``"sage"``, ``"gat"`` or ``"gin"``.
        in_channels, hidden_channels, out_channels: widths.
        num_layers: number of convolutions (``>= 1``).
        dropout: between layers.
        device: where to put the parameters.
    """

    def __init__(
        self,
        kind: str,
        in_channels: int,
        hidden_channels: int = 32,
        out_channels: int = 32,
        num_layers: int = 2,
        *,
        dropout: float = 0.5,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        self.kind = check_choice("kind", kind, GNN_KINDS)
        check_positive_int("in_channels", in_channels)
        check_positive_int("hidden_channels", hidden_channels)
        self.out_channels = check_positive_int("out_channels", out_channels)
        self.num_layers = check_positive_int("num_layers", num_layers)
        self.dropout = check_positive_float("dropout", dropout, allow_zero=True)
        self.lin_pre = nn.Linear(in_channels, hidden_channels)
        widths = [hidden_channels] * num_layers + [out_channels]
        self.convs = nn.ModuleList(_conv(kind, widths[i], widths[i + 1]) for i in range(num_layers))
        self.to(device)

    def reset_parameters(self) -> None:
        self.lin_pre.reset_parameters()
        for conv in self.convs:
            conv.reset_parameters()

    def extra_repr(self) -> str:
        return f"kind={self.kind!r}, num_layers={self.num_layers}, dropout={self.dropout}"

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        h = self.lin_pre(x)
        for i, conv in enumerate(self.convs):
            h = conv(h, edge_index)
            if i + 1 < self.num_layers:
                h = F.dropout(torch.relu(h), self.dropout, self.training)
        return h


class FusedGIR(nn.Module):
    """A standard GNN and GIR trained jointly; embeddings concatenated or added.

    Args:
        gnn: the :class:`StandardGNN` branch.
        gir: the :class:`GIR` branch (with ``fusion="add"`` its ``out_channels`` must
            equal the GNN's).
        fusion: ``"concat"`` or ``"add"``.
    """

    def __init__(self, gnn: StandardGNN, gir: GIR, *, fusion: str = "concat") -> None:
        super().__init__()
        self.fusion = check_choice("fusion", fusion, FUSIONS)
        if fusion == "add" and gir.out_channels != gnn.out_channels:
            raise ValueError(
                f"fusion='add' needs gir.out_channels == gnn.out_channels, got {gir.out_channels} "
                f"and {gnn.out_channels}"
            )
        self.gnn = gnn
        self.gir = gir

    def reset_parameters(self) -> None:
        self.gnn.reset_parameters()
        self.gir.reset_parameters()

    def extra_repr(self) -> str:
        return f"fusion={self.fusion!r}"

    def forward(
        self, x: torch.Tensor, edge_index: torch.Tensor, anchor_dist: torch.Tensor, plan: PathPlan | None = None
    ) -> torch.Tensor:
        """``(n, F) -> (n, out)``.

        ``"concat"``: ``[gnn(x) / |gnn(x)| || gir(x) / |gir(x)|]`` (each branch
        L2-normalised first so that neither dominates an inner-product decoder);
        ``"add"``: ``gnn(x) + gir(x)``.
        """
        a = self.gnn(x, edge_index)
        b = self.gir(x, edge_index, anchor_dist, plan)
        if self.fusion == "add":
            return a + b
        return torch.cat([F.normalize(a, dim=-1), F.normalize(b, dim=-1)], dim=-1)
