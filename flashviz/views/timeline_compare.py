"""Chapter 7's block-order experiment as one figure: the same causal kernel, the query blocks
started in different orders, one measured timeline each (``records.timeline_stats.recorded_orders``).

``plot_block_orders(runs)`` returns a new Figure with one panel per run, on one time axis (µs
from each run's first block): every thread block a bar on its SM's lane, coloured by its query
block i (in a causal run, the higher i, the more key tiles the block visits), the tail shaded
(from the first SM to go idle for good to the end), and a title with the order, the kernel-only
time of the uninstrumented kernel in that order, the kernel's own order timed in the same run,
and the tail's share. Nothing here runs on a GPU.
"""

from __future__ import annotations

import matplotlib as mpl
import matplotlib.pyplot as plt
from matplotlib.collections import PolyCollection

from ..records.timeline_stats import tail_share
from . import style
from .text import presenter
from .timeline_view import bar_rects  # one rectangle builder for every timeline view

#: how each order is named in the titles
ORDER_NAMES = {"kernel": "the kernel's own order: each head's longest row first",
               "ascending": "ascending: each head's shortest row first",
               "longest_first": "longest first: the longest rows of every head first"}
SHORT_NAMES = {"kernel": "own order", "ascending": "ascending", "longest_first": "longest first"}


def _title(order: str, tl) -> str:
    share = tail_share(tl)[0]
    big = presenter(1.15)
    name = (SHORT_NAMES if big else ORDER_NAMES).get(order, order)
    own = tl.notes.get("kernel_order_ms") if isinstance(tl.notes, dict) else None
    ms = f"{tl.kernel_ms:.3f} ms" if tl.kernel_ms else "time not recorded"
    vs = f" (own order {own:.3f} ms in the same run)" if own and not big else ""
    return f"{name} — {ms}{vs}, tail {100 * share:.0f} %"


def plot_block_orders(runs: dict, *, figsize=(10, 7.5)):
    """One panel per {order: Timeline} (see the module docstring); returns the Figure.
    TypeError / ValueError (one line) for an empty or mistyped ``runs``."""
    from ..records.timeline import Timeline

    if not isinstance(runs, dict) or not runs or not all(isinstance(t, Timeline) for t in runs.values()):
        raise TypeError("runs must be a non-empty dict {order: flashviz.gpu.Timeline}")
    tls = list(runs.values())
    if any(order != tl.order for order, tl in runs.items()):
        raise ValueError("each key of runs must be its timeline's block order (Timeline.order)")
    if len({(t.kernel, t.N, t.d, t.causal) for t in tls}) != 1:
        raise ValueError("the runs must be one kernel at one N, d and mask, in different block orders")
    pt, us = style.pt, 1e-3
    fig, axes = plt.subplots(len(runs), 1, figsize=figsize, sharex=True, squeeze=False,
                             dpi=style.fit_dpi(figsize[0]))
    axes = axes[:, 0]
    t_max = max(float(t.blocks["t1_ns"].max() - t.blocks["t0_ns"].min()) for t in tls) * us
    Tr = tls[0].grid[0]
    cmap = mpl.colormaps["viridis"]
    for ax, (order, tl) in zip(axes, runs.items()):
        b = tl.blocks
        t0 = float(b["t0_ns"].min())
        bars = PolyCollection(bar_rects((b["t0_ns"] - t0) * us, (b["t1_ns"] - t0) * us, b["sm"] - 0.42, 0.84),
                              facecolors=cmap(b["i"] / max(Tr - 1, 1)), edgecolors="white", linewidths=0.2)
        ax.add_collection(bars)
        share, start = tail_share(tl)
        end = float(b["t1_ns"].max())
        ax.axvspan((start - t0) * us, (end - t0) * us, color="#d62728", alpha=0.12, lw=0)
        ax.axvline((end - t0) * us, color="#d62728", lw=1)
        ax.set_ylim(tl.sm_count - 0.5, -0.5)
        ax.set_xlim(0, t_max * 1.02)
        ax.set_ylabel("SM", fontsize=pt(9))
        ax.tick_params(labelsize=pt(8))
        ax.yaxis.set_major_locator(mpl.ticker.MaxNLocator(4, integer=True))
        ax.set_title(_title(order, tl), fontsize=pt(9.5), loc="left", pad=3)
    axes[-1].set_xlabel("µs from the first block of the traced run · times in the titles: the uninstrumented "
                        "kernel, kernel-only (CUDA events)" if not presenter(1.15) else "µs from the first block",
                        fontsize=pt(9))
    t = tls[0]
    fig.suptitle(f"{t.kernel} kernel, causal, N = {t.N:,}, d = {t.d}, Br × Bc = {t.Br} × {t.Bc}, "
                 f"{len(t.blocks):,} blocks on {t.sm_count} SMs" + ("\n" if presenter(1.15) else " — ")
                 + f"{t.device}, {t.date}", fontsize=pt(10), x=0.01, ha="left")
    fig.tight_layout(rect=(0, 0, 0.92, 1))
    cax = fig.add_axes([0.93, 0.12, 0.015, 0.76])
    cb = fig.colorbar(mpl.cm.ScalarMappable(norm=mpl.colors.Normalize(0, Tr - 1), cmap=cmap), cax=cax)
    cb.set_label("query block i (causal: more key tiles →)", fontsize=pt(9))
    cb.ax.tick_params(labelsize=pt(8))
    return fig
