"""The grid of tile kinds: the one place that classifies every tile of a run at once.

Every replay (and so every view) that shades, hatches or counts tiles by kind reads this grid;
the algorithm itself (flashviz.tiled, flashviz.backward) classifies one tile at a time with the
same ``masking.tile_kind`` as it goes.
"""

from __future__ import annotations

import numpy as np

from ..masking import tile_kind


def tile_kinds(Nq: int, Nk: int, Br: int, Bc: int, causal: bool = True) -> np.ndarray:
    """(Tr, Tc) array of str (numpy unicode, '<U4' or '<U7'): 'full' / 'partial' / 'skipped'
    for every tile of the Nq × Nk score matrix cut into Br × Bc blocks (Tr = ⌈Nq/Br⌉,
    Tc = ⌈Nk/Bc⌉; the last row and column of tiles may be partial in size).

    Entry (i, j) is ``masking.tile_kind`` of query rows [i·Br, min((i+1)·Br, Nq)) × key columns
    [j·Bc, min((j+1)·Bc, Nk)) under the bottom-right aligned causal mask (query r sees key c iff
    c ≤ r + Nk − Nq): 'skipped' tiles are never loaded or computed (FA2 Algorithm 1, the inner
    loop over j stops early; Algorithm 2 likewise), 'partial' ones are computed and masked to −inf
    (the ``mask_S`` sub-step of ``compute_S``), 'full' ones need no mask. Without a mask
    (``causal=False``) every tile is 'full'.
    """
    Tr, Tc = -(-Nq // Br), -(-Nk // Bc)
    return np.array([[tile_kind(i * Br, min((i + 1) * Br, Nq), j * Bc, min((j + 1) * Bc, Nk), Nq, Nk, causal)
                      for j in range(Tc)] for i in range(Tr)]).reshape(Tr, Tc)
