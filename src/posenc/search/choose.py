"""Choose the position encoding of a user's model in one call, within a training budget.

:func:`choose_encoding` takes a model holding one or more
:class:`~posenc.search.EncodingSearch` layers, the user's data and training recipe
(:func:`~posenc.search.train_network`'s names), and a ``budget`` in units of one stand-alone
training of the model with that recipe, counted in training steps (a forward and backward
pass of one batch; a forward pass of one evaluation batch counts a third), so that it is
deterministic. Selectors (:data:`CHOICE_SELECTORS`):

* ``'race'`` — successive halving of stand-alone candidates (Jamieson & Talwalkar,
  AISTATS 2016): every candidate trains with the recipe's own schedule; at each rung the
  better half by validation accuracy (ties by validation loss) goes on, and the last one
  finishes the whole training, so the model comes back trained with the chosen encoding
  exactly as a stand-alone training would leave it. The rungs are spaced by 2 and scaled
  to fill the budget (4 candidates at budget 2: rungs at 1/4, 1/2 and 1 of the training).
  A rung where no candidate has learned anything yet (with the default cross-entropy: every
  validation loss within :data:`LEARNED_MARGIN`, 2 %, of the loss of the best constant
  prediction, the entropy of the validation labels) ranks noise, so its cut is held: every
  candidate goes on to the next rung, as long as the race, run to its end, spends at most
  :data:`HOLD_LIMIT` (2) times the budget. A slow starter is then not cut before it starts.
  The cut before the last rung is always made. Ties go to the earlier-listed candidate.
  Many candidates put the first rung early (8 at budget 2: 7.5 % of the training, where a
  slow starter such as an additive encoding on a short recipe may not have moved yet); a
  larger budget moves it later (budget 3: 16 %).
* ``'pt'`` — perturbation on a supernet with ``alpha`` fixed (DARTS-PT's "PT with fixed
  alpha", adapted to a choice of encodings): the supernet trains with every candidate at
  equal weight for the budget; then each candidate is scored by keeping it alone (the
  others masked, the weights not renormalised), so ``'none'`` is a real option (the
  supernet with no encoding at all), and the best validation accuracy wins, ties broken by
  validation loss.
* ``'magnitude'`` — first-order DARTS with ``alpha`` trained (half the budget's steps: each
  step is an ``alpha`` step and a weight step), then the largest ``alpha``.

A refused call leaves the model as it was: every selector trains copies of the model (the race
one per candidate, ``'pt'`` and ``'magnitude'`` one supernet) and writes the result into the
model only once the choice is made, so a bad batch found mid-training (a NaN, a label out of
range, a wrong shape), a divergence or an interruption changes none of its weights, ``alpha``
or decisions. The copies' total (weights, gradients, optimizer state) is checked against the
library's memory limit (:func:`posenc._resources.check_footprint`, ``$POSENC_MAX_MEMORY``)
before the first is made. Inputs the model cannot run on (another dtype or device than its
parameters, integers for a model of floats) are reported naming ``train`` or ``val``.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from posenc._checks import check_choice, check_positive_float, check_positive_int
from posenc._resources import check_footprint, format_bytes
from posenc.search.batches import IGNORE_INDEX, Batches, Data, call_model, logits_of
from posenc.search.encoding import EncodingSearch
from posenc.search.families import _attention_layers, _set_submodule, parse_candidate, probe_slot, with_encoding
from posenc.search.nodes import feed_graph
from posenc.search.mixed import MixedOp
from posenc.search.selection import Selection, decided_error
from posenc.search.supernet import (
    ENCODING_RECIPE,
    Loop,
    LossFn,
    _check_seed,
    _correct,
    _default_loss,
    _steps,
    _w_optimizer,
    alpha_lr,
    check_targets,
    cosine_lr,
    counted,
    mixed_ops,
    train_darts,
    weight_parameters,
)

__all__ = ["CHOICE_SELECTORS", "DEFAULT_CHOICE_SELECTOR", "RECIPE_KEYS", "choose_encoding", "race_plan"]

#: Selectors of :func:`choose_encoding`.
CHOICE_SELECTORS: tuple[str, ...] = ("race", "pt", "magnitude")
#: The default selector: the one that won ``python -m benchmarks choice`` (see docs/search.md).
DEFAULT_CHOICE_SELECTOR = "race"
#: Recipe keywords (:func:`~posenc.search.train_network`'s names) and ``a_lr`` for ``'magnitude'``.
RECIPE_KEYS: tuple[str, ...] = ("steps", "epochs", "batch_size", "optimizer", "lr", "lr_min", "momentum",
                                "weight_decay", "grad_clip", "loss_fn", "a_lr")
#: Most joint candidates (products over the edges) a race takes.
MAX_RACE = 64
#: An evaluation batch (a forward pass) costs this share of a training step.
EVAL_COST = 1.0 / 3.0
#: A candidate has learned something once its validation loss (the default cross-entropy) is this share
#: below the loss of the best constant prediction (the entropy of the validation labels); a race does
#: not cut at a rung where none has (see :func:`choose_encoding`).
LEARNED_MARGIN = 0.02
#: A race that holds its cuts while no candidate has learned spends at most this many times its budget.
HOLD_LIMIT = 2.0
#: ``state_dict`` key of a module's extra state (a :class:`~posenc.search.MixedOp`'s decision), after its prefix.
_EXTRA_STATE = "_extra_state"


def _recipe(recipe: dict[str, Any]) -> dict[str, Any]:
    unknown = [k for k in recipe if k not in RECIPE_KEYS]
    if unknown:
        raise TypeError(f"choose_encoding got unknown recipe keywords {unknown}; known: {list(RECIPE_KEYS)}")
    out = {k: v for k, v in ENCODING_RECIPE.items() if k != "a_lr"}
    out.update(batch_size=64, grad_clip=5.0, loss_fn=None, a_lr=None)
    out.update(recipe)
    if out.get("steps") is None and out.get("epochs") is None:
        raise ValueError("choose_encoding needs the length of one stand-alone training: give epochs= or steps=")
    check_choice("optimizer", out["optimizer"], ("sgd", "adamw"))
    for k in ("lr", "lr_min", "momentum", "weight_decay"):
        check_positive_float(k, out[k], allow_zero=True)
    check_positive_int("batch_size", out["batch_size"])
    if out["grad_clip"] is not None:
        check_positive_float("grad_clip", out["grad_clip"])
    if out["loss_fn"] is not None and not callable(out["loss_fn"]):
        raise TypeError(f"loss_fn must be a callable loss_fn(outputs, targets) or None, got {out['loss_fn']!r}")
    return out


def _score(model: nn.Module, val: Batches, batch_size: int, loss_fn: LossFn | None) -> dict[str, float]:
    """Validation loss, accuracy, its uncertainty and the examples and batches it took (eval mode)."""
    was = model.training
    model.eval()
    fn = loss_fn or _default_loss
    loss, correct, n, batches = 0.0, 0.0, 0, 0
    counts: torch.Tensor | None = None
    try:
        with torch.inference_mode():
            for xb, yb in val.epoch(batch_size):
                out = logits_of(call_model(model, xb))
                if loss_fn is None:
                    check_targets(val.name, out, yb)
                    kept = yb.reshape(-1)
                    kept = kept[kept != IGNORE_INDEX].cpu()
                    c = torch.bincount(kept, minlength=out.shape[1]).double()
                    counts = c if counts is None or counts.shape != c.shape else counts + c
                w = counted(yb)
                if w:
                    loss += float(fn(out, yb)) * w
                if out.dim() >= 2 and not yb.is_floating_point() and out.shape[:1] == yb.shape[:1]:
                    correct += _correct(out, yb)
                n += w
                batches += 1
    finally:
        model.train(was)
    if not math.isfinite(loss):
        raise ValueError(f"the validation loss is not finite ({loss}): the model's outputs overflow; lower lr")
    acc = correct / n
    # Agresti-Coull: the standard error of a proportion that stays > 0 when every example is right
    p = (correct + 2.0) / (n + 4.0)
    out = {"accuracy": acc, "loss": loss / n, "uncertainty": math.sqrt(p * (1 - p) / (n + 4.0)),
           "examples": n, "batches": batches}
    if counts is not None and float(counts.sum()) > 0:  # the loss of the best constant prediction: the labels' entropy
        q = counts[counts > 0] / counts.sum()
        out["constant_loss"] = float(-(q * q.log()).sum())
    return out


def _learned(s: dict[str, float]) -> bool | None:
    """Whether a candidate's validation loss is at least :data:`LEARNED_MARGIN` below the loss of the best
    constant prediction (None: unknown, for a loss of the user's own)."""
    if "constant_loss" not in s:
        return None
    return s["loss"] < (1.0 - LEARNED_MARGIN) * s["constant_loss"]


def _better(a: dict[str, float], b: dict[str, float] | None, criterion: str) -> bool:
    """``a`` beats ``b``: higher accuracy, ties (within 1e-12) broken by lower loss; or lower loss."""
    if b is None:
        return True
    if criterion == "loss":
        return a["loss"] < b["loss"]
    if abs(a["accuracy"] - b["accuracy"]) > 1e-12:
        return a["accuracy"] > b["accuracy"]
    return a["loss"] < b["loss"]


class _Standalone:
    """One candidate trained alone with the recipe, resumable: ``advance(k)`` trains up to step ``k``
    of the recipe's schedule (the same steps as one ``train_network`` call of ``total`` steps)."""

    def __init__(self, model: nn.Module, train: Batches, total: int, per_epoch: int, rec: dict, seed: int) -> None:
        self.model, self.total, self.done = model, total, 0
        self.loop = Loop(model, train, None, batch_size=rec["batch_size"], grad_clip=rec["grad_clip"], seed=seed,
                         loss_fn=rec["loss_fn"])
        self.opt = _w_optimizer(weight_parameters(model), rec["optimizer"], rec["lr"], rec["momentum"],
                                rec["weight_decay"])
        self.lr_at = cosine_lr(rec["lr"], rec["lr_min"], total, per_epoch)
        self.history: dict[str, list] = {"train_loss": [], "val_loss": []}
        # the global generators (dropout) as a training started now would see them, kept per candidate
        self.devices = sorted({p.device.index or 0 for p in model.parameters() if p.is_cuda})
        self.cpu_state = torch.get_rng_state()
        self.cuda_state = [torch.cuda.get_rng_state(d) for d in self.devices]

    def advance(self, to: int) -> int:
        steps = max(0, min(to, self.total) - self.done)
        if steps:
            offset = self.done
            with torch.random.fork_rng(devices=self.devices):
                torch.set_rng_state(self.cpu_state)
                for d, st in zip(self.devices, self.cuda_state):
                    torch.cuda.set_rng_state(st, d)
                self.loop.run(steps, self.opt, None, lambda i: self.lr_at(offset + i), self.history, None)
                self.cpu_state = torch.get_rng_state()
                self.cuda_state = [torch.cuda.get_rng_state(d) for d in self.devices]
            self.done += steps
        return steps


def race_plan(candidates: int, total: int, budget: float, eval_steps: float, eta: int = 2) -> list[tuple[int, int]]:
    """The rungs of a race: ``[(survivors, step reached), ...]``, the last ``(1, total)``.

    ``candidates`` start; each rung keeps ``ceil(n / eta)``; the rungs' steps are ``c * total
    * eta**(i - R)`` (at most ``total``), with the largest ``c`` whose cost (training steps plus
    ``eval_steps`` per evaluation) fits ``budget * total``.

    Raises:
        ValueError: the budget cannot train one candidate fully and evaluate the others once.
    """
    survivors = [candidates]
    while survivors[-1] > 1:
        survivors.append(math.ceil(survivors[-1] / eta))
    r = len(survivors) - 1

    def plan(c: float) -> list[tuple[int, int]]:
        steps = [max(1, min(total, int(round(c * total * eta ** (i - r))))) for i in range(r)] + [total]
        for i in range(1, len(steps)):
            steps[i] = max(steps[i], steps[i - 1])
        return list(zip(survivors, steps))

    def cost(p: list[tuple[int, int]]) -> float:
        spent, before = 0.0, 0
        for n, s in p:
            spent += n * (s - before) + n * eval_steps
            before = s
        return spent

    limit = budget * total
    if cost(plan(0.0)) > limit + 1e-9:
        need = cost(plan(0.0)) / max(1, total)
        raise ValueError(f"budget={budget} is too small for selector 'race' over {candidates} candidates: it needs at "
                         f"least {need:.3f} (one full training, the others' shortest rung, their evaluations)")
    lo, hi = 0.0, float(eta ** r)
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if cost(plan(mid)) <= limit + 1e-9 else (lo, mid)
    return plan(lo)


def _trained_copy_bytes(model: nn.Module, optimizer: str, momentum: float) -> float:
    """Bytes of one trained copy of ``model``: its parameters and buffers, the parameters' gradients
    and the weights' optimizer state (AdamW: two moments; SGD: one momentum buffer, none at momentum 0)."""
    params = float(sum(p.numel() * p.element_size() for p in model.parameters()))
    buffers = float(sum(b.numel() * b.element_size() for b in model.buffers()))
    moments = 2 if optimizer == "adamw" else (1 if momentum else 0)
    return params * (2 + moments) + buffers


def _check_copies(model: nn.Module, copies: int, rec: dict[str, Any], selector: str) -> None:
    """Refuse, before the first copy is made, copies whose total exceeds the library's memory limit."""
    each = _trained_copy_bytes(model, rec["optimizer"], rec["momentum"])
    if selector == "race":
        check_footprint(copies * each, f"candidates={copies}",
                        f"the race's {copies} trained copies of the model ({format_bytes(each)} each: weights, "
                        "gradients, optimizer state; selector='pt' trains one supernet)")
    else:
        check_footprint(each, "the model's size",
                        f"choose_encoding(selector={selector!r})'s trained copy of the model (weights, gradients, "
                        "optimizer state; the model is written only once the choice is made)")


def _check_materialised(model: nn.Module) -> None:
    meta = [n for n, t in itertools.chain(model.named_parameters(), model.named_buffers()) if t.is_meta]
    if meta:
        raise ValueError(f"model has {len(meta)} parameter(s) or buffer(s) on the meta device (shapes without "
                         f"values), e.g. {meta[:3]}: materialise it (model.to_empty(device=...), then load its "
                         "weights) before choose_encoding")


def _commit(model: nn.Module, source: nn.Module, choices: dict[str, str], by: str) -> None:
    """Write the trained ``source`` (a copy of ``model``) into ``model`` and discretise its searched edges.

    Parameters, buffers and other extra state are copied in place (the user's optimizers keep their
    tensors); the edges' decisions are not loaded, so the other edges stay as they were (their
    ``decided_by`` included) and the searched ones are discretised here.
    """
    decisions = {f"{name}.{_EXTRA_STATE}" if name else _EXTRA_STATE
                 for name, m in source.named_modules() if isinstance(m, MixedOp)}
    state = {k: v for k, v in source.state_dict().items() if k not in decisions}
    result = model.load_state_dict(state, strict=False)
    stray = [k for k in result.missing_keys if k not in decisions] + list(result.unexpected_keys)
    if stray:  # a copy has the model's keys: only a model that changed its modules meanwhile gets here
        raise RuntimeError(f"the trained copy does not match the model any more (keys {stray[:5]})")
    edges = mixed_ops(model)
    for name, op in choices.items():
        edges[name].discretize(op, by=by)


def _explain_failure(model: nn.Module, sources: tuple[Batches, ...], batch_size: int) -> Exception | None:
    """After a failed call: an error naming ``train`` or ``val`` when ``model`` cannot run on the first
    batch of one of them (its dtype or device is not the model's, or the model's own input check
    refuses it), else None (the original error stands). Runs ``model`` once per source in eval mode
    without gradients and with the global random state restored: the model is left as it is."""
    params = list(model.parameters())
    dtypes = sorted({str(p.dtype) for p in params if p.is_floating_point()})
    devices = sorted({str(p.device) for p in params})
    cuda = sorted({p.device.index or 0 for p in params if p.is_cuda})
    for src in sources:
        try:
            xb, _ = next(iter(src.epoch(batch_size)))
        except Exception:  # the data's own error (an empty or malformed batch) is the original one
            return None
        if isinstance(xb, Mapping):
            was = model.training
            try:
                with torch.random.fork_rng(devices=cuda), torch.no_grad():
                    model.eval()
                    call_model(model, xb)
            except MemoryError:
                return None
            except Exception as err:
                return _explain_dict(src.name, xb, err, devices, dtypes)
            finally:
                model.train(was)
            continue
        if not isinstance(xb, torch.Tensor):
            return None
        was = model.training
        try:
            with torch.random.fork_rng(devices=cuda), torch.no_grad():
                model.eval()
                model(xb)
        except MemoryError:
            return None
        except Exception as err:
            seen = f"batch 0's inputs: shape {tuple(xb.shape)}, {xb.dtype}, on {xb.device}"
            said = f"(the model raised {type(err).__name__}: {err})"
            if devices and str(xb.device) not in devices:
                return ValueError(f"{src.name}: the model cannot run on its inputs ({seen}): its parameters are on "
                                  f"{', '.join(devices)}; move the inputs or the model {said}")
            if dtypes and str(xb.dtype) not in dtypes and isinstance(err, (RuntimeError, TypeError)):
                fix = (f"convert the inputs (.to({dtypes[0]})) or the model (model.to({xb.dtype}))"
                       if xb.is_floating_point() else f"give floating-point inputs (.to({dtypes[0]}))")
                return TypeError(f"{src.name}: the model cannot run on its inputs ({seen}): its parameters are "
                                 f"{', '.join(dtypes)}; {fix} {said}")
            if isinstance(err, (TypeError, ValueError)):
                cls = TypeError if isinstance(err, TypeError) else ValueError
                return cls(f"{src.name}: the model refused its inputs ({seen}): {err}")
            return None
        finally:
            model.train(was)
    return None


def _explain_dict(name: str, xb: Mapping[str, torch.Tensor], err: Exception, devices: list[str],
                  dtypes: list[str]) -> Exception | None:
    """:func:`_explain_failure` for dict inputs (``model(**inputs)``): the error names the argument and
    every entry; integer entries (token ids, masks) are legitimate, so only a floating-point entry of
    another dtype than the model's is blamed on its dtype."""
    seen = "batch 0's inputs: " + "; ".join(f"{k!r} shape {tuple(v.shape)}, {v.dtype}, on {v.device}"
                                             for k, v in xb.items())
    said = f"(the model raised {type(err).__name__}: {err})"
    away = [k for k, v in xb.items() if devices and str(v.device) not in devices]
    if away:
        return ValueError(f"{name}: the model cannot run on its inputs ({seen}): its parameters are on "
                          f"{', '.join(devices)}, not {away}; move the inputs or the model {said}")
    other = [k for k, v in xb.items() if v.is_floating_point() and dtypes and str(v.dtype) not in dtypes]
    if other and isinstance(err, (RuntimeError, TypeError)):
        return TypeError(f"{name}: the model cannot run on its inputs ({seen}): its parameters are "
                         f"{', '.join(dtypes)}, not {other}; convert them (.to({dtypes[0]})) {said}")
    if isinstance(err, TypeError) and ("keyword argument" in str(err) or "required positional" in str(err)):
        return TypeError(f"{name}: a dict batch is given to the model as keywords, model(**inputs), and its forward "
                         f"does not take these: {sorted(xb)} {said}; name each entry after an argument of "
                         "forward (the targets go under 'labels')")
    for cls in (TypeError, ValueError, RuntimeError):
        if isinstance(err, cls):
            return cls(f"{name}: the model cannot run on its inputs ({seen}) {said}")
    return None


def _check_model(model: nn.Module) -> dict[str, EncodingSearch]:
    edges = mixed_ops(model)
    other = [n for n, e in edges.items() if not isinstance(e, EncodingSearch) and e.undecided]
    if other:
        raise ValueError(f"choose_encoding searches EncodingSearch layers only; decide the other mixed edges first "
                         f"(or use train_darts and perturbation_select): {other}")
    enc = {n: e for n, e in edges.items() if isinstance(e, EncodingSearch)}
    if not enc:
        raise ValueError(f"model has no EncodingSearch layer (put one where {type(model).__name__} adds its position "
                         "encoding)")
    todo = {n: e for n, e in enc.items() if e.undecided}
    if not todo:
        raise decided_error(enc, list(enc), "choose_encoding")
    return todo  # type: ignore[return-value]


def _check_candidates(model: nn.Module, candidates: Any, selector: str) -> list[str]:
    if selector != "race":
        raise ValueError(f"candidates= (a plain model's encodings across families) takes selector='race', got "
                         f"{selector!r}: 'pt' and 'magnitude' need the candidates in one supernet (EncodingSearch)")
    if isinstance(candidates, str) or not isinstance(candidates, Sequence) or not candidates:
        raise ValueError(f"candidates must be a non-empty list of encodings such as ['none', 'sinusoidal', 'rope'], "
                         f"got {candidates!r}")
    names = [parse_candidate(c).name for c in candidates]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"candidates: {dup} listed more than once")
    if len(names) > MAX_RACE:
        raise ValueError(f"candidates: a race takes at most {MAX_RACE}, got {len(names)}")
    undecided = [n for n, e in model.named_modules() if isinstance(e, MixedOp) and e.undecided]
    if undecided:
        raise ValueError(f"model has undecided searchable layers {undecided[:3]}: with candidates= give the plain "
                         "model (or leave candidates out to search its EncodingSearch layers)")
    return names


def _batch_device(model: nn.Module, device: Any) -> torch.device | None:
    """Where batches go: ``device``, else the model's one parameter device (None: several, or none)."""
    if device is not None:
        try:
            return torch.device(device)
        except (RuntimeError, TypeError):
            raise ValueError(f"device must be a torch device such as 'cpu' or 'cuda:0', got {device!r}") from None
    devices = {p.device for p in model.parameters()}
    return devices.pop() if len(devices) == 1 else None


def _first_targets(data: Batches, batch_size: int) -> torch.Tensor | None:
    try:
        return next(iter(data.epoch(batch_size)))[1]
    except (StopIteration, TypeError, ValueError):  # the data's own errors are reported where it is trained
        return None


def _float_targets(data: Batches, batch_size: int) -> bool:
    y = _first_targets(data, batch_size)
    return y is not None and y.is_floating_point()


def _auto_criterion(data: Batches, batch_size: int) -> str:
    return "loss" if _float_targets(data, batch_size) else "accuracy"


def _reporter(callback: Callable[[dict[str, Any]], Any] | None, progress: bool) -> Callable[[dict, str, str], None]:
    def report(decision: dict[str, Any], where: str, criterion: str) -> None:
        if progress:
            scores = ", ".join(f"{k} {v:.4g}" for k, v in decision["scores"].items())
            print(f"choose_encoding: {where}: {criterion} {scores}", file=sys.stderr, flush=True)
        if callback is not None:
            callback(dict(decision))
    return report


def _family_spec(model: nn.Module, names: list[str], encoding_at: str | None, max_len: int | None, seed: int,
                 train_b: Batches, val_b: Batches, batch_size: int) -> dict[str, Any]:
    """The arguments of :func:`with_encoding` shared by every candidate, checked on the model before any copy."""
    parsed = [parse_candidate(n) for n in names]
    additive = [c.name for c in parsed if c.additive != "none"]
    graph = [c.name for c in parsed if c.family == "graph"]
    sequence = [c.name for c in parsed if c.name != "none" and c.family != "graph"]
    if graph and sequence:
        raise ValueError(f"candidates mix node encodings {graph} of a graph model with sequence encodings {sequence}; "
                         "choose among one kind")
    dim = None
    if additive or encoding_at is not None:
        if encoding_at is None:
            raise ValueError(f"candidates {additive} add an encoding to the tokens: name the submodule where the model "
                             "adds positions with encoding_at= (an nn.Identity() there is enough)")
        if not isinstance(encoding_at, str) or not encoding_at:
            raise TypeError(f"encoding_at must be the dotted name of a submodule, got {encoding_at!r}")
        try:
            model.get_submodule(encoding_at)
        except AttributeError:
            raise ValueError(f"encoding_at={encoding_at!r}: {type(model).__name__} has no such submodule") from None
        probes = []  # the first batch of train and every batch of val (where a longer sequence tests extrapolation)
        with contextlib.suppress(StopIteration, TypeError, ValueError):
            probes.append(next(iter(train_b.epoch(batch_size)))[0])
        with contextlib.suppress(TypeError, ValueError):
            probes.extend(xb for xb, _ in val_b.epoch(batch_size))
        dim, seen = probe_slot(model, encoding_at, probes)
        if graph:
            if max_len is not None:
                raise ValueError("max_len is for sequence candidates; node encodings take the graph's size")
        elif max_len is None:
            max_len = seen
        else:
            check_positive_int("max_len", max_len)
            if max_len < seen:
                raise ValueError(f"max_len={max_len} is shorter than the {seen} tokens encoding_at={encoding_at!r} "
                                 "sees on the first batch of train and the batches of val")
    if any(c.attention for c in parsed) and not _attention_layers(model):
        raise ValueError(f"candidates {[c.name for c in parsed if c.attention]} replace the model's "
                         f"nn.MultiheadAttention layers, and {type(model).__name__} has none")
    spec = {"encoding_at": encoding_at, "max_len": max_len, "dim": dim, "seed": seed}
    families = {c.name: ("none" if graph and c.name == "none" else c.family) for c in parsed}
    return {"names": names, "families": families, **spec}


def _race_family(model, spec, train_b, val_b, rec, total, per_epoch, budget, eval_steps, seed, criterion, sel,
                 report) -> float:
    names = spec["names"]
    kw = {k: spec[k] for k in ("encoding_at", "max_len", "dim", "seed")}

    def build(entry: tuple) -> nn.Module:
        return with_encoding(copy.deepcopy(model), entry[0], **kw)

    entries = [(n,) for n in names]
    winner, runs, records, spent = _run_race(model, entries, build, train_b, val_b, rec, total, per_epoch, budget,
                                             eval_steps, seed, criterion, sel, report)
    best = runs[winner].model
    paths = [p for p, _ in _attention_layers(model)] if parse_candidate(winner[0]).attention else []
    if spec["encoding_at"] is not None:
        paths.append(spec["encoding_at"])
    for path in paths:  # the winner's modules (trained) take the plain ones' places, then every other weight
        _set_submodule(model, path, best.get_submodule(path))
    model.load_state_dict(best.state_dict())
    if spec["families"][winner[0]] == "graph":
        feed_graph(model, spec["encoding_at"])
    sel.choices["encoding"] = winner[0]
    sel.candidates = {"encoding": {e[0]: {**records[e], "family": spec["families"][e[0]]} for e in entries}}
    sel.rebuild = {"candidate": winner[0], **kw}
    return spent


def choose_encoding(model: nn.Module, train: Data, val: Data, *, budget: float = 2.0,
                    selector: str = DEFAULT_CHOICE_SELECTOR, criterion: str = "auto", seed: int = 0,
                    candidates: Sequence[str] | None = None, encoding_at: str | None = None,
                    max_len: int | None = None, device: torch.device | str | None = None,
                    callback: Callable[[dict[str, Any]], Any] | None = None, progress: bool | None = None,
                    **recipe: Any) -> Selection:
    """Pick the position encoding of every undecided :class:`~posenc.search.EncodingSearch` of ``model``.

    Two kinds of model:

    * **a plain model and** ``candidates``: any encodings of :mod:`posenc.search.families`,
      across the families (``'sinusoidal'``, ``'cape'``, ``'rope'``, ``'alibi'``, ``'t5'``,
      ``'xpos'``, ``'kernelized'``, ``'rope+learned_table'``, ...). The model is built from
      standard parts: ``nn.MultiheadAttention`` self-attention layers (replaced for an attention
      candidate) and, for additive candidates, an ``nn.Identity()`` (or any module) named by
      ``encoding_at`` where it adds positions to the token features. Only the race takes
      this kind. The model comes back as the winner, plain (no search layer): its attention
      layers and ``encoding_at`` replaced by the winner's, trained; ``selection.rebuild``
      holds the arguments of :func:`~posenc.search.with_encoding` that rebuild it from a fresh
      plain model (to load its saved ``state_dict``).
    * **a model holding** :class:`~posenc.search.EncodingSearch` **layers** (no ``candidates``):
      their own candidates compete.

    Args:
        model: a plain model (with ``candidates``) or one holding ``EncodingSearch`` layers
            (every other mixed edge decided), left discretised to the choice
            (:func:`~posenc.search.apply_selection` then gives the plain model). With
            ``'race'`` its weights are those of the winner's full stand-alone training; with
            ``'pt'`` / ``'magnitude'`` the supernet's (retrain the choice from scratch:
            ``EncodingSearch(..., candidates=[name])``).
        train, val: ``(inputs, targets)`` pairs or iterables of batches; weights train on
            ``train``, every score is measured on ``val``. Batches of any length are fine
            (one length per batch). ``inputs`` may be a dict of tensors (``model(**inputs)``),
            and a batch a dict with a ``"labels"`` entry, as Hugging Face collators give them
            (:mod:`posenc.search.batches`); padded sequences are the model's to mask.
        budget: in units of one stand-alone training of ``model`` with the recipe, counted in
            training steps (an evaluation batch counts a third of a step). A race that holds
            its cuts while no candidate has learned (module docstring) spends up to
            :data:`HOLD_LIMIT` times it.
        selector: one of :data:`CHOICE_SELECTORS`.
        criterion: ``'accuracy'`` (ties broken by validation loss), ``'loss'`` or ``'auto'``
            (default: ``'loss'`` when the first training batch's targets are floating point, a
            regression, else ``'accuracy'``).
        seed: batch order (the weights start from ``model``'s own; a candidate's new modules,
            its encoding and its attention's position parameters, from this seed).
        candidates: the plain model's candidates (see above); ``None``: the model's
            ``EncodingSearch`` layers.
        encoding_at: the dotted name of the submodule where the plain model adds positions
            (needed by additive candidates).
        max_len: the longest sequence the additive candidates encode; default: the longest
            that ``encoding_at`` sees on the first batch of ``train`` and every batch of ``val``
            (one forward pass each, in eval mode, not counted in the cost).
        device: where every batch is moved as it is drawn; default: the device of the model's
            parameters when they are all on one (else the batches stay where they are).
        callback: called with each decision (a race rung: ``{"rung", "steps", "candidates",
            "scores", "held"}``) as it is made.
        progress: print one line per decision to stderr; default: when stderr is a terminal.
        **recipe: :func:`~posenc.search.train_network`'s keywords for one stand-alone training:
            ``epochs`` or ``steps`` (required), ``batch_size`` (64), ``optimizer`` (``'adamw'``),
            ``lr`` (1e-3), ``lr_min`` (1e-5), ``momentum``, ``weight_decay`` (0.05),
            ``grad_clip`` (5), ``loss_fn``; and ``a_lr`` for ``'magnitude'``
            (default :func:`~posenc.search.alpha_lr` of its steps).

    Returns:
        a :class:`~posenc.search.Selection` with ``method='choose_encoding:<selector>'``,
        ``choices`` (``{"encoding": name}`` with ``candidates=``), ``candidates`` (per edge,
        or per group of edges for a race, or ``"encoding"``, and per candidate: ``score``,
        ``uncertainty``, ``val_loss``, ``val_accuracy``, ``cost`` in steps; a race's also
        ``steps_trained``, ``rungs``, ``learned``, and ``family`` with ``candidates=``),
        ``decisions`` (every rung), ``cost`` (``steps`` spent, ``standalone_steps``,
        ``budget_steps``, ``ratio`` = spent / one stand-alone training) and, with
        ``candidates=``, ``rebuild``. ``print(selection)`` shows it as a table.

    A refused call (bad input found before or during training, a divergence) leaves ``model``
    as it was: the selectors train copies (see the module docstring) and write into ``model``
    only the finished result.

    Raises:
        ValueError: no undecided ``EncodingSearch`` (naming what decided it), an undecided
            edge of another kind, a model on the meta device, a budget too small for the
            selector, bad recipe values, a bad batch (naming ``train`` or ``val``), inputs on
            another device than the model.
        TypeError: an unknown recipe keyword; inputs of a dtype the model cannot run on
            (naming ``train`` or ``val``).
        FootprintError: the copies to train (a ``MemoryError`` and a ``ValueError``) exceed the
            library's memory limit; raised before any copy is made.
    """
    check_choice("selector", selector, CHOICE_SELECTORS)
    family = candidates is not None
    if family:
        names = _check_candidates(model, candidates, selector)
        todo: dict[str, EncodingSearch] = {}
    else:
        for arg, value in (("encoding_at", encoding_at), ("max_len", max_len)):
            if value is not None:
                raise ValueError(f"{arg} is for a plain model with candidates=; this call has no candidates")
        todo = _check_model(model)
    check_choice("criterion", criterion, ("auto", "accuracy", "loss"))
    budget = check_positive_float("budget", budget)
    _check_seed(seed)
    _check_materialised(model)
    if callback is not None and not callable(callback):
        raise TypeError(f"callback must be callable(decision) or None, got {type(callback).__name__}")
    if progress is not None and not isinstance(progress, bool):
        raise TypeError(f"progress must be a bool or None, got {type(progress).__name__}")
    rec = _recipe(recipe)
    train_b, val_b = Batches("train", train), Batches("val", val)
    train_b.device = val_b.device = _batch_device(model, device)
    if criterion == "auto":
        criterion = _auto_criterion(train_b, rec["batch_size"])
    elif criterion == "accuracy" and _float_targets(train_b, rec["batch_size"]):
        raise ValueError("criterion='accuracy' needs class labels, and train's targets are floating point (a "
                         "regression): use criterion='loss' (or 'auto')")
    report = _reporter(callback, sys.stderr.isatty() if progress is None else progress)
    total, per_epoch = _steps(train_b, rec.get("steps"), rec.get("epochs"), rec["batch_size"])
    if total < 1:
        raise ValueError(f"one stand-alone training must take at least 1 step, got {total} (epochs/steps)")
    try:
        val_batches = val_b.batches_per_epoch(rec["batch_size"])
    except TypeError:
        val_batches = sum(1 for _ in val_b.epoch(rec["batch_size"]))
    eval_steps = EVAL_COST * val_batches
    by = f"choose_encoding(selector={selector!r})"
    sel = Selection(f"choose_encoding:{selector}", {}, criterion=criterion)
    try:
        if family:
            spec = _family_spec(model, names, encoding_at, max_len, seed, train_b, val_b, rec["batch_size"])
            spent = _race_family(model, spec, train_b, val_b, rec, total, per_epoch, budget, eval_steps, seed,
                                 criterion, sel, report)
        elif selector == "race":
            spent = _race(model, todo, train_b, val_b, rec, total, per_epoch, budget, eval_steps, seed, criterion,
                          by, sel, report)
        elif selector == "pt":
            spent = _pt(model, todo, train_b, val_b, rec, total, budget, eval_steps, seed, criterion, by, sel,
                        report)
        else:
            spent = _magnitude(model, todo, train_b, val_b, rec, total, budget, seed, by, sel, report)
    except (RuntimeError, TypeError, ValueError) as err:
        if isinstance(err, MemoryError):
            raise
        better = _explain_failure(model, (train_b, val_b), rec["batch_size"])
        if better is not None:
            raise better from err
        raise
    sel.cost = {"steps": spent, "standalone_steps": total, "budget": budget, "budget_steps": budget * total,
                "ratio": spent / total}
    return sel


def _race(model, todo, train_b, val_b, rec, total, per_epoch, budget, eval_steps, seed, criterion, by, sel,
          report) -> float:
    names = list(todo)
    combos = list(itertools.product(*(todo[n].names for n in names)))
    if len(combos) > MAX_RACE:
        raise ValueError(f"a race over {len(combos)} joint candidates of {len(names)} EncodingSearch layers exceeds "
                         f"{MAX_RACE}; use selector='pt' or fewer candidates")

    def build(combo: tuple) -> nn.Module:
        m = copy.deepcopy(model)
        edges = mixed_ops(m)
        for n, op in zip(names, combo):
            edges[n].discretize(op, by=by)
        return m

    winner, runs, records, spent = _run_race(model, combos, build, train_b, val_b, rec, total, per_epoch, budget,
                                             eval_steps, seed, criterion, sel, report)
    sel.choices.update(zip(names, winner))
    _commit(model, runs[winner].model, sel.choices, by)
    sel.candidates = {"|".join(names): {"|".join(c): records[c] for c in combos}}
    return spent


def _run_race(model, entries, build, train_b, val_b, rec, total, per_epoch, budget, eval_steps, seed, criterion,
              sel, report):
    """Successive halving over ``entries`` (tuples of names), each trained alone on ``build(entry)``:
    ``(winner, runs, records, steps spent)``; every rung goes to ``sel.decisions`` and ``report``.

    A rung where no candidate has learned anything yet (:func:`_learned`: every validation loss
    within :data:`LEARNED_MARGIN` of the best constant prediction's) ranks noise: its cut is held,
    and every candidate still in goes on to the next rung, as long as the whole race, run to its end
    with the candidates held, stays within :data:`HOLD_LIMIT` times the budget. The cut before the
    last rung (the winner's full training) is always made."""
    plan = race_plan(len(entries), total, budget, eval_steps)
    _check_copies(model, len(entries), rec, "race")
    runs: dict[tuple, _Standalone] = {}
    for entry in entries:
        runs[entry] = _Standalone(build(entry), train_b, total, per_epoch, rec, seed)
    records: dict[tuple, dict[str, Any]] = {c: {"cost": 0.0, "rungs": 0} for c in entries}
    alive = list(entries)
    spent = 0.0
    limit = HOLD_LIMIT * budget * total

    def rank(cands: list[tuple]) -> list[tuple]:
        return sorted(cands, key=lambda c: (-records[c]["val_accuracy"], records[c]["val_loss"])
                      if criterion == "accuracy" else (records[c]["val_loss"],))

    def rest_cost(k: int, first: int) -> float:
        """Cost of rungs k.. of the plan with ``first`` candidates at rung k and the plan's counts after it."""
        cost, before = 0.0, plan[k - 1][1] if k else 0
        for i in range(k, len(plan)):
            n = first if i == k else plan[i][0]
            cost += n * (plan[i][1] - before) + n * eval_steps
            before = plan[i][1]
        return cost

    held = False
    for k, (n_keep, reach) in enumerate(plan):
        if k:  # keep the best n_keep of the previous rung, unless that rung is held
            held = (k < len(plan) - 1 and not any(records[c].get("learned") is not False for c in alive)
                    and spent + rest_cost(k, len(alive)) <= limit + 1e-9)
            if not held:
                alive = rank(alive)[:n_keep]
        for combo in alive:
            trained = runs[combo].advance(reach)
            s = _score(runs[combo].model, val_b, rec["batch_size"], rec["loss_fn"])
            cost = trained + EVAL_COST * s["batches"]
            spent += cost
            r = records[combo]
            r.update(val_accuracy=s["accuracy"], val_loss=s["loss"], uncertainty=s["uncertainty"],
                     steps_trained=runs[combo].done, rungs=k + 1, cost=r["cost"] + cost, learned=_learned(s))
            r["score"] = s["accuracy"] if criterion == "accuracy" else s["loss"]
        decision = {"rung": k + 1, "steps": reach, "candidates": ["|".join(c) for c in alive],
                    "scores": {"|".join(c): records[c]["score"] for c in alive}, "held": held}
        sel.decisions.append(decision)
        report(decision, f"rung {k + 1}/{len(plan)} at step {reach}/{total}" + (" (cut held: none had learned)"
                                                                               if held else ""), criterion)
    return alive[0], runs, records, spent


def _pt(model, todo, train_b, val_b, rec, total, budget, eval_steps, seed, criterion, by, sel, report) -> float:
    evals = sum(len(e.names) for e in todo.values())
    steps = int(math.floor(budget * total - evals * eval_steps))
    if steps < 1:
        raise ValueError(f"budget={budget} is too small for selector 'pt': its {evals} evaluations alone cost "
                         f"{evals * eval_steps / total:.3f} of a training")
    _check_copies(model, 1, rec, "pt")
    work = copy.deepcopy(model)  # trained and decided here; written into model once every edge is decided
    work_edges = mixed_ops(work)
    hist = train_darts(work, train_b, val_b, steps=steps, fixed_alpha=True, seed=seed, **_train_kw(rec))
    spent = float(hist["passes"])
    sel.candidates = {}
    for name in todo:
        edge = work_edges[name]
        scores: dict[str, dict[str, Any]] = {}
        best, best_s = None, None
        for op in edge.names:
            others = [o for o in edge.names if o != op]
            with edge.masked(*others) if others else contextlib.nullcontext():
                s = _score(work, val_b, rec["batch_size"], rec["loss_fn"])
            cost = EVAL_COST * s["batches"]
            spent += cost
            scores[op] = {"score": s["accuracy"] if criterion == "accuracy" else s["loss"], "val_accuracy":
                          s["accuracy"], "val_loss": s["loss"], "uncertainty": s["uncertainty"], "cost": cost}
            if _better(s, best_s, criterion):
                best, best_s = op, s
        assert best is not None
        edge.discretize(best, by=by)
        sel.choices[name] = best
        sel.candidates[name] = scores
        decision = {"edge": name, "scores": {k: v["score"] for k, v in scores.items()}, "chosen": best,
                    "supernet_steps": steps}
        sel.decisions.append(decision)
        report(decision, f"edge {name}", criterion)
    _commit(model, work, sel.choices, by)
    return spent


def _magnitude(model, todo, train_b, val_b, rec, total, budget, seed, by, sel, report) -> float:
    steps = int(math.floor(budget * total / 2))
    if steps < 1:
        raise ValueError(f"budget={budget} is too small for selector 'magnitude' (each step costs 2)")
    kw = _train_kw(rec)
    kw["a_lr"] = rec["a_lr"] if rec["a_lr"] is not None else alpha_lr(steps)
    _check_copies(model, 1, rec, "magnitude")
    work = copy.deepcopy(model)  # trained here; written into model once every edge is decided
    work_edges = mixed_ops(work)
    hist = train_darts(work, train_b, val_b, steps=steps, seed=seed, **kw)
    sel.candidates = {}
    for name in todo:
        edge = work_edges[name]
        w = torch.softmax(edge.alpha.detach().double(), 0).tolist()
        order = sorted(range(len(w)), key=lambda i: -w[i])  # stable: the earlier candidate wins an exact tie
        best = edge.names[order[0]]
        edge.discretize(best, by=by)
        sel.choices[name] = best
        sel.candidates[name] = {op: {"score": w[i], "uncertainty": None, "cost": None}
                                for i, op in enumerate(edge.names)}
        decision = {"edge": name, "scores": dict(zip(edge.names, w)), "chosen": best, "supernet_steps": steps}
        sel.decisions.append(decision)
        report(decision, f"edge {name}", "alpha")
    _commit(model, work, sel.choices, by)
    return float(hist["passes"])


def _train_kw(rec: dict[str, Any]) -> dict[str, Any]:
    return {k: rec[k] for k in ("batch_size", "optimizer", "lr", "lr_min", "momentum", "weight_decay", "grad_clip",
                                "loss_fn")}

