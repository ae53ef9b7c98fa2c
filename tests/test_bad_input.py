"""Bad input gets a one-line TypeError/ValueError that says what was expected."""

import numpy as np
import pytest

import flashviz as fv

Q = np.ones((8, 4))


def one_line(info):
    msg = str(info.value)
    assert msg and "\n" not in msg
    return msg


@pytest.mark.parametrize("fn", [fv.attention, lambda q, k, v: fv.flash_forward(q, k, v, Br=4, Bc=4)],
                         ids=["attention", "flash_forward"])
@pytest.mark.parametrize("args,exc,words", [
    ((np.ones(8), Q, Q), ValueError, "ndim"),
    ((Q, np.ones((8, 5)), Q), ValueError, "head dimension"),
    ((Q, Q, np.ones((7, 4))), ValueError, "same number of keys"),
    ((np.ones((2, 8, 4)), np.ones((3, 8, 4)), np.ones((3, 8, 4))), ValueError, "leading"),
    ((np.where(np.eye(8, 4) > 0, np.nan, 1.0), Q, Q), ValueError, "NaN or inf"),
    ((Q, np.full((8, 4), np.inf), Q), ValueError, "NaN or inf"),
    (("query", Q, Q), TypeError, "float array"),
    ((None, Q, Q), TypeError, "float array"),
    ((Q.astype(np.complex128), Q, Q), TypeError, "dtype"),
    ((np.ones((0, 4)), Q, Q), ValueError, "N >= 1"),
    (([[1, 2], [3]], Q, Q), TypeError, "float array"),
])
def test_bad_arrays(fn, args, exc, words):
    with pytest.raises(exc) as info:
        fn(*args)
    assert words in one_line(info)


@pytest.mark.parametrize("kw,exc,words", [
    (dict(Br=0), ValueError, "Br must be an integer >= 1"), (dict(Bc=-3), ValueError, "Bc must be"),
    (dict(Br=2.0), TypeError, "Br must be an integer"), (dict(Bc="16"), TypeError, "Bc must be"),
    (dict(Br=True), TypeError, "Br"), (dict(causal=1), TypeError, "causal"), (dict(order="FA2"), ValueError, "order"),
    (dict(scale="x"), TypeError, "scale"), (dict(scale=np.nan), ValueError, "scale"),
    (dict(rescale=None), TypeError, "rescale"),
])
def test_bad_options(kw, exc, words):
    with pytest.raises(exc) as info:
        fv.flash_forward(Q, Q, Q, **kw)
    assert words in one_line(info)


def test_numpy_integer_block_sizes_are_fine():
    r = fv.flash_forward(Q, Q, Q, Br=np.int64(3), Bc=np.int32(5))
    np.testing.assert_allclose(r.O, fv.attention(Q, Q, Q), rtol=1e-12)


@pytest.mark.parametrize("call,exc", [
    (lambda: fv.data.random_qkv(0, 4), ValueError), (lambda: fv.data.random_qkv(4, 4, dtype=np.int32), TypeError),
    (lambda: fv.data.random_qkv(4, 4, seed="a"), TypeError), (lambda: fv.data.get_qkv("web", 8, 8), ValueError),
    (lambda: fv.data.get_qkv("real", 8, 64), ValueError), (lambda: fv.data.load_real_qkv(N=10_000), ValueError),
    (lambda: fv.iomodel.standard_attention_io(4, 4, 0), ValueError),
])
def test_bad_data_and_model_arguments(call, exc):
    with pytest.raises(exc) as info:
        call()
    one_line(info)


@pytest.mark.parametrize("call", [
    lambda: fv.flash_forward(np.array([[1e20, 0.0]], np.float32), np.array([[1e20, 0.0]], np.float32),
                             np.ones((1, 2), np.float32)),
    lambda: fv.attention(np.array([[1e160, 0.0]]), np.array([[1e160, 0.0]]), Q[:1, :2]),
    lambda: fv.flash_forward(Q, Q, Q, scale=1e308),
    lambda: fv.flash_forward(Q, Q, Q, scale=-1e308),
])
def test_scores_that_would_overflow_are_refused_not_nan(call):
    with pytest.raises(ValueError) as info:
        call()
    assert "scores" in one_line(info)


def test_other_bad_options():
    with pytest.raises(TypeError):
        fv.attention(Q, Q, Q, return_lse="no")
    with pytest.raises(TypeError):
        fv.flash_forward(Q > 0, Q, Q)
    with pytest.raises(ValueError) as info:
        fv.flash_forward(Q, Q, Q, scale=10**400)
    assert "scale" in one_line(info)
