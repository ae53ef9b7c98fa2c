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
``det_cost(res, impl)``: a deterministic backward's time ÷ its non-deterministic twin's, per shape (the teaching
kernel's or ours on tensor cores).
``teaching_rows(res)``: the teaching backward's rows with the blocks it ran with and its errors
(chapter 6's ``BackwardGPUPanel`` without a GPU).

Which dQ path ours on tensor cores ran is read off the record, never assumed: ``bwd_mma`` is always
``flash_backward_mma``'s default call, which added dQ with fp32 atomics until the separate,
deterministic pass became the default (records of then time that pass beside it as ``bwd_mma_det``),
ran the separate pass after that (records time the atomics beside it as ``bwd_mma_atomic``), and
on sm_90 since 2026-12-06 runs the wgmma kernel with the "bulk" dQ (one fp32 reduction of the copy
engine per query block; records time ``bwd_mma_det`` and ``bwd_mma_atomic`` beside it).
``dq_path(res, impl)`` reads it off the rows' ``<impl>_kernel_name`` (``kernel_dq``: the main
kernel's ATOMIC_DQ or DQ template argument), ``impl_label(res, impl)`` names an implementation with
it, ``dq_twins(res, kernel)`` pairs a kernel's non-deterministic and deterministic implementations.

Plain Python: no CuPy, no torch, no matplotlib (``tests/core/test_records.py``).
"""

from __future__ import annotations

import re

from .results import cuda_version, latest_results

#: the record's implementations, in the order the lesson lists them, with the calls they time
#: (``impl_label`` adds the dQ path a record's kernels ran to ours on tensor cores)
IMPLS = {"bwd_mma": "ours, tensor cores (fp16, the default call)",
         "bwd_mma_det": "ours, tensor cores (fp16, deterministic=True)",
         "bwd_mma_atomic": "ours, tensor cores (fp16, dq='atomic')",
         "bwd_teaching": "ours, teaching kernel (fp32, atomic dQ)",
         "bwd_teaching_det": "ours, teaching kernel (fp32, deterministic dQ)",
         "sdpa_flash_bwd": "SDPA-flash (FlashAttention-2)",
         "sdpa_cudnn_bwd": "SDPA-cuDNN",
         "sdpa_math_bwd": "SDPA-math (stores P)"}
#: the implementations the peak-memory rows measure, and those that recompute P
PEAK_IMPLS = ("bwd_mma", "sdpa_flash_bwd", "sdpa_cudnn_bwd", "sdpa_math_bwd")
RECOMPUTE = ("bwd_mma", "bwd_mma_det", "bwd_mma_atomic", "bwd_teaching", "bwd_teaching_det", "sdpa_flash_bwd",
             "sdpa_cudnn_bwd")
#: ours on tensor cores: bwd_mma, the default call, and the other dQ path a record times beside it —
#: bwd_mma_det (deterministic=True: the separate pass) while the atomics were the default,
#: bwd_mma_atomic (dq="atomic") since the separate pass is
MMA_IMPLS = ("bwd_mma", "bwd_mma_det", "bwd_mma_atomic")
#: the dQ paths, as labels name them: fp32 atomicAdd, one bulk reduction a query block (the wgmma
#: kernel's), or the separate pass in a fixed order
DQ_WORDS = {"atomic": "atomic dQ", "bulk": "bulk dQ", "separate": "deterministic dQ"}
#: the dQ path of the implementations whose call fixes it (bwd_mma's is the default of its time)
_DQ_OF_CALL = {"bwd_mma_det": "separate", "bwd_mma_atomic": "atomic", "bwd_teaching": "atomic",
               "bwd_teaching_det": "separate"}
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


_MAIN_KERNEL = re.compile(r"\bflash_bwd_mma<([^<>]*)>")
_WGMMA_KERNEL = re.compile(r"\bflash_bwd_wgmma<([^<>]*)>")
_DQ_KERNEL = re.compile(r"\bflash_bwd_mma_dq\b")
#: the wgmma kernel's DQ template argument (kernels/flash_bwd_wgmma.cu; backward.BWD_WGMMA_DQ)
_WGMMA_DQ = {"0": "separate", "1": "atomic", "2": "bulk"}


def kernel_dq(name) -> str | None:
    """The dQ path a tensor-core kernel name (``<impl>_kernel_name``: the longest GPU activity of a
    call, demangled, perhaps cut short) shows: "atomic" for the main kernel
    ``flash_bwd_mma<DT, Bc, D, CAUSAL, ATOMIC_DQ, …>`` with ATOMIC_DQ true, or with only four
    template arguments (built before the flag existed, when atomics were its only dQ); "separate"
    for ATOMIC_DQ false or the dQ pass ``flash_bwd_mma_dq``; for the Hopper kernel
    ``flash_bwd_wgmma<DT, Bc, D, CAUSAL, DQ>`` its DQ: 0 "separate", 1 "atomic", 2 "bulk"; None for
    anything else."""
    name = name if isinstance(name, str) else ""
    if _DQ_KERNEL.search(name):
        return "separate"
    w = _WGMMA_KERNEL.search(name)
    if w:
        args = [a.strip() for a in w[1].split(",")]
        return _WGMMA_DQ.get(args[4]) if len(args) > 4 else None
    m = _MAIN_KERNEL.search(name)
    if not m:
        return None
    args = [a.strip() for a in m[1].split(",")]
    if len(args) == 4:
        return "atomic"
    return {"true": "atomic", "1": "atomic", "false": "separate", "0": "separate"}.get(args[4]) if len(args) > 4 else None


def _ran(r: dict, impl: str) -> bool:
    return any(_num(r.get(f"{impl}_{t}")) for t in ("call_ms", "kernel_ms"))


def dq_path(res: dict, impl: str) -> str | None:
    """How ``impl`` added up dQ in this record: "atomic" or "separate" (the deterministic pass).
    The teaching kernel's implementations by their call (``bwd_teaching`` atomics,
    ``bwd_teaching_det`` the pass); ours on tensor cores (MMA_IMPLS) as its rows' kernel names say
    (``kernel_dq``), else as their ``<impl>_dq`` says (written with the call since the separate pass
    became the default), else by the call: bwd_mma_det "separate", bwd_mma_atomic "atomic", and
    bwd_mma, the default call, "separate" in a record that times bwd_mma_atomic beside it and
    "atomic" otherwise (the records made before). None for SDPA's, for one of ours on tensor
    cores that ran nowhere in the record, and where its rows disagree. LookupError like
    ``bwd_record``."""
    rows = [r for r in bwd_record(res)["bench"] if _ran(r, impl)]
    if impl in ("bwd_teaching", "bwd_teaching_det"):
        return _DQ_OF_CALL[impl]
    if impl not in MMA_IMPLS or not rows:
        return None
    found = {kernel_dq(r.get(f"{impl}_kernel_name")) for r in rows} - {None}
    if not found:
        found = {r[f"{impl}_dq"] for r in rows if r.get(f"{impl}_dq") in DQ_WORDS}
    if found:
        return found.pop() if len(found) == 1 else None
    if impl in _DQ_OF_CALL:
        return _DQ_OF_CALL[impl]
    return "separate" if any(_ran(r, "bwd_mma_atomic") for r in bwd_record(res)["bench"]) else "atomic"


def impl_label(res: dict, impl: str) -> str:
    """An implementation's name on screen for this record: for ours on tensor cores the dQ path
    its kernels ran (``dq_path``), e.g. "ours, tensor cores (fp16, atomic dQ)", "ours, tensor
    cores (fp16, deterministic dQ)" or "ours, tensor cores (fp16, bulk dQ)" ("ours, tensor cores
    (fp16)" when the record does not say); ``IMPLS[impl]`` for the others."""
    if impl in MMA_IMPLS:
        path = dq_path(res, impl)
        return f"ours, tensor cores (fp16{', ' + DQ_WORDS[path] if path else ''})"
    return IMPLS.get(impl, impl)


def kernel_forms(res: dict, impl: str) -> list[str]:
    """The tensor-core kernels ``impl``'s rows timed, as their ``<impl>_kernel_name`` shows them,
    e.g. "flash_bwd_mma with ATOMIC_DQ = true", "flash_bwd_mma with 4 template arguments (built
    before ATOMIC_DQ existed)", "flash_bwd_mma_dq"; sorted, [] where no row names one."""
    out = set()
    for r in bwd_record(res)["bench"]:
        name = r.get(f"{impl}_kernel_name") or ""
        m = _MAIN_KERNEL.search(name) if isinstance(name, str) else None
        w = _WGMMA_KERNEL.search(name) if isinstance(name, str) else None
        if isinstance(name, str) and _DQ_KERNEL.search(name):
            out.add("flash_bwd_mma_dq")
        elif w:
            args = [a.strip() for a in w[1].split(",")]
            out.add(f"flash_bwd_wgmma with DQ = {args[4]} ({_WGMMA_DQ.get(args[4], '?')})" if len(args) > 4
                    else "flash_bwd_wgmma")
        elif m:
            args = [a.strip() for a in m[1].split(",")]
            out.add(f"flash_bwd_mma with ATOMIC_DQ = {args[4]}" if len(args) > 4 else
                    f"flash_bwd_mma with {len(args)} template arguments (built before ATOMIC_DQ existed)")
    return sorted(out)


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
    for each of MMA_IMPLS (ours on tensor cores): ``<impl>_<call|kernel>_vs_<theirs>`` = their
    time ÷ ours (above 1: ours is faster) for theirs in THEIRS, and ``<impl>_fwdbwd_vs_<theirs>``."""
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
        for ours in MMA_IMPLS:
            for other in THEIRS:
                for m, key in (("call", "call_ms"), ("kernel", "kernel_ms"), ("fwdbwd", "fwdbwd_ms")):
                    a, b = row.get(f"{other}_{key}"), row.get(f"{ours}_{key}")
                    if a is not None and b:
                        row[f"{ours}_{m}_vs_{other}"] = a / b
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
    """{impl: {"shapes", "equal", "dQ", "dK", "dV", "runs", "deterministic", "dq"}}: of the shapes
    whose repeated calls the record compared bit for bit, how many gave the same bits every time
    (all three gradients, and each one), the runs per shape, whether its dQ path promises the
    same bits (the record's flag: the deterministic pass), and that path (``dq_path``: "atomic",
    "separate" or None); implementations in the record's order."""
    out: dict = {}
    rec = bwd_record(res)
    for x in rec.get("deterministic", []):
        s = out.setdefault(x["impl"], {"shapes": 0, "equal": 0, "dQ": 0, "dK": 0, "dV": 0, "runs": set(),
                                       "deterministic": bool(x.get("deterministic")),
                                       "dq": dq_path(rec, x["impl"]) or x.get("dq")})
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


#: the kernels whose two dQ paths a record may time (``dq_twins``, ``det_cost``)
DET_KERNELS = ("bwd_teaching", "bwd_mma")


def dq_twins(res: dict, kernel: str = "bwd_teaching") -> tuple[str, str] | None:
    """(non-deterministic, deterministic): the record's implementations of one kernel with a dQ path
    that adds with atomics or bulk reductions and with the separate pass. "bwd_teaching" (the fp32
    teaching kernel): ("bwd_teaching", "bwd_teaching_det"). "bwd_mma" (ours on tensor cores): of
    MMA_IMPLS that ran, in that order, the first whose ``dq_path`` is "atomic" or "bulk" and the
    first whose path is "separate" — ("bwd_mma", "bwd_mma_det") in records made while the atomics
    were the default and since the wgmma kernel's bulk dQ is (sm_90), ("bwd_mma_atomic", "bwd_mma")
    in between; None where the record has not both. ValueError for another kernel; LookupError
    like ``bwd_record``."""
    if kernel not in DET_KERNELS:
        raise ValueError(f"det_cost compares {' or '.join(DET_KERNELS)} with its deterministic twin, not {kernel!r}")
    if kernel == "bwd_teaching":
        return ("bwd_teaching", "bwd_teaching_det")
    by: dict = {}
    for impl in MMA_IMPLS:
        path = dq_path(res, impl)
        if path is not None:
            by.setdefault("separate" if path == "separate" else "added", impl)
    return (by["added"], by["separate"]) if len(by) == 2 else None


def det_cost(res: dict, impl: str = "bwd_teaching") -> list[dict]:
    """What the deterministic dQ costs one backward: per bench row where both implementations of
    ``dq_twins(res, impl)`` ran (``impl``: "bwd_teaching", the fp32 teaching kernel, or "bwd_mma",
    ours on tensor cores, whichever of its implementations the record has with each dQ path),
    sorted by (d, causal, N): d, causal, N and the deterministic one's time ÷ the atomic one's
    (dimensionless: two medians in ms divided, one method on both sides) by public call (``call``)
    and, where both have it, kernel-only (``kernel``). Above 1: the deterministic backward is
    slower. [] when the record has no such row (one made before the twin was timed). ValueError
    for an ``impl`` not in DET_KERNELS; LookupError like ``bwd_record``."""
    twins = dq_twins(res, impl)
    if twins is None:
        return []
    impl, det = twins
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
