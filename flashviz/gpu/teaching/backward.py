"""Compile and launch the backward teaching kernel ``kernels/flash_bwd.cu`` through CuPy.

FlashAttention-2's Algorithm 2 in float32, with the explorer's Br and Bc, the same names as
``flashviz/backward.py`` (whose NumPy backward is checked by finite differences) and the same
16 x 16 thread layout as the forward teaching kernel. One call runs three kernels on one stream:

1. ``flash_bwd_preprocess<d>``: D = rowsum(dO ∘ O) (− dlse, when given) and dQ = 0 in HBM;
2. ``flash_bwd<Br, Bc, d>``: key blocks j outer, query blocks i inner; dK_j, dV_j on chip;
   dQ_i += scale·dS_ij K_j by float32 ``atomicAdd`` (FA2's way; the summation order, so dQ's
   last bits, can change from run to run) — unless ``deterministic=True``;
3. ``flash_bwd_dq<Br, Bc, d>`` (``deterministic=True`` only): a separate dQ pass with query
   blocks outer, which recomputes P_ij and dS_ij and keeps dQ_i on chip: the same bits on every
   run, for two more matmuls per tile (7 instead of 5).

CuPy is imported lazily, so importing this module needs no GPU. Compilation is NVRTC through
``flashviz.gpu.nvrtc`` (the on-disk cubin cache of every flashviz kernel), once per process.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ...checks import check_flag
from ..common import check_scale, cupy, device_facts, source
from .limits import check_bwd_launch, check_bwd_sizes

_KERNEL_FILE = "flash_bwd.cu"
_CACHE: dict = {}


@dataclass
class CompiledBackward:
    """The three compiled kernels of one (Br, Bc, d).

    preprocess, main, dq: cupy RawKernels of ``flash_bwd_preprocess<d>``, ``flash_bwd<Br, Bc, d>``,
    ``flash_bwd_dq<Br, Bc, d>``; smem_bytes, dq_smem_bytes: dynamic shared memory per block of
    main and dq (bytes); compile_ms: NVRTC compile + load time of the three (ms; a disk-cache hit
    is a few ms); num_regs, local_bytes: registers and local memory (spills, bytes) per thread of
    main and dq, as (main, dq).
    """

    Br: int
    Bc: int
    d: int
    preprocess: object
    main: object
    dq: object
    smem_bytes: int
    dq_smem_bytes: int
    compile_ms: float
    num_regs: tuple
    local_bytes: tuple


def compile_backward(Br: int = 64, Bc: int = 64, d: int = 64, *, traced: bool = False,
                     stored_p: bool = False) -> CompiledBackward:
    """Compile (or fetch from the per-process cache) the backward kernels for (Br, Bc, d);
    ``traced``: ``main`` built with its timeline switch on (``-DFLASHVIZ_TRACE=1``: two more
    parameters, the trace buffer and jmax; ``launch_backward(trace=...)``, ``gpu.trace_backward``);
    ``stored_p``: ``main`` is ``flash_bwd<Br, Bc, d, true>``, which reads P_ij from a stored P
    instead of recomputing it (``launch_backward(P=...)``, ``gpu.teaching.stored_p``).

    Br, Bc in {16, 32, 64, 128}, d in {16, 32, 64, 128}, within the device's shared memory
    (``limits.bwd_smem_bytes``). Checks before compiling. Raises TypeError / ValueError for
    unsupported values or too much shared memory (bytes asked vs available), RuntimeError
    without CuPy / GPU or on a compile error (with NVRTC's log).
    """
    cp = cupy()
    dev = cp.cuda.runtime.getDevice()
    key = (Br, Bc, d, dev, traced, stored_p)
    if type(Br) is int and type(Bc) is int and type(d) is int and key in _CACHE:
        return _CACHE[key]
    Br, Bc, d = check_bwd_sizes(Br, Bc, d)
    key = (Br, Bc, d, dev, bool(traced), bool(stored_p))
    if key in _CACHE:
        return _CACHE[key]
    facts = device_facts(dev)
    smem = check_bwd_launch(Br, Bc, d, facts.smem_optin)
    dq_smem = smem - Br * (Bc + 4) * 4
    from ..nvrtc import compile_cubin
    arch = f"sm_{facts.cc}"
    src = source(_KERNEL_FILE)
    t0 = time.perf_counter()
    pre, _, _ = compile_cubin(src, f"flash_bwd_preprocess<{d}>", arch)
    main, _, _ = compile_cubin(src, f"flash_bwd<{Br},{Bc},{d}{',true' if stored_p else ''}>", arch,
                               options=("-DFLASHVIZ_TRACE=1",) if traced else ())
    dq, _, _ = compile_cubin(src, f"flash_bwd_dq<{Br},{Bc},{d}>", arch)
    main.max_dynamic_shared_size_bytes = smem       # > 48 KB needs the explicit opt-in
    dq.max_dynamic_shared_size_bytes = dq_smem
    compile_ms = (time.perf_counter() - t0) * 1e3
    cb = CompiledBackward(Br, Bc, d, pre, main, dq, smem, dq_smem, compile_ms,
                          (int(main.num_regs), int(dq.num_regs)),
                          (int(main.local_size_bytes), int(dq.local_size_bytes)))
    _CACHE[key] = cb
    return cb


def launch_backward(cb: CompiledBackward, Qd, Kd, Vd, Od, dOd, lsed, dQ, dK, dV, Dbuf, *, causal: bool,
                    scale: float, deterministic: bool = False, dlsed=None, trace=None, P=None) -> None:
    """Launch the backward kernels on prepared buffers (no checks, no allocation; for timing).
    ``trace``: (buffer pointer, jmax) for a ``cb`` compiled with ``traced=True``; ``P``: the stored
    probabilities (BH, Nq, Nk) float32 CuPy array for a ``cb`` compiled with ``stored_p=True``.

    Qd, Od, dOd, dQ (BH, Nq, d); Kd, Vd, dK, dV (BH, Nk, d); lsed, Dbuf (and dlsed, optional)
    (BH, Nq): C-contiguous float32 CuPy arrays (views of torch memory are fine), 16-byte aligned.
    dQ, dK, dV and Dbuf are fully overwritten. Asynchronous, in order, on CuPy's current stream.
    """
    BH, Nq, _ = Qd.shape
    Nk = Kd.shape[1]
    i32, f32 = np.int32, np.float32
    dl = dlsed if dlsed is not None else np.uint64(0)        # a null pointer: no dlse
    cb.preprocess((-(-Nq // 8), BH, 1), (256, 1, 1),
                  (Od, dOd, dl, Dbuf, dQ, i32(Nq), i32(0 if deterministic else 1)))
    cb.main((-(-Nk // cb.Bc), BH, 1), (16, 16, 1),
            (Qd, Kd, Vd, dOd, lsed, Dbuf, dQ, dK, dV, i32(Nq), i32(Nk), f32(scale), i32(1 if causal else 0),
             i32(0 if deterministic else 1), np.uint64(0) if P is None else P,
             *(() if trace is None else (np.uint64(trace[0]), i32(trace[1])))),
            shared_mem=cb.smem_bytes)
    if deterministic:
        cb.dq((-(-Nq // cb.Br), BH, 1), (16, 16, 1),
              (Qd, Kd, Vd, dOd, lsed, Dbuf, dQ, i32(Nq), i32(Nk), f32(scale), i32(1 if causal else 0)),
              shared_mem=cb.dq_smem_bytes)


_NAMES = ("Q", "K", "V", "O", "dO", "lse")


def _torch_module():
    import sys
    return sys.modules.get("torch")


def _is_torch(x) -> bool:
    torch = _torch_module()
    return torch is not None and isinstance(x, torch.Tensor)


def _shape_of(x, name: str) -> tuple:
    """The shape of a NumPy / CuPy array or torch tensor; TypeError for anything else."""
    if _is_torch(x):
        if not x.is_floating_point():
            raise TypeError(f"{name} must be a float tensor, got {x.dtype}")
        return tuple(x.shape)
    mod = type(x).__module__
    if not (isinstance(x, np.ndarray) or mod.startswith("cupy")):
        raise TypeError(f"{name} must be a NumPy or CuPy float array or a torch CUDA tensor, got {type(x).__name__}")
    if x.dtype.kind != "f":
        raise TypeError(f"{name} must have a float dtype (float16/32/64), got {x.dtype}")
    return tuple(x.shape)


def check_backward_shapes(Q, K, V, O, dO, lse, dlse=None) -> tuple:
    """Check the shapes of a backward call; return (lead, Nq, Nk, d).

    Q, O, dO (..., Nq, d); K, V (..., Nk, d); lse, dlse (..., Nq); one leading shape. Raises
    TypeError (not a float array / tensor) or ValueError (ndim, N or d < 1, mismatched shapes),
    one line each. Needs no GPU.
    """
    shapes = [_shape_of(x, n) for x, n in zip((Q, K, V, O, dO, lse), _NAMES)]
    sq, sk, sv, so, sdo, sl = shapes
    if len(sq) < 2:
        raise ValueError(f"Q must have shape (..., Nq, d) with ndim >= 2, got shape {sq}")
    lead, Nq, d = sq[:-2], sq[-2], sq[-1]
    if Nq < 1 or d < 1:
        raise ValueError(f"Q must have Nq >= 1 and d >= 1, got shape {sq}")
    if len(sk) != len(sq) or sk[:-2] != lead or sk[-1] != d or sk[-2] < 1:
        raise ValueError(f"K must have shape (..., Nk, d) = {(*lead, 'Nk', d)} with Nk >= 1, got {sk}")
    Nk = sk[-2]
    if sv != sk:
        raise ValueError(f"V must have K's shape {sk} (the kernel needs V's head dimension equal to d), got {sv}")
    if so != sq:
        raise ValueError(f"O must have Q's shape {sq}, got {so}")
    if sdo != sq:
        raise ValueError(f"dO must have Q's shape {sq}, got {sdo}")
    if sl != sq[:-1]:
        raise ValueError(f"lse must have shape (..., Nq) = {sq[:-1]}, got {sl}")
    if dlse is not None and _shape_of(dlse, "dlse") != sq[:-1]:
        raise ValueError(f"dlse must have shape (..., Nq) = {sq[:-1]}, got {_shape_of(dlse, 'dlse')}")
    return lead, Nq, Nk, d


def torch_f32(t, name: str, dev: int, shape):
    """A CUDA torch tensor as the teaching kernels take it: float32, C-contiguous, 16-byte
    aligned, reshaped to ``shape`` (e.g. (B·H, N, d)), on GPU ``dev``; detached, and a copy only
    where the dtype, layout or alignment needs one. t: a torch tensor of any float dtype; name:
    the argument's name for the messages. Used by the teaching backward (``flash_backward_gpu``)
    and by the teaching forward inside ``flashviz.gpu.autograd.flash_attention``. TypeError for a
    CPU tensor, ValueError for a tensor on another GPU than ``dev`` (one line each); torch's own
    error when ``shape`` does not hold its elements. Imports torch when called.
    """
    if not t.is_cuda:
        raise TypeError(f"{name} is a CPU torch tensor; move it to the GPU (.cuda()) first")
    if t.get_device() != dev:
        raise ValueError(f"all inputs must be on one GPU, got {name} on cuda:{t.get_device()} and another on cuda:{dev}")
    import torch
    x = t.detach().to(torch.float32).contiguous().reshape(shape)
    if x.data_ptr() % 16:
        x = x.clone()
    return x


def cupy_f32(x, cp, shape):
    """``x`` (NumPy or CuPy float array) as a C-contiguous, 16-byte aligned CuPy float32 array of
    ``shape`` on the current device (a copy only where needed)."""
    xd = cp.ascontiguousarray(cp.asarray(x, dtype=cp.float32)).reshape(shape)
    if xd.data.ptr % 16:
        xd = xd.copy()
    return xd


def flash_backward_gpu(Q, K, V, O, dO, lse, *, Br: int = 64, Bc: int = 64, causal: bool = False, scale=None,
                       deterministic: bool = False, dlse=None):
    """FlashAttention-2 backward on the GPU with the teaching kernel (float32 throughout).

    Source: Dao 2023, FlashAttention-2, Algorithm 2 (key blocks outer, D = rowsum(dO ∘ O)
    precomputed, dQ accumulated with atomic adds); kernels/flash_bwd.cu, whose blocks carry the
    step tags of ``flashviz.steps`` like ``flashviz/backward.py``'s NumPy backward.

    Parameters
    ----------
    Q : (..., Nq, d); K, V : (..., Nk, d); O, dO : (..., Nq, d); lse : (..., Nq)
        NumPy or CuPy float arrays (copied to the GPU as float32) or torch CUDA float tensors
        (any float dtype and strides; converted to contiguous float32 on torch's current
        stream). One leading shape such as (B, H); d in {16, 32, 64, 128}; any Nq, Nk >= 1.
        O and lse are the forward's (``flash_forward_gpu`` / ``flash_forward_mma``): lse is the
        natural-log log-sum-exp of the scaled scores, −inf for a row that sees no key.
    Br, Bc : block rows (queries) / columns (keys), each in {16, 32, 64, 128}, within the
        device's shared memory (``limits.bwd_smem_bytes``; 64, 64, d=128 needs 170,496 bytes).
    causal : bool, bottom-right aligned mask (query r sees key c iff c <= r + Nk − Nq).
    scale : float > 0 or None (1/sqrt(d)); must be the forward's.
    deterministic : bool. False: dQ by float32 atomicAdd from every key block (fast; the last
        bits of dQ may differ between runs). True: a separate dQ pass, query blocks outer, with
        dQ_i on chip: bitwise the same dQ on every run, about 7/5 of the FLOPs.
    dlse : optional (..., Nq), the gradient of the loss with respect to lse (when the caller
        uses the lse output); folded in as D_i − dlse_i. None: no gradient flows through lse.

    Returns
    -------
    (dQ, dK, dV), float32, shapes (..., Nq, d), (..., Nk, d), (..., Nk, d): torch tensors on the
    inputs' GPU when any input is a torch tensor (run on torch's current stream there, so ordered
    after torch's work), else CuPy arrays (CuPy's current device and stream). Rows that see no
    key get dQ = 0; keys no query sees get dK = dV = 0; never NaN from the masking. NaN / inf in
    the inputs give NaN / inf (not checked, to keep the call one pass).

    Raises
    ------
    TypeError for non-float or non-array inputs (lists too), CPU torch tensors, a non-bool
    causal / deterministic, a non-real scale; ValueError for mismatched shapes, unsupported
    Br / Bc / d, more than 65,535 batch·heads, tensors on different GPUs, a scale that is not a
    positive normal float32, or more shared memory than the device allows (bytes asked vs
    available); RuntimeError when CuPy or a GPU is missing. All one line.
    """
    causal = check_flag(causal, "causal")
    deterministic = check_flag(deterministic, "deterministic")
    lead, Nq, Nk, d = check_backward_shapes(Q, K, V, O, dO, lse, dlse)
    BH = int(np.prod(lead, dtype=np.int64)) if lead else 1
    if BH > 65_535:
        raise ValueError(f"the kernel's grid puts batch·heads on grid.y, at most 65,535; got {BH}")
    scale = check_scale(scale, d)
    check_bwd_sizes(Br, Bc, d)
    cp = cupy()
    ins = (Q, K, V, O, dO, lse) + (() if dlse is None else (dlse,))
    shapes = [(BH, Nq, d), (BH, Nk, d), (BH, Nk, d), (BH, Nq, d), (BH, Nq, d), (BH, Nq), (BH, Nq)]
    ref = next((x for x in ins if _is_torch(x)), None)
    if ref is None:                                     # arrays: CuPy's current device and stream
        cb = compile_backward(Br, Bc, d)
        bufs = [cupy_f32(x, cp, s) for x, s in zip(ins, shapes)]
        dQ, dK, dV = cp.empty((BH, Nq, d), cp.float32), cp.empty((BH, Nk, d), cp.float32), \
            cp.empty((BH, Nk, d), cp.float32)
        Dbuf = cp.empty((BH, Nq), cp.float32)
        launch_backward(cb, *bufs[:6], dQ, dK, dV, Dbuf, causal=causal, scale=scale,
                        deterministic=deterministic, dlsed=bufs[6] if dlse is not None else None)
        return dQ.reshape(*lead, Nq, d), dK.reshape(*lead, Nk, d), dV.reshape(*lead, Nk, d)
    # torch: torch's allocator and current stream on the tensors' GPU (arrays mixed in are copied there)
    import torch

    from ..common import torch_stream
    if not ref.is_cuda:
        raise TypeError("the inputs include a CPU torch tensor; move it to the GPU (.cuda()) first")
    dev = ref.get_device()
    with cp.cuda.Device(dev), torch_stream(dev):
        cb = compile_backward(Br, Bc, d)
        names = _NAMES + ("dlse",)
        tens = [torch_f32(x, n, dev, s) if _is_torch(x) else torch.as_tensor(cupy_f32(x, cp, s), device=f"cuda:{dev}")
                for x, n, s in zip(ins, names, shapes)]
        out = [torch.empty((BH, n, d), dtype=torch.float32, device=f"cuda:{dev}") for n in (Nq, Nk, Nk)]
        Dbuf = torch.empty((BH, Nq), dtype=torch.float32, device=f"cuda:{dev}")
        views = [cp.asarray(t) for t in (*tens, *out, Dbuf)]
        n_in = len(tens)
        launch_backward(cb, *views[:6], *views[n_in:n_in + 4], causal=causal, scale=scale,
                        deterministic=deterministic, dlsed=views[6] if dlse is not None else None)
    dQ, dK, dV = out
    return dQ.reshape(*lead, Nq, d), dK.reshape(*lead, Nk, d), dV.reshape(*lead, Nk, d)
