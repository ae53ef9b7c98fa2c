"""On a GPU machine: record the timelines the explainer shows without a GPU (issue 12).

For the teaching kernel (fp32) and the wgmma kernel (fp16), causal and not, d = 64 and 128, at
N = 4096 with one sequence of a 2048-wide model (B = 1, H = 2048 / d heads), and one long N
(wgmma, d = 64, N = 16384, H = 4): ``flashviz.gpu.trace_kernel`` checks that the traced build's
outputs are bit-identical to the normal kernel's and times both kernel-only in the same run.
Then chapter 7's block-order experiment, causal only (where the rows differ in length): the
same kernels with the query blocks started in the other two orders of ``records.timeline.ORDERS``
("ascending": the short rows of each head first; "longest_first": the longest rows of every
head first), each timed beside the kernel's own order in the same rounds.
Each timeline is saved as timeline-<kernel>-d<d>[-causal][-<order>]-n<N>-<device>-<date>.json.gz with the
step events of 16 sampled blocks (all blocks and tiles kept), and a summary
timelines-<device>-<date>.json lists every run: kernel_ms, traced_ms, overhead, blocks, SMs,
span, file size.

The FlashAttention-3 kernel (fa3) is traced at the same four N = 4096 shapes and the same long N
(d = 64, N = 16384, H = 4, causal and not) as the wgmma kernel, for chapter 8's side-by-side
timelines (its records are per tile; group 0 its producer).

The split-KV decode kernel (kernels/flash_decode.cu, ``flashviz.gpu.trace_decode``; chapter 9):
one sequence, 32 query heads sharing 8 KV heads, one query row, d = 128, Nk = 4096 and 32768,
each with one split a block (num_splits = 1: B·H_kv = 8 blocks) and with the split count the call
chooses on the device: timeline-decode-d128-n<Nk>-s<S>-<device>-<date>.json.gz.

The backwards (``flashviz.gpu.trace_backward``; chapter 6): the teaching one (kernels/flash_bwd.cu,
fp32, Br = Bc = 64) and the tensor-core ones (kernels/flash_bwd_mma.cu, fp16, its default blocks;
kernels/flash_bwd_wgmma.cu on sm_90, fp16, the default plan's Bc and dQ path) at d = 64, N = 4096,
B = 1, H = 32, causal and not — the teaching forward's shapes, so chapter 6 can set them side by
side: timeline-bwd_<teaching|mma|wgmma>-d64[-causal]-n4096-<device>-<date>.json.gz.

Usage: FLASHVIZ_COMMIT=<sha> FLASHVIZ_CACHE=<empty dir> python benchmarks/record_timelines.py [--out DIR]
       [--kernels fa3,...]   (default: benchmarks/results,
every kernel; with --kernels only those runs, and the summary is timelines-<kernels>-<device>-<date>.json)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RUNS = [(k, d, c, 4096, 1, 2048 // d, "kernel") for k in ("wgmma", "teaching", "fa3") for d in (64, 128)
        for c in (False, True)]
RUNS += [(k, 64, c, 16384, 1, 4, "kernel") for k in ("wgmma", "fa3") for c in (False, True)]
RUNS += [(k, d, True, N, 1, H, o) for o in ("ascending", "longest_first")
         for k, d, N, H in (("wgmma", 64, 4096, 32), ("wgmma", 128, 4096, 16), ("wgmma", 64, 16384, 4),
                            ("teaching", 64, 4096, 32))]
#: decode runs: (B, H, H_kv, Nq, Nk, d, num_splits); None: the split count flash_decode_gpu chooses
DECODE_RUNS = [(1, 32, 8, 1, Nk, 128, S) for Nk in (4096, 32768) for S in (1, None)]
#: backward runs (kernel, d, causal, N, B, H): the teaching forward's shapes above, for the teaching backward
#: (fp32, Br = Bc = 64) and the tensor-core ones (fp16, Br = 64, their default Bc; wgmma on sm_90 only)
BWD_RUNS = [(k, 64, c, 4096, 1, 32) for k in ("bwd_teaching", "bwd_mma", "bwd_wgmma") for c in (False, True)]


def _tail_share(tl) -> float:
    """Share of the span after the first SM went idle for good (records.timeline_stats.tail_share)."""
    from flashviz.records.timeline_stats import tail_share

    return tail_share(tl)[0]


def _kernel_sources(only) -> dict:
    """sha256 (16 hex digits) of each kernel file traced: which code the timelines are of."""
    import hashlib

    from flashviz.gpu.common import source
    from flashviz.gpu.tensorcore.run import kernel_source_hashes
    from flashviz.mma_limits import RECORD_KERNEL_FILES
    kernels = sorted({k for k, *_ in RUNS if not only or k in only})
    out = kernel_source_hashes([k for k in kernels if k != "teaching"])
    for kernel, file in RECORD_KERNEL_FILES.items():
        if kernel in kernels or (kernel != "teaching" and (not only or kernel in only)):
            out[kernel] = hashlib.sha256(source(file).encode()).hexdigest()[:16]
    return out


def _cubins() -> list[dict]:
    """Every cubin this run compiled or loaded (run with an empty FLASHVIZ_CACHE to make that
    exactly this run's): its lowered name, cache file and sha256; the traced and the normal
    build of one kernel share a name and differ in file."""
    import hashlib

    from flashviz.gpu.nvrtc import cache_dir
    return [{"name": n.read_text(), "file": n.stem,
             "sha256": hashlib.sha256(n.with_suffix(".cubin").read_bytes()).hexdigest()[:16]}
            for n in sorted(cache_dir().glob("*.name"))]


def _record(base: dict, trace, out: Path, name_of) -> dict:
    """Run ``trace()`` (a Timeline), save it as ``out / name_of(tl)`` with 16 detailed blocks and
    return its summary row ({**base, ...}), or base with the error when the trace raised."""
    t0 = time.perf_counter()
    try:
        tl = trace()
    except Exception as exc:  # record the failure, go on with the next run
        row = {**base, "error": f"{type(exc).__name__}: {exc}"}
        print(row, flush=True)
        return row
    tl.commit = os.environ.get("FLASHVIZ_COMMIT", "")
    name = name_of(tl)
    path = tl.save(out / name, detail=16)
    dur = tl.blocks["t1_ns"] - tl.blocks["t0_ns"]
    row = {**base, "Br": tl.Br, "Bc": tl.Bc, "kernel_order_ms": tl.notes.get("kernel_order_ms"),
           "tail_share": _tail_share(tl), "blocks": len(tl.blocks), "sms_used": int(len(np.unique(tl.blocks["sm"]))),
           "kernel_ms": tl.kernel_ms, "traced_ms": tl.traced_ms, "overhead": tl.traced_ms / tl.kernel_ms - 1,
           "span_us": tl.span_ns / 1e3, "block_us_median": float(np.median(dur)) / 1e3,
           "block_us_max": float(dur.max()) / 1e3, "events": int(len(tl.events)), "tiles": int(len(tl.tiles)),
           "ns_per_cycle": tl.notes.get("ns_per_cycle"), "file": name, "file_bytes": path.stat().st_size,
           "seconds": round(time.perf_counter() - t0, 1)}
    if tl.kernel == "decode":
        row.update(S=tl.grid[0], heuristic_S=tl.notes["heuristic_S"], kernel_GBps=tl.notes["kernel_GBps"])
    print(json.dumps(row), flush=True)
    return row


def _decode_runs(out: Path, dev: str) -> list[dict]:
    """The DECODE_RUNS, each traced by gpu.trace_decode and saved; one summary row each. A run whose
    split count (the heuristic's on this GPU: ``decode_launch`` with the device's facts, its SMs and
    shared memory, the figures trace_decode's plan reads) one before it already traced at its Nk is
    left out, with a row that says so (its file would have the same name)."""
    import flashviz.gpu as gpu
    from flashviz.gpu.common import device_facts
    from flashviz.gpu.decode import facts_kwargs

    on_device = facts_kwargs(device_facts())
    rows, done = [], set()
    for B, H, H_kv, Nq, Nk, d, S in DECODE_RUNS:
        base = {"kernel": "decode", "B": B, "H": H, "H_kv": H_kv, "Nq": Nq, "N": Nk, "d": d, "causal": False,
                "order": "kernel", "num_splits": S}
        S_run = gpu.decode_launch(B, H, H_kv, Nq, Nk, d, S, **on_device)["splits"]
        if (B, H, H_kv, Nq, Nk, d, S_run) in done:
            rows.append({**base, "S": S_run, "skipped": f"the split count chosen here, {S_run}, is traced above"})
            print(rows[-1], flush=True)
            continue
        done.add((B, H, H_kv, Nq, Nk, d, S_run))
        rows.append(_record(base, lambda: gpu.trace_decode(B, H, H_kv, Nk, d, Nq=Nq, num_splits=S, repeat=20,
                                                           rounds=7), out,
                            lambda tl: f"timeline-decode-d{d}-n{Nk}-s{tl.grid[0]}-{dev}-{tl.date}.json.gz"))
    return rows


def _backward_runs(out: Path, dev: str, only) -> list[dict]:
    """The BWD_RUNS (the backward kernels named in ``only``, all when empty), each traced by
    gpu.trace_backward and saved."""
    import flashviz.gpu as gpu

    rows = []
    for kernel, d, causal, N, B, H in BWD_RUNS:
        if only and kernel not in only:
            continue
        rng = np.random.default_rng(0)
        Q, K, V = (rng.standard_normal((B, H, N, d)).astype(np.float32) for _ in range(3))
        which = kernel.removeprefix("bwd_")
        rows.append(_record({"kernel": kernel, "d": d, "causal": causal, "order": "kernel", "N": N, "B": B, "H": H},
                            lambda: gpu.trace_backward(Q, K, V, kernel=which, causal=causal, repeat=10, rounds=7),
                            out, lambda tl: f"timeline-{kernel}-d{d}{'-causal' if causal else ''}-n{N}-{dev}-"
                                            f"{tl.date}.json.gz"))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--kernels", default="", help="comma-separated kernels to record (default: all)")
    args = ap.parse_args(argv)
    only = [k for k in args.kernels.split(",") if k]
    known = sorted({r[0] for r in RUNS} | {"decode"} | {r[0] for r in BWD_RUNS})
    if any(k not in known for k in only):
        ap.error(f"--kernels: each must be one of {', '.join(known)}; got {args.kernels!r}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    import flashviz.gpu as gpu

    env = gpu.environment()
    dev = str(env.get("device", "gpu")).lower().replace("nvidia", "").strip().replace(" ", "-")
    rows = []
    for kernel, d, causal, N, B, H, order in RUNS:
        if only and kernel not in only:
            continue
        rng = np.random.default_rng(0)
        Q, K, V = (rng.standard_normal((B, H, N, d)).astype(np.float32) for _ in range(3))
        rows.append(_record({"kernel": kernel, "d": d, "causal": causal, "order": order, "N": N, "B": B, "H": H},
                            lambda: gpu.trace_kernel(Q, K, V, kernel=kernel, causal=causal, repeat=10, rounds=7,
                                                     order=order), out,
                            lambda tl: f"timeline-{kernel}-d{d}{'-causal' if causal else ''}"
                                       f"{'' if order == 'kernel' else '-' + order}-n{N}-{dev}-{tl.date}.json.gz"))
    if not only or "decode" in only:
        rows += _decode_runs(out, dev)
    if not only or {r[0] for r in BWD_RUNS} & set(only):
        rows += _backward_runs(out, dev, only)
    summary = {"env": env, "commit": os.environ.get("FLASHVIZ_COMMIT", ""),
               "kernel_sources": _kernel_sources(only), "cubins": _cubins(),
               "method": "trace_kernel: normal and traced builds on the same inputs, outputs compared bit for bit; "
                         "kernel-only times by CUDA events around 10 back-to-back launches, 7 alternating rounds, "
                         "median per launch (decode: trace_decode, the split pass alone, 20 launches, 7 rounds)",
               "runs": rows}
    tag = "-".join(only) + "-" if only else ""
    (out / f"timelines-{tag}{dev}-{env.get('date', 'unknown')}.json").write_text(json.dumps(summary, indent=1) + "\n")
    return 0 if all("error" not in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
