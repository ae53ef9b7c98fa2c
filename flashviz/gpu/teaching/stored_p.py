"""Recompute versus store, on the GPU (issue 23, chapter 6): the two backwards that keep P.

FlashAttention's backward recomputes P_ij = exp(S_ij − L_i) tile by tile from the forward's lse
(kernels/flash_bwd.cu, ``flash_backward_gpu``). The alternatives keep P, an Nq × Nk matrix per head:

* ``flash_backward_stored_p``: the same teaching kernel, the same tiling and the same Br, Bc,
  built with ``STORED_P`` — it reads P_ij from HBM instead of computing S_ij and its exponentials
  (everything else identical), so the two differ in exactly one step;
* ``naive_backward_gpu``: standard attention's backward (FlashAttention, Dao et al. 2022,
  Algorithm 3's arithmetic) on whole matrices with cuBLAS — P, then dP = dO Vᵀ and dS = P ∘ (dP − D)
  materialised in HBM, Nq × Nk each;
* ``probabilities_gpu``: the P both of them read, made from Q, K and lse (what a forward that
  stores P leaves behind; its cost is the time a storing forward spends writing it).

All float32 CuPy; inputs NumPy or CuPy arrays of shape (..., N, d). CuPy imported lazily.
"""

from __future__ import annotations

import numpy as np

from ...checks import check_flag
from ..common import check_scale, cupy
from .backward import check_backward_shapes, compile_backward, cupy_f32, launch_backward
from .limits import check_bwd_sizes


def _prepare(Q, K, V, O, dO, lse, causal, scale):
    causal = check_flag(causal, "causal")
    lead, Nq, Nk, d = check_backward_shapes(Q, K, V, O, dO, lse)
    BH = int(np.prod(lead, dtype=np.int64)) if lead else 1
    if BH > 65_535:
        raise ValueError(f"the kernel's grid puts batch·heads on grid.y, at most 65,535; got {BH}")
    scale = check_scale(scale, d)
    cp = cupy()
    shapes = [(BH, Nq, d), (BH, Nk, d), (BH, Nk, d), (BH, Nq, d), (BH, Nq, d), (BH, Nq)]
    bufs = [cupy_f32(x, cp, s) for x, s in zip((Q, K, V, O, dO, lse), shapes)]
    return cp, causal, scale, lead, (BH, Nq, Nk, d), bufs


def probabilities_gpu(Q, K, lse, *, causal: bool = False, scale=None):
    """P = exp(scale · Q Kᵀ − lse) as one CuPy float32 array (..., Nq, Nk): 0 where the key is
    masked (causal, bottom-right: query r sees key c iff c <= r + Nk − Nq) and on rows with lse =
    −inf. Q (..., Nq, d), K (..., Nk, d), lse (..., Nq): NumPy or CuPy float arrays. Made in place
    in one Nq·Nk buffer a head (cuBLAS for Q Kᵀ). TypeError / ValueError (one line) for bad shapes
    or types, RuntimeError without CuPy / a GPU, CuPy's OutOfMemoryError when P does not fit."""
    causal = check_flag(causal, "causal")
    cp = cupy()
    q, k, L = (cp.asarray(x, dtype=cp.float32) for x in (Q, K, lse))
    if q.ndim < 2 or k.ndim != q.ndim or q.shape[:-2] != k.shape[:-2] or q.shape[-1] != k.shape[-1] \
            or L.shape != q.shape[:-1]:
        raise ValueError(f"Q (..., Nq, d), K (..., Nk, d) and lse (..., Nq) must agree; got {q.shape}, {k.shape}, "
                         f"{L.shape}")
    Nq, Nk, d = q.shape[-2], k.shape[-2], q.shape[-1]
    scale = check_scale(scale, d)
    P = cp.matmul(q, cp.swapaxes(k, -1, -2))             # S, then P in place
    _probabilities_kernel()(cp.ascontiguousarray(L), np.int32(Nq), np.int32(Nk), np.float32(scale),
                            np.int32(int(causal)), P)
    return P


_KERNEL: list = []


def _probabilities_kernel():
    """The in-place S → P elementwise kernel (compiled once per process)."""
    if not _KERNEL:
        cp = cupy()
        _KERNEL.append(cp.ElementwiseKernel(
            "raw float32 L, int32 Nq, int32 Nk, float32 scale, int32 causal", "float32 P",
            """
            const long long row = i / Nk;                 // (head, query row) of element i
            const int c = (int)(i % Nk), r = (int)(row % Nq);
            const float l = L[row];
            const bool hidden = (causal && c > r + Nk - Nq) || isinf(l);
            P = hidden ? 0.f : expf(P * scale - l);
            """, "fv_probabilities_from_lse"))
    return _KERNEL[0]


def flash_backward_stored_p(Q, K, V, O, dO, lse, P, *, Br: int = 64, Bc: int = 64, causal: bool = False,
                            scale=None):
    """FlashAttention-2's backward with the teaching kernel built to read a stored P (the one step
    that differs from ``flash_backward_gpu``: P_ij from HBM instead of S_ij = scale·Q_i K_jᵀ and
    P_ij = exp(S_ij − L_i)). dQ by atomics, as the recomputing kernel's default.

    Q, O, dO (..., Nq, d); K, V (..., Nk, d); lse (..., Nq); P (..., Nq, Nk) as
    ``probabilities_gpu`` makes it (0 where masked): NumPy or CuPy float arrays, run as float32.
    Br, Bc, d as ``flash_backward_gpu``. Returns (dQ, dK, dV) CuPy float32 of Q's, K's, V's shapes.
    TypeError / ValueError (one line) for bad input (P's shape included), RuntimeError without a GPU."""
    cp, causal, scale, lead, (BH, Nq, Nk, d), bufs = _prepare(Q, K, V, O, dO, lse, causal, scale)
    check_bwd_sizes(Br, Bc, d)
    if tuple(getattr(P, "shape", ())) != (*lead, Nq, Nk):
        raise ValueError(f"P must have shape (..., Nq, Nk) = {(*lead, Nq, Nk)}, got {getattr(P, 'shape', type(P))}")
    Pd = cupy_f32(P, cp, (BH, Nq, Nk))
    cb = compile_backward(Br, Bc, d, stored_p=True)
    dQ, dK, dV = cp.empty((BH, Nq, d), cp.float32), cp.empty((BH, Nk, d), cp.float32), \
        cp.empty((BH, Nk, d), cp.float32)
    Dbuf = cp.empty((BH, Nq), cp.float32)
    launch_backward(cb, *bufs, dQ, dK, dV, Dbuf, causal=causal, scale=scale, P=Pd)
    return dQ.reshape(*lead, Nq, d), dK.reshape(*lead, Nk, d), dV.reshape(*lead, Nk, d)


def naive_backward_gpu(Q, K, V, O, dO, lse, *, causal: bool = False, scale=None, P=None):
    """Standard attention's backward on whole matrices (cuBLAS, float32): P (given: the stored one,
    as ``probabilities_gpu`` makes it; None: made here from lse), dV = Pᵀ dO, dP = dO Vᵀ,
    dS = P ∘ (dP − D) with D = rowsum(dO ∘ O), dQ = scale · dS K, dK = scale · dSᵀ Q — P and dP/dS
    materialised, two Nq × Nk float32 matrices a head. Shapes and errors as
    ``flash_backward_stored_p``; returns (dQ, dK, dV); P is not changed."""
    cp, causal, scale, lead, (BH, Nq, Nk, d), (q, k, v, o, do, L) = _prepare(Q, K, V, O, dO, lse, causal, scale)
    if P is None:
        P = probabilities_gpu(q, k, L, causal=causal, scale=scale)
    elif tuple(getattr(P, "shape", ())) != (*lead, Nq, Nk):
        raise ValueError(f"P must have shape (..., Nq, Nk) = {(*lead, Nq, Nk)}, got {getattr(P, 'shape', type(P))}")
    else:
        P = cupy_f32(P, cp, (BH, Nq, Nk))
    # the transposes on the N x d side: CuPy's batched matmul copies a non-contiguous operand whole,
    # so Pᵀ dO is computed as (dOᵀ P)ᵀ and dSᵀ Q as (Qᵀ dS)ᵀ — no N x N copy
    dV = cp.ascontiguousarray(cp.swapaxes(cp.matmul(cp.swapaxes(do, -1, -2), P), -1, -2))
    dS = cp.matmul(do, cp.swapaxes(v, -1, -2))            # dP, turned into dS in place
    dS -= cp.sum(do * o, axis=-1, keepdims=True)
    dS *= P
    del P
    dQ = cp.matmul(dS, k)
    dQ *= np.float32(scale)
    dK = cp.ascontiguousarray(cp.swapaxes(cp.matmul(cp.swapaxes(q, -1, -2), dS), -1, -2))
    dK *= np.float32(scale)
    return dQ.reshape(*lead, Nq, d), dK.reshape(*lead, Nk, d), dV.reshape(*lead, Nk, d)
