"""Correctness grid, benchmark, block-size sweep and device ceilings for the tensor-core kernels.

Everything here runs on a GPU (CuPy; torch for SDPA and the profiler). Every implementation
is timed the same way on the same inputs, through its public call, by ``timing.measure``:
``<impl>_call_ms`` (the public call, CUDA events, median), ``<impl>_kernel_ms`` (kernel-only:
the profiler's kernel durations per call, median) and ``<impl>_host_us`` (host time per
call). TFLOP/s counts 4·B·H·N²·d per forward, halved for causal.
"""

from __future__ import annotations

import math

from ...iomodel import flash_forward_io
from ...mma_limits import IMPL_NAMES, mma_blocks
from ..common import LOG2E, cupy, device_facts
from ..teaching.kernel import flash_forward_gpu, naive_attention_gpu
from ..timing import (
    CALL_METHOD,
    HOST_METHOD,
    KERNEL_METHOD,
    attention_flops,
    call_times_ms,
    cupy_peak_bytes,
    host_times_us,
    input_sets,
    measure,
    profiled,
)
from .kernel import compile_mma, flash_forward_mma, launch_mma, out_like
from .operands import Operand, as_operand, bf16_bits_to_float32


def _values64(op: Operand):
    """The operand's values (as the kernel reads them) as a float64 CuPy array (B, H, N, d)."""
    cp = cupy()
    x = op.keep
    if op.kind == "torch":
        return cp.asarray(x.float().contiguous()).astype(cp.float64)
    if op.dtype == "bfloat16":
        return bf16_bits_to_float32(x).astype(cp.float64)
    return x.astype(cp.float64)


def reference64(Q, K, V, *, causal: bool, scale: float):
    """Dense float64 attention on the GPU (Algorithm 0): (O (B,H,Nq,d), lse (B,H,Nq)).
    Rows that see no key give O = 0, lse = −inf (flashviz.reference's convention)."""
    cp = cupy()
    Nq, Nk = Q.shape[2], K.shape[2]
    S = cp.matmul(Q, K.transpose(0, 1, 3, 2)) * scale
    if causal:
        r = cp.arange(Nq)[:, None]
        c = cp.arange(Nk)[None, :]
        S = cp.where(c <= r + Nk - Nq, S, -cp.inf)
    m = S.max(axis=-1, keepdims=True)
    m_safe = cp.where(cp.isneginf(m), 0.0, m)
    P = cp.exp(S - m_safe)
    l = P.sum(axis=-1, keepdims=True)
    O = cp.matmul(P / cp.where(l == 0, 1.0, l), V)
    lse = cp.where(l[..., 0] == 0, -cp.inf, m_safe[..., 0] + cp.log(cp.where(l[..., 0] == 0, 1.0, l[..., 0])))
    return O, lse


ROW_FACTOR = 10  #: a row may be off by 10x the overall tolerance (a wrong row is off by ~1)


def check_case(variant: str, dtype: str, d: int, causal: bool, Nq: int, Nk: int, Br: int, Bc: int,
               B: int = 2, H: int = 3, seed: int = 0) -> dict:
    """One correctness check: fresh unit-normal inputs, O poisoned with NaN before the launch,
    compared with float64 dense attention on the same (rounded) inputs.

    Returns {"variant", "dtype", "d", "causal", "Nq", "Nk", "Br", "Bc", "rel_err"
    (‖O − O_ref‖_F / ‖O_ref‖_F), "row_rel_err" (the worst row's ‖ΔO_r‖ / max(‖O_ref,r‖, 1e-3)),
    "lse_max_abs_err" (finite rows), "nan" (any NaN in O), "lse_inf_ok" (−inf exactly where
    the reference has −inf), "tol", "row_tol", "pass"} where pass needs rel_err <= tol (2e-3
    fp16, 1e-2 bf16), row_rel_err <= ROW_FACTOR·tol, lse error <= 1e-2, no NaN, lse_inf_ok.
    """
    cp = cupy()
    rs = cp.random.RandomState(seed)
    Qf, Kf, Vf = (rs.standard_normal((B, H, n, d), dtype=cp.float32) for n in (Nq, Nk, Nk))
    q, k, v = (as_operand(x, nm, dtype) for x, nm in ((Qf, "Q"), (Kf, "K"), (Vf, "V")))
    scale = 1.0 / math.sqrt(d)
    mk = compile_mma(dtype, Br, Bc, d, causal, variant)
    o, O, lse, lse_ptr = out_like(q)
    O.view(cp.uint16)[...] = 0x7E00 if dtype == "float16" else 0x7FC0   # NaN poison
    lse[...] = cp.nan
    launch_mma(mk, q, k, v, o, lse_ptr, scale)
    cp.cuda.Device().synchronize()
    O64 = (bf16_bits_to_float32(O) if dtype == "bfloat16" else O).astype(cp.float64)
    Oref, Lref = reference64(_values64(q), _values64(k), _values64(v), causal=causal, scale=scale)
    nan = bool(cp.isnan(O64).any())
    den = float(cp.linalg.norm(Oref)) or 1.0
    diff = cp.nan_to_num(O64, nan=1e6) - Oref
    rel = float(cp.linalg.norm(diff)) / den
    # Per row too: one wrong row among thousands hardly moves the norm over all of O.
    row_rel = float((cp.linalg.norm(diff, axis=-1) / cp.maximum(cp.linalg.norm(Oref, axis=-1), 1e-3)).max())
    fin = cp.isfinite(Lref)
    lse_err = float(cp.abs(lse - Lref)[fin].max()) if bool(fin.any()) else 0.0
    inf_ok = bool((cp.isneginf(lse) == cp.isneginf(Lref)).all())
    tol = 2e-3 if dtype == "float16" else 1e-2
    ok = (rel <= tol) and (row_rel <= ROW_FACTOR * tol) and (lse_err <= 1e-2) and not nan and inf_ok
    return {"variant": variant, "dtype": dtype, "d": d, "causal": causal, "Nq": Nq, "Nk": Nk, "Br": Br,
            "Bc": Bc, "rel_err": rel, "row_rel_err": row_rel, "lse_max_abs_err": lse_err, "nan": nan,
            "lse_inf_ok": inf_ok, "tol": tol, "row_tol": ROW_FACTOR * tol, "pass": bool(ok)}


def check_grid(variant: str, *, quick: bool = False) -> list[dict]:
    """The correctness grid: dtypes × d ∈ {64, 128} × causal × block sizes × shapes including
    N not a multiple of the blocks, N < Br, N = 1, Nq ≠ Nk (both ways). Returns check_case
    records (errors recorded as {"error": ...}, pass False)."""
    shapes = [(1, 1), (17, 17), (64, 64), (100, 100), (128, 128), (257, 257), (1000, 1000), (2048, 2048),
              (77, 300), (300, 77)]
    if quick:
        shapes = [(17, 17), (257, 257), (1000, 1000), (77, 300), (300, 77)]
    out = []
    for dtype in ("float16", "bfloat16"):
        for d in (64, 128):
            for Br, Bc in mma_blocks(d, variant):
                for causal in (False, True):
                    for Nq, Nk in shapes:
                        try:
                            out.append(check_case(variant, dtype, d, causal, Nq, Nk, Br, Bc,
                                                  seed=len(out)))
                        except Exception as exc:
                            out.append({"variant": variant, "dtype": dtype, "d": d, "causal": causal,
                                        "Nq": Nq, "Nk": Nk, "Br": Br, "Bc": Bc, "pass": False,
                                        "error": f"{type(exc).__name__}: {str(exc)[:300]}"})
    return out


def _median(fn) -> float:
    import numpy as np
    return float(np.median(call_times_ms(fn, repeat=10, warmup=3)))


def ceilings(size_bytes: int = 4 << 30) -> dict:
    """The device's measured ceilings: device-to-device copy bandwidth (GB/s, bytes read +
    written) and an 8192³ fp16 / bf16 matmul rate (TFLOP/s) through CuPy and torch (cuBLAS),
    random data, median of 10 back-to-back calls timed with CUDA events after warm-up."""
    cp = cupy()
    a = cp.empty(size_bytes // 2, dtype=cp.uint8)
    a[...] = 1
    b = cp.empty_like(a)
    t = _median(lambda a=a, b=b: b.__setitem__(Ellipsis, a))
    res = {"copy_GBps": 2 * a.nbytes / t / 1e6, "copy_bytes": 2 * a.nbytes}
    del a, b
    n = 8192
    rs = cp.random.RandomState(0)
    x = rs.standard_normal((n, n), dtype=cp.float32).astype(cp.float16)
    y = rs.standard_normal((n, n), dtype=cp.float32).astype(cp.float16)
    t = _median(lambda: cp.matmul(x, y))
    res["matmul_fp16_TFLOPs"] = 2 * n ** 3 / t / 1e9
    try:
        import torch
        xt = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        yt = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        t = _median(lambda: torch.matmul(xt, yt))
        res["matmul_bf16_TFLOPs"] = 2 * n ** 3 / t / 1e9
    except Exception as exc:
        res["matmul_bf16_note"] = f"torch unavailable: {type(exc).__name__}"
    cp.get_default_memory_pool().free_all_blocks()
    return res


SDPA_BACKENDS = ("flash", "cudnn", "efficient")


def sdpa_backend(name: str):
    """torch's SDPBackend for a backend's short name: "flash" (FlashAttention-2), "cudnn",
    "efficient" (memory-efficient) or "math" (the materialising reference), for
    ``torch.nn.attention.sdpa_kernel``. KeyError for another name; imports torch."""
    from torch.nn.attention import SDPBackend
    return {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}[name]


def torch_peak_bytes(fn) -> int:
    """Peak extra bytes torch's allocator held during one call of ``fn``: its high-water mark
    during the call (statistics reset just before) minus what was allocated before, the call's
    outputs included (they are freed after). Imports torch; synchronises the device."""
    import torch
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = fn()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    del out
    return int(peak)


def _record(res: dict, key: str, calls, phase: str, host: dict, **kw) -> None:
    """One implementation's figures into res. phase "timed": <key>_call_ms, and host[key] =
    (calls, queued calls per round) for ``_record_host``; phase "kernel": <key>_kernel_ms,
    <key>_kernel_name, <key>_launches (GPU activities per call). Errors as <key>_error."""
    try:
        t = measure(calls, parts=("call",) if phase == "timed" else ("kernel",), **kw)
    except Exception as exc:
        res[f"{key}_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        return
    if phase == "timed":
        res[f"{key}_call_ms"] = t["call_ms"]
        host[key] = (calls, t["host_repeat"])
        return
    res.update({f"{key}_kernel_ms": t["kernel_ms"], f"{key}_kernel_name": t["kernel_name"],
                f"{key}_launches": t["per_call"]})
    if "kernel_note" in t:
        res[f"{key}_kernel_note"] = t["kernel_note"]


def _record_host(res: dict, host: dict, contexts: dict) -> None:
    """<key>_host_us for every implementation in ``host``, in rounds that alternate between
    them (``timing.host_times_us``); host_after_profiler says whether a profiler session had
    run in this process before (host figures then read high)."""
    if not host:
        return
    res["host_after_profiler"] = profiled()
    try:
        us = host_times_us({k: c for k, (c, _) in host.items()}, repeat={k: n for k, (_, n) in host.items()},
                           contexts=contexts)
    except Exception:                       # one failed: time each alone, and say which failed
        us = {}
        for key, (calls, n) in host.items():
            try:
                us.update(host_times_us({key: calls}, repeat=n, contexts=contexts))
            except Exception as exc:
                res[f"{key}_host_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    res.update({f"{key}_host_us": v for key, v in us.items()})


def check_streams() -> None:
    """Raise RuntimeError unless CuPy's current stream is torch's: the timing methods
    (``timing``) record CUDA events on CuPy's current stream, and every implementation compared
    must launch there for the times to be comparable."""
    import torch
    cp = cupy()
    ours, theirs = cp.cuda.get_current_stream().ptr, torch.cuda.current_stream().cuda_stream
    if ours != theirs:
        raise RuntimeError(f"CuPy's current stream ({ours:#x}) is not torch's ({theirs:#x}): the timings "
                           f"would not be comparable")


def bench_shape(N: int, d: int, causal: bool, *, dtype: str = "float16", variants=("wgmma",),
                tokens: int = 16384, model_dim: int = 2048, repeat: int = 30, warmup: int = 3,
                teaching: bool = True, naive: bool = True, sdpa: bool = True, blocks=None,
                phase: str = "all") -> dict:
    """Time one shape (B = tokens/N, H = model_dim/d) for every implementation, each through
    its public call on the same inputs (fp16 / bf16 unit normal torch tensors; the teaching
    kernel and naive CuPy read the same values upcast to float32), with ``timing.measure``.

    Returns a dict with N, d, B, H, causal, dtype, flops, input_sets, and for each
    implementation key (sdpa_flash, sdpa_cudnn, sdpa_efficient, wgmma, mmasync, teaching,
    naive): <key>_call_ms, <key>_kernel_ms, <key>_host_us, <key>_kernel_name,
    <key>_launches, <key>_peak_bytes (extra device memory of one call); our kernels also
    <key>_Br, <key>_Bc, <key>_regs and <key>_max_abs_vs_flash (their O vs SDPA-flash's).
    A failing implementation gives <key>_error instead. SDPA's backend is chosen outside
    the timed region (``sdpa_kernel`` entered once per backend).

    phase: "timed" (public call and host time of every implementation, peaks, the check
    against SDPA-flash; no profiler), "kernel" (kernel-only times, torch.profiler) or "all"
    (both, in that order). A benchmark of many shapes runs every shape "timed" first and
    then every shape "kernel" and merges the rows, because a profiler session leaves the
    process's later host times high (``timing.measure``); host_after_profiler records
    whether one had run before this shape's host times."""
    kw = dict(dtype=dtype, variants=variants, tokens=tokens, model_dim=model_dim, repeat=repeat, warmup=warmup,
              teaching=teaching, naive=naive, sdpa=sdpa, blocks=blocks)
    if phase == "all":
        res = bench_shape(N, d, causal, phase="timed", **kw)
        return merge_kernel_pass(res, bench_shape(N, d, causal, phase="kernel", **kw))
    if phase not in ("timed", "kernel"):
        raise ValueError(f"phase must be 'timed', 'kernel' or 'all', got {phase!r}")
    timed = phase == "timed"
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel
    cp = cupy()
    check_streams()
    B, H = max(1, tokens // N), model_dim // d
    tdt = torch.float16 if dtype == "float16" else torch.bfloat16
    set_bytes = 4 * B * H * N * d * 2
    n_sets = input_sets(set_bytes, device_facts().l2_bytes)
    g = torch.Generator(device="cuda").manual_seed(N + d)
    sets = [tuple(torch.randn(B, H, N, d, device="cuda", dtype=tdt, generator=g) for _ in range(3))
            for _ in range(n_sets)]
    flops = attention_flops(B, H, N, N, d, causal)
    res = {"N": N, "d": d, "B": B, "H": H, "causal": causal, "dtype": dtype, "flops": flops,
           "input_sets": n_sets, "input_set_bytes": set_bytes}
    scale = 1.0 / math.sqrt(d)
    q0, k0, v0 = sets[0]
    ref = None
    host, contexts = {}, {}           # host time: measured at the end for all, rounds alternating
    if sdpa:
        for be in SDPA_BACKENDS:
            key = f"sdpa_{be}"
            with sdpa_kernel(sdpa_backend(be)):      # backend selection outside the timed calls
                calls = [lambda q=q, k=k, v=v: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                         for q, k, v in sets]
                try:
                    out = calls[0]()
                except Exception as exc:
                    res[f"{key}_error"] = f"{type(exc).__name__}: {str(exc)[:160]}"
                    continue
                if be == "flash" and timed:
                    ref = out
                del out
                _record(res, key, calls, phase, host, repeat=repeat, warmup=warmup)
                contexts[key] = lambda be=be: sdpa_kernel(sdpa_backend(be))
                if timed:
                    res[f"{key}_peak_bytes"] = torch_peak_bytes(calls[0])
            torch.cuda.empty_cache()
    for variant in variants:
        # the record-key prefix (limits.impl_name); an unknown variant keeps its own name, so the
        # compile error below is recorded as <variant>_error
        key = IMPL_NAMES.get(variant, variant)
        Br, Bc = (blocks or {}).get(variant) or (None, None)
        try:
            mk = compile_mma(dtype, Br, Bc, d, causal, variant)
            calls = [lambda q=q, k=k, v=v: flash_forward_mma(q, k, v, causal=causal, Br=Br, Bc=Bc, variant=variant)
                     for q, k, v in sets]
            O, _ = calls[0]()
            torch.cuda.synchronize()
        except Exception as exc:
            res[f"{key}_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
            continue
        res.update({f"{key}_Br": mk.Br, f"{key}_Bc": mk.Bc, f"{key}_regs": mk.num_regs})
        if ref is not None:
            res[f"{key}_max_abs_vs_flash"] = float((O.float() - ref.float()).abs().max())
        del O
        _record(res, key, calls, phase, host, repeat=repeat, warmup=warmup)
        if timed:
            res[f"{key}_peak_bytes"] = torch_peak_bytes(calls[0])
    del ref
    if teaching or naive:
        Q32, K32, V32 = (cp.asarray(x.float()) for x in (q0, k0, v0))
        if teaching:
            calls = lambda: flash_forward_gpu(Q32, K32, V32, Br=64, Bc=64, causal=causal, scale=scale)  # noqa: E731
            _record(res, "teaching", calls, phase, host, repeat=max(3, repeat // 4), warmup=1)
            res.update(teaching_Br=64, teaching_Bc=64)
        if naive:
            s_bytes = B * H * N * N * 4
            free = cp.cuda.runtime.memGetInfo()[0] + cp.get_default_memory_pool().free_bytes()
            if s_bytes > 0.6 * free:
                res["naive_note"] = f"skipped: S needs {s_bytes / 1e9:.1f} GB"
            else:
                calls = lambda: naive_attention_gpu(Q32, K32, V32, causal=causal, scale=scale)  # noqa: E731
                _record(res, "naive", calls, phase, host, repeat=max(3, repeat // 4), warmup=1)
                res["naive_S_bytes"] = s_bytes
                if timed:
                    res["naive_peak_bytes"] = cupy_peak_bytes(calls)
    if timed:
        _record_host(res, host, contexts)
    host.clear()
    if teaching or naive:
        del Q32, K32, V32
        cp.get_default_memory_pool().free_all_blocks()
    del sets, q0, k0, v0
    torch.cuda.empty_cache()
    return res


def block_sweep(N: int = 4096, d: int = 64, *, causal: bool = False, dtype: str = "float16",
                variant: str = "wgmma", tokens: int = 16384, model_dim: int = 2048, repeat: int = 30,
                phase: str = "all") -> list[dict]:
    """Every supported (Br, Bc) of one kernel at one shape, timed like ``bench_shape`` (the
    public call with those blocks: call_ms and host_us in phase "timed", kernel_ms and
    kernel_tflops — FLOPs over kernel_ms — in phase "kernel"; "all" does both, in that
    order), beside the IO model's HBM bytes for the same blocks (flash_forward_io,
    itemsize 2, all heads)."""
    if phase == "all":
        rows = block_sweep(N, d, causal=causal, dtype=dtype, variant=variant, tokens=tokens, model_dim=model_dim,
                           repeat=repeat, phase="timed")
        kern = block_sweep(N, d, causal=causal, dtype=dtype, variant=variant, tokens=tokens, model_dim=model_dim,
                           repeat=repeat, phase="kernel")
        return merge_sweep_passes(rows, kern)
    if phase not in ("timed", "kernel"):
        raise ValueError(f"phase must be 'timed', 'kernel' or 'all', got {phase!r}")
    import torch
    B, H = max(1, tokens // N), model_dim // d
    tdt = torch.float16 if dtype == "float16" else torch.bfloat16
    g = torch.Generator(device="cuda").manual_seed(N + d)
    q, k, v = (torch.randn(B, H, N, d, device="cuda", dtype=tdt, generator=g) for _ in range(3))
    flops = attention_flops(B, H, N, N, d, causal)
    out = []
    for Br, Bc in mma_blocks(d, variant, device_facts().smem_optin):
        row = {"variant": variant, "N": N, "d": d, "B": B, "H": H, "Br": Br, "Bc": Bc, "causal": causal}
        out.append(row)
        try:                                 # one block that fails is one row with its error
            mk = compile_mma(dtype, Br, Bc, d, causal, variant)
            row.update(regs=mk.num_regs, smem_bytes=mk.smem_bytes)
            call = lambda Br=Br, Bc=Bc: flash_forward_mma(q, k, v, causal=causal, Br=Br, Bc=Bc, variant=variant)  # noqa: E731
            if phase == "timed":
                t = measure(call, repeat=repeat, parts=("call", "host"))
                io = flash_forward_io(N, N, d, Br=Br, Bc=Bc, itemsize=2, causal=causal).scaled(B * H)
                row.update(call_ms=t["call_ms"], host_us=t["host_us"], model_hbm_bytes=io.hbm_bytes,
                           host_after_profiler=profiled())
            else:
                t = measure(call, repeat=repeat, parts=("kernel",))
                row.update(kernel_ms=t["kernel_ms"], kernel_tflops=flops / t["kernel_ms"] / 1e9)
        except Exception as exc:
            row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    return out


def merge_kernel_pass(timed: dict, kern: dict) -> dict:
    """The kernel pass's figures into the timed pass's row: an "<x>_error" of the kernel pass
    becomes "<x>_kernel_error" (the timed figures and errors stay as they were)."""
    for k, v in kern.items():
        if k.endswith("_error") or k == "error":
            timed[k[:-len("error")] + "kernel_error"] = v
        elif k not in timed or k.endswith(("_kernel_ms", "_kernel_name", "_launches", "_kernel_note")) \
                or k in ("kernel_ms", "kernel_tflops"):
            timed[k] = v
    return timed


def merge_sweep_passes(timed: list[dict], kern: list[dict]) -> list[dict]:
    """Sweep rows of the two passes merged on (Br, Bc); a kernel-pass error without blocks goes
    on every timed row as kernel_error."""
    by_blocks = {(r.get("Br"), r.get("Bc")): r for r in kern}
    for r in timed:
        k = by_blocks.get((r.get("Br"), r.get("Bc")))
        if k is None and len(kern) == 1 and "error" in kern[0]:
            k = kern[0]
        if k is not None:
            merge_kernel_pass(r, k)
    return timed


METHODS = {"call_ms": CALL_METHOD, "kernel_ms": KERNEL_METHOD, "host_us": HOST_METHOD}

__all__ = ["check_case", "check_grid", "ceilings", "bench_shape", "block_sweep", "merge_kernel_pass", "merge_sweep_passes",
           "sdpa_backend", "torch_peak_bytes", "check_streams", "SDPA_BACKENDS",
           "reference64", "LOG2E", "METHODS"]
