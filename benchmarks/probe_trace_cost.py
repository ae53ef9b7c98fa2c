"""On the H200: where does the wgmma kernel's tracing cost come from? (issue 12, NOTES.md "Timeline")

Builds variants of the traced kernel by editing the text of kernels/fv_trace.cuh and the kernel as
NVRTC sees them (flashviz.gpu.common.source) and times each against the normal kernel with
trace_kernel (same inputs, kernel-only, alternating rounds). Variants (v3, deferred stores): A as
committed; B clock reads, no event stores; C event stores, no clock reads (a constant); E raw
clock values kept (no subtraction next to the read: the read's consumer is the deferred store);
F only compute_S and accumulate_O timed (4 clock reads a tile instead of 9). The times that
variants C, E, F decode are not meaningful; only their cost is.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import flashviz.gpu as gpu  # noqa: E402
from flashviz.gpu import common  # noqa: E402

ORIG = common.source
EVENT = "if (writer) ev[(j + 1) * FV_NSTAGE + stage] = ((unsigned long long)t1 << 32) | t0;"
CLOCK = 'asm volatile("mov.u64 %0, %%clock64;" : "=l"(t));'
SINCE = "__device__ __forceinline__ unsigned since() const { return (unsigned)(clock() - base); }"
DROP = ["FV_NOW32(t_kland);", "FV_NOW32(t_ml);", "FV_NOW32(t_cv);", "FV_NOW32(t_vland);",
        "FV_NOW32(t_k_issue);", "FV_NOW32(t_v_issue);"]
VARIANTS = {
    "A committed": {},
    "B reads, no stores": {EVENT: "(void)t0; (void)t1; (void)j; (void)stage;"},
    "C stores, no reads": {CLOCK: "t = 0x1234ull;"},
    "E raw clock values": {SINCE: "__device__ __forceinline__ unsigned since() const { return (unsigned)clock(); }"},
    "F 4 reads a tile": {d: "" for d in DROP},
}


def main():
    rng = np.random.default_rng(0)
    shapes = [(64, False, 32), (128, True, 16)]
    for name, edits in VARIANTS.items():
        def patched(fname, _e=edits):
            text = ORIG(fname)
            for a, b in _e.items():
                assert a in text, (name, a)
                text = text.replace(a, b)
            return text
        common.source = patched
        for d, causal, H in shapes:
            Q, K, V = (rng.standard_normal((1, H, 4096, d)).astype(np.float32) for _ in range(3))
            try:
                tl = gpu.trace_kernel(Q, K, V, kernel="wgmma", causal=causal, repeat=10, rounds=7)
                print(f"{name:22s} d={d:3d} causal={causal!s:5s} normal {tl.kernel_ms:.4f} ms traced "
                      f"{tl.traced_ms:.4f} ms overhead {100 * (tl.traced_ms / tl.kernel_ms - 1):5.1f} %", flush=True)
            except Exception as exc:
                print(f"{name:22s} d={d} causal={causal}: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
    common.source = ORIG


if __name__ == "__main__":
    main()
