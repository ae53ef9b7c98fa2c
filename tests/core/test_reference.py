import numpy as np
import pytest
from conftest import naive_attention_loops

import flashviz as fv


@pytest.mark.parametrize("Nq,Nk,d,causal", [(7, 7, 4, False), (7, 7, 4, True), (9, 5, 3, True), (5, 9, 3, True), (1, 1, 1, False)])
def test_attention_matches_row_by_row_loops(rng, Nq, Nk, d, causal):
    Q, K, V = rng.standard_normal((Nq, d)), rng.standard_normal((Nk, d)), rng.standard_normal((Nk, d))
    O, lse = fv.attention(Q, K, V, causal=causal, return_lse=True)
    O_ref, lse_ref = naive_attention_loops(Q, K, V, causal=causal)
    np.testing.assert_allclose(O, O_ref, rtol=1e-13, atol=1e-14)
    assert np.array_equal(np.isneginf(lse), np.isneginf(lse_ref))
    fin = np.isfinite(lse_ref)
    np.testing.assert_allclose(lse[fin], lse_ref[fin], rtol=1e-13)


def test_rows_that_see_no_key_are_zero_not_nan(rng):
    Q, K, V = rng.standard_normal((6, 4)), rng.standard_normal((2, 4)), rng.standard_normal((2, 4))
    O, lse = fv.attention(Q, K, V, causal=True, return_lse=True)
    # bottom-right alignment: rows 0..3 see no key (c <= r + 2 - 6 < 0)
    assert np.all(O[:4] == 0) and np.all(np.isneginf(lse[:4]))
    assert np.isfinite(O).all() and np.isfinite(lse[4:]).all()


def test_causal_square_is_lower_triangle(rng):
    Q, K, V = (rng.standard_normal((5, 3)) for _ in range(3))
    O = fv.attention(Q, K, V, causal=True)
    # row 0 sees only key 0: its output is V[0]
    np.testing.assert_allclose(O[0], V[0], rtol=1e-14)


def test_scale_default_and_explicit(rng):
    Q, K, V = (rng.standard_normal((8, 16)) for _ in range(3))
    np.testing.assert_allclose(fv.attention(Q, K, V), fv.attention(Q, K, V, scale=0.25), rtol=1e-14)
    assert not np.allclose(fv.attention(Q, K, V), fv.attention(Q, K, V, scale=1.0))


def test_batched_leading_axes(rng):
    Q, K, V = (rng.standard_normal((2, 3, 6, 4)) for _ in range(3))
    O = fv.attention(Q, K, V)
    for b in range(2):
        for h in range(3):
            np.testing.assert_allclose(O[b, h], naive_attention_loops(Q[b, h], K[b, h], V[b, h])[0], rtol=1e-13)


def test_huge_scores_do_not_overflow():
    Q, K, V = fv.data.adversarial_qkv(64, 16)
    S = (Q @ K.T) / 4.0
    assert S.max() > 500  # a softmax without max-subtraction would overflow float64 here
    with np.errstate(over="raise"):
        O = fv.attention(Q, K, V)
    O_ref, _ = naive_attention_loops(Q, K, V)
    np.testing.assert_allclose(O, O_ref, rtol=1e-10, atol=1e-12)
