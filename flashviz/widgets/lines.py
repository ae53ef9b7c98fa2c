"""Status lines and notes at the height of their text, not of a control row.

ipywidgets sets every HTML widget's lines ``--jp-widgets-inline-height`` (28 px) apart, so that
one line sits on the baseline of the controls beside it. A widget's status line or note (an HTML
widget alone in its row, often two lines long) then takes 28 px a line plus margins: a two-line
status is 60 px. Marked with :data:`LINES_CLASS`, it is set at 1.35 times its font size (about
18 px a line, JupyterLab's 13 px font), so that a widget with its controls and its figure fits
the notebook a laptop shows (``views.style.FIT_HEIGHT_PX``). Pure CSS, like the restart notice
(``notice.py``): a hidden HTML widget holds the stylesheet.
"""

from __future__ import annotations

import ipywidgets as W

#: the class of an HTML widget whose lines are set at text height
LINES_CLASS = "flashviz-lines"

_CSS = f"""<style>
.{LINES_CLASS} > .widget-html-content, .{LINES_CLASS} > .jupyter-widget-html-content {{ line-height: 1.35; padding: 3px 0; }}
</style>"""


def text_lines(widget: W.HTML) -> W.HTML:
    """Mark ``widget`` (an HTML widget) to set its lines at text height; returns it."""
    widget.add_class(LINES_CLASS)
    return widget


def lines_style() -> W.HTML:
    """A hidden HTML widget holding the stylesheet for :data:`LINES_CLASS` (a ``<style>``
    applies while its element is hidden). Put one in each top-level box and close it with it."""
    return W.HTML(_CSS, layout=W.Layout(display="none"))
