"""Decode attention on the GPU: ``kernels/flash_decode.cu`` through CuPy, on torch tensors.

The split-KV decode of ``flashviz.decode.decode_attention`` (Flash-Decoding: split the keys, run
FlashAttention-2's online softmax over each split, merge the splits by their lse), fp16 / bf16 in,
fp32 math, GQA packed per KV head, contiguous or paged K, V. The same split rule
(``masking.split_ranges``) and split-count rule (``decode.num_splits_heuristic``) as the NumPy
algorithm, so the two can be compared split by split. (The rule counts the blocks the kernel
launches: B·H_kv times the row chunks when a KV head's G·Nq query rows exceed what a block takes
— 32 for v1, 16 for v2 — where NumPy packs every head's rows into one block; and the device's SMs
times the blocks one SM runs at once.) Two split kernels compute the same partials (``variant``):
v1 ``flash_decode`` on the CUDA cores, v2 ``flash_decode_mma`` on the tensor cores. A call that names
none runs v2 (``DEFAULT_VARIANT``), or v1 on a GPU whose blocks may not opt in to v2's shared memory
at its d (``check_variant``: sm_86 / sm_89 at d = 128).

The public call is kept lean the way the forward's is (``gpu.tensorcore.kernel``): the first call
of a kind checks everything (``plan_decode``) and leaves a ``DecodeCall`` (its ``DecodeLaunch`` and
two one-element output templates) under the call's key (``_call_key``: shapes, dtypes, devices and
the arguments; a call whose tensors are not contiguous or aligned has none and goes the general
way); a repeated call finds it, makes two allocations with ``torch.empty_like`` — O, and one
float32 workspace holding lse and, when the keys are split, both partials — and launches through
cuLaunchKernel with a parameter block laid out from the kernel's signature (``common.ParamBlock``)
— no per-call checks, no CuPy argument conversion.

Status: measured on the H200 (benchmarks/results/decode-h200-2026-12-05.json and
benchmarks/NOTES.md, Decode), correct on the grid (both variants). There, at Nq = 1, d = 128 and
Nk >= 32k, v2 (now the default) took 1.00–1.05x SDPA-cuDNN's kernel-only time and read at 0.83–1.10
of the copy bandwidth; v1 took 1.6–3.0x cuDNN's time.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass

import numpy as np

from ..checks import check_flag
from ..decode import num_splits_heuristic
from ..records import kernel_params
from .common import ParamBlock, check_scale, cupy, device_facts, ensure_context, raw_torch_stream, source

_KERNEL_FILE = "flash_decode.cu"
DECODE_BC = 64          #: keys per tile (fixed in the kernel)
DECODE_RM = 32          #: query rows (G·Nq) one block of v1 takes at most; more rows take more blocks
DECODE_RM_MMA = 16      #: the same for v2 (``flash_decode_mma``: one m16 row tile)
DECODE_KW = 16          #: v2: keys a warp takes of each key tile
DECODE_ST = 3           #: v2: ring stages of each warp
#: the split pass's kernels: "simt" (v1, ``flash_decode``: CUDA cores) and "mma" (v2,
#: ``flash_decode_mma``: tensor cores, each warp on its own keys); the default is v2, the one the
#: records measured best (benchmarks/results/decode-h200-2026-12-05.json, Nq = 1, d = 128,
#: Nk >= 32k: cuDNN's kernel-only time ÷ v2's 0.956–1.001, ÷ v1's 0.33–0.63), and v1 where a
#: block may not opt in to v2's shared memory (``FALLBACK_VARIANT``; ``check_variant`` decides)
DECODE_VARIANTS = ("simt", "mma")
DEFAULT_VARIANT = "mma"
FALLBACK_VARIANT = "simt"
SMEM_OPTIN_H200 = 232_448      #: shared memory one block may opt in to on an H100 / H200, bytes
DECODE_THREADS = 128
DECODE_D = (64, 128)
DECODE_THREADS_PER_SM = 2048   #: resident threads an SM holds (sm_80 and sm_90)
_CACHE: dict = {}
#: the kernels' launch parameters, laid out from their signatures in kernels/flash_decode.cu
_MAIN = ParamBlock(kernel_params.layout(_KERNEL_FILE, "flash_decode"))
_MAIN_TRACED = ParamBlock(kernel_params.layout(_KERNEL_FILE, "flash_decode", traced=True))
_MERGE = ParamBlock(kernel_params.layout(_KERNEL_FILE, "flash_decode_merge"))


def check_variant(variant, d: int | None = None, smem_optin: int | None = None) -> str:
    """The split kernel's variant: one named in ``DECODE_VARIANTS`` as it is (ValueError for
    another); None the default — ``DEFAULT_VARIANT`` ("mma", v2), unless head dimension ``d`` and
    ``smem_optin`` (the shared memory one block of the device may opt in to,
    ``device_facts(dev).smem_optin``) are both given and v2 needs more than that at d
    (``decode_smem_bytes(d, "mma")``: 102,400 bytes at d = 128, where sm_86 / sm_89 allow 101,376):
    then ``FALLBACK_VARIANT`` ("simt", v1). The one place the default is decided: every caller
    that knows the device passes its facts (``plan_decode``, ``compile_decode``;
    ``decode_launch`` those it is given, an H200's by default). A named "mma" is not replaced:
    ``compile_decode`` rejects it on such a GPU. ValueError for an unsupported d when it decides."""
    if variant is None:
        if d is None or smem_optin is None or decode_smem_bytes(d, DEFAULT_VARIANT) <= smem_optin:
            return DEFAULT_VARIANT
        return FALLBACK_VARIANT
    if variant not in DECODE_VARIANTS:
        raise ValueError(f"variant must be one of {', '.join(map(repr, DECODE_VARIANTS))} or None, got {variant!r}")
    return variant


def block_rm(variant=None) -> int:
    """Query rows one block of ``variant`` takes at most: 32 (v1) or 16 (v2)."""
    return DECODE_RM_MMA if check_variant(variant) == "mma" else DECODE_RM


def decode_smem_bytes(d: int, variant=None) -> int:
    """Dynamic shared memory of one split-pass block, bytes. v1 (``flash_decode``): Q_i as fp32
    (RM·d·4), two buffers of K_j and V_j (2·2·Bc·d·2), the scores S_ij (RM·Bc·4) and m, l, alpha
    (3·RM·4): d = 128: 90,496; d = 64: 49,536. v2 (``flash_decode_mma``): Q_i (16·d·2) and, for each
    of the 4 warps, 3 ring stages of 16 keys of K and V (4·3·2·16·d·2): d = 128: 102,400; d = 64:
    51,200. ValueError for another d or variant."""
    if d not in DECODE_D:
        raise ValueError(f"the decode kernel takes d in {DECODE_D}, got d = {d}")
    if check_variant(variant) == "mma":
        return DECODE_RM_MMA * d * 2 + (DECODE_THREADS // 32) * DECODE_ST * 2 * DECODE_KW * d * 2
    return DECODE_RM * d * 4 + 2 * 2 * DECODE_BC * d * 2 + DECODE_RM * DECODE_BC * 4 + 3 * DECODE_RM * 4


def decode_blocks_per_sm(d: int, variant=None, *, smem_per_sm: int = 233_472, smem_reserved: int = 1_024) -> int:
    """Blocks of the split kernel one SM runs at once at head dimension d: as many as its shared
    memory holds (``decode_smem_bytes(d, variant)`` plus the ``smem_reserved`` bytes the system
    keeps per block, out of ``smem_per_sm``), at most 2048 / 128 by threads. Registers never limit
    it below that (v1: at most 123 a thread, ptxas; v2: ``__launch_bounds__`` asks for 2 blocks at
    d = 128 and 4 at d = 64). H100 / H200 (the defaults): 2 at d = 128, 4 at d = 64, both
    variants. The split heuristic's slots are num_sms times this (``decode.num_splits_heuristic``);
    tests/gpu/test_decode_gpu.py checks it against the driver's occupancy calculator.
    ValueError for another d or variant."""
    return max(1, min(smem_per_sm // (decode_smem_bytes(d, variant) + smem_reserved),
                      DECODE_THREADS_PER_SM // DECODE_THREADS))


@dataclass
class DecodeKernels:
    """The compiled split kernel (main: ``flash_decode<DT, d, paged, ROWS>`` or
    ``flash_decode_mma<DT, d, paged>``) and ``flash_decode_merge<DT, d>`` (merge) (cupy RawKernels)
    and their CUfunction handles (``main_ptr``, ``merge_ptr``), with main's shared memory in bytes;
    ``traced``: main is the timeline build (two more parameters)."""

    main: object
    merge: object
    smem_bytes: int
    main_ptr: int = 0
    merge_ptr: int = 0
    traced: bool = False


def block_rows(G: int, Nq: int) -> int:
    """The ``ROWS`` template argument for G query heads a KV head and Nq query rows: the smallest
    power of two >= a block's rows, min(G·Nq, 32) (a block takes at most 32 rows). ValueError for
    G or Nq < 1."""
    if min(G, Nq) < 1:
        raise ValueError(f"G and Nq must be >= 1, got {G}, {Nq}")
    R = min(G * Nq, DECODE_RM)
    return 1 << (R - 1).bit_length()


def decode_expressions(dtype: str, d: int, paged: bool, rows: int = DECODE_RM, variant=None) -> tuple[str, str]:
    """The NVRTC name expressions of the split kernel and the merge kernel ``compile_decode`` builds
    (kernels/flash_decode.cu): e.g. ("fvdec::flash_decode<0,128,false,4>",
    "fvdec::flash_decode_merge<0,128>"); v2 has no rows argument. Arguments unchecked."""
    dt, pg = (0 if dtype == "float16" else 1), ("true" if paged else "false")
    main = (f"fvdec::flash_decode_mma<{dt},{d},{pg}>" if check_variant(variant) == "mma"
            else f"fvdec::flash_decode<{dt},{d},{pg},{rows}>")
    return main, f"fvdec::flash_decode_merge<{dt},{d}>"


def compile_decode(dtype: str, d: int, paged: bool, rows: int = DECODE_RM, *, traced: bool = False,
                   variant=None) -> DecodeKernels:
    """Compile (or fetch from the per-process cache) the decode kernels for "float16" | "bfloat16",
    d in {64, 128}, contiguous or paged K, V, blocks of at most ``rows`` query rows (a power of two
    up to 32: ``block_rows``); ``traced``: main built with its timeline switch on
    (``-DFLASHVIZ_TRACE=1``, kernels/fv_trace.cuh: two more parameters, the trace buffer and
    jmax; ``gpu.decode_trace``); ``variant``: the split kernel (``DECODE_VARIANTS``, None for the
    device's default, ``check_variant``; "mma" has one build for every rows). RuntimeError without
    CuPy / a GPU or on a compile error (NVRTC's log); ValueError for an unsupported d, dtype, rows
    or variant, or a variant whose shared memory the device does not allow a block."""
    if dtype not in ("float16", "bfloat16"):
        raise ValueError(f"the decode kernel takes float16 or bfloat16, got {dtype}")
    if rows not in (1, 2, 4, 8, 16, 32):
        raise ValueError(f"rows must be a power of two from 1 to {DECODE_RM}, got {rows!r}")
    decode_smem_bytes(d, variant)                          # d and variant checked before CuPy
    cp = cupy()
    dev = cp.cuda.runtime.getDevice()
    facts = device_facts(dev)
    variant = check_variant(variant, d, facts.smem_optin)
    smem = decode_smem_bytes(d, variant)
    key = (dtype, d, paged, rows if variant == "simt" else 0, dev, bool(traced), variant)
    if key in _CACHE:
        return _CACHE[key]
    from .nvrtc import compile_cubin
    if smem > facts.smem_optin:
        raise ValueError(f"the decode kernel needs {smem:,} bytes of shared memory a block at d = {d}; "
                         f"this GPU allows {facts.smem_optin:,}")
    text, arch = source(_KERNEL_FILE), f"sm_{facts.cc}"
    main_expr, merge_expr = decode_expressions(dtype, d, paged, rows, variant)
    main, _, _ = compile_cubin(text, main_expr, arch, options=("-DFLASHVIZ_TRACE=1",) if traced else ())
    merge, _, _ = compile_cubin(text, merge_expr, arch)
    main.max_dynamic_shared_size_bytes = smem
    _CACHE[key] = DecodeKernels(main, merge, smem, int(main.kernel.ptr), int(merge.kernel.ptr), bool(traced))
    return _CACHE[key]


def _check_tensor(x, name: str, torch, dtype=None):
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch CUDA tensor, got {type(x).__name__}")
    if not x.is_cuda:
        raise TypeError(f"{name} is a CPU torch tensor; move it to the GPU (.cuda()) first")
    if dtype is not None and x.dtype != dtype:
        raise TypeError(f"{name} must be {dtype} like Q, got {x.dtype}")


def _check_aligned(x, name: str) -> None:
    """The kernel copies rows 16 bytes at a time (cp.async): ValueError unless x starts on 16 bytes."""
    if x.data_ptr() % 16:
        raise ValueError(f"{name} must start on a 16-byte boundary (the kernel copies 16 bytes at a time); "
                         f"its data pointer is {x.data_ptr():#x}: pass a contiguous copy (.clone())")


@dataclass(slots=True)
class DecodePlan:
    """One checked decode call, ready to launch: the contiguous torch tensors ``q`` (B, H, Nq, d),
    ``k``, ``v`` (the cache or the page pools), ``table`` (int32 block table or None), the sizes, the
    split count ``S``, the row ``chunks`` of a KV head, ``causal``, ``scale`` and the CUDA device
    index; ``batched``: Q had its batch axis; ``variant``: the split kernel ("simt" or "mma", never
    None: ``plan_decode`` decides the default for the device). Made by ``plan_decode``."""

    q: object
    k: object
    v: object
    table: object
    max_pages: int
    page_size: int
    B: int
    H: int
    H_kv: int
    Nq: int
    Nk: int
    d: int
    S: int
    chunks: int
    causal: bool
    scale: float
    device: int
    batched: bool
    variant: str = DEFAULT_VARIANT

    @property
    def grid(self) -> tuple[int, int, int]:
        """flash_decode's grid: (S, H_kv · chunks, B)."""
        return (self.S, self.H_kv * self.chunks, self.B)

    @property
    def tiles(self) -> int:
        """Key tiles of the cache, Tc = ⌈Nk / 64⌉."""
        return -(-self.Nk // DECODE_BC)

    @property
    def dtype(self) -> str:
        """"float16" or "bfloat16"."""
        return str(self.q.dtype).removeprefix("torch.")


def plan_decode(Q, K, V, *, num_splits=None, causal: bool = False, scale=None, block_table=None,
                Nk=None, variant=None) -> DecodePlan:
    """Check the arguments of ``flash_decode_gpu`` (see there: the same parameters and the same
    TypeError / ValueError) and return the DecodePlan of the call, without launching anything."""
    torch = sys.modules.get("torch")
    if torch is None:
        raise TypeError(f"flash_decode_gpu takes torch CUDA tensors; Q is {type(Q).__name__}")
    _check_tensor(Q, "Q", torch)
    if Q.dtype not in (torch.float16, torch.bfloat16):
        raise TypeError(f"Q must be float16 or bfloat16, got {Q.dtype}")
    _check_tensor(K, "K", torch, Q.dtype)
    _check_tensor(V, "V", torch, Q.dtype)
    causal = check_flag(causal, "causal")
    if variant is not None:
        variant = check_variant(variant)
    batched = Q.dim() == 4
    if Q.dim() not in (3, 4):
        raise ValueError(f"Q must be (B, H, Nq, d) or (H, Nq, d), got {tuple(Q.shape)}")
    q = (Q if batched else Q.unsqueeze(0)).contiguous()
    B, H, Nq, d = q.shape
    paged = block_table is not None
    if paged:
        _check_tensor(block_table, "block_table", torch)
        if K.dim() != 4 or V.shape != K.shape or K.shape[-1] != d:
            raise ValueError(f"a paged K, V must be pools (num_pages, page_size, H_kv, d = {d}) of one shape, "
                             f"got {tuple(K.shape)}, {tuple(V.shape)}")
        table = block_table if block_table.dim() == 2 else block_table.unsqueeze(0)
        if table.dtype not in (torch.int32, torch.int64):
            raise TypeError(f"block_table must be an int32 or int64 tensor, got {block_table.dtype}")
        if table.dim() != 2 or table.shape[0] != B:
            raise ValueError(f"block_table must be (B = {B}, max_pages), got {tuple(block_table.shape)}")
        table = table.to(torch.int32).contiguous()
        num_pages, page_size, H_kv, _ = K.shape
        max_pages = table.shape[1]
        Nk = max_pages * page_size if Nk is None else int(Nk)
        if not 1 <= Nk <= max_pages * page_size:
            raise ValueError(f"Nk must be 1 .. max_pages·page_size = {max_pages * page_size}, got {Nk}")
        k, v = K.contiguous(), V.contiguous()
    else:
        k = (K if batched else K.unsqueeze(0)).contiguous()
        v = (V if batched else V.unsqueeze(0)).contiguous()
        if k.dim() != 4 or v.shape != k.shape or k.shape[0] != B or k.shape[-1] != d:
            raise ValueError(f"K, V must be (B = {B}, H_kv, Nk, d = {d}) of one shape"
                             f"{'' if batched else ' without the batch axis'}, got {tuple(K.shape)}, "
                             f"{tuple(V.shape)} (a paged cache needs block_table)")
        if Nk is not None and Nk != k.shape[2]:
            raise ValueError(f"Nk = {Nk!r} is for a paged cache; a contiguous K, V has its own length "
                             f"{k.shape[2]} (leave Nk None)")
        _, H_kv, Nk, _ = k.shape
        table, max_pages, page_size = None, 0, 0
    if d not in DECODE_D:
        raise ValueError(f"the decode kernel takes d in {DECODE_D}, got d = {d}")
    if H_kv < 1 or H % H_kv:
        raise ValueError(f"H % H_kv must be 0 (query head h reads KV head h // (H // H_kv)), got H = {H}, "
                         f"H_kv = {H_kv}")
    if min(B, H, Nq, Nk) < 1:
        raise ValueError(f"B, H, Nq and Nk must be >= 1, got {B}, {H}, {Nq}, {Nk}")
    for x, name in ((k, "K"), (v, "V"), (table, "block_table")):
        if x is not None and x.device != q.device:
            raise ValueError(f"{name} is on {x.device}, Q on {q.device}: put them on one GPU")
    for x, name in ((q, "Q"), (k, "K"), (v, "V")):
        _check_aligned(x, name)
    dev = q.get_device()
    f = device_facts(dev) if num_splits is None or variant is None else None
    variant = check_variant(variant, d, None if f is None else f.smem_optin)     # None: the device's default
    chunks = -(-(H // H_kv) * Nq // block_rm(variant))
    Tc = -(-Nk // DECODE_BC)
    if num_splits is None:
        S = default_splits(B * H_kv * chunks, Tc, d, variant, num_sms=f.sm_count, smem_per_sm=f.smem_per_sm,
                           smem_reserved=f.smem_reserved)
    elif isinstance(num_splits, (bool, float)) or not isinstance(num_splits, (int, np.integer)) or num_splits < 1:
        raise ValueError(f"num_splits must be an integer >= 1 or None, got {num_splits!r}")
    else:
        S = int(num_splits)
    if H_kv * chunks > 65_535 or B > 65_535:
        raise ValueError(f"the grid puts KV heads·row chunks on grid.y and B on grid.z, at most 65,535 each; "
                         f"got {H_kv * chunks} and {B}")
    scale = check_scale(scale, d)
    return DecodePlan(q, k, v, table, int(max_pages), int(page_size), int(B), int(H), int(H_kv), int(Nq), int(Nk),
                      int(d), int(S), int(chunks), causal, float(scale), int(dev), batched, variant)


def default_splits(n_blocks: int, Tc: int, d: int, variant=None, *, num_sms: int = 132, smem_per_sm: int = 233_472,
                   smem_reserved: int = 1_024) -> int:
    """The split count ``flash_decode_gpu`` picks when none is given: ``decode.num_splits_heuristic``
    for n_blocks = B·H_kv·chunks blocks and Tc key tiles, with slots = num_sms × ``split_slots_per_sm``
    of the variant. The defaults are the H200's. Errors as ``decode_blocks_per_sm`` and the rule."""
    bps = split_slots_per_sm(d, variant, smem_per_sm=smem_per_sm, smem_reserved=smem_reserved)
    return num_splits_heuristic(n_blocks, Tc, num_sms=num_sms, blocks_per_sm=bps)


def split_slots_per_sm(d: int, variant=None, *, smem_per_sm: int = 233_472, smem_reserved: int = 1_024) -> int:
    """The blocks an SM counts for in the split rule (``default_splits``). v1 ("simt"): the blocks it
    runs at once (``decode_blocks_per_sm``): a v1 block computes a tile between its loads, so every
    slot filled adds bytes in flight. v2 ("mma", the default): 1. Each of its four warps keeps
    ST − 1 = 2 slices of K and V in flight (64 KB a block at d = 128, 32 KB at d = 64), so one
    block an SM holds 4–8 MB, above HBM's bandwidth × latency (~3.4 TB/s × ~1 µs on an H100); a
    second block an SM only splits the keys finer and adds partials to write and merge. Measured
    on an H100 (decode-h100-80gb-hbm3-2026-12-05.json, v2's split sweeps): with two blocks an SM
    the rule's count took 1.21x the best time at B = 1, Nk = 4k and 1.07x at B = 8, Nk = 4k; with
    one, 1.02x and 1.04x (1.00x and 1.00x at Nk = 32k). ValueError for an unsupported d or variant."""
    if check_variant(variant) == "mma":
        decode_smem_bytes(d, variant)                  # d checked alike for both
        return 1
    return decode_blocks_per_sm(d, variant, smem_per_sm=smem_per_sm, smem_reserved=smem_reserved)


@dataclass(frozen=True, slots=True)
class DecodeLaunch:
    """Everything a checked call of ``flash_decode_gpu`` launches, without its tensors: made once by
    the general path for a call's key (``_call_key``), kept in a ``DecodeCall`` and launched as it
    is by later calls with the same key. kern: the compiled kernels; device: the GPU's index; grid:
    main's grid; pages: main's (max_pages, page_size); ints: its (H, H_kv, Nq, Nk, S, causal);
    scale: its float; rows: B·H·Nq (the merge's grid); S, d; o_shape, lse_shape: the outputs'
    shapes as the caller gets them (no batch axis if Q had none); dtype: Q's torch dtype."""

    kern: DecodeKernels
    device: int
    grid: tuple
    pages: tuple
    ints: tuple
    scale: float
    rows: int
    S: int
    d: int
    o_shape: tuple
    lse_shape: tuple
    dtype: object


def launch_ptrs(L: DecodeLaunch, q: int, k: int, v: int, table: int, O_part: int, lse_part: int, O: int, lse: int,
                stream: int, trace=None, *, merge: bool = True) -> None:
    """Launch ``L.kern.main`` (then ``L.kern.merge`` when L.S > 1 and ``merge``) on device pointers
    (ints; 0 for an absent block table or partials) on CUDA stream ``stream`` (a raw handle), through
    cuLaunchKernel with parameter blocks laid out from the kernels' signatures. trace: (buffer
    pointer, jmax) for a timeline build (ValueError without it). The one launch of this module."""
    kern = L.kern
    launch = (_DRIVER or _driver())[0]
    if kern.traced:
        if trace is None:
            raise ValueError("a traced decode kernel needs trace = (buffer pointer, jmax)")
        params = _MAIN_TRACED.pack(q, k, v, table, *L.pages, O_part, lse_part, O, lse, *L.ints, L.scale, *trace)
    else:
        params = _MAIN.pack(q, k, v, table, *L.pages, O_part, lse_part, O, lse, *L.ints, L.scale)
    launch(kern.main_ptr, *L.grid, DECODE_THREADS, 1, 1, kern.smem_bytes, stream, params, 0)
    if L.S > 1 and merge:
        launch(kern.merge_ptr, L.rows, 1, 1, L.d, 1, 1, 0, stream, _MERGE.pack(O_part, lse_part, O, lse, L.S), 0)


def make_launch(plan: DecodePlan, kern: DecodeKernels) -> DecodeLaunch:
    """The DecodeLaunch of a checked plan with its kernels."""
    lead = (plan.B,) if plan.batched else ()
    return DecodeLaunch(kern, plan.device, plan.grid, (plan.max_pages, plan.page_size),
                        (plan.H, plan.H_kv, plan.Nq, plan.Nk, plan.S, int(plan.causal)), plan.scale,
                        plan.B * plan.H * plan.Nq, plan.S, plan.d, (*lead, plan.H, plan.Nq, plan.d),
                        (*lead, plan.H, plan.Nq), plan.q.dtype)


def launch_decode(plan: DecodePlan, kern: DecodeKernels, O, lse, O_part=None, lse_part=None, trace=None, *,
                  merge: bool = True) -> None:
    """Launch ``kern.main`` (then ``kern.merge`` when plan.S > 1 and ``merge``) for ``plan`` on the
    current CuPy stream: O (B, H, Nq, d) like Q, lse (B, H, Nq) float32, O_part (B, H, Nq, S, d) and
    lse_part (B, H, Nq, S) float32 (None when S = 1) — torch or CuPy arrays; ``trace``: (buffer
    pointer, jmax) for a main kernel built with its timeline switch (``compile_decode(traced=True)``)."""
    P = lambda t: 0 if t is None else (t.data_ptr() if hasattr(t, "data_ptr") else t.data.ptr)  # noqa: E731
    ensure_context(cupy().cuda.runtime.getDevice())
    launch_ptrs(make_launch(plan, kern), P(plan.q), P(plan.k), P(plan.v), P(plan.table), P(O_part), P(lse_part),
                P(O), P(lse), cupy().cuda.get_current_stream().ptr,
                None if trace is None else (int(trace[0]), int(trace[1])), merge=merge)


def kernels_for(plan: DecodePlan, *, traced: bool = False) -> DecodeKernels:
    """The compiled kernels ``plan`` launches (``compile_decode`` for its dtype, d, cache layout
    and rows)."""
    return compile_decode(plan.dtype, plan.d, plan.table is not None, block_rows(plan.H // plan.H_kv, plan.Nq),
                          traced=traced, variant=plan.variant)


@dataclass(frozen=True, slots=True, eq=False)
class DecodeCall:
    """A kept ``DecodeLaunch`` with what a call allocates for it (``make_call``): ``o_like``, one
    element of Q's dtype on Q's device expanded to O's shape, ``lse_like``, one float32 element
    expanded to lse's shape, and (S > 1) ``ws_like``, one float32 element expanded to the split
    partials' workspace, (S·(d + 1), *lse_shape): O_part (rows·S·d floats) from its start, lse_part
    (rows·S floats) at ``lse_part_at`` bytes. ``torch.empty_like`` of a template gives a fresh
    contiguous tensor without parsing a shape, dtype and device (the forward's ``LaunchPlan``
    templates). O and lse are allocations of their own, so what a caller keeps keeps nothing else
    alive; the partials' workspace is freed when the call returns (torch's caching allocator orders
    its reuse on the stream)."""

    launch: DecodeLaunch
    o_like: object
    lse_like: object
    ws_like: object | None
    lse_part_at: int


def make_call(L: DecodeLaunch, q) -> DecodeCall:
    """The DecodeCall of launch ``L`` with its templates on torch tensor ``q``'s device (Q's dtype)."""
    one = q.new_empty(1)
    one32 = one.new_empty(1, dtype=sys.modules["torch"].float32)
    return DecodeCall(L, one.expand(L.o_shape), one32.expand(L.lse_shape),
                      None if L.S == 1 else one32.expand(L.S * (L.d + 1), *L.lse_shape), L.rows * L.S * L.d * 4)


#: _call_key(...)[0] -> DecodeCall; emptied when it holds _LAUNCHES_MAX
_LAUNCHES: dict = {}
_LAUNCHES_MAX = 256
_DRIVER: list = []          #: [cuLaunchKernel, cudaGetDevice] (CuPy's), looked up once by ``_driver``


def _driver() -> list:
    """``_DRIVER``, filled on first use (by the first public call's general path, or the first launch)."""
    if not _DRIVER:
        cp = cupy()
        _DRIVER[:] = [cp.cuda.driver.launchKernel, cp.cuda.runtime.getDevice]
    return _DRIVER


def _call_key(Q, K, V, num_splits, causal, scale, block_table, Nk, variant):
    """(key, Q's, K's, V's and the block table's data pointers (0: none)) of a call whose launch can
    be kept, or None: then the general path runs (checks, plans, raises what is wrong). The one key
    function: the repeated call finds its ``DecodeCall`` with it, the general path stores one under it.

    None unless Q, K, V (and the block table) are exactly torch.Tensor, contiguous, Q, K, V start
    on 16 bytes, every other argument is of a plain type that the key tells apart from values the
    checks treat differently (causal True / False, scale None / float, num_splits and Nk None / int,
    variant None / str), and a call was already made in this process. A call that fails those would
    be copied (``.contiguous()``, so nothing is kept for it) or rejected by the general path, so no
    key is needed for it. The key then holds the rest of what the checks and choices read: shapes,
    dtypes and devices (type and index) of the tensors, the current device, and the arguments as
    given (variant None included: the kernel it stands for follows from d and Q's device, both in
    the key, ``check_variant``). Strides are not in it: a contiguous tensor is launched as it is,
    whatever the strides of its size-1 axes."""
    torch = sys.modules.get("torch")
    if torch is None or not _DRIVER:
        return None
    T = torch.Tensor
    if (type(Q) is not T or type(K) is not T or type(V) is not T or (causal is not True and causal is not False)
            or (scale is not None and type(scale) is not float)
            or (num_splits is not None and type(num_splits) is not int) or (Nk is not None and type(Nk) is not int)
            or (block_table is not None and type(block_table) is not T)
            or (variant is not None and type(variant) is not str)):
        return None
    try:
        qp, kp, vp = Q.data_ptr(), K.data_ptr(), V.data_ptr()
        if (qp | kp | vp) & 15 or not (Q.is_contiguous() and K.is_contiguous() and V.is_contiguous()):
            return None
        if block_table is None:
            tp, bt = 0, None
        elif block_table.is_contiguous():
            tp, bt = block_table.data_ptr(), (block_table.shape, block_table.dtype, block_table.device)
        else:
            return None
        key = (Q.shape, K.shape, V.shape, Q.dtype, K.dtype, V.dtype, Q.device, K.device, V.device, _DRIVER[1](),
               bt, num_splits, causal, scale, Nk, variant)
    except (RuntimeError, TypeError):     # e.g. a sparse tensor has no data pointer: the general path says why
        return None
    return key, qp, kp, vp, tp


def _run(C: DecodeCall, q: int, k: int, v: int, table: int):
    """Allocate O, lse and (S > 1) the partials' workspace (``DecodeCall``) and launch C's
    DecodeLaunch on torch's current stream of its device (the current device) on the device
    pointers q, k, v and table (0: none). Returns (O, lse) as the caller gets them."""
    el = sys.modules["torch"].empty_like
    O, lse = el(C.o_like), el(C.lse_like)
    L = C.launch
    if L.S > 1:
        ws = el(C.ws_like)          # freed on return: the merge, queued on this stream, reads it first
        O_part = ws.data_ptr()
        lse_part = O_part + C.lse_part_at
    else:
        O_part, lse_part = 0, 0
    ensure_context(L.device)
    launch_ptrs(L, q, k, v, table, O_part, lse_part, O.data_ptr(), lse.data_ptr(), raw_torch_stream(L.device))
    return O, lse


def flash_decode_gpu(Q, K, V, *, num_splits=None, causal: bool = False, scale=None, block_table=None, Nk=None,
                     variant=None):
    """Decode attention on the GPU: the split-KV algorithm of ``flashviz.decode.decode_attention``.

    Parameters
    ----------
    Q : (B, H, Nq, d) or (H, Nq, d) torch CUDA tensor, float16 or bfloat16; d in {64, 128}.
    K, V : contiguous cache (B, H_kv, Nk, d) (or (H_kv, Nk, d)), or, with ``block_table``, page pools
        (num_pages, page_size, H_kv, d) (FlashAttention's k_cache layout). H % H_kv == 0: query head
        h reads KV head h // (H // H_kv).
    num_splits : int >= 1 or None (``default_splits``: ``decode.num_splits_heuristic`` for
        B·H_kv·⌈G·Nq/RM⌉ blocks (RM = 32 for v1, 16 for v2), ⌈Nk/64⌉ key tiles and the device's SMs
        times the kernel's blocks an SM); more splits than key tiles leave some empty (exact still).
    causal : bottom-right (query i sees key c iff c <= i + Nk − Nq).
    scale : float > 0 or None (1/sqrt(d)).
    block_table : (B, max_pages) int32 or int64 CUDA tensor, or None for a contiguous cache. Its
        entries must be page indices 0 .. num_pages − 1: they are not checked here (that would
        synchronise with the GPU on every call; ``flashviz.decode.decode_attention`` checks them).
    Nk : keys per sequence for a paged cache (default max_pages · page_size); with a contiguous
        cache None or K's own length.
    variant : the split kernel, "simt" (v1, CUDA cores) or "mma" (v2, tensor cores), or None for
        the default: v2 (``DEFAULT_VARIANT``) where the GPU lets a block opt in to v2's shared
        memory at d, else v1 (``check_variant``). Both compute the same partials (to rounding: v2
        rounds P to the input dtype before P·V, as the tensor-core forward does); the merge is
        shared. v2 at d = 128 needs 102,400 bytes of shared memory a block: on GPUs that allow less
        (e.g. sm_86 / sm_89, 101,376) None runs v1 and "mma" gets a ValueError.

    Returns (O, lse): O like Q (dtype and leading shape), lse float32 (..., H, Nq), natural log;
    rows that see no key: O = 0, lse = −inf. Runs on torch's current stream. Both are fresh
    contiguous tensors of their own (``DecodeCall``).

    Raises TypeError (not torch CUDA tensors, dtypes), ValueError (shapes, d, H % H_kv, splits,
    block table, variant), RuntimeError (no CuPy / GPU); one line each. Source: Flash-Decoding (Dao, Haziza,
    Massa, Sizov 2023) on FlashAttention-2's Algorithm 1 (Dao 2023).
    """
    hit = _call_key(Q, K, V, num_splits, causal, scale, block_table, Nk, variant)
    if hit is not None:
        C = _LAUNCHES.get(hit[0])
        if C is not None:
            return _run(C, hit[1], hit[2], hit[3], hit[4])
    p = plan_decode(Q, K, V, num_splits=num_splits, causal=causal, scale=scale, block_table=block_table, Nk=Nk,
                    variant=variant)
    cp = cupy()
    _driver()
    with cp.cuda.Device(p.device):
        C = make_call(make_launch(p, kernels_for(p)), p.q)
        out = _run(C, p.q.data_ptr(), p.k.data_ptr(), p.v.data_ptr(), 0 if p.table is None else p.table.data_ptr())
    # kept only where the call's own tensors were launched (no contiguous or int32 copy was made)
    # and its GPU is the current device: then every call with this key launches the same way
    same = (p.q.data_ptr() == Q.data_ptr() and p.k.data_ptr() == K.data_ptr() and p.v.data_ptr() == V.data_ptr()
            and (block_table is None or p.table.data_ptr() == block_table.data_ptr()))
    hit = _call_key(Q, K, V, num_splits, causal, scale, block_table, Nk, variant)
    # not kept from inside a CUDA-graph capture: its templates would hold the graph's private pool
    if hit is not None and same and p.device == _DRIVER[1]() and not sys.modules["torch"].cuda.is_current_stream_capturing():
        if len(_LAUNCHES) >= _LAUNCHES_MAX:
            _LAUNCHES.clear()
        _LAUNCHES[hit[0]] = C
    return out


def decode_launch(B: int, H: int, H_kv: int, Nq: int, Nk: int, d: int, num_splits=None, *,
                  num_sms: int = 132, variant=None, smem_optin: int = SMEM_OPTIN_H200,
                  smem_per_sm: int | None = None, smem_reserved: int = 1_024) -> dict:
    """What ``flash_decode_gpu`` launches for a shape on a GPU of ``num_sms`` SMs, without a GPU:
    {"splits", "chunks", "blocks" (S · H_kv · chunks · B), "rows" (v1's ROWS; v2 always takes 16),
    "smem_bytes", "tiles" (⌈Nk/64⌉), "variant"}. The GPU's shared memory as ``device_facts``
    reports it (the defaults are an H200's): ``smem_optin`` a block may opt in to (variant None is
    the call's default there, ``check_variant``), ``smem_per_sm`` an SM shares among its blocks and
    ``smem_reserved`` the system keeps per block (the split count counts the blocks an SM holds,
    ``default_splits``, as ``plan_decode`` does); ``smem_per_sm`` None: smem_optin + smem_reserved,
    what ``device_facts`` takes when the driver does not say (233,472 on an H100 / H200, 102,400 on
    sm_86 / sm_89). A caller that knows the device passes all four of its facts (``facts_kwargs``).
    ValueError as the call."""
    variant = check_variant(variant, d, smem_optin)
    if smem_per_sm is None:
        smem_per_sm = smem_optin + smem_reserved
    if H_kv < 1 or H % H_kv:
        raise ValueError(f"H % H_kv must be 0, got H = {H}, H_kv = {H_kv}")
    if num_splits is not None and (isinstance(num_splits, (bool, float)) or
                                   not isinstance(num_splits, (int, np.integer)) or num_splits < 1):
        raise ValueError(f"num_splits must be an integer >= 1 or None, got {num_splits!r}")
    chunks = -(-(H // H_kv) * Nq // block_rm(variant))
    Tc = math.ceil(Nk / DECODE_BC)
    S = (default_splits(B * H_kv * chunks, Tc, d, variant, num_sms=num_sms, smem_per_sm=smem_per_sm,
                        smem_reserved=smem_reserved) if num_splits is None else int(num_splits))
    rows = block_rows(H // H_kv, Nq) if variant == "simt" else DECODE_RM_MMA
    return {"splits": S, "chunks": chunks, "blocks": S * H_kv * chunks * B, "rows": rows,
            "smem_bytes": decode_smem_bytes(d, variant), "tiles": Tc, "variant": variant}


def facts_kwargs(facts) -> dict:
    """The keyword arguments of ``decode_launch`` for a device (a ``common.DeviceFacts``, or
    anything with its sm_count, smem_optin, smem_per_sm and smem_reserved): the figures
    ``plan_decode`` reads on that device, so ``decode_launch(..., **facts_kwargs(f))`` says what the
    call launches there."""
    return {"num_sms": int(facts.sm_count), "smem_optin": int(facts.smem_optin),
            "smem_per_sm": int(facts.smem_per_sm), "smem_reserved": int(facts.smem_reserved)}
