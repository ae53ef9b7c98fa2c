"""trace_decode: a measured run of the split-KV decode kernel (kernels/flash_decode.cu) with its
timeline switch on (``-DFLASHVIZ_TRACE=1``, kernels/fv_trace.cuh), as a ``Timeline`` (issue 24).

What the lesson reads off it: which SM ran which split, when, and how long — with one split a
block (B·H_kv blocks: most of the GPU's SMs idle) and with the split count the call chooses.

One call, one process, the same inputs for both builds (as ``gpu.trace_kernel`` for the forward):

1. the normal kernel (what ``flash_decode_gpu`` launches, ``gpu.decode.plan_decode`` /
   ``launch_decode``) and the traced build run on the same Q, K, V; their O and lse (after the
   merge when S > 1) must be bit-identical (RuntimeError otherwise);
2. the split pass alone (``flash_decode_mma``, v2, the default, or ``flash_decode``, v1: the
   ``variant``; not the merge, which is not traced) is timed kernel-only for both builds: CUDA
   events around ``repeat`` back-to-back launches, in alternating rounds, median per launch —
   ``kernel_ms`` and ``traced_ms``;
3. a last traced launch on a zeroed buffer is decoded (``tracing.decode``): one record a block
   (split s, KV head and row chunk, sequence b), one writer a warp (four groups), and for each of
   the split's key tiles the steps load_KV (the next tile's copy issued, this one landed),
   compute_S (with the mask), update_ml, accumulate_O, then write_partial (S > 1) or write_O.
   The kernel numbers a split's tiles from 0; the timeline gives them the cache's key-tile index
   (split s covers tiles [s·Tc/S, (s+1)·Tc/S), ``masking.split_ranges``).
"""

from __future__ import annotations

import dataclasses
import datetime

import numpy as np

from ..masking import split_ranges
from ..records.timeline import STAGES, Timeline
from .tracing import decode as decode_buffer

#: writers a block: its four warps (kernels/flash_decode.cu, NT = 128 threads)
GROUPS = 4


def split_starts(Tc: int, S: int) -> np.ndarray:
    """The first key tile of each of S splits of Tc tiles (``masking.split_ranges``, the rule of
    kernels/flash_decode.cu too: ⌊s·Tc / S⌋). ValueError for Tc < 1 or S < 1."""
    if Tc < 1 or S < 1:
        raise ValueError(f"Tc and S must be >= 1, got {Tc}, {S}")
    return np.array([j0 for j0, _ in split_ranges(Tc, S)], np.int64)


def max_split_tiles(Tc: int, S: int) -> int:
    """jmax of the trace buffer: the most key tiles one of S splits of Tc tiles covers (⌈Tc / S⌉)."""
    if Tc < 1 or S < 1:
        raise ValueError(f"Tc and S must be >= 1, got {Tc}, {S}")
    return max(j1 - j0 for j0, j1 in split_ranges(Tc, S))


def decode_split_timeline(raw, *, grid, Tc: int, **meta) -> Timeline:
    """The trace buffer ``raw`` of one traced ``flash_decode`` launch on ``grid`` (S, H_kv·chunks,
    B) over Tc key tiles, as a Timeline of kernel "decode": ``tracing.decode`` with GROUPS writers
    and jmax = ⌈Tc/S⌉, then each split's tiles renumbered to the cache's key tiles, and the last
    step named ``write_partial`` when S > 1. ``meta``: the Timeline's other facts (N = Nk, d, Br,
    Bc, causal, dtype, sm_count, device, date, kernel_ms, traced_ms). Errors as ``tracing.decode``."""
    S = int(grid[0])
    tl = decode_buffer(raw, grid=grid, groups=GROUPS, jmax=max_split_tiles(Tc, S), kernel="decode", **meta)
    j0 = split_starts(Tc, S)
    tl.tiles["j"] += j0[tl.tiles["i"]].astype(tl.tiles["j"].dtype)
    on_tile = tl.events["j"] >= 0
    split_of = tl.blocks["i"][tl.events["cta"][on_tile]]
    tl.events["j"][on_tile] += j0[split_of].astype(tl.events["j"].dtype)
    stages = tuple("write_partial" if (s == "write_O" and S > 1) else s for s in STAGES)
    return dataclasses.replace(tl, stages=stages)


def _inputs(B: int, H: int, H_kv: int, Nq: int, Nk: int, d: int, seed: int):
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn((B, H, Nq, d), generator=g, device="cuda", dtype=torch.float16)
    k, v = (torch.randn((B, H_kv, Nk, d), generator=g, device="cuda", dtype=torch.float16) for _ in range(2))
    torch.cuda.synchronize()
    return q, k, v


def _same_bits(pairs) -> bool:
    import torch

    return all(torch.equal(a.view(torch.int16 if a.element_size() == 2 else torch.int32),
                           b.view(torch.int16 if b.element_size() == 2 else torch.int32)) for a, b in pairs)


def trace_decode(B: int = 1, H: int = 32, H_kv: int = 8, Nk: int = 32768, d: int = 128, *, Nq: int = 1,
                 num_splits=None, causal: bool = False, repeat: int = 20, rounds: int = 5,
                 seed: int = 0, variant=None) -> Timeline:
    """Run kernels/flash_decode.cu with its timeline switch on for one decode shape and return the
    Timeline (kernel "decode"; see ``records.timeline`` for what its columns mean there).

    B sequences, H query heads sharing H_kv KV heads (H % H_kv == 0), Nq query rows (>= 1) against
    Nk cached keys, head dimension d (64 or 128), fp16, a contiguous cache; inputs standard normal
    from ``torch.Generator("cuda").manual_seed(seed)`` (Q, then K, then V). num_splits: None for
    the split count ``flash_decode_gpu`` chooses on this GPU, or an integer >= 1 (1: no split).
    repeat, rounds: the kernel-only timing (1 … 1000, 1 … 100). variant: the split kernel
    (``gpu.decode.DECODE_VARIANTS``; None for the default); both have the same four warps and the same
    steps a key tile. ``notes`` hold B, H, H_kv, G, Nq, Nk, S, Tc, the heuristic's S, the variant,
    kv_bytes (2·B·H_kv·Nk·d·2, the K and V read), kernel_GBps
    (kv_bytes over kernel_ms) and the method.

    Raises TypeError / ValueError for bad arguments (those of ``flash_decode_gpu``; a trace buffer
    over ``tracing.MAX_TRACE_BYTES``), RuntimeError without a GPU, when the traced build's O or
    lse differ from the normal kernel's, or when a block did not finish its record."""
    from .. import checks
    from .common import cupy, torch_stream
    from .decode import decode_launch, decode_smem_bytes

    for name, v in (("B", B), ("H", H), ("H_kv", H_kv), ("Nk", Nk), ("Nq", Nq)):
        checks.check_int(v, name, 1, 1 << 24)
    repeat = checks.check_int(repeat, "repeat", 1, 1000)
    rounds = checks.check_int(rounds, "rounds", 1, 100)
    decode_smem_bytes(d, variant)                          # d, variant, H % H_kv and num_splits checked
    decode_launch(B, H, H_kv, Nq, Nk, d, num_splits, variant=variant)     # before any allocation
    cp = cupy()
    import torch

    dev = torch.cuda.current_device()
    with cp.cuda.Device(dev), torch_stream(dev):           # the device and stream flash_decode_gpu runs on
        return _trace(B, H, H_kv, Nk, d, Nq, num_splits, causal, repeat, rounds, seed, variant)


def _trace(B, H, H_kv, Nk, d, Nq, num_splits, causal, repeat, rounds, seed, variant) -> Timeline:
    """trace_decode's run, on the device and stream it set (its arguments checked)."""
    import torch

    from .common import cupy, device_facts, environment
    from .decode import block_rm, default_splits, kernels_for, launch_decode, plan_decode
    from .tracing import median_launch_ms, trace_buffer

    cp = cupy()
    q, k, v = _inputs(B, H, H_kv, Nq, Nk, d, seed)
    plan = plan_decode(q, k, v, num_splits=num_splits, causal=causal, variant=variant)
    facts = device_facts(plan.device)
    normal, traced = kernels_for(plan), kernels_for(plan, traced=True)
    S, Tc = plan.S, plan.tiles
    jmax = max_split_tiles(Tc, S)
    n_blocks = int(np.prod(plan.grid))
    buf = trace_buffer(n_blocks, GROUPS, jmax, "blocks")

    def outputs():
        O = torch.full((B, H, Nq, d), float("nan"), dtype=torch.float16, device=q.device)
        lse = torch.full((B, H, Nq), float("nan"), dtype=torch.float32, device=q.device)
        parts = ((torch.empty((B, H, Nq, S, d), dtype=torch.float32, device=q.device),
                  torch.empty((B, H, Nq, S), dtype=torch.float32, device=q.device)) if S > 1 else (None, None))
        return O, lse, *parts

    ours, theirs = outputs(), outputs()
    trace = (buf.data.ptr, jmax)
    torch.cuda.synchronize()
    times = median_launch_ms({"normal": lambda: launch_decode(plan, normal, *ours, merge=False),
                              "traced": lambda: launch_decode(plan, traced, *theirs, trace=trace, merge=False)},
                             repeat, rounds)
    launch_decode(plan, normal, *ours)
    buf.fill(0)
    theirs = outputs()
    cp.cuda.Device().synchronize()
    launch_decode(plan, traced, *theirs, trace=trace)
    cp.cuda.Device().synchronize()
    if not _same_bits([(ours[0], theirs[0]), (ours[1], theirs[1])]):
        raise RuntimeError("the traced decode kernel's O or lse differ from the normal kernel's (bit for bit)")
    env = environment()
    kv_bytes = 2 * B * H_kv * Nk * d * 2
    tl = decode_split_timeline(cp.asnumpy(buf), grid=plan.grid, Tc=Tc, N=Nk, d=d, Br=min((H // H_kv) * Nq, block_rm(plan.variant)),
                               Bc=64, causal=plan.causal, dtype="float16", sm_count=facts.sm_count,
                               device=str(env.get("device", "")), date=datetime.date.today().isoformat(),
                               kernel_ms=times["normal"], traced_ms=times["traced"])
    tl.notes.update(B=B, H=H, H_kv=H_kv, G=H // H_kv, Nq=Nq, Nk=Nk, S=S, Tc=Tc, chunks=plan.chunks,
                    variant=plan.variant,
                    heuristic_S=default_splits(B * H_kv * plan.chunks, Tc, d, plan.variant, num_sms=facts.sm_count,
                                               smem_per_sm=facts.smem_per_sm, smem_reserved=facts.smem_reserved),
                    kv_bytes=kv_bytes, kernel_GBps=kv_bytes / (times["normal"] * 1e6), repeat=repeat, rounds=rounds,
                    method=f"kernel-only, the split pass alone ({'flash_decode_mma' if plan.variant == 'mma' else 'flash_decode'}; "
                           f"the merge is not traced or timed): "
                           f"CUDA events around {repeat} back-to-back launches, {rounds} alternating rounds, median")
    return tl
