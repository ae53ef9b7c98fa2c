"""Chapter 9's roofline: decode against the forward, placed under a GPU's two measured ceilings.

``plot_decode_roofline(points, copy_Bps=…, matmul_flops=…, source=…)`` draws, on log–log axes,
the roofline of a GPU (Williams, Waterman, Patterson 2009): attainable FLOP/s = min(matmul
ceiling, intensity × copy bandwidth), the ridge point (matmul ceiling ÷ bandwidth) as a dotted
line, and each point — (label, arithmetic intensity in FLOPs per byte, group) with intensities
from the IO model (``iomodel.decode_io``, ``iomodel.flash_forward_io``) — on the roof at its
intensity: the most that work of that intensity can reach. The points are the model's bounds, not
measurements; the ceilings are the caller's (chapter 9 passes the copy bandwidth and the fp16
matmul rate of the newest tensor-core record, naming it in ``source``).

Returns a new Figure (``style.fit_dpi``: at most FIT_WIDTH_PX wide in a notebook); text sizes go
through ``style.pt``. Raises ValueError (one line) for no points, a non-positive intensity or
ceiling.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from . import style

#: colour of each group of points
GROUP_COLOURS = {"decode": style.CURRENT, "forward": style.TILED}


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
    ax = fig.add_axes((0.09, 0.14, 0.88, 0.72))
    ridge = matmul_flops / copy_Bps
    xs = [x for _, x, _ in points]
    lo, hi = min(xs + [ridge]) / 4, max(xs + [ridge]) * 6
    ylim = (min(xs) * copy_Bps / 1e12 / 30, matmul_flops / 1e12 * 4)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(*ylim)
    grid = np.geomspace(lo, hi, 200)
    roof = np.minimum(matmul_flops, grid * copy_Bps) / 1e12
    ax.plot(grid, roof, color="0.2", lw=1.8, zorder=2)
    ax.axvline(ridge, color="0.5", ls=":", lw=1.0, zorder=1)
    ax.text(ridge * 1.08, ylim[0] * 1.6, f"ridge point: {ridge:,.0f} FLOP/byte", fontsize=pt(8),
            color="0.3", va="bottom")
    ax.text(lo * 1.3, matmul_flops / 1e12 * 1.25, f"matmul ceiling (fp16): {matmul_flops / 1e12:,.0f} TFLOP/s",
            fontsize=pt(8.5), color="0.2", va="bottom")
    slope_x = lo * 2.2
    ax.text(slope_x, slope_x * copy_Bps / 1e12 * 2.0,
            f"memory roof: {copy_Bps / 1e9:,.0f} GB/s × intensity", fontsize=pt(8.5), color="0.2",
            rotation_mode="anchor", va="bottom",
            rotation=np.degrees(np.arctan2(*_slope_on_screen(ax, lo, copy_Bps))))
    for label, x, group in sorted(points, key=lambda p: p[1]):
        y = min(matmul_flops, x * copy_Bps) / 1e12
        colour = GROUP_COLOURS.get(group, "0.3")
        ax.plot([x], [y], "o", ms=7, color=colour, mec="white", mew=1.0, zorder=3)
        flat = x > ridge                      # on the flat roof: the label above the point, under it otherwise
        ax.annotate(f"{label}\n{x:,.1f} FLOP/B → {y:,.1f} TFLOP/s", (x, y), xytext=(0, 8) if flat else (6, -10),
                    textcoords="offset points", fontsize=pt(7.8), color=colour, ha="center" if flat else "left",
                    va="bottom" if flat else "top")
    ax.set_xlabel("arithmetic intensity (FLOPs per byte of HBM traffic, from the IO model)", fontsize=pt(9))
    ax.set_ylabel("attainable TFLOP/s (the roof)", fontsize=pt(9))
    ax.tick_params(which="both", labelsize=pt(8.5))
    ax.grid(True, which="major", alpha=0.3)
    ax.set_title("Decode and the forward on the roofline: each point is the most its intensity allows",
                 fontsize=pt(10), loc="left")
    if source:
        fig.text(0.01, 0.01, f"ceilings: {source}", fontsize=pt(7.5), color="0.35", ha="left", va="bottom")
    return fig


def _slope_on_screen(ax, x0, copy_Bps):
    """(dy, dx) on screen of the memory roof (axes scales and limits set), to rotate its label along it."""
    a = ax.transData.transform((x0, x0 * copy_Bps / 1e12))
    b = ax.transData.transform((x0 * 10, x0 * 10 * copy_Bps / 1e12))
    return b[1] - a[1], b[0] - a[0]
