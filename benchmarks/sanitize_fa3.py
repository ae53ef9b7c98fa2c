"""Small fa3 launches for compute-sanitizer (issue 13): run as
    compute-sanitizer --tool memcheck  python benchmarks/sanitize_fa3.py
    compute-sanitizer --tool racecheck python benchmarks/sanitize_fa3.py
Every d, causal and dtype once, with a partial last tile, Nq != Nk both ways and a keyless row;
prints one line per launch and "sanitize_fa3 done"."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from flashviz.gpu.tensorcore.kernel import flash_forward_mma  # noqa: E402

for dt in (torch.float16, torch.bfloat16):
    for d in (64, 128):
        for causal in (False, True):
            for Nq, Nk in ((300, 200), (130, 390)):
                q = torch.randn(1, 2, Nq, d, device="cuda", dtype=dt)
                k, v = (torch.randn(1, 2, Nk, d, device="cuda", dtype=dt) for _ in range(2))
                O, lse = flash_forward_mma(q, k, v, causal=causal, variant="fa3")
                torch.cuda.synchronize()
                print(dt, d, causal, Nq, Nk, "ok", bool(torch.isfinite(O).all()), flush=True)
print("sanitize_fa3 done")
