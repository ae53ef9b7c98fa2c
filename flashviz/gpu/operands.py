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

from dataclasses import dataclass

import numpy as np

from .limits import _check_member
from .mma_limits import DTYPES, MMA_D


@dataclass
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


def _is_torch(x) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "data_ptr")


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
    Raises TypeError (not a float array / tensor, unsupported dtype, CPU torch tensor) and
    ValueError (bad shape, d not in {64, 128}, last stride not 1, rows not 16-byte aligned).
    """
    if dtype is not None and dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)} or None; got {dtype!r}")
    if _is_torch(x):
        import torch
        tdt = {torch.float16: "float16", torch.bfloat16: "bfloat16"}.get(x.dtype)
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
        from .runner import _cupy
        cp = _cupy()   # RuntimeError with what to install, not ModuleNotFoundError
        if isinstance(x, (str, bytes)) or x is None:
            raise TypeError(f"{name} must be a float array or tensor of shape (B, H, N, d), got {type(x).__name__}")
        if not isinstance(x, (np.ndarray, cp.ndarray)):
            try:
                x = np.asarray(x)
            except Exception as exc:
                raise TypeError(f"{name} must be a float array of shape (B, H, N, d): {exc}") from None
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


def _check_layout(op: Operand, name: str) -> None:
    B, H, N, d = op.shape
    op.strides = tuple(0 if n == 1 and i < 3 else s for i, (n, s) in enumerate(zip(op.shape, op.strides)))
    if N < 1:
        raise ValueError(f"{name} must have at least one row (N >= 1), got shape {op.shape}")
    _check_member(d, "d", MMA_D)
    if op.strides[3] != 1:
        raise ValueError(f"{name} must have unit stride along d (BHSD layout), got element strides {op.strides}")
    if any(s % 8 for s in op.strides[:3]) or op.ptr % 16:
        raise ValueError(f"{name} rows must be 16-byte aligned (strides multiples of 8 elements, aligned base); "
                         f"got element strides {op.strides}, address mod 16 = {op.ptr % 16}")
