"""The tensor-core track: ``kernels/flash_fwd_mma.cu`` (Hopper, ``wgmma``) and
``kernels/flash_fwd_mma_sm80.cu`` (``mma.sync``, sm_80+), fp16 / bf16, through CuPy.

* ``limits``   — variants, block sizes, shared memory, defaults (no GPU needed);
  ``impl_name`` maps a variant ("mma.sync") to its name in benchmark records ("mmasync");
* ``kernel``   — compile, launch, ``flash_forward_mma`` (the public call);
* ``operands`` — torch tensors / CuPy / NumPy arrays -> pointers, shapes and strides;
* ``bench``    — correctness grid, per-shape benchmark, block sweep, device ceilings;
* ``run``      — the benchmark suite: one run of all of that, written to one JSON
  (``flashviz bench``, ``benchmarks/bench_mma.py``).
* ``bench_bwd`` — the backward benchmark (tensor-core and teaching backward against SDPA's),
  one run written to one JSON (``benchmarks/bench_bwd.py``).

The teaching track (``flashviz.gpu.teaching``) has the same file names; what both share lives
one level up, in ``flashviz.gpu.common``, ``nvrtc`` and ``timing``; their records are read by
``flashviz.records``.
"""
