"""Chapter 9's measured split-KV picture: the decode kernel run with one split a block and with
the split count the call chooses, one measured timeline each (``gpu.trace_decode``, recorded by
benchmarks/record_timelines.py; ``records.timeline_stats.recorded_decode_runs``).

``plot_decode_splits(runs)`` returns a new Figure with one panel per run on one time axis (µs
from each run's first block): every thread block a bar on the lane of the SM that ran it,
coloured by its split s, and a title with the split count, the blocks and the SMs they used, the
uninstrumented split pass's kernel-only time, the bytes of K and V it read per second, and the
share of the GPU's SM-time that was busy; the figure's title names the split kernel the runs
traced (``kernel_label``). Nothing here runs on a GPU.
"""

from __future__ import annotations

import matplotlib as mpl
import matplotlib.pyplot as plt
from matplotlib.collections import PolyCollection

from ..records.timeline_stats import sm_time_share
from . import style
from .text import presenter
from .timeline_view import bar_rects  # one rectangle builder for every timeline view

#: the split kernels by ``gpu.decode`` variant, as the figure names them
KERNELS = {"simt": "v1 (flash_decode, CUDA cores)", "mma": "v2 (flash_decode_mma, tensor cores)"}


def kernel_label(tl) -> str:
    """The split kernel a decode timeline traced, from its notes' "variant" ("simt" when absent:
    the runs recorded before the notes named it traced v1, the default then)."""
    v = tl.notes.get("variant", "simt") if isinstance(tl.notes, dict) else "simt"
    return KERNELS.get(v, str(v))


def run_title(tl) -> str:
    """One panel's title: split count, blocks on SMs, kernel-only time, K and V bytes per second, and
    the busy share of SM-time (``sm_time_share``)."""
    S = tl.grid[0]
    sms = len(set(tl.blocks["sm"].tolist()))
    what = "one split a block" if S == 1 else f"{S} splits a KV head"
    us = f"{tl.kernel_ms * 1e3:,.1f} µs" if tl.kernel_ms else "time not recorded"
    gbps = tl.notes.get("kernel_GBps") if isinstance(tl.notes, dict) else None
    rate = f", {gbps / 1e3:.2f} TB/s of K, V" if gbps else ""
    return (f"S = {S} ({what}): {len(tl.blocks)} blocks on {sms} of {tl.sm_count} SMs — {us}{rate}; "
            f"SMs busy {100 * sm_time_share(tl):.0f} % of the SM-time")


def plot_decode_splits(runs: dict, *, figsize=(10, 6.5)):
    """One panel per {S: Timeline} of the decode kernel (see the module docstring); returns the
    Figure. TypeError / ValueError (one line) for an empty or mistyped ``runs`` or runs of
    different shapes."""
    from ..records.timeline import Timeline

    if not isinstance(runs, dict) or not runs or not all(isinstance(t, Timeline) for t in runs.values()):
        raise TypeError("runs must be a non-empty dict {S: flashviz.gpu.Timeline} of decode runs")
    tls = list(runs.values())
    if any(t.kernel != "decode" for t in tls):
        raise ValueError("every run must be a timeline of the decode kernel (kernel 'decode')")
    if len({(t.N, t.d, t.notes.get("B"), t.notes.get("H"), t.notes.get("H_kv"), t.notes.get("Nq")) for t in tls}) != 1:
        raise ValueError("the runs must be one decode shape (B, H, H_kv, Nq, Nk, d) at different split counts")
    pt, us = style.pt, 1e-3
    fig, axes = plt.subplots(len(tls), 1, figsize=figsize, sharex=True, squeeze=False,
                             dpi=style.fit_dpi(figsize[0]))
    axes = axes[:, 0]
    t_max = max(t.span_ns for t in tls) * us
    cmap = mpl.colormaps["viridis"]
    for ax, tl in zip(axes, tls):
        b = tl.blocks
        S = tl.grid[0]
        t0 = float(b["t0_ns"].min())
        colours = cmap(b["i"] / max(S - 1, 1)) if S > 1 else cmap(0.35)
        ax.add_collection(PolyCollection(bar_rects((b["t0_ns"] - t0) * us, (b["t1_ns"] - t0) * us, b["sm"] - 0.42,
                                                   0.84), facecolors=colours, edgecolors="white", linewidths=0.2))
        ax.axvline(tl.span_ns * us, color="#d62728", lw=1)
        ax.set_ylim(tl.sm_count - 0.5, -0.5)
        ax.set_xlim(0, t_max * 1.02)
        ax.set_ylabel("SM", fontsize=pt(9))
        ax.tick_params(labelsize=pt(8))
        ax.yaxis.set_major_locator(mpl.ticker.MaxNLocator(4, integer=True))
        ax.set_title(run_title(tl), fontsize=pt(9), loc="left", pad=3)
    axes[-1].set_xlabel("µs from the first block of the traced run (red: its last block ends) · times in the "
                        "titles: the uninstrumented split pass, kernel-only" if not presenter(1.15)
                        else "µs from the first block", fontsize=pt(9))
    t = tls[0]
    n = t.notes
    fig.suptitle(f"decode kernel {kernel_label(t)}: B = {n.get('B', '?')}, H = {n.get('H', '?')} query heads on H_kv = "
                 f"{n.get('H_kv', '?')}, Nq = {n.get('Nq', '?')}, Nk = {t.N:,}, d = {t.d}"
                 + f"\n{t.device}, {t.date}", fontsize=pt(10), x=0.01,
                 ha="left")
    fig.tight_layout(rect=(0, 0, 0.92, 1))
    S_max = max(t.grid[0] for t in tls)
    if S_max > 1:
        cax = fig.add_axes([0.93, 0.12, 0.015, 0.76])
        cb = fig.colorbar(mpl.cm.ScalarMappable(norm=mpl.colors.Normalize(0, S_max - 1), cmap=cmap), cax=cax)
        cb.set_label("split s (its key range)", fontsize=pt(9))
        cb.ax.tick_params(labelsize=pt(8))
    return fig
