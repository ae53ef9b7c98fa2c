"""The backward benchmark record (``benchmarks/results/bwd-<device>-<date>.json``, written by
``gpu/tensorcore/bench_bwd.py``) read without a GPU: chapter 6's section 7, its exercises and its
GPU panel (``widgets/backward_gpu_panel.py``).

One record is one process, one run, on one GPU. Its ``bench`` rows (B, H, N, d, causal; fp16,
B·N = 16k tokens, H = 2048/d) hold, for every implementation of ``IMPLS`` that ran at that shape,
``<impl>_call_ms`` (the backward alone by public call, CUDA events, median),
``<impl>_kernel_ms`` (the same call's GPU work, profiler, median) and
``<impl>_fwdbwd_call_ms`` (forward + backward by public call). ``peak_bytes`` rows hold the
backward's peak memory and what the forward keeps for it, ``deterministic`` rows the bitwise
repeatability of repeated calls.

``time_rows(res)``: per bench row, per implementation, the times and what follows from them
(TFLOP/s by each method; the forward's time as fwdbwd_call_ms − call_ms; backward ÷ forward;
the backward's share of forward + backward; SDPA's time ÷ ours, the same method on both sides).
``peak_rows(res)``: per peak row, bytes in all and per (batch, head) pair.
``repeatability(res)``: per implementation, in how many shapes repeated calls gave the same bits.
``det_cost(res, impl)``: a deterministic backward's time ÷ its atomic twin's, per shape (the teaching
kernel's or ours on tensor cores).
``teaching_rows(res)``: the teaching backward's rows with the blocks it ran with and its errors
(chapter 6's ``BackwardGPUPanel`` without a GPU).

Plain Python: no CuPy, no torch, no matplotlib (``tests/core/test_records.py``).
"""

from __future__ import annotations

from .results import cuda_version, latest_results

#: the record's implementations, in the order the lesson lists them, with their names on screen
IMPLS = {"bwd_mma": "ours, tensor cores (fp16)",
         "bwd_mma_det": "ours, tensor cores (fp16, deterministic dQ)",
         "bwd_teaching": "ours, teaching kernel (fp32, atomic dQ)",
         "bwd_teaching_det": "ours, teaching kernel (fp32, deterministic dQ)",
         "sdpa_flash_bwd": "SDPA-flash (FlashAttention-2)",
         "sdpa_cudnn_bwd": "SDPA-cuDNN",
         "sdpa_math_bwd": "SDPA-math (stores P)"}
#: the implementations the peak-memory rows measure, and those that recompute P
PEAK_IMPLS = ("bwd_mma", "sdpa_flash_bwd", "sdpa_cudnn_bwd", "sdpa_math_bwd")
RECOMPUTE = ("bwd_mma", "bwd_mma_det", "bwd_teaching", "bwd_teaching_det", "sdpa_flash_bwd", "sdpa_cudnn_bwd")
#: the SDPA backends ours is compared with
THEIRS = ("sdpa_flash_bwd", "sdpa_cudnn_bwd")
METHODS = {"call": "public call", "kernel": "kernel-only"}

#: matmuls of N×N×d (2·N²·d FLOPs each): the forward does S = QKᵀ and O = PV; the backward dV, dP,
#: dQ, dK and, recomputing P, S once more (FlashAttention's convention: backward = 2.5 × forward)
FWD_MATMULS = 2
BWD_MATMULS_STORED = 4
BWD_MATMULS = BWD_MATMULS_STORED + 1


#: a deterministic backward's dQ pass (kernels/flash_bwd.cu, flash_bwd_dq; kernels/flash_bwd_mma.cu,
#: flash_bwd_mma_dq) recomputes S_ij and dP_ij once more for every tile: two matmuls more than the
#: atomic path's five
DET_EXTRA_MATMULS = 2


def det_flop_ratio() -> float:
    """A deterministic backward's matmul FLOPs ÷ its atomic twin's: (5 + 2) / 5 = 1.4."""
    return (BWD_MATMULS + DET_EXTRA_MATMULS) / BWD_MATMULS


def flop_ratio(recompute: bool = True) -> float:
    """Backward FLOPs ÷ forward FLOPs (matmuls only): 2.5 with P recomputed, 2.0 with P stored."""
    return (BWD_MATMULS if recompute else BWD_MATMULS_STORED) / FWD_MATMULS


def bwd_record(res: dict | None = None) -> dict:
    """``res``, or the newest committed backward record (``latest_results("bwd")``); LookupError
    when there is none."""
    res = latest_results("bwd") if res is None else res
    if not isinstance(res, dict) or "bench" not in res:
        raise LookupError("no backward record (benchmarks/results/bwd-*.json) with 'bench' rows")
    return res


def bwd_label(res: dict) -> str:
    """'NVIDIA H200, 2026-12-04 19:32 UTC, commit f149b7a (CUDA 13.2, CuPy 14.2.0, torch 2.11.0+cu130;
    file bwd-h200-2026-12-04.json)': where and when the record was made, from the record itself."""
    env = res.get("env", {})
    when = env.get("time_utc", "")
    when = f"{when[:10]} {when[11:16]} UTC" if len(when) >= 16 else env.get("date", "unknown date")
    soft = [f"CUDA {cuda_version(env['cuda_runtime'])}" if "cuda_runtime" in env else "",
            f"CuPy {env['cupy']}" if env.get("cupy") else "", f"torch {env['torch']}" if env.get("torch") else ""]
    soft = ", ".join(s for s in soft if s)
    commit = f", commit {env['commit'][:7]}" if env.get("commit") else ""
    return (f"{env.get('device', 'unknown GPU')}, {when}{commit} ({soft + '; ' if soft else ''}"
            f"file {res.get('source_file', '?')})")


def _num(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x == x


def time_rows(res: dict, *, d=None, causal=None) -> list[dict]:
    """The bench rows, sorted by (d, causal, N), filtered by d / causal when given. Each keeps
    N, d, B, H, causal, flops_fwd, flops_bwd and, for every implementation that ran there:
    ``<impl>_call_ms``, ``_kernel_ms``, ``_fwdbwd_ms`` (the record's times);
    ``<impl>_call_tflops`` and ``_kernel_tflops`` (flops_bwd over each time);
    ``<impl>_fwd_ms`` = fwdbwd − call (the forward by public call: a difference of two medians);
    ``<impl>_bwd_over_fwd`` = call ÷ fwd, ``<impl>_bwd_share`` = call ÷ fwdbwd;
    for ``bwd_mma``: ``bwd_mma_<call|kernel>_vs_<theirs>`` = their time ÷ ours (above 1: ours is
    faster) for theirs in THEIRS, and ``bwd_mma_fwdbwd_vs_<theirs>``."""
    out = []
    for r in bwd_record(res)["bench"]:
        if (d is not None and r["d"] != d) or (causal is not None and bool(r["causal"]) != bool(causal)):
            continue
        row = {k: r[k] for k in ("N", "d", "B", "H", "causal", "dtype", "flops_fwd", "flops_bwd", "flops_fwdbwd")
               if k in r}
        for impl in IMPLS:
            call, kern, fb = (r.get(f"{impl}_{t}") for t in ("call_ms", "kernel_ms", "fwdbwd_call_ms"))
            if _num(call):
                row[f"{impl}_call_ms"] = call
                row[f"{impl}_call_tflops"] = r["flops_bwd"] / call / 1e9
            if _num(kern):
                row[f"{impl}_kernel_ms"] = kern
                row[f"{impl}_kernel_tflops"] = r["flops_bwd"] / kern / 1e9
            if _num(fb):
                row[f"{impl}_fwdbwd_ms"] = fb
                if _num(call) and fb > call:
                    row[f"{impl}_fwd_ms"] = fb - call
                    row[f"{impl}_bwd_over_fwd"] = call / (fb - call)
                    row[f"{impl}_bwd_share"] = call / fb
        for other in THEIRS:
            for m, key in (("call", "call_ms"), ("kernel", "kernel_ms"), ("fwdbwd", "fwdbwd_ms")):
                a, b = row.get(f"{other}_{key}"), row.get(f"bwd_mma_{key}")
                if a is not None and b:
                    row[f"bwd_mma_{m}_vs_{other}"] = a / b
        out.append(row)
    return sorted(out, key=lambda x: (x["d"], x["causal"], x["N"]))


def peak_rows(res: dict) -> list[dict]:
    """The peak-memory rows, sorted by (d, causal, N): N, d, B, H, causal, BH = B·H,
    ``tensor_bytes`` (one (B, H, N, d) tensor in the record's dtype) and, for
    every implementation of PEAK_IMPLS measured there, ``<impl>_peak_bytes`` (the backward call's
    peak above what was allocated before it: its outputs count), ``<impl>_saved_bytes`` (what the
    forward keeps for the backward), and both per (batch, head) pair (``_peak_per_head``,
    ``_saved_per_head``, bytes); ``<impl>_note`` where the record says why one was not run."""
    out = []
    for r in bwd_record(res).get("peak_bytes", []):
        BH = r["B"] * r["H"]
        row = {"N": r["N"], "d": r["d"], "B": r["B"], "H": r["H"], "causal": bool(r.get("causal")), "BH": BH}
        if _num(r.get("tensor_bytes")):
            row["tensor_bytes"] = r["tensor_bytes"]
        for impl in PEAK_IMPLS:
            for what in ("peak", "saved"):
                v = r.get(f"{impl}_{what}_bytes")
                if _num(v):
                    row[f"{impl}_{what}_bytes"] = v
                    row[f"{impl}_{what}_per_head"] = v / BH
            if f"{impl}_peak_note" in r:
                row[f"{impl}_note"] = r[f"{impl}_peak_note"]
        out.append(row)
    return sorted(out, key=lambda x: (x["d"], x["causal"], x["N"]))


def repeatability(res: dict) -> dict:
    """{impl: {"shapes", "equal", "dQ", "dK", "dV", "runs", "deterministic"}}: of the shapes whose
    repeated calls the record compared bit for bit, how many gave the same bits every time (all
    three gradients, and each one), the runs per shape, and whether the call asked to be
    deterministic; implementations in the record's order."""
    out: dict = {}
    for x in bwd_record(res).get("deterministic", []):
        s = out.setdefault(x["impl"], {"shapes": 0, "equal": 0, "dQ": 0, "dK": 0, "dV": 0, "runs": set(),
                                       "deterministic": bool(x.get("deterministic"))})
        s["shapes"] += 1
        s["equal"] += bool(x.get("bitwise_equal"))
        for g in ("dQ", "dK", "dV"):
            s[g] += bool(x.get(f"{g}_bitwise_equal"))
        s["runs"].add(x.get("runs"))
    for s in out.values():
        s["runs"] = min(s["runs"]) if len(s["runs"]) == 1 else sorted(s["runs"])
    return out


TEACHING = ("bwd_teaching", "bwd_teaching_det")


def teaching_rows(res: dict | None = None, *, d=None, causal=None) -> list[dict]:
    """The bench rows where the teaching backward (``bwd_teaching``) ran, as ``time_rows`` gives
    them (sorted by (d, causal, N), filtered by d / causal when given), each with the blocks it
    ran with: ``Br``, ``Bc`` (``bwd_teaching_Br`` / ``_Bc`` of the record; None where the
    record has none), ``bwd_teaching_det_Br`` / ``_Bc`` where the deterministic one ran, and
    ``<impl>_rel_err`` for impl in TEACHING: the largest of |grad − ref|max ÷ |ref|max over dQ,
    dK, dV in the record's correctness entry for that shape (where it has one). Raises
    LookupError like ``bwd_record``."""
    rec = bwd_record(res)
    raw = {(r["N"], r["d"], bool(r["causal"])): r for r in rec["bench"]}
    errs = {}
    for c in rec.get("correctness", []):
        if c.get("impl") in TEACHING and all(_num(c.get(f"{g}_max_abs_err")) for g in ("dQ", "dK", "dV")):
            rel = max(c[f"{g}_max_abs_err"] / c[f"{g}_ref_max_abs"] if c.get(f"{g}_ref_max_abs") else
                      c[f"{g}_max_abs_err"] for g in ("dQ", "dK", "dV"))
            errs[(c["impl"], c["N"], c["d"], bool(c["causal"]))] = rel
    out = []
    for row in time_rows(rec, d=d, causal=causal):
        if "bwd_teaching_call_ms" not in row:
            continue
        key = (row["N"], row["d"], bool(row["causal"]))
        r = raw[key]
        row = {**row, "Br": r.get("bwd_teaching_Br"), "Bc": r.get("bwd_teaching_Bc")}
        for impl in TEACHING:
            if f"{impl}_Br" in r:
                row[f"{impl}_Br"], row[f"{impl}_Bc"] = r[f"{impl}_Br"], r.get(f"{impl}_Bc")
            if (impl, *key) in errs:
                row[f"{impl}_rel_err"] = errs[(impl, *key)]
        out.append(row)
    return out


#: each atomic-dQ backward and its deterministic-dQ twin (``det_cost``)
DET_PAIRS = {"bwd_teaching": "bwd_teaching_det", "bwd_mma": "bwd_mma_det"}


def det_cost(res: dict, impl: str = "bwd_teaching") -> list[dict]:
    """What the deterministic dQ costs one backward: per bench row where both ``impl`` (atomic dQ:
    ``bwd_teaching``, the fp32 teaching kernel, or ``bwd_mma``, ours on tensor cores) and its twin
    ``DET_PAIRS[impl]`` ran, sorted by (d, causal, N): d, causal, N and the deterministic one's time
    ÷ the atomic one's (dimensionless: two medians in ms divided, one method on both sides) by public
    call (``call``) and, where both have it, kernel-only (``kernel``). Above 1: the deterministic
    backward is slower. [] when the record has no such row (one made before the twin was timed).
    ValueError for an ``impl`` not in DET_PAIRS; LookupError like ``bwd_record``."""
    if impl not in DET_PAIRS:
        raise ValueError(f"det_cost compares {' or '.join(DET_PAIRS)} with its deterministic twin, not {impl!r}")
    det = DET_PAIRS[impl]
    out = []
    for r in time_rows(res):
        if f"{det}_call_ms" in r and f"{impl}_call_ms" in r:
            c = {"d": r["d"], "causal": r["causal"], "N": r["N"], "call": r[f"{det}_call_ms"] / r[f"{impl}_call_ms"]}
            if f"{det}_kernel_ms" in r and f"{impl}_kernel_ms" in r:
                c["kernel"] = r[f"{det}_kernel_ms"] / r[f"{impl}_kernel_ms"]
            out.append(c)
    return out


def span(values) -> tuple[float, float] | None:
    """(min, max) of ``values`` (None when empty)."""
    values = list(values)
    return (min(values), max(values)) if values else None
