"""Interoperability with timm's Vision Transformers (``pos_embed`` tensors).

timm (``timm.models.vision_transformer.VisionTransformer``) keeps its absolute
position embedding as one parameter ``pos_embed`` of shape
``(1, num_prefix_tokens + H * W, D)`` when the prefix (class / register) tokens
carry a position, or ``(1, H * W, D)`` when they do not (``no_embed_class=True``);
the patch rows are in row-major order of the ``H x W`` patch grid
(``patch_embed.grid_size``). These helpers convert between that layout and posenc:

* :func:`learned_table_from_pos_embed` -- a timm ``pos_embed`` as a
  :class:`~posenc.encodings.LearnedTableEncoding` (plus the prefix rows), so a
  checkpoint's table can be resampled, analysed or trained with posenc;
* :func:`pos_embed_from_table` -- back to timm's layout;
* :func:`pos_embed_from_encoding` -- any posenc encoding evaluated on a patch grid
  in timm's layout (e.g. CAPE, LFF or 2D sinusoids in place of a learned table);
* :func:`replace_pos_embed` -- write that into a timm-like model's ``pos_embed``
  (returning the old one, to put back).

Resampling a table the way timm's ``resample_abs_pos_embed`` does by default
(bicubic, ``antialias=True``) is ``LearnedTableEncoding(..., interpolation="bicubic",
antialias=True)``.

timm itself is not a dependency; the layout above is timm's documented one (timm
1.0). timm could not be installed beside the CPU build of torch on the machine
that tests posenc (its torchvision dependency has no CPU build for torch 2.13
there), so these helpers are tested against that layout, not against timm.
"""

from __future__ import annotations

import torch
from torch import nn

from posenc._checks import check_choice, check_positive_int, check_tensor
from posenc.encodings.learnable import LearnedTableEncoding


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
    evaluated once (a fixed embedding; to train an encoding's own parameters, call this
    after each step or use posenc's :class:`~posenc.models.TinyViT`). Put the old values
    back with ``model.pos_embed.data.copy_(old)``.
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
