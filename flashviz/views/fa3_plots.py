"""Chapter 8's figures of the recorded FlashAttention-3 measurements (no GPU needed).

``plot_fa3_steps(rec)`` — from one probe record (``flashviz.gpu.fa3_records.latest_probe``): for
every (d, mask) it timed them at, the kernel-only TFLOP/s of each step from the FlashAttention-2
kernel to FlashAttention-3 (``fa3_records.STEPS``), bars, each labelled with its TFLOP/s and
its ratio to SDPA-cuDNN of the same row (cuDNN's time ÷ the step's); SDPA-cuDNN and SDPA-flash
as horizontal lines. Kernel-only = CUDA-graph replay of 10 public calls, median of 7 replays;
every bar of the figure comes from the one run named in the title.

``plot_fa3_benchmark(res)`` — from the full benchmark (an "mma" results dict,
``flashviz.gpu.latest_results("mma")``): against N, one panel per (d, mask), the ratio to
SDPA-cuDNN of fa3, of the wgmma kernel and of SDPA-flash, by public call (CUDA events, median;
solid lines, filled markers) and kernel-only (the profiler's kernel time, median; dotted,
hollow markers); a band of ±``RUN_NOISE`` around 1.

Both return a new Figure and raise ValueError (one line) for a record without the rows they
draw. Laid out for the notebook's text size.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from ..gpu.fa3_records import RUN_NOISE, STEPS, fa3_bench_table, probe_label, steps_table
from . import style
from .bench_plot import run_label

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


def plot_fa3_steps(rec: dict, *, figsize=(11, 6.4)):
    """The steps figure of the module docstring; returns the Figure."""
    if not isinstance(rec, dict) or "times" not in rec:
        raise ValueError("expected a probe record with 'times' rows (flashviz.gpu.fa3_records.latest_probe)")
    rows = steps_table(rec)
    if not rows:
        raise ValueError(f"{rec.get('source_file', 'the record')} holds no row that timed every step")
    panels = _panels({(r["d"], r["causal"]) for r in rows})
    pt = style.pt
    ncol = 2 if len(panels) > 1 else 1
    fig, axes = plt.subplots(-(-len(panels) // ncol), ncol, figsize=figsize, squeeze=False)
    top = max(max(r["kernel_tflops"], r["sdpa_cudnn_kernel_tflops"]) for r in rows)
    x = np.arange(len(STEPS))
    for ax, (d, causal) in zip(axes.flat, panels):
        sel = [r for r in rows if (r["d"], r["causal"]) == (d, causal)]
        by = {r["step"]: r for r in sel}
        ys = [by[s.key]["kernel_tflops"] for s in STEPS]
        bars = ax.bar(x, ys, width=0.62, color=[STEP_COLOURS[s.key] for s in STEPS], edgecolor="white")
        for b, s in zip(bars, STEPS):
            r = by[s.key]
            ax.text(b.get_x() + b.get_width() / 2, b.get_height() + 0.015 * top,
                    f"{r['kernel_tflops']:.0f}\n{r['kernel_vs_sdpa_cudnn']:.2f}x", ha="center", va="bottom",
                    fontsize=pt(8), linespacing=1.1, zorder=5,
                    bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.6, "alpha": 0.85})
        r0 = sel[0]
        ax.axhline(r0["sdpa_cudnn_kernel_tflops"], color="#9467bd", ls="--", lw=1.1,
                   label=f"SDPA-cuDNN {r0['sdpa_cudnn_kernel_tflops']:.0f}")
        ax.axhline(r0["sdpa_flash_kernel_tflops"], color="#1f77b4", ls=":", lw=1.3,
                   label=f"SDPA-flash (FA2) {r0['sdpa_flash_kernel_tflops']:.0f}")
        ax.set_xticks(x, [STEP_TICKS[s.key] for s in STEPS])
        ax.set_ylim(0, top * 1.32)
        ax.tick_params(labelsize=pt(8))
        fa3 = by["pingpong"]
        ax.set_title(f"d = {d}, {'causal' if causal else 'no mask'}, N = {r0['N']:,}: blocks {by['wgmma']['Br']}×"
                     f"{by['wgmma']['Bc']} (FA2), {fa3['Br']}×{fa3['Bc']} (fa3)", fontsize=pt(9), loc="left")
        ax.set_ylabel("TFLOP/s, kernel-only", fontsize=pt(8.5))
        ax.legend(loc="upper left", fontsize=pt(7.5), frameon=False, ncol=2, handlelength=2.2)
        ax.grid(axis="y", alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    fig.suptitle("From the FlashAttention-2 kernel to FlashAttention-3, one step at a time: kernel-only TFLOP/s "
                 "(CUDA-graph replay of 10 calls, median of 7)\nabove each bar: TFLOP/s and cuDNN's time ÷ the step's. "
                 f"Every bar from one run:\n{probe_label(rec)}", fontsize=pt(9.5), x=0.01, ha="left")
    fig.tight_layout(rect=(0, 0, 1, 0.99))
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
    fig, axes = plt.subplots(-(-len(panels) // ncol), ncol, figsize=figsize, squeeze=False, sharex=True, sharey=True)
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
    fig.suptitle("Against SDPA-cuDNN (dashed line at 1: as fast as cuDNN; grey band: ±"
                 f"{100 * RUN_NOISE:.0f} %, run-to-run noise)\n{run_label(res)}, fp16\nsolid, filled: public call "
                 "(CUDA events, median); dotted, hollow: kernel-only (the profiler's kernel time, median)",
                 fontsize=pt(9.5), x=0.01, ha="left")
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=pt(8), frameon=False)
    return fig
