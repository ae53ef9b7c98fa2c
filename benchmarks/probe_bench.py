"""A quick check of the like-for-like method on two shapes (not a recorded run): prints
call/kernel/host per implementation. python benchmarks/probe_bench.py"""
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from flashviz.gpu.tensorcore import bench as mma_bench  # noqa: E402

rows = []
for N, d, causal in ((512, 64, False), (4096, 128, True)):
    r = mma_bench.bench_shape(N, d, causal, variants=("wgmma", "mma.sync"))
    rows.append(r)
    for key in ("sdpa_flash", "sdpa_cudnn", "sdpa_efficient", "wgmma", "mmasync", "teaching", "naive"):
        if key + "_call_ms" in r:
            print(f"N={N} d={d} c={causal} {key:15s} call {r[key + '_call_ms']:8.3f} ms  kernel {r[key + '_kernel_ms']:8.3f} ms"
                  f"  host {r[key + '_host_us']:7.1f} us  launches {r[key + '_launches']}  {r[key + '_kernel_name'][:60]}")
        else:
            print(key, r.get(key + "_error"))
out = os.environ.get("OUT", ".")
Path(out, "probe_bench.json").write_text(json.dumps(rows, indent=1))
