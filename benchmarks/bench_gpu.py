#!/usr/bin/env python3
"""Check and time the CUDA teaching kernel (kernels/flash_fwd.cu) on a GPU, in one run.

  (a) correctness grid vs float64 (flashviz.attention): d in {32, 64, 128}, several Br/Bc,
      causal and not, Nq != Nk, N not a multiple of the blocks, N < Br, rows that see no key;
      O and lse are poisoned with NaN before every launch; asserts rel err <= 1e-5, no NaN.
  (b) kernel vs naive CuPy float32 (S materialised) vs torch SDPA, N in 1k..16k,
      d in {64, 128}, B·N = 16,384 tokens, H = 32.
  (c) peak extra memory, kernel vs naive, N = 65,536, one head.
  (d) Br x Bc sweep at N = 4096, d = 64: time next to the IO model's HBM bytes.
  (b) and (d) run in two passes: every public-call and host time first, then every
      kernel-only time (torch.profiler), because a profiler session leaves later host times high.

Writes benchmarks/results/gpu-<device>-YYYY-MM-DD.json (into $OUT when set) and prints a
short table last. Run from the repository root:  PYTHONPATH=. python3 benchmarks/bench_gpu.py
Options: --quick (N = 4096 only, fewer configs), --skip-grid, --skip-sweep.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import flashviz as fv  # noqa: E402
from flashviz import gpu  # noqa: E402

TOL = 1e-5


def correctness_grid(cp, log) -> dict:
    rng = np.random.default_rng(2024)
    blocks = {32: [(16, 16), (32, 64), (64, 64), (128, 128)],
              64: [(16, 32), (64, 64), (128, 64), (64, 128), (128, 128)],
              128: [(32, 32), (64, 64), (128, 64), (64, 128)]}
    shapes = [(1, 1), (5, 300), (100, 37), (257, 513), (513, 257), (1000, 1000), (130, 64), (64, 200)]
    cases, failures, worst = [], [], 0.0
    for d, blist in blocks.items():
        for Br, Bc in blist:
            ck = gpu.compile_kernel(Br, Bc, d)
            for Nq, Nk in shapes:
                B, H = 2, 3
                Q = rng.standard_normal((B, H, Nq, d)).astype(np.float32)
                K = rng.standard_normal((B, H, Nk, d)).astype(np.float32)
                V = rng.standard_normal((B, H, Nk, d)).astype(np.float32)
                # sharper softmax rows sometimes: a large scale stresses the running max
                scale = float(rng.choice([1 / np.sqrt(d), 1.0]))
                Qd, Kd, Vd = (cp.asarray(x).reshape(B * H, -1, d) for x in (Q, K, V))
                for causal in (False, True):
                    O = cp.full((B * H, Nq, d), np.nan, dtype=cp.float32)
                    lse = cp.full((B * H, Nq), np.nan, dtype=cp.float32)
                    gpu.launch(ck, Qd, Kd, Vd, O, lse, causal=causal, scale=scale)
                    cp.cuda.Device().synchronize()
                    ref_O, ref_lse = fv.attention(Q, K, V, causal=causal, scale=scale, return_lse=True)
                    o = O.get().reshape(B, H, Nq, d).astype(np.float64)
                    lz = lse.get().reshape(B, H, Nq).astype(np.float64)
                    nan = bool(np.isnan(o).any() or np.isnan(lz).any())
                    rel = float(np.linalg.norm(o - ref_O) / max(np.linalg.norm(ref_O), 1e-300))
                    fin = np.isfinite(ref_lse)
                    lse_ok = bool(np.array_equal(np.isneginf(lz), np.isneginf(ref_lse)))
                    lse_err = float(np.max(np.abs(lz[fin] - ref_lse[fin]) / (1 + np.abs(ref_lse[fin])))) if fin.any() else 0.0
                    no_key_rows = int((~fin).sum())
                    zero_ok = bool(np.all(o[~fin] == 0)) if no_key_rows else True
                    ok = (not nan) and rel <= TOL and lse_ok and lse_err <= TOL and zero_ok
                    worst = max(worst, rel)
                    case = dict(d=d, Br=Br, Bc=Bc, Nq=Nq, Nk=Nk, causal=causal, scale=scale, rel_err=rel,
                                lse_err=lse_err, nan=nan, rows_no_key=no_key_rows, ok=ok)
                    cases.append(case)
                    if not ok:
                        failures.append(case)
                        log(f"  FAIL {case}")
    log(f"(a) correctness: {len(cases)} cases, {len(failures)} failures, worst rel err {worst:.2e}")
    return {"tolerance": TOL, "n_cases": len(cases), "n_failures": len(failures), "max_rel_err": worst,
            "max_lse_err": max(c["lse_err"] for c in cases), "failures": failures, "cases": cases}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--skip-grid", action="store_true")
    ap.add_argument("--skip-sweep", action="store_true")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--warm-cache", action="store_true", help="keep flashviz's on-disk cubin cache")
    args = ap.parse_args()
    if not args.warm_cache:
        # Compile times are reported cold (as a first-time user sees them): an empty flashviz
        # cubin cache for this run (flashviz.gpu.nvrtc.cache_dir()).
        os.environ["FLASHVIZ_CACHE"] = tempfile.mkdtemp(prefix="flashviz-cubin-cache-")
    ok, reason = gpu.gpu_status()
    print("gpu_status:", ok, reason, flush=True)
    if not ok:
        return 2
    import cupy as cp

    t_start = time.time()
    log = lambda s: print(s, flush=True)  # noqa: E731
    from flashviz.gpu.teaching.bench import derive
    from flashviz.gpu.timing import CALL_METHOD, HOST_METHOD, KERNEL_METHOD
    out = {"env": gpu.environment(), "kernel_file": "kernels/flash_fwd.cu",
           "methods": {"call_ms": CALL_METHOD, "kernel_ms": KERNEL_METHOD, "host_us": HOST_METHOD}}
    env = out["env"]
    log(f"device {env['device']}, {env['sm_count']} SMs, CuPy {env['cupy']}, torch {env['torch']}")

    # (a)
    if not args.skip_grid:
        try:
            out["correctness"] = correctness_grid(cp, log)
        except Exception:
            out["correctness"] = {"error": traceback.format_exc()}
            log(out["correctness"]["error"])

    # (c) first: its call times are host-bound at N = 65,536, B = H = 1 and must come before
    # any profiler session of the process (timing.measure)
    try:
        out["peak_memory"] = gpu.peak_memory(65_536, 64, B=1, H=1, Br=64, Bc=64)
    except Exception as exc:
        out["peak_memory"] = {"error": f"{type(exc).__name__}: {exc}"}
    log(f"(c) {out['peak_memory']}")

    # (b) and (d): every configuration timed (public call, host) first, then every one
    # kernel-only (torch.profiler), rows merged: a profiler session leaves later host times high
    Ns = [4096] if args.quick else [1024, 2048, 4096, 8192, 16384]
    cfgs = {64: [(64, 64), (128, 64), (128, 128)] if not args.quick else [(64, 64), (128, 64)],
            128: [(64, 64), (128, 64)] if not args.quick else [(64, 64)]}
    jobs = [("b", dict(N=N, d=d, H=32, Br=Br, Bc=Bc, causal=False, repeat=args.repeat, naive=(k == 0), sdpa=(k == 0)))
            for d, blist in cfgs.items() for N in Ns for k, (Br, Bc) in enumerate(blist)]
    jobs += [("b", dict(N=N, d=64, H=32, Br=64, Bc=64, causal=True, repeat=args.repeat)) for N in Ns]
    if not args.skip_sweep:
        jobs += [("d", dict(N=4096, d=64, H=32, Br=Br, Bc=Bc, repeat=max(3, args.repeat // 2), naive=False, sdpa=False,
                            check=(Br, Bc) in ((16, 16), (128, 128))))
                 for Br in gpu.SUPPORTED_BR for Bc in gpu.SUPPORTED_BC]
    rows = []
    for _part, kw in jobs:
        try:
            rows.append(gpu.benchmark(phase="timed", **kw))
        except Exception as exc:
            rows.append({k: kw.get(k) for k in ("N", "d", "Br", "Bc", "causal")}
                        | {"error": f"{type(exc).__name__}: {exc}"})
    for r, (_part, kw) in zip(rows, jobs):
        if "error" in r:
            continue
        try:
            r.update(gpu.benchmark(phase="kernel", **(kw | {"check": False})))
        except Exception as exc:
            r["error"] = f"{type(exc).__name__}: {exc}"
        derive(r)
    timing = []
    base = {}
    for r, (part, kw) in zip(rows, jobs):
        if part != "b":
            continue
        if kw.get("naive", True) and not r.get("causal"):
            base = r
        elif not r.get("causal") and "naive_kernel_ms" in base and "kernel_ms" in r:
            for key in ("naive_call_ms", "naive_kernel_ms", "naive_host_us"):    # the same inputs' naive,
                r[key] = base[key]                                                # measured once per (d, N)
            derive(r)
        timing.append(r)
        log(f"(b) {json.dumps({k2: (round(v, 4) if isinstance(v, float) else v) for k2, v in r.items()})}")
    out["timing"] = timing
    out["sweep"] = sweep = [r for r, (part, _) in zip(rows, jobs) if part == "d"]
    out["kernels"] = [{"name": ck.name, "num_regs": ck.num_regs, "local_bytes": ck.local_bytes,
                       "smem_bytes": ck.smem_bytes, "compile_ms": round(ck.compile_ms, 1)}
                      for ck in gpu.teaching.kernel._CACHE.values()]
    # compile once more for 64/64/64 with the in-process cache dropped: the disk cache's hit
    try:
        cold = gpu.compile_kernel(64, 64, 64).compile_ms
        gpu.teaching.kernel._CACHE.pop((64, 64, 64, cp.cuda.Device().id), None)
        out["compile_ms_64_64_64"] = {"cold": cold, "disk_cache_hit": gpu.compile_kernel(64, 64, 64).compile_ms,
                                     "cache_dir": os.environ.get("FLASHVIZ_CACHE", "default")}
    except Exception as exc:
        out["compile_ms_64_64_64"] = {"error": str(exc)}
    out["wall_s"] = time.time() - t_start

    dev = env["device"].lower().replace("nvidia", "").strip().replace(" ", "-") or "gpu"
    fname = f"gpu-{dev}-{env['date']}.json"
    dest = Path(os.environ["OUT"]) if os.environ.get("OUT") else ROOT / "benchmarks" / "results"
    dest.mkdir(parents=True, exist_ok=True)
    (dest / fname).write_text(json.dumps(out, indent=1, default=float) + "\n")

    # short table, last
    print(f"\nwrote {dest / fname}  ({out['wall_s']:.0f} s)")
    c = out.get("correctness", {})
    if c:
        print(f"correctness: {c.get('n_cases')} cases, {c.get('n_failures')} failures, "
              f"max rel err {c.get('max_rel_err', float('nan')):.2e}, max lse err {c.get('max_lse_err', float('nan')):.2e}")
    print("kernel = kernel-only (profiler kernel time), call = public call (CUDA events); ms, medians")
    print(f"{'d':>4} {'N':>6} {'Br':>4} {'Bc':>4} {'c':>2} {'kernel':>8} {'call':>8} {'TFLOP/s':>8} {'naive k':>9} "
          f"{'naive/k':>8} {'naive/c':>8} {'sdpa32 k':>8} {'sdpa16 k':>8} {'GB/s':>7} {'relerr':>8}")
    for r in timing:
        if "error" in r:
            print(f"{r.get('d', ''):>4} {r.get('N', ''):>6} {r.get('Br', ''):>4} {r.get('Bc', ''):>4} ERROR {r['error'][:60]}")
            continue
        f = lambda k, fmt: (format(r[k], fmt) if k in r else "-")  # noqa: E731
        print(f"{r['d']:>4} {r['N']:>6} {r['Br']:>4} {r['Bc']:>4} {int(r['causal']):>2} {f('kernel_ms', '8.3f')} "
              f"{f('call_ms', '8.3f')} {f('tflops', '8.2f')} {f('naive_kernel_ms', '9.2f'):>9} "
              f"{f('ratio_naive_over_kernel', '8.2f'):>8} {f('ratio_naive_over_call', '8.2f'):>8} "
              f"{f('sdpa_fp32_kernel_ms', '8.3f'):>8} {f('sdpa_fp16_kernel_ms', '8.3f'):>8} {f('model_GBps', '7.0f')} "
              f"{f('rel_err', '8.1e')}")
    pm = out["peak_memory"]
    if "kernel_peak_bytes" in pm:
        print(f"peak memory N=65,536 one head: kernel {pm['kernel_peak_bytes'] / 2**20:.1f} MiB "
              f"({pm.get('kernel_call_ms', float('nan')):.1f} ms call), naive "
              f"{pm.get('naive_peak_bytes', float('nan')) / 2**30:.2f} GiB ({pm.get('naive_call_ms', float('nan')):.1f} ms call)")
    if sweep:
        print("sweep N=4096 d=64 (ms / model MiB):  " + "  ".join(
            f"{r['Br']}x{r['Bc']}:{r['kernel_ms']:.2f}/{r['model_hbm_bytes'] / 2**20:.0f}" if "kernel_ms" in r
            else f"{r['Br']}x{r['Bc']}:ERR" for r in sweep))
    print(f"compile ms flash_fwd<64,64,64>: {out['compile_ms_64_64_64']}")
    bad = c.get("n_failures", 0) if c else 0
    return 1 if bad or (c and "error" in c) else 0


if __name__ == "__main__":
    sys.exit(main())
