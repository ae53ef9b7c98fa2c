"""One way to time a GPU implementation, the same for every implementation we compare.

``measure(calls)`` times a public call (a function of no arguments that does what a user's
call does: checks, allocation, launch) three ways, on the same inputs:

* ``call_ms`` — the public call as a user sees it: CUDA events recorded on the current
  stream just before and just after each call, calls issued back to back (no synchronisation
  between them), median over ``repeat`` calls. When the host takes longer per call than the
  GPU, this is host-bound and shows it; when the GPU is slower, it is the GPU time.
* ``kernel_ms`` — kernel-only: the GPU work one call launches, from the profiler
  (``torch.profiler`` over CUPTI, which records every kernel in the process, CuPy's too):
  the durations of the kernels (and memsets / copies) of each call summed, median over
  calls. No host time, no launch gaps.
* ``host_us`` — host time per call: calls queued without synchronising, the wall-clock time
  of each call on the host; the median of each round, and the lowest round (microseconds).
  Where several implementations are compared (``host_times_us``), the rounds alternate
  between them, so all see the same background load. The median keeps one garbage
  collection or page fault from moving the figure, the best round keeps passing background
  work out of it, as ``timeit`` does. Work the call waits for (an implicit synchronisation)
  counts, as it does for the user.

A torch.profiler session leaves every later torch call in the process slower on the host
(see ``measure``), so call and host times are taken before any profiler session of the
process: a benchmark times every call and host figure first and every kernel-only figure in
a second pass.

``calls`` may be a list of such functions, one per input set; they are used in turn, so a
benchmark whose inputs fit in L2 can rotate several sets (``input_sets``). Everything runs
on CuPy's current stream, which must be the one the calls use (the legacy default stream
for both CuPy and torch unless a program changes it).

Both tracks' benchmarks also share how they count: ``attention_flops`` (matmul FLOPs, halved
for causal) and ``cupy_peak_bytes`` (peak device memory of one call).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from contextlib import nullcontext

import numpy as np

from .common import cupy

#: method strings recorded beside the numbers
CALL_METHOD = ("public call; CUDA events around each call on the current stream, calls issued back to back; "
               "median; before any profiler session of the process")
KERNEL_METHOD = ("kernel-only; torch.profiler (CUPTI) durations of the GPU kernels, memsets and copies each call "
                 "launches, summed per call; median")
HOST_METHOD = ("host time per call; calls queued without synchronising, wall clock of each call, median of a round; "
               "rounds alternate between the implementations compared; lowest round; before any profiler session of "
               "the process")

_GPU_CATS = ("kernel", "gpu_memset", "gpu_memcpy")


def input_sets(bytes_per_set: int, l2_bytes: int, *, most: int = 8) -> int:
    """How many input sets to rotate so that consecutive calls do not find their inputs in
    L2: 1 when one set is over 3x the L2 size, else enough sets to cover 3x L2 (at most
    ``most``)."""
    if bytes_per_set <= 0:
        raise ValueError(f"bytes_per_set must be > 0, got {bytes_per_set}")
    return int(min(most, max(1, -(-3 * l2_bytes // bytes_per_set))))


def _as_list(calls):
    return list(calls) if isinstance(calls, (list, tuple)) else [calls]


def _sync():
    cupy().cuda.runtime.deviceSynchronize()


def call_times_ms(calls, repeat: int = 30, warmup: int = 3) -> list[float]:
    """CUDA-event times (ms) of ``repeat`` back-to-back public calls (see the module text)."""
    cp = cupy()
    calls = _as_list(calls)
    for i in range(warmup):
        calls[i % len(calls)]()
    _sync()
    events = [(cp.cuda.Event(), cp.cuda.Event()) for _ in range(repeat)]
    for i, (a, b) in enumerate(events):
        a.record()
        calls[i % len(calls)]()
        b.record()
    events[-1][1].synchronize()
    return [cp.cuda.get_elapsed_time(a, b) for a, b in events]


def host_time_us(calls, repeat: int = 30, rounds: int = 3) -> float:
    """Host microseconds per call of one implementation (``host_times_us`` with one entry)."""
    return host_times_us({"one": calls}, repeat=repeat, rounds=rounds)["one"]


def host_times_us(named: dict, repeat: int | dict = 30, rounds: int = 3, contexts: dict | None = None) -> dict:
    """Host microseconds per call of several implementations, compared alike: in each of
    ``rounds`` rounds, every implementation in turn gets ``repeat`` calls queued without
    synchronising and the median of each call's wall-clock time; each keeps its lowest round.

    named: {key: calls (a call or a list of calls over input sets)}; repeat: an int, or
    {key: int} (``measure``'s ``host_repeat`` suits each implementation); contexts: {key: a
    function returning a context manager entered around that key's calls, outside the timed
    region (e.g. SDPA's backend choice)}. Alternating the rounds puts every implementation
    under the same background load of the process. Returns
    {key: µs}."""
    clock = time.perf_counter
    best = {key: float("inf") for key in named}
    contexts = contexts or {}
    for _ in range(rounds):
        for key, calls in named.items():
            calls = _as_list(calls)
            ctx = contexts.get(key)
            n = repeat[key] if isinstance(repeat, dict) else repeat
            with (ctx() if ctx else nullcontext()):
                calls[0]()
                _sync()
                ts = [0.0] * (n + 1)
                ts[0] = clock()
                for i in range(n):
                    calls[i % len(calls)]()
                    ts[i + 1] = clock()
                _sync()
            best[key] = min(best[key], float(np.median(np.diff(ts))) * 1e6)
    return best


_SESSIONS = [0]     #: torch.profiler sessions this process has run (gpu_activity)


def profiled() -> bool:
    """Whether this process has run a torch.profiler session (``gpu_activity``): host and
    host-bound call times measured after one read high (see ``measure``)."""
    return _SESSIONS[0] > 0


def gpu_activity(calls, repeat: int = 10) -> list[dict]:
    """The GPU activities (kernels, memsets, copies) of ``repeat`` calls, in start order, from
    torch.profiler: dicts with name, cat, ts (µs), dur (µs). Needs torch with CUDA."""
    from torch.profiler import ProfilerActivity, profile
    calls = _as_list(calls)
    _sync()
    _SESSIONS[0] += 1
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for i in range(repeat):
            calls[i % len(calls)]()
        _sync()
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path, encoding="utf-8") as f:
            trace = json.load(f)
    finally:
        os.unlink(path)
    evs = [{"name": e.get("name", "?"), "cat": e.get("cat"), "ts": float(e["ts"]), "dur": float(e.get("dur", 0))}
           for e in trace.get("traceEvents", []) if e.get("ph") == "X" and e.get("cat") in _GPU_CATS]
    return sorted(evs, key=lambda e: e["ts"])


def kernel_times_ms(calls, repeat: int = 10) -> dict:
    """Kernel-only time per call (see the module text): {"kernel_ms" (median per call, or the
    mean when the activities do not split evenly into calls), "per_call" (activities per
    call), "kernel_name" (the longest kernel's name), "kernel_note" (when the mean was used)}.
    Raises RuntimeError when the profiler saw no GPU work."""
    evs = gpu_activity(calls, repeat)
    if not evs:
        raise RuntimeError("the profiler recorded no GPU activity for these calls")
    top = max(evs, key=lambda e: e["dur"])["name"][:160]
    if len(evs) % repeat == 0:
        k = len(evs) // repeat
        sums = [sum(e["dur"] for e in evs[i * k:(i + 1) * k]) for i in range(repeat)]
        return {"kernel_ms": float(np.median(sums)) / 1e3, "per_call": k, "kernel_name": top}
    return {"kernel_ms": sum(e["dur"] for e in evs) / repeat / 1e3, "per_call": len(evs) / repeat,
            "kernel_name": top, "kernel_note": "activities did not split evenly into calls: mean per call"}


#: what ``measure`` can time: "call" and "host" (no profiler) and "kernel" (torch.profiler)
PARTS = ("call", "host", "kernel")


def measure(calls, *, repeat: int = 30, warmup: int = 3, kernel_repeat: int = 10,
            budget_s: float = 2.0, parts=PARTS) -> dict:
    """call_ms (median), host_us, kernel_ms (median), kernel_name, per_call for one public call
    (or a list of calls over rotating input sets); ``parts`` says which (any of ``PARTS``).

    Repeats shrink for slow calls so one measurement takes about ``budget_s`` seconds (never
    below 3 calls per method); ``host_repeat`` in the result is the number of queued calls
    per round the host measurement uses (for ``host_times_us`` when a benchmark measures host
    time for several implementations together).

    Order matters for the host figures: a torch.profiler session leaves every later torch
    call in the process slower on the host (measured on the H200, the recorded probe
    benchmarks/results/probe-call-h200-2026-12-01.txt: SDPA-flash 18.6 -> 30-51 µs per call,
    ours 17.7 -> 20-36 µs, still so 10 s later). So a
    benchmark measures "call" and "host" for everything first and "kernel" last, and this
    function times the kernel after the other two."""
    bad = set(parts) - set(PARTS)
    if bad or not parts:
        raise ValueError(f"parts must be a non-empty selection of {PARTS}, got {parts!r}")
    calls = _as_list(calls)
    first = call_times_ms(calls, repeat=3, warmup=warmup)
    per = max(1e-3, float(np.median(first)) / 1e3)
    n = int(max(3, min(repeat, budget_s / 3 / per)))
    host_repeat = int(max(n, min(50, budget_s / 9 / per)))
    out = {"host_repeat": host_repeat}
    if "call" in parts:
        out["call_ms"] = float(np.median(call_times_ms(calls, repeat=n, warmup=0)))
    if "host" in parts:
        out["host_us"] = host_time_us(calls, repeat=host_repeat)
    if "kernel" in parts:
        out.update(kernel_times_ms(calls, repeat=max(3, min(kernel_repeat, n))))
    return out


def attention_flops(B: int, H: int, Nq: int, Nk: int, d: int, causal: bool) -> float:
    """Forward matmul FLOPs 4·B·H·Nq·Nk·d (QKᵀ and PV), halved for causal (the FlashAttention
    benchmark convention)."""
    f = 4.0 * B * H * Nq * Nk * d
    return f / 2 if causal else f


def cupy_peak_bytes(fn) -> int:
    """Peak bytes of GPU memory one call of ``fn`` held, measured with a fresh
    cupy.cuda.MemoryPool as the allocator: its total_bytes() after the call is the pool's
    high-water mark (freed blocks stay in the pool). cuBLAS's own workspace is not counted."""
    cp = cupy()
    pool = cp.cuda.MemoryPool()
    with cp.cuda.using_allocator(pool.malloc):
        out = fn()
        cp.cuda.Device().synchronize()
        peak = pool.total_bytes()
        del out
    pool.free_all_blocks()
    return int(peak)


def capture_calls(fn, calls: int):
    """A torch.cuda.CUDAGraph of ``calls`` back-to-back calls of ``fn`` (a function of no arguments
    whose GPU work runs on torch's current stream), captured after one call on the current stream
    and one on a side stream (so compilation, kept plans and the allocator's pool are warm, as
    torch's docs ask), and replayed once. For ``replay_ms``: kernel-only timing that is the same for
    every implementation (no host time; the launches are the graph's). Raises what ``fn`` or the
    capture raises (e.g. a call that synchronises the device)."""
    import torch
    fn()
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    return graph


def replay_ms(graph, calls: int) -> float:
    """Milliseconds per call of one replay of ``graph`` (from ``capture_calls(fn, calls)``): CUDA
    events around the replay on the current stream, divided by ``calls``."""
    import torch
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    graph.replay()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) / calls
