"""Where the host time of one public call goes: flashviz.gpu.flash_forward_mma beside torch
SDPA (flash backend), torch fp16 inputs, on a GPU. Prints host µs per call (calls queued,
wall clock / count) for the whole call and for each stage of ours, at a tiny shape (the GPU
waits on the host) and at the benchmark's N = 512 shape: the repeated call's pieces (the plan
key, its lookup, the outputs, the launch from the plan) and the general path's.

    python benchmarks/probe_call.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def per_call_us(fn, n=2000):
    import torch
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / n * 1e6


def main():
    import numpy as np
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from flashviz.gpu import common
    from flashviz.gpu.tensorcore import kernel as mma
    from flashviz.gpu.tensorcore.operands import as_operand, torch_operand
    for shape in ((1, 1, 128, 64), (32, 32, 512, 64)):
        q, k, v = (torch.randn(*shape, device="cuda", dtype=torch.float16) for _ in range(3))
        n = 2000 if shape[0] == 1 else 200
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            sd = per_call_us(lambda: F.scaled_dot_product_attention(q, k, v), n)
        ours = per_call_us(lambda: mma.flash_forward_mma(q, k, v), n)
        qo, ko, vo = (as_operand(x, nm, None) for x, nm in ((q, "Q"), (k, "K"), (v, "V")))
        mk = mma.compile_mma("float16", None, None, shape[3], False, device=0)
        st = common.torch_stream(0)
        o, O, lse, lp = mma.out_like(qo)
        hit = mma._plan_key(q, k, v, False, None, None, None, None, None)
        plan = mma._PLANS[hit[0]]                   # made by the calls above
        key, qp, kp, vp = hit
        el, tmpl = torch.empty_like, plan.templates

        def general():                              # the whole call without its plan
            mma._PLANS.pop(key, None)
            return mma.flash_forward_mma(q, k, v)

        stages = {
            "plan key (_plan_key)": lambda: mma._plan_key(q, k, v, False, None, None, None, None, None),
            "plan lookup": lambda: mma._PLANS.get(key),
            "outputs (plan: empty_like x2)": lambda: (el(tmpl[0]), el(tmpl[1])),
            "launch from the plan (_call_plan)": lambda: mma._call_plan(plan, qp, kp, vp),
            "general path (no plan)": general,
            "torch_operand x3": lambda: (torch_operand(q, "Q", None), torch_operand(k, "K", None),
                                         torch_operand(v, "V", None)),
            "as_operand x3 (general path)": lambda: (as_operand(q, "Q", None), as_operand(k, "K", None),
                                                     as_operand(v, "V", None)),
            "check_shapes": lambda: mma._check_shapes(qo, ko, vo),
            "torch_stream": lambda: common.torch_stream(0),
            "compile_mma (hit)": lambda: mma.compile_mma("float16", None, None, shape[3], False, None, device=0),
            "outputs (out_like: new_empty x2)": lambda: mma._outputs(qo, True),
            "raw stream handle": lambda: common.raw_torch_stream(0),
            "launch_mma": lambda: mma.launch_mma(mk, qo, ko, vo, o, lp, 0.125, st),
            "scale check": lambda: mma._check_scale(None, shape[3]),
        }
        B, H, N, d = shape
        f32 = torch.float32
        a = mma._ARGBUF
        fptr = mk.function_ptr
        sp = common.raw_torch_stream(0)
        launch = mma._DRIVER[0]
        size = np.array([mma._ARGS.size], dtype=np.uint64)
        extra = np.array([1, a.buf.ctypes.data, 2, size.ctypes.data, 0], dtype=np.uint64)
        parts = {                      # the pieces of one call, each alone (finer than the stages)
            "q.shape": lambda: q.shape,
            "q.stride()": lambda: q.stride(),
            "q.data_ptr()": lambda: q.data_ptr(),
            "q.get_device()": lambda: q.get_device(),
            "q.is_cuda": lambda: q.is_cuda,
            "Operand(...)": lambda: mma.Operand(1, shape, shape, "float16", q, "torch", 0),
            "O: q.new_empty(shape)": lambda: q.new_empty((B, H, N, d)),
            "O: torch.empty_like(q)": lambda: torch.empty_like(q),
            "lse: q.new_empty(.., dtype=f32)": lambda: q.new_empty((B, H, N), dtype=f32),
            "lse: torch.empty(.., dtype, device)": lambda: torch.empty((B, H, N), dtype=f32, device=q.device),
            "cuLaunchKernel alone": lambda: launch(fptr, N // mk.Br, H, B, mk.threads, 1, 1, mk.smem_bytes,
                                                   sp, a.ptrs_addr, 0),
            "cuLaunchKernel (param buffer)": lambda: launch(fptr, N // mk.Br, H, B, mk.threads, 1, 1,
                                                            mk.smem_bytes, sp, 0, extra.ctypes.data),
            "pack_into (last: it leaves a bad block)": lambda: mma._ARGS.pack_into(a.buf, 0, 1, 2, 3, 4, 5, N, N, H,
                                                                                    *([8] * 12), 0.2),
        }
        print(f"shape {shape}: SDPA-flash {sd:.1f} us/call, flash_forward_mma {ours:.1f} us/call")
        for name, fn in stages.items():
            print(f"   {name:34s} {per_call_us(fn, n):7.2f} us")
        mma.launch_mma(mk, qo, ko, vo, o, lp, 0.125, st)      # a valid block for the bare launch
        for name, fn in parts.items():
            if name == "cuLaunchKernel (param buffer)":     # the same output as the pointer launch?
                torch.cuda.synchronize()
                ref = O.clone()
                O.zero_()
                fn()
                torch.cuda.synchronize()
                print("      param-buffer launch gives the same O:", bool(torch.equal(O, ref)))
            print(f"      {name:34s} {per_call_us(fn, n):7.2f} us")


def after_profiler():
    """Does a torch.profiler session leave the process slower? Host µs per call of SDPA-flash
    and ours before and after one (the benchmark profiles every implementation)."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from flashviz.gpu import timing
    from flashviz.gpu.tensorcore import kernel as mma
    q, k, v = (torch.randn(32, 32, 512, 64, device="cuda", dtype=torch.float16) for _ in range(3))
    mma.flash_forward_mma(q, k, v)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        before = (per_call_us(lambda: F.scaled_dot_product_attention(q, k, v), 200),
                  per_call_us(lambda: mma.flash_forward_mma(q, k, v), 200))
        timing.kernel_times_ms(lambda: F.scaled_dot_product_attention(q, k, v), repeat=10)
        print(f"before any profiler session: SDPA-flash {before[0]:.1f} us/call, ours {before[1]:.1f}")
        t0 = time.perf_counter()
        for wait in (0, 1, 3, 10):
            time.sleep(max(0.0, t0 + wait - time.perf_counter()))
            after = (per_call_us(lambda: F.scaled_dot_product_attention(q, k, v), 200),
                     per_call_us(lambda: mma.flash_forward_mma(q, k, v), 200))
            print(f"{wait:3d} s after one torch.profiler session: SDPA-flash {after[0]:.1f} us/call, ours {after[1]:.1f}")


if __name__ == "__main__":
    main()
    after_profiler()
