"""Compile and launch the tensor-core FlashAttention kernels (fp16 / bf16) through CuPy.

``flash_forward_mma(Q, K, V)`` is the fast path: the FlashAttention forward on the tensor
cores, fp32 accumulators and softmax statistics, O in the input dtype, lse in fp32. Unless told,
it picks the kernel (``auto_variant``: ``fa3``, FlashAttention-3, on Hopper; ``wgmma`` /
``mma.sync``, FlashAttention-2, where fa3 cannot run) and the block sizes measured best
(``limits.DEFAULT_BLOCKS``). Compilation is NVRTC through ``flashviz.gpu.nvrtc`` (Hopper needs
the sm_90a target), cached on disk; compile time is reported apart from run time.

One runner path: every call that has no launch plan yet goes the general way (operand checks,
``auto_variant``, ``compile_mma``, ``_make_plan``, the launch), and for torch tensors leaves a
``LaunchPlan`` in ``_PLANS`` under the call's key (``_plan_key``); a repeated call builds the
same key, finds the plan and only allocates and launches (``_call_plan``).
"""

from __future__ import annotations

import re
import sys
import time
from dataclasses import dataclass

from ...checks import check_flag
from ...mma_limits import (
    FA3_BC,
    FA3_BR,
    FA3_FROM_NK,
    KERNEL_FILES,
    MMA_BC,
    MMA_BR,
    check_mma_launch,
    check_mma_sizes,
    check_variant,
    default_blocks,
    mma_threads,
)
from ...records import kernel_params
from ..common import (
    LOG2E,
    ParamBlock,
    check_scale,
    cupy,
    device_facts,
    ensure_context,
    raw_torch_stream,
    source,
    torch_stream,
)
from .fa3 import launch_fa3
from .operands import Operand, as_operand, bf16_bits_to_float32, is_torch, torch_operand
from .tma import tma_strides_ok

#: (variant, dtype, Br, Bc, d, causal, device, override source) -> MMAKernel, and the same key
#: with the caller's (variant, Br, Bc) as given (None for "the default") -> the same MMAKernel
_CACHE: dict = {}
#: variant -> kernel source text used instead of the file (benchmarks A/B-test kernel versions)
SOURCE_OVERRIDE: dict = {}
_VARIANT: dict = {}


@dataclass
class MMAKernel:
    """One compiled instantiation of a tensor-core kernel.

    variant: "wgmma" | "mma.sync" | "fa3"; dtype: "float16" | "bfloat16"; Br, Bc, d, causal: its
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
    function: object = None   #: the loaded cupy.cuda.Function (launched directly, with a stream)
    function_ptr: int = 0     #: its CUfunction handle
    sm_count: int = 0         #: the device's SMs (fa3's persistent grid: one block per SM)
    traced: bool = False      #: built with the GPU-timeline switch (-DFLASHVIZ_TRACE=1: two more parameters)
    dynamic: bool = False     #: fa3 built with FA3_DYNAMIC (its source defines it: the dynamic tile scheduler)


def device_variant(dev: int | None = None) -> str:
    """The kernel a GPU runs: "wgmma" on compute capability 9.0, "mma.sync" on 8.x and
    newer non-Hopper GPUs (dev: device index, default CuPy's current device; cached per
    device). Raises RuntimeError without CuPy / GPU, or on a GPU older than Ampere (sm_80),
    which has no bf16 tensor cores."""
    if dev is None:
        dev = cupy().cuda.runtime.getDevice()
    v = _VARIANT.get(dev)
    if v is None:
        cc = device_facts(dev).cc
        if cc < 80:
            raise RuntimeError(f"the tensor-core kernels need an Ampere or newer GPU (sm_80+); this one is sm_{cc}")
        v = _VARIANT[dev] = "wgmma" if cc == 90 else "mma.sync"
    return v


def auto_variant(dev: int, Br=None, Bc=None, operands=(), causal: bool = False) -> str:
    """The kernel ``flash_forward_mma`` runs when the caller names none: "fa3" (FlashAttention-3,
    kernels/flash_fwd_fa3.cu) on Hopper, where the recorded benchmark has it faster than "wgmma"
    (``limits.FA3_FROM_NK``: not for d = 64 causal below 2048 keys), unless the block sizes asked
    for are not fa3's or an operand cannot be read through a TMA tensor map (a broadcast axis:
    ``tma.tma_strides_ok``); then, and on other GPUs, ``device_variant(dev)``. operands: Operand
    objects (shape, strides), Q first, K second. Blocks only fa3 has (Br = 192, Bc = 176) always
    get fa3 (it also reads a broadcast axis, stride 0, correctly: tests/gpu/test_fa3.py). Raises
    like ``device_variant``."""
    v = device_variant(dev)
    if v != "wgmma" or not (Br is None or Br in FA3_BR) or not (Bc is None or Bc in FA3_BC):
        return v
    if (Br is not None and Br not in MMA_BR) or (Bc is not None and Bc not in MMA_BC):
        return "fa3"                    # blocks only fa3 has: the speed rule does not apply
    if all(tma_strides_ok(o.shape, o.strides) for o in operands) and (
            len(operands) < 2 or operands[1].shape[2] >= FA3_FROM_NK.get((operands[0].shape[3], causal), 1)):
        return "fa3"
    return v


def _plain(x) -> bool:
    return x is None or type(x) is int or type(x) is str


def compile_mma(dtype: str = "float16", Br: int | None = None, Bc: int | None = None, d: int = 64,
                causal: bool = False, variant: str | None = None, *, device: int | None = None) -> MMAKernel:
    """Compile (or fetch from the per-process cache) one tensor-core kernel.

    Br, Bc default to ``default_blocks(d, causal, variant)``; variant defaults to
    ``device_variant()``; device (index) to CuPy's current device. A repeated request is one
    dict lookup (the kernel source is read and hashed once per process; the compiled cubin
    is also cached on disk, see ``flashviz.gpu.nvrtc``). Checks sizes and shared memory
    (against the device's opt-in limit) before compiling. Raises ValueError (unsupported
    values, too much shared memory: bytes asked vs available), TypeError (non-integer
    sizes, non-bool causal), RuntimeError (no GPU, NVRTC error, a wgmma kernel on a
    non-Hopper GPU).
    """
    if device is None:
        device = cupy().cuda.runtime.getDevice()
    fast = _plain(variant) and _plain(Br) and _plain(Bc) and type(d) is int and type(causal) is bool \
        and _plain(dtype)
    override = SOURCE_OVERRIDE.get(variant or _VARIANT.get(device)) if SOURCE_OVERRIDE else None
    given = (variant, dtype, Br, Bc, d, causal, device, override)
    if fast:
        mk = _CACHE.get(given)
        if mk is not None:
            return mk
    causal = check_flag(causal, "causal")
    variant = check_variant(variant) if variant is not None else device_variant(device)
    if dtype not in ("float16", "bfloat16"):
        raise ValueError(f"dtype must be 'float16' or 'bfloat16'; got {dtype!r}")
    if Br is None or Bc is None:
        dBr, dBc = default_blocks(d, causal, variant)
        Br, Bc = dBr if Br is None else Br, dBc if Bc is None else Bc
    Br, Bc, d = check_mma_sizes(Br, Bc, d, variant)
    facts = device_facts(device)
    if variant in ("wgmma", "fa3") and facts.cc != 90:
        raise RuntimeError(f"the {variant} kernel needs a Hopper GPU (sm_90); this one is sm_{facts.cc}: "
                           f"use variant='mma.sync'")
    fname, kname = KERNEL_FILES[variant]
    src = SOURCE_OVERRIDE.get(variant) or source(fname)
    key = (variant, dtype, Br, Bc, d, causal, device, SOURCE_OVERRIDE.get(variant))
    mk = _CACHE.get(key)
    if mk is None:
        smem = check_mma_launch(Br, Bc, d, variant, facts.smem_optin)
        dt = 0 if dtype == "float16" else 1
        name = f"{kname}<{dt},{Br},{Bc},{d},{'true' if causal else 'false'}>"
        arch = "sm_90a" if variant in ("wgmma", "fa3") else f"sm_{facts.cc}"
        from ..nvrtc import compile_cubin
        t0 = time.perf_counter()
        with cupy().cuda.Device(device):
            kernel, _, hit = compile_cubin(src, name, arch)
            kernel.max_dynamic_shared_size_bytes = smem
            function = kernel.kernel
        compile_ms = (time.perf_counter() - t0) * 1e3
        mk = MMAKernel(variant, dtype, Br, Bc, d, causal, name, kernel, mma_threads(Br, variant), smem,
                       compile_ms, hit, int(kernel.num_regs), int(kernel.local_size_bytes), function,
                       int(function.ptr), facts.sm_count,
                       dynamic=variant == "fa3" and re.search(r"^#define FA3_DYNAMIC 1\b", src, re.M) is not None)
        _CACHE[key] = mk
    if fast:
        _CACHE[given] = mk
    return mk


def _shared_layout():
    """The parameter layout of the wgmma and mma.sync kernels, read from their signatures
    (``records.kernel_params``): Q, K, V, O, lse pointers; Nq, Nk, H; 12 int64 strides (Q, K, V,
    O × b, h, s); scale·log2(e). One parameter block serves both, so they must agree."""
    wgmma, sm80 = (kernel_params.layout(*KERNEL_FILES[v]) for v in ("wgmma", "mma.sync"))
    if [(p.ctype, p.offset) for p in wgmma.params] != [(p.ctype, p.offset) for p in sm80.params]:
        raise RuntimeError(f"{KERNEL_FILES['wgmma'][0]} and {KERNEL_FILES['mma.sync'][0]} must share one "
                           "parameter list (one launch packs both)")
    return wgmma


_LAYOUT = _shared_layout()
_ARGS = _LAYOUT.struct()[1]
_OFFSETS = _LAYOUT.offsets


_ARGBUF = ParamBlock(_LAYOUT)
_DRIVER: list = []      #: cuLaunchKernel, CuPy's current stream, cudaGetDevice (looked up once)


def launch_mma(mk: MMAKernel, q: Operand, k: Operand, v: Operand, o: Operand, lse_ptr: int,
               scale: float, stream=None) -> None:
    """Launch a compiled kernel on checked operands (no checks, no allocation; for timing).

    o: the output operand (same (B, H, Nq, d) as q); lse_ptr: a contiguous float32
    (B·H, Nq) buffer; stream: a CuPy stream (None: CuPy's current stream). Asynchronous.
    The launch needs the kernel's device to be the current device. The arguments are packed
    once into a per-thread parameter block and handed to the driver's cuLaunchKernel.
    """
    if not _DRIVER:
        _driver()
    ensure_context(_DRIVER[2]())
    B, H, Nq, _ = q.shape
    _launch(mk, q.ptr, k.ptr, v.ptr, o.ptr, lse_ptr, B, H, Nq, k.shape[2], q.strides, k.strides, v.strides,
            o.strides, scale, _DRIVER[1]().ptr if stream is None else stream.ptr)


def _driver() -> None:
    cp = cupy()
    _DRIVER.extend((cp.cuda.driver.launchKernel, cp.cuda.get_current_stream, cp.cuda.runtime.getDevice))


def _launch(mk: MMAKernel, qp: int, kp: int, vp: int, op: int, lp: int, B: int, H: int, Nq: int, Nk: int,
            qs, ks, vs, os_, scale: float, sptr: int) -> None:
    """Pack the arguments (pointers, sizes, element strides of Q, K, V, O) into this thread's
    parameter block and cuLaunchKernel on stream sptr (fa3: ``fa3.launch_fa3``, tensor maps)."""
    if mk.variant == "fa3":
        return launch_fa3(_DRIVER[0], mk, qp, kp, vp, op, lp, B, H, Nq, Nk, qs, ks, vs, os_, scale, sptr)
    ptrs = _ARGBUF.pack(qp, kp, vp, op, lp, Nq, Nk, H, qs[0], qs[1], qs[2], ks[0], ks[1], ks[2], vs[0], vs[1], vs[2],
                        os_[0], os_[1], os_[2], scale * LOG2E)
    _DRIVER[0](mk.function_ptr, -(-Nq // mk.Br), H, B, mk.threads, 1, 1, mk.smem_bytes, sptr, ptrs, 0)


def _check_shapes(q: Operand, k: Operand, v: Operand) -> None:
    qs, ks, vs = q.shape, k.shape, v.shape
    if q.dtype != k.dtype or q.dtype != v.dtype:
        raise TypeError(f"Q, K, V must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if qs[:2] != ks[:2] or qs[:2] != vs[:2]:
        raise ValueError(f"Q, K, V must share (B, H), got {qs}, {ks}, {vs}")
    if qs[3] != ks[3] or vs[3] != qs[3]:
        raise ValueError(f"Q, K, V must share the head dimension d, got {qs}, {ks}, {vs}")
    if ks[2] != vs[2]:
        raise ValueError(f"K and V must have the same number of keys, got {ks} and {vs}")
    if qs[0] > 65_535 or qs[1] > 65_535:
        raise ValueError(f"B and H must each be between 1 and 65,535 (grid axes), got {qs[:2]}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"Q, K, V must be on one GPU, got devices {sorted({q.device, k.device, v.device})}")


def _check_scale(scale, d: int) -> float:
    """The softmax scale the tensor-core kernels accept (see ``common.check_scale``)."""
    return check_scale(scale, d, factor=LOG2E)


def _outputs(q: Operand, torch_out: bool):
    """(O operand, O owner, lse owner, lse pointer) for q's shape and dtype: torch tensors on
    q's GPU (torch's allocator, current stream) or CuPy arrays (CuPy's pool, current stream)."""
    B, H, Nq, d = q.shape
    if torch_out:
        import torch
        t = q.keep                          # a tensor of q's dtype and device: new_empty is the fast way
        O = t.new_empty((B, H, Nq, d))
        lse = t.new_empty((B, H, Nq), dtype=torch.float32)
        op = Operand(O.data_ptr(), (B, H, Nq, d), (H * Nq * d, Nq * d, d, 1), q.dtype, O, "torch", q.device)
        return op, O, lse, lse.data_ptr()
    cp = cupy()
    O = cp.empty((B, H, Nq, d), dtype=cp.float16 if q.dtype == "float16" else cp.uint16)
    lse = cp.empty((B, H, Nq), dtype=cp.float32)
    op = Operand(O.data.ptr, (B, H, Nq, d), (H * Nq * d, Nq * d, d, 1), q.dtype, O, "cupy", q.device)
    return op, O, lse, lse.data.ptr


def out_like(q: Operand):
    """Outputs for operand q, of q's own kind (torch or CuPy): (O operand, O, lse, lse pointer).
    For the benchmarks and checks, which launch with ``launch_mma``."""
    return _outputs(q, q.kind == "torch")


def flash_forward_mma(Q, K, V, *, causal: bool = False, scale=None, dtype: str | None = None,
                      Br: int | None = None, Bc: int | None = None, variant: str | None = None):
    """FlashAttention forward on the tensor cores (FA2 Algorithm 1; on Hopper by default the
    FlashAttention-3 kernel: warp-specialised, TMA, ping-pong), fp16/bf16 in, fp32 accumulate.

    Parameters
    ----------
    Q : (B, H, Nq, d); K, V : (B, H, Nk, d) — also (H, N, d) or (N, d).
        torch CUDA tensors (float16 / bfloat16, any strides with unit stride along d and
        16-byte aligned rows; used in place), or CuPy / NumPy float arrays (copied to the
        GPU in ``dtype``). d in {64, 128}; any Nq, Nk >= 1.
    causal : bool, bottom-right aligned (query r sees key c iff c <= r + Nk − Nq).
    scale : float > 0 or None (1/sqrt(d)).
    dtype : "float16" | "bfloat16" | None (torch: the tensors' own; arrays: "float16").
    Br, Bc : block sizes (wgmma, mma.sync: Br in {64, 128}, Bc in {32, 64, 128}; fa3: Br in
        {128, 192}, Bc in {64, 128, 176}); default: measured best for the kernel.
    variant : "fa3" (FlashAttention-3, Hopper) | "wgmma" (FlashAttention-2, Hopper) |
        "mma.sync" (sm_80+) | None: the runner chooses (``auto_variant``: fa3 on Hopper unless
        the blocks asked for are not fa3's or an operand has a broadcast axis; else this GPU's).

    Returns
    -------
    (O, lse): torch inputs give torch tensors O (B, H, Nq, d) in the input dtype and lse
    (B, H, Nq) float32; array inputs give CuPy arrays: O float16 (float32 for bfloat16,
    widened exactly) and lse float32. lse is the natural-log log-sum-exp of scale·QKᵀ over
    visible keys; rows that see no key give O = 0 and lse = −inf; NaN in the inputs gives NaN.
    O and lse have the input's leading axes: (N, d) in gives (N, d) and (N,) out.

    Streams: when any operand is a torch tensor, the call runs on that tensor's GPU and on
    torch's current stream there (arrays mixed in are copied on that stream first), so it
    is ordered after whatever torch queued, and it can be captured by ``torch.cuda.graph``
    (warm it up once outside the capture: the first call compiles). Arrays alone run on
    CuPy's current device and stream.

    Raises
    ------
    TypeError / ValueError for bad inputs (lists and other non-arrays, dtype, shapes,
    strides, alignment, block sizes,
    shared memory asked vs available, a scale whose scale·log2(e) is not a normal float32,
    tensors on different GPUs); RuntimeError without CuPy / a suitable GPU.

    Notes
    -----
    Host cost: the first call with torch tensors of a given shape, strides, dtype and device
    and given arguments is checked in full and leaves a ``LaunchPlan`` (the kernel chosen,
    sizes, strides, scale, output shapes); a repeated call finds it by one key built from the
    tensors (``_plan_key``), allocates O and lse and makes one cuLaunchKernel (fa3: plus three
    tensor maps, cached per buffer set). The recorded run
    (benchmarks/results/mma-h200-2026-12-01.json, ``<impl>_host_us``) measured 30 µs for wgmma
    and 29 µs for fa3 (maps encoded every call then), median over its shapes, against 18 µs for
    SDPA-flash; an earlier run on another machine 14 µs against 15 (benchmarks/NOTES.md);
    ``benchmarks/probe_call.py`` times each piece.
    Gradients: torch tensors that require grad (with grad mode on) go through the autograd
    operator ``flashviz.gpu.flash_attention`` (``autograd.attention_with_lse``): O and lse then
    carry a grad_fn, and the backward is the tensor-core backward (kernels/flash_bwd_mma.cu;
    the fp32 teaching kernel, kernels/flash_bwd.cu, where that one does not apply: see
    ``flashviz.gpu.autograd``). Q, K, V must then all be torch tensors (arrays cannot
    receive gradients: TypeError, one line) — never an output that silently drops the gradient.
    Otherwise the call is forward only. The first call for a
    (dtype, Br, Bc, d, causal) compiles with NVRTC (about a second) and caches the cubin in
    ``~/.cache/flashviz/cubin`` ($FLASHVIZ_CACHE); later processes load it. Needs CuPy
    (``pip install "flashviz[gpu]"`` or ``[gpu-cuda13]``) and, for torch inputs, torch.

    Example
    -------
    >>> import torch, flashviz as fv                                  # doctest: +SKIP
    >>> q, k, v = (torch.randn(4, 32, 4096, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    >>> O, lse = fv.gpu.flash_forward_mma(q, k, v, causal=True)      # O: bf16 (4, 32, 4096, 64)
    """
    torch = sys.modules.get("torch")
    if torch is not None and torch.is_grad_enabled() and _requires_grad(torch, Q, K, V):
        return _with_autograd(Q, K, V, causal, scale, dtype, Br, Bc, variant)
    return forward_mma_nograd(Q, K, V, causal=causal, scale=scale, dtype=dtype, Br=Br, Bc=Bc, variant=variant)


def _requires_grad(torch, Q, K, V) -> bool:
    T = torch.Tensor
    return (isinstance(Q, T) and Q.requires_grad) or (isinstance(K, T) and K.requires_grad) or (
        isinstance(V, T) and V.requires_grad)


def _with_autograd(Q, K, V, causal, scale, dtype, Br, Bc, variant):
    """flash_forward_mma for inputs that require grad: through the autograd operator (O, lse)."""
    import torch
    names = {torch.float16: "float16", torch.bfloat16: "bfloat16"}
    for x, n in ((Q, "Q"), (K, "K"), (V, "V")):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"flash_forward_mma records gradients only when Q, K and V are all torch tensors "
                            f"({n} is {type(x).__name__}); pass tensors, or detach the ones that require grad")
        if x.dtype not in names:
            raise TypeError(f"{n} must be a float16 or bfloat16 torch tensor, got {x.dtype} "
                            f"(flashviz.gpu.flash_attention also takes float32 / float64)")
        if dtype is not None and dtype != names[x.dtype]:
            raise TypeError(f"{n} is {names[x.dtype]} but dtype={dtype!r} was asked; convert the tensor first")
    from ..autograd import attention_with_lse
    return attention_with_lse(Q, K, V, causal=causal, scale=scale, Br=Br, Bc=Bc, variant=variant)


def forward_mma_nograd(Q, K, V, *, causal: bool = False, scale=None, dtype: str | None = None,
                 Br: int | None = None, Bc: int | None = None, variant: str | None = None):
    """``flash_forward_mma`` without the gradient check: the forward itself (the autograd
    operator's forward calls this). Arguments, returns and errors as ``flash_forward_mma``.

    A call whose key (``_plan_key``) has a plan in ``_PLANS`` is launched from it: O and lse
    allocated, one launch. Every other call takes the general path: every check, the one choice
    of kernel, and the plan that the next call with this key launches (``_run``)."""
    hit = _plan_key(Q, K, V, causal, scale, dtype, Br, Bc, variant)
    if hit is not None:
        plan = _PLANS.get(hit[0])
        if plan is not None:
            return _call_plan(plan, hit[1], hit[2], hit[3])
    causal = check_flag(causal, "causal")
    if is_torch(Q) and is_torch(K) and is_torch(V):
        # the common case: tensors in place, torch's current stream, torch outputs
        q, k, v = torch_operand(Q, "Q", dtype), torch_operand(K, "K", dtype), torch_operand(V, "V", dtype)
        _check_shapes(q, k, v)
        if hit is None:         # the process's first launch (the key reads the current device) or unkeyable arguments
            if not _DRIVER:
                _driver()
            hit = _plan_key(Q, K, V, causal, scale, dtype, Br, Bc, variant)
        return _run(Q, q, k, v, causal, scale, Br, Bc, variant, q.device, None, True,
                    None if hit is None else hit[0])
    t = next((x for x in (Q, K, V) if is_torch(x)), None)
    if t is None:               # arrays: CuPy's current device and stream
        q = as_operand(Q, "Q", dtype)
        k, v = as_operand(K, "K", q.dtype), as_operand(V, "V", q.dtype)
        _check_shapes(q, k, v)
        return _run(Q, q, k, v, causal, scale, Br, Bc, variant, q.device, None, False)
    # arrays mixed with torch tensors: convert the arrays on the tensors' GPU and torch's
    # current stream there, so the copies, the launch and torch's work are ordered
    ref = as_operand(t, "Q" if t is Q else "K" if t is K else "V", dtype)
    cp = cupy()
    with cp.cuda.Device(ref.device), torch_stream(ref.device) as stream:
        q = as_operand(Q, "Q", dtype or ref.dtype)
        k, v = as_operand(K, "K", q.dtype), as_operand(V, "V", q.dtype)
        _check_shapes(q, k, v)
        return _run(Q, q, k, v, causal, scale, Br, Bc, variant, ref.device, stream, q.kind == "torch")


@dataclass(frozen=True, slots=True, eq=False)
class LaunchPlan:
    """What a call of ``flash_forward_mma`` needs once the general path has checked it and chosen
    its kernel: made by ``_run`` for one call's key (``_plan_key``), kept in ``_PLANS`` and
    launched as it is by every later call with the same key (``_call_plan``).

    kernel: the compiled MMAKernel (``variant``: the kernel ``auto_variant`` or the caller chose;
    its Br, Bc the blocks); device: the GPU's index (the current device during the launch);
    args: what ``_launch`` takes between the five pointers and the stream — (B, H, Nq, Nk, the
    element strides of Q's, K's, V's and O's (B, H, N) axes (size-1 axes 0), the checked softmax
    scale; the kernels receive scale·log2(e)); o_shape, lse_shape: the outputs' shapes, with the
    caller's leading axes ((N, d) in: (Nq, d) and (Nq,) out); templates: torch outputs only, a
    one-element tensor of Q's dtype and one of float32 on the device, expanded to o_shape and
    lse_shape (``torch.empty_like`` of one gives a fresh contiguous output, about 1 µs less than
    ``new_empty``: benchmarks/NOTES.md, the public call); None for CuPy outputs.
    """

    kernel: MMAKernel
    device: int
    args: tuple
    o_shape: tuple
    lse_shape: tuple
    templates: tuple | None = None

    @property
    def variant(self) -> str:
        return self.kernel.variant


#: _plan_key(...)[0] -> LaunchPlan; emptied when it holds _PLANS_MAX plans
_PLANS: dict = {}
_PLANS_MAX = 256


def _plan_key(Q, K, V, causal, scale, dtype, Br, Bc, variant):
    """(key, Q's, K's, V's data pointers) of one call, or None where no plan applies: Q, K, V not
    all of type torch.Tensor (subclasses go the general way), an argument of a type the key
    cannot tell apart from a valid one, or no launch yet in this process. The one key function:
    the repeated call finds its plan with it, and the general path stores the plan under it.

    The key holds everything the general path's checks and choices read from a call: each
    tensor's shape, strides, dtype, device index; whether all three are CUDA tensors; whether
    the three base addresses are 16-byte aligned (all the checks read from a pointer); CuPy's
    current device (a plan is launched only there); causal, scale, dtype, Br, Bc, variant as
    given; the kernel source overrides. Only plain types, so that values the checks treat
    differently never compare equal: causal True or False (not 1), scale None or a float (not
    True), dtype, Br, Bc, variant None, an int or a str (not 128.0)."""
    torch = sys.modules.get("torch")
    if torch is None or not _DRIVER:
        return None
    T = torch.Tensor
    if (type(Q) is not T or type(K) is not T or type(V) is not T or (causal is not True and causal is not False)
            or (scale is not None and type(scale) is not float)
            or not (_plain(dtype) and _plain(Br) and _plain(Bc) and _plain(variant))):
        return None
    qp, kp, vp = Q.data_ptr(), K.data_ptr(), V.data_ptr()
    key = (Q.shape, Q.stride(), K.shape, K.stride(), V.shape, V.stride(), Q.dtype, K.dtype, V.dtype,
           Q.get_device(), K.get_device(), V.get_device(), Q.is_cuda and K.is_cuda and V.is_cuda,
           (qp | kp | vp) & 15 == 0, _DRIVER[2](), causal, scale, dtype, Br, Bc, variant,
           tuple(SOURCE_OVERRIDE.items()) if SOURCE_OVERRIDE else None)
    return key, qp, kp, vp


def _make_plan(mk: MMAKernel, dev: int, q: Operand, k: Operand, v: Operand, scale: float, lead: tuple,
               torch_out: bool) -> LaunchPlan:
    """The plan of a checked call: mk its kernel, q, k, v its operands, scale the checked softmax
    scale, lead the caller's leading axes (Q's shape without (Nq, d)); torch_out: torch outputs
    (the templates are made here, from q's tensor)."""
    B, H, Nq, d = q.shape
    o_shape, lse_shape = (*lead, Nq, d), (*lead, Nq)
    templates = None
    if torch_out:
        import torch
        one = q.keep.new_empty(1)
        templates = (one.expand(o_shape), one.new_empty(1, dtype=torch.float32).expand(lse_shape))
    return LaunchPlan(mk, dev, (B, H, Nq, k.shape[2], q.strides[:3], k.strides[:3], v.strides[:3],
                                (H * Nq * d, Nq * d, d), scale), o_shape, lse_shape, templates)


def _call_plan(plan: LaunchPlan, qp: int, kp: int, vp: int):
    """Launch a plan with torch outputs on Q, K, V at qp, kp, vp: fresh O and lse, the launch on
    torch's current stream of the plan's device (which must be current). Returns (O, lse)."""
    el = sys.modules["torch"].empty_like
    t = plan.templates
    O, lse = el(t[0]), el(t[1])
    ensure_context(plan.device)
    _launch(plan.kernel, qp, kp, vp, O.data_ptr(), lse.data_ptr(), *plan.args, raw_torch_stream(plan.device))
    return O, lse


def _run(Q, q, k, v, causal, scale, Br, Bc, variant, dev, stream, torch_out, key=None):
    """The general path after the operand checks: the scale check, the one choice of kernel
    (``auto_variant``), its compilation, the plan and the launch through it; the plan is stored
    under key (a ``_plan_key`` key; None: not stored) unless the call had to switch the current
    device. stream: CuPy outputs' stream (None: CuPy's current stream); torch outputs go on
    torch's current stream of dev. Returns (O, lse)."""
    d = q.shape[3]
    scale = check_scale(scale, d, factor=LOG2E)
    if not _DRIVER:
        _driver()
    prev = _DRIVER[2]()
    switch = prev != dev
    if switch:
        cupy().cuda.runtime.setDevice(dev)
    try:
        if variant is None:
            variant = auto_variant(dev, Br, Bc, (q, k, v), causal)
        mk = compile_mma(q.dtype, Br, Bc, d, causal, variant, device=dev)
        plan = _make_plan(mk, dev, q, k, v, scale, tuple(Q.shape)[:-2], torch_out)
        if torch_out:
            O, lse = _call_plan(plan, q.ptr, k.ptr, v.ptr)
        else:
            cp = cupy()
            O = cp.empty(plan.o_shape, dtype=cp.float16 if q.dtype == "float16" else cp.uint16)
            lse = cp.empty(plan.lse_shape, dtype=cp.float32)
            _launch(mk, q.ptr, k.ptr, v.ptr, O.data.ptr, lse.data.ptr, *plan.args,
                    (_DRIVER[1]() if stream is None else stream).ptr)
    finally:
        if switch:
            cupy().cuda.runtime.setDevice(prev)
    if key is not None and not switch:
        if len(_PLANS) >= _PLANS_MAX:
            _PLANS.clear()
        _PLANS[key] = plan
    if not torch_out and q.dtype == "bfloat16":
        O = bf16_bits_to_float32(O)
    return O, lse
