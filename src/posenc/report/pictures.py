"""Pictures drawn by the CLI: an image fit beside its original, and an encoding's analysis.

``posenc fit-image --save PATH --compare`` writes :func:`compare_figure`;
``posenc analyze --plot PATH`` writes :func:`analysis_figure`. Both return a matplotlib
figure; :func:`posenc.report.plotting.png_bytes` renders it.
"""

from __future__ import annotations

import math
from typing import Any

import torch


def _hwc(image: torch.Tensor, name: str) -> torch.Tensor:
    if not isinstance(image, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(image).__name__}")
    if image.ndim == 2:
        image = image.unsqueeze(-1)
    if image.ndim != 3 or image.shape[-1] not in (1, 3):
        raise ValueError(f"{name} must have shape (H, W), (H, W, 1) or (H, W, 3), got {tuple(image.shape)}")
    if not torch.isfinite(image).all():
        raise ValueError(f"{name} has non-finite values")
    return image.detach().to(torch.float64).cpu()


def compare_figure(original: torch.Tensor, reconstruction: torch.Tensor, *, train_psnr: float | None = None,
                   test_psnr: float | None = None, title: str = "") -> Any:
    """Original | reconstruction | absolute error, side by side, with the PSNRs in the title.

    Args:
        original: ``(H, W)`` or ``(H, W, C)`` in ``[0, 1]`` (C = 1 or 3).
        reconstruction: the same shape (values are clipped to ``[0, 1]`` for display only;
            the error panel shows ``|reconstruction - original|`` before clipping, averaged
            over channels, on its own colour scale with a colour bar).
        train_psnr, test_psnr: written in the title (dB) when given.
        title: a first title line (e.g. the encoding and model).

    Returns:
        a matplotlib figure with three image panels.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    a, b = _hwc(original, "original"), _hwc(reconstruction, "reconstruction")
    if a.shape != b.shape:
        raise ValueError(f"reconstruction has shape {tuple(b.shape)}, original {tuple(a.shape)}: they must match")
    err = (b - a).abs().mean(-1)
    mse = float(((b - a) ** 2).mean())
    fig, axes = plt.subplots(1, 3, figsize=(12, 4.4))
    gray = a.shape[-1] == 1
    for ax, img, name in ((axes[0], a, "original"), (axes[1], b.clamp(0, 1), "reconstruction")):
        ax.imshow(img[..., 0].numpy() if gray else img.numpy(), cmap="gray" if gray else None, vmin=0, vmax=1,
                  interpolation="nearest")
        ax.set_title(name)
    im = axes[2].imshow(err.numpy(), cmap="magma", vmin=0, interpolation="nearest")
    axes[2].set_title(f"|error| (max {float(err.max()):.3f})")
    fig.colorbar(im, ax=axes[2], fraction=0.046, pad=0.04)
    for ax in axes:
        ax.set_xticks([])
        ax.set_yticks([])
    psnrs = [f"PSNR {-10.0 * math.log10(mse):.2f} dB on all pixels" if mse > 0 else "exact on all pixels (PSNR ∞)"]
    if train_psnr is not None:
        psnrs.append(f"train {train_psnr:.2f} dB")
    if test_psnr is not None:
        psnrs.append(f"test (held-out pixels) {test_psnr:.2f} dB")
    fig.suptitle((title + "\n" if title else "") + ", ".join(psnrs), fontsize=10)
    fig.tight_layout()
    return fig


def analysis_figure(displacement: torch.Tensor, similarity: torch.Tensor, singular_values: torch.Tensor, *,
                    stable_rank: float, dp_width: float, threshold: float, title: str = "",
                    zoom: float = 4.0) -> Any:
    """Similarity profile zoomed on the kernel's width, and the singular-value spectrum.

    The left panel shows the similarity to the centre against displacement over
    ``± zoom × dp_width`` (the whole profile when the width is 0 or spans the domain), marks
    ``± dp_width`` and the threshold, and writes the distance-preservation width; an inset
    shows the whole profile. The right panel shows the normalised singular values and writes
    the stable rank (marked as a vertical line at its index).

    Args:
        displacement: ``(P,)`` displacements from the centre (sorted).
        similarity: ``(P,)`` similarity to the centre.
        singular_values: ``(K,)`` singular values of the embedding matrix (descending).
        stable_rank, dp_width, threshold: from :mod:`posenc.analysis`.
        title: a title (e.g. the encoding's repr).
        zoom: half-width of the zoomed window in units of ``dp_width`` (> 0).

    Returns:
        a matplotlib figure with two panels.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not (isinstance(zoom, (int, float)) and math.isfinite(zoom) and zoom > 0):
        raise ValueError(f"zoom must be a finite number > 0, got {zoom!r}")
    d = displacement.detach().to(torch.float64).cpu().reshape(-1)
    s = similarity.detach().to(torch.float64).cpu().reshape(-1)
    if d.shape != s.shape or d.numel() < 2:
        raise ValueError(f"displacement and similarity must be two (P,) tensors with P >= 2, got "
                         f"{tuple(displacement.shape)} and {tuple(similarity.shape)}")
    sv = singular_values.detach().to(torch.float64).cpu().reshape(-1)
    fig, ax = plt.subplots(1, 2, figsize=(11, 3.8))
    ax[0].plot(d.numpy(), s.numpy(), marker=".", ms=3, lw=1.2)
    ax[0].axhline(threshold, ls=":", c="gray")
    span = float(d.max() - d.min())
    step = span / max(d.numel() - 1, 1)
    zoomed = math.isfinite(dp_width) and 0 < dp_width and 2 * zoom * dp_width < span
    if zoomed:
        half = max(zoom * dp_width, 3 * step)
        ax[0].set_xlim(-half, half)
        inside = s[(d >= -half) & (d <= half)]
        lo, hi = float(inside.min()), float(inside.max())
        pad = 0.06 * max(hi - lo, 1e-6)
        ax[0].set_ylim(min(lo, threshold) - pad, max(hi, threshold) + pad)
        inset = ax[0].inset_axes([0.68, 0.55, 0.3, 0.4])
        inset.plot(d.numpy(), s.numpy(), lw=0.8)
        inset.axvspan(-half, half, color="C1", alpha=0.2)
        inset.set_title("whole profile", fontsize=6)
        inset.tick_params(labelsize=5)
    if math.isfinite(dp_width) and dp_width > 0:
        for x in (-dp_width, dp_width):
            ax[0].axvline(x, ls="--", c="C3", lw=1)
    ax[0].set_xlabel("displacement" + (f" (zoom: ± {zoom:g} widths)" if zoomed else ""))
    ax[0].set_ylabel("similarity to the centre")
    ax[0].text(0.02, 0.96, f"distance-preservation width = {dp_width:.4g}\n(similarity > {threshold:g} within ± width)",
               transform=ax[0].transAxes, fontsize=8, va="top", bbox=dict(fc="white", ec="C3", alpha=0.9))
    rel = (sv / sv[0]).numpy() if sv.numel() and float(sv[0]) > 0 else sv.numpy()
    ax[1].semilogy(range(1, len(rel) + 1), rel, lw=1.2)
    if math.isfinite(stable_rank):
        ax[1].axvline(stable_rank, ls="--", c="C3", lw=1)
    ax[1].set_xlabel("index")
    ax[1].set_ylabel("singular value / largest")
    ax[1].text(0.97, 0.95, f"stable rank = {stable_rank:.4g}\n(sum σ² / max σ²)", transform=ax[1].transAxes,
               fontsize=8, ha="right", va="top", bbox=dict(fc="white", ec="C3", alpha=0.9))
    if title:
        fig.suptitle(title, fontsize=8)
    fig.tight_layout()
    return fig
