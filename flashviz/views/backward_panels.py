"""The backward explainer's panels (``backward_view.BackwardFigure`` composes them): the tile
grid (``BackwardGridPanel``), the on-chip and HBM arrays (``ImagePanel``) and the three meters
(``BackwardMetersPanel``: HBM bytes, bytes kept between the passes, FLOPs with the recomputation).
Each panel builds its artists on the axes it is given and ``update(state)`` sets them for a
frame's ``BackwardState``; the figure decides the layout and the blitting."""

from __future__ import annotations

import matplotlib as mpl
import numpy as np
from matplotlib.collections import LineCollection, PatchCollection
from matplotlib.patches import Rectangle
from matplotlib.ticker import MaxNLocator

from ..replay.backward import NEVER, BackwardReplay, BackwardState
from . import style
from .style import byte_unit, fmt_bytes, fmt_flops
from .text import presenter
from .tiles import place_strips

RECOMPUTE = "#e6550d"     # the recomputation: the flash, the extra FLOPs
FLASH = "#fdd835"


def robust_max(arrays, q=99.0):
    """The q-th percentile of |x| over the finite entries of ``arrays`` (None skipped): a colour
    scale's top that one outlier does not squash; 1.0 when there is nothing positive."""
    vals = [np.abs(a[np.isfinite(a)]).ravel() for a in arrays if a is not None]
    vals = np.concatenate(vals) if vals else np.zeros(0)
    v = float(np.percentile(vals, q)) if vals.size else 1.0
    return v if v > 0 else 1.0


def small_axes(ax, xlabel="", ylabel=""):
    """Style a small array panel: small ticks (at most a few integers), optional axis labels."""
    ax.tick_params(labelsize=style.pt(7), length=2, pad=1)
    ax.xaxis.set_major_locator(MaxNLocator(4, integer=True, min_n_ticks=1))
    ax.yaxis.set_major_locator(MaxNLocator(4, integer=True, min_n_ticks=1))
    if xlabel:
        ax.set_xlabel(xlabel, fontsize=style.pt(7), labelpad=1)
    if ylabel:
        ax.set_ylabel(ylabel, fontsize=style.pt(7), labelpad=1)


class BackwardGridPanel:
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


class ImagePanel:
    """A small matrix panel with a fixed shape (partial blocks padded with NaN)."""

    def __init__(self, ax, shape, cmap, vmin, vmax, title, xlabel="", ylabel="", extent=None):
        self.buf = np.full(shape, np.nan)
        self.ax = ax
        self.image = ax.imshow(self.buf, cmap=cmap, vmin=vmin, vmax=vmax, interpolation="nearest", aspect="auto",
                               extent=extent)
        self.title = ax.set_title(title, fontsize=style.pt(8.5), pad=style.pt(5))
        small_axes(ax, xlabel, ylabel)

    def show(self, a):
        self.buf[:] = np.nan
        if a is not None:
            self.buf[: a.shape[0], : a.shape[1]] = a
        self.image.set_data(self.buf)


class BackwardMetersPanel:
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
