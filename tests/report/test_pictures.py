"""The CLI's pictures: fit-image --compare (original | reconstruction | error, PSNR in the title)
and analyze --plot (zoomed on the kernel's width, stable rank and width written on it)."""

import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.image as mpimg  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from posenc.analysis import distance_preservation, embedding_matrix, similarity_profile, stable_rank  # noqa: E402
from posenc.cli import app  # noqa: E402
from posenc.encodings import create_encoding  # noqa: E402
from posenc.report.pictures import analysis_figure, compare_figure  # noqa: E402
from posenc.report.registry import SECTIONS  # noqa: E402

runner = CliRunner()


@pytest.fixture(autouse=True)
def _close():
    yield
    plt.close("all")


def _texts(fig) -> str:
    parts = [t.get_text() for t in fig.texts]
    for ax in fig.axes:
        parts += [ax.get_title()] + [t.get_text() for t in ax.texts]
    return "\n".join(parts)


def test_compare_figure_three_panels_and_psnr():
    g = torch.Generator().manual_seed(0)
    a = torch.rand(8, 10, 3, generator=g, dtype=torch.float64)
    b = a + 0.01 * torch.randn(8, 10, 3, generator=g, dtype=torch.float64)
    fig = compare_figure(a, b, train_psnr=40.0, test_psnr=38.5, title="gaussian (mlp)")
    images = [ax for ax in fig.axes if ax.get_images()]
    assert [ax.get_title() for ax in images][:2] == ["original", "reconstruction"]
    assert len(images) == 3 and images[2].get_title().startswith("|error|")
    assert images[2].get_images()[0].get_array().shape == (8, 10)  # error map, one value per pixel
    expected = -10 * math.log10(float(((b - a) ** 2).mean()))
    text = _texts(fig)
    assert f"PSNR {expected:.2f} dB" in text and "test (held-out pixels) 38.50 dB" in text
    with pytest.raises(ValueError, match="must match"):
        compare_figure(a, b[:4])
    with pytest.raises(ValueError, match="original"):
        compare_figure(torch.rand(4, 4, 2), torch.rand(4, 4, 2))
    with pytest.raises(TypeError, match="reconstruction"):
        compare_figure(a, b.numpy())


def test_analysis_figure_zooms_on_the_width_and_writes_the_numbers():
    enc = create_encoding("gaussian", in_dim=1, num_features=128, sigma=0.01)
    psi = embedding_matrix(enc, 256)
    d, s = similarity_profile(enc, 256)
    w, sr = distance_preservation(d, s, 0.1), stable_rank(psi)
    fig = analysis_figure(d, s, torch.linalg.svdvals(psi), stable_rank=sr, dp_width=w, threshold=0.1)
    text = _texts(fig)
    assert f"stable rank = {sr:.4g}" in text and f"distance-preservation width = {w:.4g}" in text
    lo, hi = fig.axes[0].get_xlim()
    assert math.isclose(hi, 4 * w, rel_tol=1e-6) and math.isclose(lo, -4 * w, rel_tol=1e-6)
    assert hi < 0.5 * float(d.max())  # zoomed, not the whole domain
    # every point inside the zoom window is within the y-limits
    ylo, yhi = fig.axes[0].get_ylim()
    inside = s[(d >= lo) & (d <= hi)]
    assert float(inside.min()) >= ylo and float(inside.max()) <= yhi
    with pytest.raises(ValueError, match="zoom"):
        analysis_figure(d, s, torch.ones(3), stable_rank=sr, dp_width=w, threshold=0.1, zoom=0)
    with pytest.raises(ValueError, match="displacement"):
        analysis_figure(d[:1], s[:1], torch.ones(3), stable_rank=sr, dp_width=w, threshold=0.1)


def test_cli_fit_image_compare(tmp_path):
    out = tmp_path / "cmp.png"
    res = runner.invoke(app, ["fit-image", "--size", "8", "--model", "lstsq", "--save", str(out), "--compare",
                              "--json"])
    assert res.exit_code == 0, res.stderr
    img = mpimg.imread(out)
    h, w = img.shape[:2]
    assert w > 2.2 * h  # three panels side by side
    plain = tmp_path / "plain.png"
    res = runner.invoke(app, ["fit-image", "--size", "8", "--model", "lstsq", "--save", str(plain), "--json"])
    assert res.exit_code == 0 and mpimg.imread(plain).shape[:2] == (8, 8)  # without --compare: the image only
    res = runner.invoke(app, ["fit-image", "--size", "8", "--compare"])
    assert res.exit_code == 2 and res.stderr.strip().startswith("error:") and "--save" in res.stderr


def test_cli_analyze_plot(tmp_path):
    out = tmp_path / "a.png"
    res = runner.invoke(app, ["analyze", "--num-points", "128", "--plot", str(out), "--json"])
    assert res.exit_code == 0, res.stderr
    assert mpimg.imread(out).shape[1] > 500


def test_help_lists_the_sections_and_six_methods():
    res = runner.invoke(app, ["reproduce", "--help"], env={"COLUMNS": "200"})
    assert res.exit_code == 0
    assert all(name in res.stdout for name in SECTIONS)
    res = runner.invoke(app, ["--help"], env={"COLUMNS": "200"})
    assert "six published methods" in res.stdout


def test_analysis_figure_without_zoom_and_grayscale_compare():
    d = torch.linspace(-0.5, 0.5, 65, dtype=torch.float64)
    s = torch.cos(torch.pi * d)  # a width that spans most of the domain: nothing to zoom on
    fig = analysis_figure(d, s, torch.tensor([2.0, 1.0, 0.5]), stable_rank=1.3, dp_width=0.45, threshold=0.1)
    lo, hi = fig.axes[0].get_xlim()
    assert lo <= -0.5 and hi >= 0.5  # the whole profile
    fig = analysis_figure(d, s, torch.tensor([2.0, 1.0]), stable_rank=1.2, dp_width=float("nan"), threshold=0.1)
    assert "distance-preservation width = nan" in _texts(fig)
    a = torch.rand(6, 6, dtype=torch.float64)
    fig = compare_figure(a, a.clone())  # a perfect fit: PSNR finite, not an error
    assert "exact on all pixels (PSNR ∞)" in _texts(fig)
