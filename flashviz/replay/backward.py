"""Replay of one tiled backward run (chapter 6, BackwardExplorer).

``BackwardReplay`` indexes a ``flash_backward(..., record=True)`` trace (order "fa2_bwd":
FlashAttention-2 Algorithm 2, the preprocessing D = rowsum(dO ∘ O) per query block, then key
blocks j outer, query blocks i inner) for random access: ``state(k)`` is a ``BackwardState``,
what frame k shows after events[0..k]. One frame per event, one event per backward step of
flashviz.steps (``compute_D``, ``load_KV``, ``load_Qi``, ``recompute_P``, ``accumulate_dV``,
``compute_dS``, ``accumulate_dK``, ``update_dQ``, ``write_dKdV``). Nothing here recomputes
attention: every array is read from the trace's events. No drawing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..iomodel import recompute_extra_flops, standard_backward_io, stored_between_passes
from .grid import tile_kinds

#: What each backward step does, in the paper's names (i: query block, j: key block; the
#: frame names them), keyed by the step names of flashviz.steps (Alg. 2 lines in STEPS).
STEP_TEXT = {
    "compute_D": "preprocess: Dᵢ = rowsum(dOᵢ ∘ Oᵢ), and dQᵢ = 0 in HBM",
    "load_KV": "load Kⱼ, Vⱼ into SRAM;  dKⱼ = dVⱼ = 0 on chip",
    "load_Qi": "load Qᵢ, dOᵢ, lseᵢ, Dᵢ into SRAM",
    "recompute_P": "recompute Sᵢⱼ = scale·QᵢKⱼᵀ, Pᵢⱼ = exp(Sᵢⱼ − lseᵢ): P was never stored",
    "accumulate_dV": "dVⱼ += Pᵢⱼᵀ dOᵢ   (on chip)",
    "compute_dS": "dPᵢⱼ = dOᵢ Vⱼᵀ;   dSᵢⱼ = Pᵢⱼ ∘ (dPᵢⱼ − Dᵢ)   (on chip)",
    "accumulate_dK": "dKⱼ += scale · dSᵢⱼᵀ Qᵢ   (on chip)",
    "update_dQ": "dQᵢ += scale · dSᵢⱼ Kⱼ:  read dQᵢ from HBM, add, write it back",
    "write_dKdV": "write dKⱼ, dVⱼ to HBM, once: key block j is finished",
}
#: the steps during which a tile (P_ij, then dS_ij) is live on chip
AFTER_P = ("recompute_P", "accumulate_dV", "compute_dS", "accumulate_dK", "update_dQ")
#: the event index stored for "never" (a tile not visited, a row not written): int64 max
NEVER = np.iinfo(np.int64).max


@dataclass
class BackwardState:
    """What frame k shows. Arrays are views into the replay's buffers: do not modify.

    event: the event just done; text: a sentence for it (STEP_TEXT); where: "i = …, j = …", the
    blocks it works on; i, j: its query / key block (-1 if none); P, dS: the current tile on chip,
    (rows, cols) float64 (P_ij recomputed by ``recompute_P``, Alg. 2 lines 10-11; dS_ij by
    ``compute_dS``, lines 13-14), None when no tile is live; dK_j, dV_j: the accumulators on chip,
    (Bc rows, d) and (Bc rows, dv) float64 (``accumulate_dK`` line 16, ``accumulate_dV`` line 12),
    None outside a key block; dQ: (Nq, d) float64 dQ in HBM (``update_dQ``, line 15; NaN before
    ``compute_D`` zeroes a row); dKV: (Nk, d + dv) float64 finished [dK | dV] rows
    (``write_dKdV``, line 18; NaN not yet written); hbm_bytes (bytes read + written), flops
    (matmul FLOPs), recompute_flops (those of ``recompute_P``): sums over events[0..k];
    tiles_done: tiles whose P has been recomputed; dQ_updates, blocks_written, D_blocks: counts
    of ``update_dQ``, ``write_dKdV`` and ``compute_D`` events so far.
    """

    k: int
    event: object
    text: str
    where: str
    i: int
    j: int
    P: np.ndarray | None
    dS: np.ndarray | None
    dK_j: np.ndarray | None
    dV_j: np.ndarray | None
    dQ: np.ndarray
    dKV: np.ndarray
    hbm_bytes: int
    flops: int
    recompute_flops: int
    tiles_done: int
    dQ_updates: int
    blocks_written: int
    D_blocks: int


def block_names(e) -> str:
    """The blocks event ``e`` works on, as a frame names them: "i = 1, j = 2", "j = 0" (a key
    block only), "" (none); an index of -1 means "no block"."""
    parts = [f"{n} = {v}" for n, v in (("i", e.i), ("j", e.j)) if v >= 0]
    return ", ".join(parts)


def latest_index(ev, kinds) -> np.ndarray:
    """(len(ev),) int64: for each k, the index of the latest event ≤ k (of the list ``ev``)
    whose kind (a step name of flashviz.steps) is in ``kinds``; -1 if none."""
    out = np.full(len(ev), -1, dtype=np.int64)
    last = -1
    for idx, e in enumerate(ev):
        if e.kind in kinds:
            last = idx
        out[idx] = last
    return out


class BackwardReplay:
    """Index a backward Trace (order "fa2_bwd", ``flash_backward(..., record=True).trace``) for
    random access to frames.

    Attributes: ``trace``; ``n_frames`` (one per event); ``visit_at`` ((Tr, Tc) int64: the event
    index of each tile's ``recompute_P``, NEVER if skipped); ``order`` ((Tr, Tc) float64: visit
    number of each tile, NaN if skipped); ``n_tiles``; ``tile_kinds`` ((Tr, Tc) str,
    ``grid.tile_kinds``); ``D_at`` ((Tr,) int64: ``compute_D`` index per query block);
    ``dQ_updates`` (Tr int64 arrays: ``update_dQ`` indices per query block); ``dKV_full``
    ((Nk, d + dv) float64: the finished [dK | dV]); ``written_at`` ((Nk,) int64); ``cum_bytes``,
    ``cum_flops``, ``cum_recompute`` ((n_frames,) int64: HBM bytes, matmul FLOPs, recomputation
    FLOPs after each event); ``row_tile``, ``col_tile`` (block of each query row / key column);
    ``total`` (IOCount of the run); ``standard`` (IOCount of the standard backward,
    ``iomodel.standard_backward_io``); ``stored`` (bytes kept between the passes: P vs lse,
    ``iomodel.stored_between_passes``); ``extra_flops`` (FLOPs of the recomputation,
    ``iomodel.recompute_extra_flops``). Raises ValueError for a trace that is not a recorded
    backward.
    """

    def __init__(self, trace):
        if not trace.events or trace.order != "fa2_bwd":
            raise ValueError("need the trace of flash_backward(..., record=True)")
        self.trace = tr = trace
        ev = tr.events
        self.n_frames = n = len(ev)
        Tr, Tc = tr.Tr, tr.Tc
        self.visit_at = np.full((Tr, Tc), NEVER, dtype=np.int64)       # index of the tile's recompute_P
        self.D_at = np.full(Tr, NEVER, dtype=np.int64)
        self.dQ_updates = [[] for _ in range(Tr)]                        # update_dQ indices per query block
        self.dKV_full = np.full((tr.Nk, tr.d + tr.dv), np.nan)
        self.written_at = np.full(tr.Nk, NEVER, dtype=np.int64)
        for idx, e in enumerate(ev):
            if e.kind == "recompute_P":
                self.visit_at[e.i, e.j] = idx
            elif e.kind == "compute_D":
                self.D_at[e.i] = idx
            elif e.kind == "update_dQ":
                self.dQ_updates[e.i].append(idx)
            elif e.kind == "write_dKdV":
                self.dKV_full[e.c0:e.c1] = np.hstack([e.dK, e.dV])
                self.written_at[e.c0:e.c1] = idx
        self.dQ_updates = [np.array(u, dtype=np.int64) for u in self.dQ_updates]
        self.all_dQ_updates = np.sort(np.concatenate(self.dQ_updates)) if n else np.zeros(0, np.int64)
        self._P_at, self._dS_at = latest_index(ev, ("recompute_P",)), latest_index(ev, ("compute_dS",))
        self._dK_at, self._dV_at = latest_index(ev, ("accumulate_dK",)), latest_index(ev, ("accumulate_dV",))
        self._kv_at = latest_index(ev, ("load_KV", "write_dKdV"))
        self.cum_bytes = tr.cumulative_hbm_bytes()
        self.cum_flops = np.cumsum([e.flops for e in ev], dtype=np.int64)
        self.cum_recompute = np.cumsum([e.flops if e.kind == "recompute_P" else 0 for e in ev], dtype=np.int64)
        self.order = np.full((Tr, Tc), np.nan)                           # visit number of each tile
        visited = np.argsort(self.visit_at, axis=None, kind="stable")[: int((self.visit_at < NEVER).sum())]
        self.order.flat[visited] = np.arange(len(visited))
        self.n_tiles = len(visited)
        self.tile_kinds = tile_kinds(tr.Nq, tr.Nk, tr.Br, tr.Bc, tr.causal)
        self.row_tile = np.repeat(np.arange(Tr), tr.Br)[: tr.Nq]
        self.col_tile = np.repeat(np.arange(Tc), tr.Bc)[: tr.Nk]
        # totals, the standard backward and the bytes kept between the passes (closed forms)
        self.total = tr.io()
        self.standard = standard_backward_io(tr.Nq, tr.Nk, tr.d, dv=tr.dv, itemsize=tr.itemsize)
        self.stored = stored_between_passes(tr.Nq, tr.Nk, itemsize=tr.itemsize)
        self.extra_flops = recompute_extra_flops(tr.Nq, tr.Nk, tr.d, tr.causal, Br=tr.Br, Bc=tr.Bc)
        self._dQ = np.full((tr.Nq, tr.d), np.nan)
        self._dKV = np.empty_like(self.dKV_full)
        self._order_buf = np.full((tr.Nq, tr.Nk), np.nan)
        self._zero_cache = {}

    def _zeros(self, *shape):
        """A cached zero array (the accumulators just after load_KV)."""
        return self._zero_cache.setdefault(shape, np.zeros(shape))

    def visited_grid(self, k: int) -> np.ndarray:
        """(Nq, Nk) float64: the visit number of each tile visited (``recompute_P``) by frame k,
        at element level, NaN elsewhere (a buffer reused by the next call)."""
        o = np.where(self.visit_at <= k, self.order, np.nan)
        np.copyto(self._order_buf, o[self.row_tile][:, self.col_tile])
        return self._order_buf

    def state(self, k: int) -> BackwardState:
        """The BackwardState after event k (0 <= k < n_frames). Raises IndexError otherwise."""
        if not 0 <= k < self.n_frames:
            raise IndexError(f"frame {k} is out of range 0..{self.n_frames - 1}")
        ev = self.trace.events
        e = ev[k]
        live = e.kind in AFTER_P
        P = ev[self._P_at[k]].P if live else None
        dS = ev[self._dS_at[k]].dS if live and self._dS_at[k] > self._P_at[k] else None
        dK_j = dV_j = None
        kv = self._kv_at[k]
        if kv >= 0 and e.kind != "compute_D" and (ev[kv].kind == "load_KV" or kv == k):
            start = kv
            if e.kind == "write_dKdV":
                dK_j, dV_j = e.dK, e.dV
            else:
                bc, d, dv = ev[kv].c1 - ev[kv].c0, self.trace.d, self.trace.dv
                dK_j = ev[self._dK_at[k]].dK if self._dK_at[k] > start else self._zeros(bc, d)
                dV_j = ev[self._dV_at[k]].dV if self._dV_at[k] > start else self._zeros(bc, dv)
        self._dQ[:] = np.nan
        Br = self.trace.Br
        for i, ups in enumerate(self.dQ_updates):
            if self.D_at[i] > k:
                continue
            r0, r1 = i * Br, min((i + 1) * Br, self.trace.Nq)
            n = int(np.searchsorted(ups, k, side="right"))
            self._dQ[r0:r1] = ev[ups[n - 1]].dQ if n else 0.0
        np.copyto(self._dKV, self.dKV_full)
        self._dKV[self.written_at > k] = np.nan
        return BackwardState(
            k=k, event=e, text=STEP_TEXT[e.kind], where=block_names(e), i=e.i, j=e.j, P=P, dS=dS,
            dK_j=dK_j, dV_j=dV_j, dQ=self._dQ, dKV=self._dKV, hbm_bytes=int(self.cum_bytes[k]),
            flops=int(self.cum_flops[k]), recompute_flops=int(self.cum_recompute[k]),
            tiles_done=int((self.visit_at <= k).sum()),
            dQ_updates=int(np.searchsorted(self.all_dQ_updates, k, side="right")),
            blocks_written=int((self.written_at <= k).sum()), D_blocks=int((self.D_at <= k).sum()))
