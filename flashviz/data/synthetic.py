"""Synthetic attention inputs: seeded random, and adversarial (scores in the hundreds)."""

from __future__ import annotations

import numpy as np

from ..checks import check_size

_DTYPES = (np.float16, np.float32, np.float64)


def _check_dtype(dtype):
    dt = np.dtype(dtype)
    if dt.type not in _DTYPES:
        raise TypeError(f"dtype must be float16, float32 or float64, got {dt}")
    return dt


def _check_seed(seed):
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an integer, got {seed!r}")
    return int(seed)


def random_qkv(N: int, d: int, *, seed: int = 0, dtype=np.float64):
    """Seeded unit-normal Q, K, V, each of shape (N, d) and the given dtype.

    N, d: ints >= 1; seed: int (same seed, same arrays); dtype: float16/32/64.
    Raises TypeError/ValueError for a bad size, seed or dtype.
    """
    N, d = check_size(N, "N"), check_size(d, "d")
    dt = _check_dtype(dtype)
    rng = np.random.default_rng(_check_seed(seed))
    Q, K, V = (rng.standard_normal((N, d)).astype(dt) for _ in range(3))
    return Q, K, V


def adversarial_qkv(N: int, d: int, *, seed: int = 0, dtype=np.float64, low: float = 300.0, high: float = 800.0):
    """Q, K, V whose scaled scores S = QKᵀ/sqrt(d) lie between about ``low`` and ``high``.

    Every query is aligned with one direction u and the keys' length grows with their
    position, so each row's max keeps rising from block to block: the online-softmax
    rescale factor exp(m_old − m_new) fires at every key block, and a softmax without
    max-subtraction overflows (exp(800) = inf in float64, exp(89) = inf in float32).
    Shapes (N, d); dtype float32 or float64 (float16 cannot hold these scores' products
    without care, so it is refused). Raises TypeError/ValueError for bad arguments.
    """
    N, d = check_size(N, "N"), check_size(d, "d")
    dt = _check_dtype(dtype)
    if dt == np.float16:
        raise TypeError("adversarial inputs need float32 or float64 (their scores overflow float16)")
    if not (0 < low < high):
        raise ValueError(f"need 0 < low < high, got low={low}, high={high}")
    rng = np.random.default_rng(_check_seed(seed))
    u = rng.standard_normal(d)
    u /= np.linalg.norm(u)
    q_len = np.sqrt(high * np.sqrt(d))            # |q|·|k_max|/sqrt(d) = high
    Q = q_len * (u + 0.01 * rng.standard_normal((N, d)))
    ramp = low / high + (1 - low / high) * (np.arange(N) / max(N - 1, 1))
    ramp = ramp + 0.02 * rng.standard_normal(N)    # not perfectly monotone: some blocks keep the max
    K = (q_len * ramp)[:, None] * (u + 0.01 * rng.standard_normal((N, d)))
    V = rng.standard_normal((N, d))
    return Q.astype(dt), K.astype(dt), V.astype(dt)
