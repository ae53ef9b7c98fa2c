"""Tiled FlashAttention backward pass with recomputation, in NumPy, exact, with a trace.

The forward keeps only O and the row log-sum-exp lse (Nq numbers), not P (Nq×Nk). The
backward recomputes S_ij = scale·Q_i K_jᵀ and P_ij = exp(S_ij − lse_i) tile by tile on chip
(Dao et al. 2022, Section 3.1 and Algorithm 4; FlashAttention-2, Algorithm 2; each block of
``_backward_fa2`` opens with a tag naming its step and the Algorithm 2 line(s), see flashviz.steps):

    preprocessing:  D = rowsum(dO ∘ O)                       (and dQ = 0 in HBM)
    for j (key blocks, outer):   load K_j, V_j; dK_j = dV_j = 0 on chip
        for i (query blocks, inner):   load Q_i, dO_i, lse_i, D_i
            S_ij = scale·Q_i K_jᵀ;  P_ij = exp(S_ij − lse_i)  (masked → 0)
            dV_j += P_ijᵀ dO_i
            dP_ij = dO_i V_jᵀ;  dS_ij = P_ij ∘ (dP_ij − D_i)
            dK_j += scale·dS_ijᵀ Q_i
            dQ_i += scale·dS_ij K_j       (read-modify-write of dQ_i in HBM, FA2's atomic add)
        write dK_j, dV_j

Counting conventions (the same as ``flashviz.iomodel.flash_backward_io``, tested equal):
bytes of the element type for every tensor; O is read only by the preprocessing pass, which
also zeroes dQ in HBM (FA2 clears its dQ accumulator there); dQ_i is read and written once per
computed tile; FLOPs are matmul FLOPs, 5 matmuls per computed tile (S, dV, dP, dK, dQ), so the
recomputation costs exactly the S matmul, 2·br·bc·d per tile, on top of the standard backward.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .checks import (
    as_float_array,
    as_matrix_stack,
    check_block,
    check_flag,
    check_grad_range,
    check_lse_values,
    check_qkv,
    check_scale,
    check_score_range,
    result_dtype,
)
from .iomodel import IOCount, backward_sram_working_set
from .masking import tile_kind, visible
from .online import safe_exp_diff
from .tiled import tile_scores
from .trace import Recorder, Trace, TraceEvent


@dataclass
class BackwardEvent(TraceEvent):
    """A TraceEvent of the backward pass, with its extra snapshots (``record=True`` only).

    Over the tile / block it touches: S, P (``recompute_P``: scaled masked scores, recomputed
    probabilities exp(S − lse)), dP, dS (``compute_dS``), D (``compute_D``: rowsum(dO ∘ O) of the
    query block; ``compute_dS``: D_i used), dV, dK (the on-chip accumulators dV_j, dK_j after
    ``accumulate_dV`` / ``accumulate_dK``; the finished blocks at ``write_dKdV``), dQ (dQ_i in
    HBM after ``update_dQ``).
    """

    D: np.ndarray | None = None
    dP: np.ndarray | None = None
    dS: np.ndarray | None = None
    dQ: np.ndarray | None = None
    dK: np.ndarray | None = None
    dV: np.ndarray | None = None


class _BackwardRecorder(Recorder):
    """A Recorder whose events are BackwardEvents (same counting, more snapshot fields)."""

    def emit(self, kind, i, j, r0, r1, c0, c1, *, reads=None, writes=None, flops=0, tile="", **snap):
        self.io.add(reads, writes, flops)
        if self.record:
            snap = {k: (None if v is None else np.array(v, copy=True)) for k, v in snap.items()}
            self.trace.events.append(BackwardEvent(kind, i, j, r0, r1, c0, c1, dict(reads or {}),
                                                   dict(writes or {}), int(flops), tile, **snap))


@dataclass
class BackwardResult:
    """Result of ``flash_backward``.

    dQ: (..., Nq, d), dK: (..., Nk, d), dV: (..., Nk, dv) in the inputs' dtype; io: IOCount
    counted from the run (bytes of the input dtype, summed over heads); trace: the Trace when
    ``record=True`` (one head; events are BackwardEvents), else None.
    """

    dQ: np.ndarray
    dK: np.ndarray
    dV: np.ndarray
    io: IOCount
    trace: Trace | None


def _check_dO(dO, Q, V):
    dO = as_matrix_stack(dO, "dO")
    want = Q.shape[:-1] + V.shape[-1:]
    if dO.shape != want:
        raise ValueError(f"dO must have the shape of O (..., Nq, dv) = {want}, got {dO.shape}")
    return dO


def _check_O(O, Q, V):
    O = as_matrix_stack(O, "O")
    want = Q.shape[:-1] + V.shape[-1:]
    if O.shape != want:
        raise ValueError(f"O must have shape (..., Nq, dv) = {want}, got {O.shape}")
    return O


def _check_lse(lse, Q):
    """lse: float array (..., Nq); -inf marks a row that saw no key; NaN and +inf are refused."""
    lse = check_lse_values(as_float_array(lse, "lse", "of shape (..., Nq)"), "lse")
    if lse.shape != Q.shape[:-1]:
        raise ValueError(f"lse must have shape (..., Nq) = {Q.shape[:-1]}, got {lse.shape}")
    return lse


def _dense_P(Q, K, causal, scale):
    """Dense float64 softmax probabilities P (..., Nq, Nk); rows that see no key are 0."""
    Nq, Nk = Q.shape[-2], K.shape[-2]
    S = scale * (Q @ np.swapaxes(K, -1, -2))
    if causal:
        S = np.where(visible(np.arange(Nq), np.arange(Nk), Nq, Nk), S, -np.inf)
    m = S.max(axis=-1, keepdims=True)
    P = np.exp(S - np.where(np.isfinite(m), m, 0.0))
    l = P.sum(axis=-1, keepdims=True)
    return P / np.where(l > 0, l, 1.0)


def attention_backward(Q, K, V, dO, *, causal: bool = False, scale=None):
    """Dense float64 reference gradient of O = softmax(scale·Q Kᵀ) V, the analytic formulas.

    S = scale·Q Kᵀ and P = softmax(S) are materialised, then (Dao et al. 2022, Section B.2):
    dV = Pᵀ dO; dP = dO Vᵀ; D = rowsum(dO ∘ O); dS = P ∘ (dP − D); dQ = scale·dS K;
    dK = scale·dSᵀ Q.

    Parameters
    ----------
    Q : array (..., Nq, d); K : array (..., Nk, d); V : array (..., Nk, dv)
    dO : array (..., Nq, dv), the gradient of the loss with respect to O
        float16/32/64 (array-likes, ints and views accepted); leading batch axes shared.
    causal : bool
        Bottom-right aligned mask (query i sees key j iff j <= i + Nk − Nq); a row that sees
        no key has P = 0 and contributes 0 to every gradient (never NaN).
    scale : float or None (1/sqrt(d))

    Returns
    -------
    (dQ, dK, dV): float64 arrays of shapes (..., Nq, d), (..., Nk, d), (..., Nk, dv).

    Raises
    ------
    TypeError / ValueError (one line) for non-arrays, non-float dtypes, wrong ndim, mismatched
    shapes, NaN/inf entries, scores that could overflow float64 (``checks.check_score_range``) or
    dP = dO Vᵀ, D = rowsum(dO ∘ O), dQ, dK, dV that could (``checks.check_grad_range``).
    """
    Q, K, V = check_qkv(Q, K, V)
    dO = _check_dO(dO, Q, V)
    causal = check_flag(causal, "causal")
    scale = check_scale(scale, Q.shape[-1])
    check_score_range(Q, K, scale, np.float64)
    check_grad_range(Q, K, V, dO, scale, np.float64)
    Q, K, V, dO = (np.asarray(x, dtype=np.float64) for x in (Q, K, V, dO))
    T = lambda x: np.swapaxes(x, -1, -2)  # noqa: E731
    P = _dense_P(Q, K, causal, scale)
    O = P @ V
    dV = T(P) @ dO
    dP = dO @ T(V)
    D = (dO * O).sum(axis=-1, keepdims=True)
    dS = P * (dP - D)
    return scale * (dS @ K), scale * (T(dS) @ Q), dV


def _recompute_P(S_ij, lse_i):
    """P_ij = exp(S_ij − lse_i): 0 where masked (S = −inf) and on rows with lse = −inf."""
    # [recompute_P] Alg. 2 line 11: P_ij = exp(S_ij − L_i), from the forward's row log-sum-exp L_i
    return np.where(np.isneginf(lse_i)[:, None], 0.0, safe_exp_diff(S_ij, lse_i[:, None])).astype(S_ij.dtype)


def _backward_fa2(Q, K, V, O, dO, lse, Br, Bc, scale, causal, rec: Recorder, acc, b):
    Nq, d = Q.shape
    Nk, dv = V.shape
    Tr = -(-Nq // Br)
    dQ = np.zeros((Nq, d), acc)
    dK = np.zeros((Nk, d), acc)
    dV = np.zeros((Nk, dv), acc)
    D = np.zeros(Nq, acc)
    # [compute_D] Alg. 2 lines 3-4: preprocessing, dQ = 0 in HBM and D = rowsum(dO ∘ O) written to HBM
    for i in range(Tr):                                    # preprocessing: D = rowsum(dO ∘ O), dQ = 0
        r0, r1 = i * Br, min((i + 1) * Br, Nq)
        br = r1 - r0
        D[r0:r1] = (dO[r0:r1] * O[r0:r1]).sum(axis=1)
        rec.emit("compute_D", i, -1, r0, r1, 0, 0, reads={"O": br * dv * b, "dO": br * dv * b},
                 writes={"D": br * b, "dQ": br * d * b}, D=D[r0:r1])
    # [load_KV] Alg. 2 line 6: for each key block j (outer loop), K_j, V_j from HBM to SRAM (below)
    for j, c0 in enumerate(range(0, Nk, Bc)):
        c1 = min(c0 + Bc, Nk)
        bc = c1 - c0
        rows_i = [i for i in range(Tr) if tile_kind(i * Br, min((i + 1) * Br, Nq), c0, c1, Nq, Nk, causal) != "skipped"]
        # [init_dKdV] Alg. 2 line 7: dK_j = 0, dV_j = 0 on chip
        dK_j, dV_j = np.zeros((bc, d), acc), np.zeros((bc, dv), acc)
        # [load_KV] Alg. 2 line 6: K_j, V_j from HBM to SRAM, once (none if no query block sees them)
        if rows_i:
            K_j, V_j = K[c0:c1], V[c0:c1]
            rec.emit("load_KV", -1, j, 0, 0, c0, c1, reads={"K": bc * d * b, "V": bc * dv * b})
        # [load_Qi] Alg. 2 line 9: for each query block i that sees K_j, Q_i, dO_i, L_i, D_i from HBM to SRAM
        for i in rows_i:
            r0, r1 = i * Br, min((i + 1) * Br, Nq)
            br = r1 - r0
            kind = tile_kind(r0, r1, c0, c1, Nq, Nk, causal)
            at = (i, j, r0, r1, c0, c1)
            Q_i, dO_i, lse_i, D_i = Q[r0:r1], dO[r0:r1], lse[r0:r1], D[r0:r1]
            rec.emit("load_Qi", *at, tile=kind, reads={"Q": br * d * b, "dO": br * dv * b, "lse": br * b, "D": br * b})
            # [recompute_P] Alg. 2 lines 10-11: S_ij = scale · Q_i K_jᵀ (masked); P_ij = exp(S_ij − L_i)
            S_ij = tile_scores(Q_i, K_j, scale, r0, r1, c0, c1, Nq, Nk, causal, kind)
            P_ij = _recompute_P(S_ij, lse_i)
            rec.emit("recompute_P", *at, tile=kind, flops=2 * br * bc * d, S=S_ij, P=P_ij)
            # [accumulate_dV] Alg. 2 line 12: dV_j ← dV_j + P_ijᵀ dO_i
            dV_j += P_ij.T @ dO_i
            rec.emit("accumulate_dV", *at, tile=kind, flops=2 * br * bc * dv, dV=dV_j)
            # [compute_dS] Alg. 2 lines 13-14: dP_ij = dO_i V_jᵀ; dS_ij = P_ij ∘ (dP_ij − D_i)
            dP_ij = dO_i @ V_j.T
            dS_ij = P_ij * (dP_ij - D_i[:, None])
            rec.emit("compute_dS", *at, tile=kind, flops=2 * br * bc * dv, D=D_i, dP=dP_ij, dS=dS_ij)
            # [accumulate_dK] Alg. 2 line 16: dK_j ← dK_j + scale · dS_ijᵀ Q_i
            dK_j += scale * (dS_ij.T @ Q_i)
            rec.emit("accumulate_dK", *at, tile=kind, flops=2 * br * bc * d, dK=dK_j)
            # [update_dQ] Alg. 2 line 15: dQ_i ← dQ_i + scale · dS_ij K_j, read from and written back to HBM
            dQ[r0:r1] += scale * (dS_ij @ K_j)
            rec.emit("update_dQ", *at, tile=kind, flops=2 * br * bc * d, reads={"dQ": br * d * b},
                     writes={"dQ": br * d * b}, dQ=dQ[r0:r1])
        # [write_dKdV] Alg. 2 line 18: dK_j, dV_j to HBM
        dK[c0:c1], dV[c0:c1] = dK_j, dV_j
        rec.emit("write_dKdV", -1, j, 0, 0, c0, c1, writes={"dK": bc * d * b, "dV": bc * dv * b}, dK=dK_j, dV=dV_j)
    return dQ, dK, dV


def flash_backward(Q, K, V, O, dO, lse, *, Br: int = 64, Bc: int = 64, causal: bool = False, scale=None,
                   record: bool = False) -> BackwardResult:
    """Tiled, exact attention backward pass with recomputation (FlashAttention).

    Source: Dao et al. 2022, Algorithm 4 and Appendix B (the backward with recomputation);
    Dao 2023, FlashAttention-2 Algorithm 2 (key blocks outer, D = rowsum(dO ∘ O) precomputed,
    dQ accumulated in HBM with atomic adds).

    Parameters
    ----------
    Q : array (..., Nq, d); K : array (..., Nk, d); V : array (..., Nk, dv)
    O : array (..., Nq, dv), the forward output; dO : array (..., Nq, dv), dLoss/dO
        float16/32/64 (array-likes, ints and views accepted), finite, shared leading axes.
    lse : array (..., Nq), the forward's row log-sum-exp of the scaled scores (``flash_forward``'s
        ``r.lse``); −inf marks a row that sees no key (its P and gradient contributions are 0).
    Br, Bc : int >= 1
        Block rows (queries) and block columns (keys); partial last tiles are fine.
    causal : bool
        Bottom-right aligned mask (query i sees key j iff j <= i + Nk − Nq); tiles with no
        visible key are skipped, as in the forward.
    scale : float or None (1/sqrt(d)); must be the forward's scale.
    record : bool
        Keep the step-by-step Trace (one head only: Q must be 2-D).

    Returns
    -------
    BackwardResult with dQ (..., Nq, d), dK (..., Nk, d), dV (..., Nk, dv) in the inputs' dtype
    (accumulated in float64 for float64 inputs, float32 otherwise); io: IOCount in bytes of the
    input dtype, summed over heads; trace: Trace (order "fa2_bwd") of BackwardEvents whose kinds
    are compute_D, load_KV, load_Qi, recompute_P, accumulate_dV, compute_dS, accumulate_dK,
    update_dQ, write_dKdV.

    Counting: preprocessing reads O_i, dO_i and writes D_i and dQ_i = 0 per query block; K_j, V_j
    are read once and dK_j, dV_j written once; every computed tile reads Q_i, dO_i, lse_i, D_i and
    reads + writes dQ_i (FA2's atomic read-modify-write, counted in full); FLOPs are matmul FLOPs,
    2·br·bc·d for each of S, dK, dQ and 2·br·bc·dv for each of dV, dP. Equals
    ``flashviz.iomodel.flash_backward_io`` exactly.

    Raises
    ------
    TypeError / ValueError (one line) for non-arrays, non-float dtypes, wrong ndim, mismatched
    shapes (O and dO must be (..., Nq, dv), lse (..., Nq)), NaN/inf inputs (lse: NaN/+inf),
    scores that could overflow the accumulator type (``checks.check_score_range``), dP = dO Vᵀ,
    D = rowsum(dO ∘ O), dQ, dK or dV that could (``checks.check_grad_range``), block sizes that
    are not integers >= 1, or record=True with batched inputs.
    """
    Q, K, V = check_qkv(Q, K, V)
    O, dO, lse = _check_O(O, Q, V), _check_dO(dO, Q, V), _check_lse(lse, Q)
    Br, Bc = check_block(Br, "Br"), check_block(Bc, "Bc")
    causal, record = check_flag(causal, "causal"), check_flag(record, "record")
    Nq, d = Q.shape[-2:]
    Nk, dv = V.shape[-2:]
    scale = check_scale(scale, d)
    if record and Q.ndim != 2:
        raise ValueError(f"record=True traces one head: pass Q, K, V of shape (N, d), got Q {Q.shape}")
    out_dtype = result_dtype(Q, K, V, O, dO)
    acc = np.float64 if out_dtype == np.float64 else np.float32
    check_score_range(Q, K, scale, acc)
    check_grad_range(Q, K, V, dO, scale, acc, O)
    b = np.dtype(out_dtype).itemsize
    lead = Q.shape[:-2]
    flat = lambda x, n, k: x.reshape(-1, n, k).astype(acc, copy=False)  # noqa: E731
    Qf, Kf, Vf, Of, dOf = flat(Q, Nq, d), flat(K, Nk, d), flat(V, Nk, dv), flat(O, Nq, dv), flat(dO, Nq, dv)
    lsef = lse.reshape(-1, Nq).astype(acc, copy=False)
    sram = backward_sram_working_set(min(Br, Nq), min(Bc, Nk), d, dv=dv, itemsize=b)
    outs, io, trace = [], IOCount(sram_bytes=sram), None
    for h in range(Qf.shape[0]):
        tr = Trace(Nq, Nk, d, dv, Br, Bc, causal, "fa2_bwd", scale, b, sram)
        rec = _BackwardRecorder(tr, record)
        outs.append(_backward_fa2(Qf[h], Kf[h], Vf[h], Of[h], dOf[h], lsef[h], Br, Bc, acc(scale), causal,
                                  rec, acc, b))
        io.add(rec.io.reads, rec.io.writes, rec.io.flops)
        trace = tr if record else None
    dQ, dK, dV = (np.stack([o[k] for o in outs]).reshape(*lead, *outs[0][k].shape).astype(out_dtype, copy=False)
                  for k in range(3))
    return BackwardResult(dQ, dK, dV, io, trace)
