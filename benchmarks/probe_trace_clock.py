"""On a Hopper GPU: what the timeline hooks cost with each way of reading the clock (issue 22).

kernels/fv_trace.cuh reads the clock for a step (``Rec::now``) behind a predicate only the group's
writer thread holds, so ptxas puts the read on the vector datapath (``CS2R``, fixed latency) and not
on the uniform one (``S2UR``, variable latency, whose value the next instruction waits for). This
probe times, in one process, the committed hooks ("writer-only") against the same hooks with the
read every thread makes ("uniform", the form before; the kernel text is edited as NVRTC sees it,
``flashviz.gpu.common.source``), each against the normal build of the same kernel on the same
inputs (``gpu.trace_kernel``: kernel-only, CUDA events around ``repeat`` launches, ``rounds``
alternating rounds, medians; outputs compared bit for bit). Kernels: fa3 (d = 64 / 128, causal and
not) and wgmma (d = 64 non-causal, d = 128 causal and not), N = 4096, B = 1, H = 2048 / d.

    FLASHVIZ_COMMIT=<sha> python3 benchmarks/probe_trace_clock.py [--out DIR] [--rounds 7]

Writes probe-trace-clock-<device>-<date>.json (one row a kernel, shape and variant: normal and
traced ms, overhead = traced / normal − 1) with the environment, the kernel sources and the cubins
the run loaded. RuntimeError without a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import flashviz.gpu as gpu  # noqa: E402
from flashviz.gpu import common  # noqa: E402

ORIG = common.source
#: the committed read (writer-only, predicated) and its replacement: every thread reads the clock
NOW = re.compile(r"(unsigned long long now\(\) const \{\n)(.*?)(\n\s*return t;)", re.S)
UNIFORM = "        unsigned long long t = clock();"
SHAPES = [("fa3", 64, False), ("fa3", 64, True), ("fa3", 128, False), ("fa3", 128, True),
          ("wgmma", 64, False), ("wgmma", 128, False), ("wgmma", 128, True)]


def uniform_source(fname: str) -> str:
    """The kernel text NVRTC compiles, with every thread reading the clock (the hooks before)."""
    text, n = NOW.subn(lambda m: m.group(1) + UNIFORM + m.group(3), ORIG(fname))
    if "FV_TRACE" in text and n != 1:
        raise RuntimeError(f"{fname}: Rec::now() not found once in the kernel text ({n} matches)")
    return text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--repeat", type=int, default=10)
    a = ap.parse_args(argv)
    from flashviz.gpu.nvrtc import loaded_cubins
    from flashviz.gpu.tensorcore.run import device_slug
    from flashviz.records.files import source_sha256

    env = gpu.environment()
    rng = np.random.default_rng(0)
    rows = []
    for kernel, d, causal in SHAPES:
        H = 2048 // d
        Q, K, V = (rng.standard_normal((1, H, 4096, d)).astype(np.float16) for _ in range(3))
        for variant, src in (("writer-only", ORIG), ("uniform", uniform_source)):
            common.source = src
            t0 = time.perf_counter()
            row = {"kernel": kernel, "d": d, "causal": causal, "N": 4096, "B": 1, "H": H, "variant": variant}
            try:
                tl = gpu.trace_kernel(Q, K, V, kernel=kernel, causal=causal, repeat=a.repeat, rounds=a.rounds)
                row.update(kernel_ms=tl.kernel_ms, traced_ms=tl.traced_ms, overhead=tl.traced_ms / tl.kernel_ms - 1)
            except Exception as exc:                  # a failed build or run is a row, not the end
                row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
            finally:
                common.source = ORIG
            row["seconds"] = round(time.perf_counter() - t0, 1)
            rows.append(row)
            print(f"{kernel:5s} d={d:3d} causal={causal!s:5s} {variant:11s} "
                  + (f"normal {row['kernel_ms']:.4f} ms traced {row['traced_ms']:.4f} ms "
                     f"overhead {100 * row['overhead']:5.1f} %" if "overhead" in row else row["error"]), flush=True)
    files = ("flash_fwd_fa3.cu", "flash_fwd_mma.cu")
    out = {"env": env, "source_commit": os.environ.get("FLASHVIZ_COMMIT"), "rounds": a.rounds, "repeat": a.repeat,
           "kernel_sources": {f: source_sha256(f) for f in files}, "cubins": loaded_cubins(), "rows": rows}
    path = Path(a.out) / f"probe-trace-clock-{device_slug(env)}-{env.get('date', 'unknown')}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"-> {path}")
    return 0 if all("overhead" in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
