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
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from matplotlib.collections import PatchCollection
from matplotlib.gridspec import GridSpec
from matplotlib.patches import Patch, Polygon, Rectangle
from matplotlib.ticker import MaxNLocator

from .. import iomodel
from ..masking import causal_offset, n_key_blocks_visible, tile_kind
from ..replay import sub
from . import style
from .blit import BlittedView
from .style import fmt_bytes

KIND_COLOURS = {"full": "#6baed6", "partial": "#cbb7e3", "skipped": style.SKIPPED}
NO_KEY = "#d62728"        # query rows that see no key (Nq > Nk)


def tile_kinds(Nq: int, Nk: int, Br: int, Bc: int, causal: bool = True) -> np.ndarray:
    """(Tr, Tc) array of 'full' / 'partial' / 'skipped' (``masking.tile_kind`` of every tile)."""
    Tr, Tc = -(-Nq // Br), -(-Nk // Bc)
    return np.array([[tile_kind(i * Br, min((i + 1) * Br, Nq), j * Bc, min((j + 1) * Bc, Nk), Nq, Nk, causal)
                      for j in range(Tc)] for i in range(Tr)]).reshape(Tr, Tc)


def visible_pairs(Nq: int, Nk: int) -> int:
    """How many (query, key) pairs the bottom-right aligned mask lets through."""
    r = np.arange(Nq)
    return int(np.clip(r + causal_offset(Nq, Nk) + 1, 0, Nk).sum())


def fmt_count(n: float) -> str:
    """1234 → '1.23 k', 3.4e9 → '3.4 G' (three significant digits)."""
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.3g} {unit}"
    return f"{int(n)}"


@dataclass
class CausalState:
    """Frame k = query block i: its rows [r0, r1), the key blocks it visits (``visited``, the
    first ones), their kinds (``n_full``, ``n_partial``), ``n_skipped``; FLOPs and HBM bytes of
    the run through this block (``flops_so_far``, ``bytes_so_far``, summed over the trace); text."""

    k: int
    i: int
    r0: int
    r1: int
    visited: int
    n_full: int
    n_partial: int
    n_skipped: int
    flops_so_far: int
    bytes_so_far: int
    text: str


class CausalFigure(BlittedView):
    """The causal tile grid, one frame per query block, with FLOPs and bytes saved.

    fig: a matplotlib Figure (cleared first); trace: a recorded causal FA2 run
    (``flash_forward(Q, K, V, causal=True, record=True)``, order "fa2"); caption: a line under the
    step text. Public: ``n_frames`` (Tr), ``draw_frame(k)`` → CausalState, ``render(k)``,
    ``enable_blitting()``, ``kinds`` ((Tr, Tc) tile kinds), ``io`` ({"causal", "non-causal"}:
    ``flash_forward_io``), ``counts`` (the numbers of the table), ``fig``.
    Raises ValueError for a trace that is not causal or not in FA2 order.
    """

    def __init__(self, fig, trace, *, caption: str = ""):
        if not trace.causal or trace.order != "fa2" or not trace.events:
            raise ValueError("CausalFigure draws a recorded causal FA2 run: "
                             "flash_forward(Q, K, V, causal=True, order='fa2', record=True).trace")
        fig.clear()
        self.fig, self.tr = fig, trace
        tr = trace
        self.kinds = tile_kinds(tr.Nq, tr.Nk, tr.Br, tr.Bc)
        kw = dict(dv=tr.dv, Br=tr.Br, Bc=tr.Bc, itemsize=tr.itemsize)
        self.io = {"non-causal": iomodel.flash_forward_io(tr.Nq, tr.Nk, tr.d, causal=False, **kw),
                   "causal": iomodel.flash_forward_io(tr.Nq, tr.Nk, tr.d, causal=True, **kw)}
        # FLOPs and bytes through query block i, summed over the trace's events (FA2: each carries i)
        flops, nbytes = np.zeros(tr.Tr, np.int64), np.zeros(tr.Tr, np.int64)
        for e in tr.events:
            flops[e.i] += e.flops
            nbytes[e.i] += sum(e.reads.values()) + sum(e.writes.values())
        self.cum_flops, self.cum_bytes = np.cumsum(flops), np.cumsum(nbytes)
        self.visits = [n_key_blocks_visible(min((i + 1) * tr.Br, tr.Nq), tr.Nk, tr.Bc, tr.Nq, True)
                       for i in range(tr.Tr)]
        n_tiles = {"non-causal": tr.Tr * tr.Tc, "causal": int((self.kinds != "skipped").sum())}
        self.counts = {
            "tiles": n_tiles,
            "flops": {o: self.io[o].flops for o in self.io},
            "hbm_bytes": {o: self.io[o].hbm_bytes for o in self.io},
            "kinds": {kd: int((self.kinds == kd).sum()) for kd in ("full", "partial", "skipped")},
            "visible_pairs": visible_pairs(tr.Nq, tr.Nk),
            "computed_pairs": self.io["causal"].flops // (2 * (tr.d + tr.dv)),
        }
        gs = GridSpec(2, 2, figure=fig, width_ratios=[1.25, 1], height_ratios=[1, 1.05], left=0.07, right=0.975,
                      top=0.83, bottom=0.08, wspace=0.2, hspace=0.45)
        self._draw_grid(fig.add_subplot(gs[:, 0]))
        self._draw_bars(fig.add_subplot(gs[0, 1]))
        self._draw_table(fig.add_subplot(gs[1, 1]))
        self.step = fig.text(0.01, 0.975, "", fontsize=12, weight="bold", va="top")
        self.detail = fig.text(0.205, 0.972, "", fontsize=10, va="top")
        self.caption = fig.text(0.01, 0.935, style.sci_math(caption), fontsize=8.5, va="top", color="0.25", linespacing=1.5)
        self.k = None
        self.blitter = None

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
            rows = f"row 0" if n == 1 else f"rows 0–{n - 1}"
            ax.text(0.5 * tr.Nk, min(n / 2, 0.5 * tr.Nq), f"{rows} see no key:\nO = 0, lse = −inf", color=NO_KEY,
                    ha="center", va="center", fontsize=8.5, weight="bold", zorder=4,
                    bbox=dict(facecolor="w", edgecolor=NO_KEY, alpha=0.9, boxstyle="round,pad=0.25"))
        ax.set_xlim(0, tr.Nk)
        ax.set_ylim(tr.Nq, 0)
        # the box follows the matrix's shape (wide when Nq < Nk), clamped so extremes stay readable
        ax.set_box_aspect(float(np.clip(tr.Nq / tr.Nk, 0.55, 1.8)))
        ax.set_anchor("N")
        ax.xaxis.set_major_locator(MaxNLocator(6, integer=True))
        ax.yaxis.set_major_locator(MaxNLocator(6, integer=True))
        ax.tick_params(labelsize=7)
        ax.set_xlabel(f"key index j   (Nk = {tr.Nk}; blocks of Bc = {tr.Bc})", fontsize=8.5)
        ax.set_ylabel(f"query index i   (Nq = {tr.Nq}; blocks of Br = {tr.Br})", fontsize=8.5)
        sign = "+" if off >= 0 else "−"
        if off > 0:
            where = f"Nq < Nk: even query 0 sees keys 0–{off}"
        elif off < 0:
            where = f"Nq > Nk: the first {-off} query row{'s' if off < -1 else ''} see no key (red)"
        else:
            where = "Nq = Nk: the usual lower triangle"
        ax.set_title(f"query i sees key j iff j ≤ i + Nk − Nq = i {sign} {abs(off)}  (dashed)\n"
                     f"{where}; dark: masked entries", fontsize=9, pad=8)
        self.box = Rectangle((0, 0), 0, 0, fill=False, edgecolor=style.CURRENT, lw=2.5, zorder=3)
        self.strip = Rectangle((1.01 * tr.Nk, 0), 0.025 * tr.Nk, 0, facecolor=style.CURRENT, clip_on=False, zorder=3)
        for p in (self.box, self.strip):
            ax.add_patch(p)

    def _draw_bars(self, ax):
        c = self.counts
        rows = [("FLOPs", "flops", fmt_count), ("HBM bytes (FA2)", "hbm_bytes", fmt_bytes)]
        self.fill = {}
        for n, (label, key, fmt) in enumerate(rows):
            y = 3.2 - 2.2 * n
            full, causal = c[key]["non-causal"], c[key]["causal"]
            ax.barh(y, 100, height=0.8, color="0.6")
            ax.text(100, y, f" {fmt(full)}", va="center", fontsize=8)
            ax.barh(y - 1, 100 * causal / full, height=0.8, color=style.TILED, alpha=0.25)
            (self.fill[key],) = ax.barh(y - 1, 0, height=0.8, color=style.TILED)
            saved = 1 - causal / full
            ax.text(100 * causal / full, y - 1, f" {fmt(causal)}  (saves {100 * saved:.0f}%)", va="center",
                    fontsize=8, color=style.OK if saved > 0 else "k")
        ax.set_yticks([3.2, 2.2, 1.0, 0.0], ["FLOPs\nnon-causal", "causal", "bytes\nnon-causal", "causal"], fontsize=8)
        ax.set_xlim(0, 160)
        ax.set_ylim(-0.6, 3.8)
        ax.set_xticks([0, 25, 50, 75, 100], ["0", "25", "50", "75", "100%"], fontsize=7)
        ax.set_title("causal vs non-causal (solid: through this query block)", fontsize=9)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)

    def _draw_table(self, ax):
        c, tr = self.counts, self.tr

        def row(name, key, fmt):
            a, b = c[key]["non-causal"], c[key]["causal"]
            return f"{name:<16}{fmt(a):>11}{fmt(b):>11}{100 * (1 - b / a):>8.1f}%"

        NN = tr.Nq * tr.Nk
        lines = [f"{'':<16}{'non-causal':>11}{'causal':>11}{'saved':>9}",
                 row("tiles computed", "tiles", str), row("FLOPs (matmul)", "flops", fmt_count),
                 row("HBM bytes (FA2)", "hbm_bytes", fmt_bytes), "",
                 f"visible (query, key) pairs: {c['visible_pairs']:,} of {NN:,} ({100 * c['visible_pairs'] / NN:.1f}%)",
                 f"computed pairs (whole tiles): {c['computed_pairs']:,}",
                 f"→ {c['computed_pairs'] - c['visible_pairs']:,} computed, then masked, in partial tiles"]
        ax.axis("off")
        k = c["kinds"]
        handles = [Patch(facecolor=KIND_COLOURS[kd], edgecolor="0.45", hatch="//" if kd == "skipped" else None,
                         label=f"{kd} ({k[kd]})") for kd in ("full", "partial", "skipped")]
        handles.append(Patch(facecolor="none", edgecolor=style.CURRENT, lw=2, label="visited by this Q_i"))
        ax.legend(handles=handles, fontsize=8, ncol=2, loc="upper left", bbox_to_anchor=(-0.01, 1.12),
                  frameon=False, handlelength=1.4, columnspacing=1.0, title="tiles", title_fontsize=8,
                  alignment="left")
        ax.text(0.0, 0.74, "\n".join(lines), family="monospace", fontsize=8, va="top", ha="left",
                transform=ax.transAxes, linespacing=1.5)
        ax.text(0.0, -0.06, f"bytes of {tr.itemsize}-byte elements, d = {tr.d}; counts: iomodel.flash_forward_io,\n"
                          f"equal to the sums over this run's trace (the solid bars)", fontsize=7.5, color="0.35",
                transform=ax.transAxes, va="bottom")

    # --- frames ---------------------------------------------------------------------------
    @property
    def n_frames(self) -> int:
        return self.tr.Tr

    def animated_artists(self):
        return [self.box, self.strip,
                self.fill["flops"], self.fill["hbm_bytes"], self.step,
                self.detail]


    def draw_frame(self, k: int) -> CausalState:
        """Update the artists to query block i = k (0 <= k < n_frames); returns the state."""
        if not 0 <= k < self.n_frames:
            raise IndexError(f"frame {k} is out of range 0..{self.n_frames - 1}")
        tr, i = self.tr, k
        r0, r1 = i * tr.Br, min((i + 1) * tr.Br, tr.Nq)
        t = self.visits[i]
        x1 = min(t * tr.Bc, tr.Nk)
        row = self.kinds[i]
        n_full, n_part = int((row[:t] == "full").sum()), int((row[:t] == "partial").sum())
        self.box.set_bounds(0, r0, x1, r1 - r0)
        self.box.set_visible(t > 0)
        self.strip.set_y(r0)
        self.strip.set_height(r1 - r0)
        fl, nb = int(self.cum_flops[i]), int(self.cum_bytes[i])
        self.fill["flops"].set_width(100 * fl / self.counts["flops"]["non-causal"])
        self.fill["hbm_bytes"].set_width(100 * nb / self.counts["hbm_bytes"]["non-causal"])
        last = min(r1 - 1 + causal_offset(tr.Nq, tr.Nk), tr.Nk - 1)
        rows = f"row {r0}" if r1 - r0 == 1 else f"rows {r0}–{r1 - 1}"
        if t:
            text = (f"Q{sub(i)} ({rows}) sees keys up to {last}: visits {t} of {tr.Tc} key blocks "
                    f"({n_full} full, {n_part} partial), skips {tr.Tc - t}")
        else:
            text = f"Q{sub(i)} ({rows}) sees no key: skips all {tr.Tc} key blocks; O = 0, lse = −inf"
        self.step.set_text(f"query block {i + 1}/{tr.Tr}")
        self.detail.set_text(text)
        self.k = k
        return CausalState(k, i, r0, r1, t, n_full, n_part, tr.Tc - t, fl, nb, text)
