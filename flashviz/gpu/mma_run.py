"""One benchmark run of the tensor-core kernels, written to one JSON (and PNG figures).

``run_benchmarks`` is what ``flashviz bench`` and ``benchmarks/bench_mma.py`` call on a GPU:
the device ceilings, the correctness grid, the benchmark against the teaching kernel, naive
CuPy and torch SDPA (flash / cuDNN / memory-efficient), and the block-size sweep — all in one
process, one device, one date. The JSON is written after every part, so a run cut short
keeps what it measured. ``plot_results`` draws the committed (or any) results to PNG files
and needs no GPU.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

BENCH_N = (512, 1024, 2048, 4096, 8192, 16384)


def _device_slug(env: dict) -> str:
    return env["device"].replace("NVIDIA ", "").replace(" ", "-").lower()


def run_benchmarks(out_dir, *, quick: bool = False, parts=("ceil", "check", "bench", "sweep"),
                   variants=("wgmma", "mma.sync"), Ns=BENCH_N, ab_source: str | None = None, log=print) -> Path:
    """Measure on this GPU and write ``mma-<device>-<date>.json`` into out_dir; returns its path.

    parts: any of "ceil" (copy GB/s, matmul TFLOP/s), "check" (correctness grid, fewer shapes
    with quick), "bench" (every N in Ns × d ∈ {64, 128} × causal), "sweep" (every (Br, Bc) at
    N = 4096); variants: kernels to include ("wgmma" needs a Hopper GPU); ab_source: kernel
    source text to sweep as "wgmma-ab" beside the file's kernel (A/B of kernel versions).
    log: called with one line per finished item. Raises RuntimeError without CuPy / a GPU.
    """
    from . import mma_bench as mb
    from .bench import environment
    from .mma import device_variant

    env = environment()
    if "wgmma" in variants and device_variant() != "wgmma":
        variants = tuple(v for v in variants if v != "wgmma")
        log("not a Hopper GPU: the wgmma kernel is skipped")
    data = {"kind": "flashviz tensor-core kernels", "env": env, "parts": list(parts), "variants": list(variants)}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"mma-{_device_slug(env)}-{env['date']}.json"
    t0 = time.time()

    def save():
        data["wall_s"] = time.time() - t0
        path.write_text(json.dumps(data, indent=1, default=float))

    if "ceil" in parts:
        data["ceilings"] = mb.ceilings()
        log(f"ceilings: {data['ceilings']}")
        save()
    if "check" in parts:
        data["check"] = []
        for v in variants:
            recs = mb.check_grid(v, quick=quick)
            data["check"] += recs
            bad = [r for r in recs if not r["pass"]]
            log(f"check {v}: {len(recs) - len(bad)}/{len(recs)} pass, worst rel err "
                f"{max((r.get('rel_err', 0) for r in recs if 'rel_err' in r), default=float('nan')):.2e}")
            for r in bad[:12]:
                log(f"  FAIL {r}")
        save()
    if "bench" in parts:
        data["bench"] = []
        for d in (64, 128):
            for causal in (False, True):
                for N in Ns:
                    r = mb.bench_shape(N, d, causal, variants=variants)
                    data["bench"].append(r)
                    log(f"N={N:6d} d={d:3d} causal={causal!s:5}: " + " ".join(
                        f"{k[:-7]}={r[k]:.1f}" for k in r if k.endswith("_tflops")) + " TFLOP/s " + " ".join(
                        f"{k}={r[k]:.2f}" for k in r if k.endswith("ratio_to_sdpa_flash")) + " " + " ".join(
                        f"{k}={r[k]}" for k in r if k.endswith("_error")))
                    save()
    if "sweep" in parts:
        data["sweep"] = []
        for v in variants:
            for d, causal in ((64, False), (64, True), (128, False), (128, True)):
                try:
                    data["sweep"] += mb.block_sweep(4096, d, causal=causal, variant=v)
                except Exception as exc:
                    data["sweep"].append({"variant": v, "d": d, "causal": causal,
                                          "error": f"{type(exc).__name__}: {exc}"[:300]})
        if ab_source:
            from . import mma
            mma.SOURCE_OVERRIDE["wgmma"] = ab_source
            try:
                for d, causal in ((64, False), (64, True), (128, False), (128, True)):
                    for r in mb.block_sweep(4096, d, causal=causal, variant="wgmma"):
                        r["variant"] = "wgmma-ab"
                        data["sweep"].append(r)
            finally:
                mma.SOURCE_OVERRIDE.clear()
        for r in data["sweep"]:
            log("sweep " + " ".join(f"{k}={r[k]}" for k in ("variant", "d", "causal", "Br", "Bc", "regs", "error")
                                    if k in r) + (f" {r['tflops']:.1f} TFLOP/s" if "tflops" in r else ""))
        save()
    save()
    return path


def plot_results(out_dir, mma_res: dict | None = None, dram_res: dict | None = None) -> list[Path]:
    """Draw the benchmark, the block sweeps (d = 64 and 128) and the DRAM comparison of the
    given (default: latest committed) results to PNG files in out_dir, named after the JSON
    they come from. Returns the paths written. Needs no GPU."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..views import bench_plot as bp
    from .results import latest_results

    mma_res = mma_res if mma_res is not None else latest_results("mma")
    dram_res = dram_res if dram_res is not None else latest_results("dram")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []

    def save(fig, name):
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
        written.append(out / name)

    if mma_res:
        stem = Path(mma_res.get("source_file", "mma-results.json")).stem
        if mma_res.get("bench"):
            save(bp.plot_mma_benchmark(mma_res), f"{stem}.png")
        for d in (64, 128):
            if any(r.get("d") == d and "ms" in r for r in mma_res.get("sweep", [])):
                save(bp.plot_block_sweep(mma_res, d=d), f"{stem}-sweep-d{d}.png")
    if dram_res and dram_res.get("rows"):
        save(bp.plot_dram(dram_res), f"{Path(dram_res.get('source_file', 'dram-results.json')).stem}.png")
    return written
