"""Writes notebooks/06_backward.ipynb (no outputs). Edit here, re-run, commit both."""

from pathlib import Path

import nbformat as nbf

md, code = nbf.v4.new_markdown_cell, nbf.v4.new_code_cell
cells = [
    md("""# Chapter 6 — The backward pass: recompute, don't store

Training needs gradients: after the forward pass computes $O$, the backward pass turns $dO = \\partial L / \\partial O$
into $dQ$, $dK$ and $dV$. The gradient formulas need the attention probabilities $P$ again.
Standard attention keeps $P$ in HBM from the forward pass: $N \\times N$ numbers per head.
FlashAttention-2 keeps only $O$ and one number per query row, the log-sum-exp $\\mathrm{lse}$, stored in float32
(4 bytes a row, also when $Q$, $K$, $V$ are half precision; the paper's FlashAttention-1 kept $m$ and $\\ell$, two
per row), and **recomputes**
each tile of $P$ on chip when the backward needs it. That costs one extra matrix product, but it removes
the $N^2$ storage and the $N^2$ reads.

1. **The idea** — the gradient formulas, and how $P$ comes back from $\\mathrm{lse}$.
2. **The explorer** — watch the backward pass tile by tile, with the recomputation highlighted.
3. **The numbers** — stored bytes, HBM traffic and extra FLOPs against $N$, computed live.
4. **A gradient check** — tiled backward against the dense formulas and finite differences.
5. **Exercises** — predict the bytes and the FLOPs; write $P_{ij}$ and $dS_{ij}$ yourself.
6. **Break it** — keep $S$ and $P$ "for debugging", and watch the memory grow as $N^2$.

Every number below is computed when you run the cell. Run the cells top to bottom (Shift-Enter)."""),
    code("""%matplotlib widget
import numpy as np
import flashviz as fv
from flashviz import iomodel
from flashviz.backward import attention_backward, flash_backward
from flashviz.widgets.backward import BackwardExplorer
from flashviz.exercises.backward import check_stored_bytes, check_extra_flops, check_recompute_P, check_dS"""),
    md("""## 1. The idea

The forward pass computes $S = \\text{scale}\\cdot QK^\\top$, $P = \\mathrm{softmax}(S)$ row by row, and $O = PV$.
Given $dO$, the chain rule gives (Dao et al. 2022, Appendix B.2):

$$dV = P^\\top dO, \\qquad dP = dO\\,V^\\top, \\qquad dS = P \\circ (dP - D), \\qquad
dQ = \\text{scale}\\cdot dS\\,K, \\qquad dK = \\text{scale}\\cdot dS^\\top Q,$$

where $\\circ$ multiplies element by element and $D$ has one number per query row,
$D = \\mathrm{rowsum}(dO \\circ O)$. (The softmax's gradient needs $\\mathrm{rowsum}(P \\circ dP)$. Because $O = PV$,
this equals $\\mathrm{rowsum}(dO \\circ O)$, which needs no $P$ at all.)

Every formula uses $P$. Standard attention (the paper's Algorithm 3) reads the $P$ that its forward pass wrote.
FlashAttention's forward pass kept only $\\mathrm{lse}_r = \\log \\sum_c e^{S_{rc}}$ for each row $r$. That is enough to
rebuild any tile exactly:

$$P_{ij} = \\exp\\!\\big(S_{ij} - \\mathrm{lse}_i\\big), \\qquad S_{ij} = \\text{scale}\\cdot Q_i K_j^\\top .$$

The backward pass runs over key blocks $j$ in the outer loop and query blocks $i$ in the inner loop
(FlashAttention-2, Algorithm 2). $dK_j$ and $dV_j$ add up on chip and are written once. $dQ_i$ receives a piece
from every key block, so it is read, added to and written back in HBM at each tile.

Two of these facts, checked on a small random problem:"""),
    code("""rng = np.random.default_rng(0)
N, d = 6, 4
Q, K, V, dO = (rng.standard_normal((N, d)) for _ in range(4))
scale = 1 / np.sqrt(d)
S = scale * Q @ K.T
P = np.exp(S - S.max(axis=1, keepdims=True)); P /= P.sum(axis=1, keepdims=True)
O = P @ V
dP = dO @ V.T
print("rowsum(P ∘ dP) :", np.round((P * dP).sum(axis=1), 6))
print("rowsum(dO ∘ O) :", np.round((dO * O).sum(axis=1), 6), "← the same, and no P needed")
lse = fv.flash_forward(Q, K, V, Br=2, Bc=2).lse                      # what the forward keeps: N numbers
print(f"max |exp(S − lse) − P| = {np.abs(np.exp(S - lse[:, None]) - P).max():.1e}   ← P rebuilt from lse")"""),
    md("""## 2. The explorer

Below, FlashAttention's backward pass runs on **real** queries, keys and values (all-MiniLM-L6-v2, layer 2, head 0),
with a random $dO$. Each step of the run is one frame.

* **Left:** the $N \\times N$ grid of tiles, visited column by column: key block $j$ outside, query block $i$ inside.
  The orange strips show what is in SRAM ($K_j, V_j$ above, $Q_i$ on the right). When $P_{ij}$ is recomputed,
  the tile **flashes yellow**. It is used, then dropped. Nothing of size $N \\times N$ is ever written.
* **On chip:** the current tile's $P_{ij}$ and $dS_{ij}$, and the accumulators $dK_j$, $dV_j$.
* **In HBM:** $dQ$ (the orange box marks the rows being read, added to and written back) and the finished
  rows of $dK$ and $dV$.
* **Bottom:** bytes moved so far against the standard backward; the bytes kept between the passes ($P$ against
  $\\mathrm{lse}$); FLOPs so far, with the recomputation in orange.

The status line compares $dQ$, $dK$, $dV$ with the dense float64 gradients. Press ▶ (Play) or drag *step*.
Then try these: tick *causal* (whole tiles are skipped); set $B_r = B_c = 8$ (now the tiled backward moves
*more* bytes than the standard one: $dQ$ is read and written once per key block); switch to *adversarial* in float16."""),
    code("""w = BackwardExplorer(N=128, d=32, Br=32, Bc=32, causal=False, source="real")
w"""),
    md("""### Check it yourself

The picture is drawn from the trace of one run (`w.result.trace`). Its bytes equal the closed-form IO model,
and its recomputation FLOPs equal `iomodel.recompute_extra_flops`:"""),
    code("""r, tr = w.result, w.result.trace
model = iomodel.flash_backward_io(tr.Nq, tr.Nk, tr.d, Br=tr.Br, Bc=tr.Bc, itemsize=tr.itemsize, causal=tr.causal)
print("bytes counted from the run :", r.io.hbm_bytes)
print("bytes from the closed form :", model.hbm_bytes, "→ equal:", r.io.hbm_bytes == model.hbm_bytes)
recomputed = sum(e.flops for e in tr.events if e.kind == "recompute_P")
extra = iomodel.recompute_extra_flops(tr.Nq, tr.Nk, tr.d, tr.causal, Br=tr.Br, Bc=tr.Bc)
print(f"FLOPs of the recompute_P steps: {recomputed:,}; recompute_extra_flops: {extra:,} → equal: {recomputed == extra}")
print("max |error| vs the float64 dense gradients:", {k: f"{v:.1e}" for k, v in w.errors.items()})"""),
    md("""## 3. The numbers, over $N$

One head, $d = 64$, half precision (2-byte elements), blocks $B_r = B_c = 128$. *Kept* is what the forward pass
leaves in HBM for the backward: $P$ in the 2-byte element type, or $\\mathrm{lse}$ in float32 (4 bytes a row, as
FlashAttention-2 keeps it). *Traffic* is the backward's bytes between HBM and the chip.
*Extra FLOPs* is the cost of recomputing $S$, as a share of the standard backward's four matrix products."""),
    code("""d, b, B = 64, 2, 128
print(f"{'N':>6} │ {'kept: P':>11} {'kept: lse':>10} │ {'traffic: standard':>17} {'tiled':>10} {'ratio':>6} │ "
      f"{'extra FLOPs':>12} {'share':>6}")
for n in (1024, 2048, 4096, 8192, 16384):
    kept = iomodel.stored_between_passes(n, n, itemsize=b, lse_itemsize=4)   # P in fp16, lse in fp32
    std = iomodel.standard_backward_io(n, n, d, itemsize=b)
    til = iomodel.flash_backward_io(n, n, d, Br=B, Bc=B, itemsize=b)
    extra = iomodel.recompute_extra_flops(n, n, d)
    print(f"{n:>6} │ {kept['standard (P)'] / 2**20:>7.0f} MiB {kept['flash (lse)'] / 2**10:>6.0f} KiB │ "
          f"{std.hbm_bytes / 2**20:>13.0f} MiB {til.hbm_bytes / 2**20:>6.0f} MiB {std.hbm_bytes / til.hbm_bytes:>6.1f} │ "
          f"{extra / 1e9:>8.1f} GFLOP {100 * extra / std.flops:>5.0f}%")"""),
    md("""Read the table by columns:

* **Kept:** $P$ grows as $N^2$ (×4 for each doubling of $N$); $\\mathrm{lse}$ grows as $N$.
* **Traffic:** the standard backward reads and writes $N \\times N$ matrices ($P$, $dP$, $dS$) several times.
  The tiled one re-reads $Q_i$ and $dO_i$, and reads and writes $dQ_i$, once per key block: about $4 N d$ elements
  per key block, so $4N^2 d / B_c$ in all. The saving is about $7 B_c / (4d)$, and a larger $B_c$ saves more.
* **Extra FLOPs:** recomputing $S$ costs $2N^2 d$, a quarter of the standard backward's $8N^2 d$ (when
  $d_v = d$). It is a fixed share: the backward does 25% more arithmetic and moves far fewer bytes. On a GPU,
  where bytes are the bottleneck, that trade wins."""),
    md("""## 4. A gradient check, three ways

On a tiny problem we can compare three independent computations of the same gradient:
the tiled backward with recomputation, the dense formulas of section 1 (`attention_backward`, float64),
and **central finite differences**, which use no formula at all. The loss is $L = \\sum O \\circ G$ for a fixed
random $G$, so that $dO = G$. Each entry of $Q$, $K$ and $V$ is nudged by $\\pm h$."""),
    code("""rng = np.random.default_rng(1)
N, d = 5, 3
Q, K, V, G = (rng.standard_normal((N, d)) for _ in range(4))
for causal in (False, True):
    f = fv.flash_forward(Q, K, V, Br=2, Bc=2, causal=causal)
    tiled = flash_backward(Q, K, V, f.O, G, f.lse, Br=2, Bc=2, causal=causal)
    dense = attention_backward(Q, K, V, G, causal=causal)
    h = 1e-6
    for name, X, g_tiled, g_dense in zip("QKV", (Q, K, V), (tiled.dQ, tiled.dK, tiled.dV), dense):
        fd = np.zeros_like(X)
        for idx in np.ndindex(X.shape):
            x0 = X[idx]
            X[idx] = x0 + h; Lp = (fv.attention(Q, K, V, causal=causal) * G).sum()
            X[idx] = x0 - h; Lm = (fv.attention(Q, K, V, causal=causal) * G).sum()
            X[idx] = x0
            fd[idx] = (Lp - Lm) / (2 * h)
        print(f"causal={causal!s:5}  d{name}: |tiled − dense| = {np.abs(g_tiled - g_dense).max():.1e}, "
              f"|tiled − finite differences| = {np.abs(g_tiled - fd).max():.1e}")"""),
    md("""The tiled and dense gradients agree to about $10^{-16}$: they are the same function, computed in a different
order. Finite differences agree to about $10^{-10}$, the accuracy of the method itself with $h = 10^{-6}$."""),
    md("""## 5. Exercises

Each check prints one line: ✓ when your answer is right, ✗ with a hint when it is not. The cells start in a
wrong state on purpose. Replace the `None`s and the stubs, then run the cell again.

**Exercise 1.** A model runs attention with $N = 4096$ tokens in half precision (2 bytes per element). For one head,
how many bytes does standard attention keep in HBM for the backward ($P$, in half precision)? How many does
FlashAttention-2 keep ($\\mathrm{lse}$, which it stores in float32)?"""),
    code("""my_P_bytes = None      # ← bytes of P for one head
my_lse_bytes = None    # ← bytes of lse for one head
check_stored_bytes((my_P_bytes, my_lse_bytes), N=4096, itemsize=2);"""),
    md("""**Exercise 2.** For $N = 4096$ and $d = 64$, how many extra FLOPs does the backward spend recomputing $S = QK^\\top$
(one head, no mask)? Count a multiply-add as 2 FLOPs, as the paper does."""),
    code("""my_extra_flops = None  # ← your prediction
check_extra_flops(my_extra_flops, N=4096, d=64);"""),
    md("""**Exercise 3.** Write the recomputation. `S` is one tile of scaled scores, shape $(B_r, B_c)$, with $-\\infty$ where
a causal mask hides a key. `lse` holds the log-sum-exp of the tile's rows, shape $(B_r,)$, taken over the **whole** row,
not just this tile. Return $P_{ij}$. The check runs your function on tiles recorded from real backward runs."""),
    code("""def recompute_P(S, lse):
    return np.zeros_like(S)          # ← replace: P_ij = exp(S_ij − lse_i)

check_recompute_P(recompute_P);"""),
    md("""**Exercise 4.** Write the softmax's backward for one tile: $dS_{ij} = P_{ij} \\circ (dP_{ij} - D_i)$, where `D` has
one number per row of the tile, shape $(B_r,)$."""),
    code("""def my_dS(P, dP, D):
    return np.zeros_like(P)          # ← replace: dS = P ∘ (dP − D)

check_dS(my_dS);"""),
    md("""## 6. Break it: keep $S$ and $P$ "for debugging"

Suppose you want to inspect the attention pattern during training, so the forward pass keeps $S$ and $P$
"just for debugging". The gradients stay correct. The problem is memory: every head of every layer must keep
its $N \\times N$ matrices until the backward pass reaches that layer. First, measured here, in float32:"""),
    code("""def forward_keeping_SP(Q, K, V):
    \"\"\"Standard attention that keeps S and P for the backward (the "debugging" version).\"\"\"
    S = (Q @ K.T) * Q.dtype.type(1 / np.sqrt(Q.shape[1]))    # a scale of Q's type: S stays float32
    P = np.exp(S - S.max(axis=1, keepdims=True))
    P /= P.sum(axis=1, keepdims=True)
    return P @ V, {"S": S, "P": P}

print(f"{'N':>6} │ {'kept: S and P':>14} {'growth':>7} │ {'kept: lse':>10}")
prev = None
for n in (512, 1024, 2048, 4096):
    Q, K, V = fv.data.random_qkv(n, 64, dtype=np.float32)
    _, kept = forward_keeping_SP(Q, K, V)
    sp = sum(a.nbytes for a in kept.values())
    lse = fv.flash_forward(Q, K, V, Br=128, Bc=128).lse
    grow = f"×{sp / prev:.0f}" if prev else ""
    print(f"{n:>6} │ {sp / 2**20:>10.0f} MiB {grow:>7} │ {lse.nbytes / 2**10:>6.0f} KiB")
    prev = sp
    del kept
print(f"(kept in this run: S and P {Q.dtype}, lse {lse.dtype}, {lse.itemsize} bytes a row)")"""),
    md("""Each doubling of $N$ multiplies the kept bytes by 4. Now scale this up to a model, in half precision:
32 layers × 32 heads, batch 1, keeping only $P$ (in half precision) against $\\mathrm{lse}$ (in float32).
The GPU is an NVIDIA H200 with 141 GB of HBM (NVIDIA's specification). The model's weights and everything else
also need that memory:"""),
    code("""layers, heads, b = 32, 32, 2                          # P in 2-byte elements; lse in float32 (4 B a row)
H200 = 141e9                                          # bytes of HBM on an H200 (NVIDIA's specification)
print(f"{'N':>6} │ {'P, one head':>12} {'P, whole model':>15} {'vs H200':>9} │ {'lse, whole model':>16}")
for n in (4096, 8192, 16384, 32768, 65536):
    kept = iomodel.stored_between_passes(n, n, itemsize=b, lse_itemsize=4)
    P_all = kept["standard (P)"] * layers * heads
    lse_all = kept["flash (lse)"] * layers * heads
    verdict = f"{P_all / H200:>7.1f}x" + (" ✗" if P_all > H200 else "  ")
    print(f"{n:>6} │ {kept['standard (P)'] / 2**30:>8.3f} GiB {P_all / 2**30:>11.0f} GiB {verdict:>9} │ "
          f"{lse_all / 2**20:>12.0f} MiB")"""),
    md("""At $N = 16\\text{k}$, keeping $P$ alone would need about 4 times the H200's memory. At $64\\text{k}$ it would need
about 60 times. The float32 $\\mathrm{lse}$ of the whole model stays between 16 and 256 MiB over this table. Memory that grows as $N$, not $N^2$,
is a large part of why FlashAttention made long contexts practical to train. The forward pass is exact without $P$, and the
backward pass can rebuild $P$ from $\\mathrm{lse}$ at the cost of one extra matrix product.

**What to take away:** keep $O(N)$ numbers per head ($\\mathrm{lse}$), recompute the $O(N^2)$ ones ($P$) tile by tile
on chip. The extra arithmetic is a fixed 25% of the standard backward. The memory saving grows with $N$."""),
]
nb = nbf.v4.new_notebook(cells=cells, metadata={
    "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
    "language_info": {"name": "python"}})
out = Path(__file__).resolve().parents[1] / "notebooks" / "06_backward.ipynb"
nbf.write(nb, out)
print("wrote", out)
