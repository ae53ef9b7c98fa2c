"""Exercises of chapter 1 (the memory wall): arithmetic intensity and standard attention's bytes."""

from __future__ import annotations

from ..iomodel import standard_attention_io
from . import close_number, wrong


def check_softmax_intensity(answer, *, flops_per_element: int = 5, itemsize: int = 4, passes: int = 6):
    """FLOPs per byte of a softmax that does ``flops_per_element`` FLOPs per score and streams
    the N² scores ``passes`` times (each pass reads or writes ``itemsize`` bytes per score)."""
    expected = flops_per_element / (passes * itemsize)
    return close_number(answer, expected, rel=0.02, what="FLOPs per byte of the softmax",
                        hint="divide the FLOPs per score by the bytes moved per score: every pass over the "
                             "N² scores reads or writes each one once")


def check_matmul_intensity(answer, N: int, d: int, *, itemsize: int = 4):
    """FLOPs per byte of S = QKᵀ (2·N²·d FLOPs; reads Q, K: 2·N·d elements; writes S: N²)."""
    expected = 2 * N * N * d / ((2 * N * d + N * N) * itemsize)
    return close_number(answer, expected, rel=0.02, what=f"FLOPs per byte of QKᵀ at N = {N}, d = {d}",
                        hint="2 FLOPs per multiply-add over N·N·d of them, divided by the bytes of Q and K "
                             "read plus S written (in elements × bytes each)")


def check_standard_bytes(answer, N: int, d: int, *, itemsize: int = 2):
    """HBM bytes of standard attention (Algorithm 0): (4·N·d + 4·N²)·itemsize."""
    if answer is None:
        return wrong("replace None with your prediction (a number of bytes)")
    expected = standard_attention_io(N, N, d, itemsize=itemsize).hbm_bytes
    return close_number(answer, expected, rel=0.01, what=f"standard attention's HBM bytes at N = {N}, d = {d}",
                        unit=" B", hint="count each N×N matrix (S, P) once per time it is written or read, plus "
                                        "Q, K, V read and O written, all in {itemsize}-byte elements".replace(
                                            "{itemsize}", str(itemsize)))
