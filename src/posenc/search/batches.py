"""Data for the search functions: an in-memory ``(inputs, targets)`` pair, or any iterable of
such batches (a ``torch.utils.data.DataLoader``, a list of pairs, ...).

``inputs`` is a tensor (the model is called as ``model(inputs)``) or a dict of tensors (called
as ``model(**inputs)``). A dict with a ``"labels"`` (or ``"label"``) entry stands for the pair
of the other entries and that one, as Hugging Face datasets and collators give them: an
in-memory dict of tensors, or an iterable of such dicts. A model's output that is a dict or an
object with ``logits`` (a Hugging Face ``ModelOutput``) is read as those logits.

A pair of tensors is split into mini-batches here: shuffled (one permutation per epoch, the
last batch smaller, as a ``DataLoader`` with a random sampler and ``drop_last=False``) for
training, in fixed order for measurements. An iterable is used as it comes: one pass over it
is one epoch, and its own batch size and order apply (the ``batch_size`` arguments are
ignored for it). Such a batch is used whole, so the entries of its dict inputs may have any
shape: a graph's ``{"x": (num_nodes, F), "edge_index": (2, E)}`` with node targets is one batch
(``[(inputs, targets)]``).

Integer targets equal to :data:`IGNORE_INDEX` (-100, the default ``ignore_index`` of
``torch.nn.functional.cross_entropy`` and the label of Hugging Face's padding) count in no loss
and no accuracy: the nodes of a graph outside a split, the padding of a token batch.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Union

import torch
from torch import nn

__all__ = ["Batches", "Data", "IGNORE_INDEX", "Inputs", "TARGET_KEYS", "call_model", "check_data", "is_pair", "logits_of"]

#: A model's inputs: one tensor (``model(x)``) or a dict of tensors (``model(**x)``).
Inputs = Union[torch.Tensor, Mapping[str, torch.Tensor]]
#: ``(inputs, targets)`` with the same first dimension, a dict with a :data:`TARGET_KEYS` entry,
#: or an iterable of either.
Data = Union[tuple[Inputs, torch.Tensor], Mapping[str, torch.Tensor], Iterable]
#: An integer target that counts in no loss and no accuracy (cross-entropy's default ``ignore_index``).
IGNORE_INDEX = -100
#: The entries of a dict batch that hold its targets, in the order they are looked for.
TARGET_KEYS: tuple[str, ...] = ("labels", "label")


def _tensor_dict(x: Any) -> bool:
    return isinstance(x, Mapping) and bool(x) and all(isinstance(v, torch.Tensor) for v in x.values())


def is_pair(data: Any) -> bool:
    """Whether ``data`` is one in-memory ``(inputs, targets)`` pair (inputs a tensor or a dict of
    tensors) or one in-memory dict of tensors with a :data:`TARGET_KEYS` entry."""
    if _tensor_dict(data):
        return any(k in data for k in TARGET_KEYS)
    return (isinstance(data, (tuple, list)) and len(data) == 2
            and (isinstance(data[0], torch.Tensor) or _tensor_dict(data[0])) and isinstance(data[1], torch.Tensor))


def call_model(model: nn.Module, x: Inputs) -> Any:
    """``model(**x)`` for a dict of tensors, else ``model(x)``."""
    return model(**x) if isinstance(x, Mapping) else model(x)


def logits_of(out: Any) -> Any:
    """A model's output as its logits: the ``"logits"`` entry of a dict (a Hugging Face
    ``ModelOutput`` is one) or the ``logits`` attribute of an object that has one, else ``out``."""
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, Mapping):
        return out["logits"] if "logits" in out else out
    logits = getattr(out, "logits", None)
    return logits if isinstance(logits, torch.Tensor) else out


def take(x: Inputs, idx: Any) -> Inputs:
    """``x[idx]``, entry by entry for a dict."""
    return x[idx] if isinstance(x, torch.Tensor) else {k: v[idx] for k, v in x.items()}


def _split(name: str, data: Mapping) -> tuple[dict[str, torch.Tensor], Any]:
    """A dict batch as ``(other entries, targets)``."""
    key = next((k for k in TARGET_KEYS if k in data), None)
    if key is None:
        raise ValueError(f"{name}: a dict batch must hold its targets under one of {list(TARGET_KEYS)}, got the "
                         f"keys {sorted(map(str, data))}")
    inputs = {k: v for k, v in data.items() if k not in TARGET_KEYS}
    if not inputs:
        raise ValueError(f"{name}: a dict batch holds only its targets ({key!r}), no inputs for the model")
    return inputs, data[key]


def _check_pair(name: str, x: Any, y: Any, whole: bool = False) -> tuple[Inputs, torch.Tensor]:
    """Check one pair; ``whole``: a batch used as it is (never split), whose dict entries may have
    any shape (a graph's ``edge_index`` ``(2, E)`` beside its ``x`` ``(num_nodes, F)``)."""
    if isinstance(x, Mapping):
        if not x or not all(isinstance(k, str) for k in x):
            raise TypeError(f"{name}: dict inputs must map argument names (str) to tensors, got keys {list(x)}")
        bad = sorted(k for k, v in x.items() if not isinstance(v, torch.Tensor))
        if bad:
            raise TypeError(f"{name}: dict inputs must hold tensors, but {bad} are "
                            f"{sorted({type(x[k]).__name__ for k in bad})}")
        if not isinstance(y, torch.Tensor):
            raise TypeError(f"{name}: targets must be a tensor, got {type(y).__name__}")
        entries = [(f"inputs[{k!r}]", v) for k, v in x.items()]
    else:
        if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor):
            raise TypeError(f"{name} must be a pair (inputs, targets) of tensors, got "
                            f"({type(x).__name__}, {type(y).__name__})")
        entries = [("inputs", x)]
    for what, t in (*entries, ("targets", y)):
        if t.is_meta:
            raise ValueError(f"{name}: {what} are on the meta device, which holds shapes but no values")
    if y.dim() == 0:
        raise ValueError(f"{name}: targets must have a first (batch) dimension, got a scalar")
    for what, t in entries:
        if whole and isinstance(x, Mapping):
            continue
        if t.dim() == 0 or t.shape[0] != y.shape[0]:
            hint = ("; a graph (edge_index beside x) is one batch used whole: pass a list of batches, "
                    "[(inputs, targets)]" if isinstance(x, Mapping) else "")
            raise ValueError(f"{name}: {what} and targets must share their first dimension, got shapes "
                             f"{tuple(t.shape)} and {tuple(y.shape)}{hint}")
    if y.shape[0] == 0:
        raise ValueError(f"{name} is empty (0 examples): nothing to train or measure on")
    for what, t in entries:
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise ValueError(f"{name}: {what} must be finite")
    return x, y


def check_data(name: str, data: Any) -> tuple[Inputs, torch.Tensor]:
    """Validate an in-memory ``(inputs, targets)`` pair (or a dict with a :data:`TARGET_KEYS` entry):
    tensors, the same non-zero first dimension, finite floating-point inputs."""
    if isinstance(data, Mapping):
        data = _split(name, data)
    if not (isinstance(data, (tuple, list)) and len(data) == 2):
        raise TypeError(f"{name} must be a pair (inputs, targets) of tensors, got {type(data).__name__}")
    return _check_pair(name, data[0], data[1])


class Batches:
    """Mini-batches of a pair or of an iterable of pairs (see the module docstring).

    Args:
        name: the argument's name, for error messages.
        data: ``(inputs, targets)`` (inputs a tensor or a dict of tensors), a dict of tensors with a
            :data:`TARGET_KEYS` entry, or an iterable of either.

    Raises:
        TypeError: ``data`` is neither; a batch of the iterable is not a pair of tensors.
        ValueError: empty data, mismatched lengths, non-finite inputs.
    """

    def __init__(self, name: str, data: Any) -> None:
        self.name = name
        self.pair: tuple[Inputs, torch.Tensor] | None = None
        self.iterable: Iterable | None = None
        #: where every batch is moved as it is drawn (None: left where it is)
        self.device: torch.device | None = None
        if isinstance(data, Batches):  # already checked: keep its data
            self.pair, self.iterable, self.device = data.pair, data.iterable, data.device
        elif is_pair(data) or isinstance(data, Mapping):
            self.pair = check_data(name, data)
        elif isinstance(data, (torch.Tensor, str, bytes)) or not isinstance(data, Iterable):
            raise TypeError(f"{name} must be a pair (inputs, targets) of tensors or an iterable of such pairs "
                            f"(e.g. a DataLoader), got {type(data).__name__}")
        elif isinstance(data, (tuple, list)) and not data:
            raise ValueError(f"{name} is empty (no batches): nothing to train or measure on")
        else:
            if isinstance(data, Iterator):
                raise TypeError(f"{name} must be re-iterable (a DataLoader or a list of batches), got a one-shot "
                                f"{type(data).__name__}")
            self.iterable = data

    @property
    def num_examples(self) -> int | None:
        """Examples of an in-memory pair (``None`` for an iterable)."""
        return None if self.pair is None else int(self.pair[1].shape[0])

    def batches_per_epoch(self, batch_size: int) -> int:
        """Batches in one epoch (``len()`` of an iterable)."""
        if self.pair is not None:
            return math.ceil(self.pair[1].shape[0] / batch_size)
        try:
            n = len(self.iterable)  # type: ignore[arg-type]
        except TypeError:
            raise TypeError(f"{self.name}: an iterable without len() cannot count epochs; give steps instead") from None
        if n == 0:
            raise ValueError(f"{self.name} is empty (no batches): nothing to train or measure on")
        return n

    def _check_batch(self, batch: Any, k: int) -> tuple[Inputs, torch.Tensor]:
        if isinstance(batch, Mapping):
            batch = _split(f"{self.name} (batch {k})", batch)
        if not (isinstance(batch, (tuple, list)) and len(batch) == 2):
            raise TypeError(f"{self.name}: batch {k} must be a pair (inputs, targets) of tensors, "
                            f"got {type(batch).__name__}")
        return _check_pair(f"{self.name} (batch {k})", batch[0], batch[1], whole=True)

    def _moved(self, xb: Inputs, yb: torch.Tensor) -> tuple[Inputs, torch.Tensor]:
        if self.device is None:
            return xb, yb
        dev = self.device
        xm = (xb.to(dev, non_blocking=True) if isinstance(xb, torch.Tensor)
              else {k: v.to(dev, non_blocking=True) for k, v in xb.items()})
        return xm, yb.to(dev, non_blocking=True)

    def epoch(self, batch_size: int) -> Iterator[tuple[Inputs, torch.Tensor]]:
        """One pass in fixed order (the iterable's own order), each batch on :attr:`device`."""
        for xb, yb in self._epoch(batch_size):
            yield self._moved(xb, yb)

    def _epoch(self, batch_size: int) -> Iterator[tuple[Inputs, torch.Tensor]]:
        if self.pair is not None:
            x, y = self.pair
            for start in range(0, y.shape[0], batch_size):
                yield take(x, slice(start, start + batch_size)), y[start:start + batch_size]
            return
        count = 0
        for count, batch in enumerate(self.iterable, 1):  # type: ignore[union-attr]
            yield self._check_batch(batch, count - 1)
        if count == 0:
            raise ValueError(f"{self.name} is empty (no batches): nothing to train or measure on")

    def stream(self, batch_size: int, generator: torch.Generator) -> Iterator[tuple[Inputs, torch.Tensor]]:
        """Endless shuffled batches: one random permutation per epoch, the last batch smaller
        (an iterable: pass after pass over it)."""
        if self.pair is not None:
            x, y = self.pair
            n = y.shape[0]
            while True:
                perm = torch.randperm(n, generator=generator)
                for start in range(0, n, batch_size):
                    idx = perm[start:start + batch_size]
                    yield self._moved(take(x, idx), y[idx])
        while True:
            yield from self.epoch(batch_size)
