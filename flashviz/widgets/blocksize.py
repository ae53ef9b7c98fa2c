"""BlockSizeExplorer (chapter 4): sweep Br × Bc at a chosen N, d, element type and SRAM budget.

Controls (N, d, element type, SRAM budget preset, causal, loop order) rebuild the sweep; Play /
the step slider walk through it, one configuration per frame, and end on the optimum: the
fitting configuration with the least HBM traffic (ties → the largest tile). Every number comes
from ``flashviz.iomodel``; measured GPU times come from the recorded results, when they exist for
this configuration.
"""

from __future__ import annotations

import numbers

import ipywidgets as W
import numpy as np

from .. import iomodel
from ..checks import MAX_SRAM_BYTES, check_blocks, check_choice, check_order, shown, sweep_problem
from ..replay.blocksize import CURVE_N, recorded_sweep, sram_budget_bytes
from ..views import SRAM_BUDGETS
from ..views.blocksize_view import BlockSizeFigure
from ..views.style import fmt_bytes
from .base import NOTEBOOK_DPI, NOTEBOOK_FIGSIZE, FrameWidget, check_bool, check_int
from .options import DTYPES, match_option

N_CHOICES = tuple(2 ** k for k in range(4, 17))      # 16 … 65,536
HEAD_DIMS = (16, 32, 64, 128, 256)
ORDERS = {"FA2: query blocks outer": "fa2", "FA1: key blocks outer (paper)": "fa1"}
#: Longest sequence the sweep offers: 65,536 (the IO model is closed-form, so a long N is cheap
#: with the default blocks; smaller blocks are capped by flashviz.checks.MAX_SWEEP_STEPS).
MAX_N = 65_536
#: Most block sizes in ``blocks``: a 7 × 7 grid still has room for each cell's numbers.
MAX_BLOCKS = 7


def _resolve_recorded(recorded):
    """The results dict a ``recorded`` argument stands for ("latest": the installed recording;
    a missing or corrupt one is None, and the panel says so)."""
    if isinstance(recorded, str):
        try:
            from ..records.results import latest_results

            return latest_results()
        except Exception:
            return None
    return recorded


def _sizes(keys) -> str:
    return ", ".join(map(str, sorted({b for k in keys for b in k})))


def _budget_option(value, budgets: dict) -> str:
    """A preset label from its name ('A100', 'H100/H200', 'toy'), or a new 'custom' label for bytes."""
    label, nbytes = sram_budget_bytes(value)
    budgets[label] = nbytes
    return label


class BlockSizeExplorer(FrameWidget):
    """Interactive block-size sweep: HBM traffic, SRAM working set, spills and the optimum.

    Parameters
    ----------
    N : int, 1..65,536 — sequence length (Nq = Nk = N); the slider offers powers of two (and N).
    d : int — head dimension, one of 16, 32, 64, 128, 256.
    dtype : "float32" | "float16" | "float64" (or the dropdown's label, or a NumPy dtype) — bytes
        per element (4, 2, 8).
    sram_budget : "H100/H200" | "A100" | "toy" (a key of flashviz.views.SRAM_BUDGETS or its first
        word), or an integer number of bytes (added as a "custom" option).
    causal : bool — bottom-right aligned causal mask (only visible tiles are computed).
    order : "fa2" (query blocks outer, FlashAttention-2) | "fa1" (key blocks outer, Algorithm 1).
    blocks : the sizes tried for Br and for Bc (distinct integers >= 1, at most 7).
    recorded : "latest" (flashviz.gpu.latest_results()), a results dict, or None (no measurements).
    canvas, figsize, dpi, key, text_scale : as for every FrameWidget (see flashviz.widgets.base).

    Public: ``n_frames`` (configurations + 1), ``show_frame(k)`` → BlockSizeState, ``rows`` (the
    sweep), ``best`` (the optimum row or None), ``close()``, ``widget``.
    Raises TypeError/ValueError (one line) for arguments outside those ranges.
    """

    kind = "BlockSizeExplorer"
    export_stem = "flashviz-blocksize"

    def __init__(self, N: int = 4096, d: int = 64, dtype="float32 (4 B)", sram_budget="H100/H200",
                 causal: bool = False, order: str = "fa2", *, blocks=iomodel.SWEEP_BLOCKS, recorded="latest",
                 canvas: str = "auto", figsize=NOTEBOOK_FIGSIZE, dpi: float = NOTEBOOK_DPI, key=None, text_scale: float = 1.0):
        N = check_int(N, "N", 1, MAX_N)
        d = check_choice(d, "d", HEAD_DIMS)
        dtype = match_option(dtype, DTYPES, "dtype")
        if isinstance(sram_budget, numbers.Integral) and not isinstance(sram_budget, bool) \
                and sram_budget > MAX_SRAM_BYTES:             # 1 TiB: far beyond any SRAM, and the model's floats
            check_int(sram_budget, "sram_budget (bytes)", 1, MAX_SRAM_BYTES)
        self._budgets = dict(SRAM_BUDGETS)
        sram_budget = _budget_option(sram_budget, self._budgets)
        causal = check_bool(causal, "causal")
        check_order(order)
        blocks = check_blocks(blocks)
        if len(blocks) > MAX_BLOCKS:
            raise ValueError(f"blocks has {len(blocks)} sizes; at most {MAX_BLOCKS} fit on the grid")
        if not (recorded is None or isinstance(recorded, dict) or
                (isinstance(recorded, str) and recorded == "latest")):
            raise ValueError(f"recorded must be 'latest', a results dict or None, got {shown(recorded)}")
        problem = sweep_problem(N, blocks, curve_N=CURVE_N)
        if problem:
            raise ValueError(problem)
        res = _resolve_recorded(recorded)
        itemsize = np.dtype(DTYPES[dtype]).itemsize
        problem = self._recorded_problem(res, blocks, N, d, itemsize, causal, order)
        if problem:
            raise ValueError(problem)
        self._res = res
        super().__init__(canvas=canvas, figsize=figsize, dpi=dpi, key=key, text_scale=text_scale)
        try:
            self._build(N, d, dtype, sram_budget, causal, order, blocks, recorded)
        except BaseException:
            self.close()       # a failed constructor leaves no figure behind
            raise

    def _build(self, N, d, dtype, sram_budget, causal, order, blocks, recorded):
        self.blocks, self.recorded = blocks, recorded
        # only the N whose sweep the model computes in reasonable time (small blocks: shorter N)
        choices = [n for n in sorted(set(N_CHOICES) | {N}) if n == N or not sweep_problem(n, blocks, curve_N=CURVE_N)]
        self.N = W.SelectionSlider(options=choices, value=N, description="N",
                                   continuous_update=False, layout=W.Layout(width="300px"))
        self.d = W.Dropdown(options=list(HEAD_DIMS), value=d, description="d", style={"description_width": "20px"},
                            layout=W.Layout(width="110px"))
        self.dtype = W.Dropdown(options=list(DTYPES), value=dtype, description="elements",
                                layout=W.Layout(width="210px"))
        self.budget = W.Dropdown(options=list(self._budgets), value=sram_budget, description="SRAM",
                                 layout=W.Layout(width="300px"))
        self.causal = W.Checkbox(value=causal, description="causal", indent=False, layout=W.Layout(width="80px"))
        self.order = W.Dropdown(options=list(ORDERS.items()), value=order, description="loop order",
                                layout=W.Layout(width="330px"))
        self._watch(self.N, self.d, self.dtype, self.budget, self.causal, self.order)
        self._layout(W.HBox([self.N, self.d, self.dtype]), W.HBox([self.budget, self.causal, self.order]))
        self._rebuild()

    @property
    def rows(self) -> list[dict]:
        """The sweep now shown (iomodel.block_size_sweep rows)."""
        return self._view.rows

    @property
    def best(self) -> dict | None:
        """The optimum now shown: least HBM traffic among fitting configurations, or None."""
        return self._view.best

    @staticmethod
    def _recorded_problem(res, blocks, N, d, itemsize, causal, order) -> str | None:
        """Why the recorded GPU sweep cannot be drawn beside ``blocks``: it was measured at this
        configuration but at none of these block sizes. None when it can (or nothing was recorded here)."""
        measured = recorded_sweep(res, N=N, d=d, itemsize=itemsize, causal=causal, order=order)
        if not measured or any(Br in blocks and Bc in blocks for Br, Bc in measured):
            return None
        return (f"blocks {tuple(blocks)} has none of the block sizes of the recorded GPU sweep at N = {N}, d = {d} "
                f"(recorded Br, Bc: {_sizes(measured)}): include one of them, or pass recorded=None")

    def _config_problem(self):
        blocks, N = self.blocks, self.N.value
        itemsize = np.dtype(DTYPES[self.dtype.value]).itemsize
        return (sweep_problem(N, blocks, curve_N=CURVE_N) or
                self._recorded_problem(self._res, blocks, N, self.d.value, itemsize, self.causal.value,
                                       self.order.value))

    def _make_view(self):
        itemsize = np.dtype(DTYPES[self.dtype.value]).itemsize
        M = self._budgets[self.budget.value]
        view = BlockSizeFigure(self.fig, N=self.N.value, d=self.d.value, itemsize=itemsize, sram_budget=M,
                               budget_name=self.budget.value, order=self.order.value, causal=self.causal.value,
                               blocks=self.blocks, recorded=self._res)
        self.status.value = self._summary(view, M)
        view.enable_blitting()
        return view

    def _summary(self, view, M) -> str:
        spill = sum(not r["fits"] for r in view.rows)
        best = view.best
        if best is None:
            small = min(view.rows, key=lambda r: r["sram_bytes"])
            return (f"<span style='color:#d62728'>⚠ No block size here fits: even {small['Br']}×{small['Bc']} needs "
                    f"{fmt_bytes(small['sram_bytes'])} of SRAM, more than M = {fmt_bytes(M)}. Every configuration "
                    f"would spill; pick a larger SRAM budget, a smaller d or a smaller element type.</span>")
        measured = ""
        if view.measured:
            shown = sum(Br in self.blocks and Bc in self.blocks for Br, Bc in view.measured)
            measured = f" · measured GPU times shown ({shown} configurations"
            missing = [b for b in self.blocks if b not in {x for k in view.measured for x in k}]
            if missing:
                measured += (f"; the recorded sweep has Br, Bc in {_sizes(view.measured)} only, "
                             f"none at {', '.join(map(str, missing))}: — in the grid")
            measured += ")"
        return (f"<span style='color:#2ca02c'>✓ optimum Br × Bc = {best['Br']}×{best['Bc']}: "
                f"{fmt_bytes(best['hbm_bytes'])} of HBM traffic ({best['hbm_bytes'] / view.standard:.2f}× standard "
                f"attention's {fmt_bytes(view.standard)}), SRAM {fmt_bytes(best['sram_bytes'])} of {fmt_bytes(M)}; "
                f"{spill} of {len(view.rows)} configurations spill{measured}.</span>")
