"""What the GPU runs left behind, read without a GPU: the committed records in
``benchmarks/results/`` (package ``flashviz.results``) and the kernel sources (``kernels/``).

    records/files.py          package_dir, kernel_source: where the records and kernels/*.cu are
    records/results.py        the benchmark records (gpu-, mma-, dram-*.json): latest_results,
                              mma_table, mma_sweep, check_summary, recorded_summary, ...
    records/timeline.py       Timeline: what a traced kernel run did, per block, tile and step;
                              save / load, latest_timeline, recorded_timelines (timeline-*.json.gz)
    records/timeline_stats.py the timeline's numbers: waves, tail_share, softmax_overlap, ...
    records/fa3_records.py    the FlashAttention-3 kernel's fixed choices (fa3_config, read from its
                              source) and the probe records that timed it step by step (probe-fa3-*.json)
    records/provenance.py     which records timed today's kernels: their source hashes against the tree's
    records/kernel_params.py  a kernel's parameter layout, read from its __global__ signature (the launch packs it)
    records/bwd_records.py    the backward benchmark (bwd-*.json): times, TFLOP/s, backward ÷ forward,
                              peak memory per (batch, head), bitwise repeatability (chapter 6, section 7)

No CuPy, no GPU, no matplotlib, no widgets: plain Python and NumPy. The GPU runner
(``flashviz.gpu``) fills a ``Timeline`` and writes the records; the views, widgets, exercises,
``flashviz report`` and the command line read them through these modules. One import goes the
other way: ``results`` and ``fa3_records`` (and ``bwd_records``, through ``results``) read the
tensor-core kernels' launch table (``flashviz.mma_limits``: record key names, default blocks,
shared memory), which is CuPy-free, so importing them loads ``flashviz.gpu``'s modules but never CuPy; ``files``,
``timeline`` and ``timeline_stats`` import nothing of the runner. This package's ``__init__``
imports none of its modules, so importing one loads only what that one needs.
"""
