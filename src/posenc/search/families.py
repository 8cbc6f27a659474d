"""Position encodings of every family, put into a model built from standard PyTorch parts.

A *candidate* names one complete position encoding of a sequence model: an additive
encoding of the tokens (``'none'``, ``'sinusoidal'``, ``'learned_table'``, ``'lff'``, any other
name of :func:`posenc.create_encoding` that encodes 1-D positions, or ``'cape'``, the
sinusoids with CAPE's training-time augmentation), a relative term inside every attention
layer (``'rope'``, ``'xpos'``, ``'alibi'``, ``'t5'``: :class:`~posenc.attention.RelativeMHA`;
``'kernelized'``: :class:`~posenc.attention.KernelizedMHA` with its learned relative bias), or
one of each joined by ``+`` (``'rope+sinusoidal'``). A relative name alone means no additive
encoding: the candidate is the model's whole position encoding. For a graph model, a candidate
is a node encoding (``'laplacian_pe'``, ``'random_walk_pe'``, ``'anchor_pe'``:
:class:`~posenc.search.NodeEncoding`) or ``'none'``.

:func:`with_encoding` turns a plain model into a candidate, in place. What the model must
provide:

* for an attention candidate: its self-attention layers are ``nn.MultiheadAttention``
  (``nn.TransformerEncoderLayer``'s ``self_attn`` is one) with ``kdim == vdim == embed_dim``
  and no ``add_bias_kv`` / ``add_zero_attn``. Every one of them is replaced by the posenc
  layer built from its projections (``from_torch``); token ``i`` of each call sits at
  position ``i``. ``'kernelized'`` has no attention dropout (it never forms the attention
  matrix), so the layers it replaces lose theirs;
* for an additive candidate: a submodule, named by ``encoding_at``, that the model applies
  to the token features ``(batch, length, dim)`` (``(length, batch, dim)`` when its attention
  layers are not ``batch_first``) where the position encoding is added: an ``nn.Identity()``
  is enough. It is replaced by :class:`SequenceEncoding` (``'none'``: ``nn.Identity()``);
* for a node encoding: a submodule, named by ``encoding_at``, that the model applies to the node
  features ``(num_nodes, dim)`` (an ``nn.Identity()``), and a ``forward`` that takes the graph as an
  argument named ``edge_index`` (PyG's ``forward(self, x, edge_index)``) or a ``Data`` object holding
  one. The submodule is replaced by :class:`~posenc.search.NodeEncoding`, and a forward pre-hook on
  the model hands it each call's ``edge_index`` (:func:`~posenc.search.feed_graph`).

The choice among candidates is :func:`~posenc.search.choose_encoding` with ``candidates=``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from posenc._checks import check_positive_int
from posenc.search.batches import call_model
from posenc.search.nodes import NodeEncoding, feed_graph

__all__ = ["ATTENTION_CANDIDATES", "FAMILY_CANDIDATES", "NODE_CANDIDATES", "Candidate", "SequenceEncoding", "parse_candidate",
           "probe_slot", "with_encoding"]

#: Candidates that replace the model's attention layers, and the layer each builds.
ATTENTION_CANDIDATES: dict[str, str] = {"rope": "RelativeMHA", "xpos": "RelativeMHA", "alibi": "RelativeMHA",
                                        "t5": "RelativeMHA", "kernelized": "KernelizedMHA"}
#: A default set of candidates across the families (additive, augmented, relative, kernelized).
FAMILY_CANDIDATES: tuple[str, ...] = ("none", "sinusoidal", "learned_table", "cape", "rope", "alibi", "t5",
                                      "xpos")
#: The family of each named candidate part (additive names not listed are ``'additive'``).
_FAMILY = {"cape": "augmented", "kernelized": "kernelized", **{k: "relative" for k in ("rope", "xpos", "alibi", "t5")},
           **{k: "graph" for k in ("laplacian_pe", "random_walk_pe", "anchor_pe")}}
#: Node encodings of a graph model (:class:`~posenc.search.NodeEncoding`).
NODE_CANDIDATES: tuple[str, ...] = ("laplacian_pe", "random_walk_pe", "anchor_pe")
_SEEDED = ("learned_table", "lff", "random", "rff", "coord_mlp")


@dataclass(frozen=True)
class Candidate:
    """A parsed candidate: ``attention`` (a key of :data:`ATTENTION_CANDIDATES` or None) and
    ``additive`` (an encoding name, ``'none'`` for no additive encoding)."""

    name: str
    attention: str | None
    additive: str

    @property
    def family(self) -> str:
        """``'additive'``, ``'augmented'``, ``'relative'``, ``'kernelized'``, ``'graph'`` or ``'combined'``."""
        if self.attention is None:
            return _FAMILY.get(self.additive, "additive")
        return _FAMILY[self.attention] if self.additive == "none" else "combined"


def parse_candidate(name: Any) -> Candidate:
    """``'rope'`` -> ``Candidate('rope', 'rope', 'none')``; ``'rope+sinusoidal'`` -> both parts.

    Raises:
        TypeError: ``name`` is not a string.
        ValueError: an unknown part, two attention parts or two additive parts.
    """
    from posenc.encodings.registry import available_encodings

    if not isinstance(name, str):
        raise TypeError(f"candidates: each candidate must be a string such as 'rope' or 'rope+sinusoidal', "
                        f"got {type(name).__name__} ({name!r})")
    parts = [p.strip() for p in name.split("+")]
    known = sorted(set(available_encodings()) | {"none", *NODE_CANDIDATES})
    attention = [p for p in parts if p in ATTENTION_CANDIDATES]
    additive = [p for p in parts if p not in ATTENTION_CANDIDATES]
    bad = [p for p in additive if p not in known]
    if bad or not all(parts):
        raise ValueError(f"candidates: unknown part {bad[0] if bad else ''!r} in {name!r}; an attention part is "
                         f"one of {list(ATTENTION_CANDIDATES)}, an additive one 'none' or an encoding name "
                         f"({', '.join(k for k in known if k != 'none')})")
    if len(attention) > 1 or len(additive) > 1:
        raise ValueError(f"candidates: {name!r} names {len(attention)} attention and {len(additive)} additive parts; "
                         "a candidate has at most one of each")
    if attention and additive and additive[0] in NODE_CANDIDATES:
        raise ValueError(f"candidates: {name!r} joins a node encoding and an attention part; a node encoding is a "
                         "graph model's whole position encoding")
    return Candidate("+".join(parts), attention[0] if attention else None, additive[0] if additive else "none")


class SequenceEncoding(nn.Module):
    """``x -> x + encoding(positions)`` over the token positions ``0 .. L-1`` of any length ``L <= max_len``.

    Integer positions go to encodings that take indices (``positions_kind`` ``'index'`` or
    ``'any'``), cell centres ``-1 + 2 (i + 1/2) / max_len`` in ``[-1, 1]`` to continuous ones, so a
    token keeps its encoding whatever the sequence's length. An encoding that augments per sample
    (CAPE) gets one row of positions per example in training mode.

    Args:
        encoding: an :class:`~posenc.encodings.Encoding` of 1-D positions to ``dim`` features.
        max_len: the longest sequence (a learned table has this many rows).
        batch_first: ``x`` is ``(batch, length, dim)``; else ``(length, batch, dim)``.
        normalize: RMS-normalise each token's encoding (no parameters), as
            :class:`~posenc.search.EncodingSearch`'s candidates are.
        eps: of the RMS normalisation.
    """

    def __init__(self, encoding: nn.Module, max_len: int, *, batch_first: bool = True, normalize: bool = True,
                 eps: float = 1e-10) -> None:
        super().__init__()
        self.encoding = encoding
        self.max_len = check_positive_int("max_len", max_len)
        self.batch_first, self.normalize, self.eps = bool(batch_first), bool(normalize), eps
        kind = getattr(encoding, "positions_kind", "continuous")
        self.continuous = kind == "continuous"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dim() != 3:
            raise ValueError(f"x must be floating-point token features of shape "
                             f"{'(batch, length, dim)' if self.batch_first else '(length, batch, dim)'}, got "
                             f"{getattr(x, 'dtype', type(x).__name__)} {tuple(getattr(x, 'shape', ()))}")
        n, batch = (x.shape[1], x.shape[0]) if self.batch_first else (x.shape[0], x.shape[1])
        if n > self.max_len:
            raise ValueError(f"x has {n} tokens, more than max_len={self.max_len} of this encoding: build it "
                             "with a larger max_len (choose_encoding / with_encoding: max_len=)")
        idx = torch.arange(n, device=x.device)
        pos = (-1.0 + 2.0 * (idx.to(x.dtype) + 0.5) / self.max_len) if self.continuous else idx
        pos = pos.unsqueeze(-1)
        if getattr(self.encoding, "per_sample_positions", False):
            pos = pos.to(x.dtype)
            if self.training:
                pos = pos.expand(batch, n, 1)
        f = self.encoding(pos).to(x.dtype)
        if self.normalize:
            f = f * torch.rsqrt(f.pow(2).mean(-1, keepdim=True) + self.eps)
        if f.dim() == 2:
            f = f.unsqueeze(0) if self.batch_first else f.unsqueeze(1)
        elif not self.batch_first:
            f = f.transpose(0, 1)
        return x + f

    def extra_repr(self) -> str:
        return f"max_len={self.max_len}, batch_first={self.batch_first}, continuous={self.continuous}"


def _attention_layers(model: nn.Module) -> list[tuple[str, nn.MultiheadAttention]]:
    return [(n, m) for n, m in model.named_modules() if isinstance(m, nn.MultiheadAttention)]


def _set_submodule(model: nn.Module, path: str, module: nn.Module) -> None:
    parent, _, leaf = path.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, leaf, module)


def _posenc_attention(model: nn.Module) -> list[str]:
    from posenc.attention import KernelizedMHA, RelativeMHA

    return [n for n, m in model.named_modules() if isinstance(m, (RelativeMHA, KernelizedMHA))]


def with_encoding(model: nn.Module, candidate: str, *, encoding_at: str | None = None, max_len: int | None = None,
                  dim: int | None = None, seed: int = 0, normalize: bool = True,
                  encoding_kwargs: Mapping[str, Mapping[str, Any]] | None = None) -> nn.Module:
    """Give the plain ``model`` the position encoding ``candidate``, in place (see the module docstring).

    Args:
        model: built from standard parts: ``nn.MultiheadAttention`` self-attention layers (for an
            attention candidate) and, for an additive one, a submodule named ``encoding_at``.
        candidate: e.g. ``'rope'``, ``'sinusoidal'``, ``'rope+learned_table'``, ``'none'``.
        encoding_at: the dotted name of the submodule that adds the position encoding.
        max_len: the longest sequence the additive encoding takes (needed by any additive part but a
            node encoding).
        dim: the token width (the node feature width for a node encoding); default: the attention
            layers' ``embed_dim``.
        seed: the new modules' initial draws (the encoding's and the attention's position
            parameters) come from this seed; the global random state is left as it was.
        normalize: RMS-normalise the additive encoding per token (:class:`SequenceEncoding`).
        encoding_kwargs: extra constructor arguments per encoding name (or ``'attention'`` for
            the attention layers: ``{'attention': {'rope_base': 500.0}}``).

    Returns:
        ``model`` (the same object) with its attention layers and ``encoding_at`` replaced.
        Saving and loading: ``torch.save(model.state_dict(), f)``; rebuild the plain model,
        call ``with_encoding`` with the same arguments, then ``load_state_dict``.

    Raises:
        ValueError: an unknown candidate, no ``nn.MultiheadAttention`` for an attention
            candidate (or posenc attention layers already there), no ``encoding_at`` (or no
            ``max_len`` / ``dim``) for an additive one, an attention layer ``from_torch`` refuses.
    """
    from posenc.attention import KernelizedMHA, RelativeMHA
    from posenc.encodings import create_encoding

    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    cand = parse_candidate(candidate)
    kwargs = {k: dict(v) for k, v in (encoding_kwargs or {}).items()}
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    layers = _attention_layers(model)
    mine = _posenc_attention(model)
    if mine and cand.attention is not None:
        raise ValueError(f"model already has posenc attention layers ({mine[:3]}): with_encoding takes the plain "
                         "model (nn.MultiheadAttention layers)")
    if cand.attention is not None and not layers:
        raise ValueError(f"candidate {candidate!r} replaces the model's nn.MultiheadAttention layers, and "
                         f"{type(model).__name__} has none")
    slot = None
    if encoding_at is not None:
        if not isinstance(encoding_at, str) or not encoding_at:
            raise TypeError(f"encoding_at must be the dotted name of a submodule, got {encoding_at!r}")
        try:
            slot = model.get_submodule(encoding_at)
        except AttributeError:
            raise ValueError(f"encoding_at={encoding_at!r}: {type(model).__name__} has no such submodule") from None
    graph = cand.additive in NODE_CANDIDATES
    if cand.additive != "none":
        if slot is None:
            raise ValueError(f"candidate {candidate!r} adds an encoding to the tokens: name the submodule that does "
                             "it with encoding_at= (an nn.Identity() where the model adds positions is enough)")
        if dim is None:
            dims = {m.embed_dim for _, m in layers}
            if len(dims) != 1:
                raise ValueError(f"candidate {candidate!r}: give dim= (the {'node feature' if graph else 'token'} width; "
                                 f"the model's attention "
                                 f"layers give {sorted(dims) or 'none'})")
            dim = dims.pop()
        check_positive_int("dim", dim)
        if not graph:
            if max_len is None:
                raise ValueError(f"candidate {candidate!r} needs max_len= (the longest sequence it will encode)")
            check_positive_int("max_len", max_len)
    batch_first = all(m.batch_first for _, m in layers) if layers else True
    cuda = sorted({p.device.index or 0 for p in model.parameters() if p.is_cuda})
    with torch.random.fork_rng(devices=cuda):  # torch.manual_seed seeds every device: restore the ones in use
        torch.manual_seed(seed)
        new_slot: nn.Module | None = None
        if graph:
            ref = next(model.parameters(), None)
            float_ref = ref is not None and ref.is_floating_point()
            try:
                new_slot = NodeEncoding(cand.additive, dim, **{"seed": seed, **kwargs.get(cand.additive, {})},  # type: ignore[arg-type]
                                        device=ref.device if ref is not None else None,
                                        dtype=ref.dtype if float_ref else None)
            except (TypeError, ValueError) as err:
                raise ValueError(f"candidates: {cand.additive!r} cannot encode nodes to dim={dim}: {err}") from None
        elif cand.additive != "none":
            kw: dict[str, Any] = {"in_dim": 1, "num_features": dim}
            if cand.additive == "learned_table":
                kw["grid_size"] = max_len
            if cand.additive in _SEEDED:
                kw["seed"] = seed
            kw.update(kwargs.get(cand.additive, {}))
            try:
                enc = create_encoding(cand.additive, **kw)
            except (TypeError, ValueError) as err:
                raise ValueError(f"candidates: {cand.additive!r} cannot encode 1-D positions to dim={dim}: "
                                 f"{err}") from None
            ref = next(model.parameters(), None)
            if ref is not None:
                enc = enc.to(device=ref.device, dtype=ref.dtype if ref.is_floating_point() else None)
            new_slot = SequenceEncoding(enc, max_len, batch_first=batch_first, normalize=normalize)  # type: ignore[arg-type]
        elif slot is not None:
            new_slot = nn.Identity()
        replaced: dict[str, nn.Module] = {}
        if cand.attention is not None:
            extra = kwargs.get("attention", {})
            for path, mha in layers:
                try:
                    if cand.attention == "kernelized":
                        new = KernelizedMHA.from_torch(mha, **{"dropout": 0.0, **extra})
                    else:
                        new = RelativeMHA.from_torch(mha, position=cand.attention, **extra)
                except (TypeError, ValueError) as err:
                    raise ValueError(f"candidate {candidate!r}: the attention layer {path!r} cannot take it: "
                                     f"{err}") from None
                replaced[path] = new
    for path, new in replaced.items():  # every layer was built before any is replaced
        _set_submodule(model, path, new)
    if new_slot is not None and encoding_at is not None:
        _set_submodule(model, encoding_at, new_slot)
        if graph:
            feed_graph(model, encoding_at)
    return model


def probe_slot(model: nn.Module, encoding_at: str, batches: Iterable[Any]) -> tuple[int, int]:
    """``(dim, longest length)`` of the features ``model`` feeds its ``encoding_at`` submodule on
    ``batches`` (one forward pass each, eval mode, no gradients, the random state restored): token
    features ``(batch, length, dim)``, or node features ``(num_nodes, dim)`` (longest length 0)."""
    slot = model.get_submodule(encoding_at)
    layers = _attention_layers(model)
    batch_first = all(m.batch_first for _, m in layers) if layers else True
    seen = {"dim": None, "longest": 0}

    def hook(_m, args):
        if args and isinstance(args[0], torch.Tensor) and args[0].dim() in (2, 3):
            shape = args[0].shape
            seen["dim"] = seen["dim"] or int(shape[-1])
            if args[0].dim() == 3:
                seen["longest"] = max(seen["longest"], int(shape[1] if batch_first else shape[0]))

    handle = slot.register_forward_pre_hook(hook)
    was = model.training
    try:
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            model.eval()
            for xb in batches:
                with contextlib.suppress(Exception):  # the race reports the model's own errors on its batches
                    call_model(model, xb)
    finally:
        handle.remove()
        model.train(was)
    if seen["dim"] is None:
        raise ValueError(f"encoding_at={encoding_at!r}: the model never called it with (batch, length, dim) token "
                         "features (or (num_nodes, dim) node features) on the first batch of train and the batches "
                         "of val; name the submodule that receives them")
    return int(seen["dim"]), int(seen["longest"])
