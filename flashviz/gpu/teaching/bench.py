"""Timing and memory measurements of the teaching kernel against the naive CuPy baseline.

Every implementation (the teaching kernel, naive CuPy, torch SDPA) is timed the same way,
through its public call on the same inputs, by ``timing.measure``: call_ms (public call,
CUDA events, median), kernel_ms (kernel-only, the profiler's kernel durations per call,
median), host_us (host time per call). Compilation is timed apart. SDPA runs with torch's
default backend choice (its kernel is reported by name).
"""

from __future__ import annotations

import numpy as np

from ...iomodel import flash_forward_io, standard_attention_io
from ..common import cupy
from ..timing import attention_flops, call_times_ms, cupy_peak_bytes, measure
from .kernel import compile_kernel, flash_forward_gpu, launch, naive_attention_gpu


def _random_qkv(cp, B, H, Nq, Nk, d, seed):
    rs = cp.random.RandomState(seed)
    Q = rs.standard_normal((B, H, Nq, d), dtype=cp.float32)
    K = rs.standard_normal((B, H, Nk, d), dtype=cp.float32)
    V = rs.standard_normal((B, H, Nk, d), dtype=cp.float32)
    return Q, K, V


def relative_error(O_gpu, Q, K, V, *, causal: bool, scale=None, rows: int = 256, heads=None) -> dict:
    """Error of O_gpu (B, H, Nq, d) against flashviz.attention in float64 on the CPU, on the
    last ``rows`` query rows (all keys) of the given (b, h) heads (default first and last).
    Bottom-right causal alignment makes the last rows a valid sub-problem.

    Returns {"rel_err": max over heads of ‖ΔO‖_F / ‖O_ref‖_F, "max_abs_err": max |ΔO|,
    "nan": any NaN in the checked rows, "rows": rows, "heads": [[b, h], …]}.
    """
    from ...reference import attention
    B, H, Nq, _ = O_gpu.shape
    heads = heads or sorted({(0, 0), (B - 1, H - 1)})
    r0 = max(0, Nq - rows)
    rel, mabs, nan = 0.0, 0.0, False
    for b, h in heads:
        q = Q[b, h, r0:].get().astype(np.float64)
        k = K[b, h].get().astype(np.float64)
        v = V[b, h].get().astype(np.float64)
        ref = attention(q, k, v, causal=causal, scale=scale) if Nq == q.shape[0] else None
        if ref is None:  # sub-slice of rows: keep the bottom-right alignment of the full problem
            ref = _ref_last_rows(q, k, v, Nq, causal, scale)
        o = O_gpu[b, h, r0:].get().astype(np.float64)
        nan = nan or bool(np.isnan(o).any())
        den = np.linalg.norm(ref) or 1.0
        rel = max(rel, float(np.linalg.norm(o - ref) / den))
        mabs = max(mabs, float(np.abs(o - ref).max()))
    return {"rel_err": rel, "max_abs_err": mabs, "nan": nan, "rows": int(Nq - r0),
            "heads": [list(x) for x in heads]}


def _ref_last_rows(q, k, v, Nq, causal, scale):
    """float64 attention for the last len(q) rows of an Nq-row problem (bottom-right mask)."""
    from ...reference import attention
    # attention() aligns the mask bottom-right for the sub-problem (len(q), Nk): row r' of the
    # slice is row Nq - len(q) + r' of the full problem, and c <= r' + Nk - len(q) is exactly
    # c <= r + Nk - Nq. So the sub-problem is the same computation.
    return attention(q, k, v, causal=causal, scale=scale)


def _timed(res: dict, prefix: str, calls, flops: float, parts, **kw) -> None:
    """timing.measure(parts) into res: <prefix>call_ms / <prefix>host_us / <prefix>kernel_ms
    (whichever parts ran) and TFLOP/s over each time (<prefix>call_tflops, <prefix>kernel_tflops)."""
    t = measure(calls, parts=parts, **kw)
    for m in ("call", "kernel"):
        if f"{m}_ms" in t:
            res[f"{prefix}{m}_ms"] = t[f"{m}_ms"]
            res[f"{prefix}{m}_tflops"] = flops / t[f"{m}_ms"] / 1e9
    if "host_us" in t:
        res[f"{prefix}host_us"] = t["host_us"]
    if "kernel_name" in t:
        res[f"{prefix}kernel_name"] = t["kernel_name"][:120]


#: benchmark phases: what each one measures (``timing.measure`` parts)
PHASES = {"timed": ("call", "host"), "kernel": ("kernel",)}


def _sdpa_times(B, H, N, d, causal, flops, repeat, warmup, parts) -> dict:
    """torch SDPA (default backend) fp32 and fp16, timed like everything else (``measure``):
    sdpa_<fp32|fp16>_<call_ms|kernel_ms|host_us|...>, with the kernel torch picked."""
    try:
        import torch
        import torch.nn.functional as F
    except Exception as exc:
        return {"sdpa_note": f"torch not importable: {exc}"}
    out = {}
    for dt_name, dt in (("fp32", torch.float32), ("fp16", torch.float16)):
        try:
            g = torch.Generator(device="cuda").manual_seed(0)
            q, k, v = (torch.randn(B, H, N, d, device="cuda", dtype=dt, generator=g) for _ in range(3))
            call = lambda q=q, k=k, v=v: F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # noqa: E731
            _timed(out, f"sdpa_{dt_name}_", call, flops, parts, repeat=repeat, warmup=warmup)
            if f"sdpa_{dt_name}_kernel_name" in out:
                out[f"sdpa_{dt_name}_kernel"] = out.pop(f"sdpa_{dt_name}_kernel_name")
            del q, k, v, call
        except Exception as exc:
            out[f"sdpa_{dt_name}_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
        torch.cuda.empty_cache()
    return out


def derive(res: dict) -> dict:
    """The figures of a ``benchmark`` row that need both phases, added where their inputs
    are there: tflops (= kernel_tflops), model_GBps (model bytes / kernel_ms),
    ratio_naive_over_kernel (kernel-only / kernel-only), ratio_naive_over_call (public call
    / public call). Returns res."""
    if "kernel_ms" in res:
        res["tflops"] = res["kernel_tflops"]
        if "model_hbm_bytes" in res:
            res["model_GBps"] = res["model_hbm_bytes"] / res["kernel_ms"] / 1e6
        if "naive_kernel_ms" in res:
            res["ratio_naive_over_kernel"] = res["naive_kernel_ms"] / res["kernel_ms"]
    if "call_ms" in res and "naive_call_ms" in res:
        res["ratio_naive_over_call"] = res["naive_call_ms"] / res["call_ms"]
    return res


def benchmark(N: int, d: int, *, B: int | None = None, H: int = 32, Br: int = 64, Bc: int = 64,
              causal: bool = False, repeat: int = 10, warmup: int = 2, naive: bool = True,
              sdpa: bool = True, check: bool = True, seed: int = 0, phase: str = "all") -> dict:
    """Time the teaching kernel on (B, H, N, d) float32 random normal inputs, beside naive
    CuPy and torch SDPA, every one through its public call and by the same method
    (``timing.measure``).

    B defaults to 16384 // N (16,384 tokens). Returns a dict with
      call_ms, kernel_ms, host_us (the teaching kernel's public call ``flash_forward_gpu``:
      CUDA-event median; kernel-only from the profiler; host µs per call), compile_ms
      (NVRTC, separate), num_regs, smem_bytes, call_tflops / kernel_tflops (4·B·H·N²·d per
      forward, halved for causal, over each time), model_hbm_bytes
      (flash_forward_io(N, N, d, Br, Bc, itemsize=4).scaled(B·H)) and model_GBps (those bytes
      / kernel_ms); naive_call_ms, naive_kernel_ms, naive_host_us, naive_*_tflops and
      ratio_naive_over_kernel (naive_kernel_ms / kernel_ms: kernel-only against kernel-only)
      and ratio_naive_over_call (public call against public call) for CuPy float32 with S
      materialised (skipped when S would not fit in 80 % of free memory);
      standard_model_hbm_bytes (Algorithm 0); sdpa_fp32_* / sdpa_fp16_* (torch's default
      backend, same method, kernel names recorded); rel_err / max_abs_err / nan against
      float64.
    phase: "timed" (public call and host times, the check; no profiler), "kernel"
    (kernel-only, torch.profiler) or "all" (both, in that order). A benchmark of many
    configurations runs every one "timed" first, then every one "kernel", merges the rows
    and calls ``derive`` (a profiler session leaves later host times high: timing.measure).

    Raises ValueError for unsupported Br/Bc/d or shared memory, RuntimeError without a GPU.
    """
    if phase == "all":
        kw = dict(B=B, H=H, Br=Br, Bc=Bc, causal=causal, repeat=repeat, warmup=warmup, naive=naive, sdpa=sdpa,
                  seed=seed)
        res = benchmark(N, d, check=check, phase="timed", **kw)
        res.update(benchmark(N, d, check=False, phase="kernel", **kw))
        return derive(res)
    if phase not in PHASES:
        raise ValueError(f"phase must be 'timed', 'kernel' or 'all', got {phase!r}")
    parts = PHASES[phase]
    cp = cupy()
    B = B if B is not None else max(1, 16384 // N)
    ck = compile_kernel(Br, Bc, d)
    Q, K, V = _random_qkv(cp, B, H, N, N, d, seed)
    BH = B * H
    scale = 1.0 / np.sqrt(d)
    O = cp.full((BH, N, d), np.nan, dtype=cp.float32)
    lse = cp.empty((BH, N), dtype=cp.float32)
    Qd, Kd, Vd = (x.reshape(BH, N, d) for x in (Q, K, V))
    launch(ck, Qd, Kd, Vd, O, lse, causal=causal, scale=scale)       # poisoned output: the check sees unwritten rows
    cp.cuda.Device().synchronize()
    res = {"N": N, "d": d, "B": B, "H": H, "Br": Br, "Bc": Bc, "causal": bool(causal),
           "compile_ms": ck.compile_ms, "num_regs": ck.num_regs, "local_bytes": ck.local_bytes,
           "smem_bytes": ck.smem_bytes}
    if check:
        res.update(relative_error(O.reshape(B, H, N, d), Q, K, V, causal=causal))
    del O, lse
    flops = attention_flops(B, H, N, N, d, causal)
    res["flops"] = flops
    _timed(res, "", lambda: flash_forward_gpu(Q, K, V, Br=Br, Bc=Bc, causal=causal, scale=scale), flops,
           parts, repeat=repeat, warmup=warmup)
    res.pop("kernel_name", None)
    io = flash_forward_io(N, N, d, Br=Br, Bc=Bc, itemsize=4, causal=causal).scaled(BH)
    res["model_hbm_bytes"] = io.hbm_bytes
    res["standard_model_hbm_bytes"] = standard_attention_io(N, N, d, itemsize=4).scaled(BH).hbm_bytes
    if naive:
        s_bytes = BH * N * N * 4
        free = cp.cuda.runtime.memGetInfo()[0] + cp.get_default_memory_pool().free_bytes()
        if s_bytes > 0.8 * free:
            res["naive_note"] = f"skipped: S needs {s_bytes / 1e9:.1f} GB, {free / 1e9:.1f} GB free"
        else:
            _timed(res, "naive_", lambda: naive_attention_gpu(Q, K, V, causal=causal, scale=scale), flops,
                   parts, repeat=max(3, repeat // 2), warmup=1)
            res.pop("naive_kernel_name", None)
            cp.get_default_memory_pool().free_all_blocks()
    if sdpa:
        del Q, K, V, Qd, Kd, Vd
        cp.get_default_memory_pool().free_all_blocks()
        res.update(_sdpa_times(B, H, N, d, causal, flops, repeat, warmup, parts))
    return derive(res)


def peak_memory(N: int = 65_536, d: int = 64, *, B: int = 1, H: int = 1, Br: int = 64, Bc: int = 64,
                causal: bool = False, naive: bool = True, time_it: bool = True) -> dict:
    """Peak extra GPU memory (bytes) of one forward call: the kernel vs naive CuPy attention.

    Method: the inputs are made first; each call then runs with a fresh cupy.cuda.MemoryPool
    as the allocator, and the pool's total_bytes() after the call is its high-water mark of
    memory held at once (outputs + intermediates; cuBLAS's own small workspace is not
    counted). Defaults: N = 65,536, one head, d = 64, where naive's S alone is N²·4 = 17.2 GB
    and the kernel needs O + lse = N·(d+1)·4 = 16.8 MB. Also reports both times (ms, one
    warm public call each: kernel_call_ms, naive_call_ms) when time_it.
    Returns {"kernel_peak_bytes", "naive_peak_bytes", "ratio", "S_bytes", ...}.
    """
    cp = cupy()
    Q, K, V = _random_qkv(cp, B, H, N, N, d, 1)
    cp.cuda.Device().synchronize()

    measure = cupy_peak_bytes
    compile_kernel(Br, Bc, d)
    res = {"N": N, "d": d, "B": B, "H": H, "Br": Br, "Bc": Bc, "causal": bool(causal),
           "S_bytes": B * H * N * N * 4, "O_lse_bytes": B * H * N * (d + 1) * 4,
           "method": "fresh cupy.cuda.MemoryPool per call; total_bytes() after the call"}
    res["kernel_peak_bytes"] = measure(lambda: flash_forward_gpu(Q, K, V, Br=Br, Bc=Bc, causal=causal))
    if time_it:   # public calls, CUDA events, median of 3 (as timing.call_times_ms)
        res["kernel_call_ms"] = float(np.median(call_times_ms(
            lambda: flash_forward_gpu(Q, K, V, Br=Br, Bc=Bc, causal=causal), 3, 1)))
    if naive:
        try:
            res["naive_peak_bytes"] = measure(lambda: naive_attention_gpu(Q, K, V, causal=causal))
            res["ratio"] = res["naive_peak_bytes"] / res["kernel_peak_bytes"]
            if time_it:
                res["naive_call_ms"] = float(np.median(call_times_ms(
                    lambda: naive_attention_gpu(Q, K, V, causal=causal), 3, 1)))
        except cp.cuda.memory.OutOfMemoryError as exc:
            res["naive_error"] = f"out of memory: {exc}"
        cp.get_default_memory_pool().free_all_blocks()
    return res
