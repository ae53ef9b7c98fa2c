"""Colours, presets and small formatting helpers shared by the views."""

from __future__ import annotations

import contextlib
import contextvars
import re

import matplotlib as mpl

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


def fmt_bytes(n: float) -> str:
    """Bytes as B / KiB / MiB / GiB with three significant digits."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:.3g} {unit}"
    return f"{int(n)} B"


def exp_math(power: float, nd: int = 0) -> str:
    """e to a power as mathtext (without the $ signs): exp_math(-46.2) → 'e^{-46}'."""
    return f"e^{{{power:.{nd}f}}}"


_SCI = re.compile(r"(?<![\w.$])(\d+(?:\.\d+)?)[eE]([-+]?)0*(\d+)(?![\w.])")


def sci_math(text: str) -> str:
    """Numbers in e-notation written as mathtext powers of ten: '3.1e-07' → '$3.1{\\times}10^{-7}$'
    (and '1e-07' → '$10^{-7}$'), so a figure never shows a raw exponent. Other text is unchanged."""

    def one(m):
        mant, sign, exp = m.group(1), "-" if m.group(2) == "-" else "", m.group(3)
        power = f"10^{{{sign}{exp}}}"
        return f"${power}$" if mant in ("1", "1.0") else f"${mant}{{\\times}}{power}$"

    return _SCI.sub(one, text)


def sci_html(text: str) -> str:
    """Numbers in e-notation written as HTML powers of ten, for status lines:
    '3.1e-07' → '3.1×10<sup>−7</sup>' ('1e-07' → '10<sup>−7</sup>'). Other text is unchanged."""

    def one(m):
        mant, sign, exp = m.group(1), "−" if m.group(2) == "-" else "", m.group(3)
        power = f"10<sup>{sign}{exp}</sup>"
        return power if mant in ("1", "1.0") else f"{mant}×{power}"

    return _SCI.sub(one, text)


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
