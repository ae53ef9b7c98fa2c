"""A measured GPU run on one time axis (issue 12): ``TimelineFigure`` draws a ``gpu.Timeline``.

Linked panels, one "now" instant per frame (the run's span cut into ``n_frames`` equal slices,
now at each slice's middle):

* the whole GPU: one lane per SM, every thread block a bar from its start to its end, coloured
  by its query block i — waves, the tail of the last wave and the causal imbalance show;
* under it, SMs busy and the achieved TFLOP/s per frame slice (FLOPs of the tiles that finished
  in the slice over its length), with the now line;
* one thread block zoomed (a block whose step events were kept, ``Timeline.detail_ctas``): a
  lane per warpgroup (wgmma: loads and math on two rows) or warp (teaching kernel), each step a
  bar coloured by its name (``flashviz.steps``), on a window of a few tiles around now;
* the Tr × Tc tile grid of the algorithm, each (i, j) tile lit by how many heads have it in
  flight at now across the whole GPU (summed over heads and batch), tiles already done shaded;
* numbers read off the timeline: SMs busy, TFLOP/s in the slice, the tail's share of the run,
  the tile times, a block's time per tile against what the device's measured matmul ceiling
  allows (``tile_vs_ceiling``), and the run's facts (device, date, kernel_ms uninstrumented,
  traced_ms; "a recorded run" or "measured now").

Only the now lines, the zoomed bars, the lit tiles, the block's outline and the texts change
per frame (blitting: ``render(k)``); all block bars are drawn once.
"""

from __future__ import annotations

from dataclasses import dataclass

import matplotlib as mpl
import numpy as np
from matplotlib.collections import PolyCollection
from matplotlib.patches import Patch, Rectangle

from ..records.timeline_stats import Ceiling, in_flight, tail_share, tile_flops, tile_vs_ceiling
from . import style
from .blit import BlittedView, Blitter
from .text import font_height, text_width, wrap_text

#: frames a run is cut into
N_FRAMES = 120
#: colours of the steps (names of flashviz.steps; the kernels' sub-steps load_K, load_V too)
STAGE_COLOURS = {
    "load_Q": "#9ecae1", "load_KV": "#6baed6", "load_K": "#6baed6", "load_V": "#2171b5",
    "compute_S": "#d62728", "update_ml": "#2ca02c", "convert_P": "#bcbd22", "accumulate_O": "#9467bd",
    "write_O": "#8c564b",
}
#: steps drawn on a group's "loads" row (tensor-core kernels, where loads overlap the math)
LOAD_STAGES = ("load_Q", "load_KV", "load_K", "load_V", "write_O")
TILE_WINDOW = 2.5        # the zoom shows ± this many median tile times around now


def group_lanes(kernel: str, groups) -> tuple[dict, list[str]]:
    """The zoom's lanes for a block's ``groups`` (ints): {(group, "load" | "math"): lane index}
    and the lanes' labels, top to bottom. Two lanes a group (its loads, its math) for the
    tensor-core kernels, where a group's loads run under its math; one for the teaching kernel's
    warps, and one for fa3's producer warpgroup (group 0), which only issues copies."""
    rows, labels = {}, []
    unit = "wg" if kernel != "teaching" else "warp"
    for g in groups:
        if kernel == "fa3" and g == 0:          # fa3's producer warpgroup: copies only
            rows[(g, "math")] = rows[(g, "load")] = len(labels)
            labels.append("producer")
        elif kernel != "teaching":
            rows[(g, "load")] = len(labels)
            labels.append(f"{unit} {g} loads")
            rows[(g, "math")] = len(labels)
            labels.append(f"{unit} {g} math")
        else:
            rows[(g, "math")] = rows[(g, "load")] = len(labels)
            labels.append(f"{unit} {g}")
    return rows, labels


@dataclass
class TimelineState:
    """What frame k shows: ``now_ns``, ``busy`` (SMs running a block), ``tflops`` (achieved in
    the frame's slice), ``in_flight`` and ``done`` ((Tr, Tc) counts over heads), ``block`` (the
    zoomed cta) and whether it runs at now (``block_running``)."""

    k: int
    now_ns: float
    busy: int
    tflops: float
    in_flight: np.ndarray
    done: np.ndarray
    block: int | None
    block_running: bool


def bar_rects(x0, x1, y0, h):
    """The vertices of n bars, for a ``PolyCollection`` (one rectangle builder for every timeline
    view): bar k runs from x0[k] to x1[k] along the time axis and from y0[k] to y0[k] + h across.
    x0, x1, y0: array-likes of n numbers each; h: a number. Returns a float64 array of shape
    (n, 4, 2): the corners (x, y) of each bar, (x0, y0), (x1, y0), (x1, y0 + h), (x0, y0 + h).
    No checks: arrays of different lengths raise NumPy's ValueError."""
    x0, x1, y0 = np.asarray(x0, float), np.asarray(x1, float), np.asarray(y0, float)
    return np.stack([np.stack([x0, y0], -1), np.stack([x1, y0], -1), np.stack([x1, y0 + h], -1),
                     np.stack([x0, y0 + h], -1)], 1)


class TimelineFigure(BlittedView):
    """The timeline explorer's figure. fig: a matplotlib Figure (cleared); tl: a ``gpu.Timeline``;
    block: a cta of ``tl.detail_ctas`` to zoom, or None (each frame: a detailed block running at
    now); ceiling: the device's measured matmul rate (a ``Ceiling``) or None, then
    ``ceiling_note`` says why there is none; live: the run was measured just now (the header
    says "measured now" instead of "a recorded run"). Public: ``n_frames``, ``draw_frame(k)`` →
    TimelineState, ``render(k)``, ``enable_blitting()``, ``now_ns`` (per frame), ``busy`` and
    ``tflops`` (per frame), ``tail`` (share), ``tail_start_ns``, ``tile_median_ns``,
    ``tile_step_ns``, ``per_tile`` (``TileCeiling``), ``set_block(cta)``, ``bars`` (the block
    bars' collection), ``fig``."""

    def __init__(self, fig, tl, *, block: int | None = None, n_frames: int = N_FRAMES,
                 ceiling: Ceiling | None = None, ceiling_note: str = "no matmul ceiling recorded",
                 live: bool = False):
        if not tl.detail_ctas:
            detail = tuple(int(c) for c in np.unique(tl.events["cta"]))
        else:
            detail = tuple(tl.detail_ctas)
        self.detail = detail
        if block is not None and block not in detail:
            raise ValueError(f"block must be one of the detailed blocks {detail} or None, got {block!r}")
        fig.clear()
        self.fig, self.tl, self.block = fig, tl, block
        self.ceiling, self.ceiling_note, self.live = ceiling, ceiling_note, bool(live)
        self.big = style.text_scale() > 1.0 + 1e-9
        b = tl.blocks
        self.t_start, self.t_end = float(b["t0_ns"].min()), float(b["t1_ns"].max())
        span = self.t_end - self.t_start
        self.n_frames = int(n_frames)
        self.slice_ns = span / self.n_frames
        self.now_ns = self.t_start + self.slice_ns * (np.arange(self.n_frames) + 0.5)
        self.Tr, self.Tc = tl.grid[0], int(tl.tiles["j"].max()) + 1 if len(tl.tiles) else 1
        self.heads = tl.grid[1] * tl.grid[2]
        self.busy = tl.busy_sms(self.now_ns)
        self.flops = tile_flops(tl)
        edges = self.t_start + self.slice_ns * np.arange(self.n_frames + 1)
        fin, _ = np.histogram(tl.tiles["t1_ns"], bins=edges, weights=self.flops)
        self.tflops = fin / (self.slice_ns * 1e-9) / 1e12
        self.tail, self.tail_start_ns = tail_share(tl)
        dur = tl.tiles["t1_ns"] - tl.tiles["t0_ns"]
        self.tile_median_ns = float(np.median(dur)) if len(dur) else 0.0
        bd = b["t1_ns"] - b["t0_ns"]
        self.tile_step_ns = float(np.median(bd / np.maximum(b["n_j"], 1)))
        self.per_tile = tile_vs_ceiling(tl, ceiling.tflops if ceiling else None)
        self.window_ns = TILE_WINDOW * max(self.tile_median_ns, self.tile_step_ns)
        self._tile_order_t1 = np.sort(tl.tiles["t1_ns"])
        self._tile_key_t1 = np.argsort(tl.tiles["t1_ns"], kind="stable")
        self._tile_cell = (tl.tiles["i"] * self.Tc + tl.tiles["j"])[self._tile_key_t1]
        self._events = {c: np.sort(tl.events[tl.events["cta"] == c], order="t0_ns") for c in detail}
        self._block_row = {int(c): k for k, c in enumerate(b["cta"])}
        self._zoom_key = self._slow_key = None
        self._layout()
        self.k = None
        self.blitter = None

    # ------------------------------------------------------------------ layout
    def _layout(self):
        """Places every panel in points from the text sizes (notebook or presenter scale)."""
        fig, tl, pt, big = self.fig, self.tl, style.pt, self.big
        W, H = fig.get_figwidth() * 72, fig.get_figheight() * 72
        line = 1.3                                   # a text line's height in font sizes
        tick = 3.5 + 3.5 + pt(7) * line              # an axis's ticks and tick labels
        # header: the title, then the run's facts (two lines in presenter mode)
        kind = {"wgmma": "tensor-core kernel (wgmma)", "teaching": "teaching kernel (fp32)",
                "fa3": "FlashAttention-3 kernel (fa3)"}[tl.kernel]
        if big:
            kind = f"{tl.kernel} kernel"
        title = (f"{'' if big else 'What the GPU did: '}the {kind}, N = {tl.N}, d = {tl.d}, Br × Bc = {tl.Br} × {tl.Bc}"
                 f"{', causal' if tl.causal else ''}")
        order = getattr(tl, "order", "kernel")
        if order != "kernel":                       # an experiment's start order (Timeline.order)
            title += f", {order.replace('_', '-')} order"
        fig.text(0.008, 1 - 5 / H, title, fontsize=pt(11), weight="bold", va="top")
        over = (f" (+{100 * (tl.traced_ms / tl.kernel_ms - 1):.1f} % for the tracing)"
                if tl.kernel_ms and tl.traced_ms else "")
        times = (f"kernel {tl.kernel_ms:.3f} ms uninstrumented, traced {tl.traced_ms:.3f} ms{over}"
                 if tl.kernel_ms and tl.traced_ms else "kernel time not recorded")
        facts = (f"{'measured now' if self.live else 'a recorded run'}: {tl.device}, {tl.date} · {len(tl.blocks):,} blocks (Tr·H·B = "
                 f"{tl.grid[0]}·{tl.grid[1]}·{tl.grid[2]}) on {tl.sm_count} SMs" + ("\n" if big else " · ") + times)
        y_facts = 5 + pt(11) * line + 2
        fig.text(0.008, 1 - y_facts / H, facts, fontsize=pt(8.5), va="top", color="0.25", linespacing=1.25)
        header = y_facts + pt(8.5) * (line + (1.25 if big else 0)) + 6
        top = header + pt(9) * line + 4                          # the GPU panel's top, from the figure's top
        # left column: GPU lanes, SMs busy / TFLOP/s, the zoomed block
        unit = "warp" if tl.kernel == "teaching" else "wg"
        x0 = max(tick + pt(8.5) * line + 10, 7 + text_width(f"{unit} 0 loads", pt(7)) + 6) / W + 0.006
        x1 = 0.56 if not big else 0.52
        n_leg = len(self._present_stages())
        leg_rows = 1 if not big else 2
        bottom = 4 + leg_rows * pt(7.5) * 1.5 + 4 + pt(8.5) * line + tick
        between = tick + pt(8.5) * line + 6 + pt(9) * line + 4   # rate's x axis, the zoom's title
        room = H - top - bottom - between
        h_gpu, h_rate, h_zoom = room * 0.58, room * 0.14, room * 0.28
        y = H - top
        self.ax_gpu = fig.add_axes([x0, (y - h_gpu) / H, x1 - x0, h_gpu / H])
        y -= h_gpu
        self.ax_rate = fig.add_axes([x0, (y - h_rate) / H, x1 - x0, h_rate / H], sharex=self.ax_gpu)
        y -= h_rate + between
        self.ax_zoom = fig.add_axes([x0, (y - h_zoom) / H, x1 - x0, h_zoom / H])
        self._leg_y = 4 / H
        self._leg_ncol = n_leg if leg_rows == 1 else -(-n_leg // 2)
        self._draw_gpu()
        self._draw_rate()
        self._draw_zoom()
        # right column: the tile grid, then the numbers
        xr = x1 + (8 + pt(7) * 2.2 + 8 + pt(8.5) * line + 14) / W          # past the colour bar
        xt = xr + (tick + pt(8.5) * line + 4) / W + 0.01
        t_title = 2
        t_top = top + (t_title - 1) * pt(9) * line
        # the numbers and their notes below the grid: the grid gives up height when they need it
        rows, notes = self._table_text((0.985 - xr) * W)
        below = tick + pt(8.5) * line + 10                                   # the grid's x axis
        self._row = 1.45 if not big else 1.35                                # row pitch in font sizes
        table_h = pt(8.5) * (1.2 + self._row * (len(rows) - 1)) + 6 + font_height(pt(7.5), notes.count("\n") + 1, 1.25)
        h_tiles = max(0.12 * H, min((0.30 if not big else 0.25) * H, H - 4 - table_h - t_top - below))
        self.ax_tiles = fig.add_axes([xt, (H - t_top - h_tiles) / H, 0.975 - xt, h_tiles / H])
        self._draw_tiles(two_lines=True)
        self._draw_table(xr, 1 - (t_top + h_tiles + below) / H, rows, notes)

    def _present_stages(self):
        return [s for k, s in enumerate(self.tl.stages) if np.any(self.tl.events["stage"] == k)]

    _LABELS = ("now", "SMs busy", "tiles in flight", "tiles done", "TFLOP/s now¹", "TFLOP/s whole run", "tail²",
               "tile in flight", "block time per tile", "at the ceiling³", "measured / ceiling")

    def _table_text(self, width: float):
        """([(label, static value)], notes): the numbers' rows (an empty value: one that moves
        with now) and the footnotes, wrapped to ``width`` points."""
        tl, us = self.tl, 1e-3
        span = self.t_end - self.t_start
        total = float(self.flops.sum())
        untraced = f" ({total / (tl.kernel_ms * 1e-3) * 1e-12:,.0f} untraced)" if tl.kernel_ms else ""
        c = self.per_tile
        if c.allowed_ns is not None:
            at_ceiling = f"{c.allowed_ns * us:.2f} µs"
            ratio = f"{c.ratio:.2f}× ({100 / c.ratio:.0f} % of the ceiling)"
            if self.big:
                third = (f"³ 4·Br·Bc·d FLOPs at {self.ceiling.tflops:,.0f} ÷ {tl.sm_count} TFLOP/s ({self.ceiling.what}, "
                         f"one SM): {c.one_sm_ns * us:.2f} µs, × {c.blocks_per_sm} blocks/SM")
            else:
                third = (f"³ 4·Br·Bc·d FLOPs at one SM's share of the measured {self.ceiling.what} ceiling "
                         f"({self.ceiling.tflops:,.0f} ÷ {tl.sm_count} TFLOP/s): {c.one_sm_ns * us:.2f} µs; "
                         f"× {c.blocks_per_sm}, the blocks sharing an SM")
        else:
            at_ceiling, ratio = "none recorded", "—"
            third = f"³ {self.ceiling_note}"
        values = ["", "", "", "", "", f"{total / span * 1e-3:,.0f} traced{untraced}",
                  f"{100 * self.tail:.1f} % of the run", f"{self.tile_median_ns * us:.2f} µs (median)",
                  f"{c.measured_ns * us:.2f} µs (median)", at_ceiling, ratio]
        size = style.pt(7.5)
        if self.big:       # presenter mode: the short forms
            notes = [f"¹ tiles finished in the {self.slice_ns * us:.1f} µs around now",
                     f"² first SM idle for good ({self.tail_start_ns * us:,.1f} µs) → end, shaded", third]
        else:
            notes = [f"¹ FLOPs of the tiles that finished in the {self.slice_ns * us:.1f} µs around now",
                     f"² from the first SM idle for good ({self.tail_start_ns * us:,.1f} µs) to the end (shaded)",
                     third]
        indent = text_width("¹ ", size)
        lines = []
        for n in notes:
            head, body = n[:2], n[2:]
            wrapped = wrap_text(body, size, width - indent).split("\n")
            lines += [head + wrapped[0]] + ["   " + w for w in wrapped[1:]]
        return list(zip(self._LABELS, values)), "\n".join(lines)

    def _draw_table(self, x, y, rows, notes):
        """The numbers: labels and the values that stay (static), the values that move (animated)."""
        fig, pt = self.fig, style.pt
        size = pt(8.5)
        gap = max(text_width(lab, size) for lab, _ in rows) + size
        self._value_x = x + gap / (fig.get_figwidth() * 72)
        H = fig.get_figheight() * 72
        self.values = []
        for r, (lab, val) in enumerate(rows):
            yr = y - size * self._row * r / H
            fig.text(x, yr, lab, fontsize=size, va="top", color="0.3")
            t = fig.text(self._value_x, yr, val, fontsize=size, va="top")
            if not val:
                self.values.append(t)           # the values that move with now
        y_note = y - (size * (1.2 + self._row * (len(rows) - 1)) + 6) / H
        self.notes = fig.text(x, y_note, notes, fontsize=pt(7.5), va="top", color="0.35", linespacing=1.25)

    def _draw_gpu(self):
        ax, tl, pt = self.ax_gpu, self.tl, style.pt
        b = tl.blocks
        us = 1e-3
        self.cmap = mpl.colormaps["viridis"]
        colours = self.cmap(b["i"] / max(self.Tr - 1, 1))
        self.bars = PolyCollection(bar_rects(b["t0_ns"] * us, b["t1_ns"] * us, b["sm"] - 0.42, 0.84),
                                   facecolors=colours, edgecolors="white", linewidths=0.25)
        ax.add_collection(self.bars)
        ax.set_xlim(self.t_start * us, self.t_end * us)
        ax.set_ylim(tl.sm_count - 0.5, -0.5)
        ax.axvspan(self.tail_start_ns * us, self.t_end * us, color="#d62728", alpha=0.08, lw=0)
        ax.set_ylabel("SM", fontsize=pt(8.5), labelpad=2)
        ax.tick_params(labelsize=pt(7), labelbottom=False)
        ax.yaxis.set_major_locator(mpl.ticker.MaxNLocator(5, integer=True))
        ax.set_title("every thread block on its SM, coloured by its query block i" + ("" if self.big else
                     "; shaded: the tail"), fontsize=pt(9), loc="left", pad=3)
        sm = mpl.cm.ScalarMappable(norm=mpl.colors.Normalize(0, self.Tr - 1), cmap=self.cmap)
        pos = ax.get_position()
        cax = self.fig.add_axes([pos.x1 + 0.008, pos.y0, 0.011, pos.height])
        cb = self.fig.colorbar(sm, cax=cax)
        cb.set_label("query block i", fontsize=pt(8.5), labelpad=2)
        cb.ax.tick_params(labelsize=pt(7))
        cb.ax.yaxis.set_major_locator(mpl.ticker.MaxNLocator(4, integer=True))
        self.now_gpu = ax.axvline(self.t_start * us, color="k", lw=1.2)
        self.outline = Rectangle((0, 0), 0, 1, fill=False, edgecolor="#ff7f0e", lw=1.8)
        ax.add_patch(self.outline)

    def _draw_rate(self):
        ax, pt = self.ax_rate, style.pt
        us = 1e-3
        x = self.now_ns * us
        ax.fill_between(x, self.busy, step="mid", color="0.75", lw=0)
        ax.set_ylim(0, self.tl.sm_count * 1.6)
        ax.text(0.005, 0.95, "SMs busy (grey)", transform=ax.transAxes, fontsize=pt(7), va="top", color="0.2")
        ax.text(0.995, 0.95, "TFLOP/s (red)", transform=ax.transAxes, fontsize=pt(7), va="top", ha="right",
                color="#d62728")
        ax.tick_params(labelsize=pt(7))
        ax.yaxis.set_major_locator(mpl.ticker.FixedLocator([0, self.tl.sm_count]))
        r = ax.twinx()
        r.plot(x, self.tflops, color="#d62728", lw=1.0, drawstyle="steps-mid")
        r.set_ylim(0, max(float(self.tflops.max()), 1e-9) * 1.6)
        r.tick_params(labelsize=pt(7), colors="#d62728")
        r.yaxis.set_major_locator(mpl.ticker.MaxNLocator(2))
        self.ax_rate2 = r
        ax.set_xlabel("time since the first block started (µs)", fontsize=pt(8.5), labelpad=1)
        ax.xaxis.set_major_locator(mpl.ticker.MaxNLocator(8))
        self.now_rate = ax.axvline(self.t_start * us, color="k", lw=1.2)

    def _group_rows(self):
        """{(group, row kind): lane} over the detailed blocks (``group_lanes``)."""
        groups = sorted({int(g) for ev in self._events.values() for g in np.unique(ev["group"])}) or [0]
        self.two_rows = self.tl.kernel != "teaching"
        return group_lanes(self.tl.kernel, groups)

    def _draw_zoom(self):
        ax, tl, pt = self.ax_zoom, self.tl, style.pt
        self.rows, labels = self._group_rows()
        load_idx = {k for k, s in enumerate(tl.stages) if s in LOAD_STAGES}
        self._stage_colour = np.array([mpl.colors.to_rgba(STAGE_COLOURS.get(s, "0.5")) for s in tl.stages])
        self._event_row = {}
        for c, ev in self._events.items():
            kinds = np.where(np.isin(ev["stage"], list(load_idx)), "load", "math")
            self._event_row[c] = np.array([self.rows[(int(g), k)] for g, k in zip(ev["group"], kinds)], float)
        w = self.window_ns * 1e-3
        ax.set_xlim(-w, w)
        ax.set_ylim(len(labels) - 0.5, -0.5)
        ax.set_yticks(range(len(labels)))
        h_pt = ax.get_position().height * self.fig.get_figheight() * 72
        step = 1 if len(labels) * pt(7) * 1.25 <= h_pt else 2
        ax.set_yticklabels([lab if k % step == 0 else "" for k, lab in enumerate(labels)])
        ax.tick_params(labelsize=pt(7))
        ax.axvline(0, color="k", lw=1.2)
        ax.set_xlabel("µs from now", fontsize=pt(8.5), labelpad=1)
        self.zoom_bars = PolyCollection(np.zeros((0, 4, 2)), edgecolors="white", linewidths=0.3)
        ax.add_collection(self.zoom_bars)
        self.zoom_title = ax.set_title("", fontsize=pt(9), loc="left", pad=3)
        n_blocks = len(self.tl.blocks)
        self.zoom_empty = ax.text(0.5, 0.5, f"no recorded step near now:\nsteps are kept for {len(self.detail)} of "
                                  f"{n_blocks:,} blocks", transform=ax.transAxes, ha="center", va="center",
                                  fontsize=pt(8.5), color="0.3", visible=False,
                                  bbox=dict(facecolor="white", edgecolor="none", pad=2))
        handles = [Patch(color=STAGE_COLOURS.get(s, "0.5"), label=s) for s in self._present_stages()]
        p = ax.get_position()
        self.legend = self.fig.legend(handles=handles, loc="lower left", bbox_to_anchor=(p.x0 - 0.01, self._leg_y),
                                      ncol=self._leg_ncol, fontsize=pt(7.5), frameon=False, handlelength=1.0,
                                      handletextpad=0.4, columnspacing=1.0, borderaxespad=0.0, borderpad=0.0,
                                      labelspacing=0.3)

    def _draw_tiles(self, two_lines: bool = False):
        ax, pt, Tr, Tc = self.ax_tiles, style.pt, self.Tr, self.Tc
        ext = (-0.5, Tc - 0.5, Tr - 0.5, -0.5)
        computed = np.zeros((Tr, Tc), bool)
        computed[self.tl.tiles["i"], self.tl.tiles["j"]] = True
        ax.imshow(np.where(computed, np.nan, 1.0), cmap=mpl.colors.ListedColormap([style.SKIPPED]),
                  vmin=0, vmax=1, extent=ext, interpolation="nearest", aspect="auto")
        blues = mpl.colors.ListedColormap(mpl.colormaps["Blues"](np.linspace(0.12, 0.5, 64)))
        self.done_img = ax.imshow(np.full((Tr, Tc), np.nan), cmap=blues.with_extremes(bad=(1, 1, 1, 0)), vmin=0,
                                  vmax=1, extent=ext, interpolation="nearest", aspect="auto")
        reds = mpl.colors.ListedColormap(mpl.colormaps["autumn_r"](np.linspace(0.35, 1.0, 64)))
        self.fly_cmap = reds.with_extremes(bad=(1, 1, 1, 0))
        self.fly_img = ax.imshow(np.full((Tr, Tc), np.nan), cmap=self.fly_cmap, vmin=1, vmax=max(self.heads, 2),
                                 extent=ext, interpolation="nearest", aspect="auto")
        ax.set_xlim(-0.5, Tc - 0.5)
        ax.set_ylim(Tr - 0.5, -0.5)
        ax.tick_params(labelsize=pt(7))
        ax.xaxis.set_major_locator(mpl.ticker.MaxNLocator(5, integer=True))
        ax.yaxis.set_major_locator(mpl.ticker.MaxNLocator(5, integer=True))
        ax.set_xlabel("key block j", fontsize=pt(8.5), labelpad=2)
        ax.set_ylabel("query block i", fontsize=pt(8.5), labelpad=2)
        heads = f"{self.tl.grid[1]} heads" + (f" × {self.tl.grid[2]} batches" if self.tl.grid[2] > 1 else "")
        ax.set_title(f"tiles (i, j) now, over the {heads}:" + ("\n" if two_lines else " ")
                     + "orange–red: in flight, blue: done", fontsize=pt(9), pad=3)

    # ------------------------------------------------------------------ frames
    def _zoom_block(self, now: float):
        """The zoomed cta at ``now``: the chosen one, or a detailed block running then (the
        earliest started), else the detailed block nearest in time."""
        if self.block is not None:
            return self.block
        b = self.tl.blocks
        rows = np.array([self._block_row[c] for c in self.detail])
        t0, t1 = b["t0_ns"][rows], b["t1_ns"][rows]
        running = np.nonzero((t0 <= now) & (now < t1))[0]
        if len(running):
            return self.detail[running[np.argmin(t0[running])]]
        gap = np.maximum(t0 - now, now - t1)
        return self.detail[int(np.argmin(gap))]

    def set_block(self, block: int | None):
        """Zoom on this detailed block (None: a detailed block running at each frame's now)."""
        if block is not None and block not in self.detail:
            raise ValueError(f"block must be one of the detailed blocks {self.detail} or None, got {block!r}")
        self.block = block

    def draw_frame(self, k: int) -> TimelineState:
        tl, us = self.tl, 1e-3
        now = float(self.now_ns[k])
        self.now_gpu.set_xdata([now * us, now * us])
        self.now_rate.set_xdata([now * us, now * us])
        # the tile grid
        fly = in_flight(tl, now, self.Tr, self.Tc)
        n_done = int(np.searchsorted(self._tile_order_t1, now, side="right"))
        done = np.bincount(self._tile_cell[:n_done], minlength=self.Tr * self.Tc).reshape(self.Tr, self.Tc)
        self.fly_img.set_data(np.where(fly > 0, np.maximum(fly, 0.25 * self.heads), np.nan))
        self.done_img.set_data(np.where(done > 0, done / self.heads, np.nan))
        # the zoomed block
        cta = self._zoom_block(now)
        row = self._block_row[cta]
        blk = tl.blocks[row]
        running = bool(blk["t0_ns"] <= now < blk["t1_ns"])
        self.outline.set_bounds(blk["t0_ns"] * us, blk["sm"] - 0.9, (blk["t1_ns"] - blk["t0_ns"]) * us, 1.8)
        ev = self._events[cta]
        sel = (ev["t1_ns"] >= now - self.window_ns) & (ev["t0_ns"] <= now + self.window_ns)
        e = ev[sel]
        y = self._event_row[cta][sel]
        self.zoom_bars.set_verts(bar_rects((e["t0_ns"] - now) * us, (e["t1_ns"] - now) * us, y - 0.38, 0.76))
        self.zoom_bars.set_facecolor(self._stage_colour[e["stage"]])
        self.zoom_empty.set_visible(len(e) == 0)
        self._slow_key = (cta, running)
        if self._zoom_key != self._slow_key:
            self._zoom_key = self._slow_key
            where = "running now" if running else "not running now"
            if self.big:
                text = f"block {cta} (i = {blk['i']}, head {blk['h']}, SM {blk['sm']}): {where}"
            else:
                text = (f"steps of block {cta} (i = {blk['i']}, head {blk['h']}, SM {blk['sm']}, "
                        f"{blk['t0_ns'] * us:,.0f}–{blk['t1_ns'] * us:,.0f} µs): {where}")
            self.zoom_title.set_text(text)
        busy = int(self.busy[k])
        tf = float(self.tflops[k])
        span = self.t_end - self.t_start
        for t, v in zip(self.values, (f"{now * us:,.1f} of {span * us:,.1f} µs", f"{busy} / {tl.sm_count}",
                                      f"{int(fly.sum()):,}", f"{n_done:,} / {len(tl.tiles):,}", f"{tf:,.0f}")):
            t.set_text(v)
        self.k = k
        return TimelineState(k=k, now_ns=now, busy=busy, tflops=tf, in_flight=fly, done=done, block=cta,
                             block_running=running)

    def slow_artists(self):
        """Artists that change only when the zoomed block (or whether it runs) changes."""
        return [self.outline, self.zoom_title]

    def fast_artists(self):
        """Artists that change every frame."""
        return [self.now_gpu, self.now_rate, self.done_img, self.fly_img, self.zoom_bars, self.zoom_empty,
                *self.values]

    def animated_artists(self):
        """(slow, fast): the layers the blitter and the exports draw over the static background."""
        return self.slow_artists(), self.fast_artists()

    def enable_blitting(self):
        """Render later frames by blitting: the zoomed block's outline and title as the slow layer."""
        self.blitter = Blitter(self.fig, self.slow_artists(), self.fast_artists())

    def render(self, k: int):
        """Update to frame k and render it (blitting when enabled); returns the frame's state."""
        s = self.draw_frame(k)
        if self.blitter is not None:
            self.blitter.update(self._slow_key)
        else:
            self.fig.canvas.draw_idle()
        return s
