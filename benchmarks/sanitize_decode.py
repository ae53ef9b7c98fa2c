"""Small decode launches for compute-sanitizer (issue 24): run as
    compute-sanitizer --tool memcheck  python benchmarks/sanitize_decode.py
    compute-sanitizer --tool racecheck python benchmarks/sanitize_decode.py
kernels/flash_decode.cu (both split passes, v1 "simt" and v2 "mma", and the merge): fp16 and bf16, d = 64 and 128, every ROWS class
(G·Nq = 1, 4, 12 and 40: two row chunks), causal and not, a contiguous and a paged cache (pages of
16, a shuffled table), split counts 1, 3 and 40 (more splits than the 16 key tiles of Nk = 1000:
empty splits), Nk not a multiple of 64; then the tensor-core backward's deterministic dQ pass
(flash_backward_mma(deterministic=True)). Prints one line per launch and
"sanitize_decode done". The cubins come from $FLASHVIZ_CACHE when it is warm."""
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from flashviz import gpu  # noqa: E402

g = torch.Generator(device="cuda").manual_seed(0)


def rnd(*shape, dtype=torch.float16):
    return torch.randn(*shape, device="cuda", dtype=torch.float32, generator=g).to(dtype)


# SANITIZE_VARIANTS (simt,mma), SANITIZE_DIMS (64,128), SANITIZE_DTYPES (float16,bfloat16) narrow the grid
VARIANTS = os.environ.get("SANITIZE_VARIANTS", "simt,mma").split(",")
DIMS = [int(x) for x in os.environ.get("SANITIZE_DIMS", "64,128").split(",")]
DTYPES = [getattr(torch, x) for x in os.environ.get("SANITIZE_DTYPES", "float16,bfloat16").split(",")]
Nk, B, H_kv, page = 1000, 2, 2, 16
for dt in DTYPES:
    for d in DIMS:
        for G, Nq in ((1, 1), (4, 1), (4, 3), (8, 5)):
            for causal in (False, True):
                q, k, v = rnd(B, G * H_kv, Nq, d, dtype=dt), rnd(B, H_kv, Nk, d, dtype=dt), rnd(B, H_kv, Nk, d, dtype=dt)
                for S in (1, 3, 40):
                    for variant in VARIANTS:
                        O, lse = gpu.flash_decode_gpu(q, k, v, causal=causal, num_splits=S, variant=variant)
                        torch.cuda.synchronize()
                        print("contiguous", variant, dt, d, G, Nq, causal, S, "ok", bool(torch.isfinite(O).all()),
                              flush=True)
                P = -(-Nk // page)
                perm = torch.randperm(B * P, generator=torch.Generator().manual_seed(1))
                kp = torch.zeros(B * P, page, H_kv, d, device="cuda", dtype=dt)
                vp = torch.zeros_like(kp)
                table = perm.reshape(B, P).to(torch.int32).cuda()
                for b in range(B):
                    for p in range(P):
                        rows = slice(p * page, min(Nk, (p + 1) * page))
                        n = rows.stop - rows.start
                        kp[table[b, p], :n] = k[b, :, rows].transpose(0, 1)
                        vp[table[b, p], :n] = v[b, :, rows].transpose(0, 1)
                for variant in VARIANTS:
                    O, lse = gpu.flash_decode_gpu(q, kp, vp, causal=causal, num_splits=3, block_table=table, Nk=Nk,
                                                  variant=variant)
                    torch.cuda.synchronize()
                    print("paged", variant, dt, d, G, Nq, causal, "ok", bool(torch.isfinite(O).all()), flush=True)
for causal in (False, True):
    for Nq, Nk2 in ((77, 200), (200, 70)):
        q, k, v = rnd(1, 2, Nq, 64), rnd(1, 2, Nk2, 64), rnd(1, 2, Nk2, 64)
        O, lse = gpu.flash_forward_mma(q, k, v, causal=causal)
        dq, dk, dv = gpu.flash_backward_mma(q, k, v, O, rnd(1, 2, Nq, 64), lse, causal=causal, deterministic=True)
        torch.cuda.synchronize()
        print("mma deterministic", causal, Nq, Nk2, "ok", bool(torch.isfinite(dq).all()), flush=True)
print("sanitize_decode done")
