"""Chapter 8's figures of the recorded FlashAttention-3 measurements (no GPU needed).

``plot_fa3_steps(rec)`` — from one probe record (``flashviz.records.fa3_records.latest_probe``): for
every (d, mask) it timed them at, the kernel-only TFLOP/s of each step from the FlashAttention-2
kernel to FlashAttention-3 (``fa3_records.STEPS``), bars, each labelled with its TFLOP/s and
its ratio to SDPA-cuDNN of the same row (cuDNN's time ÷ the step's); SDPA-cuDNN and SDPA-flash
as horizontal lines. A label stands LABEL_GAP points over its bar, or over the line that would
run through it (a bar just under cuDNN's speed), measured in points (``_stand_labels``).
Kernel-only = CUDA-graph replay of 10 public calls, median of 7 replays; every bar of the figure
comes from the one run named in the title.

``plot_fa3_benchmark(res)`` — from the full benchmark (an "mma" results dict,
``flashviz.gpu.latest_results("mma")``): against N, one panel per (d, mask), the ratio to
SDPA-cuDNN of fa3, of the wgmma kernel and of SDPA-flash, by public call (CUDA events, median;
solid lines, filled markers) and kernel-only (the profiler's kernel time, median; dotted,
hollow markers); a band of ±``RUN_NOISE`` around 1.

Both return a new Figure and raise ValueError (one line) for a record without the rows they
draw. Laid out from their measured texts at the current text scale (``style.scaled_text``; the
app's presenter mode draws them at 1.4): long titles wrap, the legends take the columns that
fit, the bars' height leaves room for their labels under the legend.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from ..records.fa3_records import RUN_NOISE, STEPS, fa3_bench_table, probe_label, steps_table
from . import style
from .bench_plot import run_label
from .text import line_height, text_width, wrap_text

#: texts are wrapped to this share of the room they have (Agg draws a text up to ~3 % wider at
#: a low dpi than ``text_width`` measures)
SAFE = 0.96
PAD = 4.0       #: points between the figure's edge and its legend
LABEL_GAP = 3.0     #: points between a bar's top (or the reference line under its label) and the label

STEP_TICKS = {"wgmma": "FA2\n(wgmma)", "producer": "+ TMA,\nproducer", "pingpong": "+ ping-pong\n(default)",
              "intra": "+ intra-\nWG overlap"}
STEP_COLOURS = {"wgmma": "#8c8c8c", "producer": "#f4a582", "pingpong": "#d6604d", "intra": "#b2182b"}
#: (impl, label, colour) of the benchmark figure
BENCH_SERIES = (("fa3", "fa3 (ours, FlashAttention-3 design)", "#d62728"),
                ("wgmma", "wgmma (ours, FA2, chapter 7)", "#ff7f0e"),
                ("sdpa_flash", "SDPA-flash (FlashAttention-2)", "#1f77b4"))


def _panels(keys):
    """(d, causal) panels in a 2 × 2 grid order."""
    return sorted(keys, key=lambda k: (k[0], k[1]))


def _pt(fig, bbox) -> tuple[float, float]:
    """(width, height) in points of a display-space bbox of ``fig``."""
    return bbox.width * 72 / fig.dpi, bbox.height * 72 / fig.dpi


def _wrapped_suptitle(fig, text: str, size: float) -> None:
    """The figure's title at the left, every line wrapped to the figure's width."""
    W = fig.get_figwidth() * 72
    fig.suptitle(wrap_text(text, size, SAFE * (W - 2 * PAD)), fontsize=size, x=0.01, ha="left")


def _fit_legend(fig, options, size: float):
    """A figure legend at the bottom centre: the first of ``options`` ((ncol, handles, labels),
    most columns first) that fits the figure's width as drawn, else the last; returns (legend,
    its height in points)."""
    W, H = fig.get_figwidth() * 72, fig.get_figheight() * 72
    renderer = fig.canvas.get_renderer()
    for k, (ncol, handles, labels) in enumerate(options):
        leg = fig.legend(handles, labels, loc="lower center", ncol=ncol, fontsize=size, frameon=False,
                         bbox_to_anchor=(0.5, PAD / H), borderaxespad=0)
        w, h = _pt(fig, leg.get_window_extent(renderer))
        if w <= SAFE * (W - 2 * PAD) or k == len(options) - 1:
            return leg, h
        leg.remove()


def _bar_room(fig, axes, anchors, top: float) -> float:
    """The y limit at which every bar's label (two lines, LABEL_GAP points above its anchor) stays
    under its axes' legend (upper left): the largest over ``axes`` of the limit its height in
    points asks for, ``anchors`` the highest label anchor of each axes (TFLOP/s: a bar's top, or
    the reference line it stands on, ``_stand_labels``); at least 1.32 × ``top``."""
    renderer = fig.canvas.get_renderer()
    pt = style.pt
    label = line_height(pt(8), 2, 1.1) + 2 * 0.6 + 2          # two lines, their white box's pad
    out = 1.32 * top
    for ax, anchor in zip(axes, anchors):
        h_ax = _pt(fig, ax.get_window_extent(renderer))[1]
        leg = ax.get_legend()
        h_leg = _pt(fig, leg.get_window_extent(renderer))[1] + leg.borderaxespad * pt(7.5) + 3   # its size
        room = h_ax - h_leg - LABEL_GAP - label
        if room > 0:
            out = max(out, anchor * h_ax / room)
    return out


def _stand_labels(fig, ax, labels, heights) -> list[float]:
    """Stand each bar label of ``ax`` (an annotation LABEL_GAP points above its anchor) on its bar
    (``heights``, TFLOP/s), or, where a reference line of ``ax`` (SDPA-cuDNN's, SDPA-flash's)
    runs above the bar top and below the label's top, on that line: the anchor moves up to it,
    and on to any line the label then meets. Measured in points at the current layout and y
    limits (call again after either changes). Returns the anchors (TFLOP/s)."""
    renderer = fig.canvas.get_renderer()
    k = fig.dpi / 72                                           # pixels per point
    refs = sorted(float(ln.get_ydata()[0]) for ln in ax.get_lines())
    to_px = ax.transData.transform
    out = []
    for a, h in zip(labels, heights):
        # the label's height with its white box and the line's half width, in pixels
        tall = a.get_window_extent(renderer).height + (LABEL_GAP + 2 * 0.6 + 1) * k
        y = h
        while True:
            y0 = to_px((0, y))[1]
            hit = [c for c in refs if c > y and to_px((0, c))[1] <= y0 + tall]
            if not hit:
                break
            y = max(hit)
        a.xy = (a.xy[0], y)
        out.append(y)
    return out


def plot_fa3_steps(rec: dict, *, figsize=(11, 6.4)):
    """The steps figure of the module docstring; returns the Figure."""
    if not isinstance(rec, dict) or "times" not in rec:
        raise ValueError("expected a probe record with 'times' rows (flashviz.records.fa3_records.latest_probe)")
    rows = steps_table(rec)
    if not rows:
        raise ValueError(f"{rec.get('source_file', 'the record')} holds no row that timed every step")
    panels = _panels({(r["d"], r["causal"]) for r in rows})
    pt = style.pt
    ncol = 2 if len(panels) > 1 else 1
    fig, axes = plt.subplots(-(-len(panels) // ncol), ncol, figsize=figsize, squeeze=False, dpi=style.fit_dpi(figsize[0]))
    top = max(max(r["kernel_tflops"], r["sdpa_cudnn_kernel_tflops"]) for r in rows)
    x = np.arange(len(STEPS))
    labels = []             # per panel: [(the bar's label, the bar's height)]
    for ax, (d, causal) in zip(axes.flat, panels):
        sel = [r for r in rows if (r["d"], r["causal"]) == (d, causal)]
        by = {r["step"]: r for r in sel}
        labels.append([])
        ys = [by[s.key]["kernel_tflops"] for s in STEPS]
        bars = ax.bar(x, ys, width=0.62, color=[STEP_COLOURS[s.key] for s in STEPS], edgecolor="white")
        for b, s in zip(bars, STEPS):
            r = by[s.key]
            # on the bar's top for now: _stand_labels lifts it over a reference line in its way
            a = ax.annotate(f"{r['kernel_tflops']:.0f}\n{r['kernel_vs_sdpa_cudnn']:.2f}x",
                            (b.get_x() + b.get_width() / 2, b.get_height()), xytext=(0, LABEL_GAP),
                            textcoords="offset points", ha="center", va="bottom", fontsize=pt(8), linespacing=1.1,
                            zorder=5, bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.6, "alpha": 0.85})
            labels[-1].append((a, b.get_height()))
        r0 = sel[0]
        ax.axhline(r0["sdpa_cudnn_kernel_tflops"], color="#9467bd", ls="--", lw=1.1,
                   label=f"SDPA-cuDNN {r0['sdpa_cudnn_kernel_tflops']:.0f}")
        ax.axhline(r0["sdpa_flash_kernel_tflops"], color="#1f77b4", ls=":", lw=1.3,
                   label=f"SDPA-flash (FA2) {r0['sdpa_flash_kernel_tflops']:.0f}")
        ax.set_xticks(x, [STEP_TICKS[s.key] for s in STEPS])
        ax.set_ylim(0, top * 1.32)
        ax.tick_params(labelsize=pt(8))
        fa3 = by["pingpong"]
        title = (f"d = {d}, {'causal' if causal else 'no mask'}, N = {r0['N']:,}: blocks {by['wgmma']['Br']}×"
                 f"{by['wgmma']['Bc']} (FA2), {fa3['Br']}×{fa3['Bc']} (fa3)")
        if text_width(title, pt(9)) > SAFE * 0.8 * figsize[0] * 72 / ncol:      # wider than its panel: two lines
            title = title.replace(": ", ":\n", 1)
        ax.set_title(title, fontsize=pt(9), loc="left")
        ax.set_ylabel("TFLOP/s, kernel-only", fontsize=pt(8.5))
        ax.legend(loc="upper left", fontsize=pt(7.5), frameon=False, ncol=2, handlelength=2.2)
        ax.grid(axis="y", alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    _wrapped_suptitle(fig, "From the FlashAttention-2 kernel to FlashAttention-3, one step at a time: kernel-only "
                      "TFLOP/s (CUDA-graph replay of 10 calls, median of 7)\nabove each bar: TFLOP/s and cuDNN's time "
                      f"÷ the step's. Every bar from one run:\n{probe_label(rec)}", pt(9.5))
    shown = list(axes.flat)[:len(panels)]
    ylim, anchors = None, None
    for _ in range(8):      # the limit follows the axes' height, which follows the tick labels, and the labels'
        fig.tight_layout(rect=(0, 0, 1, 0.99))      # anchors follow the limit (a line is nearer in points)
        now = [_stand_labels(fig, ax, *zip(*labs)) for ax, labs in zip(shown, labels)]
        want = _bar_room(fig, shown, [max(a) for a in now], top)
        if now == anchors and ylim is not None and abs(want - ylim) <= 1e-9 * want:
            break
        anchors, ylim = now, want
        for ax in shown:
            ax.set_ylim(0, ylim)
    else:                   # no fixed point in 8 rounds: lay out and stand the labels at the last limit
        fig.tight_layout(rect=(0, 0, 1, 0.99))
        for ax, labs in zip(shown, labels):
            _stand_labels(fig, ax, *zip(*labs))
    return fig


def plot_fa3_benchmark(res: dict, *, figsize=(11, 7)):
    """The benchmark figure of the module docstring; returns the Figure."""
    if not isinstance(res, dict) or "bench" not in res:
        raise ValueError("expected an 'mma' results dict with 'bench' rows (flashviz.gpu.latest_results('mma'))")
    rows = fa3_bench_table(res)
    if not rows:
        raise ValueError(f"{res.get('source_file', 'the results')} hold no benchmark row with fa3 times")
    panels = _panels({(r["d"], r["causal"]) for r in rows})
    pt = style.pt
    ncol = 2 if len(panels) > 1 else 1
    fig, axes = plt.subplots(-(-len(panels) // ncol), ncol, figsize=figsize, squeeze=False, sharex=True, sharey=True,
                             dpi=style.fit_dpi(figsize[0]))
    for ax, (d, causal) in zip(axes.flat, panels):
        sel = [r for r in rows if (r["d"], r["causal"]) == (d, causal)]
        Ns = [r["N"] for r in sel]
        ax.axhspan(1 - RUN_NOISE, 1 + RUN_NOISE, color="0.88", lw=0, zorder=0)
        ax.axhline(1.0, color="#9467bd", lw=1.1, ls="--")
        for impl, label, colour in BENCH_SERIES:
            ax.plot(Ns, [r[f"{impl}_call_vs_sdpa_cudnn"] for r in sel], "-o", color=colour, ms=4,
                    lw=1.8 if impl == "fa3" else 1.2, label=f"{label}, public call")
            ax.plot(Ns, [r[f"{impl}_kernel_vs_sdpa_cudnn"] for r in sel], ":o", color=colour, ms=4.5, mfc="white",
                    lw=1.1, label=f"{label}, kernel-only")
        ax.set_xscale("log", base=2)
        ax.set_xticks(Ns, [f"{n // 1024}k" if n >= 1024 else str(n) for n in Ns])
        ax.set_title(f"d = {d}, {'causal' if causal else 'no mask'}", fontsize=pt(9.5), loc="left")
        ax.tick_params(labelsize=pt(8))
        ax.grid(True, alpha=0.3)
    for ax in axes[:, 0]:
        ax.set_ylabel("cuDNN's time ÷ theirs", fontsize=pt(9))
    for ax in axes[-1, :]:
        ax.set_xlabel("sequence length N (B·N = 16k tokens)", fontsize=pt(9))
    handles, labels = axes.flat[0].get_legend_handles_labels()
    _wrapped_suptitle(fig, "Against SDPA-cuDNN (dashed line at 1: as fast as cuDNN; grey band: ±"
                      f"{100 * RUN_NOISE:.0f} %, run-to-run noise)\n{run_label(res)}, fp16\nsolid, filled: public "
                      "call (CUDA events, median); dotted, hollow: kernel-only (the profiler's kernel time, median)",
                      pt(9.5))
    # three columns: one implementation each (public call above kernel-only); two: the public
    # calls in the first, kernel-only in the second (a legend fills its columns top to bottom)
    calls, kernels = range(0, len(handles), 2), range(1, len(handles), 2)
    by_method = [*calls, *kernels]
    _, h = _fit_legend(fig, [(3, handles, labels),
                             (2, [handles[k] for k in by_method], [labels[k] for k in by_method])], pt(8))
    fig.tight_layout(rect=(0, (h + PAD + 4) / (fig.get_figheight() * 72), 1, 1))
    return fig
