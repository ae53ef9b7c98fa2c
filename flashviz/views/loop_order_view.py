"""Loop order (chapter 5): FA1 and FA2 on the same input, side by side, one tile step per frame.

``LoopOrderFigure`` replays two traces of ``flash_forward(..., record=True)`` — the paper's
Algorithm 1 (``order="fa1"``: key blocks j outer) and FlashAttention-2 (``order="fa2"``: query
blocks i outer) — in lockstep: frame k shows both runs after their (k+1)-th computed tile. Both
compute the same tiles, in a different order, so the grids fill differently (FA2 sweeps rows,
FA1 sweeps columns) while the meters show the bytes each moved so far, by tensor.

Every byte comes from the traces' events (``TileSteps``, ``LoopOrderReplay`` in
flashviz.replay.loop_order); the totals printed beside the meters come from
``iomodel.flash_forward_io`` and equal the last frame (the tests check it).
"""

from __future__ import annotations

import numpy as np
from matplotlib.collections import LineCollection, PatchCollection, PathCollection
from matplotlib.gridspec import GridSpec
from matplotlib.patches import Rectangle
from matplotlib.ticker import MaxNLocator
from matplotlib.transforms import Affine2D, ScaledTranslation

from ..masking import n_key_blocks_visible
from ..replay.loop_order import (  # (TileSteps, TENSORS: re-exported)
    TENSORS,
    LoopOrderReplay,
    LoopOrderState,
    RunFrame,
    TileSteps,
)
from ..replay.tiles import sub
from . import style
from .blit import BlittedView
from .heights import from_top, points_layout
from .style import byte_unit, fmt_bytes
from .text import line_height, number_paths, text_width, tick_row, wrap_text

TENSOR_COLOURS = {"Q": "#1f77b4", "K": "#2ca02c", "V": "#98df8a", "O": "#d62728", "l": "#9467bd",
                  "m": "#c5b0d5", "lse": "#8c564b"}
ORDER_TITLES = {
    "fa1": ("FA1 (paper, Algorithm 1): key blocks j outer",
            "K_j, V_j stay on chip; Q_i, O_i, l_i, m_i go to and from HBM at every tile"),
    "fa2": ("FA2 (FlashAttention-2): query blocks i outer",
            "Q_i, O_i, m_i, l_i stay on chip; K_j, V_j stream past; O_i written once"),
}
#: presenter mode (text scale > 1): the same titles, shorter where a line would not fit
SHORT_HEADING = "same tiles, different order: both runs after the same number of tiles"
SHORT_NOTE = ("orange box: the tile just computed · orange band: stays on chip · "
              "darker: computed later")
SHORT_METER_TITLE = "HBM traffic so far, by tensor (dashed: the run's total). FA1 moves {} {} ({:.2f}x FA2)"
MAX_NUMBERED = 12        # visit numbers are written in the tiles when Tr, Tc <= this


class _GridPanel:
    """One run's tile grid: done tiles shaded by when they were computed (and numbered when the
    grid is small), the current tile outlined, the block that stays on chip banded (and marked
    by a strip outside the axes), skipped tiles hatched."""

    def __init__(self, ax, steps: TileSteps, kinds, title: str | None = None):
        tr = steps.trace
        self.ax, self.steps, self.tr = ax, steps, tr
        n = steps.n_steps
        xs = np.minimum(np.arange(tr.Tc + 1) * tr.Bc, tr.Nk)
        ys = np.minimum(np.arange(tr.Tr + 1) * tr.Br, tr.Nq)
        self.band = Rectangle((0, 0), 0, 0, facecolor=style.BAND, alpha=0.5, edgecolor="none",
                              zorder=0.5)
        ax.add_patch(self.band)              # under the tiles: it shows where nothing is computed yet
        self.mesh = ax.pcolormesh(xs, ys, np.ma.masked_all((tr.Tr, tr.Tc)), cmap="Blues", vmin=-0.35 * n,
                                  vmax=max(n - 1, 1), edgecolors="0.55" if tr.Tr * tr.Tc <= 1024 else "none",
                                  linewidth=0.5, zorder=0.8)
        segs = ([[(0, r), (tr.Nk, r)] for r in ys] + [[(c, 0), (c, tr.Nq)] for c in xs])
        if len(segs) <= 600:
            ax.add_collection(LineCollection(segs, colors="0.55", linewidths=0.5))
        skipped = [Rectangle((j * tr.Bc, i * tr.Br), tr.Bc, tr.Br) for i, j in zip(*np.nonzero(kinds == "skipped"))]
        if skipped:
            ax.add_collection(PatchCollection(skipped, facecolor=style.SKIPPED, edgecolor="0.7", hatch="//",
                                              linewidth=0.3))
        if tr.causal:
            off = tr.Nk - tr.Nq
            ax.plot([max(0, off), tr.Nk], [max(0, -off), tr.Nk - off], color="k", lw=0.9, ls="--")
        self.tile = Rectangle((0, 0), 0, 0, fill=False, edgecolor=style.CURRENT, linewidth=2.5, zorder=3)
        ax.add_patch(self.tile)
        # what stays on chip: Q_i (strip right of the grid) in FA2, K_j, V_j (strip above it) in FA1
        if steps.order == "fa2":
            self.strip = Rectangle((tr.Nk * 1.012, 0), tr.Nk * 0.03, 0, facecolor=style.CURRENT, clip_on=False)
        else:
            self.strip = Rectangle((0, -tr.Nq * 0.012), 0, -tr.Nq * 0.03, facecolor=style.CURRENT, clip_on=False)
        ax.add_patch(self.strip)
        # the band covers only the tiles this block visits (a causal mask skips the rest)
        self._band_end = [min(n_key_blocks_visible(min((i + 1) * tr.Br, tr.Nq), tr.Nk, tr.Bc, tr.Nq, tr.causal)
                              * tr.Bc, tr.Nk) for i in range(tr.Tr)]
        rows_of = [[i for i in range(tr.Tr) if kinds[i, j] != "skipped"] for j in range(tr.Tc)]
        self._band_rows = [(min(r) * tr.Br if r else 0, tr.Nq if r else 0) for r in rows_of]
        self.numbers = None
        if tr.Tr <= MAX_NUMBERED and tr.Tc <= MAX_NUMBERED:
            size = style.pt(9.0 if max(tr.Tr, tr.Tc) <= 6 else 7.0)
            centres = np.column_stack([(xs[steps.tiles[:, 1]] + xs[steps.tiles[:, 1] + 1]) / 2,
                                       (ys[steps.tiles[:, 0]] + ys[steps.tiles[:, 0] + 1]) / 2])
            self._paths = number_paths(range(1, n + 1), size)
            self._offsets = centres
            self._colours = np.array([(1, 1, 1, 1) if m > 0.45 * max(n - 1, 1) else (0, 0, 0, 1) for m in range(n)])
            self.numbers = PathCollection([], offsets=np.empty((0, 2)), offset_transform=ax.transData,
                                          transform=Affine2D().scale(1 / 72) + ax.figure.dpi_scale_trans,
                                          edgecolors="none")
            ax.add_collection(self.numbers)
        ax.set_xlim(0, tr.Nk)
        ax.set_ylim(tr.Nq, 0)
        ax.xaxis.set_major_locator(MaxNLocator(5, integer=True))
        ax.yaxis.set_major_locator(MaxNLocator(5, integer=True))
        ax.tick_params(labelsize=style.pt(7))
        ax.set_xlabel(f"key index (blocks K_j of Bc = {tr.Bc})", fontsize=style.pt(8))
        ylabel = f"query index (blocks Q_i of Br = {tr.Br})"
        fig = ax.figure
        if points_layout(fig) and text_width(ylabel, style.pt(8)) > ax.get_position().height * fig.get_figheight() * 72:
            ylabel = ylabel.replace(" (", "\n(")          # taller than the grid: two lines
        ax.set_ylabel(ylabel, fontsize=style.pt(8))
        head, sub_ = ORDER_TITLES[steps.order]
        ax.set_title(f"{head}\n{sub_}" if title is None else title, fontsize=style.pt(8.5),
                     pad=16 if steps.order == "fa1" else 6)
        if points_layout(fig):          # under the axis label, wherever its size puts it
            self.label = ax.annotate("", xy=(0.5, 0), xycoords=ax.xaxis.label, xytext=(0, -style.pt(4)),
                                     textcoords="offset points", ha="center", va="top", fontsize=style.pt(9))
        else:
            self.label = ax.text(0.5, -0.2, "", transform=ax.transAxes, ha="center", va="top", fontsize=style.pt(9))

    def artists(self):
        numbers = [] if self.numbers is None else [self.numbers]
        return [self.band, self.mesh, self.tile, self.strip, self.label, *numbers]

    def update(self, k: int) -> RunFrame:
        st, tr = self.steps, self.tr
        v = st.visit
        self.mesh.set_array(np.ma.masked_where((v < 0) | (v > k), v))
        f = st.frame(k)
        i, j = f.tile
        r0, r1, c0, c1 = i * tr.Br, min((i + 1) * tr.Br, tr.Nq), j * tr.Bc, min((j + 1) * tr.Bc, tr.Nk)
        self.tile.set_bounds(c0, r0, c1 - c0, r1 - r0)
        if st.order == "fa2":
            self.band.set_bounds(0, r0, self._band_end[i], r1 - r0)     # Q_i (and O_i, m_i, l_i) stay on chip
            self.strip.set_y(r0)
            self.strip.set_height(r1 - r0)
        else:
            y0, y1 = self._band_rows[j]
            self.band.set_bounds(c0, y0, c1 - c0, y1 - y0)             # K_j, V_j stay on chip
            self.strip.set_x(c0)
            self.strip.set_width(c1 - c0)
        if self.numbers is not None:
            self.numbers.set_paths(self._paths[:k + 1])
            self.numbers.set_offsets(self._offsets[:k + 1])
            self.numbers.set_facecolors(self._colours[:k + 1])
        resident = f"Q{sub(i)} stays" if st.order == "fa2" else f"K{sub(j)}, V{sub(j)} stay"
        self.label.set_text(f"S{sub(i)},{sub(j)} now · {resident} on chip")
        return f


class _TrafficMeters:
    """Stacked horizontal bars: bytes moved so far by each run, one segment per tensor."""

    def __init__(self, ax, steps: dict, io_model: dict):
        self.ax, self.steps = ax, steps
        big = points_layout(ax.figure)
        totals = {o: io_model[o].hbm_bytes for o in steps}
        uname, self.u = byte_unit(max(totals.values()), min_count=2)
        top = max(totals.values()) / self.u
        fig = ax.figure
        width = ax.get_position().width * fig.get_figwidth() * 72          # the axes' width in points
        self.rows = {"fa1": 1, "fa2": 0}
        self.segments, self.labels = {}, {}
        for o, y in self.rows.items():
            ax.barh([y], [totals[o] / self.u], height=0.62, facecolor="none", edgecolor="0.4", lw=0.8, ls="--")
            self.segments[o] = [ax.barh([y], [0], height=0.62, color=TENSOR_COLOURS[t], label=t)[0]
                                for t in TENSORS]
            self.labels[o] = ax.text(0, y, "", va="center", fontsize=style.pt(8))
            ax.text(1.005, y, f"run total\n{fmt_bytes(totals[o])}", transform=ax.get_yaxis_transform(),
                    va="center", ha="left", fontsize=style.pt(7.5), color="0.25")
        ax.set_yticks([1, 0], ["FA1", "FA2"], fontsize=style.pt(9))
        ax.set_ylim(-0.55, 1.55)
        if big:       # room right of the longer run's bar for its label (" 174 KiB · O written 16×")
            widest = max(text_width(f" {fmt_bytes(totals[o])} · O written {int(steps[o].o_writes[-1])}×",
                                    style.pt(8)) for o in steps)
            ax.set_xlim(0, top * max(1.28, width / max(width - widest - style.pt(4), 0.3 * width)))
        else:
            ax.set_xlim(0, 1.28 * top)
        ax.set_xlabel(uname, fontsize=style.pt(7), labelpad=1)
        ax.tick_params(axis="x", labelsize=style.pt(7))
        ax.xaxis.set_major_locator(MaxNLocator(6 if big else 8, steps=[1, 2, 4, 5, 10]))
        extra = totals["fa1"] - totals["fa2"]
        more = ("more" if extra >= 0 else "less", totals["fa1"] / totals["fa2"])
        title = (f"HBM traffic so far (bytes read + written, by tensor; dashed: the run's total from "
                 f"flash_forward_io). "
                 f"FA1 moves {fmt_bytes(abs(extra))} {more[0]} ({more[1]:.2f}x FA2)")
        if big and text_width(title, style.pt(9)) > width:
            title = wrap_text(SHORT_METER_TITLE.format(fmt_bytes(abs(extra)), *more), style.pt(9), width)
        ax.set_title(title, fontsize=style.pt(9))
        handles = [self.segments["fa2"][c] for c in range(len(TENSORS))]
        if big:       # on the axis label's line, at the right: no line of its own
            ax.legend(handles, TENSORS, ncol=len(TENSORS), fontsize=style.pt(7), loc="upper right",
                      bbox_to_anchor=(1.0, 0), frameon=False, handlelength=1.2, columnspacing=1.2,
                      borderaxespad=0, borderpad=0,
                      bbox_transform=ax.transAxes + ScaledTranslation(0, -tick_row(7) / 72, fig.dpi_scale_trans))
        else:
            ax.legend(handles, TENSORS, ncol=len(TENSORS), fontsize=style.pt(7), loc="upper center",
                      bbox_to_anchor=(0.5, -0.42), frameon=False, handlelength=1.2, columnspacing=1.2)

    def artists(self):
        return [s for o in self.segments for s in self.segments[o]] + list(self.labels.values())

    def update(self, frames: dict):
        for o, f in frames.items():
            x = 0.0
            for seg, t in zip(self.segments[o], TENSORS):
                w = f.bytes[t] / self.u
                seg.set_x(x)
                seg.set_width(w)
                x += w
            self.labels[o].set_x(x)
            self.labels[o].set_text(f" {fmt_bytes(f.hbm_bytes)} · O written {f.o_writes}×")


class LoopOrderFigure(BlittedView):
    """FA1 and FA2 side by side, in lockstep by tile step, with their traffic meters.

    fig: a matplotlib Figure (cleared first); trace_fa1, trace_fa2: recorded runs of
    ``flash_forward`` on the same Q, K, V with the same Br, Bc and mask, ``order="fa1"`` and
    ``"fa2"``; caption: a line under the step text (inputs, check).
    Public: ``n_frames`` (computed tiles), ``draw_frame(k)`` → LoopOrderState, ``render(k)``,
    ``enable_blitting()``, ``replay`` (the LoopOrderReplay), ``steps`` ({"fa1": TileSteps,
    "fa2": TileSteps}), ``io_model`` (both orders' ``flash_forward_io``), ``fig``. Raises
    ValueError when the traces do not match.
    """

    def __init__(self, fig, trace_fa1, trace_fa2, *, caption: str = ""):
        self.replay = LoopOrderReplay(trace_fa1, trace_fa2)       # raises before the figure is touched
        fig.clear()
        self.fig = fig
        tr = trace_fa2
        self.steps, self.io_model, kinds = self.replay.steps, self.replay.io_model, self.replay.kinds
        heading = "both runs after the same number of computed tiles: same tiles, different order"
        note = ("orange box: the tile just computed · orange band: the block that stays on chip · "
                "tiles darken in the order they were computed" + (" · hatched: skipped by the causal mask"
                                                                  if tr.causal else ""))
        text = style.sci_math(f"{caption}\n{note}" if caption else note)
        heading_x, caption_y, spacing, titles = 0.235, 0.935, 1.5, {}
        if points_layout(fig):
            gs_kw, heading_x, heading, text, caption_y, spacing, titles = self._large_layout(fig, caption, heading)
        else:
            gs_kw = {"height_ratios": [3.2, 1], "top": 0.775, "bottom": 0.12, "hspace": 0.62}
        gs = GridSpec(2, 2, figure=fig, left=0.085, right=0.89, wspace=0.28, **gs_kw)
        self.grids = {o: _GridPanel(fig.add_subplot(gs[0, c]), self.steps[o], kinds, titles.get(o))
                      for c, o in enumerate(("fa1", "fa2"))}
        self.meters = _TrafficMeters(fig.add_subplot(gs[1, :]), self.steps, self.io_model)
        self.step = fig.text(0.01, from_top(fig, 0.975), "", fontsize=style.pt(12), weight="bold", va="top")
        fig.text(heading_x, from_top(fig, 0.975), heading, fontsize=style.pt(10), va="top")
        self.caption = fig.text(0.01, caption_y, text, fontsize=style.pt(8.5), va="top", color="0.25",
                                linespacing=spacing)
        self.k = None
        self.blitter = None

    def _large_layout(self, fig, caption: str, heading: str):
        """Presenter mode (text scale > 1): the heading right of the widest step text (shorter
        if need be), the caption and the legend of colours wrapped to the figure's width, the
        grids' titles to theirs, and the grids' top and the meters' place computed in points
        from those sizes. Returns (GridSpec keywords, heading x, heading, caption text,
        caption y, caption line spacing, {order: grid title})."""
        W, H = fig.get_figwidth() * 72, fig.get_figheight() * 72
        left, right, wspace = 0.085, 0.89, 0.28
        n = self.n_frames
        step_w = text_width(f"tile step {n}/{n}", style.pt(12), weight="bold")
        heading_x = max(0.235, 0.01 + (step_w + style.pt(14)) / W)
        if heading_x * W + text_width(heading, style.pt(10)) > 0.99 * W:
            heading = SHORT_HEADING
        note = SHORT_NOTE + (" · hatched: skipped (causal mask)" if self.steps["fa1"].trace.causal else "")
        parts = [" · ".join(line for line in caption.split("\n") if line)] if caption else []
        text = "\n".join(wrap_text(style.sci_math(t), style.pt(8.5), 0.98 * W) for t in [*parts, note])
        spacing = 1.35
        caption_y = from_top(fig, 0.975) - (line_height(style.pt(12)) + style.pt(2)) / H
        caption_bottom = caption_y * H - line_height(style.pt(8.5), text.count("\n") + 1, spacing)
        grid_w = (right - left) * W / (2 + wspace)
        # a title may overhang its grid by 40% of the gap between the grids on each side
        titles = {o: wrap_text("\n".join(ORDER_TITLES[o]), style.pt(8.5), grid_w * (1 + 0.8 * wspace))
                  for o in ORDER_TITLES}
        n_title = max(t.count("\n") + 1 for t in titles.values())
        top = caption_bottom - style.pt(6) - line_height(style.pt(8.5), n_title) - 16      # 16: FA1's title pad
        # below the grids: ticks, axis label, the step label, the meters' title
        gap = tick_row(7) + 4 + line_height(style.pt(8)) + style.pt(4) + line_height(style.pt(9)) + style.pt(5) \
            + line_height(style.pt(9)) + 6
        meters = 2.1 * (line_height(style.pt(7.5), 2) + 4)         # two rows of two-line totals
        bottom = tick_row(7) + 1 + line_height(style.pt(7)) + 4
        grid = top - bottom - meters - gap
        gs_kw = {"height_ratios": [grid, meters], "top": top / H, "bottom": bottom / H,
                 "hspace": 2 * gap / (grid + meters)}
        return gs_kw, heading_x, heading, text, caption_y, spacing, titles

    @property
    def n_frames(self) -> int:
        return self.replay.n_frames

    def animated_artists(self):
        return [*self.grids["fa1"].artists(), *self.grids["fa2"].artists(), *self.meters.artists(), self.step]


    def draw_frame(self, k: int) -> LoopOrderState:
        """Update every artist to tile step k (0 <= k < n_frames); returns the state."""
        s = self.replay.state(k)          # raises IndexError outside 0..n_frames-1
        for o in ("fa1", "fa2"):
            self.grids[o].update(k)
        self.meters.update({"fa1": s.fa1, "fa2": s.fa2})
        self.step.set_text(f"tile step {k + 1}/{self.n_frames}")
        self.k = k
        return s
