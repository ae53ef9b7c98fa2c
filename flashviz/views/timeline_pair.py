"""One thread block's measured steps, kernel beside kernel (chapter 8: FlashAttention-2's wgmma
kernel against FlashAttention-3's): ``plot_block_steps(timelines)``.

For each ``gpu.Timeline`` (recorded or live) one panel: the detailed block (``detail_ctas``) that
visits the most key tiles, over the span of ``tiles`` of its key tiles from the middle of its run
(time in µs from the span's start; steps of the tiles next to them overlap it and are drawn too),
a lane per warpgroup — two for a consumer (its loads, its math) and one for fa3's producer
warpgroup, which only issues copies (``timeline_view.group_lanes``, as chapter 7's zoom) — each step a bar in the colours of chapter 7
(``timeline_view.STAGE_COLOURS``). The title gives the kernel, its shape and blocks, and
``softmax_overlap`` over every kept block of the run (not only the one drawn): the share of a
warpgroup's (teaching kernel: a warp's) softmax (update_ml, convert_P) during which another
group of the block runs a product (compute_S, accumulate_O) — near 0 in lock-step, high with
ping-pong. Nothing here runs on a GPU.
"""

from __future__ import annotations

import numbers

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.collections import PolyCollection
from matplotlib.patches import Patch

from ..records.timeline import Timeline
from ..records.timeline_stats import softmax_overlap
from . import style
from .text import font_height, text_width, tick_row, wrap_text
from .timeline_view import LOAD_STAGES, STAGE_COLOURS, bar_rects, group_lanes  # one rectangle builder, one lane rule

#: how each kernel is named in the panel titles
KERNEL_NAMES = {"wgmma": "FlashAttention-2 on wgmma (chapter 7)", "fa3": "FlashAttention-3 (flash_fwd_fa3)",
                "teaching": "teaching kernel (mma.sync)"}


def _block(tl: Timeline) -> int:
    """The detailed block with the most key tiles (the lowest cta among equals)."""
    e = tl.events
    ctas = np.unique(e["cta"][e["j"] >= 0])
    if len(ctas) == 0:
        raise ValueError(f"the {tl.kernel} timeline keeps no step of any key tile")
    n_j = [len(np.unique(e["j"][(e["cta"] == c) & (e["j"] >= 0)])) for c in ctas]
    return int(ctas[int(np.argmax(n_j))])


def block_window(tl: Timeline, tiles: int = 4) -> tuple[int, float, float, tuple[int, ...]]:
    """(cta, t0_ns, t1_ns, js): the block ``plot_block_steps`` shows, the span (ns) of ``tiles``
    of its key tiles taken in the order they start, from the middle of its run (all of them when
    it has fewer), and those tiles' j in that order. Steps of the tiles before and after overlap
    the span (a block works on several key tiles at once) and are drawn too. ValueError when the
    timeline keeps no key-tile step."""
    cta = _block(tl)
    t = tl.tiles[tl.tiles["cta"] == cta]
    t = t[np.argsort(t["t0_ns"], kind="stable")]
    k = max(0, min(len(t) - tiles, len(t) // 2 - tiles // 2))
    shown = t[k:k + tiles]
    return cta, float(shown["t0_ns"].min()), float(shown["t1_ns"].max()), tuple(int(j) for j in shown["j"])


def _lanes(tl: Timeline, ev) -> tuple[dict, list[str]]:
    """The lanes of the groups in ``ev`` (one block's events), as chapter 7's zoom draws them."""
    return group_lanes(tl.kernel, sorted({int(x) for x in ev["group"]}))


def _unit(tl: Timeline) -> str:
    return "warp" if tl.kernel == "teaching" else "warpgroup"


def _title(tl: Timeline, label: str | None, share: float) -> str:
    name = label or KERNEL_NAMES.get(tl.kernel, tl.kernel)
    kept = len(np.unique(tl.events["cta"]))
    return (f"{name}: d = {tl.d}, N = {tl.N}{', causal' if tl.causal else ''}, Br × Bc = {tl.Br} × {tl.Bc}, "
            f"{tl.device} {tl.date} — a {_unit(tl)}'s softmax runs under another's products {100 * share:.0f} % "
            f"of its time (over the {kept} blocks whose steps were kept)")


def _span_label(js: tuple[int, ...], cta: int) -> str:
    tiles = f"key tile j = {js[0]}" if len(js) == 1 else f"key tiles j = {', '.join(str(j) for j in js)}"
    return f"µs from the start of the span of {tiles} of block {cta} (its other tiles' steps overlap it)"


def _panel(ax, tl: Timeline, window, title: str, share: float) -> dict:
    pt = style.pt
    cta, w0, w1, js = window
    e = tl.events
    ev = e[(e["cta"] == cta) & (e["t1_ns"] > w0) & (e["t0_ns"] < w1)]
    rows, labels = _lanes(tl, e[e["cta"] == cta])
    names = [tl.stages[int(s)] for s in ev["stage"]]
    lane = np.array([rows[(int(g), "load" if n in LOAD_STAGES else "math")] for g, n in zip(ev["group"], names)])
    us = 1e-3
    x0 = (np.clip(ev["t0_ns"], w0, w1) - w0) * us
    x1 = (np.clip(ev["t1_ns"], w0, w1) - w0) * us
    bars = PolyCollection(bar_rects(x0, x1, lane - 0.38, 0.76), facecolors=[STAGE_COLOURS.get(n, "0.5") for n in names],
                          edgecolors="white", linewidths=0.3)
    ax.add_collection(bars)
    ax.set_xlim(0, (w1 - w0) * us)
    ax.set_ylim(len(labels) - 0.5, -0.5)
    ax.set_yticks(range(len(labels)))
    ax.set_yticklabels(labels)
    ax.tick_params(labelsize=pt(7.5))
    ax.set_title(title, fontsize=pt(8.5), loc="left", pad=3)
    return {"cta": cta, "window_ns": (w0, w1), "tiles_j": js, "bars": len(ev), "lanes": labels,
            "softmax_overlap": share, "title": title.replace("\n", " "), "stages": set(names)}


def _legend_rows(names: list[str], width: float) -> tuple[int, int]:
    """(columns, rows) of a legend of ``names`` that fits ``width`` points at style.pt(7.5)."""
    size = style.pt(7.5)
    entry = [text_width(n, size) + 2.8 * size for n in names]     # handle 1.0 em, pad 0.8 em, spacing 1.0 em
    for ncol in range(len(names), 0, -1):
        cols = [max(entry[c::ncol]) for c in range(ncol)]
        if sum(cols) <= width:
            return ncol, -(-len(names) // ncol)
    return 1, len(names)


def plot_block_steps(timelines, *, tiles: int = 4, figsize=(10.0, 6.0)):
    """A new Figure: one panel per timeline of ``timelines`` (a list of ``gpu.Timeline``, or
    {label: Timeline} to name the panels), one above the other, as the module docstring says.
    ``fig.panels`` lists, per panel, the block shown ("cta"), its window in ns and its key tiles'
    j ("tiles_j"), the bars drawn, the lanes, ``softmax_overlap``, the title and the step names
    drawn (the legend lists those). Laid out from its texts' sizes (``style.pt``: the app's
    presenter scale too). TypeError for anything but Timelines or a figsize that is not two
    numbers; ValueError for no timeline, tiles < 1, a figsize too small for the panels, or a
    timeline without key-tile steps or with one group a block (``softmax_overlap``'s error) —
    all raised before a figure is made."""
    items = list(timelines.items()) if isinstance(timelines, dict) else [(None, t) for t in timelines]
    if not items:
        raise ValueError("plot_block_steps needs at least one timeline")
    for _, tl in items:
        if not isinstance(tl, Timeline):
            raise TypeError(f"expected flashviz.gpu.Timeline objects, got {type(tl).__name__}")
    if isinstance(tiles, bool) or not isinstance(tiles, numbers.Integral) or tiles < 1:
        raise ValueError(f"tiles must be a positive int, got {tiles!r}")
    try:
        W, H = (float(v) * 72 for v in figsize)                     # points
    except (TypeError, ValueError):
        raise TypeError(f"figsize must be (width, height) in inches, got {figsize!r}") from None
    pt = style.pt
    windows = [block_window(tl, int(tiles)) for _, tl in items]
    shares = [softmax_overlap(tl)[0] for _, tl in items]
    lanes = [_lanes(tl, tl.events[tl.events["cta"] == w[0]])[1] for (_, tl), w in zip(items, windows)]
    left = max(text_width(lab, pt(7.5)) for labels in lanes for lab in labels) + pt(7.5) + 8
    width = W - left - 12
    if width < 100:
        raise ValueError(f"figsize {tuple(figsize)} is too narrow for the lanes' labels at this text size")
    titles = [wrap_text(_title(tl, label, sh), pt(8.5), width) for (label, tl), sh in zip(items, shares)]
    xlabels = [wrap_text(_span_label(w[3], w[0]), pt(8), width) for w in windows]
    # the steps drawn anywhere name the legend's entries, in the colours' order
    drawn = set()
    for (_, tl), (cta, w0, w1, _) in zip(items, windows):
        e = tl.events
        ev = e[(e["cta"] == cta) & (e["t1_ns"] > w0) & (e["t0_ns"] < w1)]
        drawn |= {tl.stages[int(s)] for s in np.unique(ev["stage"])}
    present = [s for s in STAGE_COLOURS if s in drawn]
    ncol, nrow = _legend_rows(present, W - 20)
    # from the bottom: the legend; per panel its tick labels and x label, its lanes, its title
    legend = font_height(pt(7.5), nrow, 1.5) + 10
    below = [tick_row(7.5) + font_height(pt(8), x.count("\n") + 1) + 6 for x in xlabels]
    above = [font_height(pt(8.5), t.count("\n") + 1) + 8 for t in titles]
    slot = (H - legend - 6) / len(items)
    if min(slot - b - a for a, b in zip(above, below)) < 30:
        raise ValueError(f"figsize {tuple(figsize)} leaves no room for {len(items)} panels of lanes at this text size")
    fig = plt.figure(figsize=(W / 72, H / 72), dpi=style.fit_dpi(W / 72))
    fig.panels = []
    for k, ((_, tl), title, a, b, window, sh) in enumerate(zip(items, titles, above, below, windows, shares)):
        y0 = legend + (len(items) - 1 - k) * slot + b
        ax = fig.add_axes([left / W, y0 / H, width / W, (slot - b - a) / H])
        fig.panels.append(_panel(ax, tl, window, title, sh))
        ax.set_xlabel(xlabels[k], fontsize=pt(8), labelpad=1)
    fig.legend(handles=[Patch(color=STAGE_COLOURS[s], label=s) for s in present], loc="lower center",
               bbox_to_anchor=(0.5, 2 / H), ncol=ncol, fontsize=pt(7.5), frameon=False, handlelength=1.0,
               columnspacing=1.0, borderaxespad=0.0, borderpad=0.0)
    return fig
