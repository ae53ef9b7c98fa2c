"""Online softmax of one row, block by block: the row x, m and l, the rescale factor, the
partial weights exp(x − m), and the exact result side by side with a broken variant.

``OnlineRun`` (flashviz.replay.online) computes every frame from flashviz.online (no drawing);
``OnlineSoftmaxFigure`` draws one frame per streamed block plus a final "normalise" frame. No
widgets in here.
"""

from __future__ import annotations

import numpy as np
from matplotlib.collections import PolyCollection
from matplotlib.colors import to_rgba_array
from matplotlib.gridspec import GridSpec
from matplotlib.patches import Patch, Rectangle
from matplotlib.ticker import MaxNLocator
from matplotlib.transforms import ScaledTranslation

from ..replay.online import BREAK_MODES, OnlineFrame, OnlineRun, softmax64  # noqa: F401 (re-exported)
from . import style
from .blit import BlittedView, Blitter
from .style import fmt_number
from .text import line_height, presenter

SEEN, GHOST, REF = style.TILED, "0.55", "k"
Y_TOPS = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.35)   # few y ranges: few full redraws
EXP_LIMIT = {np.dtype(np.float32): 88.72, np.dtype(np.float64): 709.78, np.dtype(np.float16): 11.09}


def _style(ax, title):
    ax.set_title(title, fontsize=style.pt(9), loc="left")
    ax.tick_params(labelsize=style.pt(7))
    ax.xaxis.set_major_locator(_ticks(8))


def _presenter_rows(fig, caption_lines: int):
    """(bottom, top) in figure fractions of the three rows of axes in presenter mode: each row
    leaves room, in inches, for its title above it (two lines) and its tick labels and x label
    below it, at the current text scale; the axes share what is left 1.15 : 0.9 : 1.0."""
    H = fig.get_figheight()
    title_pad, tick_out = 6 / 72, 7 / 72                  # axes.titlepad; tick length + tick pad
    below = tick_out + 2 * 1.05 * style.pt(7) / 72 + 1 / 72 + 0.02      # tick labels, x label (labelpad 1)
    two = (line_height(style.pt(9), 2) / 72, line_height(style.pt(9), 2) / 72, line_height(style.pt(8.5), 2) / 72)
    titles = tuple(t + title_pad for t in two)                      # two-line titles, inches
    gap, margin = 0.08, 0.04
    y = H - 0.08 - line_height(style.pt(12)) / 72 - line_height(style.pt(9), caption_lines) / 72 - 0.06   # first title's top
    free = y - margin - sum(titles) - 3 * below - 2 * gap
    heights = np.array([1.15, 0.9, 1.0]) / 3.05 * free
    rows = []
    for t, h in zip(titles, heights):
        top = y - t
        rows.append(((top - h) / H, top / H))
        y = top - h - below - gap
    return rows


def _ticks(n):
    return MaxNLocator(n, integer=True, min_n_ticks=1)


def _broken_is_wrong(f) -> bool:
    return f.p_broken is not None and not (np.isfinite(f.err_broken) and f.err_broken < 1e-4
                                           and abs(f.sum_broken - 1) < 1e-4)


class Bars:
    """Bars as one PolyCollection (hundreds of bars redraw fast): heights and colours per frame."""

    def __init__(self, ax, x, width, *, bottom=0.0, color="0.8", **kw):
        self.x0, self.x1 = np.asarray(x, float) - width / 2, np.asarray(x, float) + width / 2
        self.bottom = bottom
        self.coll = PolyCollection([], facecolors=color, **kw)
        ax.add_collection(self.coll)
        self.set(np.zeros(len(self.x0)))

    def set(self, heights, colors=None):
        b, t = self.bottom, self.bottom + np.nan_to_num(np.asarray(heights, float), nan=0.0, posinf=0.0, neginf=0.0)
        self.coll.set_verts(np.stack([np.stack([self.x0, self.x0, self.x1, self.x1], 1),
                                      np.stack([np.full_like(t, b), t, t, np.full_like(t, b)], 1)], -1))
        if colors is not None:
            self.coll.set_facecolor(to_rgba_array(colors))


class OnlineSoftmaxFigure(BlittedView):
    """Draws an OnlineRun on ``fig`` (cleared first). caption: a line under the step text.

    Build it inside ``style.scaled_text(scale)``: every text size goes through ``style.pt``. At a
    scale above 1 (presenter mode) the rows are placed in inches to leave room for the larger
    texts, and the long texts go on two lines or are shortened; at scale 1 the notebook layout."""

    def __init__(self, fig, x, block: int, *, broken: str = "none", dtype=np.float32, caption: str = ""):
        fig.clear()
        self.fig, self.run = fig, OnlineRun(x, block, broken=broken, dtype=dtype)
        r, N, T = self.run, self.run.N, self.run.T
        self.big = big = presenter()
        if big:
            # presenter: a long caption on two lines (after its first " · "); rows placed in inches
            if len(caption) > 105 and "  ·  " in caption:
                caption = caption.replace("  ·  ", "\n", 1)
            H = fig.get_figheight()
            rows = _presenter_rows(fig, caption.count("\n") + 1)
            ax_x = fig.add_subplot(GridSpec(1, 1, figure=fig, left=0.06, right=0.985, bottom=rows[0][0],
                                            top=rows[0][1])[0])
            gs1, gs2 = (GridSpec(1, 3, figure=fig, left=0.06, right=0.985, bottom=b, top=t, wspace=0.25)
                        for b, t in rows[1:])
            self.ax_m, self.ax_l, self.ax_a = (fig.add_subplot(gs1[c]) for c in range(3))
            self.ax_w, self.ax_ex, self.ax_br = (fig.add_subplot(gs2[c]) for c in range(3))
            step_y = 1 - 0.08 / H
            caption_y = step_y - (line_height(style.pt(12)) / 72 + 0.02) / H
        else:
            gs = GridSpec(3, 3, figure=fig, height_ratios=[1.15, 0.9, 1.0], left=0.06, right=0.985, top=0.855,
                          bottom=0.06, hspace=0.75, wspace=0.25)
            ax_x = fig.add_subplot(gs[0, :])
            self.ax_m, self.ax_l, self.ax_a = (fig.add_subplot(gs[1, c]) for c in range(3))
            self.ax_w, self.ax_ex, self.ax_br = (fig.add_subplot(gs[2, c]) for c in range(3))
            step_y, caption_y = 0.975, 0.935
        self.step = fig.text(0.01, step_y, "", fontsize=style.pt(12), weight="bold", va="top")
        self.caption = fig.text(0.01, caption_y, style.sci_math(caption), fontsize=style.pt(9), va="top",
                                color="0.25")
        idx, bw = np.arange(N), 0.85 if N <= 128 else 1.0
        # the row x: bars from the bottom of the axes (scores near 800 are all tall)
        lo, hi = float(r.x.min()), float(r.x.max())
        pad = 0.12 * max(hi - lo, 1.0)
        self.lo = lo - pad
        self.xbars = Bars(ax_x, idx, bw, bottom=self.lo, linewidth=0)
        self.xbars.set(r.x - self.lo)
        ax_x.set_ylim(self.lo, hi + (2.5 if big else 1.6) * pad)     # room for the m label
        ax_x.set_xlim(-0.6, N - 0.4)
        if T <= 64:
            for c in range(block, N, block):
                ax_x.axvline(c - 0.5, color="0.75", lw=0.6, ls=":")
        self.span = Rectangle((0, 0), 0, 1, transform=ax_x.get_xaxis_transform(), color=style.CURRENT, alpha=0.13)
        ax_x.add_patch(self.span)
        (self.m_old_line,) = ax_x.plot([], [], ls="--", color=GHOST, lw=1.2)
        (self.m_line,) = ax_x.plot([], [], color=SEEN, lw=1.8)
        # 2 pt above the line's end, so its white box does not cover the line it names
        self.m_text = ax_x.text(0, 0, "", fontsize=style.pt(8), color=SEEN, va="bottom", ha="right",
                                bbox=dict(fc="w", ec="none", alpha=0.75, pad=0.5),
                                transform=ax_x.transData + ScaledTranslation(0, 2 / 72, ax_x.figure.dpi_scale_trans))
        _style(ax_x, f"the row x ({N} scores), streamed in blocks of {block}" + ("\n" if big else ";  ")
               + "line: running max m (dashed: m before this block)")
        ax_x.legend(handles=[Patch(color=SEEN, label="streamed"), Patch(color=style.CURRENT, label="this block"),
                             Patch(color="0.85", label="not read yet")], loc="lower right", bbox_to_anchor=(1, 1.0),
                    ncol=3, fontsize=style.pt(7), frameon=False, borderaxespad=0.1, handlelength=1)
        ax_x.set_xlabel("element k", fontsize=style.pt(7), labelpad=1)
        ax_x.ticklabel_format(axis="y", useOffset=False, style="plain")
        self._init_stats(T)
        self._init_weights(idx, bw)
        self.k = None
        self.blitter, self._top, self._drawn_top = None, None, None

    def animated_artists(self):
        """Every artist that changes between frames (drawn on top of a cached background)."""
        arts = [self.step, self.span, self.xbars.coll, self.m_line, self.m_old_line, self.m_text,
                self.m_hist, self.m_old_pt, self.m_pt, self.m_info, self.l_hist, self.lb_hist, self.l_old_box,
                self.l_kept, self.l_new, self.l_info, self.a_bars.coll, self.a_now, self.a_info,
                self.w_ghost.coll, self.w_bars.coll, self.w_title]
        for _, bars, ref, bad, title, note in self.cmp:
            arts += [bars.coll, ref, bad, title, note]
        return arts

    def make_blitter(self):
        """One fast layer; a savefig keeps the caches and gets the step text (a figure text) here."""
        return Blitter(self.fig, [], self.animated_artists(), figure_artists_on_save=True)

    def render(self, k: int) -> OnlineFrame:
        """Update to frame k and render it (blitting; a full redraw only when a y range changes)."""
        f = self.draw_frame(k)
        if self.blitter is None:
            self.fig.canvas.draw_idle()
            return f
        if self._top != self._drawn_top:
            self.blitter.static_bg = None        # the comparison axes' ticks changed: redraw them
            self._drawn_top = self._top
        self.blitter.update(0)
        return f

    # --- panels -------------------------------------------------------------------------------
    def _init_stats(self, T):
        r, js = self.run, np.arange(T)
        ms = np.array([s.m for s in r.steps])
        ls = np.array([s.l for s in r.steps] + ([s.l for s in r.steps_norescale] if r.broken == "no rescale" else []))
        for ax in (self.ax_m, self.ax_l, self.ax_a):
            ax.set_xlim(-0.6, T - 0.4)
            ax.set_xlabel("block j", fontsize=style.pt(7), labelpad=1)
        fin = ms[np.isfinite(ms)]
        lo, hi = (float(fin.min()), float(fin.max())) if fin.size else (0.0, 1.0)
        pad = 0.15 * max(hi - lo, 0.5)
        self.ax_m.set_ylim(lo - pad, hi + (3.0 if self.big else 2.2) * pad)      # room for a line of text
        self.ax_m.ticklabel_format(axis="y", useOffset=False, style="plain")
        (self.m_hist,) = self.ax_m.plot([], [], "o-", color=SEEN, alpha=0.35, ms=3, lw=1)
        (self.m_old_pt,) = self.ax_m.plot([], [], "o", mfc="none", mec=GHOST, ms=7)
        (self.m_pt,) = self.ax_m.plot([], [], "o", color=SEEN, ms=7)
        self.m_info = self.ax_m.text(0.02, 0.95, "", transform=self.ax_m.transAxes, fontsize=style.pt(7.5), va="top")
        _style(self.ax_m, "running max m  (○ m_old, ● m)")
        # l: history, and the current block as  rescaled old sum + this block's weights
        two = r.broken != "none"
        room = (2.0 if two else 1.5) if self.big else 1.65
        self.ax_l.set_ylim(0, room * max(float(ls.max()), 1.0))        # room for one or two lines of text
        (self.l_hist,) = self.ax_l.plot([], [], "o-", color="#9467bd", alpha=0.35, ms=3, lw=1)
        (self.lb_hist,) = self.ax_l.plot([], [], "x--", color=style.BAD, ms=4, lw=1)
        w = 0.7
        self.l_old_box = Rectangle((0, 0), w, 0, fill=False, ec="k", ls="--", lw=1.2, zorder=3)
        self.l_kept = Rectangle((0, 0), w, 0, color=SEEN)
        self.l_new = Rectangle((0, 0), w, 0, color=style.CURRENT)
        for p in (self.l_old_box, self.l_kept, self.l_new):
            self.ax_l.add_patch(p)
        self.l_info = self.ax_l.text(0.02, 0.95, "", transform=self.ax_l.transAxes, fontsize=style.pt(7.5), va="top",
                                     bbox=dict(fc="w", ec="none", alpha=0.8, pad=0.5))
        _style(self.ax_l, ("running sum l\n" if self.big else "running sum l ")
               + "= rescale·l_old + Σ exp(x_block − m)")
        # the rescale factor per block
        self.ax_a.set_ylim(0, 1.85 if self.big else 1.45)              # room for two lines of text
        self.a_bars = Bars(self.ax_a, js, 0.7 if T > 1 else 0.4, linewidth=0)
        (self.a_now,) = self.ax_a.plot([], [], "k-", lw=1.4)        # outline of the current block's bar
        self.ax_a.axhline(1, color="0.7", lw=0.6, ls=":")
        self.a_info = self.ax_a.text(0.02, 0.95, "", transform=self.ax_a.transAxes, fontsize=style.pt(7.5), va="top")
        broken = r.broken == "no rescale"
        self.ax_a.set_title("rescale factor exp(m_old − m)" + (("\n— " if self.big else ": ") + "NOT applied"
                                                               if broken else ""),
                            fontsize=style.pt(9), loc="left", color=style.BAD if broken else "k")
        self.ax_a.tick_params(labelsize=style.pt(7))
        self.ax_a.xaxis.set_major_locator(_ticks(8))
        for ax in (self.ax_m, self.ax_l):
            ax.xaxis.set_major_locator(_ticks(8))

    def _init_weights(self, idx, bw):
        N = self.run.N
        self.ax_w.set_ylim(0, 1.3)
        self.ax_w.set_xlim(-0.6, N - 0.4)
        self.w_ghost = Bars(self.ax_w, idx, bw, color="0.85", edgecolor=GHOST, linewidth=0.8 if N <= 64 else 0,
                            linestyle="--")
        self.w_bars = Bars(self.ax_w, idx, bw, color=SEEN, edgecolor="face", linewidth=0 if N <= 128 else 0.6)
        self.w_title = self.ax_w.set_title("", fontsize=style.pt(9), loc="left")
        self.ax_w.tick_params(labelsize=style.pt(7))
        self.ax_w.xaxis.set_major_locator(_ticks(6))
        self.ax_w.set_xlabel("element k   (grey: as first computed, with an older m)", fontsize=style.pt(7), labelpad=1)
        self.cmp = []
        for ax, colour in ((self.ax_ex, SEEN), (self.ax_br, style.BAD if self.run.broken != "none" else "0.7")):
            bars = Bars(ax, idx, bw, color=colour, edgecolor="face", linewidth=0 if N <= 128 else 0.6)
            (ref,) = ax.plot([], [], "_", color=REF, ms=max(2.0, min(8.0, 300 / N)), mew=1.5)
            (bad,) = ax.plot([], [], "x", color=style.BAD, ms=6, mew=1.5)
            title = ax.set_title("", fontsize=style.pt(8.5), loc="left")
            note = ax.text(0.5, 0.45, "", transform=ax.transAxes, ha="center", va="center", fontsize=style.pt(7.5),
                           color=style.BAD, bbox=dict(fc="w", ec="0.8", alpha=0.9, pad=2), zorder=5)
            ax.set_xlim(-0.6, N - 0.4)
            ax.tick_params(labelsize=style.pt(7))
            ax.xaxis.set_major_locator(_ticks(6))
            ax.set_xlabel("element k   (—: float64 softmax)", fontsize=style.pt(7), labelpad=1)
            self.cmp.append((ax, bars, ref, bad, title, note))

    # --- frames -------------------------------------------------------------------------------
    @property
    def n_frames(self) -> int:
        return self.run.n_frames

    def draw_frame(self, k: int) -> OnlineFrame:
        """Update every artist to frame k (does not render); returns the frame's OnlineFrame."""
        r = self.run
        f = r.frame(k)
        self._draw_row(f)
        self._draw_stats(f)
        self._draw_weights(f)
        self._draw_compare(f)
        if f.final:
            text = f"step {k + 1}/{r.n_frames}: normalise — p = exp(x − m) / l with m = {fmt_number(f.m, 6)}, l = {fmt_number(f.l, 4)}"
        else:
            where = f"element {f.c0}" if f.c1 - f.c0 == 1 else f"elements {f.c0}…{f.c1 - 1}"
            text = f"step {k + 1}/{r.n_frames}: block j = {f.j} ({where}) — "
            if self.big:           # presenter: the line must fit at the larger size
                text += "update m and l" if f.applied else "rescale NOT applied"
            else:
                text += "update m and l" + ("" if f.applied else "  [break it: rescale NOT applied]")
        self.step.set_text(text)
        self.k = k
        return f

    def _draw_row(self, f):
        i = np.arange(self.run.N)
        colors = np.where(i < f.c1, SEEN, "0.85").astype(object)
        if not f.final:
            colors[f.c0:f.c1] = style.CURRENT
        self.xbars.coll.set_facecolor(to_rgba_array(list(colors)))
        self.span.set_x(f.c0 - 0.5)
        self.span.set_width(f.c1 - f.c0)
        self.span.set_visible(not f.final)
        self.m_line.set_data([-0.5, f.c1 - 0.5], [f.m, f.m])
        old = np.isfinite(f.m_old) and not f.final
        self.m_old_line.set_data(([-0.5, f.c0 - 0.5], [f.m_old, f.m_old]) if old else ([], []))
        self.m_text.set_position((f.c1 - 0.5, f.m))
        self.m_text.set_text(f"m = {fmt_number(f.m, 5)} ")
        if self.big:       # presenter: a label that would run past the axes' left edge goes right of its end
            self.m_text.set_horizontalalignment("right")
            if self.m_text.get_window_extent().x0 < self.m_text.axes.bbox.x0:
                self.m_text.set_horizontalalignment("left")

    def _draw_stats(self, f):
        r, j = self.run, f.j
        js = np.arange(j + 1)
        self.m_hist.set_data(js, [s.m for s in r.steps[: j + 1]])
        self.m_pt.set_data([j], [f.m])
        self.m_old_pt.set_data(([j], [f.m_old]) if np.isfinite(f.m_old) and not f.final else ([], []))
        grew = "grew" if f.m > f.m_old else "did not grow"
        if f.final:
            self.m_info.set_text(f"m = {fmt_number(f.m, 5)}")
        elif self.big:
            self.m_info.set_text(f"m: {fmt_number(f.m_old, 5)} → {fmt_number(f.m, 5)} ({grew})")
        else:
            self.m_info.set_text(f"m_old = {fmt_number(f.m_old, 5)} → m = {fmt_number(f.m, 5)} ({grew})")
        s = r.steps[j]
        l_old = r.steps[j - 1].l if j > 0 else 0.0
        kept = s.rescale * l_old                      # the exact algorithm; the broken l is the red line
        new = float(s.p_block.sum())
        self.l_hist.set_data(js, [t.l for t in r.steps[: j + 1]])
        if r.broken == "no rescale":
            self.lb_hist.set_data(js, [t.l for t in r.steps_norescale[: j + 1]])
        for p, y, h in ((self.l_old_box, 0, l_old), (self.l_kept, 0, kept), (self.l_new, kept, new)):
            p.set_x(j - 0.35)
            p.set_y(y)
            p.set_height(h)
            p.set_visible(not f.final and h > 0)
        if f.final:
            info = (f"l = Σ exp(x − m) = {fmt_number(f.l, 4)}" if self.big else
                    f"l = {fmt_number(f.l, 4)}  (exact: Σ exp(x − m) over the row)")
        else:
            info = f"l = {fmt_number(s.rescale, 3)}·{fmt_number(l_old, 4)} + {fmt_number(new, 4)} = {fmt_number(f.l, 4)}"
        if r.broken == "no rescale":
            info += f"\nno rescale: l = {fmt_number(f.l_broken, 4)}  (red ×)"
        elif r.broken == "no max-subtraction":
            # presenter: the mode's name is left out (the panel is too narrow); the comparison panel says it
            info += ("\n" if self.big else "\nno max-subtraction: ") + f"Σ exp(x) = {fmt_number(f.l_broken, 4)}" + (
                " (= $e^m$ · l)" if np.isfinite(f.l_broken) else " (overflow)")
        self.l_info.set_text(info)
        self.l_info.set_color(style.BAD if _broken_is_wrong(f) else "k")
        self._draw_rescale(f)

    def _draw_rescale(self, f):
        r = self.run
        a = np.array([s.rescale if 0 < i <= f.j else 0.0 for i, s in enumerate(r.steps)])
        self.a_bars.set(a, [style.CURRENT if v < 1 else "0.6" for v in a])
        if f.final or f.j == 0:
            self.a_now.set_data([], [])
        else:
            x0, x1 = self.a_bars.x0[f.j], self.a_bars.x1[f.j]
            self.a_now.set_data([x0, x0, x1, x1, x0], [0, f.rescale, f.rescale, 0, 0])
        if f.final:
            fired = sum(1 for s in r.steps[1:] if s.rescale < 1)
            info = f"fired on {fired} of {r.T - 1} later blocks" if r.T > 1 else "one block: never needed"
        elif f.j == 0:
            info = "first block: m_old = −∞, l_old = 0,\nnothing to rescale"
        elif f.rescale < 1:
            verb = (("should shrink l_old: NOT applied" if self.big else "should shrink the old sum: NOT applied")
                    if not f.applied else "fired: the old sum shrinks")
            # exp(…) as the panel's title writes it: a superscript this long is too small to read
            info = f"exp({fmt_number(f.m_old, 4)} − {fmt_number(f.m, 4)}) = {fmt_number(f.rescale)}\n{verb}"
        else:
            info = "= 1: the max did not grow," + ("\n" if self.big else " ") + "old sum kept"
        self.a_info.set_text(info)
        self.a_info.set_color(style.CURRENT if (f.rescale < 1 and f.j > 0 and not f.final) else "k")

    def _draw_weights(self, f):
        r = self.run
        now, stale = r.weights(f)
        colors = np.full(r.N, SEEN, dtype=object)
        if not f.final:
            colors[f.c0:f.c1] = style.CURRENT
        self.w_bars.set(now, list(colors))
        self.w_ghost.set(stale)
        if f.final:
            self.w_title.set_text("exp(x − m): divide by l to get p")
        else:
            self.w_title.set_text("partial weights exp(x − m)")
        self.w_title.set_text(self.w_title.get_text() + ("\n" if self.big else ";  ") + f"Σ = l = {fmt_number(f.l, 4)}")

    def _draw_compare(self, f):
        r = self.run
        top = 1.3 * max(float(f.p_ref.max()), float(np.nanmax(np.where(np.isfinite(f.p_exact), f.p_exact, 0))))
        top = self._top = next((t for t in Y_TOPS if t >= top), Y_TOPS[-1])
        if self.big:       # presenter: shorter, the panels are narrow for the larger text
            what = "the row" if f.final else f"x[0:{f.c1}]"
        else:
            what = "the whole row" if f.final else f"x[0:{f.c1}] so far"
        panels = [(f.p_exact, f.err_exact, f.sum_exact, "exact online")]
        if r.broken == "none":
            panels.append((f.p_ref, 0.0, float(f.p_ref.sum()), "reference, float64"))
        else:
            panels.append((f.p_broken, f.err_broken, f.sum_broken, r.broken if self.big else f"broken: {r.broken}"))
        for (ax, bars, ref, bad, title, note), (p, err, total, name) in zip(self.cmp, panels):
            h = np.zeros(r.N)
            h[: f.c1] = np.where(np.isfinite(p), p, 0)
            bars.set(h)
            ref.set_data(np.arange(f.c1), f.p_ref)
            nonfinite = np.flatnonzero(~np.isfinite(p))
            bad.set_data(nonfinite, np.full(nonfinite.size, 0.9 * top))
            ax.set_ylim(0, top)
            right = (np.isfinite(err) and err < 1e-4 and abs(total - 1) < 1e-4)
            title.set_text(f"{name}: p of {what}\n" + ("error" if self.big else "max |p − p_ref| =")
                           + f" {fmt_number(err, 2)} · Σp = "
                           + (f"{total:.6f}" if np.isfinite(total) else "NaN") + ("" if right else " ≠ 1"))
            title.set_color(style.OK if right else style.BAD)
            text = self._note(f, p, nonfinite) if ax is self.ax_br else ""
            note.set_text(text)
            note.set_color(style.BAD if text.startswith("✗") else "0.25")
            note.set_visible(bool(text))

    def _note(self, f, p, nonfinite) -> str:
        r = self.run
        lim = EXP_LIMIT.get(r.dtype, float("nan"))
        top = fmt_number(float(r.x[:f.c1].max()), 4)
        if r.broken == "no max-subtraction" and not np.isfinite(f.l_broken):
            if self.big:       # presenter: three short lines (the panel is narrow for the larger text)
                head = (f"✗ exp(x) overflows {r.dtype.name} above\nx ≈ {lim:g}; here x reaches {top}:\n"
                        "Σ exp(x) = inf")
                return f"{head} → inf / inf = NaN (×)" if nonfinite.size else f"{head} → every p = 0"
            head = (f"✗ exp(x) overflows {r.dtype.name} above x ≈ {lim:g};\n"
                    f"scores here reach {top}, so Σ exp(x) = inf")
            if nonfinite.size:
                return f"{head}\n→ inf / inf = NaN (×) at {nonfinite.size} of {f.c1} entries"
            return f"{head}\n→ every p = finite / inf = 0"
        if r.broken == "no max-subtraction" and np.isfinite(f.sum_broken) and f.err_broken < 1e-4:
            if self.big:
                return f"fine here: scores ≤ {top} stay\nbelow {r.dtype.name}'s overflow, x ≈ {lim:g}"
            return (f"fine here: scores ≤ {top} stay below\n"
                    f"{r.dtype.name}'s overflow point x ≈ {lim:g}")
        if r.broken == "no rescale" and f.err_broken < 1e-12:
            return "still right: the max has not" + ("\n" if self.big else " ") + "grown after the first block"
        return ""
