"""Exercises of chapter 1 (the memory wall): arithmetic intensity and standard attention's bytes.

Each check shows its one line (✓ or ✗, ``say``) and returns a CheckResult; none raises. A known
wrong answer (a missing term, a missing factor, the wrong element size) gets the hint that
names it; no tolerance lets one pass (``close_number`` narrows it with ``safe_rel``).
"""

from __future__ import annotations

from ..iomodel import standard_attention_io
from . import CheckResult, close_number, never_raises, say, wrong


def _other_sizes(value_per_byte: float, itemsize: int, *, dividing: bool = False):
    """(value at another element size, hint) for 2-, 4- and 8-byte elements other than ``itemsize``."""
    for alt in (2, 4, 8):
        if alt != itemsize:
            v = value_per_byte / alt if dividing else value_per_byte * alt
            yield v, f"the elements here are {itemsize}-byte numbers, not {alt}-byte ones"


@never_raises(say)
def check_softmax_intensity(answer, *, flops_per_element: int = 5, itemsize: int = 4, passes: int = 6) -> CheckResult:
    """FLOPs per byte of a softmax that does ``flops_per_element`` FLOPs per score and streams
    the N² scores ``passes`` times (each pass reads or writes ``itemsize`` bytes per score).
    Within 2 % (or less: no known mistake passes)."""
    f, b, p = flops_per_element, itemsize, passes
    mistakes = [(f / b, f"that is one pass: the scores are streamed {p} times, {b} bytes a score each time"),
                (f / p, f"divide by bytes, not by passes: each pass moves {b} bytes a score"),
                (p * b / f, "that is bytes per FLOP: the intensity is FLOPs per byte"),
                (1 / (p * b), f"a score costs {f} FLOPs (max, subtract, exp, sum, divide), not 1"),
                (f / (2 * p * b), f"a pass reads or writes each score once: {b} bytes a score a pass, not twice that"),
                *_other_sizes(f / p, b, dividing=True)]
    return say(close_number(answer, f / (p * b), rel=0.02, what="FLOPs per byte of the softmax", mistakes=mistakes,
                            hint="divide the FLOPs per score by the bytes moved per score: every pass over the "
                                 "N² scores reads or writes each one once"))


@never_raises(say)
def check_matmul_intensity(answer, N: int, d: int, *, itemsize: int = 4) -> CheckResult:
    """FLOPs per byte of S = QKᵀ (2·N²·d FLOPs; reads Q, K: 2·N·d elements; writes S: N²).
    Within 2 % (or less: no known mistake passes)."""
    flops, elements, b = 2 * N * N * d, 2 * N * d + N * N, itemsize
    mistakes = [(flops / 2 / (elements * b), "a multiply-add is 2 FLOPs: N·N·d of them make 2·N²·d FLOPs"),
                (flops / elements, f"divide by bytes, not elements: {b} bytes each"),
                (flops / (2 * N * d * b), "count S written too: N² elements, the largest part of the traffic"),
                (flops / (N * N * b), "count Q and K read too: 2·N·d elements"),
                (flops / ((2 * N * d + 2 * N * N) * b), "QKᵀ writes S once and does not read it back: N² elements"),
                (flops / ((3 * N * d + N * N) * b), "QKᵀ reads only Q and K (V is not needed for S)"),
                ((elements * b) / flops, "that is bytes per FLOP: the intensity is FLOPs per byte"),
                *_other_sizes(flops / elements, b, dividing=True)]
    return say(close_number(answer, flops / (elements * b), rel=0.02, what=f"FLOPs per byte of QKᵀ at N = {N}, d = {d}",
                            mistakes=mistakes,
                            hint="2 FLOPs per multiply-add over N·N·d of them, divided by the bytes of Q and K "
                                 "read plus S written (in elements × bytes each)"))


@never_raises(say)
def check_standard_bytes(answer, N: int, d: int, *, itemsize: int = 2) -> CheckResult:
    """HBM bytes of standard attention (Algorithm 0): (4·N·d + 4·N²)·itemsize. Exact."""
    if answer is None:
        return say(wrong("replace None with your prediction (a number of bytes)"))
    expected = standard_attention_io(N, N, d, itemsize=itemsize).hbm_bytes
    b, nd, nn = itemsize, N * d, N * N
    mistakes = [(4 * nn * b, "add Q, K, V read and O written: four N×d matrices, 4·N·d elements"),
                ((3 * nd + 4 * nn) * b, "Q, K and V are each read once and O is written once: four N×d matrices"),
                ((2 * nd + 4 * nn) * b, "Q, K and V are each read once and O is written once: four N×d matrices"),
                ((4 * nd + 2 * nn) * b, "S and P are each written once and read back once: 4·N² elements"),
                ((4 * nd + 3 * nn) * b, "S and P are each written once and read back once: 4·N² elements"),
                (4 * nd + 4 * nn, f"those are elements: multiply by {b} bytes each"),
                *_other_sizes(4 * nd + 4 * nn, b),
                (expected / 2**20, "give bytes, not MiB", 5e-3), (expected / 1e6, "give bytes, not MB", 5e-3),
                (expected / 2**30, "give bytes, not GiB", 5e-3)]
    return say(close_number(answer, expected, rel=0.0, what=f"standard attention's HBM bytes at N = {N}, d = {d}",
                            unit=" B", mistakes=mistakes,
                            hint=f"count each N×N matrix (S, P) once per time it is written or read, plus "
                                 f"Q, K, V read and O written, all in {itemsize}-byte elements"))
