"""Committed GPU benchmark results (benchmarks/results/*.json, package ``flashviz.results``)."""

from __future__ import annotations

import json
import re

from ._files import package_dir

_DATE = re.compile(r"(\d{4}-\d{2}-\d{2})")


def latest_results() -> dict | None:
    """The newest GPU benchmark JSON (gpu-*.json) under ``flashviz.results`` (benchmarks/results/), or None.

    Newest = latest YYYY-MM-DD in the file name (ties broken by name). Returns the parsed
    dict with an added key "source_file" (the file name); None when there is no JSON file
    or the folder cannot be found. Raises json.JSONDecodeError if the newest file is corrupt.
    """
    try:
        folder = package_dir("flashviz.results")
    except FileNotFoundError:
        return None
    files = [f for f in folder.iterdir() if f.name.startswith("gpu-") and f.name.endswith(".json") and f.is_file()]
    if not files:
        return None

    def key(f):
        m = _DATE.search(f.name)
        return (m.group(1) if m else "", f.name)

    newest = max(files, key=key)
    data = json.loads(newest.read_text(encoding="utf-8"))
    if isinstance(data, dict):
        data.setdefault("source_file", newest.name)
    return data


def _fmt_bytes(n: float) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:.3g} {unit}"
    return f"{int(n)} B"


def _cuda_version(v) -> str:
    """CUDA's integer version (13020) as text ('13.2')."""
    return f"{v // 1000}.{(v % 1000) // 10}" if isinstance(v, int) else str(v)


def recorded_label(res: dict) -> str:
    """'NVIDIA H200, 2026-11-29 (CuPy 14.2.0, CUDA 13.2, torch 2.11.0)' from a results dict."""
    env = res.get("env", {})
    return (f"{env.get('device', 'unknown GPU')}, {env.get('date', 'unknown date')} "
            f"(CuPy {env.get('cupy', '?')}, CUDA {_cuda_version(env.get('cuda_runtime', '?'))}"
            f"{', torch ' + str(env['torch']) if env.get('torch') else ''}; file {res.get('source_file', '?')})")


def recorded_rows(res: dict | None, *, Br=None, Bc=None, d=None) -> list[dict]:
    """Timing rows of a results dict (all, or those matching Br/Bc/d when given)."""
    if not res:
        return []
    rows = [r for r in list(res.get("timing", [])) + list(res.get("sweep", [])) if "kernel_ms" in r]
    pick = [r for r in rows if (Br is None or r.get("Br") == Br) and (Bc is None or r.get("Bc") == Bc)
            and (d is None or r.get("d") == d)]
    return pick


def recorded_summary(res: dict | None = None, *, Br=None, Bc=None) -> str:
    """A plain-text table of the recorded teaching-kernel vs naive CuPy timings, labelled with
    device and date; only the rows with these Br, Bc when given."""
    res = latest_results() if res is None else res
    if not res:
        return "No recorded GPU results are available (benchmarks/results/ is empty)."
    lines = [f"Recorded on {recorded_label(res)}:",
             f"{'N':>6} {'d':>4} {'B·H':>6} {'Br×Bc':>8} {'causal':>6} {'kernel ms':>10} {'TFLOP/s':>8} "
             f"{'naive ms':>9} {'naive/kernel':>12}"]
    for r in res.get("timing", []):
        if "kernel_ms" not in r or (Br is not None and r.get("Br") != Br) or (Bc is not None and r.get("Bc") != Bc):
            continue
        naive = f"{r['naive_ms']:9.2f} {r['ratio_naive_over_kernel']:12.2f}x" if "naive_ms" in r else \
            f"{'—':>9} {'—':>12}"
        lines.append(f"{r['N']:>6} {r['d']:>4} {r['B'] * r['H']:>6} {str(r['Br']) + '×' + str(r['Bc']):>8} "
                     f"{'yes' if r.get('causal') else 'no':>6} {r['kernel_ms']:10.3f} {r['tflops']:8.1f} {naive}")
    pm = res.get("peak_memory", {})
    if "kernel_peak_bytes" in pm and "naive_peak_bytes" in pm:
        lines.append(f"Peak extra GPU memory at N = {pm['N']:,}, one head: kernel {_fmt_bytes(pm['kernel_peak_bytes'])}, "
                     f"naive {_fmt_bytes(pm['naive_peak_bytes'])} "
                     f"({100 * pm['kernel_peak_bytes'] / pm['naive_peak_bytes']:.2f}% of naive)")
    return "\n".join(lines)
