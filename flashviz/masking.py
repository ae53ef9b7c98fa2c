"""Causal masking, bottom-right aligned (FlashAttention >= 2.1).

Query row ``r`` (0-based, of Nq) sees key column ``c`` (of Nk) iff
``c <= r + Nk - Nq``. For Nq = Nk this is the usual lower triangle; for Nq > Nk
the first ``Nq - Nk`` query rows see no key at all (their output is 0, lse -inf).

Which key blocks a piece of work visits is decided here too: ``n_key_blocks_visible`` for a query
block, ``split_ranges`` for a split of the split-KV decode (``flashviz.decode``), so that the
algorithms and the IO model's closed forms (``flashviz.iomodel``) share one decision.
"""

from __future__ import annotations

import numpy as np


def causal_offset(Nq: int, Nk: int) -> int:
    """The diagonal offset ``Nk - Nq`` of the bottom-right aligned causal mask."""
    return Nk - Nq


def visible(rows: np.ndarray, cols: np.ndarray, Nq: int, Nk: int) -> np.ndarray:
    """Boolean mask (len(rows), len(cols)): True where query ``rows[a]`` may see key ``cols[b]``."""
    return cols[None, :] <= rows[:, None] + causal_offset(Nq, Nk)


def tile_kind(r0: int, r1: int, c0: int, c1: int, Nq: int, Nk: int, causal: bool) -> str:
    """Classify tile rows [r0, r1) x cols [c0, c1): 'full', 'partial' (some masked) or 'skipped'.

    A tile is skipped when even its last row cannot see its first column; it is
    full when its first row sees its last column.
    """
    if not causal:
        return "full"
    off = causal_offset(Nq, Nk)
    if c0 > (r1 - 1) + off:
        return "skipped"
    if (c1 - 1) <= r0 + off:
        return "full"
    return "partial"


def n_key_blocks_visible(r1: int, Nk: int, Bc: int, Nq: int, causal: bool) -> int:
    """How many key blocks a query block ending (exclusive) at row ``r1`` must visit."""
    Tc = -(-Nk // Bc)
    if not causal:
        return Tc
    last_visible = (r1 - 1) + causal_offset(Nq, Nk)
    if last_visible < 0:
        return 0
    return min(Tc, last_visible // Bc + 1)


def split_ranges(Tc: int, num_splits: int) -> list[tuple[int, int]]:
    """The key blocks [j0, j1) of each of ``num_splits`` contiguous splits of Tc key blocks.

    Split s gets blocks ⌊s·Tc/num_splits⌋ .. ⌊(s+1)·Tc/num_splits⌋ − 1: as even as whole blocks
    allow (their sizes differ by at most one), in order, covering 0..Tc−1 once.
    With num_splits > Tc, num_splits − Tc splits are empty (j0 == j1). Used by the split-KV decode
    (``flashviz.decode``, Flash-Decoding step 1) and its IO model (``iomodel.decode_io``).
    FlashAttention's split kernels give each split ⌈Tc/num_splits⌉ blocks instead (the last splits
    shorter or empty); both are exact, only the work per split differs.
    Tc >= 1 and num_splits >= 1 are integers (checked by the callers). Returns a list of
    num_splits (j0, j1) pairs of ints.
    """
    return [(s * Tc // num_splits, (s + 1) * Tc // num_splits) for s in range(num_splits)]
