"""Figure helpers shared by the report sections and the CLI's pictures.

Rules every figure follows (so that a curve is never read as the wrong method):

* one colour per method across every figure of a section: :func:`method_colours`
  assigns colours by the method's place in the section's fixed ``order``, never by
  the order in which a figure happens to draw them;
* one legend covering every panel: :func:`figure_legend` collects the labelled
  artists of all panels (each label once) into a single legend outside the panels;
* nothing hidden by axes limits: :func:`fit_ylim` sets limits that include every
  finite value drawn.

Only the report and the CLI import this module (it needs matplotlib).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

#: tab10, then 8 colours chosen to stay distinct from it and from each other (black, navy,
#: maroon, magenta, teal, lime, lavender, apricot): 18 methods never share a colour.
_EXTRA = ("#000000", "#000075", "#800000", "#f032e6", "#469990", "#9bd832", "#b39ddb", "#ffb07c")


def palette() -> list[tuple[float, float, float, float]]:
    """The colour cycle every section draws from (RGBA tuples)."""
    import matplotlib
    from matplotlib.colors import to_rgba

    return [matplotlib.colormaps["tab10"](i) for i in range(10)] + [to_rgba(c) for c in _EXTRA]


def method_colours(order: Sequence[str]) -> dict[str, tuple[float, float, float, float]]:
    """One fixed colour per method: the i-th method of the section's ``order`` gets colour i.

    Args:
        order: every method the section can draw, in a fixed order (the same tuple for
            every figure of the section, so a method keeps its colour across figures and
            across runs that draw only some methods).

    Returns:
        ``{method: RGBA}``; two methods never share a colour while ``order`` has at most 18
        entries (the palette then cycles).
    """
    if isinstance(order, str):
        raise TypeError("order must be a sequence of method names, not a string")
    if len(set(order)) != len(order):
        raise ValueError(f"order has repeated methods: {list(order)}")
    colours = palette()
    return {m: colours[i % len(colours)] for i, m in enumerate(order)}


def figure_legend(fig: Any, axes: Iterable[Any], *, loc: str = "right", fontsize: float = 8,
                  ncol: int | None = None) -> Any:
    """One legend for the whole figure: every labelled artist of ``axes``, each label once.

    Per-panel legends are removed. ``loc="right"`` puts the legend beside the panels,
    ``loc="below"`` under them (``ncol`` columns; default: up to 4).

    Returns:
        the :class:`matplotlib.legend.Legend` (``None`` when nothing is labelled).
    """
    if loc not in ("right", "below"):
        raise ValueError(f"loc must be 'right' or 'below', got {loc!r}")
    handles, labels = [], []
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels and not lab.startswith("_"):
                handles.append(h)
                labels.append(lab)
        if ax.get_legend() is not None:
            ax.get_legend().remove()
    if not handles:
        return None
    if loc == "right":
        return fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=fontsize,
                          frameon=False)
    cols = ncol or min(4, len(labels))
    return fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=cols,
                      fontsize=fontsize, frameon=False)


def fit_ylim(ax: Any, values: Iterable[float], *, pad: float = 0.05, floor: float | None = None,
             ceiling: float | None = None, log: bool = False) -> tuple[float, float]:
    """Set y-limits that show every finite value in ``values`` (with ``pad`` of the range).

    ``floor``/``ceiling`` only widen the range (e.g. ``ceiling=1.02`` for an accuracy axis
    keeps 1 in view); they never cut a value off.

    Returns:
        the limits set.
    """
    vals = [float(v) for v in values if v is not None and math.isfinite(float(v)) and (not log or float(v) > 0)]
    if not vals:
        return ax.get_ylim()
    lo, hi = min(vals), max(vals)
    if log:
        llo, lhi = math.log10(lo), math.log10(hi)
        span = max(lhi - llo, 1e-3)
        low, high = 10 ** (llo - pad * span), 10 ** (lhi + pad * span)
    else:
        span = max(hi - lo, 1e-9 * max(1.0, abs(hi)))
        low, high = lo - pad * span, hi + pad * span
    if floor is not None:
        low = min(low, floor)
    if ceiling is not None:
        high = max(high, ceiling)
    limits = (low, high)
    ax.set_ylim(*limits)
    return limits


def png_bytes(fig: Any, dpi: int = 110) -> bytes:
    """Render ``fig`` to PNG bytes (tight bounding box, so outside legends are kept) and close it."""
    import io

    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()
