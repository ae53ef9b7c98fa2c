"""Time the GIF export of the N = 512 causal TileExplorer, every step kept (issue 10, item 5).

    .venv/bin/python benchmarks/bench_export.py [--frames N] [--inline]

Prints seconds and frames/s. --inline renders in this process (no forked workers).
"""

import argparse
import tempfile
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import flashviz as fv  # noqa: E402
from flashviz.views.export import save_animation  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--frames", type=int, default=None, help="only the first N steps (default: all)")
    ap.add_argument("--inline", action="store_true", help="no worker processes")
    a = ap.parse_args()
    w = fv.TileExplorer(N=512, causal=True, canvas="png", key="bench-export")
    n = w.n_frames if a.frames is None else min(a.frames, w.n_frames)
    with tempfile.TemporaryDirectory() as d:
        t = time.perf_counter()
        save_animation(w._view, Path(d) / "run.gif", frames=range(n), parallel=False if a.inline else None)
        dt = time.perf_counter() - t
    w.close()
    print(f"N = 512 causal explorer: {n} frames in {dt:.1f} s ({n / dt:.2f} frames/s)")


if __name__ == "__main__":
    main()
