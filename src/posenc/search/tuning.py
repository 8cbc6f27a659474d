"""The tuning DARTS-PT runs between two decisions (Wang et al., ICLR 2021, Alg. 1 line 6).

As the authors' code does it (``pt_project`` in ruocwang/darts-pt): when selection starts,
the weights' SGD is replaced once by a new one at a tenth of the supernet's learning rate
(0.0025), kept **constant** and **persistent** (its momentum carries over from one decision
to the next); every tuning step first takes an Adam step of ``alpha`` on a validation batch
(DARTS+PT; the fixed-alpha variant takes none) and then an SGD step of the weights with
gradient clipping 5; ``proj_intv`` epochs (5) separate two decisions.

:func:`tuning_epochs` gives the authors' exact epochs per decision.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from posenc._checks import check_choice, check_positive_float, check_positive_int
from posenc.search.batches import Batches, Data
from posenc.search.supernet import Loop, LossFn, _check_seed, _steps, cosine_lr, mixed_ops, weight_parameters

__all__ = ["SCHEDULES", "Finetune", "make_finetune", "tuning_epochs"]

#: Learning-rate schedules of the tuning: ``'constant'`` (the authors') or ``'cosine'`` (to 0
#: within each call; posenc's former default).
SCHEDULES: tuple[str, ...] = ("constant", "cosine")


def tuning_epochs(decisions: int, proj_intv: int = 5, *, space: str = "nb201") -> list[int]:
    """Tuning epochs after each of ``decisions`` decisions, as the authors' code runs them.

    * ``'nb201'`` (``nasbench201/projection.py``): ``proj_intv * (decisions - 1)`` tuning
      epochs; a decision at every multiple of ``proj_intv`` and one at the last epoch, so
      the last two decisions are followed by ``proj_intv - 1`` and 1 epochs;
    * ``'darts'`` (``sota/cnn/projection.py``): a decision every ``proj_intv`` epochs and one
      extra epoch at the end: ``[proj_intv] * (decisions - 1) + [1]``.

    Args:
        decisions: selection steps (>= 1); in the DARTS space one step decides a normal and a
            reduction edge (or node) together.
        proj_intv: epochs between two decisions (5 in the authors' scripts).
        space: ``'nb201'`` or ``'darts'``.
    """
    check_positive_int("decisions", decisions)
    check_positive_int("proj_intv", proj_intv)
    check_choice("space", space, ("nb201", "darts"))
    if space == "darts":
        return [proj_intv] * (decisions - 1) + [1]
    total = proj_intv * (decisions - 1)
    if decisions == 1:
        return [0]
    starts = sorted({e for e in range(total) if e % proj_intv == 0} | {total - 1})
    if len(starts) < decisions:  # proj_intv == 1: the last epoch is already a multiple
        starts = list(range(decisions))
        total = decisions
    return [b - a for a, b in zip(starts, [*starts[1:], total])]


class Finetune:
    """``finetune(model)``: the tuning after one decision of
    :func:`~posenc.search.perturbation_select` (or :func:`~posenc.search.topology_select`).

    Args:
        train, val: ``(inputs, targets)`` pairs or iterables of such batches (weights on
            ``train``, ``alpha`` on ``val``).
        epochs: tuning epochs per call: one number for every call, or one per call in order
            (e.g. :func:`tuning_epochs`); 0 allowed.
        lr: the weights' learning rate (the authors: the supernet's 0.025 / 10).
        momentum, weight_decay, grad_clip: of the weights' SGD.
        schedule: one of :data:`SCHEDULES` (``'constant'``, the authors').
        persistent: keep one SGD across calls (its momentum carries over, the authors' code);
            ``False`` builds a fresh one per call (posenc's former behaviour).
        fixed_alpha: take no ``alpha`` steps (the fixed-alpha variant); ``False`` (DARTS+PT)
            updates the undecided edges' ``alpha`` before every weight step.
        a_lr, a_weight_decay: of the Adam of ``alpha`` built when ``a_optimizer`` is None.
        a_optimizer: the optimizer of ``alpha`` to continue (the authors keep the supernet's
            Adam: pass the ``"a_optimizer"`` that :func:`~posenc.search.train_darts` returned).
        batch_size: of an in-memory pair.
        seed: batch order (each call draws from one generator).
        loss_fn: ``loss_fn(outputs, targets) -> loss``; cross-entropy by default.

    Attributes:
        calls: tuning calls so far; ``history``: ``{"train_loss", "val_loss"}`` over all calls.
    """

    def __init__(self, train: Data, val: Data, *, epochs: float | Sequence[float] = 5, lr: float = 0.0025,
                 momentum: float = 0.9, weight_decay: float = 3e-4, grad_clip: float | None = 5.0,
                 schedule: str = "constant", persistent: bool = True, fixed_alpha: bool = False,
                 a_lr: float = 3e-4, a_weight_decay: float = 1e-3,
                 a_optimizer: torch.optim.Optimizer | None = None, batch_size: int = 64, seed: int = 0,
                 loss_fn: LossFn | None = None) -> None:
        self.train, self.val = Batches("train", train), Batches("val", val)
        if isinstance(epochs, (int, float)) and not isinstance(epochs, bool):
            check_positive_float("epochs", epochs, allow_zero=True)
            self.epochs: float | list[float] = float(epochs)
        elif isinstance(epochs, Sequence) and not isinstance(epochs, str) and epochs:
            for e in epochs:
                check_positive_float("epochs", e, allow_zero=True)
            self.epochs = [float(e) for e in epochs]
        else:
            raise TypeError(f"epochs must be a number >= 0 or a non-empty sequence of them, got {epochs!r}")
        check_positive_float("lr", lr, allow_zero=True)
        check_positive_float("momentum", momentum, allow_zero=True)
        check_positive_float("weight_decay", weight_decay, allow_zero=True)
        if grad_clip is not None:
            check_positive_float("grad_clip", grad_clip)
        check_choice("schedule", schedule, SCHEDULES)
        check_positive_float("a_lr", a_lr, allow_zero=True)
        check_positive_int("batch_size", batch_size)
        if a_optimizer is not None and not isinstance(a_optimizer, torch.optim.Optimizer):
            raise TypeError(f"a_optimizer must be a torch.optim.Optimizer or None, got {type(a_optimizer).__name__}")
        self.lr, self.momentum, self.weight_decay, self.grad_clip = lr, momentum, weight_decay, grad_clip
        self.schedule, self.persistent, self.fixed_alpha = schedule, bool(persistent), bool(fixed_alpha)
        self.a_lr, self.a_weight_decay, self.a_optimizer = a_lr, a_weight_decay, a_optimizer
        self.batch_size, self.seed, self.loss_fn = batch_size, _check_seed(seed), loss_fn
        self.calls = 0
        self.history: dict[str, list] = {"train_loss": [], "val_loss": []}
        self._model: nn.Module | None = None
        self._loop: Loop | None = None
        self._w_opt: torch.optim.Optimizer | None = None

    def epochs_of_call(self, k: int) -> float:
        """Tuning epochs of call ``k`` (0-based)."""
        if isinstance(self.epochs, float):
            return self.epochs
        if k >= len(self.epochs):
            raise ValueError(f"epochs lists {len(self.epochs)} tunings, but finetune was called {k + 1} times")
        return self.epochs[k]

    def __call__(self, model: nn.Module) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
        epochs = self.epochs_of_call(self.calls)
        self.calls += 1
        if self._model is not None and model is not self._model and self.persistent:
            raise ValueError("a persistent Finetune tunes one model; build another Finetune for another model")
        steps, per_epoch = _steps(self.train, None, epochs, self.batch_size)
        if self._loop is None:
            self._model = model
            self._loop = Loop(model, self.train, self.val, batch_size=self.batch_size, grad_clip=self.grad_clip,
                              seed=self.seed, loss_fn=self.loss_fn)
        if self._w_opt is None or not self.persistent:
            weights = weight_parameters(model)
            self._w_opt = torch.optim.SGD(weights, lr=self.lr, momentum=self.momentum,
                                          weight_decay=self.weight_decay) if weights else None
        a_opt = None
        if not self.fixed_alpha:
            alphas = [e.alpha for e in mixed_ops(model).values() if e.undecided]
            if alphas:
                if self.a_optimizer is None:
                    self.a_optimizer = torch.optim.Adam(alphas, lr=self.a_lr, betas=(0.5, 0.999),
                                                        weight_decay=self.a_weight_decay)
                a_opt = self.a_optimizer
        lr_at = (lambda step: self.lr) if self.schedule == "constant" else cosine_lr(self.lr, 0.0, steps, per_epoch)
        frozen = [e.alpha for e in mixed_ops(model).values()] if self.fixed_alpha else []
        for p in frozen:
            p.requires_grad_(False)
        try:
            self._loop.run(steps, self._w_opt, a_opt, lr_at, self.history, None)
        finally:
            for p in frozen:
                p.requires_grad_(True)

    def __repr__(self) -> str:
        return (f"Finetune(epochs={self.epochs}, lr={self.lr}, schedule={self.schedule!r}, "
                f"persistent={self.persistent}, fixed_alpha={self.fixed_alpha})")


def make_finetune(train: Data, val: Data, *, epochs: float | Sequence[float] = 5, **kwargs: Any) -> Finetune:
    """A :class:`Finetune` (the authors' tuning by default; see it for every option).

    ``make_finetune(train, val, epochs=1, lr=0.01, schedule="cosine", persistent=False,
    fixed_alpha=True)`` is posenc's former tuning: a fresh optimiser with a cosine schedule
    to 0 at every decision, weights only.
    """
    if "steps" in kwargs:
        raise ValueError("make_finetune takes epochs, not steps")
    for old, new in (("w_lr", "lr"), ("w_momentum", "momentum"), ("w_weight_decay", "weight_decay")):
        if old in kwargs:
            raise ValueError(f"make_finetune takes {new}=, not {old}=")
    return Finetune(train, val, epochs=epochs, **kwargs)
