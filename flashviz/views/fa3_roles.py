"""Chapter 8's picture of one FlashAttention-3 thread block: who does what, and when.

``plot_fa3_roles(cfg, schedules=None, *, figsize=(11.5, 6.8))`` returns a new Figure. Left, two
timelines of the same block on one time axis, played by ``flashviz.replay.fa3_roles`` (a
schematic: the kernel's protocol with made-up durations, not a measurement): the consumers in
lock-step (FA3_FEAT 0) above, ping-pong (FA3_FEAT 1, the default) below. One lane for the
producer warpgroup (its TMA copies of Q_i, K_j, V_j into the ring slots, and its waits for a
slot to be released), one per consumer warpgroup (waits, its matrix products, its softmax,
writing O_i) and one for the tensor cores (whose products they serve; a lane split in strips
when they serve several warpgroups' products interleaved). Right, the block's resources from
``cfg`` (a ``flashviz.gpu.fa3_records.FA3Config``): the warpgroups and their registers per
thread after setmaxnreg, Q_i and the K and V rings in shared memory (sizes in elements), the
full/empty mbarriers between them. Nothing here runs on a GPU.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.patches import FancyBboxPatch, Patch, Rectangle

from ..replay.fa3_roles import roles_schedule
from . import style
from .text import text_width

WG_COLOURS = ("#d62728", "#1f77b4", "#9467bd", "#e377c2")     #: consumer warpgroups 1, 2, 3, 4
KIND_COLOURS = {"load_Q": "#7f7f7f", "load_K": "#ff7f0e", "load_V": "#bcbd22", "softmax": "#2ca02c",
                "write_O": "#17becf"}
WAIT = {"facecolor": "#eeeeee", "edgecolor": "#bbbbbb", "hatch": "////", "linewidth": 0.5}
H = 0.72      #: bar height, in lanes


def _label(ax, text, x0, x1, y, size, colour="white"):
    """``text`` centred in the bar [x0, x1] at lane y when it fits (measured in points)."""
    fig = ax.figure
    w_pt = (x1 - x0) / (ax.get_xlim()[1] - ax.get_xlim()[0]) * ax.get_position().width * fig.get_figwidth() * 72
    if text_width(text, size) + 2 <= w_pt:
        ax.text((x0 + x1) / 2, y, text, ha="center", va="center", fontsize=size, color=colour, clip_on=True)


def _timeline(ax, sched, title: str):
    pt = style.pt
    W = sched.consumers
    for b in sched.bars:
        y = b.lane
        if b.kind == "tc":
            n = len(b.wgs)
            for k, w in enumerate(b.wgs):
                ax.add_patch(Rectangle((b.t0, y - H / 2 + k * H / n), b.t1 - b.t0, H / n,
                                       facecolor=WG_COLOURS[w], edgecolor="white", linewidth=0.4))
            continue
        if b.kind.startswith("wait"):
            ax.add_patch(Rectangle((b.t0, y - H / 2), b.t1 - b.t0, H, **WAIT))
            continue
        colour = WG_COLOURS[b.lane - 1] if b.kind == "gemm" else KIND_COLOURS[b.kind]
        ax.add_patch(Rectangle((b.t0, y - H / 2), b.t1 - b.t0, H, facecolor=colour, edgecolor="white", linewidth=0.6))
        if b.kind in ("load_K", "load_V"):
            _label(ax, f"${b.kind[-1]}_{b.j}$", b.t0, b.t1, y, pt(7.5), "black")
        elif b.kind == "load_Q":
            _label(ax, "$Q_i$", b.t0, b.t1, y, pt(7.5))
        elif b.kind == "gemm":
            _label(ax, {"S": f"$S_{b.j}$", "PV": f"$PV_{b.j}$", "S+PV": f"$S_{b.j}$ + $PV_{b.j + 1}$"}[b.what],
                   b.t0, b.t1, y, pt(7.5))
        elif b.kind == "softmax":
            _label(ax, "softmax", b.t0, b.t1, y, pt(7))
    ax.set_ylim(W + 1 + 0.6, -0.6)
    ax.set_yticks(range(W + 2), ["producer WG 0"] + [f"consumer WG {w}" for w in range(1, W + 1)] + ["tensor cores"])
    ax.tick_params(axis="y", length=0, labelsize=pt(8.5))
    ax.tick_params(axis="x", labelsize=pt(8))
    ax.set_title(title, fontsize=pt(9.5), loc="left", pad=4)
    for s in ("top", "right"):
        ax.spines[s].set_visible(False)


def _box(ax, x, y, w, h, text, colour, size, text_colour="black", **kw):
    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.004,rounding_size=0.012", facecolor=colour,
                                edgecolor="0.35", linewidth=0.8, transform=ax.transAxes, **kw))
    ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=size, color=text_colour,
            transform=ax.transAxes, linespacing=1.25)


def _arrow(ax, xy_from, xy_to, text, size, side="right"):
    ax.annotate("", xy=xy_to, xytext=xy_from, xycoords="axes fraction",
                arrowprops={"arrowstyle": "-|>", "color": "0.25", "lw": 1.0})
    xm, ym = (xy_from[0] + xy_to[0]) / 2, (xy_from[1] + xy_to[1]) / 2
    ax.text(xm + (0.03 if side == "right" else -0.03), ym, text, ha="left" if side == "right" else "right",
            va="center", fontsize=size, transform=ax.transAxes, color="0.2", linespacing=1.2)


def _resources(ax, cfg):
    """The block's warpgroups, shared memory and mbarriers (sizes in elements, no totals)."""
    pt = style.pt
    ax.set_axis_off()
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    W = cfg.consumers
    ax.text(0.0, 1.0, f"one block: $B_r \\times B_c$ = {cfg.Br} × {cfg.Bc}, d = {cfg.d}", fontsize=pt(9),
            va="top", transform=ax.transAxes)
    _box(ax, 0.0, 0.80, 1.0, 0.13, f"warpgroup 0: producer\n128 threads, setmaxnreg {cfg.reg_producer}\n"
         "one thread issues the TMA copies", "#f2f2f2", pt(8))
    # shared memory: Q_i and the two rings
    top, bottom = 0.64, 0.295
    ax.add_patch(FancyBboxPatch((0.0, bottom), 1.0, top - bottom, boxstyle="round,pad=0.004,rounding_size=0.012",
                                facecolor="#fff8e6", edgecolor="0.35", linewidth=0.8, transform=ax.transAxes))
    ax.text(0.02, top - 0.012, "shared memory (fp16/bf16)", fontsize=pt(8), va="top", transform=ax.transAxes,
            style="italic")
    _box(ax, 0.03, top - 0.105, 0.94, 0.06, f"$Q_i$: $B_r \\times d$ = {cfg.Br} × {cfg.d}", "#d9d9d9", pt(8))
    n = cfg.stages
    gap = 0.02
    w = (0.94 - (n - 1) * gap) / n
    for name, colour, y in (("K", KIND_COLOURS["load_K"], top - 0.185), ("V", KIND_COLOURS["load_V"], top - 0.265)):
        for s in range(n):
            _box(ax, 0.03 + s * (w + gap), y, w, 0.06, f"{name} slot {s}", colour, pt(7.5))
    ax.text(0.5, bottom + 0.012, f"K and V rings: {n} slots each of $B_c \\times d$ = {cfg.Bc} × {cfg.d}",
            fontsize=pt(7.5), ha="center", va="bottom", transform=ax.transAxes)
    _arrow(ax, (0.35, 0.80), (0.35, top + 0.005), "TMA; full[s]:\nthe bytes landed", pt(7.5))
    _box(ax, 0.0, 0.06, 1.0, 0.15, f"warpgroups 1–{W}: consumers\n{W} × 128 threads, setmaxnreg {cfg.reg_consumer}\n"
         "wgmma + softmax, 64 rows of $Q_i$ each", "#fde0e0", pt(8))
    _arrow(ax, (0.22, bottom - 0.005), (0.22, 0.21 + 0.005), "wgmma reads\nthe slot", pt(7.5), side="right")
    _arrow(ax, (0.78, 0.21 + 0.005), (0.78, bottom - 0.005), "empty[s]:\nslot released", pt(7.5), side="left")
    ax.text(0.02, 0.0, "mbarriers: full + empty for $Q_i$ and each slot\nnamed barriers pass the turn (ping-pong)",
            fontsize=pt(7.5), va="bottom", transform=ax.transAxes, color="0.25", linespacing=1.25)


def plot_fa3_roles(cfg, schedules=None, *, n_tiles: int = 4, figsize=(11.5, 6.8)):
    """The figure of the module docstring for ``cfg`` (an FA3Config). schedules: (lock-step,
    ping-pong) RolesSchedules of cfg's consumers, stages and d (default: played here with
    ``n_tiles`` key tiles). Returns the Figure. TypeError for a cfg without the FA3Config
    fields, ValueError for schedules that do not match it."""
    need = ("Br", "Bc", "d", "stages", "consumers", "threads", "reg_producer", "reg_consumer")
    if not all(hasattr(cfg, k) for k in need):
        raise TypeError(f"cfg must be a flashviz.gpu.fa3_records.FA3Config; got {type(cfg).__name__}")
    if schedules is None:
        schedules = tuple(roles_schedule(cfg.consumers, cfg.stages, cfg.d, n_tiles, pp) for pp in (False, True))
    if len(schedules) != 2 or [s.pingpong for s in schedules] != [False, True] or any(
            (s.consumers, s.stages, s.d) != (cfg.consumers, cfg.stages, cfg.d) for s in schedules):
        raise ValueError("schedules must be (lock-step, ping-pong) schedules of cfg's consumers, stages and d")
    pt = style.pt
    fig = plt.figure(figsize=figsize)
    gs = fig.add_gridspec(2, 2, width_ratios=[3.0, 1.2], left=0.115, right=0.985, top=0.885, bottom=0.17,
                          hspace=0.42, wspace=0.1)
    axes = [fig.add_subplot(gs[0, 0])]
    axes.append(fig.add_subplot(gs[1, 0], sharex=axes[0]))
    span = max(s.span for s in schedules)
    axes[0].set_xlim(0, span * 1.01)
    titles = (f"FA3_FEAT 0, lock-step: all products together, then all softmaxes"
              f" — tensor cores busy {100 * schedules[0].tc_busy:.0f} % of the span",
              f"FA3_FEAT 1, ping-pong (the default): turns on the tensor cores"
              f" — busy {100 * schedules[1].tc_busy:.0f} % of the span")
    for ax, s, t in zip(axes, schedules, titles):
        _timeline(ax, s, t)
    axes[0].tick_params(axis="x", labelbottom=False)
    axes[1].set_xlabel("time, schematic: 1 = one product ($S_{ij}$ or $P_{ij} V_j$) of one warpgroup; "
                       f"a softmax {_softmax(schedules[0]):.2g} (FlashAttention-3's count at d = {cfg.d}); not measured",
                       fontsize=pt(8.5))
    _resources(fig.add_subplot(gs[:, 1]), cfg)
    fig.suptitle(f"FlashAttention-3, one thread block for d = {cfg.d}: 1 producer + {cfg.consumers} consumer "
                 f"warpgroups = {cfg.threads} threads; {cfg.stages}-slot K/V ring; key tiles j visited "
                 f"last to first ({schedules[0].n_tiles} shown)", fontsize=pt(10), x=0.01, ha="left")
    handles = [Patch(facecolor=KIND_COLOURS["load_Q"], label="TMA copy of $Q_i$"),
               Patch(facecolor=KIND_COLOURS["load_K"], label="TMA copy of $K_j$ into its slot"),
               Patch(facecolor=KIND_COLOURS["load_V"], label="TMA copy of $V_j$"),
               Patch(**WAIT, label="waiting (a slot, a tile, its turn)")]
    handles += [Patch(facecolor=WG_COLOURS[w], label=f"products of WG {w + 1} (wgmma)") for w in range(cfg.consumers)]
    handles += [Patch(facecolor=KIND_COLOURS["softmax"], label="softmax: m, P, l, rescale O"),
                Patch(facecolor=KIND_COLOURS["write_O"], label="write $O_i$, lse")]
    fig.legend(handles=handles, loc="lower left", bbox_to_anchor=(0.01, 0.0), ncol=4, fontsize=pt(8),
               frameon=False, handlelength=1.6, columnspacing=1.2)
    return fig


def _softmax(sched) -> float:
    """The softmax's length in the schedule (units)."""
    return next(b.t1 - b.t0 for b in sched.bars if b.kind == "softmax")
