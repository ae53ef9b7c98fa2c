"""Chapter 2: the OnlineSoftmaxExplorer driven as a user would, its view's numbers against an
independent float64 softmax, naive_softmax, and the online-softmax exercises."""

import math

import matplotlib
import numpy as np
import pytest
from widget_contract import assert_recreating_leaks_no_figure

from flashviz.exercises.online import PREDICT_BLOCK, PREDICT_X, check_alpha, check_l, check_rescale
from flashviz.online import naive_softmax, online_softmax_steps
from flashviz.widgets.online_softmax import OnlineSoftmaxExplorer

matplotlib.use("Agg")


def softmax64(x):
    """Independent reference: float64, max subtracted, two passes."""
    x = np.asarray(x, np.float64)
    e = np.exp(x - x.max())
    return e / e.sum()


def no_rescale64(x, block):
    """Independent broken variant: the running sum is never corrected."""
    m, l = -math.inf, 0.0
    for c0 in range(0, len(x), block):
        xb = np.asarray(x[c0:c0 + block], np.float64)
        m = max(m, float(xb.max()))
        l = l + float(np.exp(xb - m).sum())
    return np.exp(np.asarray(x, np.float64) - m) / l


@pytest.fixture
def w():
    w = OnlineSoftmaxExplorer(N=32, block=8, source="real", key="test-online")
    yield w
    w.close()


def test_every_frame_matches_float64(w):
    from flashviz.data import load_real_qkv

    Q, K, _, _ = load_real_qkv(N=32)
    row = w.row.value
    np.testing.assert_allclose(w.x, Q[row] @ K.T / math.sqrt(32), rtol=1e-6)   # a real row of S, float32
    assert w.n_frames == 32 // 8 + 1
    for k in range(w.n_frames):
        s = w.show_frame(k)
        assert s.k == k and w.frame.value == k and s.final == (k == 4)
        seen = w.x[:s.c1]
        assert s.c1 == min(8 * (k + 1), 32) and s.m == seen.max()
        np.testing.assert_allclose(s.l, np.exp(seen - seen.max()).sum(), rtol=1e-12)
        np.testing.assert_allclose(s.p_exact, softmax64(seen), atol=1e-6)
        assert s.err_exact < 1e-6 and abs(s.sum_exact - 1) < 1e-6
    assert w._view.step.get_text().startswith("step 5/5: normalise")
    fired = [st.rescale < 1 for st in online_softmax_steps(w.x, block=8)[1:]]
    assert any(fired), "the default real row should make the rescale fire"


def test_pixels_change_between_frames(w):
    w.show_frame(0)
    a = np.asarray(w.fig.canvas.buffer_rgba()).copy()
    w.show_frame(3)
    assert (np.asarray(w.fig.canvas.buffer_rgba()) != a).any(axis=-1).mean() > 0.01


def test_play_and_step_buttons(w):
    w.play.value = 3
    assert w.state.k == 3
    w.next_button.click()
    assert w.state.k == 4 and w.state.final
    w.next_button.click()                      # clamps at the last frame
    assert w.state.k == 4
    w.prev_button.click()
    assert w.state.k == 3 and w.play.value == 3


def test_each_control_rebuilds(w):
    w.show_frame(2)
    w.block.value = 4
    assert w.n_frames == 9 and w.frame.value == 0 and w.state.k == 0 and w.frame.max == 8
    w.N.value = 20
    assert w.x.size == 20 and w.n_frames == 6 and w.row.max == 19
    w.row.value = 7
    from flashviz.data import load_real_qkv
    Q, K, _, _ = load_real_qkv(N=20)
    np.testing.assert_allclose(w.x, Q[7] @ K.T / math.sqrt(32), rtol=1e-6)
    for source in ("random", "rising", "scores near 800", "real"):
        w.source.value = source
        assert w.row.disabled == (source != "real")
        s = w.show_frame(w.n_frames - 1)
        np.testing.assert_allclose(s.p_exact, softmax64(w.x), atol=1e-6)
    w.dtype.value = "float64"
    s = w.show_frame(w.n_frames - 1)
    assert s.p_exact.dtype == np.float64 and s.err_exact < 1e-14
    w.break_it.value = "no rescale"
    assert w.run.broken == "no rescale" and w.state.p_broken is not None


def test_rising_grows_the_max_every_block():
    w = OnlineSoftmaxExplorer(N=40, block=6, source="rising", key="rising")
    try:
        ms = [st.m for st in w.run.steps]
        assert all(b > a for a, b in zip(ms, ms[1:]))
        assert all(np.isclose(st.rescale, math.exp(st.m_old - st.m)) and st.rescale < 1 for st in w.run.steps[1:])
    finally:
        w.close()


@pytest.mark.parametrize("N,block,frames", [(1, 1, 2), (1, 8, 2), (10, 64, 2), (7, 1, 8), (512, 512, 2)])
def test_extremes(N, block, frames):
    w = OnlineSoftmaxExplorer(N=N, block=block, source="random", break_it="no rescale", key="extremes")
    try:
        assert w.n_frames == frames
        for k in range(w.n_frames):
            s = w.show_frame(k)
        np.testing.assert_allclose(s.p_exact, softmax64(w.x), atol=1e-6)
        np.testing.assert_allclose(s.p_broken, no_rescale64(w.x, block), atol=1e-6)
    finally:
        w.close()


def test_break_no_rescale_shows_the_wrong_sum():
    w = OnlineSoftmaxExplorer(N=32, block=8, source="rising", break_it="no rescale", key="norescale")
    try:
        s = w.show_frame(w.n_frames - 1)
        ref = no_rescale64(w.x, 8)
        np.testing.assert_allclose(s.p_broken, ref, atol=1e-6)
        assert s.sum_broken < 0.9 and abs(s.sum_broken - ref.sum()) < 1e-5
        assert s.err_broken == pytest.approx(np.abs(ref - softmax64(w.x)).max(), abs=1e-5) and s.err_broken > 0.01
        assert "✗ no rescale" in w.status.value and "WRONG" in w.status.value
        assert "≠ 1" in w._view.cmp[1][4].get_text()          # the broken panel's title says so
        assert s.l_broken > s.l                                # the uncorrected sum is too large
        s = w.show_frame(1)
        assert not s.applied and "NOT applied" in w._view.step.get_text()
    finally:
        w.close()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_break_no_max_subtraction_gives_nan_near_800(dtype):
    w = OnlineSoftmaxExplorer(N=32, block=8, source="scores near 800", break_it="no max-subtraction",
                              dtype=dtype, key="nomax")
    try:
        assert 790 < w.x.min() and w.x.max() <= 800
        s = w.show_frame(w.n_frames - 1)
        assert np.isnan(s.p_broken).all() and math.isnan(s.sum_broken) and math.isnan(s.err_broken)
        assert math.isinf(s.l_broken)
        assert s.err_exact < 1e-6 and abs(s.sum_exact - 1) < 1e-6       # the exact one is fine
        assert "overflows" in w._view.cmp[1][5].get_text()
        assert "WRONG" in w.status.value
    finally:
        w.close()


def test_no_max_subtraction_is_fine_on_small_scores(w):
    w.break_it.value = "no max-subtraction"
    s = w.show_frame(w.n_frames - 1)
    np.testing.assert_allclose(s.p_broken, softmax64(w.x), atol=1e-6)
    assert "still right" in w.status.value


def test_naive_softmax_thresholds():
    x = np.array([100.0, 99.0, 0.0])
    assert np.isnan(naive_softmax(x)).any()                               # float32 overflows above ~88.7
    np.testing.assert_allclose(naive_softmax(x, dtype=np.float64), softmax64(x), rtol=1e-12)
    assert np.isnan(naive_softmax(np.array([800.0, 799.0]), dtype=np.float64)).all()
    y = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(naive_softmax(y), softmax64(y), rtol=1e-6)
    assert naive_softmax(y).dtype == np.float32
    with pytest.raises(TypeError):
        naive_softmax(y, dtype=np.int32)


def test_steps_record_whether_the_rescale_was_applied():
    x = np.array([0.0, 1.0, 5.0, 2.0])
    exact, broken = (online_softmax_steps(x, block=2, rescale=r) for r in (True, False))
    assert all(s.applied for s in exact) and not any(s.applied for s in broken)
    assert broken[1].rescale == exact[1].rescale == pytest.approx(math.exp(1.0 - 5.0))   # recorded, not applied
    assert broken[1].l == pytest.approx(np.exp(x[:2] - 1).sum() + np.exp(x[2:] - 5).sum())


def test_recreating_closes_the_old_figure_no_leak():
    assert_recreating_leaks_no_figure(lambda: OnlineSoftmaxExplorer(N=16, block=4, source="random"))


def test_export_png_and_gif(tmp_path, w):
    from PIL import Image

    w.show_frame(2)
    png = w.save_png(tmp_path / "f.png")
    assert Image.open(png).size == (int(w.fig.bbox.width), int(w.fig.bbox.height))
    assert w.state.k == 2
    gif = w.save_gif(tmp_path / "run.gif", fps=4)
    im = Image.open(gif)
    assert im.n_frames == w.n_frames
    im.seek(0)
    first = np.asarray(im.convert("RGB")).copy()
    im.seek(im.n_frames - 1)
    assert (np.asarray(im.convert("RGB")) != first).any()


def test_png_fallback_draws_frames():
    w = OnlineSoftmaxExplorer(N=16, block=4, source="random", canvas="png", key="png")
    try:
        first = w._canvas_widget.value
        assert first[:8] == b"\x89PNG\r\n\x1a\n"
        w.show_frame(3)
        assert w._canvas_widget.value != first
    finally:
        w.close()


def test_show_frame_bad_index(w):
    with pytest.raises(IndexError):
        w.show_frame(w.n_frames)
    with pytest.raises(TypeError):
        w.show_frame(1.0)


@pytest.mark.parametrize("kw,exc", [
    (dict(N=0), ValueError), (dict(N=513), ValueError), (dict(N=3.0), TypeError), (dict(block=0), ValueError),
    (dict(block="8"), TypeError), (dict(source="imagenet"), ValueError), (dict(row=32), ValueError),
    (dict(row=1.5), TypeError), (dict(break_it="yes"), ValueError), (dict(dtype="int8"), ValueError),
    (dict(dtype="float16"), ValueError), (dict(seed="a"), TypeError), (dict(seed=-1), ValueError),
    (dict(canvas="svg"), ValueError),
])
def test_bad_arguments_one_line_errors(kw, exc):
    with pytest.raises(exc) as info:
        OnlineSoftmaxExplorer(**{"N": 32, **kw})
    assert "\n" not in str(info.value)


# --- exercises -------------------------------------------------------------------------------

def good_update(m_old, l_old, x_block):
    m = max(m_old, float(np.max(x_block)))
    return m, math.exp(m_old - m) * l_old + float(np.exp(x_block - m).sum())


def no_rescale_update(m_old, l_old, x_block):
    m = max(m_old, float(np.max(x_block)))
    return m, l_old + float(np.exp(x_block - m).sum())


def no_max_update(m_old, l_old, x_block):
    return max(m_old, float(np.max(x_block))), l_old + float(np.exp(x_block).sum())


def raising_update(m_old, l_old, x_block):
    raise NotImplementedError("write me\nsecond line")


@pytest.mark.parametrize("fn,ok,words", [
    (good_update, True, "✓ Right"),
    (no_rescale_update, False, "exp(m_old − m_new)"),
    (no_max_update, False, "max subtracted"),
    (raising_update, False, "raised NotImplementedError: write me"),
    (lambda m, l, xb: None, False, "two numbers"),
    (lambda m, l, xb: (m, l), False, "m_new"),
    ("update", False, "pass your function"),
])
def test_check_rescale(fn, ok, words):
    r = check_rescale(fn)
    assert r.ok is ok and words in r.message and "\n" not in r.message
    assert r.message.startswith("✓ Right" if ok else "✗ Not yet") and repr(r) == r.message
    assert r._repr_html_().count("<span") == 1                   # one coloured line in a notebook


def test_check_rescale_names_the_first_wrong_block():
    r = check_rescale(no_rescale_update)
    # independent: the first block where the max grows (and l_old > 0) on the first row
    assert "block j = 1" in r.message


def test_predictions_against_float64():
    x, b = PREDICT_X, PREDICT_BLOCK
    m0, m1 = x[:b].max(), max(x[:b].max(), x[b:2 * b].max())
    alpha = math.exp(m0 - m1)
    l1 = alpha * np.exp(x[:b] - m0).sum() + np.exp(x[b:2 * b] - m1).sum()
    assert check_alpha(alpha).ok and check_l(l1).ok
    assert not check_alpha(1.0).ok and not check_l(np.exp(x[:2 * b] - m0).sum()).ok
    for bad in (None, "x", [1, 2]):
        r = check_l(bad)
        assert not r.ok and "number" in r.message and "\n" not in r.message
