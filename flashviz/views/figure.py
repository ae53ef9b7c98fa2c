"""The explainer's figure: tiles, row statistics, output and meters, composed on one
matplotlib Figure. ``ExplorerFigure.draw_frame(k)`` updates every artist for frame k."""

from __future__ import annotations

from matplotlib.gridspec import GridSpec

from . import style
from .blit import BlittedView, Blitter
from .meters import MetersPanel
from .output import OutputPanel
from .rowstats import RowStatsPanel
from .text import font_height, presenter
from .tiles import TilesPanel


def _layout(fig, caption_lines: int, digits: int = 3):
    """({panel: SubplotSpec}, caption y): the margins and gaps are sized in points from the text
    sizes, the panels take the height left, so the titles, tick labels and wrapped lines fit any
    figure height and text scale. Made for the notebook's 11 × 5.25 inches at text scale 1
    (style.NOTEBOOK_FIGSIZE) and the app's 11 × 6.8 at 1 and, presenter mode, about 1.4.
    digits: of the longest query index (the tiles' and the output's y tick labels)."""
    W, H = fig.get_figwidth() * 72, fig.get_figheight() * 72     # figure size in points
    pt = style.pt

    # from the top: the step text, the caption, the tiles' two-line title and its pad (14 pt)
    caption_top = 0.025 * H + font_height(pt(12)) + 0.3 * pt(12)
    top = caption_top + font_height(pt(9), caption_lines, 1.35) + 0.4 * pt(10) + font_height(pt(10), 2) + 14
    # from the bottom: the meters' tick labels and unit, the meters, their titles, the tiles' x labels
    tick = 7                                                   # tick length + pad, points
    meters_bottom = font_height(pt(7)) + tick + font_height(pt(7)) + 1 + 3
    meters_top = meters_bottom + 3.6 * pt(7)
    bottom = meters_top + font_height(pt(9)) + 6 + font_height(pt(10)) + tick + font_height(pt(9)) + 4 + 0.5 * pt(9)
    # columns: tiles (with their colour bar), gap, row statistics, gap, output
    left = font_height(pt(10), 2) + 4 + 0.64 * digits * pt(10) + tick + 3      # the tiles' y label and tick labels
    right = 6
    cb_gap = 2.5 * pt(7) + tick + font_height(pt(7)) + 1 + 2.5 * pt(7) + tick + 0.3 * pt(9)  # colour bar, rows' y ticks
    out_gap = font_height(pt(8)) + 4 + 0.64 * digits * pt(7) + tick + 2 * pt(9)   # output's y label, ticks; wide titles
    axes_w = W - left - right - cb_gap - out_gap
    kw = {"width_ratios": [0.42 * axes_w, cb_gap, 0.33 * axes_w, out_gap, 0.25 * axes_w],
          "left": left / W, "right": 1 - right / W, "wspace": 0, "hspace": 0}
    span = H - top - bottom
    # row statistics: three axes; above the second a one-line title, above the third the two-line
    # rescale title (with a power of e)
    g1, g2 = font_height(pt(9)) + 6 + 0.4 * pt(9), font_height(pt(9), 2) + 0.3 * pt(9) + 6 + 0.8 * pt(9)
    h = (span - g1 - g2) / 3
    rows = GridSpec(5, 5, figure=fig, top=1 - top / H, bottom=bottom / H, height_ratios=[h, g1, h, g2, h], **kw)
    # output: the accumulator (as high as a row-statistics axes), its tick labels and the next title, O
    go = font_height(pt(7)) + tick + font_height(pt(9)) + 6 + 0.4 * pt(9)
    out = GridSpec(3, 5, figure=fig, top=1 - top / H, bottom=bottom / H, height_ratios=[h, go, span - h - go], **kw)
    meters = GridSpec(1, 5, figure=fig, top=meters_top / H, bottom=meters_bottom / H, **kw)
    cells = {"tiles": rows[:, 0], "m": rows[0, 2], "l": rows[2, 2], "r": rows[4, 2], "acc": out[0, 4],
             "O": out[2, 4], "hbm": meters[0, 0:3], "sram": meters[0, 4]}
    return cells, 1 - caption_top / H


class ExplorerFigure(BlittedView):
    """Builds all panels on ``fig`` (cleared first) for one Replay.

    caption: a line shown under the step text (inputs, configuration, error).
    sram_budget: bytes; budget_name: label of the preset.
    """

    def __init__(self, fig, replay, *, caption: str = "", sram_budget: int = 232_448, budget_name: str = ""):
        fig.clear()
        self.fig, self.replay = fig, replay
        # presenter mode (texts larger than in a notebook): wrapped texts and a layout with room for them
        self.big = big = presenter()
        if replay.trace.causal:
            first, _, rest = caption.partition("\n")
            key = "  (grey: masked −inf, hatched: skipped tiles)"
            # in a notebook after the second line (the check), which has room for it: after the
            # first (inputs and sizes), it would leave the figure at the notebook's 84 dpi
            if big or not rest:
                caption = f"{first}{key}" + (f"\n{rest}" if rest else "")
            else:
                caption = f"{first}\n{rest}{key}"
        if big:            # "inputs: …  ·  N = …" on two lines
            caption = caption.replace("  ·  ", "\n", 1)
        cells, caption_y = _layout(fig, caption.count("\n") + 1 if caption else 0,
                                   len(str(replay.trace.Nq)))
        self.tiles = TilesPanel(fig.add_subplot(cells["tiles"]), replay)
        self.rows = RowStatsPanel(fig.add_subplot(cells["m"]), fig.add_subplot(cells["l"]),
                                  fig.add_subplot(cells["r"]), replay)
        self.out = OutputPanel(fig.add_subplot(cells["acc"]), fig.add_subplot(cells["O"]), replay)
        self.meters = MetersPanel(fig.add_subplot(cells["hbm"]), fig.add_subplot(cells["sram"]), replay,
                                  sram_budget, budget_name)
        self.step = fig.text(0.01, 0.975, "", fontsize=style.pt(12), weight="bold", va="top")
        self.caption = fig.text(0.01, caption_y, style.sci_math(caption), fontsize=style.pt(9), va="top",
                                color="0.25", linespacing=1.35 if big else 1.5)
        self.k = None
        self.blitter = None

    def animated_artists(self):
        """(slow, fast): artists that change on some steps (images) and on every step."""
        t, r, o, m = self.tiles, self.rows, self.out, self.meters
        slow = [t.image, t.grid, o.acc, o.O]
        fast = [t.band, t.q_strip, t.k_strip, t.tile, t.title, r.m_old, r.m, r.l, r.bars, r.fired, m.bar, m.label, self.step]
        return slow, fast

    def make_blitter(self):
        """Two layers: the images (slow) under everything else that moves (fast)."""
        return Blitter(self.fig, *self.animated_artists())

    @property
    def n_frames(self) -> int:
        return self.replay.n_frames

    @staticmethod
    def blit_key(s):
        """The slow layer's key: changes exactly when an image's content changes (tiles computed,
        rows written, accumulator)."""
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
