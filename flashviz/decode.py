"""Decode attention in NumPy, exact, traced: split-KV (Flash-Decoding), GQA and a paged KV cache.

At inference a model generates one token at a time: Nq = 1 (up to a few, for speculative decoding)
query rows per head against a KV cache of Nk keys. FlashAttention-2 parallelises over (batch, head,
query block), which gives only B·H_kv blocks of work at decode; Flash-Decoding (Dao, Haziza, Massa,
Sizov 2023) also splits the keys, in three steps:

1. split the Tc = ⌈Nk/Bc⌉ key blocks into ``num_splits`` contiguous ranges (``masking.split_ranges``);
2. for each (sequence b, KV head g, split s), run FlashAttention-2's tiled online softmax (Dao 2023,
   Algorithm 1) over the split's key blocks and write the split's partial result: its normalised
   output O_s = diag(l_s)⁻¹ Õ_s and its row log-sum-exp lse_s = m_s + log l_s (``write_partial``);
3. merge the partials rescaled by their lse (``merge``), one split at a time, with the same
   rescale the online softmax applies to a new key block (Dao et al. 2022, Section 3.1):

       m ← max(m, lse_s);  alpha = exp(m_old − m);  beta = exp(lse_s − m)
       l ← alpha·l + beta;  O ← alpha·O + beta·O_s;      finally O ← O / l, lse = m + log l

   A split is merged as if it were one key whose score is lse_s and whose value is O_s, so
   O = Σ_s exp(lse_s − lse)·O_s and lse = log Σ_s exp(lse_s) — exactly softmax(S)V over all keys.

Grouped-query attention (Ainslie et al. 2023): H query heads share H_kv KV heads, query head h reads
KV head h // (H // H_kv). The G = H // H_kv heads of a group, with their Nq rows each, form one
query block of R = G·Nq rows (FlashAttention's PackGQA), so K and V of a head are read once per
split for the whole group: G times the arithmetic intensity of MHA.

Paged KV cache (Kwon et al. 2023, vLLM's PagedAttention; FlashAttention's ``block_table``): K and V
are pools of pages, shape (num_pages, page_size, H_kv, d) — FlashAttention's k_cache layout
(num_blocks, page_block_size, nheads_k, headdim) — and an int ``block_table`` (B, max_pages) (or
(max_pages,) without a batch axis) maps page p of sequence b, its keys p·page_size ..
(p+1)·page_size − 1, to pool page block_table[b, p]. Every key block looks up the pages it touches
(4 bytes an entry, counted as "block_table" reads).

Counting conventions (equal to ``iomodel.decode_io``, tested): see that function. In short: a split
reads Q once and its K_j, V_j once; every split writes its partial (accumulator dtype) and the
merge reads them all back and writes O, lse; with num_splits = 1 the one split writes O, lse
directly and there is no partial and no merge. FLOPs are matmul FLOPs.

Each block of ``_decode_block`` opens with a tag naming its step (``flashviz.steps``): the forward's
steps inside a split, ``write_partial`` and ``merge`` for Flash-Decoding's steps 2 and 3.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field

import numpy as np

from .checks import (
    as_float_array,
    as_matrix_stack,
    check_block,
    check_flag,
    check_lse_values,
    check_num_splits,
    check_page_size,
    check_scale,
    check_score_range,
    check_value_range,
    result_dtype,
    shown,
)
from .iomodel import BLOCK_TABLE_ITEMSIZE, IOCount, sram_working_set
from .masking import n_key_blocks_visible, split_ranges, tile_kind
from .online import safe_exp_diff
from .tiled import finish_row_stats, normalise_rows, online_update, tile_scores
from .trace import Recorder, Trace, TraceEvent

#: SMs of the GPUs the lessons measure (H100 SXM and H200: 132 each), the default of the heuristic
NUM_SMS = 132
#: most splits the heuristic picks (FlashAttention caps its automatic choice at 128)
MAX_SPLITS = 128


# --- the split count ------------------------------------------------------------------------------

def num_splits_heuristic(n_blocks: int, Tc: int, *, num_sms: int = NUM_SMS, blocks_per_sm: int = 1,
                         max_splits: int = MAX_SPLITS) -> int:
    """The default ``num_splits``: as many splits as one wave of the GPU holds, then the fewest that
    keep the longest split as short.

    n_blocks: blocks of work without splitting, B·H_kv here (one packed query block per sequence
    and KV head); Tc: key blocks per sequence, ⌈Nk/Bc⌉; num_sms: streaming multiprocessors (132 on
    an H100 SXM or H200); blocks_per_sm: blocks one SM runs at once (1 for the lessons' model GPU;
    ``gpu.decode`` passes its kernel's occupancy, 2 at d = 128); max_splits: cap. The rule, in the
    manner of FlashAttention's split-KV heuristic (``num_splits_heuristic`` in FlashAttention-2's
    flash_api.cpp and FlashAttention-3's hopper/heuristics.h, read on 2026-12-04; re-implemented
    here, not copied), with slots = num_sms·blocks_per_sm:

    * 1 split when the blocks nearly fill the slots already (n_blocks >= 0.8·slots), or when there
      are 4 key blocks or fewer (too little work to share out);
    * otherwise at most s_max = min(⌊slots / n_blocks⌋, max_splits, Tc) splits, so that every block
      runs in the first wave — the decode kernel's measured sweep (benchmarks/NOTES.md, Decode) ran
      two waves of half-length splits 10–30 % slower than one wave;
    * the time of one wave is its longest split, ⌈Tc/s⌉ key blocks (``masking.split_ranges``
      makes splits of ⌊Tc/s⌋ or ⌈Tc/s⌉ blocks), so the smallest s with ⌈Tc/s⌉ = ⌈Tc/s_max⌉ wins:
      fewer splits, the same longest split, fewer partials written and read back (FlashAttention-2
      skips such split counts too).

    Example: B = 1, H_kv = 8, Nk = 4096, Bc = 64 (Tc = 64), 132 SMs: s_max = 16, 4 key blocks a
    split, 16 splits (128 of 132 SMs busy); with 2 blocks an SM (slots 264): s_max = 33, whose
    longest split has 2 key blocks, as has 32: 32 splits.
    Returns an int >= 1. Raises TypeError/ValueError for arguments that are not integers >= 1.
    """
    n_blocks, Tc = check_block(n_blocks, "n_blocks"), check_block(Tc, "Tc")
    num_sms, max_splits = check_block(num_sms, "num_sms"), check_block(max_splits, "max_splits")
    slots = num_sms * check_block(blocks_per_sm, "blocks_per_sm")
    if 5 * n_blocks >= 4 * slots or Tc <= 4:
        return 1
    s_max = min(slots // n_blocks, max_splits, Tc)
    longest = -(-Tc // s_max)
    return -(-Tc // longest)        # the smallest s with ⌈Tc/s⌉ <= longest


# --- the merge (Flash-Decoding step 3) --------------------------------------------------------------

def merge_step(m, l, O, lse_s, O_s, *, rescale: bool = True):
    """Fold one split's partial (lse_s, O_s) into the running merge state (m, l, O).

    m, l: (...,) the running max of the lse_s merged so far and the running sum Σ exp(lse_s − m)
    (−inf and 0 before the first split); O: (..., dv) the running Σ exp(lse_s − m)·O_s; lse_s: (...,)
    the split's row log-sum-exp (−inf for a row that saw no key of the split); O_s: (..., dv) the
    split's normalised output (0 for such a row). float32 or float64, one dtype.
    Returns m_new, l_new, O_new (same shapes) and the factors alpha = exp(m − m_new) (the rescale of
    what was merged before) and beta = exp(lse_s − m_new) (the weight of this split), never NaN
    (``online.safe_exp_diff``: a split or a state with −inf weighs 0).
    This is the online softmax's rescale (Dao et al. 2022, Section 3.1; FlashAttention-2, Algorithm 1
    lines 9-10) with a whole split as one key of score lse_s and value O_s.
    rescale=False is the "break it" mode, as in ``tiled.online_update``: the rescale of what was
    merged before is forgotten (alpha = 1 wherever something was merged, 0 where m is still −inf),
    while the new split is still weighed by beta = exp(lse_s − m_new). The running l and O then
    keep the scale of an older, smaller max: once a later split raises the max, the earlier splits
    weigh exp(m_new − m_old) times too much and the merged O is wrong; it stays right only when
    the max never rises (the first split holds the largest lse_s of each row).
    Source: Dao, Haziza, Massa, Sizov 2023, Flash-Decoding, step 3.
    """
    m_new = np.maximum(m, lse_s)
    alpha = safe_exp_diff(m, m_new)
    if not rescale:                              # "break it": forget to correct the old sums
        alpha = np.where(np.isneginf(m), 0.0, 1.0).astype(alpha.dtype)
    beta = safe_exp_diff(lse_s, m_new)
    return m_new, alpha * l + beta, alpha[..., None] * O + beta[..., None] * O_s, alpha, beta


def _merge(lse_parts, O_parts, on_step=None, rescale=True):
    """Merge partials split by split with ``merge_step``; ``on_step(s, m_old, m, l, O, alpha, beta)``
    is called after each split (the trace). Returns (m, l, O unnormalised)."""
    m = np.full(lse_parts.shape[1:], -np.inf, lse_parts.dtype)
    l = np.zeros_like(m)
    O = np.zeros(O_parts.shape[1:], O_parts.dtype)
    for s in range(lse_parts.shape[0]):
        m_old = m
        m, l, O, alpha, beta = merge_step(m, l, O, lse_parts[s], O_parts[s], rescale=rescale)
        if on_step is not None:
            on_step(s, m_old, m, l, O, alpha, beta)
    return m, l, O


def merge_partials(lse_parts, O_parts, *, rescale: bool = True):
    """Merge the partials of S splits: O = Σ_s exp(lse_s − lse)·O_s and lse = log Σ_s exp(lse_s).

    lse_parts: (S, ...) the splits' row log-sum-exp (−inf where a split saw no key of that row);
    O_parts: (S, ..., dv) their normalised outputs (0 there). Returns O (..., dv) and lse (...,)
    (dtype: see Inputs below); rows no split saw get O = 0 and lse = −inf, never NaN. The merge
    runs split by split (``merge_step``), as ``decode_attention`` does and traces. With
    ``r = decode_attention(...)``: ``merge_partials(np.stack([p.lse for p in r.partials]),
    np.stack([p.O for p in r.partials]))`` gives r.O and r.lse.
    rescale : bool, default True. False is the "break it" mode (``merge_step``): the running sums
        are never rescaled when a later split raises the max, so with M_s = max(lse_0..lse_s) the
        result is Σ_s exp(lse_s − M_s)·O_s / Σ_s exp(lse_s − M_s) — the exact O only when every
        row's max lse_s comes first. The returned lse is then m + log l of those wrong sums.
    Inputs: arrays or array-likes of float16/32/64 (integers are promoted to float64); the merge
    runs, and the result is returned, in the wider of their two dtypes, at least float32.
    Raises a one-line TypeError for a non-numeric, boolean or complex input (``checks.as_float_array``)
    or a rescale that is not True or False; ValueError for mismatched shapes, NaN or +inf in
    lse_parts (−inf is legal: a split that saw no key of that row), NaN/inf in O_parts, or
    O_parts so large that the running sum S·max|O_parts| could overflow the dtype
    (``checks.check_value_range``).
    Source: Flash-Decoding (Dao, Haziza, Massa, Sizov 2023), step 3.
    """
    rescale = check_flag(rescale, "rescale")
    lse_parts = as_float_array(lse_parts, "lse_parts", "of shape (S, ...)")
    O_parts = as_float_array(O_parts, "O_parts", "of shape (S, ..., dv)")
    if lse_parts.ndim < 1 or O_parts.shape[:-1] != lse_parts.shape or lse_parts.shape[0] < 1:
        raise ValueError(f"merge_partials needs lse_parts (S, ...) and O_parts (S, ..., dv) with S >= 1, "
                         f"got {lse_parts.shape} and {O_parts.shape}")
    check_lse_values(lse_parts, "lse_parts", "a split that saw no key of that row")
    if not np.isfinite(O_parts).all():
        raise ValueError("O_parts contains NaN or inf; the splits' normalised outputs must be finite")
    dt = np.result_type(lse_parts.dtype, O_parts.dtype, np.float32)
    check_value_range(O_parts, O_parts.shape[0], dt, name="O_parts", count="S", unit="splits")
    lse_parts, O_parts = lse_parts.astype(dt, copy=False), O_parts.astype(dt, copy=False)
    m, l, O = _merge(lse_parts, O_parts, rescale=rescale)
    return normalise_rows(O, l), finish_row_stats(m, l)


# --- results and trace ------------------------------------------------------------------------------

@dataclass
class Partial:
    """One split's result before the merge.

    s: the split's index; j0, j1: its key blocks [j0, j1) (j0 == j1: an empty split); c0, c1: its
    keys [c0, c1) (c0 == c1 when empty); m, l: (..., H, Nq) its row max and row sum over its own
    keys (−inf and 0 for a row that sees none of them); O: (..., H, Nq, dv) its normalised output
    diag(l)⁻¹ Õ (0 for such a row) — what the split writes to HBM together with ``lse``. Arrays in
    the accumulator dtype (float64 for float64 inputs, else float32).
    """

    s: int
    j0: int
    j1: int
    c0: int
    c1: int
    m: np.ndarray
    l: np.ndarray
    O: np.ndarray

    @property
    def lse(self) -> np.ndarray:
        """(..., H, Nq) the split's row log-sum-exp m + log l (−inf for a row that sees none of its keys)."""
        return finish_row_stats(self.m, self.l)


@dataclass
class DecodeResult:
    """Result of ``decode_attention``.

    O: (..., H, Nq, dv) in the inputs' dtype; lse: (..., H, Nq) in the accumulator dtype (float64
    for float64 inputs, float32 otherwise); partials: one ``Partial`` per split; io: IOCount counted
    from the run (all sequences and heads; equal to ``iomodel.decode_io``); trace: the DecodeTrace
    when ``record=True``, else None; num_splits: the split count used (the heuristic's when None
    was given).
    """

    O: np.ndarray
    lse: np.ndarray
    partials: list
    io: IOCount
    trace: DecodeTrace | None
    num_splits: int


@dataclass
class DecodeEvent(TraceEvent):
    """A TraceEvent of the decode: which block of work it belongs to, and the pages it read.

    batch, kv_head: the sequence b and KV head g of the block (query heads g·G .. g·G + G − 1,
    G = H // H_kv); split: the split s (-1 for the final ``write_O`` after a merge, 0 for the
    ``write_O`` of a single split); pages: the pool
    pages a ``load_KV`` of a paged cache read, in order (() otherwise). i is 0 (one packed query
    block per (b, g)); j the key block (-1 for load_Q, write_partial, merge and write_O); rows
    [r0, r1) = [0, Nq); cols [c0, c1) the key block's keys, or the split's keys for write_partial
    and merge. Snapshots (``record=True``) have a leading axis of the G heads: m, l (G, Nq),
    S, P (G, Nq, bc), O (G, Nq, dv). In a ``merge`` event m is the running max of the lse_s merged
    so far, l = Σ exp(lse_s − m), O = Σ exp(lse_s − m)·O_s (unnormalised), rescale = alpha and
    weight = beta (see ``merge_step``); in ``write_partial`` O and lse are the split's O_s, lse_s.
    """

    batch: int = 0
    kv_head: int = 0
    split: int = -1
    pages: tuple = ()
    weight: np.ndarray | None = None


@dataclass
class DecodeTrace(Trace):
    """All events of a decode run (every sequence, KV head and split) plus its configuration.

    Beyond Trace's fields (Br = Nq; order = "decode"): B (sequences; 1 without a batch axis),
    H, H_kv, num_splits, page_size (None: contiguous cache), splits (the key ranges (c0, c1) of the
    splits) and partial_itemsize (bytes of a partial's element). Trace.io() sums the events.
    """

    B: int = 1
    H: int = 1
    H_kv: int = 1
    num_splits: int = 1
    page_size: int | None = None
    splits: list = field(default_factory=list)
    partial_itemsize: int = 4

    @property
    def G(self) -> int:
        """Query heads per KV head, H // H_kv."""
        return self.H // self.H_kv


class _DecodeRecorder(Recorder):
    """A Recorder whose events are DecodeEvents (same counting; where the event happened, too)."""

    event_cls = DecodeEvent

    def emit(self, *args, where=(0, 0, -1), pages=(), **kw):
        """``Recorder.emit``, the event also saying where it happened: where = (sequence b, KV head g,
        split s; −1 for the merge) and the pool pages the step read."""
        super().emit(*args, extra={"batch": where[0], "kv_head": where[1], "split": where[2],
                                   "pages": tuple(int(p) for p in pages)}, **kw)


# --- inputs -----------------------------------------------------------------------------------------

def _check_heads(H, H_kv):
    if H % H_kv:
        raise ValueError(f"H % H_kv must be 0 (query head h reads KV head h // (H // H_kv)), got H = {H} query "
                         f"heads and H_kv = {H_kv} KV heads")


def _check_contiguous(Q, K, V):
    """K, V (H_kv, Nk, d|dv), with Q's batch axis if it has one."""
    want = "(B, H_kv, Nk, d)" if Q.ndim == 4 else "(H_kv, Nk, d)"
    for name, x in (("K", K), ("V", V)):
        if x.ndim != Q.ndim:
            raise ValueError(f"{name} must have shape {want} to go with Q {Q.shape}, got {x.shape} "
                             f"(a paged cache needs block_table or page_size)")
    if Q.ndim == 4 and not Q.shape[0] == K.shape[0] == V.shape[0]:
        raise ValueError(f"Q, K, V must share the batch axis B, got Q {Q.shape}, K {K.shape}, V {V.shape}")
    if K.shape[-3] != V.shape[-3] or K.shape[-2] != V.shape[-2]:
        raise ValueError(f"K and V must have the same H_kv and Nk, got K {K.shape} and V {V.shape}")


def _check_pool(Q, K, V, page_size):
    """K, V pools (num_pages, page_size, H_kv, d|dv)."""
    for name, x in (("K", K), ("V", V)):
        if x.ndim != 4:
            raise ValueError(f"with a block_table, {name} must be a page pool of shape (num_pages, page_size, H_kv, "
                             f"{'d' if name == 'K' else 'dv'}), got {x.shape}")
    if K.shape[:3] != V.shape[:3]:
        raise ValueError(f"the K and V page pools must share (num_pages, page_size, H_kv), got K {K.shape} "
                         f"and V {V.shape}")
    if page_size is not None and page_size != K.shape[1]:
        raise ValueError(f"page_size = {page_size} does not match the pools' pages of {K.shape[1]} tokens "
                         f"(K {K.shape} is (num_pages, page_size, H_kv, d))")


def _check_block_table(block_table, Q, num_pages, page_size, Nk):
    """block_table (max_pages,) or (B, max_pages) of ints in [0, num_pages); returns it (B, max_pages), Nk."""
    want = "(B, max_pages)" if Q.ndim == 4 else "(max_pages,)"
    if isinstance(block_table, (str, bytes)):
        raise TypeError(f"block_table must be an integer array {want}, got {shown(block_table)}")
    try:
        bt = np.asarray(block_table)
    except Exception as exc:
        raise TypeError(f"block_table must be an integer array {want}: {exc}") from None
    if bt.dtype.kind not in "iu":
        raise TypeError(f"block_table must be an integer array {want} of page indices, got dtype {bt.dtype}")
    if bt.ndim != Q.ndim - 2 or bt.shape[-1] < 1 or (Q.ndim == 4 and bt.shape[0] != Q.shape[0]):
        raise ValueError(f"block_table must have shape {want} to go with Q {Q.shape}, got {bt.shape}")
    if bt.min() < 0 or bt.max() >= num_pages:
        raise ValueError(f"block_table entries must be pages 0..{num_pages - 1} of the pool, got entries from "
                         f"{bt.min()} to {bt.max()}")
    capacity = bt.shape[-1] * page_size
    if Nk is None:
        Nk = capacity
    elif isinstance(Nk, bool) or not isinstance(Nk, numbers.Integral) or not 1 <= Nk <= capacity:
        raise ValueError(f"Nk must be an integer from 1 to max_pages·page_size = {capacity} (the keys the "
                         f"block table holds), got {shown(Nk)}")
    return bt.reshape(-1, bt.shape[-1]).astype(np.int64), int(Nk)


def paginate(X, page_size: int, order=None):
    """A contiguous cache X (Bn, H_kv, Nk, d) as a page pool and its block table.

    The keys of sequence b are cut into P = ⌈Nk/page_size⌉ pages (the last one zero-padded); page p
    of sequence b, the (b·P + p)-th page in order, goes to pool page ``order[b·P + p]`` (order: a
    permutation of range(Bn·P); None keeps them in order). Returns (pool (Bn·P, page_size, H_kv, d)
    in X's dtype, block_table (Bn, P) int32 with block_table[b, p] = that pool page): the paged
    layout ``decode_attention`` reads (FlashAttention's k_cache and block_table). Used by
    ``decode_attention`` for page_size without a table, and by the DecodeExplorer's shuffled cache.
    ValueError if order is not such a permutation."""
    Bn, H_kv, Nk, d = X.shape
    P = -(-Nk // page_size)
    Xp = np.zeros((Bn, H_kv, P * page_size, d), X.dtype)
    Xp[:, :, :Nk] = X
    pages = Xp.reshape(Bn, H_kv, P, page_size, d).transpose(0, 2, 3, 1, 4).reshape(Bn * P, page_size, H_kv, d)
    order = np.arange(Bn * P) if order is None else np.asarray(order)
    if order.shape != (Bn * P,) or not np.array_equal(np.sort(order), np.arange(Bn * P)):
        raise ValueError(f"order must be a permutation of range({Bn * P}) (Bn·P pages), got shape {order.shape}")
    pool = np.empty_like(pages)
    pool[order] = pages
    return pool, order.reshape(Bn, P).astype(np.int32)


class _KVCache:
    """Where key block [c0, c1) of sequence b, KV head g comes from: a contiguous array or pages."""

    def __init__(self, K, V, block_table=None, page_size=None):
        self.K, self.V, self.block_table, self.page_size = K, V, block_table, page_size

    def load(self, b, g, c0, c1):
        """K_j (c1 − c0, d), V_j (c1 − c0, dv) and the pool pages read (() when contiguous)."""
        if self.block_table is None:
            return self.K[b, g, c0:c1], self.V[b, g, c0:c1], ()
        ps = self.page_size
        p0, p1 = c0 // ps, (c1 - 1) // ps
        pages = self.block_table[b, p0:p1 + 1]
        off = c0 - p0 * ps
        K_j = self.K[pages, :, g].reshape(-1, self.K.shape[-1])[off:off + c1 - c0]
        V_j = self.V[pages, :, g].reshape(-1, self.V.shape[-1])[off:off + c1 - c0]
        return K_j, V_j, pages


# --- the algorithm ----------------------------------------------------------------------------------

def _decode_block(Q_g, cache, b, g, ranges, Nk, Bc, scale, causal, rec, acc, itemsize, pb):
    """All splits of one (sequence b, KV head g) block, then their merge. Q_g: (G, Nq, d).
    Returns the per-split (m, l, O_s) (S, G, Nq[, dv]) and the block's O (G, Nq, dv), lse (G, Nq)."""
    G, Nq, d = Q_g.shape
    R = G * Nq
    S = len(ranges)
    dv = cache.V.shape[-1]
    b_ = itemsize
    n_vis = n_key_blocks_visible(Nq, Nk, Bc, Nq, causal)
    m_p = np.full((S, R), -np.inf, acc)
    l_p = np.zeros((S, R), acc)
    O_p = np.zeros((S, R, dv), acc)
    for s, (j0, j1) in enumerate(ranges):
        here = (b, g, s)
        c0s, c1s = min(j0 * Bc, Nk), min(j1 * Bc, Nk)
        # [init] Alg. 1 line 5: the split's m = -inf, l = 0, O = 0 on chip
        m_i, l_i, O_i = m_p[s], l_p[s], O_p[s]
        j1 = min(j1, n_vis)
        # [load_Q] Alg. 1 line 4: the G·Nq query rows of the group, once per split (not at all if it is empty)
        if j1 > j0:
            rec.emit("load_Q", 0, -1, 0, Nq, c0s, c1s, reads={"Q": R * d * b_}, where=here)
        for j in range(j0, j1):
            # [load_KV] Alg. 1 line 7: K_j, V_j (and, paged, the block-table entries of their pages)
            c0, c1 = j * Bc, min((j + 1) * Bc, Nk)
            bc = c1 - c0
            kind = tile_kind(0, Nq, c0, c1, Nq, Nk, causal)
            K_j, V_j, pages = cache.load(b, g, c0, c1)
            reads = {"K": bc * d * b_, "V": bc * dv * b_}
            if cache.block_table is not None:
                reads["block_table"] = len(pages) * BLOCK_TABLE_ITEMSIZE
            rec.emit("load_KV", 0, j, 0, Nq, c0, c1, reads=reads, tile=kind, where=here, pages=pages)
            # [compute_S] Alg. 1 line 8: S_ij = scale · Q K_jᵀ for the G heads at once, masked (tile_scores)
            S_ij = tile_scores(Q_g, K_j, scale, 0, Nq, c0, c1, Nq, Nk, causal, kind)
            rec.emit("compute_S", 0, j, 0, Nq, c0, c1, flops=2 * R * bc * d, tile=kind, where=here, S=S_ij)
            # [update_ml] Alg. 1 line 9: the online softmax over the R = G·Nq rows (online_update)
            m_old = m_i
            m_i, l_i, O_i, P_ij, alpha = online_update(S_ij.reshape(R, bc), m_i, l_i, O_i, V_j)
            rec.emit("update_ml", 0, j, 0, Nq, c0, c1, tile=kind, where=here, m=m_i.reshape(G, Nq),
                     l=l_i.reshape(G, Nq), m_old=m_old.reshape(G, Nq), rescale=alpha.reshape(G, Nq),
                     P=P_ij.reshape(G, Nq, bc))
            # [accumulate_O] Alg. 1 line 10: O = diag(alpha) O + P_ij V_j, computed above
            rec.emit("accumulate_O", 0, j, 0, Nq, c0, c1, flops=2 * R * bc * dv, tile=kind, where=here,
                     m=m_i.reshape(G, Nq), l=l_i.reshape(G, Nq), O=O_i.reshape(G, Nq, dv))
        # [write_partial] Flash-Decoding step 2: O_s = diag(l_s)^-1 O_s, lse_s = m_s + log l_s, both to HBM
        # (an empty split writes O_s = 0, lse_s = -inf; a single split writes the output instead: write_O)
        m_p[s], l_p[s], O_p[s] = m_i, l_i, normalise_rows(O_i, l_i)
        if S > 1:
            rec.emit("write_partial", 0, -1, 0, Nq, c0s, c1s,
                     writes={"O_partial": R * dv * pb, "lse_partial": R * pb}, where=here, m=m_i.reshape(G, Nq),
                     l=l_i.reshape(G, Nq), O=O_p[s].reshape(G, Nq, dv), lse=finish_row_stats(m_i, l_i).reshape(G, Nq))
    if S == 1:
        # [write_O] Alg. 1 lines 12-15: one split: its O_s and lse_s are the output, written once
        lse = finish_row_stats(m_p[0], l_p[0])
        rec.emit("write_O", 0, -1, 0, Nq, 0, Nk, writes={"O": R * dv * b_, "lse": R * b_}, where=(b, g, 0),
                 m=m_p[0].reshape(G, Nq), l=l_p[0].reshape(G, Nq), O=O_p[0].reshape(G, Nq, dv), lse=lse.reshape(G, Nq))
        return m_p, l_p, O_p, O_p[0], lse

    # [merge] Flash-Decoding step 3: read each split's O_s, lse_s and rescale it in (merge_step)
    def on_step(s, m_old, m, l, O, alpha, beta):
        c0s, c1s = min(ranges[s][0] * Bc, Nk), min(ranges[s][1] * Bc, Nk)
        rec.emit("merge", 0, -1, 0, Nq, c0s, c1s, reads={"O_partial": R * dv * pb, "lse_partial": R * pb},
                 where=(b, g, s), m=m.reshape(G, Nq), l=l.reshape(G, Nq), m_old=m_old.reshape(G, Nq),
                 rescale=alpha.reshape(G, Nq), weight=beta.reshape(G, Nq), O=O.reshape(G, Nq, dv))

    m, l, O = _merge(finish_row_stats(m_p, l_p), O_p, on_step)
    # [write_O] Alg. 1 lines 12-15: O = diag(l)^-1 O, lse = m + log l; O, lse to HBM once
    O, lse = normalise_rows(O, l), finish_row_stats(m, l)
    rec.emit("write_O", 0, -1, 0, Nq, 0, Nk, writes={"O": R * dv * b_, "lse": R * b_}, where=(b, g, -1),
             m=m.reshape(G, Nq), l=l.reshape(G, Nq), O=O.reshape(G, Nq, dv), lse=lse.reshape(G, Nq))
    return m_p, l_p, O_p, O, lse


def decode_attention(Q, K, V, *, num_splits=None, Bc: int = 64, causal: bool = False, scale=None,
                     page_size=None, block_table=None, Nk=None, record: bool = False) -> DecodeResult:
    """Exact decode attention with split-KV (Flash-Decoding), grouped-query heads and an optional paged cache.

    Source: Dao, Haziza, Massa, Sizov 2023, "Flash-Decoding for long-context inference" (split the
    keys, attend to each split, merge by the lse); FlashAttention-2 (Dao 2023), Algorithm 1 inside
    each split; Dao et al. 2022, Section 3.1 (the rescale the merge applies); Ainslie et al. 2023
    (GQA); Kwon et al. 2023 (paged KV cache). See the module docstring for the algorithm.

    Parameters
    ----------
    Q : array (H, Nq, d) or (B, H, Nq, d), float16/32/64: H query heads, Nq query rows each (1..8 at
        decode; any Nq >= 1 works).
    K, V : contiguous cache: arrays (H_kv, Nk, d) and (H_kv, Nk, dv), with Q's batch axis B if it has
        one. H % H_kv == 0; query head h reads KV head h // (H // H_kv).
        Paged cache (``block_table`` given): page pools (num_pages, page_size, H_kv, d) and
        (num_pages, page_size, H_kv, dv), FlashAttention's k_cache layout.
    num_splits : int from 1 to ``checks.MAX_NUM_SPLITS`` (4,096), or None. Split the ⌈Nk/Bc⌉ key
        blocks into this many contiguous ranges (``masking.split_ranges``: even, sizes differ by at most one block). None: the heuristic
        ``num_splits_heuristic(B·H_kv, ⌈Nk/Bc⌉)`` for a 132-SM GPU. More splits than key blocks
        is allowed: the extra splits are empty — they read no K or V and compute nothing, but write
        a partial O_s = 0, lse_s = −inf (as FlashAttention's split kernel does), which the merge
        reads and weighs by exp(−inf − lse) = 0.
    Bc : int >= 1, keys per key block (the last one may be partial).
    causal : bool. Bottom-right aligned: query row i sees key j iff j <= i + Nk − Nq (row Nq − 1 is
        the newest token and sees the whole cache). Rows that see no key (Nk < Nq) get O = 0 and
        lse = −inf; masked scores are a true −inf.
    scale : float or None (1/sqrt(d)).
    page_size : int from 1 to ``checks.MAX_PAGE_SIZE`` (65,536 tokens), or None. With
        ``block_table``: the pools' page size (must match K.shape[1]; None reads it from K).
        Without ``block_table``: K, V are contiguous and are cut into pages of ``page_size`` tokens
        laid out in order (the block table of sequence b lists pages b·P .. b·P + P − 1,
        P = ⌈Nk/page_size⌉) — the same run, with the page look-ups counted.
    block_table : int array (max_pages,), or (B, max_pages) when Q has a batch axis: page p of
        sequence b (keys p·page_size .. (p+1)·page_size − 1) is pool page block_table[b, p]. Entries
        must be pages of the pool; entries past the sequence's last page are not read.
    Nk : int or None, paged cache only: keys per sequence, 1 .. max_pages·page_size (default: every
        page of the table full). A contiguous cache gives Nk by its shape.
    record : bool. Keep the step-by-step DecodeTrace of every (sequence, KV head, split).

    Returns
    -------
    DecodeResult: O (..., H, Nq, dv) in the inputs' dtype (float64 in, float64 out); lse (..., H, Nq)
    in the accumulator dtype (float64 for float64 inputs, float32 otherwise); partials (one Partial
    per split: its keys and m, l, O before the merge); io (IOCount counted from the run, equal to
    ``iomodel.decode_io``); trace (when ``record``); num_splits (the count used).

    Raises
    ------
    TypeError / ValueError, one line each: non-arrays, non-float dtypes, NaN/inf, wrong ndim,
    H % H_kv != 0, mismatched d, Nk or batch, a block_table that is not an integer array of the
    right shape or names pages outside the pool, page_size not matching the pool, Nk without a
    block table or beyond it, num_splits or Bc not integers >= 1, num_splits above 4,096 or page_size
    above 65,536 (the caps: ``checks.MAX_NUM_SPLITS``, ``checks.MAX_PAGE_SIZE``), scores that could overflow
    (``checks.check_score_range``), values whose accumulator Nk·max|V| could overflow the
    accumulator dtype (``checks.check_value_range``).
    """
    Q, K, V = as_matrix_stack(Q, "Q"), as_matrix_stack(K, "K"), as_matrix_stack(V, "V")
    if Q.ndim not in (3, 4):
        raise ValueError(f"Q must have shape (H, Nq, d) or (B, H, Nq, d), got shape {Q.shape}")
    Bc = check_block(Bc, "Bc")
    if num_splits is not None:
        num_splits = check_num_splits(num_splits)
    if page_size is not None:
        page_size = check_page_size(page_size)
    causal, record = check_flag(causal, "causal"), check_flag(record, "record")
    Bn = Q.shape[0] if Q.ndim == 4 else 1
    H, Nq, d = Q.shape[-3:]
    if block_table is None:
        if Nk is not None:
            raise ValueError(f"Nk is for a paged cache (with block_table); a contiguous K {K.shape} has "
                             f"Nk = {K.shape[-2]} keys by its shape")
        _check_contiguous(Q, K, V)
        H_kv, Nk = K.shape[-3], K.shape[-2]
    else:
        _check_pool(Q, K, V, page_size)
        H_kv = K.shape[2]
    if Q.shape[-1] != K.shape[-1]:
        raise ValueError(f"Q and K must share the head dimension d, got Q {Q.shape} and K {K.shape}")
    _check_heads(H, H_kv)
    scale = check_scale(scale, d)
    out_dtype = result_dtype(Q, K, V)
    acc = np.float64 if out_dtype == np.float64 else np.float32
    check_score_range(Q, K, scale, acc)
    b = np.dtype(out_dtype).itemsize
    pb = np.dtype(acc).itemsize
    dv = V.shape[-1]
    if block_table is not None:        # the paged pools: Nk is the table's (checked against the pool)
        page_size = K.shape[1]
        bt, Nk = _check_block_table(block_table, Q, K.shape[0], page_size, Nk)
    check_value_range(V, Nk, acc)      # before any copy of the cache
    if block_table is None and page_size is None:
        cache = _KVCache(K.reshape(Bn, H_kv, Nk, d).astype(acc, copy=False),
                         V.reshape(Bn, H_kv, Nk, dv).astype(acc, copy=False))
    elif block_table is None:
        P = -(-Nk // page_size)
        cache = _KVCache(paginate(K.reshape(Bn, H_kv, Nk, d).astype(acc, copy=False), page_size)[0],
                         paginate(V.reshape(Bn, H_kv, Nk, dv).astype(acc, copy=False), page_size)[0],
                         np.arange(Bn * P).reshape(Bn, P), page_size)
    else:
        cache = _KVCache(K.astype(acc, copy=False), V.astype(acc, copy=False), bt, page_size)
    Tc = -(-Nk // Bc)
    if num_splits is None:
        num_splits = num_splits_heuristic(Bn * H_kv, Tc)
    ranges = split_ranges(Tc, num_splits)
    G = H // H_kv
    sram = sram_working_set(G * Nq, min(Bc, Nk), d, dv=dv, itemsize=b)
    tr = DecodeTrace(Nq, Nk, d, dv, Nq, Bc, causal, "decode", scale, b, sram, B=Bn, H=H, H_kv=H_kv,
                     num_splits=num_splits, page_size=page_size,
                     splits=[(min(j0 * Bc, Nk), min(j1 * Bc, Nk)) for j0, j1 in ranges], partial_itemsize=pb)
    rec = _DecodeRecorder(tr, record)
    Qf = Q.reshape(Bn, H, Nq, d).astype(acc, copy=False)
    scale_acc = acc(scale)
    O = np.zeros((Bn, H, Nq, dv), acc)
    lse = np.full((Bn, H, Nq), -np.inf, acc)
    m_p = np.full((num_splits, Bn, H, Nq), -np.inf, acc)
    l_p = np.zeros((num_splits, Bn, H, Nq), acc)
    O_p = np.zeros((num_splits, Bn, H, Nq, dv), acc)
    for bi in range(Bn):
        for g in range(H_kv):
            heads = slice(g * G, (g + 1) * G)
            ms, ls, Os, O_g, lse_g = _decode_block(Qf[bi, heads], cache, bi, g, ranges, Nk, Bc, scale_acc, causal,
                                                   rec, acc, b, pb)
            m_p[:, bi, heads] = ms.reshape(num_splits, G, Nq)
            l_p[:, bi, heads] = ls.reshape(num_splits, G, Nq)
            O_p[:, bi, heads] = Os.reshape(num_splits, G, Nq, dv)
            O[bi, heads], lse[bi, heads] = O_g.reshape(G, Nq, dv), lse_g.reshape(G, Nq)
    lead = Q.shape[:-3]
    partials = [Partial(s, j0, j1, min(j0 * Bc, Nk), min(j1 * Bc, Nk), m_p[s].reshape(*lead, H, Nq),
                        l_p[s].reshape(*lead, H, Nq), O_p[s].reshape(*lead, H, Nq, dv))
                for s, (j0, j1) in enumerate(ranges)]
    return DecodeResult(O.reshape(*lead, H, Nq, dv).astype(out_dtype, copy=False), lse.reshape(*lead, H, Nq),
                        partials, rec.io, tr if record else None, num_splits)
