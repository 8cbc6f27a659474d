"""Base classes for positional encodings.

An :class:`Encoding` maps positions ``(..., in_dim)`` to features ``(..., out_dim)``.
:class:`CoordinateEncoding` adds what every coordinate encoding of Zheng et al.
("Rethinking Positional Encoding", arXiv 2107.02561) shares: a coordinate domain
mapped to the unit interval, the ways of combining several input dimensions
(per-axis concatenation, the four-direction variant, the Kronecker product), and
the paper's row normalisation.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Iterator
from typing import Any, ClassVar, NamedTuple

import torch
from torch import nn

from posenc._checks import (
    _compiling,
    check_bool,
    check_choice,
    check_device,
    check_float_dtype,
    check_divisible,
    check_domain,
    check_finite,
    check_floating,
    check_in_domain,
    check_last_dim,
    check_positive_int,
    check_tensor,
)

MODES = ("separable", "four_direction", "product", "full")

#: Largest ``out_dim`` an encoding may have: one float32 feature row of this width is 8 GiB.
MAX_OUT_DIM = 2**31 - 1


#: Most elements one parameter or buffer of an encoding may have (2**48: a petabyte of
#: float32); beyond it torch's size arithmetic overflows even on the ``meta`` device.
MAX_NUMEL = 2**48


def check_numel(name: str, numel: int, what: str) -> int:
    """Refuse a tensor of ``numel`` elements beyond :data:`MAX_NUMEL`, naming the argument ``name``."""
    if numel > MAX_NUMEL:
        raise ValueError(f"{name} gives {what} of {_fmt_count(numel)} elements (more than 2**48); reduce {name}")
    return numel


def check_out_dim(out_dim: int, hint: str = "reduce num_features") -> int:
    """Refuse an ``out_dim`` above :data:`MAX_OUT_DIM` (arithmetic only: nothing is allocated)."""
    if out_dim > MAX_OUT_DIM:
        raise ValueError(f"out_dim would be {_fmt_count(out_dim)} features per position (more than {MAX_OUT_DIM}); "
                         f"{hint}")
    return out_dim


def _fmt_count(n: int) -> str:
    """``n`` as ``1.23e+45`` without converting a huge int to float (which overflows)."""
    if n < 10**15:
        return f"{n:.3g}"
    digits = str(n) if n < 10**4000 else None
    if digits is None:
        return "more than 1e4000"
    return f"{digits[0]}.{digits[1:3]}e+{len(digits) - 1}"


class Footprint(NamedTuple):
    """What an encoding would hold, computed from its constructor arguments alone.

    :meth:`Encoding.footprint` (and :func:`posenc.encodings.encoding_footprint`)
    return this without building any tensor, so a size check can refuse
    ``num_features=2**40`` before a single buffer exists.

    Attributes:
        out_dim: features per position.
        parameters: elements in the encoding's ``nn.Parameter`` s.
        buffers: elements in its buffers (frequencies, centres, scale).
    """

    out_dim: int
    parameters: int
    buffers: int

    @property
    def numel(self) -> int:
        """Elements in parameters and buffers together."""
        return self.parameters + self.buffers

    def nbytes(self, dtype: torch.dtype = torch.float32) -> int:
        """Bytes of parameters and buffers stored in ``dtype``."""
        return self.numel * torch.empty((), dtype=dtype, device="meta").element_size()

    def output_nbytes(self, num_positions: int, dtype: torch.dtype = torch.float32) -> int:
        """Bytes of the features of ``num_positions`` positions in ``dtype``."""
        return num_positions * self.out_dim * torch.empty((), dtype=dtype, device="meta").element_size()


def _check_common_arguments(sig: inspect.Signature, args: tuple, kwargs: dict) -> None:
    """Validate the arguments every encoding shares, by name and default (not coerced).

    ``device`` must exist on this machine, ``dtype`` must be a floating dtype, an
    argument whose default is a bool must be a bool, and ``seed`` an int >= 0.
    """
    try:
        bound = sig.bind(None, *args, **kwargs)
    except TypeError:
        return  # the constructor itself reports the bad call
    for name, value in bound.arguments.items():
        param = sig.parameters[name]
        if name == "device":
            check_device("device", value)
        elif name == "dtype":
            check_float_dtype("dtype", value)
        elif name == "seed" and value is not None:
            check_positive_int("seed", value, minimum=0)
        elif isinstance(param.default, bool):
            check_bool(name, value)


def _numeric_arguments(sig: inspect.Signature, args: tuple, kwargs: dict) -> str:
    try:
        bound = sig.bind(None, *args, **kwargs)
    except TypeError:
        return ""
    return ", ".join(f"{k}={v!r}" for k, v in bound.arguments.items()
                     if isinstance(v, (int, float)) and not isinstance(v, bool))


#: Constructor arguments that set an encoding's sizes (named in a memory refusal).
_SIZE_ARGUMENTS = ("num_features", "in_dim", "mode", "grid_size", "num_groups", "fourier_dim", "hidden_dim")


def _check_construction_memory(cls: type, sig: inspect.Signature, args: tuple, kwargs: dict) -> None:
    """Refuse, before anything is allocated, an encoding whose construction would exceed the memory limit.

    The estimate is :func:`posenc._resources.encoding_bytes` of :meth:`Encoding.footprint` (arguments
    only), the one the CLI checks; arguments the footprint refuses are left to the constructor,
    which reports them. Nothing is checked on the ``meta`` device (shapes only).
    """
    from posenc._resources import check_footprint, encoding_bytes

    if cls._footprint.__func__ is Encoding._footprint.__func__:  # type: ignore[attr-defined]
        return  # an encoding defined elsewhere: its footprint builds it on the meta device
    try:
        bound = sig.bind(None, *args, **kwargs)
    except TypeError:
        return
    given = dict(bound.arguments)
    bound.apply_defaults()
    device, dtype = bound.arguments.get("device"), bound.arguments.get("dtype")
    if device is not None and torch.device(device).type == "meta":
        return
    try:
        fp = cls.footprint(*args, **kwargs)  # type: ignore[attr-defined]
    except (ValueError, TypeError, NotImplementedError):
        return
    size = getattr(dtype or torch.get_default_dtype(), "itemsize", 8)
    nbytes = encoding_bytes(fp.numel, fp.out_dim, bool(bound.arguments.get("normalize", False)), size)
    named = [k for k in _SIZE_ARGUMENTS if k in given] or [k for k in _SIZE_ARGUMENTS if k in bound.arguments][:1]
    argument = ", ".join(f"{k}={bound.arguments[k]!r}" for k in named)
    check_footprint(nbytes, argument, f"{cls.__name__} (out_dim={fp.out_dim:,}; {fp.numel:,} elements of parameters and buffers)")


#: What ``kernel_width`` means in every encoding that accepts it: the ``w`` of the kernel
#: ``<psi(x), psi(y)> ~ exp(-|x - y|^2 / (4 w^2))`` the encoding induces (the Gaussian basis
#: of width ``w`` has exactly this kernel), in the encoding's input units (unit-domain
#: coordinates for the coordinate encodings, position units for LFF).
KERNEL_WIDTH_DOC = "kernel width w: <psi(x), psi(y)> ~ exp(-|x - y|^2 / (4 w^2))"


def resolve_width(native: str, native_value: float | None, kernel_width: float | None, from_kernel_width,
                  default: float) -> float:
    """The encoding's own width parameter from either its paper's name or ``kernel_width``.

    Args:
        native: the paper's name of the parameter (``sigma``, ``gamma``), for messages.
        native_value, kernel_width: what the caller passed (at most one of them).
        from_kernel_width: maps a kernel width to the native parameter.
        default: the native default when neither is given.
    """
    from posenc._checks import check_width

    if native_value is not None and kernel_width is not None:
        raise ValueError(f"pass {native} or kernel_width, not both (got {native}={native_value}, "
                         f"kernel_width={kernel_width})")
    if kernel_width is not None:
        return check_width(native, float(from_kernel_width(check_width("kernel_width", kernel_width))))
    return default if native_value is None else check_width(native, native_value)


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype trigonometry runs in: at least float32 (half inputs are upcast)."""
    return torch.promote_types(dtype, torch.float32)


class Encoding(nn.Module):
    """A map from positions ``(..., in_dim)`` to features ``(..., out_dim)``.

    Subclasses implement :meth:`encode`; :meth:`forward` validates the input
    first (a tensor, the right trailing dimension, floating point, finite) so a
    bad position fails loudly instead of producing NaN features.

    Args:
        in_dim: size of the trailing dimension of the positions.
        out_dim: size of the trailing dimension of the features.
    """

    #: Name of the constructor argument that sets the encoding's kernel width
    #: (used by :func:`posenc.analysis.match_width` and ``suggest_bandwidth``).
    width_param: ClassVar[str | None] = None
    #: Whether a larger ``width_param`` gives a smoother (wider) kernel.
    width_increases_smoothness: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Wrap each subclass's ``__init__`` with the checks every encoding shares.

        Before construction: ``device``, ``dtype``, bool flags and ``seed`` are
        validated (:func:`_check_common_arguments`). After it: every floating
        parameter and buffer must be finite, so an extreme width (``sigma=1e308``,
        ``1e-300``) fails at construction with a ValueError naming the arguments,
        never at call time with NaN features or an OverflowError.
        """
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is None or getattr(init, "_posenc_checked", False):
            return
        sig = inspect.signature(init)

        @functools.wraps(init)
        def checked_init(self, *args: Any, **kw: Any) -> None:
            _check_common_arguments(sig, args, kw)
            if type(self) is cls:
                _check_construction_memory(cls, sig, args, kw)
            try:
                init(self, *args, **kw)
            except (OverflowError, ZeroDivisionError) as err:
                raise ValueError(f"{cls.__name__}: arguments out of the representable range "
                                 f"({_numeric_arguments(sig, args, kw)}): {err}") from None
            if type(self) is cls:
                for pname, tensor in [*self.named_parameters(), *self.named_buffers()]:
                    if tensor.is_floating_point() and not tensor.is_meta and not bool(torch.isfinite(tensor).all()):
                        raise ValueError(
                            f"{cls.__name__}: arguments out of the representable range "
                            f"({_numeric_arguments(sig, args, kw)}) give non-finite {pname!r}")

        checked_init._posenc_checked = True  # type: ignore[attr-defined]
        cls.__init__ = checked_init  # type: ignore[method-assign]

    def __init__(self, in_dim: int, out_dim: int) -> None:
        super().__init__()
        self.in_dim = check_positive_int("in_dim", in_dim)
        self.out_dim = check_out_dim(check_positive_int("out_dim", out_dim))

    @classmethod
    def footprint(cls, *args: Any, **kwargs: Any) -> Footprint:
        """Sizes of ``cls(*args, **kwargs)`` from the arguments alone: no tensor is built.

        The size arguments (``in_dim``, ``num_features``, ``mode``, ``grid_size``, ...)
        are validated as the constructor validates them (same errors, including an
        ``out_dim`` above :data:`MAX_OUT_DIM`); the others (widths, seeds, devices) are
        not looked at. Memory guards (the CLI's ``--max-memory``) call this before
        anything is allocated.

        Returns:
            :class:`Footprint` ``(out_dim, parameters, buffers)``.
        """
        init = inspect.unwrap(cls.__init__)
        sig = inspect.signature(init)
        bound = sig.bind(None, *args, **kwargs)  # TypeError for an argument the constructor does not take
        _check_common_arguments(sig, args, kwargs)  # device, dtype, bools, seed: as the constructor does
        bound.apply_defaults()
        arguments = dict(bound.arguments)
        arguments.pop(next(iter(sig.parameters)))  # self
        return cls._footprint(arguments)

    @classmethod
    def _footprint(cls, arguments: dict[str, Any]) -> Footprint:
        """Subclass hook of :meth:`footprint`: ``arguments`` are the constructor's, defaults applied.

        Every encoding of posenc overrides it with arithmetic on its arguments. The default,
        for encodings defined elsewhere, builds the encoding on the ``meta`` device (shapes
        only) when its constructor takes ``device``; such an encoding is responsible for
        allocating nothing there.
        """
        if "device" not in arguments:
            raise NotImplementedError(f"{cls.__name__} cannot tell its footprint from its arguments "
                                      "(override Encoding._footprint)")
        enc = cls(**{**arguments, "device": "meta"})
        return Footprint(enc.out_dim, sum(p.numel() for p in enc.parameters()),
                         sum(b.numel() for b in enc.buffers()))

    def check_input(self, positions: torch.Tensor) -> None:
        """Validate ``positions``; override to accept other input layouts."""
        check_tensor("positions", positions)
        check_last_dim("positions", positions, self.in_dim)
        check_floating("positions", positions)
        check_finite("positions", positions)

    def encode(self, positions: torch.Tensor) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        """Encode ``positions`` ``(..., in_dim)`` into features ``(..., out_dim)``."""
        self.check_input(positions)
        return self.encode(positions)

    def iter_chunks(self, positions: torch.Tensor, chunk_size: int = 65536) -> Iterator[torch.Tensor]:
        """Encode ``positions`` of shape ``(N, in_dim)`` ``chunk_size`` rows at a time.

        Yields feature blocks ``(<= chunk_size, out_dim)`` so that a large set of
        positions (a 512x512 image with 1000 features is 1 GB in float32) never
        needs its whole feature matrix in memory.
        """
        check_positive_int("chunk_size", chunk_size)
        check_tensor("positions", positions)
        if positions.dim() != 2:
            raise ValueError(f"positions must have shape (N, {self.in_dim}), got {tuple(positions.shape)}")
        self.check_input(positions)
        for start in range(0, positions.shape[0], chunk_size):
            yield self.encode(positions[start : start + chunk_size])

    def reset_parameters(self) -> None:
        """Re-initialise parameters (a no-op for fixed encodings)."""

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs) -> None:
        # Buffers recomputable from the constructor arguments and the seed (centres, frequencies,
        # generator vectors, fixed W_r) are not saved. Checkpoints written before that decision
        # still load: such a key is checked against the recomputed buffer and then dropped.
        for name in self._non_persistent_buffers_set:
            key = prefix + name
            if key in state_dict:
                saved, mine = state_dict.pop(key), self._buffers.get(name)
                if mine is not None and (saved.shape != mine.shape or not torch.allclose(
                        saved.to(mine.dtype), mine, rtol=1e-5, atol=1e-6)):
                    error_msgs.append(
                        f"{key} in the checkpoint differs from the value this {type(self).__name__} computes from "
                        "its constructor arguments: build it with the arguments (and seed) the checkpoint was made with"
                    )
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)

    def extra_repr(self) -> str:
        return f"in_dim={self.in_dim}, out_dim={self.out_dim}"


class CoordinateEncoding(Encoding):
    """Coordinate encoding built from a 1D map applied along *directions*.

    Positions are first mapped from ``domain`` to the unit interval, then
    projected onto K directions and each direction is encoded by the subclass's
    1D map ``(..., K) -> (..., K, F)``:

    * ``"separable"``: one direction per axis, results concatenated
      (``out_dim = in_dim * F``), as in the paper's 2D experiments;
    * ``"four_direction"`` (2D only): directions ``x, y, (x+y)/2, (x-y+1)/2``,
      concatenated (``out_dim = 4 * F``);
    * ``"product"``: the Kronecker product of the per-axis features
      (``out_dim = F ** in_dim``), which lets a single linear layer represent a
      non-additive function of several coordinates;
    * ``"full"``: encodings that mix axes natively (random Fourier features).

    Args:
        in_dim: number of coordinates per position.
        num_features: output width ``out_dim`` (for ``"product"``: features per axis).
        mode: one of ``"separable"``, ``"four_direction"``, ``"product"``, ``"full"``.
        domain: ``(low, high)`` coordinate range mapped to ``[0, 1]``.
        normalize: divide features by the largest row norm over the domain (the
            paper's normalisation; exact for separable/product/full modes, an upper
            bound for ``"four_direction"``).
        strict: reject positions outside ``domain`` (set ``False`` to extrapolate).
        device, dtype: of the buffers.
    """

    supported_modes: ClassVar[tuple[str, ...]] = ("separable", "four_direction", "product")
    #: Per-direction feature counts must be a multiple of this (2 for sin/cos pairs).
    feature_multiple: ClassVar[int] = 1

    def __init__(
        self,
        in_dim: int,
        num_features: int,
        mode: str = "separable",
        domain: tuple[float, float] = (0.0, 1.0),
        normalize: bool = False,
        strict: bool = True,
    ) -> None:
        num_dirs, per_dir, out_dim = self.layout(in_dim, num_features, mode)
        check_bool("normalize", normalize)
        check_bool("strict", strict)
        super().__init__(in_dim, out_dim)
        self.num_features = num_features
        self.mode = mode
        self.domain = check_domain("domain", domain)
        self.normalize = bool(normalize)
        self.strict = bool(strict)
        self.num_directions = num_dirs
        self.features_per_direction = per_dir

    @classmethod
    def layout(cls, in_dim: int, num_features: int, mode: str) -> tuple[int, int, int]:
        """``(directions K, features per direction F, out_dim)`` for these arguments (validated).

        Arithmetic only: a ``num_features ** in_dim`` of any size is refused without
        being computed in full.
        """
        check_positive_int("in_dim", in_dim)
        check_positive_int("num_features", num_features)
        check_choice("mode", mode, cls.supported_modes)
        if mode == "four_direction" and in_dim != 2:
            raise ValueError(f"mode='four_direction' needs in_dim=2, got in_dim={in_dim}")
        if mode == "product":
            num_dirs, per_dir = in_dim, num_features
            if num_features > 1 and in_dim * math.log2(num_features) > 62:
                out_dim = MAX_OUT_DIM + 1  # far above the limit: not computed (it may have millions of digits)
                shown = f"about 10^{in_dim * math.log10(num_features):.4g}"
            else:
                out_dim = num_features**in_dim
                shown = _fmt_count(out_dim)
            if out_dim > MAX_OUT_DIM:
                raise ValueError(
                    f"mode='product' gives num_features ** in_dim = {num_features}**{in_dim} = {shown} "
                    f"features per position (more than {MAX_OUT_DIM}); reduce num_features or use mode='separable'")
        elif mode == "full":
            num_dirs, per_dir, out_dim = 1, num_features, num_features
        else:
            num_dirs = in_dim if mode == "separable" else 4
            check_divisible("num_features", num_features, num_dirs, f"{num_dirs} directions in mode={mode!r}")
            per_dir, out_dim = num_features // num_dirs, num_features
        if cls.feature_multiple > 1 and per_dir % cls.feature_multiple:
            raise ValueError(
                f"num_features must give a multiple of {cls.feature_multiple} features per direction "
                f"(sine/cosine pairs); got {per_dir} per direction from num_features={num_features}, mode={mode!r}"
            )
        check_out_dim(out_dim)
        return num_dirs, per_dir, out_dim

    @classmethod
    def _footprint(cls, arguments: dict[str, Any]) -> Footprint:
        num_dirs, per_dir, out_dim = cls.layout(arguments["in_dim"], arguments["num_features"], arguments["mode"])
        # the subclass's own buffers, plus the row-normalisation scale (one element)
        return Footprint(out_dim, 0, cls._buffer_numel(arguments, num_dirs, per_dir) + 1)

    @classmethod
    def _buffer_numel(cls, arguments: dict[str, Any], num_dirs: int, per_dir: int) -> int:
        """Elements of the subclass's buffers (centres, frequencies, generator), from the arguments."""
        raise NotImplementedError(f"{cls.__name__} does not compute its footprint from its arguments")

    # -- subclass hooks -------------------------------------------------------
    def encode_1d(self, t: torch.Tensor) -> torch.Tensor:  # pragma: no cover - abstract
        """Encode unit coordinates ``(..., K)`` into a new tensor ``(..., K, F)`` (never a view of a buffer)."""
        raise NotImplementedError

    def encode_full(self, u: torch.Tensor) -> torch.Tensor:  # pragma: no cover - abstract
        """Encode unit positions ``(..., in_dim)`` into ``(..., out_dim)`` (mode 'full')."""
        raise NotImplementedError

    # -- the shared pipeline ----------------------------------------------------
    def check_input(self, positions: torch.Tensor) -> None:
        super().check_input(positions)
        if self.strict:
            check_in_domain("positions", positions, *self.domain)

    def to_unit(self, positions: torch.Tensor) -> torch.Tensor:
        low, high = self.domain
        return (positions - low) / (high - low)

    def directions(self, u: torch.Tensor) -> torch.Tensor:
        """Project unit positions ``(..., in_dim)`` onto the K encoded directions."""
        if self.mode == "four_direction":
            x, y = u.unbind(-1)
            return torch.stack((x, y, 0.5 * (x + y), 0.5 * (x - y + 1.0)), dim=-1)
        return u

    def encode(self, positions: torch.Tensor) -> torch.Tensor:
        out_dtype = positions.dtype
        u = self.to_unit(positions.to(compute_dtype(positions.dtype)))
        if self.mode == "full":
            feats = self.encode_full(u)
        else:
            per_dir = self.encode_1d(self.directions(u))  # (..., K, F)
            if self.mode == "product":
                feats = per_dir[..., 0, :]
                for k in range(1, self.num_directions):
                    feats = (feats[..., :, None] * per_dir[..., k, None, :]).flatten(-2)
            else:
                feats = per_dir.flatten(-2)
        if self.normalize:
            scale = self.scale.to(feats.dtype)
            # in place on the fresh feature tensor (no second full-size buffer) outside autograd and tracing
            feats = feats * scale if feats.requires_grad or _compiling() else feats.mul_(scale)
        return feats.to(out_dtype)

    def _finalize(self) -> None:
        """Cache the row-normalisation scale; subclasses call this last in ``__init__``.

        On the ``meta`` device (shapes only) the scale is not computed: nothing is allocated.
        """
        ref = next(iter(self.buffers()), None)
        dtype = ref.dtype if ref is not None else torch.get_default_dtype()
        device = ref.device if ref is not None else None
        if ref is not None and ref.is_meta:
            scale = torch.empty((), device="meta", dtype=dtype)
        else:
            scale = self.compute_row_scale() if self.normalize else torch.ones((), dtype=torch.float64)
        self.register_buffer("scale", scale.to(device=device, dtype=dtype), persistent=False)

    def max_sq_norm_1d(self) -> torch.Tensor:
        """Largest squared norm of the 1D features per direction, shape ``(K,)``.

        The default suits shifted bases on a uniform grid of F centres, whose
        squared norm is periodic with period ``1/F`` away from the domain's ends:
        it evaluates 257 evenly spaced points of the unit interval plus 65 points
        across one period in the middle. Subclasses with a closed form override it.
        """
        num = self.features_per_direction
        mid = (num // 2) / num
        grid = torch.cat((
            torch.linspace(0.0, 1.0, 257, dtype=torch.float64),
            mid + torch.linspace(0.0, 1.0 / num, 65, dtype=torch.float64),
        ))
        t = grid[:, None].expand(-1, self.num_directions)
        # a few points at a time: at most ~32 MiB of float64 features (one point when F is huge)
        step = max(1, 2**22 // (self.num_directions * num))
        return torch.stack([self.encode_1d(t[i : i + step]).pow(2).sum(-1).amax(0)
                            for i in range(0, t.shape[0], step)]).amax(0)

    def compute_row_scale(self) -> torch.Tensor:
        """``1 / max ||psi(x)||`` over the domain: the paper's row normalisation."""
        if self.mode == "full":
            raise NotImplementedError  # subclasses with a 'full' mode override
        sq = self.max_sq_norm_1d()
        total = sq.prod() if self.mode == "product" else sq.sum()
        return total.rsqrt()

    def extra_repr(self) -> str:
        parts = [f"in_dim={self.in_dim}", f"out_dim={self.out_dim}", f"mode={self.mode!r}"]
        if self.domain != (0.0, 1.0):
            parts.append(f"domain={self.domain}")
        if self.normalize:
            parts.append("normalize=True")
        if not self.strict:
            parts.append("strict=False")
        return ", ".join(parts)
