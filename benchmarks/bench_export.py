"""Time the GIF export of the N = 512 causal TileExplorer, every step kept (issue 10, item 5).

    .venv/bin/python benchmarks/bench_export.py [--frames N] [--inline] [--repeat R]

Prints, per run: wall seconds, frames/s, and CPU seconds (this process and its finished worker
processes, user + system), with the 1-minute load average before and after. On a shared box the
wall time follows the load; the CPU seconds barely do (CPU s / cores is the wall time the export
would take on an idle box). --inline renders in this process (no forked workers).
"""

import argparse
import os
import tempfile
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import flashviz as fv  # noqa: E402
from flashviz.views.export import save_animation  # noqa: E402


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and of its children that have been waited for."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def time_export(view, n: int, inline: bool):
    """Export frames 0..n-1 of ``view`` to a temporary GIF; returns (wall s, CPU s)."""
    with tempfile.TemporaryDirectory() as d:
        c, t = cpu_seconds(), time.perf_counter()
        save_animation(view, Path(d) / "run.gif", frames=range(n), parallel=False if inline else None)
        return time.perf_counter() - t, cpu_seconds() - c


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--frames", type=int, default=None, help="only the first N steps (default: all)")
    ap.add_argument("--inline", action="store_true", help="no worker processes")
    ap.add_argument("--repeat", type=int, default=1, help="runs (default 1)")
    a = ap.parse_args()
    w = fv.TileExplorer(N=512, causal=True, canvas="png", key="bench-export")
    n = w.n_frames if a.frames is None else min(a.frames, w.n_frames)
    try:
        for _ in range(a.repeat):
            load0 = os.getloadavg()[0]
            dt, cpu = time_export(w._view, n, a.inline)
            print(f"N = 512 causal explorer: {n} frames in {dt:.1f} s ({n / dt:.2f} frames/s), "
                  f"CPU {cpu:.1f} s, load average {load0:.2f} -> {os.getloadavg()[0]:.2f}"
                  f"{' (inline)' if a.inline else ''}", flush=True)
    finally:
        w.close()


if __name__ == "__main__":
    main()
