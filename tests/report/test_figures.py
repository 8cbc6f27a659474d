"""Figures a person can trust: one colour per method across a section's figures, one legend
covering every panel, nothing hidden by axes limits, validation curves where promised."""

import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from matplotlib.colors import to_rgba  # noqa: E402

from posenc.experiments import coords as coords_exp  # noqa: E402
from posenc.experiments import krpe as krpe_exp  # noqa: E402
from posenc.report import coords, gir, krpe, relative  # noqa: E402
from posenc.report.plotting import figure_legend, fit_ylim, method_colours  # noqa: E402


@pytest.fixture(autouse=True)
def _close():
    yield
    plt.close("all")


def check_figure(fig, *, one_legend: bool = True) -> dict[str, set]:
    """The rules every multi-panel figure follows; returns {label: colours used}."""
    axes = [ax for ax in fig.axes if ax.get_visible() and ax.get_label() != "<colorbar>"]
    if one_legend:
        assert len(fig.legends) == 1, "one legend for the whole figure"
        assert all(ax.get_legend() is None for ax in axes), "no per-panel legends"
        labels = [t.get_text() for t in fig.legends[0].get_texts()]
        assert len(labels) == len(set(labels)), f"a label twice in the legend: {labels}"
    colours: dict[str, set] = {}
    for ax in axes:
        lo, hi = ax.get_ylim()
        for line in ax.get_lines():
            ys = [y for y in line.get_ydata() if y is not None and math.isfinite(y)]
            if ax.get_yscale() == "log":
                ys = [y for y in ys if y > 0]
            assert all(lo <= y <= hi for y in ys), f"{line.get_label()}: values outside y-limits {lo, hi}"
            lab = line.get_label()
            if not lab.startswith("_"):
                colours.setdefault(lab, set()).add(to_rgba(line.get_color()))
    return colours


# ------------------------------------------------------------------------- helpers


def test_method_colours_fixed_by_order_and_distinct():
    order = ["a", "b", "c", "d"]
    col = method_colours(order)
    assert len(set(col.values())) == 4
    # a figure that draws a subset keeps the colours the order gives
    assert method_colours(order)["c"] == col["c"]
    big = method_colours([f"m{i}" for i in range(18)])
    assert len(set(big.values())) == 18
    with pytest.raises(ValueError, match="order"):
        method_colours(["a", "a"])
    with pytest.raises(TypeError, match="order"):
        method_colours("ab")


def test_figure_legend_collects_every_panel_once():
    fig, axes = plt.subplots(1, 2)
    axes[0].plot([0, 1], label="x")
    axes[0].legend()
    axes[1].plot([1, 0], label="x")
    axes[1].plot([1, 1], label="y")
    leg = figure_legend(fig, axes)
    assert [t.get_text() for t in leg.get_texts()] == ["x", "y"]
    assert axes[0].get_legend() is None
    with pytest.raises(ValueError, match="loc"):
        figure_legend(fig, axes, loc="left")


def test_fit_ylim_shows_every_value():
    fig, ax = plt.subplots()
    lo, hi = fit_ylim(ax, [-0.4, 40.0, 160.1, float("nan"), None])
    assert lo < -0.4 and hi > 160.1
    lo, hi = fit_ylim(ax, [0.5, 0.9], ceiling=1.0)
    assert hi >= 1.0 and lo < 0.5
    lo, hi = fit_ylim(ax, [1e-3, 1.0], log=True)
    assert lo < 1e-3 and hi > 1.0


# ------------------------------------------------------------------------- sections


def _sweeps():
    def entries(offset, train):
        return [{"sigma": s, "test_psnr": {"mean": offset + 10 * i - (40 if i == 3 else 0)},
                 "train_psnr": {"mean": train}, "stable_rank": 10.0, "dp_width": 0.01}
                for i, s in enumerate((1e-3, 2e-3, 4e-3, 8e-3))]

    return {"lstsq|n256|gaussian": entries(10, 160.1), "lstsq|n512|gaussian": entries(12, 159.6),
            "lstsq|n256|rff": entries(8, 160.1), "lstsq|n512|rff": entries(9, 159.5)}


def test_coords_sweep_shows_train_and_test_one_colour_per_encoding():
    theory = {"gaussian": [{"dp_width": w, "stable_rank": 1 / w, "closed_form_dp_width": w,
                            "closed_form_stable_rank": 1 / w} for w in (0.01, 0.1)],
              "rff": [{"dp_width": w, "stable_rank": 0.5 / w} for w in (0.01, 0.1)]}
    fig = coords._sweep_figure(_sweeps(), theory)
    colours = check_figure(fig)  # the ~160 dB train PSNR and a negative test PSNR are both in view
    col = method_colours(coords_exp.ENCODINGS_1D)
    gauss = {c for lab, cs in colours.items() if lab.startswith("Gaussian") for c in cs}
    rff = {c for lab, cs in colours.items() if lab.startswith("RFF") for c in cs}
    assert gauss == {col["gaussian"]} and rff == {col["rff"]}
    train_ax = fig.axes[1]
    assert len(train_ax.get_lines()) == 4  # every train curve the legend's styles stand for


def test_gir_figure_draws_validation_and_test_per_model():
    curve = [[e, 0.5 + e / 200, 0.45 + e / 250] for e in range(0, 100, 10)]
    curves = {f"{s}.{m}.s0": curve for s in ("grid-link-I", "grid-link-T") for m in ("gcn", "pgnn-e", "gir")}
    fig = gir._figure(curves)
    colours = check_figure(fig)
    for ax in fig.axes:
        drawn = [ln for ln in ax.get_lines() if len(ln.get_xdata())]
        if not drawn:
            continue
        styles = [ln.get_linestyle() for ln in drawn]
        assert styles.count("--") == 3 and styles.count("-") == 3  # validation and test for each model
    col = method_colours(list(gir.ORDER))
    assert colours["GCN"] == {col["gcn"]} and colours["GIR (path)"] == {col["gir"]}
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "validation (dashed)" in labels and "test (solid)" in labels


def test_krpe_figures_readable():
    approx = {"features": [16, 32, 64], "norms": [1.0, 4.0, 8.0],
              "kernel": {"1.0": [0.3, 0.2, 0.15], "4.0": [1.0, 0.999, 0.998], "8.0": [1.0, 1.0, 1.0]}}
    fig, note = krpe._approx_figure(approx)
    assert "R = 4.0 and R = 8.0" in note and "coincide" in note
    check_figure(fig, one_legend=False)
    lines = fig.axes[0].get_lines()
    assert len({ln.get_marker() for ln in lines}) == 3 and len({ln.get_linestyle() for ln in lines}) == 3
    ticks = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert ticks == ["16", "32", "64"]  # one plain label per m, no overlapping minor labels
    curves = {"accuracy": None}
    train = {task: {v: {**curves, "curves": [[2.0, 1.5, 1.0], [2.1, 1.4, 0.9]]} for v in krpe_exp.VARIANTS}
             for task in ("recall", "copy")}
    fig = krpe._train_figure(train)
    colours = check_figure(fig)
    col = method_colours(krpe_exp.VARIANTS)
    assert all(colours[v] == {col[v]} for v in krpe_exp.VARIANTS)
    assert [ax.get_title() for ax in fig.axes] == ["task copy", "task recall"]


def test_relative_colours_follow_the_section_order():
    a = relative._colours(["sinusoidal", "alibi"])
    b = relative._colours(list(relative.ORDER))
    assert a["alibi"] == b["alibi"] and len(set(b.values())) == len(relative.ORDER)
