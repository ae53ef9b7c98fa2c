"""Time one configuration of the backward teaching kernel (``kernels/flash_bwd.cu``): what chapter
6's GPU panel (``BackwardGPUPanel``) runs with the explorer's Br and Bc.

``benchmark_backward(N, d, Br=, Bc=, causal=, deterministic=)`` works at the backward benchmark's
shape (``tensorcore.bench_bwd.shape_of``: B·N = 16,384 tokens, H = 2048 / d) on seeded float32
unit-normal Q, K, V and dO. Outside the timed region it computes the forward's O and lse (dense
float32 CuPy, a few heads at a time), runs the backward once and compares the gradients of head
(0, 0) with the float64 dense gradients (``flashviz.backward.attention_backward``). Then it times
the public call ``flash_backward_gpu`` by ``timing.measure``, the method of every flashviz
benchmark (docs/measuring.md): call_ms (public call, CUDA events, median), host_us, and kernel_ms
(kernel-only, torch.profiler, median). FLOPs follow the backward benchmark's convention
(``bench_bwd.bwd_flops``: 2.5 × the forward's matmul FLOPs, causal halved), so a live figure
compares with the recorded ``bwd_teaching`` rows of ``benchmarks/results/bwd-*.json``; the bytes
are the IO model's (``iomodel.flash_backward_io``, float32).

CuPy is imported when called (importing this module needs no GPU); torch only for kernel-only.
"""

from __future__ import annotations

import functools

import numpy as np

from ...backward import attention_backward
from ...checks import check_choice, check_flag, check_int
from ...iomodel import flash_backward_io, standard_backward_io
from ..common import cupy
from ..tensorcore.bench_bwd import bwd_flops, shape_of
from ..timing import measure
from .backward import compile_backward, flash_backward_gpu
from .limits import check_bwd_sizes

#: what each phase measures (``timing.measure`` parts), as ``teaching.bench.benchmark``'s phases
PHASES = {"timed": ("call", "host"), "kernel": ("kernel",), "all": ("call", "host", "kernel")}
#: bytes of scores one chunk of the dense forward holds at once (S and P of a few heads)
FORWARD_CHUNK_BYTES = 1 << 29


def forward_dense(Q, K, V, *, causal: bool, scale: float, chunk_bytes: int = FORWARD_CHUNK_BYTES):
    """O and lse of attention in CuPy float32, S materialised a few heads at a time.

    Q : (BH, Nq, d); K, V : (BH, Nk, d): C-contiguous CuPy float32 arrays. causal: bottom-right
    aligned mask; scale: the softmax scale. chunk_bytes: the most bytes of one chunk's S (float32)
    at once (at least one head). Returns O (BH, Nq, d) and lse (BH, Nq), float32 CuPy arrays, lse
    the natural-log log-sum-exp of the scaled scores (−inf, and O = 0, for a row that sees no key).
    Raises RuntimeError without CuPy or a GPU, CuPy's OutOfMemoryError when one head's S does not fit.
    """
    cp = cupy()
    BH, Nq, d = Q.shape
    Nk = K.shape[1]
    O = cp.empty((BH, Nq, V.shape[-1]), dtype=cp.float32)
    lse = cp.empty((BH, Nq), dtype=cp.float32)
    keep = (cp.arange(Nk)[None, :] <= cp.arange(Nq)[:, None] + (Nk - Nq)) if causal else None
    step = max(1, int(chunk_bytes) // (Nq * Nk * 4))
    for h in range(0, BH, step):
        S = cp.matmul(Q[h:h + step], K[h:h + step].transpose(0, 2, 1))
        S *= np.float32(scale)
        if keep is not None:
            S = cp.where(keep, S, np.float32(-np.inf))
        m = S.max(axis=-1, keepdims=True)
        m = cp.where(cp.isneginf(m), np.float32(0), m)      # a row with no visible key: exp(−inf) = 0, not NaN
        S -= m
        cp.exp(S, out=S)
        l = S.sum(axis=-1, keepdims=True)
        O[h:h + step] = cp.matmul(S, V[h:h + step]) / cp.where(l == 0, np.float32(1), l)
        lse[h:h + step] = (m + cp.log(l))[..., 0]          # log 0 = −inf for a row with no key
        del S
    return O, lse


def _gradient_errors(grads, Q, K, V, dO, *, causal: bool, scale: float) -> dict:
    """max |g − ref| of dQ, dK, dV of head (0, 0) against ``attention_backward`` in float64 on the
    CPU, each over the reference's largest magnitude; rel_err: the largest of those; nan: any NaN."""
    def head(x):                                        # (B, H, N, d) -> head (0, 0), (N, d), float64 on the CPU
        return x.reshape(-1, *x.shape[-2:])[0].get().astype(np.float64)

    q, k, v, do = (head(x) for x in (Q, K, V, dO))
    ref = attention_backward(q, k, v, do, causal=causal, scale=scale)
    out, worst, nan = {}, 0.0, False
    for name, g, r in zip(("dQ", "dK", "dV"), grads, ref):
        got = head(g)
        nan = nan or bool(np.isnan(got).any())
        err = float(np.abs(got - r).max())
        top = float(np.abs(r).max())
        out[f"{name}_max_abs_err"] = err
        worst = max(worst, err / top if top > 0 else err)
    out["rel_err"], out["nan"] = worst, nan
    return out


def benchmark_backward(N: int, d: int, *, Br: int = 64, Bc: int = 64, causal: bool = False,
                       deterministic: bool = False, B: int | None = None, H: int | None = None,
                       repeat: int = 10, warmup: int = 2, check: bool = True, seed: int = 0,
                       phase: str = "all") -> dict:
    """Time the backward teaching kernel (``flash_backward_gpu``) with blocks Br × Bc at one shape.

    N : sequence length (Nq = Nk = N), >= 1; d : head dimension (16, 32, 64 or 128).
    Br, Bc : the kernel's blocks (16, 32, 64 or 128 each, within the device's shared memory).
    causal : bottom-right aligned mask; deterministic : the separate dQ pass instead of atomics.
    B, H : batch and heads (default: the backward benchmark's, B = max(1, 16384 // N),
        H = 2048 // d, at least 1). repeat, warmup : ``timing.measure``'s. check : compare head
        (0, 0) with the float64 dense gradients. seed : of the inputs (cupy.random).
    phase : "timed" (public call and host time), "kernel" (kernel-only, torch.profiler) or "all"
        (both; kernel-only last, and a missing torch leaves ``kernel_note`` instead).

    Returns a dict: N, d, B, H, Br, Bc, causal, deterministic; compile_ms (NVRTC, apart from
    the timing), num_regs and local_bytes (main kernel, dq pass), smem_bytes (bytes per block);
    flops (the backward's: 2.5 × the forward's matmul FLOPs, causal halved); call_ms, host_us,
    kernel_ms (ms, µs, ms; whichever the phase measured) with call_tflops / kernel_tflops (flops
    over each time, TFLOP/s) and kernel_name; model_hbm_bytes (``flash_backward_io`` of the
    atomic-dQ path in float32, times B·H; the deterministic path moves more) and
    standard_model_hbm_bytes (``standard_backward_io``, bytes); model_GBps (model bytes over
    kernel_ms, GB/s; atomic dQ only); with check: dQ/dK/dV_max_abs_err, rel_err (the largest
    error over the reference's largest magnitude) and nan.

    Raises TypeError / ValueError (one line) for an N, B or H that is not an integer >= 1,
    unsupported Br / Bc / d (checked before CuPy is needed), too much shared memory (bytes asked vs
    available), more than 65,535 batch·heads, a non-bool causal / deterministic or an unknown
    phase; RuntimeError without CuPy or a GPU.
    """
    N = check_int(N, "N", 1)
    Br, Bc, d = check_bwd_sizes(Br, Bc, d)
    dB, dH = shape_of(N, d)
    B = dB if B is None else check_int(B, "B", 1)
    H = dH if H is None else check_int(H, "H", 1)
    causal = check_flag(causal, "causal")
    deterministic = check_flag(deterministic, "deterministic")
    phase = check_choice(phase, "phase", tuple(PHASES))
    cb = compile_backward(Br, Bc, d)                     # checks the device's shared memory first
    BH, scale = B * H, 1.0 / float(np.sqrt(d))
    io = flash_backward_io(N, N, d, Br=Br, Bc=Bc, itemsize=4, causal=causal).scaled(BH)
    flops = bwd_flops(B, H, N, d, causal)
    res = {"N": N, "d": d, "B": B, "H": H, "Br": Br, "Bc": Bc, "causal": causal, "deterministic": deterministic,
           "compile_ms": cb.compile_ms, "num_regs": list(cb.num_regs), "local_bytes": list(cb.local_bytes),
           "smem_bytes": cb.smem_bytes, "flops": flops, "model_hbm_bytes": io.hbm_bytes,
           "standard_model_hbm_bytes": standard_backward_io(N, N, d, itemsize=4).scaled(BH).hbm_bytes}
    cp = cupy()
    ins = call = grads = None
    try:
        ins = _inputs(cp, B, H, N, d, causal=causal, scale=scale, seed=seed)
        call = functools.partial(flash_backward_gpu, *ins, Br=Br, Bc=Bc, causal=causal, scale=scale,
                                 deterministic=deterministic)
        if check:
            grads = call()
            cp.cuda.Device().synchronize()
            res.update(_gradient_errors(grads, *ins[:3], ins[4], causal=causal, scale=scale))
            grads = None
        _time(res, call, phase, repeat=repeat, warmup=warmup)
    finally:
        ins = call = grads = None                        # free the inputs before giving the pool's blocks back
        cp.get_default_memory_pool().free_all_blocks()
    for m in ("call", "kernel"):
        if f"{m}_ms" in res:
            res[f"{m}_tflops"] = flops / res[f"{m}_ms"] / 1e9
    if "kernel_ms" in res and not deterministic:
        res["model_GBps"] = io.hbm_bytes / res["kernel_ms"] / 1e6
    return res


def _inputs(cp, B: int, H: int, N: int, d: int, *, causal: bool, scale: float, seed: int) -> tuple:
    """(Q, K, V, O, dO, lse) on the GPU, float32: Q, K, V, dO (B, H, N, d) seeded unit normal; O
    (B, H, N, d) and lse (B, H, N) of the forward (``forward_dense``)."""
    rs = cp.random.RandomState(seed)
    Q, K, V, dO = (rs.standard_normal((B, H, N, d), dtype=cp.float32) for _ in range(4))
    O, lse = forward_dense(*(x.reshape(B * H, N, d) for x in (Q, K, V)), causal=causal, scale=scale)
    return Q, K, V, O.reshape(B, H, N, d), dO, lse.reshape(B, H, N)


def _time(res: dict, call, phase: str, *, repeat: int, warmup: int) -> None:
    """``timing.measure`` of ``call`` into res: call_ms and host_us ("timed"), kernel_ms and
    kernel_name ("kernel"); with "all" both, kernel-only last, and a kernel_note instead of
    kernel_ms when torch's profiler cannot be imported."""
    kw = dict(repeat=repeat, warmup=warmup)
    if phase in ("timed", "all"):
        t = measure(call, parts=PHASES["timed"], **kw)
        res["call_ms"], res["host_us"] = t["call_ms"], t["host_us"]
    if phase in ("kernel", "all"):
        try:
            t = measure(call, parts=PHASES["kernel"], **kw)
        except ImportError as exc:
            if phase == "kernel":
                raise
            res["kernel_note"] = f"kernel-only not timed: torch.profiler is not importable ({exc})"
        else:
            res["kernel_ms"], res["kernel_name"] = t["kernel_ms"], t["kernel_name"][:120]
