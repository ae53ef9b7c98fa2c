"""Online softmax: one row of scores streamed block by block (Milakov & Gimelshein 2018).

The state after each block is the running max m and the running sum
l = sum_k exp(x_k - m). When a new block raises the max from m_old to m_new, the
sum so far is rescaled by exp(m_old - m_new) — the correction FlashAttention
applies to l and to the output accumulator (Dao et al. 2022, Section 3.1).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .checks import check_block, check_flag

NEG_INF = -np.inf


def safe_exp_diff(a, b):
    """exp(a - b) with the convention exp(-inf - (-inf)) = 0 — never NaN.

    Used for the rescale factor exp(m_old - m_new) and for exp(S - m): when both
    are -inf (nothing seen yet / a fully masked row) the contribution is 0.
    """
    a = np.asarray(a, dtype=np.float64) if not isinstance(a, np.ndarray) else a
    b = np.asarray(b, dtype=np.float64) if not isinstance(b, np.ndarray) else b
    both_neg_inf = np.isneginf(a) & np.isneginf(b)
    with np.errstate(invalid="ignore", over="ignore"):
        out = np.exp(np.where(both_neg_inf, NEG_INF, a - b))
    return out


@dataclass(frozen=True)
class OnlineSoftmaxStep:
    """State after streaming block ``j`` (elements [c0, c1)) of one row.

    m_old: running max before the block (-inf before the first block).
    m, l: running max and running sum after the block (float64 scalars).
    rescale: exp(m_old - m_new), the factor the exact algorithm applies to the old sum
        (1.0 when the max did not move; 0.0 for the first block, where l_old = 0). It is
        recorded even in the "break it" mode, where it is NOT applied (see ``applied``).
    p_block: exp(x_block - m_new), the block's unnormalised weights.
    applied: True when ``rescale`` was applied to the old sum (the exact algorithm);
        False in the "break it" mode (``rescale=False``), where l = l_old + sum(p_block).
    """

    j: int
    c0: int
    c1: int
    m_old: float
    m: float
    l: float
    rescale: float
    p_block: np.ndarray
    applied: bool = True


def _check_row(x) -> np.ndarray:
    if isinstance(x, (str, bytes)) or x is None:
        raise TypeError(f"x must be a 1-D float array of scores, got {type(x).__name__}")
    x = np.asarray(x)
    if x.dtype.kind not in "fiu" or x.dtype.kind == "b":
        raise TypeError(f"x must be a 1-D float array of scores, got dtype {x.dtype}")
    if x.ndim != 1 or x.size < 1:
        raise ValueError(f"x must be a non-empty 1-D array of scores, got shape {x.shape}")
    x = x.astype(np.float64)
    if np.isnan(x).any() or np.isposinf(x).any():
        raise ValueError("x contains NaN or +inf; scores must be finite (-inf marks a masked entry)")
    return x


def online_softmax_steps(x, *, block: int, rescale: bool = True) -> list[OnlineSoftmaxStep]:
    """Stream the row ``x`` in blocks of ``block`` elements and return the state after each.

    Parameters: x (N,) float scores (-inf allowed for masked entries); block >= 1 (int);
    rescale=False is the "break it" mode that never corrects the old sum.
    Returns a list of ``OnlineSoftmaxStep``, one per block (ceil(N / block) of them).
    Raises TypeError/ValueError for non-numeric x, NaN/+inf, or a bad block size.
    """
    x = _check_row(x)
    block = check_block(block, "block")
    rescale = check_flag(rescale, "rescale")
    m, l = NEG_INF, 0.0
    steps = []
    for j, c0 in enumerate(range(0, x.size, block)):
        c1 = min(c0 + block, x.size)
        xb = x[c0:c1]
        m_new = max(m, float(xb.max()))
        alpha = float(safe_exp_diff(m, m_new)) if rescale else 1.0  # break it: never correct
        p_block = safe_exp_diff(xb, np.float64(m_new))
        l = alpha * l + float(p_block.sum())
        steps.append(OnlineSoftmaxStep(j, c0, c1, m, m_new, l, float(safe_exp_diff(m, m_new)), p_block,
                                       applied=rescale))
        m = m_new
    return steps


def online_softmax(x, *, block: int, rescale: bool = True) -> np.ndarray:
    """Softmax of one row computed by streaming it in blocks (running max m, running sum l).

    Source: Dao et al. 2022, Section 3.1 (online softmax); Milakov & Gimelshein 2018.

    Parameters
    ----------
    x : array (N,), float (ints accepted); -inf marks a masked entry
    block : int >= 1, how many elements are streamed at a time (the last block may be partial)
    rescale : bool, default True. False drops the correction exp(m_old - m_new) of the
        running sum — the "break it" mode: the result no longer sums to 1 whenever the
        max grows after the first block.

    Returns
    -------
    p : float64 array (N,), exp(x - m) / l with the final m and l. A row of all -inf gives zeros.

    Raises TypeError / ValueError for non-numeric input, wrong shape, NaN or +inf, or a bad block.
    """
    x = _check_row(x)
    steps = online_softmax_steps(x, block=block, rescale=rescale)
    m, l = steps[-1].m, steps[-1].l
    if l == 0.0:
        return np.zeros_like(x)
    return safe_exp_diff(x, np.float64(m)) / l


def naive_softmax(x, *, dtype=np.float32) -> np.ndarray:
    """exp(x) / sum(exp(x)) in ``dtype``, WITHOUT subtracting the max — the "break it" demo.

    exp overflows to inf above x ≈ 88.7 in float32 and x ≈ 709.8 in float64, so scores near
    800 give inf / inf = NaN (and 0 for the entries that did not overflow). The result is
    returned as computed, NaN and all (floating-point warnings are silenced on purpose);
    compare ``online_softmax``, which subtracts the running max and never overflows.

    Parameters: x (N,) float scores (-inf allowed for masked entries); dtype float16,
    float32 (default) or float64 — the type the exponentials and the sum are computed in.
    Returns an (N,) array of ``dtype``. Raises TypeError/ValueError like ``online_softmax``.
    """
    x = _check_row(x)
    dt = _check_float_dtype(dtype)
    xd = x.astype(dt)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        e = np.exp(xd)
        return (e / e.sum(dtype=dt)).astype(dt)


def _check_float_dtype(dtype) -> np.dtype:
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"dtype must be float16, float32 or float64, got {dtype!r}") from None
    if dt.type not in (np.float16, np.float32, np.float64):
        raise TypeError(f"dtype must be float16, float32 or float64, got {dt}")
    return dt
