"""Writes notebooks/07_gpu_kernel.ipynb (no outputs). Edit here, re-run, commit both."""

from pathlib import Path

import nbformat as nbf

md, code = nbf.v4.new_markdown_cell, nbf.v4.new_code_cell
cells = [
    md("""# Chapter 7 — The GPU kernel: FlashAttention-2 on tensor cores

The earlier chapters ran FlashAttention twice: in NumPy (`flashviz/tiled.py`), and as the CUDA *teaching kernel*
(`kernels/flash_fwd.cu`), which uses the same names line for line. The teaching kernel is easy to read, but it
computes in float32 on the GPU's ordinary arithmetic units (CUDA cores), one multiply-add per thread at a time.
A modern GPU does most of its matrix arithmetic elsewhere: in its **tensor cores**, which multiply whole small
matrices of 16-bit numbers in one instruction. This chapter reads `kernels/flash_fwd_mma.cu`, the same algorithm
written for the tensor cores of an NVIDIA H200 (Hopper), and measures it.

1. **Why a second kernel** — what the H200 can do, measured, and how far the teaching kernel is from it.
2. **The kernel beside the NumPy code** — each step of the CUDA source next to the same step in NumPy.
3. **The benchmark** — against PyTorch's FlashAttention-2 and cuDNN, public call against public call and
   kernel-only against kernel-only; host time per call; the correctness grid.
4. **The block-size experiment** — the paper's Figure 2 on real hardware, with Nsight Compute's DRAM bytes.
5. **Break it** — a GPU with less shared memory; bf16 against fp16.
6. **The live panel** — run the kernel yourself on a GPU, or browse the recorded runs.
7. **Exercises** — compulsory bytes, the fastest block size, compute- or memory-bound.

This machine needs no GPU for this chapter: every measurement comes from files recorded on a GPU and committed
under `benchmarks/results/`. The label printed with them says which GPU, when, and with which software.
Every measured number below is computed from those files when you run the cell, and each time or ratio says how it
was measured (section 3). The few figures quoted in the text, such as the older results in section 3, are checked
by the tests against the recorded files and `benchmarks/NOTES.md`. Run the cells top to bottom (Shift-Enter)."""),
    code("""%matplotlib widget
import numpy as np
import matplotlib.pyplot as plt
import flashviz as fv
from flashviz.gpu.results import (latest_results, recorded_label, mma_table, mma_sweep, check_summary,
                                  compulsory_bytes, ratio_span, METHOD_NAMES)
from flashviz.gpu.tensorcore.limits import check_mma_launch, mma_blocks, mma_threads, default_blocks
from flashviz.views.bench_plot import plot_mma_benchmark, plot_block_sweep, plot_dram
from flashviz.views.code_pairs import side_by_side
from flashviz.views import SRAM_BUDGETS
from flashviz.widgets.mma_panel import TensorCorePanel
from flashviz.exercises.gpu import check_compulsory_bytes, check_fastest_blocks, check_intensity"""),
    md("""## 1. Why a second kernel

Two measured *ceilings* bound what any kernel on a GPU can do. The **copy bandwidth** is how fast the GPU can
move bytes through its HBM: a large device-to-device copy, counting bytes read plus bytes written. The **matmul
rate** is how fast its tensor cores multiply: a large fp16 matrix product through cuBLAS. Both were measured on
the GPU the results were recorded on, not copied from a datasheet:"""),
    code("""mma, dram = latest_results("mma"), latest_results("dram")
print("Recorded on", recorded_label(mma))
ceil = mma["ceilings"]
table = mma_table(mma)
teach = max(r["teaching_call_tflops"] for r in table)     # public call (section 3 says how it is timed)
best = max(r["wgmma_call_tflops"] for r in table)
print(f"copy bandwidth  : {ceil['copy_GBps']:,.0f} GB/s ({ceil['copy_bytes'] / 2**30:.0f} GiB copied, read + write)")
print(f"matmul, fp16    : {ceil['matmul_fp16_TFLOPs']:,.0f} TFLOP/s   (bf16: {ceil['matmul_bf16_TFLOPs']:,.0f} TFLOP/s)")
print(f"teaching kernel : {teach:,.1f} TFLOP/s at best in this run, public call (fp32, CUDA cores, 64×64 blocks) = "
      f"{100 * teach / ceil['matmul_fp16_TFLOPs']:.1f}% of the matmul ceiling")
print(f"tensor-core kernel (this chapter): {best:,.0f} TFLOP/s at best, public call = {best / teach:.0f}x the teaching "
      f"kernel by the same method")
print(f"  (kernel-only, the same two: {max(r['teaching_kernel_tflops'] for r in table):,.1f} and "
      f"{max(r['wgmma_kernel_tflops'] for r in table):,.0f} TFLOP/s)")"""),
    md("""The teaching kernel was never meant to be fast, and the gap is not about memory: it moves few bytes
(chapter 4 showed why), but its arithmetic runs on the wrong units. To use the tensor cores, a kernel must hand
them 16-bit inputs (fp16 or bf16) laid out exactly as they expect, keep them busy while the next tiles load, and
do the softmax in between without a round trip through memory. That is what the rest of this kernel is about."""),
    md("""## 2. The kernel beside the NumPy code

`kernels/flash_fwd_mma.cu` runs FlashAttention-2's loop: one thread block per query block $Q_i$ (and per batch and
head), streaming the key blocks $K_j, V_j$ through shared memory (the GPU's SRAM). Below, each step of the kernel
is shown beside the same step of `_forward_fa2` in `flashviz/tiled.py`. The snippets are cut from the two files
**when you run the cell**, by searching for marker text, so they are always the code that runs. Line numbers are
those of the files.

A few Hopper terms first, one or two sentences each:

* **Warp, warpgroup.** A *warp* is 32 threads that execute together. A *warpgroup* is 4 consecutive warps,
  128 threads. Hopper's tensor-core instruction is issued by a whole warpgroup. Here each warpgroup owns 64 query
  rows, so a block of $B_r$ rows has $B_r/64$ warpgroups.
* **wgmma** (`wgmma.mma_async`, *warpgroup matrix multiply-accumulate*). One instruction multiplies a 64×16 tile
  by a 16×$n$ tile ($n$ up to 256) and adds the result to fp32 accumulators held in the warpgroup's registers.
  It is *asynchronous*: the warpgroup issues a batch, commits it, and waits for it later (`wgmma_commit`,
  `wgmma_wait0`). Operand A comes from shared memory or from registers, operand B from shared memory.
* **Descriptor.** wgmma does not take addresses of individual elements. It reads a tile from shared memory
  described by one 64-bit *matrix descriptor*: the start address, the byte distance between groups of 8 rows,
  and the swizzle mode. `desc128(...)` builds it.
* **128-byte swizzle.** Shared memory has 32 banks. If the 8 rows of a tile were stored plainly, reading a column
  of them would hit the same banks 8 times in a row. With the swizzle, the 16-byte chunk $c$ of row $r$ is stored
  at chunk position $c \\oplus (r \\bmod 8)$ (XOR), so the 8 rows spread over all the banks. wgmma expects
  exactly this layout; `load_tile` writes it (`((cc & 7) ^ (r & 7)) << 4`).
* **cp.async.** An asynchronous copy of 16 bytes from global memory (HBM) into shared memory, without passing
  through registers. The kernel starts the copy of $K_{j+1}$ and $V_{j+1}$ and computes on $K_j, V_j$ while it
  lands: two *stages* of each tile in shared memory (double buffering). `cp_async_wait<1>` waits until all but
  the newest group of copies are done. `fence_proxy_async` then makes the copied bytes visible to the tensor
  cores, which read shared memory through a separate path (the "async proxy")."""),
    md("""### Load the tiles

NumPy slices $Q_i$ once per query block and $K_j, V_j$ once per key block. The kernel copies the same tiles into
swizzled shared memory with `cp.async`: $Q_i$, $K_0$ and $V_0$ before the loop, then, at the top of step $j$, it
waits for $K_j$ and starts loading $K_{j+1}$ into the other stage."""),
    code("""side_by_side("load")"""),
    md("""### $S_{ij} = Q_i K_j^\\top$

One line in NumPy. On the GPU: $d/16$ wgmma instructions, each multiplying a 64×16 slice of $Q_i$ (this
warpgroup's rows) by a 16×$B_c$ slice of $K_j^\\top$, both read from shared memory through descriptors. The products
accumulate in fp32 registers: $S_{ij}$ never exists in memory, not even in shared memory. NumPy multiplies by the
softmax scale $1/\\sqrt d$ here; the kernel keeps the raw scores and folds the scale into the exponential below."""),
    code("""side_by_side("S")"""),
    md("""### Mask

Both set masked scores to a true $-\\infty$. NumPy masks only tiles that a causal diagonal crosses (`"partial"`
tiles; tiles wholly above it are never visited, see `n_key_blocks_visible`). The kernel does the same: `Tc`
counts only the key tiles a query block can see, and only *edge* tiles (the diagonal, or keys past $N_k$) pay for
the comparisons. Each thread holds 2 rows × $B_c/4$ columns of $S_{ij}$ and knows which ones they are from its
lane number."""),
    code("""side_by_side("mask")"""),
    md("""### Online softmax, in registers

The same update as chapter 2: new row max $m$, the rescale factor $\\alpha = e^{m_\\text{old} - m_\\text{new}}$,
$P_{ij} = e^{S_{ij} - m}$, the row sum $\\ell$, and $O_i$ rescaled by $\\alpha$. Two differences, both for speed:

* A row of $S_{ij}$ is spread over 4 threads (lanes), so the row max is combined with two `__shfl_xor_sync`
  exchanges between them. Each thread's $\\ell$ stays partial until the end.
* The kernel computes $e^x$ as $2^{x \\log_2 e}$ with the hardware's fast `ex2`, with the softmax scale and
  $\\log_2 e$ folded into one multiplier, `scale_log2`, and one fused multiply-add per score."""),
    code("""side_by_side("softmax")"""),
    md("""### $P_{ij}$ never leaves the registers

The trick of this kernel. The fp32 layout in which wgmma *returns* $S_{ij}$ happens to be exactly the layout in
which wgmma *accepts* operand A from registers. So $P_{ij}$ is converted to fp16 (or bf16) in place, two values per
32-bit register (`pack2`), and fed straight back to the tensor cores. NumPy keeps $P_{ij}$ in full precision; this
rounding of $P$ to 16 bits is the kernel's main source of error (section 5 measures it)."""),
    code("""side_by_side("P")"""),
    md("""### $O_i \\leftarrow \\alpha\\,O_i + P_{ij} V_j$

Wait for $V_j$, start loading $V_{j+1}$, then $B_c/16$ wgmma instructions with A = $P_{ij}$ from registers and
B = $V_j$ from shared memory, accumulating into $O_i$ (fp32 registers, already rescaled by $\\alpha$ above).
$V_j$ is read "transposed" (its rows are the $k$ dimension of this product), which the descriptor handles."""),
    code("""side_by_side("PV")"""),
    md("""### Epilogue: write $O$ and $\\mathrm{lse}$ once

After the last key tile: the 4 partial sums of each row are added, $O_i / \\ell_i$ is rounded to 16 bits and written
to HBM, and the log-sum-exp $\\mathrm{lse}_i = m_i + \\log \\ell_i$ (in the natural log, fp32, for the backward pass
of chapter 6). A row that saw no key writes $O = 0$ and $\\mathrm{lse} = -\\infty$, as in NumPy."""),
    code("""side_by_side("epilogue")"""),
    md("""## 3. The benchmark

The recorded benchmark times every implementation on the same inputs: 16k tokens per batch (B·N = 16,384), a model
width of 2048 (H = 2048/d heads), fp16, with and without a causal mask. *SDPA* is PyTorch's
`scaled_dot_product_attention` with one backend forced: *flash* is FlashAttention-2 (Dao 2023), *cuDNN* is NVIDIA's
fused attention, *memory-efficient* is xFormers' kernel. *mma.sync* is the same algorithm as our wgmma kernel written
with the older Ampere instruction (`kernels/flash_fwd_mma_sm80.cu`, for GPUs before Hopper). TFLOP/s counts the
two matrix products, $4 \\cdot B H N^2 d$ FLOPs, halved with a causal mask (the FlashAttention convention).

**How it is timed.** Every implementation is called the way a user calls it, `flashviz.gpu.flash_forward_mma(q, k, v)`
for ours and `F.scaled_dot_product_attention(q, k, v)` for SDPA, and timed three ways in the same run
(`flashviz/gpu/timing.py`):

* **public call**, the headline: CUDA events around each call, calls issued back to back, median. This is what a
  user sees. If the host takes longer to issue a call than the GPU takes to run it, this time is the host's.
* **kernel-only**: the durations of the GPU kernels that one call launches, from the profiler, summed per call,
  median. Host time is not in it.
* **host time per call**: the wall-clock microseconds the host spends inside one call, with calls queued without
  waiting for the GPU, median.

A ratio always compares like with like: our public call against SDPA's public call, our kernel-only time against
SDPA's kernel-only time. Ratios are *their time ÷ ours*, so a ratio above 1 means ours is faster. The figure plots
TFLOP/s by public call; the table under it gives both methods and the host time."""),
    code("""with plt.ioff():
    fig = plot_mma_benchmark(mma, figsize=(9, 6.6))
fig.canvas.toolbar_visible = fig.canvas.header_visible = False   # the toolbar would cover the axis labels
fig.canvas"""),
    code("""print("wgmma kernel against SDPA: their time ÷ ours, the same method on both sides (above 1: ours is faster)")
print(f"{'':>19}│ {'public call':^19} │ {'kernel-only':^20} │ {'host µs per call':^17} │ mma.sync")
print(f"{'N':>6} {'d':>4} {'causal':>6} │ {'TFLOP/s':>7} {'÷FA2':>5} {'÷cuDNN':>6} │ {'÷FA2':>5} {'÷cuDNN':>6} "
      f"{'ceiling':>7} │ {'ours':>5} {'FA2':>5} {'cuDNN':>5} │ {'÷FA2':>8}")
for r in table:
    print(f"{r['N']:>6} {r['d']:>4} {'yes' if r['causal'] else 'no':>6} │ {r['wgmma_call_tflops']:>7.0f} "
          f"{r['wgmma_call_vs_sdpa_flash']:>5.2f} {r['wgmma_call_vs_sdpa_cudnn']:>6.2f} │ "
          f"{r['wgmma_kernel_vs_sdpa_flash']:>5.2f} {r['wgmma_kernel_vs_sdpa_cudnn']:>6.2f} "
          f"{100 * r['wgmma_matmul_share']:>6.0f}% │ {r['wgmma_host_us']:>5.0f} {r['sdpa_flash_host_us']:>5.0f} "
          f"{r['sdpa_cudnn_host_us']:>5.0f} │ {r['mmasync_call_vs_sdpa_flash']:>8.2f}")
print("FA2 = SDPA-flash (FlashAttention-2); ceiling = kernel-only TFLOP/s ÷ the measured fp16 matmul rate; "
      "mma.sync ÷FA2 by public call")"""),
    code("""def span(rows, key):
    lo, hi = ratio_span(rows, key)
    return f"{lo:.2f}–{hi:.2f}x"

Ns = sorted({r["N"] for r in table})
from1k = [r for r in table if r["N"] >= 1024]
print(f"wgmma kernel, their time ÷ ours over d = 64 and 128, with and without mask:")
print(f"{'':<56} {'public call':>12} {'kernel-only':>12}")
for label, rows, other in ((f"vs FlashAttention-2 (SDPA-flash), N ≥ 1024", from1k, "sdpa_flash"),
                           (f"vs FlashAttention-2 (SDPA-flash), every N ({Ns[0]}–{Ns[-1]})", table, "sdpa_flash"),
                           (f"vs SDPA-cuDNN, every N", table, "sdpa_cudnn")):
    print(f"  {label:<54} {span(rows, f'wgmma_call_vs_{other}'):>12} {span(rows, f'wgmma_kernel_vs_{other}'):>12}")
print(f"  {'mma.sync kernel vs FlashAttention-2, every N':<54} {span(table, 'mmasync_call_vs_sdpa_flash'):>12} "
      f"{span(table, 'mmasync_kernel_vs_sdpa_flash'):>12}")
lo_fa2 = min(ratio_span(table, f"wgmma_{m}_vs_sdpa_flash")[0] for m in ("call", "kernel"))
hi_cu = max(ratio_span(table, f"wgmma_{m}_vs_sdpa_cudnn")[1] for m in ("call", "kernel"))
print(f"→ by both methods, the wgmma kernel is {'faster than FlashAttention-2 in every case' if lo_fa2 > 1 else 'not always faster than FlashAttention-2'}"
      f" and {'slower than cuDNN in every case' if hi_cu < 1 else 'sometimes faster than cuDNN'}")
top = max(table, key=lambda r: r["wgmma_call_tflops"])
print(f"peak: {top['wgmma_call_tflops']:.0f} TFLOP/s by public call (d = {top['d']}, N = {top['N']}, "
      f"{'causal' if top['causal'] else 'no mask'}); kernel-only peak {max(r['wgmma_kernel_tflops'] for r in table):.0f} TFLOP/s")
print(f"share of the matmul ceiling (kernel-only), N ≥ 1024: {100 * ratio_span(from1k, 'wgmma_matmul_share')[0]:.0f}–"
      f"{100 * ratio_span(from1k, 'wgmma_matmul_share')[1]:.0f}%")"""),
    md("""**Why the method matters.** Earlier versions of this chapter and of the README said our kernel ran at
1.13–1.31x the speed of FlashAttention-2 for N ≥ 2048. That figure divided SDPA's *public call* by our *bare kernel
launch* (outputs allocated in advance, no checks, no Python around it): not like for like. Our public call then spent
190–490 µs of Python on the host per call (it read and hashed the kernel's source file, built a stream object and
packed the arguments on every call; `benchmarks/NOTES.md` tells the story), against 15–60 µs for SDPA. Through the public
call, as a user would time it, we were then slower than FlashAttention-2 in some shapes. The call is lean now, and the
comparison above is public call against public call, kernel-only against kernel-only.

Host time matters most when the kernel is short: at small N, or with few heads. The GPU cannot start a kernel before
the host has launched it, so when calls follow each other, a call can take no less than its host time. In this
benchmark every call carries 16,384 tokens, so even at N = 512 the kernel runs long enough to hide today's host time.
The old host time was about as long as these kernels, or longer:"""),
    code("""OLD_HOST_US = (190, 490)   # our public call's host time per call before 2026-12-01 (benchmarks/NOTES.md, issue #9)
small = [r for r in table if r["N"] == Ns[0]]
for r in small:
    k_us = 1000 * r["wgmma_kernel_ms"]
    print(f"N = {r['N']}, d = {r['d']:>3}, {'causal ' if r['causal'] else 'no mask'}: kernel-only {k_us:4.0f} µs │ "
          f"host per call: ours {r['wgmma_host_us']:3.0f} µs ({100 * r['wgmma_host_us'] / k_us:2.0f}% of the kernel), "
          f"SDPA-flash {r['sdpa_flash_host_us']:3.0f} µs")
k_small = [1000 * r["wgmma_kernel_ms"] for r in small]
print(f"the old {OLD_HOST_US[0]}–{OLD_HOST_US[1]} µs of host time per call = {OLD_HOST_US[0] / max(k_small):.1f}–"
      f"{OLD_HOST_US[1] / min(k_small):.1f}x these kernel times: close to them or above: a public call timed then "
      f"measured the host as much as the kernel")
host = {k: float(np.median([r[k + "_host_us"] for r in table])) for k in ("wgmma", "sdpa_flash", "sdpa_cudnn")}
print(f"host µs per call, median over the {len(table)} shapes: ours {host['wgmma']:.0f}, SDPA-flash {host['sdpa_flash']:.0f}, "
      f"SDPA-cuDNN {host['sdpa_cudnn']:.0f}; ours ≤ SDPA-flash's in "
      f"{sum(r['wgmma_host_us'] <= r['sdpa_flash_host_us'] for r in table)} of {len(table)} shapes")
print(f"host time ÷ kernel-only time, ours: at most {100 * max(r['wgmma_host_us'] / (1000 * r['wgmma_kernel_ms']) for r in table):.0f}% "
      f"in this benchmark")"""),
    md("""How to read it. FlashAttention-2 was written for the A100 (Ampere): it uses `mma.sync`, not wgmma, also on
a Hopper GPU. Our own `mma.sync` kernel is the fair comparison with it; the wgmma kernel is the same algorithm with
Hopper's instruction. cuDNN's kernel is faster still, and the gap is not about bytes: at these sizes attention is
compute-bound (section 4 and exercise 3 show why). It is about keeping the tensor cores busy. In our kernel each
warpgroup waits for its own matrix product before it starts the softmax, so unless another block on the same SM has
work ready, the tensor cores idle during the softmax, and at $d = 64$ its exponentials alone cost a large part of
the matrix products' time (`benchmarks/NOTES.md` counts them). FlashAttention-3 (Shah et al. 2024) describes how Hopper
kernels hide that: dedicated warps that only load tiles (with Hopper's TMA copy engine), and the softmax of one tile
overlapped with the matrix products of another.

**Is it correct?** Every case of the correctness grid compares the kernel's $O$ with dense float64 attention
on the same (rounded) inputs, and its $\\mathrm{lse}$ too. The grid covers odd shapes on purpose:"""),
    code("""grid = mma["check"]
print("shapes (Nq, Nk):", sorted({(r["Nq"], r["Nk"]) for r in grid}))
print("blocks (Br, Bc):", sorted({(r["Br"], r["Bc"]) for r in grid}), "| d:", sorted({r["d"] for r in grid}),
      "| causal: both")
for (variant, dtype), s in check_summary(mma).items():
    print(f"{variant:>8} {dtype:>8}: {s['passed']}/{s['cases']} pass, worst relative error {s['worst_rel_err']:.1e} "
          f"(tolerance {s['tol']:.0e}), NaN: {'yes' if s['nan'] else 'none'}")"""),
    md("""## 4. The block-size experiment on real hardware

Chapter 4 predicted, with the IO model, that larger query blocks $B_r$ move fewer bytes: $K$ and $V$ are re-read
once per query block. The paper measured this (its Figure 2, the block-size panel): fewer HBM accesses, less
time, until other costs take over. Here is the same experiment on the H200 with the wgmma kernel: the time of every
$(B_r, B_c)$ the kernel supports, beside the bytes the IO model predicts for it. The sweep compares one kernel with
itself, so its times are **kernel-only** (the profiler's kernel durations, median; section 3): the host's share of a
call is the same for every block size and would only blur the differences."""),
    code("""with plt.ioff():
    fig = plot_block_sweep(mma, d=64, figsize=(10, 3.8))
fig.canvas.toolbar_visible = fig.canvas.header_visible = False   # the toolbar would cover the axis labels
fig.canvas"""),
    code("""by_blocks = {(r["Br"], r["Bc"]): r for r in dram["rows"] if r["impl"] == "mma"}
print(f"{'':>24}│ {'kernel-only':^14} │")
print(f"{'Br×Bc':>8} {'smem':>8} {'regs':>5} │ {'ms':>6} {'TFLOP/s':>7} │ {'IO model':>9} {'measured DRAM':>14}")
for r in mma_sweep(mma, d=64, causal=False):
    m = by_blocks.get((r["Br"], r["Bc"]))
    meas = f"{m['dram_bytes'] / 1e6:>11.1f} MB" if m else f"{'—':>14}"
    print(f"{r['Br']:>4}×{r['Bc']:<3} {r['smem_bytes']:>8,} {r['regs']:>5} │ {r['ms']:>6.3f} {r['tflops']:>7.0f} │ "
          f"{r['model_hbm_bytes'] / 1e9:>6.2f} GB {meas}")
sweep64 = mma_sweep(mma, d=64, causal=False)
fast, slow = min(sweep64, key=lambda r: r["ms"]), max(sweep64, key=lambda r: r["ms"])
print(f"kernel-only time: {fast['Br']}×{fast['Bc']} is fastest, {slow['Br']}×{slow['Bc']} slowest: "
      f"{slow['ms'] / fast['ms']:.2f}x apart")"""),
    md("""The IO model halves its bytes when $B_r$ doubles, but the time does not follow. Nsight Compute measured the
DRAM bytes that actually crossed between HBM and the chip in one forward call (`dram__bytes_read.sum` +
`dram__bytes_write.sum`) for the wgmma kernel, the teaching kernel and naive CuPy attention (which writes $S$ to HBM):"""),
    code("""with plt.ioff():
    fig = plot_dram(dram, figsize=(9, 4.2))
fig.canvas.toolbar_visible = fig.canvas.header_visible = False   # the toolbar would cover the axis labels
fig.canvas"""),
    md("""(The figure labels its bars in MiB and GiB, $2^{20}$ and $2^{30}$ bytes; the text below uses MB and GB,
$10^6$ and $10^9$ bytes, like the benchmark's GB/s.)

### Where the measurement departs from the model

**(a) The K/V re-reads hit the L2 cache, not HBM.** The IO model has two levels, HBM and SRAM. A GPU has a third
in between: the L2 cache, shared by all SMs. The kernel launches its blocks query block first (`blockIdx.x` is $i$),
and the GPU starts blocks roughly in index order, so the query blocks of one head run at about the same time and
ask for the same $K_j, V_j$. The first request brings a tile from HBM; the others find it in L2. So the DRAM traffic
is about the **compulsory bytes**: $Q$, $K$, $V$ read once, $O$ and $\\mathrm{lse}$ written once."""),
    code("""r0 = dram["rows"][0]
B, H, N, d = r0["B"], r0["H"], r0["N"], r0["d"]
print(f"N = {N}, d = {d}, B·H = {B * H}")
for impl, item, name in (("mma", 2, "wgmma kernel, fp16"), ("teaching", 4, "teaching kernel, fp32")):
    rows = [r for r in dram["rows"] if r["impl"] == impl]
    need = compulsory_bytes(rows[0], itemsize=item)
    model = [r["model_hbm_bytes"] for r in rows]
    meas = [r["dram_bytes"] for r in rows]
    print(f"{name}: IO model {min(model) / 1e9:.1f}–{max(model) / 1e9:.1f} GB over its blocks; measured "
          f"{min(meas) / 1e6:.0f}–{max(meas) / 1e6:.0f} MB; compulsory {need / 1e6:.0f} MB "
          f"→ measured / compulsory = {min(meas) / need:.3f}–{max(meas) / need:.3f}")
    QKV = 3 * B * H * N * d * item
    reads = [r["dram_read_bytes"] for r in rows]
    print(f"    reads {min(reads) / 1e6:.1f}–{max(reads) / 1e6:.1f} MB against Q + K + V = {QKV / 1e6:.1f} MB: "
          f"each byte of K and V came from HBM {max(reads) / QKV:.3f} times at most, not Tr = N/Br times")"""),
    md("""Why does it fit? Count what can be in flight. Each SM runs at most 2048 threads (Hopper, compute capability 9.0),
a block of $B_r$ query rows has $2B_r$ threads, and one head has $N/B_r$ query blocks. So at most
$\\text{SMs} \\times 2048 / (2 B_r) \\,/\\, (N/B_r) = \\text{SMs} \\times 1024 / N$ heads are in flight, whatever $B_r$,
and their $K$ and $V$ must fit in L2 for every re-read to hit. The L2 size is not in the results file; the constant below
was read from an H200's driver (`cuDeviceGetAttribute`, `CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE`)."""),
    code("""L2_BYTES = 62_914_560          # an H200's L2 cache, read from its driver (cuDeviceGetAttribute), 2026-11-29
MAX_THREADS_PER_SM = 2048      # Hopper (compute capability 9.0)
sms = dram["env"]["sm_count"]
KV_per_head = 2 * N * d * 2    # K and V of one head, fp16
for Br in (64, 128):
    blocks = sms * MAX_THREADS_PER_SM // mma_threads(Br)
    heads = blocks / (N // Br)
    print(f"Br = {Br:>3}: at most {blocks:,} blocks in flight = {heads:.0f} heads; their K and V: "
          f"{heads * KV_per_head / 2**20:.0f} MiB of the {L2_BYTES / 2**20:.0f} MiB L2 ({sms} SMs)")"""),
    md("""(In practice fewer blocks fit: registers and shared memory limit them first. The bound only needs to be small.)

**(b) Naive attention moves far more than the model's $4N^2$ elements.** Algorithm 0 (chapter 1) writes $S$, reads
it, writes $P$, reads it: four passes over an $N \\times N$ matrix. A real implementation runs the softmax as
separate elementwise kernels (scale, row max, subtract, exp, row sum, divide), and each one reads and writes the
whole matrix again:"""),
    code("""nv = next(r for r in dram["rows"] if r["impl"] == "naive")
S_bytes = nv["B"] * nv["H"] * nv["N"] ** 2 * nv["itemsize"]
print(f"one S (all heads, fp32): {S_bytes / 1e9:.2f} GB")
print(f"IO model (Algorithm 0): {nv['model_hbm_bytes'] / 1e9:.1f} GB = {nv['model_hbm_bytes'] / S_bytes:.1f} passes over S")
print(f"measured              : {nv['dram_bytes'] / 1e9:.1f} GB = {nv['dram_bytes'] / S_bytes:.1f} passes over S "
      f"({nv['dram_bytes'] / nv['model_hbm_bytes']:.1f}x the model)")
print(f"{nv['kernels']} kernel launches, of these kinds:", ", ".join(nv["kernel_names"]))"""),
    md("""**(c) The fp16 kernel writes slightly less than its output.** $O$ and $\\mathrm{lse}$ are written once, yet
the measured write bytes are a little below their size. Writes go to L2 first and reach HBM when a line is evicted;
when the kernel ends, the last lines written can still sit in L2 (dirty), and the profiler stops counting before they
are flushed."""),
    code("""for impl, item in (("mma", 2), ("teaching", 4)):
    rows = [r for r in dram["rows"] if r["impl"] == impl]
    out = B * H * N * d * item + 4 * B * H * N
    w = [r["dram_write_bytes"] for r in rows]
    print(f"{impl:>8}: O + lse = {out / 1e6:.1f} MB; measured writes {min(w) / 1e6:.1f}–{max(w) / 1e6:.1f} MB "
          f"= {100 * min(w) / out:.0f}–{100 * max(w) / out:.0f}% of it")"""),
    md("""**What still holds.** The block size still changes the time, by a lot, while the DRAM bytes hardly move. At this
size the kernel is limited by its arithmetic and by how many blocks fit on an SM (registers, shared memory), not by
HBM. The paper's model is right that tiling removes the $N^2$ traffic (compare naive above); which tile is fastest
is decided by the chip, so it is measured, not computed."""),
    code("""meas = [r["dram_bytes"] for r in dram["rows"] if r["impl"] == "mma"]
print(f"over the wgmma kernel's block sizes: kernel-only time varies {slow['ms'] / fast['ms']:.2f}x, "
      f"measured DRAM bytes {max(meas) / min(meas):.3f}x, IO model bytes "
      f"{max(r['model_hbm_bytes'] for r in sweep64) / min(r['model_hbm_bytes'] for r in sweep64):.1f}x")
hbm_ms = compulsory_bytes(fast) / (ceil["copy_GBps"] * 1e9) * 1e3
mm_ms = 4 * fast["B"] * fast["H"] * fast["N"] ** 2 * fast["d"] / (ceil["matmul_fp16_TFLOPs"] * 1e12) * 1e3
print(f"fastest block size: {fast['ms']:.2f} ms kernel-only; moving the compulsory bytes at the copy bandwidth takes {hbm_ms:.3f} ms "
      f"({100 * hbm_ms / fast['ms']:.0f}% of it); the FLOPs at the matmul ceiling take {mm_ms:.2f} ms "
      f"({100 * mm_ms / fast['ms']:.0f}%)")
second = sorted(sweep64, key=lambda r: r["ms"])[1]
print(f"the two fastest, {fast['Br']}×{fast['Bc']} and {second['Br']}×{second['Bc']}, are "
      f"{100 * (second['ms'] / fast['ms'] - 1):.1f}% apart (kernel-only); the runner's default for d = 64 without mask is "
      f"{default_blocks(64)[0]}×{default_blocks(64)[1]}")"""),
    md("""## 5. Break it

### (a) A GPU with less shared memory

The kernel keeps $Q_i$ and two stages each of $K_j$ and $V_j$ in shared memory: $2(B_r d + 4 B_c d)$ bytes in fp16
(plus 1 KiB of alignment slack for wgmma). The H200 lets a block opt in to far more than most GPUs. An RTX 4090
(Ada, compute capability 8.9) allows 99 KiB a block; it has no wgmma at all (that is Hopper only), so it would run
the `mma.sync` kernel. Take the largest tile the kernels offer at $d = 128$, $128 \\times 128$, which the H200 runs
without complaint, and ask the 4090 for it:"""),
    code("""RTX_4090 = 101_376        # opt-in shared memory per block, compute capability 8.9: 99 KiB
best128 = next(r for r in mma_sweep(mma, variant="wgmma", d=128, causal=False) if (r["Br"], r["Bc"]) == (128, 128))
print(f"on the H200 at d = 128: {best128['Br']}×{best128['Bc']} ran at {best128['tflops']:.0f} TFLOP/s (kernel-only) "
      f"with {best128['smem_bytes']:,} bytes of shared memory a block")
try:
    need = check_mma_launch(best128["Br"], best128["Bc"], 128, "mma.sync", device_limit=RTX_4090)
    print(f"fits: {need:,} bytes")
except ValueError as exc:
    print("ValueError:", exc)"""),
    md("""The runner checks this before launching: without the check, the launch fails with an unhelpful CUDA error.
Which block sizes fit where, for $d = 128$:"""),
    code("""limits = {"H200": mma["env"]["smem_per_block_optin"], "A100": SRAM_BUDGETS["A100: 163 KiB"], "RTX 4090": RTX_4090}
for gpu, limit in limits.items():
    fits = ", ".join(f"{a}×{b}" for a, b in mma_blocks(128, "mma.sync", device_limit=limit))
    print(f"{gpu:>8} ({limit:>7,} B a block): mma.sync d = 128 fits {fits}")"""),
    md("""### (b) bf16 against fp16

The kernel reads fp16 or bf16. Both are 16 bits, split differently: fp16 has 10 stored mantissa bits (11 with the
implicit one) and a small range; bf16 has 7 (8 with the implicit one) and float32's range. So bf16 rounds about
$2^{3} = 8$ times more coarsely, and the correctness grid allows bf16 a larger error. By how much should it? NumPy can simulate the kernel's roundings: round the inputs to 16 bits, compute in float64, round
$P_{ij}$ to 16 bits before $P V$ (the step above), and round $O$ when it is written. (NumPy has no bf16 type:
`round_to` keeps the top 16 bits of the float32, rounding to nearest even, as the GPU's conversion does.)"""),
    code("""def round_to(x, dtype):
    \"\"\"x rounded to float16 or bfloat16 (round to nearest even), returned as float64.\"\"\"
    x32 = np.asarray(x, np.float32)
    if dtype == "float16":
        return x32.astype(np.float16).astype(np.float64)
    bits = x32.view(np.uint32)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32).astype(np.float64)

def rel_err(A, B):
    return np.linalg.norm(A - B) / np.linalg.norm(B)

rng = np.random.default_rng(0)
N, d = 1024, 64
Q, K, V = (rng.standard_normal((N, d)) for _ in range(3))
summary, sim = check_summary(mma), {}
for dtype, eps in (("float16", 2.0**-11), ("bfloat16", 2.0**-8)):
    q, k, v = (round_to(x, dtype) for x in (Q, K, V))
    O_ref = fv.attention(q, k, v)                           # float64 on the rounded inputs: what the grid compares with
    S = q @ k.T / np.sqrt(d)
    P = np.exp(S - S.max(axis=1, keepdims=True))
    l = P.sum(axis=1, keepdims=True)                        # the kernel sums P in fp32, before rounding it
    O_sim = round_to((round_to(P, dtype) @ v) / l, dtype)    # P and O rounded, as in the kernel
    rec = summary[("wgmma", dtype)]
    sim[dtype] = rel_err(O_sim, O_ref)
    print(f"{dtype:>8}: unit roundoff {eps:.1e} │ simulated kernel error {sim[dtype]:.2e} │ recorded worst "
          f"{rec['worst_rel_err']:.2e} (simulated / recorded = {sim[dtype] / rec['worst_rel_err']:.2f}) │ "
          f"tolerance {rec['tol']:.0e}")
    print(f"{'':>8}  rounding the inputs alone (before the kernel): {rel_err(O_ref, fv.attention(Q, K, V)):.1e}")
rec16, rec_bf = summary[("wgmma", "float16")], summary[("wgmma", "bfloat16")]
print(f"bf16 / fp16: simulated {sim['bfloat16'] / sim['float16']:.1f}x, recorded {rec_bf['worst_rel_err'] / rec16['worst_rel_err']:.1f}x, "
      f"tolerance {rec_bf['tol'] / rec16['tol']:.0f}x")"""),
    md("""Compare the simulated and recorded columns: two roundings to 16 bits, of $P$ and of $O$, account for the kernel's
error, and bf16's error is about $2^3$ times fp16's, as the mantissas predict. The tolerances leave room above it. Rounding the inputs
themselves costs about as much again, but that happens before the kernel (the grid compares on rounded inputs).
bf16 trades precision for range: it cannot overflow where fp16 would (fp16's largest number is 65,504), which is why
training often prefers it, but every result carries about 3 fewer correct bits."""),
    md("""## 6. The live panel

On a machine with an NVIDIA GPU (Ampere or newer), CuPy and PyTorch, the panel compiles the kernel that GPU
supports (wgmma on Hopper, `mma.sync` otherwise) for the chosen $N$, $d$, mask, dtype and blocks, and times it against
PyTorch's SDPA on the same inputs (*Run*), or times every block size it supports (*Sweep*). Without a GPU, its
buttons are disabled and it shows the recorded measurements for the chosen settings: the block sweep at this $d$
and mask (the selected $B_r \\times B_c$ highlighted, ★ the runner's default) and the benchmark at this $N$.
Try $d = 128$, then the causal mask."""),
    code("""panel = TensorCorePanel(N=4096, d=64)
panel"""),
    md("""To measure again and replace the committed files, on a machine with an NVIDIA GPU (the wgmma kernel needs
Hopper: H100 or H200), CuPy and PyTorch:

```bash
.venv/bin/pip install -e ".[gpu-cuda13]" torch      # or ".[gpu]" for a CUDA 12 driver
.venv/bin/flashviz bench --out benchmarks/results  # = benchmarks/bench_mma.py: ceilings, correctness grid,
                                                   #   benchmark against SDPA, block sweep
.venv/bin/python benchmarks/profile_dram.py        # DRAM bytes with Nsight Compute (needs ncu)
```

Each writes a new JSON under `benchmarks/results/` named after the GPU and the date; this chapter reads the newest
one. `benchmarks/NOTES.md` records what was predicted and measured for each version of the kernel, including two
attempts to overlap the softmax with the tensor cores that did not pay off, and why."""),
    md("""## 7. Exercises

Each check prints one line: ✓ when your answer is right, ✗ with a hint when it is not. The cells start in a wrong state
on purpose. Replace the `None`s, then run the cell again.

**Exercise 1.** One forward call with $N = 4096$, $d = 64$, B·H = 128 (batch × heads), fp16. What is the fewest number of
bytes it must move between HBM and the chip? ($Q$, $K$, $V$ must be read, $O$ and $\\mathrm{lse}$ written; FlashAttention-2
keeps $\\mathrm{lse}$ in float32.) Compare your answer with the measured DRAM bytes in section 4."""),
    code("""my_bytes = None        # ← bytes
check_compulsory_bytes(my_bytes, N=4096, d=64, BH=128, itemsize=2);"""),
    md("""**Exercise 2.** From the recorded block sweep (section 4, $d = 64$, no mask, kernel-only times), which $(B_r, B_c)$
was fastest?
Does the IO model agree? (When two are close, remember that a single run is not the last word: `benchmarks/NOTES.md`
reports a spread of a few percent between runs on the same machine.)"""),
    code("""my_blocks = None       # ← (Br, Bc)
check_fastest_blocks(my_blocks, d=64, causal=False);"""),
    md("""**Exercise 3.** The *arithmetic intensity* of the same call is its FLOPs ($4 \\cdot BH \\cdot N^2 d$) per compulsory byte.
A kernel whose intensity is above the GPU's *ridge point* (matmul FLOP/s ÷ copy bytes/s, from the recorded ceilings
in section 1) can be compute-bound; below it, it is memory-bound. Which is it here: `"compute"` or `"memory"`?"""),
    code("""my_intensity = None    # ← FLOPs per byte
my_bound = None        # ← "compute" or "memory"
check_intensity(my_intensity, my_bound, N=4096, d=64, BH=128);"""),
    md("""**What to take away.** The tensor-core kernel is the same algorithm as the NumPy code, step for step; what
changes is where each number lives (registers, shared memory in the layout the tensor cores read) and that loads
overlap with arithmetic. On a GPU with a large L2 cache, the IO model's re-reads of $K$ and $V$ mostly never reach
HBM: the bytes that do are close to the compulsory ones, and what the tiling saves is the $N^2$ traffic of $S$ and $P$.
Past that, speed is decided by keeping the tensor cores busy."""),
]
nb = nbf.v4.new_notebook(cells=cells, metadata={
    "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
    "language_info": {"name": "python"}})
out = Path(__file__).resolve().parents[1] / "notebooks" / "07_gpu_kernel.ipynb"
nbf.write(nb, out)
print("wrote", out)
