"""Small fa3 launches for compute-sanitizer (issue 13): run as
    compute-sanitizer --tool memcheck  python benchmarks/sanitize_fa3.py
    compute-sanitizer --tool racecheck python benchmarks/sanitize_fa3.py
Every d, causal and dtype once, with a partial last tile, Nq != Nk both ways and a keyless row;
then Bc = 176 and the persistent grid (blocks walking several tiles, some with no key tile), static
and with the dynamic tile scheduler (the FA3_DYNAMIC build; racecheck sees its shared memory, not
the tile index it hands over through global memory: tests/gpu/test_fa3.py compares its output bit
for bit with one block per tile);
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
# Bc = 176, and the persistent grid (one block per SM walking several tiles, some without a key tile)
from flashviz.gpu.common import source  # noqa: E402
from flashviz.gpu.tensorcore import fa3  # noqa: E402
from flashviz.gpu.tensorcore import kernel as kmod  # noqa: E402

for grid in ("per tile", "persistent", "dynamic"):
    fa3.PERSISTENT, fa3.DYNAMIC = grid == "persistent", grid == "dynamic"
    if grid == "dynamic":
        kmod.SOURCE_OVERRIDE["fa3"] = "#define FA3_DYNAMIC 1\n" + source("flash_fwd_fa3.cu")
    for d, Br, Bc in ((128, 128, 176), (64, 192, 128), (128, 128, 128)):
        q = torch.randn(1, 48, 700, d, device="cuda", dtype=torch.float16)      # 6·48 = 288 tiles > 2·132 SMs
        k, v = (torch.randn(1, 48, 300, d, device="cuda", dtype=torch.float16) for _ in range(2))
        O, lse = flash_forward_mma(q, k, v, causal=True, variant="fa3", Br=Br, Bc=Bc)
        torch.cuda.synchronize()
        print(grid, d, Br, Bc, "ok", bool(torch.isfinite(O).all()), flush=True)
fa3.PERSISTENT = fa3.DYNAMIC = False
kmod.SOURCE_OVERRIDE.clear()
print("sanitize_fa3 done")
