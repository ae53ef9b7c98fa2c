"""RecordedFigures: the recorded GPU results of chapter 7 as figures, for class and app mode.

Three tabs drawn from the committed JSON (no GPU needed): the benchmark against
FlashAttention-2 and cuDNN (``views.bench_plot.plot_mma_benchmark``), the block sweep at
d = 64 (``plot_block_sweep``) and the DRAM bytes measured with Nsight Compute beside the IO
model (``plot_dram``), each with a one-line caption whose numbers are computed from the same
JSON. Figures are rendered once to PNG (ipywidgets.Image), so they show in Voilà and on a
projector without an interactive canvas; ``text_scale`` draws their texts larger (the app's
presenter mode), built inside ``views.style.scaled_text``. The tabs, the PNG cache and the
argument checks come from ``figure_tabs.FigureTabs``.
"""

from __future__ import annotations

from ..records.results import (
    SUMMARY_FROM_N,
    compulsory_bytes,
    latest_results,
    mma_sweep,
    mma_table,
    ratio_span,
    recorded_label,
)
from .figure_tabs import FigureTabs, Loaded


def captions(mma: dict | None, dram: dict | None) -> dict:
    """{"benchmark", "sweep", "dram"}: one line each, computed from the results dicts, each
    naming its method: the benchmark's ratios by public call (CUDA events, median; the
    headline) with kernel-only beside them, the sweep's times kernel-only."""
    out = {"benchmark": "", "sweep": "", "dram": ""}
    from_n = SUMMARY_FROM_N["wgmma"]           # the README's and chapter 7's range
    rows = [r for r in mma_table(mma) if r["N"] >= from_n]
    fa2, fa2_k = ratio_span(rows, "wgmma_call_vs_sdpa_flash"), ratio_span(rows, "wgmma_kernel_vs_sdpa_flash")
    cu, cu_k = ratio_span(rows, "wgmma_call_vs_sdpa_cudnn"), ratio_span(rows, "wgmma_kernel_vs_sdpa_cudnn")
    if fa2:
        def span(s):
            return f"{s[0]:.2f}–{s[1]:.2f}x"
        out["benchmark"] = (f"For N ≥ {from_n}, by public call (CUDA events, median), the wgmma kernel is {span(fa2)} as "
                            f"fast as FlashAttention-2 (SDPA flash)" + (f" and {span(cu)} cuDNN" if cu else "")
                            + (f"; kernel-only (profiler): {span(fa2_k)}" + (f" and {span(cu_k)}" if cu_k else "")
                               if fa2_k else "") + ".")
    sweep = mma_sweep(mma, variant="wgmma", d=64, causal=False)
    if sweep:
        fast, slow = min(sweep, key=lambda r: r["kernel_ms"]), max(sweep, key=lambda r: r["kernel_ms"])
        out["sweep"] = (f"d = 64, kernel-only time (profiler, median): {fast['Br']}×{fast['Bc']} is fastest "
                        f"({fast['kernel_ms']:.2f} ms), {slow['Br']}×{slow['Bc']} slowest ({slow['kernel_ms']:.2f} ms); "
                        f"the IO model's bytes halve from Br = 64 to 128.")
    meas = [r for r in (dram or {}).get("rows", []) if r.get("impl") == "mma" and "dram_bytes" in r]
    if meas:
        need = compulsory_bytes(meas[0])
        out["dram"] = (f"Measured {min(r['dram_bytes'] for r in meas) / 1e6:.0f}–"
                       f"{max(r['dram_bytes'] for r in meas) / 1e6:.0f} MB against the model's "
                       f"{min(r['model_hbm_bytes'] for r in meas) / 1e9:.1f}–{max(r['model_hbm_bytes'] for r in meas) / 1e9:.1f} GB: "
                       f"≈ the {need / 1e6:.0f} MB that must move at all — the L2 cache serves the K/V re-reads.")
    return out


class RecordedFigures(FigureTabs):
    """The recorded tensor-core results as three captioned figures in tabs (a FigureTabs).

    figsize: (width, height) in inches of each figure (default (10, 6.5) for the benchmark,
    (10, 3.8) for the others, scaled together); dpi: resolution of the PNGs (default 90: 900 px wide);
    key: registry key (re-running a cell replaces the widget); text_scale: every text of the
    figures at this many times its notebook size (0.5–2.5, default 1; the app's presenter mode
    uses 1.4; the figures lay themselves out for it on the same inches). Without recorded
    results the widget says so. ``figure(name)`` returns a tab's figure as a new matplotlib
    Figure. Raises a one-line ValueError for a figsize or dpi out of range (see
    flashviz.widgets.checks: sides of 1–50 inches, 20–600 dpi, at most 8 million pixels a figure),
    TypeError / ValueError for a bad text_scale.
    """

    TABS = {"benchmark": ("vs FlashAttention-2", (10, 6.5)), "sweep": ("block sizes", (10, 3.8)),
            "dram": ("DRAM bytes (ncu)", (10, 3.8))}
    NAMES = tuple(TABS)

    def _load(self) -> Loaded:
        from ..views import bench_plot as bp

        mma, dram = latest_results("mma"), latest_results("dram")
        label = recorded_label(mma) if mma else "no recording"
        return Loaded(header=f"<b>Recorded on a GPU</b> — {label}", captions=captions(mma, dram),
                      draws={"benchmark": lambda figsize: bp.plot_mma_benchmark(mma, figsize=figsize,
                                                                               headline_impl="wgmma"),
                             "sweep": lambda figsize: bp.plot_block_sweep(mma, d=64, figsize=figsize),
                             "dram": lambda figsize: bp.plot_dram(dram, figsize=figsize)},
                      labels=(recorded_label(mma) if mma else None, recorded_label(dram) if dram else None))
