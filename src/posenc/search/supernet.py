"""Supernets: any ``nn.Module`` holding :class:`~posenc.search.MixedOp` edges.

First-order DARTS (Liu et al., ICLR 2019, Sec. 2.3 with xi = 0): alternate one step of the
architecture parameters ``alpha`` on a validation batch and one step of the network
weights on a training batch. ``fixed_alpha=True`` trains the weights only, with ``alpha``
left at its (uniform) value: the "PT with fixed alpha" supernet of DARTS-PT (Wang et al.,
ICLR 2021, Sec. 5).

Data are pairs ``(inputs, targets)`` of tensors with the same first dimension; the loss is
cross-entropy on class logits unless a ``loss_fn(outputs, targets)`` is given.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from posenc._checks import check_choice, check_positive_float, check_positive_int
from posenc.search.mixed import MixedOp

__all__ = [
    "Data",
    "LossFn",
    "arch_parameters",
    "check_data",
    "evaluate",
    "make_finetune",
    "mixed_ops",
    "search_space",
    "train_darts",
    "train_network",
    "weight_parameters",
]

Data = tuple[torch.Tensor, torch.Tensor]
LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
Progress = Callable[[int, int, dict[str, float]], None]


def mixed_ops(model: nn.Module) -> dict[str, MixedOp]:
    """The mixed edges of ``model`` by qualified module name (the edge names), in module order.

    Raises:
        ValueError: if ``model`` has no :class:`MixedOp`.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    edges = {name: m for name, m in model.named_modules() if isinstance(m, MixedOp)}
    if not edges:
        raise ValueError(f"model has no mixed edges (no MixedOp inside {type(model).__name__}): nothing to search")
    return edges


def search_space(model: nn.Module) -> dict[str, tuple[str, ...]]:
    """``{edge: candidate op names}`` of a supernet."""
    return {name: edge.names for name, edge in mixed_ops(model).items()}


def arch_parameters(model: nn.Module) -> list[nn.Parameter]:
    """The ``alpha`` of every mixed edge of ``model``, in edge order."""
    return [edge.alpha for edge in mixed_ops(model).values()]


def weight_parameters(model: nn.Module) -> list[nn.Parameter]:
    """Every parameter of ``model`` that is not an architecture parameter."""
    arch = {id(p) for p in arch_parameters(model)}
    return [p for p in model.parameters() if id(p) not in arch]


def check_data(name: str, data: Any) -> Data:
    """Validate a ``(inputs, targets)`` pair: tensors, same non-zero length."""
    if not (isinstance(data, (tuple, list)) and len(data) == 2):
        raise TypeError(f"{name} must be a pair (inputs, targets) of tensors, got {type(data).__name__}")
    x, y = data
    if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor):
        raise TypeError(f"{name} must be a pair (inputs, targets) of tensors, got "
                        f"({type(x).__name__}, {type(y).__name__})")
    if x.dim() == 0 or y.dim() == 0 or x.shape[0] != y.shape[0]:
        raise ValueError(f"{name}: inputs and targets must share their first dimension, got shapes "
                         f"{tuple(x.shape)} and {tuple(y.shape)}")
    if x.shape[0] == 0:
        raise ValueError(f"{name} is empty (0 examples): nothing to train or measure on")
    if x.is_floating_point() and not bool(torch.isfinite(x).all()):
        raise ValueError(f"{name}: inputs must be finite")
    return x, y


def _default_loss(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(outputs, targets)


def _accuracy(outputs: torch.Tensor, targets: torch.Tensor) -> float:
    if outputs.dim() >= 2 and outputs.shape[:1] == targets.shape[:1] and not targets.is_floating_point():
        return float((outputs.argmax(-1) == targets).sum())
    return float("nan")


def evaluate(model: nn.Module, data: Data, batch_size: int = 512, *,
             loss_fn: LossFn | None = None) -> tuple[float, float]:
    """Mean loss and accuracy of ``model`` on ``data``, in fixed batch order.

    Runs under ``torch.inference_mode`` with ``model.eval()`` (restored afterwards): dropout
    is off, and a BatchNorm layer uses its running statistics if it tracks them, otherwise
    the statistics of each evaluation batch. The search spaces of this package build
    BatchNorm with ``track_running_stats=False`` (as DARTS supernets do), so supernets are
    measured with batch statistics, which follow the network when an op is masked.

    Args:
        model: the (super)network, ``inputs -> logits``.
        data: ``(inputs, targets)``.
        batch_size: examples per forward pass (with batch statistics, results depend on it).
        loss_fn: ``loss_fn(outputs, targets) -> mean loss``; cross-entropy by default.

    Returns:
        ``(loss, accuracy)``: the example-weighted mean loss and the fraction of correct
        argmax predictions (``nan`` when the targets are not class indices).
    """
    x, y = check_data("data", data)
    check_positive_int("batch_size", batch_size)
    loss_fn = loss_fn or _default_loss
    was_training = model.training
    model.eval()
    total_loss, correct, n = 0.0, 0.0, x.shape[0]
    try:
        with torch.inference_mode():
            for start in range(0, n, batch_size):
                xb, yb = x[start:start + batch_size], y[start:start + batch_size]
                out = model(xb)
                total_loss += float(loss_fn(out, yb)) * xb.shape[0]
                correct += _accuracy(out, yb)
    finally:
        model.train(was_training)
    return total_loss / n, correct / n


def _batches(n: int, batch_size: int, generator: torch.Generator):
    while True:
        perm = torch.randperm(n, generator=generator)
        for start in range(0, n - batch_size + 1 if n >= batch_size else 1, batch_size):
            yield perm[start:start + batch_size]


def train_darts(model: nn.Module, train: Data, val: Data, *, steps: int | None = None,
                epochs: float | None = None, batch_size: int = 64, w_lr: float = 0.025,
                a_lr: float = 3e-4, w_optimizer: str = "sgd", w_momentum: float = 0.9, w_weight_decay: float = 3e-4,
                a_weight_decay: float = 1e-3, grad_clip: float | None = 5.0, fixed_alpha: bool = False,
                seed: int = 0, loss_fn: LossFn | None = None,
                progress: Progress | None = None) -> dict[str, Any]:
    """First-order DARTS: weights on ``train``, ``alpha`` on ``val`` (bilevel, alternating).

    Each step takes one ``val`` batch for an Adam step of ``alpha`` (betas 0.5, 0.999, as in
    DARTS; skipped with ``fixed_alpha``) then one ``train`` batch for an SGD (or AdamW)
    step of the weights (cosine learning-rate decay to 0 over the run, gradient clipping).
    Discretised or pruned edges keep their state; their ``alpha`` gets no gradient.

    Args:
        model: a supernet (see :func:`mixed_ops`); trained in ``train()`` mode in place.
        train, val: ``(inputs, targets)`` pairs.
        steps / epochs: length of the run; give exactly one. An epoch is
            ``ceil(len(train) / batch_size)`` steps; 0 does nothing.
        batch_size: examples per step (capped at the split's size).
        w_optimizer: ``'sgd'`` (momentum; DARTS) or ``'adamw'`` (transformers).
        w_lr, w_momentum, w_weight_decay, grad_clip: of the weights' optimizer
            (``w_momentum`` is SGD's only).
        a_lr, a_weight_decay: Adam of ``alpha``.
        fixed_alpha: keep ``alpha`` as it is ("PT with fixed alpha").
        seed: seeds the batch order.
        loss_fn: ``loss_fn(outputs, targets) -> loss``; cross-entropy by default.
        progress: optional ``progress(step, total, {"train_loss": ..., "val_loss": ...})``
            called after every step.

    Returns:
        ``{"steps", "train_loss": [per step], "val_loss": [per step; empty with fixed_alpha],
        "alpha": {edge: softmax(alpha) list}}``.
    """
    edges = mixed_ops(model)
    val = check_data("val", val)
    return _fit(model, train, val, edges, steps=steps, epochs=epochs, batch_size=batch_size, w_lr=w_lr, a_lr=a_lr,
                w_optimizer=w_optimizer, w_momentum=w_momentum, w_weight_decay=w_weight_decay,
                a_weight_decay=a_weight_decay, grad_clip=grad_clip, fixed_alpha=fixed_alpha, seed=seed,
                loss_fn=loss_fn, progress=progress)


def train_network(model: nn.Module, train: Data, *, steps: int | None = None, epochs: float | None = None,
                  batch_size: int = 64, lr: float = 0.025, optimizer: str = "sgd", momentum: float = 0.9,
                  weight_decay: float = 3e-4, grad_clip: float | None = 5.0, seed: int = 0,
                  loss_fn: LossFn | None = None, progress: Progress | None = None) -> dict[str, Any]:
    """Train an ordinary network (e.g. a stand-alone architecture built with ``choices=``) with
    the weight half of :func:`train_darts`: same batches, optimiser, cosine schedule and
    clipping, so stand-alone networks and supernets are trained alike.

    Args:
        model: any ``nn.Module`` (mixed edges, if any, keep their ``alpha``).
        train: ``(inputs, targets)``.
        steps / epochs, batch_size, seed, loss_fn, progress: as in :func:`train_darts`.
        lr, optimizer, momentum, weight_decay, grad_clip: as ``w_lr``, ``w_optimizer``,
            ``w_momentum``, ``w_weight_decay``, ``grad_clip`` there.

    Returns:
        ``{"steps", "train_loss": [per step]}``.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    edges = {name: m for name, m in model.named_modules() if isinstance(m, MixedOp)}
    hist = _fit(model, train, None, edges, steps=steps, epochs=epochs, batch_size=batch_size, w_lr=lr, a_lr=0.0,
                w_optimizer=optimizer, w_momentum=momentum, w_weight_decay=weight_decay, a_weight_decay=0.0,
                grad_clip=grad_clip, fixed_alpha=True, seed=seed, loss_fn=loss_fn, progress=progress)
    return {"steps": hist["steps"], "train_loss": hist["train_loss"]}


def _fit(model: nn.Module, train: Data, val: Data | None, edges: dict[str, MixedOp], *, steps: int | None,
         epochs: float | None, batch_size: int, w_lr: float, a_lr: float, w_optimizer: str, w_momentum: float,
         w_weight_decay: float, a_weight_decay: float, grad_clip: float | None, fixed_alpha: bool, seed: int,
         loss_fn: LossFn | None, progress: Progress | None) -> dict[str, Any]:
    train = check_data("train", train)
    if (steps is None) == (epochs is None):
        raise ValueError(f"give exactly one of steps and epochs, got steps={steps!r}, epochs={epochs!r}")
    check_positive_int("batch_size", batch_size)
    n_train = train[0].shape[0]
    if epochs is not None:
        check_positive_float("epochs", epochs, allow_zero=True)
        steps = int(round(epochs * math.ceil(n_train / batch_size)))
    check_positive_int("steps", steps, minimum=0)
    check_positive_float("w_lr", w_lr, allow_zero=True)
    check_positive_float("a_lr", a_lr, allow_zero=True)
    check_choice("w_optimizer", w_optimizer, ("sgd", "adamw"))
    if grad_clip is not None:
        check_positive_float("grad_clip", grad_clip)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    loss_fn = loss_fn or _default_loss
    history: dict[str, Any] = {"steps": steps, "train_loss": [], "val_loss": []}
    alphas = [e.alpha for e in edges.values() if e.chosen is None and not e.pruned]
    arch = {id(e.alpha) for e in edges.values()}
    weights = [p for p in model.parameters() if id(p) not in arch]
    w_opt: torch.optim.Optimizer | None = None
    if weights and w_optimizer == "sgd":
        w_opt = torch.optim.SGD(weights, lr=w_lr, momentum=w_momentum, weight_decay=w_weight_decay)
    elif weights:
        w_opt = torch.optim.AdamW(weights, lr=w_lr, weight_decay=w_weight_decay)
    a_opt = (torch.optim.Adam(alphas, lr=a_lr, betas=(0.5, 0.999), weight_decay=a_weight_decay)
             if alphas and not fixed_alpha else None)
    gen = torch.Generator().manual_seed(seed)
    tb = _batches(n_train, min(batch_size, n_train), gen)
    vb = _batches(val[0].shape[0], min(batch_size, val[0].shape[0]), gen) if val is not None else None
    was_training = model.training
    model.train()
    for p in alphas:
        p.requires_grad_(not fixed_alpha)
    try:
        for step in range(steps):
            info: dict[str, float] = {}
            if a_opt is not None and val is not None and vb is not None:
                idx = next(vb)
                a_opt.zero_grad(set_to_none=True)
                loss = loss_fn(model(val[0][idx]), val[1][idx])
                loss.backward()
                a_opt.step()
                info["val_loss"] = float(loss.detach())
                history["val_loss"].append(info["val_loss"])
            if w_opt is not None:
                for group in w_opt.param_groups:
                    group["lr"] = 0.5 * w_lr * (1 + math.cos(math.pi * step / steps))
                idx = next(tb)
                w_opt.zero_grad(set_to_none=True)
                for p in alphas:
                    p.grad = None
                loss = loss_fn(model(train[0][idx]), train[1][idx])
                loss.backward()
                if grad_clip is not None:
                    nn.utils.clip_grad_norm_(weights, grad_clip)
                w_opt.step()
                info["train_loss"] = float(loss.detach())
                history["train_loss"].append(info["train_loss"])
            if progress is not None:
                progress(step + 1, steps, info)
    finally:
        for p in alphas:
            p.requires_grad_(True)
            p.grad = None
        model.train(was_training)
    history["alpha"] = {name: torch.softmax(e.alpha.detach(), 0).tolist() for name, e in edges.items()}
    return history


def make_finetune(train: Data, val: Data, *, epochs: float, **train_kwargs: Any) -> Callable[[nn.Module], None]:
    """A ``finetune(model)`` callable for :func:`~posenc.search.perturbation_select`: runs
    :func:`train_darts` for ``epochs`` epochs (0 allowed) after each decision.

    Args:
        train, val: ``(inputs, targets)`` pairs.
        epochs: fine-tuning epochs per decision, ``>= 0``.
        **train_kwargs: passed to :func:`train_darts` (``batch_size``, ``w_lr``,
            ``fixed_alpha``, ``seed``, ...).
    """
    check_positive_float("epochs", epochs, allow_zero=True)
    check_data("train", train)
    check_data("val", val)
    if "steps" in train_kwargs:
        raise ValueError("make_finetune takes epochs, not steps")
    calls = [0]
    base_seed = int(train_kwargs.pop("seed", 0))

    def finetune(model: nn.Module) -> None:
        calls[0] += 1
        train_darts(model, train, val, epochs=epochs, seed=base_seed + calls[0], **train_kwargs)

    return finetune


def _edge_list(model: nn.Module, names: Sequence[str] | None, *, arg: str) -> list[str]:
    edges = mixed_ops(model)
    if names is None:
        return list(edges)
    names = list(names)
    unknown = [n for n in names if n not in edges]
    if unknown:
        raise ValueError(f"{arg} names unknown edges {unknown}; the model's edges are {list(edges)}")
    if len(set(names)) != len(names):
        raise ValueError(f"{arg} repeats an edge: {names}")
    return names
