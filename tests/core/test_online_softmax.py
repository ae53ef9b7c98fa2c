import numpy as np
import pytest

import flashviz as fv


def softmax64(x):
    x = np.asarray(x, np.float64)
    e = np.exp(x - x.max())
    return e / e.sum()


@pytest.mark.parametrize("block", [1, 3, 7, 64, 1000])
def test_online_equals_softmax(rng, block):
    x = rng.standard_normal(100) * 5
    np.testing.assert_allclose(fv.online_softmax(x, block=block), softmax64(x), rtol=1e-13)


def test_rescale_factor_fires_only_when_max_grows():
    x = np.array([0.0, 1.0, 5.0, 2.0, 9.0, 3.0])
    steps = fv.online_softmax_steps(x, block=2)
    assert [s.m for s in steps] == [1.0, 5.0, 9.0]
    assert steps[0].rescale == 0.0                      # exp(-inf - 1): nothing to rescale yet
    np.testing.assert_allclose(steps[1].rescale, np.exp(1.0 - 5.0))
    np.testing.assert_allclose(steps[2].rescale, np.exp(5.0 - 9.0))
    np.testing.assert_allclose(steps[-1].l, np.exp(x - 9.0).sum(), rtol=1e-14)


def test_break_it_without_rescale_is_wrong_and_sums_off():
    x = np.arange(10.0)  # max grows every block
    p = fv.online_softmax(x, block=3, rescale=False)
    assert abs(p.sum() - 1) > 0.05
    assert np.abs(p - softmax64(x)).max() > 0.01
    # but a row whose max sits in the first block is unaffected
    y = np.array([9.0, 0, 1, 2, 3])
    np.testing.assert_allclose(fv.online_softmax(y, block=2, rescale=False), softmax64(y), rtol=1e-13)


def test_masked_entries_and_all_masked_row():
    x = np.array([-np.inf, 1.0, -np.inf, 2.0])
    p = fv.online_softmax(x, block=1)
    assert p[0] == 0 and p[2] == 0
    np.testing.assert_allclose(p[[1, 3]], softmax64([1.0, 2.0]))
    assert np.array_equal(fv.online_softmax(np.full(5, -np.inf), block=2), np.zeros(5))


def test_huge_scores_no_overflow():
    x = np.linspace(300, 800, 50)
    with np.errstate(over="raise"):
        p = fv.online_softmax(x, block=8)
    np.testing.assert_allclose(p, softmax64(x), rtol=1e-12)


@pytest.mark.parametrize("bad,exc", [([1.0, np.nan], ValueError), (np.ones((2, 2)), ValueError), ([], ValueError),
                                     ("abc", TypeError), ([1.0, np.inf], ValueError)])
def test_bad_rows(bad, exc):
    with pytest.raises(exc):
        fv.online_softmax(bad, block=2)


@pytest.mark.parametrize("block,exc", [(0, ValueError), (2.5, TypeError), (True, TypeError), ("4", TypeError)])
def test_bad_block(block, exc):
    with pytest.raises(exc):
        fv.online_softmax(np.ones(4), block=block)
