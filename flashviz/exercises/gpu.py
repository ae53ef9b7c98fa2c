"""Exercises of chapter 7 (the GPU kernel): the bytes one forward must move, the recorded
block-size sweep, and whether the kernel is compute- or memory-bound on the recorded GPU.

``check_compulsory_bytes(answer, N, d, BH, itemsize=2)``: the fewest HBM bytes of one forward
call — Q, K, V read once and O written once (``itemsize`` bytes an element), plus lse (float32,
4 bytes a query row). The checker does this arithmetic itself; exact, and a known wrong total
(lse missing, lse in fp16, O missing, elements, MB, one head) is named: the pattern every byte
check of the lessons follows (``exercises.known_mistake``, ``exercises.safe_rel``).
``check_fastest_blocks((Br, Bc), d=64, causal=False)``: the block size with the least recorded
kernel-only time in the block sweep of the committed results (benchmarks/results/mma-*.json).
``check_intensity(intensity, bound, N=4096, d=64, BH=128)``: FLOPs per compulsory byte, and
"compute" or "memory": which side of the recorded GPU's ridge point (measured fp16 matmul
FLOP/s ÷ measured copy bandwidth) the forward pass sits on.

Each check prints its one line (✓ or ✗) and returns a CheckResult; none raises, whatever the
answer or the question's parameters.
"""

from __future__ import annotations

import numbers

from . import CheckResult, direction, finite_number, known_mistake, never_raises, right, safe_rel, say, wrong


def _positive_ints(**kw):
    for k, v in kw.items():
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
            raise ValueError(f"{k} must be an integer >= 1, got {v!r}")
    return [int(v) for v in kw.values()]


def _bytes_needed(N, d, BH, itemsize):
    """Q, K, V, O: 4·BH·N·d elements of ``itemsize`` bytes; lse: BH·N float32."""
    return 4 * BH * N * d * itemsize + 4 * BH * N


def _results(res):
    if res is not None:
        return res
    from ..records.results import latest_results

    return latest_results("mma")


@never_raises(say)
def check_compulsory_bytes(answer, N: int = 4096, d: int = 64, BH: int = 128, itemsize: int = 2,
                           *, rel: float = 0.0) -> CheckResult:
    """Is ``answer`` the compulsory HBM bytes of one forward call over BH (batch × head) pairs of
    N queries and N keys, head dimension d, ``itemsize``-byte elements (lse in float32)?
    Compared exactly (``rel`` 0; a larger one is narrowed so that no known mistake passes): a
    known wrong total (lse left out or in ``itemsize`` bytes, O left out, elements, MB, one head)
    gets the hint that names it."""
    N, d, BH, itemsize = _positive_ints(N=N, d=d, BH=BH, itemsize=itemsize)
    want = _bytes_needed(N, d, BH, itemsize)
    a = finite_number(answer)
    if a is None:
        if answer is None:
            return say(wrong("replace the placeholder with a number of bytes; got None"))
        return say(wrong(f"give a number of bytes (an int or a float, not a {type(answer).__name__}); "
                         f"got {answer!r:.60}"))
    hints = [
        (4 * BH * N * d * itemsize, "Q, K, V and O are right; lse is missing (one float32 per query row)"),
        (BH * N * (4 * d + 1) * itemsize, f"lse is kept in float32 (4 bytes a row), not {itemsize}-byte elements"),
        (3 * BH * N * d * itemsize + 4 * BH * N, "the output O is written once too"),
        (3 * BH * N * d * itemsize, "count the output O (written once) and lse (float32, one per row)"),
        (BH * N * (4 * d + 1), "those are elements: multiply by the bytes of each"),
        (4 * BH * N * d, "those are elements: multiply by the bytes of each (and add lse)"),
        *[(4 * BH * N * d * alt + 4 * BH * N, f"Q, K, V and O are {itemsize}-byte numbers here, not {alt}-byte")
          for alt in (2, 4, 8) if alt != itemsize],
        (want / 1e6, "give bytes, not MB", 3e-3), (want / 2**20, "give bytes, not MiB", 3e-3),
        (want / BH, f"that is one head: there are BH = {BH} (batch, head) pairs"),
    ]
    rel = safe_rel(want, rel, hints)
    if abs(a - want) <= rel * want:
        return say(right(f"{want:,} B ({want / 1e6:,.1f} MB): Q, K, V read and O written once "
                          f"({4 * BH * N * d * itemsize:,} B) plus lse ({4 * BH * N:,} B)"))
    fallback = (f"{direction(a, want)}: count every byte, the answer is an exact integer. hint: Q, K, V read "
                f"once and O written once, {itemsize}-byte elements, for each of the BH (batch, head) pairs, plus "
                "lse, one float32 per query row")
    hint = known_mistake(a, hints, want, rel=rel)
    return say(wrong(f"you said {a:,.0f} B — " + (f"{direction(a, want)}: {hint}" if hint else fallback)))


KERNEL_ONLY = "kernel-only: the profiler's kernel time per call, median"
TIE = 0.04  #: run-to-run spread of one block's time on the H200 (±4 %, benchmarks/NOTES.md)


@never_raises(say)
def check_fastest_blocks(answer, d: int = 64, causal: bool = False, *, variant: str = "wgmma",
                         res: dict | None = None) -> CheckResult:
    """Is ``answer`` = (Br, Bc) the block size with the least recorded kernel-only time (the
    profiler's kernel time per call, median: a sweep compares one kernel's block sizes) in the
    committed block sweep (``mma_sweep(res, variant=..., d=..., causal=...)``)? A block within
    TIE (4 %) of the fastest counts as right: that is the run-to-run spread."""
    from ..records.results import mma_sweep, recorded_label

    res = _results(res)
    rows = mma_sweep(res, variant=variant, d=d, causal=causal)
    if not rows:
        return say(wrong(f"no recorded sweep for variant={variant!r}, d={d}, causal={causal} in this installation"))
    swept = [(r["Br"], r["Bc"]) for r in rows]
    try:
        Br, Bc = answer
        if any(isinstance(v, bool) or not isinstance(v, numbers.Integral) for v in (Br, Bc)):
            raise TypeError
    except Exception:
        return say(wrong(f"give (Br, Bc) as a pair of integers, e.g. (64, 64); got {answer!r:.60}"))
    best = min(rows, key=lambda r: r["kernel_ms"])
    mine = next((r for r in rows if (r["Br"], r["Bc"]) == (Br, Bc)), None)
    if mine is None:
        return say(wrong(f"{Br}×{Bc} was not measured; the sweep has {', '.join(f'{a}×{b}' for a, b in swept)}"))
    fewest = min(r["model_hbm_bytes"] for r in rows)
    model = (f" The IO model agrees only in part: {Br}×{Bc} moves {mine['model_hbm_bytes'] / 1e9:.2f} GB in the model, "
             f"the fewest is {fewest / 1e9:.2f} GB, and {sum(r['model_hbm_bytes'] == fewest for r in rows)} blocks tie "
             f"there; time also depends on occupancy and MMA shape.")
    if mine is best:
        second = sorted(rows, key=lambda r: r["kernel_ms"])[1]
        return say(right(f"{Br}×{Bc} took {mine['kernel_ms']:.3f} ms kernel-only ({mine['kernel_tflops']:.0f} TFLOP/s), "
                          f"the fastest of {len(rows)}; the next, {second['Br']}×{second['Bc']}, took "
                          f"{100 * (second['kernel_ms'] / mine['kernel_ms'] - 1):.1f}% longer "
                          f"({recorded_label(res).split(' (')[0]}; {KERNEL_ONLY})." + model))
    if mine["kernel_ms"] <= best["kernel_ms"] * (1 + TIE):
        return say(right(f"{Br}×{Bc} took {mine['kernel_ms']:.3f} ms kernel-only, within {100 * TIE:.0f}% of the "
                          f"fastest ({best['Br']}×{best['Bc']}, {best['kernel_ms']:.3f} ms): a tie, since the same block "
                          f"varies by about that much between runs (benchmarks/NOTES.md)." + model))
    hint = (" — it moves the fewest bytes in the IO model, but fewer bytes is not what decides here"
            if mine["model_hbm_bytes"] == fewest and best["model_hbm_bytes"] != fewest else "")
    return say(wrong(f"{Br}×{Bc} took {mine['kernel_ms']:.3f} ms kernel-only, "
                      f"{100 * (mine['kernel_ms'] / best['kernel_ms'] - 1):.1f}% slower than "
                      f"the fastest recorded{hint}; compare the ms column"))


@never_raises(say)
def check_intensity(answer, bound, N: int = 4096, d: int = 64, BH: int = 128, *, itemsize: int = 2,
                    res: dict | None = None, rel: float = 0.02) -> CheckResult:
    """answer: FLOPs per compulsory byte of one forward (no mask): 4·BH·N²·d matmul FLOPs over
    the compulsory bytes (see check_compulsory_bytes); bound: "compute" or "memory" — which
    limits the kernel on the recorded GPU, judged against its ridge point (the recorded
    ceilings: fp16 matmul FLOP/s ÷ copy bytes/s). The number is compared within ``rel`` (2 %),
    narrowed so that no known mistake passes (lse left out is 0.8 % off at d = 64, lse in fp16
    0.4 %: the tolerance here is about 0.2 %)."""
    from ..records.results import recorded_label

    N, d, BH, itemsize = _positive_ints(N=N, d=d, BH=BH, itemsize=itemsize)
    res = _results(res)
    ceil = (res or {}).get("ceilings", {})
    if not ceil.get("matmul_fp16_TFLOPs") or not ceil.get("copy_GBps"):
        return say(wrong("no recorded ceilings (matmul TFLOP/s, copy GB/s) in this installation"))
    flops = 4 * BH * N * N * d
    want = flops / _bytes_needed(N, d, BH, itemsize)
    ridge = ceil["matmul_fp16_TFLOPs"] * 1e12 / (ceil["copy_GBps"] * 1e9)
    truth = "compute" if want > ridge else "memory"
    a = finite_number(answer)
    word = bound.strip().lower().removesuffix("-bound").removesuffix(" bound").strip() \
        if isinstance(bound, str) else None
    if a is None or word is None:
        return say(wrong("replace the placeholders: a number (FLOPs per byte) and \"compute\" or \"memory\"; "
                          f"got {answer!r:.40}, {bound!r:.40}"))
    if word not in ("compute", "memory"):
        return say(wrong(f"the second answer should be \"compute\" or \"memory\", got {bound!r:.40}"))
    device = recorded_label(res).split(",")[0]
    b = itemsize
    hints = [(want / 2, "count both products, QKᵀ and PV, at 2 FLOPs a multiply-add: 4·BH·N²·d FLOPs"),
             (want / 4, "count both products, QKᵀ and PV, at 2 FLOPs a multiply-add: 4·BH·N²·d FLOPs"),
             (want * b, "divide by bytes, not elements"),
             (flops / (4 * BH * N * d * b), "the compulsory bytes include lse (one float32 per query row)"),
             (flops / (BH * N * (4 * d + 1) * b), f"lse is kept in float32 (4 bytes a row), not {b}-byte elements"),
             (flops / (3 * BH * N * d * b + 4 * BH * N), "the compulsory bytes include O, written once"),
             (want / BH, f"FLOPs and bytes of all BH = {BH} pairs, or of one head for both"),
             (want * BH, f"FLOPs and bytes of all BH = {BH} pairs, or of one head for both"),
             (1 / want, "that is bytes per FLOP: the intensity is FLOPs per byte")]
    rel = safe_rel(want, rel, hints)
    if abs(a - want) > rel * want:
        hint = known_mistake(a, hints, want, rel=rel)
        hint = (f"{direction(a, want)}: {hint}" if hint else
                f"{direction(a, want)}; hint: the matmul FLOPs (QKᵀ and PV, 2 per multiply-add) over the "
                "compulsory bytes (Q, K, V read, O written, lse)")
        return say(wrong(f"{a:,.4g} FLOPs per byte — {hint}"))
    if word != truth:
        return say(wrong(f"{a:,.4g} FLOPs per byte is right, but the {device}'s ridge point is {ridge:,.0f} FLOPs "
                          f"per byte ({ceil['matmul_fp16_TFLOPs']:.0f} TFLOP/s ÷ {ceil['copy_GBps']:,.0f} GB/s): "
                          f"which side of it is the kernel on?"))
    return say(right(f"{want:,.0f} FLOPs per byte, {want / ridge:.1f}x the {device}'s ridge point of {ridge:,.0f} "
                      f"({ceil['matmul_fp16_TFLOPs']:.0f} TFLOP/s ÷ {ceil['copy_GBps']:,.0f} GB/s): {truth}-bound"))
