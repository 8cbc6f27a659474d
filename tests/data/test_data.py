"""Embedded data and user files: shapes, ranges, and clear errors for bad files."""

import numpy as np
import pytest
import torch

from posenc.data.images import load_image, sample_image, save_image
from posenc.data.signals import image_rows, load_signal, synthetic_signal


def test_sample_images_are_embedded_and_in_range():
    img = sample_image("flower", size=32)
    assert img.shape == (32, 32, 3) and img.min() >= 0 and img.max() <= 1
    assert sample_image("china", size=16, grayscale=True).shape == (16, 16, 1)
    with pytest.raises(ValueError, match="name"):
        sample_image("lena")


def test_image_rows_and_synthetic_signals():
    rows = image_rows(3, 64, seed=1)
    assert rows.shape == (3, 64) and not torch.equal(rows[0], rows[1])
    assert torch.equal(rows, image_rows(3, 64, seed=1))
    for kind in ("multitone", "steps", "chirp"):
        s = synthetic_signal(kind, 100, seed=2)
        assert s.shape == (100,) and s.min() == 0 and s.max() == 1
    with pytest.raises(ValueError, match="kind"):
        synthetic_signal("noise")
    with pytest.raises(ValueError, match="num_rows"):
        image_rows(100, 64)


def test_load_signal_npy_and_csv(tmp_path):
    sig = np.linspace(0.1, 0.9, 20)
    np.save(tmp_path / "s.npy", sig)
    np.savetxt(tmp_path / "s.csv", sig, delimiter=",")
    a, ra = load_signal(tmp_path / "s.npy")
    b, rb = load_signal(tmp_path / "s.csv")
    np.testing.assert_allclose(a.numpy(), sig)
    np.testing.assert_allclose(b.numpy(), sig)
    assert not ra and not rb
    np.save(tmp_path / "big.npy", sig * 10)
    c, rc = load_signal(tmp_path / "big.npy")
    assert rc and c.min() == 0 and c.max() == 1


def test_load_signal_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="signal"):
        load_signal(tmp_path / "missing.npy")
    np.save(tmp_path / "nan.npy", np.array([0.1, np.nan, 0.3, 0.4, 0.5]))
    with pytest.raises(ValueError, match="NaN"):
        load_signal(tmp_path / "nan.npy")
    np.save(tmp_path / "two.npy", np.zeros((3, 3)))
    with pytest.raises(ValueError, match="1-D"):
        load_signal(tmp_path / "two.npy")
    (tmp_path / "junk.csv").write_text("a,b\nc,d\n")
    with pytest.raises(ValueError, match="cannot read"):
        load_signal(tmp_path / "junk.csv")
    (tmp_path / "s.wav").write_bytes(b"RIFF")
    with pytest.raises(ValueError, match=".npy or .csv"):
        load_signal(tmp_path / "s.wav")


def test_image_roundtrip_and_not_an_image(tmp_path):
    img = torch.rand(10, 12, 3, dtype=torch.float64)
    save_image(tmp_path / "a.png", img)
    back = load_image(tmp_path / "a.png")
    assert back.shape == (10, 12, 3)
    assert (back - img).abs().max() <= 0.5 / 255 + 1e-9
    (tmp_path / "fake.png").write_text("not an image")
    with pytest.raises(ValueError, match="not a readable image"):
        load_image(tmp_path / "fake.png")
    with pytest.raises(FileNotFoundError, match="image"):
        load_image(tmp_path / "none.png")
