"""trace_kernel: run a kernel built with its timeline switch on (``-DFLASHVIZ_TRACE=1``, see
kernels/fv_trace.cuh) and return what the GPU did as a ``Timeline`` (issue 12).

One call, one process, same inputs for both builds:

1. the normal kernel (the one the public API launches) and the traced build run on the same
   Q, K, V; their O and lse must be bit-identical (``RuntimeError`` otherwise);
2. both are timed the same way, kernel-only: CUDA events around ``repeat`` back-to-back
   launches, in alternating rounds, median per launch — ``kernel_ms`` (normal) and
   ``traced_ms`` (instrumented), so the instrumentation's cost is stated;
3. a last traced launch on a zeroed buffer is decoded: per block its SM, start and end on
   ``%globaltimer`` (ns), per group (warpgroup or warp), key tile and step the ``%clock64``
   cycles of its start and end, placed on the one time axis with the block's own measured ns per
   cycle (globaltimer span over clock span).

``order`` other than "kernel" (the lesson's block-order experiment, kernels/fv_trace.cuh
FV_BLOCK_ORDER): both builds are compiled with ``-DFLASHVIZ_BLOCK_ORDER`` = 1 ("ascending") or
2 ("longest_first", launched on the grid with its axes turned: (H, B, Tr), the teaching kernel
(B·H, 1, Tr), so the query blocks vary slowest; no index arithmetic, so the untraced build keeps
the kernel's registers); the kernel in its own order is timed in the same rounds
(``notes["kernel_order_ms"]``) and its O and lse must be bit-identical too (each block's
arithmetic does not depend on when it starts).

Shapes: Q (B, H, Nq, d), K and V (B, H, Nk, d) NumPy or CuPy arrays, C-contiguous after
conversion (float16 for "wgmma" and "fa3", float32 for "teaching"). The trace buffer needs
``records · (8 + groups + 9·groups·(jmax + 1))`` 8-byte words (a record per block; fa3: per tile); a run whose buffer would exceed
``MAX_TRACE_BYTES`` or a quarter of the free device memory is refused with a ValueError
naming both numbers.
"""

from __future__ import annotations

import datetime

import numpy as np

from ..records.timeline import BLOCK_DTYPE, EVENT_DTYPE, FORWARD_KERNELS, ORDERS, STAGES, TILE_DTYPE, Timeline

FV_HEAD, FV_NSTAGE = 8, len(STAGES)
FV_MAGIC = 0xF1A5400000000001
MAX_TRACE_BYTES = 1 << 30
#: -DFLASHVIZ_BLOCK_ORDER of each order (kernels/fv_trace.cuh)
ORDER_MACRO = {"kernel": 0, "ascending": 1, "longest_first": 2}


def trace_words(n_blocks: int, groups: int, jmax: int) -> int:
    """8-byte words of the trace buffer: FV_HEAD + groups + FV_NSTAGE·groups·(jmax + 1) per block."""
    return n_blocks * (FV_HEAD + groups + FV_NSTAGE * groups * (jmax + 1))


def _check_kernel(kernel) -> str:
    if not isinstance(kernel, str) or kernel not in FORWARD_KERNELS:
        more = " (the decode kernel: gpu.trace_decode)" if kernel == "decode" else ""
        raise ValueError(f"kernel must be one of {', '.join(map(repr, FORWARD_KERNELS))}{more}; got {kernel!r}")
    return kernel


def _bhsd(x, name: str, dtype):
    from .common import cupy

    cp = cupy()
    if not isinstance(x, (np.ndarray, cp.ndarray)):
        raise TypeError(f"{name} must be a NumPy or CuPy array of shape (B, H, N, d), got {type(x).__name__}")
    if x.ndim != 4 or min(x.shape) < 1:
        raise ValueError(f"{name} must have shape (B, H, N, d) with every size >= 1, got {x.shape}")
    if x.dtype.kind != "f":
        raise TypeError(f"{name} must be a float array, got {x.dtype}")
    return cp.ascontiguousarray(cp.asarray(x, dtype=dtype))


def median_launch_ms(launches: dict, repeat: int, rounds: int) -> dict:
    """Kernel-only time per launch of each callable (ms): CUDA events around ``repeat``
    back-to-back launches, rounds alternating between the callables, median over rounds."""
    from .common import cupy

    cp = cupy()
    for f in launches.values():            # warm up (and load) each once
        f()
    cp.cuda.Device().synchronize()
    times = {k: [] for k in launches}
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    for _ in range(rounds):
        for k, f in launches.items():
            f()                            # queued first: the window below starts with a busy GPU
            start.record()
            for _ in range(repeat):
                f()
            stop.record()
            stop.synchronize()
            times[k].append(cp.cuda.get_elapsed_time(start, stop) / repeat)
    return {k: float(np.median(v)) for k, v in times.items()}


def trace_kernel(Q, K, V, *, kernel: str = "wgmma", causal: bool = False, Br: int | None = None,
                 Bc: int | None = None, repeat: int = 10, rounds: int = 5, order: str = "kernel") -> Timeline:
    """Run ``kernel`` ("wgmma": kernels/flash_fwd_mma.cu on Hopper; "fa3":
    kernels/flash_fwd_fa3.cu on Hopper, its own tile order only, one record per tile, group 0 its
    producer warpgroup; "teaching": kernels/flash_fwd.cu) on Q, K, V (B, H, N, d) with its timeline switch on; return the
    Timeline (see flashviz.records.timeline) with ``kernel_ms`` / ``traced_ms`` (kernel-only, ms,
    same run). Br, Bc: block sizes (None: the kernel's default; the teaching kernel 64×64).
    order: which query blocks start first (``timeline.ORDERS``; see the module docstring).

    Raises ValueError for a bad kernel name, shapes or a trace buffer too large, TypeError for
    non-arrays, RuntimeError without a GPU, when the traced outputs differ from the normal
    kernel's, or when a block did not finish its record."""
    from ..checks import check_flag
    from .common import cupy, device_facts, environment, source
    from .nvrtc import compile_cubin

    kernel = _check_kernel(kernel)
    causal = check_flag(causal, "causal")
    from .. import checks

    repeat = checks.check_int(repeat, "repeat", 1, 1000)
    rounds = checks.check_int(rounds, "rounds", 1, 100)
    if not isinstance(order, str) or order not in ORDERS:
        raise ValueError(f"order must be one of {', '.join(map(repr, ORDERS))}; got {order!r}")
    cp = cupy()
    dtype = np.float32 if kernel == "teaching" else np.float16
    Qd, Kd, Vd = _bhsd(Q, "Q", dtype), _bhsd(K, "K", dtype), _bhsd(V, "V", dtype)
    B, H, Nq, d = Qd.shape
    Nk = Kd.shape[2]
    if Kd.shape[:2] != (B, H) or Vd.shape != Kd.shape or Kd.shape[3] != d:
        raise ValueError(f"K and V must be (B, H, Nk, d) = (B, H, ?, {d}) like Q {Qd.shape}; got {Kd.shape}, {Vd.shape}")
    dev = cp.cuda.runtime.getDevice()
    facts = device_facts(dev)
    scale = 1.0 / np.sqrt(d)

    if kernel == "fa3":
        if order != "kernel":
            raise ValueError(f"the fa3 kernel runs its own tile order only (order='kernel'); got {order!r}")
        return _trace_fa3(Qd, Kd, Vd, causal=causal, Br=Br, Bc=Bc, repeat=repeat, rounds=rounds, facts=facts)
    if kernel == "wgmma":
        from ..mma_limits import KERNEL_FILES
        from .common import LOG2E
        from .tensorcore.kernel import compile_mma

        mk = compile_mma("float16", Br, Bc, d, causal, variant="wgmma")
        Br, Bc, threads, smem, normal = mk.Br, mk.Bc, mk.threads, mk.smem_bytes, mk.kernel
        fname, kname = KERNEL_FILES["wgmma"]
        name = f"{kname}<0,{Br},{Bc},{d},{'true' if causal else 'false'}>"
        arch, groups = "sm_90a", Br // 64
        grid, block = (-(-Nq // Br), H, B), (threads, 1, 1)
        st = lambda x: tuple(np.int64(s // x.itemsize) for s in x.strides[:3])  # noqa: E731 (b, h, s)
        O, O_tr = cp.empty_like(Qd), cp.empty_like(Qd)
        lse, lse_tr = (cp.empty((B * H, Nq), cp.float32) for _ in range(2))

        def args(o, lse_):
            return (Qd, Kd, Vd, o, lse_, np.int32(Nq), np.int32(Nk), np.int32(H), *st(Qd), *st(Kd), *st(Vd),
                    *st(o), np.float32(scale * LOG2E))
    else:
        from .teaching.kernel import compile_kernel

        Br, Bc = Br or 64, Bc or 64
        ck = compile_kernel(Br, Bc, d)
        smem, normal, fname, name = ck.smem_bytes, ck.kernel, "flash_fwd.cu", ck.name
        arch, groups = f"sm_{facts.cc}", 8
        grid, block = (-(-Nq // Br), B * H, 1), (16, 16, 1)
        Qd, Kd, Vd = (x.reshape(B * H, -1, d) for x in (Qd, Kd, Vd))
        O, O_tr = cp.empty_like(Qd), cp.empty_like(Qd)
        lse, lse_tr = (cp.empty((B * H, Nq), cp.float32) for _ in range(2))

        def args(o, lse_):
            return (Qd, Kd, Vd, o, lse_, np.int32(Nq), np.int32(Nk), np.float32(scale), np.int32(1 if causal else 0))

    default = normal                       # the kernel in its own block order, as the public API runs it
    opts = () if order == "kernel" else (f"-DFLASHVIZ_BLOCK_ORDER={ORDER_MACRO[order]}",)
    from .tensorcore.kernel import SOURCE_OVERRIDE
    src = (SOURCE_OVERRIDE.get("wgmma") if kernel == "wgmma" else None) or source(fname)   # the normal build's source
    if opts:
        normal, _, _ = compile_cubin(src, name, arch, options=opts)
        normal.max_dynamic_shared_size_bytes = smem
    traced, _, _ = compile_cubin(src, name, arch, options=("-DFLASHVIZ_TRACE=1", *opts))
    traced.max_dynamic_shared_size_bytes = smem
    jmax = -(-Nk // Bc)
    buf = trace_buffer(int(np.prod(grid)), groups, jmax, "blocks")
    tr_args = lambda: (*args(O_tr, lse_tr), buf, np.int32(jmax))  # noqa: E731

    # the launch grid: longest_first turns the axes (fv_trace.cuh); the records keep launch order
    launch = (grid[1], grid[2], grid[0]) if order == "longest_first" else grid

    def run_normal():
        normal(launch, block, args(O, lse), shared_mem=smem)

    def run_traced():
        traced(launch, block, tr_args(), shared_mem=smem)

    launches = {"normal": run_normal, "traced": run_traced}
    if opts:
        O_def, lse_def = cp.empty_like(O), cp.empty_like(lse)
        launches["kernel_order"] = lambda: default(grid, block, args(O_def, lse_def), shared_mem=smem)
    for x in (O, O_tr, lse, lse_tr):
        x.fill(np.nan)
    times = median_launch_ms(launches, repeat, rounds)
    buf.fill(0)
    O_tr.fill(np.nan)
    lse_tr.fill(np.nan)
    run_traced()
    cp.cuda.Device().synchronize()
    if not same_bits([(O, O_tr), (lse, lse_tr)]):
        raise RuntimeError(f"the traced {kernel} kernel's O or lse differ from the normal kernel's (bit for bit)")
    if opts and not same_bits([(O, O_def), (lse, lse_def)]):
        raise RuntimeError(f"the {kernel} kernel in the {order} block order gives another O or lse than in its own "
                           "order (bit for bit)")
    env = environment()
    tl = decode(cp.asnumpy(buf), grid=(grid[0], H, B), groups=groups, jmax=jmax,
                kernel=kernel, N=Nq, d=d, Br=Br, Bc=Bc, causal=causal, order=order,
                dtype="float16" if kernel == "wgmma" else "float32", sm_count=facts.sm_count,
                device=str(env.get("device", "")), date=datetime.date.today().isoformat(),
                kernel_ms=times["normal"], traced_ms=times["traced"])
    tl.notes.update(Nk=Nk, B=B, H=H, repeat=repeat, rounds=rounds, method="kernel-only: CUDA events around "
                    f"{repeat} back-to-back launches, {rounds} alternating rounds, median")
    if opts:
        tl.notes["kernel_order_ms"] = times["kernel_order"]
    return tl


def trace_buffer(records: int, groups: int, jmax: int, what: str):
    """A zeroed device buffer for ``records`` trace records (CuPy uint64). ValueError, naming both
    sizes, when it would exceed MAX_TRACE_BYTES or a quarter of the free device memory."""
    from .common import cupy

    cp = cupy()
    words = trace_words(records, groups, jmax)
    limit = min(MAX_TRACE_BYTES, cp.cuda.runtime.memGetInfo()[0] // 4)
    if 8 * words > limit:
        raise ValueError(f"the timeline of {records:,} {what} × {jmax} key tiles needs {8 * words / 2**20:.0f} MiB of "
                         f"trace buffer; at most {limit / 2**20:.0f} MiB: trace a smaller B·H or N")
    return cp.zeros(words, cp.uint64)


def same_bits(pairs) -> bool:
    """True when each (a, b) of CuPy arrays (float16 or 32-bit) holds the same bits (NaN included)."""
    from .common import cupy

    cp = cupy()
    return all(bool(cp.array_equal(a.view(cp.uint16 if a.dtype == cp.float16 else cp.uint32),
                                   b.view(cp.uint16 if b.dtype == cp.float16 else cp.uint32))) for a, b in pairs)


def _trace_fa3(Qd, Kd, Vd, *, causal: bool, Br, Bc, repeat: int, rounds: int, facts) -> Timeline:
    """trace_kernel for kernels/flash_fwd_fa3.cu: its parameters go through fa3.launch_fa3 (tensor
    maps by value); one record per tile of its work list, Br/64 + 1 groups (0: the producer
    warpgroup, 1..: the consumers). Grid as the runner launches it (fa3.PERSISTENT)."""
    import dataclasses

    from ..mma_limits import KERNEL_FILES
    from .common import cupy, environment, source
    from .nvrtc import compile_cubin
    from .tensorcore.fa3 import launch_fa3
    from .tensorcore.kernel import SOURCE_OVERRIDE, compile_mma

    cp = cupy()
    B, H, Nq, d = Qd.shape
    Nk = Kd.shape[2]
    mk = compile_mma("float16", Br, Bc, d, causal, variant="fa3")
    Br, Bc = mk.Br, mk.Bc
    src = SOURCE_OVERRIDE.get("fa3") or source(KERNEL_FILES["fa3"][0])     # the source the normal build came from
    traced, _, _ = compile_cubin(src, mk.name, "sm_90a", options=("-DFLASHVIZ_TRACE=1",))
    traced.max_dynamic_shared_size_bytes = mk.smem_bytes
    tk = dataclasses.replace(mk, kernel=traced, function=traced.kernel, function_ptr=int(traced.kernel.ptr),
                             num_regs=int(traced.num_regs), local_bytes=int(traced.local_size_bytes), traced=True)
    Tr, jmax, groups = -(-Nq // Br), -(-Nk // Bc), Br // 64 + 1
    buf = trace_buffer(Tr * H * B, groups, jmax, "tiles")
    O, O_tr = cp.empty_like(Qd), cp.empty_like(Qd)
    lse, lse_tr = (cp.empty((B * H, Nq), cp.float32) for _ in range(2))
    st = lambda x: tuple(int(s // x.itemsize) for s in x.strides[:3])  # noqa: E731 (b, h, s)
    drv = cp.cuda.driver.launchKernel

    def run(k, o, lse_, trace=None):
        launch_fa3(drv, k, Qd.data.ptr, Kd.data.ptr, Vd.data.ptr, o.data.ptr, lse_.data.ptr, B, H, Nq, Nk,
                   st(Qd), st(Kd), st(Vd), st(o), 1.0 / float(np.sqrt(d)), cp.cuda.get_current_stream().ptr, trace)

    for x in (O, O_tr, lse, lse_tr):
        x.fill(np.nan)
    times = median_launch_ms({"normal": lambda: run(mk, O, lse),
                               "traced": lambda: run(tk, O_tr, lse_tr, (buf.data.ptr, jmax))}, repeat, rounds)
    buf.fill(0)
    O_tr.fill(np.nan)
    lse_tr.fill(np.nan)
    run(tk, O_tr, lse_tr, (buf.data.ptr, jmax))
    cp.cuda.Device().synchronize()
    if not same_bits([(O, O_tr), (lse, lse_tr)]):
        raise RuntimeError("the traced fa3 kernel's O or lse differ from the normal kernel's (bit for bit)")
    env = environment()
    tl = decode(cp.asnumpy(buf), grid=(Tr, H, B), groups=groups, jmax=jmax, kernel="fa3", N=Nq, d=d, Br=Br, Bc=Bc,
                causal=causal, order="kernel", dtype="float16", sm_count=facts.sm_count,
                device=str(env.get("device", "")), date=datetime.date.today().isoformat(),
                kernel_ms=times["normal"], traced_ms=times["traced"])
    tl.notes.update(Nk=Nk, B=B, H=H, repeat=repeat, rounds=rounds, groups="0: producer warpgroup; 1..: consumers",
                    records="one per tile of the kernel's work list", method="kernel-only: CUDA events around "
                    f"{repeat} back-to-back launches, {rounds} alternating rounds, median")
    return tl


def decode(raw: np.ndarray, *, grid, groups: int, jmax: int, **meta) -> Timeline:
    """The trace buffer ``raw`` (uint64 words, layout of kernels/fv_trace.cuh) of a run with
    ``grid`` (Tr, H, B) blocks, ``groups`` writers per block and ``jmax`` key-tile rows, as a
    Timeline; rows in launch order (``cta``; fa3: in the order of its work list, one row per tile,
    its start and key-tile spans from the consumer groups), each with the (i, h, b) its block
    recorded (the teaching kernel records b·H + h, split here with H). Time 0 is the earliest
    start of a row or of a step. Each block's clock cycles become ns with its own ns/cycle (its globaltimer span
    over its clock64 span; blocks shorter than 2 µs take the median of the others), and the
    block is placed at its globaltimer start and ends at its globaltimer end (or its last step).
    ValueError for a buffer too small for the grid; RuntimeError when a block's record is
    incomplete (no FV_MAGIC) or the blocks did not record each (i, h, b) of the grid once."""
    Tr, H, B = (int(g) for g in grid)
    n = Tr * H * B
    stride = FV_HEAD + groups + FV_NSTAGE * groups * (jmax + 1)
    raw = np.asarray(raw, np.uint64).ravel()
    if raw.size < n * stride:
        raise ValueError(f"a trace buffer of {n} blocks × {stride} words needs {n * stride:,} words; got {raw.size:,}")
    rec = raw[: n * stride].reshape(n, stride)
    head = rec[:, :FV_HEAD]
    bad = np.flatnonzero(head[:, 7] != np.uint64(FV_MAGIC))
    if bad.size:
        raise RuntimeError(f"{bad.size} of {n} blocks did not finish their timeline record (first: block {bad[0]})")
    gt0, gt1 = head[:, 0].astype(np.int64), head[:, 1].astype(np.int64)
    c0, c1 = head[:, 2].astype(np.int64), head[:, 3].astype(np.int64)
    # ns per cycle, per block: its globaltimer span over its clock span (the SM clock drops under
    # load: 0.505 ns/cycle in the teaching runs, 0.56-0.58 in the wgmma ones); blocks shorter than
    # 2 µs, where the 32 ns timer step would matter, take the median of the others
    ok = (gt1 - gt0 > 2000) & (c1 > c0)
    own = np.where(ok, (gt1 - gt0) / np.where(c1 > c0, c1 - c0, 1), np.nan)
    median = float(np.nanmedian(own)) if ok.any() else 1 / 1.98
    per_block = np.where(ok, own, median)
    origin = gt0.min()
    gbase = rec[:, FV_HEAD:FV_HEAD + groups].astype(np.int64)          # each writer's start clock
    words = rec[:, FV_HEAD + groups:].reshape(n, groups, jmax + 1, FV_NSTAGE)
    cta, g, r, s = np.nonzero(words)
    w = words[cta, g, r, s]
    lo = (w & np.uint64(0xFFFFFFFF)).astype(np.int64)
    hi = (w >> np.uint64(32)).astype(np.int64)
    base = (gt0 - origin).astype(float)
    t0 = base[cta] + (gbase[cta, g] + lo - c0[cta]) * per_block[cta]
    t1 = base[cta] + (gbase[cta, g] + hi - c0[cta]) * per_block[cta]
    sm = head[:, 4].astype(np.int16)
    events = np.zeros(cta.size, EVENT_DTYPE)
    events["cta"], events["sm"], events["group"], events["j"] = cta, sm[cta], g, r - 1
    events["stage"], events["t0_ns"], events["t1_ns"] = s, t0, np.maximum(t1, t0)
    ctas = np.arange(n)
    last = np.full(n, -np.inf)
    np.maximum.at(last, cta, events["t1_ns"])
    blocks = np.zeros(n, BLOCK_DTYPE)
    blocks["cta"], blocks["sm"] = ctas, sm
    work = head[:, 5]                                   # i | h << 24 | b << 44 (fv_trace.cuh)
    blocks["i"] = (work & np.uint64(0xFFFFFF)).astype(np.int64)
    hh = ((work >> np.uint64(24)) & np.uint64(0xFFFFF)).astype(np.int64)
    bb = (work >> np.uint64(44)).astype(np.int64)
    if meta.get("kernel") in ("teaching", "bwd_teaching", "bwd_mma"):   # its h is b·H + h
        hh, bb = hh % H, hh // H
    blocks["h"], blocks["b"] = hh, bb
    work_id = (bb * H + hh) * Tr + blocks["i"]
    if np.any((blocks["i"] >= Tr) | (hh >= H) | (bb >= B)) or len(np.unique(work_id)) != n:
        raise RuntimeError(f"the {n} blocks did not record each (i, head, batch) of the grid {Tr}×{H}×{B} once")
    blocks["n_j"] = head[:, 6].astype(np.int64)
    # fa3 (one record per tile, group 0 its producer): the producer waits for a free slot up to
    # STAGES tiles ahead (on the persistent grid, during the previous tile), so a tile's start and
    # the spans of its key tiles come from the consumers' steps
    doers = events["group"] >= (1 if meta.get("kernel") == "fa3" else 0)
    first = np.full(n, np.inf)
    np.minimum.at(first, cta[doers], events["t0_ns"][doers])
    blocks["t0_ns"] = np.minimum(base, first)            # a group's writer may start before thread 0
    blocks["t1_ns"] = np.maximum((gt1 - origin).astype(float), np.maximum(last, base))    # its own timer end
    tiles_mask = (events["j"] >= 0) & doers
    te = events[tiles_mask]
    key = te["cta"].astype(np.int64) * (jmax + 1) + te["j"]
    uk, inv = np.unique(key, return_inverse=True)
    t_start = np.full(uk.size, np.inf)
    t_end = np.full(uk.size, -np.inf)
    np.minimum.at(t_start, inv, te["t0_ns"])
    np.maximum.at(t_end, inv, te["t1_ns"])
    tiles = np.zeros(uk.size, TILE_DTYPE)
    tiles["cta"], tiles["j"] = uk // (jmax + 1), uk % (jmax + 1)
    tiles["i"] = blocks["i"][tiles["cta"]]
    tiles["t0_ns"], tiles["t1_ns"] = t_start, t_end
    # time 0 is the earliest record's start, or an earlier step (a writer that started before the
    # header's thread, fa3's producer): no time is negative
    zero = min(float(blocks["t0_ns"].min()), float(events["t0_ns"].min()) if len(events) else np.inf)
    for table in (blocks, tiles, events):
        table["t0_ns"] -= zero
        table["t1_ns"] -= zero
    tl = Timeline(grid=(Tr, H, B), blocks=blocks, tiles=tiles, events=events, stages=STAGES, **meta)
    tl.notes.update(ns_per_cycle=median, ns_per_cycle_range=[float(np.nanmin(own)), float(np.nanmax(own))]
                    if ok.any() else [median, median], clock_conversion="per block (globaltimer / clock64 spans)")
    return tl
