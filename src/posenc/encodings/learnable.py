"""Trainable position encodings: learned tables and learnable Fourier features.

* :class:`LearnedTableEncoding` (``"learned_table"``): one trainable vector per
  grid position (1D sequences, 2D patch grids), resampled to another length or
  grid by linear / bicubic interpolation (as ViT does when fine-tuning at a new
  resolution).
* :class:`LearnableFourierEncoding` (``"lff"``): learnable Fourier features with
  an MLP, Algorithm 1 of Li, Si, Li, Hsieh and Bengio, "Learnable Fourier Features
  for Multi-Dimensional Spatial Positional Encoding" (NeurIPS 2021).
* :class:`CoordinateMLPEncoding` (``"coord_mlp"``): the same grouped MLP on the raw
  coordinates (the "MLP" baseline of that paper).

**What gamma means.** The paper draws ``W_r ~ N(0, gamma^-2)``: *variance*
``1/gamma^2``, i.e. standard deviation ``1/gamma``. ``gamma`` is a length scale in
the units of the positions: at initialisation
``<F(x), F(y)> ~= 1/2 * exp(-|x - y|^2 / (2 gamma^2))`` (a Gaussian kernel of width
``gamma``). Some third-party code uses standard deviation ``1/gamma^2`` instead,
which for ``gamma = 10`` gives nearly constant features; we do not.
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from posenc._checks import (
    _compiling,
    check_last_dim,
    check_choice,
    check_divisible,
    check_even,
    check_finite,
    check_floating,
    check_positive_float,
    check_positive_int,
    check_tensor,
)
from posenc._resources import check_footprint
from posenc.encodings.base import Encoding, Footprint, check_numel, check_out_dim, compute_dtype, resolve_width
from posenc.encodings.registry import register_encoding

INTERPOLATIONS = ("none", "linear", "bicubic")


# --------------------------------------------------------------------------- tables
def resample_table(table: torch.Tensor, size: tuple[int, ...], mode: str, antialias: bool = False) -> torch.Tensor:
    """Resample a grid of vectors ``(*grid, D)`` to ``(*size, D)``.

    Interpolation runs in float32 (or float64 for float64 tables) with half-pixel
    centres (``align_corners=False``) and the result is cast back to the table's
    dtype; it is exactly ``F.interpolate(..., align_corners=False, antialias=antialias)``.
    ``mode`` is ``"linear"`` (linear in 1D, bilinear in 2D) or ``"bicubic"``.

    ``antialias=False`` (default): cubic convolution with ``a = -0.75`` (borders
    replicated), no low-pass filter when shrinking. ``antialias=True`` is what timm's
    ``resample_abs_pos_embed`` does by default: PyTorch then uses the ``a = -0.5``
    cubic (Keys / PIL) kernel and, when shrinking, widens it into a low-pass filter.
    The two differ by several percent when growing a table and by far more when
    shrinking one, so a table trained with one should be resampled with the same.

    Args:
        table: ``(L, D)`` or ``(H, W, D)``.
        size: the new grid, ``(L',)`` or ``(H', W')``.
        mode: ``"linear"`` or ``"bicubic"``.
        antialias: see above.
    """
    check_choice("mode", mode, ("linear", "bicubic"))
    grid = tuple(table.shape[:-1])
    if len(size) != len(grid):
        raise ValueError(f"size must have {len(grid)} entries for a {len(grid)}D table, got {size}")
    if tuple(size) == grid:
        return table
    cells = math.prod(float(s) for s in size)
    # the resampled grid in the compute dtype (and its permuted copy), then cast back
    check_footprint(cells * table.shape[-1] * (2 * max(table.element_size(), 4) + table.element_size()),
                    f"size={tuple(size)}", f"the resampled table of {table.shape[-1]} features")
    work = table.to(compute_dtype(table.dtype))
    if len(grid) == 1:
        img = work.T[None, :, None, :]  # (1, D, 1, L)
        new = (1, size[0])
    else:
        img = work.permute(2, 0, 1)[None]  # (1, D, H, W)
        new = tuple(size)
    mode2d = "bilinear" if mode == "linear" else "bicubic"
    out = F.interpolate(img, size=new, mode=mode2d, align_corners=False, antialias=bool(antialias))[0]  # (D, h, w)
    out = out[:, 0, :].T if len(grid) == 1 else out.permute(1, 2, 0)
    return out.to(table.dtype)


@register_encoding("learned_table")
class LearnedTableEncoding(Encoding):
    """A trainable vector per grid position (absolute learned position embedding).

    ``(..., in_dim) -> (..., num_features)`` where the positions are integer grid
    indices (integer tensors, or floats holding integers) in
    ``[0, grid_size[a])`` along each axis ``a``. :meth:`table` returns the whole
    table, resampled to another grid when ``interpolation`` is enabled.

    Args:
        in_dim: 1 (sequence table) or 2 (image/patch grid table).
        grid_size: table size: an int (1D) or ``(H, W)`` (2D; an int means square).
        num_features: vector width ``D``.
        interpolation: ``"none"`` (a larger grid is an error), ``"linear"`` or
            ``"bicubic"``: how :meth:`table` resamples to another grid.
        antialias: resample as timm's ``resample_abs_pos_embed`` does by default
            (see :func:`resample_table`); default False (plain cubic convolution).
        init_std: standard deviation of the truncated-normal initialisation.
        seed: seed of the initialisation (``reset_parameters`` redraws it).
        device, dtype: of the table.
    """

    positions_kind: ClassVar[str] = "index"

    def __init__(
        self,
        in_dim: int = 1,
        grid_size: int | tuple[int, ...] = 64,
        num_features: int = 128,
        interpolation: str = "none",
        init_std: float = 0.02,
        seed: int = 0,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        antialias: bool = False,
    ) -> None:
        grid = self._grid(in_dim, grid_size, num_features)
        super().__init__(in_dim, num_features)
        self.grid_size = grid
        self.num_features = num_features
        self.interpolation = check_choice("interpolation", interpolation, INTERPOLATIONS)
        if not isinstance(antialias, bool):
            raise TypeError(f"antialias must be a bool, got {type(antialias).__name__}")
        self.antialias = antialias
        self.init_std = check_positive_float("init_std", init_std)
        self.seed = check_positive_int("seed", seed, minimum=0)
        self.weight = nn.Parameter(torch.empty(*grid, num_features, device=device, dtype=dtype))
        self.reset_parameters()

    @staticmethod
    def _grid(in_dim: int, grid_size: int | tuple[int, ...], num_features: int) -> tuple[int, ...]:
        """The validated grid as a tuple (``in_dim`` and ``num_features`` checked first)."""
        check_positive_int("in_dim", in_dim)
        if in_dim not in (1, 2):
            raise ValueError(f"in_dim must be 1 or 2 for a learned table, got {in_dim}")
        check_out_dim(check_positive_int("num_features", num_features), "reduce num_features")
        if isinstance(grid_size, int) and not isinstance(grid_size, bool):
            grid_size = (grid_size,) * in_dim
        if not isinstance(grid_size, (tuple, list)):
            raise TypeError(f"grid_size must be an int or a tuple of ints, got {type(grid_size).__name__} ({grid_size!r})")
        grid = tuple(grid_size)
        if len(grid) != in_dim:
            raise ValueError(f"grid_size must have in_dim={in_dim} entries, got {grid_size!r}")
        for g in grid:
            check_positive_int("grid_size", g)
        check_numel("grid_size", math.prod(grid) * num_features, f"a table of {grid} x {num_features}")
        return grid

    @classmethod
    def _footprint(cls, arguments: dict) -> Footprint:
        grid = cls._grid(arguments["in_dim"], arguments["grid_size"], arguments["num_features"])
        return Footprint(arguments["num_features"], math.prod(grid) * arguments["num_features"], 0)

    def reset_parameters(self) -> None:
        """Truncated normal (at 2 std) with ``init_std``, drawn on the CPU with ``seed``."""
        if self.weight.is_meta:  # shapes only: nothing to draw
            return
        gen = torch.Generator().manual_seed(self.seed)
        draw = torch.empty(self.weight.shape, dtype=torch.float32)
        nn.init.trunc_normal_(draw, std=self.init_std, a=-2 * self.init_std, b=2 * self.init_std, generator=gen)
        with torch.no_grad():
            self.weight.copy_(draw.to(self.weight.dtype))

    def check_input(self, positions: torch.Tensor) -> None:
        check_tensor("positions", positions)
        if positions.dim() == 0 or positions.shape[-1] != self.in_dim:
            raise ValueError(f"positions must have shape (..., {self.in_dim}), got {tuple(positions.shape)}")
        if positions.dtype == torch.bool or positions.is_complex():
            raise TypeError(f"positions must hold integer grid indices, got dtype {positions.dtype}")
        check_finite("positions", positions)
        if positions.numel() == 0 or _compiling():  # the value checks run in eager mode only
            return
        if positions.is_floating_point() and not bool((positions == positions.round()).all()):
            raise ValueError("positions must hold integer grid indices for a learned table, got fractional values")
        flat = positions.reshape(-1, self.in_dim)
        lo, hi = flat.amin(0), flat.amax(0)
        for a, g in enumerate(self.grid_size):
            if lo[a] < 0 or hi[a] >= g:
                raise ValueError(
                    f"positions along axis {a} must lie in [0, {g - 1}] (grid_size={self.grid_size}), got values in "
                    f"[{lo[a].item():g}, {hi[a].item():g}]; use table(size) with interpolation to resample"
                )

    def encode(self, positions: torch.Tensor) -> torch.Tensor:
        idx = positions.long()
        if self.in_dim == 2:
            return self.weight[idx[..., 0], idx[..., 1]]
        return self.weight[idx[..., 0]]

    def table(self, size: int | tuple[int, ...] | None = None) -> torch.Tensor:
        """The table for a grid of ``size``, flattened row-major: ``(prod(size), D)``.

        ``size=None`` or the table's own grid returns the table itself. With
        ``interpolation="none"`` a smaller grid takes the leading rows/top-left
        block and a larger grid is an error; otherwise the table is resampled
        (:func:`resample_table`), so gradients flow into the stored table.
        """
        if size is None:
            size = self.grid_size
        if isinstance(size, int) and not isinstance(size, bool):
            size = (size,) * self.in_dim
        size = tuple(size)
        if len(size) != self.in_dim:
            raise ValueError(f"size must have in_dim={self.in_dim} entries, got {size!r}")
        for s in size:
            check_positive_int("size", s)
        if size == self.grid_size:
            out = self.weight
        elif self.interpolation == "none":
            if any(s > g for s, g in zip(size, self.grid_size)):
                raise ValueError(
                    f"size {size} exceeds the learned table's grid_size {self.grid_size} and interpolation='none'; "
                    "create the encoding with interpolation='linear' or 'bicubic' to resample"
                )
            out = self.weight[: size[0]] if self.in_dim == 1 else self.weight[: size[0], : size[1]]
        else:
            out = resample_table(self.weight, size, self.interpolation, self.antialias)
        return out.reshape(-1, self.num_features)

    def extra_repr(self) -> str:
        return (
            f"{super().extra_repr()}, grid_size={self.grid_size}, interpolation={self.interpolation!r}, "
            f"{'antialias=True, ' if self.antialias else ''}seed={self.seed}"
        )


# ------------------------------------------------------------------ grouped MLP
class _GroupedEncoding(Encoding):
    """Shared plumbing for encodings of grouped positions ``(..., G, M) -> (..., D)``."""

    positions_kind: ClassVar[str] = "continuous"

    def __init__(self, in_dim: int, num_features: int, num_groups: int) -> None:
        self._check_groups(in_dim, num_features, num_groups)
        super().__init__(in_dim, num_features)
        self.num_features = num_features
        self.num_groups = num_groups

    @staticmethod
    def _check_groups(in_dim: int, num_features: int, num_groups: int) -> int:
        """Validate the shared sizes; returns ``D / G``, the output width per group."""
        check_positive_int("in_dim", in_dim)
        check_out_dim(check_positive_int("num_features", num_features), "reduce num_features")
        check_positive_int("num_groups", num_groups)
        check_divisible("num_features", num_features, num_groups, f"D split evenly over num_groups={num_groups}")
        return num_features // num_groups

    @staticmethod
    def _check_mlp(n_in: int, hidden: int, n_out: int) -> None:
        check_positive_int("hidden_dim", hidden)
        check_numel("hidden_dim", hidden * max(n_in, n_out), "an MLP weight")

    @staticmethod
    def _mlp_numel(n_in: int, hidden: int, n_out: int) -> int:
        return n_in * hidden + hidden + hidden * n_out + n_out

    def check_input(self, positions: torch.Tensor) -> None:
        check_tensor("positions", positions)
        if self.num_groups == 1:  # the documented contract: (..., M) -> (..., D)
            check_last_dim("positions", positions, self.in_dim)
        else:
            want = (self.num_groups, self.in_dim)
            if positions.dim() < 2 or tuple(positions.shape[-2:]) != want:
                raise ValueError(
                    f"positions must have shape (..., G, M) = (..., {want[0]}, {want[1]}) "
                    f"(num_groups={want[0]}, in_dim={want[1]}), got {tuple(positions.shape)}"
                )
        check_floating("positions", positions)
        check_finite("positions", positions)

    def _grouped(self, positions: torch.Tensor) -> torch.Tensor:
        """``(..., G, M)`` view of the positions (a group axis of 1 added when ``G == 1``)."""
        return positions.unsqueeze(-2) if self.num_groups == 1 else positions

    @staticmethod
    def _make_mlp(n_in: int, hidden: int, n_out: int, device, dtype) -> nn.Sequential:
        return nn.Sequential(
            nn.Linear(n_in, hidden, device=device, dtype=dtype),
            nn.GELU(),
            nn.Linear(hidden, n_out, device=device, dtype=dtype),
        )

    def _reset_mlp(self, mlp: nn.Sequential, gen: torch.Generator) -> None:
        # PyTorch's default Linear init (U(-1/sqrt(fan_in), 1/sqrt(fan_in))), drawn from ``gen``.
        if mlp[0].weight.is_meta:  # shapes only: nothing to draw
            return
        with torch.no_grad():
            for layer in mlp:
                if isinstance(layer, nn.Linear):
                    bound = 1.0 / math.sqrt(layer.in_features)
                    for p in (layer.weight, layer.bias):
                        draw = torch.rand(p.shape, generator=gen, dtype=torch.float64) * 2 * bound - bound
                        p.copy_(draw.to(p.dtype))


def learnable_fourier_features(positions: torch.Tensor, w_r: torch.Tensor) -> torch.Tensor:
    """``F = (1/sqrt|F|) [cos(X W_r^T) ; sin(X W_r^T)]`` (Algorithm 1, line 2).

    Args:
        positions: ``X``, ``(..., M)``.
        w_r: ``(|F|/2, M)``.

    Returns:
        ``(..., |F|)``, cosines first; computed in at least float32.
    """
    dtype = compute_dtype(positions.dtype)
    x, w = positions.to(dtype), w_r.to(dtype)
    norm = math.sqrt(2 * w_r.shape[0])
    if _compiling():  # traced: the plain formula (the compiler fuses it)
        proj = x @ w.T
        return torch.cat((torch.cos(proj), torch.sin(proj)), dim=-1) / norm
    return _FourierFeatures.apply(x, w, norm)


class _FourierFeatures(torch.autograd.Function):
    """``[cos(x W^T), sin(x W^T)] / norm`` with one cosine and one sine per entry, forward and backward.

    Forward writes both halves into one buffer (no concatenation). Backward needs no
    trigonometry: with ``F = [c, s] / norm``, ``dF_c/dp = -F_s`` and ``dF_s/dp = F_c``, so
    the gradient of the phases ``p = x W^T`` is ``F_c * g_s - F_s * g_c``, read from the
    saved output (the tensor the MLP's first layer keeps anyway). Twice differentiable:
    the backward is made of differentiable operations.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, w: torch.Tensor, norm: float) -> torch.Tensor:
        half = w.shape[0]
        proj = x @ w.T
        out = proj.new_empty((*proj.shape[:-1], 2 * half))
        torch.cos(proj, out=out[..., :half])
        torch.sin(proj, out=out[..., half:])
        out.div_(norm)
        ctx.save_for_backward(x, w, out)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, w, out = ctx.saved_tensors
        half = w.shape[0]
        grad_p = torch.addcmul(out[..., :half] * grad[..., half:], out[..., half:], grad[..., :half], value=-1.0)
        grad_x = grad_p @ w if ctx.needs_input_grad[0] else None
        grad_w = None
        if ctx.needs_input_grad[1]:
            grad_w = grad_p.reshape(-1, half).T @ x.reshape(-1, x.shape[-1])
        return grad_x, grad_w, None


@register_encoding("lff")
class LearnableFourierEncoding(_GroupedEncoding):
    """Learnable Fourier features + MLP (Li et al., NeurIPS 2021, Algorithm 1).

    ``(..., G, M) -> (..., D)``: each of the G positional groups of M coordinates
    goes through ``F = (1/sqrt|F|)[cos(X W_r^T); sin(X W_r^T)]`` and a
    one-hidden-layer GeLU MLP to ``D/G`` features (``W_r`` and the MLP are shared
    by the groups); the G outputs are concatenated to D.

    Args:
        in_dim: ``M``, coordinates per group (2 for pixels, 4 for boxes).
        num_features: ``D``, the output width (divisible by ``num_groups``).
        num_groups: ``G``.
        fourier_dim: ``|F|`` (even). Default: ``D/G`` (required to be ``D/G`` when
            ``use_mlp=False``, since the features are then the output).
        hidden_dim: width of the MLP's hidden layer (default 32).
        gamma: ``W_r ~ N(0, gamma^-2)``, i.e. std ``1/gamma``; a length scale in
            position units (the init kernel is ``exp(-|dx|^2 / (2 gamma^2)) / 2``; default 1).
        learnable_freqs: train ``W_r`` (``False``: fixed random Fourier features + MLP).
        use_mlp: apply the MLP (``False``: the paper's "LFF without MLP" ablation).
        seed: seed of all initial draws (``reset_parameters`` redraws them).
        device, dtype: of the parameters.
        kernel_width: the kernel width ``w`` shared by the encodings (a Gaussian basis of width
            ``w`` has the same initial kernel): ``gamma = sqrt(2) w``; pass this or ``gamma``.
    """

    def __init__(
        self,
        in_dim: int = 2,
        num_features: int = 128,
        num_groups: int = 1,
        fourier_dim: int | None = None,
        hidden_dim: int = 32,
        gamma: float | None = None,
        learnable_freqs: bool = True,
        use_mlp: bool = True,
        seed: int = 0,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        kernel_width: float | None = None,
    ) -> None:
        super().__init__(in_dim, num_features, num_groups)
        fourier_dim, per_group = self._sizes(in_dim, num_features, num_groups, fourier_dim, hidden_dim, use_mlp)
        self.fourier_dim = fourier_dim
        self.hidden_dim = hidden_dim
        self.gamma = resolve_width("gamma", gamma, kernel_width, lambda w: math.sqrt(2.0) * w, 1.0)
        self.learnable_freqs = bool(learnable_freqs)
        self.use_mlp = bool(use_mlp)
        self.seed = check_positive_int("seed", seed, minimum=0)
        w_r = torch.empty(fourier_dim // 2, in_dim, device=device, dtype=dtype)
        if self.learnable_freqs:
            self.w_r = nn.Parameter(w_r)
        else:
            self.register_buffer("w_r", w_r, persistent=False)  # fixed: recomputed from the seed
        self.mlp = self._make_mlp(fourier_dim, hidden_dim, per_group, device, dtype) if use_mlp else None
        self.reset_parameters()

    @classmethod
    def _sizes(cls, in_dim: int, num_features: int, num_groups: int, fourier_dim: int | None, hidden_dim: int,
               use_mlp: bool) -> tuple[int, int]:
        """Validated ``(fourier_dim, per-group output width)``."""
        per_group = cls._check_groups(in_dim, num_features, num_groups)
        if fourier_dim is None:
            fourier_dim = per_group
        check_positive_int("fourier_dim", fourier_dim, minimum=2)
        check_even("fourier_dim", fourier_dim)
        if not use_mlp and fourier_dim != per_group:
            raise ValueError(
                f"fourier_dim must equal num_features / num_groups = {per_group} when use_mlp=False "
                f"(the Fourier features are the output), got {fourier_dim}"
            )
        check_positive_int("hidden_dim", hidden_dim)
        check_numel("hidden_dim", hidden_dim * max(fourier_dim, per_group), "an MLP weight")
        check_numel("fourier_dim", (fourier_dim // 2) * in_dim, "W_r")
        return fourier_dim, per_group

    @classmethod
    def _footprint(cls, arguments: dict) -> Footprint:
        a = arguments
        fourier_dim, per_group = cls._sizes(a["in_dim"], a["num_features"], a["num_groups"], a["fourier_dim"],
                                            a["hidden_dim"], bool(a["use_mlp"]))
        w_r = (fourier_dim // 2) * a["in_dim"]
        mlp = cls._mlp_numel(fourier_dim, a["hidden_dim"], per_group) if a["use_mlp"] else 0
        learnable = bool(a["learnable_freqs"])
        return Footprint(a["num_features"], mlp + (w_r if learnable else 0), 0 if learnable else w_r)

    def reset_parameters(self) -> None:
        """``W_r ~ N(0, 1/gamma^2)`` (std ``1/gamma``), then the MLP; all drawn from ``seed``."""
        if self.w_r.is_meta:  # shapes only: nothing to draw
            return
        gen = torch.Generator().manual_seed(self.seed)
        draw = torch.randn(self.w_r.shape, generator=gen, dtype=torch.float64) / self.gamma
        with torch.no_grad():
            self.w_r.copy_(draw.to(self.w_r.dtype))
        if self.mlp is not None:
            self._reset_mlp(self.mlp, gen)

    def fourier_features(self, positions: torch.Tensor) -> torch.Tensor:
        """The features ``F`` before the MLP: ``(..., G, M) -> (..., G, |F|)`` (no input checks)."""
        return learnable_fourier_features(positions, self.w_r)

    def encode(self, positions: torch.Tensor) -> torch.Tensor:
        feats = self.fourier_features(self._grouped(positions))
        if self.mlp is not None:
            feats = self.mlp(feats.to(self.mlp[0].weight.dtype))
        return feats.flatten(-2).to(positions.dtype)

    def extra_repr(self) -> str:
        return (
            f"in_dim={self.in_dim}, out_dim={self.out_dim}, num_groups={self.num_groups}, "
            f"fourier_dim={self.fourier_dim}, hidden_dim={self.hidden_dim}, gamma={self.gamma:g}, "
            f"learnable_freqs={self.learnable_freqs}, use_mlp={self.use_mlp}, seed={self.seed}"
        )


@register_encoding("coord_mlp")
class CoordinateMLPEncoding(_GroupedEncoding):
    """A one-hidden-layer GeLU MLP on the raw coordinates, per group (baseline).

    ``(..., G, M) -> (..., D)``: the LFF pipeline with the Fourier map replaced
    by the identity, as the "MLP" positional-encoding baseline of Li et al. (2021).

    Args:
        in_dim: ``M``, coordinates per group.
        num_features: ``D`` (divisible by ``num_groups``).
        num_groups: ``G``.
        hidden_dim: width of the hidden layer.
        seed: seed of the initial draws.
        device, dtype: of the parameters.
    """

    def __init__(
        self,
        in_dim: int = 2,
        num_features: int = 128,
        num_groups: int = 1,
        hidden_dim: int = 32,
        seed: int = 0,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(in_dim, num_features, num_groups)
        self._check_mlp(in_dim, hidden_dim, num_features // num_groups)
        self.hidden_dim = hidden_dim
        self.seed = check_positive_int("seed", seed, minimum=0)
        self.mlp = self._make_mlp(in_dim, hidden_dim, num_features // num_groups, device, dtype)
        self.reset_parameters()

    @classmethod
    def _footprint(cls, arguments: dict) -> Footprint:
        a = arguments
        per_group = cls._check_groups(a["in_dim"], a["num_features"], a["num_groups"])
        cls._check_mlp(a["in_dim"], a["hidden_dim"], per_group)
        return Footprint(a["num_features"], cls._mlp_numel(a["in_dim"], a["hidden_dim"], per_group), 0)

    def reset_parameters(self) -> None:
        self._reset_mlp(self.mlp, torch.Generator().manual_seed(self.seed))

    def encode(self, positions: torch.Tensor) -> torch.Tensor:
        out = self.mlp(self._grouped(positions).to(self.mlp[0].weight.dtype))
        return out.flatten(-2).to(positions.dtype)

    def extra_repr(self) -> str:
        return (
            f"in_dim={self.in_dim}, out_dim={self.out_dim}, num_groups={self.num_groups}, "
            f"hidden_dim={self.hidden_dim}, seed={self.seed}"
        )
