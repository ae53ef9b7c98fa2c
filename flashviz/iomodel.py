"""The IO model: closed-form HBM traffic, FLOPs and SRAM working set.

Counting conventions (Dao et al. 2022, Section 3.2 and Appendix; FlashAttention-2 for
the loop order). All byte counts are bytes of the element type (``itemsize``):

* Standard attention is the paper's Algorithm 0: read Q, K; write S; read S; write P;
  read P, V; write O. For Nq = Nk = N and dv = d that is 4·N·d + 4·N² elements.
* FA2 order (query blocks outer): Q_i is read once, K_j and V_j once per query block
  (only the key blocks a causal query block can see), O_i and lse_i written once;
  m and l live on chip. A query block that sees no key reads nothing and writes
  zeros to O and -inf to lse.
* FA1 order (paper Algorithm 1, key blocks outer): O, l, m are initialised in HBM
  (written once), then for every computed (j, i) step Q_i, O_i, l_i, m_i are read
  and O_i, l_i, m_i written back; K_j, V_j are read once each.
* FLOPs are matmul FLOPs: 2·Nq·Nk·d for QKᵀ plus 2·Nq·Nk·dv for PV; with a causal
  mask only the computed tiles count (partially masked tiles count in full).
* sram_bytes is the on-chip working set one tile step reserves: Q_i, K_j, V_j,
  S_ij/P_ij, the O_i accumulator and m_i, l_i (tiles clipped to Nq, Nk).
* Decode (split-KV, GQA, paged KV cache): ``decode_io`` states its own conventions (partials
  in the accumulator type, block-table entries of 4 bytes).

The closed forms here are independent of ``flashviz.tiled``; the tests check they
equal the sums over the trace of an actual run, exactly.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field

from .checks import (
    check_block,
    check_blocks,
    check_flag,
    check_itemsize,
    check_num_splits,
    check_order,
    check_page_size,
    check_size,
)
from .masking import n_key_blocks_visible, split_ranges

MiB = 1024 * 1024


@dataclass
class IOCount:
    """HBM traffic, FLOPs and SRAM working set of one attention computation.

    reads / writes: bytes moved between HBM and the chip, per tensor ("Q", "K", "V",
    "S", "P", "O", "lse", "l", "m"; the decode's "O_partial", "lse_partial", "block_table").
    flops: matmul FLOPs. sram_bytes: on-chip working
    set in bytes (0 for standard attention, which the model treats as streaming).
    """

    reads: dict = field(default_factory=dict)
    writes: dict = field(default_factory=dict)
    flops: int = 0
    sram_bytes: int = 0

    @property
    def hbm_read_bytes(self) -> int:
        """Total bytes read from HBM."""
        return sum(self.reads.values())

    @property
    def hbm_write_bytes(self) -> int:
        """Total bytes written to HBM."""
        return sum(self.writes.values())

    @property
    def hbm_bytes(self) -> int:
        """Bytes read plus bytes written."""
        return self.hbm_read_bytes + self.hbm_write_bytes

    @property
    def intensity(self) -> float:
        """Arithmetic intensity: matmul FLOPs per byte of HBM traffic (read + written), the x axis of
        a roofline (Williams, Waterman, Patterson 2009); 0.0 when nothing is moved."""
        return self.flops / self.hbm_bytes if self.hbm_bytes else 0.0

    def add(self, reads=None, writes=None, flops: int = 0) -> None:
        """Accumulate one step's traffic (bytes per tensor) and FLOPs in place."""
        for name, nbytes in (reads or {}).items():
            self.reads[name] = self.reads.get(name, 0) + int(nbytes)
        for name, nbytes in (writes or {}).items():
            self.writes[name] = self.writes.get(name, 0) + int(nbytes)
        self.flops += int(flops)

    def scaled(self, k: int) -> IOCount:
        """The count for ``k`` independent heads (every figure times k; SRAM unchanged)."""
        return IOCount({n: b * k for n, b in self.reads.items()}, {n: b * k for n, b in self.writes.items()},
                       self.flops * k, self.sram_bytes)

    def summary(self) -> str:
        """One line: MiB read / written, GFLOP and SRAM KiB."""
        return (f"HBM read {self.hbm_read_bytes / MiB:.3f} MiB, write {self.hbm_write_bytes / MiB:.3f} MiB, "
                f"{self.flops / 1e9:.3f} GFLOP, SRAM {self.sram_bytes / 1024:.1f} KiB")


def _sizes(Nq, Nk, d, dv, itemsize):
    Nq, Nk, d = check_size(Nq, "Nq"), check_size(Nk, "Nk"), check_size(d, "d")
    dv = d if dv is None else check_size(dv, "dv")
    return Nq, Nk, d, dv, check_itemsize(itemsize)


def standard_attention_io(Nq: int, Nk: int, d: int, *, dv: int | None = None, itemsize: int = 4) -> IOCount:
    """HBM traffic of standard attention, the paper's Algorithm 0.

    Read Q, K; write S; read S; write P; read P, V; write O.
    Nq, Nk: query/key counts; d: head dim of Q, K; dv: head dim of V (default d);
    itemsize: bytes per element (2 fp16/bf16, 4 fp32, 8 fp64).
    Returns an IOCount in bytes; flops = 2·Nq·Nk·d + 2·Nq·Nk·dv.
    Source: Dao et al. 2022, Algorithm 0 and Theorem 2 (Θ(Nd + N²) accesses).
    Raises ValueError/TypeError for sizes < 1 or a bad itemsize.
    """
    Nq, Nk, d, dv, b = _sizes(Nq, Nk, d, dv, itemsize)
    reads = {"Q": Nq * d * b, "K": Nk * d * b, "S": Nq * Nk * b, "P": Nq * Nk * b, "V": Nk * dv * b}
    writes = {"S": Nq * Nk * b, "P": Nq * Nk * b, "O": Nq * dv * b}
    return IOCount(reads, writes, 2 * Nq * Nk * d + 2 * Nq * Nk * dv, 0)


def sram_working_set(Br: int, Bc: int, d: int, *, dv: int | None = None, itemsize: int = 4) -> int:
    """Bytes on chip for one tile step: Q_i (Br·d), K_j (Bc·d), V_j (Bc·dv), S_ij/P_ij (Br·Bc),
    the O_i accumulator (Br·dv) and m_i, l_i (2·Br), all of ``itemsize`` bytes."""
    dv = d if dv is None else dv
    return (Br * d + Bc * d + Bc * dv + Br * Bc + Br * dv + 2 * Br) * itemsize


def flash_forward_io(Nq: int, Nk: int, d: int, *, Br: int, Bc: int, dv: int | None = None, itemsize: int = 4,
                     order: str = "fa2", causal: bool = False) -> IOCount:
    """HBM traffic, FLOPs and SRAM working set of the tiled forward pass, in closed form.

    Nq, Nk, d, dv: sizes (dv defaults to d); Br, Bc: block rows/cols (>= 1; the last tile
    may be partial); itemsize: bytes per element; order: "fa2" (query blocks outer,
    FlashAttention-2) or "fa1" (key blocks outer, the paper's Algorithm 1); causal:
    bottom-right aligned mask, only tiles with a visible key are computed.
    Returns an IOCount (bytes, matmul FLOPs, SRAM bytes). See the module docstring for
    the conventions. Source: Dao et al. 2022 Algorithm 1 and Theorem 2; Dao 2023 (FA2).
    Raises ValueError/TypeError for bad sizes, block sizes, itemsize or order.
    """
    Nq, Nk, d, dv, b = _sizes(Nq, Nk, d, dv, itemsize)
    Br, Bc = check_block(Br, "Br"), check_block(Bc, "Bc")
    order, causal = check_order(order), check_flag(causal, "causal")
    Tr = -(-Nq // Br)
    Tc = -(-Nk // Bc)
    # key columns covered by the first t key blocks: min(t·Bc, Nk)
    cols = lambda t: min(t * Bc, Nk)  # noqa: E731
    io = IOCount()
    n_tiles_total = 0
    q_rows_active = 0
    for i in range(Tr):
        r0, r1 = i * Br, min((i + 1) * Br, Nq)
        br = r1 - r0
        t = n_key_blocks_visible(r1, Nk, Bc, Nq, causal)
        n_tiles_total += t
        if t:
            q_rows_active += br
        io.flops += 2 * br * cols(t) * (d + dv)
        if order == "fa2":
            io.add(reads={"K": cols(t) * d * b, "V": cols(t) * dv * b})
        else:
            io.add(reads={"Q": t * br * d * b, "O": t * br * dv * b, "l": t * br * b, "m": t * br * b},
                   writes={"O": t * br * dv * b, "l": t * br * b, "m": t * br * b})
    if order == "fa2":
        io.add(reads={"Q": q_rows_active * d * b}, writes={"O": Nq * dv * b, "lse": Nq * b})
    else:
        # initialise O = 0, l = 0, m = -inf in HBM (Algorithm 1, line 2); K_j, V_j read once per j
        kv_cols = sum(min((j + 1) * Bc, Nk) - j * Bc for j in range(Tc) if _fa1_block_used(j, Bc, Nq, Nk, causal))
        io.add(reads={"K": kv_cols * d * b, "V": kv_cols * dv * b},
               writes={"O": Nq * dv * b, "l": Nq * b, "m": Nq * b})
    io.sram_bytes = sram_working_set(min(Br, Nq), min(Bc, Nk), d, dv=dv, itemsize=b)
    return io


def _fa1_block_used(j: int, Bc: int, Nq: int, Nk: int, causal: bool) -> bool:
    """FA1 loads K_j, V_j only if some query row can see key block j (the last row sees most)."""
    return not causal or j * Bc <= (Nq - 1) + (Nk - Nq)


# --------------------------------------------------------------------------------------------
# Backward pass (Dao et al. 2022 Algorithm 3 for standard attention, Algorithm 4 / Appendix B
# for FlashAttention; FlashAttention-2 Algorithm 2 for the loop order and the D preprocessing).
#
# Counting conventions of the tiled backward (``flashviz.backward.flash_backward``), bytes of
# the element type ``itemsize`` for every tensor (lse and D included):
#
# * preprocessing, once per query block i: read O_i, dO_i; write D_i = rowsum(dO_i ∘ O_i)
#   and zero dQ_i in HBM (FA2 clears its dQ accumulator in this same pass). O is read only here.
# * key blocks j outer: K_j, V_j read once; dK_j, dV_j accumulate on chip and are written once.
# * query blocks i inner, only tiles with a visible key (causal): read Q_i, dO_i, lse_i, D_i,
#   and dQ_i is read-modify-written in HBM every step (read + write of dQ_i per tile), as FA2
#   does with atomic adds. No final dQ conversion pass is counted.
# * FLOPs = matmul FLOPs, 5 matmuls per computed tile: S = scale·Q_i K_jᵀ (the recomputation),
#   dV += Pᵀ dO, dP = dO Vᵀ, dK += scale·dSᵀ Q, dQ += scale·dS K:
#   2·br·bc·(3·d + 2·dv) per tile. The recomputation's extra FLOPs are the S matmul alone.
# --------------------------------------------------------------------------------------------


def backward_sram_working_set(Br: int, Bc: int, d: int, *, dv: int | None = None, itemsize: int = 4) -> int:
    """Bytes on chip for one backward tile step, all of ``itemsize`` bytes:
    K_j, dK_j (2·Bc·d), V_j, dV_j (2·Bc·dv), Q_i, dQ_i (2·Br·d), dO_i (Br·dv), lse_i, D_i (2·Br),
    S_ij/P_ij (Br·Bc) and dP_ij/dS_ij (Br·Bc)."""
    dv = d if dv is None else dv
    return (2 * Bc * d + 2 * Bc * dv + 2 * Br * d + Br * dv + 2 * Br + 2 * Br * Bc) * itemsize


def flash_backward_io(Nq: int, Nk: int, d: int, *, Br: int, Bc: int, dv: int | None = None, itemsize: int = 4,
                      causal: bool = False) -> IOCount:
    """HBM traffic, FLOPs and SRAM working set of the tiled backward pass, in closed form.

    Nq, Nk, d, dv: sizes (dv defaults to d); Br, Bc: block rows/cols (>= 1; the last tile may be
    partial); itemsize: bytes per element; causal: bottom-right aligned mask, only tiles with a
    visible key are computed. With Tr = ceil(Nq/Br) and, non-causal, every tile computed:

        reads  O, dO: Nq·dv each (preprocessing) + dO: Tc·Nq·dv; Q: Tc·Nq·d; lse, D: Tc·Nq each;
               dQ: Tc·Nq·d; K: Nk·d; V: Nk·dv
        writes D: Nq; dQ: Nq·d (zeroing) + Tc·Nq·d; dK: Nk·d; dV: Nk·dv
        flops  2·Nq·Nk·(3·d + 2·dv)

    (all counts times ``itemsize``; Tc = ceil(Nk/Bc)). Conventions: see the comment block above
    this function and ``flashviz.backward.flash_backward``. Returns an IOCount with reads/writes
    keyed "O", "dO", "D", "Q", "K", "V", "lse", "dQ", "dK", "dV". Source: Dao et al. 2022
    Algorithm 4 and Theorem 5; Dao 2023 Algorithm 2. Raises ValueError/TypeError for bad sizes,
    block sizes or itemsize.
    """
    Nq, Nk, d, dv, b = _sizes(Nq, Nk, d, dv, itemsize)
    Br, Bc = check_block(Br, "Br"), check_block(Bc, "Bc")
    causal = check_flag(causal, "causal")
    Tr, Tc = -(-Nq // Br), -(-Nk // Bc)
    io = IOCount(reads={"O": Nq * dv * b, "dO": Nq * dv * b}, writes={"D": Nq * b, "dQ": Nq * d * b})
    for i in range(Tr):
        br = min((i + 1) * Br, Nq) - i * Br
        t = n_key_blocks_visible(min((i + 1) * Br, Nq), Nk, Bc, Nq, causal)   # tiles (i, 0..t-1)
        cols = min(t * Bc, Nk)
        io.add(reads={"Q": t * br * d * b, "dO": t * br * dv * b, "lse": t * br * b, "D": t * br * b,
                      "dQ": t * br * d * b},
               writes={"dQ": t * br * d * b})
        io.flops += 2 * br * cols * (3 * d + 2 * dv)
    kv_cols = sum(min((j + 1) * Bc, Nk) - j * Bc for j in range(Tc) if _fa1_block_used(j, Bc, Nq, Nk, causal))
    io.add(reads={"K": kv_cols * d * b, "V": kv_cols * dv * b}, writes={"dK": Nk * d * b, "dV": Nk * dv * b})
    io.sram_bytes = backward_sram_working_set(min(Br, Nq), min(Bc, Nk), d, dv=dv, itemsize=b)
    return io


def standard_backward_io(Nq: int, Nk: int, d: int, *, dv: int | None = None, itemsize: int = 4) -> IOCount:
    """HBM traffic of the standard attention backward pass, the paper's Algorithm 3.

    The forward stored P (Nq×Nk) in HBM. Then, each step reading and writing HBM:
    1. read P, dO; write dV = Pᵀ dO          2. read dO, V; write dP = dO Vᵀ
    3. read P, dP; write dS = P∘(dP − rowsum(P∘dP))
    4. read dS, K; write dQ = dS K            5. read dS, Q; write dK = dSᵀ Q
    So P, dO and dS are each read twice; dP and dS are each written once (Nq·Nk elements).
    For Nq = Nk = N and dv = d: reads 5·N² + 5·N·d, writes 2·N² + 3·N·d elements.
    The scale factor is folded into the matmuls; FLOPs = 4 matmuls, 2·Nq·Nk·(2·d + 2·dv).
    Nq, Nk, d, dv (default d): sizes; itemsize: bytes per element. Returns an IOCount in bytes
    (reads/writes keyed "P", "dO", "V", "dP", "dS", "K", "Q", "dQ", "dK", "dV"; sram_bytes 0).
    Source: Dao et al. 2022, Appendix B.2, Algorithm 3. Raises ValueError/TypeError for bad sizes.
    """
    Nq, Nk, d, dv, b = _sizes(Nq, Nk, d, dv, itemsize)
    NN = Nq * Nk * b
    reads = {"P": 2 * NN, "dO": 2 * Nq * dv * b, "V": Nk * dv * b, "dP": NN, "dS": 2 * NN,
             "K": Nk * d * b, "Q": Nq * d * b}
    writes = {"dV": Nk * dv * b, "dP": NN, "dS": NN, "dQ": Nq * d * b, "dK": Nk * d * b}
    return IOCount(reads, writes, 2 * Nq * Nk * (2 * d + 2 * dv), 0)


def stored_between_passes(Nq: int, Nk: int, *, itemsize: int = 4, lse_itemsize: int | None = None) -> dict:
    """Bytes the forward leaves in HBM for the backward, beyond Q, K, V and O (one head).

    Standard attention keeps P (Nq×Nk elements of ``itemsize`` bytes); FlashAttention keeps only
    the row log-sum-exp lse (Nq numbers) and recomputes P from it. lse is kept in float32 (4 bytes
    a row) even when the activations are fp16/bf16, as FlashAttention-2 does (its softmax_lse is
    fp32) and as ``flashviz.tiled.flash_forward`` does (lse in the fp32 accumulator; float64
    inputs keep a float64 lse). So ``lse_itemsize`` defaults to max(itemsize, 4); give it to
    count another width. Returns {"standard (P)": Nq·Nk·itemsize, "flash (lse)": Nq·lse_itemsize}.
    (The traffic models, flash_forward_io / flash_backward_io, still count lse reads and writes
    in the element type, like every other tensor.)
    Source: Dao et al. 2022, Section 3.1 (recomputation); Dao 2023 (lse in fp32).
    Raises ValueError/TypeError for bad sizes or itemsizes.
    """
    Nq, Nk, b = check_size(Nq, "Nq"), check_size(Nk, "Nk"), check_itemsize(itemsize)
    lb = max(b, 4) if lse_itemsize is None else check_itemsize(lse_itemsize)
    return {"standard (P)": Nq * Nk * b, "flash (lse)": Nq * lb}


def recompute_extra_flops(Nq: int, Nk: int, d: int, causal: bool = False, *, Br: int | None = None,
                          Bc: int | None = None) -> int:
    """Matmul FLOPs FlashAttention's backward spends recomputing S = scale·QKᵀ (2 per multiply-add).

    Without blocks: 2·d times the number of (query, key) pairs computed — all Nq·Nk, or with
    ``causal`` only the visible pairs (bottom-right aligned), the ideal a perfectly masked kernel
    would reach. With Br and Bc given: tile-granular like the run, 2·br·bc·d for every computed
    tile (partially masked tiles count in full) — equal to the sum over the trace's
    ``recompute_P`` events. Source: Dao et al. 2022, Section 3.1 and Theorem 5.
    Raises ValueError/TypeError for bad sizes or when only one of Br, Bc is given.
    """
    Nq, Nk, d = check_size(Nq, "Nq"), check_size(Nk, "Nk"), check_size(d, "d")
    causal = check_flag(causal, "causal")
    if (Br is None) != (Bc is None):
        raise ValueError(f"give both Br and Bc (tile-granular count) or neither, got Br={Br!r}, Bc={Bc!r}")
    if Br is None:
        if not causal:
            return 2 * Nq * Nk * d
        # query row r sees keys 0..min(Nk-1, r + Nk - Nq): sum of max(0, min(Nk, r + Nk - Nq + 1))
        pairs = sum(max(0, min(Nk, r + Nk - Nq + 1)) for r in range(Nq))
        return 2 * pairs * d
    Br, Bc = check_block(Br, "Br"), check_block(Bc, "Bc")
    total = 0
    for i in range(-(-Nq // Br)):
        r1 = min((i + 1) * Br, Nq)
        t = n_key_blocks_visible(r1, Nk, Bc, Nq, causal)
        total += 2 * (r1 - i * Br) * min(t * Bc, Nk) * d
    return total


# --------------------------------------------------------------------------------------------
# Decode: split-KV (Flash-Decoding), GQA and a paged KV cache (``flashviz.decode``). The closed
# form below counts from the shapes alone; the run counts its steps; the tests check they agree.
# --------------------------------------------------------------------------------------------

#: bytes of one block-table entry (int32, as vLLM's and FlashAttention's block_table)
BLOCK_TABLE_ITEMSIZE = 4


def decode_io(Nq: int, Nk: int, d: int, *, H: int, H_kv: int, num_splits: int, Bc: int, itemsize: int,
              page_size: int | None = None, causal: bool = False, B: int = 1, dv: int | None = None,
              partial_itemsize: int | None = None) -> IOCount:
    """HBM traffic, FLOPs and SRAM working set of the split-KV decode, in closed form.

    The work (``flashviz.decode.decode_attention``): one block of work per (sequence b, KV head g,
    split s), as Flash-Decoding launches them. Block (b, g) holds the R = G·Nq query rows of the
    G = H / H_kv query heads that share KV head g (grouped-query attention, the heads packed into one
    query block as FlashAttention's PackGQA does), so K and V of a head are read once per split for
    the whole group. The Tc = ⌈Nk/Bc⌉ key blocks are cut into ``num_splits`` contiguous splits
    (``masking.split_ranges``). Counting conventions, bytes of the element type (``itemsize``) unless
    said otherwise, summed over the B·H_kv blocks:

    * a split with key blocks to visit reads Q once (R·d) and each of its key blocks K_j, V_j once
      (bc·d and bc·dv, bc = the block's keys, the last block partial). With ``causal`` only the key
      blocks some query row sees are visited (``masking.n_key_blocks_visible`` of the block's last
      row); in decode the last query row sees every key, so causal skips no block, only masks
      inside them. An empty split (num_splits > Tc) reads nothing.
    * paged KV cache (``page_size`` given): every key block also reads the block-table entries of
      the pages it touches, ⌊(c1−1)/page_size⌋ − ⌊c0/page_size⌋ + 1 entries of 4 bytes (int32)
      for keys [c0, c1) — the look-up a paged kernel does for each tile; K and V bytes are the same.
    * num_splits = 1: the split writes O (R·dv) and lse (R) itself, as the forward does; nothing
      else is written.
    * num_splits > 1: every split, empty ones too, writes its partial O_s (R·dv) and lse_s (R) in
      the accumulator type, ``partial_itemsize`` bytes (default max(itemsize, 4): fp32 partials for
      fp16/bf16/fp32 inputs, as FlashAttention's out_accum and softmax_lse_accum; float64 for
      float64, as the NumPy run keeps them); the merge reads every partial back once (the same
      bytes) and writes O (R·dv) and lse (R) in the element type.
    * FLOPs are matmul FLOPs (the project's convention): 2·R·bc·d for S_ij = Q K_jᵀ plus 2·R·bc·dv
      for P_ij V_j per visited key block; causal counts whole blocks (masked entries included);
      the merge's rescaling is elementwise and counts no FLOPs.
    * sram_bytes: ``sram_working_set`` of one tile step with Br = R and Bc clipped to Nk.

    Non-causal, Tc ≥ num_splits = S > 1, that is: reads K = B·H_kv·Nk·d·b, V = B·H_kv·Nk·dv·b,
    Q = S·B·H·Nq·d·b, O_partial = S·B·H·Nq·dv·p, lse_partial = S·B·H·Nq·p; writes the same partials,
    O = B·H·Nq·dv·b, lse = B·H·Nq·b; flops = 2·B·H·Nq·Nk·(d + dv). ``.intensity`` (FLOPs per byte)
    is about 2·G·Nq·(d + dv) / ((d + dv)·b) = 2·G·Nq / b when K and V dominate: one multiply-add per
    element of K and V per query row, times the group size G.

    Parameters: Nq (query rows per head, e.g. 1..8), Nk (keys per sequence), d (head dim of Q, K),
    dv (of V, default d), H (query heads), H_kv (KV heads, H % H_kv == 0), B (sequences), Bc (key
    block), num_splits (1 to ``checks.MAX_NUM_SPLITS``, 4,096), itemsize (bytes per element: 1, 2,
    4, 8), page_size (tokens per page, 1 to ``checks.MAX_PAGE_SIZE``, 65,536; None for a contiguous
    cache), causal (bottom-right aligned), partial_itemsize.
    Returns an IOCount keyed "Q", "K", "V", "block_table" (paged only), "O_partial", "lse_partial"
    (num_splits > 1 only) in reads and "O_partial", "lse_partial", "O", "lse" in writes.
    Source: Dao, Haziza, Massa, Sizov 2023, "Flash-Decoding for long-context inference";
    Dao 2023 (FlashAttention-2) for the split's inner loop; Ainslie et al. 2023 (GQA);
    Kwon et al. 2023 (PagedAttention, vLLM) for the paged cache.
    Raises ValueError/TypeError for bad sizes, H % H_kv != 0, or a bad itemsize.
    """
    Nq, Nk, d, dv, b = _sizes(Nq, Nk, d, dv, itemsize)
    H, H_kv, B = check_size(H, "H"), check_size(H_kv, "H_kv"), check_size(B, "B")
    if H % H_kv:
        raise ValueError(f"H must be a multiple of H_kv (each KV head serves H // H_kv query heads), "
                         f"got H={H}, H_kv={H_kv}")
    num_splits, Bc = check_num_splits(num_splits), check_block(Bc, "Bc")
    page_size = None if page_size is None else check_page_size(page_size)
    causal = check_flag(causal, "causal")
    p = max(b, 4) if partial_itemsize is None else check_itemsize(partial_itemsize)
    R = (H // H_kv) * Nq                                  # query rows of one (b, g) block
    Tc = -(-Nk // Bc)
    t_vis = n_key_blocks_visible(Nq, Nk, Bc, Nq, causal)  # key blocks the block's last row sees
    io = IOCount()
    for j0, j1 in split_ranges(Tc, num_splits):
        j1 = min(j1, t_vis)
        if j1 > j0:
            cols = min(j1 * Bc, Nk) - j0 * Bc
            io.add(reads={"Q": R * d * b, "K": cols * d * b, "V": cols * dv * b}, flops=2 * R * cols * (d + dv))
            if page_size is not None:
                entries = sum((min((j + 1) * Bc, Nk) - 1) // page_size - (j * Bc) // page_size + 1
                              for j in range(j0, j1))
                io.add(reads={"block_table": entries * BLOCK_TABLE_ITEMSIZE})
        if num_splits > 1:
            io.add(writes={"O_partial": R * dv * p, "lse_partial": R * p})
    if num_splits > 1:
        io.add(reads={"O_partial": num_splits * R * dv * p, "lse_partial": num_splits * R * p})
    io.add(writes={"O": R * dv * b, "lse": R * b})
    io = io.scaled(B * H_kv)
    io.sram_bytes = sram_working_set(R, min(Bc, Nk), d, dv=dv, itemsize=b)
    return io


# --------------------------------------------------------------------------------------------
# Block size (chapter 4): the paper's choice of Br, Bc, the Θ(N²d²/M) curve of Theorem 2, and a
# sweep of Br × Bc against an SRAM budget M. Every count below is ``flash_forward_io`` and
# ``sram_working_set`` above; nothing is counted a second way.
# --------------------------------------------------------------------------------------------

#: block sizes the sweep tries by default (Br and Bc each)
SWEEP_BLOCKS = (16, 32, 64, 128, 256)
#: SRAM budgets M (bytes): on-chip shared memory a thread block may opt in to. Sources: NVIDIA
#: A100 and H100 tuning guides (164 KB and 228 KB per SM; 163 KB and 227 KB per block); the H200
#: value was read from the device attribute on 2026-11-29 (232,448 bytes per block).
SRAM_BUDGETS = {
    "H100/H200: 227 KiB": 232_448,
    "A100: 163 KiB": 166_912,
    "toy: 16 KiB": 16 * 1024,
}
#: leading constant c of the Θ(N²d²/M) curve, per loop order: fa1 (Algorithm 1, Theorem 2) 3·N·d per
#: pass over Q, O times Tc = 4Nd/M passes; fa2 2·N·d (K, V) times Tr = 4Nd/M (see ``asymptotic_flash_io``)
ASYMPTOTIC_CONSTANT = {"fa2": 8, "fa1": 12}


def _check_budget(M, name: str = "M") -> int:
    if isinstance(M, bool) or not isinstance(M, numbers.Integral):
        raise TypeError(f"{name} must be an integer number of bytes >= 1, got {M!r}")
    if M < 1:
        raise ValueError(f"{name} must be an integer number of bytes >= 1, got {M}")
    return int(M)


def paper_block_sizes(M: int, d: int, *, itemsize: int = 4) -> tuple[int, int]:
    """The paper's block sizes for an SRAM of M bytes: Bc = ⌈M/(4d)⌉, Br = min(Bc, d).

    M is in bytes and is converted to elements first (M // itemsize, rounded down), as the paper
    counts SRAM in elements. The choice makes K_j and V_j (Bc×d) each about a quarter of SRAM and
    keeps S_ij (Br×Bc ≤ M/4) in it too. It is sized for Algorithm 1's loop order (key blocks outer,
    whose traffic is set by Bc); with the rounding up and m, l the exact ``sram_working_set`` may
    exceed M by a little — check it. Returns (Br, Bc), ints >= 1.
    Source: Dao et al. 2022, Algorithm 1, line 1. Raises ValueError/TypeError for M < 1 byte, a bad
    d or itemsize, or M smaller than one element.
    """
    M, d, b = _check_budget(M), check_size(d, "d"), check_itemsize(itemsize)
    M_el = M // b
    if M_el < 1:
        raise ValueError(f"M = {M} bytes holds no {b}-byte element; give M >= {b}")
    Bc = -(-M_el // (4 * d))
    return min(Bc, d), Bc


def asymptotic_flash_io(N: int, d: int, M: int, *, itemsize: int = 4, order: str = "fa2") -> float:
    """The leading-order term c·N²d²/M of the forward pass's HBM traffic, in bytes (Theorem 2's Θ(N²d²/M)).

    Returns c·N²·d²/M_el elements times ``itemsize`` bytes, where M_el = M / itemsize is the SRAM size
    in elements (M in bytes; not rounded); c = 12 for order="fa1", 8 for order="fa2".

    order="fa1" is the paper's Algorithm 1 (key blocks outer), the order Theorem 2 is proved for, with
    the paper's Bc = M_el/(4d): there are Tc = N/Bc = 4Nd/M_el key blocks, and for each one the inner
    loop passes over all of Q (read) and O (read and written back): 3·N·d·Tc = 12·N²d²/M_el. Left out:
    K, V read once and O, l, m initialised (3·N·d + 2·N), and the l, m reads and writes of every pass
    (4·N·Tc = 16·N²d/M_el, a fraction 4/(3d) of the leading term, so exact/leading → 1 + 4/(3d)
    as N grows with Bc = M_el/(4d) exactly). Br does not enter (the paper takes min(⌈M_el/(4d)⌉, d)).
    order="fa2" (FlashAttention-2, query blocks outer) is the same counting with a query block of
    Br = M_el/(4d) rows — not the paper's Br = min(⌈M_el/(4d)⌉, d), which is sized for Algorithm 1:
    K and V (2·N·d) are re-read Tr = N/Br = 4Nd/M_el times: 8·N²d²/M_el. Left out: Q read and O, lse
    written once (2·N·d + N). With those block sizes ``flash_forward_io`` exceeds this term by
    exactly the parts left out (when Tc or Tr is a whole number).
    N: sequence length (Nq = Nk = N), d: head dim, M: SRAM bytes, itemsize: bytes per element.
    Source: Dao et al. 2022, Algorithm 1 line 1, Theorem 2 and its proof (Appendix C).
    Raises ValueError/TypeError for sizes < 1, a bad itemsize or order.
    """
    N, d, b = check_size(N, "N"), check_size(d, "d"), check_itemsize(itemsize)
    M, order = _check_budget(M), check_order(order)
    M_el = M / b
    return ASYMPTOTIC_CONSTANT[order] * N * N * d * d / M_el * b


def block_size_sweep(N: int, d: int, *, blocks=SWEEP_BLOCKS, itemsize: int = 4, sram_budget: int,
                     order: str = "fa2", causal: bool = False, progress=None) -> list[dict]:
    """Every Br × Bc from ``blocks``: HBM traffic, FLOPs, SRAM working set and whether it fits.

    N: sequence length (Nq = Nk = N); d: head dim (dv = d); blocks: the sizes tried for Br and for Bc
    (distinct integers >= 1); itemsize: bytes per element; sram_budget: M, on-chip bytes one thread
    block may use (e.g. 232,448 on an H100/H200); order, causal: as in ``flash_forward_io``;
    progress: optional callable(i, n) called after each configuration (a tqdm update, say).
    Returns one dict per configuration, Br outer and Bc inner in the order of ``blocks``, with keys
    Br, Bc, Tr, Tc (⌈N/Br⌉, ⌈N/Bc⌉), hbm_bytes (read + written), hbm_read_bytes, hbm_write_bytes,
    flops (matmul), sram_bytes (``sram_working_set`` of the tile, clipped to N) and fits
    (sram_bytes <= sram_budget). A configuration that does not fit would spill out of SRAM: a real
    kernel either cannot launch it or pays extra memory traffic the model does not count.
    Source: ``flash_forward_io`` (Dao et al. 2022, Algorithm 1 and Theorem 2; Dao 2023).
    Raises ValueError/TypeError for bad sizes, blocks, budget, itemsize or order.
    """
    N, d, b = check_size(N, "N"), check_size(d, "d"), check_itemsize(itemsize)
    M, order, causal = _check_budget(sram_budget, "sram_budget"), check_order(order), check_flag(causal, "causal")
    blocks = check_blocks(blocks)
    rows, n = [], len(blocks) ** 2
    for Br in blocks:
        for Bc in blocks:
            io = flash_forward_io(N, N, d, Br=Br, Bc=Bc, itemsize=b, order=order, causal=causal)
            rows.append({"Br": Br, "Bc": Bc, "Tr": -(-N // Br), "Tc": -(-N // Bc), "hbm_bytes": io.hbm_bytes,
                         "hbm_read_bytes": io.hbm_read_bytes, "hbm_write_bytes": io.hbm_write_bytes,
                         "flops": io.flops, "sram_bytes": io.sram_bytes, "fits": io.sram_bytes <= M})
            if progress is not None:
                progress(len(rows), n)
    return rows


def best_of_sweep(rows) -> dict | None:
    """The fitting row of a ``block_size_sweep`` with the least HBM traffic; ties go to the largest
    tile Br·Bc, then the larger Br. None when no row fits."""
    fitting = [r for r in rows if r["fits"]]
    if not fitting:
        return None
    return min(fitting, key=lambda r: (r["hbm_bytes"], -r["Br"] * r["Bc"], -r["Br"]))


def best_fitting_blocks(N: int, d: int, *, blocks=SWEEP_BLOCKS, itemsize: int = 4, sram_budget: int,
                        order: str = "fa2", causal: bool = False) -> dict | None:
    """The optimum of ``block_size_sweep`` (same arguments): the configuration that fits in
    ``sram_budget`` bytes with the least HBM traffic; among equal traffic, the largest tile Br·Bc
    (then the larger Br). Returns that row (a dict, see ``block_size_sweep``), or None when no
    configuration fits. In FA2 order the traffic depends on Br only (K, V re-read Tr times), in FA1
    order on Bc only (Q, O passes Tc times), so the other block is as large as still fits.
    Raises ValueError/TypeError as ``block_size_sweep``.
    """
    return best_of_sweep(block_size_sweep(N, d, blocks=blocks, itemsize=itemsize, sram_budget=sram_budget,
                                          order=order, causal=causal))
