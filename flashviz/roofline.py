"""The memory wall, measured on this machine (chapter 1): how fast the CPU does the two kinds of
work in standard attention — the matrix product S = QKᵀ (much arithmetic per byte) and the
elementwise exp over S (one FLOP per 8 bytes moved) — as achieved FLOP/s against arithmetic
intensity (FLOPs per byte), the roofline picture (Williams, Waterman, Patterson 2009) that the
FlashAttention paper's Section 2 argues from.

Counting (float32, one head): QKᵀ does 2·N²·d FLOPs and moves at least (2·N·d + N²)·4 bytes
(read Q and K, write S); exp over S does N² FLOPs and moves 2·N²·4 bytes (read S, write P).
"""

from __future__ import annotations

import time

import numpy as np

from .checks import check_size

#: the sizes chapter 1 measures
ROOFLINE_N = (256, 512, 1024, 2048)
#: the largest N or d measured (an 8192 x 8192 float32 S is 256 MiB and takes seconds)
MAX_N = 8192


def best_seconds(f, repeat: int = 7) -> float:
    """The fastest of ``repeat`` timed calls of ``f`` after one warm-up call (seconds): the run
    least disturbed by other work on a shared machine."""
    f()
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    return float(min(ts))


def measure_intensity(Ns=ROOFLINE_N, d: int = 64, *, repeat: int = 7, seed: int = 0) -> list[dict]:
    """Time QKᵀ and exp(S) for each N in ``Ns`` (float32, random normal Q and K of shape (N, d)).

    Returns one dict per N: N, d, mm_flops (2·N²·d), mm_bytes ((2·N·d + N²)·4), mm_s (seconds,
    best of ``repeat``), ew_flops (N²), ew_bytes (2·N²·4), ew_s (seconds). Raises ValueError /
    TypeError for N or d that are not integers in 1..MAX_N, or repeat < 1.
    """
    Ns = [_capped(N, "N") for N in Ns]
    d = _capped(d, "d")
    repeat = check_size(repeat, "repeat")
    rng = np.random.default_rng(seed)
    rows = []
    for N in Ns:
        Q = rng.standard_normal((N, d), dtype=np.float32)
        K = rng.standard_normal((N, d), dtype=np.float32)
        S = Q @ K.T
        P = np.empty_like(S)
        rows.append(dict(N=N, d=d, mm_flops=2 * N * N * d, mm_bytes=(2 * N * d + N * N) * 4,
                         mm_s=best_seconds(lambda: np.matmul(Q, K.T, out=S), repeat),
                         ew_flops=N * N, ew_bytes=2 * N * N * 4,
                         ew_s=best_seconds(lambda: np.exp(S, out=P), repeat)))
    return rows


def _capped(value, name: str) -> int:
    value = check_size(value, name)
    if value > MAX_N:
        raise ValueError(f"{name} must be at most {MAX_N} here (an {MAX_N}² float32 S is 256 MiB), got {value}")
    return value


#: the copy that measures the memory roof: 4096² float32 = 64 MiB, larger than a CPU's last-level cache
ROOF_N = 4096


def copy_bandwidth(N: int = ROOF_N, *, repeat: int = 3) -> float:
    """Memory bandwidth of this machine (bytes per second): an (N, N) float32 array copied into
    another (read + write = 2·N²·4 bytes), best of ``repeat``. A copy does no arithmetic, so its
    speed is the memory roof (the exp over S is not: on a CPU the exp itself costs more time than
    moving its bytes). Raises ValueError / TypeError for N outside 1..MAX_N or repeat < 1."""
    N = _capped(N, "N")
    repeat = check_size(repeat, "repeat")
    S = np.ones((N, N), dtype=np.float32)
    P = np.empty_like(S)
    return 2 * S.nbytes / best_seconds(lambda: np.copyto(P, S), repeat)
