"""Writes notebooks/00_start_here.ipynb (no outputs). Edit here, re-run, commit both."""

from pathlib import Path

import nbformat as nbf

md, code = nbf.v4.new_markdown_cell, nbf.v4.new_code_cell
cells = [
    md("""# FlashAttention, seen and checked — start here

FlashAttention (Dao et al. 2022) computes **exactly** the same function as standard attention,
$O = \\mathrm{softmax}(QK^\\top/\\sqrt{d})\\,V$, yet runs several times faster. It does fewer *byte
movements*, not fewer FLOPs: it never writes the $N \\times N$ score matrix $S$ to the GPU's slow
main memory (HBM), and works tile by tile in fast on-chip SRAM instead.

This notebook has three parts:
1. **The memory wall** — measured on this machine: why moving bytes, not arithmetic, is the bottleneck.
2. **The explainer** — watch the tiled forward pass on real attention inputs, step by step.
3. **The same tiling on a GPU** — a CUDA kernel with your block sizes, timed (or the recorded timings).

Every number below is computed when you run the cell. Run the cells top to bottom (Shift-Enter)."""),
    code("""%matplotlib widget
import time
import numpy as np
import flashviz as fv
from flashviz.iomodel import standard_attention_io, flash_forward_io"""),
    md("""## 1. The memory wall, measured

Standard attention (the paper's *Algorithm 0*) materialises $S = QK^\\top$, then $P = \\mathrm{softmax}(S)$,
then $O = PV$. The matrix products do $2N^2d$ FLOPs each, and they are fast. The softmax in between
does only a handful of operations per element of $S$, but it has to **read and write all $N^2$ elements**,
and usually more than once. Let us time both parts here, with NumPy on this CPU. The same effect is
much stronger on a GPU, where arithmetic is far faster than memory."""),
    code("""N, d = 2048, 64
Q, K, V = fv.data.random_qkv(N, d, dtype=np.float32)

def median_ms(f, repeat=9):
    f()                                           # warm up
    times = []
    for _ in range(repeat):
        t = time.perf_counter(); f(); times.append(time.perf_counter() - t)
    return 1e3 * float(np.median(times))

S = Q @ K.T
T = np.empty_like(S)
t_matmul = median_ms(lambda: Q @ K.T)             # 2·N²·d FLOPs; each loaded value is reused d times
t_pass = median_ms(lambda: np.copyto(T, S))        # one pass over S: read N² floats, write N² floats
def softmax_passes():
    m = S.max(axis=1, keepdims=True)              # read S
    np.subtract(S, m, out=T)                      # read S, write T
    np.exp(T, out=T)                              # read T, write T
    np.divide(T, T.sum(axis=1, keepdims=True), out=T)   # read T; read T, write T
t_softmax = median_ms(softmax_passes)
flops_matmul, flops_softmax = 2 * N * N * d, 5 * N * N   # softmax: max, subtract, exp, sum, divide
print(f"QKᵀ       : {t_matmul:7.2f} ms for {flops_matmul / 1e9:.2f} GFLOP → {flops_matmul / t_matmul / 1e6:7.1f} GFLOP/s")
print(f"softmax   : {t_softmax:7.2f} ms for {flops_softmax / 1e9:.2f} GFLOP → {flops_softmax / t_softmax / 1e6:7.1f} GFLOP/s")
print(f"one pass over S (read + write {2 * N * N * 4 / 2**20:.0f} MiB): {t_pass:.2f} ms")
per_flop = (t_softmax / flops_softmax) / (t_matmul / flops_matmul)
print(f"\\nThe softmax does {flops_matmul / flops_softmax:.0f}x fewer FLOPs than QKᵀ, yet takes "
      f"{t_softmax / t_matmul:.2f}x its time: each softmax FLOP costs {per_flop:.0f}x a matmul FLOP.")
print(f"Its time is about {t_softmax / t_pass:.1f} passes over S: elementwise work is paid in trips through memory.")"""),
    md("""On this CPU the softmax's cost is set by how many times it streams the $N^2$ scores through
memory (and by `exp`), not by its FLOPs; the matrix product reuses every value it loads $d$ times.
On a GPU the gap is far larger: its arithmetic is ~100x faster than its memory.

### What the IO model predicts

`flashviz.iomodel` counts the bytes each algorithm moves between HBM and the chip (closed forms,
the paper's Theorem 2, tested equal to the traces of real runs). Standard attention moves
$4Nd + 4N^2$ elements; the tiled version reads $K$ and $V$ once per query block and never writes $S$
or $P$. In half precision (2-byte elements), $d = 64$, blocks of 128:"""),
    code("""print(f"{'N':>7} {'standard (MiB)':>15} {'tiled (MiB)':>12} {'ratio':>6}")
for n in (1024, 2048, 4096, 8192, 16384):
    std = standard_attention_io(n, n, 64, itemsize=2).hbm_bytes / 2**20
    til = flash_forward_io(n, n, 64, Br=128, Bc=128, itemsize=2).hbm_bytes / 2**20
    print(f"{n:>7} {std:>15.1f} {til:>12.1f} {std / til:>6.1f}")"""),
    md("""The ratio stays near 4 as $N$ grows: standard attention moves $\\approx 4N^2$ elements, the tiled
pass re-reads $K$ and $V$ once per query block, $\\approx 2N^2 d / B_r$ elements, so the saving is
about $2B_r/d$. Larger blocks save more, and the block size is bounded by SRAM: that is the
paper's $\\Theta(N^2 d^2 / M)$ (Theorem 2). Try it: change `Br=128` above to `Br=64` or `256`."""),
    md("""On a real GPU, the measured effect (from `benchmarks/results/`, recorded on an NVIDIA H200 with
the kernel of part 3 — the label says where and when each number was measured). *naive* is CuPy
attention that materialises $S$ in HBM; the kernel keeps each tile of $S$ on chip. B·H is the
number of (batch, head) pairs: every row processes 16,384 tokens in 32 heads."""),
    code("""from flashviz.widgets.gpu_panel import recorded_summary
print(recorded_summary(Br=64, Bc=64))   # the GPU panel below shows every block size"""),
    md("""## 2. The explainer

Below is FlashAttention's forward pass (FlashAttention-2 loop order) running on **real** queries, keys
and values: layer 2, head 0 of the sentence-transformers model *all-MiniLM-L6-v2*, reading the first
chapter of *Alice's Adventures in Wonderland*. Each step of the run is one frame.

* **Left:** the score matrix $S$, tile by tile ($B_r \\times B_c$). The orange box is the tile being
  computed; the shaded band is what is in SRAM now.
* **Middle:** for each row of the current query block, the running max $m$, the running sum $\\ell$,
  and the rescale factor $e^{m_\\text{old} - m_\\text{new}}$ (orange when it fires).
* **Right:** the output accumulator $O_i$ and the rows of $O$ already written to HBM.
* **Bottom:** bytes moved so far against standard attention, and the SRAM working set against a budget.

Press ▶ (Play), or drag the *step* slider. Then try: tick *causal*; change *Br* and *Bc*; switch the
inputs to *adversarial* and untick *rescale* — the "break it" mode that forgets the correction factor."""),
    code("""w = fv.TileExplorer(N=256, d=32, Br=32, Bc=32, causal=False, source="real")
w"""),
    md("""### Check it yourself

The picture is drawn from the trace of one run (`w.result.trace`). Its byte count equals the
closed-form IO model, and its output equals dense float64 attention:"""),
    code("""r, tr = w.result, w.result.trace
model = flash_forward_io(tr.Nq, tr.Nk, tr.d, Br=tr.Br, Bc=tr.Bc, itemsize=tr.itemsize, causal=tr.causal)
print("bytes counted from the run :", r.io.hbm_bytes)
print("bytes from the closed form :", model.hbm_bytes, "→ equal:", r.io == model)
Q, K, V, prov = fv.data.load_real_qkv(N=tr.Nq)
print(f"max |O − O_ref| = {np.abs(r.O - fv.attention(Q, K, V, causal=tr.causal)).max():.1e}")
print("inputs:", prov["model"].split(" via ")[0], "| layer", prov["layer"], "head", prov["head"], "|", prov["text"])"""),
    md("""## 3. The same tiling on a GPU

`kernels/flash_fwd.cu` is the same algorithm in CUDA, with the same names ($Q_i$, $K_j$, $V_j$,
$S_{ij}$, $m_i$, $\\ell_i$, $O_i$), one thread block per (query block, batch·head). The panel runs it
with the explainer's $B_r$ and $B_c$ and times it against naive CuPy attention (which materialises
$S$). Without a GPU it says so and shows the recorded measurements instead."""),
    code("""panel = fv.GPUPanel(w)
panel"""),
    md("""## The lessons, in order

1. [The memory wall](01_memory_wall.ipynb) — arithmetic intensity, measured; why bytes, not FLOPs.
2. [Online softmax](02_online_softmax.ipynb) — a softmax without a whole row: m, l and the rescale.
3. [Tiling](03_tiling.ipynb) — Q_i, K_j, V_j in SRAM; S never leaves the chip.
4. [Block size](04_block_size.ipynb) — bigger tiles move fewer bytes, until SRAM runs out.
5. [Causal masking and loop order](05_causal_and_loop_order.ipynb) — skipped tiles; FA1 vs FA2.
6. [The backward pass](06_backward.ipynb) — recompute P instead of storing it.
7. [The GPU kernel](07_gpu_kernel.ipynb) — the same loop on Hopper's tensor cores, measured against FlashAttention-2.

For a class, `make present` serves all chapters as one page without code cells."""),
]
nb = nbf.v4.new_notebook(cells=cells, metadata={
    "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
    "language_info": {"name": "python"}})
out = Path(__file__).resolve().parents[1] / "notebooks" / "00_start_here.ipynb"
nbf.write(nb, out)
print("wrote", out)
