"""Small backward launches for compute-sanitizer (issue 23): run as
    compute-sanitizer --tool memcheck  python benchmarks/sanitize_bwd.py
    compute-sanitizer --tool racecheck python benchmarks/sanitize_bwd.py
The teaching backward (kernels/flash_bwd.cu) and the tensor-core backward (kernels/flash_bwd_mma.cu:
fp16 / bf16, Bc = 64 / 128), each with atomic and deterministic dQ, every d once, causal and not,
with partial last tiles, Nq != Nk both ways (keyless rows when Nq > Nk), the tensor-core backward with
one and two pipeline stages, and the Hopper backward (kernels/flash_bwd_wgmma.cu, sm_90 only: part
"wgmma") with each of its dQ paths (bulk, atomic, separate); prints one line per launch and
"sanitize_bwd done". The cubins come from
$FLASHVIZ_CACHE when it is warm. SANITIZE_PARTS (default "teaching,mma") and SANITIZE_DTYPES (default
"float16,bfloat16", the tensor-core part's) narrow a run that must fit a time limit."""
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from flashviz import gpu  # noqa: E402

g = torch.Generator(device="cuda").manual_seed(0)


def rnd(*shape, dtype=torch.float32):
    return torch.randn(*shape, device="cuda", dtype=dtype, generator=g)


PARTS = os.environ.get("SANITIZE_PARTS", "teaching,mma").split(",")
DTYPES = [getattr(torch, x) for x in os.environ.get("SANITIZE_DTYPES", "float16,bfloat16").split(",")]
for d, (Br, Bc) in ((16, (16, 32)), (64, (64, 64)), (128, (32, 64))) if "teaching" in PARTS else ():
    for causal in (False, True):
        for Nq, Nk in ((77, 130), (130, 45)):
            q, k, v, do = rnd(2, Nq, d), rnd(2, Nk, d), rnd(2, Nk, d), rnd(2, Nq, d)
            O = torch.zeros_like(q)
            lse = torch.logsumexp(q @ k.transpose(-1, -2) / d ** 0.5, -1)
            for det in (False, True):
                dq, dk, dv = gpu.flash_backward_gpu(q, k, v, O, do, lse, Br=Br, Bc=Bc, causal=causal,
                                                    deterministic=det)
                torch.cuda.synchronize()
                print("teaching", d, Br, Bc, causal, Nq, Nk, det, "ok", bool(torch.isfinite(dq).all()), flush=True)
#: the tensor-core parts' calls on each case: the mma kernel with each dQ path and pipeline depth, the
#: wgmma kernel with each of its dQ paths
CALLS = {"mma": [{"kernel": "mma", "dq": p, "stages": st} for p in ("atomic", "separate") for st in (1, 2)],
         "wgmma": [{"kernel": "wgmma", "dq": p} for p in ("bulk", "atomic", "separate")]}


def tensor_core_cases():
    """(dtype, d, Bc, causal, Nq, Nk, q, k, v, O, lse, dO): each tensor-core case, with the forward's O
    and lse: Nq != Nk both ways (keyless rows when Nq > Nk and causal), partial last tiles."""
    for dt in DTYPES:
        for d in (64, 128):
            for Bc in (64, 128):
                for causal in (False, True):
                    for Nq, Nk in ((77, 200), (200, 70)):
                        q, k, v = rnd(1, 2, Nq, d, dtype=dt), rnd(1, 2, Nk, d, dtype=dt), rnd(1, 2, Nk, d, dtype=dt)
                        O, lse = gpu.flash_forward_mma(q, k, v, causal=causal)
                        yield dt, d, Bc, causal, Nq, Nk, q, k, v, O, lse, rnd(1, 2, Nq, d, dtype=dt)


for part in [p for p in CALLS if p in PARTS]:
    for dt, d, Bc, causal, Nq, Nk, q, k, v, O, lse, do in tensor_core_cases():
        for kw in CALLS[part]:
            dq, dk, dv = gpu.flash_backward_mma(q, k, v, O, do, lse, causal=causal, Bc=Bc, **kw)
            torch.cuda.synchronize()
            print(part, dt, d, Bc, causal, Nq, Nk, kw["dq"], kw.get("stages", ""), "ok", bool(torch.isfinite(dq).all()),
                  flush=True)
print("sanitize_bwd done")
