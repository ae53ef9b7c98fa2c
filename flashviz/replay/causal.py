"""Replay of one causal forward run, one frame per query block (chapter 5, CausalExplorer).

``CausalReplay`` reads a causal FA2 trace (``flash_forward(..., causal=True, record=True)``:
FlashAttention-2 Algorithm 1 with the bottom-right aligned mask, query i sees key j iff
j ≤ i + Nk − Nq): the kind of every tile (``grid.tile_kinds``: full, partial, skipped), the key
blocks each query block visits, FLOPs and HBM bytes summed over the trace block by block, and the
closed forms of ``iomodel.flash_forward_io`` with and without the mask. No drawing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import iomodel
from ..masking import causal_offset, n_key_blocks_visible
from .grid import tile_kinds
from .tiles import sub


def visible_pairs(Nq: int, Nk: int) -> int:
    """How many (query, key) pairs (int, of Nq·Nk) the bottom-right aligned causal mask lets
    through: Σ over query rows r of clip(r + Nk − Nq + 1, 0, Nk) (the entries ``mask_S`` keeps)."""
    r = np.arange(Nq)
    return int(np.clip(r + causal_offset(Nq, Nk) + 1, 0, Nk).sum())


@dataclass
class CausalState:
    """Frame k = query block i: its rows [r0, r1), the key blocks it visits (``visited``, the
    first ones: Alg. 1's inner loop over j stops at the mask), their kinds (``n_full``,
    ``n_partial``), ``n_skipped``; FLOPs (matmul) and HBM bytes of the run through this block
    (``flops_so_far``, ``bytes_so_far``, ints summed over the trace's events); ``text``: a
    sentence for the frame."""

    k: int
    i: int
    r0: int
    r1: int
    visited: int
    n_full: int
    n_partial: int
    n_skipped: int
    flops_so_far: int
    bytes_so_far: int
    text: str


class CausalReplay:
    """A recorded causal FA2 run indexed by query block.

    trace: ``flash_forward(Q, K, V, causal=True, order="fa2", record=True).trace``. Attributes:
    ``trace``; ``n_frames`` (Tr); ``kinds`` ((Tr, Tc) str, ``grid.tile_kinds``); ``io``
    ({"non-causal", "causal"}: IOCount of ``flash_forward_io``, bytes of the trace's element
    size); ``cum_flops``, ``cum_bytes`` ((Tr,) int64: matmul FLOPs and HBM bytes read + written
    through query block i, summed over the trace: FA2 events each carry their i); ``visits``
    (list of Tr ints: key blocks visited by block i, ``masking.n_key_blocks_visible``);
    ``counts`` (the numbers of the summary table: "tiles", "flops", "hbm_bytes" as
    {"non-causal", "causal"} dicts, "kinds" {kind: count}, "visible_pairs", "computed_pairs"
    (pairs in computed tiles)). Raises ValueError for a trace that is not causal, not in FA2
    order or has no events.
    """

    def __init__(self, trace):
        if not trace.causal or trace.order != "fa2" or not trace.events:
            raise ValueError("CausalFigure draws a recorded causal FA2 run: "
                             "flash_forward(Q, K, V, causal=True, order='fa2', record=True).trace")
        self.trace = tr = trace
        self.kinds = tile_kinds(tr.Nq, tr.Nk, tr.Br, tr.Bc)
        kw = {"dv": tr.dv, "Br": tr.Br, "Bc": tr.Bc, "itemsize": tr.itemsize}
        self.io = {"non-causal": iomodel.flash_forward_io(tr.Nq, tr.Nk, tr.d, causal=False, **kw),
                   "causal": iomodel.flash_forward_io(tr.Nq, tr.Nk, tr.d, causal=True, **kw)}
        # FLOPs and bytes through query block i, summed over the trace's events (FA2: each carries i)
        flops, nbytes = np.zeros(tr.Tr, np.int64), np.zeros(tr.Tr, np.int64)
        for e in tr.events:
            flops[e.i] += e.flops
            nbytes[e.i] += sum(e.reads.values()) + sum(e.writes.values())
        self.cum_flops, self.cum_bytes = np.cumsum(flops), np.cumsum(nbytes)
        self.visits = [n_key_blocks_visible(min((i + 1) * tr.Br, tr.Nq), tr.Nk, tr.Bc, tr.Nq, True)
                       for i in range(tr.Tr)]
        n_tiles = {"non-causal": tr.Tr * tr.Tc, "causal": int((self.kinds != "skipped").sum())}
        self.counts = {
            "tiles": n_tiles,
            "flops": {o: self.io[o].flops for o in self.io},
            "hbm_bytes": {o: self.io[o].hbm_bytes for o in self.io},
            "kinds": {kd: int((self.kinds == kd).sum()) for kd in ("full", "partial", "skipped")},
            "visible_pairs": visible_pairs(tr.Nq, tr.Nk),
            "computed_pairs": self.io["causal"].flops // (2 * (tr.d + tr.dv)),
        }

    @property
    def n_frames(self) -> int:
        """One frame per query block: Tr."""
        return self.trace.Tr

    def state(self, k: int) -> CausalState:
        """The CausalState of query block i = k (0 <= k < n_frames). Raises IndexError otherwise."""
        if not 0 <= k < self.n_frames:
            raise IndexError(f"frame {k} is out of range 0..{self.n_frames - 1}")
        tr, i = self.trace, k
        r0, r1 = i * tr.Br, min((i + 1) * tr.Br, tr.Nq)
        t = self.visits[i]
        row = self.kinds[i]
        n_full, n_part = int((row[:t] == "full").sum()), int((row[:t] == "partial").sum())
        fl, nb = int(self.cum_flops[i]), int(self.cum_bytes[i])
        last = min(r1 - 1 + causal_offset(tr.Nq, tr.Nk), tr.Nk - 1)
        rows = f"row {r0}" if r1 - r0 == 1 else f"rows {r0}–{r1 - 1}"
        if t:
            text = (f"Q{sub(i)} ({rows}) sees keys up to {last}: visits {t} of {tr.Tc} key blocks "
                    f"({n_full} full, {n_part} partial), skips {tr.Tc - t}")
        else:
            text = f"Q{sub(i)} ({rows}) sees no key: skips all {tr.Tc} key blocks; O = 0, lse = −inf"
        return CausalState(k, i, r0, r1, t, n_full, n_part, tr.Tc - t, fl, nb, text)
