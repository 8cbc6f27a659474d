"""Every Pillow mode is read into [0, 1] by its bit depth, or refused clearly (#10 §1)."""

import numpy as np
import pytest
import torch
from PIL import Image

from posenc.data.images import image_size, load_image, save_image

RAMP16 = (np.arange(4 * 8, dtype=np.int64).reshape(4, 8) * 2114).astype(np.uint16)  # 0 .. 65534


def _gray(x):
    return torch.from_numpy(np.asarray(x, dtype=np.float64))


@pytest.mark.parametrize("mode", ["I;16", "I;16L", "I;16B"])
def test_sixteen_bit_modes_divide_by_65535(tmp_path, mode):
    import PIL

    if mode == "I;16L" and tuple(int(v) for v in PIL.__version__.split(".")[:2]) < (11, 3):
        pytest.skip(f"Pillow {PIL.__version__} < 11.3 cannot write the I;16L TIFF this test reads back")
    raw = RAMP16.astype(">u2" if mode == "I;16B" else "<u2").tobytes()
    img = Image.frombytes(mode, (8, 4), raw)
    path = tmp_path / "a.tif"
    img.save(path) if mode != "I;16B" else img.convert("I").save(path)
    got = load_image(path, grayscale=True)[:, :, 0]
    assert torch.equal(got, _gray(RAMP16) / 65535.0)
    # colour read: the channel repeated
    rgb = load_image(path)
    assert rgb.shape == (4, 8, 3) and torch.equal(rgb[:, :, 2], got)


def test_sixteen_bit_png_is_not_clipped_to_white(tmp_path):
    Image.fromarray(RAMP16).save(tmp_path / "r.png")
    got = load_image(tmp_path / "r.png", grayscale=True)[:, :, 0]
    assert torch.equal(got, _gray(RAMP16) / 65535.0)
    assert float((got > 0.99).double().mean()) < 0.05  # was 99.6 % white


def test_int32_mode_in_16_bit_range_and_refused_outside(tmp_path):
    Image.fromarray(RAMP16.astype(np.int32)).save(tmp_path / "i.tif")
    assert Image.open(tmp_path / "i.tif").mode == "I"
    assert torch.equal(load_image(tmp_path / "i.tif", grayscale=True)[:, :, 0], _gray(RAMP16) / 65535.0)
    Image.fromarray(np.full((4, 4), 70000, np.int32)).save(tmp_path / "big.tif")
    with pytest.raises(ValueError, match=r"32-bit integer image with values in \[70000, 70000\]"):
        load_image(tmp_path / "big.tif")
    Image.fromarray(np.full((4, 4), -3, np.int32)).save(tmp_path / "neg.tif")
    with pytest.raises(ValueError, match="32-bit integer"):
        load_image(tmp_path / "neg.tif")


def test_float_mode_taken_as_is_in_unit_range_else_refused(tmp_path):
    vals = (np.arange(32, dtype=np.float32).reshape(4, 8) / 31.0).astype(np.float32)
    Image.fromarray(vals).save(tmp_path / "f.tif")
    got = load_image(tmp_path / "f.tif", grayscale=True)[:, :, 0]
    assert torch.equal(got, torch.from_numpy(vals.astype(np.float64)))  # was all black
    Image.fromarray(vals * 3).save(tmp_path / "f3.tif")
    with pytest.raises(ValueError, match=r"float images must lie in \[0, 1\]"):
        load_image(tmp_path / "f3.tif")
    bad = vals.copy()
    bad[0, 0] = np.nan
    Image.fromarray(bad).save(tmp_path / "fn.tif")
    with pytest.raises(ValueError, match="NaN/inf"):
        load_image(tmp_path / "fn.tif")


def test_float_resize_stays_in_unit_range(tmp_path):
    vals = np.zeros((16, 16), np.float32)
    vals[:, 8:] = 1.0  # a hard edge: Lanczos overshoots, we clip
    Image.fromarray(vals).save(tmp_path / "e.tif")
    got = load_image(tmp_path / "e.tif", size=8, grayscale=True)
    assert got.shape == (8, 8, 1) and float(got.min()) >= 0.0 and float(got.max()) <= 1.0
    assert float(got[0, 0, 0]) < 0.05 and float(got[0, 7, 0]) > 0.95


def test_bilevel_palette_and_eight_bit(tmp_path):
    bits = (np.arange(32).reshape(4, 8) % 3 == 0)
    Image.fromarray(bits).convert("1").save(tmp_path / "b.png")
    assert Image.open(tmp_path / "b.png").mode == "1"
    assert torch.equal(load_image(tmp_path / "b.png", grayscale=True)[:, :, 0], _gray(bits))

    pal = Image.new("P", (8, 4))
    pal.putpalette([0, 0, 0, 255, 128, 0, 10, 20, 30] + [0] * (256 * 3 - 9))
    idx = np.arange(32, dtype=np.uint8).reshape(4, 8) % 3
    pal.putdata(idx.ravel().tolist())
    pal.save(tmp_path / "p.png")
    got = load_image(tmp_path / "p.png")
    table = torch.tensor([[0, 0, 0], [255, 128, 0], [10, 20, 30]], dtype=torch.float64) / 255.0
    assert torch.equal(got, table[torch.from_numpy(idx).long()])


def test_alpha_is_discarded_colour_kept(tmp_path):
    rgba = np.zeros((4, 8, 4), np.uint8)
    rgba[..., 0], rgba[..., 1], rgba[..., 2] = 200, 100, 50
    rgba[..., 3] = np.arange(32).reshape(4, 8) * 8  # alpha varies, fully transparent at (0, 0)
    Image.fromarray(rgba, mode="RGBA").save(tmp_path / "a.png")
    got = load_image(tmp_path / "a.png")
    assert torch.equal(got, torch.tensor([200, 100, 50], dtype=torch.float64).expand(4, 8, 3) / 255.0)
    la = np.stack([np.full((4, 8), 77, np.uint8), rgba[..., 3]], axis=-1)
    Image.fromarray(la, mode="LA").save(tmp_path / "la.png")
    got = load_image(tmp_path / "la.png", grayscale=True)
    assert torch.equal(got, torch.full((4, 8, 1), 77 / 255.0, dtype=torch.float64))


def test_cmyk_follows_pillows_conversion(tmp_path):
    cmyk = Image.new("CMYK", (4, 4), (0, 255, 255, 0))  # pure red
    cmyk.save(tmp_path / "c.jpg", quality=100)
    got = load_image(tmp_path / "c.jpg")
    expect = torch.from_numpy(np.asarray(Image.open(tmp_path / "c.jpg").convert("RGB"), np.float64) / 255.0)
    assert torch.equal(got, expect)
    assert float(got[..., 0].mean()) > 0.9 and float(got[..., 1].mean()) < 0.1


def test_decompression_bomb_is_a_value_error(tmp_path, monkeypatch):
    Image.fromarray(np.zeros((64, 64), np.uint8)).save(tmp_path / "z.png")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 100)  # 64*64 > 2 * 100
    with pytest.raises(ValueError, match="decompression bomb"):
        load_image(tmp_path / "z.png")
    with pytest.raises(ValueError, match="decompression bomb"):
        image_size(tmp_path / "z.png")


def test_save_image_follows_the_suffix(tmp_path):
    img = torch.rand(8, 8, 3, generator=torch.Generator().manual_seed(0))
    for suffix, fmt in ((".png", "PNG"), (".jpg", "JPEG"), (".bmp", "BMP"), (".tiff", "TIFF")):
        save_image(tmp_path / f"o{suffix}", img)
        assert Image.open(tmp_path / f"o{suffix}").format == fmt
    with pytest.raises(ValueError, match="path must end in one of"):
        save_image(tmp_path / "o.xyz", img)
    with pytest.raises(ValueError, match="NaN"):
        save_image(tmp_path / "n.png", torch.full((4, 4), float("nan")))
