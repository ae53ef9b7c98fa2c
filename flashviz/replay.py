"""Replay a Trace frame by frame: the state a picture of step k needs, from the trace alone.

Frame k shows the state after events[0..k]. Nothing here recomputes attention: the
score matrix, the row statistics, the accumulators and the byte counters are all
read from the events of the run that is being drawn.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .iomodel import IOCount, standard_attention_io
from .masking import tile_kind
from .trace import Trace

STEP_TEXT = {
    "init": "initialise O = 0, l = 0, m = −inf in HBM",
    "load_Q": "load Q{i} from HBM into SRAM",
    "load_KV": "load K{j}, V{j} from HBM into SRAM",
    "compute_S": "S{i},{j} = scale · Q{i} K{j}ᵀ   (on chip, never written to HBM)",
    "update_ml": "m{i}, l{i} updated: old sum rescaled by exp(m_old − m_new)",
    "accumulate_O": "O{i} ← exp(m_old − m_new) · O{i} + P{i},{j} V{j}",
    "write_O": "O{i} ← O{i} / l{i};  write O{i}, lse{i} to HBM",
}
_SUB = str.maketrans("0123456789-", "₀₁₂₃₄₅₆₇₈₉₋")


def sub(n: int) -> str:
    """A block index as Unicode subscript digits (7 → '₇')."""
    return str(n).translate(_SUB)


@dataclass
class FrameState:
    """Everything one frame shows. Arrays are views into the replay's buffers: do not modify.

    k: frame index; event: the TraceEvent just done; text: a sentence describing it;
    i, j: current query / key block (-1 if none); S_shown: (Nq, Nk) scores computed so
    far (NaN where not yet computed, -inf where masked); m, l, m_old, rescale: rows of the
    current query block (None before the block's first update); O_acc: the current O_i
    accumulator (unnormalised) or None; O_done: (Nq, dv) finished rows (NaN elsewhere);
    hbm_bytes: bytes moved so far; tiles_done: number of computed tiles so far;
    rows_written: rows of O written to HBM so far; rescale_j: the key block of the latest
    m/l update shown (-1 if none).
    """

    k: int
    event: object
    text: str
    i: int
    j: int
    S_shown: np.ndarray
    m: np.ndarray | None
    l: np.ndarray | None
    m_old: np.ndarray | None
    rescale: np.ndarray | None
    O_acc: np.ndarray | None
    O_done: np.ndarray
    hbm_bytes: int
    tiles_done: int
    rows_written: int
    rescale_j: int = -1


class Replay:
    """Index a recorded Trace for fast random access to frames (O(Nq·Nk) per frame)."""

    def __init__(self, trace: Trace):
        if not trace.events:
            raise ValueError("the trace has no events: run flash_forward(..., record=True)")
        self.trace = trace
        ev = trace.events
        n = len(ev)
        self.n_frames = n
        Tr, Tc = trace.Tr, trace.Tc
        self.S_full = np.full((trace.Nq, trace.Nk), np.nan)
        self.tile_at = np.full((Tr, Tc), np.iinfo(np.int64).max, dtype=np.int64)  # compute_S index
        self.O_full = np.full((trace.Nq, trace.dv), np.nan)
        self.rows_written_at = np.full(trace.Nq, np.iinfo(np.int64).max, dtype=np.int64)
        self._stat_at = np.full(n, -1, dtype=np.int64)   # latest event ≤ k carrying m/l for the current block
        self._acc_at = np.full(n, -1, dtype=np.int64)    # latest accumulate_O ≤ k for the current block
        self._upd_at = np.full(n, -1, dtype=np.int64)    # latest update_ml ≤ k for the current block
        last_stat = last_acc = last_upd = -1
        cur_i = -1
        for idx, e in enumerate(ev):
            if e.i != cur_i and e.kind in ("load_Q", "init"):
                cur_i, last_stat, last_acc, last_upd = e.i, -1, -1, -1
            if e.kind == "compute_S":
                self.S_full[e.r0:e.r1, e.c0:e.c1] = e.S
                self.tile_at[e.i, e.j] = idx
            if e.kind in ("update_ml", "accumulate_O", "write_O") and e.m is not None:
                last_stat = idx
            if e.kind == "accumulate_O":
                last_acc = idx
            if e.kind == "update_ml":
                last_upd = idx
            if e.kind == "write_O":
                self.O_full[e.r0:e.r1] = e.O
                self.rows_written_at[e.r0:e.r1] = idx
            self._stat_at[idx], self._acc_at[idx], self._upd_at[idx] = last_stat, last_acc, last_upd
        self._row_tile = np.repeat(np.arange(Tr), trace.Br)[: trace.Nq]
        self._col_tile = np.repeat(np.arange(Tc), trace.Bc)[: trace.Nk]
        self.cum_bytes = trace.cumulative_hbm_bytes()
        finite = self.S_full[np.isfinite(self.S_full)]
        self.S_range = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
        self.standard = standard_attention_io(trace.Nq, trace.Nk, trace.d, dv=trace.dv, itemsize=trace.itemsize)
        self.total = trace.io()
        self.tile_kinds = np.array([[tile_kind(i * trace.Br, min((i + 1) * trace.Br, trace.Nq), j * trace.Bc,
                                               min((j + 1) * trace.Bc, trace.Nk), trace.Nq, trace.Nk, trace.causal)
                                     for j in range(Tc)] for i in range(Tr)])
        self._S_buf = np.empty_like(self.S_full)
        self._O_buf = np.empty_like(self.O_full)

    def io_so_far(self, k: int) -> IOCount:
        """The IOCount of events[0..k] (a sum over the trace)."""
        return self.trace.io(k + 1)

    def state(self, k: int) -> FrameState:
        """The state after event k (0 <= k < n_frames). Raises IndexError otherwise."""
        if not 0 <= k < self.n_frames:
            raise IndexError(f"frame {k} is out of range 0..{self.n_frames - 1}")
        e = self.trace.events[k]
        shown = (self.tile_at <= k)[self._row_tile][:, self._col_tile]
        np.copyto(self._S_buf, self.S_full)
        self._S_buf[~shown] = np.nan
        np.copyto(self._O_buf, self.O_full)
        self._O_buf[self.rows_written_at > k] = np.nan
        st = self.trace.events[self._stat_at[k]] if self._stat_at[k] >= 0 else None
        acc = self.trace.events[self._acc_at[k]] if self._acc_at[k] >= 0 else None
        upd = self.trace.events[self._upd_at[k]] if self._upd_at[k] >= 0 else None
        text = STEP_TEXT[e.kind].format(i=sub(e.i), j=sub(e.j))
        return FrameState(
            k=k, event=e, text=text, i=e.i, j=e.j, S_shown=self._S_buf,
            m=None if st is None else st.m, l=None if st is None else st.l,
            m_old=None if upd is None else upd.m_old, rescale=None if upd is None else upd.rescale,
            O_acc=None if acc is None else acc.O, O_done=self._O_buf,
            hbm_bytes=int(self.cum_bytes[k]), tiles_done=int((self.tile_at <= k).sum()),
            rows_written=int((self.rows_written_at <= k).sum()),
            rescale_j=-1 if upd is None else upd.j,
        )
