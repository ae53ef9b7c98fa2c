"""On a GPU machine: the backward tests of issue 23 in one call, and a small timing.

1. compiles every kernel instantiation the tests use, in parallel processes, into the on-disk cubin
   cache ($FLASHVIZ_CACHE), so the tests themselves only load cubins;
2. runs tests/gpu/test_backward_{teaching,mma,autograd}.py (CPU and GPU tests; the inductor test
   apart) with a junit xml and a JSON record (device, versions, the commit and the sha256 of the
   files under test, every test's outcome and recorded properties), then tests/gpu/test_mma_call.py
   (the forward's public call, which now checks for inputs that require grad) into its own xml;
3. times the teaching backward (both dQ modes) against a naive CuPy backward that materialises S
   and P, and flash_attention's forward+backward against SDPA's, on a few shapes (public calls,
   CUDA events, median; one run) into probe-bwd-<device>-<date>.json.

Usage: python benchmarks/run_bwd_tests.py [--out DIR] [--skip-timing]   (default DIR: $OUT or
benchmarks/results). The commit measured is $FLASHVIZ_COMMIT (set by the one who runs it).
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import hashlib
import json
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
FILES = ["kernels/flash_bwd.cu", "flashviz/gpu/teaching/backward.py", "flashviz/gpu/teaching/limits.py",
         "flashviz/gpu/autograd.py", "flashviz/gpu/tensorcore/kernel.py", "kernels/flash_bwd_mma.cu",
         "flashviz/gpu/tensorcore/backward.py", "tests/gpu/test_backward_teaching.py",
         "tests/gpu/test_backward_autograd.py", "tests/gpu/test_backward_mma.py"]
TESTS = ["tests/gpu/test_backward_teaching.py", "tests/gpu/test_backward_mma.py", "tests/gpu/test_backward_autograd.py"]


def _jobs():
    from flashviz.gpu.tensorcore.backward import backward_expressions
    blocks = [(a, b) for a in (16, 32, 64) for b in (16, 32, 64)]
    jobs = [("bwd", f"flash_bwd_preprocess<{d}>") for d in (16, 32, 64, 128)]
    for d in (16, 64, 128):
        for Br, Bc in blocks:
            jobs += [("bwd", f"flash_bwd<{Br},{Bc},{d}>"), ("bwd", f"flash_bwd_dq<{Br},{Bc},{d}>")]
    for Br, Bc in ((64, 64), (64, 32), (32, 64), (32, 32)):
        jobs += [("bwd", f"flash_bwd<{Br},{Bc},32>"), ("bwd", f"flash_bwd_dq<{Br},{Bc},32>")]
    jobs += [("fwd", d) for d in (32, 64, 128)]
    for dt in (0, 1):
        names = {e for bc in (64, 128) for d in (64, 128) for c in (False, True) for det in (False, True)
                 for st in (1, 2) for e in backward_expressions(("float16", "bfloat16")[dt], bc, d, c, det, st).values()}
        jobs += [("bwdmma", e) for e in sorted(names)]
    jobs += [("mma", (dt, d, c, v)) for dt in ("float16", "bfloat16") for d in (64, 128) for c in (False, True)
             for v in ("fa3", "wgmma")]
    return jobs


def _compile(job):
    kind, arg = job
    t0 = time.perf_counter()
    try:
        if kind in ("bwd", "bwdmma"):
            from flashviz.gpu.common import device_facts, source
            from flashviz.gpu.nvrtc import compile_cubin
            compile_cubin(source("flash_bwd.cu" if kind == "bwd" else "flash_bwd_mma.cu"), arg,
                          f"sm_{device_facts().cc}")
        elif kind == "fwd":
            from flashviz.gpu.teaching.kernel import compile_kernel
            compile_kernel(64, 64, arg)
        else:
            from flashviz.gpu.tensorcore.kernel import compile_mma
            dt, d, c, v = arg
            compile_mma(dt, None, None, d, c, v)
        return f"{kind} {arg}", round(time.perf_counter() - t0, 2), ""
    except Exception as exc:                      # reported; the tests then show what it breaks
        return f"{kind} {arg}", round(time.perf_counter() - t0, 2), f"{type(exc).__name__}: {str(exc)[:300]}"


class Collect:
    def __init__(self):
        self.results = []

    def pytest_runtest_logreport(self, report):
        if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
            self.results.append({"test": report.nodeid, "outcome": report.outcome,
                                 "seconds": round(report.duration, 3),
                                 "properties": {k: v for k, v in report.user_properties},
                                 "message": str(report.longrepr)[-800:] if report.failed else ""})


def _timing(out: Path, stamp: str, env: dict) -> None:
    import cupy as cp
    import numpy as np
    import torch

    from flashviz import gpu
    from flashviz.gpu.timing import call_times_ms

    def naive_bwd(Q, K, V, O, dO, lse, causal, scale):
        """Standard attention's backward in CuPy float32: S and P materialised (Nq·Nk per head)."""
        S = cp.matmul(Q, K.transpose(0, 2, 1)) * np.float32(scale)
        if causal:
            Nq, Nk = S.shape[1:]
            S = cp.where(cp.arange(Nk)[None, None, :] <= cp.arange(Nq)[None, :, None] + Nk - Nq, S, -cp.inf)
        P = cp.exp(S - lse[..., None])
        dV = cp.matmul(P.transpose(0, 2, 1), dO)
        dP = cp.matmul(dO, V.transpose(0, 2, 1))
        dS = P * (dP - (dO * O).sum(-1, keepdims=True))
        return cp.matmul(dS, K) * np.float32(scale), cp.matmul(dS.transpose(0, 2, 1), Q) * np.float32(scale), dV

    def teaching_row(N, d, causal, BH=16):
        rng = np.random.default_rng(N + d)
        Q, K, V, dO = (cp.asarray(rng.standard_normal((BH, N, d), dtype=np.float32)) for _ in range(4))
        O, lse = gpu.flash_forward_gpu(Q, K, V, causal=causal)
        scale = 1 / np.sqrt(d)
        row = {"B": 1, "H": BH, "N": N, "d": d, "causal": causal, "Br": 64, "Bc": 64,
               "flops_bwd": 2.5 * 4 * BH * N * N * d / (2 if causal else 1)}
        for name, fn in (("bwd_teaching", lambda: gpu.flash_backward_gpu(Q, K, V, O, dO, lse, causal=causal)),
                         ("bwd_teaching_det", lambda: gpu.flash_backward_gpu(Q, K, V, O, dO, lse, causal=causal,
                                                                             deterministic=True)),
                         ("bwd_naive_cupy", lambda: naive_bwd(Q, K, V, O, dO, lse, causal, scale))):
            row[f"{name}_call_ms"] = float(np.median(call_times_ms(fn, 10, 2)))
        return row

    def torch_row(N, d, causal):
        B, H = 16384 // N, 2048 // d
        q, k, v = (torch.randn(B, H, N, d, device="cuda", dtype=torch.float16, requires_grad=True) for _ in range(3))
        g = torch.randn(B, H, N, d, device="cuda", dtype=torch.float16)
        row = {"B": B, "H": H, "N": N, "d": d, "causal": causal, "dtype": "float16",
               "flops_fwdbwd": 3.5 * 4 * B * H * N * N * d / (2 if causal else 1)}
        with torch.no_grad():
            O, lse = gpu.flash_forward_mma(q, k, v, causal=causal)
        for Bc in (64, 128):
            row[f"bwd_mma_bc{Bc}_call_ms"] = float(np.median(call_times_ms(
                lambda Bc=Bc: gpu.flash_backward_mma(q, k, v, O, g, lse, causal=causal, Bc=Bc, dq="atomic"),
                5, 1)))
        row["bwd_mma_call_ms"] = row["bwd_mma_bc64_call_ms"]                  # the default, Bc = 64
        for name, f in (("flash_attention", lambda: gpu.flash_attention(q, k, v, causal=causal)),
                        ("flash_attention_det", lambda: gpu.flash_attention(q, k, v, causal=causal, deterministic=True)),
                        ("sdpa", lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal))):
            def step(f=f):
                q.grad = k.grad = v.grad = None
                f().backward(g)

            def fwd(f=f):
                with torch.no_grad():
                    f()
            row[f"{name}_fwdbwd_call_ms"] = float(np.median(call_times_ms(step, 5, 1)))
            row[f"{name}_fwd_call_ms"] = float(np.median(call_times_ms(fwd, 5, 1)))
        return row

    rows = []
    for shape in ((1024, 64, False), (1024, 64, True), (4096, 64, False), (4096, 64, True), (4096, 128, False)):
        rows.append(teaching_row(*shape))
        cp.get_default_memory_pool().free_all_blocks()
    for shape in ((1024, 64, False), (4096, 64, True), (4096, 128, False)):
        rows.append(torch_row(*shape))
        torch.cuda.empty_cache()
    rec = {"env": env, "method": "public calls, CUDA events around each call, median; one run, one process",
           "note": "bwd_teaching: kernels/flash_bwd.cu (fp32, atomics for dQ); _det: the deterministic dQ pass; "
                   "bwd_mma: kernels/flash_bwd_mma.cu alone (mma.sync, dq='atomic'); flash_attention: "
                   "tensor-core forward + flash_backward_mma's default dQ (the separate pass since it became the "
                   "default; atomics before); flash_attention_det: tensor-core forward + the tensor-core "
                   "backward's separate dQ pass (deterministic=True); sdpa: torch's default backend choice",
           "rows": rows}
    (out / f"probe-bwd-{stamp}.json").write_text(json.dumps(rec, indent=1) + "\n")
    for r in rows:
        print(json.dumps(r))


def main():
    import pytest

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--skip-timing", action="store_true")
    ap.add_argument("--stamp", default="h200-2026-12-02")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    import flashviz.gpu as gpu

    ok, reason = gpu.gpu_status()
    env = gpu.environment() if ok else {"gpu": reason}
    env["files_sha256"] = {f: hashlib.sha256((ROOT / f).read_bytes()).hexdigest()[:16] for f in FILES}
    print(json.dumps(env), flush=True)

    t0 = time.perf_counter()
    jobs = _jobs()
    with cf.ProcessPoolExecutor(max_workers=min(15, os.cpu_count() or 1), mp_context=mp.get_context("spawn")) as ex:
        compiled = list(ex.map(_compile, jobs))
    bad = [c for c in compiled if c[2]]
    print(f"compiled {len(compiled)} instantiations in {time.perf_counter() - t0:.1f} s; {len(bad)} failed", flush=True)
    for c in bad:
        print("  ", c, flush=True)

    col = Collect()
    xml = out / f"tests-bwd-{args.stamp}.xml"
    code = pytest.main(["-q", "-p", "no:cacheprovider", "-k", "not inductor", f"--junitxml={xml}", "-o",
                        "junit_family=xunit1", *[str(ROOT / t) for t in TESTS]], plugins=[col])
    counts = {k: sum(r["outcome"] == k for r in col.results) for k in ("passed", "failed", "skipped")}
    print(f"backward tests: {counts}", flush=True)
    col2 = Collect()
    code2 = pytest.main(["-q", "-p", "no:cacheprovider", "-k", "inductor", str(ROOT / "tests/gpu/test_backward_autograd.py")],
                        plugins=[col2])
    # the forward's public call (tests/gpu/test_mma_call.py): flash_forward_mma now checks for inputs
    # that require grad before its fast path; this is the regression check of that path
    col3 = Collect()
    code3 = pytest.main(["-q", "-p", "no:cacheprovider", f"--junitxml={out / f'tests-bwd-{args.stamp}-forward-call.xml'}",
                         str(ROOT / "tests/gpu/test_mma_call.py")], plugins=[col3])
    rec = {"env": env, "compile": compiled, "pytest_exit_code": int(code), "counts": counts, "tests": col.results,
           "inductor": {"pytest_exit_code": int(code2), "tests": col2.results},
           "forward_call": {"pytest_exit_code": int(code3), "tests": col3.results}}
    (out / f"tests-bwd-{args.stamp}.json").write_text(json.dumps(rec, indent=1) + "\n")
    if not args.skip_timing and ok:
        try:
            _timing(out, args.stamp, env)
        except Exception as exc:
            print(f"timing failed: {type(exc).__name__}: {exc}", flush=True)
    print(f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped; inductor exit "
          f"{int(code2)}; forward-call tests exit {int(code3)} -> {xml}")
    return code


if __name__ == "__main__":
    sys.exit(main())
