"""Writes notebooks/05_causal_and_loop_order.ipynb (no outputs). Edit here, re-run, commit both."""

from pathlib import Path

import nbformat as nbf

md, code = nbf.v4.new_markdown_cell, nbf.v4.new_code_cell
cells = [
    md(r"""# 5 · Causal masking and loop order

Two refinements of the tiled forward pass of chapter 3:

1. **Causal masking.** A language model's token may only attend to itself and earlier tokens.
   Whole tiles of $S$ are then masked out — FlashAttention skips them: fewer FLOPs, fewer bytes.
2. **Loop order.** The paper's Algorithm 1 (FA1) loops over key blocks outside and query blocks
   inside; FlashAttention-2 swaps the loops. Same tiles, same FLOPs, same output — different
   HBM traffic.

Every number below is computed when you run the cell. Run the cells top to bottom (Shift-Enter)."""),
    code("""%matplotlib widget
import numpy as np
import flashviz as fv
from flashviz.iomodel import flash_forward_io
from flashviz.masking import visible
from flashviz.widgets.causal import CausalExplorer
from flashviz.widgets.loop_order import LoopOrderExplorer
from flashviz.exercises.tiling import check_causal_mask, check_tile_count, check_fa1_extra_bytes"""),
    md(r"""## Part A — causal masking

### The rule, bottom-right aligned

With as many queries as keys ($N_q = N_k$), query $i$ sees keys $0 \dots i$: the lower triangle.
But $N_q$ and $N_k$ often differ. When a model generates text, a few **new** queries attend to
all keys so far (the cached ones and their own): the queries are the *last* $N_q$ positions of
the sequence. FlashAttention (since version 2.1) therefore aligns the mask to the
**bottom-right** corner:

$$\text{query } i \text{ sees key } j \iff j \le i + N_k - N_q.$$

The last query always sees every key. If $N_q > N_k$, the first $N_q - N_k$ queries see **no key
at all**: flashviz defines their output as $0$ and their log-sum-exp as $-\infty$ (never NaN).
Production kernels pick their own convention for these rows (FlashAttention-2's CUDA kernel stores
$+\infty$ so that $e^{S - \mathrm{lse}} = 0$ in its backward); what matters is that no NaN appears.
■ = visible, · = masked:"""),
    code("""def show_mask(Nq, Nk):
    m = visible(np.arange(Nq), np.arange(Nk), Nq, Nk)
    off = Nk - Nq
    print(f"Nq = {Nq}, Nk = {Nk}  (query i sees key j iff j ≤ i {'+' if off >= 0 else '−'} {abs(off)})")
    for i, row in enumerate(m):
        note = "   ← sees no key" if not row.any() else ""
        print(f"  query {i}: " + " ".join("■" if v else "·" for v in row) + note)
    print()

show_mask(4, 4)     # the usual lower triangle
show_mask(3, 6)     # fewer queries than keys: decoding against a cache
show_mask(6, 3)     # more queries than keys: the first 3 rows see nothing"""),
    md(r"""### Tiles: full, partial, skipped

On the tile grid every $B_r \times B_c$ tile falls in one of three kinds:

* **full** — every query of the block sees every key of the block: computed as usual;
* **partial** — the diagonal cuts it: computed, then the masked entries set to $-\infty$
  (a true $-\infty$, so they contribute exactly $e^{-\infty} = 0$);
* **skipped** — no query of the block sees any key of the block: never loaded, never computed.

The explorer walks the query blocks, one per frame; the orange box marks the key blocks that
$Q_i$ visits. Try $N_q > N_k$ (drag *Nq* past *Nk*), $N_q = 1$ (one new token, all keys
visible), and $B_r \ne B_c$."""),
    code("""causal = CausalExplorer(Nq=256, Nk=384, Br=32, Bc=32)
causal"""),
    md(r"""### FLOPs and bytes saved, computed live

For square attention the mask hides almost half of $S$, so the computed tiles approach one half
as $N$ grows; the tiles on the diagonal are computed in full although half of each is masked.
Bytes save a little less than FLOPs: $Q$ is still read once and $O$ written once, in full.
($d = 64$, $B_r = B_c = 128$, 2-byte elements, FA2 order.)"""),
    code("""d, B = 64, 128
print(f"{'N':>6} {'GFLOP full':>11} {'causal':>8} {'saved':>7} {'MiB full':>10} {'causal':>8} {'saved':>7}")
for N in (256, 1024, 4096, 16384):
    full, cau = (flash_forward_io(N, N, d, Br=B, Bc=B, itemsize=2, causal=c) for c in (False, True))
    print(f"{N:>6} {full.flops / 1e9:>11.3f} {cau.flops / 1e9:>8.3f} {1 - cau.flops / full.flops:>7.1%} "
          f"{full.hbm_bytes / 2**20:>10.2f} {cau.hbm_bytes / 2**20:>8.2f} {1 - cau.hbm_bytes / full.hbm_bytes:>7.1%}")

# the closed form is what a real run counts: run it once, causal, Nq ≠ Nk
rng = np.random.default_rng(0)
Q, K, V = (rng.standard_normal((n, 32)).astype(np.float32) for n in (96, 160, 160))
r = fv.flash_forward(Q, K, V, Br=32, Bc=32, causal=True)
print("\\nrun (Nq = 96, Nk = 160) counted", r.io.hbm_bytes, "B; model",
      flash_forward_io(96, 160, 32, Br=32, Bc=32, causal=True).hbm_bytes, "B; equal:",
      r.io == flash_forward_io(96, 160, 32, Br=32, Bc=32, causal=True))
print(f"max |O − O_ref| = {np.abs(r.O - fv.attention(Q, K, V, causal=True)).max():.1e}")"""),
    md(r"""### Your turn

**Exercise A1 — write the mask.** Complete `visible(r, c, Nq, Nk)`: `True` when query `r` may
see key `c` under the bottom-right aligned mask. The check tries every entry of square,
wide and tall shapes and reports the first one you get wrong."""),
    code("""def visible_mine(r, c, Nq, Nk):
    return True          # ← replace with the rule

check_causal_mask(visible_mine)"""),
    md(r"""**Exercise A2 — how many tiles does the mask leave?** $N_q = N_k = 256$, $B_r = B_c = 64$,
causal. Draw the $4 \times 4$ grid on paper if it helps, or set the explorer above to it."""),
    code("""my_causal_tiles = None   # ← your prediction
check_tile_count(my_causal_tiles, Nq=256, Nk=256, Br=64, Bc=64, causal=True)"""),
    md(r"""## Part B — loop order: FA1 and FA2

Both orders compute the same tiles with the same online update; only the nesting differs.

| | **FA1** (paper, Algorithm 1) | **FA2** (FlashAttention-2) |
|---|---|---|
| outer loop | key blocks $j$: $K_j, V_j$ loaded once | query blocks $i$: $Q_i$ loaded once |
| inner loop | query blocks $i$ | key blocks $j$ |
| per tile, HBM | read $Q_i, O_i, \ell_i, m_i$; write $O_i, \ell_i, m_i$ | read $K_j, V_j$ |
| $O$ | written after **every** tile (plus $O = 0$ at the start) | written **once** per block |

FA1 passes $Q$ and $O$ (both ways) through HBM $T_c$ times; FA2 passes $K$ and $V$ $T_r$ times.
Below, both run on the same real input, in lockstep: frame $k$ shows each after its $k$-th tile.
FA2's grid fills row by row, FA1's column by column; the meters show the bytes so far, by tensor —
watch the red ($O$) segment."""),
    code("""loop = LoopOrderExplorer(N=128, d=32, Br=32, Bc=32, source="real")
loop"""),
    md(r"""### Their traffic over $N$, computed live

$d = 64$, $B_r = B_c = 64$, 2-byte elements, no mask. The last column is the part of FA1's traffic that
is $O$ going to and from HBM."""),
    code("""d, B = 64, 64
print(f"{'N':>6} {'FA1 (MiB)':>10} {'FA2 (MiB)':>10} {'FA1/FA2':>8}   FA1's O traffic (MiB)")
for N in (256, 512, 1024, 2048, 4096, 8192):
    fa1, fa2 = (flash_forward_io(N, N, d, Br=B, Bc=B, itemsize=2, order=o) for o in ("fa1", "fa2"))
    o_fa1 = (fa1.reads["O"] + fa1.writes["O"]) / 2**20
    print(f"{N:>6} {fa1.hbm_bytes / 2**20:>10.2f} {fa2.hbm_bytes / 2**20:>10.2f} {fa1.hbm_bytes / fa2.hbm_bytes:>8.2f}"
          f"   {o_fa1:.2f}")

# and the two runs the explorer shows: same output, bytes counted = the model
for o, res in loop.results.items():
    model = loop.io_model[o]
    print(f"{o}: counted {res.io.hbm_bytes:,} B = model {model.hbm_bytes:,} B → {res.io == model}")
print(f"max |O_FA1 − O_FA2| = {np.abs(loop.results['fa1'].O - loop.results['fa2'].O).max():.1e}")"""),
    md(r"""With $B_r = B_c$ both orders re-read two $N \times d$ matrices $T$ times — FA1 $Q$ and $O$, FA2
$K$ and $V$ — but FA1 also *writes* $O$ (and $\ell$, $m$) back at every tile, so it moves about
1.5 times as much. With $B_r \ne B_c$ the balance moves: FA1's round trips scale with $T_c$,
FA2's with $T_r$ — set $B_r = 16$, $B_c = 64$ in the explorer and FA1 can even win. FA2's order
also lets different thread blocks own different query blocks with no write conflicts, which is why
it is the order real kernels use.

**Exercise B1 — FA1's extra bytes.** For $N = 1024$, $d = 64$, $B_r = B_c = 64$, 2-byte elements, no
mask: how many more bytes does FA1 move than FA2? (Count per tensor: what does each order read
and write, how many times?)"""),
    code("""my_extra = None          # ← your prediction, in bytes
check_fa1_extra_bytes(my_extra, N=1024, d=64, Br=64, Bc=64, itemsize=2)"""),
    md(r"""**What to take away.** The causal mask is a property of tiles: skipped tiles cost nothing,
partial ones cost as much as full ones. With $N_q \ne N_k$ the mask is aligned to the
bottom-right, so the newest query sees everything. And the loop order decides which tensors make
the round trips: FA2 keeps $O_i$, $\ell_i$, $m_i$ on chip and writes $O$ once."""),
]
nb = nbf.v4.new_notebook(cells=cells, metadata={
    "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
    "language_info": {"name": "python"}})
out = Path(__file__).resolve().parents[1] / "notebooks" / "05_causal_and_loop_order.ipynb"
nbf.write(nb, out)
print("wrote", out)
