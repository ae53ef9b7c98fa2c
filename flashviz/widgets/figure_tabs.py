"""FigureTabs: recorded results as tabs of captioned figures, each drawn once to a PNG — the part
the app's recorded chapters share (RecordedFigures, chapter 7; Fa3Figures, chapter 8).

A subclass names its tabs in ``TABS`` ({name: (tab title, default (width, height) in inches)},
in tab order; ``NAMES`` = their names) and loads what they show in ``_load()``, which returns a
``Loaded``: the header line above the tabs, one caption per tab, one drawing function per tab
(figsize in inches → a new matplotlib Figure) and the labels of the recordings drawn.

The base does the rest: it checks figsize, dpi, text_scale and key (one-line errors), registers
the widget (a re-run cell replaces it), draws a tab's figure when the tab is first shown (the
first tab at once) inside ``views.style.scaled_text`` at the widget's text scale, and keeps its
PNG per process in ``PNG_CACHE``: opening the chapter again, or a widget of the same size, costs
no drawing. Figures are shown as PNG (ipywidgets.Image), so they show in Voilà and on a
projector without an interactive canvas.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import ipywidgets as W

from ..checks import shown
from ..views.drawlock import serialised
from ..views.style import fit_dpi, scaled_text
from . import checks as widget_checks
from . import registry
from .base import close_widget

#: (widget class, tab name, recording labels…, size scale, dpi, text scale) -> PNG bytes (b"": the
#: tab could not be drawn), kept per process; emptied when it holds more than MAX_CACHED
PNG_CACHE: dict = {}
MAX_CACHED = 32


@dataclass(frozen=True)
class Loaded:
    """What a FigureTabs subclass shows. header: HTML of the line above the tabs; captions:
    {tab name: one line}; draws: {tab name: function(figsize) -> new Figure}, called inside
    ``scaled_text``; labels: hashable labels of the recordings drawn (part of the PNG's cache
    key: a new recording draws anew)."""

    header: str
    captions: dict
    draws: dict
    labels: tuple


@serialised
def png_bytes(fig, dpi: float) -> bytes:
    """``fig`` as PNG bytes at ``dpi``; the figure is closed."""
    import matplotlib.pyplot as plt
    buf = io.BytesIO()
    try:
        fig.savefig(buf, format="png", dpi=dpi)
    finally:
        plt.close(fig)
    return buf.getvalue()


class FigureTabs:
    """Tabs of captioned PNG figures (see the module docstring for what a subclass provides).

    figsize: (width, height) in inches; only the width counts: every tab's figure is its default
    size times width / the widest default width (default: the defaults). dpi: resolution of the
    PNGs (default ``DEFAULT_DPI``, lowered so that the widest figure is at most
    ``views.style.FIT_WIDTH_PX`` wide). text_scale: every text of the figures at this many times its
    notebook size (0.5–2.5, default 1; the app's presenter mode uses 1.4). key: registry key
    (default: the calling cell and line). Raises a one-line ValueError for a figsize or dpi out
    of range or a figure of more than ``widgets.checks.MAX_FIG_PIXELS`` pixels, TypeError / ValueError
    for a bad text_scale, TypeError for an unhashable key.

    Public: ``captions`` ({tab name: line}), ``tabs`` (ipywidgets.Tab), ``widget``, ``text_scale``,
    ``figure(name)``, ``image(name)``, ``close()``.
    """

    TABS: dict = {}          #: {name: (tab title, default (width, height) in inches)}, in tab order
    NAMES: tuple = ()        #: tuple(TABS)
    DEFAULT_DPI = 90
    #: shown in a tab whose figure cannot be drawn here (its drawing raised ValueError,
    #: TypeError or LookupError: no recording of that kind in the installation)
    MISSING = "No recorded measurement of this kind in this installation."

    def __init__(self, *, figsize=None, dpi: float | None = None, key=None, text_scale: float = 1.0):
        if dpi is not None:
            dpi = widget_checks.check_dpi(dpi)
        self.text_scale = widget_checks.check_text_scale(text_scale)
        widest = max(size[0] for _, size in self.TABS.values())
        self.scale = 1.0 if figsize is None else widget_checks.check_figsize(figsize)[0] / widest
        # default: DEFAULT_DPI, lowered so that the widest figure fits a laptop's notebook
        self.dpi = fit_dpi(widest * self.scale, self.DEFAULT_DPI) if dpi is None else dpi
        self._check_pixels()
        widget_checks.check_key(key)
        self._kind = type(self).__name__
        self._key = registry.caller_key() if key is None else key
        registry.register(self._kind, self._key, self)
        loaded = self._load()
        self.captions = {name: loaded.captions.get(name, "") for name in self.NAMES}
        self._draws = loaded.draws
        self._png_key = (*loaded.labels, self.scale, self.dpi, self.text_scale)
        pages = [W.VBox([W.HTML(f"<div style='font-size:13px'>{self.captions[name]}</div>"), W.HTML("<i>drawing…</i>")])
                 for name in self.NAMES]
        self.tabs = W.Tab(children=pages, titles=tuple(self.TABS[name][0] for name in self.NAMES))
        header = W.HTML(loaded.header)
        header.add_class("flashviz-tabs-header")      # the app keeps it to one line (APP_CSS)
        self.widget = W.VBox([header, self.tabs])
        # a tab's figure is drawn when the tab is first shown (the first now), and kept per
        # process: opening the chapter again, or another tab, costs no drawing
        self.tabs.observe(lambda change: self._show(change["new"]), names="selected_index")
        self._show(0)

    def _load(self) -> Loaded:
        """What the tabs show (subclasses)."""
        raise NotImplementedError

    def _check_pixels(self) -> None:
        """ValueError (one line) when the largest tab figure has more than MAX_FIG_PIXELS pixels."""
        w, h = max(((round(fw * self.scale * self.dpi), round(fh * self.scale * self.dpi))
                    for _, (fw, fh) in self.TABS.values()), key=lambda wh: wh[0] * wh[1])
        if w * h > widget_checks.MAX_FIG_PIXELS:
            widest = max(size[0] for _, size in self.TABS.values())
            raise ValueError(f"figsize {widest * self.scale:g} in wide at dpi {self.dpi:g} makes a {w:,} × {h:,} pixel "
                             f"figure; at most {widget_checks.MAX_FIG_PIXELS / 1e6:g} million pixels can be drawn in "
                             f"reasonable time: lower figsize or dpi")

    def _check_name(self, name) -> int:
        if name not in self.NAMES:
            raise ValueError(f"name must be one of {self.NAMES}, got {shown(name)}")
        return self.NAMES.index(name)

    def figure(self, name: str):
        """A new matplotlib Figure of tab ``name`` (one of NAMES) at this widget's size and text
        scale (the caller closes it). Raises ValueError for another name, and what the drawing
        raises (ValueError when the installation holds no recording of that kind)."""
        self._check_name(name)
        w, h = self.TABS[name][1]
        with scaled_text(self.text_scale):
            return self._draws[name]((w * self.scale, h * self.scale))

    @serialised
    def _show(self, index) -> None:
        if index is None:
            return
        name = self.NAMES[index]
        page = self.tabs.children[index]
        if isinstance(page.children[1], W.Image):
            return
        key = (self._kind, name, *self._png_key)
        png = PNG_CACHE.get(key)
        if png is None:
            try:
                png = png_bytes(self.figure(name), self.dpi)
            except (ValueError, TypeError, LookupError):      # no recording of this kind in the installation
                png = b""
            if len(PNG_CACHE) > MAX_CACHED:
                PNG_CACHE.clear()
            PNG_CACHE[key] = png
        old = page.children[1]
        page.children = [page.children[0], W.Image(value=png, format="png") if png else
                         W.HTML(f"<i>{self.MISSING}</i>")]
        close_widget(old)

    def image(self, name: str):
        """The figure of tab ``name`` as a widget: an Image with PNG bytes, drawn now if its tab
        has not been shown yet (or an HTML note when it cannot be drawn here). Raises ValueError
        for a name not in NAMES."""
        index = self._check_name(name)
        self._show(index)
        return self.tabs.children[index].children[1]

    def close(self):
        """Close every child widget (idempotent)."""
        for page in list(self.tabs.children):
            for w in list(page.children):
                close_widget(w)
            close_widget(page)
        for w in list(self.widget.children):
            close_widget(w)
        close_widget(self.widget)
        registry.unregister(self._kind, self._key, self)

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)
