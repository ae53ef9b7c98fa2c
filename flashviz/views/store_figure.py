"""Chapter 6's recompute-versus-store measurement as one figure (a record of
``gpu.teaching.store_bench``, read through ``records.store_records``).

``plot_store_measured(rec)`` returns a new Figure with two log–log panels over N: the backward's
kernel-only time for each of the three backwards (and, dashed, the time to produce the stored P),
and each backward's memory — what its forward must keep (counted) and the call's peak (measured);
the crossover (``records.store_records.crossover``), when the record has one, is marked. One
legend under both panels names the backwards by colour and the memory panel's line styles. Text
sizes go through ``style.pt``. Nothing here runs on a GPU.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.lines import Line2D

from ..records.store_records import NAMES, crossover, store_rows
from . import style

COLOURS = {"recompute": "#1f77b4", "stored": "#d62728", "naive": "#9467bd"}
PAD = 4.0       #: points between the figure's bottom edge and the legend


def plot_store_measured(rec: dict, *, figsize=(10, 4.2)):
    """The figure (see the module docstring). TypeError for anything but a record dict, ValueError
    for a record without timed rows."""
    if not isinstance(rec, dict):
        raise TypeError(f"rec must be a recompute-versus-store record (a dict), got {type(rec).__name__}")
    rows = [r for r in store_rows(rec) if any(r[k]["kernel_ms"] for k in NAMES)]
    if not rows:
        raise ValueError("the record has no timed rows")
    pt = style.pt
    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=figsize, dpi=style.fit_dpi(figsize[0]))
    for impl, name in NAMES.items():
        pts = [(r["N"], r[impl]["kernel_ms"]) for r in rows if r[impl]["kernel_ms"]]
        if pts:
            ax_t.plot(*zip(*pts), "o-", color=COLOURS[impl], label=name, ms=4)
        for key, ls, what in (("kept_bytes", ":", "kept"), ("peak_bytes", "-", "peak")):
            pts = [(r["N"], r[impl][key] / 2**20) for r in rows if r[impl][key]]
            if pts:
                ax_m.plot(*zip(*pts), ls, marker="o", color=COLOURS[impl], ms=3, label=f"{impl}: {what}")
    pts = [(r["N"], r["make_P_kernel_ms"]) for r in rows if r["make_P_kernel_ms"]]
    if pts:
        ax_t.plot(*zip(*pts), "--", color="#7f7f7f", label="making the stored P (the forward's extra)")
    n = crossover(rec)
    if n:
        ax_t.axvline(n, color="#2ca02c", lw=1)
        ax_t.text(n, 0.03, f" recompute ≤ stored\n from N = {n:,}", fontsize=pt(8), va="bottom", color="#2ca02c",
                  transform=ax_t.get_xaxis_transform())
    for ax, ylabel in ((ax_t, "backward, kernel-only (ms)"), (ax_m, "MiB (all heads)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("N (= Nq = Nk)", fontsize=pt(9))
        ax.set_ylabel(ylabel, fontsize=pt(9))
        ax.tick_params(labelsize=pt(8))
    env = rec.get("env", {})
    fig.suptitle(f"recompute versus store: d = {rec.get('d')}, {rec.get('BH')} heads, Br × Bc = {rec.get('Br')} × "
                 f"{rec.get('Bc')}, float32 — {env.get('device', '?')}, {env.get('date', '?')}", fontsize=pt(10),
                 x=0.01, ha="left")
    h = _legend(fig, ax_t, ax_m, pt(7))
    fig.tight_layout(rect=(0, (h + PAD + 2) / (figsize[1] * 72), 1, 1))
    return fig


def _legend(fig, ax_t, ax_m, size: float) -> float:
    """One legend for both panels, under them, outside the axes (inside, the lines rise across
    every corner of a panel at a large text size): the backwards by colour and the time to make
    the stored P (the time panel's lines), then what the memory panel's line styles mean. Three
    columns where they fit the figure's width, else two. Returns its height in points."""
    handles = [ln for ln in ax_t.get_lines() if not ln.get_label().startswith("_")]
    styles = [ln for ln in ax_m.get_lines() if not ln.get_label().startswith("_")]
    for ls, what in ((":", "memory: kept by the forward (counted)"), ("-", "memory: the call's peak (measured)")):
        if any(ln.get_linestyle() == ls for ln in styles):
            handles.append(Line2D([], [], color="0.3", ls=ls, marker="o", ms=3, label=what))
    renderer = fig.canvas.get_renderer()
    for ncol in (3, 2):
        leg = fig.legend(handles=handles, loc="lower center", ncol=ncol, fontsize=size, frameon=False,
                         bbox_to_anchor=(0.5, PAD / (fig.get_figheight() * 72)), borderaxespad=0)
        box = leg.get_window_extent(renderer)
        if box.width <= fig.bbox.width - 2 * PAD * fig.dpi / 72 or ncol == 2:
            return box.height * 72 / fig.dpi
        leg.remove()
