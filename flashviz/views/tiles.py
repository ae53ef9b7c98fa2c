"""The score matrix as a grid of Br×Bc tiles: computed tiles filled with their scores,
the current tile outlined, the block in SRAM banded, causal-skipped tiles hatched."""

from __future__ import annotations

import numpy as np
from matplotlib.collections import LineCollection, PatchCollection
from matplotlib.patches import Rectangle
from matplotlib.ticker import MaxNLocator

from . import style
from .text import presenter


def place_strips(q_strip, k_strip, e, q_on: bool, k_on: bool) -> None:
    """Show the SRAM strips beside the score grid: q_strip over the rows [e.r0, e.r1) of the
    query block in SRAM, k_strip over the columns [e.c0, e.c1) of the key block; each hidden
    when its block is not on chip (q_on / k_on False)."""
    q_strip.set_visible(q_on)
    k_strip.set_visible(k_on)
    if q_on:
        q_strip.set_y(e.r0)
        q_strip.set_height(e.r1 - e.r0)
    if k_on:
        k_strip.set_x(e.c0)
        k_strip.set_width(e.c1 - e.c0)

class TilesPanel:
    """The score matrix panel. Draws into ``ax``; ``update(state)`` moves the artists for one frame."""

    def __init__(self, ax, replay):
        tr = replay.trace
        self.ax, self.tr = ax, tr
        lo, hi = replay.S_range
        if hi <= lo:
            hi = lo + 1.0
        # Display buffer, updated tile by tile; strided for large N (the axes have ~400 pixels).
        self.stride = max(1, max(tr.Nq, tr.Nk) // 512)
        st = self.stride
        S_disp = np.where(np.isneginf(replay.S_full), lo - 1.0, replay.S_full)   # masked → "under" colour
        self._S_disp = S_disp[::st, ::st]
        self._buf = np.full_like(self._S_disp, np.nan)
        self._shown = np.zeros_like(replay.tile_at, dtype=bool)
        self._tile_rows = [slice(-(-i * tr.Br // st), -(-min((i + 1) * tr.Br, tr.Nq) // st)) for i in range(tr.Tr)]
        self._tile_cols = [slice(-(-j * tr.Bc // st), -(-min((j + 1) * tr.Bc, tr.Nk) // st)) for j in range(tr.Tc)]
        self.image = ax.imshow(self._buf, cmap=style.score_cmap(), vmin=lo, vmax=hi,
                               extent=(0, tr.Nk, tr.Nq, 0), interpolation="nearest", aspect="auto")
        rows = np.arange(0, tr.Nq + 1, tr.Br)
        cols = np.arange(0, tr.Nk + 1, tr.Bc)
        segs = [[(0, r), (tr.Nk, r)] for r in rows] + [[(c, 0), (c, tr.Nq)] for c in cols]
        self.grid = LineCollection(segs if len(segs) <= 600 else [], colors="0.6", linewidths=0.5)
        ax.add_collection(self.grid)  # tile borders (drawn over the scores; too dense past 600 lines)
        skipped = [Rectangle((j * tr.Bc, i * tr.Br), tr.Bc, tr.Br)
                   for i, j in zip(*np.nonzero(replay.tile_kinds == "skipped"))]
        if skipped:
            ax.add_collection(PatchCollection(skipped, facecolor=style.SKIPPED, edgecolor="0.7", hatch="//",
                                              linewidth=0.3))
        if tr.causal:
            off = tr.Nk - tr.Nq
            ax.plot([max(0, off), tr.Nk], [max(0, -off), tr.Nk - off], color="k", lw=0.8, ls="--")
        # What is in SRAM now: Q_i (a strip right of the matrix, over its rows) and K_j, V_j (a strip
        # above it, over their columns). The strips sit outside the axes so they hide no scores.
        self.q_strip = Rectangle((tr.Nk * 1.01, 0), tr.Nk * 0.03, 0, facecolor=style.CURRENT, clip_on=False)
        self.k_strip = Rectangle((0, -tr.Nq * 0.01), 0, -tr.Nq * 0.03, facecolor=style.CURRENT, clip_on=False)
        self.band = Rectangle((0, 0), 0, 0, facecolor=style.BAND, alpha=0.25, edgecolor="none")
        self.tile = Rectangle((0, 0), 0, 0, fill=False, edgecolor=style.CURRENT, linewidth=2.5)
        for patch in (self.band, self.q_strip, self.k_strip, self.tile):
            ax.add_patch(patch)
        cb = ax.figure.colorbar(self.image, ax=ax, fraction=0.035, pad=0.09, extend="min" if tr.causal else "neither")
        cb.set_label("score S", fontsize=style.pt(7), labelpad=1)
        cb.ax.tick_params(labelsize=style.pt(7))
        # larger texts (presenter mode): fewer colour bar ticks, the y label and the title on two lines
        self.big = big = presenter()
        if big:
            cb.ax.yaxis.set_major_locator(MaxNLocator(5))
        ax.xaxis.set_major_locator(MaxNLocator(6, integer=True))
        ax.yaxis.set_major_locator(MaxNLocator(6, integer=True))
        ax.tick_params(labelsize=style.pt(10))
        ax.set_xlim(0, tr.Nk)
        ax.set_ylim(tr.Nq, 0)
        ax.set_xlabel(f"key index  (K_j, V_j: blocks of Bc = {tr.Bc})", fontsize=style.pt(9))
        ax.set_ylabel("query index" + ("\n" if big else "  ") + f"(Q_i: blocks of Br = {tr.Br})", fontsize=style.pt(10))
        self.title = ax.set_title("", fontsize=style.pt(10), pad=14)
        self.n_tiles = int((replay.tile_kinds != "skipped").sum())

    def update(self, s):
        tr, e = self.tr, s.event
        for i, j in zip(*np.nonzero(s.shown_tiles != self._shown)):   # usually one tile per frame
            rs, cs = self._tile_rows[i], self._tile_cols[j]
            self._buf[rs, cs] = self._S_disp[rs, cs] if s.shown_tiles[i, j] else np.nan
        self._shown = s.shown_tiles.copy()
        self.image.set_data(self._buf)
        q_on = e.i >= 0 and e.kind != "init"
        k_on = e.j >= 0 and not (tr.order == "fa2" and e.kind in ("load_Q", "write_O"))
        place_strips(self.q_strip, self.k_strip, e, q_on, k_on)
        # faint band: the rows of S this query block will produce (FA2) / the key block's columns (FA1)
        if tr.order == "fa1" and e.j >= 0:
            self.band.set_bounds(e.c0, 0, e.c1 - e.c0, tr.Nq)
        elif e.i >= 0:
            self.band.set_bounds(0, e.r0, tr.Nk, e.r1 - e.r0)
        else:
            self.band.set_bounds(0, 0, 0, 0)
        if e.j >= 0 and e.i >= 0:
            self.tile.set_bounds(e.c0, e.r0, e.c1 - e.c0, e.r1 - e.r0)
            self.tile.set_visible(True)
        else:
            self.tile.set_visible(False)
        sep = "\n" if self.big else " · "
        self.title.set_text(f"S = scale·QKᵀ: {s.tiles_done} of {self.n_tiles} tiles{sep}orange strips: in SRAM")
