"""Architecture selection on a trained supernet.

* :func:`magnitude_select` — the DARTS rule: on every edge keep the op of largest
  ``alpha`` (Liu et al., ICLR 2019).
* :func:`perturbation_select` — DARTS-PT operation selection (Wang et al., ICLR 2021,
  Alg. 1): take the undecided edges in random order; on each, mask every op in turn (its
  weight set to 0, the others not renormalised) and measure the supernet on the validation
  split; keep the op whose removal hurts most; discretise the edge; fine-tune; repeat.
* :func:`topology_select` — DARTS-PT topology selection (Alg. 2): for a node with more
  inputs than it keeps, remove each remaining input edge in turn and drop the one whose
  removal hurts least, until ``keep`` remain.

Ties (equal scores) are broken at random with the given seed. They are common: masking
``'none'`` never changes the output, and accuracies on small validation sets coincide.
The authors' code breaks ties towards op 0 (``'none'`` in NAS-Bench-201); we do not.
Measurements use :func:`~posenc.search.evaluate` (``model.eval()``, inference mode; see it
for BatchNorm).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn

from posenc._checks import check_choice, check_positive_int
from posenc.search.supernet import Data, LossFn, _edge_list, check_data, evaluate, mixed_ops

__all__ = ["CRITERIA", "Selection", "magnitude_select", "perturbation_select", "topology_select"]

CRITERIA: tuple[str, ...] = ("loss", "accuracy")
Progress = Callable[[int, int, dict[str, Any]], None]


@dataclass
class Selection:
    """The outcome of a selection.

    Attributes:
        method: ``'magnitude'``, ``'perturbation'`` or ``'topology'``.
        choices: ``{edge: chosen op}`` for every decided edge.
        decisions: in decision order, ``{"edge", "scores": {op: value}, "chosen", ...}``.
            Perturbation scores are the validation ``criterion`` with that op masked
            (``base`` holds the unmasked value); magnitude scores are ``softmax(alpha)``.
        criterion: ``'loss'`` / ``'accuracy'`` (perturbation), ``'alpha'`` (magnitude).
        pruned: edges removed by topology selection.
    """

    method: str
    choices: dict[str, str]
    decisions: list[dict[str, Any]] = field(default_factory=list)
    criterion: str = "alpha"
    pruned: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable copy."""
        return json.loads(json.dumps(asdict(self)))

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(asdict(self), **kwargs)


def _check_seed(seed: Any) -> int:
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {type(seed).__name__} ({seed!r})")
    return seed


def _pick(candidates: Sequence[str], scores: Mapping[str, float], best: str, gen: torch.Generator) -> str:
    """The candidate of maximal (``best='max'``) or minimal score, ties broken uniformly."""
    values = [scores[c] for c in candidates]
    target = max(values) if best == "max" else min(values)
    tol = 1e-12 * max(1.0, abs(target))
    tied = [c for c, v in zip(candidates, values) if abs(v - target) <= tol]
    if len(tied) == 1:
        return tied[0]
    return tied[int(torch.randint(len(tied), (1,), generator=gen))]


def magnitude_select(model: nn.Module, *, edges: Sequence[str] | None = None, seed: int = 0,
                     apply: bool = True) -> Selection:
    """Keep the op of largest ``softmax(alpha)`` on every undecided edge (DARTS).

    Its documented failure mode (DARTS-PT, Sec. 3): ``alpha`` need not measure what an op
    contributes, and parameter-free ops (``'skip'``, ``'none'``) tend to win.

    Args:
        model: a supernet.
        edges: the edges to decide (default: every undecided, unpruned edge).
        seed: breaks exact ties (e.g. ``alpha`` still uniform).
        apply: discretise the edges in ``model``.
    """
    all_edges = mixed_ops(model)
    names = _edge_list(model, edges, arg="edges")
    if edges is None:
        names = [n for n in names if all_edges[n].chosen is None and not all_edges[n].pruned]
    gen = torch.Generator().manual_seed(_check_seed(seed))
    sel = Selection("magnitude", {}, criterion="alpha")
    for name in names:
        edge = all_edges[name]
        w = torch.softmax(edge.alpha.detach().double(), 0).tolist()
        scores = dict(zip(edge.names, w))
        chosen = _pick(edge.names, scores, "max", gen)
        sel.choices[name] = chosen
        sel.decisions.append({"edge": name, "scores": scores, "chosen": chosen})
        if apply:
            edge.discretize(chosen)
    return sel


def _measure(model: nn.Module, val: Data, criterion: str, batch_size: int, loss_fn: LossFn | None) -> float:
    loss, acc = evaluate(model, val, batch_size, loss_fn=loss_fn)
    return loss if criterion == "loss" else acc


def perturbation_select(model: nn.Module, val: Data, *, criterion: str = "loss",
                        finetune: Callable[[nn.Module], Any] | None = None,
                        order: Sequence[str] | None = None, seed: int = 0, batch_size: int = 512,
                        loss_fn: LossFn | None = None, progress: Progress | None = None) -> Selection:
    """DARTS-PT operation selection; discretises ``model`` in place.

    For each undecided edge (in ``order``, else a random order drawn from ``seed``): for
    every op still on the edge, mask it and measure ``criterion`` on ``val``; keep the op
    whose removal hurts most (highest masked loss, or lowest masked accuracy), ties broken
    at random; discretise; then call ``finetune(model)``. An op flagged ``is_zero`` (such
    as :class:`~posenc.search.Zero`, the ``'none'`` op) is scored with the unmasked value
    without a pass: masking it cannot change the output. A decision thus costs one
    unmasked pass plus one cheaper (masked) pass per non-zero op.

    Args:
        model: a trained supernet (see :func:`~posenc.search.mixed_ops`).
        val: ``(inputs, targets)`` validation split (non-empty).
        criterion: ``'loss'`` (smoother on small validation sets; default) or ``'accuracy'``
            (the paper's).
        finetune: optional ``finetune(model)`` run after each decision, e.g.
            :func:`~posenc.search.make_finetune`.
        order: the edges to decide, in order (default: every undecided edge, shuffled).
        seed: edge order and tie breaks.
        batch_size: evaluation batch size.
        loss_fn: ``loss_fn(outputs, targets) -> loss``; cross-entropy by default.
        progress: optional ``progress(decision, total, record)`` after each decision.

    Returns:
        a :class:`Selection`; each decision holds ``edge``, ``scores`` (criterion with each
        op masked), ``base`` (criterion with nothing masked) and ``chosen``.
    """
    all_edges = mixed_ops(model)
    val = check_data("val", val)
    check_choice("criterion", criterion, CRITERIA)
    if finetune is not None and not callable(finetune):
        raise TypeError(f"finetune must be a callable finetune(model) or None, got {type(finetune).__name__}")
    check_positive_int("batch_size", batch_size)
    gen = torch.Generator().manual_seed(_check_seed(seed))
    if order is None:
        names = [n for n, e in all_edges.items() if e.chosen is None and not e.pruned]
        names = [names[i] for i in torch.randperm(len(names), generator=gen).tolist()]
    else:
        if isinstance(order, str):
            raise TypeError("order must be a sequence of edge names, not a string")
        names = _edge_list(model, order, arg="order")
        decided = [n for n in names if all_edges[n].chosen is not None or all_edges[n].pruned]
        if decided:
            raise ValueError(f"order names edges that are already decided or pruned: {decided}")
    sel = Selection("perturbation", {}, criterion=criterion)
    best = "max" if criterion == "loss" else "min"
    for k, name in enumerate(names):
        edge = all_edges[name]
        base = _measure(model, val, criterion, batch_size, loss_fn)
        scores: dict[str, float] = {}
        ops = edge.ops
        for op in edge.names:
            if getattr(ops[op], "is_zero", False):
                # masking an op whose output is zero leaves the supernet unchanged: the
                # score is the unmasked value exactly, without another validation pass
                scores[op] = base
                continue
            with edge.masked(op):
                scores[op] = _measure(model, val, criterion, batch_size, loss_fn)
        chosen = _pick(edge.names, scores, best, gen)
        edge.discretize(chosen)
        record = {"edge": name, "scores": scores, "base": base, "chosen": chosen}
        sel.choices[name] = chosen
        sel.decisions.append(record)
        if finetune is not None:
            finetune(model)
        if progress is not None:
            progress(k + 1, len(names), record)
    return sel


def topology_select(model: nn.Module, val: Data, nodes: Mapping[str, Sequence[str]], *, keep: int = 2,
                    criterion: str = "loss", finetune: Callable[[nn.Module], Any] | None = None,
                    seed: int = 0, batch_size: int = 512, loss_fn: LossFn | None = None) -> Selection:
    """DARTS-PT topology selection; prunes edges of ``model`` in place.

    For each node (in random order) with more than ``keep`` live input edges: remove each
    live input edge in turn, measure ``criterion``; prune the edge whose removal hurts
    least (lowest masked loss / highest masked accuracy); fine-tune; repeat until ``keep``
    remain.

    Args:
        model: a supernet, usually after :func:`perturbation_select`.
        val: ``(inputs, targets)``.
        nodes: ``{node: [its input edge names]}`` (e.g. ``DartsMicroNet.node_inputs()``).
        keep: input edges kept per node (2 in DARTS).
        criterion, finetune, seed, batch_size, loss_fn: as in :func:`perturbation_select`.

    Returns:
        a :class:`Selection` with ``method='topology'``, the pruned edges in ``pruned`` and
        one decision per pruning (``scores`` keyed by edge).
    """
    all_edges = mixed_ops(model)
    val = check_data("val", val)
    check_choice("criterion", criterion, CRITERIA)
    check_positive_int("keep", keep)
    if finetune is not None and not callable(finetune):
        raise TypeError(f"finetune must be a callable finetune(model) or None, got {type(finetune).__name__}")
    if not isinstance(nodes, Mapping) or not nodes:
        raise ValueError(f"nodes must be a non-empty mapping node -> input edge names, got {nodes!r}")
    for node, inputs in nodes.items():
        _edge_list(model, inputs, arg=f"nodes[{node!r}]")
    gen = torch.Generator().manual_seed(_check_seed(seed))
    node_names = list(nodes)
    node_names = [node_names[i] for i in torch.randperm(len(node_names), generator=gen).tolist()]
    sel = Selection("topology", {}, criterion=criterion)
    least = "min" if criterion == "loss" else "max"
    for node in node_names:
        while True:
            live = [e for e in nodes[node] if not all_edges[e].pruned]
            if len(live) <= keep:
                break
            scores: dict[str, float] = {}
            for e in live:
                with all_edges[e].removed():
                    scores[e] = _measure(model, val, criterion, batch_size, loss_fn)
            drop = _pick(live, scores, least, gen)
            all_edges[drop].prune()
            sel.pruned.append(drop)
            sel.decisions.append({"node": node, "scores": scores, "pruned": drop})
            if finetune is not None:
                finetune(model)
    for name, edge in all_edges.items():
        if edge.chosen is not None and not edge.pruned:
            sel.choices[name] = edge.chosen
    return sel
