"""Replay of the block-size search (chapter 4, BlockSizeExplorer).

``BlockSizeSweep`` walks ``iomodel.block_size_sweep`` (every Br × Bc of ``blocks``, Br outer,
Bc inner) against an SRAM budget M, one frame per configuration plus a last frame for the
optimum (the fitting configuration with the least HBM traffic): the data of FlashAttention
(Dao et al. 2022) Section 3.2 / Theorem 2 — HBM traffic Θ(N²d²/M) — and of Algorithm 1 line 1,
the paper's choice Bc = ⌈M/4d⌉, Br = min(Bc, d). Every number comes from ``flashviz.iomodel``;
measured kernel times come from a recorded GPU results dict given by the caller. No drawing.
"""

from __future__ import annotations

import functools
import numbers
from dataclasses import dataclass

import numpy as np

from .. import iomodel
from ..formatting import fmt_bytes
from ..iomodel import SRAM_BUDGETS

#: the sequence lengths of the traffic-vs-N curves (the chosen N is added)
CURVE_N = tuple(2 ** k for k in range(7, 16))


def sram_budget_bytes(value) -> tuple[str, int]:
    """(label, bytes) of an SRAM budget M: a preset of ``iomodel.SRAM_BUDGETS`` by its label or
    first word ('H100/H200', 'H100', 'H200', 'A100', 'toy'), or an integer number of bytes
    ('custom: 48.8 KiB'). Raises one-line ValueError/TypeError otherwise."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        if value < 1:
            raise ValueError(f"an SRAM budget must be >= 1 byte, got {value}")
        return f"custom: {fmt_bytes(int(value))}", int(value)
    if not isinstance(value, str):
        raise TypeError(f"an SRAM budget is a preset name or a number of bytes, got {value!r}")
    for label, nbytes in SRAM_BUDGETS.items():
        head = label.split()[0].rstrip(":").lower()
        if value.lower() in (label.lower(), head, *head.split("/")):
            return label, nbytes
    names = ", ".join(label.split()[0].rstrip(":") for label in SRAM_BUDGETS)
    raise ValueError(f"unknown SRAM budget {value!r}; presets: {names} (or a number of bytes)")


def working_set_parts(Br: int, Bc: int, d: int, N: int, itemsize: int) -> list[int]:
    """Bytes (six ints) of Q_i, K_j, V_j, S_ij/P_ij, O_i and m_i + l_i for one tile step of
    Algorithm 1 (``load_Q``, ``load_KV``, ``compute_S``, ``accumulate_O``, ``update_ml``; tiles
    clipped to N); they sum to ``iomodel.sram_working_set``."""
    br, bc = min(Br, N), min(Bc, N)
    return [x * itemsize for x in (br * d, bc * d, bc * d, br * bc, br * d, 2 * br)]


def recorded_sweep(res: dict | None, *, N: int, d: int, itemsize: int, causal: bool, order: str) -> dict:
    """{(Br, Bc): recorded sweep row} for rows of ``res["sweep"]`` (flashviz.gpu.latest_results())
    measured at this N, d and mask whose ``model_hbm_bytes`` equals ``flash_forward_io(...)`` for
    this itemsize times the recorded B·H heads (so the element size matches too). A row carries
    ``kernel_ms`` (kernel-only time, ms). The GPU kernel runs the FA2 loop order; for order "fa1"
    nothing matches."""
    if not res or order != "fa2":
        return {}
    out = {}
    for r in res.get("sweep", []):
        try:
            if (r["N"], r["d"], bool(r.get("causal", False))) != (N, d, causal) or "kernel_ms" not in r:
                continue
            model = iomodel.flash_forward_io(N, N, d, Br=r["Br"], Bc=r["Bc"], itemsize=itemsize, causal=causal)
            if model.scaled(r["B"] * r["H"]).hbm_bytes == r["model_hbm_bytes"]:
                out[(r["Br"], r["Bc"])] = r
        except (KeyError, TypeError, ValueError):
            continue
    return out


@functools.lru_cache(maxsize=256)
def best_fitting_bytes(n: int, d: int, blocks: tuple, itemsize: int, M: int, order: str, causal: bool) -> float:
    """HBM bytes (float) of the best fitting blocks at sequence length n
    (``iomodel.best_fitting_blocks``: the least traffic among Br × Bc of ``blocks`` whose working
    set fits in M bytes); NaN when none fits. Cached, as re-running a cell or moving a control
    back asks for the same curve again."""
    r = iomodel.best_fitting_blocks(n, d, blocks=blocks, itemsize=itemsize, sram_budget=M, order=order, causal=causal)
    return np.nan if r is None else r["hbm_bytes"]


@dataclass
class BlockSizeState:
    """What frame k shows: the configuration ``row`` (a block_size_sweep dict: Br, Bc, Tr, Tc,
    hbm_bytes, sram_bytes, flops, fits), the best fitting configuration so far ``best`` (None
    while nothing fitted), whether this is the final frame (the optimum), the measured kernel time
    of ``row`` in ms (None when not recorded) and the step text."""

    k: int
    row: dict
    best: dict | None
    final: bool
    measured_ms: float | None
    text: str


class BlockSizeSweep:
    """The block-size search as frames.

    N, d: sizes (Nq = Nk = N); itemsize: bytes per element; sram_budget: M in bytes;
    budget_name: the preset's label (for the texts); order: "fa2" | "fa1"; causal: mask; blocks:
    sizes tried for Br and Bc; recorded: a GPU results dict (``flashviz.gpu.latest_results()``)
    or None. Attributes: ``rows`` (``iomodel.block_size_sweep``), ``best`` (the optimum, or None
    when nothing fits), ``standard`` (HBM bytes of standard attention, Algorithm 0), ``measured``
    ({(Br, Bc): recorded row}, ``recorded_sweep``), ``Ns`` (the sequence lengths of the curves),
    ``n_frames`` (configurations + 1).
    """

    def __init__(self, *, N: int, d: int, itemsize: int = 4, sram_budget: int, budget_name: str = "",
                 order: str = "fa2", causal: bool = False, blocks=iomodel.SWEEP_BLOCKS, recorded=None):
        self.rows = iomodel.block_size_sweep(N, d, blocks=blocks, itemsize=itemsize, sram_budget=sram_budget,
                                             order=order, causal=causal)
        self.N, self.d, self.b, self.M = N, d, itemsize, sram_budget
        self.order, self.causal, self.blocks = order, causal, tuple(blocks)
        self.budget_name = budget_name or "budget"
        self.best = iomodel.best_of_sweep(self.rows)
        self.standard = iomodel.standard_attention_io(N, N, d, itemsize=itemsize).hbm_bytes
        self.measured = recorded_sweep(recorded, N=N, d=d, itemsize=itemsize, causal=causal, order=order)
        self.Ns = sorted(set(CURVE_N) | {N})
        self._curves = {}

    @property
    def n_frames(self) -> int:
        """One frame per configuration of the sweep, plus the optimum."""
        return len(self.rows) + 1

    def traffic_over_N(self, Br: int, Bc: int) -> list[int]:
        """HBM bytes of ``flash_forward_io`` with blocks Br × Bc at every N of ``Ns`` (cached)."""
        key = (Br, Bc)
        if key not in self._curves:
            self._curves[key] = [iomodel.flash_forward_io(n, n, self.d, Br=Br, Bc=Bc, itemsize=self.b,
                                                          order=self.order, causal=self.causal).hbm_bytes
                                 for n in self.Ns]
        return self._curves[key]

    def curves(self) -> dict:
        """{"standard", "best", "theta"}: HBM bytes at every N of ``Ns`` of standard attention
        (Algorithm 0), of the best fitting blocks (NaN where none fits) and the paper's
        Θ(N²d²/M) curve (``iomodel.asymptotic_flash_io``, Theorem 2)."""
        d, b = self.d, self.b
        return {"standard": [iomodel.standard_attention_io(n, n, d, itemsize=b).hbm_bytes for n in self.Ns],
                "best": [best_fitting_bytes(n, d, self.blocks, b, self.M, self.order, self.causal) for n in self.Ns],
                "theta": [iomodel.asymptotic_flash_io(n, d, self.M, itemsize=b, order=self.order) for n in self.Ns]}

    def state(self, k: int) -> BlockSizeState:
        """The BlockSizeState of frame k. Raises IndexError outside 0..n_frames-1."""
        if not 0 <= k < self.n_frames:
            raise IndexError(f"frame {k} is out of range 0..{self.n_frames - 1}")
        final = k == len(self.rows)
        seen = self.rows if final else self.rows[:k + 1]
        best = iomodel.best_of_sweep(seen)
        row = (best or self.rows[-1]) if final else self.rows[k]
        ms = self.measured.get((row["Br"], row["Bc"]), {}).get("kernel_ms")
        tag = f"{row['Br']}×{row['Bc']}"
        if final and best is None:
            text = f"no configuration fits in {self.budget_name}: every tile spills — use a larger M or smaller d"
        elif final:
            text = (f"the optimum: Br = {row['Br']}, Bc = {row['Bc']} — {fmt_bytes(row['hbm_bytes'])} of HBM traffic, "
                    f"{fmt_bytes(row['sram_bytes'])} of SRAM")
        else:
            fit = "fits" if row["fits"] else "does NOT fit (spills)"
            so_far = f"best so far {best['Br']}×{best['Bc']}" if best else "nothing fits yet"
            text = (f"trying Br × Bc = {tag}: {fmt_bytes(row['hbm_bytes'])} HBM, {fmt_bytes(row['sram_bytes'])} SRAM, "
                    f"{fit} · {so_far}")
        return BlockSizeState(k, row, best, final, ms, text)
