"""The tensor-core backward: ``kernels/flash_bwd_mma.cu`` (mma.sync, sm_80 and later, Hopper
included), fp16 / bf16 in, fp32 accumulation, through CuPy on torch tensors.

FlashAttention-2's Algorithm 2 with the five products on the tensor cores: key blocks outer
(Bc = 64 or 128 keys, one warp per 16 keys: S_ijᵀ, P_ijᵀ, dP_ijᵀ, dS_ijᵀ and dK_j, dV_j stay in that
warp's registers), query blocks of Br = 64 inner. This first version has no software pipeline
(each tile is loaded, then computed) and no Hopper-only instructions (wgmma, TMA, warp
specialisation): the FlashAttention-3 design remains the target of issue 23.

dQ two ways (``flash_backward_mma(dq=...)``, ``BWD_DQ``):

* ``"separate"`` — the default (``BWD_DQ_DEFAULT``): the main kernel computes dK, dV alone, then a
  separate pass, ``flash_bwd_mma_dq`` (query blocks outer, dQ_i kept in registers), computes dQ in
  a fixed order of additions: the same bits on every run;
* ``"atomic"`` — the main kernel adds each tile's piece of dQ into an fp32 buffer with atomicAdd,
  and a last small kernel rounds it to the input dtype: its last bits may differ run to run.

The separate pass is the default because it measured faster: 1.17–1.35x the atomic path's speed,
kernel-only, at every shape of benchmarks/results/bwd-h200-2026-12-05.json (H200, fp16, B·N = 16k
tokens, d 64 / 128, causal and not, N 1k–16k; ``bwd_mma_det`` against ``bwd_mma`` there, which
were the separate and the atomic path then), though it recomputes S_ij and dP_ij once more.
Both are checked against float64 gradients on the H200 (benchmarks/results/tests-h200-2026-12-05.json,
at 4962ef2), the separate pass for the same bits on 20 runs; ``flashviz.gpu.flash_attention``
uses either since 7d951c8 (its own gpu tests, tests/gpu/test_backward_autograd.py, check that route).

A second main kernel for Hopper, ``kernels/flash_bwd_wgmma.cu`` (``flash_backward_mma(kernel="wgmma")``,
sm_90 only, compiled for sm_90a): the same Algorithm 2 with the five products on wgmma (one consumer
warpgroup per 64 keys, Q_i, dO_i double-buffered by cp.async) and dQ three ways: "bulk" (its
default: dQ_i's fp32 tile added into HBM by one bulk reduction of the copy engine per query block),
"atomic" (fp32 atomicAdd) or "separate" (dK, dV only; dQ by the mma pass above). It is the default on sm_90
(``default_kernel``; Bc 64 at d = 64 with its bulk dQ): 1.3–1.9x the mma kernel, kernel-only, at all 12 shapes of
benchmarks/results/check-bwd-wgmma-h100-80gb-hbm3-2026-12-06.json.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass

import numpy as np

from ...checks import check_flag, check_member
from ..common import check_scale, cupy, device_facts, source, torch_stream

_KERNEL_FILE = "flash_bwd_mma.cu"
BWD_MMA_BR = 64                        #: query rows per inner step (fixed in the kernel)
BWD_MMA_BC = (64, 128)                 #: key rows per block: Bc/16 warps
BWD_MMA_DQ_BC = 64                     #: keys per step of the deterministic dQ pass (fixed in the kernel)
#: the default Bc: 128 (8 warps) measured 10-25 % faster than 64 at every shape of
#: benchmarks/results/probe-bwd-h200-2026-12-02.json (e.g. d = 128, N = 4k: 8.05 against 10.06 ms)
BWD_MMA_BC_DEFAULT = 128
BWD_MMA_D = (64, 128)
#: software-pipeline stages of the streamed tiles (Q_i, dO_i in the main kernel; K_j, V_j in the dQ
#: pass): 1 = load, wait, compute (v1, measured); 2 = the next tile's copies in flight during this
#: one (v2, benchmarks/NOTES.md; the default once measured faster: benchmarks/ab_bwd.py)
BWD_MMA_STAGES = (1, 2)
BWD_MMA_STAGES_DEFAULT = 1
#: the dQ algorithms of ``flash_backward_mma(dq=...)``: "atomic" (fp32 atomicAdd in the main kernel,
#: then a convert kernel) or "separate" (the main kernel without atomics, then the fixed-order pass
#: ``flash_bwd_mma_dq``: the same bits on every run)
BWD_DQ = ("atomic", "separate")
#: the dQ algorithm when none is named: "separate", measured 1.17–1.35x faster than "atomic",
#: kernel-only, at all 20 shapes of benchmarks/results/bwd-h200-2026-12-05.json (H200, fp16;
#: there ``bwd_mma_det`` against ``bwd_mma``: e.g. d = 64, N = 16k, 27.3 against 36.3 ms)
BWD_DQ_DEFAULT = "separate"
#: the main kernels of ``flash_backward_mma(kernel=...)``: "mma" (kernels/flash_bwd_mma.cu, mma.sync,
#: sm_80 and later) or "wgmma" (kernels/flash_bwd_wgmma.cu, Hopper's wgmma, sm_90 only)
BWD_KERNELS = ("mma", "wgmma")
#: the main kernel when none is named (``default_kernel``): "wgmma" on sm_90, measured 1.34–1.85x
#: the mma kernel (with ``wgmma_bc_default``'s Bc), kernel-only, at all 12 shapes of
#: benchmarks/results/check-bwd-wgmma-h100-80gb-hbm3-2026-12-06.json (H100, fp16, B·N = 16k tokens,
#: N 1k / 4k / 16k, d 64 / 128, causal and not; each kernel's default dQ and Bc); "mma" elsewhere
BWD_KERNEL_HOPPER, BWD_KERNEL_OTHER = "wgmma", "mma"
_WGMMA_FILE = "flash_bwd_wgmma.cu"
BWD_WGMMA_BC = (64, 128)               #: key rows per block: Bc/64 consumer warpgroups
BWD_WGMMA_BC_DEFAULT = 128
#: exceptions to ``BWD_WGMMA_BC_DEFAULT`` by (d, dq): at d = 64 the "bulk" dQ with Bc = 64 measured
#: 1.14–1.23x Bc = 128 at all 6 d = 64 shapes of the same record (e.g. N = 16k: 310 against 253 TFLOP/s)
BWD_WGMMA_BC_BY = {(64, "bulk"): 64}
#: the wgmma kernel's dQ algorithms: template argument DQ 0 ("separate": dK, dV only, then the mma
#: dQ pass), 1 ("atomic": fp32 atomicAdd), 2 ("bulk": one bulk reduction per query block)
BWD_WGMMA_DQ = {"separate": 0, "atomic": 1, "bulk": 2}
#: the wgmma kernel's dQ when none is named (and deterministic=False): "bulk", FlashAttention-3's way
BWD_WGMMA_DQ_DEFAULT = "bulk"
_CACHE: dict = {}


def check_dq(dq, deterministic: bool = False, kernel: str | None = "mma") -> str | None:
    """The dQ algorithm ``flash_backward_mma`` runs: ``dq`` ("atomic" or "separate"; with
    kernel="wgmma" also "bulk"), or for None the kernel's default (``BWD_DQ_DEFAULT``;
    ``BWD_WGMMA_DQ_DEFAULT``, "separate" when deterministic). ``deterministic=True`` asks for the
    same bits on every run, which only "separate" gives: None or "separate" then, and ValueError for
    "atomic" / "bulk". kernel=None (not yet known: the device decides) checks against every
    kernel's choices and returns ``dq`` as given. ValueError (one line) for any other dq;
    TypeError for a non-bool deterministic."""
    deterministic = check_flag(deterministic, "deterministic")
    if kernel is None:
        choices, default, words = ("atomic", "bulk", "separate"), None, "'bulk' with the wgmma kernel, else 'separate'"
    else:
        choices, default = (BWD_DQ, BWD_DQ_DEFAULT) if kernel == "mma" else (tuple(BWD_WGMMA_DQ), BWD_WGMMA_DQ_DEFAULT)
        words = repr(default) + (f" with kernel={kernel!r}" if kernel == "wgmma" else "")
    if dq is None:
        return default if default is None or not deterministic else "separate"
    if kernel == "mma" and dq == "bulk":
        raise ValueError("dq='bulk' needs the wgmma kernel (sm_90, stages None); this call runs kernel='mma'")
    if not isinstance(dq, str) or dq not in choices:
        raise ValueError(f"dq must be one of {', '.join(repr(x) for x in choices)} or None (the default: {words}); "
                         f"got {dq!r}")
    if deterministic and dq != "separate":
        raise ValueError(f"deterministic=True needs dq='separate' (or None); dq={dq!r} adds dQ with atomics, "
                         f"whose last bits may change between runs")
    return dq


def bwd_mma_smem_bytes(Bc: int, d: int, stages: int = 1) -> int:
    """Dynamic shared memory of one block of ``flash_bwd_mma<DT, Bc, d, causal, atomic, stages>``,
    in bytes: 2·(2·Bc·d + 2·stages·64·d + 64·Bc) + 8·stages·64 (K_j, V_j, Q_i, dO_i per stage,
    dS_ij in b16; L_i, D_i per stage in fp32). One stage: Bc = 64, d = 128: 74,240; Bc = 128,
    d = 128: 115,200; two stages 148,480 there. Raises ValueError / TypeError for an unsupported
    Bc, d or stages."""
    Bc = check_member(Bc, "Bc", BWD_MMA_BC, "tensor-core backward")
    d = check_member(d, "d", BWD_MMA_D, "tensor-core backward")
    stages = check_member(stages, "stages", BWD_MMA_STAGES, "tensor-core backward")
    return 2 * (2 * Bc * d + 2 * stages * BWD_MMA_BR * d + BWD_MMA_BR * Bc) + 8 * stages * BWD_MMA_BR


def bwd_mma_dq_smem_bytes(d: int, stages: int = 1) -> int:
    """Dynamic shared memory of one block of the deterministic dQ pass ``flash_bwd_mma_dq<DT, d,
    causal, stages>``, in bytes: 2·(2·64·d + 2·stages·64·d) + 8·64 (Q_i, dO_i, and K_j, V_j per
    stage, in b16; L_i, D_i in fp32). One stage: d = 64: 33,280; d = 128: 66,048; two stages
    98,816 at d = 128. Raises ValueError / TypeError for an unsupported d or stages."""
    d = check_member(d, "d", BWD_MMA_D, "tensor-core backward")
    stages = check_member(stages, "stages", BWD_MMA_STAGES, "tensor-core backward")
    return 2 * (2 * BWD_MMA_BR * d + 2 * stages * BWD_MMA_DQ_BC * d) + 8 * BWD_MMA_BR


def backward_expressions(dtype: str, Bc: int, d: int, causal: bool, deterministic: bool,
                         stages: int) -> dict[str, str]:
    """The NVRTC name expressions of the kernels ``compile_backward_mma`` builds for one shape class:
    {"preprocess", "main", "convert"} and, deterministic, "dq" → e.g.
    "flash_bwd_mma<0,128,128,true,false,2>" (template arguments: DT (0 fp16, 1 bf16), Bc, D,
    CAUSAL, ATOMIC_DQ, STAGES; kernels/flash_bwd_mma.cu). Raises ValueError / TypeError for a dtype
    other than "float16" / "bfloat16" or an unsupported Bc, d or stages."""
    if dtype not in ("float16", "bfloat16"):
        raise ValueError(f"dtype must be 'float16' or 'bfloat16'; got {dtype!r}")
    Bc = check_member(Bc, "Bc", BWD_MMA_BC, "tensor-core backward")
    d = check_member(d, "d", BWD_MMA_D, "tensor-core backward")
    stages = check_member(stages, "stages", BWD_MMA_STAGES, "tensor-core backward")
    dt = 0 if dtype == "float16" else 1
    c = "true" if causal else "false"
    out = {"preprocess": f"flash_bwd_mma_preprocess<{dt},{d}>",
           "main": f"flash_bwd_mma<{dt},{Bc},{d},{c},{'false' if deterministic else 'true'},{stages}>",
           "convert": f"flash_bwd_mma_convert<{dt}>"}
    if deterministic:
        out["dq"] = f"flash_bwd_mma_dq<{dt},{d},{c},{stages}>"
    return out


@dataclass
class MMABackward:
    """The compiled kernels of one (dtype, Bc, d, causal, deterministic): preprocess, main,
    convert (cupy RawKernels; deterministic: main without the dQ atomics, and dq, the dQ pass, with
    its shared memory dq_smem_bytes); smem_bytes of main; compile_ms (NVRTC + load, ms); num_regs
    and local_bytes (spills, bytes per thread) of main; stages (the software pipeline's depth)."""

    dtype: str
    Bc: int
    d: int
    causal: bool
    preprocess: object
    main: object
    convert: object
    smem_bytes: int
    compile_ms: float
    num_regs: int
    local_bytes: int
    deterministic: bool = False
    dq: object = None
    dq_smem_bytes: int = 0
    stages: int = 1


def compile_backward_mma(dtype: str = "float16", Bc: int = 64, d: int = 64, causal: bool = False,
                         deterministic: bool = False, *, traced: bool = False,
                         stages: int | None = None) -> MMABackward:
    """Compile (or fetch from the per-process cache) the tensor-core backward for one shape class.

    dtype "float16" | "bfloat16"; Bc in {64, 128}; d in {64, 128}; deterministic: the kernels of
    dQ by the separate pass (``dq="separate"``; False: by atomics, ``dq="atomic"``); stages: 1 or 2 (None: ``BWD_MMA_STAGES_DEFAULT``), the
    software pipeline of the streamed tiles; traced: main built with its timeline switch on
    (``-DFLASHVIZ_TRACE=1``: two more parameters, ``launch_backward_mma(trace=...)``,
    ``gpu.trace_backward(kernel="mma")``). Raises ValueError / TypeError for unsupported values,
    RuntimeError without CuPy, on a GPU older than sm_80, or on an NVRTC error (with its log)."""
    deterministic = check_flag(deterministic, "deterministic")
    stages = BWD_MMA_STAGES_DEFAULT if stages is None else check_member(stages, "stages", BWD_MMA_STAGES,
                                                                        "tensor-core backward")
    cp = cupy()
    dev = cp.cuda.runtime.getDevice()
    key = (dtype, Bc, d, causal, deterministic, dev, bool(traced), stages)
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    if dtype not in ("float16", "bfloat16"):
        raise ValueError(f"dtype must be 'float16' or 'bfloat16'; got {dtype!r}")
    causal = check_flag(causal, "causal")
    smem = bwd_mma_smem_bytes(Bc, d, stages)
    facts = device_facts(dev)
    if facts.cc < 80:
        raise RuntimeError(f"the tensor-core backward needs an Ampere or newer GPU (sm_80+); this one is sm_{facts.cc}")
    if smem > facts.smem_optin:
        raise ValueError(f"the tensor-core backward with Bc={Bc}, d={d} needs {smem:,} bytes of shared memory; the "
                         f"device limit is {facts.smem_optin:,} per block (opt-in)")
    from ..nvrtc import compile_cubin
    names = backward_expressions(dtype, Bc, d, causal, deterministic, stages)
    src, arch = source(_KERNEL_FILE), f"sm_{facts.cc}"
    t0 = time.perf_counter()
    pre, _, _ = compile_cubin(src, names["preprocess"], arch)
    main, _, _ = compile_cubin(src, names["main"], arch, options=("-DFLASHVIZ_TRACE=1",) if traced else ())
    conv, _, _ = compile_cubin(src, names["convert"], arch)
    main.max_dynamic_shared_size_bytes = smem
    dq, dq_smem = None, 0
    if deterministic:
        dq_smem = bwd_mma_dq_smem_bytes(d, stages)
        dq, _, _ = compile_cubin(src, names["dq"], arch)
        dq.max_dynamic_shared_size_bytes = dq_smem
    mb = MMABackward(dtype, Bc, d, causal, pre, main, conv, smem, (time.perf_counter() - t0) * 1e3,
                     int(main.num_regs), int(main.local_size_bytes), deterministic, dq, dq_smem, stages)
    _CACHE[key] = mb
    return mb


def check_kernel(kernel, name: str = "kernel") -> str | None:
    """The main kernel ``flash_backward_mma`` runs: ``kernel`` ("mma" or "wgmma"), or None (the
    device decides: ``default_kernel``); ValueError (one line, calling the argument ``name``:
    "kernel", or "bwd_kernel" for ``flash_attention``) for anything else. Pure Python: no torch,
    no GPU."""
    if kernel is None:
        return None
    if not isinstance(kernel, str) or kernel not in BWD_KERNELS:
        raise ValueError(f"{name} must be one of {', '.join(repr(x) for x in BWD_KERNELS)} or None "
                         f"(the default: {BWD_KERNEL_HOPPER!r} on sm_90, else {BWD_KERNEL_OTHER!r}); got {kernel!r}")
    return kernel


def default_kernel(cc: int, stages=None) -> str:
    """The main kernel ``flash_backward_mma`` runs when none is named, on a GPU of compute capability
    ``cc`` (e.g. 90 for sm_90): ``BWD_KERNEL_HOPPER`` ("wgmma") on sm_90, where it measured faster
    at every shape, unless ``stages`` is given (a switch of the mma kernel only);
    ``BWD_KERNEL_OTHER`` ("mma") otherwise."""
    return BWD_KERNEL_HOPPER if cc == 90 and stages is None else BWD_KERNEL_OTHER


def wgmma_bc_default(d: int, dq: str) -> int:
    """The wgmma backward's key rows per block when none is named: ``BWD_WGMMA_BC_BY[(d, dq)]`` where
    measured faster (64 for d = 64 with the "bulk" dQ), else ``BWD_WGMMA_BC_DEFAULT`` (128)."""
    return BWD_WGMMA_BC_BY.get((d, dq), BWD_WGMMA_BC_DEFAULT)


def check_stages(kernel: str | None, stages):
    """``stages`` as ``flash_backward_mma`` takes it: None, or 1 / 2 for the mma kernel (named, or
    None: naming stages makes the default the mma kernel). ValueError (one line) for stages with
    kernel="wgmma" (which always double-buffers) or another value; TypeError for a non-integer."""
    if stages is None:
        return None
    if kernel == "wgmma":
        raise ValueError(f"stages={stages!r} is for kernel='mma'; the wgmma kernel always double-buffers Q_i, dO_i")
    return check_member(stages, "stages", BWD_MMA_STAGES, "tensor-core backward")


def backward_plan(cc: int, d: int, *, kernel=None, dq=None, deterministic=False, Bc=None,
                  stages=None) -> tuple[str, str, int]:
    """(kernel, dq, Bc): what ``flash_backward_mma`` runs with these arguments on a GPU of compute
    capability ``cc`` (e.g. 90) for head dimension ``d``: the main kernel (named, else
    ``default_kernel``), the dQ path (``check_dq``) and the key rows per block (named, else
    ``wgmma_bc_default`` for "wgmma" and ``BWD_MMA_BC_DEFAULT`` for "mma"). ValueError / TypeError
    (one line) for an unknown kernel or dq, dq against ``deterministic``, or an unsupported Bc.
    Pure Python: the benchmark names the call it times with it."""
    kernel = check_kernel(kernel)
    stages = check_stages(kernel, stages)
    kernel = kernel or default_kernel(cc, stages)
    dq = check_dq(dq, deterministic, kernel)
    if Bc is None:
        Bc = wgmma_bc_default(d, dq) if kernel == "wgmma" else BWD_MMA_BC_DEFAULT
    else:
        Bc = check_member(Bc, "Bc", BWD_WGMMA_BC if kernel == "wgmma" else BWD_MMA_BC,
                          f"{kernel} backward" if kernel == "wgmma" else "tensor-core backward")
    return kernel, dq, Bc


def bwd_wgmma_smem_bytes(Bc: int, d: int, dq: str = BWD_WGMMA_DQ_DEFAULT) -> int:
    """Dynamic shared memory of one block of ``flash_bwd_wgmma<DT, Bc, d, causal, DQ>``, in bytes
    (kernels/flash_bwd_wgmma.cu, ``fvbw::Shape::SMEM``): 1024 (to align the tiles on 1024 bytes)
    + 2·(2·Bc·d + 4·64·d) (K_j, V_j; Q_i, dO_i in two stages, b16) + 2·Bc·64 for dS_ijᵀ (dq "atomic"
    or "bulk") + KS·64·(4·d + 32) for the staged fp32 dQ_i tile(s), rows padded by 32 bytes ("bulk";
    KS = 2 for d = 64, Bc = 128, else 1) + 16·64 (L_i, D_i, two stages, fp32). Bc = 128, d = 128,
    "bulk": 184,320. ValueError /
    TypeError for an unsupported Bc, d or dq."""
    Bc = check_member(Bc, "Bc", BWD_WGMMA_BC, "wgmma backward")
    d = check_member(d, "d", BWD_MMA_D, "wgmma backward")
    if dq not in BWD_WGMMA_DQ:
        raise ValueError(f"dq must be one of {', '.join(repr(x) for x in BWD_WGMMA_DQ)}; got {dq!r}")
    br, nwg, ncb = BWD_MMA_BR, Bc // 64, d // 64
    ks = 1 if ncb >= nwg else nwg // ncb
    ds = 2 * Bc * br if dq != "separate" else 0
    dqs = ks * br * (4 * d + 32) if dq == "bulk" else 0
    return 1024 + 2 * (2 * Bc * d + 4 * br * d) + ds + dqs + 16 * br


def wgmma_backward_expressions(dtype: str, Bc: int, d: int, causal: bool, dq: str) -> dict[str, str]:
    """The NVRTC name expressions of the kernels ``compile_backward_wgmma`` builds: "main" from
    kernels/flash_bwd_wgmma.cu (template arguments DT, Bc, D, CAUSAL, DQ: 0 "separate", 1
    "atomic", 2 "bulk"), "preprocess" and either "convert" or (dq "separate") "dq" from
    kernels/flash_bwd_mma.cu (the dQ pass with two stages), e.g. "flash_bwd_wgmma<0,128,128,true,2>".
    ValueError / TypeError for an unsupported dtype, Bc, d or dq."""
    if dtype not in ("float16", "bfloat16"):
        raise ValueError(f"dtype must be 'float16' or 'bfloat16'; got {dtype!r}")
    bwd_wgmma_smem_bytes(Bc, d, dq)                       # checks Bc, d, dq
    dt = 0 if dtype == "float16" else 1
    c = "true" if causal else "false"
    out = {"preprocess": f"flash_bwd_mma_preprocess<{dt},{d}>",
           "main": f"flash_bwd_wgmma<{dt},{Bc},{d},{c},{BWD_WGMMA_DQ[dq]}>"}
    if dq == "separate":
        out["dq"] = f"flash_bwd_mma_dq<{dt},{d},{c},2>"
    else:
        out["convert"] = f"flash_bwd_mma_convert<{dt}>"
    return out


def compile_backward_wgmma(dtype: str = "float16", Bc: int = BWD_WGMMA_BC_DEFAULT, d: int = 128,
                           causal: bool = False, dq: str = BWD_WGMMA_DQ_DEFAULT, *,
                           traced: bool = False) -> MMABackward:
    """Compile (or fetch from the per-process cache; NVRTC's disk cache is keyed by the source text)
    the Hopper backward for one shape class: the main kernel of kernels/flash_bwd_wgmma.cu for
    sm_90a, and the preprocess and convert (or dQ pass) kernels of kernels/flash_bwd_mma.cu.

    dtype "float16" | "bfloat16"; Bc in {64, 128} (Bc/64 consumer warpgroups); d in {64, 128};
    dq "bulk" | "atomic" | "separate"; traced: the main kernel built with its timeline switch on
    (``-DFLASHVIZ_TRACE=1``: two more parameters, ``launch_backward_mma(trace=...)``,
    ``gpu.trace_backward(kernel="wgmma")``). Returns an ``MMABackward`` that ``launch_backward_mma``
    launches like the mma one (``deterministic`` is dq == "separate"; ``stages`` 2: the kernel's
    fixed double buffering). Raises ValueError / TypeError for unsupported values or a GPU that is
    not sm_90 (wgmma exists on Hopper only), RuntimeError without CuPy or on an NVRTC error."""
    cp = cupy()
    dev = cp.cuda.runtime.getDevice()
    key = ("wgmma", dtype, Bc, d, causal, dq, dev, bool(traced))
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    causal = check_flag(causal, "causal")
    names = wgmma_backward_expressions(dtype, Bc, d, causal, dq)
    smem = bwd_wgmma_smem_bytes(Bc, d, dq)
    facts = device_facts(dev)
    if facts.cc != 90:
        raise ValueError(f"kernel='wgmma' needs a Hopper GPU (sm_90: wgmma); this one is sm_{facts.cc}: "
                         f"use kernel='mma'")
    if smem > facts.smem_optin:
        raise ValueError(f"the wgmma backward with Bc={Bc}, d={d}, dq={dq!r} needs {smem:,} bytes of shared "
                         f"memory; the device limit is {facts.smem_optin:,} per block (opt-in)")
    from ..nvrtc import compile_cubin
    mma_src = source(_KERNEL_FILE)
    t0 = time.perf_counter()
    pre, _, _ = compile_cubin(mma_src, names["preprocess"], f"sm_{facts.cc}")
    main, _, _ = compile_cubin(source(_WGMMA_FILE), names["main"], "sm_90a",
                               options=("-DFLASHVIZ_TRACE=1",) if traced else ())
    main.max_dynamic_shared_size_bytes = smem
    conv = dqk = None
    dq_smem = 0
    if dq == "separate":
        dq_smem = bwd_mma_dq_smem_bytes(d, 2)
        dqk, _, _ = compile_cubin(mma_src, names["dq"], f"sm_{facts.cc}")
        dqk.max_dynamic_shared_size_bytes = dq_smem
    else:
        conv, _, _ = compile_cubin(mma_src, names["convert"], f"sm_{facts.cc}")
    mb = MMABackward(dtype, Bc, d, causal, pre, main, conv, smem, (time.perf_counter() - t0) * 1e3,
                     int(main.num_regs), int(main.local_size_bytes), dq == "separate", dqk, dq_smem, 2)
    _CACHE[key] = mb
    return mb


def _flat(t, name: str, dtype, dev: int):
    """t as a contiguous, 16-byte aligned tensor (t itself when it already is one)."""
    import torch
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"flash_backward_mma takes torch CUDA tensors; {name} is {type(t).__name__} "
                        f"(arrays: flashviz.gpu.flash_backward_gpu)")
    if not t.is_cuda:
        raise TypeError(f"{name} is a CPU torch tensor; move it to the GPU (.cuda()) first")
    if t.get_device() != dev:
        raise ValueError(f"all inputs must be on one GPU, got {name} on cuda:{t.get_device()} and Q on cuda:{dev}")
    if t.dtype != dtype:
        raise TypeError(f"{name} must be {dtype} like Q, got {t.dtype}")
    x = t.detach().contiguous()
    return x.clone() if x.data_ptr() % 16 else x


def flash_backward_mma(Q, K, V, O, dO, lse, *, causal: bool = False, scale=None, deterministic: bool = False,
                       dlse=None, Bc: int | None = None, stages: int | None = None, dq: str | None = None,
                       kernel: str | None = None):
    """FlashAttention-2 backward on the tensor cores (kernels/flash_bwd_mma.cu, mma.sync; or
    kernels/flash_bwd_wgmma.cu, Hopper's wgmma, with ``kernel="wgmma"``).

    Source: Dao 2023, FlashAttention-2, Algorithm 2; the same step tags as flash_bwd.cu and
    flashviz/backward.py.

    Parameters
    ----------
    Q, O, dO : (..., Nq, d); K, V : (..., Nk, d); lse : (..., Nq)
        torch CUDA tensors: Q, K, V, O, dO of one dtype, float16 or bfloat16 (any strides: copied
        to contiguous where needed); lse the forward's float32 natural-log log-sum-exp (−inf for a
        row that sees no key). One leading shape (such as (B, H)); d in {64, 128}; Nq, Nk >= 1.
    causal : bool, bottom-right aligned (query r sees key c iff c <= r + Nk − Nq).
    scale : float > 0 or None (1/sqrt(d)); must be the forward's.
    deterministic : True promises the same bits on every run: dQ by the separate pass (dq None or
        "separate"; "atomic" and "bulk" are ValueErrors). False asks for no such promise: the
        default dQ is then the wgmma kernel's "bulk" on sm_90 (the last bits may change between
        runs) and the mma kernel's "separate" elsewhere (the same bits anyway).
    dlse : optional float tensor (..., Nq), the gradient of the loss with respect to lse.
    Bc : key rows per block, 64 or 128 (None: ``backward_plan``'s: 64 for the wgmma kernel at d = 64
        with dq "bulk", else 128).
    stages : 1 or 2 (None: ``BWD_MMA_STAGES_DEFAULT``): 2 double-buffers the streamed tiles (the
        next Q_i, dO_i, or K_j, V_j in the dQ pass, copied while this one is computed); the same
        arithmetic in the same order, so the same bits as 1.
    dq : the dQ algorithm, "separate", "atomic" or (wgmma kernel) "bulk"; None: the kernel's default,
        "bulk" for the wgmma kernel, ``BWD_DQ_DEFAULT`` ("separate") for the mma kernel.
        "separate": the main kernel computes dK, dV alone and ``flash_bwd_mma_dq`` computes dQ in
        a fixed order (query blocks outer, dQ_i in registers), the same bits on every run.
        "atomic": the main kernel also adds each tile's piece of dQ into an fp32 buffer with
        atomicAdd (the last bits may change between runs), then a kernel rounds it to the
        inputs' dtype. "separate" is the default because it measured faster, 1.17–1.35x,
        kernel-only, at all 20 shapes of benchmarks/results/bwd-h200-2026-12-05.json (H200, fp16,
        B·N = 16k tokens; ``bwd_mma_det`` against ``bwd_mma`` there), although it recomputes S_ij
        and dP_ij once more: the atomics (dS_ij through shared memory, one more barrier, Br·d
        scalar atomics a tile) cost more than those two products on tensor cores.
        With kernel="wgmma" also "bulk" (its default when deterministic=False): dQ_i's fp32 tile
        added into HBM by one bulk reduction of the copy engine per query block (FlashAttention-3's
        way; the last bits may change between runs, as with "atomic").
    kernel : the main kernel, "mma" (mma.sync, sm_80 and later) or "wgmma" (sm_90 only: the five
        products on wgmma, one consumer warpgroup per 64 keys, Q_i and dO_i double-buffered; Bc 64
        or 128, default ``wgmma_bc_default``: 64 at d = 64 with dq "bulk", else 128; ``stages`` must be
        None); None: ``default_kernel``: "wgmma" on sm_90 (unless ``stages`` is given), else "mma".

    Returns
    -------
    (dQ, dK, dV): contiguous torch tensors in the inputs' dtype, shapes of Q, K, V, computed on
    torch's current stream. Rows that see no key: dQ = 0; never NaN from the masking.

    Raises
    ------
    TypeError (not torch CUDA tensors, mixed or unsupported dtypes, non-bool flags), ValueError
    (shapes, d, Bc, stages, scale, more than 65,535 batch·heads, an unknown dq or kernel, dq="atomic"
    or "bulk" with deterministic=True, dq="bulk" where the mma kernel runs (named, stages given, or
    not sm_90), kernel="wgmma" on a GPU that is not sm_90 or with stages),
    RuntimeError (no CuPy, a GPU older than sm_80); one line each.
    """
    from ..teaching.backward import check_backward_shapes
    causal = check_flag(causal, "causal")
    kernel = check_kernel(kernel)
    check_dq(dq, deterministic, kernel)              # early, before the device is known (kernel None: any)
    stages = check_stages(kernel, stages)
    lead, Nq, Nk, d = check_backward_shapes(Q, K, V, O, dO, lse, dlse)
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(Q, torch.Tensor):
        raise TypeError(f"flash_backward_mma takes torch CUDA tensors; Q is {type(Q).__name__} "
                        f"(arrays: flashviz.gpu.flash_backward_gpu)")
    if Q.dtype not in (torch.float16, torch.bfloat16):
        raise TypeError(f"Q must be a float16 or bfloat16 torch tensor, got {Q.dtype}")
    check_member(d, "d", BWD_MMA_D, "tensor-core backward")
    scale = check_scale(scale, d)
    BH = math.prod(lead)
    if BH > 65_535:
        raise ValueError(f"the kernel's grid puts batch·heads on grid.y, at most 65,535; got {BH}")
    if not Q.is_cuda:
        raise TypeError("Q is a CPU torch tensor; move it to the GPU (.cuda()) first")
    dev = Q.get_device()
    kernel, dq, Bc = backward_plan(device_facts(dev).cc, d, kernel=kernel, dq=dq, deterministic=deterministic,
                                   Bc=Bc, stages=stages)
    dt = Q.dtype
    q, k, v, o, do = (_flat(x, n, dt, dev) for x, n in ((Q, "Q"), (K, "K"), (V, "V"), (O, "O"), (dO, "dO")))
    cp = cupy()
    with cp.cuda.Device(dev), torch_stream(dev):
        dtype = "float16" if dt == torch.float16 else "bfloat16"
        if kernel == "wgmma":
            mb = compile_backward_wgmma(dtype, Bc, d, causal, dq)
        else:
            mb = compile_backward_mma(dtype, Bc, d, causal, dq == "separate", stages=stages)
        lse32 = lse.detach().to(torch.float32).contiguous()
        dl = None if dlse is None else dlse.detach().to(torch.float32).contiguous()
        Dvec = torch.empty((BH, Nq), dtype=torch.float32, device=q.device)
        # the fp32 sum that "atomic" and "bulk" add dQ into (BH·Nq·d·4 bytes: 128 MiB at 16k tokens, H·d = 2048);
        # none for "separate", which writes dQ in the inputs' dtype
        dQacc = torch.empty((BH, Nq, d), dtype=torch.float32, device=q.device) if dq != "separate" else None
        dQ, dK, dV = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        launch_backward_mma(mb, q, k, v, o, do, lse32, dl, Dvec, dQacc, dQ, dK, dV, scale=scale)
    return dQ, dK, dV


def launch_backward_mma(mb: MMABackward, q, k, v, o, do, lse32, dl, Dvec, dQacc, dQ, dK, dV, *, scale: float,
                        trace=None) -> None:
    """Launch ``mb``'s kernels on prepared contiguous torch tensors (no input checks, no allocation), on
    CuPy's current stream: q, o, do, dQ (..., Nq, d) and k, v, dK, dV (..., Nk, d) in the input
    dtype, one leading shape of BH elements; lse32, Dvec (BH, Nq) and dQacc (BH, Nq, d) float32; dl
    (..., Nq) float32 or None. dQacc may be None for a deterministic ``mb`` (dQ by the separate pass,
    which needs no fp32 sum); ValueError if the atomic path gets None. ``trace``: (buffer pointer,
    jmax) for a main kernel compiled with ``traced=True``."""
    Nq, d = q.shape[-2], q.shape[-1]
    Nk = k.shape[-2]
    BH = q.numel() // (Nq * d)
    if dQacc is None and not mb.deterministic:
        raise ValueError("launch_backward_mma: the atomic and bulk dQ paths need dQacc, a float32 (BH, Nq, d) tensor")
    P = lambda t: np.uint64(0 if t is None else t.data_ptr())  # noqa: E731
    i32 = np.int32
    mb.preprocess((-(-Nq // 8), BH, 1), (256, 1, 1),
                  (P(o), P(do), P(dl), P(Dvec), P(dQacc), i32(Nq)))
    mb.main((-(-Nk // mb.Bc), BH, 1), (2 * mb.Bc, 1, 1),
            (P(q), P(k), P(v), P(do), P(lse32), P(Dvec), P(dQacc), P(dK), P(dV), i32(Nq), i32(Nk),
             np.float32(scale), *(() if trace is None else (np.uint64(trace[0]), i32(trace[1])))),
            shared_mem=mb.smem_bytes)
    if mb.deterministic:
        mb.dq((-(-Nq // BWD_MMA_BR), BH, 1), (128, 1, 1),
              (P(q), P(k), P(v), P(do), P(lse32), P(Dvec), P(dQ), i32(Nq), i32(Nk), np.float32(scale)),
              shared_mem=mb.dq_smem_bytes)
    else:
        n = BH * Nq * d
        mb.convert((-(-(n // 2) // 256), 1, 1), (256, 1, 1), (P(dQacc), P(dQ), np.int64(n)))
