"""Writes notebooks/02_online_softmax.ipynb (no outputs). Edit here, re-run, commit both."""

from pathlib import Path

import nbformat as nbf

md, code = nbf.v4.new_markdown_cell, nbf.v4.new_code_cell
cells = [
    md("""# Chapter 2 — Online softmax: one row, streamed in blocks

FlashAttention never holds a whole row of the score matrix $S$ on chip: it sees one **block** of
keys at a time. But softmax seems to need the whole row, twice — once for its maximum (subtracted
so that $e^x$ cannot overflow) and once for its sum:

$$p_k = \\frac{e^{x_k - m}}{\\ell}, \\qquad m = \\max_k x_k, \\qquad \\ell = \\sum_k e^{x_k - m}.$$

The **online softmax** (Milakov & Gimelshein 2018; Dao et al. 2022, Section 3.1) gets both in a
single pass. It keeps two numbers for the row: the running max $m$ and the running sum $\\ell$.
Start with $m^{(-1)} = -\\infty$, $\\ell^{(-1)} = 0$; for block $j = 0, 1, 2, \\dots$ with scores $x^{(j)}$:

$$m^{(j)} = \\max\\big(m^{(j-1)},\\ \\max_k x^{(j)}_k\\big)$$

$$\\ell^{(j)} = \\underbrace{e^{\\,m^{(j-1)} - m^{(j)}}}_{\\text{rescale factor}}\\;\\ell^{(j-1)} \\;+\\; \\sum_k e^{\\,x^{(j)}_k - m^{(j)}}$$

After the last block, $p_k = e^{x_k - m}/\\ell$ with the final $m$ and $\\ell$.

**Why the rescale factor?** Every term already in $\\ell^{(j-1)}$ was computed as $e^{x - m_\\text{old}}$.
When a block brings a larger max, each should be $e^{x - m_\\text{new}} = e^{x - m_\\text{old}}\\cdot e^{m_\\text{old} - m_\\text{new}}$.
One multiplication fixes the whole sum, without looking at the old scores again. When the max does
not grow, the factor is $e^0 = 1$.

**Why subtract a max at all?** $e^x$ overflows to `inf`: above $x \\approx 88.7$ in float32 and
$x \\approx 709.8$ in float64. Attention scores can be that large.

Run the cells top to bottom (Shift-Enter). Every number is computed when you run it."""),
    code("""%matplotlib widget
import numpy as np
import flashviz as fv
from flashviz.online import naive_softmax
from flashviz.widgets.online_softmax import OnlineSoftmaxExplorer, make_row
from flashviz.exercises.online import PREDICT_BLOCK, PREDICT_X, check_alpha, check_l, check_rescale

def softmax64(x):
    \"\"\"The reference: float64, max subtracted, two passes over the whole row.\"\"\"
    x = np.asarray(x, np.float64)
    e = np.exp(x - x.max())
    return e / e.sum()"""),
    md("""## 1. Watch it

One row of real attention scores, $x = S_{i,:}$ with $S = QK^\\top/\\sqrt{d}$ (all-MiniLM-L6-v2, layer 2,
head 0, reading *Alice's Adventures in Wonderland*). By default the query row is the one whose
largest score arrives latest, so the running max has to grow. Each step streams one block; the
last step normalises.

* **Top:** the row $x$. Blue: streamed; orange: this block; grey: not read yet. The line is the
  running max $m$ (dashed: $m$ before this block).
* **Middle:** $m$ after each block; $\\ell$ after each block, with the current one split into
  the rescaled old sum (blue) and this block's $\\sum e^{x - m}$ (orange) — the dashed box is the
  old sum before rescaling; the rescale factor of each block (orange when it fires, grey when it is 1).
* **Bottom:** the partial weights $e^{x - m}$ of everything seen (grey behind: the same weights as first
  computed, with an older $m$ — the rescale shrank them); then the exact result and a broken variant,
  each against the float64 softmax (black marks), with its error and its sum of weights.

Press ▶ (Play) or drag *step*. Then try: *query row* → another row of $S$; *scores* → *rising* (the max grows in every block);
*block* → 1, or larger than *N*; *break it* → *no rescale*, then *no max-subtraction* with
*scores* → *scores near 800*; *dtype* → float64."""),
    code("""w = OnlineSoftmaxExplorer(N=32, block=8, source="real")
w"""),
    md("""### Check it yourself

The widget draws `fv.online_softmax_steps` — the state after each block — for the row `w.x`:"""),
    code("""x, block = w.x, w.block.value
for s in fv.online_softmax_steps(x, block=block):
    print(f"block j = {s.j}: elements {s.c0:2d}…{s.c1 - 1:2d}   m_old = {s.m_old:8.4f}   m = {s.m:7.4f}   "
          f"rescale = {s.rescale:.4f}   l = {s.l:.4f}")
p = fv.online_softmax(x, block=block)
print(f"\\nmax |p − softmax64(x)| = {np.abs(p - softmax64(x)).max():.1e},   Σp = {p.sum():.15f}")"""),
    md("""## 2. How wrong is each variant?

The same rows through four programs: the exact online softmax, the online softmax **without the
rescale**, and the plain $e^{x}/\\sum e^{x}$ **without max-subtraction** in float32 and in float64.
Each entry is the largest error against the float64 reference, then the sum of the weights (should be 1).
Real rows have all 512 keys; the blocks hold 64."""),
    code("""Q, K, V, prov = fv.data.load_real_qkv()
S = Q @ K.T / np.sqrt(Q.shape[1])
rising = make_row("rising", 512, 64)[0]
rows = {f"real row {i}": S[i] for i in (29, 200, 511)}
rows["rising"] = rising
rows["rising + 94 (92…100)"] = rising + 94
rows["scores near 800"] = make_row("scores near 800", 512, 64)[0]
variants = {
    "exact online": lambda x: fv.online_softmax(x, block=64),
    "no rescale": lambda x: fv.online_softmax(x, block=64, rescale=False),
    "no max-sub f32": lambda x: naive_softmax(x, dtype=np.float32),
    "no max-sub f64": lambda x: naive_softmax(x, dtype=np.float64),
}
print(f"{'row':<22}" + "".join(f"{name:>21}" for name in variants))
for name, x in rows.items():
    ref, cells = softmax64(x), []
    for f in variants.values():
        p = f(x).astype(np.float64)
        with np.errstate(invalid="ignore"):
            cells.append(f"{np.abs(p - ref).max():.1e} (Σ {p.sum():.3f})")
    print(f"{name:<22}" + "".join(f"{c:>21}" for c in cells))"""),
    md("""Read the table row by row. The exact online softmax is right everywhere, to rounding. Without
the rescale the answer is wrong whenever the max grows after the first block, and its weights
sum to less than 1; it is right only on rows whose max happens to sit in the first block. Without
max-subtraction, small scores are fine, scores around 100 already overflow float32 (float64 still
copes), and at 800 both give `nan`."""),
    md("""## 3. Exercises

### 3a. Predict

Take the row below, streamed in blocks of 2 elements (block $j = 0$ is the first two). Work it out
by hand, then replace `None` with your numbers and run the cell:
1. the rescale factor $e^{m_\\text{old} - m_\\text{new}}$ at block $j = 1$;
2. the running sum $\\ell$ after block $j = 1$."""),
    code("""print("x =", PREDICT_X, "  blocks of", PREDICT_BLOCK)
alpha_1 = None   # your prediction: the rescale factor at block j = 1
check_alpha(alpha_1)"""),
    code("""l_1 = None       # your prediction: l after block j = 1
check_l(l_1)"""),
    md("""### 3b. Write the update

Complete `update`: given the state $(m_\\text{old}, \\ell_\\text{old})$ and the next block's scores, return the
new state $(m_\\text{new}, \\ell_\\text{new})$. The check streams six rows through it — a real attention row,
a row whose max arrives in the last block, scores near 800, one-element blocks — starting from
$m = -\\infty$, $\\ell = 0$, and compares every block with flashviz. It names the first wrong block.

The version below is **wrong on purpose**: run it, read the check's message, fix the line."""),
    code("""def update(m_old, l_old, x_block):
    \"\"\"One step of the online softmax: the state (m, l) after one more block.\"\"\"
    m_new = max(m_old, float(np.max(x_block)))
    l_new = l_old + float(np.sum(np.exp(x_block - m_new)))   # ← something is missing here
    return m_new, l_new

check_rescale(update)"""),
    md("""## 4. Break it

### Drop the rescale

Forget the factor $e^{m_\\text{old} - m_\\text{new}}$: the old sum keeps terms computed with an older, smaller
max, so it is too large. Dividing by it makes every weight too small, and they no longer sum to 1.
In the widget: *scores* → *rising*, *break it* → *no rescale* — the red × line of $\\ell$ runs away from
the exact one, and the red bars fall short of the black marks."""),
    code("""x = make_row("rising", 32, 8)[0]
for rescale in (True, False):
    p = fv.online_softmax(x, block=8, rescale=rescale)
    print(f"rescale={str(rescale):<5}  Σp = {p.sum():.6f}   max |p − softmax64(x)| = {np.abs(p - softmax64(x)).max():.2e}")"""),
    md("""### Drop the max-subtraction

Compute $e^{x}/\\sum e^{x}$ directly. For scores near 800, $e^{x}$ is `inf` in both float32 and float64,
and `inf / inf` is `nan`. In the widget: *scores* → *scores near 800*, *break it* → *no max-subtraction*
(the red × marks are `nan`). Try *dtype* → float64: still `nan` at 800."""),
    code("""x800 = make_row("scores near 800", 32, 8)[0]
with np.errstate(over="ignore"):
    print("exp(800) in float32:", np.exp(np.float32(800)), "   in float64:", np.exp(800.0))
print("largest x with a finite exp: float32", np.log(np.finfo(np.float32).max), "  float64", np.log(np.finfo(np.float64).max))
for dt in (np.float32, np.float64):
    p = naive_softmax(x800, dtype=dt)
    print(f"no max-subtraction, {np.dtype(dt).name}: p[:3] = {p[:3]},  Σp = {p.sum()}")
p = fv.online_softmax(x800, block=8)
print(f"online softmax (max subtracted):  Σp = {p.sum():.6f},  max |p − softmax64| = {np.abs(p - softmax64(x800)).max():.1e}")"""),
    md("""## What's next

The tiled forward pass of FlashAttention runs exactly this per query row, over key blocks of
$B_c$ columns — and applies the same rescale factor to its output accumulator $O_i$, whose rows are
weighted sums of $V$ with these very weights. In *00_start_here*, untick *rescale* in the explorer
with the *adversarial* inputs to see the output go wrong for the same reason."""),
]
nb = nbf.v4.new_notebook(cells=cells, metadata={
    "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
    "language_info": {"name": "python"}})
out = Path(__file__).resolve().parents[1] / "notebooks" / "02_online_softmax.ipynb"
nbf.write(nb, out)
print("wrote", out)
