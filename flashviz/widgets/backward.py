"""BackwardExplorer: watch FlashAttention's backward pass, tile by tile, with recomputation.

Controls (ipywidgets) drive one recorded run: changing N, d, Br, Bc, causal, the input source
or the element type re-runs ``flash_forward`` (for O and lse), draws dO from a seeded normal,
runs ``flash_backward(..., record=True)`` and checks dQ, dK, dV against the dense float64
gradients (``attention_backward``). Play / the step slider replay the trace through
``flashviz.views.backward_view.BackwardFigure``. Frames are drawn by widget events only.
"""

from __future__ import annotations

import numbers

import ipywidgets as W
import numpy as np

from .. import data as fvdata
from ..backward import attention_backward, flash_backward
from ..checks import shown
from ..tiled import flash_forward
from ..views.backward_view import BackwardFigure
from ..views.style import sci_html
from .base import NOTEBOOK_DPI, NOTEBOOK_FIGSIZE, FrameWidget, check_bool
from .options import (
    DTYPES,
    check_tiled_inputs,
    match_option,
    tile_controls,
    tile_problem,
)

#: Longest sequence: N = 512. Each run records the backward's tile steps (five per tile) and
#: checks them against dense float64 gradients (N × N), so cost grows faster than the forward's.
MAX_N = 512
DO_SEED_OFFSET = 1000          # dO ~ N(0, 1) with seed + 1000: never the stream that drew Q, K, V
# the check passes when max |g − g_ref| <= TOL · max |g_ref| over dQ, dK, dV (rounding of the element type)
TOL = {np.float64: 1e-9, np.float32: 1e-3, np.float16: 3e-2}


class BackwardExplorer(FrameWidget):
    """Interactive explainer of FlashAttention's backward pass (FA2 order: key blocks j outer).

    Parameters
    ----------
    N : int, 1..512 — sequence length (Nq = Nk = N).
    d : int — head dimension, one of 8, 16, 32, 64, 128 ("real" inputs have d = 32).
    Br, Bc : int — block rows / block cols, powers of two 1..256; at most 4096 tiles.
    causal : bool — bottom-right aligned causal mask (skipped tiles are hatched).
    source : "real" | "random" | "adversarial" — where Q, K, V come from (flashviz.data.get_qkv).
    dtype : "float32" | "float16" | "float64" (or the dropdown's label, or a NumPy dtype) — the
        element type; bytes are counted in its size.
    seed : int >= 0 — seeds the random inputs and dO (dO uses seed + 1000).
    canvas : "auto" | "ipympl" | "png"; figsize, dpi; key; text_scale — as for TileExplorer.

    Public: ``n_frames``, ``show_frame(k)``, ``close()``, ``widget``, ``save_png``, ``save_gif``;
    after each run: ``result`` (BackwardResult, with ``.trace``), ``forward`` (the FlashResult
    whose O and lse it used), ``dO``, ``reference`` (dQ, dK, dV from attention_backward, float64),
    ``errors`` ({"dQ", "dK", "dV"}: max absolute error), ``ok`` (the check passed), ``state``.

    Raises TypeError/ValueError (one line) for arguments outside those ranges; sliders moved
    to more than 4096 tiles keep the previous run and say why in the status line.
    """

    max_N = MAX_N
    kind = "BackwardExplorer"
    export_stem = "flashviz-backward"

    def __init__(self, N: int = 128, d: int = 32, Br: int = 32, Bc: int = 32, causal: bool = False,
                 source: str = "real", *, dtype: str = "float32 (4 B)", seed: int = 0, canvas: str = "auto",
                 figsize=NOTEBOOK_FIGSIZE, dpi: float = NOTEBOOK_DPI, key=None, text_scale: float = 1.0):
        N, d, Br, Bc = check_tiled_inputs(source, N, d, Br, Bc, max_N=MAX_N)
        causal = check_bool(causal, "causal")
        dtype = match_option(dtype, DTYPES, "dtype")
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
            raise ValueError(f"seed must be an integer >= 0, got {shown(seed)}")
        seed = int(seed)
        super().__init__(canvas=canvas, figsize=figsize, dpi=dpi, key=key, text_scale=text_scale)
        try:
            self._build(N, d, Br, Bc, causal, source, dtype, seed)
        except BaseException:
            self.close()       # a failed constructor leaves no figure behind
            raise

    def _build(self, N, d, Br, Bc, causal, source, dtype, seed):
        self.seed = seed
        self.result = self.forward = self.dO = self.reference = None
        self.errors, self.ok = {}, None

        self.source = W.Dropdown(options=list(fvdata.SOURCES), value=source, description="inputs",
                                 layout=W.Layout(width="190px"))
        self.N = W.IntSlider(value=N, min=1, max=MAX_N, step=1, description="N", continuous_update=False,
                             layout=W.Layout(width="260px"))
        self.d, self.Br, self.Bc, self.causal = tile_controls(d, Br, Bc, causal, source)
        self.dtype = W.Dropdown(options=list(DTYPES), value=dtype, description="elements",
                                layout=W.Layout(width="210px"))
        self._watch(self.N, self.d, self.Br, self.Bc, self.causal, self.dtype)
        self.source.observe(self._on_source, names="value")
        self._layout(W.HBox([self.source, self.N, self.d, self.Br, self.Bc]), W.HBox([self.causal, self.dtype]))
        self._rebuild()

    def _config_problem(self):
        return tile_problem(self.N.value, self.N.value, self.Br.value, self.Bc.value)

    def _run(self):
        """Forward for O and lse, a seeded dO, the recorded backward and the float64 check."""
        N, d, causal = self.N.value, self.d.value, self.causal.value
        dt = DTYPES[self.dtype.value]
        Q, K, V, desc = fvdata.get_qkv(self.source.value, N, d, seed=self.seed)
        Q, K, V = (x.astype(dt) for x in (Q, K, V))
        dO = np.random.default_rng(self.seed + DO_SEED_OFFSET).standard_normal((N, d)).astype(dt)
        f = flash_forward(Q, K, V, Br=self.Br.value, Bc=self.Bc.value, causal=causal)
        r = flash_backward(Q, K, V, f.O, dO, f.lse, Br=self.Br.value, Bc=self.Bc.value, causal=causal, record=True)
        ref = attention_backward(Q, K, V, dO, causal=causal)
        self.forward, self.result, self.dO, self.reference = f, r, dO, ref
        got = (r.dQ, r.dK, r.dV)
        self.errors = {n: float(np.max(np.abs(g.astype(np.float64) - x))) for n, g, x in zip(("dQ", "dK", "dV"), got, ref)}
        scale = max(float(np.max(np.abs(x))) for x in ref)
        worst = max(self.errors.values())
        rel = worst / scale if scale > 0 else worst
        self.ok = bool(rel <= TOL[dt])
        name = np.dtype(dt).name
        if self.ok:
            check = (f"✓ dQ, dK, dV = the dense float64 gradients (attention_backward): max error {worst:.1e}"
                     f" = {rel:.0e} of the largest entry ({name} rounding)")
        else:
            check = (f"✗ dQ, dK, dV differ from the dense float64 gradients: max error {worst:.2e}"
                     f" = {rel:.1e} of the largest entry, above the {TOL[dt]:.0e} allowed for {name}")
        return desc, check

    def _make_view(self):
        desc, check = self._run()
        colour = "#2ca02c" if self.ok else "#d62728"
        self.status.value = f"<span style='color:{colour}'>{sci_html(check)}</span>"
        tr = self.result.trace
        caption = (f"inputs: {desc}  ·  dO: random normal (seed {self.seed + DO_SEED_OFFSET})\n"
                   f"N = {tr.Nq}, d = {tr.d}, Br = {tr.Br}, Bc = {tr.Bc}, Tr = {tr.Tr}, Tc = {tr.Tc}"
                   f"{', causal (hatched: skipped tiles)' if tr.causal else ''}\n{check}")
        view = BackwardFigure(self.fig, tr, caption=caption)
        if not self._png_mode:
            view.enable_blitting()
        return view
