"""Writes notebooks/03_tiling.ipynb (no outputs). Edit here, re-run, commit both."""

from pathlib import Path

import nbformat as nbf

md, code = nbf.v4.new_markdown_cell, nbf.v4.new_code_cell
cells = [
    md(r"""# 3 · Tiling: the forward pass, block by block

Standard attention writes the whole $N \times N$ score matrix $S$ to HBM, reads it back for the
softmax, writes $P$, reads it again for $PV$. FlashAttention never does: it cuts the work into
**tiles** small enough for on-chip SRAM.

* $Q$ is cut into $T_r = \lceil N / B_r \rceil$ **query blocks** $Q_i$ of $B_r$ rows;
  $K$ and $V$ into $T_c = \lceil N / B_c \rceil$ **key blocks** $K_j, V_j$ of $B_c$ rows.
* A tile is one pair $(i, j)$: load $Q_i$, $K_j$, $V_j$ into SRAM, compute
  $S_{ij} = \text{scale}\cdot Q_i K_j^\top$ ($B_r \times B_c$) **on chip**, fold it into the running
  softmax of the rows of block $i$, and move on. $S_{ij}$ is never written to HBM.
* When block $i$ has seen every key block, its output $O_i$ is normalised and **written once**.

This chapter uses the FlashAttention-2 loop order (query blocks outer); chapter 5 compares it with
the paper's Algorithm 1. Run the cells top to bottom (Shift-Enter)."""),
    code("""%matplotlib widget
import numpy as np
import flashviz as fv
from flashviz.iomodel import flash_forward_io, standard_attention_io
from flashviz.replay import Replay
from flashviz.exercises.tiling import check_tile_count, check_run_bytes"""),
    md(r"""## 1. One tiny run, event by event

Eight real tokens, $B_r = B_c = 4$: two query blocks, two key blocks, four tiles. Each line is one
event of the run's **trace** — the same events the widgets replay and the byte counters sum.
Watch what is read from HBM, what is written, and what never leaves the chip."""),
    code("""Q, K, V, prov = fv.data.load_real_qkv(N=8, dtype=np.float32)      # 8 tokens, d = 32, 4-byte floats
tiny = fv.flash_forward(Q, K, V, Br=4, Bc=4, record=True)
steps = Replay(tiny.trace)
for k, e in enumerate(tiny.trace.events):
    moved = {**{f"read {t}": b for t, b in e.reads.items()}, **{f"write {t}": b for t, b in e.writes.items()}}
    print(f"{k:>2}  {steps.state(k).text:<62} {', '.join(f'{n} {b} B' for n, b in moved.items())}")
print("\\nbytes read   :", tiny.io.reads)
print("bytes written:", tiny.io.writes, "  ← no S, no P")"""),
    md(r"""Read it as the algorithm: for each query block $Q_i$ (loaded once), each key block $K_j, V_j$ is
loaded, $S_{ij}$ is computed on chip, the row statistics $m_i$ (running max) and $\ell_i$
(running sum) are updated, the accumulator $O_i$ too; after the last key block, $O_i$ and
$\text{lse}_i$ go to HBM. $K$ and $V$ are read **once per query block**; $Q$ and $O$ only once.

## 2. Watch it

The explainer below replays a run on 64 real tokens with $B_r = B_c = 16$ ($4 \times 4$ tiles).

* **Left:** $S$, tile by tile. Orange box: the tile on chip now; orange strips: $Q_i$ (right)
  and $K_j, V_j$ (top) in SRAM.
* **Middle:** per row of the current block, the running max $m$, the running sum $\ell$, and
  the rescale factor $e^{m_\text{old} - m_\text{new}}$.
* **Right:** the accumulator $O_i$ and the rows of $O$ already written to HBM.
* **Bottom:** bytes moved so far against standard attention; the SRAM working set.

Press ▶, or step with ◀ ▶. Then change $B_r$ and $B_c$ and watch the number of tiles and the bytes."""),
    code("""w = fv.TileExplorer(N=64, d=32, Br=16, Bc=16, source="real")
w"""),
    md(r"""## 3. The online update across tiles

How can block $i$ produce exact softmax rows while seeing only $B_c$ keys at a time? It keeps, for
each of its rows, the max $m$ and the sum $\ell$ of the scores seen so far, and rescales whenever
the max grows. For key block $j$:

$$m^\text{new} = \max\big(m,\ \text{rowmax}(S_{ij})\big),\qquad
P_{ij} = e^{S_{ij} - m^\text{new}},\qquad
\alpha = e^{m - m^\text{new}}$$
$$\ell \leftarrow \alpha\,\ell + \text{rowsum}(P_{ij}),\qquad
O_i \leftarrow \alpha\,O_i + P_{ij} V_j$$

and at the end $O_i \leftarrow O_i / \ell$. Here it is by hand, for query block $i = 3$ of the
explainer's run — compare the result with the run's trace and with dense attention:"""),
    code("""N, d, Br, Bc = 64, 32, 16, 16
Q, K, V, _ = fv.data.load_real_qkv(N=N)
scale = 1 / np.sqrt(d)
i = 3
Q_i = Q[i * Br:(i + 1) * Br]                                 # loaded once
m_i, l_i, O_i = np.full(Br, -np.inf), np.zeros(Br), np.zeros((Br, d))
history = []
for j in range(N // Bc):
    K_j, V_j = K[j * Bc:(j + 1) * Bc], V[j * Bc:(j + 1) * Bc]
    S_ij = scale * Q_i @ K_j.T                               # Br × Bc, on chip only
    m_new = np.maximum(m_i, S_ij.max(axis=1))
    P_ij = np.exp(S_ij - m_new[:, None])
    alpha = np.exp(m_i - m_new)                              # the rescale factor (0 for j = 0)
    l_i = alpha * l_i + P_ij.sum(axis=1)
    O_i = alpha[:, None] * O_i + P_ij @ V_j
    m_i = m_new
    history.append((m_i.copy(), l_i.copy(), alpha.copy()))
O_i = O_i / l_i[:, None]                                     # normalise once, write once

# follow the row whose max grew most often
r = int(np.argmax(sum(a < 1 for _, _, a in history[1:])))
for j, (m, l, a) in enumerate(history):
    print(f"after K{j}: row {r} of Q{i} has max m = {m[r]:+.3f}, sum l = {l[r]:7.3f}, old sums rescaled by {a[r]:.3f}")

run = fv.flash_forward(Q, K, V, Br=Br, Bc=Bc, record=True)
written = next(e.O for e in run.trace.events if e.kind == "write_O" and e.i == i)
print(f"\\nmax |by hand − the run's O_{i}|   = {np.abs(O_i - written).max():.1e}")
print(f"max |by hand − dense attention| = {np.abs(O_i - fv.attention(Q, K, V)[i * Br:(i + 1) * Br]).max():.1e}")"""),
    md(r"""Each time the max grows, the old sum and the old accumulator are multiplied by
$\alpha < 1$: they were taken against a smaller max, and now count for less. At the first key block
$\alpha = e^{-\infty} = 0$: there is nothing to rescale yet."""),
    md(r"""## 4. $O$ is written once

In the FA2 order each $O_i$ stays on chip until its row of tiles is done, then goes to HBM once.
Count the writes in the trace:"""),
    code("""writes = [e for e in run.trace.events if "O" in e.writes]
print(f"{run.trace.Tr} query blocks, {len(writes)} writes of O:", [f"O{e.i}" for e in writes])
print("tiles computed:", sum(e.kind == "compute_S" for e in run.trace.events))
print("bytes by tensor, read:", run.io.reads, " written:", run.io.writes)"""),
    md(r"""## 5. Bytes against the block size, counted live

Every row of the table runs the tiled forward pass (random inputs, $N = 1024$, $d = 64$, 4-byte
floats), counts the bytes from its events, and compares them with the closed-form IO model
`flash_forward_io`. $K$ and $V$ are re-read once per query block, $T_r = N / B_r$ times, so
larger $B_r$ means fewer bytes — as long as the tile still fits in SRAM (chapter 4)."""),
    code("""N, d, Bc = 1024, 64, 64
Q, K, V = fv.data.random_qkv(N, d, dtype=np.float32)
std = standard_attention_io(N, N, d).hbm_bytes
print(f"standard attention moves {std / 2**20:.2f} MiB")
print(f"{'Br':>5} {'Tr':>4} {'K+V read (MiB)':>15} {'run (MiB)':>10} {'model (MiB)':>12} {'equal':>6}"
      f" {'standard/tiled':>15}")
for Br in (16, 32, 64, 128, 256):
    counted = fv.flash_forward(Q, K, V, Br=Br, Bc=Bc).io
    model = flash_forward_io(N, N, d, Br=Br, Bc=Bc)
    kv = (counted.reads["K"] + counted.reads["V"]) / 2**20
    print(f"{Br:>5} {-(-N // Br):>4} {kv:>15.2f} {counted.hbm_bytes / 2**20:>10.3f} {model.hbm_bytes / 2**20:>12.3f} "
          f"{str(counted == model):>6} {std / counted.hbm_bytes:>14.1f}x")"""),
    md(r"""Notice the first row: with blocks of 16 rows, $K$ and $V$ are read 64 times and the tiled pass
moves **more** bytes than standard attention. Tiling pays off only when the blocks are large —
which SRAM limits. That trade-off is chapter 4."""),
    md(r"""## 6. Your turn

Each check below prints one line: ✓ when your answer is right, ✗ with a hint when not. The
answers start as `None`: replace them with your prediction and run the cell again.

**Exercise 1 — how many tiles?** $N = 200$, $B_r = 32$, $B_c = 64$, no mask. Careful: 200 is not
a multiple of either block size, and a partial last block is still a block."""),
    code("""my_tiles = None          # ← your prediction: the number of tiles S_ij computed
check_tile_count(my_tiles, Nq=200, Nk=200, Br=32, Bc=64)"""),
    md(r"""**Exercise 2 — how many bytes?** One FA2 forward pass with $N = 512$, $d = 64$,
$B_r = B_c = 128$, 4-byte floats. Add up what section 1 showed: $Q$ read once, $K$ and $V$ once per
query block, $O$ written once, and one `lse` value per row."""),
    code("""my_bytes = None          # ← your prediction, in bytes (read + written)
check_run_bytes(my_bytes, N=512, d=64, Br=128, Bc=128, itemsize=4)"""),
    md(r"""## 7. Break it

The rescale factor $\alpha = e^{m_\text{old} - m_\text{new}}$ is what makes the tiles add up to the
exact softmax. Drop it, and every row whose max grows after its first key block keeps sums taken
against a stale max. On the *adversarial* inputs the max grows at every block: the output is
wrong, and the status line of the explainer says by how much. (Untick *rescale* in the explainer
above to see it frame by frame.)"""),
    code("""Q, K, V = fv.data.adversarial_qkv(64, 32, dtype=np.float32)
ref = fv.attention(Q, K, V)
for rescale in (True, False):
    O = fv.flash_forward(Q, K, V, Br=16, Bc=16, rescale=rescale).O
    print(f"rescale={rescale!s:<5}: max |O − O_ref| = {np.abs(O - ref).max():.3g}")
broken = fv.TileExplorer(N=64, d=32, Br=16, Bc=16, source="adversarial", rescale=False)
broken"""),
    md(r"""**What to take away.** A tile is $B_r \times B_c$ scores that live only on chip. The online
update carries $m$, $\ell$ and $O_i$ from tile to tile, so the result is exact; $O_i$ is written
once. The price is re-reading $K$ and $V$ once per query block — which is why the block size
matters (chapter 4) and why the loop order matters (chapter 5)."""),
]
nb = nbf.v4.new_notebook(cells=cells, metadata={
    "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
    "language_info": {"name": "python"}})
out = Path(__file__).resolve().parents[1] / "notebooks" / "03_tiling.ipynb"
nbf.write(nb, out)
print("wrote", out)
