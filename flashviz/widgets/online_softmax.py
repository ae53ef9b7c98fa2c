"""OnlineSoftmaxExplorer: one row of scores streamed block by block (chapter 2).

Controls pick the row (a real attention row, random, rising, or scores near 800), its length
N, the block size, a "break it" mode (no rescale / no max-subtraction) and the element type;
each frame is one streamed block, the last frame normalises. Drawing: flashviz.views.online_view.
"""

from __future__ import annotations

import math

import ipywidgets as W
import numpy as np

from ..checks import check_choice, shown
from ..data import load_real_qkv
from ..replay.online import BREAK_MODES
from ..views.drawlock import serialised
from ..views.online_view import OnlineSoftmaxFigure
from ..views.style import sci_html
from .base import NOTEBOOK_DPI, NOTEBOOK_FIGSIZE, FrameWidget, check_int

SOURCES = ("real", "random", "rising", "scores near 800")
DTYPES = ("float32", "float64")
#: Longest row: 512 (the real rows have 512 keys; one frame per block).
MAX_N = 512
#: Largest block: 512 (a block longer than the row streams it in one block).
MAX_BLOCK = 512


def _rising(N: int, block: int, rng, lo: float, hi: float) -> np.ndarray:
    """Sorted uniform values in [lo, hi], shuffled inside each block: the max grows every block."""
    x = np.sort(rng.uniform(lo, hi, N))
    for c0 in range(0, N, block):
        x[c0:c0 + block] = rng.permutation(x[c0:c0 + block])
    return x


def default_row(N: int) -> int:
    """The real query row (among the first N) whose largest score comes latest: the rescale fires."""
    Q, K, _, _ = load_real_qkv(N=N)
    return int(np.argmax((Q @ K.T).argmax(axis=1)))


def make_row(source: str, N: int, block: int, *, row: int = 0, seed: int = 0):
    """The scores x (N,) float64 for a source, and a one-line description."""
    rng = np.random.default_rng(seed)
    if source == "real":
        Q, K, _, prov = load_real_qkv(N=N)
        x = Q[row] @ K.T / math.sqrt(Q.shape[1])
        return x, (f"real: query row {row} (“{prov['tokens'][row]}”) of S = QKᵀ/√d, "
                   f"{prov['model'].split(' via ')[0]} layer {prov['layer']} head {prov['head']}")
    if source == "random":
        return 2.0 * rng.standard_normal(N), f"random normal × 2 (seed {seed})"
    if source == "rising":
        return _rising(N, block, rng, -2.0, 6.0), "rising: the max grows in every block"
    if source == "scores near 800":
        return _rising(N, block, rng, 794.0, 800.0), "scores near 800 (794…800; the max grows in every block)"
    raise ValueError(f"source must be one of {SOURCES}, got {shown(source)}")


def _dtype_name(dtype) -> str:
    try:
        name = None if dtype is None or isinstance(dtype, bool) else np.dtype(dtype).name   # dtype(None): float64
    except (TypeError, ValueError, AttributeError):
        name = None
    if name not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {shown(dtype)}")
    return name


class OnlineSoftmaxExplorer(FrameWidget):
    """Online softmax of one row, streamed in blocks: m, l, the rescale factor, the weights.

    Parameters
    ----------
    N : int, 1..512 — row length.
    block : int, 1..512 — elements streamed per block (the last block may be partial; block > N
        streams the row in one block).
    source : "real" | "random" | "rising" | "scores near 800" — "real" is a row of S = QKᵀ/√d
        from flashviz.data.load_real_qkv; "rising" and "scores near 800" grow the max every block.
    row : int or None — the query row for "real" (default: the one whose max comes latest).
    break_it : "none" | "no rescale" | "no max-subtraction" — the broken variant shown beside the
        exact online result.
    dtype : "float32" | "float64" (or a NumPy dtype) — the element type of the scores and results.
    seed : int — for "random", "rising" and "scores near 800".
    canvas, figsize, dpi, key, text_scale : as for every FrameWidget (see flashviz.widgets.base).

    Public: ``n_frames``, ``show_frame(k)`` (returns the OnlineFrame drawn), ``close()``,
    ``save_png(path)``, ``save_gif(path)``, ``widget``, ``x`` (the scores drawn, rounded to dtype),
    ``run`` (the OnlineRun), ``state``. Raises one-line TypeError/ValueError for bad arguments.
    """

    kind = "OnlineSoftmaxExplorer"
    export_stem = "flashviz-online"

    def __init__(self, N: int = 32, block: int = 8, source: str = "real", *, row=None, break_it: str = "none",
                 dtype="float32", seed: int = 0, canvas: str = "auto", figsize=NOTEBOOK_FIGSIZE, dpi: float = NOTEBOOK_DPI,
                 key=None, text_scale: float = 1.0):
        check_choice(source, "source", SOURCES)
        N = check_int(N, "N", 1, MAX_N)
        block = check_int(block, "block", 1, MAX_BLOCK)
        row = default_row(N) if row is None else check_int(row, "row", 0, N - 1)
        check_choice(break_it, "break_it", tuple(BREAK_MODES))
        dtype = _dtype_name(dtype)
        seed = check_int(seed, "seed", 0)
        super().__init__(canvas=canvas, figsize=figsize, dpi=dpi, key=key, text_scale=text_scale)
        try:
            self._build(N, block, source, row, break_it, dtype, seed)
        except BaseException:
            self.close()       # a failed constructor leaves no figure behind
            raise

    def _build(self, N, block, source, row, break_it, dtype, seed):
        self.seed, self.x, self.run = seed, None, None
        lay = W.Layout
        self.source = W.Dropdown(options=list(SOURCES), value=source, description="scores", layout=lay(width="220px"))
        self.N = W.IntSlider(value=N, min=1, max=MAX_N, description="N", continuous_update=False,
                             layout=lay(width="260px"))
        self.block = W.IntSlider(value=block, min=1, max=MAX_BLOCK, description="block", continuous_update=False,
                                 layout=lay(width="260px"))
        self.row = W.IntSlider(value=row, min=0, max=N - 1, description="query row", continuous_update=False,
                               disabled=source != "real", style={"description_width": "initial"},
                               layout=lay(width="260px"))
        self.break_it = W.Dropdown(options=list(BREAK_MODES), value=break_it, description="break it",
                                   layout=lay(width="260px"))
        self.dtype = W.Dropdown(options=list(DTYPES), value=dtype, description="dtype", layout=lay(width="170px"))
        self._watch(self.block, self.row, self.break_it, self.dtype)
        self.N.observe(self._on_N, names="value")
        self.source.observe(self._on_source, names="value")
        self._layout(W.HBox([self.source, self.N, self.block, self.row]), W.HBox([self.break_it, self.dtype]))
        self._rebuild()

    @serialised
    def _on_N(self, change):
        self.row.unobserve(self._on_config, names="value")
        self.row.max = change["new"] - 1          # clamps the row
        self.row.observe(self._on_config, names="value")
        self._rebuild()

    def _on_source(self, change):
        self.row.disabled = change["new"] != "real"
        self._rebuild()

    def _make_view(self):
        N, block, dt = self.N.value, self.block.value, np.dtype(self.dtype.value)
        x, desc = make_row(self.source.value, N, block, row=self.row.value, seed=self.seed)
        T = -(-N // block)
        caption = f"{desc}  ·  N = {N}, block = {block} → {T} block{'s' * (T > 1)}  ·  {dt.name}"
        view = OnlineSoftmaxFigure(self.fig, x, block, broken=self.break_it.value, dtype=dt, caption=caption)
        self.run, self.x = view.run, view.run.x
        view.enable_blitting()
        last = view.run.frame(view.run.T)
        parts = [f"<span style='color:#2ca02c'>✓ exact online: max |p − p_ref| = {last.err_exact:.1e}, "
                 f"Σp = {last.sum_exact:.6f}</span>"]
        if self.break_it.value != "none":
            ok = np.isfinite(last.err_broken) and last.err_broken < 1e-4 and abs(last.sum_broken - 1) < 1e-4
            colour, mark = ("#2ca02c", "✓") if ok else ("#d62728", "✗")
            verdict = "still right on this row" if ok else "WRONG"
            parts.append(f"<span style='color:{colour}'>{mark} {self.break_it.value}: max |p − p_ref| = "
                         f"{last.err_broken:.3g}, Σp = {last.sum_broken:.6g} — {verdict}</span>")
        self.status.value = sci_html("  ·  ".join(parts))     # 4.5×10⁻⁹, never a raw 4.5e-09
        return view
