"""The backward pass, replayed: ``BackwardFigure``, the picture of the state of frame k that
``BackwardReplay`` (flashviz.replay.backward) reads from a ``flash_backward(..., record=True)``
trace.

One frame per trace event, in the backward's loop order (FlashAttention-2, Algorithm 2):
D = rowsum(dO ∘ O) per query block; then key blocks j outer, query blocks i inner. The figure:

* left — the Nq×Nk grid of tiles: visited tiles shaded by visit order (column by column), the
  current tile outlined, the blocks in SRAM as strips (K_j, V_j above, Q_i right); the tile
  flashes when P_ij is recomputed from Q_i, K_j and lse_i (P was never stored);
* on chip — the current P_ij and dS_ij, and the dK_j, dV_j accumulators;
* in HBM — dQ (its rows read-modify-written at every tile) and the finished dK, dV;
* meters — HBM bytes so far vs the standard backward, bytes kept between the passes (P vs lse),
  matmul FLOPs so far with the recomputation's extra share.

At a text scale above 1 (``style.scaled_text``, the app's presenter mode) the figure keeps its
inches and lays itself out for the larger texts: wider margins and gaps, two-line axis labels on
the grid, a wrapped caption, and shorter wordings of the titles and step sentences that would not
fit; at scale 1 it is the notebook's figure, unchanged.

The panels are in ``views.backward_panels``; this module lays them out, writes the step line and
caption, and blits. Nothing here recomputes attention: every number and picture is read from the
trace. Frames are rendered by ``views.blit.RegionBlitter``, which redraws only the areas of the
figure that changed (about 13 ms a frame at N = 256 on a 2-core CPU; a full redraw costs ~0.35 s).
"""

from __future__ import annotations

import matplotlib as mpl
import numpy as np
from matplotlib.colors import PowerNorm
from matplotlib.gridspec import GridSpec
from matplotlib.patches import FancyBboxPatch, Rectangle

from ..replay.backward import STEP_TEXT, BackwardReplay, BackwardState  # (BackwardReplay: re-exported)
from . import style
from .backward_panels import RECOMPUTE, BackwardGridPanel, BackwardMetersPanel, ImagePanel, robust_max
from .blit import BlittedView, RegionBlitter
from .heights import from_bottom, from_top, grid_at_height
from .text import drawn_width, fit_lines, presenter

# Shorter wordings for a larger text scale (presenter mode), used where the full one does not fit.
STEP_TEXT_SHORT = {
    "recompute_P": "recompute Pᵢⱼ = exp(scale·QᵢKⱼᵀ − lseᵢ): P was never stored",
    "update_dQ": "dQᵢ += scale · dSᵢⱼ Kⱼ:  read dQᵢ, add, write it back",
    "compute_D": "preprocess: Dᵢ = rowsum(dOᵢ ∘ Oᵢ), dQᵢ = 0 in HBM",
}
class BackwardFigure(BlittedView):
    """The backward explainer's figure, built on ``fig`` (cleared first) for one backward trace.

    caption: text under the step line (inputs, configuration, the gradient check).
    Public: ``n_frames``, ``draw_frame(k)`` (update every artist, return the BackwardState),
    ``render(k)`` (draw and blit), ``enable_blitting()``, ``replay``, ``fig``, ``blitter``.
    """

    def __init__(self, fig, trace, *, caption: str = ""):
        fig.clear()
        self.fig = fig
        self.replay = rp = BackwardReplay(trace)
        tr = trace
        self.scale = style.text_scale()       # texts are this many times their notebook size
        self.big = big = presenter()
        if big:       # larger texts: wider margins and gaps, the meters on a grid of their own
            gs = GridSpec(2, 4, figure=fig, width_ratios=[1.3, 0.8, 0.8, 0.8], left=0.08, right=0.955, top=0.715,
                          bottom=0.315, wspace=0.55, hspace=0.6)
            mgs = GridSpec(1, 3, figure=fig, left=0.08, right=0.955, top=0.16, bottom=0.065, wspace=0.55)
        else:
            # drawn for 6.8 inches; margins and gaps kept in points at the notebook's height
            gs = GridSpec(3, 4, figure=fig, width_ratios=[1.55, 0.8, 0.8, 0.8], height_ratios=[1, 1, 0.5],
                          left=0.07, right=0.975, wspace=0.42,
                          **grid_at_height(fig, top=0.775, bottom=0.065, hspace=0.66, nrows=3))
            mgs = gs[2, :].subgridspec(1, 3, wspace=0.55)
        self.grid = BackwardGridPanel(fig.add_subplot(gs[0:2, 0]), rp)
        ev = tr.events
        pmax = robust_max([e.P for e in ev if e.kind == "recompute_P"], 99.5)
        dsmax = robust_max([e.dS for e in ev if e.kind == "compute_dS"])
        qmax = robust_max([e.dQ for e in ev if e.kind == "update_dQ"])
        kmax, vmax = robust_max([rp.dKV_full[:, : tr.d]]), robust_max([rp.dKV_full[:, tr.d:]])
        floor = 1e-6 * max(qmax, kmax, vmax)          # a gradient that is 0 up to rounding shows as 0
        qmax, kmax, vmax = max(qmax, floor), max(kmax, floor), max(vmax, floor)
        Br, Bc = min(tr.Br, tr.Nq), min(tr.Bc, tr.Nk)
        probs = mpl.colormaps["magma_r"].with_extremes(bad="white")
        signed = style.output_cmap()
        self.P = ImagePanel(fig.add_subplot(gs[0, 1]), (Br, Bc), probs, 0, pmax, "", "key in block", "query in block")
        self.P.image.set_norm(PowerNorm(0.5, vmin=0, vmax=pmax))     # small probabilities stay visible
        self.dS = ImagePanel(fig.add_subplot(gs[1, 1]), (Br, Bc), signed, -dsmax, dsmax, "", "key in block",
                         "query in block")
        self.dK = ImagePanel(fig.add_subplot(gs[0, 2]), (Bc, tr.d), signed, -kmax, kmax, "", "feature (d)", "key in block")
        self.dV = ImagePanel(fig.add_subplot(gs[1, 2]), (Bc, tr.dv), signed, -vmax, vmax, "", "feature (d)",
                         "key in block")
        self.dQ = ImagePanel(fig.add_subplot(gs[0, 3]), (tr.Nq, tr.d), signed, -qmax, qmax, "", "feature (d)",
                         "query index", extent=(0, tr.d, tr.Nq, 0))
        self.dKV = ImagePanel(fig.add_subplot(gs[1, 3]), (tr.Nk, tr.d + tr.dv), signed, -1, 1, "dK | dV (written once)",
                          "feature: dK | dV", "key index", extent=(0, tr.d + tr.dv, tr.Nk, 0))
        # dK and dV share one image: each half is scaled to its own range, so both read
        self._kv_scale = np.concatenate([np.full(tr.d, 1 / kmax), np.full(tr.dv, 1 / vmax)])
        self.divider = self.dKV.ax.axvline(tr.d, color="k", lw=0.8)
        self.rmw = Rectangle((0, 0), tr.d, 0, fill=False, edgecolor=style.CURRENT, linewidth=2, clip_on=False)
        self.dQ.ax.add_patch(self.rmw)
        self.meters = BackwardMetersPanel(fig.add_subplot(mgs[0]), fig.add_subplot(mgs[1]), fig.add_subplot(mgs[2]), rp)
        self._group(fig, [self.P.ax, self.dS.ax, self.dK.ax, self.dV.ax], "on chip (SRAM)", style.CURRENT)
        self._group(fig, [self.dQ.ax, self.dKV.ax], "in HBM", "0.35")
        # the step line lives in an axes: savefig draws an axes' animated artists, not a figure's
        self.head_y = head_y = 0.945 if big else from_top(fig, 0.952)
        head = fig.add_axes((0, head_y, 1, 1 - head_y))
        head.set_axis_off()
        step_font, where_font = {"fontsize": style.pt(11), "weight": "bold"}, {"fontsize": style.pt(10)}
        self.step = head.text(0.01, 0.69, "", **step_font, va="center", transform=head.transAxes)
        self.where = head.text(0.99, 0.69, "", **where_font, va="center", ha="right", transform=head.transAxes)
        # the step line's area ends where the widest "step k/n · i, j" begins; a step sentence too
        # wide for it takes its shorter wording
        W = fig.bbox.width
        n = self.n_frames
        widest = drawn_width(fig, f"step {n}/{n}  ·  i = {tr.Tr - 1}, j = {tr.Tc - 1}", **where_font)
        self.split = min(0.78, 0.99 - widest / W - 0.01)
        room = (self.split - 0.01) * W - 6
        self._step_text = {kind: text if drawn_width(fig, text, **step_font) <= room
                           else STEP_TEXT_SHORT.get(kind, text) for kind, text in STEP_TEXT.items()}
        cap_font = {"fontsize": style.pt(8.5), "linespacing": 1.45}
        if big:
            caption = fit_lines(fig, caption, 0.98 * W, **cap_font)
        else:
            caption = style.sci_math(caption)
        self.caption = fig.text(0.01, head_y - (0.007 if big else from_bottom(fig, 0.007)), caption, **cap_font,
                                va="top", color="0.25")
        self._titles = {
            "P": ("Pᵢⱼ recomputed" if big else "Pᵢⱼ recomputed, never stored", "Pᵢⱼ: no tile on chip"),
            "dS": ("dSᵢⱼ = Pᵢⱼ ∘ (dPᵢⱼ − Dᵢ)", "dSᵢⱼ: next", "dSᵢⱼ: no tile on chip"),
            "dK": ("dKⱼ accumulator", "dKⱼ: no key block" if big else "dKⱼ: no key block on chip"),
            "dV": ("dVⱼ accumulator", "dVⱼ: no key block" if big else "dVⱼ: no key block on chip"),
            "dQ": ("dQᵢ: read, add, write back", "dQᵢ = 0", "dQ"),
        }
        self.k = None
        self.blitter = None
        self._big_key = None

    def _group(self, fig, axes, label, colour):
        """A faint box behind a group of panels, labelled with where the data lives."""
        boxes = [ax.get_position() for ax in axes]
        left, below, above = (0.055, 0.065, 0.075) if self.big else (0.048, from_bottom(fig, 0.07), from_bottom(fig, 0.07))
        x0, x1 = min(b.x0 for b in boxes) - left, max(b.x1 for b in boxes) + 0.008
        y0, y1 = min(b.y0 for b in boxes) - below, max(b.y1 for b in boxes) + above
        fig.patches.append(FancyBboxPatch((x0, y0), x1 - x0, y1 - y0, boxstyle="round,pad=0,rounding_size=0.008",
                                          transform=fig.transFigure, facecolor=colour, alpha=0.06,
                                          edgecolor=colour, linewidth=0.8, zorder=-10))
        fig.text(x0 + 0.006, y1 - 0.004, label, fontsize=style.pt(8.5), weight="bold", color=colour, va="top")

    @property
    def n_frames(self) -> int:
        return self.replay.n_frames

    def _regions(self):
        """Disjoint areas (figure fractions) with their (slow, fast) artists and whether to cache pixels.

        Columns split half-way between panels; each panel has an image area and a title strip."""
        py = 1 / self.fig.bbox.height                   # one pixel, in figure fractions
        g, m = self.grid, self.meters
        pos = {name: p.ax.get_position() for name, p in
               (("P", self.P), ("dS", self.dS), ("dK", self.dK), ("dV", self.dV), ("dQ", self.dQ), ("dKV", self.dKV))}
        gp = g.ax.get_position()
        c1 = (gp.x1 + pos["P"].x0) / 2
        c2 = (pos["P"].x1 + pos["dK"].x0) / 2
        c3 = (pos["dK"].x1 + pos["dQ"].x0) / 2
        top_t, bot_t = pos["P"].y1, pos["dS"].y1         # tops of the two panel rows
        m_top = max(ax.get_position().y1 for ax in m.axes)
        head, split = self.head_y, self.split
        pt = self.fig.dpi / 72 * py                      # one point, in figure fractions
        strip = max(20 * py, (5 + 1.3 * 8.5) * self.scale * pt + 2 * py)   # a title strip above an axes (pad 5 pt)
        grid_top = gp.y1 + max(14 * py, 0.04 * gp.height + 2 * py)     # the K_j strip sits just above the grid
        cols = {"P": (c1, c2), "dS": (c1, c2), "dK": (c2, c3), "dV": (c2, c3), "dQ": (c3, 1), "dKV": (c3, 1)}
        regions = {
            "step": ((0, head, split, 1), [], [self.step], True),
            "where": ((split, head, 1, 1), [], [self.where], False),
            "grid": ((0, gp.y0 - 3 * py, c1, grid_top), [g.image, g.grid, *g.path, *g.ax.spines.values()],
                     [g.flash, g.band, g.tile, g.q_strip, g.k_strip], False),
            "grid title": ((0, grid_top, c1, head), [], [g.title], True),
            "meters": ((0, 0, 1, m_top + 2 * py), [], [m.hbm_bar, m.hbm_label, m.flop_bar, m.extra_bar, m.flop_label],
                       False),
        }
        for name, panel in (("P", self.P), ("dS", self.dS), ("dK", self.dK), ("dV", self.dV), ("dQ", self.dQ),
                            ("dKV", self.dKV)):
            x0, x1 = cols[name]
            b = pos[name]
            below = (bot_t + strip) if b.y1 == top_t else m_top + 2 * py
            spines = list(panel.ax.spines.values())       # drawn again over the image, as in a full draw
            slow = [panel.image, *spines] if name in ("dQ", "dKV") else []
            fast = [] if name in ("dQ", "dKV") else [panel.image, *spines]
            if name == "dQ":
                fast = [self.rmw]
            if name == "dKV":
                slow.insert(1, self.divider)
            regions[name] = ((x0, max(below, b.y0 - 3 * py), x1, b.y1 + 3 * py), slow, fast, False)
            if name != "dKV":
                regions[name + " title"] = ((x0, b.y1 + 3 * py, x1, b.y1 + strip), [], [panel.title], True)
        return regions

    def blit_key(self, s: BackwardState):
        """Per area, (slow key, fast key): an area is redrawn only when its key changes."""
        e = s.event
        txt = lambda t: (t.get_text(), t.get_color(), t.get_weight())  # noqa: E731
        keys = {
            "step": (None, txt(self.step)),
            "where": (None, s.k),
            "grid": (s.tiles_done, (e.kind == "recompute_P", e.kind == "compute_D", e.i, e.j)),
            "grid title": (None, txt(self.grid.title)),
            "P": (None, id(s.P)), "dS": (None, id(s.dS)), "dK": (None, id(s.dK_j)), "dV": (None, id(s.dV_j)),
            "dQ": ((s.dQ_updates, s.D_blocks), (self.rmw.get_visible(), e.r0, e.r1)),
            "dKV": (s.blocks_written, None),
            "meters": (None, (s.hbm_bytes, s.flops)),
        }
        for name in ("P", "dS", "dK", "dV", "dQ"):
            keys[name + " title"] = (None, txt(getattr(self, name).title))
        return keys

    def make_blitter(self):
        """Blit only the areas that change (``enable_blitting`` installs it)."""
        return RegionBlitter(self.fig, self._regions())

    def draw_frame(self, k: int) -> BackwardState:
        """Update all artists to frame k (does not render; the caller draws the canvas)."""
        s = self.replay.state(k)
        e = s.event
        big = (s.tiles_done, s.dQ_updates, s.blocks_written, s.D_blocks)
        if big != self._big_key:             # the big images change only every few steps
            self._big_key = big
            self.grid.update(s, self.replay.visited_grid(k))
            self.dQ.image.set_data(s.dQ)
            self.dKV.image.set_data(s.dKV * self._kv_scale)
        else:
            self.grid.update(s)
        flash = e.kind == "recompute_P"
        self.P.show(s.P)
        T = self._titles
        self.P.title.set(text=T["P"][0] if s.P is not None else T["P"][1],
                         color=RECOMPUTE if flash else "k", weight="bold" if flash else "normal")
        self.dS.show(s.dS)
        self.dS.title.set(text=T["dS"][0] if s.dS is not None else (T["dS"][1] if s.P is not None else T["dS"][2]),
                          color=style.CURRENT if e.kind == "compute_dS" else "k")
        self.dK.show(s.dK_j)
        self.dV.show(s.dV_j)
        for panel, kind, name in ((self.dK, "accumulate_dK", "dK"), (self.dV, "accumulate_dV", "dV")):
            live = s.dK_j is not None
            panel.title.set(text=T[name][0] if live else T[name][1],
                            color=style.CURRENT if e.kind in (kind, "write_dKdV") else "k")
        rmw = e.kind in ("update_dQ", "compute_D")
        self.rmw.set_visible(rmw)
        if rmw:
            self.rmw.set_y(e.r0)
            self.rmw.set_height(e.r1 - e.r0)
        self.dQ.title.set(text={"update_dQ": T["dQ"][0], "compute_D": T["dQ"][1]}.get(e.kind, T["dQ"][2]),
                          color=style.CURRENT if rmw else "k")
        self.meters.update(s)
        self.step.set(text=self._step_text[e.kind], color=RECOMPUTE if flash else "k")
        self.where.set_text(f"step {k + 1}/{self.n_frames}" + (f"  ·  {s.where}" if s.where else ""))
        self.k = k
        return s
