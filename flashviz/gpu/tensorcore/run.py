"""One benchmark run of the tensor-core kernels, written to one JSON.

``run_benchmarks`` is what ``flashviz bench`` and ``benchmarks/bench_mma.py`` call on a GPU:
the device ceilings, the correctness grid, the benchmark against the teaching kernel, naive
CuPy and torch SDPA (flash / cuDNN / memory-efficient), and the block-size sweep — all in one
process, one device, one date. The JSON is written after every part, so a run cut short
keeps what it measured. A run with fewer parts, fewer sizes or --quick is named
partial-mma-*.json, so it never replaces the recorded run that the explainer shows.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from ...mma_limits import BENCH_N, KERNEL_FILES

ALL_PARTS = ("ceil", "check", "bench", "sweep")


def device_slug(env: dict) -> str:
    """'h200' for 'NVIDIA H200': the device part of result file names."""
    return env["device"].replace("NVIDIA ", "").replace(" ", "-").lower()


def kernel_source_hashes(variants) -> dict:
    """sha256 (first 16 hex digits) of each kernel file the run measures: which code was timed
    (``common.source_sha256``), keyed by variant."""
    from ..common import source_sha256
    return {v: source_sha256(KERNEL_FILES[v][0]) for v in variants}


def run_benchmarks(out_dir, *, quick: bool = False, parts=("ceil", "check", "bench", "sweep"),
                   variants=("wgmma", "mma.sync", "fa3"), Ns=BENCH_N, ab_source: str | None = None,
                   log=print) -> Path:
    """Measure on this GPU and write ``mma-<device>-<date>.json`` (``partial-mma-…`` unless
    every part ran on every size without quick) into out_dir; returns its path.

    parts: any of "ceil" (copy GB/s, matmul TFLOP/s), "check" (correctness grid, fewer shapes
    with quick), "bench" (every N in Ns × d ∈ {64, 128} × causal), "sweep" (every (Br, Bc) at
    N = 4096); variants: kernels to include ("wgmma" and "fa3" need a Hopper GPU); ab_source: kernel
    source text to sweep as "wgmma-ab" beside the file's kernel (A/B of kernel versions).
    log: called with one line per finished item. The record names the code it timed:
    ``kernel_sources`` (variant -> sha256 of the compiled text) and, in ``env``, what
    ``provenance_env.code_hashes`` gives: ``cubins`` (every cubin the process loaded,
    ``nvrtc.loaded_cubins``) and ``kernel_sources`` by file for every kernel file one came from
    (the teaching kernel's included). Raises RuntimeError without CuPy / a GPU.
    """
    from ..common import environment
    from ..provenance_env import code_hashes
    from . import bench as mb
    from .kernel import device_variant

    env = environment()
    if device_variant() != "wgmma" and {"wgmma", "fa3"} & set(variants):
        variants = tuple(v for v in variants if v not in ("wgmma", "fa3"))
        log("not a Hopper GPU: the wgmma and fa3 kernels are skipped")
    data = {"kind": "flashviz tensor-core kernels", "env": env, "parts": list(parts), "variants": list(variants),
            "methods": dict(mb.METHODS), "kernel_sources": kernel_source_hashes(variants)}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    # Only a full run may become "the recorded run" (latest_results("mma")); others are partial.
    full = set(parts) == set(ALL_PARTS) and not quick and tuple(Ns) == BENCH_N
    path = out / f"{'' if full else 'partial-'}mma-{device_slug(env)}-{env['date']}.json"
    t0 = time.time()

    def save():
        data["wall_s"] = time.time() - t0
        data["env"].update(code_hashes(()))          # every binary timed so far and the kernel files they came from
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
    # Two passes: every public-call and host time (bench and sweep) first, then every kernel-only
    # time (torch.profiler), because a profiler session leaves the process's later host times
    # high (timing.measure). Rows are merged on what identifies them; an error of the kernel
    # pass is kept as "kernel_error" beside the timed figures, never over them.
    shapes = [(N, d, causal) for d in (64, 128) for causal in (False, True) for N in Ns] if "bench" in parts else []
    jobs = [(v, d, causal, None) for v in variants for d, causal in ((64, False), (64, True), (128, False), (128, True))]
    if ab_source:
        jobs += [("wgmma", d, causal, ab_source) for d, causal in ((64, False), (64, True), (128, False), (128, True))]
    jobs = jobs if "sweep" in parts else []
    if "bench" in parts:
        data["bench"] = []
    done = {}
    for phase in ("timed", "kernel"):
        for i, (N, d, causal) in enumerate(shapes):
            r = mb.bench_shape(N, d, causal, variants=variants, phase=phase)
            if phase == "timed":
                data["bench"].append(r)
            else:
                mb.merge_kernel_pass(data["bench"][i], r)
                r = data["bench"][i]
                log(f"N={N:6d} d={d:3d} causal={causal!s:5}: " + " ".join(
                    f"{k[:-8]}={r[k]:.3f}/{r.get(k[:-8] + '_kernel_ms', float('nan')):.3f}/"
                    f"{r.get(k[:-8] + '_host_us', float('nan')):.0f}"
                    for k in r if k.endswith("_call_ms")) + " (call ms/kernel ms/host us) " + " ".join(
                    f"{k}={r[k]}" for k in r if k.endswith("_error")))
            save()
        for job in jobs:
            rows = _sweep(mb, job, phase)
            if phase == "timed":
                done[job] = rows
            else:
                done[job] = mb.merge_sweep_passes(done[job], rows)
        if jobs:
            data["sweep"] = [r for job in jobs for r in done[job]]
            save()
    for r in data.get("sweep", []):
        log("sweep " + " ".join(f"{k}={r[k]}" for k in ("variant", "d", "causal", "Br", "Bc", "regs", "error",
                                                         "kernel_error") if k in r)
            + (f" kernel {r['kernel_ms']:.3f} ms, call {r['call_ms']:.3f} ms, {r['kernel_tflops']:.1f} TFLOP/s "
               f"kernel-only" if "kernel_ms" in r and "call_ms" in r else ""))
    save()
    return path


def _sweep(mb, job, phase: str) -> list[dict]:
    """One block sweep (variant, d, causal, A/B source or None) in one phase; an error is one row."""
    v, d, causal, src = job
    from . import kernel
    if src is not None:
        kernel.SOURCE_OVERRIDE["wgmma"] = src
    try:
        rows = mb.block_sweep(4096, d, causal=causal, variant=v, phase=phase)
    except Exception as exc:
        rows = [{"variant": v, "d": d, "causal": causal, "error": f"{type(exc).__name__}: {exc}"[:300]}]
    finally:
        if src is not None:
            kernel.SOURCE_OVERRIDE.clear()
    if src is not None:
        for r in rows:
            r["variant"] = "wgmma-ab"
    return rows

