"""Chapter 6's measured tiles, from recorded timelines (``records.timeline_stats.recorded_backward_pair``
/ ``per_tile_steps``): what recomputation costs — one (i, j) tile of the teaching forward and of the
teaching backward, at the same shape — and where a backward tile's time goes on tensor cores — the
teaching backward's tile beside the tensor-core backward's.

``plot_tile_steps(pair)`` returns a new Figure with two stacked horizontal bars, one a timeline of
the pair (``BARS``: what each key holds), one segment per step (the mean over the recorded blocks'
first warp), labelled with its name and time where the label fits; ``recompute_P`` is hatched — the
recomputation itself. For the forward pair (the same fp32 tile) the bars are in µs per tile; for two
backwards (the teaching one's fp32 64 × 64 tile and a tensor-core one's fp16 tile, 64 × 128 or
64 × 64) each bar is its tile's time split into shares, labelled with µs and %. Nothing here runs
on a GPU.
"""

from __future__ import annotations

import matplotlib.pyplot as plt

from ..records.timeline_stats import per_tile_steps, step_shares, trace_cost
from . import style

#: one colour per step; the backward's steps that mirror a forward one share its colour family
COLOURS = {"load_KV": "#9ecae1", "compute_S": "#fdae6b", "update_ml": "#e6550d", "accumulate_O": "#31a354",
           "load_Qi": "#9ecae1", "recompute_P": "#e6550d", "accumulate_dV": "#31a354", "compute_dS": "#756bb1",
           "accumulate_dK": "#a1d99b", "update_dQ": "#de2d26"}
#: what each key of a pair holds: the kernel of its timeline, the kernel in words and what one of its tiles is
BARS = {"forward": ("teaching", "teaching forward", "per key tile j"),
        "backward": ("bwd_teaching", "teaching backward", "per query block i"),
        "bwd_mma": ("bwd_mma", "tensor-core backward", "per query block i"),
        "bwd_wgmma": ("bwd_wgmma", "Hopper backward", "per query block i")}
#: the pairs drawn, their keys in the bars' order (top first)
PAIRS = (("forward", "backward"), ("backward", "bwd_mma"), ("backward", "bwd_wgmma"))
#: the narrowest segment (a share of the widest bar) that gets a label at all
MIN_LABEL = 0.04


def tile_ratio(pair: dict) -> float:
    """The backward's time per tile over the forward's (``per_tile_steps`` summed), for the pair
    {"forward", "backward"}."""
    f, b = (sum(per_tile_steps(pair[k]).values()) for k in ("forward", "backward"))
    return b / f if f else float("nan")


def _check_pair(pair) -> tuple[str, ...]:
    """The pair's keys in bar order (one of ``PAIRS``); TypeError / ValueError, one line, otherwise."""
    from ..records.timeline import Timeline

    keys = next((p for p in PAIRS if isinstance(pair, dict) and set(pair) == set(p)), None)
    if keys is None or not all(isinstance(t, Timeline) for t in pair.values()):
        raise TypeError("pair must be " + " or ".join("{" + ", ".join(f'"{k}": Timeline' for k in p) + "}"
                                                       for p in PAIRS))
    if any(pair[k].kernel != BARS[k][0] for k in keys):
        raise ValueError("the pair must be the " + " and the ".join(f"{BARS[k][1]}'s" for k in keys) + " timelines")
    return keys


def _label(ax, renderer, x: float, w: float, y: float, texts, fontsize: float, *, backed: bool = False) -> str | None:
    """Write the first of ``texts`` that fits inside the segment [x, x + w] of bar y (height 0.6), on a
    pale box where ``backed`` (a hatched segment); returns it, or None (the legend names the step)."""
    (x0, y0), (x1, y1) = ax.transData.transform([(x, y - 0.3), (x + w, y + 0.3)])
    box = dict(boxstyle="square,pad=0.15", fc="white", ec="none", alpha=0.8) if backed else None
    for s in texts:
        t = ax.text(x + w / 2, y, s, ha="center", va="center", fontsize=fontsize, bbox=box)
        bb = t.get_window_extent(renderer)
        if bb.width <= abs(x1 - x0) - 6 and bb.height <= abs(y1 - y0) - 4:
            return s
        t.remove()
    return None


def plot_tile_steps(pair: dict, *, figsize=(10, 4.2)):
    """Two stacked bars for a pair of ``PAIRS`` (see the module docstring): {"forward": the teaching
    forward's Timeline, "backward": the teaching backward's}, in µs per tile, or {"backward": the
    teaching backward's, "bwd_mma" (or "bwd_wgmma"): a tensor-core backward's}, in shares of each tile. Returns the
    Figure. TypeError / ValueError (one line) for anything else, for timelines of other kernels or of
    steps not recorded."""
    keys = _check_pair(pair)
    tls = [pair[k] for k in keys]
    steps = [per_tile_steps(t) for t in tls]
    if not all(steps):
        raise ValueError("a timeline of the pair keeps no per-tile steps (no detailed blocks)")
    share = "forward" not in keys           # two backwards (other shapes, fp32 and fp16): compare their splits
    shares = [step_shares(t) for t in tls]
    pt = style.pt
    fig, ax = plt.subplots(figsize=figsize, dpi=style.fit_dpi(figsize[0]))
    widest = 1.0 if share else max(sum(s.values()) for s in steps) / 1e3
    handles = {}
    for y, (st, sh) in enumerate(zip(steps, shares)):
        x = 0.0
        for name, ns in st.items():
            w = sh[name] if share else ns / 1e3
            bar = ax.barh(y, w, left=x, color=COLOURS.get(name, "#cccccc"), edgecolor="white",
                          hatch="//" if name == "recompute_P" else None, height=0.6, label=name)
            handles.setdefault(name, bar)
            x += w
        ax.text(x, y, f"  {sum(st.values()) / 1e3:.2f} µs", va="center", fontsize=pt(8.5))
    ax.set_yticks(range(len(keys)), [f"{BARS[k][1]},\n{BARS[k][2]}" + (f"\n(Br × Bc = {t.Br} × {t.Bc}, {t.dtype})"
                                                                       if share else "")
                                     for k, t in zip(keys, tls)], fontsize=pt(9))
    ax.set_ylim(len(keys) - 0.4, -0.6)
    unit = "share of the tile's time" if share else "µs per tile"
    writer = "one warpgroup (wgmma), one warp (the others)" if "bwd_wgmma" in keys else "one warp"
    ax.set_xlabel(f"{unit}, {writer}, mean over the recorded blocks"
                  + ("" if share else " (teaching kernels, fp32)"), fontsize=pt(9))
    ax.tick_params(axis="x", labelsize=pt(8))
    if share:
        ax.set_xticks([0, 0.25, 0.5, 0.75, 1], ["0", "25 %", "50 %", "75 %", "100 %"])
    ax.margins(x=0.12)
    ax.legend(handles.values(), handles.keys(), loc="upper center", bbox_to_anchor=(0.5, -0.28),
              ncol=5 if len(handles) > 6 else 6, fontsize=pt(7.5), frameon=False)
    b = tls[-1]
    if share:
        cost = ", ".join(f"{BARS[k][1].split()[0]} " + ("not timed" if (c := trace_cost(t)) is None else f"{100 * c:+.1f} %")
                         for k, t in zip(keys, tls))
        ax.set_title(f"d = {b.d}, N = {b.N:,}{', causal' if b.causal else ''}: where a backward tile's time goes, "
                     f"{' and '.join(BARS[k][1] for k in keys)}\n"
                     + "; ".join(dict.fromkeys(f"{t.device}, {t.date}" for t in tls))
                     + f"\ntraced build against untraced: {cost}", fontsize=pt(9), loc="left")
    else:
        f = tls[0]
        ax.set_title(f"d = {b.d}, N = {b.N:,}, Br × Bc = {b.Br} × {b.Bc}{', causal' if b.causal else ''}: "
                     f"backward ÷ forward per tile {tile_ratio(pair):.2f} (FLOPs: 2.5)\n"
                     f"forward {f.device}, {f.date}; backward {b.device}, {b.date}", fontsize=pt(9), loc="left")
    fig.tight_layout()
    renderer = fig.canvas.get_renderer()
    for y, (st, sh) in enumerate(zip(steps, shares)):       # labels last: they fit the laid-out bars
        x = 0.0
        for name, ns in st.items():
            w, us = (sh[name] if share else ns / 1e3), ns / 1e3
            if w >= MIN_LABEL * widest:
                pc = f"{100 * sh[name]:.0f} %"
                texts = ([f"{name}\n{us:.2f} µs · {pc}", f"{name}\n{us:.2f} µs\n{pc}", f"{us:.2f} µs\n{pc}",
                          f"{us:.2f}\nµs\n{pc}"]
                         if share else [f"{name}\n{us:.2f} µs", f"{us:.2f}\nµs"])
                _label(ax, renderer, x, w, y, texts, pt(7.5), backed=name == "recompute_P")
            x += w
    return fig
