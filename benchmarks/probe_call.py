"""Where the host time of one public call goes: flashviz.gpu.flash_forward_mma beside torch
SDPA (flash backend), torch fp16 inputs, on a GPU. Prints host µs per call (calls queued,
wall clock / count) for the whole call and for each stage of ours, at a tiny shape (the GPU
waits on the host) and at the benchmark's N = 512 shape.

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
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from flashviz.gpu import common, mma
    from flashviz.gpu.operands import as_operand, torch_operand
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
        stages = {
            "torch_operand x3": lambda: (torch_operand(q, "Q", None), torch_operand(k, "K", None),
                                         torch_operand(v, "V", None)),
            "as_operand x3 (general path)": lambda: (as_operand(q, "Q", None), as_operand(k, "K", None),
                                                     as_operand(v, "V", None)),
            "check_shapes": lambda: mma._check_shapes(qo, ko, vo),
            "torch_stream": lambda: common.torch_stream(0),
            "compile_mma (hit)": lambda: mma.compile_mma("float16", None, None, shape[3], False, None, device=0),
            "outputs (new_empty x2)": lambda: mma._outputs(qo, True),
            "raw stream handle": lambda: common.raw_torch_stream(0),
            "launch_mma": lambda: mma.launch_mma(mk, qo, ko, vo, o, lp, 0.125, st),
            "scale": lambda: mma._scale(None, shape[3]),
        }
        print(f"shape {shape}: SDPA-flash {sd:.1f} us/call, flash_forward_mma {ours:.1f} us/call")
        for name, fn in stages.items():
            print(f"   {name:28s} {per_call_us(fn, n):7.2f} us")


if __name__ == "__main__":
    main()
