"""Chapter 1's figures: the measured roofline of this machine (QKᵀ against exp over S) — alone
(``draw_roofline``, the notebook's) or beside the HBM bytes of standard attention, which grow as
N² (``draw_memory_wall``, the app's; the IO model's Algorithm 0 count).

The QKᵀ points of N = 256…2048 land close together (their intensities are 21–30 FLOP/byte), and
where exactly is measured: their labels N=… are laid out in one column beside them, joined by
leader lines, apart and inside the axes at any text scale (``place_point_labels``)."""

from __future__ import annotations

import numpy as np

from ..iomodel import standard_attention_io
from . import style
from .style import STANDARD, TILED, fmt_bytes

#: the sequence lengths of the bytes panel
BYTES_N = (1024, 4096, 16384, 65536)


#: how far (points) the column of point labels stands right (or left) of the outermost point
LABEL_DX = 16.0
#: the gap (points) between two labels of the column, and between a label and the axes' edge
LABEL_GAP = 2.0


def place_point_labels(fig, ax, labels, *, avoid=()) -> None:
    """Lay out ``labels`` (annotations of points of ``ax``, as ``_roofline_axes`` makes them) in
    one column beside the points, each joined to its point by a thin leader line: the column
    stands LABEL_DX points right of the rightmost point (left of the leftmost when the right
    side has no room), its labels in the order of their points' heights, moved apart vertically
    just enough that no two overlap (LABEL_GAP between them), all inside the axes and clear of
    the boxes in ``avoid`` (the legend). The leaders are annotations without text (gid
    "point-label-leader"), drawn from each label's near edge to its point. Call it once, when the
    layout is final (after tight_layout): it measures the texts. The offsets are in points, so
    the layout holds at any dpi."""
    if not labels:
        return
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    k = fig.dpi / 72                                       # pixels per point
    pts = np.array([ax.transData.transform(a.xy) for a in labels])
    for a in labels:                                       # measure each label on its point
        a.xyann = (0.0, 0.0)
    sizes = [(b.width, b.height) for b in (a.get_window_extent(renderer) for a in labels)]
    box, gap = ax.bbox, LABEL_GAP * k
    widest = max(w for w, _ in sizes)
    right = pts[:, 0].max() + LABEL_DX * k
    on_right = right + widest + gap <= box.x1 or pts[:, 0].min() - LABEL_DX * k - widest - gap < box.x0
    x = right if on_right else pts[:, 0].min() - LABEL_DX * k
    x = min(x, box.x1 - gap - widest) if on_right else max(x, box.x0 + gap + widest)
    x0, x1 = (x, x + widest) if on_right else (x - widest, x)
    top, bottom = box.y1 - gap, box.y0 + gap
    for b in avoid:                                        # a legend in the column's way lowers its top
        if b is not None and b.x0 < x1 and b.x1 > x0 and b.y0 > (bottom + top) / 2:
            top = min(top, b.y0 - gap)
    order = np.argsort(pts[:, 1], kind="stable")
    heights = [sizes[i][1] for i in order]
    y = [float(pts[i, 1]) for i in order]                  # the labels' centres, lowest first
    y[0] = max(y[0], bottom + heights[0] / 2)
    for n in range(1, len(y)):                             # up: each clears the one below it
        y[n] = max(y[n], y[n - 1] + (heights[n - 1] + heights[n]) / 2 + gap)
    y[-1] = min(y[-1], top - heights[-1] / 2)
    for n in range(len(y) - 2, -1, -1):                    # down from the top, if the column ran over it
        y[n] = min(y[n], y[n + 1] - (heights[n + 1] + heights[n]) / 2 - gap)
    for n, i in enumerate(order):
        a = labels[i]
        a.set_horizontalalignment("left" if on_right else "right")
        a.set_verticalalignment("center")
        a.xyann = ((x - pts[i, 0]) / k, (y[n] - pts[i, 1]) / k)
        # the leader: an arrow without text from the label's near edge to its point (not a text box)
        ax.annotate("", a.xy, xytext=a.xyann, textcoords="offset points", gid="point-label-leader",
                    arrowprops=dict(arrowstyle="-", color="0.45", lw=0.6, shrinkA=2, shrinkB=4))


def _roofline_axes(ax, rows, roof_Bps: float, *, roof_label: str | None, title: str) -> list:
    """Draw the roofline of ``rows`` into ``ax``: ● QKᵀ and ■ exp over S at their intensity and
    achieved GFLOP/s, the memory roof (``roof_Bps`` bytes per second, dashed) and the texts.
    Returns the points' label annotations (N=…), to be laid out by ``place_point_labels``."""
    roof = roof_Bps / 1e9
    labels = []
    for r in rows:
        x_mm, y_mm = r["mm_flops"] / r["mm_bytes"], r["mm_flops"] / r["mm_s"] / 1e9
        ax.loglog(x_mm, y_mm, "o", color=TILED)
        ax.loglog(r["ew_flops"] / r["ew_bytes"], r["ew_flops"] / r["ew_s"] / 1e9, "s", color=STANDARD)
        labels.append(ax.annotate(f"N={r['N']}", (x_mm, y_mm), textcoords="offset points", xytext=(0, 0),
                                  fontsize=style.pt(8), color="0.15"))
    x = np.logspace(-2, 2.5, 50)
    ax.loglog(x, roof * x, "--", color="0.5",
              label=roof_label or f"memory roof: a copy moves {roof:.0f} GB/s (measured)")
    ax.set_xlabel("arithmetic intensity (FLOP per byte)", fontsize=style.pt(10))
    ax.set_ylabel("achieved GFLOP/s", fontsize=style.pt(10))
    ax.set_title(title, fontsize=style.pt(10))
    ax.legend(fontsize=style.pt(8), loc="upper left")
    ax.tick_params(which="both", labelsize=style.pt(10))  # tick labels are made at draw time: sized here
    return labels


def draw_roofline(fig, rows, roof_Bps: float, *, roof_label: str | None = None,
                  title: str = "measured on this machine: ● QKᵀ   ■ exp over S") -> dict:
    """Draw chapter 1's roofline alone into ``fig`` (cleared; the notebook's figure): ● QKᵀ and
    ■ exp over S of each row of ``roofline.measure_intensity`` (or rows with the same keys) under
    the memory roof ``roof_Bps`` (bytes per second; ``roof_label`` its legend text), the points
    labelled N=… in a column beside them with leader lines (``place_point_labels``). Returns
    {"axes": ax, "labels": the label annotations, "roof_GBps": the roof}. Text sizes follow
    ``style.pt`` (build inside ``style.scaled_text(scale)`` for larger text)."""
    fig.clear()
    ax = fig.add_subplot()
    labels = _roofline_axes(ax, rows, roof_Bps, roof_label=roof_label, title=title)
    fig.tight_layout()
    place_point_labels(fig, ax, labels, avoid=[_legend_box(fig, ax)])
    return {"axes": ax, "labels": labels, "roof_GBps": roof_Bps / 1e9}


def _legend_box(fig, ax):
    legend = ax.get_legend()
    return legend.get_window_extent(fig.canvas.get_renderer()) if legend is not None else None


def draw_memory_wall(fig, rows, roof_Bps: float, *, d: int = 64, itemsize: int = 2) -> dict:
    """Draw into ``fig`` (cleared): left, achieved GFLOP/s against FLOPs per byte for each row of
    ``roofline.measure_intensity`` (● QKᵀ, ■ exp over S) under the memory roof ``roof_Bps``
    (bytes per second, ``roofline.copy_bandwidth``): no kernel of intensity x FLOP/byte runs
    faster than x·roof;
    right, standard attention's HBM bytes per head split into Q, K, V, O and the N² terms S, P
    (``iomodel.standard_attention_io`` at d, itemsize). The left panel is ``draw_roofline``'s,
    its point labels in a column with leader lines. Returns {"axes": (left, right), "labels": the
    point labels, "roof_GBps": the roof, "sp_share": [share of S and P in the bytes, per N in BYTES_N]}.
    Text sizes follow ``style.pt`` (build inside ``style.scaled_text(scale)`` for larger text)."""
    fig.clear()
    left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.25, 1]})
    roof = roof_Bps / 1e9
    labels = _roofline_axes(left, rows, roof_Bps, roof_label=None, title="measured here: ● QKᵀ   ■ exp over S")
    qkvo, sp, shares = [], [], []
    for N in BYTES_N:
        io = standard_attention_io(N, N, d, itemsize=itemsize)
        a = sum(io.reads.get(t, 0) + io.writes.get(t, 0) for t in "QKVO")
        qkvo.append(a)
        sp.append(io.hbm_bytes - a)
        shares.append((io.hbm_bytes - a) / io.hbm_bytes)
    pos = np.arange(len(BYTES_N))
    right.bar(pos, qkvo, color=TILED, label="Q, K, V, O")
    right.bar(pos, sp, bottom=qkvo, color=STANDARD, label="S and P (N² terms)")
    right.set_yscale("log")
    right.set_xticks(pos, [f"{N // 1024}k" for N in BYTES_N])
    right.set_xlabel("sequence length N", fontsize=style.pt(10))
    right.set_ylabel("HBM bytes per head", fontsize=style.pt(10))
    right.set_title(f"standard attention: d = {d}, {itemsize} B elements", fontsize=style.pt(10))
    right.annotate(fmt_bytes(qkvo[-1] + sp[-1]), (pos[-1], qkvo[-1] + sp[-1]), ha="center", va="bottom",
                   fontsize=style.pt(8))
    right.legend(fontsize=style.pt(8), loc="upper left")
    right.tick_params(which="both", labelsize=style.pt(10))   # tick labels are made at draw time: sized here
    right.set_ylim(min(qkvo) / 4, (qkvo[-1] + sp[-1]) * 20)
    fig.tight_layout()
    place_point_labels(fig, left, labels, avoid=[_legend_box(fig, left)])
    return {"axes": (left, right), "labels": labels, "roof_GBps": roof, "sp_share": shares}
