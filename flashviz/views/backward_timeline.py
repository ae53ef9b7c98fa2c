"""Chapter 6's measured answer to "what does recomputation cost?": one (i, j) tile of the teaching
forward and of the teaching backward, at the same shape, step by step, from their recorded
timelines (``records.timeline_stats.recorded_backward_pair`` / ``per_tile_steps``).

``plot_tile_steps(pair)`` returns a new Figure with two stacked horizontal bars, the forward's
time per key tile and the backward's per query block, in µs, one segment per step (the mean over
the recorded blocks' first warp), labelled with its name and time; the backward's
``recompute_P`` is hatched — the recomputation itself. Nothing here runs on a GPU.
"""

from __future__ import annotations

import matplotlib.pyplot as plt

from ..records.timeline_stats import per_tile_steps
from . import style

#: one colour per step; the backward's steps that mirror a forward one share its colour family
COLOURS = {"load_KV": "#9ecae1", "compute_S": "#fdae6b", "update_ml": "#e6550d", "accumulate_O": "#31a354",
           "load_Qi": "#9ecae1", "recompute_P": "#e6550d", "accumulate_dV": "#31a354", "compute_dS": "#756bb1",
           "accumulate_dK": "#a1d99b", "update_dQ": "#de2d26"}


def tile_ratio(pair: dict) -> float:
    """The backward's time per tile over the forward's (``per_tile_steps`` summed)."""
    f, b = (sum(per_tile_steps(pair[k]).values()) for k in ("forward", "backward"))
    return b / f if f else float("nan")


def plot_tile_steps(pair: dict, *, figsize=(10, 4.2)):
    """Two stacked bars for {"forward": Timeline, "backward": Timeline} (see the module docstring);
    returns the Figure. TypeError / ValueError (one line) for anything else, or for timelines of
    other kernels or of steps not recorded."""
    from ..records.timeline import Timeline

    if not isinstance(pair, dict) or set(pair) != {"forward", "backward"} or \
            not all(isinstance(t, Timeline) for t in pair.values()):
        raise TypeError('pair must be {"forward": Timeline, "backward": Timeline}')
    if pair["forward"].kernel != "teaching" or pair["backward"].kernel != "bwd_teaching":
        raise ValueError("the pair must be the teaching forward's and the teaching backward's timelines")
    steps = {k: per_tile_steps(t) for k, t in pair.items()}
    if not all(steps.values()):
        raise ValueError("a timeline of the pair keeps no per-tile steps (no detailed blocks)")
    pt = style.pt
    fig, ax = plt.subplots(figsize=figsize, dpi=style.fit_dpi(figsize[0]))
    labels = {"forward": "forward, per key tile j", "backward": "backward, per query block i"}
    widest = max(sum(v.values()) for v in steps.values()) / 1e3
    for y, st in enumerate(steps.values()):
        x = 0.0
        for name, ns in st.items():
            w = ns / 1e3
            ax.barh(y, w, left=x, color=COLOURS.get(name, "#cccccc"), edgecolor="white",
                    hatch="//" if name == "recompute_P" else None, height=0.6, label=name)
            if w >= 0.16 * widest:                 # room for the name; the legend names the rest
                ax.text(x + w / 2, y, f"{name}\n{w:.2f} µs", ha="center", va="center", fontsize=pt(7.5))
            x += w
        ax.text(x, y, f"  {x:.2f} µs", va="center", fontsize=pt(8.5))
    ax.set_yticks(range(2), [labels[k] for k in steps], fontsize=pt(9))
    ax.set_ylim(1.6, -0.6)
    ax.set_xlabel("µs per tile, one warp, mean over the recorded blocks (teaching kernels, fp32)", fontsize=pt(9))
    ax.tick_params(axis="x", labelsize=pt(8))
    ax.margins(x=0.12)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.28), ncol=5, fontsize=pt(7.5), frameon=False)
    f, b = pair["forward"], pair["backward"]
    ax.set_title(f"d = {b.d}, N = {b.N:,}, Br × Bc = {b.Br} × {b.Bc}{', causal' if b.causal else ''}: "
                 f"backward ÷ forward per tile {tile_ratio(pair):.2f} (FLOPs: 2.5)\n"
                 f"forward {f.device}, {f.date}; backward {b.device}, {b.date}", fontsize=pt(9), loc="left")
    fig.tight_layout()
    return fig
