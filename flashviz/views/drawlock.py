"""One lock for every matplotlib draw flashviz makes in a process (issue 20).

Why: ipykernel 7 handles widget messages on more than one thread. With JupyterLab 4.6's default
``commsOverSubshells: "perCommTarget"`` a widget's comm messages reach the kernel on a subshell
thread, and its replies are routed to whichever thread last sent on that comm
(``ipykernel.comm.comm.BaseComm._reply_subshell_for``), so the same figure was drawn on two
threads at once: a ◀/▶ click's handler blitting on one, ipympl's ``draw``/``refresh`` message
(``FigureManagerWebAgg.handle_json``) drawing the whole figure on the other. matplotlib's Agg
renderer is not thread-safe: that corrupted the C heap (glibc "malloc(): unaligned tcache
chunk detected": the kernel died in 8–10 of 12 full-speed bursts) or, short of a crash, sent
the browser an image half of one frame and half of another.

The choice: one process-wide re-entrant lock, not one lock per figure and not a UI thread.
* Process-wide, because what two draws share is not only the figure: ``views.style.scaled_text``
  sets matplotlib's global rcParams while a view is built, and one widget's handler may redraw
  another's figure (a panel following an explorer) — with one lock there is no lock order to get
  wrong, hence no deadlock between two figures' locks.
* Re-entrant, because a draw fires callbacks that draw (``draw_event`` → the blitter's caches,
  a trait change → an observer that renders).
* A lock rather than handing work to one UI thread, because every handler then finishes its draw
  before it returns: the order of frames is the order of the messages on each thread, a test
  (or a notebook cell) that sets a value finds the frame drawn, and ipympl's own messages need
  no re-routing. Drawing holds the GIL anyway, so two threads could never draw faster than one.

What must hold the lock: every draw, blit, canvas send and export frame of a figure the live
widgets show — the widgets' handlers (``serialised``), ipympl's handling of its canvas's
messages (``serialise_canvas``), the export's fork of the figure. What must not: anything that
waits for another thread (a GPU job's ``join``), so no deadlock can come from a waiting handler.
"""

from __future__ import annotations

import functools
import threading

__all__ = ["DRAW_LOCK", "serialised", "serialise_canvas"]

#: held while any flashviz figure is drawn, blitted, sent to the browser or exported
DRAW_LOCK = threading.RLock()


def serialised(fn):
    """``fn`` wrapped to run while holding ``DRAW_LOCK`` (a decorator for widget handlers that
    draw). The wrapper keeps ``fn``'s name and docstring and exposes it as ``__wrapped__``."""

    @functools.wraps(fn)
    def run(*args, **kwargs):
        with DRAW_LOCK:
            return fn(*args, **kwargs)

    return run


def serialise_canvas(canvas) -> bool:
    """Make matplotlib's web canvas (ipympl's, in Jupyter) handle the browser's messages while
    holding ``DRAW_LOCK``: its manager's ``handle_json`` (every message but ipympl's own
    'closing'/'initialized', which do not draw: 'draw', 'refresh', 'resize', 'set_dpi_ratio',
    mouse events …) is wrapped on the instance. Idempotent; returns False (and does nothing) for
    a canvas without such a manager (Agg, PNG mode)."""
    manager = getattr(canvas, "manager", None)
    handle = getattr(manager, "handle_json", None)
    if handle is None:
        return False
    if getattr(handle, "__wrapped__", None) is not None:
        return True
    manager.handle_json = serialised(handle)
    return True
