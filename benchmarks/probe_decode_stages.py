"""Probe: does a deeper ring in the decode split pass (v2, kernels/flash_decode.cu, ``ST``) close the
paged-cache gap (issue 24)? Not the recorded benchmark: an A/B of builds in one process.

The recorded run on the H200 (decode-h200-2026-12-05.json) had pages of 16 keys at 1.18x the time of
the contiguous cache (target ≤ 1.10x; the H100's was 1.04x) and B = 1, Nk = 32k at 0.88 of the copy's
bandwidth kernel-only (one wave of 128 blocks). Each v2 warp keeps ST − 1 slices of K and V in
flight (64 KB a block at d = 128 with ST = 3). If the paged rows pay a longer latency a load (a
shuffled block table: every 16 keys another 32 KB page of the pool), more bytes in flight hide it.

Builds: the kernel file with ``constexpr int ST = 3;`` replaced by each ST of STAGES (and
``flashviz.gpu.decode.DECODE_ST`` set alike, so the launch asks for the shared memory the build
uses); every build's output is compared bit for bit with ST = 3's (the stages change no arithmetic).
Timing: kernel-only — for every (build, case) a CUDA graph of CALLS public calls cycling through
``timing.input_sets`` input sets (enough to cover 3x L2, as the recorded benchmark's kernel pass does,
so no call finds its K and V in L2), then ROUNDS rounds
replaying every graph once in an order rotated each round, CUDA events around each replay; the
median per call, and per build the paired ratio to ST = 3 in the same round. fp16, d = 128, Nq = 1.
Every call names ``variant="mma"``: a ring too deep for the GPU's shared memory is an error, never a
silent fall-back to v1. No MHA row: at ST = 3 two v2 blocks fit an SM and B = 8, H_kv = 32 runs in
one wave; at ST ≥ 4 only one fits, so that row would measure the waves, not the ring.

    FLASHVIZ_COMMIT=<sha> python3 benchmarks/probe_decode_stages.py [--stages 3,4,6] [--rounds 9]

Writes $OUT/probe-decode-stages.json (or ./): env, the kernel's source hash, rows.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

CALLS = 10
#: (label, B, H, H_kv, Nk, page_size or None)
CASES = [("B8 GQA 32k", 8, 32, 8, 32768, None), ("B8 GQA 32k paged256", 8, 32, 8, 32768, 256),
         ("B8 GQA 32k paged16", 8, 32, 8, 32768, 16), ("B1 GQA 32k", 1, 32, 8, 32768, None),
         ("B1 GQA 32k paged16", 1, 32, 8, 32768, 16),
         ("B1 GQA 4k", 1, 32, 8, 4096, None), ("B8 GQA 128k", 8, 32, 8, 131072, None)]
LINE = "constexpr int ST = 3;"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--stages", default="3,4,6")
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args(argv)
    stages = [int(s) for s in args.stages.split(",")]
    import torch

    from flashviz.gpu import decode as dec
    from flashviz.gpu.common import device_facts, environment, source
    from flashviz.gpu.decode_bench import Case, _inputs, set_bytes
    from flashviz.gpu.timing import input_sets
    from flashviz.records.files import source_sha256

    text = source(dec._KERNEL_FILE)
    if LINE not in text:
        raise SystemExit(f"{LINE!r} not found in the kernel file")
    l2 = device_facts(torch.cuda.current_device()).l2_bytes
    inputs = {}
    for label, B, H, H_kv, Nk, page in CASES:
        case = Case(B=B, H=H, H_kv=H_kv, Nq=1, Nk=Nk, d=128, causal=False, page_size=page)
        inputs[label], _ = _inputs(case, input_sets(set_bytes(case), l2), ref=False)
    graphs, outs, errors, built_sha = {}, {}, {}, {}
    for ST in stages:
        built = text.replace(LINE, f"constexpr int ST = {ST};")
        built_sha[ST] = hashlib.sha256(built.encode()).hexdigest()[:16]
        dec.source = lambda name, _t=built: _t           # noqa: E731 — the build's text for every name
        dec.DECODE_ST = ST
        dec._CACHE.clear()
        dec._LAUNCHES.clear()
        for label, sets in inputs.items():
            kw = [{"variant": "mma"} | ({} if s["table"] is None else {"block_table": s["table"]}) for s in sets]
            try:
                O, lse = dec.flash_decode_gpu(sets[0]["q"], sets[0]["k"], sets[0]["v"], **kw[0])
                torch.cuda.synchronize()
                outs[(ST, label)] = (O.clone(), lse.clone())
                for s, k in zip(sets, kw):                # every set's call kept before the capture
                    dec.flash_decode_gpu(s["q"], s["k"], s["v"], **k)
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    for c in range(CALLS):
                        s, k = sets[c % len(sets)], kw[c % len(sets)]
                        dec.flash_decode_gpu(s["q"], s["k"], s["v"], **k)
                graphs[(ST, label)] = g
            except Exception as exc:                    # noqa: BLE001 — reported per build and case
                errors[f"ST={ST} {label}"] = f"{type(exc).__name__}: {exc}"[:300]
                print(f"ST={ST} {label}: {errors[f'ST={ST} {label}']}", flush=True)
    same = {}
    for (ST, label), (O, lse) in outs.items():
        if (stages[0], label) in outs:
            O0, l0 = outs[(stages[0], label)]
            same[f"ST={ST} {label}"] = bool(torch.equal(O, O0) and torch.equal(lse, l0))
    times = {k: [] for k in graphs}
    keys = list(graphs)
    ev0, ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for k in keys:
        graphs[k].replay()                               # warm
    torch.cuda.synchronize()
    for r in range(args.rounds):
        order = keys[r % len(keys):] + keys[:r % len(keys)]
        for k in order:
            ev0.record()
            graphs[k].replay()
            ev1.record()
            ev1.synchronize()
            times[k].append(ev0.elapsed_time(ev1) * 1e3 / CALLS)      # µs a call
    rows = []
    for label, B, H, H_kv, Nk, page in CASES:
        kv = 2 * B * H_kv * Nk * 128 * 2
        base = times.get((stages[0], label))
        for ST in stages:
            t = times.get((ST, label))
            if not t:
                continue
            med = float(np.median(t))
            row = {"case": label, "B": B, "H": H, "H_kv": H_kv, "Nk": Nk, "page_size": page, "ST": ST,
                   "kernel_us": round(med, 2), "kernel_GBps": round(kv / med / 1e3, 1),
                   "same_bits_as_first": same.get(f"ST={ST} {label}")}
            if base:
                row["over_first"] = round(float(np.median(np.array(t) / np.array(base))), 4)
            rows.append(row)
            print(f"{label:22s} ST={ST}: {med:9.2f} µs  {row['kernel_GBps']:8.1f} GB/s  "
                  f"÷ ST={stages[0]} {row.get('over_first')}  same bits {row['same_bits_as_first']}", flush=True)
    for ST in stages:
        by = {r["case"]: r["kernel_us"] for r in rows if r["ST"] == ST}
        for paged, contiguous in (("B8 GQA 32k paged16", "B8 GQA 32k"), ("B8 GQA 32k paged256", "B8 GQA 32k"),
                                  ("B1 GQA 32k paged16", "B1 GQA 32k")):
            if paged in by and contiguous in by:
                print(f"ST={ST}: {paged} ÷ contiguous {by[paged] / by[contiguous]:.3f}")
    out = Path(os.environ.get("OUT") or ".") / "probe-decode-stages.json"
    out.write_text(json.dumps({"env": {**environment(), "commit": os.environ.get("FLASHVIZ_COMMIT")},
                               "kernel_sources": {"flash_decode.cu": source_sha256("flash_decode.cu")},
                               "built_sha256": {str(k): v for k, v in built_sha.items()},
                               "input_sets": {label: len(sets) for label, sets in inputs.items()},
                               "method": f"CUDA graph of {CALLS} public calls a (build, case), {args.rounds} rounds "
                                         "in rotated order, CUDA events a replay; median µs a call; over_first: "
                                         "median of the paired ratio to the first build in the same round",
                               "stages": stages, "errors": errors, "rows": rows}, indent=1) + "\n")
    print(f"-> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
