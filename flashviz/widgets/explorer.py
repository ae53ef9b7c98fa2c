"""TileExplorer: the main widget. Watch FlashAttention's tiled forward pass step by step.

Controls (ipywidgets) drive a recorded run: changing N, d, Br, Bc, the input source,
causal, rescale, the element type or the SRAM budget re-runs ``flash_forward(...,
record=True)``; Play / the frame slider replay its trace through the views. Frames are
drawn by widget events only (no blocking loops), with blitting.
"""

from __future__ import annotations

import ipywidgets as W
import numpy as np

from .. import data as fvdata
from ..reference import attention
from ..replay import Replay
from ..tiled import flash_forward
from ..views import SRAM_BUDGETS, ExplorerFigure
from ..views.style import sci_html
from .base import NOTEBOOK_DPI, NOTEBOOK_FIGSIZE, FrameWidget, check_bool, check_int
from .options import (  # noqa: F401 (re-exported)
    BLOCKS,
    DTYPES,
    HEAD_DIMS,
    MAX_TILES,
    check_tiled_inputs,
    match_option,
    tile_controls,
    tile_problem,
)

#: Longest sequence the explorer records: N = 2,048. It draws N × N score matrices as images and
#: records every tile step (at most MAX_TILES tiles), which takes about two seconds at N = 2,048.
MAX_N = 2048


class TileExplorer(FrameWidget):
    """Interactive explainer of FlashAttention's tiled forward pass (FA2 loop order).

    Parameters
    ----------
    N : int, 1..2048 — sequence length (Nq = Nk = N); "real" inputs allow N <= 512.
    d : int — head dimension, one of 8, 16, 32, 64, 128 ("real" inputs have d = 32).
    Br, Bc : int — block rows / block cols, powers of two 1..256.
    causal : bool — bottom-right aligned causal mask.
    source : "real" | "random" | "adversarial" — where Q, K, V come from (flashviz.data).
    rescale : bool — False is the "break it" mode (no exp(m_old − m_new) correction).
    dtype : "float32" | "float16" | "float64" (or the dropdown's label, or a NumPy dtype) — the
        element type; bytes are counted in its size.
    sram_budget : "H100/H200" | "A100" | "toy" (or a key of flashviz.views.SRAM_BUDGETS).
    canvas : "auto" | "ipympl" | "png" — "png" draws static frames into an Image widget
        (for front ends that cannot show ipympl); "auto" uses ipympl in Jupyter.
    figsize, dpi : figure size in inches and dots per inch (NOTEBOOK_FIGSIZE, 11 × 5.25 at NOTEBOOK_DPI,
        84 dpi: 924 × 441 px, which fits JupyterLab's output area beside its file browser in a
        1366×768 window, with the controls above and below it in the 647 px of notebook shown).
    text_scale : every text of the figure at this multiple of its notebook size (0.5–2.5;
        the app's presenter mode uses 1.4); the layout makes room for it.
    key : anything hashable — widgets with the same key replace each other; by default the
        notebook cell and line that created it.

    Public: ``n_frames``, ``show_frame(k)``, ``close()``, ``widget`` (the ipywidgets box),
    ``result`` (the FlashResult drawn), ``inputs`` (its Q, K, V: (N, d) arrays of the chosen
    element type, and a one-line description of where they came from), ``state`` (the FrameState
    of the current frame).

    Raises TypeError/ValueError (one line) for arguments outside those ranges, including a
    configuration of more than 4096 tiles; sliders moved to such a configuration keep the
    previous run and say why in the status line.
    """

    max_N = MAX_N
    kind = "TileExplorer"
    export_stem = "flashviz-tiles"

    def __init__(self, N: int = 256, d: int = 32, Br: int = 32, Bc: int = 32, causal: bool = False,
                 source: str = "real", *, rescale: bool = True, dtype: str = "float32 (4 B)",
                 sram_budget: str = next(iter(SRAM_BUDGETS)), canvas: str = "auto", seed: int = 0,
                 figsize=NOTEBOOK_FIGSIZE, dpi: float = NOTEBOOK_DPI, key=None, text_scale: float = 1.0):
        N, d, Br, Bc = check_tiled_inputs(source, N, d, Br, Bc, max_N=MAX_N)
        dtype = match_option(dtype, DTYPES, "dtype")
        sram_budget = match_option(sram_budget, SRAM_BUDGETS, "sram_budget")
        causal, rescale = check_bool(causal, "causal"), check_bool(rescale, "rescale")
        seed = check_int(seed, "seed", 0)
        super().__init__(canvas=canvas, figsize=figsize, dpi=dpi, key=key, text_scale=text_scale)
        try:
            self._build(N, d, Br, Bc, causal, source, rescale, dtype, sram_budget, seed)
        except BaseException:
            self.close()       # a failed constructor leaves no figure behind
            raise

    def _build(self, N, d, Br, Bc, causal, source, rescale, dtype, sram_budget, seed):
        self.seed = seed
        self.result = None
        self.inputs = None
        self.replay = None

        self.source = W.Dropdown(options=list(fvdata.SOURCES), value=source, description="inputs",
                                 layout=W.Layout(width="190px"))
        self.N = W.IntSlider(value=N, min=1, max=512 if source == "real" else MAX_N, step=1, description="N",
                             continuous_update=False, layout=W.Layout(width="260px"))
        self.d, self.Br, self.Bc, self.causal = tile_controls(d, Br, Bc, causal, source)
        self.rescale = W.Checkbox(value=rescale, description="rescale (untick: break it)", indent=False,
                                  layout=W.Layout(width="200px"))
        self.dtype = W.Dropdown(options=list(DTYPES), value=dtype, description="elements",
                                layout=W.Layout(width="210px"))
        self.budget = W.Dropdown(options=list(SRAM_BUDGETS), value=sram_budget, description="SRAM",
                                 layout=W.Layout(width="300px"))
        self._watch(self.N, self.d, self.Br, self.Bc, self.causal, self.rescale, self.dtype, self.budget)
        self.source.observe(self._on_source, names="value")
        self._layout(W.HBox([self.source, self.N, self.d, self.Br, self.Bc]),
                     W.HBox([self.causal, self.rescale, self.dtype, self.budget]))
        self._rebuild()

    @property
    def _fig_view(self):
        return self._view

    def _config_problem(self):
        return tile_problem(self.N.value, self.N.value, self.Br.value, self.Bc.value)

    def _make_view(self):
        N, d = self.N.value, self.d.value
        Q, K, V, desc = fvdata.get_qkv(self.source.value, N, d, seed=self.seed)
        dt = DTYPES[self.dtype.value]
        Q, K, V = (x.astype(dt) for x in (Q, K, V))
        r = flash_forward(Q, K, V, Br=self.Br.value, Bc=self.Bc.value, causal=self.causal.value,
                          rescale=self.rescale.value, record=True)
        O_ref = attention(Q, K, V, causal=self.causal.value)
        err = float(np.max(np.abs(r.O.astype(np.float64) - O_ref)))
        rel = err / max(float(np.max(np.abs(O_ref))), 1e-300)
        self.result, self.replay = r, Replay(r.trace)
        self.inputs = (Q, K, V, desc)
        if self.rescale.value:
            check = f"final O: max |O − O_ref| = {err:.1e} (vs float64 dense attention: exact up to rounding)"
            self.status.value = f"<span style='color:#2ca02c'>✓ {sci_html(check)}</span>"
        else:
            check = (f"rescale OFF: final O has max |O − O_ref| = {err:.3g} ({100 * rel:.0f}% of max |O|) — "
                     f"{'WRONG' if rel > 1e-3 else 'still right: no row max grew after its first block'}")
            self.status.value = f"<span style='color:#d62728'>✗ {sci_html(check)}</span>"
        caption = (f"inputs: {desc}  ·  N = {N}, d = {d}, Br = {self.Br.value}, Bc = {self.Bc.value}, "
                   f"Tr = {r.trace.Tr}, Tc = {r.trace.Tc}{', causal' if self.causal.value else ''}\n{check}")
        view = ExplorerFigure(self.fig, self.replay, caption=caption,
                              sram_budget=SRAM_BUDGETS[self.budget.value], budget_name=self.budget.value)
        view.enable_blitting()
        return view
