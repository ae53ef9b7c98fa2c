"""Colours, presets, number formatting and the text scale shared by the views.

Number formatting (bytes, FLOPs, counts, figure numbers, powers of ten) is defined once, in
``flashviz.formatting`` (plain Python, so the replay layer's step texts use it too), and
re-exported here: views and widgets take ``fmt_bytes``, ``fmt_flops``, ``fmt_count``,
``fmt_number``, ``byte_unit``, ``exp_math``, ``sci_math`` and ``sci_html`` from this module.
"""

from __future__ import annotations

import contextlib
import contextvars

import matplotlib as mpl

from ..formatting import (  # noqa: F401 (re-exported: the one home of number formatting)
    BYTE_UNITS,
    byte_unit,
    exp_math,
    fmt_bytes,
    fmt_count,
    fmt_flops,
    fmt_number,
    sci_html,
    sci_math,
)
from ..iomodel import SRAM_BUDGETS  # noqa: F401 (re-exported: SRAM budgets in bytes, defined with the IO model)

CURRENT = "#ff7f0e"      # the tile / block being worked on
BAND = "#ffbb78"         # the Q_i rows or K_j, V_j columns in SRAM
MASKED = "0.35"          # causal-masked entries
SKIPPED = "0.85"         # tiles a causal mask skips entirely
STANDARD = "#d62728"     # standard attention
TILED = "#1f77b4"        # tiled FlashAttention
OK = "#2ca02c"
BAD = "#d62728"


def score_cmap():
    """viridis, white where not yet computed (NaN), dark grey where masked (-inf)."""
    # bad (NaN) is transparent: the static grid and the hatching show through
    return mpl.colormaps["viridis"].with_extremes(bad=(1, 1, 1, 0), under=MASKED)


def output_cmap():
    return mpl.colormaps["RdBu_r"].with_extremes(bad="white")


# --- figure width on a laptop (issue 20) ----------------------------------------------------------
#: the widest a figure is drawn for a notebook, in CSS pixels. JupyterLab's output area beside its
#: file browser (the default layout) is 934 px wide in a 1366×768 window and 968 px at 1400×900;
#: ipympl adds a 2 px margin each side of its canvas. Figures are sized to fit (sharp, unscaled,
#: mouse coordinates exact) rather than scaled down by the browser.
FIT_WIDTH_PX = 924
#: the dpi of a notebook widget's figure (11 in wide: FIT_WIDTH_PX): the smallest figure text,
#: 7 pt, is 8.2 px on screen
NOTEBOOK_DPI = 84

# --- widget height on a laptop ---------------------------------------------------------------------
#: the tallest an animation widget (its controls and its figure) is drawn in a notebook, in CSS
#: pixels: JupyterLab shows 647 px of a notebook at once in a 1366×768 window with its file browser
#: open (measured by tests/browser/test_fit.py), less 10 px to scroll it into view. A student who
#: presses Play sees the controls and the whole figure.
FIT_HEIGHT_PX = 637
#: (width, height) inches of a notebook widget's figure: 924 × 441 px at NOTEBOOK_DPI (whole
#: pixels: an exported frame has the canvas's size), which leaves 196 px of FIT_HEIGHT_PX for its
#: controls (the transport, two rows of settings, a status line of up to two lines, the export
#: row). The app draws the same views at its own inches (``widgets.app.APP_FIGURE``: 11 × 6.8).
NOTEBOOK_FIGSIZE = (11.0, 5.25)
#: the figure of a widget whose controls take one row more (two-line settings or status: the
#: decode and timeline explorers): a quarter inch shorter, 924 × 420 px at NOTEBOOK_DPI
NOTEBOOK_FIGSIZE_SHORT = (NOTEBOOK_FIGSIZE[0], NOTEBOOK_FIGSIZE[1] - 0.25)


def fit_dpi(width_in: float, dpi: float | None = None) -> float:
    """Dots per inch for a figure ``width_in`` inches wide shown in a notebook: ``dpi`` (default
    matplotlib's ``figure.dpi``, 100) lowered where needed so that the figure is at most
    FIT_WIDTH_PX pixels wide. Layouts are in points and figure fractions, so only the
    pixels change: a PNG saved at an explicit dpi (the app's) is the same."""
    dpi = float(mpl.rcParams["figure.dpi"] if dpi is None else dpi)
    try:
        width = float(width_in)
    except (TypeError, ValueError):
        return dpi                   # not a width: matplotlib's own figsize check says so
    return min(dpi, FIT_WIDTH_PX / width) if width > 0 and width != float("inf") else dpi


# --- text scale (presenter mode) -------------------------------------------------------------
#: matplotlib's default text sizes, in points, that a text scale multiplies
_RC_SIZES = ("font.size",)
_SCALE = contextvars.ContextVar("flashviz_text_scale", default=1.0)


def text_scale() -> float:
    """The factor every view multiplies its text sizes by while it is built (1.0 in a
    notebook; the app's presenter mode builds its views at a larger one)."""
    return _SCALE.get()


def pt(size: float) -> float:
    """A text size in points for the view being built: ``size`` (points at the notebook's
    scale) times :func:`text_scale`. Every fontsize and labelsize in ``views/`` goes through it."""
    return size * _SCALE.get()


@contextlib.contextmanager
def scaled_text(scale: float = 1.0):
    """Build views inside this block with every text ``scale`` times its notebook size:
    :func:`pt` and matplotlib's default font size (texts given no size) both follow it."""
    token = _SCALE.set(float(scale))
    try:
        with mpl.rc_context({k: mpl.rcParamsDefault[k] * scale for k in _RC_SIZES}):
            yield
    finally:
        _SCALE.reset(token)
