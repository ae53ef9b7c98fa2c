"""Figures of the recorded GPU measurements: the tensor-core benchmark, the block-size sweep
and the DRAM bytes measured with Nsight Compute next to the IO model.

Every function takes a results dict as committed under benchmarks/results (the kinds of
``flashviz.records.results.latest_results``: "mma" and "dram") and returns a new matplotlib
Figure; nothing here runs on a GPU. Titles carry the device and the date of the run, and every
time or rate says its method: the benchmark's TFLOP/s are by public call (CUDA events, median),
the block sweep's times kernel-only (the profiler's kernel time per call, median).

Text sizes go through ``style.pt``: built inside ``style.scaled_text(scale)`` every text is
``scale`` times its notebook size, and above ``LARGE_TEXT`` (presenter mode) the figures lay
themselves out for it (titles on more lines, shorter axis labels, fewer ticks, legends in
fewer columns) on the same inches.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

from ..records.results import METHOD_NAMES, mma_sweep, mma_table
from . import style
from .style import fmt_bytes
from .text import presenter

#: above this text scale (style.text_scale()) the figures use their large-text layout
LARGE_TEXT = 1.15


def _large() -> bool:
    return presenter(LARGE_TEXT)


def _tick_sizes(*axes, size: float = 10) -> None:
    """Tick labels at ``style.pt(size)`` (they are made at draw time, outside scaled_text)."""
    for ax in axes:
        ax.tick_params(which="both", labelsize=style.pt(size))

#: (key in the results, label, colour, line style)
SERIES = (("fa3", "flashviz fa3 (Hopper default: FlashAttention-3's design)", "#d62728", "-"),
          ("wgmma", "flashviz wgmma (Hopper, FlashAttention-2's design)", "#e377c2", "-"),
          ("mmasync", "flashviz mma.sync (sm_80+)", "#ff7f0e", "-"),
          ("sdpa_flash", "SDPA flash = FlashAttention-2", "#1f77b4", "--"),
          ("sdpa_cudnn", "SDPA cuDNN", "#9467bd", "--"),
          ("sdpa_efficient", "SDPA memory-efficient", "#8c564b", ":"),
          ("teaching", "teaching kernel, fp32", "#2ca02c", "-."),
          ("naive", "naive CuPy, fp32", "#7f7f7f", "-."))


def run_label(res: dict) -> str:
    """'NVIDIA H200 · 2026-11-29 · torch 2.11.0 · CuPy 14.2.0' for a results dict."""
    env = (res or {}).get("env", {})
    parts = [env.get("device", "unknown GPU"), env.get("date", "unknown date")]
    if env.get("torch"):
        parts.append(f"torch {env['torch']}")
    if env.get("cupy"):
        parts.append(f"CuPy {env['cupy']}")
    return " · ".join(parts)


def _check(res, kind_key):
    if not isinstance(res, dict) or kind_key not in res:
        raise ValueError(f"expected a recorded results dict with {kind_key!r} (flashviz.gpu.latest_results), "
                         f"got {type(res).__name__}")


def headline(rows: list[dict]) -> str:
    """Which of our forward kernels a figure draws as the headline: "fa3" (the default on Hopper,
    ``flash_forward_mma``) where any of the rows timed it, else "wgmma"."""
    return "fa3" if any("fa3_call_ms" in r for r in rows) else "wgmma"


def plot_mma_benchmark(res: dict, *, figsize=(11, 7.5), kernel_only: bool = False, headline_impl: str | None = None):
    """TFLOP/s by public call (FLOPs over the public call's time: CUDA events, median) against
    N for every implementation, one panel per (d, causal), from the "bench" rows of an "mma"
    results dict (``mma_table``'s <impl>_call_tflops; B·N = 16k tokens, H = 2048/d; FLOPs
    4·B·H·N²·d, halved for causal). Our headline, drawn bold, is ``headline_impl`` ("fa3" or
    "wgmma"; chapter 7 names its own kernel) or, when None, the default on Hopper: fa3 in a panel
    whose rows hold it, else wgmma (``headline``). kernel_only=True adds the headline's kernel-only
    TFLOP/s (profiler kernel time) as a thin dotted line with hollow markers, labelled so.
    The dotted black line is the device's measured matmul rate in the rows' dtype. Raises
    ValueError when res has no "bench" rows."""
    _check(res, "bench")
    if not res["bench"]:
        raise ValueError("the results hold no benchmark rows")
    if headline_impl not in (None, "fa3", "wgmma"):
        raise ValueError(f"headline_impl must be None, 'fa3' or 'wgmma', got {headline_impl!r}")
    rows = mma_table(res)
    ds = sorted({r["d"] for r in rows})
    fig, axes = plt.subplots(len(ds), 2, figsize=figsize, squeeze=False, sharex=True, dpi=style.fit_dpi(figsize[0]))
    dtype = rows[0].get("dtype", "float16")
    short = "bf16" if dtype == "bfloat16" else "fp16"
    mm = res.get("ceilings", {}).get(f"matmul_{short}_TFLOPs")
    large = _large()
    yticks = [1, 3, 10, 30, 100, 300, 1000] if large else [2, 5, 10, 20, 50, 100, 200, 300, 500, 800]
    for a, d in enumerate(ds):
        for b, causal in enumerate((False, True)):
            ax = axes[a][b]
            sel = sorted((r for r in rows if r["d"] == d and bool(r["causal"]) == causal), key=lambda r: r["N"])
            top = headline_impl or headline(sel)
            for key, label, colour, ls in SERIES:
                pts = [(r["N"], r[key + "_call_tflops"]) for r in sel if key + "_call_tflops" in r]
                if pts:
                    x, y = zip(*pts)
                    ax.plot(x, y, ls, color=colour, marker="o", ms=3.5, lw=1.8 if key == top else 1.2,
                            label=label)
            pts = [(r["N"], r[top + "_kernel_tflops"]) for r in sel if top + "_kernel_tflops" in r]
            if kernel_only and pts:
                x, y = zip(*pts)
                ax.plot(x, y, ":", color=dict((k, c) for k, _, c, _ in SERIES)[top], marker="o", mfc="white",
                        ms=4.5, lw=1.0, label=f"flashviz {top}, kernel-only (profiler)")
            if mm:
                ax.axhline(mm, color="black", lw=0.8, ls=":", label=f"{short} matmul ceiling ({mm:.0f})")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            Ns = sorted({r["N"] for r in sel})
            ax.set_xticks(Ns, [f"{n // 1024}k" if n >= 1024 else str(n) for n in Ns])
            ax.yaxis.set_major_locator(FixedLocator(yticks))
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            ax.yaxis.set_minor_formatter(NullFormatter())
            ax.set_title(f"d = {d}, {'causal' if causal else 'no mask'}", fontsize=style.pt(10))
            ax.grid(True, which="both", alpha=0.3)
            _tick_sizes(ax)
            if b == 0:       # large text: the title says "by public call"
                ax.set_ylabel("TFLOP/s" if large else "TFLOP/s (public call)", fontsize=style.pt(10))
            if a == len(ds) - 1:
                ax.set_xlabel("sequence length N", fontsize=style.pt(10))
    handles, labels = axes[0][0].get_legend_handles_labels()
    what = f"Attention forward, {short}, 16k tokens per batch"
    fig.suptitle(f"{what}\nTFLOP/s by {METHOD_NAMES['call']}\n{run_label(res)}" if large else
                 f"{what} — TFLOP/s by {METHOD_NAMES['call']}\n{run_label(res)}", fontsize=style.pt(11))
    fig.tight_layout(rect=(0, 0.125 if large else 0.09, 1, 1))
    fig.legend(handles, labels, loc="lower center", ncol=3 if large else 4, fontsize=style.pt(7.5), frameon=False)
    return fig


def plot_block_sweep(res: dict, *, d: int = 64, variant: str = "wgmma", figsize=(10, 3.8)):
    """The paper's block-size experiment on the GPU: for one d, the kernel's kernel-only time
    (the profiler's kernel time per call, median; ``mma_sweep``'s kernel_ms) for every (Br, Bc)
    (bars; causal and not) beside the IO model's HBM bytes for the same blocks (line, right
    axis). Raises ValueError when res has no sweep rows for d / variant."""
    _check(res, "sweep")
    rows = [r for causal in (False, True) for r in mma_sweep(res, variant=variant, d=d, causal=causal)]
    if not rows:
        raise ValueError(f"no recorded sweep rows for variant={variant!r}, d={d}")
    blocks = sorted({(r["Br"], r["Bc"]) for r in rows})
    fig, ax = plt.subplots(figsize=figsize, dpi=style.fit_dpi(figsize[0]))
    x = np.arange(len(blocks))
    for k, causal in enumerate((False, True)):
        by = {(r["Br"], r["Bc"]): r for r in rows if bool(r["causal"]) == causal}
        ms = [by[b]["kernel_ms"] if b in by else np.nan for b in blocks]
        ax.bar(x + (k - 0.5) * 0.38, ms, 0.38, color="#d62728" if not causal else "#ff9896",
               label=f"kernel-only time, {'causal' if causal else 'no mask'} (ms)")
    large = _large()
    ax.set_xticks(x, [f"{br}×{bc}" for br, bc in blocks])
    ax.set_ylim(0, np.nanmax([r["kernel_ms"] for r in rows]) * (1.7 if large else 1.45))
    ax.set_xlabel("Br × Bc", fontsize=style.pt(10))
    ax.set_ylabel("kernel-only time (ms)" if large else "kernel-only time (ms; profiler, median)",
                  fontsize=style.pt(10))
    ax2 = ax.twinx()
    byn = {(r["Br"], r["Bc"]): r for r in rows if not r["causal"]}
    ax2.plot(x, [byn[b]["model_hbm_bytes"] / 1e9 if b in byn else np.nan for b in blocks], "k-o", ms=4,
             label="IO model: HBM bytes, no mask (GB)")
    ax2.set_ylabel("IO model HBM (GB)" if large else "IO model HBM traffic (GB)", fontsize=style.pt(10))
    ax2.set_ylim(0, None)
    _tick_sizes(ax, ax2)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, fontsize=style.pt(8), loc="upper center", ncol=2 if large else 3)
    ax2.set_ylim(0, max(r["model_hbm_bytes"] for r in rows) / 1e9 * (1.7 if large else 1.45))
    r0 = rows[0]
    what = f"{variant} kernel, N = {r0['N']}, d = {d}, B·H = {r0['B'] * r0['H']}, kernel-only times"
    ax.set_title(f"{what} (profiler, median)\n{run_label(res)}" if large else f"{what} — {run_label(res)}",
                 fontsize=style.pt(10))
    fig.tight_layout()
    return fig


def plot_dram(res: dict, *, figsize=(11, 4.2)):
    """DRAM bytes measured by Nsight Compute (dram__bytes_read.sum + dram__bytes_write.sum)
    next to the IO model's HBM bytes, for each profiled implementation and block size, log
    scale. Raises ValueError when res has no "rows"."""
    _check(res, "rows")
    rows = [r for r in res["rows"] if "dram_bytes" in r]
    if not rows:
        raise ValueError("the DRAM results hold no measured rows")
    fig, ax = plt.subplots(figsize=figsize, dpi=style.fit_dpi(figsize[0]))
    x = np.arange(len(rows))
    ax.bar(x - 0.2, [r["model_hbm_bytes"] for r in rows], 0.4, color="#bbbbbb", label="IO model (HBM bytes)")
    colours = {"mma": "#d62728", "teaching": "#2ca02c", "naive": "#7f7f7f"}
    labels = {"mma": "measured (ncu): wgmma fp16", "teaching": "measured (ncu): teaching fp32",
              "naive": "measured (ncu): naive fp32"}
    large = _large()
    if large:         # large text: one row of legend under the axes (the title says "by ncu")
        labels = {k: v.replace(" (ncu)", "") for k, v in labels.items()}
    for impl in dict.fromkeys(r["impl"] for r in rows):
        idx = [i for i, r in enumerate(rows) if r["impl"] == impl]
        ax.bar(x[idx] + 0.2, [rows[i]["dram_bytes"] for i in idx], 0.4, color=colours.get(impl, "C0"),
               label=labels.get(impl, f"measured (ncu): {impl}"))
    names = {"mma": "wgmma\nfp16", "teaching": "teach.\nfp32", "naive": "naive\nfp32"}
    if large:      # large text: the block size only, on end (the colour says the implementation)
        ax.set_xticks(x, [f"{r['Br']}×{r['Bc']}" if r["Br"] else "S in HBM" for r in rows], fontsize=style.pt(7),
                      rotation=90)
    else:
        ax.set_xticks(x, [f"{r['Br']}×{r['Bc']}\n{names.get(r['impl'], r['impl'])}" if r["Br"] else
                          f"S in HBM\n{names.get(r['impl'], r['impl'])}" for r in rows], fontsize=style.pt(7))
    ax.set_yscale("log")
    ax.set_ylabel("bytes", fontsize=style.pt(10))
    ax.tick_params(axis="x", labelsize=style.pt(7))
    ax.tick_params(axis="y", which="both", labelsize=style.pt(10))
    for xi, r in zip(x, rows):
        ax.text(xi + 0.2, r["dram_bytes"] * 1.15, fmt_bytes(r["dram_bytes"]), ha="center", fontsize=style.pt(6.5),
                rotation=90, va="bottom")
    r0 = rows[0]
    what = f"One forward call, N = {r0['N']}, d = {r0['d']}, B·H = {r0['B'] * r0['H']}"
    top = max(max(r["dram_bytes"], r["model_hbm_bytes"]) for r in rows)
    if large:
        ax.set_title(f"{what}: DRAM bytes (ncu) per Br × Bc\n{run_label(res)}", fontsize=style.pt(10))
        ax.set_ylim(None, top * 12)
        fig.tight_layout(rect=(0, 0.1, 1, 1))
        handles, names_ = ax.get_legend_handles_labels()
        fig.legend(handles, names_, loc="lower center", ncol=len(handles), fontsize=style.pt(8), frameon=False,
                   handlelength=1.2, columnspacing=1.5)
        return fig
    ax.set_title(f"{what} — {run_label(res)}", fontsize=style.pt(10))
    ax.legend(fontsize=style.pt(8), loc="upper left", ncol=2)
    ax.set_ylim(None, top * 20)
    fig.tight_layout()
    return fig
