"""What both GPU tracks (the teaching kernel and the tensor-core kernels) share.

* ``cupy()`` — import CuPy or raise one RuntimeError that says what to install;
* ``check_flag``, ``check_member``, ``check_scale`` — the argument checks (one scale rule for
  every kernel: a positive real whose value as the kernel receives it is a normal float32);
* ``source(name)`` — a kernel's text, read once per process (the compile cache keys on it);
* ``device_facts(dev)`` — compute capability, SM count, shared memory opt-in and L2 size of
  one device, queried once per process;
* ``torch_stream(dev)`` — torch's current stream on a device as a CuPy stream (the CUDA
  stream protocol, ``cupy.cuda.Stream.from_external``), one CuPy object per stream handle.

Nothing here imports CuPy or torch at import time, so CPU-only machines can import it.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np

LOG2E = 1.4426950408889634


def cupy():
    """The cupy module; RuntimeError (not ModuleNotFoundError) when CuPy cannot be imported."""
    try:
        import cupy as cp
    except Exception as exc:
        raise RuntimeError(f"flashviz.gpu needs CuPy and a CUDA GPU: {exc}") from None
    return cp


def check_flag(value, name: str) -> bool:
    """``value`` as a bool; TypeError unless it is True/False (or a NumPy bool)."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def check_member(value, name: str, allowed) -> int:
    """``value`` as an int from ``allowed``; TypeError for a non-integer, ValueError (listing
    the supported values) otherwise."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, one of {', '.join(map(str, allowed))}; got {value!r}")
    if int(value) not in allowed:
        raise ValueError(f"{name}={value} is not supported by the GPU kernel; "
                         f"supported: {', '.join(map(str, allowed))}")
    return int(value)


_F32 = np.finfo(np.float32)


def check_scale(scale, d: int, *, factor: float = 1.0) -> float:
    """The softmax scale as a float: 1/sqrt(d) for None.

    Every kernel receives ``scale·factor`` as a float32 (the tensor-core kernels take
    scale·log2(e), factor = LOG2E; the teaching kernel scale itself, factor = 1). That value
    must be a normal, finite float32 — so masked scores (−inf) stay −inf and a huge scale is
    an error here rather than inf/NaN in the output. Raises TypeError (not a real number),
    ValueError (not > 0, or outside float32's normal range: about 1.2e-38 to 3.4e38 / factor).
    """
    if scale is None:
        return 1.0 / math.sqrt(d)
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise TypeError(f"scale must be a real number or None, got {scale!r}")
    v = float(scale) * factor
    if not (math.isfinite(v) and float(_F32.tiny) <= v <= float(_F32.max)):
        lo, hi = float(_F32.tiny) / factor, float(_F32.max) / factor
        raise ValueError(f"scale must be > 0 with the value the kernel receives a normal float32 "
                         f"(about {lo:.1e} to {hi:.1e}), got {scale!r}")
    return float(scale)


_SOURCES: dict = {}


def source(name: str) -> str:
    """The text of ``kernels/<name>``, read from disk once per process (later calls are a
    dict lookup). Raises FileNotFoundError if there is no such kernel file."""
    text = _SOURCES.get(name)
    if text is None:
        from ._files import kernel_source
        text = _SOURCES[name] = kernel_source(name)
    return text


@dataclass(frozen=True)
class DeviceFacts:
    """One GPU as the runner needs it. cc: compute capability as an int (90 for sm_90);
    sm_count: streaming multiprocessors; smem_optin: bytes of shared memory one block may
    opt in to; l2_bytes: L2 cache size in bytes; name: the device's name."""

    index: int
    cc: int
    sm_count: int
    smem_optin: int
    l2_bytes: int
    name: str


_FACTS: dict = {}


def device_facts(dev: int | None = None) -> DeviceFacts:
    """Facts of device ``dev`` (default: CuPy's current device), queried once per process.
    Raises RuntimeError without CuPy / GPU."""
    cp = cupy()
    if dev is None:
        dev = cp.cuda.runtime.getDevice()
    facts = _FACTS.get(dev)
    if facts is None:
        d = cp.cuda.Device(dev)
        attrs = d.attributes
        props = cp.cuda.runtime.getDeviceProperties(dev)
        name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
        facts = _FACTS[dev] = DeviceFacts(dev, int(d.compute_capability), int(attrs["MultiProcessorCount"]),
                                          int(attrs["MaxSharedMemoryPerBlockOptin"]),
                                          int(attrs.get("L2CacheSize", 0)), name)
    return facts


class _StreamHandle:
    """A raw cudaStream_t speaking the CUDA stream protocol (``__cuda_stream__``)."""

    __slots__ = ("ptr",)

    def __init__(self, ptr: int):
        self.ptr = ptr

    def __cuda_stream__(self):
        return (0, self.ptr)


_STREAMS: dict = {}


def cupy_stream(ptr: int):
    """A CuPy stream for the raw CUDA stream handle ``ptr`` (one object per handle, made with
    ``cupy.cuda.Stream.from_external``); CuPy neither owns nor destroys it."""
    s = _STREAMS.get(ptr)
    if s is None:
        s = _STREAMS[ptr] = cupy().cuda.Stream.from_external(_StreamHandle(ptr))
    return s


_RAW_STREAM: list = []


def torch_stream(dev: int):
    """torch's current stream on device ``dev`` (what torch's own kernels are ordered on;
    the capture stream inside ``torch.cuda.graph``) as a CuPy stream.

    The handle is read with torch's raw-handle getter where torch has it (one C call; the
    same one Triton uses), else through ``torch.cuda.current_stream(dev).cuda_stream``."""
    return cupy_stream(raw_torch_stream(dev))


def raw_torch_stream(dev: int) -> int:
    """The raw cudaStream_t handle of torch's current stream on device ``dev`` (an int)."""
    if not _RAW_STREAM:
        import torch
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        _RAW_STREAM.append(raw if raw is not None else (lambda i: torch.cuda.current_stream(i).cuda_stream))
    return _RAW_STREAM[0](dev)
