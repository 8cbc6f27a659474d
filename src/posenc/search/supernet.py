"""Supernets: any ``nn.Module`` holding :class:`~posenc.search.MixedOp` edges.

First-order DARTS (Liu et al., ICLR 2019, Sec. 2.3 with xi = 0): alternate one step of the
architecture parameters ``alpha`` on a validation batch and one step of the network
weights on a training batch. ``fixed_alpha=True`` trains the weights only, with ``alpha``
left at its (near-uniform) initial value: the "PT with fixed alpha" supernet of DARTS-PT
(Wang et al., ICLR 2021, Sec. 5). The defaults are those of the authors' code
(ruocwang/darts-pt): weights by SGD (lr 0.025, momentum 0.9, weight decay 3e-4, gradient
clipping 5) with a per-epoch cosine schedule to 0.001; ``alpha`` by Adam (lr 3e-4, betas
(0.5, 0.999), weight decay 1e-3); batches of 64.

Data are pairs ``(inputs, targets)`` of tensors or any iterable of such batches (a
``DataLoader``; see :mod:`posenc.search.batches`); the loss is cross-entropy on class
logits unless a ``loss_fn(outputs, targets)`` is given.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import nn

from posenc._checks import check_choice, check_positive_float, check_positive_int
from posenc.search.batches import IGNORE_INDEX, Batches, Data, call_model, check_data, logits_of
from posenc.search.mixed import MixedOp

__all__ = [
    "BN_MODES",
    "Data",
    "LossFn",
    "arch_parameters",
    "batch_statistics",
    "check_data",
    "evaluate",
    "mixed_ops",
    "search_space",
    "train_darts",
    "train_network",
    "weight_parameters",
    "ALPHA_TRAVEL",
    "DARTS_RECIPE",
    "ENCODING_RECIPE",
    "OLD_NAMES",
    "alpha_lr",
    "check_targets",
]

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
Progress = Callable[[int, int, dict[str, float]], None]
#: How :func:`evaluate` treats BatchNorm: ``'eval'`` (``model.eval()`` as it is: running
#: statistics where a layer tracks them) or ``'batch'`` (every BatchNorm normalises with the
#: statistics of the batch, as the authors' code measures perturbations in train mode).
BN_MODES: tuple[str, ...] = ("eval", "batch")


def mixed_ops(model: nn.Module) -> dict[str, MixedOp]:
    """The searchable edges of ``model`` by qualified module name (the edge names), in module
    order. An edge that shares its architecture with another (``share_with``) is not listed:
    its leader stands for both.

    Raises:
        ValueError: if ``model`` has no :class:`MixedOp`.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    edges = {name: m for name, m in model.named_modules() if isinstance(m, MixedOp) and m.leader is None}
    if not edges:
        raise ValueError(f"model has no mixed edges (no MixedOp inside {type(model).__name__}): nothing to search")
    return edges


def search_space(model: nn.Module) -> dict[str, tuple[str, ...]]:
    """``{edge: candidate op names}`` of a supernet."""
    return {name: edge.names for name, edge in mixed_ops(model).items()}


def arch_parameters(model: nn.Module) -> list[nn.Parameter]:
    """The ``alpha`` of every searchable edge of ``model``, in edge order."""
    return [edge.alpha for edge in mixed_ops(model).values()]


def weight_parameters(model: nn.Module) -> list[nn.Parameter]:
    """Every parameter of ``model`` that is not an architecture parameter."""
    arch = {id(m.alpha) for m in model.modules() if isinstance(m, MixedOp)}
    return [p for p in model.parameters() if id(p) not in arch]


def _default_loss(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(outputs, targets)


def _correct(outputs: torch.Tensor, targets: torch.Tensor) -> float:
    """Correct argmax predictions in the units of :func:`counted`: a count for ``(batch, classes)``
    logits of ``(batch,)`` targets; for targets with more dimensions (classes at dimension 1, as
    cross-entropy takes them, or last) the share of right targets times :func:`counted`. Targets of
    :data:`IGNORE_INDEX` count in neither; ``nan`` for floating-point targets or other shapes."""
    if targets.is_floating_point() or outputs.dim() < 2 or outputs.shape[:1] != targets.shape[:1]:
        return float("nan")
    if outputs.dim() == targets.dim() + 1 and outputs.shape[:1] + outputs.shape[2:] == targets.shape:
        pred = outputs.argmax(1)
    elif outputs.shape[:-1] == targets.shape:
        pred = outputs.argmax(-1)
    else:
        return float("nan")
    right = pred == targets
    ignored = bool((targets == IGNORE_INDEX).any())
    if ignored:
        right = right & (targets != IGNORE_INDEX)
    if targets.dim() == 1:
        return float(right.sum())
    total = int((targets != IGNORE_INDEX).sum()) if ignored else targets.numel()
    return counted(targets) * float(right.sum()) / total if total else 0.0


def counted(targets: torch.Tensor) -> float | int:
    """The weight of a batch in example-weighted means: its first dimension, scaled by the share of
    its targets that are not :data:`IGNORE_INDEX` (integer targets); the count of those for 1-D targets."""
    n = targets.shape[0]
    if targets.is_floating_point() or targets.numel() == 0:
        return n
    ignored = int((targets == IGNORE_INDEX).sum())
    return n if ignored == 0 else n * (targets.numel() - ignored) / targets.numel()


@contextlib.contextmanager
def batch_statistics(model: nn.Module) -> Iterator[nn.Module]:
    """Context manager: every BatchNorm layer of ``model`` normalises with the statistics of
    the batch at hand, in eval mode too, and its running statistics are left untouched.

    The authors' code of DARTS-PT measures every perturbation in train mode
    (``infer(..., eval=False)``), i.e. with batch statistics; this does the same for
    BatchNorm without switching on dropout or updating running statistics.
    """
    saved = []
    for m in model.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.running_mean is not None:
            saved.append((m, m.running_mean, m.running_var))
            m.running_mean = None
            m.running_var = None
    try:
        yield model
    finally:
        for m, mean, var in saved:
            m.running_mean, m.running_var = mean, var


def evaluate(model: nn.Module, data: Data, batch_size: int = 64, *, loss_fn: LossFn | None = None,
             bn: str = "eval") -> tuple[float, float]:
    """Mean loss and accuracy of ``model`` on ``data``, in fixed batch order.

    Runs under ``torch.inference_mode`` with ``model.eval()`` (restored afterwards): dropout
    is off. With ``bn='eval'`` a BatchNorm layer uses its running statistics if it tracks
    them, otherwise the statistics of each batch (the search spaces of this package build
    BatchNorm with ``track_running_stats=False``, as DARTS supernets do); with
    ``bn='batch'`` every BatchNorm uses batch statistics (see :func:`batch_statistics`).

    Args:
        model: the (super)network, ``inputs -> logits``.
        data: ``(inputs, targets)`` or an iterable of such batches (a
            :class:`~posenc.search.Batches` keeps its name in error messages).
        batch_size: examples per forward pass of an in-memory pair (with batch statistics,
            results depend on it; 64 is the authors' validation batch).
        loss_fn: ``loss_fn(outputs, targets) -> mean loss``; cross-entropy by default.
        bn: one of :data:`BN_MODES`.

    Returns:
        ``(loss, accuracy)``: the example-weighted mean loss and the fraction of correct
        argmax predictions (``nan`` when the targets are not class indices).
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    source = data if isinstance(data, Batches) else Batches("data", data)
    check_positive_int("batch_size", batch_size)
    check_choice("bn", bn, BN_MODES)
    default = loss_fn is None
    loss_fn = loss_fn or _default_loss
    was_training = model.training
    model.eval()
    total_loss, correct, n = 0.0, 0.0, 0
    try:
        with torch.inference_mode(), (batch_statistics(model) if bn == "batch" else contextlib.nullcontext()):
            for xb, yb in source.epoch(batch_size):
                out = logits_of(call_model(model, xb))
                if default:
                    check_targets(source.name, out, yb)
                w = counted(yb)
                if w:
                    total_loss += float(loss_fn(out, yb)) * w
                correct += _correct(out, yb)
                n += w
    finally:
        model.train(was_training)
    if not n:
        raise ValueError(f"{source.name}: every target is {IGNORE_INDEX} (ignored): nothing to measure")
    return total_loss / n, correct / n


# ---------------------------------------------------------------------- training
class Loop:
    """Alternating steps of ``alpha`` (on ``val``) and of the weights (on ``train``).

    The shared engine of :func:`train_darts`, :func:`train_network` and the tuning of
    :class:`~posenc.search.Finetune`. Internal; its arguments are validated by them.
    """

    def __init__(self, model: nn.Module, train: Batches, val: Batches | None, *, batch_size: int,
                 grad_clip: float | None, seed: int, loss_fn: LossFn | None) -> None:
        self.model, self.train, self.val = model, train, val
        self.batch_size, self.grad_clip = batch_size, grad_clip
        self.default_loss = loss_fn is None
        self.loss_fn = loss_fn or _default_loss
        #: forward-backward passes of a batch run so far (alpha steps and weight steps)
        self.passes = 0
        gen = torch.Generator().manual_seed(seed)
        self.tb = train.stream(batch_size, gen)
        self.vb = val.stream(batch_size, gen) if val is not None else None

    def run(self, steps: int, w_opt: torch.optim.Optimizer | None, a_opt: torch.optim.Optimizer | None,
            lr_at: Callable[[int], float] | None, history: dict[str, list], progress: Progress | None) -> None:
        model = self.model
        alphas = [p for g in (a_opt.param_groups if a_opt is not None else []) for p in g["params"]]
        weights = [p for g in (w_opt.param_groups if w_opt is not None else []) for p in g["params"]]
        arch = list({id(m.alpha): m.alpha for m in model.modules() if isinstance(m, MixedOp)}.values())
        arch_req = [p.requires_grad for p in arch]
        was_training = model.training
        model.train()
        try:
            for step in range(steps):
                info: dict[str, float] = {}
                if a_opt is not None and self.vb is not None:
                    xb, yb = next(self.vb)
                    a_opt.zero_grad(set_to_none=True)
                    loss = self._loss(logits_of(call_model(model, xb)), yb,
                                      self.val.name if self.val is not None else "val")
                    self.passes += 1
                    self._check(loss, step, "validation (alpha step)")
                    # gradients of alpha only: the weights' gradients of this pass are never used
                    live = [p for p in alphas if p.requires_grad]
                    grads = torch.autograd.grad(loss, live, allow_unused=True) if live else ()
                    for p, g in zip(live, grads):
                        p.grad = g
                    a_opt.step()
                    if not all(bool(torch.isfinite(p).all()) for p in alphas):
                        raise FloatingPointError(f"the supernet diverged at step {step + 1}: alpha became non-finite "
                                                 f"after the alpha step; lower a_lr")
                    info["val_loss"] = float(loss.detach())
                    history["val_loss"].append(info["val_loss"])
                if w_opt is not None:
                    if lr_at is not None:
                        lr = lr_at(step)
                        for group in w_opt.param_groups:
                            group["lr"] = lr
                    xb, yb = next(self.tb)
                    w_opt.zero_grad(set_to_none=True)
                    for p in arch:  # no gradient of alpha in a weight step
                        p.grad = None
                        p.requires_grad_(False)
                    try:
                        loss = self._loss(logits_of(call_model(model, xb)), yb, self.train.name)
                        self.passes += 1
                        self._check(loss, step, "training (weight step)")
                        loss.backward()
                    finally:
                        for p, req in zip(arch, arch_req):
                            p.requires_grad_(req)
                    if self.grad_clip is not None:
                        nn.utils.clip_grad_norm_(weights, self.grad_clip)
                    w_opt.step()
                    info["train_loss"] = float(loss.detach())
                    history["train_loss"].append(info["train_loss"])
                if progress is not None:
                    progress(step + 1, steps, info)
        finally:
            for p in alphas:
                p.grad = None
            model.train(was_training)

    def _loss(self, outputs: torch.Tensor, targets: torch.Tensor, name: str) -> torch.Tensor:
        if self.default_loss:
            check_targets(name, outputs, targets)
        return self.loss_fn(outputs, targets)

    @staticmethod
    def _check(loss: torch.Tensor, step: int, what: str) -> None:
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            raise TypeError(f"loss_fn must return a scalar tensor, got {type(loss).__name__}")
        if not bool(torch.isfinite(loss.detach())):
            raise FloatingPointError(f"the run diverged at step {step + 1}: the {what} loss is {float(loss.detach())}; "
                                     "lower the learning rates (lr, a_lr) or check the data")


#: Seeds go to ``torch.Generator.manual_seed``: an int in ``[0, SEED_MAX]``.
SEED_MAX = 2**63 - 1


def _check_seed(seed: Any, name: str = "seed") -> int:
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"{name} must be an int, got {type(seed).__name__} ({seed!r})")
    if not 0 <= seed <= SEED_MAX:
        raise ValueError(f"{name} must be an int in [0, 2**63 - 1] (a torch generator's seed), got {seed}")
    return seed


def check_targets(name: str, outputs: torch.Tensor, targets: torch.Tensor) -> None:
    """Validate class-index targets for the default cross-entropy loss, naming the data argument.

    Raises:
        TypeError: targets that are not int64 class indices.
        ValueError: a shape that does not match the outputs, or a class outside ``[0, classes)``.
    """
    if not isinstance(outputs, torch.Tensor) or outputs.dim() < 2:
        raise ValueError(f"{name}: the model must return class logits of shape (batch, classes) for the default "
                         f"cross-entropy loss, got {tuple(getattr(outputs, 'shape', ()))}; or pass loss_fn")
    if targets.dtype != torch.int64:
        raise TypeError(f"{name}: targets must be int64 class indices for the default cross-entropy loss, got "
                        f"{targets.dtype} (cast with .long(), or pass loss_fn)")
    if targets.shape != outputs.shape[:1] + outputs.shape[2:]:
        raise ValueError(f"{name}: targets must have shape {tuple(outputs.shape[:1] + outputs.shape[2:])} for the "
                         f"model's outputs of shape {tuple(outputs.shape)}, got {tuple(targets.shape)}")
    classes = outputs.shape[1]
    if targets.numel():
        lo, hi = int(targets.min()), int(targets.max())
        if lo == IGNORE_INDEX:  # ignored targets (nodes outside a split, padding) count in no loss
            kept = targets[targets != IGNORE_INDEX]
            if not kept.numel():
                raise ValueError(f"{name}: every target of a batch is {IGNORE_INDEX} (ignored): nothing to learn "
                                 "or measure on it")
            lo = int(kept.min())
        if lo < 0 or hi >= classes:
            raise ValueError(f"{name}: targets must be class indices in [0, {classes - 1}] for the model's {classes} "
                             f"outputs (or {IGNORE_INDEX}, ignored), got values in [{lo}, {hi}]")


def _steps(source: Batches, steps: int | None, epochs: float | None, batch_size: int) -> tuple[int, int]:
    """``(total steps, steps per epoch)``."""
    if (steps is None) == (epochs is None):
        raise ValueError(f"give exactly one of steps and epochs, got steps={steps!r}, epochs={epochs!r}")
    if epochs is not None:
        check_positive_float("epochs", epochs, allow_zero=True)
        per_epoch = source.batches_per_epoch(batch_size)
        steps = int(round(epochs * per_epoch))
    else:
        check_positive_int("steps", steps, minimum=0)
        try:
            per_epoch = source.batches_per_epoch(batch_size)
        except TypeError:
            per_epoch = max(1, steps)
    return steps, per_epoch  # type: ignore[return-value]


def cosine_lr(lr: float, lr_min: float, steps: int, per_epoch: int) -> Callable[[int], float]:
    """Per-epoch cosine annealing from ``lr`` to ``lr_min`` (``CosineAnnealingLR`` stepped once
    per epoch over ``ceil(steps / per_epoch)`` epochs, as the authors' code schedules it)."""
    epochs = max(1, math.ceil(steps / per_epoch))

    def at(step: int) -> float:
        e = step // per_epoch
        return lr_min + 0.5 * (lr - lr_min) * (1 + math.cos(math.pi * e / epochs))

    return at


def _w_optimizer(weights: list[nn.Parameter], kind: str, lr: float, momentum: float,
                 weight_decay: float) -> torch.optim.Optimizer | None:
    if not weights:
        return None
    if kind == "sgd":
        return torch.optim.SGD(weights, lr=lr, momentum=momentum, weight_decay=weight_decay)
    return torch.optim.AdamW(weights, lr=lr, weight_decay=weight_decay)


#: ``train_darts``'s former names of the weights' recipe -> :func:`train_network`'s names.
OLD_NAMES: dict[str, str] = {"w_lr": "lr", "w_lr_min": "lr_min", "w_optimizer": "optimizer",
                             "w_momentum": "momentum", "w_weight_decay": "weight_decay"}
#: The weights' recipe of a DARTS supernet (the authors' code): SGD 0.025 with momentum 0.9,
#: weight decay 3e-4, cosine per epoch to 0.001; ``alpha``'s Adam at 3e-4.
DARTS_RECIPE: dict[str, Any] = {"optimizer": "sgd", "lr": 0.025, "lr_min": 0.001, "momentum": 0.9,
                                "weight_decay": 3e-4, "a_lr": 3e-4}
#: The recipe of a model whose only edges are :class:`~posenc.search.EncodingSearch` (a
#: transformer): AdamW 1e-3 with weight decay 0.05, cosine per epoch to 1e-5; ``alpha``'s
#: Adam at :func:`alpha_lr` of the run's steps.
ENCODING_RECIPE: dict[str, Any] = {"optimizer": "adamw", "lr": 1e-3, "lr_min": 1e-5, "momentum": 0.9,
                                   "weight_decay": 0.05, "a_lr": None}
#: How far (in units of ``alpha``) Adam may move an architecture weight over a run: DARTS's
#: 50 CIFAR-10 epochs of 391 steps at 3e-4 give about 6.
ALPHA_TRAVEL = 6.0


def alpha_lr(steps: int, travel: float = ALPHA_TRAVEL) -> float:
    """The rule for ``alpha``'s learning rate: ``travel / steps``, so that Adam (whose step is
    about ``a_lr`` per update) can move ``alpha`` as far over ``steps`` updates as DARTS's 3e-4
    does over its ~19,500 (50 CIFAR-10 epochs), clipped to ``[3e-4, 0.1]``.

    Args:
        steps: alpha updates in the run (one per training step).
        travel: the distance; :data:`ALPHA_TRAVEL` by default.
    """
    check_positive_int("steps", steps, minimum=0)
    check_positive_float("travel", travel)
    return min(0.1, max(3e-4, travel / max(1, steps)))


def only_encoding_edges(edges: dict[str, MixedOp]) -> bool:
    """Whether every edge is an :class:`~posenc.search.EncodingSearch` (a transformer's search)."""
    from posenc.search.encoding import EncodingSearch

    return bool(edges) and all(isinstance(e, EncodingSearch) for e in edges.values())


def resolve_recipe(edges: dict[str, MixedOp], given: dict[str, Any], old: dict[str, Any], *,
                   where: str = "train_darts") -> dict[str, Any]:
    """``given`` (None: unset) completed with :data:`ENCODING_RECIPE` for an encoding-only model,
    else :data:`DARTS_RECIPE`; ``old`` holds deprecated ``w_*`` names (a ``DeprecationWarning``)."""
    given = dict(given)
    unknown = [k for k in old if k not in OLD_NAMES]
    if unknown:
        raise TypeError(f"{where}() got unexpected keyword arguments {unknown}")
    for name, value in old.items():
        new = OLD_NAMES[name]
        if given.get(new) is not None:
            raise TypeError(f"{where}: give {new}= or its deprecated name {name}=, not both")
        warnings.warn(f"{where}: {name}= is deprecated; use {new}= (train_network's name)", DeprecationWarning,
                      stacklevel=3)
        given[new] = value
    base = ENCODING_RECIPE if only_encoding_edges(edges) else DARTS_RECIPE
    return {k: (base[k] if given.get(k) is None else given[k]) for k in base}


def train_darts(model: nn.Module, train: Data, val: Data, *, steps: int | None = None,
                epochs: float | None = None, batch_size: int = 64, lr: float | None = None,
                lr_min: float | None = None, optimizer: str | None = None, momentum: float | None = None,
                weight_decay: float | None = None, a_lr: float | None = None, a_weight_decay: float = 1e-3,
                grad_clip: float | None = 5.0, fixed_alpha: bool = False, seed: int = 0,
                loss_fn: LossFn | None = None, a_optimizer: torch.optim.Optimizer | None = None,
                progress: Progress | None = None, **deprecated: Any) -> dict[str, Any]:
    """First-order DARTS: weights on ``train``, ``alpha`` on ``val`` (bilevel, alternating).

    Each step takes one ``val`` batch for an Adam step of ``alpha`` (betas 0.5, 0.999, as in
    DARTS; skipped with ``fixed_alpha``) then one ``train`` batch for an SGD (or AdamW)
    step of the weights (per-epoch cosine decay from ``lr`` to ``lr_min``, gradient
    clipping). Discretised or pruned edges keep their state; their ``alpha`` gets no step.

    The weights' recipe takes :func:`train_network`'s names. Left unset, it is the authors'
    (:data:`DARTS_RECIPE`: SGD 0.025, momentum 0.9, weight decay 3e-4, cosine to 0.001;
    ``a_lr`` 3e-4), or, when every edge of ``model`` is an
    :class:`~posenc.search.EncodingSearch`, a transformer's (:data:`ENCODING_RECIPE`: AdamW
    1e-3, weight decay 0.05, cosine to 1e-5; ``a_lr = alpha_lr(steps)``).

    Args:
        model: a supernet (see :func:`mixed_ops`); trained in ``train()`` mode in place.
        train, val: ``(inputs, targets)`` pairs or iterables of such batches (inputs a tensor or a
            dict of tensors; a dict batch with a ``"labels"`` entry: :mod:`posenc.search.batches`).
        steps / epochs: length of the run; give exactly one. An epoch is one pass over
            ``train`` (``ceil(len(train) / batch_size)`` steps); 0 does nothing.
        batch_size: examples per step of an in-memory pair (64, as the authors' code).
        optimizer: ``'sgd'`` (momentum; DARTS) or ``'adamw'`` (transformers).
        lr, lr_min, momentum, weight_decay, grad_clip: of the weights' optimizer
            (``momentum`` is SGD's only; ``lr_min`` the end of the cosine schedule;
            ``lr_min=0`` decays to zero).
        a_lr, a_weight_decay: Adam of ``alpha`` (see :func:`alpha_lr` for the rule that
            scales ``a_lr`` with the run's length).
        fixed_alpha: keep ``alpha`` as it is ("PT with fixed alpha").
        seed: seeds the batch order (an int in ``[0, 2**63 - 1]``).
        loss_fn: ``loss_fn(outputs, targets) -> loss``; cross-entropy on int64 class indices by
            default (targets are checked against the number of outputs).
        a_optimizer: an existing optimizer of ``alpha`` to continue (e.g. the one a previous
            call returned); by default a new Adam.
        progress: optional ``progress(step, total, {"train_loss": ..., "val_loss": ...})``
            called after every step.
        **deprecated: the former names ``w_lr``, ``w_lr_min``, ``w_optimizer``,
            ``w_momentum``, ``w_weight_decay`` (a ``DeprecationWarning``).

    Returns:
        ``{"steps", "train_loss": [per step], "val_loss": [per step; empty with fixed_alpha],
        "alpha": {edge: softmax(alpha) list}, "passes": forward-backward passes run,
        "a_optimizer": the optimizer of alpha (or None; drop it before serialising the history)}``.

    Raises:
        FloatingPointError: the run diverged (a non-finite loss or ``alpha``), naming the step.
    """
    edges = mixed_ops(model)
    recipe = resolve_recipe(edges, {"lr": lr, "lr_min": lr_min, "optimizer": optimizer, "momentum": momentum,
                                    "weight_decay": weight_decay, "a_lr": a_lr}, deprecated)
    train_b, val_b = Batches("train", train), Batches("val", val)
    if recipe["a_lr"] is None:
        check_positive_int("batch_size", batch_size)
        recipe["a_lr"] = alpha_lr(_steps(train_b, steps, epochs, batch_size)[0])
    return _fit(model, train_b, val_b, edges, steps=steps, epochs=epochs, batch_size=batch_size,
                w_lr=recipe["lr"], w_lr_min=recipe["lr_min"], a_lr=recipe["a_lr"], w_optimizer=recipe["optimizer"],
                w_momentum=recipe["momentum"], w_weight_decay=recipe["weight_decay"], a_weight_decay=a_weight_decay,
                grad_clip=grad_clip, fixed_alpha=fixed_alpha, seed=seed, loss_fn=loss_fn, a_optimizer=a_optimizer,
                progress=progress)


def train_network(model: nn.Module, train: Data, *, steps: int | None = None, epochs: float | None = None,
                  batch_size: int = 64, lr: float = 0.025, lr_min: float = 0.001, optimizer: str = "sgd",
                  momentum: float = 0.9, weight_decay: float = 3e-4, grad_clip: float | None = 5.0, seed: int = 0,
                  loss_fn: LossFn | None = None, progress: Progress | None = None) -> dict[str, Any]:
    """Train an ordinary network (e.g. a stand-alone architecture built with ``choices=``) with
    the weight half of :func:`train_darts`: same batches, optimiser, cosine schedule and
    clipping, so stand-alone networks and supernets are trained alike.

    Args:
        model: any ``nn.Module`` (mixed edges, if any, keep their ``alpha``).
        train: ``(inputs, targets)`` or an iterable of such batches (inputs a tensor or a dict of
            tensors; a dict batch with a ``"labels"`` entry: :mod:`posenc.search.batches`).
        steps / epochs, batch_size, seed, loss_fn, progress: as in :func:`train_darts`.
        lr, lr_min, optimizer, momentum, weight_decay, grad_clip: as in :func:`train_darts`
            (here with the authors' stand-alone defaults whatever the model).

    Returns:
        ``{"steps", "train_loss": [per step], "passes": forward-backward passes run}``.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    edges = {name: m for name, m in model.named_modules() if isinstance(m, MixedOp) and m.leader is None}
    hist = _fit(model, Batches("train", train), None, edges, steps=steps, epochs=epochs, batch_size=batch_size,
                w_lr=lr, w_lr_min=lr_min, a_lr=0.0, w_optimizer=optimizer, w_momentum=momentum,
                w_weight_decay=weight_decay, a_weight_decay=0.0, grad_clip=grad_clip, fixed_alpha=True, seed=seed,
                loss_fn=loss_fn, a_optimizer=None, progress=progress)
    return {"steps": hist["steps"], "train_loss": hist["train_loss"], "passes": hist["passes"]}


def _fit(model: nn.Module, train: Batches, val: Batches | None, edges: dict[str, MixedOp], *, steps: int | None,
         epochs: float | None, batch_size: int, w_lr: float, w_lr_min: float, a_lr: float, w_optimizer: str,
         w_momentum: float, w_weight_decay: float, a_weight_decay: float, grad_clip: float | None,
         fixed_alpha: bool, seed: int, loss_fn: LossFn | None, a_optimizer: torch.optim.Optimizer | None,
         progress: Progress | None) -> dict[str, Any]:
    check_positive_int("batch_size", batch_size)
    total, per_epoch = _steps(train, steps, epochs, batch_size)
    check_positive_float("lr", w_lr, allow_zero=True)
    check_positive_float("lr_min", w_lr_min, allow_zero=True)
    if w_lr_min > w_lr:
        raise ValueError(f"lr_min must not exceed lr, got lr_min={w_lr_min}, lr={w_lr}")
    check_positive_float("momentum", w_momentum, allow_zero=True)
    check_positive_float("weight_decay", w_weight_decay, allow_zero=True)
    check_positive_float("a_lr", a_lr, allow_zero=True)
    check_choice("optimizer", w_optimizer, ("sgd", "adamw"))
    if grad_clip is not None:
        check_positive_float("grad_clip", grad_clip)
    _check_seed(seed)
    if a_optimizer is not None and not isinstance(a_optimizer, torch.optim.Optimizer):
        raise TypeError(f"a_optimizer must be a torch.optim.Optimizer or None, got {type(a_optimizer).__name__}")
    for name, e in edges.items():
        try:
            e.check_alpha()
        except ValueError as err:
            raise ValueError(f"edge {name!r}: {err}") from None
    history: dict[str, Any] = {"steps": total, "train_loss": [], "val_loss": []}
    alphas = [e.alpha for e in edges.values() if e.undecided]
    w_opt = _w_optimizer(weight_parameters(model), w_optimizer, w_lr, w_momentum, w_weight_decay)
    a_opt = None
    if alphas and not fixed_alpha:
        a_opt = a_optimizer or torch.optim.Adam(alphas, lr=a_lr, betas=(0.5, 0.999), weight_decay=a_weight_decay)
    loop = Loop(model, train, val, batch_size=batch_size, grad_clip=grad_clip, seed=seed, loss_fn=loss_fn)
    frozen = [p for p in alphas if fixed_alpha]
    for p in frozen:
        p.requires_grad_(False)
    try:
        loop.run(total, w_opt, a_opt, cosine_lr(w_lr, w_lr_min, total, per_epoch), history, progress)
    finally:
        for p in frozen:
            p.requires_grad_(True)
    history["alpha"] = {name: torch.softmax(e.alpha.detach(), 0).tolist() for name, e in edges.items()}
    history["passes"] = loop.passes
    if val is not None:
        history["a_optimizer"] = a_opt
    return history


def _edge_list(model: nn.Module, names: Sequence[str] | None, *, arg: str) -> list[str]:
    edges = mixed_ops(model)
    if names is None:
        return list(edges)
    if isinstance(names, str):
        raise TypeError(f"{arg} must be a sequence of edge names, not a string")
    names = list(names)
    unknown = [n for n in names if n not in edges]
    if unknown:
        raise ValueError(f"{arg} names unknown edges {unknown}; the model's edges are {list(edges)}")
    if len(set(names)) != len(names):
        raise ValueError(f"{arg} repeats an edge: {names}")
    return names
