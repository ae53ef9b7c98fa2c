"""Input checks shared by the algorithm layer: one clear line per mistake.

Every public entry point funnels its arguments through these helpers so that bad
input raises a one-line ``TypeError``/``ValueError`` that says what was expected,
instead of a NaN, a silent wrong answer or a deep NumPy traceback.
"""

from __future__ import annotations

import numbers

import numpy as np

FLOAT_DTYPES = (np.float16, np.float32, np.float64)


def as_matrix_stack(x, name: str) -> np.ndarray:
    """Return ``x`` as a float ndarray of shape (..., N, d).

    Accepts float16/32/64 arrays (any strides; views are fine) and array-likes of
    numbers. Raises TypeError for non-numeric input and ValueError for wrong ndim,
    empty axes or non-finite values.
    """
    if isinstance(x, (str, bytes)) or x is None:
        raise TypeError(f"{name} must be a float array of shape (..., N, d), got {type(x).__name__}")
    if not isinstance(x, np.ndarray):
        if hasattr(x, "__cuda_array_interface__") or type(x).__module__.startswith(("cupy", "torch")):
            raise TypeError(f"{name} must be a NumPy array (CPU); convert it with .get() / .cpu().numpy() first")
        try:
            x = np.asarray(x)
        except Exception as exc:  # ragged lists and the like
            raise TypeError(f"{name} must be a float array of shape (..., N, d): {exc}") from None
    if x.dtype.kind == "b":
        raise TypeError(f"{name} must hold numbers, got a boolean array")
    if x.dtype.kind in "iu":
        x = x.astype(np.float64)
    if x.dtype.type not in FLOAT_DTYPES:
        raise TypeError(f"{name} must have dtype float16, float32 or float64, got {x.dtype}")
    if x.ndim < 2:
        raise ValueError(f"{name} must have shape (..., N, d) with ndim >= 2, got shape {x.shape}")
    if x.shape[-1] < 1 or x.shape[-2] < 1:
        raise ValueError(f"{name} must have N >= 1 and d >= 1, got shape {x.shape}")
    if not np.isfinite(x).all():
        raise ValueError(f"{name} contains NaN or inf; attention inputs must be finite")
    return x


def check_qkv(Q, K, V):
    """Validate Q (..., Nq, d), K (..., Nk, d), V (..., Nk, dv) and return them as arrays."""
    Q = as_matrix_stack(Q, "Q")
    K = as_matrix_stack(K, "K")
    V = as_matrix_stack(V, "V")
    if Q.shape[-1] != K.shape[-1]:
        raise ValueError(f"Q and K must share the head dimension d, got Q {Q.shape} and K {K.shape}")
    if K.shape[-2] != V.shape[-2]:
        raise ValueError(f"K and V must have the same number of keys Nk, got K {K.shape} and V {V.shape}")
    if not (Q.shape[:-2] == K.shape[:-2] == V.shape[:-2]):
        raise ValueError(
            f"Q, K, V must share their leading (batch, head) axes, got {Q.shape}, {K.shape}, {V.shape}"
        )
    return Q, K, V


def result_dtype(*arrays) -> np.dtype:
    """The dtype outputs are returned in: the widest input float type."""
    return np.result_type(*[a.dtype for a in arrays])


def check_block(value, name: str) -> int:
    """A block size: a Python/NumPy integer >= 1 (bool is refused)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer >= 1, got {value!r}")
    if value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value}")
    return int(value)


def check_size(value, name: str) -> int:
    """A size such as N or d: an integer >= 1."""
    return check_block(value, name)


def check_scale(scale, d: int) -> float:
    """``scale=None`` means 1/sqrt(d); otherwise a finite real number."""
    if scale is None:
        return 1.0 / float(np.sqrt(d))
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise TypeError(f"scale must be a real number or None, got {scale!r}")
    try:
        value = float(scale)
    except OverflowError:
        raise ValueError(f"scale must be a finite float, got an integer with {len(str(scale))} digits") from None
    if not np.isfinite(value):
        raise ValueError(f"scale must be finite, got {scale}")
    return value


def check_score_range(Q: np.ndarray, K: np.ndarray, scale: float, acc_dtype) -> None:
    """Refuse inputs whose scores scale·QKᵀ could overflow the accumulator type.

    Bound (Cauchy–Schwarz): |scale·q·k| <= |scale|·max‖q‖·max‖k‖. Over 1/4 of the type's
    largest finite value, scores (or their differences m_old − m_new) could become ±inf and
    the softmax NaN or silently wrong, so this raises a one-line ValueError instead.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        q = float(np.sqrt(np.max(np.sum(np.square(Q, dtype=np.float64), axis=-1))))
        k = float(np.sqrt(np.max(np.sum(np.square(K, dtype=np.float64), axis=-1))))
        bound = abs(scale) * q * k
    limit = float(np.finfo(acc_dtype).max) / 4
    if not np.isfinite(bound) or bound > limit:
        raise ValueError(f"scores scale·QKᵀ can reach about {bound:.3g}, beyond what {np.dtype(acc_dtype).name} "
                         f"holds safely ({limit:.3g}): scale Q, K or scale down")


def check_flag(value, name: str) -> bool:
    """True/False (NumPy bools too); one-line TypeError otherwise."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def check_itemsize(itemsize) -> int:
    """Bytes per element: 1, 2, 4 or 8; one-line ValueError otherwise."""
    if isinstance(itemsize, bool) or not isinstance(itemsize, numbers.Integral) or itemsize not in (1, 2, 4, 8):
        raise ValueError(f"itemsize must be 1, 2, 4 or 8 bytes, got {itemsize!r}")
    return int(itemsize)


def check_order(order) -> str:
    """'fa2' or 'fa1'; one-line ValueError otherwise."""
    if order not in ("fa1", "fa2"):
        raise ValueError(f"order must be 'fa2' (query blocks outer) or 'fa1' (key blocks outer), got {order!r}")
    return order
