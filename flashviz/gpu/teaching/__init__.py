"""The teaching kernel track: ``kernels/flash_fwd.cu`` (fp32, the paper's names), through CuPy.

* ``limits``  — what the kernel supports and the shared memory it needs (no GPU needed);
* ``kernel``  — compile, launch, ``flash_forward_gpu``; ``naive_attention_gpu`` (the baseline);
* ``bench``   — the timing and peak-memory benchmark against naive CuPy and torch SDPA;
* ``backward`` — ``kernels/flash_bwd.cu`` (FA2 Algorithm 2, fp32): compile, launch, ``flash_backward_gpu``;
* ``bench_backward`` — one backward configuration timed (``benchmark_backward``, chapter 6's panel).

The tensor-core track (``flashviz.gpu.tensorcore``) has the same file names; what both share
lives one level up, in ``flashviz.gpu.common``, ``nvrtc`` and ``timing``; their records are read by
``flashviz.records``.
"""
