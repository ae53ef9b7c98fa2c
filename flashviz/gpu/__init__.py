"""The GPU runner: the CUDA teaching kernel (kernels/flash_fwd.cu) and the tensor-core kernels
(kernels/flash_fwd_mma.cu for Hopper, kernels/flash_fwd_mma_sm80.cu for sm_80+) through CuPy.

Two tracks with the same file names, and what they share beside them::

    gpu/common.py    CuPy import, gpu_status, device facts and limits, kernel sources, checks
    gpu/nvrtc.py     NVRTC compile for an exact target + the on-disk cubin cache
    gpu/timing.py    the one timing method every implementation is measured by
    gpu/tracing.py   trace_kernel: run a kernel built with its timeline switch on (kernels/fv_trace.cuh)
                     and return its flashviz.records.timeline.Timeline
    gpu/decode.py    flash_decode_gpu: split-KV decode (kernels/flash_decode.cu), GQA, paged cache;
                     decode_trace.py (trace_decode: its timeline), decode_bench.py (its benchmark)
    gpu/teaching/    limits.py, kernel.py, bench.py               (fp32 teaching kernel)
                     backward.py (kernels/flash_bwd.cu: FA2 Algorithm 2, fp32),
                     bench_backward.py (one backward configuration timed: chapter 6's panel)
    gpu/bwd_trace.py trace_backward: a backward kernel's timeline (teaching or tensor-core)
    gpu/autograd.py  flash_attention: a torch.library custom op with its backward (torch imported lazily)
    gpu/tensorcore/  kernel.py, bench.py, operands.py,  (fp16/bf16 tensor cores; their launch
                     table is flashviz/mma_limits.py, readable without CuPy)
                     backward.py (kernels/flash_bwd_mma.cu: FA2 Algorithm 2 on mma.sync)
                     run.py (the benchmark suite), bench_bwd.py (the backward benchmark)

What the runner leaves behind is read without a GPU by ``flashviz.records`` (the benchmark
records, timelines and FA3 probes); ``latest_results``, ``Timeline``, ``latest_timeline`` and
``recorded_timelines`` are its names, offered here too as the public API names them.

Importing this package never imports CuPy; every function that needs it imports it lazily,
so CPU-only machines can import flashviz.gpu, call ``gpu_status()`` (→ (False, reason)),
the shared-memory arithmetic (``smem_bytes``, ``check_launch``, ``supported_blocks``) and
``latest_results()``.
"""

from ..mma_limits import check_mma_launch, default_blocks, mma_blocks, mma_smem_bytes
from ..records.files import kernel_source
from ..records.results import latest_results
from ..records.timeline import Timeline, latest_timeline, recorded_timelines
from .autograd import attention_with_lse, flash_attention
from .bwd_trace import trace_backward
from .common import device_smem_optin, environment, gpu_status
from .decode import compile_decode, decode_launch, decode_smem_bytes, flash_decode_gpu
from .decode_trace import trace_decode
from .teaching.backward import CompiledBackward, compile_backward, flash_backward_gpu, launch_backward
from .teaching.bench import benchmark, peak_memory, relative_error
from .teaching.bench_backward import benchmark_backward
from .teaching.kernel import CompiledKernel, compile_kernel, flash_forward_gpu, launch, naive_attention_gpu
from .teaching.limits import (
    SUPPORTED_BC,
    SUPPORTED_BR,
    SUPPORTED_D,
    bwd_smem_bytes,
    bwd_supported_blocks,
    check_bwd_launch,
    check_launch,
    check_sizes,
    smem_bytes,
    supported_blocks,
)
from .tensorcore.backward import (
    MMABackward,
    bwd_mma_dq_smem_bytes,
    bwd_mma_smem_bytes,
    compile_backward_mma,
    flash_backward_mma,
)
from .tensorcore.kernel import MMAKernel, compile_mma, device_variant, flash_forward_mma
from .timing import attention_flops
from .tracing import trace_kernel

__all__ = ["gpu_status", "kernel_source", "compile_kernel", "CompiledKernel", "flash_forward_gpu",
           "naive_attention_gpu", "launch", "device_smem_optin", "benchmark", "peak_memory",
           "relative_error", "attention_flops", "environment", "latest_results", "smem_bytes",
           "check_launch", "check_sizes", "supported_blocks", "SUPPORTED_BR", "SUPPORTED_BC",
           "SUPPORTED_D", "flash_forward_mma", "compile_mma", "MMAKernel", "device_variant",
           "mma_smem_bytes", "check_mma_launch", "mma_blocks", "default_blocks", "Timeline", "latest_timeline",
           "recorded_timelines", "trace_kernel",
           "flash_backward_gpu", "compile_backward", "CompiledBackward", "launch_backward", "bwd_smem_bytes",
           "benchmark_backward",
           "check_bwd_launch", "bwd_supported_blocks", "flash_attention", "attention_with_lse",
           "flash_backward_mma", "compile_backward_mma", "MMABackward", "bwd_mma_smem_bytes", "bwd_mma_dq_smem_bytes",
           "flash_decode_gpu", "compile_decode", "decode_launch", "decode_smem_bytes", "trace_decode",
           "trace_backward"]

