"""CPU figures of the explainer (issue: "figures to reach" on the 2-core box).

Prints, from one run: the time of flash_forward(..., record=True) for N = 1024, d = 64,
Br = Bc = 64 (target < 1 s), and the median time of TileExplorer.show_frame over every
frame at N = 512, d = 64, 64-tiles, rendering included (Agg canvas; target <= 50 ms).
Writes benchmarks/results/cpu/cpu-<host>-<date>.json. Usage: python benchmarks/bench_cpu.py
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402

import flashviz as fv  # noqa: E402


def main():
    Q, K, V = fv.data.random_qkv(1024, 64)
    fwd = []
    for _ in range(5):
        t = time.perf_counter()
        r = fv.flash_forward(Q, K, V, Br=64, Bc=64, record=True)
        fwd.append(time.perf_counter() - t)
    w = fv.TileExplorer(N=512, d=64, Br=64, Bc=64, source="random", key="bench")
    frames = []
    for k in range(w.n_frames):
        t = time.perf_counter()
        w.show_frame(k)
        frames.append(time.perf_counter() - t)
    n_frames = w.n_frames
    w.close()
    res = {
        "date": datetime.date.today().isoformat(), "host": platform.node(), "cpus": os.cpu_count(),
        "python": platform.python_version(), "numpy": np.__version__, "matplotlib": matplotlib.__version__,
        "flash_forward_record_N1024_d64_B64_s": {"median": statistics.median(fwd), "runs": fwd,
                                                  "events": len(r.trace)},
        "show_frame_N512_d64_B64_ms": {"median": 1e3 * statistics.median(frames),
                                        "p90": 1e3 * float(np.percentile(frames, 90)), "frames": n_frames},
    }
    out = Path(__file__).parent / "results" / "cpu" / f"cpu-{res['date']}.json"
    out.write_text(json.dumps(res, indent=1) + "\n")
    print(f"flash_forward(record=True) N=1024 d=64 64-tiles: {res['flash_forward_record_N1024_d64_B64_s']['median']:.3f} s "
          f"(target < 1 s; ratio to target {res['flash_forward_record_N1024_d64_B64_s']['median'] / 1.0:.2f})")
    print(f"show_frame N=512 d=64 64-tiles: median {res['show_frame_N512_d64_B64_ms']['median']:.1f} ms, "
          f"p90 {res['show_frame_N512_d64_B64_ms']['p90']:.1f} ms over {n_frames} frames (target <= 50 ms; "
          f"ratio {res['show_frame_N512_d64_B64_ms']['median'] / 50:.2f})")
    print("wrote", out)


if __name__ == "__main__":
    main()
