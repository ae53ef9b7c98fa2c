"""Causal masking (chapter 5): which tiles are skipped, partially masked or full; what it saves.

``CausalFigure`` draws one causal FA2 run (``flash_forward(..., causal=True, record=True)``):

* the Nq × Nk score matrix as its grid of Br × Bc tiles, each classified by
  ``masking.tile_kind`` — full (no entry masked), partial (the mask cuts it: computed, then the
  masked entries set to −inf) or skipped (every entry masked: never loaded, never computed);
* the bottom-right aligned mask at element level (query i sees key j iff j ≤ i + Nk − Nq): the
  masked entries darkened, the diagonal dashed, and, when Nq > Nk, the first Nq − Nk query rows
  marked: they see no key at all (O = 0, lse = −inf);
* one frame per query block i: the key blocks it visits outlined, the others skipped;
* FLOPs and HBM bytes, causal against non-causal (``iomodel.flash_forward_io``), the causal bars
  filling block by block with the sums over the run's trace, and the fraction saved.

Every number comes from ``CausalReplay`` (flashviz.replay.causal); this module only draws.
"""

from __future__ import annotations

import numpy as np
from matplotlib.collections import PatchCollection
from matplotlib.gridspec import GridSpec
from matplotlib.patches import Patch, Polygon, Rectangle
from matplotlib.ticker import MaxNLocator
from matplotlib.transforms import ScaledTranslation

from ..masking import causal_offset
from ..replay.causal import CausalReplay, CausalState, visible_pairs  # noqa: F401 (re-exported)
from ..replay.grid import tile_kinds  # noqa: F401 (re-exported)
from . import style
from .blit import BlittedView
from .heights import points_layout
from .style import fmt_bytes, fmt_count
from .text import line_height, text_width, tick_row, wrap_text

KIND_COLOURS = {"full": "#6baed6", "partial": "#cbb7e3", "skipped": style.SKIPPED}
NO_KEY = "#d62728"        # query rows that see no key (Nq > Nk)


class CausalFigure(BlittedView):
    """The causal tile grid, one frame per query block, with FLOPs and bytes saved.

    fig: a matplotlib Figure (cleared first); trace: a recorded causal FA2 run
    (``flash_forward(Q, K, V, causal=True, record=True)``, order "fa2"); caption: a line under the
    step text. Public: ``n_frames`` (Tr), ``draw_frame(k)`` → CausalState, ``render(k)``,
    ``enable_blitting()``, ``replay`` (the CausalReplay), ``kinds`` ((Tr, Tc) tile kinds), ``io``
    ({"causal", "non-causal"}: ``flash_forward_io``), ``counts`` (the numbers of the table), ``fig``.
    Raises ValueError for a trace that is not causal or not in FA2 order.
    """

    def __init__(self, fig, trace, *, caption: str = ""):
        self.replay = rp = CausalReplay(trace)      # raises before the figure is touched
        fig.clear()
        self.fig, self.tr = fig, trace
        self.kinds, self.io, self.counts = rp.kinds, rp.io, rp.counts
        self.cum_flops, self.cum_bytes, self.visits = rp.cum_flops, rp.cum_bytes, rp.visits
        self.big = points_layout(fig)         # presenter mode, or a notebook's short figure
        if self.big:
            grid_ax, bars_ax, table_ax, detail_x, caption, caption_y, spacing = self._large_layout(fig, caption)
        else:
            gs = GridSpec(2, 2, figure=fig, width_ratios=[1.25, 1], height_ratios=[1, 1.05], left=0.07, right=0.975,
                          top=0.83, bottom=0.08, wspace=0.2, hspace=0.45)
            grid_ax, bars_ax, table_ax = fig.add_subplot(gs[:, 0]), fig.add_subplot(gs[0, 1]), fig.add_subplot(gs[1, 1])
            detail_x, caption, caption_y, spacing = 0.205, style.sci_math(caption), 0.935, 1.5
        self._draw_grid(grid_ax)
        self._draw_bars(bars_ax)
        self._draw_table(table_ax)
        self.step = fig.text(0.01, 0.975, "", fontsize=style.pt(12), weight="bold", va="top")
        self.detail = fig.text(detail_x, 0.972, "", fontsize=style.pt(10), va="top")
        self.caption = fig.text(0.01, caption_y, caption, fontsize=style.pt(8.5), va="top", color="0.25",
                                linespacing=spacing)
        self.k = None
        self.blitter = None

    # --- presenter layout -----------------------------------------------------------------
    _LEGEND_LINES = 3.4         # the legend's height in lines: title, two rows, the space between
    _TABLE_SPACING = 1.2        # the table's line spacing in presenter mode
    _table_blank = True         # the table keeps its blank line (presenter mode: where it fits)

    def _large_layout(self, fig, caption: str):
        """Presenter mode (text scale > 1): the step detail on two lines right of the widest
        step text, the caption wrapped to the figure's width, the right column as wide as its
        table, the grid (left) and the bars and table (right) placed in points from the sizes
        of the texts around them. Returns (grid axes, bars axes, table axes, detail x, caption,
        caption y, caption line spacing)."""
        tr = self.tr
        W, H = fig.get_figwidth() * 72, fig.get_figheight() * 72
        step_w = text_width(f"query block {tr.Tr}/{tr.Tr}", style.pt(12), weight="bold")
        detail_x = max(0.205, 0.01 + (step_w + style.pt(10)) / W)
        caption = wrap_text(style.sci_math(caption), style.pt(8.5), 0.98 * W)
        spacing = 1.35
        header = max(line_height(style.pt(12)), line_height(style.pt(10), 2)) + style.pt(3)
        caption_y = 0.975 - header / H
        below_caption = (1 - caption_y) * H + line_height(style.pt(8.5), caption.count("\n") + 1, spacing) + style.pt(5)
        # the right column: as wide as its widest text (the table, in monospace), at least 40%
        table_w = max(text_width(line, style.pt(8), family="monospace") for line in self._table_lines())
        col = min(max(table_w, self._footnote_w(), 0.4 * W) + style.pt(2), 0.5 * W)
        x_right = 0.975 - col / W
        # the left grid ends where the bars' tick labels and the strip beside the grid begin
        ytl = max(text_width(t, style.pt(8)) for t in self._bar_labels())
        x_grid_right = x_right - (ytl + 8 + style.pt(8)) / W
        # the grid's title may overhang the grid as far as the figure's margin on the left allows
        # and on the right, short of the bars' column (both titles above the same top)
        self._grid_title_w = (x_grid_right - 0.08) * W + 2 * min(0.07 * W, (x_right - x_grid_right) * W - 6)
        self._bars_title = wrap_text("causal vs non-causal (solid: through this query block)".replace(" (", " · ("),
                                     style.pt(9), col).replace(" · (", " (")
        n_title = max(self._grid_title().count("\n"), self._bars_title.count("\n")) + 1
        r_top = below_caption + line_height(style.pt(9), n_title) + 8
        bottom = 0.01 + (tick_row(7) + 4 + line_height(style.pt(8.5), 2)) / H
        grid_ax = fig.add_subplot(GridSpec(1, 1, figure=fig, left=0.08, right=x_grid_right, top=1 - r_top / H,
                                           bottom=bottom)[0])
        # right: bars (four rows of tick labels, one or two lines each), then the table
        unit = (line_height(style.pt(8), 2) + line_height(style.pt(8))) / 2 + 3      # points per bar row
        bars_h = 4.4 * unit
        gap = tick_row(7) + style.pt(5)
        # the table's rows lose their blank line where they would run into the footnote
        room = H * (1 - 0.015) - r_top - bars_h - gap
        need = (self._LEGEND_LINES * line_height(style.pt(8)) + style.pt(6) + style.pt(4)
                + line_height(style.pt(8), len(self._table_lines()), self._TABLE_SPACING)
                + line_height(style.pt(7.5), self._footnote().count("\n") + 1))
        self._table_blank = bool(need <= room)
        gs = GridSpec(2, 1, figure=fig, left=x_right, right=0.975, top=1 - r_top / H, bottom=0.015,
                      height_ratios=[bars_h, H * (1 - 0.015) - r_top - bars_h - gap],
                      hspace=2 * gap / (H * (1 - 0.015) - r_top - gap))
        return grid_ax, fig.add_subplot(gs[0]), fig.add_subplot(gs[1]), detail_x, caption, caption_y, spacing

    def _bar_labels(self):
        return ["FLOPs\nnon-causal", "causal", "bytes\nnon-causal", "causal"]

    def _table_lines(self):
        """The table under the bars: non-causal and causal counts and what the mask saves
        (narrower columns and shorter lines in presenter mode)."""
        c, tr = self.counts, self.tr
        name, a, b, pct = (15, 11, 10, 7) if self.big else (16, 11, 11, 8)

        def row(label, key, fmt):
            x, y = c[key]["non-causal"], c[key]["causal"]
            return f"{label:<{name}}{fmt(x):>{a}}{fmt(y):>{b}}{100 * (1 - y / x):>{pct}.1f}%"

        NN, vis, comp = tr.Nq * tr.Nk, c["visible_pairs"], c["computed_pairs"]
        head = f"{'':<{name}}{'non-causal':>{a}}{'causal':>{b}}{'saved':>{pct + 1}}"
        rows = [row("tiles computed", "tiles", str), row("FLOPs (matmul)", "flops", fmt_count),
                row("HBM bytes (FA2)", "hbm_bytes", fmt_bytes)]
        if self.big:
            return [head, *rows, *[""] * int(self._table_blank), f"visible pairs: {vis:,} of {NN:,} ({100 * vis / NN:.1f}%)",
                    f"computed pairs (whole tiles): {comp:,}", f"→ {comp - vis:,} computed, then masked"]
        return [head, *rows, "", f"visible (query, key) pairs: {vis:,} of {NN:,} ({100 * vis / NN:.1f}%)",
                f"computed pairs (whole tiles): {comp:,}",
                f"→ {comp - vis:,} computed, then masked, in partial tiles"]

    def _footnote(self):
        tr = self.tr
        if self.big:
            return (f"{tr.itemsize}-byte elements, d = {tr.d}; counts: iomodel.flash_forward_io,\n"
                    f"= the sums over this run's trace (solid bars)")
        return (f"bytes of {tr.itemsize}-byte elements, d = {tr.d}; counts: iomodel.flash_forward_io,\n"
                f"equal to the sums over this run's trace (the solid bars)")

    def _footnote_w(self):
        return text_width(self._footnote(), style.pt(7.5))

    def _grid_title(self):
        tr = self.tr
        off = causal_offset(tr.Nq, tr.Nk)
        sign = "+" if off >= 0 else "−"
        if off > 0:
            where = f"Nq < Nk: even query 0 sees keys 0–{off}"
        elif off < 0:
            where = f"Nq > Nk: the first {-off} query row{'s' if off < -1 else ''} see no key (red)"
        else:
            where = "Nq = Nk: the usual lower triangle"
        title = (f"query i sees key j iff j ≤ i + Nk − Nq = i {sign} {abs(off)}  (dashed)\n"
                 f"{where}; dark: masked entries")
        return wrap_text(title, style.pt(9), self._grid_title_w) if self.big else title

    # --- static parts ---------------------------------------------------------------------
    def _draw_grid(self, ax):
        tr = self.tr
        self.ax = ax
        rects = {kd: [] for kd in KIND_COLOURS}
        for i in range(tr.Tr):
            for j in range(tr.Tc):
                x0, y0 = j * tr.Bc, i * tr.Br
                rects[self.kinds[i, j]].append(Rectangle((x0, y0), min(tr.Bc, tr.Nk - x0), min(tr.Br, tr.Nq - y0)))
        lw = 0.5 if tr.Tr * tr.Tc <= 1024 else 0.0
        for kd, rs in rects.items():
            if rs:
                ax.add_collection(PatchCollection(rs, facecolor=KIND_COLOURS[kd], edgecolor="0.45", linewidth=lw,
                                                  hatch="//" if kd == "skipped" else None, zorder=1))
        off = causal_offset(tr.Nq, tr.Nk)
        # masked entries (element level): row r hides keys r + off + 1 .. Nk − 1
        r = np.arange(tr.Nq)
        start = np.clip(r + off + 1, 0, tr.Nk).astype(float)
        xs = np.repeat(start, 2)
        ys = np.column_stack([r, r + 1]).ravel().astype(float)
        poly = np.vstack([[tr.Nk, 0], np.column_stack([xs, ys]), [tr.Nk, tr.Nq]])
        ax.add_patch(Polygon(poly, closed=True, facecolor="k", alpha=0.3, edgecolor="none", zorder=1.5))
        ax.plot([off, tr.Nk], [0, tr.Nq], color="k", lw=1.0, ls="--", zorder=2)
        if off < 0:                       # Nq > Nk: the first Nq − Nk rows see no key
            n = -off
            ax.add_patch(Rectangle((0, 0), tr.Nk, n, facecolor="none", edgecolor=NO_KEY, hatch="xx", lw=0, alpha=0.6,
                                   zorder=1.6))
            rows = "row 0" if n == 1 else f"rows 0–{n - 1}"
            ax.text(0.5 * tr.Nk, min(n / 2, 0.5 * tr.Nq), f"{rows} see no key:\nO = 0, lse = −inf", color=NO_KEY,
                    ha="center", va="center", fontsize=style.pt(8.5), weight="bold", zorder=4,
                    bbox=dict(facecolor="w", edgecolor=NO_KEY, alpha=0.9, boxstyle="round,pad=0.25"))
        ax.set_xlim(0, tr.Nk)
        ax.set_ylim(tr.Nq, 0)
        # the box follows the matrix's shape (wide when Nq < Nk), clamped so extremes stay readable
        ax.set_box_aspect(float(np.clip(tr.Nq / tr.Nk, 0.55, 1.8)))
        ax.set_anchor("N")
        ax.xaxis.set_major_locator(MaxNLocator(6, integer=True))
        ax.yaxis.set_major_locator(MaxNLocator(6, integer=True))
        ax.tick_params(labelsize=style.pt(7))
        xlabel = f"key index j   (Nk = {tr.Nk}; blocks of Bc = {tr.Bc})"
        ylabel = f"query index i   (Nq = {tr.Nq}; blocks of Br = {tr.Br})"
        if self.big:            # two lines where one is longer than the grid's side
            pos, fig = ax.get_position(), ax.figure
            w, h = pos.width * fig.get_figwidth() * 72, pos.height * fig.get_figheight() * 72
            aspect = ax.get_box_aspect()
            w, h = min(w, h / aspect), min(h, w * aspect)
            if text_width(xlabel, style.pt(8.5)) > w:
                xlabel = xlabel.replace("   (", "\n(")
            if text_width(ylabel, style.pt(8.5)) > h:
                ylabel = ylabel.replace("   (", "\n(")
        ax.set_xlabel(xlabel, fontsize=style.pt(8.5))
        ax.set_ylabel(ylabel, fontsize=style.pt(8.5))
        ax.set_title(self._grid_title(), fontsize=style.pt(9), pad=8)
        self.box = Rectangle((0, 0), 0, 0, fill=False, edgecolor=style.CURRENT, lw=2.5, zorder=3)
        self.strip = Rectangle((1.01 * tr.Nk, 0), 0.025 * tr.Nk, 0, facecolor=style.CURRENT, clip_on=False, zorder=3)
        for p in (self.box, self.strip):
            ax.add_patch(p)

    def _draw_bars(self, ax):
        c = self.counts
        rows = [("FLOPs", "flops", fmt_count), ("HBM bytes (FA2)", "hbm_bytes", fmt_bytes)]
        self.fill = {}
        for n, (_label, key, fmt) in enumerate(rows):
            y = 3.2 - 2.2 * n
            full, causal = c[key]["non-causal"], c[key]["causal"]
            ax.barh(y, 100, height=0.8, color="0.6")
            ax.text(100, y, f" {fmt(full)}", va="center", fontsize=style.pt(8))
            ax.barh(y - 1, 100 * causal / full, height=0.8, color=style.TILED, alpha=0.25)
            (self.fill[key],) = ax.barh(y - 1, 0, height=0.8, color=style.TILED)
            saved = 1 - causal / full
            ax.text(100 * causal / full, y - 1, f" {fmt(causal)}  (saves {100 * saved:.0f}%)", va="center",
                    fontsize=style.pt(8), color=style.OK if saved > 0 else "k")
        ax.set_yticks([3.2, 2.2, 1.0, 0.0], self._bar_labels(), fontsize=style.pt(8))
        ax.set_xlim(0, 160)
        if self.big:            # room right of every bar for its text
            fig = ax.figure
            width = ax.get_position().width * fig.get_figwidth() * 72
            ends = [(100, f" {fmt(c[key]['non-causal'])}") for _, key, fmt in rows]
            ends += [(100 * c[key]["causal"] / c[key]["non-causal"],
                      f" {fmt(c[key]['causal'])}  (saves {100 * (1 - c[key]['causal'] / c[key]['non-causal']):.0f}%)")
                     for _, key, fmt in rows]
            ax.set_xlim(0, max(160, *(x * width / max(width - text_width(t, style.pt(8)) - 4, 0.2 * width)
                                      for x, t in ends)))
        ax.set_ylim(-0.6, 3.8)
        ax.set_xticks([0, 25, 50, 75, 100], ["0", "25", "50", "75", "100%"], fontsize=style.pt(7))
        ax.set_title(self._bars_title if self.big else "causal vs non-causal (solid: through this query block)",
                     fontsize=style.pt(9))
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)

    def _draw_table(self, ax):
        c = self.counts
        lines = self._table_lines()
        ax.axis("off")
        k = c["kinds"]
        handles = [Patch(facecolor=KIND_COLOURS[kd], edgecolor="0.45", hatch="//" if kd == "skipped" else None,
                         label=f"{kd} ({k[kd]})") for kd in ("full", "partial", "skipped")]
        handles.append(Patch(facecolor="none", edgecolor=style.CURRENT, lw=2, label="visited by this Q_i"))
        legend = {"handles": handles, "fontsize": style.pt(8), "ncol": 2, "loc": "upper left", "frameon": False,
                  "handlelength": 1.4, "columnspacing": 1.0, "title": "tiles", "title_fontsize": style.pt(8),
                  "alignment": "left"}
        if self.big:            # from the axes' top down, in points: legend, table; the footnote at the bottom
            ax.legend(**legend, bbox_to_anchor=(0, 1), borderaxespad=0, borderpad=0)
            below = (self._LEGEND_LINES * line_height(style.pt(8)) + style.pt(6)) / 72
            ax.text(0.0, 1, "\n".join(lines), family="monospace", fontsize=style.pt(8), va="top", ha="left",
                    transform=ax.transAxes + ScaledTranslation(0, -below, ax.figure.dpi_scale_trans),
                    linespacing=self._TABLE_SPACING)
            ax.text(0.0, 0, self._footnote(), fontsize=style.pt(7.5), color="0.35", transform=ax.transAxes,
                    va="bottom")
            return
        ax.legend(**legend, bbox_to_anchor=(-0.01, 1.12))
        ax.text(0.0, 0.74, "\n".join(lines), family="monospace", fontsize=style.pt(8), va="top", ha="left",
                transform=ax.transAxes, linespacing=1.5)
        ax.text(0.0, -0.06, self._footnote(), fontsize=style.pt(7.5), color="0.35", transform=ax.transAxes,
                va="bottom")

    # --- frames ---------------------------------------------------------------------------
    @property
    def n_frames(self) -> int:
        return self.replay.n_frames

    def animated_artists(self):
        return [self.box, self.strip,
                self.fill["flops"], self.fill["hbm_bytes"], self.step,
                self.detail]


    def draw_frame(self, k: int) -> CausalState:
        """Update the artists to query block i = k (0 <= k < n_frames); returns the state."""
        s = self.replay.state(k)          # raises IndexError outside 0..n_frames-1
        tr = self.tr
        self.box.set_bounds(0, s.r0, min(s.visited * tr.Bc, tr.Nk), s.r1 - s.r0)
        self.box.set_visible(s.visited > 0)
        self.strip.set_y(s.r0)
        self.strip.set_height(s.r1 - s.r0)
        self.fill["flops"].set_width(100 * s.flops_so_far / self.counts["flops"]["non-causal"])
        self.fill["hbm_bytes"].set_width(100 * s.bytes_so_far / self.counts["hbm_bytes"]["non-causal"])
        self.step.set_text(f"query block {s.i + 1}/{tr.Tr}")
        self.detail.set_text(s.text.replace(": ", ":\n", 1) if self.big else s.text)     # presenter: two lines
        self.k = k
        return s
