"""Compile and launch the CUDA teaching kernel through CuPy; the naive CuPy baseline.

CuPy is imported lazily, inside the functions, so ``import flashviz.gpu`` works on machines
without CuPy or a GPU (``common.gpu_status()`` then says why nothing can run).

Kernel: ``kernels/flash_fwd.cu``, ``flash_fwd<Br, Bc, D>``, compiled with NVRTC through
``flashviz.gpu.nvrtc`` for the device's own target (sm_XY), cached on disk (the same cubin
cache as the tensor-core kernels: CuPy's own cache skips templated kernels, cupy issue #9667)
and per process; the compile time is kept apart from the run time
(``compile_kernel(...).compile_ms``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ...checks import check_flag
from ..common import check_scale, cupy, device_facts, source
from .limits import check_launch, check_sizes

_KERNEL_FILE = "flash_fwd.cu"
_CACHE: dict = {}


@dataclass
class CompiledKernel:
    """One compiled instantiation of ``flash_fwd<Br, Bc, D>``.

    kernel: cupy RawKernel (Function); smem_bytes: dynamic shared memory per block (bytes);
    compile_ms: NVRTC compile + load time of this instantiation in milliseconds (0 is never
    reported: a cache hit returns the original figure); num_regs: registers per thread;
    local_bytes: local memory (spills) per thread in bytes.
    """

    name: str
    Br: int
    Bc: int
    d: int
    kernel: object
    smem_bytes: int
    compile_ms: float
    num_regs: int
    local_bytes: int


def compile_kernel(Br: int = 64, Bc: int = 64, d: int = 64) -> CompiledKernel:
    """Compile (or fetch from the per-process cache) ``flash_fwd<Br, Bc, d>``.

    Checks the launch first, so an oversized request fails before compiling. The cubin is
    cached on disk (``flashviz.gpu.nvrtc.cache_dir()``), so a new process loads it in ~1 ms.
    Raises ValueError (unsupported Br/Bc/d, or more shared memory than the device allows),
    RuntimeError without CuPy/GPU or on a compile error (with NVRTC's log).
    """
    cp = cupy()
    dev = cp.cuda.runtime.getDevice()
    key = (Br, Bc, d, dev)
    if type(Br) is int and type(Bc) is int and type(d) is int and key in _CACHE:
        return _CACHE[key]
    Br, Bc, d = check_sizes(Br, Bc, d)
    key = (Br, Bc, d, dev)
    if key in _CACHE:
        return _CACHE[key]
    facts = device_facts(dev)
    smem = check_launch(Br, Bc, d, facts.smem_optin)
    name = f"flash_fwd<{Br},{Bc},{d}>"
    from ..nvrtc import compile_cubin
    t0 = time.perf_counter()
    kernel, _, _ = compile_cubin(source(_KERNEL_FILE), name, f"sm_{facts.cc}")
    kernel.max_dynamic_shared_size_bytes = smem  # > 48 KB needs the explicit opt-in
    compile_ms = (time.perf_counter() - t0) * 1e3
    ck = CompiledKernel(name, Br, Bc, d, kernel, smem, compile_ms,
                        int(kernel.num_regs), int(kernel.local_size_bytes))
    _CACHE[key] = ck
    return ck


def _as_device_stack(x, name: str):
    """x (…, N, d) NumPy/CuPy float array -> C-contiguous, 16-byte aligned float32 CuPy (BH, N, d)."""
    cp = cupy()
    if not isinstance(x, (np.ndarray, cp.ndarray)):
        raise TypeError(f"{name} must be a NumPy or CuPy float array of shape (..., N, d), got {type(x).__name__}")
    if x.dtype.kind not in "f":
        raise TypeError(f"{name} must have a float dtype (float16/32/64), got {x.dtype}")
    if x.ndim < 2:
        raise ValueError(f"{name} must have shape (..., N, d) with ndim >= 2, got shape {x.shape}")
    if x.shape[-1] < 1 or x.shape[-2] < 1:
        raise ValueError(f"{name} must have N >= 1 and d >= 1, got shape {x.shape}")
    lead = tuple(x.shape[:-2])
    xd = cp.ascontiguousarray(cp.asarray(x, dtype=cp.float32))
    if xd.data.ptr % 16:  # a contiguous view at an odd offset: float4 loads need 16-byte rows
        xd = xd.copy()
    return xd.reshape(-1, *x.shape[-2:]), lead


def _prepare(Q, K, V):
    Qd, lq = _as_device_stack(Q, "Q")
    Kd, lk = _as_device_stack(K, "K")
    Vd, lv = _as_device_stack(V, "V")
    if not (lq == lk == lv):
        raise ValueError(f"Q, K, V must share their leading (batch, head) axes, got {Q.shape}, {K.shape}, {V.shape}")
    if Qd.shape[-1] != Kd.shape[-1]:
        raise ValueError(f"Q and K must share the head dimension d, got Q {Q.shape} and K {K.shape}")
    if Kd.shape[-2] != Vd.shape[-2]:
        raise ValueError(f"K and V must have the same number of keys Nk, got K {K.shape} and V {V.shape}")
    if Vd.shape[-1] != Qd.shape[-1]:
        raise ValueError(f"the GPU kernel needs V's head dimension equal to d, got Q {Q.shape} and V {V.shape}")
    return Qd, Kd, Vd, lq


def launch(ck: CompiledKernel, Qd, Kd, Vd, O, lse, *, causal: bool, scale: float) -> None:
    """Launch a compiled kernel on prepared buffers (no checks, no allocation; used for timing).

    Qd (BH, Nq, d), Kd, Vd (BH, Nk, d): C-contiguous float32 CuPy arrays; O (BH, Nq, d) and
    lse (BH, Nq): float32 CuPy outputs, fully overwritten. Asynchronous on the current stream.
    """
    BH, Nq, _ = Qd.shape
    Nk = Kd.shape[1]
    Tr = -(-Nq // ck.Br)
    ck.kernel((Tr, BH, 1), (16, 16, 1),
              (Qd, Kd, Vd, O, lse, np.int32(Nq), np.int32(Nk), np.float32(scale), np.int32(1 if causal else 0)),
              shared_mem=ck.smem_bytes)


def flash_forward_gpu(Q, K, V, *, Br: int = 64, Bc: int = 64, causal: bool = False, scale=None):
    """FlashAttention-2 forward on the GPU with the teaching kernel (float32 throughout).

    Parameters
    ----------
    Q : (..., Nq, d); K, V : (..., Nk, d)
        NumPy or CuPy float arrays (float16/64 are converted to float32; NumPy arrays are
        moved to the GPU); leading axes such as (B, H) must match; d in {32, 64, 128}.
    Br, Bc : block rows / columns, each in {16, 32, 64, 128}.
    causal : bool, bottom-right aligned mask (query r sees key c iff c <= r + Nk - Nq).
    scale : float or None (1/sqrt(d)).

    Returns
    -------
    O : CuPy float32 (..., Nq, d); lse : CuPy float32 (..., Nq), natural-log log-sum-exp of
    the scaled scores. Rows that see no key: O = 0, lse = -inf. Inputs with NaN/inf give
    NaN/inf (not checked, to keep the call one pass).

    Raises
    ------
    TypeError for non-float input (lists too), a non-bool causal or a non-real scale;
    ValueError for a scale that is not > 0 or not a normal float32; ValueError for shape
    mismatches, unsupported Br/Bc/d, more than 65,535 batch·heads, or a block that needs
    more shared memory than the device allows (message names bytes asked vs available);
    RuntimeError when CuPy or a GPU is missing.
    """
    cp = cupy()
    causal = check_flag(causal, "causal")
    Qd, Kd, Vd, lead = _prepare(Q, K, V)
    BH, Nq, d = Qd.shape
    if BH > 65_535:
        raise ValueError(f"the kernel's grid puts batch·heads on grid.y, at most 65,535; got {BH}")
    scale = check_scale(scale, d)
    ck = compile_kernel(Br, Bc, d)
    O = cp.empty((BH, Nq, d), dtype=cp.float32)
    lse = cp.empty((BH, Nq), dtype=cp.float32)
    launch(ck, Qd, Kd, Vd, O, lse, causal=causal, scale=scale)
    return O.reshape(*lead, Nq, d), lse.reshape(*lead, Nq)


_MASK_SRC = """
long long c = i % Nk;
long long r = (i / Nk) % Nq;
if (c > r + Nk - Nq) s = __int_as_float(0xff800000);
"""


def naive_attention_gpu(Q, K, V, causal: bool = False, scale=None):
    """Standard attention in CuPy float32 with S materialised (the baseline FlashAttention beats).

    S = scale·Q Kᵀ (one (…, Nq, Nk) float32 buffer, cuBLAS batched GEMM), then in place:
    causal mask, row max, subtract, exp, row sum, divide; O = P V (cuBLAS). Working in place
    keeps the extra memory at one S (Nq·Nk·4 bytes per head) plus O.

    Q : (..., Nq, d); K : (..., Nk, d); V : (..., Nk, dv) NumPy or CuPy float arrays.
    Returns O, a CuPy float32 array (..., Nq, dv); rows that see no key are 0.
    Raises TypeError/ValueError for bad inputs, RuntimeError without CuPy/GPU, and CuPy's
    OutOfMemoryError when S does not fit.
    """
    cp = cupy()
    causal = check_flag(causal, "causal")
    Qd, lq = _as_device_stack(Q, "Q")
    Kd, lk = _as_device_stack(K, "K")
    Vd, lv = _as_device_stack(V, "V")
    if not (lq == lk == lv) or Qd.shape[-1] != Kd.shape[-1] or Kd.shape[-2] != Vd.shape[-2]:
        raise ValueError(f"mismatched shapes Q {Q.shape}, K {K.shape}, V {V.shape}")
    Nq, Nk = Qd.shape[1], Kd.shape[1]
    scale = check_scale(scale, Qd.shape[-1])
    S = cp.matmul(Qd, Kd.transpose(0, 2, 1))
    S *= np.float32(scale)
    if causal:
        _mask = _elementwise("flashviz_causal_mask", "int64 Nq, int64 Nk", "float32 s", _MASK_SRC)
        _mask(np.int64(Nq), np.int64(Nk), S)
    m = S.max(axis=-1, keepdims=True)
    cp.copyto(m, 0, where=cp.isneginf(m))  # a row with no visible key: exp(-inf - 0) = 0, not NaN (no sync)
    S -= m
    cp.exp(S, out=S)
    l = S.sum(axis=-1, keepdims=True)
    cp.copyto(l, 1, where=l == 0)
    S /= l
    O = cp.matmul(S, Vd)
    del S
    return O.reshape(*lq, Nq, Vd.shape[-1])


_EW: dict = {}


def _elementwise(name, in_params, out_params, src):
    if name not in _EW:
        cp = cupy()
        _EW[name] = cp.ElementwiseKernel(in_params, out_params, src, name)
    return _EW[name]
