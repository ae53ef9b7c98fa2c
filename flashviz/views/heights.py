"""A notebook layout drawn in figure fractions for one figure height, kept at another.

Some views place their texts and panels in fractions of a figure 6.8 inches tall (the
notebook's height before issue 20's laptop fit). At another height (the notebook's 5.25 inches,
``style.NOTEBOOK_FIGSIZE``) these helpers keep every margin and gap the same in points, so the
texts keep their room, and give the panels what is left.
"""

from __future__ import annotations

#: the figure height, inches, the views' fractional notebook layouts were drawn for
DESIGN_HEIGHT_IN = 6.8


def from_top(fig, y: float, design_in: float = DESIGN_HEIGHT_IN) -> float:
    """The figure fraction at the same distance in points from ``fig``'s top as ``y`` is from
    the top of a figure ``design_in`` inches tall."""
    return 1 - (1 - y) * design_in / fig.get_figheight()


def from_bottom(fig, y: float, design_in: float = DESIGN_HEIGHT_IN) -> float:
    """The figure fraction at the same distance in points from ``fig``'s bottom as ``y`` is
    from the bottom of a figure ``design_in`` inches tall: also a height (a gap, a margin) drawn
    as ``y`` of that figure, kept in points."""
    return y * design_in / fig.get_figheight()


def grid_at_height(fig, *, top: float, bottom: float, hspace: float, nrows: int,
                   design_in: float = DESIGN_HEIGHT_IN) -> dict:
    """GridSpec keywords ``top``, ``bottom`` and ``hspace`` (figure fractions; hspace: of the mean
    row) for ``fig``: the margin above, the margin below and the gaps between the ``nrows`` rows
    keep their size in points from a grid drawn with these values on a figure ``design_in``
    inches tall; the rows share the height left in their ratios. Raises ValueError when the
    margins and gaps leave the rows no height."""
    H0, H1 = design_in * 72, fig.get_figheight() * 72          # points
    rows0 = (top - bottom) * H0 / (1 + (nrows - 1) * hspace / nrows)
    gap = hspace * rows0 / nrows
    top1, bottom1 = from_top(fig, top, design_in), from_bottom(fig, bottom, design_in)
    rows1 = (top1 - bottom1) * H1 - (nrows - 1) * gap
    if rows1 <= 0:
        raise ValueError(f"a figure {fig.get_figheight():g} in tall leaves no room for the rows of this layout")
    return {"top": top1, "bottom": bottom1, "hspace": gap * nrows / rows1}


def points_layout(fig) -> bool:
    """Lay ``fig`` out in points from its text sizes (a view's presenter layout, with its shorter
    wordings where room is short): in presenter mode (texts larger than a notebook's) and on a
    figure shorter than DESIGN_HEIGHT_IN (the notebook's); else (the app's 11 × 6.8 inches at
    text scale 1) in the fractions drawn for it."""
    from .text import presenter

    return presenter() or fig.get_figheight() < DESIGN_HEIGHT_IN
