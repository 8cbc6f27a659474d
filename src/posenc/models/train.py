"""A small, seeded training loop with per-step metrics, compatible with torchrun.

:func:`train` runs AdamW for a fixed number of steps on batches drawn by a
user function, records the loss and metrics of every step (for convergence
curves and areas under them), evaluates every ``eval_every`` steps, and reports
progress through a callback (it never prints; the CLI renders progress).

Distributed data parallel (tested: ``tests/models/test_train_ddp.py`` launches
``torchrun --nproc_per_node=2`` and checks the parameters against one process):

- Launched by ``torchrun`` (``WORLD_SIZE > 1``), :func:`train` uses the process
  group the caller initialised, or initialises one itself from torchrun's
  environment (``env://``; ``gloo`` for CPU models, ``nccl`` for CUDA ones). With
  ``WORLD_SIZE > 1`` and neither a group nor ``MASTER_ADDR`` it refuses, rather
  than train unsynchronised copies.
- The model is wrapped in ``DistributedDataParallel``, which broadcasts rank 0's
  initial parameters and averages gradients over the ranks. Every rank draws its
  own batches (the generator's seed is offset by the rank), so one step sees
  ``world_size x`` the per-rank batch: the **effective batch is world_size times
  the batch ``sample_batch`` returns**, and a step is the step of one process on
  the ranks' batches concatenated (for a loss that is a mean over the batch).
- The **learning rate is not scaled**: ``config.lr`` is used as given. To keep
  the single-process trajectory per *sample*, divide the per-rank batch by the
  world size; to train on a larger batch, the linear-scaling heuristic
  (``lr x world_size`` with warm-up) is the caller's choice.
- The loss and metrics in the returned history are averaged over the ranks (one
  small all-reduce per step); only rank 0 calls ``progress``, and only rank 0
  should write results (``history["rank"] == 0``).

Multi-node: ``torchrun --nnodes=2 --nproc_per_node=8 --rdzv-backend=c10d
--rdzv-endpoint=HOST:29500 script.py`` on every node (see ``docs/scale.md``).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from posenc._checks import check_positive_float, check_positive_int

#: ``sample_batch(step, generator) -> batch`` (any object the loss function understands).
SampleFn = Callable[[int, torch.Generator], Any]
#: ``loss_fn(model, batch) -> (loss, {metric: float})``.
LossFn = Callable[[nn.Module, Any], "tuple[torch.Tensor, dict[str, float]]"]
#: ``evaluate(model) -> {metric: float}`` (called under ``torch.no_grad`` in eval mode).
EvalFn = Callable[[nn.Module], "dict[str, float]"]
#: ``progress(step, total_steps, metrics)`` after every step.
ProgressFn = Callable[[int, int, "dict[str, float]"], None]


@dataclass(frozen=True)
class DistInfo:
    """The torchrun environment: ``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK`` (defaults 1, 0, 0)."""

    world_size: int = 1
    rank: int = 0
    local_rank: int = 0
    initialized: bool = False

    @classmethod
    def from_env(cls) -> DistInfo:
        init = torch.distributed.is_available() and torch.distributed.is_initialized()
        if init:
            return cls(torch.distributed.get_world_size(), torch.distributed.get_rank(),
                       int(os.environ.get("LOCAL_RANK", "0")), True)
        return cls(int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0")),
                   int(os.environ.get("LOCAL_RANK", "0")), False)


def ensure_process_group(cuda: bool = False) -> DistInfo:
    """Initialise ``torch.distributed`` from torchrun's environment when ``WORLD_SIZE > 1``.

    Args:
        cuda: the model lives on CUDA (``nccl``); else ``gloo``.

    Returns:
        The :class:`DistInfo` after initialisation (``initialized`` is False for one process).

    Raises:
        RuntimeError: ``WORLD_SIZE > 1`` but there is no process group and no
            ``MASTER_ADDR`` to create one from (not launched by torchrun).
    """
    info = DistInfo.from_env()
    if info.initialized or info.world_size <= 1:
        return info
    if not torch.distributed.is_available():
        raise RuntimeError(f"WORLD_SIZE={info.world_size} but torch.distributed is not available in this build")
    if "MASTER_ADDR" not in os.environ:
        raise RuntimeError(
            f"WORLD_SIZE={info.world_size} but no process group is initialised and MASTER_ADDR is not set: "
            "launch with torchrun, or call torch.distributed.init_process_group first"
        )
    torch.distributed.init_process_group("nccl" if cuda else "gloo", init_method="env://")
    return DistInfo.from_env()


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation settings.

    Args:
        steps: optimiser steps.
        lr: peak AdamW learning rate (linear warm-up, then cosine decay to 10%).
        weight_decay: AdamW weight decay.
        warmup_steps: linear warm-up length.
        grad_clip: clip the global gradient norm (``None``: no clipping).
        eval_every: evaluate every this many steps and at the end (0: only at the end).
        seed: seeds the model-independent randomness (batch generator).
        threads: ``torch.set_num_threads`` during the loop (restored after); ``None`` leaves it.
        lr_scales: ``((name, scale), ...)``: parameters called ``name`` (the last dotted
            components of their names, e.g. ``"w_r"`` for every LFF frequency matrix) train at
            ``scale * lr`` (see :func:`parameter_groups`); names that match nothing are ignored,
            so one setting serves models with and without such parameters.
    """

    steps: int = 300
    lr: float = 3e-3
    weight_decay: float = 0.0
    warmup_steps: int = 20
    grad_clip: float | None = 1.0
    eval_every: int = 0
    seed: int = 0
    threads: int | None = 1
    lr_scales: tuple[tuple[str, float], ...] = ()


def parameter_groups(model: nn.Module, lr: float, lr_scales: Mapping[str, float] | None = None) -> list[dict]:
    """Optimizer parameter groups giving some parameters their own learning rate.

    A trainable parameter whose dotted name equals ``key`` or ends with ``"." + key``
    gets ``lr * lr_scales[key]`` (the first matching key, in order); every other
    trainable parameter gets ``lr``. Typical use: learnable Fourier features' ``W_r``
    (``"w_r"``), whose entries are ``O(1/gamma)`` and move by ``~lr`` per Adam step, so
    at a learning rate that suits the rest of the network they barely change.

    Args:
        model: the module whose ``named_parameters()`` are grouped (frozen ones are left out).
        lr: the base learning rate (> 0).
        lr_scales: ``{name: scale}`` with finite ``scale > 0``.

    Returns:
        A list of ``{"params": [...], "lr": float, "name": str}`` dicts (empty groups
        omitted; the base group is named ``"default"``), ready for ``torch.optim``.
    """
    check_positive_float("lr", lr)
    scales = dict(lr_scales or {})
    for key, scale in scales.items():
        if not isinstance(key, str) or not key:
            raise TypeError(f"lr_scales keys must be non-empty parameter names, got {key!r}")
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale) or scale <= 0:
            raise ValueError(f"lr_scales[{key!r}] must be a finite number > 0, got {scale!r}")
    groups: dict[str, list[nn.Parameter]] = {"default": []}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        key = next((k for k in scales if name == k or name.endswith("." + k)), "default")
        groups.setdefault(key, []).append(p)
    return [
        {"params": ps, "lr": lr * (scales[k] if k != "default" else 1.0), "name": k}
        for k, ps in groups.items()
        if ps
    ]


def lr_factor(step: int, cfg: TrainConfig) -> float:
    """Learning-rate multiplier at ``step`` (0-based): warm-up, then cosine to 0.1."""
    if step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    span = max(1, cfg.steps - cfg.warmup_steps)
    t = min(1.0, (step - cfg.warmup_steps) / span)
    return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * t))


def train(
    model: nn.Module,
    sample_batch: SampleFn,
    loss_fn: LossFn,
    config: TrainConfig,
    evaluate: EvalFn | None = None,
    progress: ProgressFn | None = None,
) -> dict:
    """Train ``model`` in place and return its history.

    Args:
        model: the module to train (wrapped in DDP only if ``torch.distributed`` is initialised).
        sample_batch: draws the batch for a step from the given generator.
        loss_fn: ``(model, batch) -> (scalar loss, {metric: float})``.
        config: :class:`TrainConfig`.
        evaluate: optional held-out evaluation ``model -> {metric: float}``.
        progress: optional callback ``(step, total, metrics)`` (rank 0 only).

    Returns:
        ``{"loss": [per-step training loss], "metrics": {name: [per step]},
        "evals": [{"step": s, ...metrics}], "seconds": float, "world_size": int, "rank": int}``;
        under DDP the loss and metrics are averages over the ranks.

    Raises:
        RuntimeError: ``WORLD_SIZE > 1`` without a process group or torchrun's environment.
    """
    check_positive_int("steps", config.steps)
    check_positive_float("lr", config.lr)
    check_positive_int("eval_every", config.eval_every, minimum=0)
    first = next(iter(model.parameters()), None)
    dist = ensure_process_group(cuda=first is not None and first.is_cuda)
    old_threads = torch.get_num_threads()
    if config.threads is not None:
        torch.set_num_threads(check_positive_int("threads", config.threads))
    try:
        net: nn.Module = model
        if dist.initialized:
            from torch.nn.parallel import DistributedDataParallel

            device_ids = [dist.local_rank] if next(model.parameters()).is_cuda else None
            net = DistributedDataParallel(model, device_ids=device_ids)
        gen = torch.Generator().manual_seed(config.seed * 1_000_003 + dist.rank)
        groups = parameter_groups(net, config.lr, dict(config.lr_scales))
        params = [p for g in groups for p in g["params"]]
        opt = torch.optim.AdamW(groups, lr=config.lr, weight_decay=config.weight_decay)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, config))
        history: dict[str, Any] = {"loss": [], "metrics": {}, "evals": []}
        start = time.perf_counter()

        def run_eval(step: int) -> None:
            if evaluate is None:
                return
            model.eval()
            with torch.no_grad():
                res = evaluate(model)
            model.train()
            history["evals"].append({"step": step, **{k: float(v) for k, v in res.items()}})

        model.train()
        for step in range(config.steps):
            batch = sample_batch(step, gen)
            loss, metrics = loss_fn(net, batch)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if config.grad_clip is not None:
                nn.utils.clip_grad_norm_(params, config.grad_clip)
            opt.step()
            sched.step()
            value = float(loss.detach())
            if dist.initialized and dist.world_size > 1:
                value, metrics = _rank_average(value, metrics, dist.world_size,
                                               first.device if first is not None else None)
            history["loss"].append(value)
            for k, v in metrics.items():
                history["metrics"].setdefault(k, []).append(float(v))
            done = step + 1
            if config.eval_every and done % config.eval_every == 0 and done != config.steps:
                run_eval(done)
            if progress is not None and dist.rank == 0:
                progress(done, config.steps, {"loss": value, **metrics})
        run_eval(config.steps)
        history["seconds"] = time.perf_counter() - start
        history["world_size"] = dist.world_size
        history["rank"] = dist.rank
        return history
    finally:
        torch.set_num_threads(old_threads)


def _rank_average(loss: float, metrics: dict[str, float], world_size: int,
                  device: torch.device | None = None) -> tuple[float, dict[str, float]]:
    """The loss and metrics averaged over the ranks (one all-reduce of a small float64 vector)."""
    keys = sorted(metrics)
    vec = torch.tensor([loss, *(float(metrics[k]) for k in keys)], dtype=torch.float64, device=device)
    torch.distributed.all_reduce(vec)
    vec /= world_size
    return float(vec[0]), {k: float(v) for k, v in zip(keys, vec[1:].tolist())}
