"""Chapters 3 and 5 exercises: count the tiles, the bytes of a run, FA1's extra traffic; write the mask.

Each check prints its one line (✓ or ✗) and returns a CheckResult; none raises, whatever the
answer (None, a string, a function that fails) or the question's parameters.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from .. import iomodel
from .._checks import check_block, check_flag, check_size
from ..masking import n_key_blocks_visible, visible
from . import CheckResult, Printed, direction, first_line, guarded, never_raises, right, say, wrong  # noqa: F401

#: (Nq, Nk) shapes a learner's mask is tried on: square, Nq < Nk, Nq > Nk, and a single row or column
MASK_SHAPES = ((1, 1), (4, 4), (3, 5), (5, 3), (1, 6), (6, 1), (7, 7), (2, 9), (9, 2))


_say = say


def _number(answer, what: str):
    """(float, None) for a finite real number; (None, a ✗ CheckResult) otherwise."""
    if answer is None or answer is Ellipsis:
        return None, wrong(f"replace the placeholder with your predicted {what}, got {answer!r}")
    if isinstance(answer, bool) or not isinstance(answer, numbers.Real):
        return None, wrong(f"your prediction should be a number ({what}), got {answer!r}")
    value = float(answer)
    if not math.isfinite(value):
        return None, wrong(f"your prediction should be a finite number ({what}), got {answer!r}")
    return value, None


def tile_count(Nq: int, Nk: int, Br: int, Bc: int, causal: bool = False) -> int:
    """How many Br × Bc tiles the forward pass computes (all Tr·Tc; with the causal mask, only
    the tiles where some query sees some key). Same count in FA1 and FA2 order."""
    Nq, Nk = check_size(Nq, "Nq"), check_size(Nk, "Nk")
    Br, Bc, causal = check_block(Br, "Br"), check_block(Bc, "Bc"), check_flag(causal, "causal")
    return sum(n_key_blocks_visible(min((i + 1) * Br, Nq), Nk, Bc, Nq, causal) for i in range(-(-Nq // Br)))


@never_raises(_say)
def check_tile_count(answer, Nq: int, Nk: int, Br: int, Bc: int, causal: bool = False) -> CheckResult:
    """Is ``answer`` the number of tiles S_ij the forward pass computes for these sizes? Exact.
    Prints and returns a CheckResult."""
    try:
        expected = tile_count(Nq, Nk, Br, Bc, causal)
    except (TypeError, ValueError) as exc:
        return _say(wrong(f"the question itself is invalid ({first_line(exc)})"))
    mine, bad = _number(answer, "number of tiles")
    if bad is not None:
        return _say(bad)
    Tr, Tc = -(-Nq // Br), -(-Nk // Bc)
    if mine == expected:
        extra = f", {Tr * Tc - expected} skipped by the mask" if causal else ""
        return _say(right(f"{expected} tiles of {Br}×{Bc}: Tr = ⌈{Nq}/{Br}⌉ = {Tr} query blocks × "
                          f"Tc = ⌈{Nk}/{Bc}⌉ = {Tc} key blocks = {Tr * Tc}{extra}"))
    hint = ("hint: Tr = ⌈Nq/Br⌉ and Tc = ⌈Nk/Bc⌉ (a partial last block still counts)" if not causal else
            "hint: count, for each query block, the key blocks whose first key its last row can see "
            "(j·Bc ≤ r1 − 1 + Nk − Nq)")
    return _say(wrong(f"you said {mine:g}: that is {direction(mine, expected)}. {hint}"))


@never_raises(_say)
def check_run_bytes(answer, N: int, d: int, Br: int, Bc: int, itemsize: int = 4, *, order: str = "fa2",
                    causal: bool = False, rel: float = 0.01) -> CheckResult:
    """Is ``answer`` the HBM traffic (bytes read + written) of one forward run with Nq = Nk = N?
    Compared with ``iomodel.flash_forward_io`` within ``rel`` (1 %). A wrong answer gets a hint
    naming what is read and written how many times. Prints and returns a CheckResult."""
    try:
        io = iomodel.flash_forward_io(N, N, d, Br=Br, Bc=Bc, itemsize=itemsize, order=order, causal=causal)
    except (TypeError, ValueError) as exc:
        return _say(wrong(f"the question itself is invalid ({first_line(exc)})"))
    mine, bad = _number(answer, "number of bytes")
    if bad is not None:
        return _say(bad)
    expected = io.hbm_bytes
    if abs(mine - expected) <= rel * expected:
        moved = {t: io.reads.get(t, 0) + io.writes.get(t, 0) for t in ("Q", "K", "V", "O", "l", "m", "lse")}
        parts = ", ".join(f"{t} {b:,}" for t, b in moved.items() if b)
        return _say(right(f"{expected:,} B ({expected / 2**20:.3f} MiB) = {parts}"))
    if order == "fa2":
        hint = (f"Q read once, K and V read once per query block (Tr = ⌈N/Br⌉ times), O and lse written once "
                f"({itemsize}-byte elements)")
    else:
        hint = (f"K, V read once; Q_i, O_i, l_i, m_i read and O_i, l_i, m_i written once per key block "
                f"(Tc = ⌈N/Bc⌉ times), plus O, l, m initialised once ({itemsize}-byte elements)")
    if causal:
        hint += "; with the causal mask, only the blocks a query block can see are read"
    return _say(wrong(f"you said {mine:,.0f} B: that is {direction(mine, expected)}. hint: {hint}"))


@never_raises(_say)
def check_fa1_extra_bytes(answer, N: int, d: int, Br: int, Bc: int, itemsize: int = 4, *,
                          rel: float = 0.01) -> CheckResult:
    """Is ``answer`` how many more bytes FA1 (key blocks outer) moves than FA2 (query blocks
    outer), non-causal, Nq = Nk = N? Compared with the difference of the two
    ``iomodel.flash_forward_io`` counts within ``rel`` (1 %). Prints and returns a CheckResult."""
    try:
        fa1, fa2 = (iomodel.flash_forward_io(N, N, d, Br=Br, Bc=Bc, itemsize=itemsize, order=o) for o in ("fa1", "fa2"))
    except (TypeError, ValueError) as exc:
        return _say(wrong(f"the question itself is invalid ({first_line(exc)})"))
    mine, bad = _number(answer, "extra bytes")
    if bad is not None:
        return _say(bad)
    expected = fa1.hbm_bytes - fa2.hbm_bytes
    if abs(mine - expected) <= rel * max(abs(expected), itemsize):
        return _say(right(f"FA1 moves {fa1.hbm_bytes:,} B, FA2 {fa2.hbm_bytes:,} B: {expected:,} B more "
                          f"({fa1.hbm_bytes / fa2.hbm_bytes:.2f}x)"))
    return _say(wrong(f"you said {mine:,.0f} B: that is {direction(mine, expected)}. hint: FA1 passes "
                      "Q, O (read and written), l, m (read and written) Tc = ⌈N/Bc⌉ times, FA2 passes K, V "
                      "Tr = ⌈N/Br⌉ times; take the difference of the two totals"))


@never_raises(_say)
def check_causal_mask(fn) -> CheckResult:
    """Is ``fn(r, c, Nq, Nk)`` → bool the bottom-right aligned causal mask (query r sees key c
    iff c <= r + Nk − Nq)? Tried on every (r, c) of several shapes, square, Nq < Nk and Nq > Nk;
    the first disagreement is reported. Prints and returns a CheckResult."""
    if not callable(fn):
        return _say(wrong(f"give a function visible(r, c, Nq, Nk) that returns True or False, got {fn!r}"))
    for Nq, Nk in MASK_SHAPES:
        truth = visible(np.arange(Nq), np.arange(Nk), Nq, Nk)
        for r in range(Nq):
            for c in range(Nk):
                got, failed = guarded(fn, r, c, Nq, Nk, what=f"visible({r}, {c}, {Nq}, {Nk})")
                if failed is not None:
                    return _say(failed)
                if not isinstance(got, (bool, np.bool_)):
                    return _say(wrong(f"visible({r}, {c}, {Nq}, {Nk}) returned {got!r}; return True or False"))
                if bool(got) != bool(truth[r, c]):
                    rule = f"key {c} {'≤' if truth[r, c] else '>'} {r} + {Nk} − {Nq} = {r + Nk - Nq}"
                    return _say(wrong(f"visible({r}, {c}, Nq={Nq}, Nk={Nk}) returned {bool(got)}, but query {r} "
                                      f"{'sees' if truth[r, c] else 'does not see'} key {c} ({rule})"))
    shapes = ", ".join(f"{a}×{b}" for a, b in MASK_SHAPES)
    return _say(right(f"your mask agrees with the bottom-right aligned one on every entry of {shapes}"))
