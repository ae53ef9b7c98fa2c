"""Chapters 3 and 5 exercises: count the tiles, the bytes of a run, FA1's extra traffic; write the mask.

Each check shows its one line (✓ or ✗, ``say``) and returns a CheckResult; none raises, whatever
the answer (None, a string, a function that fails) or the question's parameters. Counts are exact:
a known wrong one (a partial block or the causal skip forgotten, lse left out, K and V read once,
…) gets the hint that names it.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from .. import iomodel
from ..checks import check_block, check_flag, check_size
from ..masking import n_key_blocks_visible, tile_kind, visible
from . import (  # noqa: F401
    CheckResult,
    Printed,
    direction,
    exact_note,
    first_line,
    guarded,
    known_mistake,
    never_raises,
    right,
    safe_rel,
    say,
    wrong,
)

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


def tile_count_mistakes(Nq: int, Nk: int, Br: int, Bc: int, causal: bool = False) -> list[tuple]:
    """[(wrong tile count, hint)]: the counts a learner plausibly gives — ⌊⌋ for ⌈⌉ (a partial last
    block forgotten), Nq·Nk/(Br·Bc), Tr + Tc; with the mask: every tile (the skip forgotten), only
    the tiles no key of which is masked (the diagonal forgotten), half of them."""
    Tr, Tc, fr, fc = -(-Nq // Br), -(-Nk // Bc), Nq // Br, Nk // Bc
    partial = "a partial last block is still a block: Tr = ⌈Nq/Br⌉ and Tc = ⌈Nk/Bc⌉, rounded up"
    out = [(fr * fc, partial), (fr * Tc, partial), (Tr * fc, partial),
           (Nq * Nk / (Br * Bc), "round Tr = ⌈Nq/Br⌉ and Tc = ⌈Nk/Bc⌉ up each, then multiply: a partial tile is a tile"),
           (Tr + Tc, "every query block meets every key block: Tr × Tc, not Tr + Tc")]
    if causal:
        full = sum(1 for i in range(Tr) for j in range(Tc)
                   if tile_kind(i * Br, min((i + 1) * Br, Nq), j * Bc, min((j + 1) * Bc, Nk), Nq, Nk, True) == "full")
        out = [(Tr * Tc, "with the causal mask, a tile whose keys all come after every query of its block is "
                         "skipped: count only the tiles some query can see into"),
               (full, "the tiles on the diagonal are computed too: partly masked, but some of their queries see "
                      "some of their keys"),
               (Tr * Tc / 2, "not half of them: the tiles on the diagonal are computed in full")] + out
    return out


@never_raises(_say)
def check_tile_count(answer, Nq: int, Nk: int, Br: int, Bc: int, causal: bool = False) -> CheckResult:
    """Is ``answer`` the number of tiles S_ij the forward pass computes for these sizes? Exact; a
    known wrong count (``tile_count_mistakes``) gets the hint that names it. Shows and returns a
    CheckResult."""
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
    hint = known_mistake(mine, tile_count_mistakes(Nq, Nk, Br, Bc, causal), expected) or (
        "Tr = ⌈Nq/Br⌉ and Tc = ⌈Nk/Bc⌉ (a partial last block still counts)" if not causal else
        "count, for each query block, the key blocks whose first key its last row can see "
        "(j·Bc ≤ r1 − 1 + Nk − Nq)")
    return _say(wrong(f"you said {mine:g}: {direction(mine, expected)}. hint: {hint}"))


def _moved(io, *names) -> int:
    """Bytes read plus written of the named tensors in an IOCount."""
    return sum(io.reads.get(t, 0) + io.writes.get(t, 0) for t in names)


def _units(expected: int) -> list[tuple]:
    """The right count in MiB, MB, GiB: bytes asked for (a rounded figure, within 0.5 %)."""
    return [(expected / 2**20, "give bytes, not MiB", 5e-3), (expected / 1e6, "give bytes, not MB", 5e-3),
            (expected / 2**30, "give bytes, not GiB", 5e-3)]


def forward_bytes_mistakes(N: int, d: int, Br: int, Bc: int, itemsize: int = 4, *, order: str = "fa2",
                           causal: bool = False) -> list[tuple]:
    """[(wrong HBM bytes, hint)] of one forward pass (Nq = Nk = N), as ``iomodel.flash_forward_io``
    counts it: the totals a learner plausibly gives — a tensor left out (lse, O, Q; in FA1 l and m,
    or their initialisation), K and V read once or Tc times instead of Tr, l and m for lse, the
    other loop order, the causal skip forgotten, elements for bytes, another element size, MiB or
    MB. Used by the byte checks of chapters 3, 4 and 5."""
    def total(**kw):
        args = dict(Br=Br, Bc=Bc, itemsize=itemsize, order=order, causal=causal) | kw
        return iomodel.flash_forward_io(N, N, d, **args).hbm_bytes

    io = iomodel.flash_forward_io(N, N, d, Br=Br, Bc=Bc, itemsize=itemsize, order=order, causal=causal)
    e, b, nd = io.hbm_bytes, itemsize, N * d * itemsize
    Tr, Tc = -(-N // Br), -(-N // Bc)
    out = []
    if order == "fa2":
        kv = _moved(io, "K", "V")
        out += [(e - _moved(io, "lse"), f"lse is missing: one {b}-byte value per query row, written once with O"),
                (e + N * b, "in FA2, m and l stay on chip: only lse (one value per row) is written"),
                (e + 2 * N * b, "in FA2, m and l stay on chip: only lse (one value per row) is written, once"),
                (e - _moved(io, "O"), "O is written once: N×d elements"),
                (e - _moved(io, "Q"), "Q is read once: each query block Q_i before its loop over key blocks"),
                (e - kv + 2 * nd, f"K and V are read once per query block: Tr = ⌈N/Br⌉ = {Tr} times, not once")]
        if not causal and Tc != Tr:
            out.append((e - kv + 2 * Tc * nd, "K and V are read once per query block, Tr = ⌈N/Br⌉ times: Br sets "
                                              "how often, not Bc"))
        if not causal and N % Br:
            out.append((e - kv + 2 * (N // Br) * nd, "a partial last query block reads K and V too: Tr = ⌈N/Br⌉"))
        out.append((total(order="fa1"), "that is FA1's count (key blocks outer); this pass is FA2, query blocks outer"))
    else:
        out += [(e - _moved(io, "l", "m"), "FA1 keeps l_i and m_i in HBM: they are read and written with O_i at "
                                           "every step, and initialised once"),
                (e - N * d * b - 2 * N * b, "O, l and m are initialised in HBM once, before the loops (written once)"),
                (e - N * d * b, "O is initialised in HBM once, before the loops (written once)"),
                (e - _moved(io, "Q") + nd, f"Q_i is read again at every key block: Tc = ⌈N/Bc⌉ = {Tc} times"),
                (total(order="fa2"), "that is FA2's count (query blocks outer); this pass is FA1, key blocks outer")]
    if causal:
        out.append((total(causal=False), "with the causal mask, a query block reads only the key blocks it can see"))
    out.append((e / b, f"those are elements: multiply by {b} bytes each"))
    out += [(total(itemsize=alt), f"the elements here are {b}-byte numbers, not {alt}-byte ones")
            for alt in (2, 4, 8) if alt != b]
    return out + _units(e)


@never_raises(_say)
def check_run_bytes(answer, N: int, d: int, Br: int, Bc: int, itemsize: int = 4, *, order: str = "fa2",
                    causal: bool = False, rel: float = 0.0) -> CheckResult:
    """Is ``answer`` the HBM traffic (bytes read + written) of one forward run with Nq = Nk = N?
    Compared with ``iomodel.flash_forward_io`` exactly (``rel`` 0; a larger one is narrowed so
    that no known mistake passes). A known wrong total (``forward_bytes_mistakes``: lse left out,
    K and V read once, …) gets the hint that names it; another, a hint naming what is read and
    written how many times. Shows and returns a CheckResult."""
    try:
        io = iomodel.flash_forward_io(N, N, d, Br=Br, Bc=Bc, itemsize=itemsize, order=order, causal=causal)
        mistakes = forward_bytes_mistakes(N, d, Br, Bc, itemsize, order=order, causal=causal)
    except (TypeError, ValueError) as exc:
        return _say(wrong(f"the question itself is invalid ({first_line(exc)})"))
    mine, bad = _number(answer, "number of bytes")
    if bad is not None:
        return _say(bad)
    expected = io.hbm_bytes
    rel = safe_rel(expected, rel, mistakes)
    if abs(mine - expected) <= rel * expected:
        moved = {t: io.reads.get(t, 0) + io.writes.get(t, 0) for t in ("Q", "K", "V", "O", "l", "m", "lse")}
        parts = ", ".join(f"{t} {b:,}" for t, b in moved.items() if b)
        return _say(right(f"{expected:,} B ({expected / 2**20:.3f} MiB) = {parts}"))
    hint = known_mistake(mine, mistakes, expected, rel=rel)
    if hint is None:
        if order == "fa2":
            hint = (f"Q read once, K and V read once per query block (Tr = ⌈N/Br⌉ times), O and lse written once "
                    f"({itemsize}-byte elements)")
        else:
            hint = (f"K, V read once; Q_i, O_i, l_i, m_i read and O_i, l_i, m_i written once per key block "
                    f"(Tc = ⌈N/Bc⌉ times), plus O, l, m initialised once ({itemsize}-byte elements)")
        if causal:
            hint += "; with the causal mask, only the blocks a query block can see are read"
        hint += exact_note(mine, expected, rel)
    return _say(wrong(f"you said {mine:,.0f} B: {direction(mine, expected)}. hint: {hint}"))


@never_raises(_say)
def check_fa1_extra_bytes(answer, N: int, d: int, Br: int, Bc: int, itemsize: int = 4, *,
                          rel: float = 0.0) -> CheckResult:
    """Is ``answer`` how many more bytes FA1 (key blocks outer) moves than FA2 (query blocks
    outer), non-causal, Nq = Nk = N? Compared with the difference of the two
    ``iomodel.flash_forward_io`` counts exactly (``rel`` 0; a larger one is narrowed so that no
    known mistake passes); a known wrong difference (FA2's lse, FA1's l and m or their
    initialisation left out, FA1's total, the sign) gets the hint that names it. Shows and returns
    a CheckResult."""
    try:
        fa1, fa2 = (iomodel.flash_forward_io(N, N, d, Br=Br, Bc=Bc, itemsize=itemsize, order=o) for o in ("fa1", "fa2"))
        others = {alt: [iomodel.flash_forward_io(N, N, d, Br=Br, Bc=Bc, itemsize=alt, order=o).hbm_bytes
                        for o in ("fa1", "fa2")] for alt in (2, 4, 8) if alt != itemsize}
    except (TypeError, ValueError) as exc:
        return _say(wrong(f"the question itself is invalid ({first_line(exc)})"))
    mine, bad = _number(answer, "extra bytes")
    if bad is not None:
        return _say(bad)
    expected = fa1.hbm_bytes - fa2.hbm_bytes
    b = itemsize
    mistakes = [(expected + _moved(fa2, "lse"), "FA2 writes lse too (one value per query row): it is part of FA2's total"),
                (expected - _moved(fa1, "l", "m"), "FA1 keeps l_i and m_i in HBM: they are read and written with O_i at "
                                                   "every key block, and initialised once — count them"),
                (expected - N * d * b - 2 * N * b, "FA1 also initialises O, l and m in HBM once, before its loops"),
                (fa1.hbm_bytes, "that is FA1's total: subtract FA2's"),
                (-expected, "FA1 moves more than FA2: give FA1's total minus FA2's"),
                (expected / b, f"those are elements: multiply by {b} bytes each"),
                *[(one - two, f"the elements here are {b}-byte numbers, not {alt}-byte ones")
                  for alt, (one, two) in others.items()],
                *_units(expected)]
    rel = safe_rel(expected, rel, mistakes)
    if abs(mine - expected) <= rel * max(abs(expected), itemsize):
        return _say(right(f"FA1 moves {fa1.hbm_bytes:,} B, FA2 {fa2.hbm_bytes:,} B: {expected:,} B more "
                          f"({fa1.hbm_bytes / fa2.hbm_bytes:.2f}x)"))
    hint = known_mistake(mine, mistakes, expected, rel=rel) or (
        "FA1 passes Q, O (read and written), l, m (read and written) Tc = ⌈N/Bc⌉ times, FA2 passes K, V "
        "Tr = ⌈N/Br⌉ times; take the difference of the two totals" + exact_note(mine, expected, rel))
    return _say(wrong(f"you said {mine:,.0f} B: {direction(mine, expected)}. hint: {hint}"))


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
