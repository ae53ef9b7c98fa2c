"""Re-running a notebook cell replaces its widget: the old one is closed (no figure leak).

A widget's key is the notebook cell it was created in (JupyterLab sends the cell id with
each execute request) plus the line in that cell; outside a notebook it is the caller's
file and line. Two widgets made on different lines or in different cells stay independent.
"""

from __future__ import annotations

import sys
import weakref

_live: weakref.WeakValueDictionary[tuple, object] = weakref.WeakValueDictionary()


def caller_key(depth: int = 2) -> tuple:
    """(cell id or file name, line number) of the code that called the widget's constructor."""
    frame = sys._getframe(depth)
    # walk out of flashviz's own frames
    while frame is not None and frame.f_globals.get("__name__", "").startswith("flashviz"):
        frame = frame.f_back
    where = (frame.f_code.co_filename, frame.f_lineno) if frame is not None else ("?", 0)
    cell = None
    try:
        from IPython import get_ipython

        ip = get_ipython()
        parent = ip.kernel.get_parent() if ip is not None and hasattr(ip, "kernel") else None
        cell = (parent or {}).get("metadata", {}).get("cellId")
    except Exception:  # not in a kernel, or an older one: file and line suffice
        cell = None
    return (cell or where[0], where[1])


def register(kind: str, key, widget) -> None:
    """Close the widget previously registered under (kind, key), then register this one."""
    full = (kind, key)
    old = _live.get(full)
    if old is not None and old is not widget:
        try:
            old.close()
        except Exception:
            pass
    _live[full] = widget


def unregister(kind: str, key, widget) -> None:
    full = (kind, key)
    if _live.get(full) is widget:
        del _live[full]
