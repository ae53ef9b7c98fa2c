"""The Trace: one event per step of a tiled run.

One format feeds both the counters (``Trace.io()`` sums bytes and FLOPs over the
events) and the animation (the widgets replay the events' snapshots). Nothing else
recomputes a run.

Event kinds, in FA2 order for query block i:
``load_Q`` (Q_i → SRAM), then per key block j: ``load_KV`` (K_j, V_j → SRAM),
``compute_S`` (S_ij = scale·Q_i K_jᵀ), ``update_ml`` (m, l and the rescale factor
exp(m_old − m_new)), ``accumulate_O`` (O_i ← rescale·O_i + P_ij V_j); finally
``write_O`` (O_i = O_i / l_i and lse_i → HBM). FA1 order loads Q_i, O_i, l_i, m_i in
``load_Q`` and writes them back in ``write_O`` for every (j, i) step, after an
``init`` event that writes O = 0, l = 0, m = −inf to HBM. The split-KV decode
(``flashviz.decode``, a DecodeTrace of DecodeEvents) runs the FA2 steps inside each split, then
``write_partial`` (the split's O_s, lse_s → HBM), ``merge`` (one per split, read back and rescaled)
and ``write_O``. The kinds are step names of
``flashviz.steps`` (which cites the algorithm lines of each); ``EVENT_KINDS`` lists them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import steps as _steps
from .iomodel import IOCount

# The event kinds are the traced steps of flashviz.steps, in its order: the forward's, then the
# backward's (flashviz.backward: preprocessing, then key blocks j outer, query blocks i inner).
EVENT_KINDS = _steps.EVENT_KINDS


@dataclass
class TraceEvent:
    """One step. Indices: i (query block), j (key block, -1 when not applicable);
    rows [r0, r1) of Q/O and cols [c0, c1) of K/V it touches. reads/writes: HBM bytes
    per tensor moved by this step; flops: matmul FLOPs of this step; tile: 'full',
    'partial' (causal mask cuts it) or '' when no tile is involved.

    Snapshots (``record=True`` only; None otherwise), float arrays over the block rows:
    m, l (after the step), m_old, rescale = exp(m_old − m_new), S (scaled, masked
    scores of the tile, −inf where masked), P (exp(S − m_new)), O (the unnormalised
    accumulator after ``accumulate_O``; the finished O_i at ``write_O``), lse (at ``write_O``).
    """

    kind: str
    i: int
    j: int
    r0: int
    r1: int
    c0: int
    c1: int
    reads: dict = field(default_factory=dict)
    writes: dict = field(default_factory=dict)
    flops: int = 0
    tile: str = ""
    m: np.ndarray | None = None
    l: np.ndarray | None = None
    m_old: np.ndarray | None = None
    rescale: np.ndarray | None = None
    S: np.ndarray | None = None
    P: np.ndarray | None = None
    O: np.ndarray | None = None
    lse: np.ndarray | None = None


@dataclass
class Trace:
    """All events of one run plus its configuration.

    Nq, Nk, d, dv: sizes; Br, Bc, Tr, Tc: blocks; causal, order, scale; itemsize: bytes
    per element used for the byte counts; sram_bytes: on-chip working set reserved; rescale:
    False for a "break it" run (the events' ``rescale`` then holds the factor the exact
    algorithm would apply, which this run did not).
    """

    Nq: int
    Nk: int
    d: int
    dv: int
    Br: int
    Bc: int
    causal: bool
    order: str
    scale: float
    itemsize: int
    sram_bytes: int
    events: list = field(default_factory=list)
    rescale: bool = True      # False: the "break it" run, where exp(m_old − m_new) is NOT applied

    @property
    def Tr(self) -> int:
        """Number of query blocks, ceil(Nq / Br)."""
        return -(-self.Nq // self.Br)

    @property
    def Tc(self) -> int:
        """Number of key blocks, ceil(Nk / Bc)."""
        return -(-self.Nk // self.Bc)

    def __len__(self) -> int:
        return len(self.events)

    def __getitem__(self, k):
        return self.events[k]

    def io(self, upto: int | None = None) -> IOCount:
        """Sum the bytes and FLOPs of events[:upto] (all when None) into an IOCount."""
        total = IOCount(sram_bytes=self.sram_bytes)
        for ev in self.events[:upto]:
            total.add(ev.reads, ev.writes, ev.flops)
        return total

    def cumulative_hbm_bytes(self) -> np.ndarray:
        """Bytes read + written after each event, shape (len(events),), int64."""
        per = np.array([sum(e.reads.values()) + sum(e.writes.values()) for e in self.events], dtype=np.int64)
        return np.cumsum(per)


class Recorder:
    """Counts every step into an IOCount; keeps the events (with snapshots) only when recording."""

    def __init__(self, trace: Trace, record: bool):
        self.trace = trace
        self.record = record
        self.io = IOCount(sram_bytes=trace.sram_bytes)

    #: the event class kept when recording (a subclass may carry more fields: ``extra`` fills them)
    event_cls = TraceEvent

    def emit(self, kind, i, j, r0, r1, c0, c1, *, reads=None, writes=None, flops=0, tile="", extra=None, **snap):
        """Count one step (bytes per tensor, FLOPs); when recording, keep it as an ``event_cls`` with
        copies of the arrays in ``snap`` and the fields in ``extra`` (a dict, kept as given)."""
        self.io.add(reads, writes, flops)
        if self.record:
            snap = {k: (None if v is None else np.array(v, copy=True)) for k, v in snap.items()}
            self.trace.events.append(self.event_cls(kind, i, j, r0, r1, c0, c1, dict(reads or {}),
                                                    dict(writes or {}), int(flops), tile, **snap, **(extra or {})))
