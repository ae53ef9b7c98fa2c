"""Block size (chapter 4): HBM traffic over the Br × Bc grid against an SRAM budget.

``BlockSizeFigure`` draws, on one matplotlib Figure:

* the model's HBM traffic for every Br × Bc (a heatmap); configurations whose working set does
  not fit in SRAM are hatched red, the best fitting configuration found so far is starred;
* the recorded GPU sweep (measured kernel-only ms per Br × Bc: the profiler's kernel time per call,
  median; labelled with device and date) when one exists for this N, d, element size and mask,
  else a note saying what was recorded;
* traffic against N (log-log): exact counts for the best fitting blocks, the paper's
  Θ(N²d²/M) curve, standard attention, and the configuration of the current frame;
* the SRAM working set of the current configuration, part by part, against the budget.

One frame per configuration (the search, Br outer, Bc inner) plus a last frame for the optimum,
replayed by ``BlockSizeSweep`` (flashviz.replay.blocksize). Every number comes from
``flashviz.iomodel``; none is counted here.
"""

from __future__ import annotations

import matplotlib as mpl
import numpy as np
from matplotlib.colors import LogNorm
from matplotlib.gridspec import GridSpec
from matplotlib.patches import Rectangle
from matplotlib.ticker import FuncFormatter, LogLocator

from .. import iomodel
from ..replay.blocksize import (  # noqa: F401 (re-exported)
    CURVE_N,
    BlockSizeState,
    BlockSizeSweep,
    recorded_sweep,
    sram_budget_bytes,
    working_set_parts,
)
from . import style
from .blit import BlittedView
from .heights import from_top, grid_at_height
from .style import byte_unit, fmt_bytes, fmt_flops
from .text import presenter

DTYPE_NAMES = {1: "8-bit", 2: "fp16/bf16", 4: "fp32", 8: "fp64"}
SPILL = "#a00000"         # text on configurations that do not fit
PARTS = (("Q_i", "#1f77b4"), ("K_j", "#2ca02c"), ("V_j", "#98df8a"), ("S_ij/P_ij", "#9467bd"),
         ("O_i", "#17becf"), ("m_i, l_i", "#7f7f7f"))
#: above this text scale (style.text_scale(): presenter mode) the figure is laid out for large
#: text: shorter titles, captions and step lines, fewer labels, wider margins (same inches)
COMPACT_SCALE = 1.15
#: (notebook, large text): the GridSpec of the panels
LAYOUT = ({"left": 0.065, "right": 0.985, "top": 0.815, "bottom": 0.07, "wspace": 0.42, "hspace": 0.5},
          {"left": 0.075, "right": 0.985, "top": 0.765, "bottom": 0.085, "wspace": 0.36, "hspace": 0.5})


def _latest():
    try:
        from ..records.results import latest_results

        return latest_results()
    except Exception:     # a missing or corrupt results file: the panel says so, nothing breaks
        return None


class BlockSizeFigure(BlittedView):
    """Builds the block-size panels on ``fig`` (cleared first).

    N, d: sizes (Nq = Nk = N); itemsize: bytes per element; sram_budget: M in bytes; budget_name:
    the preset's label; order: "fa2" | "fa1"; causal: mask; blocks: sizes tried for Br and Bc;
    recorded: a GPU results dict, None (no measurements) or "latest" (flashviz.gpu.latest_results,
    imported lazily; no CuPy needed). Public: ``sweep`` (the BlockSizeSweep), ``rows`` (the sweep's
    rows), ``best`` (the optimum or None), ``measured`` ({(Br, Bc): row}), ``n_frames``,
    ``state(k)`` and ``draw_frame(k)`` → BlockSizeState.
    Text sizes go through ``style.pt``; built at a text scale above COMPACT_SCALE (presenter mode,
    ``style.scaled_text``) the figure keeps its inches and lays itself out for large text
    (``compact``): wider margins, shorter titles, caption, step line and numbers.
    """

    def __init__(self, fig, *, N: int, d: int, itemsize: int = 4, sram_budget: int, budget_name: str = "",
                 order: str = "fa2", causal: bool = False, blocks=iomodel.SWEEP_BLOCKS, recorded="latest"):
        self._res = _latest() if isinstance(recorded, str) and recorded == "latest" else recorded
        self.sweep = sw = BlockSizeSweep(N=N, d=d, itemsize=itemsize, sram_budget=sram_budget,
                                         budget_name=budget_name, order=order, causal=causal, blocks=blocks,
                                         recorded=self._res)
        fig.clear()
        self.fig, self.N, self.d, self.b, self.M = fig, N, d, itemsize, sram_budget
        self.order, self.causal, self.blocks = order, causal, sw.blocks
        self.budget_name = sw.budget_name
        self.rows, self.best, self.standard, self.measured = sw.rows, sw.best, sw.standard, sw.measured
        # presenter mode (large text) on the same inches: a layout of its own, decided now
        self.compact = presenter(COMPACT_SCALE)
        layout = dict(LAYOUT[self.compact])
        if not self.compact:      # drawn for 6.8 inches: margins and gaps kept in points at the notebook's height
            layout.update(grid_at_height(fig, top=layout["top"], bottom=layout["bottom"], hspace=layout["hspace"],
                                         nrows=2))
        gs = GridSpec(2, 3, figure=fig, width_ratios=[1, 1, 1.2], height_ratios=[3, 0.95], **layout)
        self._heatmap(fig.add_subplot(gs[0, 0]))
        self._measured_panel(fig.add_subplot(gs[0, 1]))
        self._curve_panel(fig.add_subplot(gs[0, 2]))
        self._sram_panel(fig.add_subplot(gs[1, 0:2]))
        self.ax_text = fig.add_subplot(gs[1, 2])
        self.ax_text.axis("off")
        self.numbers = self.ax_text.text(0, 1.12, "", fontsize=style.pt(8), va="top", family="monospace",
                                         linespacing=1.3 if self.compact else 1.45, transform=self.ax_text.transAxes)
        self.step = fig.text(0.01, from_top(fig, 0.975), "", fontsize=style.pt(11.5), weight="bold", va="top")
        Br_p, Bc_p = iomodel.paper_block_sizes(sram_budget, d, itemsize=itemsize)
        fit = sum(r["fits"] for r in self.rows)
        config = (f"N = {N:,}, d = {d}, {DTYPE_NAMES.get(itemsize, '')} ({itemsize} B), {order.upper()} order"
                  f"{', causal' if causal else ''}")
        paper = f"Bc = ⌈M/4d⌉ = {Bc_p}, Br = min(Bc, d) = {Br_p}"
        if self.compact:
            caption = (f"{config} · M = {self.budget_name} · {fit} of {len(self.rows)} configurations fit\n"
                       f"standard attention moves {fmt_bytes(self.standard)} · the paper's choice (Algorithm 1): {paper}")
        else:
            caption = (f"{config} · SRAM budget M = {self.budget_name} ({sram_budget:,} B) · "
                       f"{fit} of {len(self.rows)} configurations fit · "
                       f"standard attention moves {fmt_bytes(self.standard)}\n"
                       f"The paper's choice for this M (Algorithm 1): {paper}  "
                       f"(M counted in elements: {sram_budget // itemsize:,})")
        self.caption = fig.text(0.01, 0.915 if self.compact else from_top(fig, 0.93), style.sci_math(caption), fontsize=style.pt(8.5),
                                va="top", color="0.25", linespacing=1.35 if self.compact else 1.5)
        self.k = None
        self.blitter = None

    # --- static panels -------------------------------------------------------------------------
    def _cell(self, r):
        return self.blocks.index(r["Bc"]), self.blocks.index(r["Br"])

    def _grid_axes(self, ax, title):
        n = len(self.blocks)
        ax.set_xticks(range(n), [str(b) for b in self.blocks], fontsize=style.pt(7.5))
        ax.set_yticks(range(n), [str(b) for b in self.blocks], fontsize=style.pt(7.5))
        ax.set_xlim(-0.5, n - 0.5)
        ax.set_ylim(n - 0.5, -0.5)
        ax.set_xlabel("Bc (key block columns)", fontsize=style.pt(8))
        ax.set_ylabel("Br (query block rows)", fontsize=style.pt(8))
        ax.set_title(title, fontsize=style.pt(8.5))
        ax.tick_params(length=2, labelsize=style.pt(7.5))

    def _heatmap(self, ax):
        n = len(self.blocks)
        # the unit of the smallest cell (no '0.0352' in a narrow cell), unless the largest would then
        # need five digits; at most four characters a number ('2048', '514', '29.1')
        lo_b, hi_b = min(r["hbm_bytes"] for r in self.rows), max(r["hbm_bytes"] for r in self.rows)
        uname, u = byte_unit(lo_b)
        if hi_b / u >= 9999.5:
            uname, u = byte_unit(hi_b)
        grid = np.zeros((n, n))
        for r in self.rows:
            x, y = self._cell(r)
            grid[y, x] = r["hbm_bytes"]
        lo, hi = grid.min(), grid.max()
        norm = LogNorm(lo, hi if hi > lo else lo * 1.01)
        ax.imshow(grid, cmap="Blues", norm=norm, aspect="auto")
        for r in self.rows:
            x, y = self._cell(r)
            dark = norm(r["hbm_bytes"]) > 0.55
            if not r["fits"]:
                ax.add_patch(Rectangle((x - 0.5, y - 0.5), 1, 1, facecolor="#fde0e0", edgecolor="#f08080",
                                       hatch="///", linewidth=0.5))
            # large text on a grid wider than 5 cells: no room for the word, the red hatching says it
            spills = "" if r["fits"] or (self.compact and n > 5) else "\nspills"
            v = r["hbm_bytes"] / u
            ax.text(x, y, (f"{v:.0f}" if v >= 999.5 else f"{v:.3g}") + spills, ha="center", va="center",
                    fontsize=style.pt(7), color=SPILL if not r["fits"] else ("w" if dark else "k"), linespacing=1.1,
                    weight="normal" if r["fits"] else "bold",
                    bbox=None if r["fits"] else dict(boxstyle="round,pad=0.15", facecolor="#fde0e0", edgecolor="none"))
        self._grid_axes(ax, f"model HBM traffic ({uname})\nhatched red: does not fit" if self.compact else
                        f"model HBM traffic ({uname}) per Br × Bc\nhatched red: does not fit in SRAM")
        self.ax_heat = ax
        self.cur_heat = Rectangle((-0.5, -0.5), 1, 1, fill=False, edgecolor=style.CURRENT, linewidth=2.6)
        ax.add_patch(self.cur_heat)
        (self.star,) = ax.plot([], [], marker="*", markersize=13, color="gold", markeredgecolor="k",
                               markeredgewidth=0.8, linestyle="none")

    def _measured_panel(self, ax):
        self.ax_meas = ax
        self.cur_meas = None
        if not self.measured:
            ax.axis("off")
            rec = [r for r in (self._res or {}).get("sweep", []) if "kernel_ms" in r]
            if rec:
                env = self._res.get("env", {})
                N0, d0 = rec[0].get("N"), rec[0].get("d")
                msg = (f"No recorded GPU sweep\nfor this configuration.\n\nRecorded on {env.get('device', '?')},\n"
                       f"{env.get('date', '?')}: N = {N0}, d = {d0},\nfp32, non-causal, FA2 order.\n\n"
                       f"Set N = {N0}, d = {d0}, fp32, FA2,\ncausal off to see the measured\n"
                       "kernel time per block size.")
            else:
                msg = "No recorded GPU results\nin this installation."
            ax.text(0.5, 0.5, msg, ha="center", va="center", fontsize=style.pt(8), color="0.3", transform=ax.transAxes,
                    bbox=dict(boxstyle="round", facecolor="0.96", edgecolor="0.8"))
            return
        n = len(self.blocks)
        grid = np.full((n, n), np.nan)
        for (Br, Bc), r in self.measured.items():
            if Br in self.blocks and Bc in self.blocks:
                grid[self.blocks.index(Br), self.blocks.index(Bc)] = r["kernel_ms"]
        fin = grid[np.isfinite(grid)]
        norm = LogNorm(fin.min(), max(fin.max(), fin.min() * 1.01))
        ax.imshow(grid, cmap=mpl.colormaps["Purples"].with_extremes(bad="0.93"), norm=norm, aspect="auto")
        for y in range(n):
            for x in range(n):
                v = grid[y, x]
                ax.text(x, y, "—" if not np.isfinite(v) else f"{v:.1f}", ha="center", va="center", fontsize=style.pt(7),
                        color="0.55" if not np.isfinite(v) else ("w" if norm(v) > 0.55 else "k"))
        env = self._res.get("env", {})
        r0 = next(iter(self.measured.values()))
        if self.compact:
            self._grid_axes(ax, f"measured kernel-only ms, B·H = {r0['B'] * r0['H']}\n"
                                f"{env.get('device', '?')}, {env.get('date', '?')}")
            ax.set_ylabel("")                      # the same Br rows as the heatmap beside it
        else:
            self._grid_axes(ax, f"measured kernel-only ms ({env.get('device', '?')}, {env.get('date', '?')})\n"
                                f"B·H = {r0['B'] * r0['H']} heads, kernels/flash_fwd.cu")
        self.cur_meas = Rectangle((-0.5, -0.5), 1, 1, fill=False, edgecolor=style.CURRENT, linewidth=2.6)
        ax.add_patch(self.cur_meas)

    def _curve_panel(self, ax):
        self.Ns = self.sweep.Ns
        d = self.d
        curves = self.sweep.curves()
        std, best, theta = curves["standard"], curves["best"], curves["theta"]
        c = iomodel.ASYMPTOTIC_CONSTANT[self.order]
        ax.loglog(self.Ns, std, color=style.STANDARD, lw=1.6, label="standard attention (exact)")
        ax.loglog(self.Ns, best, color=style.TILED, lw=1.8, marker="o", ms=3,
                  label="best fitting blocks (exact)" if self.best else "best fitting blocks: none fit")
        ax.loglog(self.Ns, theta, color="k", lw=1.2, ls="--", label=f"Θ(N²d²/M) = {c}·N²d²/M")
        (self.cur_curve,) = ax.loglog(self.Ns, std, color=style.CURRENT, lw=1.2, alpha=0.9,
                                      label="this frame's Br × Bc")
        ax.axvline(self.N, color="0.5", lw=0.8, ls=":")
        ax.set_xlabel("N (sequence length)", fontsize=style.pt(8))
        ax.set_title("HBM traffic vs N (log-log)" + ("\n" if self.compact else ", ") +
                     f"d = {d}, M = {fmt_bytes(self.M)}", fontsize=style.pt(8.5))
        ax.yaxis.set_major_locator(LogLocator(base=4.0 ** 2, numticks=12))
        ax.yaxis.set_major_formatter(FuncFormatter(fmt_bytes))
        ax.minorticks_off()
        xt = [n for n in CURVE_N if n.bit_length() % 2 == 0]       # 128, 512, 2k, 8k, 32k
        ax.set_xticks(xt, [f"{n // 1024}k" if n >= 1024 else str(n) for n in xt])
        ax.tick_params(labelsize=style.pt(7))
        ax.grid(True, which="major", lw=0.3, alpha=0.5)
        ax.legend(fontsize=style.pt(7), loc="upper left", frameon=False, handlelength=1.6)
        self.ax_curve = ax

    def _sram_panel(self, ax):
        self.ax_sram = ax
        top = max(max(r["sram_bytes"] for r in self.rows), self.M)
        uname, self.su = byte_unit(top)
        self.parts = []
        for name, colour in PARTS:
            (bar,) = ax.barh([0], [0], left=[0], color=colour, height=0.5, label=name)
            self.parts.append(bar)
        lo, hi = -0.62, 1.15
        ax.axvline(self.M / self.su, ymin=0, ymax=(0.45 - lo) / (hi - lo), color="k", lw=1.4)
        ax.text(self.M / self.su, -0.6, f" budget M = {self.budget_name} ", fontsize=style.pt(7), va="bottom",
                ha="right" if self.M > 0.6 * top else "left")
        ax.set_xlim(0, 1.04 * top / self.su)
        ax.set_ylim(lo, hi)
        ax.set_yticks([])
        ax.set_xlabel(uname, fontsize=style.pt(7), labelpad=1)
        ax.tick_params(labelsize=style.pt(7))
        ax.legend(fontsize=style.pt(7), ncol=6, loc="upper left", frameon=False, handlelength=1.0, columnspacing=1.2,
                  borderaxespad=0.3)
        self.sram_title = ax.set_title("", fontsize=style.pt(8.5), loc="left")

    # --- frames ----------------------------------------------------------------------------------
    @property
    def n_frames(self) -> int:
        """One frame per configuration of the sweep, plus the optimum."""
        return self.sweep.n_frames

    def animated_artists(self) -> list:
        """The artists a frame changes (everything else is a static background)."""
        out = [self.cur_heat, self.star, self.cur_curve, *self.parts, self.sram_title, self.numbers, self.step]
        return out + ([self.cur_meas] if self.cur_meas is not None else [])


    def state(self, k: int) -> BlockSizeState:
        """The state of frame k (no drawing; ``BlockSizeSweep.state``). Raises IndexError outside
        0..n_frames-1."""
        return self.sweep.state(k)

    def draw_frame(self, k: int) -> BlockSizeState:
        """Update every artist to frame k (does not render; the caller draws the canvas)."""
        s = self.state(k)
        r = s.row
        x, y = self._cell(r)
        self.cur_heat.set_xy((x - 0.5, y - 0.5))
        if self.cur_meas is not None:
            self.cur_meas.set_xy((x - 0.5, y - 0.5))
        if s.best is not None:
            bx, by = self._cell(s.best)
            self.star.set_data([bx + 0.26], [by - 0.27])
        else:
            self.star.set_data([], [])
        self.cur_curve.set_ydata(self.sweep.traffic_over_N(r["Br"], r["Bc"]))
        left = 0.0
        for bar, nbytes in zip(self.parts, working_set_parts(r["Br"], r["Bc"], self.d, self.N, self.b)):
            bar.set_x(left)
            bar.set_width(nbytes / self.su)
            left += nbytes / self.su
        over = r["sram_bytes"] / self.M
        if self.compact:
            self.sram_title.set_text(f"SRAM working set: {fmt_bytes(r['sram_bytes'])} of M = {fmt_bytes(self.M)} "
                                     f"({100 * over:.0f}%) — {'fits' if r['fits'] else 'spills'}")
        else:
            verdict = "fits" if r["fits"] else f"over the budget by {over:.2g}× — spills"
            self.sram_title.set_text(f"SRAM working set of {r['Br']}×{r['Bc']}: {fmt_bytes(r['sram_bytes'])} "
                                     f"of M = {fmt_bytes(self.M)} ({100 * over:.0f}%): {verdict}")
        self.sram_title.set_color("k" if r["fits"] else style.BAD)
        self.numbers.set_text(self._numbers(r, s.measured_ms))
        self.step.set_text(f"step {k + 1}/{self.n_frames}:  {s.text}" if not self.compact else
                           f"step {k + 1}/{self.n_frames}: {self._short_text(s)}")
        self.k = k
        return s

    def _short_text(self, s: BlockSizeState) -> str:
        """The step line for large text (presenter mode): what ``s.text`` says, in fewer words."""
        row, best = s.row, s.best
        if s.final and best is None:
            return f"nothing fits in {self.budget_name} — use a larger M or a smaller d"
        if s.final:
            return (f"the optimum: Br × Bc = {row['Br']}×{row['Bc']} — {fmt_bytes(row['hbm_bytes'])} HBM, "
                    f"{fmt_bytes(row['sram_bytes'])} SRAM")
        so_far = f"best so far {best['Br']}×{best['Bc']}" if best else "nothing fits yet"
        return (f"{row['Br']}×{row['Bc']}: {fmt_bytes(row['hbm_bytes'])} HBM, {fmt_bytes(row['sram_bytes'])} SRAM, "
                f"{'fits' if row['fits'] else 'spills'} · {so_far}")

    def _numbers(self, r, ms) -> str:
        io = iomodel.flash_forward_io(self.N, self.N, self.d, Br=r["Br"], Bc=r["Bc"], itemsize=self.b,
                                      order=self.order, causal=self.causal)
        big = sorted(((v, k) for k, v in {**io.reads}.items()), reverse=True)[:2 if self.compact else 3]
        if self.compact:                # large text: lines of at most ~30 characters
            lines = [f"Br×Bc = {r['Br']}×{r['Bc']}, Tr×Tc = {r['Tr']}×{r['Tc']}"]
        else:
            lines = [f"Br = {r['Br']}, Bc = {r['Bc']}: Tr = {r['Tr']}, Tc = {r['Tc']}"]
        lines += [f"HBM  {fmt_bytes(r['hbm_bytes'])} = {r['hbm_bytes'] / self.standard:.2f}× standard",
                  "read " + ", ".join(f"{k} {fmt_bytes(v)}" for v, k in big),
                  f"{fmt_flops(r['flops'])} (matmul)"]
        if max(r["Br"], r["Bc"]) > self.N:
            lines.append(f"(tiles clipped to N = {self.N})")
        if self.measured and self.compact:
            lines.append(f"GPU  {ms:.2f} ms (kernel-only)" if ms is not None else "GPU  not measured (≤ 128)")
        elif self.measured:
            lines.append(f"GPU  {ms:.2f} ms measured, kernel-only" if ms is not None
                         else "GPU  not measured (kernel: ≤ 128)")
        return "\n".join(lines)
