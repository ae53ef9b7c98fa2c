"""What a widget says on the page when its kernel has gone (died and restarted, or shut down).

When a kernel restarts, the front end's widget manager (JupyterLab's and Voilà's alike, ipywidgets 8)
marks every widget view it shows with the CSS class ``jupyter-widgets-disconnected``: the widgets
stay on the page but no longer answer, and ipywidgets draws only a small broken-link icon on each
control — a class saw a page of "broken links" and no word of what happened. Every top-level
flashviz widget carries the class :data:`LIVE_CLASS` and a hidden :func:`restart_notice` child
whose stylesheet turns that state into one line at the top of the widget (what happened and what
to do), dims the stale controls and hides the per-control icons. Pure CSS: it needs the kernel
for nothing, so it shows exactly when the kernel cannot.
"""

from __future__ import annotations

import ipywidgets as W

#: the class of every top-level flashviz widget box (the stylesheet's handle)
LIVE_CLASS = "flashviz-live"

#: the line a widget shows once its kernel is gone
MESSAGE = ("The Python kernel behind this widget stopped (it died or was restarted), so it no longer "
           "answers. Run its cell again to bring it back (JupyterLab: Run \u25b8 Run All Cells); "
           "in the app, reload the page.")

_CSS = f"""<style>
.{LIVE_CLASS}.jupyter-widgets-disconnected::before {{
  content: "{MESSAGE}"; display: block; order: -1; margin: 2px 0 6px 0; padding: 6px 10px;
  font: 600 13px/1.35 var(--jp-ui-font-family, sans-serif); white-space: normal;
  color: #7a1010; background: #fde8e8; border: 1px solid #d33; border-radius: 4px;
  position: static; width: auto; height: auto; font-family: var(--jp-ui-font-family, sans-serif);
}}
.{LIVE_CLASS}.jupyter-widgets-disconnected > * {{ opacity: 0.45; pointer-events: none; }}
.{LIVE_CLASS}.jupyter-widgets-disconnected .jupyter-widgets-disconnected::before {{ content: none; display: none; }}
</style>"""


def restart_notice() -> W.HTML:
    """A hidden HTML widget holding the stylesheet that shows :data:`MESSAGE` on a disconnected
    :data:`LIVE_CLASS` box (a ``<style>`` applies while its element is hidden). Put one in each
    top-level box and close it with the box."""
    return W.HTML(_CSS, layout=W.Layout(display="none"))
