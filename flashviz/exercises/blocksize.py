"""Chapter 4 exercises: predict the HBM traffic of a block size; find the best tile that fits.

Each check shows its one line (✓ or ✗, ``say``) and returns a CheckResult; none raises, whatever
the answer or the question's parameters. The traffic is exact: a known wrong total gets the hint
that names it (``tiling.forward_bytes_mistakes``, shared with chapters 3 and 5).
"""

from __future__ import annotations

import math
import numbers

from .. import iomodel
from . import CheckResult, direction, exact_note, first_line, known_mistake, never_raises, right, safe_rel, say, wrong
from .tiling import forward_bytes_mistakes


def _budget_bytes(sram_budget) -> int:
    from ..replay.blocksize import sram_budget_bytes

    return sram_budget_bytes(sram_budget)[1]


@never_raises(say)
def check_traffic_prediction(answer_bytes, N: int, d: int, Br: int, Bc: int, itemsize: int = 4, *,
                             order: str = "fa2", causal: bool = False, rel: float = 0.0) -> CheckResult:
    """Is ``answer_bytes`` the HBM traffic (bytes read + written) of the tiled forward pass with
    these N (= Nq = Nk), d, Br, Bc, itemsize, order and mask? Compared with
    ``iomodel.flash_forward_io`` exactly (``rel`` 0; a larger one is narrowed so that no known
    mistake passes). A known wrong total (``tiling.forward_bytes_mistakes``: lse left out, K and V
    read Tc times instead of Tr, …) gets the hint that names it. Shows and returns a CheckResult."""
    try:
        expected = iomodel.flash_forward_io(N, N, d, Br=Br, Bc=Bc, itemsize=itemsize, order=order,
                                            causal=causal).hbm_bytes
        mistakes = forward_bytes_mistakes(N, d, Br, Bc, itemsize, order=order, causal=causal)
    except (TypeError, ValueError) as exc:
        return say(wrong(f"the question itself is invalid ({first_line(exc)})"))
    if answer_bytes is None or isinstance(answer_bytes, bool):
        return say(wrong(f"replace the placeholder with your predicted number of bytes, got {answer_bytes!r}"))
    try:
        mine = float(answer_bytes)
    except (TypeError, ValueError):
        return say(wrong(f"your prediction should be a number of bytes, got {answer_bytes!r}"))
    if not math.isfinite(mine):
        return say(wrong(f"your prediction should be a finite number of bytes, got {answer_bytes!r}"))
    rel = safe_rel(expected, rel, mistakes)
    if abs(mine - expected) <= rel * expected:
        said = f"{mine:,.0f} B ({mine / 2**20:,.2f} MiB)"
        return say(right(f"Br = {Br}, Bc = {Bc} moves {expected:,} B ({expected / 2**20:,.2f} MiB); you said {said}"))
    named = known_mistake(mine, mistakes, expected, rel=rel)
    if named:
        return say(wrong(f"you said {mine:,.0f} B: {direction(mine, expected)}. hint: {named}"))
    if order == "fa2":
        idea = ("Q is read once and O, lse written once; K and V are read once per query block, "
                "Tr = ⌈N/Br⌉ times — so Br sets the traffic, Bc does not")
    else:
        idea = ("K and V are read once; Q_i, O_i, l_i, m_i are read and O_i, l_i, m_i written once per key "
                "block, Tc = ⌈N/Bc⌉ times, plus O, l, m initialised once")
    if causal:
        idea += "; with the causal mask, only the key blocks a query block can see are read"
    return say(wrong(f"you said {mine:,.0f} B: {direction(mine, expected)}. hint: {idea} "
                     f"({itemsize}-byte elements)" + exact_note(mine, expected, rel)))


@never_raises(say)
def check_largest_fitting_tile(answer, N: int, d: int, *, sram_budget, itemsize: int = 4,
                               blocks=iomodel.SWEEP_BLOCKS, order: str = "fa2", causal: bool = False) -> CheckResult:
    """Is ``answer`` (a pair (Br, Bc)) the best fitting block size among ``blocks`` × ``blocks``:
    the one whose SRAM working set fits in ``sram_budget`` (bytes or a preset name such as
    'A100') with the least HBM traffic, ties going to the largest tile (``iomodel.best_fitting_blocks``)?
    A wrong answer is told why: it does not fit, it moves more bytes, or a larger tile moves as few.
    Prints and returns a CheckResult."""
    try:
        M = _budget_bytes(sram_budget)
        rows = iomodel.block_size_sweep(N, d, blocks=blocks, itemsize=itemsize, sram_budget=M, order=order,
                                        causal=causal)
    except (TypeError, ValueError) as exc:
        return say(wrong(f"the question itself is invalid ({first_line(exc)})"))
    best = iomodel.best_of_sweep(rows)
    try:
        Br, Bc = answer
        if any(isinstance(v, bool) or not isinstance(v, numbers.Integral) for v in (Br, Bc)):
            raise TypeError
    except Exception:
        return say(wrong(f"give (Br, Bc) as a pair of integers, got {answer!r}"))
    mine = next((r for r in rows if (r["Br"], r["Bc"]) == (Br, Bc)), None)
    if best is None:
        if mine is None:
            return say(wrong(f"{Br}×{Bc} is not one of the sizes swept {tuple(blocks)}"))
        return say(wrong(f"{Br}×{Bc} needs {mine['sram_bytes']:,} B of SRAM; here nothing fits in {M:,} B"))
    if mine is None:
        return say(wrong(f"{Br}×{Bc} is not in the sweep: Br and Bc must each be one of {tuple(blocks)}"))
    if (Br, Bc) == (best["Br"], best["Bc"]):
        return say(right(f"{Br}×{Bc} fits ({mine['sram_bytes']:,} of {M:,} B of SRAM) and moves the fewest "
                          f"bytes: {mine['hbm_bytes']:,} B"))
    if not mine["fits"]:
        return say(wrong(f"{Br}×{Bc} needs {mine['sram_bytes']:,} B of SRAM, more than M = {M:,} B: it spills"))
    if mine["hbm_bytes"] > best["hbm_bytes"]:
        outer = ("Br (K and V are read once per query block)" if order == "fa2" else
                 "Bc (Q, O, l, m are passed once per key block)")
        return say(wrong(f"{Br}×{Bc} fits, but another fitting tile moves fewer bytes. hint: the traffic falls "
                          f"as {outer} grows; look for a fitting tile with a larger one"))
    return say(wrong(f"{Br}×{Bc} fits and moves as few bytes as any, but a larger tile with the same traffic "
                      "fits too: the sweep breaks ties toward the largest tile"))
