"""CausalExplorer (chapter 5): which tiles a causal mask skips, cuts or keeps, and what it saves.

Controls (Nq, Nk independently, Br, Bc, d) re-run ``flash_forward(..., causal=True, record=True)``
on seeded random inputs; Play / the step slider walk through the query blocks, one per frame,
through ``views.causal_view.CausalFigure``. The status line checks the output against dense
causal attention and the bytes counted from the run against ``iomodel.flash_forward_io``.
"""

from __future__ import annotations

import ipywidgets as W
import numpy as np

from .. import iomodel
from ..checks import check_choice
from ..reference import attention
from ..tiled import flash_forward
from ..views.causal_view import CausalFigure
from ..views.style import sci_html
from .base import NOTEBOOK_DPI, NOTEBOOK_FIGSIZE, FrameWidget, check_int
from .options import BLOCKS, check_blocks, tile_problem

#: Longest Nq and Nk: 2,048 each (one frame per query block; at most MAX_TILES tiles).
MAX_N = 2048
HEAD_DIMS = (16, 32, 64)


def causal_inputs(Nq: int, Nk: int, d: int, seed: int = 0):
    """Seeded unit-normal Q (Nq, d), K and V (Nk, d), float32."""
    rng = np.random.default_rng(seed)
    Q = rng.standard_normal((Nq, d)).astype(np.float32)
    K = rng.standard_normal((Nk, d)).astype(np.float32)
    V = rng.standard_normal((Nk, d)).astype(np.float32)
    return Q, K, V


class CausalExplorer(FrameWidget):
    """The bottom-right aligned causal mask on the tile grid, one frame per query block.

    Parameters
    ----------
    Nq, Nk : int, 1..2048 each — number of queries and of keys (they may differ: Nq < Nk is
        decoding with a cache of earlier keys; Nq > Nk leaves the first Nq − Nk rows with no key).
    Br, Bc : int — block rows / block cols, powers of two 1..256; at most 4096 tiles.
    d : int — head dimension, one of 16, 32, 64 (bytes and FLOPs scale with it).
    seed : int >= 0 — seed of the random inputs.
    canvas, figsize, dpi, key, text_scale : as for every FrameWidget (see flashviz.widgets.base).

    Public: ``n_frames`` (Tr, one per query block), ``show_frame(k)`` → CausalState, ``result``
    (the causal FlashResult drawn), ``counts`` (tiles, FLOPs, bytes: causal and non-causal, tile
    kinds), ``state``, ``close()``, ``widget``. Raises TypeError/ValueError (one line) for
    arguments outside those ranges; sliders moved to more than 4096 tiles keep the previous run.
    """

    kind = "CausalExplorer"
    export_stem = "flashviz-causal"

    def __init__(self, Nq: int = 256, Nk: int = 384, Br: int = 32, Bc: int = 32, d: int = 32, *, seed: int = 0,
                 canvas: str = "auto", figsize=NOTEBOOK_FIGSIZE, dpi: float = NOTEBOOK_DPI, key=None, text_scale: float = 1.0):
        Nq, Nk = check_int(Nq, "Nq", 1, MAX_N), check_int(Nk, "Nk", 1, MAX_N)
        Br, Bc = check_blocks(Br, Bc)
        d = check_choice(d, "d", HEAD_DIMS)
        problem = tile_problem(Nq, Nk, Br, Bc)
        if problem:
            raise ValueError(problem.replace(" — too many to animate", ", more than an animation can show"))
        seed = check_int(seed, "seed", 0)
        super().__init__(canvas=canvas, figsize=figsize, dpi=dpi, key=key, text_scale=text_scale, interval=400)
        try:
            self._build(Nq, Nk, Br, Bc, d, seed)
        except BaseException:
            self.close()       # a failed constructor leaves no figure behind
            raise

    def _build(self, Nq, Nk, Br, Bc, d, seed):
        self.seed = seed
        self.result = None
        slider = dict(min=1, max=MAX_N, continuous_update=False, layout=W.Layout(width="300px"))
        self.Nq = W.IntSlider(value=Nq, description="Nq (queries)", style={"description_width": "initial"}, **slider)
        self.Nk = W.IntSlider(value=Nk, description="Nk (keys)", style={"description_width": "initial"}, **slider)
        self.Br = W.SelectionSlider(options=list(BLOCKS), value=Br, description="Br", continuous_update=False,
                                    layout=W.Layout(width="230px"))
        self.Bc = W.SelectionSlider(options=list(BLOCKS), value=Bc, description="Bc", continuous_update=False,
                                    layout=W.Layout(width="230px"))
        self.d = W.Dropdown(options=list(HEAD_DIMS), value=d, description="d", style={"description_width": "20px"},
                            layout=W.Layout(width="110px"))
        self._watch(self.Nq, self.Nk, self.Br, self.Bc, self.d)
        self._layout(W.HBox([self.Nq, self.Nk]), W.HBox([self.Br, self.Bc, self.d]))
        self._rebuild()

    @property
    def counts(self) -> dict:
        """The numbers the figure shows (see CausalFigure.counts)."""
        return self._view.counts

    def _config_problem(self):
        return tile_problem(self.Nq.value, self.Nk.value, self.Br.value, self.Bc.value)

    def _make_view(self):
        Nq, Nk, Br, Bc, d = self.Nq.value, self.Nk.value, self.Br.value, self.Bc.value, self.d.value
        Q, K, V = causal_inputs(Nq, Nk, d, self.seed)
        r = flash_forward(Q, K, V, Br=Br, Bc=Bc, causal=True, record=True)
        self.result = r
        model = iomodel.flash_forward_io(Nq, Nk, d, Br=Br, Bc=Bc, itemsize=4, causal=True)
        O_ref = attention(Q, K, V, causal=True)
        err = float(np.max(np.abs(r.O.astype(np.float64) - O_ref)))
        no_key = max(Nq - Nk, 0)
        zero_rows = bool(np.all(r.O[:no_key] == 0)) and bool(np.all(np.isneginf(r.lse[:no_key])))
        ok = err < 1e-4 and r.io == model and zero_rows
        check = (f"max |O − O_ref| = {err:.1e} (vs dense causal attention) · bytes counted from the run "
                 f"{'=' if r.io == model else '≠'} flash_forward_io ({model.hbm_bytes:,} B)")
        if no_key:
            check += f" · rows 0–{no_key - 1}: O = 0, lse = −inf {'✓' if zero_rows else '✗'}"
        colour, mark = ("#2ca02c", "✓") if ok else ("#d62728", "✗")
        self.status.value = f"<span style='color:{colour}'>{mark} {sci_html(check)}</span>"
        caption = (f"random inputs (seed {self.seed}) · Nq = {Nq}, Nk = {Nk}, d = {d}, Br = {Br}, Bc = {Bc}, "
                   f"Tr = {-(-Nq // Br)}, Tc = {-(-Nk // Bc)} · causal, bottom-right aligned · "
                   f"{'✓ output equals dense causal attention' if ok else '✗ check failed: see the status line'}")
        view = CausalFigure(self.fig, r.trace, caption=caption)
        view.enable_blitting()
        return view
