"""Measured text: the layout helpers every view uses to fit its texts at any text scale.

A view is built inside ``style.scaled_text(scale)`` (the app's presenter mode uses 1.4); its
texts are ``style.pt(size)`` points. To keep larger texts from overlapping, the views lay out
in points from these measures instead of fixed figure fractions:

* ``presenter()`` — is this view built at a text scale above the notebook's? (its roomier layout)
* ``text_width`` — the width of a text in points, from the font's glyph outlines (no figure
  needed: usable while the layout is computed); ``drawn_width`` — in pixels as a figure's
  renderer draws it (exact, needs the figure);
* ``wrap_text`` (balanced lines, points) and ``fit_lines`` (greedy, pixels on a figure) — break
  lines that are too wide;
* ``line_height`` (matplotlib's 1.2-em line rule) and ``font_height`` (the font's own
  1.02-em extent) — the height of n lines; ``tick_row`` — an axes' tick marks and labels;
* ``number_paths`` — integers as glyph paths (one PathCollection instead of many Text artists).
"""

from __future__ import annotations

from matplotlib.font_manager import FontProperties
from matplotlib.path import Path
from matplotlib.textpath import TextPath, text_to_path
from matplotlib.transforms import Affine2D

from . import style

__all__ = ["presenter", "text_width", "drawn_width", "wrap_text", "fit_lines", "line_height", "font_height",
           "tick_row", "number_paths"]


def presenter(above: float = 1.0) -> bool:
    """True while a view is built at a text scale above ``above`` (default: the notebook's 1.0;
    the app's presenter mode): the views then use their roomier layout and shorter wordings; at
    scale 1 they keep the notebook's. Some figures switch later (``above=1.15``)."""
    return style.text_scale() > above


def text_width(text: str, size: float, **font) -> float:
    """Width in points of the widest line of ``text`` at ``size`` points (mathtext aware; a
    slight overestimate of what Agg draws). ``font``: FontProperties keywords (weight, family)."""
    prop = FontProperties(size=size, **font)
    return max((text_to_path.get_text_width_height_descent(line, prop, ismath="$" in line)[0]
                for line in text.split("\n")), default=0.0)


def drawn_width(fig, text: str, **props) -> float:
    """Width in pixels of ``text`` drawn with Text properties ``props`` (fontsize, weight, …) by
    ``fig``'s renderer (exact; a temporary Text is added and removed)."""
    t = fig.text(0, 0, text, **props)
    try:
        return t.get_window_extent(fig.canvas.get_renderer()).width
    finally:
        t.remove()


#: where wrap_text breaks a line, best first, and what each break leaves at the line's end
_BREAKS = ((" · ", ""), ("; ", ";"), (" ", ""))


def wrap_text(text: str, size: float, width: float, **font) -> str:
    """``text`` with every line wider than ``width`` points at ``size`` (``text_width``) broken
    in two or more, at " · " separators first, then at "; ", then at spaces; the lines of a
    broken one about equally long (as few lines as fit, each as short as that number allows)."""
    def fill(parts, sep, keep, w):
        lines, cur = [], parts[0]
        for part in parts[1:]:
            if text_width(cur + sep + part, size, **font) <= w:
                cur += sep + part
            else:
                lines.append(cur + keep)
                cur = part
        return lines + [cur]

    def wrap(line, breaks):
        if text_width(line, size, **font) <= width or not breaks:
            return [line]
        (sep, keep), rest = breaks[0], breaks[1:]
        parts = line.split(sep)
        if len(parts) == 1:
            return wrap(line, rest)
        lines = fill(parts, sep, keep, width)
        lo, hi = max(text_width(p + keep, size, **font) for p in parts), width
        if lo <= hi:                # balance: the narrowest width that gives as few lines
            for _ in range(10):
                mid = (lo + hi) / 2
                lo, hi = (lo, mid) if len(fill(parts, sep, keep, mid)) <= len(lines) else (mid, hi)
            lines = fill(parts, sep, keep, hi)
        return [w for ln in lines for w in wrap(ln, rest)]

    return "\n".join(w for line in text.split("\n") for w in wrap(line, _BREAKS))


def fit_lines(fig, text: str, width: float, **props) -> str:
    """``text`` (lines of plain text; e-notation becomes mathtext) with every line wider than
    ``width`` pixels (``drawn_width`` on ``fig`` with ``props``) broken in two or more, greedily:
    after ": ", "  ·  " or ", " where one of these leaves a first part that fits and is not short
    (over 40 % of the line), else after the last space that fits."""

    def fits(part):
        return drawn_width(fig, style.sci_math(part.rstrip()), **props) <= width

    out = []
    for line in text.split("\n"):
        while not fits(line):
            cut = None
            for sep in (": ", "  ·  ", ", ", " "):
                cuts = [k + len(sep) for k in range(len(line)) if line.startswith(sep, k)]
                cuts = [c for c in cuts if fits(line[:c]) and (sep == " " or c > 0.4 * len(line))]
                if cuts:
                    cut = max(cuts)
                    break
            if cut is None:
                break
            out.append(line[:cut].rstrip())
            line = line[cut:].lstrip()
        out.append(line)
    return style.sci_math("\n".join(out))


def line_height(size: float, n: int = 1, spacing: float = 1.2) -> float:
    """Points n lines of ``size``-point text take: 1.2 em for the first (matplotlib's rule of
    thumb for a line), ``spacing`` em (matplotlib's linespacing) for each further one; 0 for n = 0."""
    return size * (1.2 + spacing * (n - 1)) if n else 0.0


def font_height(size: float, n: int = 1, spacing: float = 1.2) -> float:
    """Points n lines of ``size``-point DejaVu Sans take as matplotlib lays them out: the font's
    ascent + descent (1.02 em) per line, lines ``spacing`` apart; a tighter measure than
    ``line_height``."""
    return size * (1.02 + spacing * 1.02 * (n - 1))


def tick_row(labelsize: float) -> float:
    """Points from an axes' edge to the far side of its tick labels (``labelsize`` at the
    notebook's scale): tick length, pad and the labels' line."""
    return 3.5 + 3.5 + line_height(style.pt(labelsize))


def number_paths(numbers, size: float = 7.0):
    """Centred glyph paths (in points) of the given non-negative integers, from cached digit
    paths: drawn as one PathCollection they cost ~1 ms a frame, where as many Text artists
    would cost a few ms each."""
    digits, advance = _digit_paths(size)
    out = []
    for n in numbers:
        s = str(int(n))
        w = advance * len(s)
        parts = [digits[int(c)].transformed(Affine2D().translate(p * advance - w / 2, -0.36 * size))
                 for p, c in enumerate(s)]
        out.append(Path.make_compound_path(*parts))
    return out


_DIGITS: dict = {}


def _digit_paths(size: float):
    if size not in _DIGITS:
        fp = FontProperties(size=size)
        one = TextPath((0, 0), "0", prop=fp)
        advance = TextPath((0, 0), "00", prop=fp).get_extents().x1 - one.get_extents().x1
        _DIGITS[size] = ([TextPath((0, 0), str(c), prop=fp) for c in range(10)], advance)
    return _DIGITS[size]
