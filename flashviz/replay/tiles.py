"""Replay of one tiled forward run (chapters 0 and 3, TileExplorer; chapter 5's causal option):
the state a picture of frame k needs, from the trace alone.

``Replay(trace)`` indexes a ``flash_forward(..., record=True)`` trace (FA2 order: FlashAttention-2
Algorithm 1, query blocks outer; or FA1 order: FlashAttention Algorithm 1, key blocks outer).
Frame k shows the state after events[0..k], one event per step of flashviz.steps (``init``,
``load_Q``, ``load_KV``, ``compute_S``, ``update_ml``, ``accumulate_O``, ``write_O``). Nothing
here recomputes attention: the score matrix, the row statistics, the accumulators and the byte
counters are all read from the events of the run that is being drawn.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..iomodel import IOCount, standard_attention_io
from ..trace import Trace
from .grid import tile_kinds

_SUB = str.maketrans("0123456789-", "₀₁₂₃₄₅₆₇₈₉₋")

#: The sentence shown for each forward step (FA2 order), keyed by the step names of
#: flashviz.steps; ``{i}``, ``{j}`` take the block indices as subscripts (``sub``).
STEP_TEXT = {
    "init": "initialise O = 0, l = 0, m = −inf in HBM",
    "load_Q": "load Q{i} from HBM into SRAM",
    "load_KV": "load K{j}, V{j} from HBM into SRAM",
    "compute_S": "S{i},{j} = scale · Q{i} K{j}ᵀ   (on chip, never written to HBM)",
    "update_ml": "m{i}, l{i} updated: old sum rescaled by exp(m_old − m_new)",
    "accumulate_O": "O{i} ← exp(m_old − m_new) · O{i} + P{i},{j} V{j}",
    "write_O": "O{i} ← O{i} / l{i};  write O{i}, lse{i} to HBM",
}
# Algorithm 1 (FA1 order): O, l, m go back and forth to HBM at every step
STEP_TEXT_FA1 = dict(STEP_TEXT, load_Q="load Q{i}, O{i}, l{i}, m{i} from HBM into SRAM",
                     write_O="write O{i} (normalised), l{i}, m{i} back to HBM")
# rescale=False ("break it"): the correction is skipped
STEP_TEXT_BROKEN = {"update_ml": "m{i}, l{i} updated WITHOUT rescaling the old sum (break it)",
                    "accumulate_O": "O{i} ← O{i} + P{i},{j} V{j}   (old O{i} not rescaled: break it)"}


def sub(n: int) -> str:
    """A block index (int, may be negative) as Unicode subscript digits: 7 → '₇', 12 → '₁₂',
    -1 → '₋₁' (the names Q₁, K₂, S₁,₂ of the step texts)."""
    return str(n).translate(_SUB)


@dataclass
class FrameState:
    """Everything one frame shows (arrays are the caller's own copies or read-only views).

    k: frame index; event: the TraceEvent just done; text: a sentence describing it (STEP_TEXT,
    keyed by the step names of flashviz.steps); i, j: current query / key block (-1 if none);
    shown_tiles: (Tr, Tc) bool, tiles whose scores were computed (``compute_S``, Alg. 1 line 8)
    so far (``Replay.scores_shown(k)`` gives the (Nq, Nk) picture); m, l, m_old, rescale:
    (rows of the current query block,) float64, after its latest ``update_ml`` (Alg. 1 line 9;
    rescale = exp(m_old − m)), None before it; rescale_j: that update's key block; O_acc,
    O_acc_l: the O_i accumulator after ``accumulate_O`` (Alg. 1 line 10; (rows, dv) float64,
    unnormalised) and the (rows,) l it goes with, or None; O_done: (Nq, dv) float64 rows written
    to HBM by ``write_O`` (Alg. 1 lines 12-15) so far, NaN elsewhere; hbm_bytes: bytes read +
    written so far; tiles_done: computed tiles so far; rows_written: rows of O written so far;
    writes_done: write events (O to HBM) so far.
    """

    k: int
    event: object
    text: str
    i: int
    j: int
    shown_tiles: np.ndarray
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
    O_acc_l: np.ndarray | None = None
    writes_done: int = 0


def _readonly(a):
    if a is None:
        return None
    v = a.view()
    v.flags.writeable = False
    return v


class Replay:
    """Index a recorded forward Trace (``flash_forward(..., record=True).trace``, order "fa2" or
    "fa1") for fast random access to frames.

    Attributes: ``trace``; ``n_frames`` (one per event); ``S_full`` ((Nq, Nk) float64, every
    tile's scaled, masked scores from its ``compute_S`` event, −inf where masked, NaN where never
    computed); ``S_range`` ((lo, hi) of its finite values); ``tile_at`` ((Tr, Tc) int64, the
    event index of each tile's ``compute_S``, int64 max if skipped); ``tile_kinds`` ((Tr, Tc)
    str, ``grid.tile_kinds``); ``O_full`` ((Nq, dv) float64, the last O written to each row);
    ``rows_written_at`` ((Nq,) int64); ``cum_bytes`` ((n_frames,) int64, HBM bytes after each
    event); ``standard`` (IOCount of standard attention, the paper's Algorithm 0, same sizes);
    ``total`` (IOCount of the whole run, the sum over its events). Raises ValueError for a trace
    with no events.
    """

    def __init__(self, trace: Trace):
        if not trace.events:
            raise ValueError("the trace has no events: run flash_forward(..., record=True)")
        self.trace = trace
        ev = trace.events
        n = len(ev)
        self.n_frames = n
        Tr, Tc = trace.Tr, trace.Tc
        never = np.iinfo(np.int64).max
        self.S_full = np.full((trace.Nq, trace.Nk), np.nan)
        self.tile_at = np.full((Tr, Tc), never, dtype=np.int64)       # compute_S index of each tile
        self.O_full = np.full((trace.Nq, trace.dv), np.nan)           # the last O written to each row
        self.rows_written_at = np.full(trace.Nq, never, dtype=np.int64)
        self._writes = []                                              # (event index, r0, r1, O) in order
        self._stat_at = np.full(n, -1, dtype=np.int64)   # latest event ≤ k carrying m/l for the current block
        self._acc_at = np.full(n, -1, dtype=np.int64)    # latest accumulate_O ≤ k for the current block
        self._upd_at = np.full(n, -1, dtype=np.int64)    # latest update_ml ≤ k for the current block
        last_stat = last_acc = last_upd = -1
        cur = None
        for idx, e in enumerate(ev):
            block = (e.i, e.j) if trace.order == "fa1" else e.i
            if e.kind in ("load_Q", "init") and block != cur:
                cur, last_stat, last_acc, last_upd = block, -1, -1, -1
            if e.kind == "init":                         # FA1: O = 0 is written for every row
                self.O_full[:] = 0.0
                self.rows_written_at[:] = idx
                self._writes.append((idx, 0, trace.Nq, np.zeros((trace.Nq, trace.dv))))
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
                self.rows_written_at[e.r0:e.r1] = np.minimum(self.rows_written_at[e.r0:e.r1], idx)
                self._writes.append((idx, e.r0, e.r1, e.O))
            self._stat_at[idx], self._acc_at[idx], self._upd_at[idx] = last_stat, last_acc, last_upd
        self._write_idx = np.array([w[0] for w in self._writes], dtype=np.int64)
        self._row_tile = np.repeat(np.arange(Tr), trace.Br)[: trace.Nq]
        self._col_tile = np.repeat(np.arange(Tc), trace.Bc)[: trace.Nk]
        self.cum_bytes = trace.cumulative_hbm_bytes()
        finite = self.S_full[np.isfinite(self.S_full)]
        self.S_range = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
        self.standard = standard_attention_io(trace.Nq, trace.Nk, trace.d, dv=trace.dv, itemsize=trace.itemsize)
        self.total = trace.io()
        self.tile_kinds = tile_kinds(trace.Nq, trace.Nk, trace.Br, trace.Bc, trace.causal)
        texts = STEP_TEXT_FA1 if trace.order == "fa1" else STEP_TEXT
        self._texts = dict(texts, **(STEP_TEXT_BROKEN if not trace.rescale else {}))

    def io_so_far(self, k: int) -> IOCount:
        """The IOCount of events[0..k] (bytes per tensor and matmul FLOPs, a sum over the trace)."""
        return self.trace.io(k + 1)

    def scores_shown(self, k: int) -> np.ndarray:
        """(Nq, Nk) float64: the scores computed by frame k, NaN where not yet (-inf where masked)."""
        shown = (self.tile_at <= k)[self._row_tile][:, self._col_tile]
        return np.where(shown, self.S_full, np.nan)

    def output_written(self, k: int) -> np.ndarray:
        """(Nq, dv) float64: O as it stands in HBM after frame k (NaN for rows not yet written)."""
        O = np.full_like(self.O_full, np.nan)
        for idx, r0, r1, rows in self._writes:
            if idx > k:
                break
            O[r0:r1] = rows
        return O

    def state(self, k: int) -> FrameState:
        """The FrameState after event k (0 <= k < n_frames). Raises IndexError otherwise."""
        if not 0 <= k < self.n_frames:
            raise IndexError(f"frame {k} is out of range 0..{self.n_frames - 1}")
        e = self.trace.events[k]
        st = self.trace.events[self._stat_at[k]] if self._stat_at[k] >= 0 else None
        acc = self.trace.events[self._acc_at[k]] if self._acc_at[k] >= 0 else None
        upd = self.trace.events[self._upd_at[k]] if self._upd_at[k] >= 0 else None
        text = self._texts[e.kind].format(i=sub(e.i), j=sub(e.j))
        return FrameState(
            k=k, event=e, text=text, i=e.i, j=e.j, shown_tiles=self.tile_at <= k,
            m=_readonly(None if st is None else st.m), l=_readonly(None if st is None else st.l),
            m_old=_readonly(None if upd is None else upd.m_old),
            rescale=_readonly(None if upd is None else upd.rescale),
            O_acc=_readonly(None if acc is None else acc.O), O_acc_l=_readonly(None if acc is None else acc.l),
            O_done=self.output_written(k), hbm_bytes=int(self.cum_bytes[k]),
            tiles_done=int((self.tile_at <= k).sum()), rows_written=int((self.rows_written_at <= k).sum()),
            rescale_j=-1 if upd is None else upd.j,
            writes_done=int(np.searchsorted(self._write_idx, k, side="right")),
        )
