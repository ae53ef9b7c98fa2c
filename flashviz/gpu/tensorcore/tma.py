"""Tensor maps for Hopper's tensor memory accelerator (TMA), made through the CUDA driver.

A TMA copy (``cp.async.bulk.tensor``) reads a box of a tensor described by a *tensor map*:
a 128-byte ``CUtensorMap`` that the driver's ``cuTensorMapEncodeTiled`` builds on the host
(CUDA Driver API, "Tensor Map Object Management"). flashviz calls it through ctypes on
``libcuda.so.1`` (no extra dependency) and writes the 128 bytes straight into the kernel's
parameter block, where the kernel receives them by value as a ``const __grid_constant__``
parameter (kernels/fv_tma.cuh). Verified on an H200 on 2026-12-01 (docs/architecture.md, the kernels' facts).

The FlashAttention-3 kernel (kernels/flash_fwd_fa3.cu) reads Q, K and V each through one
4-d map over the (d, N, H, B) view of a BHSD tensor: element strides of the sequence, head and
batch axes in bytes, a box of 64 columns (128 bytes: the 128-byte swizzle the tensor cores
read) by ``rows`` rows. Boxes that leave the tensor (rows past N) arrive as zeros.
"""

from __future__ import annotations

import ctypes
import threading

#: CUtensorMapDataType values (cuda.h)
DATA_TYPES = {"float16": 6, "bfloat16": 9}
SWIZZLE_128B = 3            #: CU_TENSOR_MAP_SWIZZLE_128B
L2_PROMOTION_256B = 3       #: CU_TENSOR_MAP_L2_PROMOTION_L2_256B
MAP_BYTES = 128             #: sizeof(CUtensorMap)
BOX_COLS = 64               #: columns of one box: 64 fp16/bf16 elements = 128 bytes, the swizzle's width


def tma_strides_ok(shape, strides) -> bool:
    """Whether a BHSD operand can be read through a tensor map. shape: (B, H, N, d); strides:
    element strides of (B, H, N) (a 4th, d's, must be 1 if given). Each of the batch, head and
    sequence strides must be positive, a multiple of 8 elements (16 bytes) and below 2^39
    elements, unless its axis has size 1 (the stride is then unused). A broadcast axis (stride 0,
    ``expand``) is outside this rule: the H200's driver encoded it and fa3 read it correctly
    (tests/gpu/test_fa3.py), but the runner prefers the wgmma kernel there unless the blocks
    asked for are fa3's alone."""
    if len(strides) > 3 and strides[3] != 1:
        return False
    for ax in (0, 1, 2):
        s = strides[ax]
        if shape[ax] > 1 and (s <= 0 or s % 8 or s >= 1 << 39):
            return False
    return True


class _Encoder(threading.local):
    """ctypes arrays for one call of cuTensorMapEncodeTiled (one set per thread)."""

    def __init__(self):
        self.dims = (ctypes.c_uint64 * 4)()
        self.strides = (ctypes.c_uint64 * 3)()
        self.box = (ctypes.c_uint32 * 4)()
        self.elem = (ctypes.c_uint32 * 4)(1, 1, 1, 1)


_ENC = _Encoder()
_FN: list = []


def _encode_fn():
    if not _FN:
        try:
            lib = ctypes.CDLL("libcuda.so.1")
        except OSError as exc:
            raise RuntimeError(f"TMA needs the CUDA driver (libcuda.so.1): {exc}") from None
        f = lib.cuTensorMapEncodeTiled
        f.restype = ctypes.c_int
        f.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p,
                      ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                      ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
        _FN.append(f)
    return _FN[0]


def encode_bhsd(dst_addr: int, ptr: int, shape, strides, dtype: str, rows: int) -> None:
    """Write the tensor map of a BHSD operand into the 128 bytes at host address dst_addr
    (64-byte aligned).

    ptr: device address (16-byte aligned); shape: (B, H, N, d) with d a multiple of 64;
    strides: element strides of (B, H, N, d), d's stride 1 (``tma_strides_ok``); dtype:
    "float16" | "bfloat16"; rows: box height (1..256; the kernel's Br for Q, Bc for K and V).
    The map's dimensions, innermost first, are (d, N, H, B); its box (64, rows, 1, 1), 128-byte
    swizzle, zero fill out of bounds. Raises ValueError when the driver rejects the map (its
    error code named), RuntimeError without a driver.
    """
    B, H, N, d = shape
    e = _ENC
    e.dims[0], e.dims[1], e.dims[2], e.dims[3] = d, N, H, B
    # an axis of size 1 never moves (the runner records its stride as 0): give it the stride of a
    # contiguous tensor, a legal value
    s_seq = strides[2] * 2 if N > 1 else d * 2
    s_head = strides[1] * 2 if H > 1 else s_seq * N
    s_batch = strides[0] * 2 if B > 1 else s_head * H
    e.strides[0], e.strides[1], e.strides[2] = s_seq, s_head, s_batch
    e.box[0], e.box[1], e.box[2], e.box[3] = BOX_COLS, rows, 1, 1
    rc = _encode_fn()(dst_addr, DATA_TYPES[dtype], 4, ptr, e.dims, e.strides, e.box, e.elem, 0, SWIZZLE_128B,
                      L2_PROMOTION_256B, 0)
    if rc != 0:
        raise ValueError(f"cuTensorMapEncodeTiled rejected the tensor map (CUresult {rc}) for shape {tuple(shape)}, "
                         f"element strides {tuple(strides)}, {dtype}, box 64 x {rows}: strides must be multiples of "
                         f"8 elements and the data 16-byte aligned")
