"""LoopOrderExplorer (chapter 5): FA1 and FA2 on the same input, side by side, tile step by tile step.

Controls (N, d, Br, Bc, causal, input source) re-run ``flash_forward(..., record=True)`` twice,
with ``order="fa1"`` (the paper's Algorithm 1: key blocks outer) and ``order="fa2"``
(FlashAttention-2: query blocks outer); Play / the step slider replay both traces in lockstep
through ``views.loop_order_view.LoopOrderFigure``. The status line checks both outputs against
dense attention and both byte counts against ``iomodel.flash_forward_io``.
"""

from __future__ import annotations

import ipywidgets as W
import numpy as np

from .. import data as fvdata
from .. import iomodel
from ..reference import attention
from ..tiled import flash_forward
from ..views.loop_order_view import LoopOrderFigure
from .base import NOTEBOOK_DPI, NOTEBOOK_FIGSIZE, FrameWidget, check_bool, check_int
from .options import BLOCKS, HEAD_DIMS, MAX_TILES, check_blocks, check_tiled_inputs, tile_controls, tile_problem  # noqa: F401

#: Longest sequence: N = 512. Every frame redraws two tile grids and two runs are recorded
#: (FA1 and FA2), so steps and drawing cost twice the tile explorer's.
MAX_N = 512


class LoopOrderExplorer(FrameWidget):
    """FA1 (key blocks outer) and FA2 (query blocks outer) side by side, with their HBM traffic.

    Parameters
    ----------
    N : int, 1..512 — sequence length (Nq = Nk = N).
    d : int — head dimension, one of 8, 16, 32, 64, 128 ("real" inputs have d = 32).
    Br, Bc : int — block rows / block cols, powers of two 1..256; at most 4096 tiles.
    causal : bool — bottom-right aligned causal mask (both runs skip the same tiles).
    source : "real" | "random" | "adversarial" — where Q, K, V come from (flashviz.data.get_qkv).
    seed : int >= 0 — seed of the random and adversarial inputs.
    canvas, figsize, dpi, key, text_scale : as for every FrameWidget (see flashviz.widgets.base).

    Public: ``n_frames`` (computed tiles), ``show_frame(k)`` → LoopOrderState, ``results``
    ({"fa1": FlashResult, "fa2": FlashResult}), ``io_model`` (both orders' flash_forward_io),
    ``state``, ``close()``, ``widget``. Raises TypeError/ValueError (one line) for arguments
    outside those ranges; sliders moved to more than 4096 tiles keep the previous run and say why.
    """

    max_N = MAX_N
    kind = "LoopOrderExplorer"
    export_stem = "flashviz-loop-order"

    def __init__(self, N: int = 128, d: int = 32, Br: int = 32, Bc: int = 32, causal: bool = False,
                 source: str = "real", *, seed: int = 0, canvas: str = "auto", figsize=NOTEBOOK_FIGSIZE, dpi: float = NOTEBOOK_DPI,
                 key=None, text_scale: float = 1.0):
        N, d, Br, Bc = check_tiled_inputs(source, N, d, Br, Bc, max_N=MAX_N)
        causal = check_bool(causal, "causal")
        seed = check_int(seed, "seed", 0)
        super().__init__(canvas=canvas, figsize=figsize, dpi=dpi, key=key, text_scale=text_scale)
        try:
            self._build(N, d, Br, Bc, causal, source, seed)
        except BaseException:
            self.close()       # a failed constructor leaves no figure behind
            raise

    def _build(self, N, d, Br, Bc, causal, source, seed):
        self.seed = seed
        self.results, self.io_model = None, None
        self.source = W.Dropdown(options=list(fvdata.SOURCES), value=source, description="inputs",
                                 layout=W.Layout(width="190px"))
        self.N = W.IntSlider(value=N, min=1, max=MAX_N, description="N", continuous_update=False,
                             layout=W.Layout(width="260px"))
        self.d, self.Br, self.Bc, self.causal = tile_controls(d, Br, Bc, causal, source)
        self._watch(self.N, self.d, self.Br, self.Bc, self.causal)
        self.source.observe(self._on_source, names="value")
        self._layout(W.HBox([self.source, self.N, self.d]), W.HBox([self.Br, self.Bc, self.causal]))
        self._rebuild()

    def _config_problem(self):
        return tile_problem(self.N.value, self.N.value, self.Br.value, self.Bc.value)

    def _make_view(self):
        N, d, Br, Bc, causal = self.N.value, self.d.value, self.Br.value, self.Bc.value, self.causal.value
        Q, K, V, desc = fvdata.get_qkv(self.source.value, N, d, seed=self.seed)
        Q, K, V = (x.astype(np.float32) for x in (Q, K, V))
        self.results = {o: flash_forward(Q, K, V, Br=Br, Bc=Bc, causal=causal, order=o, record=True)
                        for o in ("fa1", "fa2")}
        self.io_model = {o: iomodel.flash_forward_io(N, N, d, Br=Br, Bc=Bc, itemsize=4, order=o, causal=causal)
                         for o in ("fa1", "fa2")}
        O_ref = attention(Q, K, V, causal=causal)
        errs = {o: float(np.max(np.abs(r.O.astype(np.float64) - O_ref))) for o, r in self.results.items()}
        same_io = all(self.results[o].io == self.io_model[o] for o in ("fa1", "fa2"))
        ok = max(errs.values()) < 1e-4 * max(1.0, float(np.max(np.abs(O_ref)))) and same_io
        b1, b2 = self.io_model["fa1"].hbm_bytes, self.io_model["fa2"].hbm_bytes
        check = (f"max |O − O_ref|: FA1 {errs['fa1']:.1e}, FA2 {errs['fa2']:.1e} (vs dense attention) · "
                 f"bytes counted "
                 f"from both runs {'=' if same_io else '≠'} flash_forward_io · FA1 moves {b1 / b2:.2f}x FA2's bytes")
        colour, mark = ("#2ca02c", "✓") if ok else ("#d62728", "✗")
        self.status.value = f"<span style='color:{colour}'>{mark} {check}</span>"
        caption = (f"inputs: {desc} · N = {N}, d = {d}, Br = {Br}, Bc = {Bc}, Tr = {-(-N // Br)}, Tc = {-(-N // Bc)}"
                   f"{', causal' if causal else ''}, 4-byte elements\n"
                   f"{'✓ both outputs equal dense attention' if ok else '✗ check failed: see the status line'}")
        view = LoopOrderFigure(self.fig, self.results["fa1"].trace, self.results["fa2"].trace, caption=caption)
        view.enable_blitting()
        return view
