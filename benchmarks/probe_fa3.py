"""Probe the FlashAttention-3 kernel on a Hopper GPU (issue 13; not the recorded benchmark run).

One process: compile facts (registers, spills) of every fa3 instantiation; the quick
correctness grid; NaN / keyless-row checks; then, on the same inputs and in the same run,
kernel-only times (CUDA-graph replay of 10 public calls, median of 7 replays: the same method
for every implementation) and public-call times (CUDA events around 30 back-to-back calls) of
SDPA-cuDNN, SDPA-flash, our FA2 wgmma kernel and fa3 — the default build and the builds of
FA3_BUILDS: block sizes, the measured steps (FA3_FEAT 0: producer + TMA only; 1: + ping-pong;
2: + intra-warpgroup overlap; 3: both), ring depths (FA3_STAGES) and the persistent grid. Writes $OUT/probe-fa3.json (or ./probe-fa3.json).

    python benchmarks/probe_fa3.py [--quick] [--no-check]
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from flashviz import mma_limits as limits  # noqa: E402
from flashviz.gpu.common import environment, source  # noqa: E402
from flashviz.gpu.tensorcore import bench as mb  # noqa: E402
from flashviz.gpu.tensorcore import fa3 as fa3mod  # noqa: E402
from flashviz.gpu.tensorcore import kernel as kmod  # noqa: E402
from flashviz.gpu.tensorcore.kernel import compile_mma, flash_forward_mma  # noqa: E402
from flashviz.gpu.timing import call_times_ms, capture_calls, replay_ms  # noqa: E402
from flashviz.mma_limits import mma_blocks  # noqa: E402

QUICK = "--quick" in sys.argv
CHECK = "--no-check" not in sys.argv
OUT = Path(os.environ.get("OUT", "."))
res = {"env": environment(), "kind": "probe fa3", "argv": sys.argv[1:]}
t_start = time.time()


def save():
    res["wall_s"] = time.time() - t_start
    (OUT / "probe-fa3.json").write_text(json.dumps(res, indent=1, default=float))


# 1. compile facts
res["compile"] = []
for d in ((64, 128) if CHECK else ()):
    for causal in (False, True):
        for Br, Bc in mma_blocks(d, "fa3"):
            try:
                mk = compile_mma("float16", Br, Bc, d, causal, "fa3")
                row = {"d": d, "causal": causal, "Br": Br, "Bc": Bc, "regs": mk.num_regs, "local": mk.local_bytes,
                       "smem": mk.smem_bytes, "threads": mk.threads, "compile_ms": mk.compile_ms}
            except Exception as exc:
                row = {"d": d, "causal": causal, "Br": Br, "Bc": Bc, "error": f"{type(exc).__name__}: {exc}"[:600]}
            res["compile"].append(row)
            print("compile", row, flush=True)
save()

# 2. correctness: the grid (quick shapes unless the full run is asked for) + NaN / keyless rows
grid = mb.check_grid("fa3", quick=True) if CHECK else []
bad = [r for r in grid if not r["pass"]]
res["check"] = {"cases": len(grid), "fail": len(bad), "failures": bad[:20],
                "worst_rel_err": max((r.get("rel_err", 0) for r in grid), default=None)}
print(f"check fa3: {len(grid) - len(bad)}/{len(grid)} pass", flush=True)
for r in bad[:20]:
    print("  FAIL", r, flush=True)
save()

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

specials = []
for d in ((64, 128) if CHECK else ()):
    for causal in (False, True):
        q, k, v = (torch.randn(1, 2, n, d, device="cuda", dtype=torch.float16) for n in (200, 300, 300))
        q[0, 1, 5, 3] = float("nan")
        O, lse = flash_forward_mma(q, k, v, causal=causal, variant="fa3")
        nan_rows = torch.isnan(O[0, 1]).any(-1)
        ok_nan = bool(nan_rows[5]) and int(nan_rows.sum()) == 1 and not bool(torch.isnan(O[0, 0]).any())
        # keyless rows: Nq > Nk, causal -> the first Nq - Nk rows see nothing
        q2, k2, v2 = (torch.randn(1, 1, n, d, device="cuda", dtype=torch.float16) for n in (300, 100, 100))
        O2, l2 = flash_forward_mma(q2, k2, v2, causal=True, variant="fa3")
        keyless = bool((O2[0, 0, :200] == 0).all()) and bool(torch.isneginf(l2[0, 0, :200]).all()) \
            and bool(torch.isfinite(l2[0, 0, 200:]).all())
        specials.append({"d": d, "causal": causal, "nan_row_only": ok_nan, "keyless_rows_ok": keyless})
res["specials"] = specials
print("specials", specials, flush=True)
save()


# 3. timings
def graph_ms(fn, n=10, reps=7) -> float:
    g = capture_calls(fn, n)
    out = [replay_ms(g, n) for _ in range(reps)]
    del g
    return float(np.median(out))


def call_ms(fn) -> float:
    return float(np.median(call_times_ms(fn, repeat=30, warmup=3)))


#: fa3 builds timed beside the default: name -> (Br, Bc, #defines, persistent grid)
FA3_BUILDS = {
    64: {"192x128_f0": (192, 128, {"FA3_FEAT": 0}, False), "192x128_f3": (192, 128, {"FA3_FEAT": 3}, False),
         "128x128": (128, 128, {}, False), "128x176": (128, 176, {}, False),
         "192x128_persistent": (192, 128, {}, True)},
    128: {"128x128_f0": (128, 128, {"FA3_FEAT": 0}, False), "128x128_f3": (128, 128, {"FA3_FEAT": 3}, False),
          "128x128_s3": (128, 128, {"FA3_STAGES": 3}, False),
          "128x176": (128, 176, {}, False), "128x176_f3": (128, 176, {"FA3_FEAT": 3}, False),
          "128x128_persistent": (128, 128, {}, True)},
}


def impls(d, causal):
    """(name, callable(q, k, v), (#defines, persistent) or None for the file as it is)."""
    rows = [(n, (lambda be: lambda q, k, v: _sdpa(be, q, k, v, causal))(be), None)
            for n, be in (("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION), ("sdpa_flash", SDPBackend.FLASH_ATTENTION))]
    rows.append(("wgmma", lambda q, k, v: flash_forward_mma(q, k, v, causal=causal, variant="wgmma"), None))
    rows.append(("fa3", lambda q, k, v: flash_forward_mma(q, k, v, causal=causal, variant="fa3"), None))
    for tag, (Br, Bc, defs, pers) in FA3_BUILDS[d].items():
        rows.append((f"fa3_{tag}", (lambda Br, Bc: lambda q, k, v: flash_forward_mma(
            q, k, v, causal=causal, variant="fa3", Br=Br, Bc=Bc))(Br, Bc), (defs, pers)))
    return rows


def _sdpa(be, q, k, v, causal):
    with sdpa_kernel(be):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def override(build) -> None:
    """Compile the next fa3 kernels with the build's #defines and launch them on its grid
    (None: the file as it is, one block per tile)."""
    kmod.SOURCE_OVERRIDE.clear()
    limits.fa3_stages = _stages
    fa3mod.PERSISTENT = False
    if build is None:
        return
    defs, pers = build
    fa3mod.PERSISTENT = pers
    if defs:
        kmod.SOURCE_OVERRIDE["fa3"] = "".join(f"#define {k} {v}\n" for k, v in defs.items()) + source("flash_fwd_fa3.cu")
    if "FA3_STAGES" in defs:
        limits.fa3_stages = lambda d: defs["FA3_STAGES"]


_stages = limits.fa3_stages


res["times"] = []
Ns = (4096, 8192) if QUICK else (2048, 4096, 8192, 16384)
BUILD_N = (2048, 8192, 16384)      #: the sizes at which the builds are timed too
for d in (64, 128):
    for causal in (False, True):
        for N in Ns:
            B, H = max(1, 16384 // N), 2048 // d
            q, k, v = (torch.randn(B, H, N, d, device="cuda", dtype=torch.float16) for _ in range(3))
            flops = 4 * B * H * N * N * d * (0.5 if causal else 1.0)
            row = {"N": N, "d": d, "B": B, "H": H, "causal": causal, "flops": flops}
            ref = None
            for name, fn, build in impls(d, causal):
                if build is not None and N not in BUILD_N:
                    continue
                override(build)
                try:
                    call = lambda fn=fn, q=q, k=k, v=v: fn(q, k, v)  # noqa: E731
                    O = call()
                    O = O[0] if isinstance(O, tuple) else O
                    if ref is None:
                        ref = O.float()
                    row[name + "_max_abs_vs_cudnn"] = float((O.float() - ref).abs().max())
                    row[name + "_kernel_ms"] = graph_ms(call)
                    row[name + "_call_ms"] = call_ms(call)
                    row[name + "_kernel_tflops"] = flops / row[name + "_kernel_ms"] / 1e9
                except Exception as exc:
                    row[name + "_error"] = f"{type(exc).__name__}: {exc}"[:400]
                finally:
                    override(None)
            res["times"].append(row)
            base = row.get("sdpa_cudnn_kernel_ms", math.nan)
            print(f"N={N} d={d} causal={causal}: " + "  ".join(
                f"{n[:-10]}={row[n]:.3f}({base / row[n]:.2f}x)" for n in row if n.endswith("_kernel_ms")), flush=True)
            for n in row:
                if n.endswith("_error"):
                    print("   ", n, row[n], flush=True)
            del q, k, v, ref
            torch.cuda.empty_cache()
            save()
save()
