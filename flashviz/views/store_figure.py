"""Chapter 6's recompute-versus-store measurement as one figure (a record of
``gpu.teaching.store_bench``, read through ``records.store_records``).

``plot_store_measured(rec)`` returns a new Figure with two log–log panels over N: the backward's
kernel-only time for each of the three backwards (and, dashed, the time to produce the stored P),
and each backward's memory — what its forward must keep (counted) and the call's peak (measured);
the crossover (``records.store_records.crossover``), when the record has one, is marked. Nothing
here runs on a GPU.
"""

from __future__ import annotations

import matplotlib.pyplot as plt

from ..records.store_records import NAMES, crossover, store_rows
from . import style

COLOURS = {"recompute": "#1f77b4", "stored": "#d62728", "naive": "#9467bd"}


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
        ax.legend(fontsize=pt(7), frameon=False)
    env = rec.get("env", {})
    fig.suptitle(f"recompute versus store: d = {rec.get('d')}, {rec.get('BH')} heads, Br × Bc = {rec.get('Br')} × "
                 f"{rec.get('Bc')}, float32 — {env.get('device', '?')}, {env.get('date', '?')}", fontsize=pt(10),
                 x=0.01, ha="left")
    fig.tight_layout()
    return fig
