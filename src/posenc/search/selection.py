"""Architecture selection on a trained supernet.

* :func:`magnitude_select` — the DARTS rule: on every edge keep the op of largest
  ``alpha`` (Liu et al., ICLR 2019); in a DARTS cell, also keep the ``keep`` input edges of
  each node with the largest ``alpha`` (DARTS's genotype; ``'none'`` is never kept).
* :func:`perturbation_select` — DARTS-PT operation selection (Wang et al., ICLR 2021,
  Alg. 1): take the undecided edges in random order; on each, mask every op in turn (its
  weight set to 0, the others not renormalised) and measure the supernet on the validation
  split; keep the op whose removal hurts most; discretise the edge; tune; repeat.
* :func:`topology_select` — DARTS-PT topology selection (Alg. 2): for a node with more
  inputs than it keeps, remove each remaining input edge in turn and drop the one whose
  removal hurts least, until ``keep`` remain.

The defaults are those of the authors' code (ruocwang/darts-pt): the criterion is the
validation **accuracy**, measured over the whole validation split in batches of 64 with
BatchNorm on batch statistics (their ``infer(..., eval=False)``); in the DARTS space each
decision takes one edge of the normal cell and one of the reduction cell (``groups``).
Ties (equal scores) are broken at random with the given seed (``ties='random'``); they are
common: masking ``'none'`` never changes the output, and accuracies on small validation
sets coincide. The authors' code keeps the lowest op index (``ties='official'``; op 0 is
``'none'`` in NAS-Bench-201).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn

from posenc._checks import check_choice, check_positive_int
from posenc.search.batches import Batches, Data
from posenc.search.supernet import BN_MODES, LossFn, _check_seed, _edge_list, evaluate, mixed_ops

__all__ = ["CRITERIA", "TIES", "Selection", "magnitude_select", "perturbation_select", "topology_select"]

#: Perturbation criteria: ``'accuracy'`` (the authors' default) or ``'loss'`` (smoother on small splits).
CRITERIA: tuple[str, ...] = ("accuracy", "loss")
#: Tie rules: ``'random'`` (seeded) or ``'official'`` (the authors': the lowest op index; for
#: topology, the last of the tied edges, from their ``>=`` comparison).
TIES: tuple[str, ...] = ("random", "official")
Progress = Callable[[int, int, dict[str, Any]], None]


@dataclass
class Selection:
    """The outcome of a selection.

    Attributes:
        method: ``'magnitude'``, ``'perturbation'`` or ``'topology'``.
        choices: ``{edge: chosen op}`` for every decided edge that was not pruned.
        decisions: in decision order, ``{"edge", "scores": {op: value}, "chosen", ...}``.
            Perturbation scores are the validation ``criterion`` with that op masked
            (``base`` holds the unmasked value); magnitude scores are ``softmax(alpha)``.
        criterion: ``'loss'`` / ``'accuracy'`` (perturbation), ``'alpha'`` (magnitude).
        pruned: edges removed by topology selection.
        candidates: of :func:`~posenc.search.choose_encoding`: per edge (or ``"|"``-joined
            group of edges for a race), per candidate ``{"score", "uncertainty", "cost", ...}``.
        cost: of :func:`~posenc.search.choose_encoding`: ``{"steps", "standalone_steps",
            "budget_steps", "ratio"}``.
        rebuild: of :func:`~posenc.search.choose_encoding` with ``candidates=``: the keywords of
            :func:`~posenc.search.with_encoding` that give a fresh plain model the chosen
            encoding (``with_encoding(MyModel(), **selection.rebuild)``, then load the weights).

    ``print(selection)`` gives a readable summary: the choices, each candidate's scores and
    cost, and the total cost.
    """

    method: str
    choices: dict[str, str]
    decisions: list[dict[str, Any]] = field(default_factory=list)
    criterion: str = "alpha"
    pruned: list[str] = field(default_factory=list)
    candidates: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    cost: dict[str, Any] = field(default_factory=dict)
    rebuild: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        lines = [f"{self.method}: " + (", ".join(f"{k} = {v}" for k, v in self.choices.items()) or "no choice")]
        for group, cands in self.candidates.items():
            lines.append(f"  {group}:")
            width = max(len(c) for c in cands) if cands else 0
            for name, r in cands.items():
                parts = []
                if r.get("val_accuracy") is not None:
                    parts.append(f"val accuracy {r['val_accuracy']:.4f}")
                if r.get("val_loss") is not None:
                    parts.append(f"val loss {r['val_loss']:.4f}")
                if r.get("val_accuracy") is None and r.get("score") is not None:
                    parts.append(f"score {r['score']:.4f}")
                if r.get("steps_trained") is not None:
                    n = r.get("rungs")
                    parts.append(f"trained {r['steps_trained']} steps ({n} rung{'' if n == 1 else 's'})")
                if r.get("family"):
                    parts.append(r["family"])
                mark = "*" if name in self.choices.values() or name == "|".join(self.choices.values()) else " "
                lines.append(f"  {mark} {name:<{width}}  " + ", ".join(parts))
        rungs = [d for d in self.decisions if "rung" in d]
        if rungs:
            lines.append(f"  rungs ({self.criterion}):")
            for d in rungs:
                scores = ", ".join(f"{k} {v:.3f}" for k, v in d["scores"].items())
                lines.append(f"    {d['rung']} at step {d['steps']}{' (cut held: none had learned)' if d.get('held') else ''}"
                             f": {scores}")
        if self.cost:
            lines.append(f"  cost: {self.cost['steps']:.1f} steps = {self.cost['ratio']:.2f}x one training of "
                         f"{self.cost['standalone_steps']} steps (budget {self.cost['budget']:g}x)")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable copy."""
        return json.loads(json.dumps(asdict(self)))

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(asdict(self), **kwargs)


def _pick(candidates: Sequence[str], scores: Mapping[str, float], best: str, gen: torch.Generator,
          ties: str, last: bool = False) -> str:
    """The candidate of maximal (``best='max'``) or minimal score; ties at random, or the
    first (``last``: the last) in candidate order."""
    values = [scores[c] for c in candidates]
    target = max(values) if best == "max" else min(values)
    tol = 1e-12 * max(1.0, abs(target))
    tied = [c for c, v in zip(candidates, values) if abs(v - target) <= tol]
    if len(tied) == 1:
        return tied[0]
    if ties == "official":
        return tied[-1] if last else tied[0]
    return tied[int(torch.randint(len(tied), (1,), generator=gen))]


def decided_error(edges: Mapping[str, Any], names: Sequence[str], call: str) -> ValueError:
    """The error for selecting on edges that are already decided: names each edge, its state and
    the call that decided it."""
    parts = []
    for n in names[:5]:
        e = edges[n]
        state = "pruned" if e.pruned else f"discretised to {e.chosen!r}"
        parts.append(f"{n!r} ({state} by {e.decided_by})")
    more = f" and {len(names) - 5} more" if len(names) > 5 else ""
    return ValueError(f"{call}: nothing to select: edge {', '.join(parts)}{more} is already decided; call "
                      "clear_selection() on the edge (or select on a copy made before deciding, e.g. "
                      "magnitude_select(model, apply=False))")


def _check_exclude(exclude: Sequence[str] | None) -> tuple[str, ...]:
    if exclude is None:
        return ()
    if isinstance(exclude, str) or not isinstance(exclude, Sequence):
        raise TypeError(f"exclude must be a sequence of op names, got {exclude!r}")
    return tuple(exclude)


def _allowed(name: str, names: Sequence[str], exclude: Sequence[str]) -> list[str]:
    allowed = [n for n in names if n not in exclude]
    if not allowed:
        raise ValueError(f"exclude={list(exclude)} leaves edge {name!r} (ops {list(names)}) nothing to keep")
    return allowed


def _check_nodes(model: nn.Module, nodes: Any) -> dict[str, list[str]]:
    if not isinstance(nodes, Mapping) or not nodes:
        raise ValueError(f"nodes must be a non-empty mapping node -> input edge names, got {nodes!r}")
    out = {}
    for node, inputs in nodes.items():
        out[str(node)] = _edge_list(model, inputs, arg=f"nodes[{node!r}]")
    return out


def magnitude_select(model: nn.Module, *, edges: Sequence[str] | None = None, seed: int = 0, apply: bool = True,
                     exclude: Sequence[str] | None = None, nodes: Mapping[str, Sequence[str]] | None = None,
                     keep: int = 2, ties: str = "random") -> Selection:
    """Keep the op of largest ``softmax(alpha)`` on every undecided edge (DARTS).

    Its documented failure mode (DARTS-PT, Sec. 3): ``alpha`` need not measure what an op
    contributes, and parameter-free ops (``'skip'``, ``'none'``) tend to win.

    Args:
        model: a supernet.
        edges: the edges to decide (default: every undecided, unpruned edge).
        seed: breaks exact ties (e.g. ``alpha`` still uniform).
        apply: discretise (and prune) the edges in ``model``.
        exclude: ops never kept (DARTS's genotype never reports ``'none'``: pass
            ``("none",)``; a DARTS-space network's ``derive_exclude``).
        nodes: ``{node: input edges}`` of a DARTS cell: per node, only the ``keep`` edges
            with the largest weight of an allowed op stay; the others are pruned (DARTS's
            genotype).
        keep: input edges kept per node.
        ties: one of :data:`TIES`.
    """
    all_edges = mixed_ops(model)
    names = _edge_list(model, edges, arg="edges")
    decided = [n for n in names if not all_edges[n].undecided]
    if edges is None:
        names = [n for n in names if all_edges[n].undecided]
        if not names:
            raise decided_error(all_edges, decided, "magnitude_select")
    elif decided:
        raise decided_error(all_edges, decided, "magnitude_select")
    gen = torch.Generator().manual_seed(_check_seed(seed))
    exclude = _check_exclude(exclude)
    check_choice("ties", ties, TIES)
    check_positive_int("keep", keep)
    node_map = _check_nodes(model, nodes) if nodes is not None else {}
    sel = Selection("magnitude", {}, criterion="alpha")
    strength: dict[str, float] = {}
    for name in names:
        edge = all_edges[name]
        try:
            edge.check_alpha()
        except ValueError as err:
            raise ValueError(f"edge {name!r}: {err}") from None
        w = torch.softmax(edge.alpha.detach().double(), 0).tolist()
        scores = dict(zip(edge.names, w))
        allowed = _allowed(name, edge.names, exclude)
        chosen = _pick(allowed, scores, "max", gen, ties)
        strength[name] = scores[chosen]
        sel.choices[name] = chosen
        sel.decisions.append({"edge": name, "scores": scores, "chosen": chosen})
    for node, inputs in node_map.items():
        live = [e for e in inputs if e in strength]
        if len(live) <= keep:
            continue
        ranked = sorted(live, key=lambda e: -strength[e])  # stable: earlier edges win ties, as DARTS's sort
        for e in ranked[keep:]:
            sel.pruned.append(e)
            sel.choices.pop(e, None)
        sel.decisions.append({"node": node, "scores": {e: strength[e] for e in live}, "pruned": ranked[keep:]})
    if apply:
        for name in names:
            if name in sel.pruned:
                all_edges[name].prune(by="magnitude_select()")
            else:
                all_edges[name].discretize(sel.choices[name], by="magnitude_select()")
    return sel


def _measure(model: nn.Module, val: Batches, criterion: str, batch_size: int, loss_fn: LossFn | None,
             bn: str) -> tuple[float, float]:
    """``(criterion value, loss)``: the loss tells whether the outputs were finite."""
    loss, acc = evaluate(model, val, batch_size, loss_fn=loss_fn, bn=bn)
    return (loss if criterion == "loss" else acc), loss


def _check_score(value: tuple[float, float], what: str) -> float:
    score, loss = value
    if not (math.isfinite(score) and math.isfinite(loss)):
        raise ValueError(f"the validation {what} gave a non-finite score (loss {loss}): the supernet's outputs "
                         "overflow or its weights diverged; no op can be chosen from it")
    return score


def _groups(model: nn.Module, groups: Sequence[Sequence[str]] | None, arg: str) -> list[list[str]] | None:
    if groups is None:
        return None
    if isinstance(groups, str) or not isinstance(groups, Sequence) or not groups:
        raise TypeError(f"{arg} must be a non-empty sequence of sequences of edge names, got {groups!r}")
    out = [_edge_list(model, g, arg=arg) for g in groups]
    flat = [e for g in out for e in g]
    if len(set(flat)) != len(flat):
        raise ValueError(f"{arg} puts an edge in two groups")
    return out


def perturbation_select(model: nn.Module, val: Data, *, criterion: str = "accuracy",
                        finetune: Callable[[nn.Module], Any] | None = None,
                        order: Sequence[str] | None = None, groups: Sequence[Sequence[str]] | None = None,
                        seed: int = 0, batch_size: int = 64, bn: str = "batch", ties: str = "random",
                        exclude: Sequence[str] | None = None, loss_fn: LossFn | None = None,
                        progress: Progress | None = None) -> Selection:
    """DARTS-PT operation selection; discretises ``model`` in place.

    Each decision step takes one undecided edge at random (of each group, in group order:
    the DARTS space decides a normal and a reduction edge per step, as the authors' code);
    for every op still on the edge, masks it and measures ``criterion`` on ``val``; keeps
    the op whose removal hurts most (lowest masked accuracy, or highest masked loss); then
    calls ``finetune(model)`` once per step. An op flagged ``is_zero`` (such as
    :class:`~posenc.search.Zero`, the ``'none'`` op) is scored with the unmasked value
    without a pass: masking it cannot change the output. A decision thus costs one unmasked
    pass plus one cheaper (masked) pass per non-zero op.

    Args:
        model: a trained supernet (see :func:`~posenc.search.mixed_ops`).
        val: ``(inputs, targets)`` or an iterable of such batches (non-empty).
        criterion: ``'accuracy'`` (the authors') or ``'loss'``.
        finetune: optional ``finetune(model)`` run after each decision step, e.g.
            :func:`~posenc.search.make_finetune`.
        order: the edges to decide, in this order (one per step; not with ``groups``).
        groups: edge groups; each step decides one random undecided edge of every group
            that still has one. Default: one group of every undecided edge.
        seed: edge order and tie breaks.
        batch_size: evaluation batch size of an in-memory pair (64, the authors').
        bn: BatchNorm during the measurements (:data:`~posenc.search.supernet.BN_MODES`):
            ``'batch'`` statistics (the authors') or ``'eval'`` (running statistics where tracked).
        ties: one of :data:`TIES`.
        exclude: ops never kept (still scored), e.g. ``("none",)`` in a DARTS cell.
        loss_fn: ``loss_fn(outputs, targets) -> loss``; cross-entropy by default.
        progress: optional ``progress(decision, total, record)`` after each decision.

    Returns:
        a :class:`Selection`; each decision holds ``edge``, ``scores`` (criterion with each
        op masked), ``base`` (criterion with nothing masked) and ``chosen``.

    Raises:
        ValueError: a non-finite ``alpha`` or score; every edge to select is already decided
            (named, with the call that decided it).
    """
    all_edges = mixed_ops(model)
    val_b = Batches("val", val)
    check_choice("criterion", criterion, CRITERIA)
    if finetune is not None and not callable(finetune):
        raise TypeError(f"finetune must be a callable finetune(model) or None, got {type(finetune).__name__}")
    check_positive_int("batch_size", batch_size)
    if loss_fn is not None and not callable(loss_fn):
        raise TypeError(f"loss_fn must be a callable loss_fn(outputs, targets) or None, got {type(loss_fn).__name__}")
    check_choice("bn", bn, BN_MODES)
    check_choice("ties", ties, TIES)
    exclude = _check_exclude(exclude)
    gen = torch.Generator().manual_seed(_check_seed(seed))
    if order is not None and groups is not None:
        raise ValueError("give order or groups, not both")
    if order is not None:
        names = _edge_list(model, order, arg="order")
        decided = [n for n in names if not all_edges[n].undecided]
        if decided:
            raise decided_error(all_edges, decided, "perturbation_select(order=...)")
        rounds = [[n] for n in names]
        pools = None
    else:
        pools = _groups(model, groups, "groups")
        if pools is None:
            pools = [list(all_edges)]
        if not any(all_edges[n].undecided for pool in pools for n in pool):
            raise decided_error(all_edges, [n for pool in pools for n in pool], "perturbation_select")
        pools = [[n for n in pool if all_edges[n].undecided] for pool in pools]
        rounds = None
    for name, edge in all_edges.items():
        if edge.undecided:
            try:
                edge.check_alpha()
            except ValueError as err:
                raise ValueError(f"edge {name!r}: {err}") from None
    total = sum(len(p) for p in pools) if pools is not None else len(rounds)  # type: ignore[arg-type]
    sel = Selection("perturbation", {}, criterion=criterion)
    best = "min" if criterion == "accuracy" else "max"
    done = 0
    step = 0
    while True:
        if rounds is not None:
            if step >= len(rounds):
                break
            batch = rounds[step]
        else:
            batch = []
            for pool in pools:  # type: ignore[union-attr]
                if pool:
                    batch.append(pool.pop(int(torch.randint(len(pool), (1,), generator=gen))))
            if not batch:
                break
        step += 1
        for name in batch:
            edge = all_edges[name]
            base = _check_score(_measure(model, val_b, criterion, batch_size, loss_fn, bn), criterion)
            scores: dict[str, float] = {}
            ops = edge.ops
            for op in edge.names:
                if getattr(ops[op], "is_zero", False):
                    # masking an op whose output is zero leaves the supernet unchanged: the
                    # score is the unmasked value exactly, without another validation pass
                    scores[op] = base
                    continue
                with edge.masked(op):
                    scores[op] = _check_score(_measure(model, val_b, criterion, batch_size, loss_fn, bn),
                                              f"{criterion} with op {op!r} of edge {name!r} masked")
            chosen = _pick(_allowed(name, edge.names, exclude), scores, best, gen, ties)
            edge.discretize(chosen, by="perturbation_select()")
            record = {"edge": name, "scores": scores, "base": base, "chosen": chosen, "step": step}
            sel.choices[name] = chosen
            sel.decisions.append(record)
            done += 1
            if progress is not None:
                progress(done, total, record)
        if finetune is not None:
            finetune(model)
    return sel


def topology_select(model: nn.Module, val: Data, nodes: Mapping[str, Sequence[str]], *, keep: int = 2,
                    criterion: str = "accuracy", finetune: Callable[[nn.Module], Any] | None = None,
                    groups: Sequence[Sequence[str]] | None = None, seed: int = 0, batch_size: int = 64,
                    bn: str = "batch", ties: str = "random", cumulative: bool = False,
                    loss_fn: LossFn | None = None) -> Selection:
    """DARTS-PT topology selection; prunes edges of ``model`` in place.

    Each step takes one node at random (of each group of nodes, in group order: the DARTS
    space takes a normal and a reduction node per step) with more than ``keep`` live input
    edges; removes each live input edge in turn and measures ``criterion``; prunes the edge
    whose removal hurts least (highest masked accuracy / lowest masked loss) until ``keep``
    remain; then calls ``finetune(model)`` once per step. As in the authors' code, the edges
    a node drops are removed from the network together once the node is decided, so each
    round of a node measures the others with the earlier drops still in place
    (``cumulative=True`` removes each drop at once).

    Args:
        model: a supernet, usually after :func:`perturbation_select`.
        val: ``(inputs, targets)`` or an iterable of such batches.
        nodes: ``{node: [its input edge names]}`` (e.g. ``DartsNet.node_inputs()``).
        keep: input edges kept per node (2 in DARTS).
        groups: groups of node names (e.g. ``DartsNet.node_groups()``); default one group.
        cumulative: prune each dropped edge before the node's next round.
        criterion, finetune, seed, batch_size, bn, ties, loss_fn: as in :func:`perturbation_select`.

    Returns:
        a :class:`Selection` with ``method='topology'``, the pruned edges in ``pruned`` and
        one decision per node (``scores`` keyed by edge, for each removal).
    """
    all_edges = mixed_ops(model)
    val_b = Batches("val", val)
    check_choice("criterion", criterion, CRITERIA)
    check_positive_int("keep", keep)
    check_positive_int("batch_size", batch_size)
    check_choice("bn", bn, BN_MODES)
    check_choice("ties", ties, TIES)
    if finetune is not None and not callable(finetune):
        raise TypeError(f"finetune must be a callable finetune(model) or None, got {type(finetune).__name__}")
    node_map = _check_nodes(model, nodes)
    gen = torch.Generator().manual_seed(_check_seed(seed))
    if groups is None:
        pools = [list(node_map)]
    else:
        if isinstance(groups, str) or not isinstance(groups, Sequence) or not groups:
            raise TypeError(f"groups must be a non-empty sequence of sequences of node names, got {groups!r}")
        pools = [list(g) for g in groups]
        unknown = [n for g in pools for n in g if n not in node_map]
        if unknown:
            raise ValueError(f"groups names unknown nodes {unknown}; nodes are {list(node_map)}")
    pools = [[n for n in pool if sum(not all_edges[e].pruned for e in node_map[n]) > keep] for pool in pools]
    sel = Selection("topology", {}, criterion=criterion)
    least = "max" if criterion == "accuracy" else "min"
    while True:
        batch = [pool.pop(int(torch.randint(len(pool), (1,), generator=gen))) for pool in pools if pool]
        if not batch:
            break
        for node in batch:
            rounds = []
            dropped: list[str] = []
            while True:
                live = [e for e in node_map[node] if not all_edges[e].pruned and e not in dropped]
                if len(live) <= keep:
                    break
                scores: dict[str, float] = {}
                for e in live:
                    with all_edges[e].removed():
                        scores[e] = _check_score(_measure(model, val_b, criterion, batch_size, loss_fn, bn),
                                                 f"{criterion} with edge {e!r} removed")
                drop = _pick(live, scores, least, gen, ties, last=True)
                dropped.append(drop)
                if cumulative:
                    all_edges[drop].prune(by="topology_select()")
                rounds.append({"scores": scores, "pruned": drop})
            for e in dropped:
                all_edges[e].prune(by="topology_select()")
                sel.pruned.append(e)
            sel.decisions.append({"node": node, "rounds": rounds, "pruned": [r["pruned"] for r in rounds]})
        if finetune is not None:
            finetune(model)
    for name, edge in all_edges.items():
        if edge.chosen is not None and not edge.pruned:
            sel.choices[name] = edge.chosen
    return sel
