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

Nothing here recomputes attention: every number and picture is read from the trace. Frames are
rendered by ``RegionBlitter``, which redraws only the areas of the figure that changed (about
13 ms a frame at N = 256 on a 2-core CPU; a full redraw costs ~0.35 s).
"""

from __future__ import annotations

import matplotlib as mpl
import numpy as np
from matplotlib.collections import LineCollection, PatchCollection
from matplotlib.colors import PowerNorm
from matplotlib.gridspec import GridSpec
from matplotlib.patches import FancyBboxPatch, Rectangle
from matplotlib.ticker import MaxNLocator

from ..replay.backward import NEVER, STEP_TEXT, BackwardReplay, BackwardState  # (BackwardReplay: re-exported)
from . import style
from .blit import BlittedView, RegionBlitter
from .style import byte_unit, fmt_bytes, fmt_flops
from .text import drawn_width, fit_lines, presenter
from .tiles import place_strips

# Shorter wordings for a larger text scale (presenter mode), used where the full one does not fit.
STEP_TEXT_SHORT = {
    "recompute_P": "recompute Pᵢⱼ = exp(scale·QᵢKⱼᵀ − lseᵢ): P was never stored",
    "update_dQ": "dQᵢ += scale · dSᵢⱼ Kⱼ:  read dQᵢ, add, write it back",
    "compute_D": "preprocess: Dᵢ = rowsum(dOᵢ ∘ Oᵢ), dQᵢ = 0 in HBM",
}
RECOMPUTE = "#e6550d"     # the recomputation: the flash, the extra FLOPs
FLASH = "#fdd835"


def _vmax(arrays, q=99.0):
    vals = [np.abs(a[np.isfinite(a)]).ravel() for a in arrays if a is not None]
    vals = np.concatenate(vals) if vals else np.zeros(0)
    v = float(np.percentile(vals, q)) if vals.size else 1.0
    return v if v > 0 else 1.0


def _small_axes(ax, xlabel="", ylabel=""):
    ax.tick_params(labelsize=style.pt(7), length=2, pad=1)
    ax.xaxis.set_major_locator(MaxNLocator(4, integer=True, min_n_ticks=1))
    ax.yaxis.set_major_locator(MaxNLocator(4, integer=True, min_n_ticks=1))
    if xlabel:
        ax.set_xlabel(xlabel, fontsize=style.pt(7), labelpad=1)
    if ylabel:
        ax.set_ylabel(ylabel, fontsize=style.pt(7), labelpad=1)


class _GridPanel:
    """The Nq×Nk grid of tiles, in the backward's loop order."""

    def __init__(self, ax, rp: BackwardReplay):
        tr = rp.trace
        self.ax, self.rp, self.tr = ax, rp, tr
        cmap = mpl.colormaps["Blues"].with_extremes(bad=(1, 1, 1, 0))
        self.image = ax.imshow(np.full((tr.Nq, tr.Nk), np.nan), cmap=cmap, vmin=-0.35 * max(rp.n_tiles, 1),
                               vmax=1.25 * max(rp.n_tiles, 1), extent=(0, tr.Nk, tr.Nq, 0),
                               interpolation="nearest", aspect="auto")
        rows, cols = np.arange(0, tr.Nq + 1, tr.Br), np.arange(0, tr.Nk + 1, tr.Bc)
        rows, cols = np.unique(np.append(rows, tr.Nq)), np.unique(np.append(cols, tr.Nk))
        segs = [[(0, r), (tr.Nk, r)] for r in rows] + [[(c, 0), (c, tr.Nq)] for c in cols]
        self.grid = LineCollection(segs if len(segs) <= 600 else [], colors="0.55", linewidths=0.5)
        ax.add_collection(self.grid)
        skipped = [Rectangle((j * tr.Bc, i * tr.Br), tr.Bc, tr.Br) for i, j in zip(*np.nonzero(rp.tile_kinds == "skipped"))]
        if skipped:
            ax.add_collection(PatchCollection(skipped, facecolor=style.SKIPPED, edgecolor="0.7", hatch="//",
                                              linewidth=0.3))
        self.path = []                     # lines drawn over the tile shading (the mask edge, the loop order)
        if tr.causal:
            off = tr.Nk - tr.Nq
            self.path += ax.plot([max(0, off), tr.Nk], [max(0, -off), tr.Nk - off], color="k", lw=0.8, ls="--")
        # the loop order: a faint path through the tile centres, column after column
        if rp.n_tiles <= 256:
            ij = sorted(zip(*np.nonzero(rp.visit_at < NEVER)), key=lambda t: rp.visit_at[t])
            cx = [min((j + 0.5) * tr.Bc, (j * tr.Bc + tr.Nk) / 2) for _, j in ij]
            cy = [min((i + 0.5) * tr.Br, (i * tr.Br + tr.Nq) / 2) for i, _ in ij]
            self.path += ax.plot(cx, cy, color="0.45", lw=0.7, ls=":", zorder=1.5)
        self.q_strip = Rectangle((tr.Nk * 1.01, 0), tr.Nk * 0.03, 0, facecolor=style.CURRENT, clip_on=False)
        self.k_strip = Rectangle((0, -tr.Nq * 0.01), 0, -tr.Nq * 0.03, facecolor=style.CURRENT, clip_on=False)
        self.band = Rectangle((0, 0), 0, 0, fill=False, edgecolor=style.CURRENT, linewidth=1.2, linestyle="--")
        self.flash = Rectangle((0, 0), 0, 0, facecolor=FLASH, edgecolor=RECOMPUTE, linewidth=1.5, alpha=0.9)
        self.tile = Rectangle((0, 0), 0, 0, fill=False, edgecolor=style.CURRENT, linewidth=2.5)
        for z, p in enumerate((self.flash, self.band, self.tile, self.q_strip, self.k_strip)):
            ax.add_patch(p)
            p.set_zorder(3 + 0.1 * z)          # over the tile borders, in the order blitting draws them
        big = presenter()
        ax.xaxis.set_major_locator(MaxNLocator(6, integer=True, min_n_ticks=1))
        ax.yaxis.set_major_locator(MaxNLocator(6, integer=True, min_n_ticks=1))
        ax.tick_params(labelsize=style.pt(8))
        ax.set_xlim(0, tr.Nk)
        ax.set_ylim(tr.Nq, 0)
        if big:       # two lines: the one-line labels are longer than the panel at a larger text scale
            ax.set_xlabel(f"key index,  j: outer loop\n(Kⱼ, Vⱼ: blocks of Bc = {tr.Bc})", fontsize=style.pt(8))
            ax.set_ylabel(f"query index,  i: inner loop\n(Qᵢ: blocks of Br = {tr.Br})", fontsize=style.pt(8))
        else:
            ax.set_xlabel(f"key index  (Kⱼ, Vⱼ: blocks of Bc = {tr.Bc};  j: outer loop)", fontsize=style.pt(8))
            ax.set_ylabel(f"query index  (Qᵢ: blocks of Br = {tr.Br};  i: inner loop)", fontsize=style.pt(8))
        self.title = ax.set_title("", fontsize=style.pt(9), pad=16)
        self.titles = (("Pᵢⱼ recomputed — never stored", "tiles of S and P (shade: visit order)") if big else
                       ("Pᵢⱼ recomputed from Qᵢ, Kⱼ and lseᵢ — never stored",
                        "tiles of S and P, column by column (shade: visit order)"))

    def update(self, s: BackwardState, grid=None):
        tr, e = self.tr, s.event
        if grid is not None:
            self.image.set_data(grid)
        q_on = e.i >= 0 and e.kind != "compute_D"
        k_on = e.j >= 0
        place_strips(self.q_strip, self.k_strip, e, q_on, k_on)
        if e.kind == "compute_D":
            self.band.set_bounds(0, e.r0, tr.Nk, e.r1 - e.r0)
        elif e.j >= 0:
            self.band.set_bounds(e.c0, 0, e.c1 - e.c0, tr.Nq)       # the key block's column: dK_j, dV_j
        else:
            self.band.set_bounds(0, 0, 0, 0)
        on_tile = e.i >= 0 and e.j >= 0
        self.tile.set_visible(on_tile)
        self.flash.set_visible(e.kind == "recompute_P")
        if on_tile:
            self.tile.set_bounds(e.c0, e.r0, e.c1 - e.c0, e.r1 - e.r0)
            self.flash.set_bounds(e.c0, e.r0, e.c1 - e.c0, e.r1 - e.r0)
        if e.kind == "recompute_P":
            self.title.set(text=self.titles[0], color=RECOMPUTE, weight="bold")
        else:
            self.title.set(text=self.titles[1], color="k", weight="normal")


class _Image:
    """A small matrix panel with a fixed shape (partial blocks padded with NaN)."""

    def __init__(self, ax, shape, cmap, vmin, vmax, title, xlabel="", ylabel="", extent=None):
        self.buf = np.full(shape, np.nan)
        self.ax = ax
        self.image = ax.imshow(self.buf, cmap=cmap, vmin=vmin, vmax=vmax, interpolation="nearest", aspect="auto",
                               extent=extent)
        self.title = ax.set_title(title, fontsize=style.pt(8.5), pad=style.pt(5))
        _small_axes(ax, xlabel, ylabel)

    def show(self, a):
        self.buf[:] = np.nan
        if a is not None:
            self.buf[: a.shape[0], : a.shape[1]] = a
        self.image.set_data(self.buf)


class _Meters:
    """Three bar panels: HBM bytes, bytes kept between passes, FLOPs (with the recomputation)."""

    def __init__(self, ax_hbm, ax_keep, ax_flops, rp: BackwardReplay):
        tr = rp.trace
        big = presenter()
        # HBM traffic so far vs the standard backward
        std, tot = rp.standard.hbm_bytes, rp.total.hbm_bytes
        uname, self.u = byte_unit(max(std, tot), min_count=2)
        ax_hbm.barh([1], [std / self.u], color=style.STANDARD, alpha=0.85, height=0.6)
        ax_hbm.barh([0], [tot / self.u], color=style.TILED, alpha=0.2, height=0.6)
        (self.hbm_bar,) = ax_hbm.barh([0], [0], color=style.TILED, height=0.6)
        self.hbm_label = ax_hbm.text(0, 0, "", va="center", fontsize=style.pt(7.5))
        self.axes = (ax_hbm, ax_keep, ax_flops)
        self.tot = tot
        self._bar_axes(ax_hbm, ["tiled", "standard"], max(std, tot) / self.u, uname)
        self._end_label(ax_hbm, 1, std / self.u, fmt_bytes(std))
        ax_hbm.set_title(f"HBM traffic{'' if big else ' of the backward'} ({tr.itemsize}-byte elements)",
                         fontsize=style.pt(8.5))
        # bytes kept in HBM from the forward to the backward
        P, lse = rp.stored["standard (P)"], rp.stored["flash (lse)"]
        kname, ku = byte_unit(P, min_count=2)
        ax_keep.barh([1], [P / ku], color=style.STANDARD, alpha=0.85, height=0.6)
        ax_keep.barh([0], [lse / ku], color=style.TILED, height=0.6)
        self._bar_axes(ax_keep, [f"lse ({tr.Nq})", f"P ({tr.Nq}×{tr.Nk})"], P / ku, kname)
        self._end_label(ax_keep, 1, P / ku, fmt_bytes(P))
        self._end_label(ax_keep, 0, lse / ku, f"{fmt_bytes(lse)}" + (f"  ({P // lse:,}× less)" if P > lse else ""))
        ax_keep.set_title(f"kept {'' if big else 'in HBM '}from forward to backward", fontsize=style.pt(8.5))
        # FLOPs so far, the recomputation's share in its own colour
        fstd, ftot = rp.standard.flops, rp.total.flops
        self.fu = float(max(fstd, ftot))
        ax_flops.barh([1], [fstd / self.fu], color=style.STANDARD, alpha=0.85, height=0.6)
        ax_flops.barh([0], [ftot / self.fu], color=style.TILED, alpha=0.2, height=0.6)
        (self.flop_bar,) = ax_flops.barh([0], [0], color=style.TILED, height=0.6)
        (self.extra_bar,) = ax_flops.barh([0], [0], color=RECOMPUTE, height=0.6)
        self.flop_label = ax_flops.text(0, 0, "", va="center", fontsize=style.pt(7.5))
        self._bar_axes(ax_flops, ["tiled", "standard"], 1.0, "")
        ax_flops.set_xticks([])
        self._end_label(ax_flops, 1, fstd / self.fu, fmt_flops(fstd))
        self.ftot = ftot
        pct = 100 * rp.extra_flops / fstd
        ax_flops.set_title(f"{'' if big else 'matmul '}FLOPs (orange: recompute S, +{pct:.0f}%)",
                           fontsize=style.pt(8.5))
        fig = ax_hbm.figure
        self.char_frac = {ax: 0.62 * style.pt(7.5) / 72 * fig.dpi / ax.get_window_extent().width
                          for ax in (ax_hbm, ax_flops)}

    @staticmethod
    def _bar_axes(ax, labels, top, uname):
        ax.set_yticks([0, 1], labels)
        ax.tick_params(axis="y", labelsize=style.pt(7.5))
        ax.set_ylim(-0.5, 1.5)
        ax.set_xlim(0, 1.06 * top)
        ax.tick_params(axis="x", labelsize=style.pt(7), length=2, pad=1)
        ax.xaxis.set_major_locator(MaxNLocator(5, steps=[1, 2, 4, 5, 10]))
        if uname:
            ax.set_xlabel(uname, fontsize=style.pt(7), labelpad=0)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)

    @staticmethod
    def _end_label(ax, y, x, text):
        top = ax.get_xlim()[1]
        inside = x > 0.55 * top
        ax.text(x, y, f" {text} ", va="center", ha="right" if inside else "left", fontsize=style.pt(7.5),
                color="w" if inside else "k")

    def _place(self, label, x, texts):
        """Put the first of ``texts`` that fits right of the bar's end; else the last (shortest)
        inside the bar, in white."""
        ax = label.axes
        top = ax.get_xlim()[1]
        cf = self.char_frac[ax] * top          # data units per character
        for text in texts:
            if x + (len(text) + 2) * cf <= top:
                label.set(x=x, ha="left", color="k", text=f" {text} ")
                return
        label.set(x=x, ha="right", color="w", text=f" {texts[-1]} ")

    def update(self, s: BackwardState):
        b = s.hbm_bytes / self.u
        self.hbm_bar.set_width(b)
        self._place(self.hbm_label, b, [f"{fmt_bytes(s.hbm_bytes)} of {fmt_bytes(self.tot)}", fmt_bytes(s.hbm_bytes)])
        base = (s.flops - s.recompute_flops) / self.fu
        self.flop_bar.set_width(base)
        self.extra_bar.set_x(base)
        self.extra_bar.set_width(s.recompute_flops / self.fu)
        self._place(self.flop_label, s.flops / self.fu,
                    [f"{fmt_flops(s.flops)}, recompute {fmt_flops(s.recompute_flops)}", fmt_flops(s.flops)])


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
            gs = GridSpec(3, 4, figure=fig, width_ratios=[1.55, 0.8, 0.8, 0.8], height_ratios=[1, 1, 0.5],
                          left=0.07, right=0.975, top=0.775, bottom=0.065, wspace=0.42, hspace=0.66)
            mgs = gs[2, :].subgridspec(1, 3, wspace=0.55)
        self.grid = _GridPanel(fig.add_subplot(gs[0:2, 0]), rp)
        ev = tr.events
        pmax = _vmax([e.P for e in ev if e.kind == "recompute_P"], 99.5)
        dsmax = _vmax([e.dS for e in ev if e.kind == "compute_dS"])
        qmax = _vmax([e.dQ for e in ev if e.kind == "update_dQ"])
        kmax, vmax = _vmax([rp.dKV_full[:, : tr.d]]), _vmax([rp.dKV_full[:, tr.d:]])
        floor = 1e-6 * max(qmax, kmax, vmax)          # a gradient that is 0 up to rounding shows as 0
        qmax, kmax, vmax = max(qmax, floor), max(kmax, floor), max(vmax, floor)
        Br, Bc = min(tr.Br, tr.Nq), min(tr.Bc, tr.Nk)
        probs = mpl.colormaps["magma_r"].with_extremes(bad="white")
        signed = style.output_cmap()
        self.P = _Image(fig.add_subplot(gs[0, 1]), (Br, Bc), probs, 0, pmax, "", "key in block", "query in block")
        self.P.image.set_norm(PowerNorm(0.5, vmin=0, vmax=pmax))     # small probabilities stay visible
        self.dS = _Image(fig.add_subplot(gs[1, 1]), (Br, Bc), signed, -dsmax, dsmax, "", "key in block",
                         "query in block")
        self.dK = _Image(fig.add_subplot(gs[0, 2]), (Bc, tr.d), signed, -kmax, kmax, "", "feature (d)", "key in block")
        self.dV = _Image(fig.add_subplot(gs[1, 2]), (Bc, tr.dv), signed, -vmax, vmax, "", "feature (d)",
                         "key in block")
        self.dQ = _Image(fig.add_subplot(gs[0, 3]), (tr.Nq, tr.d), signed, -qmax, qmax, "", "feature (d)",
                         "query index", extent=(0, tr.d, tr.Nq, 0))
        self.dKV = _Image(fig.add_subplot(gs[1, 3]), (tr.Nk, tr.d + tr.dv), signed, -1, 1, "dK | dV (written once)",
                          "feature: dK | dV", "key index", extent=(0, tr.d + tr.dv, tr.Nk, 0))
        # dK and dV share one image: each half is scaled to its own range, so both read
        self._kv_scale = np.concatenate([np.full(tr.d, 1 / kmax), np.full(tr.dv, 1 / vmax)])
        self.divider = self.dKV.ax.axvline(tr.d, color="k", lw=0.8)
        self.rmw = Rectangle((0, 0), tr.d, 0, fill=False, edgecolor=style.CURRENT, linewidth=2, clip_on=False)
        self.dQ.ax.add_patch(self.rmw)
        self.meters = _Meters(fig.add_subplot(mgs[0]), fig.add_subplot(mgs[1]), fig.add_subplot(mgs[2]), rp)
        self._group(fig, [self.P.ax, self.dS.ax, self.dK.ax, self.dV.ax], "on chip (SRAM)", style.CURRENT)
        self._group(fig, [self.dQ.ax, self.dKV.ax], "in HBM", "0.35")
        # the step line lives in an axes: savefig draws an axes' animated artists, not a figure's
        self.head_y = head_y = 0.945 if big else 0.952
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
        self.caption = fig.text(0.01, head_y - 0.007, caption, **cap_font, va="top", color="0.25")
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
        left, below, above = (0.055, 0.065, 0.075) if self.big else (0.048, 0.07, 0.07)
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
