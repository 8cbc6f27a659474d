"""Data for the search functions: an in-memory ``(inputs, targets)`` pair, or any iterable of
such batches (a ``torch.utils.data.DataLoader``, a list of pairs, ...).

A pair of tensors is split into mini-batches here: shuffled (one permutation per epoch, the
last batch smaller, as a ``DataLoader`` with a random sampler and ``drop_last=False``) for
training, in fixed order for measurements. An iterable is used as it comes: one pass over it
is one epoch, and its own batch size and order apply (the ``batch_size`` arguments are
ignored for it).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from typing import Any, Union

import torch

__all__ = ["Batches", "Data", "check_data", "is_pair"]

#: ``(inputs, targets)`` tensors with the same first dimension, or an iterable of such pairs.
Data = Union[tuple[torch.Tensor, torch.Tensor], Iterable]


def is_pair(data: Any) -> bool:
    """Whether ``data`` is one in-memory ``(inputs, targets)`` pair of tensors."""
    return (isinstance(data, (tuple, list)) and len(data) == 2
            and isinstance(data[0], torch.Tensor) and isinstance(data[1], torch.Tensor))


def _check_pair(name: str, x: Any, y: Any) -> tuple[torch.Tensor, torch.Tensor]:
    if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor):
        raise TypeError(f"{name} must be a pair (inputs, targets) of tensors, got "
                        f"({type(x).__name__}, {type(y).__name__})")
    for what, t in (("inputs", x), ("targets", y)):
        if t.is_meta:
            raise ValueError(f"{name}: {what} are on the meta device, which holds shapes but no values")
    if x.dim() == 0 or y.dim() == 0 or x.shape[0] != y.shape[0]:
        raise ValueError(f"{name}: inputs and targets must share their first dimension, got shapes "
                         f"{tuple(x.shape)} and {tuple(y.shape)}")
    if x.shape[0] == 0:
        raise ValueError(f"{name} is empty (0 examples): nothing to train or measure on")
    if x.is_floating_point() and not bool(torch.isfinite(x).all()):
        raise ValueError(f"{name}: inputs must be finite")
    return x, y


def check_data(name: str, data: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Validate an in-memory ``(inputs, targets)`` pair: tensors, same non-zero length, finite inputs."""
    if not (isinstance(data, (tuple, list)) and len(data) == 2):
        raise TypeError(f"{name} must be a pair (inputs, targets) of tensors, got {type(data).__name__}")
    return _check_pair(name, data[0], data[1])


class Batches:
    """Mini-batches of a pair or of an iterable of pairs (see the module docstring).

    Args:
        name: the argument's name, for error messages.
        data: ``(inputs, targets)`` tensors or an iterable of such pairs.

    Raises:
        TypeError: ``data`` is neither; a batch of the iterable is not a pair of tensors.
        ValueError: empty data, mismatched lengths, non-finite inputs.
    """

    def __init__(self, name: str, data: Any) -> None:
        self.name = name
        self.pair: tuple[torch.Tensor, torch.Tensor] | None = None
        self.iterable: Iterable | None = None
        #: where every batch is moved as it is drawn (None: left where it is)
        self.device: torch.device | None = None
        if isinstance(data, Batches):  # already checked: keep its data
            self.pair, self.iterable, self.device = data.pair, data.iterable, data.device
        elif is_pair(data):
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
        return None if self.pair is None else int(self.pair[0].shape[0])

    def batches_per_epoch(self, batch_size: int) -> int:
        """Batches in one epoch (``len()`` of an iterable)."""
        if self.pair is not None:
            return math.ceil(self.pair[0].shape[0] / batch_size)
        try:
            n = len(self.iterable)  # type: ignore[arg-type]
        except TypeError:
            raise TypeError(f"{self.name}: an iterable without len() cannot count epochs; give steps instead") from None
        if n == 0:
            raise ValueError(f"{self.name} is empty (no batches): nothing to train or measure on")
        return n

    def _check_batch(self, batch: Any, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not (isinstance(batch, (tuple, list)) and len(batch) == 2):
            raise TypeError(f"{self.name}: batch {k} must be a pair (inputs, targets) of tensors, "
                            f"got {type(batch).__name__}")
        return _check_pair(f"{self.name} (batch {k})", batch[0], batch[1])

    def _moved(self, xb: torch.Tensor, yb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.device is None:
            return xb, yb
        return xb.to(self.device, non_blocking=True), yb.to(self.device, non_blocking=True)

    def epoch(self, batch_size: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """One pass in fixed order (the iterable's own order), each batch on :attr:`device`."""
        for xb, yb in self._epoch(batch_size):
            yield self._moved(xb, yb)

    def _epoch(self, batch_size: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        if self.pair is not None:
            x, y = self.pair
            for start in range(0, x.shape[0], batch_size):
                yield x[start:start + batch_size], y[start:start + batch_size]
            return
        count = 0
        for count, batch in enumerate(self.iterable, 1):  # type: ignore[union-attr]
            yield self._check_batch(batch, count - 1)
        if count == 0:
            raise ValueError(f"{self.name} is empty (no batches): nothing to train or measure on")

    def stream(self, batch_size: int, generator: torch.Generator) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Endless shuffled batches: one random permutation per epoch, the last batch smaller
        (an iterable: pass after pass over it)."""
        if self.pair is not None:
            x, y = self.pair
            n = x.shape[0]
            while True:
                perm = torch.randperm(n, generator=generator)
                for start in range(0, n, batch_size):
                    idx = perm[start:start + batch_size]
                    yield self._moved(x[idx], y[idx])
        while True:
            yield from self.epoch(batch_size)
