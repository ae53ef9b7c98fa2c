"""Compile and launch the tensor-core FlashAttention kernels (fp16 / bf16) through CuPy.

``flash_forward_mma(Q, K, V)`` is the fast path: FlashAttention-2 forward on the tensor
cores, fp32 accumulators and softmax statistics, O in the input dtype, lse in fp32. It picks
the kernel for the device (``wgmma`` on Hopper, sm_90; ``mma.sync`` on other GPUs from
Ampere on) and, unless told, the block sizes measured best (``mma_limits.DEFAULT_BLOCKS``).
Compilation is NVRTC through ``flashviz.gpu.nvrtc`` (Hopper needs the sm_90a target),
cached on disk; compile time is reported apart from run time.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from .mma_limits import check_mma_launch, check_mma_sizes, check_variant, default_blocks, mma_threads
from .operands import Operand, _is_torch, as_operand, bf16_bits_to_float32
from .runner import _check_flag, _cupy, device_smem_optin, kernel_source

_FILES = {"wgmma": ("flash_fwd_mma.cu", "flash_fwd_mma"), "mma.sync": ("flash_fwd_mma_sm80.cu", "flash_fwd_mma_sm80")}
_CACHE: dict = {}
#: variant -> kernel source text used instead of the file (benchmarks A/B-test kernel versions)
SOURCE_OVERRIDE: dict = {}
LOG2E = 1.4426950408889634


@dataclass
class MMAKernel:
    """One compiled instantiation of a tensor-core kernel.

    variant: "wgmma" | "mma.sync"; dtype: "float16" | "bfloat16"; Br, Bc, d, causal: its
    template values; kernel: cupy RawKernel; threads: per block; smem_bytes: dynamic shared
    memory per block (bytes); compile_ms: NVRTC + load time (ms; a disk-cache hit is ~1 ms);
    cache_hit: loaded from the on-disk cache; num_regs: registers per thread; local_bytes:
    local memory (spills) per thread, bytes.
    """

    variant: str
    dtype: str
    Br: int
    Bc: int
    d: int
    causal: bool
    name: str
    kernel: object
    threads: int
    smem_bytes: int
    compile_ms: float
    cache_hit: bool
    num_regs: int
    local_bytes: int


def device_variant() -> str:
    """The kernel this GPU runs: "wgmma" on compute capability 9.0, "mma.sync" on 8.x and
    newer non-Hopper GPUs. Raises RuntimeError without CuPy / GPU, or on a GPU older than
    Ampere (sm_80), which has no bf16 tensor cores."""
    cp = _cupy()
    cc = int(cp.cuda.Device().compute_capability)
    if cc == 90:
        return "wgmma"
    if cc >= 80:
        return "mma.sync"
    raise RuntimeError(f"the tensor-core kernels need an Ampere or newer GPU (sm_80+); this one is sm_{cc}")


def compile_mma(dtype: str = "float16", Br: int | None = None, Bc: int | None = None, d: int = 64,
                causal: bool = False, variant: str | None = None) -> MMAKernel:
    """Compile (or fetch from the per-process cache) one tensor-core kernel.

    Br, Bc default to ``default_blocks(d, causal, variant)``; variant defaults to
    ``device_variant()``. Checks sizes and shared memory (against the device's opt-in
    limit) before compiling. Raises ValueError (unsupported values, too much shared memory:
    bytes asked vs available), RuntimeError (no GPU, NVRTC error, a wgmma kernel on a
    non-Hopper GPU).
    """
    cp = _cupy()
    causal = _check_flag(causal, "causal")
    variant = check_variant(variant) if variant is not None else device_variant()
    if dtype not in ("float16", "bfloat16"):
        raise ValueError(f"dtype must be 'float16' or 'bfloat16'; got {dtype!r}")
    if Br is None or Bc is None:
        dBr, dBc = default_blocks(d, causal, variant)
        Br, Bc = dBr if Br is None else Br, dBc if Bc is None else Bc
    Br, Bc, d = check_mma_sizes(Br, Bc, d)
    dev = cp.cuda.Device()
    cc = int(dev.compute_capability)
    if variant == "wgmma" and cc != 90:
        raise RuntimeError(f"the wgmma kernel needs a Hopper GPU (sm_90); this one is sm_{cc}: use variant='mma.sync'")
    fname, kname = _FILES[variant]
    src = SOURCE_OVERRIDE.get(variant) or kernel_source(fname)   # keyed by its text: an edited file recompiles
    key = (variant, dtype, Br, Bc, d, causal, dev.id, hash(src))
    if key in _CACHE:
        return _CACHE[key]
    smem = check_mma_launch(Br, Bc, d, variant, device_smem_optin())
    dt = 0 if dtype == "float16" else 1
    name = f"{kname}<{dt},{Br},{Bc},{d},{'true' if causal else 'false'}>"
    arch = "sm_90a" if variant == "wgmma" else f"sm_{cc}"
    from .nvrtc import compile_cubin
    t0 = time.perf_counter()
    kernel, _, hit = compile_cubin(src, name, arch)
    kernel.max_dynamic_shared_size_bytes = smem
    compile_ms = (time.perf_counter() - t0) * 1e3
    mk = MMAKernel(variant, dtype, Br, Bc, d, causal, name, kernel, mma_threads(Br, variant), smem,
                   compile_ms, hit, int(kernel.num_regs), int(kernel.local_size_bytes))
    _CACHE[key] = mk
    return mk


def launch_mma(mk: MMAKernel, q: Operand, k: Operand, v: Operand, o: Operand, lse_ptr: int,
               scale: float) -> None:
    """Launch a compiled kernel on checked operands (no checks, no allocation; for timing).

    o: the output operand (same (B, H, Nq, d) as q); lse_ptr: a contiguous float32
    (B·H, Nq) buffer. Asynchronous on the current stream.
    """
    B, H, Nq, _ = q.shape
    Nk = k.shape[2]
    args = [np.uint64(q.ptr), np.uint64(k.ptr), np.uint64(v.ptr), np.uint64(o.ptr), np.uint64(lse_ptr),
            np.int32(Nq), np.int32(Nk), np.int32(H)]
    for op in (q, k, v, o):
        args += [np.int64(s) for s in op.strides[:3]]
    args.append(np.float32(scale * LOG2E))
    mk.kernel((-(-Nq // mk.Br), H, B), (mk.threads, 1, 1), tuple(args), shared_mem=mk.smem_bytes)


def _check_shapes(q: Operand, k: Operand, v: Operand) -> None:
    if q.dtype != k.dtype or q.dtype != v.dtype:
        raise TypeError(f"Q, K, V must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if q.shape[:2] != k.shape[:2] or q.shape[:2] != v.shape[:2]:
        raise ValueError(f"Q, K, V must share (B, H), got {q.shape}, {k.shape}, {v.shape}")
    if q.shape[3] != k.shape[3] or v.shape[3] != q.shape[3]:
        raise ValueError(f"Q, K, V must share the head dimension d, got {q.shape}, {k.shape}, {v.shape}")
    if k.shape[2] != v.shape[2]:
        raise ValueError(f"K and V must have the same number of keys, got {k.shape} and {v.shape}")
    if min(q.shape[:2]) < 1 or q.shape[0] > 65_535 or q.shape[1] > 65_535:
        raise ValueError(f"B and H must each be between 1 and 65,535 (grid axes), got {q.shape[:2]}")
    devs = {op.device for op in (q, k, v)}
    if len(devs) > 1:
        raise ValueError(f"Q, K, V must be on one GPU, got devices {sorted(devs)}")


def _check_scale(scale, d: int) -> float:
    """The softmax scale as a float: 1/sqrt(d) for None; the kernel receives scale·log2(e) in
    float32, which must be a normal finite number (so −inf·scale stays −inf, never NaN)."""
    if scale is None:
        return 1.0 / math.sqrt(d)
    if isinstance(scale, bool) or not isinstance(scale, (int, float, np.floating, np.integer)):
        raise TypeError(f"scale must be a real number or None, got {scale!r}")
    f32 = np.finfo(np.float32)
    v = float(scale) * LOG2E
    if not (math.isfinite(v) and float(f32.tiny) <= v <= float(f32.max)):
        raise ValueError(f"scale must be > 0 with scale·log2(e) a normal float32 (about 8e-39 to 2e38), got {scale!r}")
    return float(scale)


def _stream_context(q: Operand):
    """Where to launch: torch tensors -> their GPU and torch's current stream there (so the
    kernel is ordered after whatever wrote Q, K, V); arrays -> CuPy's current device/stream."""
    import contextlib
    cp = _cupy()
    if q.kind != "torch":
        return contextlib.nullcontext()
    import torch
    dev = q.keep.device
    stack = contextlib.ExitStack()
    stack.enter_context(cp.cuda.Device(dev.index))
    stack.enter_context(cp.cuda.ExternalStream(torch.cuda.current_stream(dev).cuda_stream))
    return stack


def _out_like(q: Operand):
    """(O operand, O owner, lse owner, lse pointer) for q's shape and dtype."""
    B, H, Nq, d = q.shape
    if q.kind == "torch":
        import torch
        O = torch.empty((B, H, Nq, d), dtype=q.keep.dtype, device=q.keep.device)
        lse = torch.empty((B, H, Nq), dtype=torch.float32, device=q.keep.device)
        op = Operand(int(O.data_ptr()), (B, H, Nq, d), tuple(O.stride()), q.dtype, O, "torch")
        return op, O, lse, int(lse.data_ptr())
    cp = _cupy()
    O = cp.empty((B, H, Nq, d), dtype=cp.float16 if q.dtype == "float16" else cp.uint16)
    lse = cp.empty((B, H, Nq), dtype=cp.float32)
    op = Operand(int(O.data.ptr), (B, H, Nq, d), tuple(s // 2 for s in O.strides), q.dtype, O, "cupy")
    return op, O, lse, int(lse.data.ptr)


def flash_forward_mma(Q, K, V, *, causal: bool = False, scale=None, dtype: str | None = None,
                      Br: int | None = None, Bc: int | None = None, variant: str | None = None):
    """FlashAttention-2 forward on the tensor cores (FA2 Algorithm 1, fp16/bf16 in, fp32 accumulate).

    Parameters
    ----------
    Q : (B, H, Nq, d); K, V : (B, H, Nk, d) — also (H, N, d) or (N, d).
        torch CUDA tensors (float16 / bfloat16, any strides with unit stride along d and
        16-byte aligned rows; used in place), or CuPy / NumPy float arrays (copied to the
        GPU in ``dtype``). d in {64, 128}; any Nq, Nk >= 1.
    causal : bool, bottom-right aligned (query r sees key c iff c <= r + Nk − Nq).
    scale : float > 0 or None (1/sqrt(d)).
    dtype : "float16" | "bfloat16" | None (torch: the tensors' own; arrays: "float16").
    Br, Bc : block sizes (Br in {64, 128}, Bc in {32, 64, 128}); default: measured best.
    variant : "wgmma" (Hopper) | "mma.sync" (sm_80+) | None (this GPU's).

    Returns
    -------
    (O, lse): torch inputs give torch tensors O (B, H, Nq, d) in the input dtype and lse
    (B, H, Nq) float32; array inputs give CuPy arrays: O float16 (float32 for bfloat16,
    widened exactly) and lse float32. lse is the natural-log log-sum-exp of scale·QKᵀ over
    visible keys; rows that see no key give O = 0 and lse = −inf; NaN in the inputs gives NaN.
    O and lse have the input's leading axes: (N, d) in gives (N, d) and (N,) out. Torch
    inputs run on their GPU and torch's current stream there.

    Raises
    ------
    TypeError / ValueError for bad inputs (dtype, shapes, strides, alignment, block sizes,
    shared memory asked vs available, a scale whose scale·log2(e) is not a normal float32,
    tensors on different GPUs); RuntimeError without CuPy / a suitable GPU.

    Notes
    -----
    Forward only: no autograd (torch outputs carry no gradient). The first call for a
    (dtype, Br, Bc, d, causal) compiles with NVRTC (about a second) and caches the cubin in
    ``~/.cache/flashviz/cubin`` ($FLASHVIZ_CACHE); later processes load it. Needs CuPy
    (``pip install "flashviz[gpu]"`` or ``[gpu-cuda13]``) and, for torch inputs, torch.

    Example
    -------
    >>> import torch, flashviz as fv                                  # doctest: +SKIP
    >>> q, k, v = (torch.randn(4, 32, 4096, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    >>> O, lse = fv.gpu.flash_forward_mma(q, k, v, causal=True)      # O: bf16 (4, 32, 4096, 64)
    """
    causal = _check_flag(causal, "causal")
    q = as_operand(Q, "Q", dtype)
    follow = dtype if dtype is not None or q.kind == "torch" else q.dtype
    k = as_operand(K, "K", follow if not _is_torch(K) else dtype)
    v = as_operand(V, "V", follow if not _is_torch(V) else dtype)
    _check_shapes(q, k, v)
    lead = tuple(np.shape(Q))[:-2] if q.kind != "torch" else tuple(Q.shape)[:-2]
    d = q.shape[3]
    scale = _check_scale(scale, d)
    with _stream_context(q):
        mk = compile_mma(q.dtype, Br, Bc, d, causal, variant)
        o, O, lse, lse_ptr = _out_like(q)
        launch_mma(mk, q, k, v, o, lse_ptr, scale)
    if q.kind == "cupy" and q.dtype == "bfloat16":
        O = bf16_bits_to_float32(O)
    Nq = q.shape[2]
    return O.reshape(*lead, Nq, d), lse.reshape(*lead, Nq)
