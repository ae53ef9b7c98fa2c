"""The backward benchmark: flashviz's backward kernels beside torch SDPA's, in one run (issue 23).

``run_bwd_benchmark`` is what ``benchmarks/bench_bwd.py`` calls on a GPU. One process, one device,
one run writes ``bwd-<device>-<date>.json`` (``partial-bwd-…`` for any subset, a run cut short by
its deadline included, so a partial run never replaces the recorded one) and its ``.log``, with:

* ``env`` — device, versions, date, the commit ($FLASHVIZ_COMMIT, else ``git`` where there is a
  checkout), and the code timed: ``kernel_sources`` (sha256 of every kernel file whose cubins
  ran, as ``common.source_sha256``), ``cubins`` (every cubin the process loaded,
  ``nvrtc.loaded_cubins``: lowered name, sha256, and the sha256 of the source it came from),
  ``files_sha256`` (the Python files that make the calls);
* ``correctness`` — for every bench shape and implementation: the largest absolute error of dQ,
  dK and dV against float64 gradients (torch's math SDPA backward in float64 on the same fp16
  values, batch 0 and as many heads as ``REF_ELEMENTS`` allows), the reference's largest
  magnitude, whether any gradient is NaN / inf anywhere, and ``pass`` (every error at most
  ``TOL_REL`` times the reference's largest magnitude, all finite);
* ``deterministic`` — every backward among the teaching kernels' and the tensor-core ones run
  ``DET_RUNS`` times on the same inputs and compared bit for bit; "deterministic" says whether its
  dQ path adds in a fixed order and so promises the same bits (``bwd_teaching_det``, and
  ``bwd_mma`` when its default dQ is the separate pass: then a change of bits is a failure), the
  atomic paths (``bwd_teaching``, ``bwd_mma_atomic``) beside them may differ in their last bits;
* ``bench`` — one row per shape (fp16, B·N = 16k tokens, H = 2048/d, N in ``BWD_N``, d in
  ``BWD_D``, causal and not): ``flops_fwd``, ``flops_bwd`` (2.5 × the forward's matmul FLOPs,
  causal halved: FlashAttention's convention), ``flops_fwdbwd`` (3.5 ×) and for every
  implementation ``<impl>_call_ms``, ``<impl>_kernel_ms``, ``<impl>_fwdbwd_call_ms`` with
  ``<impl>_tflops`` (flops_bwd / call_ms), ``<impl>_kernel_tflops`` and ``<impl>_fwdbwd_tflops``;
  a cell that failed holds ``<impl>_error`` / ``<impl>_kernel_error`` / ``<impl>_fwdbwd_error``
  instead, a cell not run ``<impl>_skipped`` (the teaching kernels above ``teaching_max_n``);
* ``peak_bytes`` — the backward's peak device memory (d = 64, not causal, a few N) for ours and
  SDPA's three backends, SDPA-math (which materialises the N×N matrices) among them, beside
  ``<impl>_saved_bytes`` (what the forward left for the backward).

Implementations (record prefixes; every one on the same seeded inputs, in the same process):

* ``bwd_mma`` — ours, the default call: ``flashviz.gpu.flash_backward_mma`` (kernels/flash_bwd_mma.cu;
  Bc = 128 and dQ by its defaults: since the separate pass became the default, ``dq="separate"``)
  on the O and lse of ``flash_forward_mma``; forward + backward: ``flashviz.gpu.flash_attention``
  on fp16 tensors that require grad. The row's ``bwd_mma_dq`` names the dQ path the call ran;
  records made before that change ran the atomic path here (their ``bwd_mma_kernel_name``,
  ``flash_bwd_mma<…, true>`` or, before the template had the flag, ``flash_bwd_mma<…>`` with four
  arguments, says so) and timed the separate pass beside it as ``bwd_mma_det``;
* ``bwd_teaching`` — ``flashviz.gpu.flash_backward_gpu`` (kernels/flash_bwd.cu, fp32, dQ by
  atomics) on float32 copies of the same values and the same O and lse, with the blocks
  ``flash_attention`` uses (``autograd.backward_blocks``); forward + backward: ``flash_attention``
  on float32 tensors (teaching forward and backward);
* ``bwd_teaching_det`` — the same with ``deterministic=True``: its cost against the atomic dQ;
* ``bwd_mma_atomic`` — ``flash_backward_mma(..., dq="atomic")``: dQ by fp32 atomicAdd in the main
  kernel, then the convert kernel — the other dQ path, timed beside the default one. No forward +
  backward figure (the record's ``no_fwdbwd``): ``flash_attention`` has no dq switch;
* ``sdpa_flash_bwd`` / ``sdpa_cudnn_bwd`` — torch SDPA with the backend forced
  (``torch.nn.attention.sdpa_kernel``, entered outside the timed region): the backward is
  ``torch.autograd.grad`` on a graph whose forward ran outside the timed region
  (``retain_graph=True``); forward + backward: SDPA and ``torch.autograd.grad`` together.

Timing (``flashviz.gpu.timing.measure``, the methods of docs/measuring.md): ``_call_ms`` is the
public call by CUDA events, median; ``_kernel_ms`` kernel-only by torch.profiler (CUPTI): the
GPU work of one call summed, median — the same method for every implementation. Every public-call
time, the correctness, determinism and memory parts run first and every kernel-only time last,
in a second pass over the same inputs, because a profiler session leaves the process's later
host times high. Repeats shrink for slow calls so one measurement takes about ``budget_s``.

Nothing here imports CuPy or torch at import time: the plan (``bench_shapes``,
``estimate_seconds``, ``record_path``) and the record's arithmetic (``derive``, ``row_line``)
run on any machine.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from ..bench_util import RunRecord, error_text, free_torch_cache
from ..timing import CALL_METHOD, KERNEL_METHOD, attention_flops

IMPLS = ("bwd_mma", "bwd_teaching", "sdpa_flash_bwd", "sdpa_cudnn_bwd")    #: the four of issue 23
#: also timed: the teaching kernel's deterministic dQ, and the tensor-core backward's other dQ paths
EXTRA_IMPLS = ("bwd_teaching_det", "bwd_mma_det", "bwd_mma_atomic")
ALL_IMPLS = IMPLS + EXTRA_IMPLS
TEACHING_IMPLS = ("bwd_teaching", "bwd_teaching_det")
#: the tensor-core implementations and the arguments each passes to flash_backward_mma (none: its
#: default call, whose main kernel, dQ path and Bc the device decides: ``mma_call``)
MMA_DQ = {"bwd_mma": {}, "bwd_mma_det": {"deterministic": True}, "bwd_mma_atomic": {"dq": "atomic"}}
#: implementations without a forward + backward figure (the record's "no_fwdbwd"): flash_attention
#: has no dq switch, so only the default dQ has a forward + backward call
NO_FWDBWD = ("bwd_mma_atomic",)
SHORT = {"bwd_mma": "mma", "bwd_mma_det": "mma-det", "bwd_mma_atomic": "mma-atomic",
         "bwd_teaching": "teach", "bwd_teaching_det": "teach-det",
         "sdpa_flash_bwd": "flash", "sdpa_cudnn_bwd": "cudnn", "sdpa_math_bwd": "math"}
OURS = "bwd_mma"
THEIRS = ("sdpa_flash_bwd", "sdpa_cudnn_bwd")

BWD_N = (1024, 2048, 4096, 8192, 16384)
BWD_D = (64, 128)
QUICK_N = (1024, 4096)
TEACHING_MAX_N = 4096          #: the fp32 teaching kernels run only up to this N (≈ 5x slower than bwd_mma)
QUICK_TEACHING_MAX_N = 1024
PEAK_N = (1024, 4096, 8192, 16384)
PEAK_D = 64
PEAK_IMPLS = ("bwd_mma", "sdpa_math_bwd", "sdpa_flash_bwd", "sdpa_cudnn_bwd")
MATH_BYTES_PER_SCORE = 24      #: SDPA-math's backward: about this many bytes per score (fp32 N×N matrices)
TOKENS, MODEL_DIM = 16384, 2048
DTYPE = "float16"
TOL_REL = 1e-2                 #: correctness: max abs error <= TOL_REL x the reference's max magnitude
DET_RUNS = 5
REF_ELEMENTS = 1 << 27         #: the float64 reference runs on batch 0 and max(1, this // N²) heads
BUDGET_S = 1.0                 #: seconds one measurement aims at (timing.measure's budget_s)
DEADLINE_S = 540.0             #: no new shape or part starts after this many seconds of the run
PARTS = ("call", "det", "peak", "kernel")
BWD_FLOP_FACTOR, FWDBWD_FLOP_FACTOR = 2.5, 3.5
TIMES = {"call_ms": "tflops", "kernel_ms": "kernel_tflops", "fwdbwd_call_ms": "fwdbwd_tflops"}
ERROR_KEY = {"call_ms": "error", "kernel_ms": "kernel_error", "fwdbwd_call_ms": "fwdbwd_error"}
FILES = ("flashviz/gpu/tensorcore/bench_bwd.py", "flashviz/gpu/tensorcore/backward.py",
         "flashviz/gpu/teaching/backward.py", "flashviz/gpu/autograd.py", "flashviz/gpu/tensorcore/kernel.py",
         "flashviz/gpu/timing.py")

METHODS = {
    "call_ms": "the backward alone by public call: " + CALL_METHOD + ". Ours: flash_backward_mma / "
               "flash_backward_gpu on the saved O and lse; SDPA: torch.autograd.grad(out, (q, k, v), dO, "
               "retain_graph=True) on a graph whose forward ran outside the timed region",
    "kernel_ms": "the backward's GPU work alone: " + KERNEL_METHOD + "; the same public call as call_ms, in a "
                 "second pass after every public-call time",
    "fwdbwd_call_ms": "forward + backward by public call (" + CALL_METHOD + "): flash_attention (ours) or "
                      "scaled_dot_product_attention with the backend forced, then torch.autograd.grad",
    "tflops": "<impl>_tflops = flops_bwd / <impl>_call_ms; <impl>_kernel_tflops = flops_bwd / <impl>_kernel_ms; "
              "<impl>_fwdbwd_tflops = flops_fwdbwd / <impl>_fwdbwd_call_ms (TFLOP/s)",
    "flops": "flops_fwd = 4·B·H·N²·d, halved for causal (matmul FLOPs); flops_bwd = 2.5 x flops_fwd; "
             "flops_fwdbwd = 3.5 x flops_fwd (FlashAttention's convention)",
    "correctness": "max |grad − ref| of dQ, dK, dV on batch 0, heads 0..ref_heads−1, ref = torch SDPA's math "
                   "backward in float64 on the same fp16 values (dO included); pass: every error <= tol_rel x "
                   "the reference's max |grad| and every gradient finite over the whole tensor",
    "deterministic": "the same backward call repeated on the same inputs, every result compared bit for bit "
                     "with the first (torch.equal); deterministic: whether the call's dQ path adds in a fixed "
                     "order and so promises the same bits (dq: the tensor-core call's dQ path)",
    "peak_bytes": "torch.cuda.max_memory_allocated during one backward call (statistics reset just before) minus "
                  "what was allocated before it; the call's outputs count. <impl>_saved_bytes: allocated after "
                  "the forward minus before it (what the forward keeps for the backward)",
}
METHOD = ("kernel-only (<impl>_kernel_ms) by torch.profiler (CUPTI) for every implementation; public calls "
          "(<impl>_call_ms, <impl>_fwdbwd_call_ms) by CUDA events")


# ---------------------------------------------------------------------------------------------------
# The plan and the record's arithmetic: no GPU needed.

def shape_of(N: int, d: int, tokens: int = TOKENS, model_dim: int = MODEL_DIM) -> tuple[int, int]:
    """(B, H) of a bench shape: B·N = tokens (at least one sequence), H = model_dim / d."""
    return max(1, tokens // N), model_dim // d


def bwd_flops(B: int, H: int, N: int, d: int, causal: bool) -> float:
    """Backward FLOPs: 2.5 x the forward's matmul FLOPs (``timing.attention_flops``), causal halved."""
    return BWD_FLOP_FACTOR * attention_flops(B, H, N, N, d, causal)


def fwdbwd_flops(B: int, H: int, N: int, d: int, causal: bool) -> float:
    """Forward + backward FLOPs: 3.5 x the forward's."""
    return FWDBWD_FLOP_FACTOR * attention_flops(B, H, N, N, d, causal)


def bench_shapes(Ns=BWD_N, ds=BWD_D, causals=(False, True)) -> list[tuple[int, int, bool]]:
    """The (N, d, causal) of the bench rows, in the order they run (d, then causal, then N)."""
    return [(N, d, c) for d in ds for c in causals for N in Ns]


def base_row(N: int, d: int, causal: bool) -> dict:
    """A bench row's shape and FLOP counts."""
    B, H = shape_of(N, d)
    return {"N": N, "d": d, "B": B, "H": H, "causal": causal, "dtype": DTYPE,
            "flops_fwd": attention_flops(B, H, N, N, d, causal), "flops_bwd": bwd_flops(B, H, N, d, causal),
            "flops_fwdbwd": fwdbwd_flops(B, H, N, d, causal)}


def skip_reason(impl: str, N: int, teaching_max_n: int) -> str | None:
    """Why ``impl`` is not run at N (the teaching kernels above teaching_max_n), or None."""
    if impl in TEACHING_IMPLS and N > teaching_max_n:
        return (f"not run: the fp32 teaching kernel is timed only up to N = {teaching_max_n} to keep the run "
                f"short (about 5x slower than bwd_mma)")
    return None


def derive(row: dict, impls) -> dict:
    """Add TFLOP/s to a bench row from its raw times (``TIMES``): flops_bwd over the backward's
    call and kernel times, flops_fwdbwd over the forward + backward call time. In place; returns
    the row. Times that are missing (failed or skipped cells) give no TFLOP/s."""
    for impl in impls:
        for t, tf in TIMES.items():
            ms = row.get(f"{impl}_{t}")
            flops = row["flops_fwdbwd"] if t == "fwdbwd_call_ms" else row["flops_bwd"]
            if isinstance(ms, (int, float)) and ms > 0:
                row[f"{impl}_{tf}"] = flops / ms / 1e9
    return row


def speed(row: dict, theirs: str, t: str, ours: str = OURS) -> float | None:
    """Their time ÷ ours for one method ``t`` ("call_ms", "kernel_ms", "fwdbwd_call_ms"): above 1,
    ours is faster (docs/measuring.md). None when either time is missing."""
    a, b = row.get(f"{theirs}_{t}"), row.get(f"{ours}_{t}")
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and a > 0 and b > 0:
        return a / b
    return None


def _f(v, p: int = 3) -> str:
    return f"{v:.{p}f}" if isinstance(v, (int, float)) else "-"


def row_line(row: dict, impls) -> str:
    """One printed line per bench row: the shape, every implementation's backward time by both
    methods and forward + backward by public call, TFLOP/s by public call, and the speed of ours
    against SDPA-flash and SDPA-cuDNN by each method (their time ÷ ours), then the failed cells."""
    head = f"N={row['N']:5d} d={row['d']:3d} {'causal' if row['causal'] else 'full  '} B={row['B']:2d} H={row['H']:2d}"
    times = " ".join(f"{SHORT.get(i, i)} {_f(row.get(f'{i}_call_ms'))}/{_f(row.get(f'{i}_kernel_ms'))}"
                     for i in impls if not row.get(f"{i}_skipped"))
    fb = " ".join(f"{SHORT.get(i, i)} {_f(row.get(f'{i}_fwdbwd_call_ms'))}" for i in impls
                  if not row.get(f"{i}_skipped"))
    tf = " ".join(f"{SHORT.get(i, i)} {_f(row.get(f'{i}_tflops'), 0)}" for i in impls if not row.get(f"{i}_skipped"))
    out = [head, f"bwd ms call/kernel: {times}", f"fwd+bwd ms: {fb}", f"TFLOP/s (call): {tf}"]
    if OURS in impls:
        for th in THEIRS:
            if th in impls:
                out.append(f"{SHORT[th]}/ours call {_f(speed(row, th, 'call_ms'), 2)}x kernel "
                           f"{_f(speed(row, th, 'kernel_ms'), 2)}x fwd+bwd {_f(speed(row, th, 'fwdbwd_call_ms'), 2)}x")
    errs = [k for k in row if k.endswith("error")]
    if errs:
        out.append("FAILED " + ", ".join(f"{k}: {str(row[k])[:80]}" for k in errs))
    return " | ".join(out)


def correctness_pass(entry: dict, tol_rel: float = TOL_REL) -> bool:
    """A correctness entry passes when every gradient is finite and each of dQ, dK, dV is within
    tol_rel x the reference's largest magnitude."""
    if entry.get("nonfinite", True):
        return False
    return all(entry[f"{g}_max_abs_err"] <= tol_rel * entry[f"{g}_ref_max_abs"] for g in ("dQ", "dK", "dV"))


def device_slug_of(env: dict) -> str:
    """The device part of the file name ('h200'), as the forward records name it."""
    from .run import device_slug
    return device_slug(env)


def record_path(out_dir, env: dict, full: bool) -> Path:
    """out_dir / bwd-<device>-<date>.json, or partial-bwd-… when the run is not the full one."""
    return Path(out_dir) / f"{'' if full else 'partial-'}bwd-{device_slug_of(env)}-{env['date']}.json"


def is_full(*, Ns, ds, causals, impls, teaching_max_n, parts, peak_Ns) -> bool:
    """Whether a run with these choices is the full benchmark (the one a record may be)."""
    return (tuple(Ns) == BWD_N and tuple(ds) == BWD_D and set(causals) == {False, True}
            and set(impls) == set(ALL_IMPLS) and teaching_max_n >= TEACHING_MAX_N
            and set(parts) == set(PARTS) and tuple(peak_Ns) == PEAK_N)


#: TFLOP/s assumed by estimate_seconds (backward, forward): the H200 anchors of issue 23 and
#: benchmarks/results/bwd-h200-2026-12-05.json (its bwd_mma_det, the separate dQ pass, 142–214;
#: its bwd_mma, then the atomic path, 107–177), rounded down
_RATES = {"bwd_mma": (250, 450), "bwd_mma_det": (200, 450), "bwd_mma_atomic": (140, 450),
           "bwd_teaching": (22, 20), "bwd_teaching_det": (16, 20),
          "sdpa_flash_bwd": (220, 330), "sdpa_cudnn_bwd": (380, 500)}


def estimate_seconds(shapes, impls, *, teaching_max_n: int = TEACHING_MAX_N, parts=PARTS,
                     budget_s: float = BUDGET_S, peak_Ns=PEAK_N) -> dict:
    """A rough plan of the run's wall time on an H200 (seconds per part and "total"), from the
    backward rates of the recorded probes and ``timing.measure``'s repeat rule. For planning
    only: the record holds the measured wall_s."""
    def calls(t, kernel=False):                 # measure(): warm-up 2, 3 to size the run, n (or k) timed
        n = max(3, min(30, budget_s / 3 / t))
        return (5 + (max(3, min(10, n)) if kernel else n)) * t + (0.4 if kernel else 0.02)

    est = {"startup": 25.0, "call": 0.0, "det": 0.0, "peak": 0.0, "kernel": 0.0}
    for N, d, causal in shapes:
        row = base_row(N, d, causal)
        est["call"] += 0.1                                               # inputs and the reference
        for impl in impls:
            if skip_reason(impl, N, teaching_max_n):
                continue
            rb, rf = _RATES[impl]
            tb = row["flops_bwd"] / rb / 1e12
            tfb = tb + row["flops_fwd"] / rf / 1e12
            if "call" in parts:
                est["call"] += 0.05 + 2 * tb + calls(tb) + (0 if impl in NO_FWDBWD else calls(tfb))
            if "kernel" in parts:
                est["kernel"] += 0.05 + tb + calls(tb, kernel=True)
    if "det" in parts:
        est["det"] = 4 * 3.0
    if "peak" in parts:
        est["peak"] = 2.0 * len(peak_Ns)
    est["total"] = sum(est.values())
    return est


# ---------------------------------------------------------------------------------------------------
# On the GPU.

@dataclass
class _Impl:
    """One implementation at one shape: bwd() (the backward's public call), fwdbwd() (forward +
    backward by public call), ctx (a function returning the context manager its calls run in:
    SDPA's backend choice) and info (blocks, registers, ... for the row)."""

    bwd: object
    fwdbwd: object
    ctx: object = None
    info: dict = field(default_factory=dict)

    def context(self):
        return self.ctx() if self.ctx is not None else nullcontext()


def _inputs(N: int, d: int):
    """q, k, v, dO: (B, H, N, d) unit-normal fp16 CUDA tensors, seeded by (N, d) (the causal and
    non-causal rows of a shape, and both passes, see the same values)."""
    import torch
    B, H = shape_of(N, d)
    g = torch.Generator(device="cuda").manual_seed(1000 * N + d)
    return tuple(torch.randn(B, H, N, d, device="cuda", dtype=torch.float16, generator=g) for _ in range(4))


def _leaves(*xs):
    """Leaf tensors sharing xs' storage that require grad (what a user's parameters would be)."""
    return tuple(x.detach().requires_grad_() for x in xs)


def _build(name: str, q, k, v, dO, causal: bool, cache: dict) -> _Impl:
    """The public calls of one implementation at one shape; runs the forward it needs (outside
    any timed region). cache: shared by the implementations of one shape (our forward's O, lse
    and the float32 copies)."""
    import torch
    import torch.nn.functional as F

    from ..autograd import backward_blocks, flash_attention
    d = q.shape[-1]
    if name in MMA_DQ or name in TEACHING_IMPLS:
        if "fwd" not in cache:
            from .kernel import flash_forward_mma
            with torch.no_grad():
                cache["fwd"] = flash_forward_mma(q, k, v, causal=causal)
        O, lse = cache["fwd"]
    if name in MMA_DQ:
        from .backward import compile_backward_mma, compile_backward_wgmma, flash_backward_mma
        kw = MMA_DQ[name]
        kernel, path, Bc = mma_call(name, d)      # what the call runs on this GPU
        det = bool(kw.get("deterministic", False))
        leaves = _leaves(q, k, v)

        def fwdbwd():                             # flash_attention's backward: flash_backward_mma's default call
            return torch.autograd.grad(flash_attention(*leaves, causal=causal, deterministic=det), leaves,
                                       grad_outputs=dO)

        # the kernels flash_backward_mma launches (the record of 2026-12-04 named Bc = 64 here while
        # the call ran the default, 128)
        mb = (compile_backward_wgmma(DTYPE, Bc, d, causal, path) if kernel == "wgmma"
              else compile_backward_mma(DTYPE, Bc, d, causal, path == "separate"))
        info = {"kernel": kernel, "Bc": mb.Bc, "Br": 64, "dq": path, "regs": mb.num_regs,
                "local_bytes": mb.local_bytes, "smem_bytes": mb.smem_bytes}
        if path == "separate":
            info.update(dq_regs=int(mb.dq.num_regs), dq_local_bytes=int(mb.dq.local_size_bytes),
                        dq_smem_bytes=mb.dq_smem_bytes)
        return _Impl(lambda: flash_backward_mma(q, k, v, O, dO, lse, causal=causal, **kw),
                     None if name in NO_FWDBWD else fwdbwd, info=info)
    if name in TEACHING_IMPLS:
        from ..common import cupy
        from ..teaching.backward import flash_backward_gpu
        det = name == "bwd_teaching_det"
        if "f32" not in cache:
            cache["f32"] = tuple(x.float() for x in (q, k, v, O, dO))
        q32, k32, v32, O32, dO32 = cache["f32"]
        with cupy().cuda.Device(q.get_device()):
            Br, Bc = backward_blocks(d)
        leaves = _leaves(q32, k32, v32)

        def fwdbwd():
            o = flash_attention(*leaves, causal=causal, deterministic=det)
            return torch.autograd.grad(o, leaves, grad_outputs=dO32)

        return _Impl(lambda: flash_backward_gpu(q32, k32, v32, O32, dO32, lse, Br=Br, Bc=Bc, causal=causal,
                                                deterministic=det), fwdbwd, info={"Br": Br, "Bc": Bc})
    if name in ("sdpa_flash_bwd", "sdpa_cudnn_bwd", "sdpa_math_bwd"):
        from torch.nn.attention import sdpa_kernel

        from .bench import sdpa_backend
        backend = sdpa_backend(name.split("_")[1])
        ctx = lambda: sdpa_kernel(backend)  # noqa: E731
        leaves = _leaves(q, k, v)
        with ctx():
            out = F.scaled_dot_product_attention(*leaves, is_causal=causal)

        def fwdbwd():
            o = F.scaled_dot_product_attention(*leaves, is_causal=causal)
            return torch.autograd.grad(o, leaves, grad_outputs=dO)

        return _Impl(lambda: torch.autograd.grad(out, leaves, grad_outputs=dO, retain_graph=True), fwdbwd, ctx)
    raise ValueError(f"unknown implementation {name!r}; one of {', '.join(ALL_IMPLS)}")


def _reference(q, k, v, dO, causal: bool):
    """(heads, (dQ, dK, dV)): float64 gradients of batch 0, heads 0..heads−1 by torch SDPA's math
    backend on the same fp16 values (upcast exactly); heads = max(1, min(H, REF_ELEMENTS // N²))."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel

    from .bench import sdpa_backend
    H, N = q.shape[1], q.shape[2]
    nh = max(1, min(H, REF_ELEMENTS // (N * N)))
    leaves = tuple(x[:1, :nh].double().requires_grad_() for x in (q, k, v))
    with sdpa_kernel(sdpa_backend("math")):
        o = F.scaled_dot_product_attention(*leaves, is_causal=causal)
    grads = torch.autograd.grad(o, leaves, grad_outputs=dO[:1, :nh].double())
    return nh, tuple(g.detach() for g in grads)


def _compare(grads, ref, nh: int) -> dict:
    """max |grad − ref| and max |ref| of dQ, dK, dV on the reference's slice; nonfinite: any NaN /
    inf in the whole gradients."""
    import torch
    out, bad = {}, False
    for label, g, r in zip(("dQ", "dK", "dV"), grads, ref):
        out[f"{label}_max_abs_err"] = float((g[:1, :nh].double() - r).abs().max())
        out[f"{label}_ref_max_abs"] = float(r.abs().max())
        bad = bad or not bool(torch.isfinite(g).all())
    out["nonfinite"] = bad
    return out


def _measure(impl: _Impl, fn, part: str, budget_s: float) -> dict:
    from ..timing import measure
    with impl.context():
        return measure(fn, repeat=30, warmup=2, kernel_repeat=10, budget_s=budget_s, parts=(part,))


def call_pass_shape(N: int, d: int, causal: bool, impls, *, teaching_max_n: int, budget_s: float,
                    log=print) -> tuple[dict, list[dict]]:
    """One shape's public-call pass: (bench row, correctness entries). Every implementation's
    backward once (compared with the float64 reference), then its backward and its forward +
    backward timed by public call. A failure is recorded in its cell and the next one runs."""
    import torch
    row, checks = base_row(N, d, causal), []
    try:
        q, k, v, dO = _inputs(N, d)
    except Exception as exc:
        for impl in impls:
            row[f"{impl}_error"] = f"inputs: {error_text(exc)}"
        return row, checks
    try:
        nh, ref = _reference(q, k, v, dO, causal)
    except Exception as exc:
        nh, ref = 0, None
        checks.append({"N": N, "d": d, "B": row["B"], "H": row["H"], "causal": causal, "impl": "reference",
                       "error": error_text(exc)})
        free_torch_cache()
    cache: dict = {}
    for impl in impls:
        why = skip_reason(impl, N, teaching_max_n)
        if why:
            row[f"{impl}_skipped"] = why
            continue
        entry = {"N": N, "d": d, "B": row["B"], "H": row["H"], "causal": causal, "impl": impl}
        try:
            it = _build(impl, q, k, v, dO, causal, cache)
            row.update({f"{impl}_{key}": val for key, val in it.info.items()})
            with it.context():
                grads = it.bwd()
                torch.cuda.synchronize()
            if ref is not None:
                entry.update(_compare(grads, ref, nh), ref_heads=nh, tol_rel=TOL_REL)
                entry["pass"] = correctness_pass(entry)
            del grads
        except Exception as exc:
            row[f"{impl}_error"] = error_text(exc)
            entry["error"] = error_text(exc)
            checks.append(entry)
            free_torch_cache()
            continue
        if ref is not None:
            checks.append(entry)
        for t, fn in (("call_ms", it.bwd), ("fwdbwd_call_ms", it.fwdbwd)):
            if fn is None:
                continue
            try:
                row[f"{impl}_{t}"] = _measure(it, fn, "call", budget_s)["call_ms"]
            except Exception as exc:
                row[f"{impl}_{ERROR_KEY[t]}"] = error_text(exc)
                free_torch_cache()
        del it
    del cache, q, k, v, dO, ref
    free_torch_cache()
    return derive(row, impls), checks


def kernel_pass_shape(row: dict, impls, *, teaching_max_n: int, budget_s: float) -> dict:
    """One shape's kernel-only pass (torch.profiler), into its bench row: <impl>_kernel_ms,
    <impl>_kernel_name (the longest kernel), <impl>_launches (GPU activities per call), or
    <impl>_kernel_error."""
    N, d, causal = row["N"], row["d"], row["causal"]
    try:
        q, k, v, dO = _inputs(N, d)
    except Exception as exc:
        for impl in impls:
            row[f"{impl}_kernel_error"] = f"inputs: {error_text(exc)}"
        return row
    cache: dict = {}
    for impl in impls:
        if skip_reason(impl, N, teaching_max_n):
            continue
        try:
            it = _build(impl, q, k, v, dO, causal, cache)
            t = _measure(it, it.bwd, "kernel", budget_s)
            row.update({f"{impl}_kernel_ms": t["kernel_ms"], f"{impl}_kernel_name": t["kernel_name"],
                        f"{impl}_launches": t["per_call"]})
            if "kernel_note" in t:
                row[f"{impl}_kernel_note"] = t["kernel_note"]
            del it
        except Exception as exc:
            row[f"{impl}_kernel_error"] = error_text(exc)
            free_torch_cache()
    del cache, q, k, v, dO
    free_torch_cache()
    return derive(row, impls)


def mma_call(name: str, d: int, cc: int | None = None) -> tuple[str, str, int]:
    """(kernel, dq, Bc): what tensor-core implementation ``name`` (of ``MMA_DQ``) runs at head
    dimension ``d`` on a GPU of compute capability ``cc`` (None: CuPy's current device), as
    ``backward.backward_plan`` decides for its arguments — e.g. bwd_mma on sm_90 at d = 64:
    ("wgmma", "bulk", 64)."""
    from .backward import backward_plan
    if cc is None:
        from ..common import device_facts
        cc = device_facts().cc
    return backward_plan(cc, d, **MMA_DQ[name])


def promises_same_bits(name: str, d: int = 64, cc: int | None = None) -> bool:
    """Whether implementation ``name``'s dQ path adds in a fixed order, so that repeated calls must
    give the same bits: the teaching kernel's deterministic dQ, and each tensor-core call whose dQ
    (``mma_call``) is the separate pass — bwd_mma_det always, bwd_mma where the device's default is
    that pass (sm_80's mma kernel). Atomic and bulk dQ paths promise nothing."""
    if name in MMA_DQ:
        return mma_call(name, d, cc)[1] == "separate"
    return name == "bwd_teaching_det"


def determinism(N: int, d: int, causal: bool, impls, runs: int = DET_RUNS) -> list[dict]:
    """Each backward of ``impls`` among the teaching kernels and the tensor-core ones, ``runs`` times
    on the same inputs, compared bit for bit with its first result: one entry per implementation
    with "deterministic" (``promises_same_bits``: bwd_teaching_det, and bwd_mma while its default
    dQ is the separate pass), "dq" (the tensor-core ones: the dQ path the call ran),
    "bitwise_equal" and per gradient "dQ_bitwise_equal", ... (or "error")."""
    import torch
    out = []
    names = [n for n in ("bwd_teaching_det", "bwd_mma_det", "bwd_mma", "bwd_teaching", "bwd_mma_atomic") if n in impls]
    if not names:
        return out
    B, H = shape_of(N, d)
    q, k, v, dO = _inputs(N, d)
    cache: dict = {}
    for name in names:
        e = {"impl": name, "N": N, "d": d, "B": B, "H": H, "causal": causal, "runs": runs,
             "deterministic": promises_same_bits(name, d)}
        if name in MMA_DQ:
            e["kernel"], e["dq"], e["Bc"] = mma_call(name, d)
        try:
            it = _build(name, q, k, v, dO, causal, cache)
            first = tuple(g.clone() for g in it.bwd())
            same = [True, True, True]
            for _ in range(runs - 1):
                for i, (a, b) in enumerate(zip(first, it.bwd())):
                    same[i] = same[i] and bool(torch.equal(a, b))
            e.update({f"{g}_bitwise_equal": s for g, s in zip(("dQ", "dK", "dV"), same)}, bitwise_equal=all(same))
            del it, first
        except Exception as exc:
            e["error"] = error_text(exc)
        out.append(e)
        free_torch_cache()
    del cache, q, k, v, dO
    free_torch_cache()
    return out


def peak_row(N: int, impls, d: int = PEAK_D, causal: bool = False) -> dict:
    """The backward's peak device memory at one shape for bwd_mma and SDPA's math, flash and cuDNN
    backends (``bench.torch_peak_bytes``), beside what each forward kept (<impl>_saved_bytes) and
    tensor_bytes (one of Q, K, V, O, dO). SDPA-math is skipped (a note) where its N×N matrices
    would not fit."""
    import torch

    from .bench import torch_peak_bytes
    B, H = shape_of(N, d)
    row = {"N": N, "d": d, "B": B, "H": H, "causal": causal, "dtype": DTYPE, "tensor_bytes": B * H * N * d * 2}
    q, k, v, dO = _inputs(N, d)
    for name in PEAK_IMPLS:
        if name != "sdpa_math_bwd" and name not in impls:
            continue
        free_torch_cache()
        if name == "sdpa_math_bwd":
            need, free = B * H * N * N * MATH_BYTES_PER_SCORE, torch.cuda.mem_get_info()[0]
            if need > 0.8 * free:
                row[f"{name}_peak_note"] = (f"not run: its N×N matrices need about {need / 1e9:.0f} GB, "
                                            f"{free / 1e9:.0f} GB free")
                continue
        it = None
        try:
            before = torch.cuda.memory_allocated()
            it = _build(name, q, k, v, dO, causal, {})
            torch.cuda.synchronize()
            row[f"{name}_saved_bytes"] = int(torch.cuda.memory_allocated() - before)
            with it.context():
                it.bwd()                                   # warm (compiles, cuDNN plans) outside the peak
                row[f"{name}_peak_bytes"] = torch_peak_bytes(it.bwd)
        except Exception as exc:
            row[f"{name}_peak_error"] = error_text(exc)
        del it
    del q, k, v, dO
    free_torch_cache()
    return row


def code_hashes() -> dict:
    """What code ran, for ``env``: kernel_sources ({kernel file: sha256} of every kernels/*.cu whose
    source some loaded cubin was compiled from), cubins (``nvrtc.loaded_cubins``), files_sha256
    (the Python files that make the calls, ``FILES``): ``provenance_env.code_hashes``."""
    from ..provenance_env import code_hashes as hashes
    return hashes(FILES)


def run_bwd_benchmark(out_dir, *, Ns=BWD_N, ds=BWD_D, causals=(False, True), impls=ALL_IMPLS,
                      teaching_max_n: int = TEACHING_MAX_N, parts=PARTS, peak_Ns=PEAK_N,
                      budget_s: float = BUDGET_S, deadline_s: float = DEADLINE_S, argv=None, log=print) -> Path:
    """Measure on this GPU and write the record (see the module text) into out_dir; returns its
    path. The JSON (and a .log of the printed lines) is written after every shape and part, so a
    run cut short keeps what it measured; no new shape or part starts after deadline_s seconds
    (the record then says "cut_short" and is named partial-…). Raises RuntimeError without CuPy,
    torch or a GPU."""
    t0 = time.time()
    from ..common import environment, gpu_status
    ok, reason = gpu_status()
    if not ok:
        raise RuntimeError(f"the backward benchmark needs a CUDA GPU with CuPy: {reason}")
    import torch
    if not torch.cuda.is_available():
        raise RuntimeError("the backward benchmark needs torch with CUDA")
    from .bench import check_streams
    bad = [i for i in impls if i not in ALL_IMPLS]
    if bad:
        raise ValueError(f"unknown implementations {bad}; choose from {', '.join(ALL_IMPLS)}")
    impls = [i for i in ALL_IMPLS if i in impls]
    check_streams()
    from ..provenance_env import stamp_commit
    env = stamp_commit(environment())
    full = is_full(Ns=Ns, ds=ds, causals=causals, impls=impls, teaching_max_n=teaching_max_n, parts=parts,
                   peak_Ns=peak_Ns)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = record_path(out, env, full)
    shapes = bench_shapes(Ns, ds, causals)
    data = {"kind": "flashviz backward benchmark", "env": env, "argv": list(argv or []), "full": full,
            "impls": list(impls), "parts": list(parts),
            "shapes": {"N": list(Ns), "d": list(ds), "causal": list(causals), "tokens": TOKENS,
                       "model_dim": MODEL_DIM, "dtype": DTYPE},
            "teaching_max_n": teaching_max_n, "tol_rel": TOL_REL, "method": METHOD, "methods": dict(METHODS),
            "notes": [f"bwd_teaching and bwd_teaching_det (fp32, CUDA cores) run only at N <= {teaching_max_n}: "
                      f"about 5x slower than bwd_mma, they would take most of the run's time at larger N",
                      "bwd_teaching times the fp32 kernel on float32 copies of the fp16 inputs (made outside "
                      "the timed region), on the same O and lse as bwd_mma",
                      "SDPA's backend is forced with torch.nn.attention.sdpa_kernel, entered outside the timed "
                      "region; its backward is timed on a graph built outside the timed region",
                      "bwd_mma is flash_backward_mma's default call: on this GPU, by head dimension, "
                      + "; ".join(f"d={d}: kernel {k!r}, dq {q!r}, Bc {c}" for d in ds
                                  for k, q, c in [mma_call("bwd_mma", d)])
                      + " (<impl>_kernel, <impl>_dq, <impl>_Bc in each row; records before 2026-12-06 ran the "
                      "mma kernel here, with the atomic or, later, the separate dQ); bwd_mma_det is the same "
                      "call with deterministic=True (dQ by the separate pass), bwd_mma_atomic with dq='atomic' "
                      "and has no fwdbwd_call_ms (flash_attention has no dq switch)"],
            "no_fwdbwd": [i for i in impls if i in NO_FWDBWD],
            "correctness": [], "deterministic": [], "bench": [], "peak_bytes": [], "cut_short": None}

    rec = RunRecord(path, data, t0=t0, deadline_s=deadline_s, log=log, hashes=lambda: code_hashes())
    say, save, late = rec.say, rec.save, rec.late

    est = estimate_seconds(shapes, impls, teaching_max_n=teaching_max_n, parts=parts, budget_s=budget_s,
                           peak_Ns=peak_Ns)
    say(f"{env['device']}: torch {env.get('torch')}, CuPy {env.get('cupy')}, commit {env.get('commit')}; "
        f"{len(shapes)} shapes x {len(impls)} implementations, parts {','.join(parts)}; planned about "
        f"{est['total']:.0f} s; writing {path}. Each row: times in ms, then flash/ours and cudnn/ours = their "
        f"time ÷ ours by the same method (above 1: ours is faster)")
    try:
        if "call" in parts:
            for N, d, causal in shapes:
                if late(f"the public-call pass at N={N} d={d} causal={causal}"):
                    break
                row, checks = call_pass_shape(N, d, causal, impls, teaching_max_n=teaching_max_n, budget_s=budget_s)
                data["bench"].append(row)
                data["correctness"] += checks
                bad_checks = [c["impl"] for c in checks if not c.get("pass")]
                say(f"[{time.time() - t0:5.0f} s] call pass: " + row_line(row, impls)
                    + (f" | correctness FAILED for {', '.join(bad_checks)}" if bad_checks else " | correctness ok"))
                save()
        if "det" in parts and not late("the determinism check"):
            for d in ds:
                for causal in causals:
                    data["deterministic"] += determinism(min(Ns), d, causal, impls)
            say(f"[{time.time() - t0:5.0f} s] determinism: " + "; ".join(
                f"{e['impl']} d={e['d']} causal={e['causal']}: "
                + (e["error"][:80] if "error" in e else f"bitwise equal over {e['runs']} runs: {e['bitwise_equal']}")
                for e in data["deterministic"]))
            save()
        if "peak" in parts:
            for N in peak_Ns:
                if late(f"the memory part at N={N}"):
                    break
                r = peak_row(N, impls)
                data["peak_bytes"].append(r)
                say(f"[{time.time() - t0:5.0f} s] peak bytes N={N}: " + " ".join(
                    f"{SHORT.get(k[:-11], k[:-11])} {r[k] / 2**20:.0f} MiB" for k in r if k.endswith("_peak_bytes"))
                    + "".join(f" | {k}: {r[k]}" for k in r if k.endswith(("_peak_note", "_peak_error"))))
                save()
        if "kernel" in parts:
            rows = data["bench"] if "call" in parts else [base_row(*s) for s in shapes]
            if "call" not in parts:
                data["bench"] = rows
            for row in rows:
                if late(f"the kernel-only pass at N={row['N']} d={row['d']} causal={row['causal']}"):
                    break
                kernel_pass_shape(row, impls, teaching_max_n=teaching_max_n, budget_s=budget_s)
                say(f"[{time.time() - t0:5.0f} s] " + row_line(row, impls))
                save()
    except BaseException as exc:                       # record what there is, then let it go on
        data["cut_short"] = f"stopped by {error_text(exc)}"
        say(f"run stopped: {error_text(exc)}")
        raise
    finally:
        if data["cut_short"] and full:
            try:
                path.unlink()
                path.with_suffix(".log").unlink()
            except OSError:
                pass
            data["full"] = False
            path = rec.path = record_path(out, env, False)
        save()
    say(f"done in {time.time() - t0:.0f} s: {path}")
    path.with_suffix(".log").write_text("\n".join(rec.lines) + "\n")
    return path


__all__ = ["run_bwd_benchmark", "call_pass_shape", "kernel_pass_shape", "determinism", "peak_row", "code_hashes",
           "bench_shapes", "base_row", "shape_of", "bwd_flops", "fwdbwd_flops", "derive", "speed", "row_line",
           "correctness_pass", "record_path", "is_full", "estimate_seconds", "skip_reason", "promises_same_bits",
           "IMPLS", "ALL_IMPLS", "EXTRA_IMPLS", "MMA_DQ", "NO_FWDBWD", "BWD_N", "BWD_D", "PEAK_N", "TOL_REL", "METHODS", "METHOD"]
