"""Decode attention on the GPU: ``kernels/flash_decode.cu`` through CuPy, on torch tensors.

The split-KV decode of ``flashviz.decode.decode_attention`` (Flash-Decoding: split the keys, run
FlashAttention-2's online softmax over each split, merge the splits by their lse), fp16 / bf16 in,
fp32 math, GQA packed per KV head, contiguous or paged K, V. The same split rule
(``masking.split_ranges``) and split-count rule (``decode.num_splits_heuristic``) as the NumPy
algorithm, so the two can be compared split by split. (The rule counts the blocks the kernel
launches: B·H_kv times the row chunks when a KV head's G·Nq query rows exceed 32, where NumPy
packs every head's rows into one block; and the device's SM count.)

Status: its first GPU run (H200, 2026-12-05, benchmarks/results/tests-h200-2026-12-05.json) failed to
compile under NVRTC (an unannotated host helper, since removed; tests/core/test_kernels_nvrtc.py now
parses every kernel with NVRTC on the CPU); the records after it say how it runs.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass

import numpy as np

from ..checks import check_flag
from ..decode import num_splits_heuristic
from .common import check_scale, cupy, device_facts, source, torch_stream

_KERNEL_FILE = "flash_decode.cu"
DECODE_BC = 64          #: keys per tile (fixed in the kernel)
DECODE_RM = 32          #: query rows (G·Nq) one block takes at most; more rows take more blocks
DECODE_THREADS = 128
DECODE_D = (64, 128)
_CACHE: dict = {}


def decode_smem_bytes(d: int) -> int:
    """Dynamic shared memory of one ``flash_decode`` block, bytes: Q_i as fp32 (RM·d·4), two
    buffers of K_j and V_j (2·2·Bc·d·2), the scores S_ij (RM·Bc·4) and m, l, alpha (3·RM·4).
    d = 128: 90,496; d = 64: 49,536. ValueError for another d."""
    if d not in DECODE_D:
        raise ValueError(f"the decode kernel takes d in {DECODE_D}, got d = {d}")
    return DECODE_RM * d * 4 + 2 * 2 * DECODE_BC * d * 2 + DECODE_RM * DECODE_BC * 4 + 3 * DECODE_RM * 4


@dataclass
class DecodeKernels:
    """The compiled ``flash_decode<DT, d, paged>`` (main) and ``flash_decode_merge<DT, d>`` (merge)
    (cupy RawKernels), with main's shared memory in bytes."""

    main: object
    merge: object
    smem_bytes: int


def block_rows(G: int, Nq: int) -> int:
    """The ``ROWS`` template argument for G query heads a KV head and Nq query rows: the smallest
    power of two >= a block's rows, min(G·Nq, 32) (a block takes at most 32 rows). ValueError for
    G or Nq < 1."""
    if min(G, Nq) < 1:
        raise ValueError(f"G and Nq must be >= 1, got {G}, {Nq}")
    R = min(G * Nq, DECODE_RM)
    return 1 << (R - 1).bit_length()


def compile_decode(dtype: str, d: int, paged: bool, rows: int = DECODE_RM, *, traced: bool = False) -> DecodeKernels:
    """Compile (or fetch from the per-process cache) the decode kernels for "float16" | "bfloat16",
    d in {64, 128}, contiguous or paged K, V, blocks of at most ``rows`` query rows (a power of two
    up to 32: ``block_rows``); ``traced``: main built with its timeline switch on
    (``-DFLASHVIZ_TRACE=1``, kernels/fv_trace.cuh: two more parameters, the trace buffer and
    jmax; ``gpu.decode_trace``). RuntimeError without CuPy / a GPU or on a compile error (NVRTC's
    log); ValueError for an unsupported d, dtype or rows."""
    if dtype not in ("float16", "bfloat16"):
        raise ValueError(f"the decode kernel takes float16 or bfloat16, got {dtype}")
    if rows not in (1, 2, 4, 8, 16, 32):
        raise ValueError(f"rows must be a power of two from 1 to {DECODE_RM}, got {rows!r}")
    smem = decode_smem_bytes(d)
    cp = cupy()
    dev = cp.cuda.runtime.getDevice()
    key = (dtype, d, paged, rows, dev, bool(traced))
    if key in _CACHE:
        return _CACHE[key]
    from .nvrtc import compile_cubin
    facts = device_facts(dev)
    if smem > facts.smem_optin:
        raise ValueError(f"the decode kernel needs {smem:,} bytes of shared memory a block at d = {d}; "
                         f"this GPU allows {facts.smem_optin:,}")
    dt = 0 if dtype == "float16" else 1
    text, arch = source(_KERNEL_FILE), f"sm_{facts.cc}"
    main, _, _ = compile_cubin(text, f"fvdec::flash_decode<{dt},{d},{'true' if paged else 'false'},{rows}>", arch,
                               options=("-DFLASHVIZ_TRACE=1",) if traced else ())
    merge, _, _ = compile_cubin(text, f"fvdec::flash_decode_merge<{dt},{d}>", arch)
    main.max_dynamic_shared_size_bytes = smem
    _CACHE[key] = DecodeKernels(main, merge, smem)
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
    index; ``batched``: Q had its batch axis. Made by ``plan_decode``."""

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
                Nk=None) -> DecodePlan:
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
    chunks = -(-(H // H_kv) * Nq // DECODE_RM)
    Tc = -(-Nk // DECODE_BC)
    dev = q.get_device()
    if num_splits is None:
        S = num_splits_heuristic(B * H_kv * chunks, Tc, num_sms=device_facts(dev).sm_count)
    elif isinstance(num_splits, (bool, float)) or not isinstance(num_splits, (int, np.integer)) or num_splits < 1:
        raise ValueError(f"num_splits must be an integer >= 1 or None, got {num_splits!r}")
    else:
        S = int(num_splits)
    if H_kv * chunks > 65_535 or B > 65_535:
        raise ValueError(f"the grid puts KV heads·row chunks on grid.y and B on grid.z, at most 65,535 each; "
                         f"got {H_kv * chunks} and {B}")
    scale = check_scale(scale, d)
    return DecodePlan(q, k, v, table, int(max_pages), int(page_size), int(B), int(H), int(H_kv), int(Nq), int(Nk),
                      int(d), int(S), int(chunks), causal, float(scale), int(dev), batched)


def launch_decode(plan: DecodePlan, kern: DecodeKernels, O, lse, O_part=None, lse_part=None, trace=None, *,
                  merge: bool = True) -> None:
    """Launch ``kern.main`` (then ``kern.merge`` when plan.S > 1 and ``merge``) for ``plan`` on the
    current CuPy stream: O (B, H, Nq, d) like Q, lse (B, H, Nq) float32, O_part (B, H, Nq, S, d) and
    lse_part (B, H, Nq, S) float32 (None when S = 1) — torch or CuPy arrays; ``trace``: (buffer
    pointer, jmax) for a main kernel built with its timeline switch (``compile_decode(traced=True)``)."""
    P = lambda t: np.uint64(0 if t is None else (t.data_ptr() if hasattr(t, "data_ptr") else t.data.ptr))  # noqa: E731
    i32 = np.int32
    extra = () if trace is None else (np.uint64(trace[0]), i32(trace[1]))
    kern.main(plan.grid, (DECODE_THREADS, 1, 1),
              (P(plan.q), P(plan.k), P(plan.v), P(plan.table), i32(plan.max_pages), i32(plan.page_size), P(O_part),
               P(lse_part), P(O), P(lse), i32(plan.H), i32(plan.H_kv), i32(plan.Nq), i32(plan.Nk), i32(plan.S),
               i32(int(plan.causal)), np.float32(plan.scale), *extra),
              shared_mem=kern.smem_bytes)
    if plan.S > 1 and merge:
        kern.merge((plan.B * plan.H * plan.Nq, 1, 1), (plan.d, 1, 1), (P(O_part), P(lse_part), P(O), P(lse), i32(plan.S)))


def kernels_for(plan: DecodePlan, *, traced: bool = False) -> DecodeKernels:
    """The compiled kernels ``plan`` launches (``compile_decode`` for its dtype, d, cache layout
    and rows)."""
    return compile_decode(plan.dtype, plan.d, plan.table is not None, block_rows(plan.H // plan.H_kv, plan.Nq),
                          traced=traced)




def flash_decode_gpu(Q, K, V, *, num_splits=None, causal: bool = False, scale=None, block_table=None, Nk=None):
    """Decode attention on the GPU: the split-KV algorithm of ``flashviz.decode.decode_attention``.

    Parameters
    ----------
    Q : (B, H, Nq, d) or (H, Nq, d) torch CUDA tensor, float16 or bfloat16; d in {64, 128}.
    K, V : contiguous cache (B, H_kv, Nk, d) (or (H_kv, Nk, d)), or, with ``block_table``, page pools
        (num_pages, page_size, H_kv, d) (FlashAttention's k_cache layout). H % H_kv == 0: query head
        h reads KV head h // (H // H_kv).
    num_splits : int >= 1 or None (``decode.num_splits_heuristic`` for B·H_kv·⌈G·Nq/32⌉ blocks and
        ⌈Nk/64⌉ key tiles on 132 SMs); more splits than key tiles leave some empty (exact still).
    causal : bottom-right (query i sees key c iff c <= i + Nk − Nq).
    scale : float > 0 or None (1/sqrt(d)).
    block_table : (B, max_pages) int32 or int64 CUDA tensor, or None for a contiguous cache. Its
        entries must be page indices 0 .. num_pages − 1: they are not checked here (that would
        synchronise with the GPU on every call; ``flashviz.decode.decode_attention`` checks them).
    Nk : keys per sequence for a paged cache (default max_pages · page_size); with a contiguous
        cache None or K's own length.

    Returns (O, lse): O like Q (dtype and leading shape), lse float32 (..., H, Nq), natural log;
    rows that see no key: O = 0, lse = −inf. Runs on torch's current stream.

    Raises TypeError (not torch CUDA tensors, dtypes), ValueError (shapes, d, H % H_kv, splits,
    block table), RuntimeError (no CuPy / GPU); one line each. Source: Flash-Decoding (Dao, Haziza,
    Massa, Sizov 2023) on FlashAttention-2's Algorithm 1 (Dao 2023).
    """
    p = plan_decode(Q, K, V, num_splits=num_splits, causal=causal, scale=scale, block_table=block_table, Nk=Nk)
    torch = sys.modules["torch"]
    cp = cupy()
    with cp.cuda.Device(p.device), torch_stream(p.device):
        kern = kernels_for(p)
        q = p.q
        O = torch.empty((p.B, p.H, p.Nq, p.d), dtype=q.dtype, device=q.device)
        lse = torch.empty((p.B, p.H, p.Nq), dtype=torch.float32, device=q.device)
        O_part = lse_part = None
        if p.S > 1:
            O_part = torch.empty((p.B, p.H, p.Nq, p.S, p.d), dtype=torch.float32, device=q.device)
            lse_part = torch.empty((p.B, p.H, p.Nq, p.S), dtype=torch.float32, device=q.device)
        launch_decode(p, kern, O, lse, O_part, lse_part)
    if not p.batched:
        O, lse = O[0], lse[0]
    return O, lse


def decode_launch(B: int, H: int, H_kv: int, Nq: int, Nk: int, d: int, num_splits=None, *,
                  num_sms: int = 132) -> dict:
    """What ``flash_decode_gpu`` launches for a shape on a GPU of ``num_sms`` SMs, without a GPU:
    {"splits", "chunks", "blocks" (S · H_kv · chunks · B), "rows" (the kernel's ROWS),
    "smem_bytes", "tiles" (⌈Nk/64⌉)}. ValueError as the call."""
    if H_kv < 1 or H % H_kv:
        raise ValueError(f"H % H_kv must be 0, got H = {H}, H_kv = {H_kv}")
    if num_splits is not None and (isinstance(num_splits, (bool, float)) or
                                   not isinstance(num_splits, (int, np.integer)) or num_splits < 1):
        raise ValueError(f"num_splits must be an integer >= 1 or None, got {num_splits!r}")
    chunks = -(-(H // H_kv) * Nq // DECODE_RM)
    Tc = math.ceil(Nk / DECODE_BC)
    S = num_splits_heuristic(B * H_kv * chunks, Tc, num_sms=num_sms) if num_splits is None else int(num_splits)
    return {"splits": S, "chunks": chunks, "blocks": S * H_kv * chunks * B, "rows": block_rows(H // H_kv, Nq),
            "smem_bytes": decode_smem_bytes(d), "tiles": Tc}
