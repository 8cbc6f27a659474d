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
  :class:`~posenc.encodings.SinusoidalEncoding` exactly. The global scale is
  log-uniform. This is what the authors' code computes (flashlight, ``cape``
  branch, ``SinusoidalPositionEmbedding``), under either ``convention``.
* **2D** (``in_dim=2``): positions ``(row, col)`` in ``[-1, 1]``, every channel a
  plane wave along its own direction: features
  ``[sin(pi rho_k (row * a_k + col * b_k)), cos(...)]``. Two conventions:

  - ``"authors"`` (default): as the authors' pipeline computes it on an image
    (flashlight, ``cape`` branch, ``SinusoidalPositionEmbedding2D``, the code behind
    the paper's ViT numbers): ``k = 1..D/2``, ``rho_k = base^(2k/D)`` (``base = 10``),
    the width (col) coordinate gets ``b_k = cos k`` and the height (row) coordinate
    ``a_k = sin k`` (the code gives ``cos k`` to the first dimension of the patch map,
    and flashlight stores images width first, ``W x H x C``, so that dimension is the
    image's width); the patch grid is ``linspace(-1, 1, n)`` per axis, endpoints
    included (:attr:`grid_endpoint` tells :class:`~posenc.models.TinyViT`); the
    vision preset's global scale is ``lambda ~ U[0.7, 1.4]``, uniform. Where
    ``D/2`` is odd, the authors' code emits ``D + 1`` features (one extra sine,
    ``k = D/2 + 1``); posenc emits ``D``: the same features without that sine.
  - ``"authors_transposed"``: the same, with the axes exchanged (``cos k`` on the
    rows): the code read as if its patch map were stored height first; posenc's
    default before it followed the image layout.
  - ``"text"``: posenc's earlier reading of the paper's text: ``k = 0..D/2-1``,
    the row gets ``sin k`` and the col ``cos k``, patch centres
    ``-1 + (2i + 1)/n``, ``log lambda ~ U[-log 1.4, log 1.4]``.

  In both, the local shift is ``+-max_local_shift`` patch widths (``2/n`` on
  ``[-1, 1]``: ``+-1/n`` for ``max_local_shift = 0.5``, the authors' value), measured
  per sample and axis from the positions (:func:`posenc.positions.grid_cell`) unless
  ``spacing`` is given, and the global shift is ``U[-0.5, 0.5]`` per axis.

Presets (:data:`PRESETS`) hold the paper's settings for text, speech and vision.
Arguments are limited to the float32-safe range (shifts, scales, ``base`` at most
:data:`posenc.positions.LIMIT_MAX`), and positions whose phase would overflow
float32 are refused with a ``ValueError`` instead of giving NaN features.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

import torch

from posenc._checks import (
    _compiling,
    check_choice,
    check_finite,
    check_last_dim,
    check_positive_float,
    check_positive_int,
    check_seed,
    check_tensor,
    check_width,
)
from posenc.encodings._forward_memory import check_forward_memory
from posenc.encodings.base import Encoding, Footprint, check_out_dim
from posenc.encodings.registry import register_encoding
from posenc.positions import (
    LIMIT_MAX,
    _check_limit,
    cape_augment_work,
    check_generator,
    check_key_padding_mask,
    check_scaling_range,
    grid_cell,
)

#: The 2D conventions: ``"authors"`` (the authors' flashlight code on an image, the default),
#: ``"authors_transposed"`` (the same with rows and columns exchanged) and ``"text"`` (posenc's
#: earlier reading of the paper's text). They coincide in 1D.
CONVENTIONS = ("authors", "authors_transposed", "text")
#: The conventions of the authors' code (``linspace`` grid with endpoints, uniform scale, k = 1..D/2).
AUTHORS_CONVENTIONS = ("authors", "authors_transposed")

#: The paper's settings per domain (see ``docs/cape.md`` for the sources).
#: Limits: ``max_global_shift`` in the unit of ``step`` (1D) or of the ``[-1, 1]``
#: patch coordinates (2D); ``max_local_shift`` in token spacings / patch widths.
PRESETS: dict[str, dict[str, Any]] = {
    # machine translation: shifts in tokens, a 3% scale, no centring
    "text": {"in_dim": 1, "max_global_shift": 5.0, "max_local_shift": 0.5, "max_global_scaling": 1.03,
             "mean_center": False, "step": 1.0},
    # ASR: frames of 1/30 s, shifts up to 30 s, half a frame of local shift, no scaling, centred
    "speech": {"in_dim": 1, "max_global_shift": 30.0, "max_local_shift": 0.5, "max_global_scaling": 1.0,
               "mean_center": True, "step": 1.0 / 30.0},
    # ViT: positions in [-1, 1]; shift of half the image, +-1/n local, scale up to 1.4
    # (authors' code: lambda ~ U[0.7, 1.4]; the "text" convention: log-uniform on [1/1.4, 1.4])
    "vision": {"in_dim": 2, "max_global_shift": 0.5, "max_local_shift": 0.5, "max_global_scaling": 1.4,
               "mean_center": False},
}
DEFAULT_PRESET = {1: "text", 2: "vision"}
#: The global scale's (min, distribution) of the vision preset per convention (min ``None``: ``1/max``).
VISION_SCALING: dict[str, tuple[float | None, str]] = {
    "authors": (0.7, "uniform"), "authors_transposed": (0.7, "uniform"), "text": (None, "log_uniform")}


def cape_frequencies(in_dim: int, num_features: int, base: float, freq_scale: float, *,
                     convention: str = "authors", device=None, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """CAPE's angular frequencies: ``(K,)`` in 1D, ``(2, K)`` rows ``(w_row, w_col)`` in 2D (``K = D/2``).

    1D: ``freq_scale * base^(-2k/D)``, ``k = 0..K-1`` (both conventions).
    2D, ``"authors"``: ``freq_scale * rho_k * (sin k, cos k)``, ``k = 1..K``;
    ``"authors_transposed"``: ``freq_scale * rho_k * (cos k, sin k)``, ``k = 1..K``;
    ``"text"``: ``freq_scale * rho_k * (sin k, cos k)``, ``k = 0..K-1``; ``rho_k = base^(2k/D)``
    (the paper's ``pi`` is ``freq_scale``). Computed in float64, returned in ``dtype``.
    """
    check_choice("convention", convention, CONVENTIONS)
    half = num_features // 2
    k = torch.arange(half, device=device, dtype=torch.float64)
    if in_dim == 1:
        return (freq_scale * base ** (-k / half)).to(dtype)
    if convention in AUTHORS_CONVENTIONS:
        k = k + 1.0
        rho = base ** (2.0 * k / num_features)
        rows = (rho * torch.sin(k), rho * torch.cos(k))  # (row, col): cos k on the image's width
        if convention == "authors_transposed":
            rows = rows[::-1]
    else:
        rho = base ** (2.0 * k / num_features)
        rows = (rho * torch.sin(k), rho * torch.cos(k))
    return (freq_scale * torch.stack(rows)).to(dtype)


def cape_features(positions: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """Sinusoids of (augmented) positions: ``(..., D) -> (..., 2K)``, ``[sin(phase), cos(phase)]``.

    ``freqs`` is ``(K,)`` for ``D = 1`` (``phase = x w``) or ``(2, K)`` for ``D = 2``
    (``phase = row w_row + col w_col``). Computed in the positions' dtype (pass at least float32).
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
        max_global_shift: in ``[0, LIMIT_MAX]``; in the unit of ``step`` (1D) or of the
            ``[-1, 1]`` coordinates (2D).
        max_local_shift: in ``[0, LIMIT_MAX]``; in token spacings (1D: ``step``) or
            patch widths (2D: ``2/n`` for ``n`` patches a side).
        max_global_scaling: in ``[1, LIMIT_MAX]``: the largest global scale.
        mean_center: subtract each sample's mean position (also in evaluation).
        step: 1D only: the length of one position unit (token, frame) in the unit of
            ``max_global_shift`` (``1/30`` for speech frames in seconds).
        freq_scale: multiplies every frequency. Default ``1/step`` (1D), ``pi`` (2D).
        base: 1D: wavelength base (10000); 2D: ``rho_k = base^(2k/D)`` (10). In
            ``(1, LIMIT_MAX]``.
        spacing: 2D only: the patch width (a number or ``(row, col)`` pair) used as
            the unit of the local shift; ``None`` measures it from the positions
            (:func:`posenc.positions.grid_cell`).
        seed: seed of the module's own generator (one per device, created on first
            use); ``None`` (default) draws from torch's default generator, so the
            augmentation follows ``torch.manual_seed``. A ``generator`` passed to
            :meth:`forward` takes precedence.
        device: accepted for uniformity; CAPE has no parameters or buffers
            (frequencies are built on the positions' device).
        dtype: output dtype for integer 1D positions (default: the default dtype).
        convention: 2D only in effect: ``"authors"`` (default; the authors' code on an
            image: ``cos k`` on the width), ``"authors_transposed"`` (the same with rows and
            columns exchanged) or ``"text"`` (posenc's earlier reading of the paper's text);
            see the module docstring and ``docs/cape.md`` for every difference. 1D is the
            same in all.
        min_global_scaling: the smallest global scale, in ``(0, 1]``. Default: the
            preset's when ``max_global_scaling`` is the preset's too (vision,
            authors' conventions: 0.7), otherwise ``1 / max_global_scaling``.
        scaling_distribution: ``"uniform"`` (``lambda ~ U[min, max]``; default of the
            vision preset under the authors' conventions) or ``"log_uniform"`` (``log lambda ~
            U[log min, log max]``; every other default).

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
        seed: int | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        convention: str = "authors",
        min_global_scaling: float | None = None,
        scaling_distribution: str | None = None,
    ) -> None:
        self._check_sizes(in_dim, num_features)
        super().__init__(in_dim, num_features)
        self.num_features = num_features
        self.convention = check_choice("convention", convention, CONVENTIONS)
        preset = DEFAULT_PRESET[in_dim] if preset is None else check_choice("preset", preset, tuple(PRESETS))
        cfg = PRESETS[preset]
        if cfg["in_dim"] != in_dim:
            raise ValueError(f"preset {preset!r} is for in_dim={cfg['in_dim']}, got in_dim={in_dim}")
        self.preset = preset

        def pick(name: str, value: Any) -> Any:
            return cfg[name] if value is None else value

        self.max_global_shift = _check_limit("max_global_shift", pick("max_global_shift", max_global_shift))
        self.max_local_shift = _check_limit("max_local_shift", pick("max_local_shift", max_local_shift))
        preset_min, preset_dist = (VISION_SCALING[self.convention] if preset == "vision" else (None, "log_uniform"))
        if min_global_scaling is None and max_global_scaling is None:
            min_global_scaling = preset_min
        self.min_global_scaling, self.max_global_scaling, self.scaling_distribution = check_scaling_range(
            pick("max_global_scaling", max_global_scaling), min_global_scaling,
            preset_dist if scaling_distribution is None else scaling_distribution)
        mc = pick("mean_center", mean_center)
        if not isinstance(mc, bool):
            raise TypeError(f"mean_center must be a bool, got {type(mc).__name__}")
        self.mean_center = mc
        if in_dim == 2:
            if step is not None:
                raise ValueError("step applies to 1D positions only; 2D positions are patch positions in [-1, 1]")
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
        if not 1.0 < self.base <= LIMIT_MAX:
            raise ValueError(f"base must be > 1 and <= {LIMIT_MAX:g} (beyond it float32 frequencies overflow), "
                             f"got {self.base:g}")
        if seed is not None:
            check_seed("seed", seed)
        self.seed = seed
        self.out_dtype = dtype or torch.get_default_dtype()
        self._generators: dict[str, torch.Generator] = {}

    @staticmethod
    def _check_sizes(in_dim: int, num_features: int) -> None:
        check_positive_int("in_dim", in_dim)
        if in_dim not in (1, 2):
            raise ValueError(f"in_dim must be 1 or 2 for CAPE, got {in_dim}")
        check_positive_int("num_features", num_features)
        if num_features % 2:
            raise ValueError(f"num_features must be even (sine/cosine pairs), got {num_features}")

    @classmethod
    def _footprint(cls, arguments: dict) -> Footprint:
        # no parameters or buffers: the frequencies are built on the positions' device
        in_dim, num_features = arguments["in_dim"], arguments["num_features"]
        cls._check_sizes(in_dim, num_features)
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
        for v in vals:
            _check_limit("spacing", v)
        return vals

    # ------------------------------------------------------------------ state
    @property
    def grid_endpoint(self) -> bool:
        """Whether this encoding's patch grid is ``linspace(-1, 1, n)`` (2D, ``"authors"``) rather than centres.

        :class:`~posenc.models.TinyViT` reads it to lay out the positions it passes.
        """
        return self.in_dim == 2 and self.convention in AUTHORS_CONVENTIONS

    @property
    def augments(self) -> bool:
        """Whether training mode draws anything (some limit is not trivial)."""
        return (self.max_global_shift > 0 or self.max_local_shift > 0 or self.max_global_scaling > 1
                or self.min_global_scaling < 1)

    def frequencies(self, device=None, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        """``(K,)`` (1D) or ``(2, K)`` rows ``(w_row, w_col)`` (2D) angular frequencies."""
        return cape_frequencies(self.in_dim, self.num_features, self.base, self.freq_scale,
                                convention=self.convention, device=device, dtype=dtype)

    def reset_generator(self, seed: int | None = None) -> None:
        """Forget the per-device generators; reseed with ``seed`` (default: the constructor's)."""
        if seed is not None:
            self.seed = check_seed("seed", seed)
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
                f"2D CAPE positions must be floating patch positions in [-1, 1] (patch_positions(kind='continuous'), "
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
                patch positions (2D). ``(..., N, in_dim)`` in training mode.
            key_padding_mask: ``(..., N)`` bool, ``True`` at padding: padded positions
                are neither centred nor augmented and never move the mean. Positions
                ``(N, in_dim)`` shared by a batch are expanded to the mask's batch.
            generator: overrides the module's generator for this call (training only).
            spacing: 2D only: overrides the patch width for this call (a number,
                a ``(row, col)`` pair, or a tensor broadcastable to ``(..., 1, 2)``).

        Raises:
            ValueError: bad positions, or positions whose phase (position times
                frequency) overflows the working precision.
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
        self._check_memory(x, out_dtype)
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
                unit = grid_cell(x, mask, endpoint=self.grid_endpoint)
            work = cape_augment_work(
                x, max_global_shift=self.max_global_shift, max_local_shift=self.max_local_shift,
                max_global_scaling=self.max_global_scaling, mean_center=self.mean_center, spacing=unit,
                key_padding_mask=mask, generator=gen,
                # min = 1/max (given or by default): the symmetric draw, bit-identical to cape_augment's default
                min_global_scaling=(None if self.min_global_scaling == 1.0 / self.max_global_scaling
                                    else self.min_global_scaling),
                scaling_distribution=self.scaling_distribution,
            )
        elif self.mean_center:
            work = cape_augment_work(x, mean_center=True, key_padding_mask=mask, augment=False)
        else:
            work = x.to(torch.promote_types(x.dtype, torch.float32))
        freqs = self.frequencies(device=work.device)
        self._check_phase(work, freqs)
        return cape_features(work, freqs).to(out_dtype)

    def _check_memory(self, x: torch.Tensor, out_dtype: torch.dtype) -> None:
        """Refuse, before it allocates, a call whose features would exceed the memory limit.

        Per feature, in the working dtype: the phases (half the output), their sin and cos and
        the concatenated output, and the cast to ``out_dtype``; per position, the copies of the
        positions that centring and augmentation make.
        """
        work = torch.promote_types(x.dtype, torch.float32)
        per_feature = 3 * work.itemsize + (out_dtype.itemsize if out_dtype != work else 0)
        check_forward_memory(self, x, per_feature, bytes_per_position=8 * self.in_dim * 8)

    @staticmethod
    def _check_phase(work: torch.Tensor, freqs: torch.Tensor) -> None:
        """Refuse positions whose phase ``|x . w|`` could overflow the working dtype (inf, then NaN features)."""
        if _compiling() or work.numel() == 0:
            return
        wmax = float(freqs.abs().sum(dim=0).max()) if freqs.dim() == 2 else float(freqs.abs().max())
        xmax = float(work.detach().abs().max())
        limit = torch.finfo(work.dtype).max
        if not xmax * wmax < limit:  # also catches inf and NaN
            raise ValueError(
                f"positions times CAPE's frequencies overflow {work.dtype}: largest |position| {xmax:g} (after "
                f"step, centring and augmentation), largest frequency {wmax:g}; pass smaller positions, a smaller "
                f"freq_scale or base, or float64 positions"
            )

    def extra_repr(self) -> str:
        parts = [
            super().extra_repr(), f"preset={self.preset!r}", f"max_global_shift={self.max_global_shift:g}",
            f"max_local_shift={self.max_local_shift:g}", f"max_global_scaling={self.max_global_scaling:g}",
            f"min_global_scaling={self.min_global_scaling:g}", f"scaling_distribution={self.scaling_distribution!r}",
            f"mean_center={self.mean_center}",
        ]
        if self.in_dim == 1:
            parts.append(f"step={self.step:g}")
        else:
            parts.append(f"convention={self.convention!r}")
            if self.spacing is not None:
                parts.append(f"spacing={self.spacing}")
        parts += [f"freq_scale={self.freq_scale:g}", f"base={self.base:g}", f"seed={self.seed}"]
        return ", ".join(parts)
