"""Chapter 8's picture of one FlashAttention-3 thread block: who does what, and when.

``plot_fa3_roles(cfg, schedules=None, *, figsize=(11.5, 6.8))`` returns a new Figure. Left, two
timelines of the same block on one time axis, played by ``flashviz.replay.fa3_roles`` (a
schematic: the kernel's protocol with made-up durations, not a measurement): the consumers in
lock-step (FA3_FEAT 0) above, ping-pong (FA3_FEAT 1, the default) below. One lane for the
producer warpgroup (its TMA copies of Q_i, K_j, V_j into the ring slots, and its waits for a
slot to be released), one per consumer warpgroup (waits, its matrix products, its softmax,
writing O_i) and one for the tensor cores (whose products they serve; a lane split in strips
when they serve several warpgroups' products interleaved). Right, the block's resources from
``cfg`` (a ``flashviz.records.fa3_records.FA3Config``): the warpgroups and their registers per
thread after setmaxnreg, Q_i and the K and V rings in shared memory (sizes in elements), the
full/empty mbarriers between them. Nothing here runs on a GPU.

Laid out in points from its measured texts at the current text scale (``style.scaled_text``;
the app's presenter mode draws it at 1.4): the resources column is as wide as its box texts
need (at most ``MAX_RESOURCES`` of the figure), titles, axis label and long texts wrap to the
room they have, the legend (under the timelines) takes the columns that fit, and the lanes
get the height left.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.patches import FancyBboxPatch, Patch, Rectangle

from ..replay.fa3_roles import roles_schedule
from . import style
from .text import line_height, text_width, tick_row, wrap_text

WG_COLOURS = ("#d62728", "#1f77b4", "#9467bd", "#e377c2")     #: consumer warpgroups 1, 2, 3, 4
KIND_COLOURS = {"load_Q": "#7f7f7f", "load_K": "#ff7f0e", "load_V": "#bcbd22", "softmax": "#2ca02c",
                "write_O": "#17becf"}
WAIT = {"facecolor": "#eeeeee", "edgecolor": "#bbbbbb", "hatch": "////", "linewidth": 0.5}
H = 0.72      #: bar height, in lanes


def _label(ax, text, x0, x1, y, size, colour="white"):
    """``text`` centred in the bar [x0, x1] at lane y when it fits (measured in points)."""
    fig = ax.figure
    w_pt = (x1 - x0) / (ax.get_xlim()[1] - ax.get_xlim()[0]) * ax.get_position().width * fig.get_figwidth() * 72
    if text_width(text, size) / SAFE + 2 <= w_pt:
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


PAD = 4.0       #: points between the figure's edge and its texts
GAP = 6.0       #: points between stacked parts of the layout
BOX_SPACING = 1.25      #: line spacing inside the resource boxes
MAX_RESOURCES = 0.3     #: the resources column takes at most this share of the figure's width
#: texts are wrapped to this share of the room they have: Agg's hinting draws a text up to ~3 %
#: wider at a low dpi (90) than ``text_width`` measures
SAFE = 0.96


def _lines(text: str) -> int:
    return text.count("\n") + 1


def _text_h(text: str, size: float, spacing: float = 1.2) -> float:
    """Points a block of text takes (matplotlib's 1.2-em line, ``spacing`` em between lines;
    mathtext subscripts get a little more)."""
    return line_height(size, _lines(text), spacing) + (0.25 * size if "$" in text else 0.0)


def _box(ax, x, y, w, h, text, colour, size, text_colour="black", **kw):
    """A rounded box (data units: points) with ``text`` centred in it."""
    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.5,rounding_size=3", facecolor=colour,
                                edgecolor="0.35", linewidth=0.8, **kw))
    ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=size, color=text_colour,
            linespacing=BOX_SPACING)


def _arrow(ax, y_from, y_to, x, text, size, side="right"):
    """A vertical arrow at x (points) with ``text`` beside it (``side`` of the arrow)."""
    ax.annotate("", xy=(x, y_to), xytext=(x, y_from), xycoords="data",
                arrowprops={"arrowstyle": "-|>", "color": "0.25", "lw": 1.0})
    off = style.pt(3)
    ax.text(x + off if side == "right" else x - off, (y_from + y_to) / 2, text, ha="left" if side == "right" else "right",
            va="center", fontsize=size, color="0.2", linespacing=1.2)


class _Resources:
    """The texts of the resources column and the sizes they need, in points: the column is as
    wide as its widest box text needs (at most MAX_RESOURCES of the figure), the free texts are
    wrapped to it."""

    def __init__(self, cfg, fig_w: float):
        pt = style.pt
        self.cfg, W = cfg, cfg.consumers
        self.pad = pt(4)                       # inside a box, around its text
        self.sizes = {"box": pt(8), "small": pt(7.5), "head": pt(9)}
        boxes = {"producer": f"warpgroup 0: producer\n128 threads, setmaxnreg {cfg.reg_producer}\n"
                             "one thread issues the TMA copies",
                 "consumers": f"warpgroups 1–{W}: consumers\n{W} × 128 threads, setmaxnreg {cfg.reg_consumer}\n"
                              "wgmma + softmax, 64 rows of $Q_i$ each",
                 "Q": f"$Q_i$: $B_r\\times{{d}}$ = {cfg.Br} × {cfg.d}"}
        free = {"head": f"one block: $B_r\\times{{B_c}}$ = {cfg.Br} × {cfg.Bc}, d = {cfg.d}",
                "ring": f"K and V rings: {cfg.stages} slots each of $B_c\\times{{d}}$ = {cfg.Bc} × {cfg.d}",
                "note": "mbarriers: full + empty for $Q_i$ and each slot\nnamed barriers pass the turn (ping-pong)"}
        self.slot_w = text_width("K slot 0", self.sizes["small"]) + 2 * self.pad
        need = max([text_width(t, self.sizes["box"]) + 2 * self.pad for t in boxes.values()]
                   + [text_width(free["head"], self.sizes["head"]), text_width(free["note"], self.sizes["small"]),
                      text_width(free["ring"], self.sizes["small"]) + 2 * self.pad,
                      cfg.stages * self.slot_w + (cfg.stages - 1) * self.pad + 2 * self.pad])
        self.width = Wr = min(need / SAFE, MAX_RESOURCES * fig_w)
        self.boxes = {k: wrap_text(t, self.sizes["box"], SAFE * (Wr - 2 * self.pad)) for k, t in boxes.items()}
        self.head = wrap_text(free["head"], self.sizes["head"], SAFE * Wr)
        self.ring = wrap_text(free["ring"], self.sizes["small"], SAFE * (Wr - 2 * self.pad))
        self.note = wrap_text(free["note"], self.sizes["small"], SAFE * Wr)
        self.arrows = ("TMA; full[s]:\nthe bytes landed", "wgmma reads\nthe slot", "empty[s]:\nslot released")

    def _box_h(self, key):
        return _text_h(self.boxes[key], self.sizes["box"], BOX_SPACING) + 2 * self.pad

    def _smem_h(self):
        s, p = self.sizes, self.pad
        row = _text_h("K slot 0", s["small"]) + 2 * p
        return (p + _text_h("shared memory", s["box"]) + p + self._box_h("Q") + 2 * (p + row) + p
                + _text_h(self.ring, s["small"]) + p)

    def _arrow_h(self):
        return max(_text_h(a, self.sizes["small"]) for a in self.arrows) + 2 * GAP

    def height(self) -> float:
        """The least height in points the column needs."""
        return (_text_h(self.head, self.sizes["head"]) + GAP + self._box_h("producer") + self._arrow_h()
                + self._smem_h() + self._arrow_h() + self._box_h("consumers") + GAP
                + _text_h(self.note, self.sizes["small"]))

    def draw(self, ax):
        """The column on ``ax``, whose data units are points (xlim 0..width, ylim 0..height of
        the axes); the room left over goes to the two arrows' gaps and above the note."""
        cfg, s, p, Wr = self.cfg, self.sizes, self.pad, self.width
        ax.set_axis_off()
        Hr = ax.get_ylim()[1]
        extra = max(0.0, Hr - self.height()) / 3
        y = Hr
        ax.text(0, y, self.head, fontsize=s["head"], va="top")
        y -= _text_h(self.head, s["head"]) + GAP
        h = self._box_h("producer")
        _box(ax, 0, y - h, Wr, h, self.boxes["producer"], "#f2f2f2", s["box"])
        y -= h
        gap = self._arrow_h() + extra
        _arrow(ax, y - 1, y - gap + 1, 0.35 * Wr, self.arrows[0], s["small"])
        y -= gap
        h = self._smem_h()
        smem_top, smem_bottom = y, y - h
        ax.add_patch(FancyBboxPatch((0, smem_bottom), Wr, h, boxstyle="round,pad=0.5,rounding_size=3",
                                    facecolor="#fff8e6", edgecolor="0.35", linewidth=0.8))
        y -= p
        ax.text(p, y, "shared memory (fp16/bf16)", fontsize=s["box"], va="top", style="italic")
        y -= _text_h("shared memory", s["box"]) + p
        h = self._box_h("Q")
        _box(ax, p, y - h, Wr - 2 * p, h, self.boxes["Q"], "#d9d9d9", s["box"])
        y -= h
        n = cfg.stages
        w = (Wr - 2 * p - (n - 1) * p) / n
        row = _text_h("K slot 0", s["small"]) + 2 * p
        for name, colour in (("K", KIND_COLOURS["load_K"]), ("V", KIND_COLOURS["load_V"])):
            y -= p + row
            for k in range(n):
                _box(ax, p + k * (w + p), y, w, row, f"{name} slot {k}", colour, s["small"])
        ax.text(Wr / 2, smem_bottom + p, self.ring, fontsize=s["small"], ha="center", va="bottom", linespacing=1.2)
        y = smem_bottom
        gap = self._arrow_h() + extra
        x_read, x_free = 2 * p, Wr - 2 * p
        _arrow(ax, y - 1, y - gap + 1, x_read, self.arrows[1], s["small"], side="right")
        _arrow(ax, y - gap + 1, y - 1, x_free, self.arrows[2], s["small"], side="left")
        y -= gap
        h = self._box_h("consumers")
        _box(ax, 0, y - h, Wr, h, self.boxes["consumers"], "#fde0e0", s["box"])
        ax.text(0, 0, self.note, fontsize=s["small"], va="bottom", color="0.25", linespacing=1.2)
        return smem_top


def _legend(fig, handles, x0: float, width: float):
    """The figure legend at the lower left (x0 points from the edge, PAD from the bottom), with
    as many columns (at most 4) as fit in ``width`` points, measured as drawn; returns
    (legend, its height in points)."""
    W, H = (v * 72 for v in fig.get_size_inches())
    renderer = fig.canvas.get_renderer()
    for ncol in (4, 3, 2, 1):
        leg = fig.legend(handles=handles, loc="lower left", bbox_to_anchor=(x0 / W, PAD / H), ncol=ncol,
                         fontsize=style.pt(8), frameon=False, handlelength=1.6, columnspacing=1.2, borderaxespad=0,
                         borderpad=0)
        bb = leg.get_window_extent(renderer)
        if bb.width * 72 / fig.dpi <= SAFE * width or ncol == 1:
            return leg, bb.height * 72 / fig.dpi
        leg.remove()


def plot_fa3_roles(cfg, schedules=None, *, n_tiles: int = 4, figsize=(11.5, 6.8)):
    """The figure of the module docstring for ``cfg`` (an FA3Config). schedules: (lock-step,
    ping-pong) RolesSchedules of cfg's consumers, stages and d (default: played here with
    ``n_tiles`` key tiles). Returns the Figure, laid out in points from its measured texts at
    the current text scale (``style.scaled_text``): titles, labels and the resources column
    wrap to the room they have. TypeError for a cfg without the FA3Config fields, ValueError
    for schedules that do not match it."""
    need = ("Br", "Bc", "d", "stages", "consumers", "threads", "reg_producer", "reg_consumer")
    if not all(hasattr(cfg, k) for k in need):
        raise TypeError(f"cfg must be a flashviz.records.fa3_records.FA3Config; got {type(cfg).__name__}")
    if schedules is None:
        schedules = tuple(roles_schedule(cfg.consumers, cfg.stages, cfg.d, n_tiles, pp) for pp in (False, True))
    if len(schedules) != 2 or [s.pingpong for s in schedules] != [False, True] or any(
            (s.consumers, s.stages, s.d) != (cfg.consumers, cfg.stages, cfg.d) for s in schedules):
        raise ValueError("schedules must be (lock-step, ping-pong) schedules of cfg's consumers, stages and d")
    pt = style.pt
    fig = plt.figure(figsize=figsize, dpi=style.fit_dpi(figsize[0]))
    W, H = figsize[0] * 72, figsize[1] * 72

    def frac(x, y, w, h):
        return [x / W, y / H, w / W, h / H]

    sup = wrap_text(f"FlashAttention-3, one thread block for d = {cfg.d}: 1 producer + {cfg.consumers} consumer "
                    f"warpgroups = {cfg.threads} threads; {cfg.stages}-slot K/V ring; key tiles j visited "
                    f"last to first ({schedules[0].n_tiles} shown)", pt(10), SAFE * (W - 2 * PAD))
    fig.suptitle(sup, fontsize=pt(10), x=PAD / W, y=1 - PAD / H, ha="left", va="top")
    top = H - PAD - _text_h(sup, pt(10)) - GAP                        # below the suptitle
    res = _Resources(cfg, W)
    x_res = W - PAD - res.width
    lanes = ["producer WG 0"] + [f"consumer WG {w}" for w in range(1, cfg.consumers + 1)] + ["tensor cores"]
    x_left = PAD + max(text_width(t, pt(8.5)) for t in lanes) / SAFE + 3.5     # the lanes' names, their pad
    x_right = x_res - pt(14)
    width = x_right - x_left
    titles = [wrap_text(t, pt(9.5), SAFE * width) for t in (
        f"FA3_FEAT 0, lock-step: all products together, then all softmaxes; "
        f"tensor cores busy {100 * schedules[0].tc_busy:.0f} % of the span",
        f"FA3_FEAT 1, ping-pong (the default): turns on the tensor cores; "
        f"busy {100 * schedules[1].tc_busy:.0f} % of the span")]
    xlabel = wrap_text("time, schematic: 1 = one product ($S_{ij}$ or $P_{ij}V_j$) of one warpgroup; "
                       f"a softmax {_softmax(schedules[0]):.2g} (FlashAttention-3's count at d = {cfg.d}); not measured",
                       pt(8.5), SAFE * width)
    handles = [Patch(facecolor=KIND_COLOURS["load_Q"], label="TMA copy of $Q_i$"),
               Patch(facecolor=KIND_COLOURS["load_K"], label="TMA copy of $K_j$ into its slot"),
               Patch(facecolor=KIND_COLOURS["load_V"], label="TMA copy of $V_j$"),
               Patch(**WAIT, label="waiting (a slot, a tile, its turn)")]
    handles += [Patch(facecolor=WG_COLOURS[w], label=f"products of WG {w + 1} (wgmma)") for w in range(cfg.consumers)]
    handles += [Patch(facecolor=KIND_COLOURS["softmax"], label="softmax: m, P, l, rescale O"),
                Patch(facecolor=KIND_COLOURS["write_O"], label="write $O_i$, lse")]
    _, legend_h = _legend(fig, handles, PAD, x_right - PAD)
    # bottom up: legend, x label (labelpad 4), tick labels; top down: title (pad 4); between the
    # panels: the upper one's tick marks, the lower one's title
    bottom = PAD + legend_h + GAP + _text_h(xlabel, pt(8.5)) + 4 + tick_row(8)
    ax_top = top - _text_h(titles[0], pt(9.5)) - 4
    between = 3.5 + GAP + _text_h(titles[1], pt(9.5)) + 4
    h = (ax_top - bottom - between) / 2
    axes = [fig.add_axes(frac(x_left, ax_top - h, width, h))]
    axes.append(fig.add_axes(frac(x_left, bottom, width, h), sharex=axes[0]))
    span = max(s.span for s in schedules)
    axes[0].set_xlim(0, span * 1.01)
    for ax, s, t in zip(axes, schedules, titles):
        _timeline(ax, s, t)
    axes[0].tick_params(axis="x", labelbottom=False)
    axes[1].set_xlabel(xlabel, fontsize=pt(8.5), labelpad=4)
    rax = fig.add_axes(frac(x_res, PAD, res.width, top - PAD))
    rax.set_xlim(0, res.width)
    rax.set_ylim(0, top - PAD)
    res.draw(rax)
    return fig


def _softmax(sched) -> float:
    """The softmax's length in the schedule (units)."""
    return next(b.t1 - b.t0 for b in sched.bars if b.kind == "softmax")
