"""The front end's checks: what a widget, a panel, the app or ``flashviz render`` accepts for its
figure (size, dpi, pixels, text scale), its registry key and an exported animation (frames, fps).

The caps below are what a student can ask for before the tool would take minutes or gigabytes;
each error says the cap and why, in one line (TypeError / ValueError). The checks every layer
shares (integers, choices, real numbers, output paths and folders) are in ``flashviz.checks``;
these are the ones only the widgets (and the command line above them) use.
"""

from __future__ import annotations

import numbers

import numpy as np

from ..checks import check_real, shown

#: Smallest and largest figure side in inches: below 1 inch nothing is legible, above 50 the
#: figure is a poster, not a slide (and the pixel cap below is what really limits the cost).
MIN_FIG_INCHES, MAX_FIG_INCHES = 1.0, 50.0
#: Dots per inch of a figure: below 20 the fonts cannot be rasterised (FreeType fails at a few
#: pixels per em); above 600 is print resolution, far beyond any screen or projector.
MIN_DPI, MAX_DPI = 20.0, 600.0
#: Most pixels (width × height, at ``dpi``) a figure may have: 8 million (11 × 6.8 in at 300 dpi
#: fits). Every frame is drawn and shipped at this size and a GIF keeps every frame, so time and
#: memory grow with it; matplotlib's own limit (2^23 per side) would first allocate gigabytes.
MAX_FIG_PIXELS = 8_000_000

#: Largest factor a widget's figure texts may be drawn at (presenter mode, ``text_scale``); 1 is the
#: notebook's own text size.
MAX_TEXT_SCALE = 2.5


def check_text_scale(scale) -> float:
    """The factor a widget's figure texts are drawn at (presenter mode): 0.5 to MAX_TEXT_SCALE."""
    return check_real(scale, "text_scale", 0.5, MAX_TEXT_SCALE, unit="(1 = the notebook's text size)")


def check_key(key):
    """A registry key: anything hashable (a string, a number, a tuple of those), or None."""
    try:
        hash(key)
    except TypeError:
        raise TypeError(f"key must be hashable (a string, number or tuple) or None, got {shown(key)}") from None
    return key


def check_figsize(figsize, name: str = "figsize") -> tuple[float, float]:
    """(width, height) in inches, each a finite number from MIN_FIG_INCHES to MAX_FIG_INCHES.
    Anything else is a ValueError (as matplotlib's own figsize errors), in one line."""
    want = (f"{name} must be (width, height) in inches, two numbers from {MIN_FIG_INCHES:g} to "
            f"{MAX_FIG_INCHES:g}")
    if isinstance(figsize, (str, bytes, dict)) or not hasattr(figsize, "__len__") or len(figsize) != 2:
        raise ValueError(f"{want}, got {shown(figsize)}")
    out = []
    for v in figsize:
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Real):
            raise ValueError(f"{want}, got {shown(figsize)}")
        x = float(v)
        if not (np.isfinite(x) and MIN_FIG_INCHES <= x <= MAX_FIG_INCHES):
            raise ValueError(f"{want}, got {shown(figsize)}")
        out.append(x)
    return out[0], out[1]


def check_dpi(dpi, name: str = "dpi") -> float:
    """Dots per inch: a finite number from MIN_DPI to MAX_DPI; ValueError (one line) otherwise."""
    try:
        return check_real(dpi, name, MIN_DPI, MAX_DPI)
    except TypeError as exc:
        raise ValueError(str(exc)) from None


def check_figure(figsize, dpi) -> tuple[tuple[float, float], float]:
    """figsize and dpi checked alone and together: at most MAX_FIG_PIXELS pixels in all."""
    (w, h), dpi = check_figsize(figsize), check_dpi(dpi)
    px = round(w * dpi) * round(h * dpi)
    if px > MAX_FIG_PIXELS:
        raise ValueError(f"figsize {w:g} × {h:g} in at dpi {dpi:g} is {round(w * dpi):,} × {round(h * dpi):,} "
                         f"pixels ({px / 1e6:.1f} million); at most {MAX_FIG_PIXELS / 1e6:g} million pixels can be "
                         f"drawn and exported in reasonable time: lower figsize or dpi")
    return (w, h), dpi


