"""Chapter 1's figure: the measured roofline of this machine (QKᵀ against exp over S) beside the
HBM bytes of standard attention, which grow as N² (the IO model's Algorithm 0 count)."""

from __future__ import annotations

import numpy as np

from ..iomodel import standard_attention_io
from . import style
from .style import STANDARD, TILED, fmt_bytes

#: the sequence lengths of the bytes panel
BYTES_N = (1024, 4096, 16384, 65536)


def _keep_apart(fig, labels) -> None:
    """Move each point label down, below the earlier ones it would overlap: the points are measured
    here, so two can land anywhere near each other (a busy machine moved N=512 onto N=2048)."""
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    placed = []
    for ann in labels:
        for _ in range(len(labels)):
            box = ann.get_window_extent(renderer)
            hit = next((b for b in placed if box.overlaps(b)), None)
            if hit is None:
                break
            dx, dy = ann.xyann
            ann.xyann = (dx, dy - (box.y1 - hit.y0 + 1) * 72 / fig.dpi)     # just below the one it hit
        placed.append(ann.get_window_extent(renderer))


def draw_memory_wall(fig, rows, roof_Bps: float, *, d: int = 64, itemsize: int = 2) -> dict:
    """Draw into ``fig`` (cleared): left, achieved GFLOP/s against FLOPs per byte for each row of
    ``roofline.measure_intensity`` (● QKᵀ, ■ exp over S) under the memory roof ``roof_Bps``
    (bytes per second, ``roofline.copy_bandwidth``): no kernel of intensity x FLOP/byte runs
    faster than x·roof;
    right, standard attention's HBM bytes per head split into Q, K, V, O and the N² terms S, P
    (``iomodel.standard_attention_io`` at d, itemsize). Returns {"axes": (left, right),
    "roof_GBps": the roof, "sp_share": [share of S and P in the bytes, per N in BYTES_N]}.
    Text sizes follow ``style.pt`` (build inside ``style.scaled_text(scale)`` for larger text)."""
    fig.clear()
    left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.25, 1]})
    roof = roof_Bps / 1e9
    labels = []
    for n, r in enumerate(rows):
        x_mm, y_mm = r["mm_flops"] / r["mm_bytes"], r["mm_flops"] / r["mm_s"] / 1e9
        left.loglog(x_mm, y_mm, "o", color=TILED)
        left.loglog(r["ew_flops"] / r["ew_bytes"], r["ew_flops"] / r["ew_s"] / 1e9, "s", color=STANDARD)
        # labels alternately right and left of their points: nearby points keep apart
        labels.append(left.annotate(f"N={r['N']}", (x_mm, y_mm), textcoords="offset points",
                                    xytext=(6 if n % 2 else -6, -3), ha="left" if n % 2 else "right",
                                    fontsize=style.pt(7)))
    x = np.logspace(-2, 2.5, 50)
    left.loglog(x, roof * x, "--", color="0.5", label=f"memory roof: a copy moves {roof:.0f} GB/s (measured)")
    left.set_xlabel("arithmetic intensity (FLOP per byte)", fontsize=style.pt(10))
    left.set_ylabel("achieved GFLOP/s", fontsize=style.pt(10))
    left.set_title("measured here: ● QKᵀ   ■ exp over S", fontsize=style.pt(10))
    left.legend(fontsize=style.pt(8), loc="upper left")
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
    for ax in (left, right):             # tick labels are made at draw time, outside scaled_text: sized here
        ax.tick_params(which="both", labelsize=style.pt(10))
    _keep_apart(fig, labels)
    right.set_ylim(min(qkvo) / 4, (qkvo[-1] + sp[-1]) * 20)
    fig.tight_layout()
    return {"axes": (left, right), "roof_GBps": roof, "sp_share": shares}
