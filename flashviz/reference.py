"""Dense reference attention: the paper's Algorithm 0 computed in float64.

This is the independent reference every tiled result is checked against.
"""

from __future__ import annotations

import numpy as np

from .checks import check_flag, check_qkv, check_scale, check_score_range
from .masking import visible


def attention(Q, K, V, *, causal: bool = False, scale=None, return_lse: bool = False):
    """Standard attention O = softmax(scale * Q Kᵀ) V with float64 arithmetic.

    Source: Dao et al. 2022, Section 2.2 / Algorithm 0 (S = QKᵀ, P = softmax(S), O = PV).

    Parameters
    ----------
    Q : array (..., Nq, d), float16/32/64 (array-likes and non-contiguous views accepted)
    K : array (..., Nk, d)
    V : array (..., Nk, dv)
    causal : bool
        Bottom-right aligned mask: query i sees key j iff j <= i + Nk - Nq.
    scale : float or None
        Multiplies the scores; None means 1/sqrt(d).
    return_lse : bool
        Also return the row log-sum-exp of the scaled scores, shape (..., Nq).

    Returns
    -------
    O : float64 array (..., Nq, dv); rows that see no key are 0 (and their lse is -inf).
    lse : float64 array (..., Nq), only when ``return_lse``.

    Raises
    ------
    TypeError for non-float or non-array input; ValueError for wrong ndim, mismatched
    shapes, NaN/inf entries, or scores that could overflow float64.
    """
    Q, K, V = check_qkv(Q, K, V)
    causal = check_flag(causal, "causal")
    return_lse = check_flag(return_lse, "return_lse")
    Nq, d = Q.shape[-2:]
    Nk = K.shape[-2]
    scale = check_scale(scale, d)
    check_score_range(Q, K, scale, np.float64)
    Q64, K64, V64 = (np.asarray(x, dtype=np.float64) for x in (Q, K, V))
    S = scale * (Q64 @ np.swapaxes(K64, -1, -2))
    if causal:
        S = np.where(visible(np.arange(Nq), np.arange(Nk), Nq, Nk), S, -np.inf)
    m = S.max(axis=-1, keepdims=True)
    m_safe = np.where(np.isfinite(m), m, 0.0)  # a fully masked row: exp(-inf - 0) = 0, never NaN
    P_unnorm = np.exp(S - m_safe)
    l = P_unnorm.sum(axis=-1, keepdims=True)
    l_safe = np.where(l > 0, l, 1.0)
    O = (P_unnorm / l_safe) @ V64
    if not return_lse:
        return O
    with np.errstate(divide="ignore"):
        lse = np.where(l[..., 0] > 0, m_safe[..., 0] + np.log(l_safe[..., 0]), -np.inf)
    return O, lse
