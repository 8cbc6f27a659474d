"""Toeplitz matrix products ``y_i = sum_j c_{j-i} x_j`` by FFT or directly.

The relative-position matrix ``C_ij = c_{j-i}`` of Luo et al., "Stable, Fast and
Accurate: Kernelized Attention with Relative Positional Encoding" (NeurIPS 2021,
Sec. 3.2, Eq. 10-11) is Toeplitz, so ``C @ X`` is a linear convolution and costs
``O(channels * n log n)`` with an FFT of length ``>= n_q + n_k - 1`` instead of
``O(channels * n_q * n_k)``.

Coefficient layout (used everywhere in :mod:`posenc.attention`): for ``n_q``
outputs and ``n_k`` inputs the offsets ``t = j - i`` run over
``-(n_q - 1) ... n_k - 1`` and ``coeffs[..., t + n_q - 1] = c_t`` (length
``n_q + n_k - 1``; ``2n - 1`` when both lengths are ``n``).

The FFT path is a custom autograd function that stores only its inputs and
recomputes the spectra in backward, processing channel blocks in turn, so its
extra memory is bounded by ``block_bytes`` regardless of the channel count.
"""

from __future__ import annotations

import math

import torch

from posenc._checks import (
    _compiling,
    all_finite,
    broadcast_shape,
    check_choice,
    check_finite,
    check_floating,
    check_has_data,
    check_positive_int,
    check_tensor,
)
from posenc._resources import check_footprint

#: The largest buffer :func:`_prime_allocator` has freed in this process (bytes), and the most it frees
#: (glibc's dynamic mmap threshold rises no higher: ``DEFAULT_MMAP_THRESHOLD_MAX`` on 64-bit systems).
_PRIMED_BYTES = 0
PRIME_MAX_BYTES = 32 * 2**20


def _prime_allocator(nbytes: int, device: torch.device) -> None:
    """Allocate and free ``nbytes`` of untouched memory, once per process and size (CPU only).

    glibc serves an allocation above its mmap threshold (128 KiB in a fresh process) with a fresh
    mapping and unmaps it when it is freed; each such free raises the threshold to that size, and
    the heap's trim threshold to twice it (up to :data:`PRIME_MAX_BYTES`). Until a process has freed
    one buffer as large as the FFT path's per-block transform outputs, those are mapped and unmapped,
    or the heap grown and trimmed, block after block, and every block pays its page faults afresh:
    a first ``toeplitz_matmul`` took 1.7-2.3 times the page faults of its buffers (4,300-5,900 at
    n = 4,096, 256 channels). Freeing one untouched buffer of two blocks' outputs first (a mapping
    and an unmapping: no page is touched) is what the process's first free of such a buffer does
    anyway, earlier: the blocks then reuse one another's memory (2,640-3,050 faults). The decay
    path's pieces likewise (:func:`~posenc.attention.kernelized.decay.chunkwise_attention`). Elsewhere
    it costs one allocation per process and size; nothing while ``torch.compile`` traces.
    """
    global _PRIMED_BYTES
    nbytes = min(nbytes, PRIME_MAX_BYTES)
    if device.type != "cpu" or nbytes <= _PRIMED_BYTES or _compiling():
        return
    _PRIMED_BYTES = nbytes
    torch.empty(nbytes, dtype=torch.uint8, device="cpu")  # freed at once, never written (whatever the default device)


#: Below this output length the direct (materialised Toeplitz matrix) product
#: is used by ``method="auto"``. Measured on the 2-core development machine
#: (torch 2.13 CPU, float32, forward+backward, 1 to 128 channels): the direct
#: product wins up to n ~ 64-128; see ``benchmarks/bench_krpe.py``
#: (``toeplitz_crossover``) and docs/krpe.md.
TOEPLITZ_DIRECT_MAX_N = 128

#: Default size of one block of spectra (bytes) in the FFT paths: small enough to
#: stay in cache. Forward+backward of kernelized attention was fastest at 1-4 MiB
#: on the development machine for n = 4,096 to 65,536 (docs/krpe.md).
DEFAULT_BLOCK_BYTES = 2 * 2**20

METHODS = ("auto", "fft", "direct")


def next_fast_len(n: int) -> int:
    """Smallest 2^a 3^b 5^c >= ``n`` (lengths pocketfft transforms fastest)."""
    check_positive_int("n", n)
    if _compiling():  # (a traced function: no module state)
        return _fast_len(n)
    best = _FAST_LENS.get(n)
    if best is None:
        if len(_FAST_LENS) >= 256:
            _FAST_LENS.clear()
        best = _FAST_LENS[n] = _fast_len(n)
    return best


#: :func:`next_fast_len` by length (a call asks 2-3 times; 8 us each in Python at n ~ 8k)
_FAST_LENS: dict[int, int] = {}


def _fast_len(n: int) -> int:
    best = 1
    while best < n:
        best *= 2
    p5 = 1
    while p5 < best:
        p35 = p5
        while p35 < best:
            q = p35
            while q < n:
                q *= 2
            best = min(best, q)
            p35 *= 3
        p5 *= 5
    return best


def check_coeffs(coeffs: torch.Tensor, n_q: int, n_k: int, name: str = "coeffs") -> None:
    """Raise unless ``coeffs`` is a float tensor of last size ``n_q + n_k - 1``."""
    check_tensor(name, coeffs)
    check_floating(name, coeffs)
    want = n_q + n_k - 1
    if coeffs.dim() == 0 or coeffs.shape[-1] != want:
        raise ValueError(
            f"{name} must have shape (..., n_q + n_k - 1) = (..., {want}) for n_q={n_q}, "
            f"n_k={n_k} (offsets -(n_q-1)..n_k-1), got {tuple(coeffs.shape)}"
        )


def causal_coeffs(coeffs: torch.Tensor, n_q: int) -> torch.Tensor:
    """Zero the coefficients of future offsets ``t = j - i > 0`` (keys after the query)."""
    keep = torch.arange(coeffs.shape[-1], device=coeffs.device) <= n_q - 1
    return coeffs * keep.to(coeffs.dtype)


def dense_bytes(coeffs: torch.Tensor, n_q: int, n_k: int, copies: int = 1, index_bytes: int = 8) -> float:
    """Bytes of ``copies`` ``(..., n_q, n_k)`` tensors shaped after ``coeffs`` (and an int64 index)."""
    lead = float(coeffs[..., 0].numel()) if coeffs.dim() else 1.0
    return float(n_q) * n_k * (copies * lead * coeffs.element_size() + index_bytes)


def toeplitz_dense(coeffs: torch.Tensor, n_q: int, n_k: int) -> torch.Tensor:
    """Materialise ``C_ij = c_{j-i}``: ``(..., n_q + n_k - 1) -> (..., n_q, n_k)`` (refused before allocating
    beyond the memory limit: :func:`posenc._resources.check_footprint`)."""
    check_coeffs(coeffs, n_q, n_k)
    check_footprint(dense_bytes(coeffs, n_q, n_k), f"n_q={n_q}, n_k={n_k}", "the dense Toeplitz matrix")
    i = torch.arange(n_q, device=coeffs.device)[:, None]
    j = torch.arange(n_k, device=coeffs.device)[None, :]
    return coeffs[..., j - i + n_q - 1]


def circulant_kernel(coeffs: torch.Tensor, n_q: int, length: int) -> torch.Tensor:
    """Kernel ``h`` of length ``length`` with ``(h * x)_i = sum_j c_{j-i} x_j``.

    ``h[s mod length] = c_{-s}``: ``h = [c_0, c_{-1}, ..., c_{-(n_q-1)}, 0, ..., 0,
    c_{n_k-1}, ..., c_1]`` (the circulant embedding of the Toeplitz matrix).
    """
    head = coeffs[..., :n_q].flip(-1)
    tail = coeffs[..., n_q:].flip(-1)
    pad = length - coeffs.shape[-1]
    zeros = coeffs.new_zeros((*coeffs.shape[:-1], pad))
    return torch.cat((head, zeros, tail), dim=-1)


def kernel_grad_to_coeffs(dh: torch.Tensor, n_q: int, n_k: int) -> torch.Tensor:
    """Adjoint of :func:`circulant_kernel`: gradient w.r.t. ``h`` -> w.r.t. ``coeffs``."""
    length = dh.shape[-1]
    head = dh[..., :n_q].flip(-1)
    tail = dh[..., length - (n_k - 1) :].flip(-1) if n_k > 1 else dh[..., :0]
    return torch.cat((head, tail), dim=-1)


#: Fewest lines transformed together: pocketfft vectorises over several lines, and
#: a single long line runs several times slower per element (see docs/krpe.md).
MIN_LINES = 8


def lines_per_block(length: int, channels: int, block_bytes: int, itemsize: int) -> int:
    """Channels transformed together: their half-spectra fit ``block_bytes`` (at least :data:`MIN_LINES`)."""
    per_line = (length // 2 + 1) * 2 * itemsize
    return max(1, min(channels, max(MIN_LINES, block_bytes // per_line)))


def even_ranges(total: int, most: int) -> list[tuple[int, int]]:
    """Split ``range(total)`` into near-equal ranges of at most ``most`` (no short tail)."""
    parts = -(-total // most)
    edges = [round(i * total / parts) for i in range(parts + 1)]
    return [(edges[i], edges[i + 1]) for i in range(parts)]


class ToeplitzFFT(torch.autograd.Function):
    """``y = C x`` by FFT; backward recomputes spectra (memory linear in n).

    Inputs are flattened: ``coeffs (G, n_q + n_k - 1)``, ``x (G, n_k, channels)``.
    Each slice is transposed to channel-major ``(channels, n)`` so the transforms
    run along contiguous memory, and blocks of lines sized by ``block_bytes``
    (kept in cache) are transformed in turn: forward 2 transforms per block,
    backward 2 (``dx``) plus 1 (``x``'s spectrum, recomputed) for ``dcoeffs``.

    ``scale`` (a 0-dim tensor, not differentiated) multiplies the result as each block is
    written out, and the gradients likewise: ``y = scale * C x`` with no pass over ``y`` of its own.
    ``probe`` (a list, or None): forward appends the sum of squares of ``x`` (the square of its
    2-norm), each block's read while it is in cache (the input checks of :func:`toeplitz_matmul`,
    :func:`_result_bounded`).
    """

    @staticmethod
    def forward(ctx, coeffs: torch.Tensor, x: torch.Tensor, n_q: int, block_bytes: int,  # type: ignore[override]
                scale: torch.Tensor, probe: list | None = None):
        G, n_k, channels = x.shape
        length = next_fast_len(n_q + n_k - 1)
        ranges = even_ranges(channels, lines_per_block(length, channels, block_bytes, x.element_size()))
        hf = torch.fft.rfft(circulant_kernel(coeffs, n_q, length), dim=-1)
        outT = x.new_empty((G, channels, n_q))
        # A block's lines are gathered from x into ``stage`` (row-major, contiguous: x's rows are
        # read in order) and transposed from there into the head of ``padded``, whose zero tail is
        # the transform's padding. Copying x[g, :, a:b].T into ``padded`` directly reads x with a
        # stride of a whole row per element, which costs 5x more than the two copies (it was 40 %
        # of the call at n = 8,192 with 256 channels). The transforms allocate their own outputs
        # (``out=`` would only add a copy: torch computes the transform and copies it there), freed
        # block by block, so the allocator hands the next block the same memory.
        lines = max(b - a for a, b in ranges)
        _prime_allocator(4 * lines * (length + 2) * x.element_size(), x.device)  # (two blocks' transform outputs)
        padded = x.new_zeros((lines, length))
        direct = x.stride(-2) == 1  # x already channel-major (a transposed tensor): its rows are the lines
        stage = None if direct else x.new_empty(n_k * lines)
        # one slot per block for its norm, allocated before the loop: a small allocation between the
        # transforms' would move their buffers, which alone changed the call's time by 4-5 %
        norms = x.new_empty(G * len(ranges)) if probe is not None else None
        for g in range(G):
            for k, (a, b) in enumerate(ranges):
                w = b - a
                head = padded[:w, :n_k]
                if direct:
                    block = head.copy_(x[g, :, a:b].T)
                else:
                    block = stage[: n_k * w].view(n_k, w).copy_(x[g, :, a:b])
                    head.copy_(block.T)
                if norms is not None:  # the block's 2-norm, read while it is in cache (see toeplitz_matmul)
                    flat = padded[:w].view(-1) if direct else block.view(-1)  # (direct: with the zero tail)
                    # (torch's own reduction, not a BLAS dot: a first call would pay the BLAS library's setup)
                    torch.linalg.vector_norm(flat, out=norms[g * len(ranges) + k])
                xf = torch.fft.rfft(padded[:w], dim=-1)
                xf.mul_(hf[g])
                yb = torch.fft.irfft(xf, n=length, dim=-1)
                del xf
                torch.mul(yb[:, :n_q], scale, out=outT[g, a:b])
                del yb
        if norms is not None:
            probe.append(float(torch.linalg.vector_norm(norms)) ** 2)
        ctx.save_for_backward(coeffs, x, scale)
        ctx.n_q, ctx.length, ctx.ranges = n_q, length, ranges
        return outT.transpose(1, 2)

    @staticmethod
    def backward(ctx, dy: torch.Tensor):  # type: ignore[override]
        coeffs, x, scale = ctx.saved_tensors
        n_q, length, ranges = ctx.n_q, ctx.length, ctx.ranges
        G, n_k, channels = x.shape
        hf = torch.fft.rfft(circulant_kernel(coeffs, n_q, length), dim=-1)
        need_x, need_c = ctx.needs_input_grad[1], ctx.needs_input_grad[0]
        dxT = x.new_empty((G, channels, n_k)) if need_x else None
        cross = hf.new_zeros(hf.shape) if need_c else None
        for g in range(G):
            dyT = dy[g].T.contiguous()
            xT = x[g].T.contiguous() if need_c else None
            hgc = hf[g].conj()
            for a, b in ranges:
                yf = torch.fft.rfft(dyT[a:b], n=length, dim=-1)
                if need_c:
                    xf = torch.fft.rfft(xT[a:b], n=length, dim=-1)
                    cross[g] += xf.conj_physical_().mul_(yf).sum(0)
                    del xf
                if need_x:
                    yf.mul_(hgc)
                    torch.mul(torch.fft.irfft(yf, n=length, dim=-1)[:, :n_k], scale, out=dxT[g, a:b])
        dcoeffs = None
        if need_c:
            dcoeffs = kernel_grad_to_coeffs(torch.fft.irfft(cross, n=length, dim=-1), n_q, n_k) * scale
        return dcoeffs, None if dxT is None else dxT.transpose(1, 2), None, None, None, None


def toeplitz_matmul(
    coeffs: torch.Tensor,
    x: torch.Tensor,
    causal: bool = False,
    *,
    n_out: int | None = None,
    method: str = "auto",
    block_bytes: int = DEFAULT_BLOCK_BYTES,
    check_inputs: bool = True,
) -> torch.Tensor:
    """``y_i = sum_j c_{j-i} x_j`` (``j <= i`` only if ``causal``).

    Args:
        coeffs: ``(..., n_out + n - 1)`` coefficients of offsets ``-(n_out-1)..n-1``;
            leading dims broadcast against those of ``x`` (e.g. ``(heads, 2n-1)``
            against ``(batch, heads, n, channels)``).
        x: ``(..., n, channels)``.
        causal: keep only ``j <= i`` (requires ``n_out == n``).
        n_out: number of outputs (default ``n``).
        method: ``"fft"``, ``"direct"`` (materialised matrix) or ``"auto"``
            (direct below :data:`TOEPLITZ_DIRECT_MAX_N` outputs+inputs, else FFT).
        block_bytes: bound on the spectra held at once by the FFT path (bytes, >= 1).
        check_inputs: check that ``coeffs`` and ``x`` are finite and that the result
            did not overflow (a pass over each; pass False in hot loops whose inputs are
            known to be finite).

    Returns:
        ``(..., n_out, channels)`` in the common dtype of ``coeffs`` and ``x`` (computed in
        float32 when that dtype is float16 or bfloat16). The coefficients are divided
        by a power of two near their largest magnitude before the product and the
        result multiplied back (exact), so coefficients near the dtype's maximum do
        not overflow the FFT's intermediate sums.

    Raises:
        ValueError: bad shapes (the message names the argument), NaN/inf inputs or a
            result beyond the dtype's range (when ``check_inputs``).
    """
    check_tensor("x", x)
    check_floating("x", x)
    if x.dim() < 2:
        raise ValueError(f"x must have shape (..., n, channels), got {tuple(x.shape)}")
    n = x.shape[-2]
    n_q = n if n_out is None else check_positive_int("n_out", n_out)
    check_coeffs(coeffs, n_q, n)
    check_choice("method", method, METHODS)
    if causal and n_q != n:
        raise ValueError(
            f"causal=True needs equal query and key lengths (n_out == n), got n_out={n_q}, n={n}"
        )
    if n == 0:
        raise ValueError("x must have at least one position (n >= 1), got n=0")
    check_positive_int("block_bytes", block_bytes)
    try:
        batch = broadcast_shape(coeffs.shape[:-1], x.shape[:-2])
    except RuntimeError:
        raise ValueError(
            f"coeffs {tuple(coeffs.shape)} and x {tuple(x.shape)} have leading dims that do not broadcast "
            f"({tuple(coeffs.shape[:-1])} against {tuple(x.shape[:-2])})"
        ) from None
    if method == "auto":
        method = "direct" if n_q + n <= 2 * TOEPLITZ_DIRECT_MAX_N else "fft"
    if 0 in batch or x.shape[-1] == 0:
        method = "direct"  # an empty product (no channels, or an empty batch): nothing to transform
    out_dtype = torch.promote_types(coeffs.dtype, x.dtype)
    # no half-precision FFT on CPU: float16 / bfloat16 are computed in float32 and cast back
    dtype = torch.float32 if out_dtype in (torch.float16, torch.bfloat16) else out_dtype
    # the FFT path checks x block by block while each block is in cache, and the sum of squares it
    # reads bounds the result (no pass over x or over the result of their own): see _result_bounded
    fused = (check_inputs and method == "fft" and not _compiling()
             and _fused_checks_pay(n_q, n, x.shape[-1], dtype, block_bytes))
    if check_inputs:
        check_finite("coeffs", coeffs)
        if fused:
            check_has_data("x", x)
        else:
            check_finite("x", x)
    x_given = x
    coeffs, x = coeffs.to(dtype), x.to(dtype)
    if causal:
        coeffs = causal_coeffs(coeffs, n_q)
    scale = _pow2_scale(coeffs)
    coeffs = coeffs / scale
    probe: list | None = [] if fused else None
    if method == "direct":
        y = (toeplitz_dense(coeffs, n_q, n) @ x) * scale
    else:
        c = coeffs.expand(*batch, coeffs.shape[-1]).reshape(-1, coeffs.shape[-1])
        xb = x.expand(*batch, *x.shape[-2:]).reshape(-1, *x.shape[-2:])
        y = ToeplitzFFT.apply(c, xb, n_q, block_bytes, scale, probe).reshape(*batch, n_q, x.shape[-1])
    y = y.to(out_dtype)
    result_safe = False
    if probe:
        result_safe = _result_bounded(probe[0], n, next_fast_len(n_q + n - 1), float(scale), dtype, out_dtype)
        if not result_safe:
            check_finite("x", x_given)  # NaN / inf in x raises here, naming it
    if check_inputs and not _compiling() and not result_safe and not all_finite(y):
        raise ValueError(f"toeplitz_matmul: the result overflows {out_dtype} although coeffs and x are finite; "
                         "compute in float64 or rescale the inputs")
    return y


def _result_bounded(squares: float, n: int, length: int, scale: float, dtype: torch.dtype,
                    out_dtype: torch.dtype) -> bool:
    """Whether ``x`` is finite and no value of the FFT path can overflow, from ``squares`` (the sum of x²).

    A finite sum of squares proves every entry of ``x`` finite (a NaN or an infinity makes it NaN or
    infinite; finite entries whose squares overflow make it infinite too, and are then checked one by
    one). It also bounds every line: ``sum |x_j| <= A = sqrt(n * squares)`` (Cauchy-Schwarz). Every
    value the transforms compute is a partial discrete Fourier sum of their input, or the sum of two,
    so at most twice the input's sum of magnitudes: the spectrum of a line at most ``2A``; the
    kernel's at most ``2L`` (``L`` coefficients below 2 after the power-of-two rescaling); their
    product at most ``4AL``; the inverse transform's values, before its ``1/L``, at most
    ``2 (L/2 + 1) 4AL <= 8AL^2``; the result ``scale`` times its values after ``1/L``. Below the
    dtype's maximum with a margin of 2 more, nothing overflows, and the result's own pass is skipped.
    """
    if not math.isfinite(squares):
        return False
    bound = 16.0 * math.sqrt(n * squares) * float(length) ** 2 * max(1.0, scale)
    return bound < min(torch.finfo(dtype).max, torch.finfo(out_dtype).max)


#: The FFT path of :func:`toeplitz_matmul` checks ``x`` by the sum of squares of each block, read
#: while the block is in cache (:func:`_result_bounded`), when a block holds at least this many
#: bytes of ``x`` on average; smaller blocks (few channels) are checked by one reduction over each
#: tensor, where a reduction per block would cost more in calls than it saves in reading.
FUSED_CHECK_MIN_BYTES = 64 * 2**10


def _fused_checks_pay(n_q: int, n: int, channels: int, dtype: torch.dtype, block_bytes: int) -> bool:
    """Whether a block of the FFT path holds at least :data:`FUSED_CHECK_MIN_BYTES` of ``x`` on average."""
    length = next_fast_len(n_q + n - 1)
    itemsize = torch.finfo(dtype).bits // 8
    ranges = even_ranges(channels, lines_per_block(length, channels, block_bytes, itemsize))
    return channels * n * itemsize >= FUSED_CHECK_MIN_BYTES * len(ranges)


def _pow2_scale(x: torch.Tensor) -> torch.Tensor:
    """Power of two just below ``max |x|`` (1 when ``x`` is all zero), detached: dividing by it is exact.

    ``max |x|`` is read from the extremes of ``x`` (one reduction, no ``|x|`` temporary).
    """
    if x.numel() == 0:
        return torch.ones((), dtype=x.dtype, device=x.device)
    lo, hi = torch.aminmax(x.detach())
    top = torch.maximum(hi, -lo)
    _, exponent = torch.frexp(torch.where(top > 0, top, torch.ones_like(top)))
    return torch.ldexp(torch.ones_like(top), exponent - 1)
