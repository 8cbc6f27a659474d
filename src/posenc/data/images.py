"""Images: the two photographs shipped with scikit-learn, and user image files.

scikit-learn's ``load_sample_images`` ships ``china.jpg`` and ``flower.jpg``
(427 x 640 RGB) inside the package: no download is ever made.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch

from posenc._checks import check_choice, check_positive_int

SAMPLE_IMAGES = ("china", "flower")


def _to_tensor(img, size: int | None, grayscale: bool) -> torch.Tensor:
    from PIL import Image

    img = img.convert("L" if grayscale else "RGB")
    if size is not None:
        # Centre-crop to a square, then resample (Lanczos) to size x size.
        w, h = img.size
        s = min(w, h)
        left, top = (w - s) // 2, (h - s) // 2
        img = img.crop((left, top, left + s, top + s)).resize((size, size), Image.Resampling.LANCZOS)
    arr = np.asarray(img, dtype=np.float64) / 255.0
    if arr.ndim == 2:
        arr = arr[:, :, None]
    return torch.from_numpy(arr.copy())


def sample_image(name: str = "china", size: int | None = 256, grayscale: bool = False) -> torch.Tensor:
    """One of scikit-learn's sample photographs as ``(H, W, C)`` float64 in ``[0, 1]``.

    Args:
        name: ``"china"`` or ``"flower"``.
        size: centre-crop to a square and resize to ``size x size`` (None: keep 427 x 640).
        grayscale: one luminance channel instead of RGB.
    """
    check_choice("name", name, SAMPLE_IMAGES)
    if size is not None:
        check_positive_int("size", size, minimum=2)
    from PIL import Image
    from sklearn.datasets import load_sample_images

    paths = {Path(p).stem: p for p in load_sample_images().filenames}
    with Image.open(paths[name]) as img:
        return _to_tensor(img, size, grayscale)


def load_image(path: str | os.PathLike, size: int | None = None, grayscale: bool = False) -> torch.Tensor:
    """Read a PNG/JPEG (anything Pillow reads) as ``(H, W, C)`` float64 in ``[0, 1]``.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: the file is not a readable image.
    """
    from PIL import Image, UnidentifiedImageError

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"image: no such file {str(path)!r}")
    if size is not None:
        check_positive_int("size", size, minimum=2)
    try:
        with Image.open(path) as img:
            img.load()
            return _to_tensor(img, size, grayscale)
    except (UnidentifiedImageError, OSError) as err:
        raise ValueError(f"image: {str(path)!r} is not a readable image ({err.__class__.__name__})") from None


def save_image(path: str | os.PathLike, image: torch.Tensor) -> None:
    """Write an ``(H, W, C)`` or ``(H, W)`` image with values in ``[0, 1]`` as PNG (clipped)."""
    from PIL import Image

    arr = image.detach().to(torch.float64).clamp(0.0, 1.0).cpu().numpy()
    if arr.ndim == 3 and arr.shape[2] == 1:
        arr = arr[:, :, 0]
    if arr.ndim not in (2, 3):
        raise ValueError(f"image must have shape (H, W) or (H, W, C), got {tuple(image.shape)}")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.round(arr * 255.0).astype(np.uint8)).save(path, format="PNG")
