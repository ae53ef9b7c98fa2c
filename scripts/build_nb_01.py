"""Writes notebooks/01_memory_wall.ipynb (no outputs). Edit here, re-run, commit both."""

from pathlib import Path

import nbformat as nbf

md, code = nbf.v4.new_markdown_cell, nbf.v4.new_code_cell
cells = [
    md("""# 1 · The memory wall

A GPU does arithmetic far faster than it can fetch numbers from its main memory (HBM). An
operation's **arithmetic intensity** — FLOPs done per byte moved — decides which of the two limits
it:

$$ t \\;\\gtrsim\\; \\max\\Big(\\frac{\\text{FLOPs}}{\\text{peak FLOP/s}},\\; \\frac{\\text{bytes}}{\\text{bandwidth}}\\Big) $$

Below the *ridge point* (peak FLOP/s ÷ bandwidth) an operation is **memory-bound**: faster
arithmetic does not help, only moving fewer bytes does. That is FlashAttention's whole argument."""),
    code("""%matplotlib widget
import time
import numpy as np
import matplotlib.pyplot as plt
import flashviz as fv
from flashviz.iomodel import standard_attention_io, flash_forward_io
from flashviz.exercises import memory as ex"""),
    md("""## Measured here: a matrix product and elementwise passes

We time, with NumPy on this machine, `Q @ Kᵀ` (high intensity: every loaded number is used $d$
times) and elementwise passes over an $N\\times N$ matrix (intensity below 1 FLOP/byte)."""),
    code("""def best_s(f, repeat=7):
    \"\"\"Fastest of several runs: the least disturbed by other work on a shared machine.\"\"\"
    f()
    ts = []
    for _ in range(repeat):
        t = time.perf_counter(); f(); ts.append(time.perf_counter() - t)
    return float(np.min(ts))

rows = []
for N in (256, 512, 1024, 2048):
    d = 64
    Q, K, _ = fv.data.random_qkv(N, d, dtype=np.float32)
    S = Q @ K.T
    T = np.empty_like(S)
    t_mm = best_s(lambda: Q @ K.T)
    t_exp = best_s(lambda: np.exp(S, out=T))
    rows.append(dict(N=N, mm_flops=2 * N * N * d, mm_bytes=(2 * N * d + N * N) * 4, mm_s=t_mm,
                     ew_flops=N * N, ew_bytes=2 * N * N * 4, ew_s=t_exp))
print(f"{'N':>5} {'QKᵀ GFLOP/s':>12} {'QKᵀ FLOP/B':>11} {'exp GFLOP/s':>12} {'exp GB/s':>9} {'exp FLOP/B':>11}")
for r in rows:
    print(f"{r['N']:>5} {r['mm_flops'] / r['mm_s'] / 1e9:>12.1f} {r['mm_flops'] / r['mm_bytes']:>11.1f} "
          f"{r['ew_flops'] / r['ew_s'] / 1e9:>12.2f} {r['ew_bytes'] / r['ew_s'] / 1e9:>9.1f} "
          f"{r['ew_flops'] / r['ew_bytes']:>11.3f}")"""),
    md("""The same points on a **roofline** plot: achieved FLOP/s against arithmetic intensity. The
matrix product sits far to the right and far higher; the elementwise pass is pinned to the left,
where only bandwidth matters."""),
    code("""with plt.ioff():
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=90)
for r in rows:
    ax.loglog(r["mm_flops"] / r["mm_bytes"], r["mm_flops"] / r["mm_s"] / 1e9, "o", color="#1f77b4")
    ax.loglog(r["ew_flops"] / r["ew_bytes"], r["ew_flops"] / r["ew_s"] / 1e9, "s", color="#d62728")
    ax.annotate(f"N={r['N']}", (r["mm_flops"] / r["mm_bytes"], r["mm_flops"] / r["mm_s"] / 1e9), fontsize=7)
bw = max(r["ew_bytes"] / r["ew_s"] for r in rows) / 1e9        # the best bandwidth we saw, GB/s
x = np.logspace(-2, 2.5, 50)
ax.loglog(x, bw * x, "--", color="0.5", label=f"bandwidth roof ≈ {bw:.0f} GB/s (measured)")
ax.set_xlabel("arithmetic intensity (FLOP per byte)")
ax.set_ylabel("achieved GFLOP/s")
ax.set_title("measured on this machine: ● QKᵀ   ■ exp over S", fontsize=10)
ax.legend(fontsize=8)
fig.tight_layout()
fig.canvas"""),
    md("""## Standard attention is mostly elementwise traffic

Algorithm 0 writes $S$, reads it back for the softmax, writes $P$, reads it for $PV$: about
$4N^2$ elements, against only $4Nd$ for $Q, K, V, O$. For large $N$ the $N^2$ terms dominate, and
they are exactly the memory-bound part. Computed by the IO model:"""),
    code("""print(f"{'N':>6} {'Q,K,V,O (MiB)':>14} {'S and P (MiB)':>14} {'share of N² terms':>18}")
for N in (1024, 4096, 16384, 65536):
    io = standard_attention_io(N, N, 64, itemsize=2)
    qkvo = sum(io.reads.get(t, 0) + io.writes.get(t, 0) for t in "QKVO")
    sp = io.hbm_bytes - qkvo
    print(f"{N:>6} {qkvo / 2**20:>14.1f} {sp / 2**20:>14.1f} {sp / io.hbm_bytes:>18.1%}")"""),
    md("""### On a real GPU (recorded)

Measured on an NVIDIA H200 (the label says when and with what): naive CuPy attention, which
materialises $S$, against the tiled teaching kernel (`kernels/flash_fwd.cu`, run from the start-here notebook's GPU
panel) that keeps every tile of $S$ on chip."""),
    code("""from flashviz.widgets.gpu_panel import recorded_summary
print(recorded_summary(Br=64, Bc=64))"""),
    md("""## Break it: keep the whole $S$

Materialising $S$ costs $N^2$ numbers per head, whatever else you do. How large is that?"""),
    code("""for N in (4096, 16384, 65536, 131072):
    S_bytes = N * N * 2                     # one head, fp16
    print(f"N = {N:>6}: S is {S_bytes / 2**30:8.2f} GiB per head "
          f"({S_bytes * 32 / 2**30:9.1f} GiB for 32 heads; an H200 has 141 GB ≈ 131 GiB)")"""),
    md("""## Exercises

**1.** A softmax over $S$ does about 5 FLOPs per score (max, subtract, exp, sum, divide) and streams
the scores 6 times, 4 bytes each time. What is its arithmetic intensity in FLOPs per byte?
Replace `None` with your answer and run the check."""),
    code("""softmax_intensity = None   # your answer: FLOPs per byte
ex.check_softmax_intensity(softmax_intensity)"""),
    md("""**2.** Predict the HBM bytes standard attention moves for $N = 4096$, $d = 64$ in fp16 (2 bytes),
using the count above ($4Nd + 4N^2$ elements)."""),
    code("""standard_bytes = None   # your prediction, in bytes
ex.check_standard_bytes(standard_bytes, 4096, 64, itemsize=2)"""),
    md("""**3.** What is the arithmetic intensity of $QK^\\top$ at $N = 1024$, $d = 64$, float32
($2N^2d$ FLOPs; reads $2Nd$ elements, writes $N^2$)?"""),
    code("""matmul_intensity = None
ex.check_matmul_intensity(matmul_intensity, 1024, 64)"""),
    md("""Next: [2 · Online softmax](02_online_softmax.ipynb) — how to compute a softmax without ever
holding a whole row of $S$."""),
]
nb = nbf.v4.new_notebook(cells=cells, metadata={
    "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
    "language_info": {"name": "python"}})
out = Path(__file__).resolve().parents[1] / "notebooks" / "01_memory_wall.ipynb"
nbf.write(nb, out)
print("wrote", out)
