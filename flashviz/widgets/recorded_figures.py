"""RecordedFigures: the recorded GPU results of chapter 7 as figures, for class and app mode.

Three tabs drawn from the committed JSON (no GPU needed): the benchmark against
FlashAttention-2 and cuDNN (``views.bench_plot.plot_mma_benchmark``), the block sweep at
d = 64 (``plot_block_sweep``) and the DRAM bytes measured with Nsight Compute beside the IO
model (``plot_dram``), each with a one-line caption whose numbers are computed from the same
JSON. Figures are rendered once to PNG (ipywidgets.Image), so they show in Voilà and on a
projector without an interactive canvas; ``text_scale`` draws their texts larger (the app's
presenter mode), built inside ``views.style.scaled_text``.
"""

from __future__ import annotations

import io

import ipywidgets as W

from .. import _checks
from ..gpu.results import compulsory_bytes, latest_results, mma_sweep, mma_table, ratio_span, recorded_label
from ..views.style import scaled_text
from . import registry
from .base import close_widget

#: (figure name, recording labels, size scale, dpi, text scale) -> PNG bytes, kept per process
_PNGS: dict = {}


def _png(fig, dpi: int) -> bytes:
    import matplotlib.pyplot as plt
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    plt.close(fig)
    return buf.getvalue()


def captions(mma: dict | None, dram: dict | None) -> dict:
    """{"benchmark", "sweep", "dram"}: one line each, computed from the results dicts, each
    naming its method: the benchmark's ratios by public call (CUDA events, median; the
    headline) with kernel-only beside them, the sweep's times kernel-only."""
    out = {"benchmark": "", "sweep": "", "dram": ""}
    rows = [r for r in mma_table(mma) if r["N"] >= 2048]
    fa2, fa2_k = ratio_span(rows, "wgmma_call_vs_sdpa_flash"), ratio_span(rows, "wgmma_kernel_vs_sdpa_flash")
    cu, cu_k = ratio_span(rows, "wgmma_call_vs_sdpa_cudnn"), ratio_span(rows, "wgmma_kernel_vs_sdpa_cudnn")
    if fa2:
        def span(s):
            return f"{s[0]:.2f}–{s[1]:.2f}x"
        out["benchmark"] = (f"For N ≥ 2048, by public call (CUDA events, median), the wgmma kernel is {span(fa2)} as "
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


class RecordedFigures:
    """The recorded tensor-core results as three captioned figures in tabs.

    figsize: (width, height) in inches of each figure (default (10, 6.5) for the benchmark,
    (10, 3.8) for the others, scaled together); dpi: resolution of the PNGs (default 90);
    key: registry key (re-running a cell replaces the widget); text_scale: every text of the
    figures at this many times its notebook size (0.5–2.5, default 1; the app's presenter mode
    uses 1.4; the figures lay themselves out for it on the same inches). Without recorded
    results the widget says so. ``figure(name)`` returns a tab's figure as a new matplotlib
    Figure. Raises a one-line ValueError for a figsize or dpi out of range (see
    flashviz._checks: sides of 1–50 inches, 20–600 dpi, at most 8 million pixels a figure),
    TypeError / ValueError for a bad text_scale.
    """

    def __init__(self, *, figsize=None, dpi: int | None = None, key=None, text_scale: float = 1.0):
        from ..views import bench_plot as bp

        dpi = _checks.check_dpi(90 if dpi is None else dpi)
        self.text_scale = _checks.check_text_scale(text_scale)
        scale = 1.0
        if figsize is not None:
            scale = _checks.check_figsize(figsize)[0] / 10.0
        w, h = round(10 * scale * dpi), round(6.5 * scale * dpi)   # the largest of the three figures
        if w * h > _checks.MAX_FIG_PIXELS:
            raise ValueError(f"figsize {10 * scale:g} in wide at dpi {dpi:g} makes a {w:,} × {h:,} pixel figure; at most "
                             f"{_checks.MAX_FIG_PIXELS / 1e6:g} million pixels can be drawn in reasonable time: "
                             f"lower figsize or dpi")
        _checks.check_key(key)
        self._key = registry.caller_key() if key is None else key
        registry.register("RecordedFigures", self._key, self)
        mma, dram = latest_results("mma"), latest_results("dram")
        self.captions = captions(mma, dram)
        self._draws = {
            "benchmark": lambda: bp.plot_mma_benchmark(mma, figsize=(10 * scale, 6.5 * scale)),
            "sweep": lambda: bp.plot_block_sweep(mma, d=64, figsize=(10 * scale, 3.8 * scale)),
            "dram": lambda: bp.plot_dram(dram, figsize=(10 * scale, 3.8 * scale))}
        self._png_key = (recorded_label(mma) if mma else None, recorded_label(dram) if dram else None, scale, int(dpi),
                         self.text_scale)
        pages, titles = [], []
        for name, title in (("benchmark", "vs FlashAttention-2"), ("sweep", "block sizes"), ("dram", "DRAM bytes (ncu)")):
            pages.append(W.VBox([W.HTML(f"<div style='font-size:13px'>{self.captions[name]}</div>"),
                                 W.HTML("<i>drawing…</i>")]))
            titles.append(title)
        self.tabs = W.Tab(children=pages, titles=tuple(titles))
        label = recorded_label(mma) if mma else "no recording"
        self.widget = W.VBox([W.HTML(f"<b>Recorded on a GPU</b> — {label}"), self.tabs])
        # a tab's figure is drawn when the tab is first shown (the first now), and kept per
        # process: opening the chapter again, or another tab, costs no drawing
        self.tabs.observe(lambda change: self._show(change["new"]), names="selected_index")
        self._show(0)

    NAMES = ("benchmark", "sweep", "dram")

    def figure(self, name: str):
        """A new matplotlib Figure of tab ``name`` ("benchmark", "sweep", "dram") at this widget's
        size and text scale (the caller closes it). Raises ValueError for another name, or when
        the installation holds no recording of that kind."""
        if name not in self.NAMES:
            raise ValueError(f"name must be one of {self.NAMES}, got {name!r}")
        with scaled_text(self.text_scale):
            return self._draws[name]()

    def _show(self, index) -> None:
        if index is None:
            return
        name = self.NAMES[index]
        page = self.tabs.children[index]
        if isinstance(page.children[1], W.Image):
            return
        key = (name, *self._png_key)
        png = _PNGS.get(key)
        if png is None:
            try:
                png = _png(self.figure(name), self._png_key[3])
            except (ValueError, TypeError):          # no recording of this kind in the installation
                png = b""
            if len(_PNGS) > 32:
                _PNGS.clear()
            _PNGS[key] = png
        old = page.children[1]
        page.children = [page.children[0], W.Image(value=png, format="png") if png else
                         W.HTML("<i>No recorded measurement of this kind in this installation.</i>")]
        close_widget(old)

    def image(self, name: str):
        """The figure of tab ``name`` ("benchmark", "sweep", "dram") as a widget: an Image with
        PNG bytes, drawn now if its tab has not been shown yet (or an HTML note without a
        recording). Raises ValueError for another name."""
        if name not in self.NAMES:
            raise ValueError(f"name must be one of {self.NAMES}, got {name!r}")
        index = self.NAMES.index(name)
        self._show(index)
        return self.tabs.children[index].children[1]

    def close(self):
        """Close every child widget (idempotent)."""
        for page in list(self.tabs.children):
            for w in list(page.children):
                close_widget(w)
            close_widget(page)
        for w in list(self.widget.children):
            close_widget(w)
        close_widget(self.widget)
        registry.unregister("RecordedFigures", self._key, self)

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)
