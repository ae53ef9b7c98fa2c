"""On a GPU machine: check the launch plans of ``flash_forward_mma`` (issue 21, one runner path).

1. Host µs per call of the repeated call, torch fp16 (4, 16, 1024, 64), against torch SDPA's
   flash backend in the same process: in each of ``--rounds`` alternating rounds every
   implementation gets ``--calls`` calls queued without synchronising (fewer than the launch
   queue holds), and the median of each call's wall-clock time (``timing.host_times_us``'s
   method); reported: the median and the lowest over the rounds, and ours / SDPA's. Beside it:
   ours with the wgmma kernel (FlashAttention-2) named, the general path alone (the plan
   dropped before each call), the pieces of the repeated call, and the kernels' GPU time.
   The repeated calls must never reach the general path (counted).
2. The tests of the public call and of fa3 in a separate process: tests/gpu/test_mma_call.py,
   tests/gpu/test_fa3.py (without its every-block-size grid unless --full), the public-call
   tests of tests/gpu/test_mma.py and the forward-routing tests of test_backward_autograd.py.

Prints one JSON object and writes it to $OUT/check-launch-plan.json when $OUT is set.

Usage: FLASHVIZ_COMMIT=<sha> FLASHVIZ_CACHE=<empty dir> python benchmarks/check_launch_plan.py
       [--rounds 15] [--calls 300] [--skip-tests] [--full]
(from the repository root; no install needed: the checkout is put on sys.path / PYTHONPATH)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SHAPE = (4, 16, 1024, 64)
TESTS = [
    ["tests/gpu/test_mma_call.py"],
    ["tests/gpu/test_fa3.py"],                      # -k added below unless --full
    ["tests/gpu/test_mma.py", "-k", "public_api or strided_bshd or bad_inputs or layouts_streams"],
    ["tests/gpu/test_backward_autograd.py", "-k", "flash_forward_mma"],
]


def _per_call_medians(named: dict, contexts: dict, rounds: int, calls: int) -> dict:
    """{name: [median µs per call of each round]}; the implementations alternate within a round."""
    from contextlib import nullcontext

    import numpy as np
    import torch
    clock = time.perf_counter
    out = {k: [] for k in named}
    for r in range(rounds):
        names = list(named)
        names = names[r % len(names):] + names[:r % len(names)]
        for name in names:
            fn, ctx = named[name], contexts.get(name)
            with (ctx() if ctx else nullcontext()):
                fn()
                torch.cuda.synchronize()
                ts = [0.0] * (calls + 1)
                ts[0] = clock()
                for i in range(calls):
                    fn()
                    ts[i + 1] = clock()
                torch.cuda.synchronize()
            out[name].append(float(np.median(np.diff(ts))) * 1e6)
    return out


def _gpu_us(fn, ctx=None, n=50) -> float:
    """GPU time per call (CUDA events around n back-to-back calls)."""
    from contextlib import nullcontext

    import torch
    with (ctx() if ctx else nullcontext()):
        for _ in range(5):
            fn()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        a.record()
        for _ in range(n):
            fn()
        b.record()
        torch.cuda.synchronize()
    return a.elapsed_time(b) / n * 1e3


def timing(rounds: int, calls: int) -> dict:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from flashviz.gpu.tensorcore import kernel as mma
    q, k, v = (torch.randn(*SHAPE, device="cuda", dtype=torch.float16) for _ in range(3))

    def sdpa():
        return F.scaled_dot_product_attention(q, k, v)

    def ours():
        return mma.flash_forward_mma(q, k, v)

    def ours_wgmma():
        return mma.flash_forward_mma(q, k, v, variant="wgmma")

    ours()                                          # the general path: compiles, leaves the plans
    ours_wgmma()
    key, qp, kp, vp = mma._plan_key(q, k, v, False, None, None, None, None, None)

    def general():                                  # the whole call without its plan
        mma._PLANS.pop(key, None)
        return mma.flash_forward_mma(q, k, v)

    flash = lambda: sdpa_kernel(SDPBackend.FLASH_ATTENTION)  # noqa: E731
    with flash():                                   # the same attention, so the comparison is fair
        err = float((ours()[0].float() - sdpa().float()).abs().max())

    runs, real = [], mma._run
    mma._run = lambda *a, **kw: runs.append(1) or real(*a, **kw)
    try:
        res = _per_call_medians({"sdpa_flash": sdpa, "ours": ours, "ours_wgmma": ours_wgmma},
                                {"sdpa_flash": flash}, rounds, calls)
        general_calls_in_repeated = len(runs)
        res_general = _per_call_medians({"ours_general_path": general}, {}, max(3, rounds // 3), calls)
    finally:
        mma._run = real
    ours()                                          # the plan back
    plan = mma._PLANS[key]
    el, t = torch.empty_like, plan.templates
    pieces = _per_call_medians({
        "plan_key": lambda: mma._plan_key(q, k, v, False, None, None, None, None, None),
        "plan_lookup": lambda: mma._PLANS.get(key),
        "outputs_empty_like_x2": lambda: (el(t[0]), el(t[1])),
        "call_plan_alloc_and_launch": lambda: mma._call_plan(plan, qp, kp, vp),
        "sdpa_flash_again": sdpa,
    }, {"sdpa_flash_again": flash}, max(3, rounds // 3), calls)
    med = {k: statistics.median(v) for k, v in {**res, **res_general, **pieces}.items()}
    low = {k: min(v) for k, v in {**res, **res_general}.items()}
    return {
        "shape": list(SHAPE), "dtype": "float16", "rounds": rounds, "calls_per_round": calls,
        "method": "per round: calls queued without synchronising, median of each call's wall-clock time; "
                  "implementations alternate; median (and lowest) over rounds",
        "median_host_us": {k: round(x, 2) for k, x in med.items()},
        "lowest_host_us": {k: round(x, 2) for k, x in low.items()},
        "ratio_ours_to_sdpa_flash": round(med["ours"] / med["sdpa_flash"], 3),
        "ratio_ours_wgmma_to_sdpa_flash": round(med["ours_wgmma"] / med["sdpa_flash"], 3),
        "rounds_host_us": {k: [round(x, 2) for x in v] for k, v in res.items()},
        "plan_variant": plan.variant, "plan_blocks": [plan.kernel.Br, plan.kernel.Bc],
        "plans_cached": len(mma._PLANS),
        "general_path_calls_during_repeated_calls": general_calls_in_repeated,
        "max_abs_diff_vs_sdpa_flash": err,
        "gpu_us_per_call": {"sdpa_flash": round(_gpu_us(sdpa, flash), 2), "ours": round(_gpu_us(ours), 2),
                            "ours_wgmma": round(_gpu_us(ours_wgmma), 2)},
    }


def tests(full: bool, budget_s: float) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    out = {}
    t_end = time.monotonic() + budget_s
    for args in TESTS:
        args = list(args)
        if args[0].endswith("test_fa3.py") and not full:
            args += ["-k", "not every_block_size_and_dtype"]
        left = t_end - time.monotonic()
        name = args[0].rsplit("/", 1)[-1]
        if left < 20:
            out[name] = {"skipped": "out of time"}
            continue
        t0 = time.monotonic()
        try:
            p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfEs", *args],
                               cwd=ROOT, env=env, capture_output=True, text=True, timeout=left)
            tail = (p.stdout + p.stderr).strip().splitlines()
            out[name] = {"exit_code": p.returncode, "seconds": round(time.monotonic() - t0, 1),
                         "summary": tail[-1] if tail else "", "tail": "\n".join(tail[-40:])[-6000:]}
        except subprocess.TimeoutExpired:
            out[name] = {"exit_code": None, "timed_out_after_s": round(left, 1)}
        print(name, out[name].get("summary", out[name]), flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--skip-tests", action="store_true")
    ap.add_argument("--full", action="store_true", help="test_fa3.py's every-block-size grid too (many compiles)")
    ap.add_argument("--test-budget-s", type=float, default=420.0)
    a = ap.parse_args()
    import flashviz.gpu as gpu
    ok, reason = gpu.gpu_status()
    record = {"env": gpu.environment() if ok else {"gpu": reason}}
    dest = os.environ.get("OUT")
    path = Path(dest) / "check-launch-plan.json" if dest else None

    def save():
        text = json.dumps(record, indent=1) + "\n"
        if path is not None:
            path.write_text(text)
        return text

    if not ok:
        print(save())
        return 1
    from flashviz.gpu.nvrtc import cache_dir
    from flashviz.gpu.tensorcore.run import kernel_source_hashes

    # which code was timed: the commit (given by the caller: the device copy has no .git), each
    # kernel file's sha256, and every cubin the timing compiled or loaded (a fresh FLASHVIZ_CACHE
    # makes that exactly this run's), by its lowered name
    record["source_commit"] = os.environ.get("FLASHVIZ_COMMIT")
    record["kernel_sources"] = kernel_source_hashes(("wgmma", "fa3"))
    try:
        record["timing"] = timing(a.rounds, a.calls)
        record["cubins"] = {n.read_text(): hashlib.sha256(n.with_suffix(".cubin").read_bytes()).hexdigest()[:16]
                            for n in sorted(cache_dir().glob("*.name"))}
    except Exception as exc:                        # the tests still run and say more
        import traceback
        record["timing_error"] = traceback.format_exc()[-4000:]
        print("timing failed:", exc, flush=True)
    save()
    if not a.skip_tests:
        record["tests"] = tests(a.full, a.test_budget_s)
    print(save())
    failed = "timing_error" in record or any(t.get("exit_code") not in (0, 5) for t in record.get("tests", {}).values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
