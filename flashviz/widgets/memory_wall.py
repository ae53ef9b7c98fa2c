"""MemoryWall: chapter 1's measured figures as one widget (for the app): the roofline of this
machine (QKᵀ against the exp over S) and standard attention's HBM bytes, with a button that
measures again."""

from __future__ import annotations

import io

import ipywidgets as W
import matplotlib.pyplot as plt

from ..roofline import ROOFLINE_N, copy_bandwidth, measure_intensity
from ..views.drawlock import DRAW_LOCK, serialised
from ..views.roofline_view import draw_memory_wall
from ..views.style import scaled_text
from . import checks as widget_checks
from .base import NOTEBOOK_DPI, canvas_widget, check_int, close_widget, ensure_ipympl
from .notice import LIVE_CLASS, restart_notice


class MemoryWall:
    """Chapter 1 measured: roofline of this CPU and the N² bytes of standard attention.

    figsize: (width, height) inches (default (11, 4.6)); dpi (default NOTEBOOK_DPI, 84: 924 px wide,
    the width of a laptop's notebook), both as every widget takes them (``widgets.checks.check_figure``); repeat:
    timed runs per measurement, the fastest kept (1–100, default 7); text_scale: every text of
    the figure at this many times its notebook size (0.5–2.5, default 1; the app's presenter
    mode uses 1.4), as every widget takes it. The first measurement
    runs on construction (about 0.1 s per repeat: ``roofline.measure_intensity``).
    Public: ``rows`` (the measurement), ``info`` (draw_memory_wall's result), ``measure()``,
    ``widget``, ``close()``. Raises a one-line ValueError for a bad figsize or dpi, TypeError /
    ValueError for a bad repeat or text_scale.
    """

    def __init__(self, *, figsize=(11.0, 4.6), dpi: float = NOTEBOOK_DPI, repeat: int = 7, text_scale: float = 1.0):
        figsize, dpi = widget_checks.check_figure(figsize, dpi)
        self.repeat = check_int(repeat, "repeat", 1, 100)
        self.text_scale = widget_checks.check_text_scale(text_scale)
        use_ipympl = ensure_ipympl()
        with plt.ioff():
            self.fig = plt.figure(figsize=figsize, dpi=dpi)
        self._canvas = canvas_widget(self.fig, use_ipympl)
        self.button = W.Button(description="measure again", tooltip="time QKᵀ and exp(S) again on this machine")
        self.status = W.HTML()
        self.button.on_click(lambda _: self.measure())
        self._row = W.HBox([self.button, self.status])
        self._notice = restart_notice()      # the page says so if the kernel goes
        self.widget = W.VBox([self._row, self._canvas, self._notice])
        self.widget.add_class(LIVE_CLASS)
        self.rows, self.info = [], {}
        self.measure()

    def measure(self) -> list[dict]:
        """Measure again (``measure_intensity`` at N in ROOFLINE_N, d = 64) and redraw."""
        self.button.disabled = True
        try:
            self.rows = measure_intensity(ROOFLINE_N, 64, repeat=self.repeat)
            self.roof_Bps = copy_bandwidth(repeat=self.repeat)
            with DRAW_LOCK, scaled_text(self.text_scale):       # views.drawlock: one draw at a time
                self.info = draw_memory_wall(self.fig, self.rows, self.roof_Bps)
            mm = max(r["mm_flops"] / r["mm_s"] for r in self.rows) / 1e9
            ew = max(r["ew_flops"] / r["ew_s"] for r in self.rows) / 1e9
            self.status.value = (f"measured on this machine, best of {self.repeat}: QKᵀ up to {mm:.0f} GFLOP/s, exp over S "
                                 f"up to {ew:.2f} GFLOP/s; a copy moves {self.info['roof_GBps']:.0f} GB/s")
            if isinstance(self._canvas, W.Image):
                buf = io.BytesIO()
                with DRAW_LOCK:
                    self.fig.savefig(buf, format="png", dpi=self.fig.dpi)
                self._canvas.value = buf.getvalue()
            else:
                self.fig.canvas.draw_idle()
        finally:
            self.button.disabled = False
        return self.rows

    @serialised
    def close(self):
        """Close the figure and the widgets (idempotent)."""
        toolbar = getattr(self.fig.canvas, "toolbar", None)
        plt.close(self.fig)
        for w in (self.button, self.status, self._row, self._canvas, self._notice, self.widget):
            close_widget(w)
        if isinstance(toolbar, W.Widget):
            close_widget(toolbar)

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)
