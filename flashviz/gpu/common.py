"""What both GPU tracks (``teaching/``: the fp32 teaching kernel; ``tensorcore/``: the fp16 /
bf16 tensor-core kernels) share.

* ``cupy()`` — import CuPy or raise one RuntimeError that says what to install;
* ``gpu_status()`` — can anything run here, and if not, why (never raises);
  ``environment()`` — the device and software versions a benchmark record names;
* ``kernel_source`` (from ``flashviz.records.files``, which finds kernels/*.cu and
  benchmarks/results/*.json in an installed package or a source checkout) — a kernel file's text;
* ``check_scale`` — the kernels' scale check (``check_flag`` and ``check_member`` are in
  ``flashviz.checks``, the shared-memory limits in ``flashviz.mma_limits``): one scale rule for
  every kernel, a positive real whose value as the kernel receives it is a normal float32;
* ``source(name)`` — a kernel's text, read once per process (the compile cache keys on it);
  ``source_sha256(name)`` — its hash, as benchmark records name the source they timed;
* ``device_facts(dev)`` — compute capability, SM count, shared memory opt-in and L2 size of
  one device, queried once per process;
* ``torch_stream(dev)`` — torch's current stream on a device as a CuPy stream (the CUDA
  stream protocol, ``cupy.cuda.Stream.from_external``), one CuPy object per stream handle.

Nothing here imports CuPy or torch at import time, so CPU-only machines can import it.
"""

from __future__ import annotations

import datetime
import functools
import math
import numbers
import os
import platform
import threading
from dataclasses import dataclass

import numpy as np

from ..records.files import compiled_source, expand_includes, kernel_source, source_sha256  # noqa: F401
from .nvrtc import env_options

LOG2E = 1.4426950408889634


def cupy():
    """The cupy module; RuntimeError (not ModuleNotFoundError) when CuPy cannot be imported."""
    try:
        import cupy as cp
    except Exception as exc:
        raise RuntimeError(f"flashviz.gpu needs CuPy and a CUDA GPU: {exc}") from None
    return cp


def _nvidia_driver_present() -> bool:
    """Whether this machine looks like it has an NVIDIA driver (without importing CUDA)."""
    import shutil

    return shutil.which("nvidia-smi") is not None or os.path.exists("/proc/driver/nvidia/version")


def gpu_status() -> tuple[bool, str]:
    """(ok, reason): can flashviz run its CUDA kernel here? Never raises.

    ok is True when CuPy imports and sees at least one CUDA device; reason is one line:
    the device, CuPy and CUDA versions when ok, else what is missing.
    """
    try:
        import cupy as cp
    except Exception:  # ImportError, or a broken CUDA install raising at import
        hint = ("on a machine with an NVIDIA GPU, pip install 'flashviz[gpu]' (CUDA 12) or 'flashviz[gpu-cuda13]'"
                if _nvidia_driver_present() else "this machine shows no NVIDIA driver")
        return False, f"CuPy is not installed: {hint}"
    try:
        n = cp.cuda.runtime.getDeviceCount()
        if n < 1:
            return False, "CuPy is installed but no CUDA device is visible"
        dev = cp.cuda.Device()
        props = cp.cuda.runtime.getDeviceProperties(dev.id)
        name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
        rt = cp.cuda.runtime.runtimeGetVersion()
        return True, (f"{name} (sm_{dev.compute_capability}), CuPy {cp.__version__}, "
                      f"CUDA runtime {rt // 1000}.{rt % 1000 // 10}")
    except Exception as exc:
        return False, f"no usable CUDA device ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"


def environment() -> dict:
    """Device name, SM count, shared memory opt-in, CuPy / CUDA / torch versions, date (UTC),
    the git commit measured ($FLASHVIZ_COMMIT; None when unset) and, only when
    $FLASHVIZ_NVRTC_OPTIONS is set, ``nvrtc_options``: the options it adds to every kernel build
    (``nvrtc.env_options``; e.g. ["-lineinfo"]), so a record says its kernels were built with them."""
    cp = cupy()
    dev = cp.cuda.Device()
    props = cp.cuda.runtime.getDeviceProperties(dev.id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    env = {
        "device": name,
        "compute_capability": dev.compute_capability,
        "sm_count": int(dev.attributes["MultiProcessorCount"]),
        "smem_per_block_optin": int(dev.attributes["MaxSharedMemoryPerBlockOptin"]),
        "memory_total_bytes": int(cp.cuda.runtime.memGetInfo()[1]),
        "cupy": cp.__version__,
        "cuda_runtime": int(cp.cuda.runtime.runtimeGetVersion()),
        "cuda_driver": int(cp.cuda.runtime.driverGetVersion()),
        "numpy": np.__version__,
        "python": platform.python_version(),
        "commit": os.environ.get("FLASHVIZ_COMMIT"),   # the git commit measured (set by the one who runs it)
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "time_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    extra = env_options()
    if extra:
        env["nvrtc_options"] = list(extra)
    try:
        import torch
        env["torch"] = torch.__version__
    except Exception:
        env["torch"] = None
    return env




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
    """The text NVRTC compiles for ``kernels/<name>``: the file with its kernels/ headers pasted
    in (``expand_includes``), read from disk once per process (later calls are a dict lookup).
    Raises FileNotFoundError if there is no such kernel file."""
    text = _SOURCES.get(name)
    if text is None:
        text = _SOURCES[name] = compiled_source(name)
    return text



@dataclass(frozen=True)
class DeviceFacts:
    """One GPU as the runner needs it. cc: compute capability as an int (90 for sm_90);
    sm_count: streaming multiprocessors; smem_optin: bytes of shared memory one block may
    opt in to; l2_bytes: L2 cache size in bytes; name: the device's name; smem_per_sm: bytes of
    shared memory an SM shares among its resident blocks (233,472 on an H100 / H200);
    smem_reserved: bytes the system reserves for each resident block (1,024 there)."""

    index: int
    cc: int
    sm_count: int
    smem_optin: int
    l2_bytes: int
    name: str
    smem_per_sm: int = 233_472
    smem_reserved: int = 1_024


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
        optin = int(attrs["MaxSharedMemoryPerBlockOptin"])
        facts = _FACTS[dev] = DeviceFacts(dev, int(d.compute_capability), int(attrs["MultiProcessorCount"]), optin,
                                          int(attrs.get("L2CacheSize", 0)), name,
                                          int(props.get("sharedMemPerMultiprocessor", optin + 1024)),
                                          int(props.get("reservedSharedMemPerBlock", 1024)))
    return facts


def device_smem_optin() -> int:
    """Shared memory one block of the current device may opt in to, in bytes (232,448 on an
    H100/H200). Raises RuntimeError without CuPy/GPU."""
    return device_facts().smem_optin


class _Bound(threading.local):
    """The devices whose primary context this thread has bound (``ensure_context``)."""

    def __init__(self):
        self.devices: set = set()


_BOUND = _Bound()


def ensure_context(dev: int) -> None:
    """Make device ``dev``'s primary context current in this thread before a driver-API launch
    (``cupy.cuda.driver.launchKernel``): the runtime binds it lazily, on the first call that needs
    it, and a thread whose CUDA work so far needed none (torch reusing a cached block, reading a
    stream handle) would get CUDA_ERROR_INVALID_CONTEXT. One runtime call that needs the context
    (``cudaMemGetInfo``, as CuPy's own launches do) the first time a thread launches on ``dev``;
    a set lookup after that. Needs ``dev`` to be the current device."""
    if dev not in _BOUND.devices:
        cupy().cuda.runtime.memGetInfo()
        _BOUND.devices.add(dev)


class ParamBlock(threading.local):
    """The launch parameters of one kernel as cuLaunchKernel takes them: a buffer laid out as the
    kernel's signature says (``records.kernel_params.Layout``), one per thread (the driver copies
    it during the launch, so it is free again when the launch returns), and the constant array of
    pointers to its fields. ``pack(*values)`` writes the parameters in signature order and returns
    the address of the pointer array (cuLaunchKernel's ``kernelParams``); struct.error for values
    that do not fit their C types. (``pack`` calls the struct's ``pack_into`` bound to this thread's
    buffer once, in ``into``: each attribute read of a ``threading.local`` costs a lookup of the
    thread's dict, ~0.4 µs a pack less than reading struct and buffer on every call.)"""

    def __init__(self, layout):
        self.struct = layout.struct()[1]
        self.buf = np.zeros(self.struct.size, dtype=np.uint8)
        base = self.buf.ctypes.data
        self.ptrs = np.array([base + off for off in layout.offsets], dtype=np.uint64)
        self.ptrs_addr = int(self.ptrs.ctypes.data)
        self.into = functools.partial(self.struct.pack_into, self.buf, 0)

    def pack(self, *values) -> int:
        self.into(*values)
        return self.ptrs_addr


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
