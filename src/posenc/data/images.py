"""Images: the two photographs shipped with scikit-learn, and user image files.

scikit-learn's ``load_sample_images`` ships ``china.jpg`` and ``flower.jpg``
(427 x 640 RGB) inside the package: no download is ever made.

How each Pillow mode becomes ``[0, 1]`` (:func:`load_image`):

* ``"1"`` (bilevel): 0 or 1.
* ``"L"``, ``"P"``, ``"RGB"``, ``"CMYK"``, ``"YCbCr"``, ``"HSV"``, ``"LAB"`` (8 bits per
  channel): converted by Pillow to ``"L"``/``"RGB"`` (palette looked up; CMYK and
  the others by Pillow's formulas, no colour management), then divided by 255.
* ``"I;16"``, ``"I;16L"``, ``"I;16B"``, ``"I;16N"`` (16-bit): divided by 65535.
* ``"I"`` (32-bit signed int, what Pillow uses for 16-bit files in some formats):
  divided by 65535 when every value is in ``[0, 65535]``; other ranges are
  refused (there is no agreed white level for 32-bit integer pixels).
* ``"F"`` (32-bit float): taken as is when every value is finite and in
  ``[0, 1]``; otherwise refused.
* Alpha (``"LA"``, ``"La"``, ``"PA"``, ``"RGBA"``, ``"RGBa"``, palette transparency):
  **discarded** -- the stored colour of every pixel is kept (premultiplied
  modes are un-premultiplied first), transparent pixels included. Composite
  the image yourself first if you want it over a background.

Grayscale (``grayscale=True``) of a colour image is ITU-R 601-2 luma
(``0.299 R + 0.587 G + 0.114 B``, Pillow's ``"L"``); a single-channel image
read with ``grayscale=False`` has its channel repeated three times.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np
import torch

from posenc._checks import check_choice, check_positive_int
from posenc._resources import check_footprint

SAMPLE_IMAGES = ("china", "flower")

#: Suffixes :func:`save_image` writes, and the Pillow format of each.
SAVE_FORMATS = {".png": "PNG", ".jpg": "JPEG", ".jpeg": "JPEG", ".bmp": "BMP", ".tif": "TIFF",
                ".tiff": "TIFF", ".webp": "WEBP"}

_SIXTEEN_BIT = ("I;16", "I;16L", "I;16B", "I;16N")
_ALPHA = {"LA": "L", "La": "L", "PA": "RGB", "RGBA": "RGB", "RGBa": "RGB"}


def _crop_box(w: int, h: int) -> tuple[int, int, int, int]:
    s = min(w, h)
    left, top = (w - s) // 2, (h - s) // 2
    return left, top, left + s, top + s


def _eight_bit(img, size: int | None, grayscale: bool) -> np.ndarray:
    from PIL import Image

    if img.mode in ("La", "RGBa"):
        img = img.convert(img.mode.upper())  # un-premultiply before dropping alpha
    if img.mode == "P" and "transparency" in img.info:
        img = img.convert("RGBA")
    img = img.convert("L" if grayscale else "RGB")
    if size is not None:
        img = img.crop(_crop_box(*img.size)).resize((size, size), Image.Resampling.LANCZOS)
    return np.asarray(img, dtype=np.float64) / 255.0


def _high_depth(img, path: str, size: int | None, grayscale: bool) -> np.ndarray:
    """16-bit / 32-bit int / float single-channel images, resampled in float."""
    from PIL import Image

    if img.mode in _SIXTEEN_BIT:
        arr = np.asarray(img).astype(np.float64) / 65535.0
    elif img.mode == "I":
        raw = np.asarray(img, dtype=np.int64)
        lo, hi = (int(raw.min()), int(raw.max())) if raw.size else (0, 0)
        if lo < 0 or hi > 65535:
            raise ValueError(
                f"image: {path} is a 32-bit integer image with values in [{lo}, {hi}]; only [0, 65535] "
                "(16-bit data) has a known white level: rescale it to 16-bit or float in [0, 1]"
            )
        arr = raw.astype(np.float64) / 65535.0
    else:  # "F"
        arr = np.asarray(img, dtype=np.float64)
        if not np.isfinite(arr).all():
            raise ValueError(f"image: {path} is a float image with {int((~np.isfinite(arr)).sum())} NaN/inf pixel(s)")
        lo, hi = (float(arr.min()), float(arr.max())) if arr.size else (0.0, 0.0)
        if lo < 0.0 or hi > 1.0:
            raise ValueError(f"image: {path} is a float image with values in [{lo:.6g}, {hi:.6g}]; "
                             "float images must lie in [0, 1]")
    if size is not None:
        left, top, right, bottom = _crop_box(arr.shape[1], arr.shape[0])
        f = Image.fromarray(arr[top:bottom, left:right].astype(np.float32), mode="F")
        arr = np.clip(np.asarray(f.resize((size, size), Image.Resampling.LANCZOS), dtype=np.float64), 0.0, 1.0)
    if not grayscale:
        arr = np.repeat(arr[:, :, None], 3, axis=2)
    return arr


def _to_tensor(img, size: int | None, grayscale: bool, path: str = "the image") -> torch.Tensor:
    # decoded and resized pixels (Pillow's bytes, float64 per channel and the crop's copies)
    w, h = img.size
    pixels = float(w) * h + (float(size) * size if size is not None else 0.0)
    check_footprint(3 * 3 * 8.0 * pixels, f"size={size}" if size is not None else f"the {w}x{h} image",
                    f"reading {path}")
    if img.mode == "1":
        img = img.convert("L")  # 0 / 255: exact after the division
    if img.mode in _SIXTEEN_BIT or img.mode in ("I", "F"):
        arr = _high_depth(img, path, size, grayscale)
    else:
        if img.mode not in _ALPHA and img.mode not in ("L", "P", "RGB", "CMYK", "YCbCr", "HSV", "LAB", "RGBX"):
            raise ValueError(f"image: {path} has Pillow mode {img.mode!r}, which posenc does not read; "
                             "convert it to 8- or 16-bit grayscale or RGB")
        try:
            arr = _eight_bit(img, size, grayscale)
        except ValueError as err:  # a conversion Pillow does not support
            raise ValueError(f"image: {path} has Pillow mode {img.mode!r} that cannot be converted ({err})") from None
    if arr.ndim == 2:
        arr = arr[:, :, None]
    return torch.from_numpy(np.ascontiguousarray(arr))


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


def image_size(path: str | os.PathLike) -> tuple[int, int]:
    """``(width, height)`` from the file's header, without decoding the pixels.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: not a readable image, or larger than Pillow's decompression-bomb limit.
    """
    from PIL import Image, UnidentifiedImageError

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"image: no such file {str(path)!r}")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(path) as img:
                return img.size
    except Image.DecompressionBombError as err:
        raise ValueError(f"image: {str(path)!r} is refused as a decompression bomb ({err})") from None
    except (UnidentifiedImageError, OSError) as err:
        raise ValueError(f"image: {str(path)!r} is not a readable image ({err.__class__.__name__})") from None


def load_image(path: str | os.PathLike, size: int | None = None, grayscale: bool = False) -> torch.Tensor:
    """Read an image file (anything Pillow reads) as ``(H, W, C)`` float64 in ``[0, 1]``.

    Every mode is converted by its bit depth (see the module docstring): 8-bit
    modes by 255, 16-bit by 65535, float as is; alpha is discarded.

    Args:
        path: the file.
        size: centre-crop to a square and resize to ``size x size`` (Lanczos; None: keep).
        grayscale: one luminance channel (``C = 1``) instead of RGB (``C = 3``).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: the file is not a readable image, exceeds Pillow's
            decompression-bomb limit (``PIL.Image.MAX_IMAGE_PIXELS``), or has a
            mode or value range with no defined mapping to ``[0, 1]``.
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
            return _to_tensor(img, size, grayscale, repr(str(path)))
    except Image.DecompressionBombError as err:
        raise ValueError(f"image: {str(path)!r} is refused as a decompression bomb ({err})") from None
    except (UnidentifiedImageError, OSError) as err:
        raise ValueError(f"image: {str(path)!r} is not a readable image ({err.__class__.__name__})") from None


def save_image(path: str | os.PathLike, image: torch.Tensor) -> None:
    """Write an ``(H, W, C)`` or ``(H, W)`` image with values in ``[0, 1]`` (clipped), 8 bits per channel.

    The format follows the suffix (``.png``, ``.jpg``/``.jpeg``, ``.bmp``,
    ``.tif``/``.tiff``, ``.webp``); other suffixes are refused.

    Raises:
        ValueError: unknown suffix, bad shape, or NaN values.
    """
    from PIL import Image

    path = Path(path)
    fmt = SAVE_FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise ValueError(f"path must end in one of {', '.join(sorted(SAVE_FORMATS))} (the format to write), "
                         f"got {str(path)!r}")
    arr = image.detach().to(torch.float64).cpu()
    if arr.isnan().any():
        raise ValueError("image contains NaN values")
    arr = arr.clamp(0.0, 1.0).numpy()
    if arr.ndim == 3 and arr.shape[2] == 1:
        arr = arr[:, :, 0]
    if arr.ndim not in (2, 3) or (arr.ndim == 3 and arr.shape[2] not in (3, 4)):
        raise ValueError(f"image must have shape (H, W), (H, W, 1), (H, W, 3) or (H, W, 4), got {tuple(image.shape)}")
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.round(arr * 255.0).astype(np.uint8)).save(path, format=fmt)
