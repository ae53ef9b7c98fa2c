"""The lessons as a static book (``make book``): what a widget shows when no kernel is behind the page.

A live widget needs a running Python kernel; a page built once and read in any browser has none.
When the environment variable ``FLASHVIZ_BOOK`` is ``1`` (``scripts/make_book.py`` sets it for the
kernels that execute the chapters), a flashviz widget shown as a cell's value gives, instead of its
live controls, static HTML made from this very run:

* an animated widget (a ``FrameWidget``) shows an animated GIF made by its own export
  (``save_gif``) of a few steps spread over its run (:data:`FRAMES` at most, first and last
  included), with its status line and a caption naming the widget, its settings and the steps shown;
* a panel (``GPUPanel``, ``BackwardGPUPanel``, ``TensorCorePanel``) shows the text and tables it shows live.

Nothing changes when ``FLASHVIZ_BOOK`` is unset: the widgets are live, as always.
"""

from __future__ import annotations

import base64
import html
import os
import tempfile
from pathlib import Path

import ipywidgets as W
import numpy as np

#: the environment variable that turns book mode on ("1")
BOOK_ENV = "FLASHVIZ_BOOK"
#: at most this many steps of a run go into a book's animation (evenly spread, first and last included)
FRAMES = 10
#: frames per second of a book's animation (slow enough to read each step)
FPS = 1.5
#: how to run the widgets live, said under every animation
LIVE_LINE = "run it live: <code>make lab</code> (see the README)"


def enabled() -> bool:
    """True while the book is being built (``FLASHVIZ_BOOK=1``)."""
    return os.environ.get(BOOK_ENV) == "1"


def book_frames(n_frames: int, most: int = FRAMES) -> list[int]:
    """Up to ``most`` frame indices evenly spread over 0..n_frames-1, first and last included."""
    if n_frames <= 0:
        return []
    return sorted({int(k) for k in np.linspace(0, n_frames - 1, min(most, n_frames)).round()})


def _shown(w) -> bool:
    layout = getattr(w, "layout", None)
    return layout is None or (layout.display != "none" and layout.visibility != "hidden")


def _setting(c) -> str | None:
    """'description = value' of a control (a slider, dropdown, checkbox), or None for one without."""
    if not isinstance(c, W.ValueWidget) or isinstance(c, (W.HTML, W.HTMLMath, W.Label, W.Play)):
        return None
    name = (getattr(c, "description", "") or "").strip()
    if not name:
        return None
    value = getattr(c, "label", None)
    if value is None:
        value = c.value
    if isinstance(value, bool):
        value = "on" if value else "off"
    return f"{name} = {value}"


def _output_html(out: W.Output) -> str:
    parts = []
    for o in out.outputs:
        data = o.get("data", {})
        if "text/html" in data:
            parts.append(data["text/html"])
        elif "image/png" in data:
            parts.append(f'<img src="data:image/png;base64,{data["image/png"]}" style="max-width:100%">')
        elif "text/plain" in data or "text" in o:
            parts.append(f"<pre>{html.escape(data.get('text/plain', o.get('text', '')))}</pre>")
    return "".join(parts)


def snapshot_html(box, *, replace=None, skip=()) -> str:
    """What the widget tree ``box`` shows, as static HTML: its HTML and Label texts, images and
    Output widgets' outputs, in page order; controls and hidden widgets give nothing (their
    settings go into the caption). ``replace``: {widget: html} put in place of a widget (the
    canvas, by its animation); ``skip``: widgets left out with their children."""
    replaced = {id(w): text for w, text in (replace or {}).items()}
    skip_ids = {id(w) for w in skip}
    parts: list[str] = []

    def walk(w):
        if id(w) in skip_ids:
            return
        if id(w) in replaced:
            parts.append(replaced[id(w)])
            return
        if not _shown(w):
            return
        if isinstance(w, (W.HTML, W.HTMLMath)):
            if w.value:
                parts.append(f"<div>{w.value}</div>")
        elif isinstance(w, W.Label):
            parts.append(f"<div>{html.escape(w.value)}</div>")
        elif isinstance(w, W.Image):
            if w.value:
                b64 = base64.b64encode(w.value).decode()
                parts.append(f'<img src="data:image/{w.format};base64,{b64}" style="max-width:100%">')
        elif isinstance(w, W.Output):
            parts.append(_output_html(w))
        elif isinstance(w, W.Box):
            for c in w.children:
                walk(c)

    walk(box)
    return "".join(parts)


def _settings(controls) -> str:
    seen, out = set(), []
    for c in controls:
        if id(c) in seen:
            continue
        seen.add(id(c))
        s = _setting(c)
        if s:
            out.append(html.escape(s))
    return ", ".join(out)


def frame_widget_bundle(w) -> dict:
    """The book's display of a FrameWidget: its status and an animated GIF of a few of its
    steps, exported by ``w.save_gif`` from the run it holds now, with a caption."""
    n = w.n_frames
    frames = book_frames(n)
    if frames:
        with tempfile.TemporaryDirectory(prefix="flashviz-book-") as tmp:
            path = w.save_gif(Path(tmp) / f"{w.export_stem}.gif", frames=frames, fps=FPS)
            gif = base64.b64encode(path.read_bytes()).decode()
        steps = ", ".join(str(k + 1) for k in frames)
        width = int(round(w.fig.bbox.width))
        animation = (f'<img class="flashviz-book-animation" src="data:image/gif;base64,{gif}" width="{width}" '
                     f'style="max-width:100%;height:auto" alt="{html.escape(w.kind)}: steps {steps} of {n}">')
        caption = (f"<b>{html.escape(w.kind)}</b> ({_settings(w.controls)}): steps {steps} of {n}, exported by "
                   f"its <code>save_gif</code> when this page was built. In the notebook you step, play and "
                   f"change the settings: {LIVE_LINE}.")
    else:
        animation = ""
        caption = f"<b>{html.escape(w.kind)}</b>: nothing to show for these settings. {LIVE_LINE.capitalize()}."
    body = snapshot_html(w.widget, replace={w.canvas_widget: animation},
                         skip=(w.transport, w.export_row))
    return {"text/html": (f'<div class="flashviz-book-widget">{body}'
                          f'<p class="flashviz-book-caption"><small>{caption}</small></p></div>'),
            "text/plain": f"{w.kind}: {len(frames)} of {n} steps exported for the book"}


def panel_bundle(panel, name: str | None = None) -> dict:
    """The book's display of a panel (``panel.widget``, an ipywidgets box): its texts and tables."""
    name = name or type(panel).__name__
    box = panel.widget
    controls = []

    def collect(x):
        if isinstance(x, W.Box):
            for c in x.children:
                collect(c)
        else:
            controls.append(x)

    collect(box)
    settings = _settings(controls)
    caption = (f"<b>{html.escape(name)}</b>{f' ({settings})' if settings else ''}, as shown when this page was "
               f"built; in the notebook its buttons run on a GPU: {LIVE_LINE}.")
    return {"text/html": (f'<div class="flashviz-book-widget">{snapshot_html(box)}'
                          f'<p class="flashviz-book-caption"><small>{caption}</small></p></div>'),
            "text/plain": f"{name} (static, for the book)"}
