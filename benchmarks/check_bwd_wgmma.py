"""Check and time the Hopper backward (kernels/flash_bwd_wgmma.cu) in one device call (issue 23).

Run from the repository root on an H100 / H200 (CuPy, torch with CUDA), in at most ~200 s:

    FLASHVIZ_COMMIT=<sha> python3 benchmarks/check_bwd_wgmma.py [--out DIR] [--budget-s 190]

DIR defaults to $OUT, else the current folder. Three parts, each in a child process of its own so
that a kernel fault (which poisons the CUDA context) costs only the part it happened in:

1. compile: every main kernel the runner can build (fp16 / bf16, Bc 64 / 128, d 64 / 128, causal
   and not, dQ "bulk" / "atomic" / "separate") through NVRTC for sm_90a, with its registers and
   local (spill) bytes a thread (CuPy's ``num_regs`` / ``local_size_bytes``) and shared memory;
   the mma kernel's registers beside them.
2. correct: dQ, dK, dV against float64 dense gradients (``gradcheck.dense_gradients``) over fp16 /
   bf16, d 64 / 128, causal and not, (Nq, Nk) in SHAPES (N 1, 63, 128, 1000, Nq ≠ Nk both ways,
   keyless rows), Bc 64 and 128, strided views with dlse; one line per case that fails, a count
   per dQ path. A child that dies is restarted on the next dQ path.
3. bench: fp16, B·N = 16k tokens, H = 2048/d, d 64 / 128, causal and not, N 16k, 4k, 1k (in that
   order, the largest first; what the deadline leaves out is said): the backward alone, for the
   wgmma kernel (each dQ path whose part-2 child did not die, Bc = 128, and each also at
   Bc = 64, ``_bc64``; the record names the paths that passed every case), the mma kernel
   (named: on sm_90 the default call is the wgmma kernel), SDPA-flash and
   SDPA-cuDNN (``torch.nn.attention.sdpa_kernel``). By public call: CUDA events
   (``timing.call_times_ms``), median of 5, every implementation before any profiler session.
   Kernel-only (``_kernel_ms``): torch.profiler (CUPTI), the GPU work of one call summed, median of
   5 (``timing.kernel_times_ms``, the backward records' method) — the same for every
   implementation. Not a CUDA graph for all: SDPA's backward captured in a graph invalidated the
   capture and the process's next call on the H200 (NOTES.md, backward v2), so only ours are also
   timed by a graph of CALLS calls replayed REPLAYS times (``_graph_ms``, ``timing.capture_calls``
   / ``replay_ms``) as a cross-check of the profiler figure.
   TFLOP/s with backward FLOPs = 2.5 × the forward's 4·B·H·N²·d, halved for causal
   (``bench_bwd.bwd_flops``); the wgmma call's gradients beside SDPA-flash's as a large-N check.

Writes check-bwd-wgmma-<device>-<date>.json into DIR: env (device, versions, date, commit from
$FLASHVIZ_COMMIT), the kernel sources' sha256, and the three parts.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from contextlib import nullcontext
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DQS = ("bulk", "atomic", "separate")
SHAPES = [(1, 1), (63, 63), (128, 128), (1000, 1000), (1, 257), (257, 1), (100, 333), (333, 100), (1000, 63),
          (63, 1000)]
TOL = {"float16": 5e-3, "bfloat16": 3e-2}
BENCH_N = (16384, 4096, 1024)
CALLS, REPLAYS = 10, 3
_CASE_KEYS = ("dq", "dtype", "d", "causal", "Nq", "Nk", "Bc", "seed", "strided")


def _emit(path: Path, obj: dict) -> None:
    """One JSON line appended to a child's part file (read back by the parent, even after a crash)."""
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(obj) + "\n")


def child_compile(part: Path) -> None:
    from flashviz.gpu.tensorcore import backward as bk
    for dtype in ("float16", "bfloat16"):
        for Bc in bk.BWD_WGMMA_BC:
            for d in bk.BWD_MMA_D:
                for causal in (False, True):
                    for dq in DQS:
                        row = {"dtype": dtype, "Bc": Bc, "d": d, "causal": causal, "dq": dq}
                        try:
                            mb = bk.compile_backward_wgmma(dtype, Bc, d, causal, dq)
                            row.update(regs=mb.num_regs, local_bytes=mb.local_bytes, smem_bytes=mb.smem_bytes,
                                       compile_ms=round(mb.compile_ms, 1))
                            if dtype == "float16" and not causal:
                                print(f"compile wgmma Bc={Bc} d={d} dq={dq}: {mb.num_regs} regs, "
                                      f"{mb.local_bytes} B local, {mb.smem_bytes:,} B smem", flush=True)
                        except Exception as exc:  # noqa: BLE001 - reported, the others go on
                            row["error"] = f"{type(exc).__name__}: {exc}"[:600]
                            print(f"compile FAILED {row}", flush=True)
                        _emit(part, row)
    for d in bk.BWD_MMA_D:
        mb = bk.compile_backward_mma("float16", bk.BWD_MMA_BC_DEFAULT, d, False, True)
        _emit(part, {"kernel": "mma", "dtype": "float16", "Bc": mb.Bc, "d": d, "regs": mb.num_regs,
                     "local_bytes": mb.local_bytes, "smem_bytes": mb.smem_bytes})
        print(f"compile mma Bc={mb.Bc} d={d}: {mb.num_regs} regs, {mb.local_bytes} B local", flush=True)


def _cases(dq: str):
    k = 0
    for dtype in ("float16", "bfloat16"):
        for d in (64, 128):
            for causal in (False, True):
                for Nq, Nk in SHAPES:
                    yield {"dq": dq, "dtype": dtype, "d": d, "causal": causal, "Nq": Nq, "Nk": Nk,
                           "Bc": (64, 128)[k % 2], "seed": k}
                    k += 1
    for dtype in ("float16", "bfloat16"):
        for Bc in (64, 128):
            yield {"dq": dq, "dtype": dtype, "d": 128, "causal": True, "Nq": 300, "Nk": 300, "Bc": Bc, "seed": k,
                   "strided": True}
            k += 1


def child_correct(part: Path, dqs) -> None:
    import torch

    from flashviz import gpu
    from flashviz.gpu.tensorcore.gradcheck import dense_gradients, relative_errors
    for dq in dqs:
        n_pass = n = 0
        for c in _cases(dq):
            _emit(part, {"start": c})
            row = dict(c)
            try:
                dt = getattr(torch, c["dtype"])
                g = torch.Generator(device="cuda").manual_seed(4000 + c["seed"])
                dlse = None
                if c.get("strided"):
                    x = torch.randn(2, c["Nq"], 4, 3, c["d"], device="cuda", dtype=dt, generator=g)
                    q, k, v = (x[:, :, :, i].transpose(1, 2) for i in range(3))   # BHSD views, strided
                    dlse = torch.randn(2, 4, c["Nq"], device="cuda", generator=g)
                else:
                    q, k, v = (torch.randn(2, 3, N, c["d"], device="cuda", dtype=dt, generator=g)
                               for N in (c["Nq"], c["Nk"], c["Nk"]))
                dO = torch.randn(q.shape, device="cuda", dtype=dt, generator=g)
                O, lse, ref = dense_gradients(torch, q, k, v, dO, causal=c["causal"], dlse=dlse)
                got = gpu.flash_backward_mma(q, k, v, O.to(dt), dO, lse, causal=c["causal"], dlse=dlse, Bc=c["Bc"],
                                             dq=dq, kernel="wgmma")
                torch.cuda.synchronize()
                errs = relative_errors(got, ref)
                finite = all(bool(torch.isfinite(a).all()) for a in got)
                keyless = torch.isneginf(lse)
                zeros = bool((got[0][keyless] == 0).all())
                row.update(rel_err_dq_dk_dv=[float(f"{e:.3e}") for e in errs], finite=finite, keyless_rows=int(keyless.sum()),
                           keyless_zero=zeros)
                row["pass"] = finite and zeros and max(errs) <= TOL[c["dtype"]]
            except Exception as exc:  # noqa: BLE001 - one failing case must not end the grid
                row.update({"pass": False, "error": f"{type(exc).__name__}: {exc}"[:600]})
            n += 1
            n_pass += bool(row["pass"])
            if not row["pass"]:
                print(f"FAIL {row}", flush=True)
            _emit(part, {"result": row})
        print(f"correct dq={dq}: {n_pass}/{n} cases pass", flush=True)


def child_bench(part: Path, dqs, deadline: float) -> None:
    import torch
    shapes = [(N, d, causal) for N in BENCH_N for d in (128, 64) for causal in (False, True)]
    for N, d, causal in shapes:
        if time.time() > deadline:
            _emit(part, {"skipped": {"N": N, "d": d, "causal": causal}, "why": "deadline"})
            print(f"bench N={N} d={d} causal={causal}: skipped (deadline)", flush=True)
            continue
        row, names = _bench_shape(N, d, causal, dqs, deadline)
        _emit(part, {"row": row})
        cells = []
        for name in names:
            t = row.get(f"{name}_kernel_tflops", row.get(f"{name}_tflops"))
            cells.append(f"{name} {t:.0f}" if t else f"{name} -")
        ours = f"wgmma_{dqs[0]}" if dqs else None
        ratio = ""
        if ours and f"{ours}_kernel_ms" in row:
            ratio = "  ratio(kernel) " + " ".join(f"vs_{o}={row[f'{o}_kernel_ms'] / row[f'{ours}_kernel_ms']:.2f}"
                                                  for o in ("sdpa_flash", "sdpa_cudnn", "mma") if f"{o}_kernel_ms" in row)
        err = row.get("wgmma_vs_sdpa_flash_rel_err")
        print(f"bench N={N} d={d} causal={causal} TFLOP/s(kernel): " + ", ".join(cells) + ratio
              + (f"  err_vs_flash={err}" if err else ""), flush=True)
        torch.cuda.empty_cache()


def _bench_shape(N: int, d: int, causal: bool, dqs, deadline: float) -> tuple[dict, list[str]]:
    """One bench row (see the module text) and the implementations' names, in the order timed."""
    import numpy as np
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel

    from flashviz import gpu
    from flashviz.gpu.tensorcore.bench import sdpa_backend
    from flashviz.gpu.tensorcore.bench_bwd import bwd_flops, shape_of
    from flashviz.gpu.tensorcore.gradcheck import relative_errors
    from flashviz.gpu.timing import call_times_ms, capture_calls, kernel_times_ms, replay_ms

    B, H = shape_of(N, d)
    g = torch.Generator(device="cuda").manual_seed(1000 * N + d)
    q, k, v, dO = (torch.randn(B, H, N, d, device="cuda", dtype=torch.float16, generator=g) for _ in range(4))
    with torch.no_grad():
        O, lse = gpu.flash_forward_mma(q, k, v, causal=causal)
    impls = {f"wgmma_{dq}": (lambda dq: lambda: gpu.flash_backward_mma(q, k, v, O, dO, lse, causal=causal,
                                                                        dq=dq, kernel="wgmma"))(dq)
             for dq in dqs}
    for dq in dqs:                               # the other block size of the kernel, for choosing the default
        impls[f"wgmma_{dq}_bc64"] = (lambda dq: lambda: gpu.flash_backward_mma(q, k, v, O, dO, lse, causal=causal,
                                                                               Bc=64, dq=dq, kernel="wgmma"))(dq)
    impls["mma"] = lambda: gpu.flash_backward_mma(q, k, v, O, dO, lse, causal=causal, kernel="mma")
    ctxs = {}
    for name in ("flash", "cudnn"):
        leaves = tuple(x.detach().requires_grad_() for x in (q, k, v))
        ctxs[f"sdpa_{name}"] = (lambda b: lambda: sdpa_kernel(b))(sdpa_backend(name))
        with ctxs[f"sdpa_{name}"]():
            out = F.scaled_dot_product_attention(*leaves, is_causal=causal)
        impls[f"sdpa_{name}"] = (lambda out, leaves: lambda: torch.autograd.grad(out, leaves, grad_outputs=dO,
                                                                                retain_graph=True))(out, leaves)
    flops = bwd_flops(B, H, N, d, causal)
    row = {"N": N, "d": d, "B": B, "H": H, "causal": causal, "dtype": "float16", "flops_bwd": flops}
    ours = f"wgmma_{dqs[0]}" if dqs else None
    grads = {}
    # public calls first (a profiler session leaves later host times high), then kernel-only
    for name, fn in impls.items():
        if time.time() > deadline:
            row[f"{name}_skipped"] = "deadline"
            continue
        ctx = ctxs.get(name)
        try:
            with (ctx() if ctx else nullcontext()):
                r = fn()
                if name in ("sdpa_flash", ours):
                    grads[name] = r
                ms = float(np.median(call_times_ms(fn, repeat=5, warmup=1)))
            row[f"{name}_call_ms"] = ms
            row[f"{name}_tflops"] = flops / ms / 1e9
        except Exception as exc:  # noqa: BLE001
            row[f"{name}_error"] = f"{type(exc).__name__}: {exc}"[:400]
    for name, fn in impls.items():
        if f"{name}_call_ms" not in row or time.time() > deadline:
            continue
        ctx = ctxs.get(name)
        try:
            with (ctx() if ctx else nullcontext()):
                km = kernel_times_ms(fn, repeat=5)["kernel_ms"]
            row[f"{name}_kernel_ms"] = km
            row[f"{name}_kernel_tflops"] = flops / km / 1e9
            if not name.startswith("sdpa"):          # SDPA's backward breaks a capture (NOTES.md, bwd v2)
                graph = capture_calls(fn, CALLS)
                row[f"{name}_graph_ms"] = float(np.median([replay_ms(graph, CALLS) for _ in range(REPLAYS)]))
                del graph
        except Exception as exc:  # noqa: BLE001
            row[f"{name}_kernel_error"] = f"{type(exc).__name__}: {exc}"[:400]
    if ours in grads and "sdpa_flash" in grads:
        row["wgmma_vs_sdpa_flash_rel_err"] = [float(f"{e:.3e}") for e in
                                               relative_errors(grads[ours], grads["sdpa_flash"])]
    return row, list(impls)


def _read(part: Path) -> list[dict]:
    if not part.is_file():
        return []
    return [json.loads(ln) for ln in part.read_text(encoding="utf-8").splitlines() if ln.strip()]


def _run_child(args: list[str], timeout: float) -> int:
    try:
        return subprocess.run([sys.executable, __file__, *args], timeout=max(5.0, timeout)).returncode
    except subprocess.TimeoutExpired:
        print(f"child {args[:2]} timed out after {timeout:.0f} s", flush=True)
        return -9


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--budget-s", type=float, default=190.0)
    ap.add_argument("--child", choices=("compile", "correct", "bench"))
    ap.add_argument("--part")
    ap.add_argument("--dqs", default=",".join(DQS))
    ap.add_argument("--deadline", type=float, default=0.0)
    a = ap.parse_args(argv)
    dqs = [x for x in a.dqs.split(",") if x]
    if a.child:
        part = Path(a.part)
        {"compile": lambda: child_compile(part), "correct": lambda: child_correct(part, dqs),
         "bench": lambda: child_bench(part, dqs, a.deadline)}[a.child]()
        return 0

    t0 = time.time()
    end = t0 + a.budget_s
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    from flashviz.gpu.common import environment, source_sha256
    env = environment()
    rec = {"kind": "check bwd wgmma", "env": env,
           "kernel_sources": {n: source_sha256(n) for n in ("flash_bwd_wgmma.cu", "flash_bwd_mma.cu")},
           "method": {"kernel": "torch.profiler (CUPTI), GPU work of one call summed, median of 5 "
                                "(timing.kernel_times_ms); the same for every implementation",
                      "graph": f"ours only: CUDA graph of {CALLS} public calls (timing.capture_calls), {REPLAYS} "
                               f"replays, median per call (timing.replay_ms)",
                      "call": "public call, CUDA events, median of 5 (timing.call_times_ms)",
                      "flops": "backward = 2.5 x forward 4·B·H·N²·d, halved for causal (bench_bwd.bwd_flops)",
                      "correct": "max |grad - ref| / max(max |ref|, 0.1 max |dV_ref|) vs float64 dense gradients"}}
    slug = "".join(ch if ch.isalnum() else "-" for ch in env["device"].lower().replace("nvidia ", "")).strip("-")
    path = out / f"check-bwd-wgmma-{slug}-{env['date']}.json"
    print(f"device {env['device']} commit {env.get('commit')} sources {rec['kernel_sources']}", flush=True)

    def save():
        rec["wall_s"] = round(time.time() - t0, 1)
        path.write_text(json.dumps(rec, indent=1), encoding="utf-8")

    # 1. compile (NVRTC's disk cache then serves the other children)
    p = out / "part-compile.jsonl"
    p.unlink(missing_ok=True)
    rc = _run_child(["--child", "compile", "--part", str(p)], min(70.0, end - time.time() - 100))
    rec["compile"] = _read(p)
    rec["compile_rc"] = rc
    save()

    # 2. correctness, one child per dQ path: a fault ends only its own path (its case is named)
    p = out / "part-correct.jsonl"
    p.unlink(missing_ok=True)
    rcs = {}
    for n, dq in enumerate(DQS):
        left = end - time.time() - 60                     # keep a minute for the bench
        rcs[dq] = _run_child(["--child", "correct", "--part", str(p), "--dqs", dq], left / (len(DQS) - n))
    lines = _read(p)
    results = [ln["result"] for ln in lines if "result" in ln]
    done = {json.dumps({k: r[k] for k in ln_start}, sort_keys=True)
            for r in results for ln_start in [{k: v for k, v in r.items() if k in _CASE_KEYS}]}
    crashed = [ln["start"] for ln in lines if "start" in ln
               and json.dumps({k: v for k, v in ln["start"].items() if k in _CASE_KEYS}, sort_keys=True) not in done]
    rec["correct"] = {"cases": results, "crashed_or_cut": crashed, "rc": rcs,
                      "summary": {dq: {"pass": sum(bool(r["pass"]) for r in results if r["dq"] == dq),
                                       "cases": sum(r["dq"] == dq for r in results),
                                       "crashed_or_cut": sum(s["dq"] == dq for s in crashed)} for dq in DQS}}
    for s in crashed:
        print(f"correct: no result for {s} (the child died or ran out of time there)", flush=True)
    print(f"correct summary {rec['correct']['summary']}", flush=True)
    save()

    # 3. bench: every dQ path whose child did not die (a fault could poison the bench's context), the
    # paths with every case passing first (the first is the one the ratios are printed for)
    summ = rec["correct"]["summary"]
    ok = sorted((dq for dq in DQS if summ[dq]["cases"] > 0 and not summ[dq]["crashed_or_cut"]),
                key=lambda dq: (summ[dq]["pass"] < summ[dq]["cases"], DQS.index(dq)))
    rec["bench_dqs_all_pass"] = [dq for dq in ok if summ[dq]["pass"] == summ[dq]["cases"]]
    rec["bench_dqs"] = ok
    p = out / "part-bench.jsonl"
    p.unlink(missing_ok=True)
    rc = _run_child(["--child", "bench", "--part", str(p), "--dqs", ",".join(ok), "--deadline", str(end - 8)],
                    end - time.time())
    rec["bench"] = [ln["row"] for ln in _read(p) if "row" in ln]
    rec["bench_skipped"] = [ln for ln in _read(p) if "skipped" in ln]
    rec["bench_rc"] = rc
    save()
    print(f"wrote {path} ({rec['wall_s']} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
