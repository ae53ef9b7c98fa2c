"""trace_backward: a measured run of a backward kernel with its timeline switch on, as a ``Timeline``
(issue 23): the teaching backward (kernels/flash_bwd.cu, FlashAttention-2's Algorithm 2 in fp32;
kernel "bwd_teaching") or a tensor-core one (kernels/flash_bwd_mma.cu, fp16 on mma.sync; kernel
"bwd_mma"; kernels/flash_bwd_wgmma.cu, fp16 on Hopper's wgmma, the default backward on sm_90;
kernel "bwd_wgmma"). All number their steps FV_BSTAGE_* and write one record a key block.

What chapter 6 reads off it: the key blocks j (one thread block each) on the SMs, and inside a
block, for every query block i it visits, how long each step of the recomputation takes —
load_Qi, recompute_P (S_ij and P_ij again, from the stored lse), accumulate_dV, compute_dS,
accumulate_dK, update_dQ (the atomic adds into HBM) — against the forward's one pass.

One call, one process, the same inputs for both builds (as ``gpu.trace_kernel`` for the forward):

1. O and lse come from the forward on the same Q, K, V (teaching: ``flash_forward_gpu``, same Br,
   Bc; mma: ``flash_forward_mma`` in fp16), dO is standard normal (NumPy ``default_rng(seed)``);
2. the normal backward (``launch_backward``: preprocess, then flash_bwd with atomic dQ) and the
   traced build run on them; dK and dV must be bit-identical (each block owns its key block and
   sums in one order), dQ equal to float32 rounding (its atomic adds land in a different order on
   every run, traced or not): RuntimeError otherwise;
3. both are timed kernel-only (preprocess + flash_bwd): CUDA events around ``repeat``
   back-to-back launches, alternating rounds, median — ``kernel_ms`` and ``traced_ms``;
4. a last traced launch on a zeroed buffer is decoded (``tracing.decode``; rows = query blocks).
"""

from __future__ import annotations

import dataclasses
import datetime

import numpy as np

from ..records.timeline import BWD_STAGES, Timeline
from .tracing import decode as decode_buffer

#: writers a block of the teaching backward: its eight warps (16 x 16 threads)
GROUPS = 8
#: the backward kernels trace_backward runs, by the name its ``kernel`` argument takes
KERNELS = {"teaching": "bwd_teaching", "mma": "bwd_mma", "wgmma": "bwd_wgmma"}
#: writers a block of a tensor-core backward with Bc keys: a warp of 16 keys (mma), a warpgroup of 64 (wgmma)
KEYS_PER_GROUP = {"mma": 16, "wgmma": 64}
#: how each tensor-core dQ path adds dQ_i, as a timeline's notes say it
DQ_NOTES = {"atomic": "atomic (fp32 atomicAdd)", "bulk": "bulk (fp32 tile staged in SRAM, cp.reduce.async.bulk)",
            "separate": "separate (the fixed-order dQ pass)"}


def backward_timeline(raw, *, grid, Tr: int, groups: int = GROUPS, kernel: str = "bwd_teaching",
                      **meta) -> Timeline:
    """The trace buffer ``raw`` of one traced backward launch (flash_bwd: ``kernel`` "bwd_teaching",
    GROUPS warps; flash_bwd_mma: "bwd_mma", Bc/16 warps; flash_bwd_wgmma: "bwd_wgmma", Bc/64
    warpgroups) on ``grid`` (Tc, H, B) with Tr query
    blocks, as a Timeline with ``BWD_STAGES`` (``tracing.decode``, one row per query block).
    ``meta``: the Timeline's other facts. Errors as ``tracing.decode``."""
    tl = decode_buffer(raw, grid=grid, groups=groups, jmax=Tr, kernel=kernel, **meta)
    return dataclasses.replace(tl, stages=BWD_STAGES)


def trace_backward(Q, K, V, *, kernel: str = "teaching", causal: bool = False, Br: int = 64, Bc: int | None = None,
                   repeat: int = 10, rounds: int = 5, seed: int = 1) -> Timeline:
    """Run a backward kernel with its timeline switch on (see the module docstring) and return the
    Timeline (``records.timeline``: blocks are key blocks j, rows query blocks i). kernel:
    "teaching" (kernels/flash_bwd.cu, float32; Br, Bc as ``flash_backward_gpu`` takes them, Bc
    None = 64), "mma" (kernels/flash_bwd_mma.cu, float16, atomic dQ; Br is its fixed 64, Bc 64
    or 128, None = its default) or "wgmma" (kernels/flash_bwd_wgmma.cu, float16, sm_90 only; the
    dQ path and Bc of ``backward_plan``'s default, Bc 64 or 128 to choose). Q (B, H, Nq, d), K, V
    (B, H, Nk, d): NumPy or CuPy float arrays; repeat 1 … 1000, rounds 1 … 100.

    Raises TypeError / ValueError for bad arguments (as ``flash_backward_gpu``; a trace buffer over
    ``tracing.MAX_TRACE_BYTES``), RuntimeError without a GPU, when the traced build's dK, dV differ
    from the normal kernel's bit for bit (or dQ beyond float32 rounding), or when a block did not
    finish its record."""
    from .. import checks
    from .common import check_scale, cupy, device_facts, environment
    from .teaching.backward import compile_backward, launch_backward
    from .teaching.kernel import flash_forward_gpu
    from .tracing import median_launch_ms, trace_buffer

    if not isinstance(kernel, str) or kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {', '.join(map(repr, KERNELS))}; got {kernel!r}")
    causal = checks.check_flag(causal, "causal")
    repeat = checks.check_int(repeat, "repeat", 1, 1000)
    rounds = checks.check_int(rounds, "rounds", 1, 100)
    cp = cupy()
    arrays = []
    for x, name in ((Q, "Q"), (K, "K"), (V, "V")):
        if not isinstance(x, (np.ndarray, cp.ndarray)):
            raise TypeError(f"{name} must be a NumPy or CuPy array of shape (B, H, N, d), got {type(x).__name__}")
        if x.ndim != 4 or min(x.shape) < 1 or x.dtype.kind != "f":
            raise ValueError(f"{name} must be a float array of shape (B, H, N, d) with every size >= 1, "
                             f"got {x.dtype} {x.shape}")
        arrays.append(cp.ascontiguousarray(cp.asarray(x, dtype=cp.float32)))
    Qd, Kd, Vd = arrays
    B, H, Nq, d = Qd.shape
    Nk = Kd.shape[2]
    if Kd.shape[:2] != (B, H) or Kd.shape[3] != d or Vd.shape != Kd.shape:
        raise ValueError(f"K and V must be (B, H, Nk, d) = ({B}, {H}, ?, {d}) like Q; got {Kd.shape}, {Vd.shape}")
    scale = check_scale(None, d)
    if kernel != "teaching":
        return _trace_tensorcore(kernel, Qd, Kd, Vd, causal=causal, Bc=Bc, repeat=repeat, rounds=rounds, seed=seed,
                                 scale=scale)
    Bc = 64 if Bc is None else Bc
    cb = compile_backward(Br, Bc, d)
    ct = compile_backward(Br, Bc, d, traced=True)
    BH, Tr, Tc = B * H, -(-Nq // Br), -(-Nk // Bc)
    O, lse = flash_forward_gpu(Qd, Kd, Vd, Br=Br, Bc=Bc, causal=causal)
    dO = cp.asarray(np.random.default_rng(seed).standard_normal((B, H, Nq, d)).astype(np.float32))
    q, k, v, o, do = (x.reshape(BH, -1, d) for x in (Qd, Kd, Vd, O, dO))
    L = lse.reshape(BH, Nq)
    buf = trace_buffer(Tc * BH, GROUPS, Tr, "blocks")

    def grads():
        return (cp.empty((BH, Nq, d), cp.float32), cp.empty((BH, Nk, d), cp.float32),
                cp.empty((BH, Nk, d), cp.float32), cp.empty((BH, Nq), cp.float32))

    ours, theirs = grads(), grads()
    trace = (buf.data.ptr, Tr)
    times = median_launch_ms({"normal": lambda: launch_backward(cb, q, k, v, o, do, L, *ours, causal=causal,
                                                                scale=scale),
                              "traced": lambda: launch_backward(ct, q, k, v, o, do, L, *theirs, causal=causal,
                                                                scale=scale, trace=trace)}, repeat, rounds)
    for g in ours + theirs:
        g.fill(np.nan)
    launch_backward(cb, q, k, v, o, do, L, *ours, causal=causal, scale=scale)
    buf.fill(0)
    launch_backward(ct, q, k, v, o, do, L, *theirs, causal=causal, scale=scale, trace=trace)
    cp.cuda.Device().synchronize()
    same = all(bool(cp.array_equal(a.view(cp.uint32), b.view(cp.uint32))) for a, b in zip(ours[1:3], theirs[1:3]))
    if not same:
        raise RuntimeError("the traced backward's dK or dV differ from the normal kernel's (bit for bit)")
    if not bool(cp.allclose(ours[0], theirs[0], rtol=1e-4, atol=1e-5 * float(cp.abs(ours[0]).max() + 1e-30))):
        raise RuntimeError("the traced backward's dQ differs from the normal kernel's beyond float32 rounding")
    facts = device_facts(cp.cuda.runtime.getDevice())
    env = environment()
    tl = backward_timeline(cp.asnumpy(buf), grid=(Tc, H, B), Tr=Tr, N=Nq, d=d, Br=Br, Bc=Bc, causal=causal,
                           dtype="float32", sm_count=facts.sm_count, device=str(env.get("device", "")),
                           date=datetime.date.today().isoformat(), kernel_ms=times["normal"],
                           traced_ms=times["traced"])
    tl.notes.update(Nk=Nk, B=B, H=H, Tr=Tr, Tc=Tc, repeat=repeat, rounds=rounds, dQ="atomic (float32 atomicAdd)",
                    rows="query blocks i (blocks are key blocks j)",
                    method=f"kernel-only, the backward's two kernels (preprocess, flash_bwd): CUDA events around "
                           f"{repeat} back-to-back launches, {rounds} alternating rounds, median")
    return tl


def _trace_tensorcore(kernel: str, Qd, Kd, Vd, *, causal: bool, Bc, repeat: int, rounds: int, seed: int,
                      scale: float) -> Timeline:
    """trace_backward for kernels/flash_bwd_mma.cu (kernel "mma": atomic dQ) or
    kernels/flash_bwd_wgmma.cu ("wgmma": ``backward_plan``'s dQ path and Bc): fp16 torch tensors,
    O and lse from ``flash_forward_mma``, the launches through
    ``tensorcore.backward.launch_backward_mma`` on torch's current stream."""
    import torch

    from .common import cupy, device_facts, environment, torch_stream
    from .tensorcore.backward import (
        BWD_MMA_BC,
        BWD_MMA_BC_DEFAULT,
        BWD_MMA_BR,
        backward_plan,
        compile_backward_mma,
        compile_backward_wgmma,
        launch_backward_mma,
    )
    from .tensorcore.kernel import flash_forward_mma
    from .tracing import median_launch_ms, trace_buffer

    cp = cupy()
    B, H, Nq, d = Qd.shape
    Nk = Kd.shape[2]
    dev = Qd.device.id                                   # the GPU the inputs are on
    if kernel == "wgmma":                                # ValueError off sm_90 or for another Bc
        _, dq, Bc = backward_plan(device_facts(dev).cc, d, kernel="wgmma", Bc=Bc)
    else:
        dq, Bc = "atomic", BWD_MMA_BC_DEFAULT if Bc is None else Bc
        if Bc not in BWD_MMA_BC:
            raise ValueError(f"Bc must be one of {BWD_MMA_BC} for the tensor-core backward, got {Bc!r}")
    with cp.cuda.Device(dev), torch_stream(dev):         # every copy and launch on torch's stream there
        q, k, v = (torch.as_tensor(x.astype(cp.float16), device=f"cuda:{dev}") for x in (Qd, Kd, Vd))
        dO = torch.as_tensor(np.random.default_rng(seed).standard_normal((B, H, Nq, d)).astype(np.float16),
                             device=f"cuda:{dev}")
        O, lse = flash_forward_mma(q, k, v, causal=causal)
        O = O.contiguous()
        if kernel == "wgmma":
            mb, mt = (compile_backward_wgmma("float16", Bc, d, causal, dq, traced=t) for t in (False, True))
        else:
            mb, mt = (compile_backward_mma("float16", Bc, d, causal, traced=t) for t in (False, True))
        groups = Bc // KEYS_PER_GROUP[kernel]
        Tr, Tc, BH = -(-Nq // BWD_MMA_BR), -(-Nk // Bc), B * H
        buf = trace_buffer(Tc * BH, groups, Tr, "blocks")
        lse32 = lse.to(torch.float32).contiguous()

        def grads():
            return (torch.empty((BH, Nq), dtype=torch.float32, device=q.device),
                    torch.empty((BH, Nq, d), dtype=torch.float32, device=q.device),
                    torch.empty_like(q), torch.empty_like(k), torch.empty_like(v))

        ours, theirs = grads(), grads()
        trace = (buf.data.ptr, Tr)
        times = median_launch_ms({"normal": lambda: launch_backward_mma(mb, q, k, v, O, dO, lse32, None, *ours,
                                                                        scale=scale),
                                  "traced": lambda: launch_backward_mma(mt, q, k, v, O, dO, lse32, None, *theirs,
                                                                        scale=scale, trace=trace)}, repeat, rounds)
        for g in ours[2:] + theirs[2:]:
            g.fill_(float("nan"))
        launch_backward_mma(mb, q, k, v, O, dO, lse32, None, *ours, scale=scale)
        buf.fill(0)
        launch_backward_mma(mt, q, k, v, O, dO, lse32, None, *theirs, scale=scale, trace=trace)
        cp.cuda.Device().synchronize()
    if not all(torch.equal(a.view(torch.int16), b.view(torch.int16)) for a, b in zip(ours[3:], theirs[3:])):
        raise RuntimeError("the traced tensor-core backward's dK or dV differ from the normal kernel's (bit for bit)")
    dq_a, dq_b = ours[2].float(), theirs[2].float()
    if not torch.allclose(dq_a, dq_b, rtol=2e-3, atol=2e-3 * float(dq_a.abs().max()) + 1e-30):
        raise RuntimeError("the traced tensor-core backward's dQ differs from the normal kernel's beyond fp16 rounding")
    facts = device_facts(dev)
    env = environment()
    tl = backward_timeline(cp.asnumpy(buf), grid=(Tc, H, B), Tr=Tr, groups=groups, kernel=KERNELS[kernel], N=Nq, d=d,
                           Br=BWD_MMA_BR, Bc=Bc, causal=causal, dtype="float16", sm_count=facts.sm_count,
                           device=str(env.get("device", "")), date=datetime.date.today().isoformat(),
                           kernel_ms=times["normal"], traced_ms=times["traced"])
    main = "flash_bwd_wgmma" if kernel == "wgmma" else "flash_bwd_mma"
    third = "the dQ pass" if dq == "separate" else "convert"
    tl.notes.update(Nk=Nk, B=B, H=H, Tr=Tr, Tc=Tc, repeat=repeat, rounds=rounds, dQ=DQ_NOTES[dq],
                    rows="query blocks i (blocks are key blocks j)",
                    method=f"kernel-only, the backward's three kernels (preprocess, {main}, {third}): CUDA "
                           f"events around {repeat} back-to-back launches, {rounds} alternating rounds, median")
    if kernel == "wgmma":
        tl.notes.update(steps="a step that issues a tensor-core product ends when it is issued; the wait for "
                              "it falls in the step that reads its result (update_dQ holds the wait for "
                              "every product of the step)")
    return tl
