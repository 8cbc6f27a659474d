"""Turn a discretised supernet into a plain network."""

from __future__ import annotations

import copy

from torch import nn

from posenc.search.mixed import MixedOp

__all__ = ["apply_selection"]


def apply_selection(model: nn.Module, *, inplace: bool = False) -> nn.Module:
    """A plain model in which every :class:`~posenc.search.MixedOp` is replaced by what it has
    become: its chosen op (with the weights it trained in the supernet), or zeros for a pruned
    edge (:class:`~posenc.search.mixed.PrunedEdge`; an edge discretised to ``'none'`` keeps
    its :class:`~posenc.search.Zero`). Edges that share an architecture (``share_with``) are
    replaced each by its own copy of the chosen op.

    In eval mode the result computes what the discretised supernet computes: the chosen op
    alone with weight 1, zero edges skipped, BatchNorm as it was.

    Args:
        model: a supernet whose every edge is decided (discretised or pruned), e.g. after
            :func:`~posenc.search.perturbation_select` or :func:`~posenc.search.magnitude_select`.
        inplace: replace the edges in ``model`` itself instead of in a deep copy.

    Returns:
        the plain model (``model`` itself when ``inplace``); it holds no ``MixedOp``, no
        architecture parameter and no unchosen candidate.

    Raises:
        ValueError: an edge is still undecided (named); the model has no mixed edge.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    if isinstance(model, MixedOp):
        raise TypeError("model is itself a MixedOp: call its selected_module() instead")
    found = [(name, m) for name, m in model.named_modules(remove_duplicate=False) if isinstance(m, MixedOp)]
    if not found:
        raise ValueError(f"model has no mixed edges (no MixedOp inside {type(model).__name__}): nothing to apply")
    undecided = [name for name, m in found if m.undecided]
    if undecided:
        raise ValueError(f"every edge must be decided before apply_selection; undecided: {undecided[:5]}"
                         + (f" and {len(undecided) - 5} more" if len(undecided) > 5 else ""))
    out = model if inplace else copy.deepcopy(model)
    for name, _ in found:
        parent_name, _, attr = name.rpartition(".")
        parent = out.get_submodule(parent_name) if parent_name else out
        edge = parent._modules[attr]
        assert isinstance(edge, MixedOp)
        parent._modules[attr] = edge.selected_module()
    return out
