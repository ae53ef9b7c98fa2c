"""Q, K, V operands of the tensor-core kernels: torch tensors, CuPy or NumPy arrays -> pointers.

The kernels read fp16 / bf16 in BHSD layout with element strides. This module turns an
input into an ``Operand`` (device pointer, (B, H, N, d) shape, element strides, dtype
name) and checks what the kernels need, with one-line errors:

* torch tensors (CUDA, float16 / bfloat16) are used in place, strides and all;
* CuPy / NumPy float arrays are converted to a C-contiguous device copy in the requested
  dtype (bfloat16 is held as its 16 bits in a uint16 CuPy array, rounded to nearest even).

Shapes: (B, H, N, d), (H, N, d) or (N, d); missing leading axes are 1.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np

from ...checks import check_member
from ...mma_limits import DTYPES, MMA_D
from ..common import cupy


@dataclass(slots=True)
class Operand:
    """One input as the kernel sees it.

    ptr: device address (int); shape: (B, H, N, d); strides: element strides of those four
    axes (the last is 1); dtype: "float16" or "bfloat16"; keep: the object that owns the
    memory (kept alive while the operand is); kind: "torch" or "cupy"; device: its GPU's index.
    """

    ptr: int
    shape: tuple
    strides: tuple
    dtype: str
    keep: object
    kind: str
    device: int = 0


def is_torch(x) -> bool:
    """Whether x is a torch tensor (without importing torch: only if torch is loaded)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


_TORCH_DT: dict = {}


def _torch_dtype_name(x):
    if not _TORCH_DT:
        import torch
        _TORCH_DT.update({torch.float16: "float16", torch.bfloat16: "bfloat16"})
    return _TORCH_DT.get(x.dtype)


def _bhsd(shape, name):
    if len(shape) == 4:
        return tuple(shape)
    if len(shape) == 3:
        return (1, *shape)
    if len(shape) == 2:
        return (1, 1, *shape)
    raise ValueError(f"{name} must have shape (B, H, N, d), (H, N, d) or (N, d); got {tuple(shape)}")


def _pad_strides(strides, ndim):
    return (0,) * (4 - ndim) + tuple(strides)


def to_bf16_bits(x):
    """float32 CuPy array -> uint16 CuPy array of bfloat16 bits (round to nearest even;
    NaN stays NaN)."""
    import cupy as cp
    u = cp.ascontiguousarray(x, dtype=cp.float32).view(cp.uint32)
    nan = cp.isnan(x)
    r = ((u + cp.uint32(0x7FFF) + ((u >> 16) & cp.uint32(1))) >> 16).astype(cp.uint16)
    r[nan] = cp.uint16(0x7FC0)
    return r


def bf16_bits_to_float32(bits):
    """uint16 CuPy array of bfloat16 bits -> float32 CuPy array (exact)."""
    import cupy as cp
    return (bits.astype(cp.uint32) << 16).view(cp.float32)


def as_operand(x, name: str, dtype: str | None) -> Operand:
    """Check / convert one input; see the module docstring.

    dtype: "float16", "bfloat16" or None (torch: the tensor's own; arrays: float16).
    Arrays are converted on CuPy's current device and stream (the caller picks them).
    Raises TypeError (not a torch tensor / NumPy / CuPy float array — lists too —,
    unsupported dtype, CPU torch tensor) and
    ValueError (bad shape, d not in {64, 128}, last stride not 1, rows not 16-byte aligned).
    """
    if dtype is not None and dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)} or None; got {dtype!r}")
    if is_torch(x):
        tdt = _torch_dtype_name(x)
        if tdt is None:
            raise TypeError(f"{name} must be a float16 or bfloat16 torch tensor, got {x.dtype}")
        if dtype is not None and dtype != tdt:
            raise TypeError(f"{name} is {tdt} but dtype={dtype!r} was asked; convert the tensor first")
        if not x.is_cuda:
            raise TypeError(f"{name} is a CPU torch tensor; move it to the GPU (.cuda()) first")
        shape = _bhsd(x.shape, name)
        strides = _pad_strides(x.stride(), x.dim())
        op = Operand(int(x.data_ptr()), shape, strides, tdt, x, "torch", int(x.device.index or 0))
    else:
        if not (isinstance(x, np.ndarray) or type(x).__module__.startswith("cupy")):
            raise TypeError(f"{name} must be a torch tensor, CuPy or NumPy float array of shape (B, H, N, d), "
                            f"got {type(x).__name__}")
        cp = cupy()   # RuntimeError with what to install, not ModuleNotFoundError
        if not isinstance(x, (np.ndarray, cp.ndarray)):
            raise TypeError(f"{name} must be a torch tensor, CuPy or NumPy float array, got {type(x).__name__}")
        if x.dtype.kind != "f":
            raise TypeError(f"{name} must have a float dtype, got {x.dtype}")
        shape = _bhsd(x.shape, name)
        want = dtype or "float16"
        src = cp.asarray(x)
        if want == "float16":
            xd = cp.ascontiguousarray(src, dtype=cp.float16)
            if bool(cp.isinf(xd).any()) and not bool(cp.isinf(src).any()):
                raise ValueError(f"{name} has values beyond float16's range (±65,504); use dtype='bfloat16' "
                                 f"or scale the inputs")
        else:
            # float64 inputs are rounded to float32 first, then to bf16 (two roundings; the
            # first changes the result only in the rare ties of the second)
            xd = to_bf16_bits(src.astype(cp.float32, copy=False))
        xd = xd.reshape(shape)
        op = Operand(int(xd.data.ptr), shape, tuple(s // xd.itemsize for s in xd.strides), want, xd, "cupy",
                     int(xd.device.id))
    _check_layout(op, name)
    return op


def torch_operand(x, name: str, dtype: str | None) -> Operand:
    """``as_operand`` for a torch tensor, on the general path's torch branch: a 4-d tensor the
    kernels take in place as it is becomes an Operand in a few integer operations (its size-1
    axes' strides recorded as 0, as ``_check_layout`` does); anything else (a bad dtype, a CPU
    tensor, another shape or layout) goes through ``as_operand``: its conversion or one-line error."""
    tdt = _TORCH_DT.get(x.dtype) if _TORCH_DT else _torch_dtype_name(x)
    shape = x.shape
    if tdt is None or len(shape) != 4 or (dtype is not None and dtype != tdt) or not x.is_cuda:
        return as_operand(x, name, dtype)
    B, H, N, d = shape
    sb, sh, sn, sd = x.stride()
    ptr = x.data_ptr()
    if B == 1:
        sb = 0
    if H == 1:
        sh = 0
    if N == 1:
        sn = 0
    if N < 1 or B < 1 or H < 1 or sd != 1 or (d != 64 and d != 128) or (sb | sh | sn) % 8 or ptr % 16:
        return as_operand(x, name, dtype)
    return Operand(ptr, (B, H, N, d), (sb, sh, sn, 1), tdt, x, "torch", x.get_device())


def _check_layout(op: Operand, name: str) -> None:
    B, H, N, d = op.shape
    op.strides = tuple(0 if n == 1 and i < 3 else s for i, (n, s) in enumerate(zip(op.shape, op.strides)))
    if N < 1 or B < 1 or H < 1:
        raise ValueError(f"{name} must have B, H, N >= 1, got shape {op.shape}")
    check_member(d, "d", MMA_D)
    if op.strides[3] != 1:
        raise ValueError(f"{name} must have unit stride along d (BHSD layout), got element strides {op.strides}")
    if any(s % 8 for s in op.strides[:3]) or op.ptr % 16:
        raise ValueError(f"{name} rows must be 16-byte aligned (strides multiples of 8 elements, aligned base); "
                         f"got element strides {op.strides}, address mod 16 = {op.ptr % 16}")
