"""Property-based checks of the NumPy core over random shapes, blocks, dtypes, masks and scales."""

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import flashviz as fv
from flashviz.iomodel import flash_forward_io

EPS = {np.float64: np.finfo(np.float64).eps, np.float32: np.finfo(np.float32).eps,
       np.float16: np.finfo(np.float32).eps}   # float16 inputs are computed in float32


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(Nq=st.integers(1, 70), Nk=st.integers(1, 70), d=st.integers(1, 16), Br=st.integers(1, 80),
       Bc=st.integers(1, 80), causal=st.booleans(), order=st.sampled_from(["fa2", "fa1"]),
       dtype=st.sampled_from([np.float64, np.float32, np.float16]), magnitude=st.sampled_from([0.1, 1.0, 30.0]),
       seed=st.integers(0, 2**31 - 1))
def test_tiled_forward_matches_reference_and_model(Nq, Nk, d, Br, Bc, causal, order, dtype, magnitude, seed):
    rng = np.random.default_rng(seed)
    if dtype is np.float16:
        magnitude = min(magnitude, 1.0)
    # magnitude 30 with d up to 16 puts scaled scores in the hundreds
    Q, K, V = (rng.standard_normal((n, d)) * s for n, s in ((Nq, magnitude), (Nk, magnitude), (Nk, 1.0)))
    Q, K, V = (x.astype(dtype) for x in (Q, K, V))
    r = fv.flash_forward(Q, K, V, Br=Br, Bc=Bc, causal=causal, order=order)
    O_ref, lse_ref = fv.attention(Q, K, V, causal=causal, return_lse=True)
    assert not np.isnan(r.O.astype(np.float64)).any() and not np.isnan(r.lse).any()
    err = np.abs(r.O.astype(np.float64) - O_ref).max()
    # rounding of S = scale·QKᵀ is amplified by the softmax: allow eps·(1 + max|S|)·max|V| (plus the
    # float16 rounding of the output itself)
    S_max = np.abs(Q.astype(np.float64) @ K.astype(np.float64).T).max() / np.sqrt(d)
    tol = 16 * EPS[dtype] * (1 + S_max) * max(1.0, np.abs(V).max())
    if dtype is np.float16:
        tol += 2 * np.finfo(np.float16).eps * max(1.0, np.abs(V).max())
    assert err <= tol
    assert np.array_equal(np.isneginf(r.lse), np.isneginf(lse_ref))
    model = flash_forward_io(Nq, Nk, d, Br=Br, Bc=Bc, itemsize=np.dtype(dtype).itemsize, order=order, causal=causal)
    assert r.io == model
