"""Chapter 6's reading of a recompute-versus-store record (benchmarks/results/storep-<device>-<date>.json,
``gpu.teaching.store_bench``), without a GPU.

``store_rows(rec)``: the rows in N order with each backward's time and memory; ``crossover(rec)``:
where keeping P stops paying — the smallest N from which the recomputing backward is at least as
fast as the one that reads the stored P (kernel-only), or None when that never happens in the
record.
"""

from __future__ import annotations

#: the backwards of a record, as the chapter names them
NAMES = {"recompute": "recompute P (FlashAttention)", "stored": "read the stored P (same kernel)",
         "naive": "whole matrices (cuBLAS), stored P"}


def _num(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x == x


def store_rows(rec: dict | None) -> list[dict]:
    """[{N, P_bytes, make_P_kernel_ms, <impl>: {call_ms, kernel_ms, peak_bytes, kept_bytes,
    max_rel_err, error}}] for impl in ``NAMES``, in ascending N ([] for None); a missing figure is None."""
    out = []
    for r in sorted((rec or {}).get("bench") or [], key=lambda r: r["N"]):
        row = {"N": r["N"], "P_bytes": r.get("P_bytes"), "make_P_kernel_ms": r.get("make_P_kernel_ms"),
               "setup_error": r.get("setup_error")}
        for impl in NAMES:
            row[impl] = {k: r.get(f"{impl}_{k}") for k in ("call_ms", "kernel_ms", "peak_bytes", "kept_bytes",
                                                           "max_rel_err", "error")}
        out.append(row)
    return out


def crossover(rec: dict | None) -> int | None:
    """The smallest N of the record from which the recomputing backward's kernel-only time is at
    most the stored-P kernel's at every larger N of the record too; None when the largest N is not
    such a row (nothing timed, or one of the two not timed there). A larger row where either was not
    timed ends the run: the crossover never vouches for an N it has no times of."""
    best = None
    for r in reversed(store_rows(rec)):
        a, b = r["recompute"]["kernel_ms"], r["stored"]["kernel_ms"]
        if _num(a) and _num(b) and a <= b:
            best = r["N"]
        else:
            break
    return best
