"""The explainer's figure: tiles, row statistics, output and meters, composed on one
matplotlib Figure. ``ExplorerFigure.draw_frame(k)`` updates every artist for frame k."""

from __future__ import annotations

from matplotlib.gridspec import GridSpec

from . import style
from .blit import Blitter
from .meters import MetersPanel
from .output import OutputPanel
from .rowstats import RowStatsPanel
from .tiles import TilesPanel


class ExplorerFigure:
    """Builds all panels on ``fig`` (cleared first) for one Replay.

    caption: a line shown under the step text (inputs, configuration, error).
    sram_budget: bytes; budget_name: label of the preset.
    """

    def __init__(self, fig, replay, *, caption: str = "", sram_budget: int = 232_448, budget_name: str = ""):
        fig.clear()
        self.fig, self.replay = fig, replay
        gs = GridSpec(4, 3, figure=fig, width_ratios=[1.5, 1, 1], height_ratios=[1, 1, 1, 0.75],
                      left=0.075, right=0.98, top=0.83, bottom=0.065, wspace=0.3, hspace=0.8)
        self.tiles = TilesPanel(fig.add_subplot(gs[0:3, 0]), replay)
        self.rows = RowStatsPanel(fig.add_subplot(gs[0, 1]), fig.add_subplot(gs[1, 1]),
                                  fig.add_subplot(gs[2, 1]), replay)
        self.out = OutputPanel(fig.add_subplot(gs[0, 2]), fig.add_subplot(gs[1:3, 2]), replay)
        self.meters = MetersPanel(fig.add_subplot(gs[3, 0:2]), fig.add_subplot(gs[3, 2]), replay,
                                  sram_budget, budget_name)
        self.step = fig.text(0.01, 0.975, "", fontsize=12, weight="bold", va="top")
        if replay.trace.causal:
            first, _, rest = caption.partition("\n")
            caption = f"{first}  (grey: masked −inf, hatched: skipped tiles)" + (f"\n{rest}" if rest else "")
        self.caption = fig.text(0.01, 0.94, style.sci_math(caption), fontsize=9, va="top", color="0.25", linespacing=1.5)
        self.k = None
        self.blitter = None

    def animated_artists(self):
        """(slow, fast): artists that change on some steps (images) and on every step."""
        t, r, o, m = self.tiles, self.rows, self.out, self.meters
        slow = [t.image, t.grid, o.acc, o.O]
        fast = [t.band, t.q_strip, t.k_strip, t.tile, t.title, r.m_old, r.m, r.l, r.bars, r.fired, m.bar, m.label, self.step]
        return slow, fast

    def enable_blitting(self):
        """Render later frames by blitting (call once the figure has its canvas)."""
        self.blitter = Blitter(self.fig, *self.animated_artists())

    def render(self, k: int):
        """Update to frame k and render it to the canvas (blitting when enabled)."""
        s = self.draw_frame(k)
        if self.blitter is not None:
            self.blitter.update(self._slow_key(s))
        else:
            self.fig.canvas.draw_idle()
        return s

    @property
    def n_frames(self) -> int:
        return self.replay.n_frames

    @staticmethod
    def _slow_key(s):
        """Changes exactly when an image's content changes (tiles computed, rows written, accumulator)."""
        return (s.tiles_done, s.writes_done, id(s.O_acc), id(s.O_acc_l))

    def draw_frame(self, k: int):
        """Update all artists to frame k (does not render; the caller draws the canvas)."""
        s = self.replay.state(k)
        self.tiles.update(s)
        self.rows.update(s)
        self.out.update(s)
        self.meters.update(s)
        self.step.set_text(f"step {k + 1}/{self.replay.n_frames}:  {s.text}")
        self.k = k
        return s
