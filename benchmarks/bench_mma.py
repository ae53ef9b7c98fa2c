"""The tensor-core kernels on a GPU: correctness grid, benchmark, block-size sweep, ceilings.

One script, one run: writes one JSON (device, versions, date, every record) and prints a
table last. Usage (on a machine with a GPU, CuPy and torch):

    python benchmarks/bench_mma.py [--quick] [--out DIR] [--only check,bench,sweep,ceil]

DIR defaults to benchmarks/results. The JSON is mma-<device>-<date>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from flashviz.gpu.bench import environment  # noqa: E402
from flashviz.gpu import mma_bench as mb  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer shapes (a first look)")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    ap.add_argument("--only", default="ceil,check,bench,sweep")
    ap.add_argument("--variants", default="wgmma,mma.sync")
    ap.add_argument("--N", default="512,1024,2048,4096,8192,16384")
    ap.add_argument("--ab", default="", help="PATH: also sweep the wgmma kernel compiled from PATH (A/B)")
    args = ap.parse_args(argv)
    parts = set(args.only.split(","))
    variants = [v for v in args.variants.split(",") if v]
    env = environment()
    data = {"kind": "flashviz tensor-core kernels", "env": env, "argv": sys.argv[1:]}
    t0 = time.time()
    os.makedirs(args.out, exist_ok=True)
    dev = env["device"].replace("NVIDIA ", "").replace(" ", "-").lower()
    path = Path(args.out) / f"mma-{dev}-{env['date']}.json"

    def save():  # after every part, so a run cut short keeps what it measured
        data["wall_s"] = time.time() - t0
        path.write_text(json.dumps(data, indent=1, default=float))
    if "ceil" in parts:
        data["ceilings"] = mb.ceilings()
        print("ceilings", data["ceilings"], flush=True)
        save()
    if "check" in parts:
        data["check"] = []
        for v in variants:
            recs = mb.check_grid(v, quick=args.quick)
            data["check"] += recs
            bad = [r for r in recs if not r["pass"]]
            worst = max((r.get("rel_err", 0) for r in recs if "rel_err" in r), default=None)
            print(f"check {v}: {len(recs) - len(bad)}/{len(recs)} pass, worst rel err {worst}", flush=True)
            for r in bad[:12]:
                print("  FAIL", r, flush=True)
        save()
    if "bench" in parts:
        data["bench"] = []
        Ns = [int(x) for x in args.N.split(",")]
        for d in (64, 128):
            for causal in (False, True):
                for N in Ns:
                    r = mb.bench_shape(N, d, causal, variants=variants, naive=N <= 8192 or not args.quick)
                    data["bench"].append(r)
                    print(f"N={N:6d} d={d:3d} causal={causal!s:5}: " + " ".join(
                        f"{k}={r[k]:.1f}" for k in r if k.endswith("_tflops")) + " " + " ".join(
                        f"{k}={r[k]:.2f}" for k in r if "ratio" in k) + " " + " ".join(
                        f"{k}={r[k]}" for k in r if k.endswith("_error")), flush=True)
                    save()
    if "sweep" in parts:
        data["sweep"] = []
        for v in variants:
            for d, causal in ((64, False), (64, True), (128, False), (128, True)):
                try:
                    data["sweep"] += mb.block_sweep(4096, d, causal=causal, variant=v)
                except Exception as exc:
                    data["sweep"].append({"variant": v, "error": f"{type(exc).__name__}: {exc}"[:300]})
        if args.ab:
            from flashviz.gpu import mma
            mma.SOURCE_OVERRIDE["wgmma"] = Path(args.ab).read_text()
            for d, causal in ((64, False), (64, True), (128, False), (128, True)):
                for r in mb.block_sweep(4096, d, causal=causal, variant="wgmma"):
                    r["variant"] = "wgmma-ab"
                    data["sweep"].append(r)
            mma.SOURCE_OVERRIDE.clear()
        for r in data["sweep"]:
            print("sweep", " ".join(f"{k}={r[k]}" for k in ("variant", "d", "causal", "Br", "Bc", "regs", "error")
                                    if k in r), f"{r.get('tflops', 0):.1f} TFLOP/s", flush=True)
    save()
    print("wrote", path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
