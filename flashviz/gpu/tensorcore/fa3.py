"""Launch the FlashAttention-3 kernel (kernels/flash_fwd_fa3.cu) on Hopper.

Its parameters differ from the FlashAttention-2 kernels': Q, K and V arrive as three TMA
tensor maps (128 bytes each, by value, ``tma.encode_bhsd``), then O, lse, Nq, Nk, H, B, O's
strides and scale·log2(e). One parameter block per thread holds them. The driver encodes the
maps the first time a set of (pointers, shapes, strides) is seen; after that they are copied
from a small cache, so a repeated call on the same buffers is one copy and one cuLaunchKernel
(host time per call: the benchmark's ``fa3_host_us``).

Grid: block c walks the tiles c, c + grid, ... of the kernel's work list (``tile_coords`` in
the kernel: causal, the longest query blocks first). With ``PERSISTENT`` false (the default) the
grid has one block per tile and the hardware hands blocks to SMs as they free up; with it true,
one block per SM walks its share (FlashAttention-3's persistent kernel). Same kernel, same
tile order: only the grid differs, so the two can be timed in one run (benchmarks/NOTES.md).
``DYNAMIC`` (an experiment, for a build with ``FA3_DYNAMIC`` defined: ``benchmarks/ab_fa3.py``)
launches the persistent grid with a tile counter, zeroed on the launch's stream before each
launch: whichever block is free takes the list's next tile. The counter is one buffer a device,
so dynamic launches must not run on two streams at once.
"""

from __future__ import annotations

import ctypes
import threading

import numpy as np

from ...mma_limits import KERNEL_FILES
from ...records import kernel_params
from ..common import LOG2E
from .tma import MAP_BYTES, encode_bhsd

#: the kernel's parameters as its signature lays them out (``records.kernel_params``): the three
#: maps (128 bytes each, 64-byte aligned), then O, lse pointers; Nq, Nk, H, B; O's three int64
#: strides; scale·log2(e); the dynamic scheduler's tile counter (0: none). The traced build adds
#: the trace buffer's pointer and jmax.
_NORMAL = kernel_params.layout(*KERNEL_FILES["fa3"])
_TRACED = kernel_params.layout(*KERNEL_FILES["fa3"], traced=True)
_TAIL_AT, _TAIL = _NORMAL.struct(3)
_OFFSETS = _NORMAL.offsets
_TRACE_AT, _TRACE = _TRACED.struct(len(_NORMAL.params))
_TRACE_OFFSETS = _TRACED.offsets


class _Params(threading.local):
    """One 64-byte aligned parameter block per thread and the array of pointers to its fields."""

    def __init__(self):
        size = _TRACED.size
        raw = np.zeros(size + 64, dtype=np.uint8)
        off = (-raw.ctypes.data) % 64
        self.raw = raw
        self.buf = raw[off:off + size]
        self.base = int(self.buf.ctypes.data)
        self.ptrs = np.array([self.base + o for o in _OFFSETS], dtype=np.uint64)
        self.ptrs_addr = int(self.ptrs.ctypes.data)
        self.traced_ptrs = np.array([self.base + o for o in _TRACE_OFFSETS], dtype=np.uint64)
        self.traced_ptrs_addr = int(self.traced_ptrs.ctypes.data)


_PARAMS = _Params()
#: one block per SM (True) or one block per tile (False, measured faster on the H200: NOTES.md, fa3 v3)
PERSISTENT = False
#: the persistent grid with the dynamic tile scheduler (a build with FA3_DYNAMIC, MMAKernel.dynamic:
#: launch_fa3 refuses any other; an experiment, off)
DYNAMIC = False
#: device -> the dynamic scheduler's int32 counter and one slot a block (CuPy array), made once
_COUNTERS: dict = {}


def _tile_counter(sm_count: int, sptr: int) -> int:
    """The device pointer of this device's tile counter (1 + sm_count int32), its first word zeroed
    on stream sptr (ordered before the launch that follows on it). The buffer is made by the first
    dynamic launch of a device and zeroed whole on its stream; RuntimeError if that launch is being
    captured into a CUDA graph (make one dynamic call before capturing)."""
    from ..common import cupy
    cp = cupy()
    dev = cp.cuda.runtime.getDevice()
    buf = _COUNTERS.get(dev)
    if buf is None or buf.size < 1 + sm_count:
        if cp.cuda.runtime.streamIsCapturing(sptr):
            raise RuntimeError("fa3.DYNAMIC: the tile counter is made by the first dynamic launch, which cannot "
                               "be inside a CUDA-graph capture; make one call before capturing")
        buf = _COUNTERS[dev] = cp.empty(1 + sm_count, dtype=cp.int32)
        cp.cuda.runtime.memsetAsync(buf.data.ptr, 0, buf.nbytes, sptr)
    cp.cuda.runtime.memsetAsync(buf.data.ptr, 0, 4, sptr)
    return int(buf.data.ptr)


#: (pointers, sizes, strides, dtype, Br, Bc) -> the three encoded maps (384 bytes): a call on the
#: same buffers (torch's caching allocator hands the same addresses back) skips three driver calls
_MAPS: dict = {}
_MAPS_MAX = 1024


def launch_fa3(launch, mk, qp: int, kp: int, vp: int, op: int, lp: int, B: int, H: int, Nq: int, Nk: int,
               qs, ks, vs, os_, scale: float, sptr: int, trace: tuple[int, int] | None = None) -> None:
    """Put Q's, K's and V's tensor maps into this thread's parameter block and launch.

    launch: the driver's cuLaunchKernel (CuPy's ``cuda.driver.launchKernel``); mk: the compiled
    fa3 MMAKernel; pointers, sizes and element strides (B, H, N of each operand) as for the other
    kernels; scale: the softmax scale; sptr: the stream. The maps are encoded once per
    (pointers, shapes, strides, dtype, blocks) and copied from ``_MAPS`` after that (a map holds
    no data, only where the data is). trace: (device pointer of the trace buffer, jmax) for a
    build with the timeline switch on (``mk.function_ptr`` must be that build's; see
    flashviz.gpu.tracing). Raises ValueError when a map cannot be encoded (see
    ``tma.tma_strides_ok``).
    """
    p = _PARAMS
    d, dt = mk.d, mk.dtype
    key = (qp, kp, vp, B, H, Nq, Nk, d, *qs, *ks, *vs, dt, mk.Br, mk.Bc)
    maps = _MAPS.get(key)
    if maps is None:
        encode_bhsd(p.base, qp, (B, H, Nq, d), (*qs, 1), dt, mk.Br)
        encode_bhsd(p.base + MAP_BYTES, kp, (B, H, Nk, d), (*ks, 1), dt, mk.Bc)
        encode_bhsd(p.base + 2 * MAP_BYTES, vp, (B, H, Nk, d), (*vs, 1), dt, mk.Bc)
        if len(_MAPS) >= _MAPS_MAX:
            _MAPS.clear()
        _MAPS[key] = p.buf[:_TAIL_AT].tobytes()
    else:
        ctypes.memmove(p.base, maps, _TAIL_AT)
    tiles = -(-Nq // mk.Br) * H * B
    if tiles >= 1 << 31:
        raise ValueError(f"fa3: {tiles:,} (query block, head, batch) tiles; at most 2^31 - 1")
    if DYNAMIC and not getattr(mk, "dynamic", False):
        raise ValueError("fa3.DYNAMIC needs the build with FA3_DYNAMIC (kernel.SOURCE_OVERRIDE['fa3'] = "
                         "'#define FA3_DYNAMIC 1' + the kernel's source); this one would walk the static list")
    grid = min(tiles, mk.sm_count) if PERSISTENT or DYNAMIC else tiles
    counter = _tile_counter(mk.sm_count, sptr) if DYNAMIC else 0
    _TAIL.pack_into(p.buf, _TAIL_AT, op, lp, Nq, Nk, H, B, os_[0], os_[1], os_[2], scale * LOG2E, counter)
    ptrs = p.ptrs_addr
    if (trace is not None) != mk.traced:      # the driver would read past the pointer array, or miss two
        raise ValueError("fa3: a trace buffer goes with the traced build only (MMAKernel.traced); "
                         f"got trace={trace!r} for a {'traced' if mk.traced else 'normal'} build")
    if trace is not None:
        _TRACE.pack_into(p.buf, _TRACE_AT, *trace)
        ptrs = p.traced_ptrs_addr
    launch(mk.function_ptr, grid, 1, 1, mk.threads, 1, 1, mk.smem_bytes, sptr, ptrs, 0)
