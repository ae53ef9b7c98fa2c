"""``flash_attention``: flashviz's FlashAttention as a torch operator with a backward.

Two operators are registered with ``torch.library.custom_op`` the first time they are needed
(importing this module imports neither torch nor CuPy):

* ``flashviz::attention_fwd(q, k, v, causal, scale, Br, Bc, variant, deterministic, bwd_kernel) -> (O, lse)``:
  fp16 / bf16 inputs run the tensor-core forward (``flash_forward_mma``: FlashAttention-3 on
  Hopper, FlashAttention-2 elsewhere); float32 / float64 inputs run the fp32 teaching forward
  (kernels/flash_fwd.cu; float64 is computed in float32 and O cast back);
* ``flashviz::attention_bwd(dO, dlse, q, k, v, O, lse, causal, scale, deterministic, bwd_kernel)
  -> (dq, dk, dv)``: ``bwd_kernel`` (a string or None, the forward's, kept for the backward) names
  the tensor-core backward's main kernel, ``flash_backward_mma(kernel=...)``: "mma" or "wgmma"
  (Hopper, opt-in) always run it; None picks as follows.
  fp16 / bf16 with d in {64, 128}: the tensor-core backward (kernels/flash_bwd_mma.cu, mma.sync;
  ``flash_backward_mma`` with its default dQ, ``BWD_DQ_DEFAULT``: a separate pass in a fixed
  order, measured faster than fp32 atomics and the same bits on every run, whichever
  ``deterministic`` says; a first version without a software pipeline, slower than
  FlashAttention-2's own); every other case —
  float32 / float64, other d — **the fp32 teaching kernel** (kernels/flash_bwd.cu): the inputs are
  converted to float32, the gradients computed in float32 and cast back to the input dtype
  (correct, and slow: CUDA cores, no tensor cores), dQ by fp32 atomics unless ``deterministic``
  (there the atomics measured faster than its separate pass). ``MMA_BACKWARD = False`` sends every
  case with ``bwd_kernel`` None to the teaching kernel.

``attention_fwd`` has ``register_autograd`` (its backward calls ``attention_bwd``) and both have
``register_fake`` (shapes and dtypes without running), so gradients flow and the operator
composes with ``torch.compile`` (it stays one opaque node of the graph) and, warmed up once,
with ``torch.cuda.graph`` capture: every launch is on torch's current stream and every buffer
comes from torch's allocator.
"""

import math

from ..checks import check_flag
from .common import check_scale, cupy, torch_stream
from .tensorcore.backward import BWD_MMA_D, check_kernel

_OPS: dict = {}
#: the blocks of the backward teaching kernel: the largest tile that fits, 64 x 64 on an H100/H200
BWD_BLOCKS = ((64, 64), (64, 32), (32, 64), (32, 32), (16, 32), (16, 16))

_FWD_SCHEMA = ("(Tensor q, Tensor k, Tensor v, bool causal, float scale, int? Br, int? Bc, str? variant, "
               "bool deterministic, str? bwd_kernel) -> (Tensor, Tensor)")
_BWD_SCHEMA = ("(Tensor dO, Tensor? dlse, Tensor q, Tensor k, Tensor v, Tensor O, Tensor lse, bool causal, "
               "float scale, bool deterministic, str? bwd_kernel) -> (Tensor, Tensor, Tensor)")


def _dtype_kind(t) -> str:
    """"mma" for float16 / bfloat16 tensors, "teaching" for float32 / float64; TypeError otherwise."""
    import torch
    if t.dtype in (torch.float16, torch.bfloat16):
        return "mma"
    if t.dtype in (torch.float32, torch.float64):
        return "teaching"
    raise TypeError(f"flash_attention takes float16, bfloat16, float32 or float64 tensors, got {t.dtype}")


def _forward(q, k, v, causal: bool, scale: float, Br, Bc, variant):
    """The forward behind ``attention_fwd``: (O in q's dtype, lse float32), both contiguous."""
    if _dtype_kind(q) == "mma":
        from .tensorcore.kernel import forward_mma_nograd
        return forward_mma_nograd(q, k, v, causal=causal, scale=scale, Br=Br, Bc=Bc, variant=variant)
    return _teaching_forward(q, k, v, causal, scale, 64 if Br is None else Br, 64 if Bc is None else Bc)


def _teaching_forward(q, k, v, causal: bool, scale: float, Br: int, Bc: int):
    """The fp32 teaching forward (kernels/flash_fwd.cu) on torch tensors, on torch's current stream."""
    import torch

    from .teaching.backward import torch_f32
    from .teaching.kernel import compile_kernel, launch
    for t, n in ((q, "q"), (k, "k"), (v, "v")):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{n} must be a torch tensor, got {type(t).__name__}")
        if t.dtype != q.dtype:
            raise TypeError(f"q, k, v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
        if not t.is_cuda:
            raise TypeError(f"{n} is a CPU torch tensor; move it to the GPU (.cuda()) first")
    if q.dim() < 2 or k.dim() != q.dim() or v.shape != k.shape or k.shape[:-2] != q.shape[:-2] \
            or k.shape[-1] != q.shape[-1] or min(q.shape) < 1 or min(k.shape) < 1:
        raise ValueError(f"q (..., Nq, d), k and v (..., Nk, d) must share leading axes and d, got "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    lead, Nq, d = tuple(q.shape[:-2]), q.shape[-2], q.shape[-1]
    BH = math.prod(lead)
    if BH > 65_535:
        raise ValueError(f"the kernel's grid puts batch·heads on grid.y, at most 65,535; got {BH}")
    dev = q.get_device()
    cp = cupy()
    with cp.cuda.Device(dev), torch_stream(dev):
        ck = compile_kernel(Br, Bc, d)
        qf, kf, vf = (torch_f32(t, n, dev, (BH, t.shape[-2], d)) for t, n in ((q, "q"), (k, "k"), (v, "v")))
        O = torch.empty((BH, Nq, d), dtype=torch.float32, device=q.device)
        lse = torch.empty((BH, Nq), dtype=torch.float32, device=q.device)
        launch(ck, cp.asarray(qf), cp.asarray(kf), cp.asarray(vf), cp.asarray(O), cp.asarray(lse),
               causal=causal, scale=scale)
    return O.reshape(*lead, Nq, d).to(q.dtype), lse.reshape(*lead, Nq)


def backward_blocks(d: int, device_limit: int | None = None) -> tuple[int, int]:
    """(Br, Bc) the backward teaching kernel runs with inside ``flash_attention``: the first of
    ``BWD_BLOCKS`` whose shared memory fits ``device_limit`` bytes (default: the current device's
    opt-in limit). Raises ValueError for an unsupported d (the kernel takes 16, 32, 64, 128)."""
    from .teaching.limits import bwd_smem_bytes, check_bwd_sizes
    check_bwd_sizes(64, 64, d)
    if device_limit is None:
        from .common import device_smem_optin
        device_limit = device_smem_optin()
    for Br, Bc in BWD_BLOCKS:
        if bwd_smem_bytes(Br, Bc, d) <= device_limit:
            return Br, Bc
    return BWD_BLOCKS[-1]


#: whether fp16 / bf16 gradients (d in {64, 128}) use the tensor-core backward
MMA_BACKWARD = True


def uses_tensor_core_backward(q) -> bool:
    """Whether ``attention_bwd`` runs the tensor-core backward for q (else the fp32 teaching kernel)."""
    import torch
    if not (MMA_BACKWARD and q.dtype in (torch.float16, torch.bfloat16)
            and q.shape[-1] in (64, 128) and q.is_cuda):
        return False
    from .common import device_facts
    return device_facts(q.get_device()).cc >= 80


def _backward(dO, dlse, q, k, v, O, lse, causal: bool, scale: float, deterministic: bool, bwd_kernel=None):
    """The backward behind ``attention_bwd``: gradients in q's dtype (see the module text); a
    ``bwd_kernel`` other than None always runs ``flash_backward_mma(kernel=bwd_kernel)``."""
    from .teaching.backward import flash_backward_gpu
    d = q.shape[-1]
    dev = q.get_device() if q.is_cuda else None
    if dev is None:
        raise TypeError("q is a CPU torch tensor; move it to the GPU (.cuda()) first")
    if bwd_kernel is not None or uses_tensor_core_backward(q):
        from .tensorcore.backward import flash_backward_mma
        # no dq: the kernel's default (check_dq: "separate" for "mma"; for "wgmma" "bulk", or
        # "separate" when deterministic), which both values of deterministic accept; the operators'
        # schemas and fake kernels do not depend on it
        return flash_backward_mma(q, k, v, O, dO.to(q.dtype), lse, causal=causal, scale=scale,
                                  deterministic=deterministic, dlse=dlse, kernel=bwd_kernel)
    with cupy().cuda.Device(dev):
        Br, Bc = backward_blocks(d)
    dq, dk, dv = flash_backward_gpu(q, k, v, O, dO, lse, Br=Br, Bc=Bc, causal=causal, scale=scale,
                                    deterministic=deterministic, dlse=dlse)
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


def _ops() -> dict:
    """Register the two operators (once per process) and return {"fwd": ..., "bwd": ...}."""
    if _OPS:
        return _OPS
    import torch

    fwd = torch.library.custom_op("flashviz::attention_fwd", mutates_args=(), schema=_FWD_SCHEMA)(
        lambda q, k, v, causal, scale, Br, Bc, variant, deterministic, bwd_kernel:
        tuple(_forward(q, k, v, causal, scale, Br, Bc, variant)))
    bwd = torch.library.custom_op("flashviz::attention_bwd", mutates_args=(), schema=_BWD_SCHEMA)(
        lambda dO, dlse, q, k, v, O, lse, causal, scale, deterministic, bwd_kernel:
        tuple(_backward(dO, dlse, q, k, v, O, lse, causal, scale, deterministic, bwd_kernel)))

    @fwd.register_fake
    def _(q, k, v, causal, scale, Br, Bc, variant, deterministic, bwd_kernel):
        return (torch.empty(q.shape, dtype=q.dtype, device=q.device),
                torch.empty(q.shape[:-1], dtype=torch.float32, device=q.device))

    @bwd.register_fake
    def _(dO, dlse, q, k, v, O, lse, causal, scale, deterministic, bwd_kernel):
        return tuple(torch.empty(t.shape, dtype=t.dtype, device=t.device) for t in (q, k, v))

    def setup_context(ctx, inputs, output):
        q, k, v, causal, scale, _Br, _Bc, _variant, deterministic, bwd_kernel = inputs
        ctx.save_for_backward(q, k, v, *output)
        ctx.causal, ctx.scale, ctx.deterministic, ctx.bwd_kernel = causal, scale, deterministic, bwd_kernel

    def backward(ctx, dO, dlse):
        q, k, v, O, lse = ctx.saved_tensors
        if dO is None:
            dO = torch.zeros_like(O)
        dq, dk, dv = bwd(dO.contiguous(), dlse, q, k, v, O, lse, ctx.causal, ctx.scale, ctx.deterministic,
                         ctx.bwd_kernel)
        return dq, dk, dv, None, None, None, None, None, None, None

    fwd.register_autograd(backward, setup_context=setup_context)
    _OPS.update(fwd=fwd, bwd=bwd)
    return _OPS


def _check_qkv(q, k, v):
    import torch  # a plain import: dynamo traces it (torch.compile)
    for t, n in ((q, "q"), (k, "k"), (v, "v")):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"flash_attention takes torch tensors; {n} is {type(t).__name__} "
                            f"(arrays: flashviz.gpu.flash_forward_mma / flash_backward_gpu)")
    if q.dim() < 2:
        raise ValueError(f"q must have shape (..., N, d), got {tuple(q.shape)}")
    _dtype_kind(q)
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k, v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")


def _check_bwd_kernel(q, bwd_kernel) -> None:
    """ValueError (one line) unless q suits the tensor-core backward that ``bwd_kernel`` (not None)
    names: float16 / bfloat16 with d in ``BWD_MMA_D``. Reads only q's dtype and shape."""
    if _dtype_kind(q) != "mma" or q.shape[-1] not in BWD_MMA_D:
        raise ValueError(f"bwd_kernel={bwd_kernel!r} runs the tensor-core backward: float16 / bfloat16 with d in "
                         f"{{{', '.join(map(str, BWD_MMA_D))}}}; got {q.dtype}, d={q.shape[-1]} "
                         f"(bwd_kernel=None takes the fp32 teaching kernel there)")


def attention_with_lse(q, k, v, *, causal: bool = False, scale=None, deterministic: bool = False,
                       Br=None, Bc=None, variant=None, bwd_kernel=None):
    """``flash_attention`` returning (O, lse), both differentiable (the gradient of lse folds into
    the backward as D_i − dlse_i). Br, Bc, variant: the forward's (``flash_forward_mma``'s for
    fp16 / bf16; the teaching forward's, default 64 x 64, for float32 / float64); bwd_kernel: the
    backward's, as in ``flash_attention``. Raises like ``flash_attention``."""
    if bwd_kernel is not None:          # first: a bad name is a one-line error before torch is imported
        check_kernel(bwd_kernel, "bwd_kernel")
    _check_qkv(q, k, v)
    if bwd_kernel is not None:
        _check_bwd_kernel(q, bwd_kernel)
    causal = check_flag(causal, "causal")
    deterministic = check_flag(deterministic, "deterministic")
    scale = check_scale(scale, q.shape[-1])
    return _ops()["fwd"](q, k, v, causal, scale, Br, Bc, variant, deterministic, bwd_kernel)


def flash_attention(q, k, v, *, causal: bool = False, scale=None, deterministic: bool = False,
                    bwd_kernel: str | None = None):
    """O = softmax(scale·q kᵀ) v with FlashAttention's forward and backward, as a torch operator.

    Source: the forward is FlashAttention-2/3 on the tensor cores (``flash_forward_mma``) for
    fp16 / bf16, the fp32 teaching kernel for float32 / float64; the backward is FlashAttention-2's
    Algorithm 2: on the tensor cores (kernels/flash_bwd_mma.cu, ``flash_backward_mma``) for
    fp16 / bf16 with d in {64, 128}; otherwise **the fp32 teaching
    kernel** (kernels/flash_bwd.cu), with half-precision inputs converted to float32 and the
    gradients cast back (correct; slow: no tensor cores). The tensor-core backward's default main
    kernel is Hopper's wgmma kernel on sm_90 (kernels/flash_bwd_wgmma.cu) and mma.sync elsewhere
    (``flash_backward_mma``'s ``backward_plan``). On an H100 the default call ran at 1.07–1.33x
    SDPA's FlashAttention-2 backward and 0.68–0.83x its cuDNN backward by public call, forward +
    backward 1.10–1.36x and 0.70–0.82x (fp16, B·N = 16k tokens, d 64 / 128, causal and not,
    N 1k–16k: ``sdpa_flash_bwd_call_ms / bwd_mma_call_ms`` in
    benchmarks/results/bwd-h100-80gb-hbm3-2026-12-06.json, at e0602b7); the mma.sync kernel
    0.68–0.95x SDPA-flash there (benchmarks/results/bwd-h100-80gb-hbm3-2026-12-05.json).

    Parameters
    ----------
    q : (..., Nq, d); k, v : (..., Nk, d)
        torch CUDA tensors of one dtype: float16 / bfloat16 (leading axes (B, H), (H,) or none;
        d in {64, 128}; strides with unit stride along d and 16-byte aligned rows) or float32 /
        float64 (any leading axes; d in {32, 64, 128}). Any Nq, Nk >= 1.
    causal : bool, bottom-right aligned (query i sees key j iff j <= i + Nk − Nq).
    scale : float > 0 or None (1/sqrt(d)).
    deterministic : bool. True promises the same bits on every run: dQ by a separate pass without
        atomics, query blocks outer (about 7/5 of the backward's FLOPs). False promises nothing:
        fp16 / bf16 on sm_90 then add dQ with the wgmma kernel's "bulk" reduction (one fp32 tile
        per query block, FlashAttention-3's way), elsewhere take the mma kernel's separate pass
        (``BWD_DQ_DEFAULT``, which repeats bit for bit anyway); float32 / float64 take the
        teaching kernel's float32 atomicAdd. Atomics and bulk reductions may change the last bits
        between runs.
    bwd_kernel : None (the default: the route above) or the tensor-core backward's main kernel,
        ``flash_backward_mma``'s ``kernel``: "mma" (mma.sync, sm_80 and later) or "wgmma" (Hopper's
        wgmma, sm_90 only). A name needs float16 / bfloat16 with d in {64, 128} and always runs
        that kernel, even with ``MMA_BACKWARD = False``.

    Returns
    -------
    O : (..., Nq, d) in q's dtype, contiguous, with a grad_fn when an input requires grad;
    ``O.backward`` fills q.grad, k.grad, v.grad (in the inputs' dtypes). Rows that see no key
    give O = 0 and zero gradients, never NaN.

    Raises
    ------
    TypeError (non-tensors, an unsupported or mixed dtype, CPU tensors, non-bool flags, a non-real
    scale) or ValueError (shapes, unsupported d, a scale that is not a positive normal float32, a
    bwd_kernel other than None, "mma", "wgmma" — checked first, before torch is imported — or
    named for float32 / float64 or d not in {64, 128}), one line each; RuntimeError without CuPy /
    a GPU. From the backward: ``flash_backward_mma``'s errors, e.g. ValueError for
    bwd_kernel="wgmma" on a GPU that is not sm_90.

    Example
    -------
    >>> q, k, v = (torch.randn(2, 8, 1024, 64, device="cuda", dtype=torch.bfloat16,   # doctest: +SKIP
    ...                        requires_grad=True) for _ in range(3))
    >>> flashviz.gpu.flash_attention(q, k, v, causal=True).sum().backward()           # q.grad, k.grad, v.grad
    """
    return attention_with_lse(q, k, v, causal=causal, scale=scale, deterministic=deterministic,
                              bwd_kernel=bwd_kernel)[0]
