"""``flashviz report`` (``make docs``): the measured pages, generated from the committed records.

Writes ``docs/results.md`` (every measured table: the method of each column, the device, the date,
the commit and kernel-source hashes where the record has them, a link to each record) and the
README's short table of GPU results, between the marker lines ``RESULTS_BEGIN`` and
``RESULTS_END``. Numbers in the docs come from here and nowhere else: a test
(``tests/core/test_docs.py::test_docs_match_records``) checks that the committed pages equal what
this module makes from the committed records now. Never edit the generated parts by hand; change
a record (by a new run, docs/measuring.md) and run ``make docs``.

The records are read through their readers (``flashviz.records.results``, ``flashviz.records.fa3_records``,
``flashviz.records.timeline``); what those do not read (the timeline summary ``timelines-*.json``, the
GPU test runs ``tests-*.json``, the CPU timings ``cpu/cpu-*.json``) is read here, as it is written.

    python -m flashviz.report            # write the pages
    python -m flashviz.report --check    # exit 1 and name the pages that differ
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

from .records import fa3_records as fr
from .records.files import package_dir
from .records.results import (
    METHOD_NAMES,
    SUMMARY_FROM_N,
    check_summary,
    cuda_version,
    latest_results,
    latest_results_each_device,
    mma_sweep,
    mma_table,
    ratio_span,
    teaching_figures,
)
from .records.timeline import recorded_timelines

ROOT = Path(__file__).resolve().parents[1]
RESULTS_PAGE = Path("docs") / "results.md"
README = Path("README.md")
RECORDS = "benchmarks/results"          #: where the records are, relative to the repository root
RESULTS_BEGIN = "<!-- results:begin: made by `make docs` from benchmarks/results/; do not edit by hand -->"
RESULTS_END = "<!-- results:end -->"
#: from which sequence length each kernel's summary counts (records.results.SUMMARY_FROM_N: the
#: chapters and the app use the same)
FROM_N = SUMMARY_FROM_N
KERNEL_LABEL = {"wgmma": "FA2 `wgmma` kernel (chapter 7)", "fa3": "FA3 `fa3` kernel (chapter 8)"}
IMPL_LABEL = {"wgmma": "wgmma", "fa3": "fa3", "sdpa_flash": "SDPA-flash", "sdpa_cudnn": "SDPA-cuDNN"}
AGAINST = {"sdpa_flash": "FlashAttention-2 (SDPA-flash)", "sdpa_cudnn": "SDPA-cuDNN"}
#: the two methods, as each ratio column names them: one method on both sides of every ratio
RATIO_METHOD = {"call": "public call vs public call", "kernel": "kernel-only vs kernel-only"}
#: the probes' method (benchmarks/probe_fa3.py; the probe records carry no method string)
PROBE_METHOD = ("kernel-only: CUDA-graph replay of 10 public calls, median of 7 replays; public call: "
                "CUDA events around 30 back-to-back calls, median; every implementation the same way, in one process")


# --- small formatting ------------------------------------------------------------------------

def span(lo_hi, digits: int = 2, suffix: str = "x") -> str:
    """(lo, hi) → '1.10–1.31x'; None → '—'."""
    if lo_hi is None:
        return "—"
    lo, hi = lo_hi
    return f"{lo:.{digits}f}–{hi:.{digits}f}{suffix}"


def _x(v, digits: int = 2) -> str:
    return "—" if v is None else f"{v:.{digits}f}x"


def _kernels(res: dict, impl: str) -> str:
    """The split kernels that ``impl``'s rows of a decode record timed, as the record names them,
    e.g. "`flash_decode_mma` (v2, tensor cores)"; "not timed" when no row names one."""
    from .records.decode_records import KERNELS, kernel_names
    return ", ".join(f"`{n}` ({KERNELS[n]})" if n in KERNELS else f"`{n}`"
                     for n in kernel_names(res, impl)) or "not timed"


def _pct(v) -> str:
    return "—" if v is None else f"{100 * v:.0f} %"


def _f(v, digits: int = 1) -> str:
    return "—" if v is None else f"{v:,.{digits}f}"


def _yes(flag) -> str:
    return "yes" if flag else "no"


def _link(name: str, prefix: str) -> str:
    return f"[`{name}`]({prefix}{RECORDS}/{name})"


def _env_line(env: dict, extra: str = "") -> str:
    """'NVIDIA H200 (132 SMs), 2026-12-01 18:34 UTC, commit af10ba7; CUDA 13.2 runtime, …'"""
    when = env.get("time_utc", env.get("date", "?"))
    when = when[:16].replace("T", " ") + " UTC" if "T" in when else when
    parts = [f"{env.get('device', 'unknown device')}" + (f" ({env['sm_count']} SMs)" if env.get("sm_count") else ""),
             when]
    if env.get("commit"):
        parts.append(f"commit `{str(env['commit'])[:7]}`")
    soft = [f"CUDA {cuda_version(env['cuda_runtime'])} runtime" if "cuda_runtime" in env else "",
            f"CuPy {env['cupy']}" if env.get("cupy") else "", f"torch {env['torch']}" if env.get("torch") else "",
            f"{env['ncu']}" if env.get("ncu") else ""]
    soft = ", ".join(s for s in soft if s)
    return ", ".join(parts) + (f"; {soft}" if soft else "") + extra


def _newest(prefix: str, folder: str | None = None, skip: str | None = None) -> dict | None:
    """The newest record ``<prefix>*.json`` (latest YYYY-MM-DD in the name, then the name) in the
    results folder (or its sub-folder), without the names that match the regular expression
    ``skip``, with "source_file" added (relative to the folder); None when there is none. For
    the records no reader of flashviz reads."""
    try:
        base = package_dir("flashviz.results")
    except FileNotFoundError:
        return None
    base = base / folder if folder else base
    if not base.is_dir():
        return None
    files = [f for f in base.iterdir() if f.name.startswith(prefix) and f.name.endswith(".json")
             and not (skip and re.match(skip, f.name))]
    if not files:
        return None

    def key(f):
        m = re.search(r"\d{4}-\d{2}-\d{2}", f.name)
        return (m.group(0) if m else "", f.name)

    f = max(files, key=key)
    data = json.loads(f.read_text(encoding="utf-8"))
    data["source_file"] = f"{folder}/{f.name}" if folder else f.name
    return data


# --- the headline: what the README's table shows -----------------------------------------------

def headline(res: dict | None = None) -> dict:
    """The figures of the README's table, as data, from the newest "mma" record (or ``res``):
    {"record", "env", "shapes", "dtype", "tokens", "kernels": {kernel: {"from_N", "n",
    ("call" | "kernel", against): (lo, hi)}}, "host_us": {impl: median}, "host_below": count of
    shapes where wgmma's host time ≤ SDPA-flash's, "peak_tflops": {kernel: (tflops, method, d, N)}}.
    Ratios are their time ÷ ours under one method (above 1: ours is faster), over the rows with
    N ≥ ``FROM_N[kernel]``. None when there is no record."""
    res = latest_results("mma") if res is None else res
    if not res:
        return None
    rows = fr.fa3_bench_table(res) or mma_table(res)
    out = {"record": res["source_file"], "env": res.get("env", {}), "shapes": len(rows),
           "dtype": rows[0].get("dtype", "float16") if rows else "", "kernels": {},
           "tokens": rows[0]["B"] * rows[0]["N"] if rows else 0, "hd": rows[0]["H"] * rows[0]["d"] if rows else 0}
    for kernel, lo in FROM_N.items():
        pick = [r for r in rows if r["N"] >= lo and f"{kernel}_call_ms" in r]
        if not pick:
            continue
        k = {"from_N": lo, "n": len(pick)}
        for m in ("call", "kernel"):
            for other in AGAINST:
                k[(m, other)] = ratio_span(pick, f"{kernel}_{m}_vs_{other}")
        if kernel == "fa3":
            for m in ("call", "kernel"):
                k[(m, "wgmma")] = ratio_span([{"v": r[f"wgmma_{m}_ms"] / r[f"fa3_{m}_ms"]} for r in pick], "v")
        out["kernels"][kernel] = k
    out["host_us"] = {impl: statistics.median(r[f"{impl}_host_us"] for r in rows)
                      for impl in ("wgmma", "fa3", "sdpa_flash", "sdpa_cudnn") if rows and f"{impl}_host_us" in rows[0]}
    out["host_below"] = sum(r["wgmma_host_us"] <= r["sdpa_flash_host_us"] for r in rows
                            if "wgmma_host_us" in r and "sdpa_flash_host_us" in r)
    peak = {}
    for kernel in FROM_N:
        for m in ("call", "kernel"):
            have = [r for r in rows if f"{kernel}_{m}_tflops" in r]
            if have:
                best = max(have, key=lambda r: r[f"{kernel}_{m}_tflops"])
                peak[(kernel, m)] = (best[f"{kernel}_{m}_tflops"], best["d"], best["N"], bool(best["causal"]))
    out["peak_tflops"] = peak
    return out


def newest_record(kind: str) -> dict | None:
    """The newest committed record of ``kind`` on any device (benchmarks/results/ or a device's
    folder in it; ``latest_results_each_device``), with "source_file"; None when there is none."""
    recs = latest_results_each_device(kind)
    return recs[0] if recs else None


#: the README's backward row: ours (bwd_mma, flash_backward_mma's default call) against SDPA's backwards
BWD_LABEL = "FA2 backward, tensor cores (chapter 6)"
BWD_AGAINST = {"sdpa_flash": "sdpa_flash_bwd", "sdpa_cudnn": "sdpa_cudnn_bwd"}


def bwd_headline(res: dict | None = None) -> dict | None:
    """The README's backward figures from the newest backward record on any device (or ``res``):
    {"record", "res" (the record itself), "env", "n", "from_N", (m, against): (lo, hi)} for m in call / kernel and against in
    sdpa_flash / sdpa_cudnn: SDPA's backward time ÷ ours (bwd_mma) under one method, over every
    bench row with both; None when there is no record."""
    from .records import bwd_records as br
    res = newest_record("bwd") if res is None else res
    if not res:
        return None
    rows = br.time_rows(res)
    out = {"record": res["source_file"], "res": res, "env": res.get("env", {}), "n": len(rows),
           "from_N": min((r["N"] for r in rows), default=0)}
    for m in ("call", "kernel"):
        for other, impl in BWD_AGAINST.items():
            out[(m, other)] = ratio_span(rows, f"bwd_mma_{m}_vs_{impl}")
    return out


def readme_table(res: dict | None = None, bwd: dict | None = None) -> str:
    """The README's short table of GPU results (markdown, without the marker lines): the forward
    kernels from the newest "mma" record on any device (or ``res``), the backward from the newest
    "bwd" record (or ``bwd``)."""
    res = newest_record("mma") if res is None else res
    h = headline(res)
    if h is None:
        return "No GPU benchmark record is committed (benchmarks/results/mma-*.json)."
    env = h["env"]
    lines = ["| our kernel | shapes | ratio by | vs FlashAttention-2 (SDPA-flash) | vs SDPA-cuDNN |",
             "| --- | --- | --- | --- | --- |"]
    for kernel, k in h["kernels"].items():
        for m in ("call", "kernel"):
            lines.append(f"| {KERNEL_LABEL[kernel]} | N ≥ {k['from_N']:,} ({k['n']}) | {RATIO_METHOD[m]} | "
                         f"{span(k[(m, 'sdpa_flash')])} | {span(k[(m, 'sdpa_cudnn')])} |")
    b = bwd_headline(bwd)
    if b:
        for m in ("call", "kernel"):
            lines.append(f"| {BWD_LABEL} | N ≥ {b['from_N']:,} ({b['n']}) | {RATIO_METHOD[m]} | "
                         f"{span(b[(m, 'sdpa_flash')])} | {span(b[(m, 'sdpa_cudnn')])} |")
    host = h["host_us"]
    hosts = ", ".join(f"{IMPL_LABEL.get(i, i)} {_f(v)} µs" for i, v in host.items())
    lines += ["",
              f"Speed = their time ÷ ours, one method on both sides (above 1: ours is faster); {h['dtype']}, "
              f"d = 64 and 128, causal and not, B·N = {h['tokens']:,} tokens. Methods: "
              f"{METHOD_NAMES['call']}; {METHOD_NAMES['kernel']}. Host time per call "
              f"(median over the {h['shapes']} shapes): {hosts}. "
              f"{env.get('device', '?')}, {env.get('date', '?')}, one run: "
              f"{_link(h['record'], '')}"
              + (f"; the backward: ours is `flash_backward_mma`'s default call, SDPA's backward timed the same way, "
                 f"{b['env'].get('device', '?')}, {b['env'].get('date', '?')}, one run: {_link(b['record'], '')}"
                 if b else "")
              + "; every shape, the other records and their methods: [docs/results.md](docs/results.md)."]
    from .records.provenance import check_record
    audited = [(h["record"], res)] + ([(b["record"], b["res"])] if b else [])
    changed = sorted({f for name, rec in audited for f in check_record(name, rec).changed})
    if changed:
        lines += ["", "These numbers timed an earlier source of " + ", ".join(f"`{f}`" for f in changed)
                  + " (the file or a header it includes has changed since); docs/results.md lists which records "
                    "timed today's kernels."]
    return "\n".join(lines)


# --- docs/results.md ---------------------------------------------------------------------------

def _methods(res: dict) -> list[str]:
    names = {"call_ms": "public call", "kernel_ms": "kernel-only", "host_us": "host time per call"}
    out = []
    for key, text in (res.get("methods") or {}).items():
        out.append(f"- `*_{key}` ({names.get(key, key)}): {text}.")
    return out


def _mma_section(res: dict | None) -> list[str]:
    if not res:
        return ["## Tensor-core forward", "", "No record (benchmarks/results/mma-*.json)."]
    h = headline(res)
    env = res.get("env", {})
    ceil = res.get("ceilings", {})
    out = ["## Tensor-core forward against PyTorch SDPA", "",
           f"Record: {_link(res['source_file'], '../')}, {_env_line(env)}; one process, "
           f"{res.get('wall_s', 0):.0f} s ({', '.join(res.get('parts', []))}).", ""]
    src = res.get("kernel_sources") or {}
    if src:
        out.append("Kernel sources (hash of each kernel's source as the run compiled it, `kernel_sources`): "
                   + ", ".join(f"{k} `{v}`" for k, v in src.items()) + "; the record holds no cubin hashes.")
        out.append("")
    out += ["Methods, in the record's words (`methods`):", "", *_methods(res), ""]
    if ceil:
        out += [f"Ceilings measured in the same run: copy {ceil.get('copy_GBps', 0) / 1e3:.2f} TB/s (read + write), "
                f"fp16 matmul {ceil.get('matmul_fp16_TFLOPs', 0):.0f} TFLOP/s, bf16 matmul "
                f"{ceil.get('matmul_bf16_TFLOPs', 0):.0f} TFLOP/s.", ""]
    out += ["### Summary", "",
            f"{h['dtype']}, B·N = {h['tokens']:,} tokens, H·d = {h['hd']:,}; speed = their time ÷ ours, "
            "the same method on both sides (above 1: ours is faster).", "",
            "| our kernel | shapes | ratio by | vs SDPA-flash | vs SDPA-cuDNN | vs the wgmma kernel |",
            "| --- | --- | --- | --- | --- | --- |"]
    for kernel, k in h["kernels"].items():
        for m in ("call", "kernel"):
            out.append(f"| {KERNEL_LABEL[kernel]} | N ≥ {k['from_N']:,} ({k['n']}) | {RATIO_METHOD[m]} | "
                       f"{span(k[(m, 'sdpa_flash')])} | {span(k[(m, 'sdpa_cudnn')])} | {span(k.get((m, 'wgmma')))} |")
    all_rows = mma_table(res)
    out += ["", "Over every N of the record (from "
            f"{min(r['N'] for r in all_rows):,}): wgmma against SDPA-flash {span(ratio_span(all_rows, 'wgmma_call_vs_sdpa_flash'))} "
            f"by public call, {span(ratio_span(all_rows, 'wgmma_kernel_vs_sdpa_flash'))} kernel-only; against SDPA-cuDNN "
            f"{span(ratio_span(all_rows, 'wgmma_call_vs_sdpa_cudnn'))} by public call, "
            f"{span(ratio_span(all_rows, 'wgmma_kernel_vs_sdpa_cudnn'))} kernel-only; the mma.sync kernel against "
            f"SDPA-flash {span(ratio_span(all_rows, 'mmasync_call_vs_sdpa_flash'))} by public call, "
            f"{span(ratio_span(all_rows, 'mmasync_kernel_vs_sdpa_flash'))} kernel-only.", ""]
    peaks = "; ".join(f"{k} {v[0]:.0f} TFLOP/s {'by public call' if m == 'call' else 'kernel-only'} "
                      f"(d = {v[1]}, N = {v[2]:,}{', causal' if v[3] else ''})" for (k, m), v in h["peak_tflops"].items())
    host = h["host_us"]
    out += [f"Peaks: {peaks}.", "",
            f"Host time per call, median over the {h['shapes']} shapes: "
            + ", ".join(f"{IMPL_LABEL.get(i, i)} {_f(v)} µs" for i, v in host.items())
            + f"; wgmma's at or below SDPA-flash's in {h['host_below']} of {h['shapes']} shapes.", ""]
    rows = fr.fa3_bench_table(res) or all_rows
    out += ["### Every shape", "",
            "TFLOP/s by public call; ratios = their time ÷ ours (call: public call vs public call; kernel: "
            "kernel-only vs kernel-only); host µs per call.", "",
            "| d | causal | N | B×H | wgmma TFLOP/s | fa3 TFLOP/s | wgmma ÷ FA2 call | wgmma ÷ FA2 kernel | "
            "wgmma ÷ cuDNN call | wgmma ÷ cuDNN kernel | fa3 ÷ cuDNN call | fa3 ÷ cuDNN kernel | host µs wgmma | "
            "host µs fa3 | host µs SDPA-flash |",
            "| " + " | ".join(["---"] * 15) + " |"]
    for r in rows:
        out.append(f"| {r['d']} | {_yes(r['causal'])} | {r['N']:,} | {r['B']}×{r['H']} | "
                   f"{_f(r.get('wgmma_call_tflops'), 0)} | {_f(r.get('fa3_call_tflops'), 0)} | "
                   f"{_x(r.get('wgmma_call_vs_sdpa_flash'))} | {_x(r.get('wgmma_kernel_vs_sdpa_flash'))} | "
                   f"{_x(r.get('wgmma_call_vs_sdpa_cudnn'))} | {_x(r.get('wgmma_kernel_vs_sdpa_cudnn'))} | "
                   f"{_x(r.get('fa3_call_vs_sdpa_cudnn'))} | {_x(r.get('fa3_kernel_vs_sdpa_cudnn'))} | "
                   f"{_f(r.get('wgmma_host_us'))} | {_f(r.get('fa3_host_us'))} | {_f(r.get('sdpa_flash_host_us'))} |")
    out += ["", "### Correctness grid", "",
            "The same record: every kernel and element type against float64 dense attention on the same "
            "rounded inputs, O poisoned with NaN before each launch (`gpu/tensorcore/bench.py`, `check_case`).", "",
            "| kernel | dtype | cases | passed | tolerance | worst relative error | NaN seen |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    for (variant, dtype), c in sorted(check_summary(res).items()):
        out.append(f"| {variant} | {dtype} | {c['cases']} | {c['passed']} | {c['tol']:g} | "
                   f"{c['worst_rel_err']:.1e} | {_yes(c['nan'])} |")
    out += ["", "### Block sweep (kernel-only)", "",
            f"One kernel's block sizes against each other, so read by one method: {METHOD_NAMES['kernel']}.", "",
            "| kernel | d | causal | N | blocks tried | fastest Br×Bc | its ms | its TFLOP/s | slowest Br×Bc | slowest ÷ fastest |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for variant in sorted({r["variant"] for r in res.get("sweep", [])}):
        for d in sorted({r["d"] for r in res["sweep"] if r["variant"] == variant}):
            for causal in (False, True):
                sw = mma_sweep(res, variant=variant, d=d, causal=causal)
                if not sw:
                    continue
                fast, slow = min(sw, key=lambda r: r["ms"]), max(sw, key=lambda r: r["ms"])
                out.append(f"| {variant} | {d} | {_yes(causal)} | {fast['N']:,} | {len(sw)} | {fast['Br']}×{fast['Bc']} | "
                           f"{fast['ms']:.3f} | {fast['tflops']:.0f} | {slow['Br']}×{slow['Bc']} | "
                           f"{slow['ms'] / fast['ms']:.2f}x |")
    return out


def _teaching_section(res: dict | None) -> list[str]:
    out = ["## Teaching kernel (fp32) against naive CuPy", ""]
    if not res:
        return out + ["No record (benchmarks/results/gpu-*.json)."]
    env = res.get("env", {})
    out += [f"Record: {_link(res['source_file'], '../')}, {_env_line(env)}; kernel `{res.get('kernel_file', '?')}` "
            "(the record holds no source or cubin hash).", "", "Methods, in the record's words:", "", *_methods(res), ""]
    c = res.get("correctness") or {}
    if c:
        out += [f"Correctness: {c['n_cases'] - c['n_failures']} of {c['n_cases']} cases within {c['tolerance']:g} "
                f"(worst relative error {c['max_rel_err']:.1e}, worst lse error {c['max_lse_err']:.1e}).", ""]
    out += ["naive ÷ ours = naive's time ÷ the kernel's, the same method on both sides.", "",
            "| N | d | B×H | Br×Bc | causal | call ms | kernel-only ms | TFLOP/s (call) | naive ÷ ours, call | "
            "naive ÷ ours, kernel-only | host µs |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in res.get("timing", []):
        if "kernel_ms" not in r:
            continue
        f = teaching_figures(r)
        out.append(f"| {r['N']:,} | {r['d']} | {r['B']}×{r['H']} | {r['Br']}×{r['Bc']} | {_yes(r.get('causal'))} | "
                   f"{f['call_ms']:.3f} | {f['kernel_ms']:.3f} | {_f(f.get('call_tflops'))} | "
                   f"{_x(f.get('naive_over_call'))} | {_x(f.get('naive_over_kernel'))} | {_f(f.get('host_us'))} |")
    pm = res.get("peak_memory") or {}
    if "kernel_peak_bytes" in pm:
        out += ["", f"Peak extra GPU memory of one call at N = {pm['N']:,}, d = {pm['d']}, one head ({pm['method']}): "
                f"kernel {pm['kernel_peak_bytes'] / 1e6:,.1f} MB, naive {pm['naive_peak_bytes'] / 1e6:,.1f} MB."]
    return out


def _dram_section(res: dict | None) -> list[str]:
    out = ["## DRAM bytes (Nsight Compute) against the IO model", ""]
    if not res:
        return out + ["No record (benchmarks/results/dram-*.json)."]
    out += [f"Record: {_link(res['source_file'], '../')}, {_env_line(res.get('env', {}))}; metrics "
            f"`{res.get('metrics', '?')}`, one forward call each.", "",
            "| implementation | N | d | B×H | Br×Bc | bytes/element | IO model GB | DRAM read GB | DRAM write GB | DRAM total GB |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in res.get("rows", []):
        blk = f"{r['Br']}×{r['Bc']}" if r.get("Br") else "—"
        out.append(f"| {r['impl']} | {r['N']:,} | {r['d']} | {r['B']}×{r['H']} | {blk} | {r['itemsize']} | "
                   f"{r['model_hbm_bytes'] / 1e9:.2f} | {r['dram_read_bytes'] / 1e9:.3f} | "
                   f"{r['dram_write_bytes'] / 1e9:.3f} | {r['dram_bytes'] / 1e9:.3f} |")
    return out


def _bwd_kernels(res: dict, impl: str) -> str:
    """The tensor-core kernels ``impl``'s rows of a backward record timed, as the record names them
    (``bwd_records.kernel_forms``), e.g. "`flash_bwd_mma` with ATOMIC_DQ = true"; "no kernel named"."""
    from .records import bwd_records as br
    return ", ".join(f"`{k.split(' ', 1)[0]}`" + (f" {k.split(' ', 1)[1]}" if " " in k else "")
                     for k in br.kernel_forms(res, impl)) or "no kernel named"


def _bwd_ours(res: dict) -> tuple[str, list[str], tuple[str, str] | None]:
    """The backward section's words for ours on tensor cores: (the sentence that says which dQ path
    each of its implementations ran, read off the record; the other implementations timed beside
    bwd_mma; the (non-deterministic, deterministic) pair of ``bwd_records.dq_twins`` or None)."""
    from .gpu.tensorcore.backward import backward_plan
    from .records import bwd_records as br
    path = br.dq_path(res, "bwd_mma")
    alts = [i for i in br.MMA_IMPLS[1:] if br.dq_path(res, i)]
    call = {"bwd_mma_det": "`deterministic=True`", "bwd_mma_atomic": "`dq=\"atomic\"`"}
    words = {"atomic": "atomic dQ (fp32 `atomicAdd` in the main kernel, then a convert kernel)",
             "bulk": "bulk dQ (each query block's fp32 dQ_i added into HBM by one reduction of the copy engine, "
                     "then a convert kernel)",
             "separate": "deterministic dQ (the main kernel without atomics, then the separate pass "
                         "`flash_bwd_mma_dq` in a fixed order)"}
    text = ("Ours is `bwd_mma`, `flash_backward_mma`'s default call. Its dQ in this record, as the record's "
            "kernel names say (`<impl>_kernel_name`, the longest kernel of a call): "
            f"{words.get(path, 'not recorded')} — {_bwd_kernels(res, 'bwd_mma')}.")
    for alt in alts:
        text += (f" Beside it, `{alt}` is the same call with {call[alt]}: {words.get(br.dq_path(res, alt), '?')} — "
                 f"{_bwd_kernels(res, alt)}.")
    cc = res.get("env", {}).get("compute_capability")
    now = {backward_plan(int(cc), d)[1] for d in {r["d"] for r in br.time_rows(res)}} if cc else set()
    if path and now and path not in now:
        text += (f" (On a GPU like this one (sm_{cc}) the default call now runs the "
                 f"{' / '.join(br.DQ_WORDS[p] for p in sorted(now))} (`backward_plan`, chosen from the H100 records "
                 f"named there): this record was made before, and its `bwd_mma` ran the {br.DQ_WORDS[path]}.)")
    return text, alts, br.dq_twins(res, "bwd_mma")


def _bwd_section(res: dict | None) -> list[str]:
    from .records import bwd_records as br
    out = ["## Backward on the GPU against PyTorch SDPA", ""]
    if not res:
        return out + ["No record (benchmarks/results/bwd-*.json)."]
    ours_text, alts, twins = _bwd_ours(res)
    out += [f"Record: {_link(res['source_file'], '../')}, {_env_line(res.get('env', {}))}. One process, one run. "
            f"Method, in the record's words: {res.get('method', '?')}. Ratios are SDPA's time ÷ ours, the same "
            "method on both sides (above 1: ours is faster); TFLOP/s count the backward as 2.5 × the forward's "
            "matmul FLOPs (causal: the visible half). Chapter 6, section 7 draws the same rows "
            "(`flashviz.records.bwd_records`).", "", ours_text, ""]
    dq = br.dq_path(res, "bwd_mma")
    ours = f"bwd_mma ({br.DQ_WORDS[dq]})" if dq else "bwd_mma"
    head = (f"| d | causal | N | B×H | {ours} TFLOP/s (call) | ÷ flash call | ÷ flash kernel | ÷ cuDNN call | "
            "÷ cuDNN kernel | fwd+bwd ÷ flash | fwd+bwd ÷ cuDNN |")
    for alt in alts:
        head += f" {alt} ({br.DQ_WORDS[br.dq_path(res, alt)]}) ÷ flash kernel |"
    if twins:
        head += " deterministic ÷ non-deterministic, kernel-only |"
    head += " teaching fp32 ms (call) |"
    out += [head, "|" + " --- |" * (head.count(" | ") + 1)]
    cost = {(c["d"], c["causal"], c["N"]): c.get("kernel") for c in br.det_cost(res, "bwd_mma")} if twins else {}
    for r in br.time_rows(res):
        cells = [_x(r.get(f"bwd_mma_{m}_vs_{theirs}"))
                 for theirs, ms in (("sdpa_flash_bwd", ("call", "kernel")), ("sdpa_cudnn_bwd", ("call", "kernel")))
                 for m in ms]
        cells += [_x(r.get(f"bwd_mma_fwdbwd_vs_{theirs}")) for theirs in br.THEIRS]
        cells += [_x(r.get(f"{alt}_kernel_vs_sdpa_flash_bwd")) for alt in alts]
        if twins:
            cells.append(_x(cost.get((r["d"], r["causal"], r["N"]))))
        teach = r.get("bwd_teaching_call_ms")
        out.append(f"| {r['d']} | {_yes(r['causal'])} | {r['N']:,} | {r['B']}×{r['H']} | "
                   f"{_f(r.get('bwd_mma_call_tflops'), 0)} | " + " | ".join(cells)
                   + f" | {'—' if teach is None else f'{teach:.2f}'} |")
    rep = br.repeatability(res)
    if rep:
        named = {impl: f"{impl} ({br.DQ_WORDS[s['dq']]})" if s.get("dq") else impl for impl, s in rep.items()}
        out += ["", "Bitwise repeatability (the same inputs, repeated calls compared bit for bit): "
                + "; ".join(f"{named[impl]}: {s['equal']} of {s['shapes']} shapes ({s['runs']} runs each)"
                            for impl, s in rep.items()) + "."]
    peak = br.peak_rows(res)
    if peak:
        out += ["", f"| N | d | {ours} peak MiB | SDPA-flash peak MiB | SDPA-cuDNN peak MiB | SDPA-math peak MiB |",
                "| --- | --- | --- | --- | --- | --- |"]
        for r in peak:
            cells = [r.get(f"{k}_peak_bytes") for k in br.PEAK_IMPLS]
            out.append(f"| {r['N']:,} | {r['d']} | " + " | ".join("—" if c is None else f"{c / 2**20:,.0f}" for c in cells)
                       + " |")
    return out


def _decode_variants(res: dict) -> str | None:
    """What a decode record's rows say of the default call's split kernel: e.g. '"mma" (v2)' or,
    where it differs with d, '"simt" (v1) at d = 128, "mma" (v2) at d = 64' (d descending); None when
    no row has a ``variant`` (a record made before v2 became the default, whose call ran v1)."""
    by = {}
    for r in res.get("bench") or []:
        if "variant" in r:
            by.setdefault(r["variant"], set()).add(r["d"])
    name = {"mma": "v2", "simt": "v1"}
    said = lambda v: f'"{v}" ({name[v]})' if v in name else f'"{v}"'  # noqa: E731
    if len(by) <= 1:
        return next((said(v) for v in by), None)
    return ", ".join(f"{said(v)} at d = {', '.join(str(d) for d in sorted(ds, reverse=True))}"
                     for v, ds in sorted(by.items(), key=lambda kv: -max(kv[1])))


def _decode_section(recs: list[dict]) -> list[str]:
    """The decode section: the newest record of each device (``latest_results_each_device``),
    newest first, under a heading of its device when there are several."""
    out = ["## Decode on the GPU against PyTorch SDPA", ""]
    if not recs:
        return out + ["No record (benchmarks/results/decode-*.json): `benchmarks/bench_decode.py` makes it."]
    for res in recs:
        if len(recs) > 1:
            out += [f"### {res.get('env', {}).get('device', 'unknown device')}", ""]
        out += _decode_record(res) + [""]
    return out[:-1]


def _decode_record(res: dict) -> list[str]:
    from .gpu.decode import DEFAULT_VARIANT, decode_expressions
    from .records.decode_records import NAMES, alternative, decode_rows, split_sweeps
    out = []
    copy = res.get("copy_GBps")
    out += [f"Record: {_link(res['source_file'], '../')}, {_env_line(res.get('env', {}))}. One process, one run; "
            f"the device's copy bandwidth measured in the same run: "
            f"{'not measured' if not copy else f'{copy / 1e3:.2f} TB/s'} (bytes read plus bytes written ÷ time, so a "
            "kernel that only reads can show more than 100 % of it). Bandwidth = bytes of K and V read ÷ time; "
            "cuDNN ÷ ours is cuDNN's kernel-only time over ours (above 1: ours is faster). Chapter 9, section 7 "
            "prints the same rows (`flashviz.records.decode_records`).", "",
            "\"ours\" is the default call, `flash_decode_gpu` without a variant; its split kernel in this record: "
            f"{_kernels(res, 'decode')}."]
    alt = alternative(res)
    short, variant = {"decode_mma": ("v2", "mma"), "decode_simt": ("v1", "simt")}.get(alt, (None, None))
    if alt:
        out[-1] += (f" \"{short}\" is the same call with `variant=\"{variant}\"`, split kernel {_kernels(res, alt)}, "
                    "on the same rows.")
    if any(f"decode_nosplit_{t}_us" in r for r in res.get("bench") or [] for t in ("call", "kernel")):
        out[-1] += (f" Chapter 9 also shows \"{NAMES['decode_nosplit']}\", the default call with `num_splits=1`: "
                    f"split kernel {_kernels(res, 'decode_nosplit')}.")
    # which kernel the default call ran is a fact of the device (check_variant): the rows record it
    # since v2 became the default; rows without it are older, and their call ran v1
    variants = _decode_variants(res)
    if variants is None and res.get("bench"):
        now = re.search(r"fvdec::(\w+)<", decode_expressions("float16", 128, False, variant=DEFAULT_VARIANT)[0])[1]
        out[-1] += f" (The call's default on an H100 / H200 is now `{now}`: this record was made before.)"
    elif variants is not None:
        out[-1] += f" The default call's split kernel on this device, as the rows record it: {variants}."
    head = ("| B | H / H_kv | Nq | Nk | d | causal | pages | S | ours µs (kernel) | ours TB/s | of copy | cuDNN TB/s | "
            "flash TB/s | cuDNN ÷ ours | ours µs (call) | cuDNN µs (call) |")
    if alt:
        head += f" {short} µs (kernel) | {short} of copy | cuDNN ÷ {short} | {short} µs (call) |"
    out += ["", head, "|" + " --- |" * (head.count(" | ") + 1)]
    ALT = NAMES.get(alt)

    def cell(r, name, key, scale=1.0, digits=1):
        v = r["impls"].get(name, {}).get(key)
        return "—" if v is None else f"{v * scale:,.{digits}f}"

    for r in decode_rows(res):
        share = r["ours_of_copy"]
        out.append(f"| {r['B']} | {r['H']} / {r['H_kv']} | {r['Nq']} | {r['Nk']:,} | {r['d']} | {_yes(r['causal'])} | "
                   f"{r['page_size'] or '—'} | {r['num_splits']} | {cell(r, 'ours', 'kernel_us')} | "
                   f"{cell(r, 'ours', 'kernel_GBps', 1e-3, 2)} | {_pct(share)} | "
                   f"{cell(r, 'SDPA-cuDNN', 'kernel_GBps', 1e-3, 2)} | {cell(r, 'SDPA-flash', 'kernel_GBps', 1e-3, 2)} | "
                   f"{_x(r['cudnn_over_ours'])} | {cell(r, 'ours', 'call_us')} | {cell(r, 'SDPA-cuDNN', 'call_us')} |"
                   + (f" {cell(r, ALT, 'kernel_us')} | {_pct(r['of_copy'][ALT])} | {_x(r['cudnn_over'][ALT])} | "
                      f"{cell(r, ALT, 'call_us')} |" if alt else ""))
    for sw in split_sweeps(res):
        ratio = sw["heuristic_over_best"]
        out += ["", f"Split sweep B = {sw['B']}, H = {sw['H']} / {sw['H_kv']}, Nk = {sw['Nk']:,}: the heuristic chose "
                    f"{sw['heuristic']}, the fastest was {sw['best']} (heuristic ÷ best: "
                    f"{'—' if ratio is None else f'{ratio:.3f}'})."]
    return out


def _store_section(res: dict | None) -> list[str]:
    from .records.store_records import NAMES, crossover, store_rows
    out = ["## Recompute versus store: the teaching backward over N", ""]
    if not res:
        return out + ["No record (benchmarks/results/storep-*.json): `benchmarks/bench_store_p.py` makes it."]
    n = crossover(res)
    out += [f"Record: {_link(res['source_file'], '../')}, {_env_line(res.get('env', {}))}. One process, one run; "
            f"d = {res.get('d')}, {res.get('BH')} heads, Br × Bc = {res.get('Br')} × {res.get('Bc')}, fp32, no mask. "
            "Kernel-only ms; peak MiB of one call (a fresh CuPy pool's high-water mark). Recomputing is at least "
            f"as fast as reading the stored P {f'from N = {n:,} on' if n else 'at no N of this record'}.", "",
            "| N | " + " | ".join(f"{name} ms | peak MiB" for name in NAMES.values()) + " | making P ms |",
            "| --- | " + " | ".join("--- | ---" for _ in NAMES) + " | --- |"]
    for r in store_rows(res):
        cells = []
        for k in NAMES:
            t, p = r[k]["kernel_ms"], r[k]["peak_bytes"]
            cells += ["—" if t is None else f"{t:.3f}", "—" if p is None else f"{p / 2**20:,.0f}"]
        mk = r["make_P_kernel_ms"]
        out.append(f"| {r['N']:,} | " + " | ".join(cells) + f" | {'—' if mk is None else f'{mk:.3f}'} |")
    return out


def _fa3_section() -> list[str]:
    recs = fr.probe_records()
    out = ["## FlashAttention-3: the probe runs", ""]
    if not recs:
        return out + ["No probe records (benchmarks/results/probe-fa3-*.json)."]
    out += [f"Records written by `benchmarks/probe_fa3.py`, one process each. Method: {PROBE_METHOD}. "
            "Two builds compare only inside one run; across runs only each run's ratios to SDPA-cuDNN of that run.",
            "", "| run | record | recorded | fa3 builds | fastest fa3 build of each row ÷ cuDNN, kernel-only: d = 64 | "
            "d = 128 |", "| --- | --- | --- | --- | --- | --- |"]
    for run, rec in recs.items():
        cell, builds = [], set()
        for d in (64, 128):
            best = []
            for r in rec["times"]:
                if r["d"] != d:
                    continue
                rows = fr.build_rows(rec, d=d, causal=r["causal"], N=r["N"])
                builds |= {b["impl"] for b in rows}
                if rows:
                    best.append(max(b["kernel_vs_sdpa_cudnn"] for b in rows))
            cell.append(span((min(best), max(best))) if best else "—")
        out.append(f"| {run} | {_link(rec['source_file'], '../')} | {_env_line(rec.get('env', {}))} | {len(builds)} | "
                   f"{cell[0]} | {cell[1]} |")
    out += ["", "### What each choice bought, inside one run (kernel-only)", "",
            f"speed-up = the baseline build's time ÷ the candidate's, same run; beyond ±{fr.RUN_NOISE:.0%} counts as "
            f"faster or slower (the spread of the implementations that did not change between runs: up to "
            f"{max(fr.unchanged_spread()):.1%}).", "",
            "| choice | d | runs | rows | median | lowest | highest | faster | within | slower |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for c in fr.COMPARISONS:
        for d in (64, 128):
            rows = fr.compare_builds(c, d, recs)
            if not rows:
                continue
            s = fr.summarize([r["speedup"] for r in rows])
            runs = ", ".join(sorted({r["run"] for r in rows}))
            out.append(f"| {c.what} | {d} | {runs} | {s['n']} | {s['median']:.3f} | {s['lo']:.3f} | {s['hi']:.3f} | "
                       f"{s['faster']} | {s['within']} | {s['slower']} |")
    steps = recs.get("steps")
    if steps:
        st = fr.steps_table(steps)
        out += ["", f"### From the FA2 kernel to FA3, step by step ({_link(steps['source_file'], '../')})", "",
                "TFLOP/s kernel-only; ratios to SDPA-cuDNN of the same run, one method on both sides.", "",
                "| d | causal | N | step | Br×Bc | TFLOP/s kernel-only | ÷ cuDNN kernel-only | ÷ cuDNN public call |",
                "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        for r in st:
            out.append(f"| {r['d']} | {_yes(r['causal'])} | {r['N']:,} | {r['label']} | {r['Br']}×{r['Bc']} | "
                       f"{r['kernel_tflops']:.0f} | {_x(r['kernel_vs_sdpa_cudnn'])} | {_x(r['call_vs_sdpa_cudnn'])} |")
    return out


def _pasted(audit, file: str) -> str:
    """"`f.cu` (+ `h.cuh`, ...)": a kernel file and the headers its compiled source pastes in."""
    parts = audit.pasted(file)
    return f"`{parts[0]}`" + (f" (+ {', '.join(f'`{p}`' for p in parts[1:])})" if len(parts) > 1 else "")


def _provenance_section() -> list[str]:
    from .records.provenance import audit
    recs = audit()
    out = ["## Which records timed today's kernels", "",
           "Each GPU record names the kernel sources it timed by their sha256 (`flashviz.records.provenance`); "
           "this compares them with the tree's. *changed*: the source compiled for a kernel it timed (the file "
           "with the kernels/ headers it includes) differs from today's, in the file or in a header, and no "
           "committed record shows that it still compiles to the binaries this one timed. *same binary*: the source "
           "changed, but every cubin the record timed from it is byte-identical to one a committed record (archive/ "
           "included) compiled from today's source the same way (name, arch, options): its numbers still describe "
           "today's kernel. *unnamed*: the record predates the hashes; its commit says what ran. Records in a "
           "device's folder (h100/) are listed by their path.", "",
           "| record | status | kernels named | compiled source changed since (file + headers) |",
           "| --- | --- | --- | --- |"]
    for a in recs:
        named = ", ".join(sorted({f"`{k.file}`" for k in a.kernels})) or "—"
        changed = ", ".join(_pasted(a, f) for f in a.changed) or "—"
        out.append(f"| {_link(a.name, '../')} | {a.status} | {named} | {changed} |")
    return out


#: the timeline summaries of a run of some kernels only (record_timelines.py --kernels): timelines-<kernels>-…
TIMELINE_KERNELS = ("teaching", "wgmma", "fa3", "decode", "bwd_teaching", "bwd_mma", "bwd_wgmma")
_PARTIAL_TIMELINES = rf"timelines-(?:{'|'.join(TIMELINE_KERNELS)})-"


def _timeline_section() -> list[str]:
    rec = _newest("timelines-", skip=_PARTIAL_TIMELINES)
    out = ["## GPU timelines: what tracing costs, and the block order", ""]
    if not rec:
        return out + ["No record (benchmarks/results/timelines-*.json)."]
    files = recorded_timelines()
    out += [f"Record: {_link(rec['source_file'], '../')}, {_env_line(rec.get('env', {}))}; "
            f"{len(files)} timeline files beside it (`timeline-*.json.gz`). Method, in the record's words: "
            f"{rec.get('method', '?')}.", "", *_timeline_rows(rec)]
    for kernel in TIMELINE_KERNELS:          # later runs of one kernel alone: their own record and table
        part = _newest(f"timelines-{kernel}-")
        if part:
            out += ["", f"{kernel} alone: {_link(part['source_file'], '../')}, {_env_line(part.get('env', {}))}.",
                    "", *_timeline_rows(part)]
    return out


def _timeline_rows(rec: dict) -> list[str]:
    out = ["| kernel | d | causal | block order | N | B×H | Br×Bc | kernel-only ms | the kernel's own order, ms | "
           "traced ms | tracing cost | tail share |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rec.get("runs", []):
        kv = f" (H_kv {r['H_kv']}, S {r.get('S', '?')})" if "H_kv" in r else ""     # a decode run
        shape = (f"| {r['kernel']} | {r['d']} | {_yes(r['causal'])} | {r['order']} | {r['N']:,} | "
                 f"{r.get('B', '?')}×{r.get('H', '?')}{kv} | ")
        if "error" in r or "skipped" in r:   # a run that failed or was left out: its one line, no figures
            what = f"failed: {str(r['error'])[:120]}" if "error" in r else f"not run: {r['skipped']}"
            out.append(shape + f"{what} | | | | | |")
            continue
        own = r.get("kernel_order_ms")
        out.append(shape + f"{r['Br']}×{r['Bc']} | {r['kernel_ms']:.4f} | {'—' if own is None else f'{own:.4f}'} | "
                   f"{r['traced_ms']:.4f} | {100 * r['overhead']:.1f} % | {100 * r['tail_share']:.1f} % |")
    return out


def _tests_section() -> list[str]:
    try:
        folder = package_dir("flashviz.results")
    except FileNotFoundError:
        return []
    recs = sorted(f.name for f in folder.iterdir() if f.name.startswith("tests-") and f.name.endswith(".json"))
    out = ["## GPU test runs", "",
           "`benchmarks/run_gpu_tests.py` runs the `gpu`-marked tests on a GPU machine and records every outcome.", "",
           "| record | recorded | passed | failed | skipped |", "| --- | --- | --- | --- | --- |"]
    for name in recs:
        rec = json.loads((folder / name).read_text(encoding="utf-8"))
        c = rec.get("counts", {})
        out.append(f"| {_link(name, '../')} | {_env_line(rec.get('env', {}))} | {c.get('passed', 0)} | "
                   f"{c.get('failed', 0)} | {c.get('skipped', 0)} |")
    return out


def _cpu_section() -> list[str]:
    rec = _newest("cpu-", "cpu")
    if not rec:
        return []
    fwd = next((v for k, v in rec.items() if k.startswith("flash_forward_record")), None)
    frame = next((v for k, v in rec.items() if k.startswith("show_frame")), None)
    out = ["## CPU: the NumPy algorithm and one frame", "",
           f"Record: {_link(rec['source_file'], '../')} ({rec.get('date', '?')}, {rec.get('cpus', '?')} CPUs, Python "
           f"{rec.get('python', '?')}, NumPy {rec.get('numpy', '?')}, matplotlib {rec.get('matplotlib', '?')}; "
           "written by `benchmarks/bench_cpu.py`).", ""]
    if fwd:
        key = next(k for k in rec if k.startswith("flash_forward_record"))
        out.append(f"- `{key}`: median {fwd['median'] * 1e3:.1f} ms of {len(fwd['runs'])} runs "
                   f"({fwd['events']:,} trace events).")
    if frame:
        key = next(k for k in rec if k.startswith("show_frame"))
        out.append(f"- `{key}`: median {frame['median']:.1f} ms, 90th percentile {frame['p90']:.1f} ms "
                   f"over {frame['frames']} frames.")
    return out


def _all_records() -> list[str]:
    try:
        folder = package_dir("flashviz.results")
    except FileNotFoundError:
        return []
    out = ["## Every record", "",
           "All files under `benchmarks/results/`; `archive/` holds earlier versions that later runs superseded "
           "(benchmarks/NOTES.md cites them for the history).", ""]

    def walk(base, prefix=""):
        for f in sorted(base.iterdir(), key=lambda f: f.name):
            if f.name.startswith(("__", ".")):
                continue
            if f.is_dir():
                yield from walk(f, f"{prefix}{f.name}/")
            else:
                yield prefix + f.name

    out += [f"- {_link(name, '../')}" for name in walk(folder)]
    return out


def results_page() -> str:
    """The text of docs/results.md."""
    mma = latest_results("mma")
    parts = [["# Measured results", "",
              "Made by `make docs` (`python -m flashviz.report`) from the committed records under "
              "`benchmarks/results/`: do not edit by hand. How each figure is measured and how a record is made: "
              "[measuring.md](measuring.md); what each version of the kernels tried: "
              "[benchmarks/NOTES.md](../benchmarks/NOTES.md)."],
             _mma_section(mma), _teaching_section(latest_results("teaching")), _dram_section(latest_results("dram")),
             _bwd_section(latest_results("bwd")), _store_section(latest_results("storep")),
             _decode_section(latest_results_each_device("decode")), _fa3_section(), _timeline_section(), _tests_section(),
             _provenance_section(), _cpu_section(), _all_records()]
    return "\n\n".join("\n".join(p) for p in parts if p).replace("\n\n\n", "\n\n") + "\n"


# --- writing and checking ----------------------------------------------------------------------

def with_readme_table(readme: str, table: str | None = None) -> str:
    """``readme`` with the text between its marker lines replaced by ``table`` (default: the
    generated one). ValueError when the markers are missing or out of order."""
    a, b = readme.find(RESULTS_BEGIN), readme.find(RESULTS_END)
    if a < 0 or b < a:
        raise ValueError(f"README.md must hold the lines {RESULTS_BEGIN!r} and {RESULTS_END!r}, in that order")
    table = readme_table() if table is None else table
    return readme[:a + len(RESULTS_BEGIN)] + "\n" + table + "\n" + readme[b:]


def render(root: Path = ROOT) -> dict[Path, str]:
    """{path relative to ``root``: the text the generator makes for it now}."""
    readme = (root / README).read_text(encoding="utf-8")
    return {RESULTS_PAGE: results_page(), README: with_readme_table(readme)}


def stale(root: Path = ROOT) -> list[Path]:
    """The generated pages whose committed text differs from what the records make now."""
    out = []
    for rel, text in render(root).items():
        path = root / rel
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            out.append(rel)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="flashviz report", description="write docs/results.md and the README's "
                                "table of GPU results from the committed records (benchmarks/results/)")
    p.add_argument("--root", default=str(ROOT), help="the repository (default: this checkout)")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 naming the pages that differ")
    args = p.parse_args(argv)
    root = Path(args.root)
    if not (root / README).is_file():
        print(f"flashviz report: no {README} in {root}: run it in a checkout of the repository (--root)",
              file=sys.stderr)
        return 2
    if args.check:
        bad = stale(root)
        for rel in bad:
            print(f"{rel} differs from what the records make: run `make docs`", file=sys.stderr)
        return 1 if bad else 0
    for rel, text in render(root).items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {rel}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
