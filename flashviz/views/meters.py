"""Meters: HBM bytes moved so far by the tiled run against standard attention, and the
SRAM working set against a budget."""

from __future__ import annotations

from matplotlib.ticker import MaxNLocator

from . import style
from .style import byte_unit, fmt_bytes
from .text import presenter


class MetersPanel:
    def __init__(self, ax_hbm, ax_sram, replay, sram_budget: int, budget_name: str = ""):
        self.replay = replay
        std = replay.standard.hbm_bytes
        total = replay.total.hbm_bytes
        uname, self.u = byte_unit(max(std, total), min_count=2)
        top = 1.08 * max(std, total) / self.u
        ax_hbm.barh([1], [std / self.u], color=style.STANDARD, alpha=0.85, height=0.6)
        ax_hbm.barh([0], [total / self.u], color=style.TILED, alpha=0.2, height=0.6)
        (self.bar,) = ax_hbm.barh([0], [0], color=style.TILED, height=0.6)
        ax_hbm.set_yticks([0, 1], ["tiled", "standard"], fontsize=style.pt(8))
        ax_hbm.set_xlim(0, top)
        inside = std / self.u > 0.7 * top
        ax_hbm.text(std / self.u, 1, f" {fmt_bytes(std)} ", va="center", ha="right" if inside else "left",
                    fontsize=style.pt(8), color="w" if inside else "k")
        self.label = ax_hbm.text(0, 0, "", va="center", fontsize=style.pt(8))
        ax_hbm.set_title(f"HBM traffic (bytes read + written, {replay.trace.itemsize}-byte elements)",
                         fontsize=style.pt(9))
        ax_hbm.set_xlabel(uname, fontsize=style.pt(7), labelpad=1)
        ax_hbm.tick_params(axis="x", labelsize=style.pt(7))
        ax_hbm.xaxis.set_major_locator(MaxNLocator(8, steps=[1, 2, 4, 5, 10]))
        self.total = total
        sram = replay.trace.sram_bytes
        fits = sram <= sram_budget
        sname, su = byte_unit(max(sram, sram_budget), min_count=2)
        ax_sram.barh([0], [sram / su], color=style.OK if fits else style.BAD, height=0.5)
        ax_sram.set_ylim(-0.45, 0.45)
        ax_sram.axvline(sram_budget / su, color="k", lw=1.2)
        ax_sram.set_xlim(0, 1.15 * max(sram, sram_budget) / su)
        ax_sram.set_yticks([])
        ax_sram.set_xlabel(sname, fontsize=style.pt(7), labelpad=1)
        ax_sram.xaxis.set_major_locator(MaxNLocator(4, steps=[1, 2, 4, 5, 10]))
        ax_sram.tick_params(labelsize=style.pt(7))
        verdict = "fits" if fits else "does NOT fit"
        # larger texts (presenter mode): the title ends at the axes' right edge, not past the figure's
        ax_sram.set_title(f"SRAM working set {fmt_bytes(sram)}: {verdict}", fontsize=style.pt(9),
                          color="k" if fits else style.BAD, loc="right" if presenter() else "center")
        ax_sram.text(sram_budget / su, -0.38, f" {budget_name or 'budget'} ", fontsize=style.pt(7), va="bottom",
                     ha="right" if sram_budget / su > 0.6 * ax_sram.get_xlim()[1] else "left")

    def update(self, s):
        x = s.hbm_bytes / self.u
        self.bar.set_width(x)
        self.label.set_x(x)
        text = f"{fmt_bytes(s.hbm_bytes)} of {fmt_bytes(self.total)}"
        # right of the bar; inside its end (white) where it would run past the axes
        # (when the tiled run moves almost as many bytes as standard attention)
        inside = self._runs_past(self.label, x, f" {text}")
        self.label.set_text(f"{text} " if inside else f" {text}")
        self.label.set_horizontalalignment("right" if inside else "left")
        self.label.set_color("w" if inside else "k")

    @staticmethod
    def _runs_past(label, x: float, text: str) -> bool:
        """Whether ``text``, left-aligned at data x on ``label``'s axes, ends past the axes' right edge."""
        ax = label.axes
        get_renderer = getattr(ax.figure.canvas, "get_renderer", None)
        if get_renderer is None:
            return False
        label.set_text(text)
        width = label.get_window_extent(get_renderer()).width
        return ax.transData.transform((x, 0))[0] + width > ax.bbox.x1
