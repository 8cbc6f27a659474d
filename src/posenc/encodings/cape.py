"""CAPE: continuous augmented positional embeddings, 1D and 2D.

Likhomanenko, Xu, Synnaeve, Collobert and Rogozhnikov, "CAPE: Encoding Relative
Positions with Continuous Augmented Positional Embeddings" (NeurIPS 2021,
arXiv 2106.03143). During training the positions are augmented
(:func:`posenc.positions.cape_augment`: optional mean-centring, a global shift
per sample, a local shift per token, a global scale per sample) and then embedded
with fixed sinusoids, so the model cannot rely on absolute positions and learns
relative ones. In evaluation mode nothing is drawn: the embedding of the
(optionally mean-centred) positions is returned, the same on every call.

* **1D** (``in_dim=1``): positions in tokens (or frames), multiplied by ``step``
  to give the unit of the limits (e.g. ``step=1/30`` for speech frames in
  seconds); the local shift is in units of one step. The embedding is the
  transformer sinusoid ``[sin(w_k x), cos(w_k x)]``,
  ``w_k = freq_scale * base^(-2k/D)``, ``k = 0..D/2-1``, with
  ``freq_scale = 1/step`` by default, so one token is one radian at ``k = 0``
  whatever the step. Without augmentation and centring this equals
  :class:`~posenc.encodings.SinusoidalEncoding` exactly.
* **2D** (``in_dim=2``): patch centres mapped to ``[-1, 1]`` per axis at every
  resolution (:func:`posenc.models.patch_positions` with ``kind="continuous"``),
  given as ``(row, col) = (y, x)``. The embedding uses the paper's isotropic
  frequency directions: ``w_{k,x} = rho_k cos k``, ``w_{k,y} = rho_k sin k``,
  ``rho_k = base^(2k/D)`` (``base = 10``), features
  ``[sin(pi (w_{k,x} x + w_{k,y} y)), cos(...)]`` (``freq_scale = pi``). Every
  channel mixes both axes along its own direction, unlike the per-axis split of
  :class:`~posenc.encodings.SinusoidalEncoding`. The local shift is in units of the
  patch spacing, measured per sample and axis from the positions
  (:func:`posenc.positions.grid_spacing`) unless ``spacing`` is given.

Presets (:data:`PRESETS`) hold the paper's settings for text, speech and vision.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

import torch

from posenc._checks import (
    check_choice,
    check_finite,
    check_last_dim,
    check_positive_float,
    check_positive_int,
    check_tensor,
    check_width,
)
from posenc.encodings.base import Encoding, Footprint, check_out_dim
from posenc.encodings.registry import register_encoding
from posenc.positions import (
    _check_limit,
    cape_augment_work,
    check_generator,
    check_key_padding_mask,
    grid_spacing,
)

#: The paper's settings per domain (see ``docs/cape.md`` for the sources).
#: Limits: ``max_global_shift`` in the unit of ``step`` (1D) or of the ``[-1, 1]``
#: patch coordinates (2D); ``max_local_shift`` in token / patch spacings.
PRESETS: dict[str, dict[str, Any]] = {
    # machine translation: shifts in tokens, a 3% scale, no centring
    "text": {"in_dim": 1, "max_global_shift": 5.0, "max_local_shift": 0.5, "max_global_scaling": 1.03,
             "mean_center": False, "step": 1.0},
    # ASR: frames of 1/30 s, shifts up to 30 s, half a frame of local shift, no scaling, centred
    "speech": {"in_dim": 1, "max_global_shift": 30.0, "max_local_shift": 0.5, "max_global_scaling": 1.0,
               "mean_center": True, "step": 1.0 / 30.0},
    # ViT: patch centres in [-1, 1]; shift of half the image, +-1/N local, scale in [1/1.4, 1.4]
    "vision": {"in_dim": 2, "max_global_shift": 0.5, "max_local_shift": 0.5, "max_global_scaling": 1.4,
               "mean_center": False},
}
DEFAULT_PRESET = {1: "text", 2: "vision"}


def cape_frequencies(in_dim: int, num_features: int, base: float, freq_scale: float, *,
                     device=None, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """CAPE's angular frequencies: ``(K,)`` in 1D, ``(2, K)`` rows ``(w_y, w_x)`` in 2D (``K = D/2``).

    1D: ``freq_scale * base^(-2k/D)``. 2D: ``freq_scale * rho_k * (sin k, cos k)``,
    ``rho_k = base^(2k/D)`` (the paper's ``w_{k,y}``, ``w_{k,x}``, ``pi`` folded in).
    """
    half = num_features // 2
    k = torch.arange(half, device=device, dtype=torch.float64)
    if in_dim == 1:
        return (freq_scale * base ** (-k / half)).to(dtype)
    rho = base ** (k / half)
    return (freq_scale * torch.stack((rho * torch.sin(k), rho * torch.cos(k)))).to(dtype)


def cape_features(positions: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """Sinusoids of (augmented) positions: ``(..., D) -> (..., 2K)``, ``[sin(phase), cos(phase)]``.

    ``freqs`` is ``(K,)`` for ``D = 1`` (``phase = x w``) or ``(2, K)`` for ``D = 2``
    (``phase = y w_y + x w_x``). Computed in the positions' dtype (pass at least float32).
    """
    f = freqs.to(device=positions.device, dtype=positions.dtype)
    if f.dim() == 1:
        phase = positions[..., :1] * f
    else:
        # (..., 2) @ (2, K): one pass over the output instead of two products and a sum
        phase = positions[..., :2] @ f
    return torch.cat((torch.sin(phase), torch.cos(phase)), dim=-1)


@register_encoding("cape")
class CAPEEncoding(Encoding):
    """CAPE: sinusoidal embedding of positions augmented during training.

    ``(..., in_dim) -> (..., num_features)``. In training mode the positions must
    have a token axis, ``(..., N, in_dim)``: every leading index is one sample with
    its own global shift and scale (models that share ``(N, in_dim)`` positions
    across a batch expand them first; :class:`~posenc.models.TransformerEncoder`
    and :class:`~posenc.models.TinyViT` do, see :attr:`per_sample_positions`).

    Args:
        in_dim: 1 (sequences) or 2 (image patches as ``(row, col)`` in ``[-1, 1]``).
        num_features: output width ``D`` (even).
        preset: ``"text"``, ``"speech"`` or ``"vision"`` (:data:`PRESETS`); the
            limits, centring and step not given explicitly come from it. Default:
            ``"text"`` in 1D, ``"vision"`` in 2D.
        max_global_shift: ``>= 0``; in the unit of ``step`` (1D) or of the ``[-1, 1]``
            coordinates (2D).
        max_local_shift: ``>= 0``; in token spacings (1D: ``step``; 2D: the patch spacing).
        max_global_scaling: ``>= 1``; ``log lambda ~ U[-log max, log max]``.
        mean_center: subtract each sample's mean position (also in evaluation).
        step: 1D only: the length of one position unit (token, frame) in the unit of
            ``max_global_shift`` (``1/30`` for speech frames in seconds).
        freq_scale: multiplies every frequency. Default ``1/step`` (1D), ``pi`` (2D).
        base: 1D: wavelength base (10000); 2D: ``rho_k = base^(2k/D)`` (10).
        spacing: 2D only: the patch spacing (a number or ``(row, col)`` pair) used as
            the unit of the local shift; ``None`` measures it from the positions.
        seed: seed of the module's own generator (one per device, created on first
            use); ``None`` draws from torch's default generator. A ``generator``
            passed to :meth:`forward` takes precedence.
        device: accepted for uniformity; CAPE has no parameters or buffers
            (frequencies are built on the positions' device).
        dtype: output dtype for integer 1D positions (default: the default dtype).

    Example:
        >>> enc = CAPEEncoding(in_dim=1, num_features=16, preset="text")
        >>> enc(torch.arange(10.0).reshape(2, 5, 1)).shape
        torch.Size([2, 5, 16])
    """

    positions_kind: ClassVar[str] = "any"
    #: Models expand positions shared by a batch to one row per sample before
    #: calling the encoding in training mode (one global shift/scale per sample).
    per_sample_positions: ClassVar[bool] = True

    def __init__(
        self,
        in_dim: int = 1,
        num_features: int = 128,
        preset: str | None = None,
        max_global_shift: float | None = None,
        max_local_shift: float | None = None,
        max_global_scaling: float | None = None,
        mean_center: bool | None = None,
        step: float | None = None,
        freq_scale: float | None = None,
        base: float | None = None,
        spacing: float | Sequence[float] | None = None,
        seed: int | None = 0,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        check_positive_int("in_dim", in_dim)
        if in_dim not in (1, 2):
            raise ValueError(f"in_dim must be 1 or 2 for CAPE, got {in_dim}")
        check_positive_int("num_features", num_features)
        if num_features % 2:
            raise ValueError(f"num_features must be even (sine/cosine pairs), got {num_features}")
        super().__init__(in_dim, num_features)
        self.num_features = num_features
        preset = DEFAULT_PRESET[in_dim] if preset is None else check_choice("preset", preset, tuple(PRESETS))
        cfg = PRESETS[preset]
        if cfg["in_dim"] != in_dim:
            raise ValueError(f"preset {preset!r} is for in_dim={cfg['in_dim']}, got in_dim={in_dim}")
        self.preset = preset

        def pick(name: str, value: Any) -> Any:
            return cfg[name] if value is None else value

        self.max_global_shift = _check_limit("max_global_shift", pick("max_global_shift", max_global_shift))
        self.max_local_shift = _check_limit("max_local_shift", pick("max_local_shift", max_local_shift))
        self.max_global_scaling = _check_limit(
            "max_global_scaling", pick("max_global_scaling", max_global_scaling), minimum=1.0)
        mc = pick("mean_center", mean_center)
        if not isinstance(mc, bool):
            raise TypeError(f"mean_center must be a bool, got {type(mc).__name__}")
        self.mean_center = mc
        if in_dim == 2:
            if step is not None:
                raise ValueError("step applies to 1D positions only; 2D positions are patch centres in [-1, 1]")
            self.step = 1.0
            self.spacing = None if spacing is None else self._check_spacing(spacing)
        else:
            if spacing is not None:
                raise ValueError("spacing applies to 2D positions only; in 1D the local shift is in units of step")
            self.step = check_width("step", pick("step", step))
            self.spacing = None
        default_scale = 1.0 / self.step if in_dim == 1 else math.pi
        self.freq_scale = check_width("freq_scale", default_scale if freq_scale is None else freq_scale)
        self.base = check_positive_float("base", (10000.0 if in_dim == 1 else 10.0) if base is None else base)
        if self.base <= 1.0:
            raise ValueError(f"base must be > 1, got {self.base}")
        if seed is not None:
            check_positive_int("seed", seed, minimum=0)
        self.seed = seed
        self.out_dtype = dtype or torch.get_default_dtype()
        self._generators: dict[str, torch.Generator] = {}

    @classmethod
    def _footprint(cls, arguments: dict) -> Footprint:
        # no parameters or buffers: the frequencies are built on the positions' device
        in_dim, num_features = arguments["in_dim"], arguments["num_features"]
        check_positive_int("in_dim", in_dim)
        if in_dim not in (1, 2):
            raise ValueError(f"in_dim must be 1 or 2 for CAPE, got {in_dim}")
        check_positive_int("num_features", num_features)
        if num_features % 2:
            raise ValueError(f"num_features must be even (sine/cosine pairs), got {num_features}")
        return Footprint(check_out_dim(num_features, "reduce num_features"), 0, 0)

    @staticmethod
    def _check_spacing(spacing: Any) -> tuple[float, ...]:
        vals = [spacing] if isinstance(spacing, (int, float)) and not isinstance(spacing, bool) else spacing
        try:
            vals = tuple(check_positive_float("spacing", v) for v in vals)
        except TypeError:
            raise TypeError(f"spacing must be a number or a (row, col) pair of numbers, got {spacing!r}") from None
        if len(vals) not in (1, 2):
            raise ValueError(f"spacing must be a number or a (row, col) pair, got {spacing!r}")
        return vals

    # ------------------------------------------------------------------ state
    @property
    def augments(self) -> bool:
        """Whether training mode draws anything (some limit is not trivial)."""
        return self.max_global_shift > 0 or self.max_local_shift > 0 or self.max_global_scaling > 1

    def frequencies(self, device=None, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        """``(K,)`` (1D) or ``(2, K)`` rows ``(w_y, w_x)`` (2D) angular frequencies."""
        return cape_frequencies(self.in_dim, self.num_features, self.base, self.freq_scale, device=device, dtype=dtype)

    def reset_generator(self, seed: int | None = None) -> None:
        """Forget the per-device generators; reseed with ``seed`` (default: the constructor's)."""
        if seed is not None:
            self.seed = check_positive_int("seed", seed, minimum=0)
        self._generators = {}

    def _generator(self, device: torch.device) -> torch.Generator | None:
        if self.seed is None:
            return None
        key = str(device)
        gen = self._generators.get(key)
        if gen is None:
            gen = torch.Generator(device=device).manual_seed(self.seed)
            self._generators[key] = gen
        return gen

    # ------------------------------------------------------------------ forward
    def check_input(self, positions: torch.Tensor) -> None:
        check_tensor("positions", positions)
        check_last_dim("positions", positions, self.in_dim)
        if positions.dtype == torch.bool or positions.is_complex():
            raise TypeError(f"positions must be a real integer or floating tensor, got dtype {positions.dtype}")
        if self.in_dim == 2 and not positions.is_floating_point():
            raise TypeError(
                f"2D CAPE positions must be floating patch centres in [-1, 1] (patch_positions(kind='continuous'), "
                f"TinyViT(positions='continuous')), got dtype {positions.dtype}"
            )
        check_finite("positions", positions)

    def forward(
        self,
        positions: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
        *,
        generator: torch.Generator | None = None,
        spacing: float | Sequence[float] | torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Embed ``positions`` ``(..., [N,] in_dim) -> (..., [N,] num_features)``.

        Args:
            positions: token positions (1D: any real values, integers allowed) or
                patch centres (2D). ``(..., N, in_dim)`` in training mode.
            key_padding_mask: ``(..., N)`` bool, ``True`` at padding: padded positions
                are neither centred nor augmented and never move the mean. Positions
                ``(N, in_dim)`` shared by a batch are expanded to the mask's batch.
            generator: overrides the module's generator for this call (training only).
            spacing: 2D only: overrides the patch spacing for this call (a number,
                a ``(row, col)`` pair, or a tensor broadcastable to ``(..., 1, 2)``).
        """
        self.check_input(positions)
        return self.encode(positions, key_padding_mask, generator=generator, spacing=spacing)

    def encode(
        self,
        positions: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
        *,
        generator: torch.Generator | None = None,
        spacing: float | Sequence[float] | torch.Tensor | None = None,
    ) -> torch.Tensor:
        x = positions if positions.is_floating_point() else positions.to(self.out_dtype)
        out_dtype = x.dtype
        if spacing is not None and self.in_dim == 1:
            raise ValueError("spacing applies to 2D positions only; in 1D the local shift is in units of step")
        augment = self.training and self.augments
        mask = key_padding_mask
        if mask is not None:
            check_tensor("key_padding_mask", mask)
            if x.dim() == 2 and mask.dim() == 2:  # positions shared by the batch
                x = x.expand(mask.shape[0], *x.shape)
            check_key_padding_mask(mask, tuple(x.shape[:-1]))
        if augment or self.mean_center:
            if x.dim() < 2:
                raise ValueError(
                    f"positions must have shape (..., N, {self.in_dim}) (a token axis) when CAPE augments or "
                    f"mean-centres, got {tuple(positions.shape)}"
                )
        if self.step != 1.0:
            x = x.to(torch.promote_types(x.dtype, torch.float32)) * self.step
        if augment:
            gen = check_generator(generator, x.device) if generator is not None else self._generator(x.device)
            if self.in_dim == 1:
                unit: Any = self.step
            elif spacing is not None:
                unit = spacing
            elif self.spacing is not None:
                unit = self.spacing
            else:
                unit = grid_spacing(x, mask)
            work = cape_augment_work(
                x, max_global_shift=self.max_global_shift, max_local_shift=self.max_local_shift,
                max_global_scaling=self.max_global_scaling, mean_center=self.mean_center, spacing=unit,
                key_padding_mask=mask, generator=gen,
            )
        elif self.mean_center:
            work = cape_augment_work(x, mean_center=True, key_padding_mask=mask, augment=False)
        else:
            work = x.to(torch.promote_types(x.dtype, torch.float32))
        return cape_features(work, self.frequencies(device=work.device)).to(out_dtype)

    def extra_repr(self) -> str:
        parts = [
            super().extra_repr(), f"preset={self.preset!r}", f"max_global_shift={self.max_global_shift:g}",
            f"max_local_shift={self.max_local_shift:g}", f"max_global_scaling={self.max_global_scaling:g}",
            f"mean_center={self.mean_center}",
        ]
        if self.in_dim == 1:
            parts.append(f"step={self.step:g}")
        elif self.spacing is not None:
            parts.append(f"spacing={self.spacing}")
        parts += [f"freq_scale={self.freq_scale:g}", f"base={self.base:g}", f"seed={self.seed}"]
        return ", ".join(parts)
