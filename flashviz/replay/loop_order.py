"""Replay of two forward runs side by side, FA1 and FA2 loop orders (chapter 5, LoopOrderExplorer).

``LoopOrderReplay`` pairs a trace of the paper's Algorithm 1 (FlashAttention, ``order="fa1"``:
key blocks j outer, O_i, l_i, m_i read and written back at every step) with one of
FlashAttention-2's Algorithm 1 (``order="fa2"``: query blocks i outer, O_i written once) on the
same input, and steps them in lockstep by computed tile: frame k is both runs after their
(k+1)-th ``compute_S``. ``TileSteps`` indexes one run that way; every byte comes from the traces'
events, and ``io_model`` gives ``iomodel.flash_forward_io`` for both orders (equal to the last
frame). No drawing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import iomodel
from .grid import tile_kinds
from .tiles import sub

#: the tensors a forward pass moves, in the order the meters stack them
TENSORS = ("Q", "K", "V", "O", "l", "m", "lse")
#: the load steps: their bytes count toward the tile they load for (the next compute_S)
LOADS = ("init", "load_Q", "load_KV")


class TileSteps:
    """One run's Trace indexed by computed tile.

    trace: ``flash_forward(..., record=True).trace`` (order "fa1" or "fa2"). Every event belongs
    to one tile step: loads (``init``, ``load_Q``, ``load_KV``: FA2 Alg. 1 lines 4, 5, 7; FA1
    Alg. 1 lines 2, 6, 8) to the tile they load for (the next ``compute_S``, Alg. 1 line 8),
    every other event (``update_ml``, ``accumulate_O``, ``write_O``) to the latest computed tile.
    Attributes: ``order``; ``trace``; ``tiles`` ((n, 2) int64: (i, j) of each step);
    ``visit`` ((Tr, Tc) int64: the step at which each tile is computed, −1 if never); ``cum``
    ((n, len(TENSORS)) int64: bytes read + written per tensor up to and including step k);
    ``o_writes`` ((n,) int64: O_i writes to HBM so far, FA1's initial O = 0 counted as one).
    Raises ValueError for a trace with no computed tile or one that moves another tensor.
    """

    def __init__(self, trace):
        ev = trace.events
        self.order, self.trace = trace.order, trace
        self.tiles = np.array([(e.i, e.j) for e in ev if e.kind == "compute_S"], dtype=np.int64).reshape(-1, 2)
        n = len(self.tiles)
        if n == 0:
            raise ValueError("the trace has no computed tile: run flash_forward(..., record=True)")
        per = np.zeros((n, len(TENSORS)), dtype=np.int64)
        writes = np.zeros(n, dtype=np.int64)
        col = {t: c for c, t in enumerate(TENSORS)}
        t = -1
        for e in ev:
            if e.kind == "compute_S":
                t += 1
            step = min(t + 1 if e.kind in LOADS else max(t, 0), n - 1)
            for name, b in (*e.reads.items(), *e.writes.items()):
                if name not in col:
                    raise ValueError(f"a forward trace moves only {TENSORS}, got {name!r}")
                per[step, col[name]] += b
            writes[step] += "O" in e.writes
        self.cum = np.cumsum(per, axis=0)
        self.o_writes = np.cumsum(writes)
        self.visit = np.full((trace.Tr, trace.Tc), -1, dtype=np.int64)
        self.visit[self.tiles[:, 0], self.tiles[:, 1]] = np.arange(n)

    @property
    def n_steps(self) -> int:
        """Number of computed tiles (``compute_S`` events)."""
        return len(self.tiles)

    def bytes_at(self, k: int) -> dict:
        """{tensor: bytes read + written (int)} after step k, for every tensor of TENSORS."""
        return {t: int(b) for t, b in zip(TENSORS, self.cum[k])}

    def frame(self, k: int) -> RunFrame:
        """The RunFrame of this run after tile step k (0 <= k < n_steps)."""
        b = self.bytes_at(k)
        i, j = (int(x) for x in self.tiles[k])
        return RunFrame(self.order, (i, j), b, sum(b.values()), int(self.o_writes[k]))


@dataclass
class RunFrame:
    """One run at one tile step: ``order`` ("fa1" | "fa2"), ``tile`` (i, j) just computed
    (``compute_S``, Alg. 1 line 8), ``bytes`` {tensor: bytes read + written so far},
    ``hbm_bytes`` their sum (bytes), ``o_writes`` O_i writes to HBM so far (``write_O``)."""

    order: str
    tile: tuple
    bytes: dict
    hbm_bytes: int
    o_writes: int


@dataclass
class LoopOrderState:
    """Frame k: both runs (``fa1``, ``fa2``: RunFrame) after their (k+1)-th computed tile, and
    the step text ("tile step k+1/n: FA1 computes S₁,₀, FA2 computes S₀,₁")."""

    k: int
    fa1: RunFrame
    fa2: RunFrame
    text: str


class LoopOrderReplay:
    """FA1 and FA2 runs of the same input, in lockstep by computed tile.

    trace_fa1, trace_fa2: recorded runs of ``flash_forward`` on the same Q, K, V with the same
    Br, Bc and mask, ``order="fa1"`` and ``"fa2"``. Attributes: ``steps`` ({"fa1": TileSteps,
    "fa2": TileSteps}); ``io_model`` ({order: IOCount}: ``iomodel.flash_forward_io`` of both
    orders, bytes of the traces' element size); ``kinds`` ((Tr, Tc) str, ``grid.tile_kinds``);
    ``n_frames`` (computed tiles). Raises ValueError when the traces do not match.
    """

    def __init__(self, trace_fa1, trace_fa2):
        if (trace_fa1.order, trace_fa2.order) != ("fa1", "fa2"):
            raise ValueError(f"give an order='fa1' trace then an order='fa2' one, got "
                             f"{trace_fa1.order!r}, {trace_fa2.order!r}")
        same = ("Nq", "Nk", "d", "dv", "Br", "Bc", "causal", "itemsize")
        diff = [a for a in same if getattr(trace_fa1, a) != getattr(trace_fa2, a)]
        if diff:
            raise ValueError(f"the two traces differ in {', '.join(diff)}: run both on the same input and blocks")
        tr = trace_fa2
        self.steps = {"fa1": TileSteps(trace_fa1), "fa2": TileSteps(trace_fa2)}
        if self.steps["fa1"].n_steps != self.steps["fa2"].n_steps:
            raise ValueError("the two runs computed a different number of tiles")
        self.io_model = {o: iomodel.flash_forward_io(tr.Nq, tr.Nk, tr.d, dv=tr.dv, Br=tr.Br, Bc=tr.Bc,
                                                     itemsize=tr.itemsize, order=o, causal=tr.causal)
                         for o in ("fa1", "fa2")}
        self.kinds = tile_kinds(tr.Nq, tr.Nk, tr.Br, tr.Bc, tr.causal)

    @property
    def n_frames(self) -> int:
        """Number of computed tiles (the same in both runs)."""
        return self.steps["fa2"].n_steps

    def state(self, k: int) -> LoopOrderState:
        """The LoopOrderState of tile step k (0 <= k < n_frames). Raises IndexError otherwise."""
        if not 0 <= k < self.n_frames:
            raise IndexError(f"frame {k} is out of range 0..{self.n_frames - 1}")
        f1, f2 = self.steps["fa1"].frame(k), self.steps["fa2"].frame(k)
        (i1, j1), (i2, j2) = f1.tile, f2.tile
        text = (f"tile step {k + 1}/{self.n_frames}: FA1 computes S{sub(i1)},{sub(j1)}, "
                f"FA2 computes S{sub(i2)},{sub(j2)}")
        return LoopOrderState(k, f1, f2, text)
