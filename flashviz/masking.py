"""Causal masking, bottom-right aligned (FlashAttention >= 2.1).

Query row ``r`` (0-based, of Nq) sees key column ``c`` (of Nk) iff
``c <= r + Nk - Nq``. For Nq = Nk this is the usual lower triangle; for Nq > Nk
the first ``Nq - Nk`` query rows see no key at all (their output is 0, lse -inf).
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
