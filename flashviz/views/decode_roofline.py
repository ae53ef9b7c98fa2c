"""Chapter 9's roofline: decode against the forward, placed under a GPU's two measured ceilings.

``plot_decode_roofline(points, copy_Bps=…, matmul_flops=…, source=…)`` draws, on log–log axes,
the roofline of a GPU (Williams, Waterman, Patterson 2009): attainable FLOP/s = min(matmul
ceiling, intensity × copy bandwidth), the ridge point (matmul ceiling ÷ bandwidth, FLOPs per
byte) as a dotted line from the x axis up to the roof's knee, broken around any label it would
run through, and each point — (label, arithmetic intensity in FLOPs per byte, group) with
intensities from the IO model (``iomodel.decode_io``, ``iomodel.flash_forward_io``) — on the roof
at its intensity: the most that work of that intensity can reach. The points are the model's
bounds, not measurements; the ceilings are the caller's (chapter 9 passes the copy bandwidth and
the fp16 matmul rate of the newest tensor-core record, naming it in ``source``).

Returns a new Figure (``style.fit_dpi``: at most FIT_WIDTH_PX wide in a notebook); text sizes go
through ``style.pt``, and the layout is measured in points at that size: the source line has a
row of its own under the axis label, the texts over the flat roof get the headroom they need,
every label stays inside the axes. Raises ValueError (one line) for no points, a non-positive
intensity or ceiling.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from . import style

#: colour of each group of points
GROUP_COLOURS = {"decode": style.CURRENT, "forward": style.TILED}
PAD = 4.0       #: points between the figure's bottom edge and the ceilings' source line
GAP = 2.0       #: points a label keeps from the axes' edges, and the ridge line from a text


def plot_decode_roofline(points, *, copy_Bps: float, matmul_flops: float, source: str = "",
                         figsize=(9.2, 4.6)):
    """The roofline of the module docstring. points: [(label, intensity, group)], group "decode"
    or "forward" (its colour); copy_Bps: bytes per second of the memory roof; matmul_flops:
    FLOP/s of the compute roof; source: one line naming where the two ceilings come from."""
    points = list(points)
    if not points:
        raise ValueError("plot_decode_roofline needs at least one (label, intensity, group) point")
    for label, x, _ in points:
        if not (np.isfinite(x) and x > 0):
            raise ValueError(f"the intensity of {label!r} must be a number above 0, got {x!r}")
    if not (copy_Bps > 0 and matmul_flops > 0):
        raise ValueError(f"the ceilings must be above 0, got copy {copy_Bps!r} B/s, matmul {matmul_flops!r} FLOP/s")
    pt = style.pt
    fig = plt.figure(figsize=figsize, dpi=style.fit_dpi(figsize[0]))
    ax = fig.add_subplot()
    ridge = matmul_flops / copy_Bps
    ceiling = matmul_flops / 1e12
    xs = [x for _, x, _ in points]
    lo, hi = min(xs + [ridge]) / 4, max(xs + [ridge]) * 6
    y_lo = min(xs) * copy_Bps / 1e12 / 30
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(y_lo, ceiling * 4)
    grid = np.geomspace(lo, hi, 200)
    roof = np.minimum(matmul_flops, grid * copy_Bps) / 1e12
    ax.plot(grid, roof, color="0.2", lw=1.8, zorder=2)
    ax.text(ridge * 1.08, y_lo * 1.6, f"ridge point: {ridge:,.0f} FLOP/byte", fontsize=pt(8),
            color="0.3", va="bottom")
    above = [ax.annotate(f"matmul ceiling (fp16): {ceiling:,.0f} TFLOP/s", (lo, ceiling), xytext=(10, 3),
                         textcoords="offset points", fontsize=pt(8.5), color="0.2", va="bottom")]
    slope_x = lo * 2.2
    slope = ax.text(slope_x, slope_x * copy_Bps / 1e12 * 2.0, f"memory roof: {copy_Bps / 1e9:,.0f} GB/s × intensity",
                    fontsize=pt(8.5), color="0.2", rotation_mode="anchor", va="bottom")
    labels = []
    for label, x, group in sorted(points, key=lambda p: p[1]):
        y = min(matmul_flops, x * copy_Bps) / 1e12
        colour = GROUP_COLOURS.get(group, "0.3")
        ax.plot([x], [y], "o", ms=7, color=colour, mec="white", mew=1.0, zorder=3)
        flat = x > ridge                      # on the flat roof: the label above the point, under it otherwise
        labels.append(ax.annotate(f"{label}\n{x:,.1f} FLOP/B → {y:,.1f} TFLOP/s", (x, y),
                                  xytext=(0, 8) if flat else (6, -10), textcoords="offset points", fontsize=pt(7.8),
                                  color=colour, ha="center" if flat else "left", va="bottom" if flat else "top"))
        if flat:
            above.append(labels[-1])
    ax.set_xlabel("arithmetic intensity (FLOPs per byte of HBM traffic, from the IO model)", fontsize=pt(9))
    ax.set_ylabel("attainable TFLOP/s (the roof)", fontsize=pt(9))
    ax.tick_params(which="both", labelsize=pt(8.5))
    ax.grid(True, which="major", alpha=0.3)
    ax.set_title("Decode and the forward on the roofline: each point is the most its intensity allows",
                 fontsize=pt(10), loc="left")
    H = figsize[1] * 72
    bottom = 0.0
    if source:
        note = fig.text(0.01, PAD / H, f"ceilings: {source}", fontsize=pt(7.5), color="0.35", ha="left", va="bottom")
        bottom = (note.get_window_extent(fig.canvas.get_renderer()).height * 72 / fig.dpi + PAD + 2) / H
    for _ in range(6):      # the headroom follows the axes' height, which follows the tick labels
        fig.tight_layout(rect=(0, bottom, 1, 1))
        shifted = _keep_inside(fig, ax, labels)
        top = max(ceiling * 4, _headroom(fig, ax, above, ceiling, y_lo))
        if not shifted and abs(top - ax.get_ylim()[1]) <= 1e-9 * top:
            break
        ax.set_ylim(y_lo, top)
    slope.set_rotation(np.degrees(np.arctan2(*_slope_on_screen(ax, lo, copy_Bps))))
    _ridge_line(fig, ax, ridge, ceiling)
    return fig


def _keep_inside(fig, ax, labels) -> bool:
    """Move each of ``labels`` (annotations offset in points from their point) sideways, by its
    offset, until it is inside ``ax`` with GAP points to spare (a label centred over a point near
    the right edge); returns whether one moved."""
    renderer = fig.canvas.get_renderer()
    k = fig.dpi / 72
    moved = False
    for a in labels:
        b = a.get_window_extent(renderer)
        dx = min(0.0, ax.bbox.x1 - GAP * k - b.x1) or max(0.0, ax.bbox.x0 + GAP * k - b.x0)
        if dx:
            a.xyann = (a.xyann[0] + dx / k, a.xyann[1])
            moved = True
    return moved


def _headroom(fig, ax, above, ceiling: float, y_lo: float) -> float:
    """The top y limit (TFLOP/s, log axis from ``y_lo``) that leaves room over the matmul
    ``ceiling`` for the texts standing on it (``above``: annotations offset in points over a
    point of the ceiling) and GAP points above the highest, at the axes' current height."""
    renderer = fig.canvas.get_renderer()
    k = fig.dpi / 72
    base = ax.transData.transform((1.0, ceiling))[1]
    need = max(a.get_window_extent(renderer).y1 - base for a in above) + GAP * k     # pixels
    h = ax.bbox.height
    if need >= h:
        return ax.get_ylim()[1]
    return y_lo * (ceiling / y_lo) ** (h / (h - need))


def _ridge_line(fig, ax, ridge: float, ceiling: float) -> None:
    """The ridge point's dotted line, from the x axis up to the roof's knee, broken GAP points
    around every text of ``ax`` it would run through (a label of a point near the ridge): drawn
    last, from the texts' extents at the final layout (a LineCollection, gid "ridge")."""
    renderer = fig.canvas.get_renderer()
    k = fig.dpi / 72
    x = ax.transData.transform((ridge, ceiling))[0]
    spans = [(ax.bbox.y0, ax.transData.transform((ridge, ceiling))[1])]
    for t in ax.texts:
        b = t.get_window_extent(renderer)
        if not t.get_visible() or not t.get_text() or not b.x0 - GAP * k <= x <= b.x1 + GAP * k:
            continue
        cut_lo, cut_hi = b.y0 - GAP * k, b.y1 + GAP * k
        spans = [piece for y0, y1 in spans for piece in ((y0, min(y1, cut_lo)), (max(y0, cut_hi), y1))
                 if piece[1] - piece[0] > k]
    to_data = ax.transData.inverted()
    ys = [(to_data.transform((x, y0))[1], to_data.transform((x, y1))[1]) for y0, y1 in spans]
    ax.vlines([ridge] * len(ys), [a for a, _ in ys], [b for _, b in ys], color="0.5", ls=":", lw=1.0, zorder=1,
              gid="ridge")


def _slope_on_screen(ax, x0, copy_Bps):
    """(dy, dx) on screen of the memory roof (axes scales and limits set), to rotate its label along it."""
    a = ax.transData.transform((x0, x0 * copy_Bps / 1e12))
    b = ax.transData.transform((x0 * 10, x0 * 10 * copy_Bps / 1e12))
    return b[1] - a[1], b[0] - a[0]
