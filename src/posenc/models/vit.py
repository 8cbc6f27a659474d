"""A tiny Vision Transformer over images of any size (Dosovitskiy et al., ICLR 2021).

Images are cut into non-overlapping ``patch_size`` patches (a strided
convolution), each patch gets the positional encoding of its grid position,
an optional learned CLS token (no positional encoding) is prepended, and the
pre-LN encoder of :mod:`posenc.models.transformer` follows. The class logits
come from the CLS token, or from the mean of the patch tokens without one.

Patch positions are given to the encoding as one of:

* ``"index"``: integer ``(row, col)`` grid indices (learned tables, sinusoidal);
* ``"continuous"``: patch centres mapped to ``[-1, 1]`` per axis at every
  resolution (LFF, coordinate MLPs), ``linspace(-1, 1, n)`` per axis for an
  encoding that asks for it (``grid_endpoint``: CAPE 2D, as its authors' code), or to the
  encoding's own ``domain`` when it has one (the coordinate encodings of
  :mod:`posenc.encodings.basis` / ``fourier``, ``[0, 1)`` by default), so any
  posenc encoding works in a ViT without an argument.

A :class:`~posenc.encodings.LearnedTableEncoding` is used through its
``table(grid)`` method, so a resolution change resamples the table (if the
table allows it) instead of indexing out of range. An encoding that augments
positions per sample (``per_sample_positions``, e.g. CAPE) gets the patch grid
expanded to one copy per image in training mode, so every image draws its own
shift and scale; in evaluation mode the grid is shared.
"""

from __future__ import annotations

import contextlib

import torch
from torch import nn

from posenc._checks import check_choice, check_domain, check_positive_int, check_tensor
from posenc._resources import check_footprint
from posenc.models.seeding import seeded_reset_parameters
from posenc.models.transformer import AttentionFactory, TransformerEncoder


def patch_positions(rows: int, cols: int, kind: str = "index", *, domain: tuple[float, float] = (-1.0, 1.0),
                    endpoint: bool = False, device=None, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Positions of a ``rows x cols`` patch grid, row-major: ``(rows * cols, 2)``.

    Args:
        rows, cols: grid size.
        kind: ``"index"`` (integer ``(r, c)`` as ``int64``) or ``"continuous"``
            (patch centres, ``low + (high - low) (i + 1/2) / n`` per axis, in ``dtype``).
        domain: ``(low, high)`` of the continuous positions: ``[-1, 1]`` by default (the
            convention of CAPE and LFF); :class:`TinyViT` passes a coordinate encoding's own
            ``domain`` (``[0, 1)`` by default, Zheng et al.'s convention) so the two fit together.
        endpoint: continuous positions as ``linspace(low, high, n)`` per axis, endpoints
            included (CAPE's 2D grid in its authors' code; a single patch sits at the
            centre) instead of patch centres.
    """
    check_positive_int("rows", rows)
    check_positive_int("cols", cols)
    check_choice("kind", kind, ("index", "continuous"))
    check_footprint(4 * 2 * 8.0 * rows * cols, f"rows={rows}, cols={cols}", "the patch positions")
    r = torch.arange(rows, device=device)
    c = torch.arange(cols, device=device)
    grid = torch.stack(torch.meshgrid(r, c, indexing="ij"), dim=-1).reshape(-1, 2)
    if kind == "index":
        return grid
    low, high = check_domain("domain", domain)
    if not isinstance(endpoint, bool):
        raise TypeError(f"endpoint must be a bool, got {type(endpoint).__name__}")
    sizes = torch.tensor([rows, cols], device=device, dtype=torch.float64)
    if endpoint:  # linspace(low, high, n); n = 1 -> the centre
        frac = torch.where(sizes > 1, grid.double() / (sizes - 1).clamp_min(1), torch.full_like(sizes, 0.5))
        return (low + (high - low) * frac).to(dtype)
    return (low + (high - low) * (grid.double() + 0.5) / sizes).to(dtype)


class TinyViT(nn.Module):
    """Patch embedding + positional encoding + pre-LN encoder + class head.

    ``images (B, C, H, W) -> logits (B, num_classes)``; ``H`` and ``W`` must be
    multiples of ``patch_size`` but may change between calls.

    Args:
        in_channels: image channels.
        num_classes: output classes.
        patch_size: side of the square patches.
        dim, depth, num_heads, mlp_ratio, attention, dropout: see
            :class:`~posenc.models.transformer.TransformerEncoder`.
        encoding: positional encoding of the patch grid (``out_dim == dim``) or ``None``.
        positions: ``"index"`` or ``"continuous"`` (see :func:`patch_positions`).
        cls_token: prepend a learned CLS token and classify from it.
        seed: seed of the CLS token draw.
        init_seed: seed of the patch embedding and the encoder's trunk (every parameter but
            the encoding's and the CLS token; see
            :func:`~posenc.models.seeding.seeded_reset_parameters`): the same ``init_seed``
            gives the same transformer whatever the encoding (paired comparisons). ``None``:
            they draw from torch's global RNG in construction order (PyTorch's default).
        device, dtype: of the parameters created here.
    """

    def __init__(
        self,
        in_channels: int = 1,
        num_classes: int = 10,
        patch_size: int = 4,
        dim: int = 64,
        depth: int = 2,
        num_heads: int = 4,
        encoding: nn.Module | None = None,
        positions: str = "index",
        cls_token: bool = True,
        mlp_ratio: float = 2.0,
        attention: AttentionFactory | None = None,
        dropout: float = 0.0,
        seed: int = 0,
        init_seed: int | None = None,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        if init_seed is not None:
            check_positive_int("init_seed", init_seed, minimum=0)
        check_positive_int("in_channels", in_channels)
        check_positive_int("num_classes", num_classes)
        self.patch_size = check_positive_int("patch_size", patch_size)
        self.positions_kind = check_choice("positions", positions, ("index", "continuous"))
        check_positive_int("dim", dim)
        item = getattr(dtype or torch.get_default_dtype(), "itemsize", 4)
        check_footprint(2.0 * item * in_channels * dim * patch_size**2, f"patch_size={patch_size}, dim={dim}",
                        "the patch embedding")
        # with init_seed every parameter is redrawn from it below: the default draws of the layers'
        # constructors must not consume the caller's RNG (paired runs leave the global RNG alone)
        with contextlib.nullcontext() if init_seed is None else torch.random.fork_rng(devices=[]):
            self.patch_embed = nn.Conv2d(in_channels, dim, patch_size, stride=patch_size, device=device, dtype=dtype)
            self.encoder = TransformerEncoder(
                dim, num_classes, dim=dim, depth=depth, num_heads=num_heads, encoding=encoding,
                mlp_ratio=mlp_ratio, attention=attention, dropout=dropout, device=device, dtype=dtype,
            )
        # The patch embedding already projects to dim; the encoder's input Linear stays
        # (a learned mixing of the patch features), which keeps the encoder reusable.
        self.cls = nn.Parameter(torch.empty(1, 1, dim, device=device, dtype=dtype)) if cls_token else None
        self.seed = seed
        self.init_seed = init_seed
        if init_seed is not None:
            seeded_reset_parameters(self, init_seed, skip=[encoding])
        self._reset_cls()

    def reset_parameters(self) -> None:
        """Redraw the patch embedding and the encoder's trunk (from ``init_seed`` if set, else
        the global RNG) and the CLS token (from ``seed``); the encoding is left alone."""
        seeded_reset_parameters(self, self.init_seed, skip=[self.encoder.encoding])
        self._reset_cls()

    def _reset_cls(self) -> None:
        if self.cls is not None:
            gen = torch.Generator().manual_seed(self.seed)
            with torch.no_grad():
                self.cls.copy_((0.02 * torch.randn(self.cls.shape, generator=gen)).to(self.cls.dtype))

    def extra_repr(self) -> str:
        seed = "" if self.init_seed is None else f", init_seed={self.init_seed}"
        return f"patch_size={self.patch_size}, positions={self.positions_kind!r}, seed={self.seed}{seed}"

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        check_tensor("images", images)
        if images.dim() != 4:
            raise ValueError(f"images must have shape (B, C, H, W), got {tuple(images.shape)}")
        h, w = images.shape[-2:]
        p = self.patch_size
        if h % p or w % p:
            raise ValueError(f"images height and width must be multiples of patch_size={p}, got {h}x{w}")
        x = self.patch_embed(images).flatten(2).transpose(1, 2)  # (B, N, dim)
        rows, cols = h // p, w // p
        enc = self.encoder.encoding
        pos_feats = None
        # patch positions always reach the attention (relative encodings such as 2D RoPE read them)
        pos = patch_positions(rows, cols, self.positions_kind, domain=getattr(enc, "domain", (-1.0, 1.0)),
                              endpoint=bool(getattr(enc, "grid_endpoint", False)), device=x.device, dtype=x.dtype)
        if enc is not None:
            if hasattr(enc, "table"):
                pos_feats = enc.table((rows, cols))
            else:
                enc_pos = pos
                if getattr(enc, "per_sample_positions", False) and enc.training:  # CAPE: one draw per image
                    enc_pos = pos.expand(x.shape[0], *pos.shape)
                pos_feats = self.encoder.position_features(enc_pos)
        x = self.encoder.embed(x)
        if pos_feats is not None:
            x = x + pos_feats.to(x.dtype)
        if self.cls is not None:
            x = torch.cat((self.cls.expand(x.shape[0], -1, -1).to(x.dtype), x), dim=1)
            # the CLS token sits at no position; attentions that use positions get a zero one
            pos = torch.cat((pos.new_zeros(1, pos.shape[-1]), pos), dim=0)
        for block in self.encoder.blocks:
            x = block(x, pos)
        x = self.encoder.norm(x)
        pooled = x[:, 0] if self.cls is not None else x.mean(dim=1)
        return self.encoder.head(pooled)
