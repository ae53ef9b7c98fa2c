"""Nsight Compute on the fa3 kernel (issue 13): a few calls per shape, for
    ncu --kernel-name regex:flash_fwd --launch-skip 2 --launch-count 1 ... python benchmarks/profile_fa3.py d causal N variant
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from flashviz.gpu.tensorcore.kernel import flash_forward_mma  # noqa: E402

d, causal, N, variant = int(sys.argv[1]), sys.argv[2] == "1", int(sys.argv[3]), sys.argv[4]
B, H = max(1, 16384 // N), 2048 // d
q, k, v = (torch.randn(B, H, N, d, device="cuda", dtype=torch.float16) for _ in range(3))
for _ in range(4):
    flash_forward_mma(q, k, v, causal=causal, variant=variant)
torch.cuda.synchronize()
print("profiled", d, causal, N, variant)
