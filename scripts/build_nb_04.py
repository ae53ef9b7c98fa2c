"""Writes notebooks/04_block_size.ipynb (no outputs). Edit here, re-run, commit both."""

from pathlib import Path

import nbformat as nbf

md, code = nbf.v4.new_markdown_cell, nbf.v4.new_code_cell
cells = [
    md("""# Chapter 4 — Block size: how big should a tile be?

FlashAttention works on tiles: $B_r$ query rows against $B_c$ key columns at a time. The tile size is
not a detail. It decides **how many bytes** cross between HBM (large, slow) and SRAM (small, fast),
and SRAM decides **how large** a tile can be. This chapter finds the best tile for a given GPU,
and checks the paper's claim that FlashAttention moves $\\Theta(N^2 d^2 / M)$ bytes, where $M$ is the SRAM size.

1. **The idea** — a formula for the traffic, and the working set that must fit in SRAM.
2. **The explorer** — sweep every $B_r \\times B_c$ and watch the search for the best one.
3. **Measured on a GPU** — the recorded H200 sweep: kernel time per block size, beside the model's bytes.
4. **Exercises** — predict the traffic of a block size; find the best tile that fits.
5. **Break it** — a tile too large for SRAM, and a tile too small.

Every number below is computed when you run the cell. Run the cells top to bottom (Shift-Enter)."""),
    code("""%matplotlib widget
import math
import numpy as np
import flashviz as fv
from flashviz import iomodel
from flashviz.views import SRAM_BUDGETS
from flashviz.widgets.blocksize import BlockSizeExplorer
from flashviz.exercises.blocksize import check_traffic_prediction, check_largest_fitting_tile"""),
    md("""## 1. The idea

In the FlashAttention-2 loop order, the outer loop runs over the $T_r = \\lceil N / B_r \\rceil$ query blocks.
For each query block $Q_i$, the pass reads $Q_i$ once, streams **all** of $K$ and $V$ through SRAM one key block
at a time, and writes $O_i$ and the row log-sum-exp $\\mathrm{lse}_i$. Counting elements:

$$\\text{traffic} \\;=\\; \\underbrace{N d}_{Q} \\;+\\; \\underbrace{2\\,T_r\\,N d}_{K,\\,V\\ \\text{once per query block}}
\\;+\\; \\underbrace{N d}_{O} \\;+\\; \\underbrace{N}_{\\mathrm{lse}}
\\;\\approx\\; 2\\,T_r\\,N d .$$

**Bigger tiles save bytes.** Doubling $B_r$ halves $T_r$, so $K$ and $V$ are re-read half as often.
($B_c$ does not appear: it sets how $K$ and $V$ are cut up, not how often they are read. In the paper's
Algorithm 1 order, key blocks outer, the roles swap: $Q_i$ and $O_i$ are re-read once per key block.)

**SRAM caps them.** One tile step keeps $Q_i$ ($B_r d$), $K_j$ and $V_j$ ($B_c d$ each), the scores
$S_{ij}$/$P_{ij}$ ($B_r B_c$), the output accumulator $O_i$ ($B_r d$) and $m_i, \\ell_i$ ($2B_r$) on chip:

$$\\text{working set} = (2 B_r d + 2 B_c d + B_r B_c + 2 B_r) \\times \\text{bytes per element} \\;\\le\\; M.$$

A tile that does not fit **spills**: a real kernel cannot launch it, or pays extra memory traffic.

**The paper's $\\Theta(N^2 d^2 / M)$ (Theorem 2).** The largest query block that fits is about $B_r \\approx M/(4d)$
elements, so the traffic is about $2 N d \\cdot N \\cdot 4d/M = 8 N^2 d^2 / M$. Doubling SRAM halves it; doubling $d$
(at fixed $M$) quadruples it.

Let us check the formula against flashviz's IO model for one configuration:"""),
    code("""N, d, Br, Bc, b = 4096, 64, 128, 128, 4             # float32: 4 bytes per element
Tr = math.ceil(N / Br)
by_hand = (N * d + 2 * Tr * N * d + N * d + N) * b
model = iomodel.flash_forward_io(N, N, d, Br=Br, Bc=Bc, itemsize=b)
print(f"by hand : {by_hand:,} bytes  (Tr = {Tr}: K and V are each read {Tr} times)")
print(f"iomodel : {model.hbm_bytes:,} bytes → equal: {by_hand == model.hbm_bytes}")
print(f"working set of a {Br}×{Bc} tile: {iomodel.sram_working_set(Br, Bc, d, itemsize=b):,} bytes")
M = SRAM_BUDGETS["H100/H200: 227 KiB"]
print(f"Θ curve 8·N²d²/M at M = {M:,} bytes: {iomodel.asymptotic_flash_io(N, d, M, itemsize=b):,.0f} bytes")"""),
    md("""## 2. The explorer

The widget sweeps every $B_r \\times B_c$ from 16 to 256, one configuration per step. Press ▶ (Play) to
watch the search.

* **Left:** the model's HBM traffic for each configuration. Configurations that do not fit in SRAM are
  hatched red. The star marks the best configuration that fits, among those tried so far.
* **Middle:** the kernel time measured on a GPU for the same block sizes. This panel fills only when
  a recorded sweep exists for this $N$, $d$ and element type. Otherwise it says what was recorded.
* **Right:** traffic against $N$ on log-log axes: standard attention, the exact count for the best fitting
  blocks, the paper's $\\Theta(N^2 d^2/M)$ curve, and the configuration of the current step.
* **Bottom:** the current tile's SRAM working set, part by part, against the budget $M$.

Try these: set the SRAM budget to *toy*. Set $d$ to 256 in float64. Switch the loop order to FA1
(then $B_c$ sets the traffic, not $B_r$). Tick *causal*."""),
    code("""w = BlockSizeExplorer(N=4096, d=64, dtype="float32", sram_budget="H100/H200")
w"""),
    md("""## The sweep as a table, computed now

The explorer draws these numbers. Change `N`, `d`, `b` or the budget and run the cell again:"""),
    code("""N, d, b, budget = 4096, 64, 4, "H100/H200: 227 KiB"
M = SRAM_BUDGETS[budget]
rows = iomodel.block_size_sweep(N, d, itemsize=b, sram_budget=M)
best = iomodel.best_fitting_blocks(N, d, itemsize=b, sram_budget=M)
std = iomodel.standard_attention_io(N, N, d, itemsize=b).hbm_bytes
print(f"N = {N}, d = {d}, {b}-byte elements, M = {budget}; standard attention moves {std / 2**20:.1f} MiB")
print(f"{'Br':>4} {'Bc':>4} {'Tr':>5} {'HBM MiB':>9} {'SRAM KiB':>9}  fits")
for r in rows:
    mark = "  ← best" if best is not None and (r["Br"], r["Bc"]) == (best["Br"], best["Bc"]) else ""
    print(f"{r['Br']:>4} {r['Bc']:>4} {r['Tr']:>5} {r['hbm_bytes'] / 2**20:>9.1f} {r['sram_bytes'] / 1024:>9.1f}  "
          f"{'yes' if r['fits'] else 'NO '}{mark}")
Br_p, Bc_p = iomodel.paper_block_sizes(M, d, itemsize=b)
print(f"\\nThe paper's choice for this M: Bc = ⌈M/4d⌉ = {Bc_p}, Br = min(Bc, d) = {Br_p}")"""),
    md("""Read the table by rows. Each row of equal $B_r$ moves the same bytes; halving $T_r$ halves the traffic.
The best configuration has the largest $B_r$ that still fits, with the largest $B_c$ that fits beside it."""),
    md("""## 3. Measured on a GPU

The model counts bytes. Does a real kernel get faster as the count falls? The teaching kernel
(`kernels/flash_fwd.cu`, float32, FA2 order) was timed on a GPU for every $B_r \\times B_c$ it supports, at
$N = 4096$, $d = 64$. The label says where and when. We recompute the model's bytes here and compare
them with the bytes stored next to each measurement."""),
    code("""from flashviz.widgets.gpu_panel import recorded_label
res = fv.gpu.latest_results()
if not res or not res.get("sweep"):
    print("No recorded GPU sweep in this installation.")
else:
    sweep = res["sweep"]
    heads = sweep[0]["B"] * sweep[0]["H"]
    print(f"Measured on {recorded_label(res)}")
    print(f"N = {sweep[0]['N']}, d = {sweep[0]['d']}, B·H = {heads} heads, float32\\n")
    print(f"{'Br':>4} {'Bc':>4} {'kernel ms':>10} {'TFLOP/s':>8} {'model GiB':>10}  model bytes equal")
    for r in sweep:
        ours = iomodel.flash_forward_io(r["N"], r["N"], r["d"], Br=r["Br"], Bc=r["Bc"], itemsize=4).scaled(heads)
        print(f"{r['Br']:>4} {r['Bc']:>4} {r['kernel_ms']:>10.2f} {r['tflops']:>8.1f} "
              f"{r['model_hbm_bytes'] / 2**30:>10.2f}  {ours.hbm_bytes == r['model_hbm_bytes']}")
    fastest = min(sweep, key=lambda r: r["kernel_ms"])
    print(f"\\nfastest: {fastest['Br']}×{fastest['Bc']} at {fastest['kernel_ms']:.2f} ms")
    for Br in sorted({r["Br"] for r in sweep}):
        ms = [r["kernel_ms"] for r in sweep if r["Br"] == Br]
        print(f"Br = {Br:>3}: {min(ms):6.2f} … {max(ms):6.2f} ms over Bc (same model bytes in this row)")"""),
    md("""Compare the measurements with the model. Each step up in $B_r$ halves the model's bytes, and the
fastest time in each row (the last lines) falls with them. Look at two more things:

* Within one row the bytes are equal, yet the time still changes with $B_c$. A tiny $B_c$ means many
  short loop steps, each with its own synchronisation and little arithmetic per load.
* Compare the fastest time of the last two rows with their bytes. Once few enough bytes move,
  halving them again gains much less: other costs dominate.

The model predicts the trend of the data movement. The measurement shows what it leaves out.
(The GPU panel in the start-here notebook runs the kernel live when a GPU is available.)"""),
    md("""## 4. Exercises

**Exercise 1 — predict the traffic before you look.** In half precision (2 bytes per element), with
$N = 2048$, $d = 64$, FA2 order and no mask: how many bytes does the forward pass move with
$B_r = 32$, $B_c = 128$? Use the formula from part 1, then replace `None` with your number."""),
    code("""my_prediction = None          # your number of bytes, e.g. 12_345_678
check_traffic_prediction(my_prediction, N=2048, d=64, Br=32, Bc=128, itemsize=2);"""),
    md("""*Hint:* $T_r = \\lceil 2048 / 32 \\rceil$, and every term of the formula is in elements.
Multiply by 2 bytes at the end.

**Exercise 2 — the best tile that fits.** On an A100 (163 KiB, that is 166,912 bytes of shared memory
per block), with $d = 128$ in half precision and $N = 8192$: which $(B_r, B_c)$, each from
16, 32, 64, 128, 256, fits in SRAM and moves the fewest bytes? If several move equally few, take
the largest tile. Work it out with the working-set formula, then replace `None` with `(Br, Bc)`."""),
    code("""my_tile = None                # e.g. (64, 64)
check_largest_fitting_tile(my_tile, N=8192, d=128, sram_budget="A100", itemsize=2);"""),
    md("""*Hint:* the traffic depends on $B_r$ only, so try the largest $B_r$ first. Then find the largest $B_c$ for
which $2 B_r d + 2 B_c d + B_r B_c + 2 B_r \\le 166{,}912 / 2$ elements."""),
    md("""## 5. Break it

**A tile too large for SRAM.** Take $B_r = B_c = 256$ with $d = 128$ in float32. Here is its working set,
part by part, against an H100/H200's 227 KiB. The GPU runner's launch check shows what a real
kernel does with a tile that does not fit: it refuses to launch. (This needs no GPU; it only does
the kernel's shared-memory arithmetic.)"""),
    code("""from flashviz.views.blocksize_view import working_set_parts, PARTS
Br, Bc, d, b, M = 256, 256, 128, 4, SRAM_BUDGETS["H100/H200: 227 KiB"]
parts = working_set_parts(Br, Bc, d, N=4096, itemsize=b)
for (name, _), nbytes in zip(PARTS, parts):
    print(f"{name:>10}: {nbytes:>9,} bytes")
need = iomodel.sram_working_set(Br, Bc, d, itemsize=b)
print(f"{'total':>10}: {need:>9,} bytes vs M = {M:,} → {need / M:.1f}x over the budget: it spills")
try:
    fv.gpu.check_launch(128, 128, 128, device_limit=M)     # the teaching kernel's largest tile at d = 128
except ValueError as exc:
    print("GPU launch check:", exc)"""),
    md("""**A tile too small.** Shrink $B_r$ and watch the traffic explode: $K$ and $V$ are re-read $N / B_r$ times.
Below $B_r \\approx d/2$, "FlashAttention" moves **more** bytes than standard attention. That is not
the model exaggerating: the last lines run the tiled forward pass on real inputs and count the bytes
it actually moved."""),
    code("""N, d, b = 4096, 64, 2
std = iomodel.standard_attention_io(N, N, d, itemsize=b).hbm_bytes
print(f"standard attention: {std / 2**20:9.1f} MiB")
for Br in (1, 2, 4, 8, 16, 32, 64, 128, 256):
    t = iomodel.flash_forward_io(N, N, d, Br=Br, Bc=64, itemsize=b).hbm_bytes
    print(f"Br = {Br:>3}: {t / 2**20:9.1f} MiB = {t / std:6.2f}x standard {'← more than standard!' if t > std else ''}")

Q, K, V = fv.data.random_qkv(256, 64, dtype=np.float32)
for Br in (2, 64):
    r = fv.flash_forward(Q, K, V, Br=Br, Bc=64)
    std_small = iomodel.standard_attention_io(256, 256, 64, itemsize=4).hbm_bytes
    err = np.abs(r.O - fv.attention(Q, K, V)).max()
    print(f"a real run, N = 256, Br = {Br:>2}: moved {r.io.hbm_bytes:>9,} bytes "
          f"({r.io.hbm_bytes / std_small:.2f}x standard), max |O − O_ref| = {err:.1e}")"""),
    md("""## Summary

* In the FA2 order the traffic is about $2 T_r N d$: $K$ and $V$ are re-read once per query block. Larger
  $B_r$ means fewer query blocks and fewer bytes.
* The working set $(2B_r d + 2B_c d + B_r B_c + 2B_r)$ elements must fit in SRAM. The best tile is the
  one with the least traffic that fits; the largest such tile wins a tie.
* So the traffic scales as $\\Theta(N^2 d^2 / M)$: more SRAM, less traffic. A tile too small can move more
  bytes than standard attention.
* On a real GPU the measured time follows the bytes, but not exactly. The measurement shows what the
  model leaves out."""),
]
nb = nbf.v4.new_notebook(cells=cells, metadata={
    "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
    "language_info": {"name": "python"}})
out = Path(__file__).resolve().parents[1] / "notebooks" / "04_block_size.ipynb"
nbf.write(nb, out)
print("wrote", out)
