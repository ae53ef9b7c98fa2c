"""Tiled FlashAttention forward pass in NumPy, exact, with a step-by-step trace.

FA2 order (Dao 2023, Algorithm 1): for each query block Q_i (outer), stream the key
and value blocks K_j, V_j (inner) keeping the running row max m_i, row sum l_i and
the unnormalised output O_i on chip; normalise O_i once at the end.
FA1 order (Dao et al. 2022, Algorithm 1): key blocks outer, query blocks inner; O_i,
l_i, m_i go back to HBM after every step.

The CUDA teaching kernel ``kernels/flash_fwd.cu`` uses the same names line for line. Each block
of the FA2 path opens with a tag, ``# [step] Alg. 1 line k: …``: the step's name in
``flashviz.steps`` (the event kind it emits) and the line of FlashAttention-2's Algorithm 1 it
implements; the kernels carry the same tags, and chapter 7 cuts its code pairs between them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .checks import (
    check_block,
    check_flag,
    check_order,
    check_qkv,
    check_scale,
    check_score_range,
    check_value_range,
    result_dtype,
)
from .iomodel import IOCount, sram_working_set
from .masking import n_key_blocks_visible, tile_kind, visible
from .online import safe_exp_diff
from .trace import Recorder, Trace


@dataclass
class FlashResult:
    """Result of ``flash_forward``.

    O: (..., Nq, dv) in the inputs' dtype; m, l, lse: (..., Nq) in the accumulator dtype
    (float32 for float16/32 inputs, float64 for float64); io: IOCount counted from the run
    (summed over heads); trace: the Trace when ``record=True`` (one head), else None.
    """

    O: np.ndarray
    m: np.ndarray
    l: np.ndarray
    lse: np.ndarray
    io: IOCount
    trace: Trace | None


def finish_row_stats(m, l):
    """The row log-sum-exp lse = m + log(l) from a row max m and row sum l (arrays of one shape,
    float32 or float64; returned in m's dtype); rows that saw no key (l = 0) get lse = -inf, never
    NaN. Used by the forward (``flash_forward``) and by the split-KV decode (``flashviz.decode``)
    for each split's lse_s and for the merged lse. Source: FlashAttention-2 (Dao 2023), Algorithm 1
    line 13."""
    # [write_O] Alg. 1 line 13: L_i = m_i + log(l_i), the row log-sum-exp kept for the backward pass
    with np.errstate(divide="ignore"):
        return np.where(l > 0, m + np.log(np.where(l > 0, l, 1)), -np.inf).astype(m.dtype)


def normalise_rows(O_i, l_i):
    """diag(l_i)⁻¹ O_i: each row of the unnormalised output divided by its row sum.

    O_i: (..., R, dv); l_i: (..., R), float32 or float64. Rows with l_i = 0 (they saw no key) give
    0, never NaN. Returns (..., R, dv) in O_i's dtype. Used by the forward (both orders) and by the
    split-KV decode (``flashviz.decode``: each split's O_s and the merged O).
    Source: FlashAttention-2 (Dao 2023), Algorithm 1 line 12.
    """
    return np.where(l_i[..., None] > 0, O_i / np.where(l_i > 0, l_i, 1)[..., None], 0)


def tile_scores(Q_i, K_j, scale, r0, r1, c0, c1, Nq, Nk, causal, kind):
    """The scores of one tile, S_ij = scale · Q_i K_jᵀ, with the entries a causal mask hides set
    to a true -inf.

    Q_i: (r1 − r0, d), rows r0..r1−1 of Q; K_j: (c1 − c0, d), rows c0..c1−1 of K (one head, in the
    accumulator dtype: float32 or float64); scale: the softmax scale (a float); Nq, Nk: the full
    sequence lengths (the mask is bottom-right aligned, ``masking.visible``); causal: bool; kind:
    the tile's kind from ``masking.tile_kind`` ("full", "partial" or "skipped"): only a "partial"
    tile is masked. Q_i may carry leading axes, (..., r1 − r0, d): the split-KV decode passes the
    query heads of one KV-head group at once (``flashviz.decode``); the mask broadcasts over them.
    Returns S_ij, (..., r1 − r0, c1 − c0), in the dtype of Q_i @ K_jᵀ. It checks
    nothing: its callers (``flash_forward``, ``backward.flash_backward``, which recomputes S_ij)
    have checked the inputs. Source: FlashAttention-2 (Dao 2023), Algorithm 1 line 8 and
    Algorithm 2 line 10.
    """
    # [compute_S] Alg. 1 line 8: S_ij = scale · Q_i K_jᵀ, on chip
    S_ij = scale * (Q_i @ K_j.T)
    # [mask_S] Alg. 1 line 8: only a tile the causal boundary crosses ("partial") is masked, to a true -inf
    if causal and kind == "partial":
        S_ij = np.where(visible(np.arange(r0, r1), np.arange(c0, c1), Nq, Nk), S_ij, -np.inf)
    return S_ij


def online_update(S_ij, m_i, l_i, O_i, V_j, rescale=True):
    """One online-softmax step on a tile of scores: fold S_ij and V_j into the running m_i, l_i, O_i.

    S_ij: (R, bc) scaled, masked scores (−inf where masked); m_i, l_i: (R,) running row max and row
    sum (−inf and 0 before the first tile); O_i: (R, dv) the unnormalised output accumulator;
    V_j: (bc, dv); all in the accumulator dtype. rescale=False is the "break it" mode (the old l_i,
    O_i are not corrected by alpha). Returns m_new, l_new (R,), O_new (R, dv), P_ij = exp(S_ij − m_new)
    (R, bc; 0 where masked) and alpha = exp(m_i − m_new) (R,), never NaN (``online.safe_exp_diff``).
    Used by ``flash_forward`` and, per split, by ``flashviz.decode.decode_attention``.
    Source: FlashAttention-2 (Dao 2023), Algorithm 1 lines 9-10.
    """
    # [update_ml] Alg. 1 line 9: m_new = max(m_i, rowmax S_ij); P_ij = exp(S_ij − m_new);
    # l_new = alpha · l_i + rowsum P_ij with alpha = exp(m_i − m_new)
    m_new = np.maximum(m_i, S_ij.max(axis=1))
    P_ij = safe_exp_diff(S_ij, m_new[:, None])          # exp(S_ij - m_new); 0 where masked
    alpha = safe_exp_diff(m_i, m_new)                    # exp(m_old - m_new): the rescale factor
    if not rescale:                                      # "break it": forget to correct the old sums
        alpha = np.where(np.isneginf(m_i), 0.0, 1.0).astype(m_i.dtype)
    l_new = alpha * l_i + P_ij.sum(axis=1)
    # [accumulate_O] Alg. 1 line 10: O_new = diag(alpha) O_i + P_ij V_j (unnormalised)
    O_new = alpha[:, None] * O_i + P_ij @ V_j
    return m_new, l_new, O_new, P_ij, alpha


def _forward_fa2(Q, K, V, Br, Bc, scale, causal, rescale, rec: Recorder, acc, b):
    Nq, d = Q.shape
    Nk, dv = V.shape
    O = np.zeros((Nq, dv), acc)
    m = np.full(Nq, -np.inf, acc)
    l = np.zeros(Nq, acc)
    for i, r0 in enumerate(range(0, Nq, Br)):
        r1 = min(r0 + Br, Nq)
        br = r1 - r0
        n_j = n_key_blocks_visible(r1, Nk, Bc, Nq, causal)
        # [init] Alg. 1 line 5: O_i = 0, l_i = 0, m_i = -inf on chip (copies of the fresh rows of O, l, m)
        m_i, l_i, O_i = m[r0:r1].copy(), l[r0:r1].copy(), O[r0:r1].copy()
        # [load_Q] Alg. 1 line 4: Q_i from HBM to SRAM, once per query block (none if it sees no key)
        if n_j:
            Q_i = Q[r0:r1]
            rec.emit("load_Q", i, -1, r0, r1, 0, 0, reads={"Q": br * d * b})
        # [load_KV] Alg. 1 line 7: for each key block j it sees, K_j, V_j from HBM to SRAM
        for j in range(n_j):
            c0, c1 = j * Bc, min((j + 1) * Bc, Nk)
            bc = c1 - c0
            kind = tile_kind(r0, r1, c0, c1, Nq, Nk, causal)
            K_j, V_j = K[c0:c1], V[c0:c1]
            rec.emit("load_KV", i, j, r0, r1, c0, c1, reads={"K": bc * d * b, "V": bc * dv * b}, tile=kind)
            # [compute_S] Alg. 1 line 8: S_ij = scale · Q_i K_jᵀ, masked (see tile_scores)
            S_ij = tile_scores(Q_i, K_j, scale, r0, r1, c0, c1, Nq, Nk, causal, kind)
            rec.emit("compute_S", i, j, r0, r1, c0, c1, flops=2 * br * bc * d, tile=kind, S=S_ij)
            # [update_ml] Alg. 1 line 9: the online softmax (and line 10's O_i update: see online_update)
            m_old = m_i
            m_i, l_i, O_i, P_ij, alpha = online_update(S_ij, m_i, l_i, O_i, V_j, rescale)
            rec.emit("update_ml", i, j, r0, r1, c0, c1, tile=kind, m=m_i, l=l_i, m_old=m_old,
                     rescale=safe_exp_diff(m_old, m_i), P=P_ij)
            # [accumulate_O] Alg. 1 line 10: O_i = diag(alpha) O_i + P_ij V_j, computed above
            rec.emit("accumulate_O", i, j, r0, r1, c0, c1, flops=2 * br * bc * dv, tile=kind,
                     m=m_i, l=l_i, O=O_i)
        # [write_O] Alg. 1 lines 12-15: O_i = diag(l_i)^-1 O_i; L_i = m_i + log(l_i); write O_i, L_i to HBM
        # (a row that saw no key: O = 0, lse = -inf)
        O[r0:r1] = normalise_rows(O_i, l_i)
        m[r0:r1], l[r0:r1] = m_i, l_i
        lse_i = finish_row_stats(m_i, l_i)
        rec.emit("write_O", i, -1, r0, r1, 0, 0, writes={"O": br * dv * b, "lse": br * b},
                 m=m_i, l=l_i, O=O[r0:r1], lse=lse_i)
    return O, m, l


def _forward_fa1(Q, K, V, Br, Bc, scale, causal, rescale, rec: Recorder, acc, b):
    Nq, d = Q.shape
    Nk, dv = V.shape
    O = np.zeros((Nq, dv), acc)     # Algorithm 1, line 2: O = 0, l = 0, m = -inf in HBM
    m = np.full(Nq, -np.inf, acc)
    l = np.zeros(Nq, acc)
    rec.emit("init", -1, -1, 0, Nq, 0, 0, writes={"O": Nq * dv * b, "l": Nq * b, "m": Nq * b})
    Tr = -(-Nq // Br)
    for j, c0 in enumerate(range(0, Nk, Bc)):
        c1 = min(c0 + Bc, Nk)
        bc = c1 - c0
        rows_i = [i for i in range(Tr) if j < n_key_blocks_visible(min((i + 1) * Br, Nq), Nk, Bc, Nq, causal)]
        if not rows_i:
            continue
        K_j, V_j = K[c0:c1], V[c0:c1]
        rec.emit("load_KV", -1, j, 0, 0, c0, c1, reads={"K": bc * d * b, "V": bc * dv * b})
        for i in rows_i:
            r0, r1 = i * Br, min((i + 1) * Br, Nq)
            br = r1 - r0
            kind = tile_kind(r0, r1, c0, c1, Nq, Nk, causal)
            rec.emit("load_Q", i, j, r0, r1, c0, c1, tile=kind,
                     reads={"Q": br * d * b, "O": br * dv * b, "l": br * b, "m": br * b})
            Q_i, m_i, l_i = Q[r0:r1], m[r0:r1], l[r0:r1]
            O_i = O[r0:r1] * l_i[:, None]                 # O is stored normalised: undo diag(l)^-1
            S_ij = tile_scores(Q_i, K_j, scale, r0, r1, c0, c1, Nq, Nk, causal, kind)
            rec.emit("compute_S", i, j, r0, r1, c0, c1, flops=2 * br * bc * d, tile=kind, S=S_ij)
            m_new, l_new, O_new, P_ij, _ = online_update(S_ij, m_i, l_i, O_i, V_j, rescale)
            rec.emit("update_ml", i, j, r0, r1, c0, c1, tile=kind, m=m_new, l=l_new, m_old=m_i,
                     rescale=safe_exp_diff(m_i, m_new), P=P_ij)
            rec.emit("accumulate_O", i, j, r0, r1, c0, c1, flops=2 * br * bc * dv, tile=kind,
                     m=m_new, l=l_new, O=O_new)
            O[r0:r1] = normalise_rows(O_new, l_new)
            m[r0:r1], l[r0:r1] = m_new, l_new
            rec.emit("write_O", i, j, r0, r1, c0, c1, tile=kind,
                     writes={"O": br * dv * b, "l": br * b, "m": br * b},
                     m=m_new, l=l_new, O=O[r0:r1], lse=finish_row_stats(m_new, l_new))
    return O, m, l


def flash_forward(Q, K, V, *, Br: int = 64, Bc: int = 64, causal: bool = False, scale=None,
                  rescale: bool = True, order: str = "fa2", record: bool = False) -> FlashResult:
    """Tiled, exact attention forward pass with online softmax (FlashAttention).

    Source: Dao et al. 2022, Algorithm 1 (``order="fa1"``); Dao 2023, FlashAttention-2
    Algorithm 1 (``order="fa2"``, query blocks outer, O normalised once at the end).

    Parameters
    ----------
    Q : array (..., Nq, d); K : array (..., Nk, d); V : array (..., Nk, dv)
        float16/32/64 (array-likes, ints and non-contiguous views accepted).
    Br, Bc : int >= 1
        Block rows (queries) and block columns (keys); partial last tiles are fine.
    causal : bool
        Bottom-right aligned mask (query i sees key j iff j <= i + Nk - Nq); tiles with no
        visible key are skipped, rows that see no key get O = 0 and lse = -inf.
    scale : float or None (1/sqrt(d))
    rescale : bool
        False is the "break it" mode: the correction exp(m_old - m_new) is dropped from
        l and O, so the result is wrong whenever a row's max grows after its first block.
    order : "fa2" or "fa1"
    record : bool
        Keep the step-by-step Trace (one head only: Q must be 2-D).

    Returns
    -------
    FlashResult with O (..., Nq, dv) in the inputs' dtype, m, l, lse (..., Nq) in the
    accumulator dtype (float32 for float16/32 inputs, float64 for float64), io (IOCount in
    bytes of the input dtype, summed over heads) and trace.

    Raises
    ------
    TypeError / ValueError for non-arrays, non-float dtypes, wrong ndim, mismatched shapes,
    NaN/inf inputs, scores that could overflow the accumulator type (``checks.check_score_range``),
    values whose unnormalised accumulator Nk·max|V| could overflow it (``checks.check_value_range``),
    block sizes that are not integers >= 1, a bad order, or record=True with batched inputs.
    """
    Q, K, V = check_qkv(Q, K, V)
    Br, Bc = check_block(Br, "Br"), check_block(Bc, "Bc")
    causal, rescale, record = (check_flag(causal, "causal"), check_flag(rescale, "rescale"),
                               check_flag(record, "record"))
    order = check_order(order)
    Nq, d = Q.shape[-2:]
    Nk, dv = V.shape[-2:]
    scale = check_scale(scale, d)
    if record and Q.ndim != 2:
        raise ValueError(f"record=True traces one head: pass Q, K, V of shape (N, d), got Q {Q.shape}")
    out_dtype = result_dtype(Q, K, V)
    acc = np.float64 if out_dtype == np.float64 else np.float32
    check_score_range(Q, K, scale, acc)
    check_value_range(V, Nk, acc)
    b = np.dtype(out_dtype).itemsize
    lead = Q.shape[:-2]
    Qf = Q.reshape(-1, Nq, d).astype(acc, copy=False)
    Kf = K.reshape(-1, Nk, d).astype(acc, copy=False)
    Vf = V.reshape(-1, Nk, dv).astype(acc, copy=False)
    scale_acc = acc(scale)
    sram = sram_working_set(min(Br, Nq), min(Bc, Nk), d, dv=dv, itemsize=b)
    run = _forward_fa2 if order == "fa2" else _forward_fa1
    outs, io, trace = [], IOCount(sram_bytes=sram), None
    for h in range(Qf.shape[0]):
        tr = Trace(Nq, Nk, d, dv, Br, Bc, causal, order, scale, b, sram, rescale=rescale)
        rec = Recorder(tr, record)
        outs.append(run(Qf[h], Kf[h], Vf[h], Br, Bc, scale_acc, causal, rescale, rec, acc, b))
        io.add(rec.io.reads, rec.io.writes, rec.io.flops)
        trace = tr if record else None
    O = np.stack([o[0] for o in outs]).reshape(*lead, Nq, dv).astype(out_dtype, copy=False)
    m = np.stack([o[1] for o in outs]).reshape(*lead, Nq)
    l = np.stack([o[2] for o in outs]).reshape(*lead, Nq)
    return FlashResult(O, m, l, finish_row_stats(m, l), io, trace)
