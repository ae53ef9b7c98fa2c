"""Correctness grid, benchmark, block-size sweep and device ceilings for the tensor-core kernels.

Everything here runs on a GPU (CuPy; torch where installed, for SDPA). Timings are medians
of ``cupyx.profiler.benchmark`` GPU times (CUDA events on the legacy default stream, which
torch also uses), in milliseconds, after warm-up; every implementation is timed the same way
on the same inputs. TFLOP/s counts 4·B·H·N²·d per forward, halved for causal.
"""

from __future__ import annotations

import math

from ..iomodel import flash_forward_io
from .bench import _median_ms, attention_flops, cupy_peak_bytes
from .mma import LOG2E, _out_like, compile_mma, launch_mma
from .mma_limits import mma_blocks
from .operands import Operand, as_operand, bf16_bits_to_float32
from .runner import _cupy, compile_kernel, launch, naive_attention_gpu


def _values64(op: Operand):
    """The operand's values (as the kernel reads them) as a float64 CuPy array (B, H, N, d)."""
    cp = _cupy()
    x = op.keep
    if op.kind == "torch":
        return cp.asarray(x.float().contiguous()).astype(cp.float64)
    if op.dtype == "bfloat16":
        return bf16_bits_to_float32(x).astype(cp.float64)
    return x.astype(cp.float64)


def reference64(Q, K, V, *, causal: bool, scale: float):
    """Dense float64 attention on the GPU (Algorithm 0): (O (B,H,Nq,d), lse (B,H,Nq)).
    Rows that see no key give O = 0, lse = −inf (flashviz.reference's convention)."""
    cp = _cupy()
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
    cp = _cupy()
    rs = cp.random.RandomState(seed)
    Qf, Kf, Vf = (rs.standard_normal((B, H, n, d), dtype=cp.float32) for n in (Nq, Nk, Nk))
    q, k, v = (as_operand(x, nm, dtype) for x, nm in ((Qf, "Q"), (Kf, "K"), (Vf, "V")))
    scale = 1.0 / math.sqrt(d)
    mk = compile_mma(dtype, Br, Bc, d, causal, variant)
    o, O, lse, lse_ptr = _out_like(q)
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


def ceilings(size_bytes: int = 4 << 30) -> dict:
    """The device's measured ceilings: device-to-device copy bandwidth (GB/s, bytes read +
    written) and an 8192³ fp16 / bf16 matmul rate (TFLOP/s) through CuPy (cuBLAS), random
    data, median of 10 after warm-up."""
    cp = _cupy()
    a = cp.empty(size_bytes // 2, dtype=cp.uint8)
    a[...] = 1
    b = cp.empty_like(a)
    t = _median_ms(lambda: b.__setitem__(Ellipsis, a), 10, 3)
    res = {"copy_GBps": 2 * a.nbytes / t / 1e6, "copy_bytes": 2 * a.nbytes}
    del a, b
    n = 8192
    rs = cp.random.RandomState(0)
    x = rs.standard_normal((n, n), dtype=cp.float32).astype(cp.float16)
    y = rs.standard_normal((n, n), dtype=cp.float32).astype(cp.float16)
    t = _median_ms(lambda: cp.matmul(x, y), 10, 3)
    res["matmul_fp16_TFLOPs"] = 2 * n ** 3 / t / 1e9
    try:
        import torch
        xt = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        yt = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        t = _median_ms(lambda: torch.matmul(xt, yt), 10, 3)
        res["matmul_bf16_TFLOPs"] = 2 * n ** 3 / t / 1e9
    except Exception as exc:
        res["matmul_bf16_note"] = f"torch unavailable: {type(exc).__name__}"
    cp.get_default_memory_pool().free_all_blocks()
    return res


def _sdpa(q, k, v, causal, backend):
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    be = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
          "efficient": SDPBackend.EFFICIENT_ATTENTION}[backend]

    def fn():
        with sdpa_kernel(be):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return fn


def _peak(fn) -> int:
    """Peak extra bytes torch's allocator held during one call (reset, call, read)."""
    import torch
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = fn()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    del out
    return int(peak)


def bench_shape(N: int, d: int, causal: bool, *, dtype: str = "float16", variants=("wgmma",),
                tokens: int = 16384, model_dim: int = 2048, repeat: int = 20, warmup: int = 3,
                teaching: bool = True, naive: bool = True, sdpa: bool = True, blocks=None) -> dict:
    """Time one shape (B = tokens/N, H = model_dim/d) for every implementation on the same
    torch inputs (fp16 / bf16 unit normal; the teaching kernel and naive CuPy read the same
    values upcast to float32). Returns a dict of *_ms, *_tflops, ratio_to_sdpa_flash,
    peak bytes, the kernels' error vs SDPA-flash (max abs), and the blocks used."""
    import torch
    cp = _cupy()
    B, H = max(1, tokens // N), model_dim // d
    tdt = torch.float16 if dtype == "float16" else torch.bfloat16
    g = torch.Generator(device="cuda").manual_seed(N + d)
    q, k, v = (torch.randn(B, H, N, d, device="cuda", dtype=tdt, generator=g) for _ in range(3))
    flops = attention_flops(B, H, N, N, d, causal)
    res = {"N": N, "d": d, "B": B, "H": H, "causal": causal, "dtype": dtype, "flops": flops}
    scale = 1.0 / math.sqrt(d)
    ref = None
    if sdpa:
        for be in ("flash", "cudnn", "efficient"):
            try:
                fn = _sdpa(q, k, v, causal, be)
                out = fn()
                if be == "flash":
                    ref = out
                ms = _median_ms(fn, repeat, warmup)
                res[f"sdpa_{be}_ms"] = ms
                res[f"sdpa_{be}_tflops"] = flops / ms / 1e9
                res[f"sdpa_{be}_peak_bytes"] = _peak(fn)
            except Exception as exc:
                res[f"sdpa_{be}_error"] = f"{type(exc).__name__}: {str(exc)[:160]}"
            torch.cuda.empty_cache()
    qo, ko, vo = (as_operand(x, n, None) for x, n in ((q, "Q"), (k, "K"), (v, "V")))
    for variant in variants:
        Br, Bc = (blocks or {}).get(variant) or (None, None)
        try:
            mk = compile_mma(dtype, Br, Bc, d, causal, variant)
            o, O, lse, lp = _out_like(qo)
            fn = lambda: launch_mma(mk, qo, ko, vo, o, lp, scale)  # noqa: E731
            fn()
            torch.cuda.synchronize()
            key = variant.replace(".", "")
            if ref is not None:
                res[f"{key}_max_abs_vs_flash"] = float((O.float() - ref.float()).abs().max())
            ms = _median_ms(fn, repeat, warmup)
            res.update({f"{key}_ms": ms, f"{key}_tflops": flops / ms / 1e9, f"{key}_Br": mk.Br,
                        f"{key}_Bc": mk.Bc, f"{key}_regs": mk.num_regs})
            from .mma import flash_forward_mma
            res[f"{key}_peak_bytes"] = _peak(lambda: flash_forward_mma(q, k, v, causal=causal, variant=variant,
                                                                       Br=mk.Br, Bc=mk.Bc))
            if "sdpa_flash_ms" in res:
                res[f"{key}_ratio_to_sdpa_flash"] = res["sdpa_flash_ms"] / ms
            if "sdpa_cudnn_ms" in res:
                res[f"{key}_ratio_to_sdpa_cudnn"] = res["sdpa_cudnn_ms"] / ms
            del O, lse, o
        except Exception as exc:
            res[f"{variant.replace('.', '')}_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    if teaching or naive:
        Q32, K32, V32 = (cp.asarray(x.float().reshape(B * H, N, d)) for x in (q, k, v))
        if teaching:
            try:
                ck = compile_kernel(64, 64, d)
                O32 = cp.empty_like(Q32)
                L32 = cp.empty(Q32.shape[:2], dtype=cp.float32)
                fn = lambda: launch(ck, Q32, K32, V32, O32, L32, causal=causal, scale=scale)  # noqa: E731
                ms = _median_ms(fn, max(3, repeat // 4), 1)
                res.update(teaching_ms=ms, teaching_tflops=flops / ms / 1e9)
                del O32, L32
            except Exception as exc:
                res["teaching_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
        if naive:
            s_bytes = B * H * N * N * 4
            free = cp.cuda.runtime.memGetInfo()[0]
            if s_bytes > 0.6 * free:
                res["naive_note"] = f"skipped: S needs {s_bytes / 1e9:.1f} GB"
            else:
                fn = lambda: naive_attention_gpu(Q32, K32, V32, causal=causal, scale=scale)  # noqa: E731
                ms = _median_ms(fn, max(3, repeat // 4), 1)
                res.update(naive_ms=ms, naive_tflops=flops / ms / 1e9, naive_S_bytes=s_bytes,
                           naive_peak_bytes=cupy_peak_bytes(fn))
        del Q32, K32, V32
        cp.get_default_memory_pool().free_all_blocks()
    del q, k, v, ref
    torch.cuda.empty_cache()
    return res


def block_sweep(N: int = 4096, d: int = 64, *, causal: bool = False, dtype: str = "float16",
                variant: str = "wgmma", tokens: int = 16384, model_dim: int = 2048, repeat: int = 20) -> list[dict]:
    """Runtime of the kernel for every supported (Br, Bc) at one shape, beside the IO model's
    HBM bytes for the same blocks (flash_forward_io, itemsize 2, all heads)."""
    import torch
    B, H = max(1, tokens // N), model_dim // d
    tdt = torch.float16 if dtype == "float16" else torch.bfloat16
    q, k, v = (torch.randn(B, H, N, d, device="cuda", dtype=tdt) for _ in range(3))
    qo, ko, vo = (as_operand(x, n, None) for x, n in ((q, "Q"), (k, "K"), (v, "V")))
    flops = attention_flops(B, H, N, N, d, causal)
    out = []
    for Br, Bc in mma_blocks(d, variant):
        mk = compile_mma(dtype, Br, Bc, d, causal, variant)
        o, O, lse, lp = _out_like(qo)
        fn = lambda: launch_mma(mk, qo, ko, vo, o, lp, 1.0 / math.sqrt(d))  # noqa: E731
        ms = _median_ms(fn, repeat, 3)
        io = flash_forward_io(N, N, d, Br=Br, Bc=Bc, itemsize=2, causal=causal).scaled(B * H)
        out.append({"variant": variant, "N": N, "d": d, "B": B, "H": H, "Br": Br, "Bc": Bc, "causal": causal,
                    "ms": ms, "tflops": flops / ms / 1e9, "model_hbm_bytes": io.hbm_bytes,
                    "regs": mk.num_regs, "smem_bytes": mk.smem_bytes})
        del O, lse, o
    return out


__all__ = ["check_case", "check_grid", "ceilings", "bench_shape", "block_sweep", "reference64", "LOG2E"]
