"""The decode explainer's panels (``decode_view.DecodeFigure`` composes them): the paged KV cache
(``PagesPanel``), the SMs (``SMPanel``), the watched row's partials and merge (``PartialsPanel``,
``MergePanel``) and the meters (``DecodeMeters``: HBM bytes against the bandwidth, SMs busy).
Each panel builds its artists on the axes it is given and ``update(state)`` sets them for a
frame's ``DecodeState`` (flashviz.replay.decode); the figure decides the layout and blitting."""

from __future__ import annotations

import matplotlib as mpl
import numpy as np
from matplotlib.collections import LineCollection, PolyCollection
from matplotlib.colors import to_rgba
from matplotlib.patches import Patch, Rectangle
from matplotlib.ticker import FixedLocator, FormatStrFormatter, MaxNLocator, NullLocator
from matplotlib.transforms import ScaledTranslation, blended_transform_factory

from ..replay.decode import BYTE_GROUPS, DecodeReplay, DecodeState
from . import style
from .style import fmt_bytes, fmt_number
from .text import presenter, text_width

IDLE = "0.9"                   # an SM with no block
BROKEN = style.BAD             # the merge without rescaling
GROUP_COLOURS = {"K, V": style.TILED, "Q": "#9ecae1", "partials": style.CURRENT, "O, lse": style.OK,
                 "block table": "#9467bd"}


def split_colours(S: int) -> np.ndarray:
    """(S, 4) RGBA: a colour per split (tab10 up to 10 splits, tab20 up to 20, viridis beyond)."""
    if S <= 10:
        return np.array([to_rgba(c) for c in mpl.colormaps["tab10"].colors[:S]])
    if S <= 20:
        return np.array([to_rgba(c) for c in mpl.colormaps["tab20"].colors[:S]])
    return mpl.colormaps["viridis"](np.linspace(0, 0.95, S))


def pale(rgba: np.ndarray, share) -> np.ndarray:
    """``rgba`` mixed with white: ``share`` of the colour (0: white, 1: the colour itself)."""
    share = np.asarray(share, float)[..., None]
    out = rgba.copy()
    out[..., :3] = 1 - share * (1 - rgba[..., :3])
    return out


def _small(ax, size=7):
    ax.tick_params(labelsize=style.pt(size), length=2, pad=1)


def _off(ax):
    ax.set_xticks([])
    ax.set_yticks([])
    for sp in ax.spines.values():
        sp.set_visible(False)


def grid_shape(n: int, aspect: float) -> tuple[int, int]:
    """(rows, cols) of a grid of at least n square cells for a box ``aspect`` = width / height."""
    cols = max(1, int(np.ceil(np.sqrt(n * aspect))))
    return -(-n // cols), cols


class PagesPanel:
    """The pool of KV-cache pages, each coloured by the split that reads it; pale until read."""

    def __init__(self, ax, rp: DecodeReplay, colours):
        self.ax, self.rp = ax, rp
        _off(ax)
        n = rp.num_pages
        box = ax.get_window_extent()
        self.rows, self.cols = grid_shape(n, box.width / box.height)
        self.base = np.ones((self.rows * self.cols, 4))
        split = rp.page_split
        known = np.isfinite(split)
        self.base[:n][known] = colours[split[known].astype(int)]
        self.used = np.zeros(self.rows * self.cols, bool)
        self.used[:n] = known
        self.image = ax.imshow(pale(self.base, 0.18).reshape(self.rows, self.cols, 4), interpolation="nearest",
                               aspect="auto", extent=(0, self.cols, self.rows, 0))
        self.lines = []
        if self.rows * self.cols <= 1600:        # page borders, where a page is a few pixels wide
            segs = [[(0, r), (self.cols, r)] for r in range(self.rows + 1)]
            segs += [[(c, 0), (c, self.rows)] for c in range(self.cols + 1)]
            self.lines.append(ax.add_collection(LineCollection(segs, colors="w", linewidths=0.6)))
        ax.set_xlim(0, self.cols)
        ax.set_ylim(self.rows, 0)

    def update(self, s: DecodeState):
        share = np.zeros(self.rows * self.cols)
        share[: self.rp.num_pages] = s.page_read
        rgba = pale(self.base, 0.18 + 0.82 * share)
        rgba[~self.used] = (1, 1, 1, 1)
        self.image.set_data(rgba.reshape(self.rows, self.cols, 4))


class SMPanel:
    """The model GPU's SMs as a grid of cells: each running block's cell in its split's colour,
    filled from the bottom as the block streams its key blocks; grey when idle."""

    def __init__(self, ax, rp: DecodeReplay, colours, cols: int = 12):
        self.ax, self.rp, self.colours = ax, rp, colours
        _off(ax)
        n = rp.num_sms
        self.cols = cols
        self.rows = -(-n // cols)
        xy = np.array([(i % cols, i // cols) for i in range(n)], float)
        self.xy = xy
        pad = 0.08
        self.cells = np.array([[(x + pad, y + pad), (x + 1 - pad, y + pad), (x + 1 - pad, y + 1 - pad),
                                (x + pad, y + 1 - pad)] for x, y in xy])
        self.bg = PolyCollection(self.cells, facecolors=IDLE, edgecolors="none")
        self.fill = PolyCollection(self.cells, facecolors=IDLE, edgecolors="none")
        ax.add_collection(self.bg)
        ax.add_collection(self.fill)
        ax.set_xlim(0, cols)
        ax.set_ylim(self.rows, 0)
        ax.set_aspect("equal", adjustable="box")
        ax.set_anchor("N")
        self.note = ax.text(0.5, 0.5, "", transform=ax.transAxes, ha="center", va="center", fontsize=style.pt(8),
                            bbox=dict(facecolor="w", edgecolor="0.6", alpha=0.92, boxstyle="round,pad=0.35"))
        self.note.set_visible(False)

    def update(self, s: DecodeState):
        on = s.sm_split >= 0
        cols = np.tile(to_rgba(IDLE), (len(on), 1))
        cols[on] = pale(self.colours[s.sm_split[on]], 0.3)
        self.bg.set_facecolor(cols)
        verts = self.cells.copy()
        top = verts[:, 0, 1] + (verts[:, 2, 1] - verts[:, 0, 1]) * (1 - s.sm_progress)
        verts[:, 0, 1] = verts[:, 1, 1] = np.where(on, top, verts[:, 2, 1])   # fill from the bottom (y down)
        fc = np.tile(to_rgba(IDLE), (len(on), 1))
        fc[on] = self.colours[s.sm_split[on]]
        self.fill.set_verts(verts)
        self.fill.set_facecolor(fc)
        self.note.set_visible(s.phase != "run")


class PartialsPanel:
    """The watched row's partials, one row per split: m_s (dots) and lse_s = m_s + log l_s (rings)
    with the merge's running max of the lse_s (a line), l_s (bars) and O_s (an image)."""

    def __init__(self, ax_m, ax_l, ax_O, rp: DecodeReplay, colours, vmax: float):
        self.rp = rp
        S = rp.S
        self.axes = (ax_m, ax_l, ax_O)
        vals = np.concatenate([rp.m_parts, rp.lse_parts])
        vals = vals[np.isfinite(vals)]
        lo, hi = (vals.min(), vals.max()) if vals.size else (0.0, 1.0)
        span = max(hi - lo, 0.5)
        ax_m.set_xlim(lo - 0.15 * span, hi + 0.15 * span)
        ax_m.set_ylim(S - 0.5, -0.5)
        ms = 3.5 if S <= 40 else 2
        (self.m_dots,) = ax_m.plot([], [], "o", ms=ms, color="k", zorder=3)
        (self.lse_dots,) = ax_m.plot([], [], "o", ms=ms + 1.5, mfc="none", mec=style.CURRENT, mew=1.0, zorder=3)
        self.m_line = ax_m.axvline(np.nan, color=style.CURRENT, lw=1.2, zorder=2)
        ax_m.xaxis.set_major_locator(MaxNLocator(2, steps=[1, 2, 5, 10]))   # a narrow panel: two ticks fit at
        ax_m.xaxis.set_major_formatter(FormatStrFormatter("%g"))             # every size (three overlapped)
        ax_m.yaxis.set_major_locator(MaxNLocator(5, integer=True, min_n_ticks=1))
        _small(ax_m)
        ax_m.set_ylabel("split s", fontsize=style.pt(7), labelpad=1)
        lmax = float(np.max(rp.l_parts)) if len(rp.l_parts) else 1.0
        ax_l.set_xlim(0, 1.1 * max(lmax, 1e-30))
        ax_l.set_ylim(S - 0.5, -0.5)
        h = 0.8 if S <= 40 else 1.0
        self._bar = np.array([[(0, s - h / 2), (1, s - h / 2), (1, s + h / 2), (0, s + h / 2)] for s in range(S)],
                             float)
        self.l_bars = PolyCollection(self._bar * [0, 1], facecolors=colours, edgecolors="none")
        ax_l.add_collection(self.l_bars)
        ax_l.set_yticks([])
        ax_l.xaxis.set_major_locator(MaxNLocator(2))
        _small(ax_l)
        self.buf = np.full((S, rp.dv), np.nan)
        self.image = ax_O.imshow(self.buf, cmap=style.output_cmap(), vmin=-vmax, vmax=vmax, interpolation="nearest",
                                 aspect="auto", extent=(0, rp.dv, S - 0.5, -0.5))
        ax_O.set_yticks([])
        ax_O.xaxis.set_major_locator(MaxNLocator(4, integer=True))
        _small(ax_O)
        self.marks = [ax.add_patch(Rectangle((ax.get_xlim()[0], -0.5), np.diff(ax.get_xlim())[0], 1, fill=False,
                                             edgecolor=style.CURRENT, lw=1.6, clip_on=False, zorder=4))
                      for ax in (ax_m, ax_l, ax_O)]
        self._shown = -1

    def update(self, s: DecodeState):
        rp = self.rp
        done = s.partial_done
        ys = np.arange(rp.S)
        self.m_dots.set_data(np.where(done, rp.m_parts, np.nan), ys)
        self.lse_dots.set_data(np.where(done, rp.lse_parts, np.nan), ys)
        widths = np.where(done, rp.l_parts, 0.0)
        v = self._bar.copy()
        v[:, 1:3, 0] = widths[:, None]
        self.l_bars.set_verts(v)
        n = int(done.sum())
        if n != self._shown:
            self._shown = n
            self.buf[:] = np.nan
            self.buf[done] = rp.O_parts[done]
            self.image.set_data(self.buf)
        merging = s.phase == "merge"
        for r in self.marks:
            r.set_visible(merging)
            r.set_y(s.s - 0.5)
        self.m_line.set_xdata([s.m, s.m] if s.merged and rp.S > 1 else [np.nan, np.nan])


class MergePanel:
    """The watched row's merged O so far against the exact one (and the broken merge), and the
    error of the merge against the dense reference after each split."""

    def __init__(self, ax_cmp, ax_err, rp: DecodeReplay, vmax: float, broken: bool, *, below: float = 0.0,
                 x0: float = 0.0):
        self.rp, self.broken, self.big = rp, broken, presenter()
        fig = ax_cmp.figure
        at = blended_transform_factory(fig.transFigure, ax_cmp.transAxes) + ScaledTranslation(
            0, -below / 72, fig.dpi_scale_trans)
        # the running merge state in numbers, under the rows of O (x0: its left, a figure fraction)
        self.numbers = ax_cmp.text(x0, 0, "", transform=at, va="top", ha="left", fontsize=style.pt(7.5),
                                   clip_on=False)
        names = ["merged so far" if rp.S > 1 else "the split's O", "exact"] + (["no rescale"] if broken else [])
        self.buf = np.full((len(names), rp.dv), np.nan)
        self.buf[1] = rp.O_ref_row
        self.image = ax_cmp.imshow(self.buf, cmap=style.output_cmap(), vmin=-vmax, vmax=vmax,
                                   interpolation="nearest", aspect="auto", extent=(0, rp.dv, len(names) - 0.5, -0.5))
        ax_cmp.set_yticks(range(len(names)), names)
        ax_cmp.xaxis.set_major_locator(MaxNLocator(4, integer=True))
        _small(ax_cmp)
        if broken:
            ax_cmp.get_yticklabels()[2].set_color(BROKEN)
        S = rp.S
        xs = np.arange(1, S + 1)
        vals = np.concatenate([rp.merge_err, rp.merge_err_broken if broken else []])
        vals = vals[np.isfinite(vals) & (vals > 0)]
        lo = max(float(vals.min()) if vals.size else 1e-8, 1e-17)
        hi = float(vals.max()) if vals.size else 1.0
        ax_err.set_yscale("log")
        y0, y1 = lo / 4, max(hi * 4, lo * 100)
        ax_err.set_ylim(y0, y1)
        e0, e1 = int(np.ceil(np.log10(y0))), int(np.floor(np.log10(y1)))
        stride = max(1, -(-(e1 - e0 + 1) // 4))                 # at most four powers of ten labelled
        ax_err.yaxis.set_major_locator(FixedLocator([10.0 ** e for e in range(e1, e0 - 1, -stride)]))
        ax_err.yaxis.set_minor_locator(NullLocator())
        ax_err.set_xlim(0.5, S + 0.5)
        ax_err.xaxis.set_major_locator(MaxNLocator(5, integer=True, min_n_ticks=1))
        _small(ax_err)
        ax_err.set_xlabel("splits merged", fontsize=style.pt(7), labelpad=1)
        self.xs = xs
        (self.err_line,) = ax_err.plot([], [], "-o", ms=2.5, lw=1.2, color=style.TILED, label="merge")
        (self.bad_line,) = ax_err.plot([], [], "--o", ms=2.5, lw=1.2, color=BROKEN, label="no rescale")
        self.bad_line.set_visible(broken)
        if broken and S > 1:
            ax_err.legend(handles=[self.err_line, self.bad_line], labels=["merge", "no rescale"], loc="lower left",
                          fontsize=style.pt(7), frameon=False, handlelength=1.8, borderaxespad=0.2)
        for side in ("top", "right"):
            ax_err.spines[side].set_visible(False)

    def update(self, s: DecodeState):
        rp = self.rp
        n = s.merged if rp.S > 1 else int(s.partial_done[0])
        self.numbers.set_text(self._numbers(s))
        self.buf[0] = s.O
        if self.broken:
            self.buf[2] = s.O_broken
        self.image.set_data(self.buf)
        if rp.S > 1:
            self.err_line.set_data(self.xs[:n], rp.merge_err[:n])
            self.bad_line.set_data(self.xs[:n], rp.merge_err_broken[:n])
        else:
            self.err_line.set_data(self.xs[:n], [s.err] * n)


    def _numbers(self, s: DecodeState) -> str:
        """The running merge state: m, l and, while merging, this split's α and β."""
        if not np.isfinite(s.m) and not s.l > 0:
            return ""
        f = fmt_number
        text = f"m = {f(s.m)},  l = {f(s.l)}"
        if s.phase == "merge":
            text += f",  α = {f(s.alpha)},  β = {f(s.beta)}"
            if self.broken and not self.big:
                text += f"   (no rescale: l = {f(s.l_broken)})"
        elif s.phase == "write":
            text += f"  →  lse = m + log l = {f(s.m + np.log(s.l))}"
        elif self.rp.S == 1:
            text += "  (one split: no merge)"
        return text


class DecodeMeters:
    """HBM bytes so far (stacked by tensor) against the run's total and the time the bandwidth
    allows; SMs busy now and over the run."""

    def __init__(self, ax_hbm, ax_sm, rp: DecodeReplay, bandwidth: float, legend_dy: float):
        self.rp, self.bw = rp, bandwidth
        tot = rp.cum_by
        total = int(rp.cum_bytes[-1])
        self.total = total
        self.unit, self.u = style.byte_unit(total, min_count=2)
        x = 0.0
        self.bars = {}
        for g in BYTE_GROUPS:
            w = tot[g][-1] / self.u
            ax_hbm.barh([1], [w], left=[x], color=GROUP_COLOURS[g], alpha=0.3, height=0.6)
            (self.bars[g],) = ax_hbm.barh([0], [0], left=[0], color=GROUP_COLOURS[g], height=0.6)
            x += w
        us = total / bandwidth * 1e6
        # room right of the bars for their labels ("16.6 MiB ≥ 4.07 µs"), black on white whatever they end in
        label_w = text_width(f"  {fmt_bytes(total)} ≥ {fmt_number(us)} µs  ", style.pt(7.5)) + style.pt(7.5)
        ax_w = ax_hbm.get_position().width * ax_hbm.figure.get_figwidth() * 72
        ax_hbm.set_xlim(0, total / self.u / max(1 - label_w / ax_w, 0.3))
        ax_hbm.set_ylim(-0.5, 1.5)
        ax_hbm.set_yticks([0, 1], ["so far", "whole run"])
        ax_hbm.xaxis.set_major_locator(MaxNLocator(4 if presenter() else 6, steps=[1, 2, 5, 10]))
        _small(ax_hbm, 7)
        ax_hbm.tick_params(axis="y", labelsize=style.pt(7.5))
        for side in ("top", "right"):
            ax_hbm.spines[side].set_visible(False)
        ax_hbm.text(total / self.u, 1, f" {fmt_bytes(total)} ≥ {fmt_number(us)} µs", ha="left", va="center",
                    fontsize=style.pt(7.5), color="k")
        self.label = ax_hbm.text(0, 0, "", va="center", fontsize=style.pt(7.5))
        shares = [(g, tot[g][-1] / total) for g in BYTE_GROUPS if tot[g][-1]]
        handles = [Patch(facecolor=GROUP_COLOURS[g], label=f"{g} {fmt_bytes(tot[g][-1])} ({_pct(p)})"
                         if g == "block table" else f"{g} {_pct(p)}") for g, p in shares]
        ncol = len(handles) if not presenter() else min(3, len(handles))
        below = ax_hbm.transAxes + ScaledTranslation(0, -legend_dy / 72, ax_hbm.figure.dpi_scale_trans)
        ax_hbm.legend(handles=handles, ncol=ncol, fontsize=style.pt(7), frameon=False, loc="upper left",
                      bbox_to_anchor=(0, 0), bbox_transform=below, handlelength=1.0, columnspacing=0.9,
                      handletextpad=0.4, borderaxespad=0, borderpad=0)
        n = rp.num_sms
        ax_sm.barh([1], [rp.sm_busy_share * n], color="0.45", height=0.6)
        ax_sm.text(rp.sm_busy_share * n, 1, f" {100 * rp.sm_busy_share:.0f}% of the SM-steps", va="center",
                   ha="left" if rp.sm_busy_share < 0.6 else "right", color="k" if rp.sm_busy_share < 0.6 else "w",
                   fontsize=style.pt(7.5))
        (self.sm_bar,) = ax_sm.barh([0], [0], color=style.TILED, height=0.6)
        self.sm_label = ax_sm.text(0, 0, "", va="center", fontsize=style.pt(7.5))
        ax_sm.set_xlim(0, n)
        ax_sm.set_ylim(-0.5, 1.5)
        ax_sm.set_yticks([0, 1], ["now", "whole run"])
        ax_sm.set_xticks([0, n // 4, n // 2, 3 * n // 4, n])
        _small(ax_sm, 7)
        ax_sm.tick_params(axis="y", labelsize=style.pt(7.5))
        for side in ("top", "right"):
            ax_sm.spines[side].set_visible(False)
        self.axes = (ax_hbm, ax_sm)

    def update(self, s: DecodeState):
        x = 0.0
        for g, bar in self.bars.items():
            w = s.bytes_by[g] / self.u
            bar.set_x(x)
            bar.set_width(w)
            x += w
        us = s.hbm_bytes / self.bw * 1e6
        self.label.set(x=x, text=f" {fmt_bytes(s.hbm_bytes)} ≥ {fmt_number(us)} µs")
        n = self.rp.num_sms
        self.sm_bar.set_width(s.sms_busy)
        busy = f"{s.sms_busy} of {n} busy" if s.phase == "run" else "merge kernel"
        right = s.sms_busy > 0.62 * n
        self.sm_label.set(x=s.sms_busy, ha="right" if right else "left", color="w" if right else "k",
                          text=f"{busy} " if right else f" {busy}")



def _pct(p: float) -> str:
    """A share as a short percentage: 96%, 2.9%, 0.2%, <0.1%."""
    return "<0.1%" if p < 0.001 else (f"{100 * p:.1f}%" if p < 0.1 else f"{100 * p:.0f}%")
