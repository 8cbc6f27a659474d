"""Interoperability with timm's Vision Transformers (``pos_embed`` tensors and the ``_pos_embed`` step).

timm (``timm.models.vision_transformer.VisionTransformer``) keeps its absolute
position embedding as one parameter ``pos_embed`` of shape
``(1, num_prefix_tokens + H * W, D)`` when the prefix (class / register) tokens
carry a position, or ``(1, H * W, D)`` when they do not (``no_embed_class=True``);
the patch rows are in row-major order of the ``H x W`` patch grid
(``patch_embed.grid_size``). Its ``_pos_embed(x)`` step adds that table to the
patch tokens and concatenates the prefix tokens (``x`` arrives ``(B, H, W, D)``
with ``dynamic_img_size=True``, ``(B, H*W, D)`` otherwise). These helpers connect
that layout with posenc:

* :func:`set_pos_encoding` -- make any posenc encoding the model's position
  embedding, evaluated on the current patch grid at every forward pass: its
  parameters train with the model (LFF), it augments in training mode and is
  deterministic in evaluation mode (CAPE), it follows ``dynamic_img_size``, and
  the prefix tokens keep their learned position rows; :func:`remove_pos_encoding`
  undoes it;
* :func:`learned_table_from_pos_embed` -- a timm ``pos_embed`` as a
  :class:`~posenc.encodings.LearnedTableEncoding` (plus the prefix rows), so a
  checkpoint's table can be resampled, analysed or trained with posenc;
* :func:`pos_embed_from_table` -- back to timm's layout;
* :func:`pos_embed_from_encoding` -- any posenc encoding evaluated on a patch grid
  in timm's layout (a fixed snapshot);
* :func:`replace_pos_embed` -- write that snapshot into a timm-like model's
  ``pos_embed`` (returning the old one, to put back).

Resampling a table the way timm's ``resample_abs_pos_embed`` does by default
(bicubic, ``antialias=True``) is ``LearnedTableEncoding(..., interpolation="bicubic",
antialias=True)``.

timm itself is not a dependency. ``tests/test_timm_interop.py`` checks these helpers
against timm's own ``VisionTransformer`` and ``resample_abs_pos_embed`` (timm 1.0)
where timm is installed; ``tests/test_interop.py`` checks them against timm's
documented layout everywhere.
"""

from __future__ import annotations

import functools

import torch
from torch import nn

from posenc._checks import check_choice, check_positive_int, check_tensor
from posenc._resources import check_footprint
from posenc.encodings.learnable import LearnedTableEncoding

__all__ = [
    "TimmPositionEncoding",
    "learned_table_from_pos_embed",
    "pos_embed_from_encoding",
    "pos_embed_from_table",
    "remove_pos_encoding",
    "replace_pos_embed",
    "set_pos_encoding",
]


def _grid(grid_size) -> tuple[int, int]:
    if isinstance(grid_size, int) and not isinstance(grid_size, bool):
        grid_size = (grid_size, grid_size)
    try:
        h, w = (int(g) for g in grid_size)
    except (TypeError, ValueError):
        raise TypeError(f"grid_size must be an int or a pair (H, W), got {grid_size!r}") from None
    check_positive_int("grid_size", h)
    check_positive_int("grid_size", w)
    return h, w


def learned_table_from_pos_embed(
    pos_embed: torch.Tensor,
    grid_size: int | tuple[int, int],
    num_prefix_tokens: int = 1,
    *,
    interpolation: str = "bicubic",
    antialias: bool = True,
) -> tuple[LearnedTableEncoding, torch.Tensor]:
    """A timm ``pos_embed`` ``(1, P + H*W, D)`` as a 2D learned table and its ``(P, D)`` prefix rows.

    Args:
        pos_embed: the tensor (or parameter) from a timm model.
        grid_size: ``(H, W)`` of the patch grid (``model.patch_embed.grid_size``).
        num_prefix_tokens: ``P`` rows before the patch rows (0 for ``no_embed_class=True``).
        interpolation, antialias: resampling of the returned table; the defaults match
            timm's ``resample_abs_pos_embed``.
    """
    check_tensor("pos_embed", pos_embed)
    h, w = _grid(grid_size)
    check_positive_int("num_prefix_tokens", num_prefix_tokens, minimum=0)
    if pos_embed.dim() != 3 or pos_embed.shape[0] != 1 or pos_embed.shape[1] != num_prefix_tokens + h * w:
        raise ValueError(
            f"pos_embed must have shape (1, num_prefix_tokens + H*W, D) = (1, {num_prefix_tokens + h * w}, D), "
            f"got {tuple(pos_embed.shape)}"
        )
    data = pos_embed.detach()[0]
    table = LearnedTableEncoding(in_dim=2, grid_size=(h, w), num_features=data.shape[-1],
                                 interpolation=check_choice("interpolation", interpolation,
                                                            ("none", "linear", "bicubic")),
                                 antialias=antialias, device=data.device, dtype=data.dtype)
    with torch.no_grad():
        table.weight.copy_(data[num_prefix_tokens:].reshape(h, w, -1))
    return table, data[:num_prefix_tokens].clone()


def pos_embed_from_table(
    table: LearnedTableEncoding, grid_size: int | tuple[int, int] | None = None, prefix: torch.Tensor | None = None
) -> torch.Tensor:
    """timm's layout ``(1, P + H*W, D)`` from a 2D learned table (resampled to ``grid_size`` if given)."""
    if not isinstance(table, LearnedTableEncoding) or table.in_dim != 2:
        raise TypeError(f"table must be a 2D LearnedTableEncoding, got {type(table).__name__}")
    rows = table.table(None if grid_size is None else _grid(grid_size))
    return _with_prefix(rows, prefix)


def _with_prefix(rows: torch.Tensor, prefix: torch.Tensor | None) -> torch.Tensor:
    if prefix is not None:
        check_tensor("prefix", prefix)
        if prefix.dim() != 2 or prefix.shape[-1] != rows.shape[-1]:
            raise ValueError(f"prefix must have shape (P, {rows.shape[-1]}), got {tuple(prefix.shape)}")
        rows = torch.cat((prefix.to(rows), rows), dim=0)
    return rows[None]


def pos_embed_from_encoding(
    encoding: nn.Module,
    grid_size: int | tuple[int, int],
    *,
    num_prefix_tokens: int = 0,
    positions: str = "continuous",
    prefix: torch.Tensor | None = None,
) -> torch.Tensor:
    """Any posenc encoding on an ``H x W`` patch grid, in timm's ``pos_embed`` layout ``(1, P + H*W, D)``.

    Args:
        encoding: a 2D posenc encoding (``in_dim == 2``) whose ``out_dim`` is the model width.
        grid_size: ``(H, W)``.
        num_prefix_tokens: ``P`` zero rows for the prefix tokens (ignored when ``prefix`` is given).
        positions: ``"continuous"`` (patch centres in the encoding's ``domain``, ``[-1, 1]`` without
            one, as :class:`posenc.models.TinyViT` gives them) or ``"index"`` (integer ``(row, col)``).
        prefix: explicit ``(P, D)`` prefix rows (e.g. from :func:`learned_table_from_pos_embed`).
    """
    from posenc.models.vit import patch_positions

    h, w = _grid(grid_size)
    check_choice("positions", positions, ("continuous", "index"))
    if getattr(encoding, "in_dim", None) != 2:
        raise ValueError(f"encoding must take 2D positions (in_dim=2), got in_dim={getattr(encoding, 'in_dim', None)}")
    if isinstance(encoding, LearnedTableEncoding):
        rows = encoding.table((h, w))
    else:
        out_dim = int(getattr(encoding, "out_dim", 0) or 0)
        check_footprint(float(h) * w * (2 * 8.0 + 2 * 4.0 * out_dim), f"grid_size={(h, w)}",
                        f"the encoding of {h * w:,} patches x {out_dim:,} features")
        ref = next(iter(encoding.parameters()), None)
        if ref is None:
            ref = next(iter(encoding.buffers()), None)
        dtype = ref.dtype if ref is not None and ref.is_floating_point() else torch.get_default_dtype()
        pos = patch_positions(h, w, positions, domain=getattr(encoding, "domain", (-1.0, 1.0)),
                              device=None if ref is None else ref.device, dtype=dtype)
        rows = encoding(pos)
    if prefix is None and num_prefix_tokens:
        check_positive_int("num_prefix_tokens", num_prefix_tokens, minimum=0)
        prefix = rows.new_zeros(num_prefix_tokens, rows.shape[-1])
    return _with_prefix(rows, prefix)


def replace_pos_embed(model: nn.Module, encoding: nn.Module, *, positions: str = "continuous") -> torch.Tensor:
    """Overwrite a timm-like model's ``pos_embed`` with ``encoding`` on its patch grid; return the old values.

    The model needs ``pos_embed`` (a parameter ``(1, P + H*W, D)`` or ``(1, H*W, D)``) and
    ``patch_embed.grid_size``; the prefix rows keep their values. The encoding is
    evaluated once (a fixed snapshot: its own parameters get no gradient and CAPE does
    not augment; :func:`set_pos_encoding` evaluates it at every forward pass instead).
    Put the old values back with ``model.pos_embed.data.copy_(old)``.
    """
    pe = getattr(model, "pos_embed", None)
    grid = getattr(getattr(model, "patch_embed", None), "grid_size", None)
    if not isinstance(pe, torch.Tensor) or grid is None:
        raise TypeError("model must have a pos_embed tensor and patch_embed.grid_size (a timm VisionTransformer)")
    h, w = _grid(grid)
    n_prefix = pe.shape[1] - h * w
    if n_prefix < 0:
        raise ValueError(f"model.pos_embed has {pe.shape[1]} rows, fewer than the {h}x{w} patch grid")
    if getattr(encoding, "out_dim", pe.shape[-1]) != pe.shape[-1]:
        raise ValueError(f"encoding out_dim must equal the model width {pe.shape[-1]}, got {encoding.out_dim}")
    old = pe.detach().clone()
    new = pos_embed_from_encoding(encoding, (h, w), positions=positions, prefix=old[0, :n_prefix])
    if new.shape != pe.shape:
        raise ValueError(f"the encoding gives pos_embed {tuple(new.shape)}, the model has {tuple(pe.shape)}: "
                         "its out_dim must equal the model width")
    with torch.no_grad():
        pe.copy_(new.to(pe))
    return old


def _patch_rows(encoding: nn.Module, h: int, w: int, positions: str, batch: int, like: torch.Tensor) -> torch.Tensor:
    """The encoding on an ``h x w`` patch grid: ``(H*W, D)``, or ``(batch, H*W, D)`` for an
    encoding that draws per sample in training mode (CAPE)."""
    from posenc.models.vit import patch_positions

    if isinstance(encoding, LearnedTableEncoding):
        return encoding.table((h, w))
    ref = next(iter(encoding.parameters()), None)
    if ref is None or not ref.is_floating_point():
        ref = like
    dtype = ref.dtype if ref.dtype in (torch.float32, torch.float64) else torch.float32
    pos = patch_positions(h, w, positions, domain=getattr(encoding, "domain", (-1.0, 1.0)),
                          device=like.device, dtype=dtype)
    if getattr(encoding, "per_sample_positions", False) and encoding.training:
        pos = pos.expand(batch, *pos.shape)  # one global shift / scale per image
    return encoding(pos)


class TimmPositionEncoding(nn.Module):
    """A posenc encoding as a timm ViT's position embedding (installed by :func:`set_pos_encoding`).

    ``patch tokens (B, H*W, D) -> (B, H*W, D)`` plus the encoding of the ``H x W`` grid;
    prefix tokens ``(B, P, D)`` get the learned rows :attr:`prefix_pos_embed` ``(1, P, D)``
    (``None`` when the model gives them no position, ``no_embed_class=True``).

    Args:
        encoding: a 2D posenc encoding (``in_dim == 2``, ``out_dim == D``); trained with the model.
        prefix_pos_embed: ``(1, P, D)`` initial rows of the prefix tokens, or ``None``.
        positions: ``"continuous"`` (patch centres in the encoding's ``domain``, ``[-1, 1]``
            without one: the image's extent whatever its size, so a larger image samples
            the same extent more densely) or ``"index"`` (integer ``(row, col)``).
        saved_pos_embed: the model's original ``pos_embed``, kept (not trained, not saved in
            the state dict) for :func:`remove_pos_encoding`.
    """

    def __init__(
        self,
        encoding: nn.Module,
        prefix_pos_embed: torch.Tensor | None = None,
        *,
        positions: str = "continuous",
        saved_pos_embed: torch.Tensor | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(encoding, nn.Module):
            raise TypeError(f"encoding must be an nn.Module (a posenc encoding), got {type(encoding).__name__}")
        if getattr(encoding, "in_dim", None) != 2:
            raise ValueError(f"encoding must take 2D positions (in_dim=2), got in_dim={getattr(encoding, 'in_dim', None)}")
        self.encoding = encoding
        self.positions = check_choice("positions", positions, ("continuous", "index"))
        if prefix_pos_embed is not None:
            check_tensor("prefix_pos_embed", prefix_pos_embed)
            if prefix_pos_embed.dim() != 3 or prefix_pos_embed.shape[0] != 1:
                raise ValueError(f"prefix_pos_embed must have shape (1, P, D), got {tuple(prefix_pos_embed.shape)}")
            prefix_pos_embed = nn.Parameter(prefix_pos_embed.detach().clone())
        self.prefix_pos_embed = prefix_pos_embed
        self.register_buffer("saved_pos_embed", None if saved_pos_embed is None else saved_pos_embed.detach().clone(),
                             persistent=False)

    def patch_embedding(self, h: int, w: int, batch: int, like: torch.Tensor) -> torch.Tensor:
        """``(1 or B, H*W, D)``: the encoding of an ``h x w`` patch grid, in ``like``'s dtype."""
        rows = _patch_rows(self.encoding, h, w, self.positions, batch, like)
        return (rows if rows.dim() == 3 else rows[None]).to(like.dtype)

    def forward(self, patches: torch.Tensor, grid: tuple[int, int], prefix: list[torch.Tensor]) -> torch.Tensor:
        """``patches (B, H*W, D)``, ``grid = (H, W)``, prefix tokens ``[(B, p_i, D), ...]`` -> ``(B, P + H*W, D)``."""
        h, w = grid
        if patches.dim() != 3 or patches.shape[1] != h * w:
            raise ValueError(f"patches must have shape (B, {h}*{w}, D), got {tuple(patches.shape)}")
        x = patches + self.patch_embedding(h, w, patches.shape[0], patches)
        if not prefix:
            return x
        tokens = torch.cat(prefix, dim=1)
        if self.prefix_pos_embed is not None:
            if self.prefix_pos_embed.shape[1] != tokens.shape[1]:
                raise ValueError(f"the model has {tokens.shape[1]} prefix tokens, prefix_pos_embed has "
                                 f"{self.prefix_pos_embed.shape[1]} rows")
            tokens = tokens + self.prefix_pos_embed.to(tokens.dtype)
        return torch.cat((tokens, x), dim=1)

    def extra_repr(self) -> str:
        p = 0 if self.prefix_pos_embed is None else self.prefix_pos_embed.shape[1]
        return f"positions={self.positions!r}, prefix_rows={p}"


def _timm_pos_embed(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """timm's ``VisionTransformer._pos_embed`` with the position table replaced by ``model.posenc_pos_embed``."""
    if getattr(model, "dynamic_img_size", False) and x.dim() == 4:
        b, h, w, c = x.shape
        x = x.reshape(b, h * w, c)
    else:
        h, w = _grid(model.patch_embed.grid_size)
    prefix = [tok.expand(x.shape[0], -1, -1) for tok in (getattr(model, "cls_token", None),
                                                         getattr(model, "reg_token", None)) if tok is not None]
    x = model.posenc_pos_embed(x, (h, w), prefix)
    drop = getattr(model, "pos_drop", None)
    return drop(x) if drop is not None else x


def set_pos_encoding(model: nn.Module, encoding: nn.Module, *, positions: str = "continuous") -> TimmPositionEncoding:
    """Make ``encoding`` the position embedding of a timm ``VisionTransformer``, recomputed at every forward.

    The model's ``pos_embed`` table is set to ``None`` (timm's own "no position table"
    state) and its ``_pos_embed`` step adds ``encoding`` evaluated on the current patch
    grid instead, so:

    * the encoding's parameters are the model's (``model.posenc_pos_embed.encoding``):
      they are in ``model.parameters()`` and the state dict, and get gradients (LFF);
    * in training mode an augmenting encoding draws anew at every step, one draw per
      image (CAPE); in evaluation mode the embedding is deterministic;
    * with ``dynamic_img_size=True`` the grid follows each input's size (the encoding is
      evaluated on that grid, never resampled);
    * the prefix tokens (class and register tokens) keep the position rows they had in
      ``pos_embed``, as a trainable ``(1, P, D)`` parameter, or get none when the model
      was built with ``no_embed_class=True`` (timm's layout);
    * the model still saves and loads whole (``torch.save(model)``, then
      ``torch.load(path, weights_only=False)``) and deep-copies, and its state dict loads
      into a model given the same encoding.

    Args:
        model: a timm ``VisionTransformer`` (``pos_embed``, ``patch_embed.grid_size``,
            ``cls_token`` / ``reg_token``, ``no_embed_class``, ``dynamic_img_size``,
            ``pos_drop``); models built the same way (the same ``_pos_embed`` contract) work too.
        encoding: a 2D posenc encoding whose ``out_dim`` is the model width.
        positions: ``"continuous"`` or ``"index"`` (see :class:`TimmPositionEncoding`).

    Returns:
        the installed :class:`TimmPositionEncoding` (also ``model.posenc_pos_embed``).

    Example::

        model = timm.create_model("vit_small_patch16_224", dynamic_img_size=True)
        set_pos_encoding(model, create_encoding("lff", in_dim=2, num_features=384))
    """
    pe = getattr(model, "pos_embed", None)
    grid = getattr(getattr(model, "patch_embed", None), "grid_size", None)
    if not isinstance(model, nn.Module) or grid is None or not hasattr(model, "pos_embed"):
        raise TypeError("model must be a timm VisionTransformer (pos_embed and patch_embed.grid_size)")
    if hasattr(model, "posenc_pos_embed"):
        raise ValueError("model already has a posenc position encoding; call remove_pos_encoding(model) first")
    if not isinstance(pe, torch.Tensor):
        raise ValueError("model.pos_embed is None (built with pos_embed='none'): there is no position step to replace")
    h, w = _grid(grid)
    width = pe.shape[-1]
    if getattr(encoding, "out_dim", None) != width:
        raise ValueError(f"encoding out_dim must equal the model width {width}, got {getattr(encoding, 'out_dim', None)}")
    n_prefix = pe.shape[1] - h * w
    expected = 0 if getattr(model, "no_embed_class", False) else int(getattr(model, "num_prefix_tokens", n_prefix))
    if n_prefix != expected:
        raise ValueError(f"model.pos_embed has {pe.shape[1]} rows; expected {expected} prefix rows + {h}x{w} patches")
    prefix = pe[:, :n_prefix] if n_prefix else None
    hook = TimmPositionEncoding(encoding, prefix, positions=positions, saved_pos_embed=pe)
    hook.to(device=pe.device)
    model.posenc_pos_embed = hook
    model.pos_embed = None
    # This instance only. A partial of a module-level function, not a bound method: pickle
    # stores it by reference to posenc.interop._timm_pos_embed, so torch.save(model) /
    # torch.load and copy.deepcopy work (a bound method is pickled as getattr(model,
    # '_timm_pos_embed'), which the loaded model does not have).
    model._pos_embed = functools.partial(_timm_pos_embed, model)
    return hook


def remove_pos_encoding(model: nn.Module) -> TimmPositionEncoding:
    """Undo :func:`set_pos_encoding`: put the original ``pos_embed`` back; return the removed module."""
    hook = getattr(model, "posenc_pos_embed", None)
    if not isinstance(hook, TimmPositionEncoding):
        raise ValueError("model has no posenc position encoding (set_pos_encoding was not called)")
    del model.posenc_pos_embed
    model.__dict__.pop("_pos_embed", None)
    saved = hook.saved_pos_embed
    model.pos_embed = nn.Parameter(saved.clone())
    return hook
