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


# -------------------------- the shared validators (flashviz.checks; the widgets' own: flashviz.widgets.checks)

from flashviz import checks as C  # noqa: E402
from flashviz.views import export  # noqa: E402
from flashviz.widgets import checks as WC  # noqa: E402


@pytest.mark.parametrize("call,exc,words", [
    (lambda: C.check_int("3", "N", 1, 10), TypeError, "N must be an integer between 1 and 10, got '3'"),
    (lambda: C.check_int(True, "N", 1), TypeError, "N must be an integer >= 1, got True"),
    (lambda: C.check_int(10**400, "N", 1, 10), ValueError, "got an integer with 401 digits"),
    (lambda: C.check_choice(3, "d", (8, 16)), ValueError, "d must be one of 8, 16, got 3"),
    (lambda: C.check_choice(8.0, "d", (8, 16)), TypeError, "d must be one of 8, 16 (an integer)"),
    (lambda: C.check_choice(None, "source", ("a", "b")), TypeError, "source must be one of a, b (a string)"),
    (lambda: C.check_real(float("nan"), "fps", 0, 100), ValueError, "fps must be a number above 0 and at most 100"),
    (lambda: C.check_real(10**400, "x", 1, 2), ValueError, "x must be a number from 1 to 2"),
    (lambda: WC.check_figsize(np.array([1.0, np.inf])), ValueError, "figsize must be (width, height) in inches"),
    (lambda: WC.check_figure((50, 50), 90), ValueError, "4,500 × 4,500 pixels (20.2 million)"),
    (lambda: WC.check_dpi("high"), ValueError, "dpi must be a number from 20 to 600"),
    (lambda: WC.check_key({"a": 1}), TypeError, "key must be hashable"),
    (lambda: export.check_export_frames(range(2000), 2000), ValueError, "keep one frame in 2, e.g. frames=range(0, 2000, 2)"),
    (lambda: C.check_output_path(object(), (".png",)), TypeError, "path must be a file name (str or pathlib.Path)"),
    (lambda: C.check_output_path("a.PNG.txt", (".png",)), ValueError, "path must end in .png"),
    (lambda: C.check_output_dir(None), TypeError, "out must be a folder name"),
])
def test_shared_validators_one_line(call, exc, words):
    with pytest.raises(exc) as info:
        call()
    assert words in one_line(info)


def test_shared_validators_accept_good_values(tmp_path):
    assert C.check_int(np.int64(5), "N", 1, 10) == 5 and type(C.check_int(np.int64(5), "N", 1)) is int
    assert C.check_choice(np.int32(16), "d", (8, 16)) == 16
    assert WC.check_figure((np.float32(11), 6.8), np.int64(90)) == ((11.0, pytest.approx(6.8)), 90.0)
    assert C.check_output_path(tmp_path / "x.PNG", (".png",)) == tmp_path / "x.PNG"
    assert C.check_output_path("~/x.gif", (".gif",)).parent == __import__("pathlib").Path.home()
    assert C.check_output_dir(tmp_path / "new" / "deeper") == tmp_path / "new" / "deeper"
    assert export.check_export_frames(None, 3) == [0, 1, 2] and export.check_export_frames((np.int64(2),), 3) == [2]
    assert C.sweep_problem(65536, fv.iomodel.SWEEP_BLOCKS) is None


def test_sweep_cap_names_the_largest_n_that_fits():
    msg = C.sweep_problem(10**9, (16, 32, 64, 128, 256), what="--N", blocks_given=False)
    assert "\n" not in msg and "pick --N <= 825,792" in msg and "drop" not in msg
    n = int(msg.split("<= ")[1].replace(",", ""))
    assert C.sweep_steps(n, (16, 32, 64, 128, 256)) <= C.MAX_SWEEP_STEPS < C.sweep_steps(n + 1, (16, 32, 64, 128, 256))


# -------------------------- values and gradients that would overflow the accumulators (checks.check_value_range,
# checks.check_grad_range); finite inputs never give NaN/inf

_Q1, _K3, _V3 = np.array([[1.0]]), np.array([[0.0], [0.0], [1000.0]]), np.array([[1e308], [1e308], [1.0]])
_Z = np.zeros((1, 1))
_Vb = np.array([[1e200], [0.0]])


@pytest.mark.parametrize("call,words", [
    (lambda: fv.flash_forward(_Q1, _K3, _V3, Bc=2, scale=1.0), "Nk·max|V| = inf (Nk = 3 keys)"),
    (lambda: fv.decode_attention(_Q1[None], _K3[None], _V3[None], Bc=2, scale=1.0), "Nk·max|V| = inf (Nk = 3 keys)"),
    (lambda: fv.decode_attention(_Q1[None], _K3[None], _V3[None], Bc=1, scale=1.0, page_size=2),
     "Nk·max|V| = inf (Nk = 3 keys)"),
    (lambda: fv.decode_attention(_Q1[None], np.zeros((2, 2, 1, 1)), np.full((2, 2, 1, 1), 1e308),
                                 block_table=np.array([0, 1])), "Nk·max|V| = inf (Nk = 4 keys)"),
    (lambda: fv.flash_forward(np.zeros((1, 2), np.float32), np.zeros((8, 2), np.float32),
                              np.full((8, 1), 3e38, np.float32)), "Nk·max|V| = 2.4e+39 (Nk = 8 keys), beyond what float32"),
    (lambda: fv.attention_backward(np.array([[1e160]]), np.array([[1e160], [0.0]]), np.array([[1.0], [2.0]]),
                                   np.ones((1, 1))), "scores scale·QKᵀ can reach about inf"),
    (lambda: fv.attention_backward(_Z, np.zeros((2, 1)), _Vb, np.array([[1e200]])), "dv·max|dO|·max|V| = inf"),
    (lambda: fv.flash_backward(_Z, np.zeros((2, 1)), _Vb, np.array([[5e199]]), np.array([[1e200]]),
                               np.array([np.log(2.0)])), "dv·max|dO|·max|V| = inf"),
    (lambda: fv.flash_backward(_Z, np.zeros((2, 1)), np.ones((2, 1)), np.array([[1e200]]), np.array([[1e200]]),
                               np.array([np.log(2.0)])), "dv·max|dO|·max|V| = inf"),
    (lambda: fv.attention_backward(_Z, np.array([[1e250], [-1e250]]), np.array([[1.0], [0.0]]), np.array([[1e100]])),
     "dQ = scale·dS·K can reach |scale|·2·dv·max|dO|·max|V|·max|K| = inf"),
    (lambda: fv.flash_backward(_Z, np.array([[1e250], [-1e250]]), np.array([[1.0], [0.0]]), np.array([[0.5]]),
                               np.array([[1e100]]), np.array([np.log(2.0)])), "dQ = scale·dS·K can reach"),
    (lambda: fv.attention_backward(np.full((2, 1), 1e250), np.zeros((2, 1)), np.array([[1.0], [0.0]]),
                                   np.full((2, 1), 1e100)), "dK = scale·dSᵀ·Q can reach"),
    (lambda: fv.attention_backward(np.zeros((10, 1)), np.zeros((2, 1)), np.zeros((2, 1)), np.full((10, 1), 1e308)),
     "dV = Pᵀ·dO can reach Nq·max|dO| = inf"),
], ids=["flash_forward", "decode", "decode_page_size", "decode_block_table", "flash_forward_f32",
        "attention_backward_scores", "attention_backward_dP", "flash_backward_dP", "flash_backward_D",
        "attention_backward_dQ", "flash_backward_dQ", "attention_backward_dK", "attention_backward_dV"])
def test_accumulators_that_would_overflow_are_refused_not_nan(call, words):
    with pytest.raises(ValueError) as info:
        call()
    assert words in one_line(info)


def test_large_but_safe_inputs_give_the_exact_answer():
    # scores are 1 and 2; squaring 1e160 overflowed the bound to inf before
    Qh, Kt, V = np.array([[1e160]]), np.array([[1e-160], [2e-160]]), np.array([[1.0], [3.0]])
    want = (np.e * 1 + np.e ** 2 * 3) / (np.e + np.e ** 2)
    assert fv.attention(Qh, Kt, V, scale=1.0)[0, 0] == pytest.approx(want)
    assert fv.flash_forward(Qh, Kt, V, scale=1.0).O[0, 0] == pytest.approx(want)
    assert C.max_row_norm(np.array([[3e200, 4e200]])) == pytest.approx(5e200)
    assert C.max_row_norm(np.array([[3e-200, 4e-200]])) == pytest.approx(5e-200)
    assert C.max_row_norm(np.zeros((2, 3))) == 0.0
    # V near the limit: Nk·max|V| = 3e307 <= 1.8e308 / 4, so the run goes ahead and is exact
    V = np.array([[1e307], [1e307], [1e307]])
    assert fv.flash_forward(_Q1, _K3, V, Bc=2, scale=1.0).O[0, 0] == pytest.approx(1e307)
    assert fv.decode_attention(_Q1[None], _K3[None], V[None], Bc=1, num_splits=3).O[0, 0, 0] == pytest.approx(1e307)
    dQ, dK, dV = fv.attention_backward(_Z, np.zeros((2, 1)), np.array([[1e100], [0.0]]), np.array([[1e100]]))
    np.testing.assert_allclose(dV, [[5e99], [5e99]])
    np.testing.assert_allclose(dK, 0.0)


_E = np.zeros((0, 2, 4))
_E3 = np.zeros((0, 3, 4))


@pytest.mark.parametrize("call,words", [
    (lambda: fv.flash_forward(_E, _E3, _E3), "Q must have N >= 1, d >= 1 and no empty axis, got shape (0, 2, 4) (axis 0"),
    (lambda: fv.attention(np.zeros((2, 0, 2, 4)), np.zeros((2, 0, 3, 4)), np.zeros((2, 0, 3, 4))),
     "got shape (2, 0, 2, 4) (axis 1 has length 0)"),
    (lambda: fv.attention_backward(_E, _E3, _E3, _E), "Q must have N >= 1, d >= 1 and no empty axis"),
    (lambda: fv.flash_backward(_E, _E3, _E3, _E, _E, np.zeros((0, 2))), "Q must have N >= 1, d >= 1 and no empty"),
    (lambda: fv.decode_attention(np.zeros((0, 1, 1, 4)), np.zeros((0, 1, 3, 4)), np.zeros((0, 1, 3, 4))),
     "Q must have N >= 1, d >= 1 and no empty axis, got shape (0, 1, 1, 4) (axis 0"),
    (lambda: fv.decode_attention(np.zeros((1, 1, 4)), _E3, _E3), "K must have N >= 1, d >= 1 and no empty axis"),
    (lambda: fv.decode_attention(np.zeros((1, 1, 4)), np.zeros((0, 2, 1, 4)), np.zeros((0, 2, 1, 4)),
                                 block_table=np.array([0])), "got shape (0, 2, 1, 4) (axis 0 has length 0)"),
], ids=["flash_forward_B0", "attention_H0", "attention_backward", "flash_backward", "decode_B0", "decode_Hkv0",
        "decode_empty_pool"])
def test_empty_axes_are_refused_in_one_line(call, words):
    with pytest.raises(ValueError) as info:
        call()
    assert words in one_line(info)


@pytest.mark.parametrize("fps", [1e-306, 0.0015, np.float32(1e-4)])
def test_fps_below_the_longest_gif_delay_is_refused_before_drawing(tmp_path, fps):
    # object() has no frames: the export must refuse fps before it touches the view
    with pytest.raises(ValueError) as info:
        export.AnimationExport(object(), tmp_path / "slow.gif", fps=fps)
    assert "fps must be at least 1/655.35 = 0.00153 frames per second" in one_line(info)
    assert not (tmp_path / "slow.gif").exists()


def test_fps_at_the_longest_gif_delay_is_fine():
    assert export.check_fps(export.MIN_FPS) == pytest.approx(1 / 655.35)
    assert export.check_fps(np.int64(100)) == 100.0
    with pytest.raises(ValueError, match="at least 1/655.35"):
        export.check_fps(np.nextafter(export.MIN_FPS, 0))


_Q4 = np.ones((4, 2))


@pytest.mark.parametrize("call,exc,words", [
    (lambda: fv.decode_attention(_Q4[None], _Q4[None], _Q4[None], num_splits=np.ones((2, 2))), TypeError,
     "num_splits must be an integer >= 1, got array([[1., 1.], [1., 1.]])"),
    (lambda: fv.flash_forward(_Q4, _Q4, _Q4, Bc=list(range(100000))), TypeError,
     "Bc must be an integer >= 1, got [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16..."),
    (lambda: fv.flash_forward(_Q4, _Q4, _Q4, scale=np.ones((2, 2))), TypeError,
     "scale must be a real number or None, got array([[1., 1.], [1., 1.]])"),
    (lambda: fv.flash_forward(_Q4, _Q4, _Q4, causal=np.ones((2, 2))), TypeError,
     "causal must be True or False, got array([[1., 1.], [1., 1.]])"),
    (lambda: fv.flash_forward(_Q4, _Q4, _Q4, order=np.array(["fa2", "fa1"])), TypeError,
     "order must be 'fa2' (query blocks outer) or 'fa1' (key blocks outer), a string, got array(['fa2', 'fa1'],"),
    (lambda: fv.iomodel.flash_forward_io(64, 64, 16, Br=16, Bc=16, itemsize=np.ones((3, 3))), ValueError,
     "itemsize must be 1, 2, 4 or 8 bytes, got array([[1., 1., 1.], [1., 1., 1.], [1., 1., 1.]])"),
    (lambda: C.check_output_path("/tmp/x\x00.png", (".png",)), ValueError,
     "path must be a file name without NUL characters ('\\x00'), got '/tmp/x\\x00.png'"),
], ids=["num_splits_array", "Bc_huge_list", "scale_array", "causal_array", "order_array", "itemsize_array",
        "path_nul"])
def test_messages_quote_values_on_one_short_line(call, exc, words):
    with pytest.raises(exc) as info:
        call()
    msg = one_line(info)
    assert words in msg and len(msg) < 200


def test_shown_is_one_line_and_cut():
    assert C.shown(np.ones((2, 2))) == "array([[1., 1.], [1., 1.]])"
    assert C.shown("a\nb") == "'a\\nb'" and C.shown(list(range(100))) == repr(list(range(100)))[:57] + "..."


def test_a_file_name_too_long_is_the_usual_one_line_oserror(tmp_path):
    p = tmp_path / ("a" * 300 + ".png")
    with pytest.raises(OSError) as info:
        C.check_output_path(p, (".png",))
    assert one_line(info) == f"path {str(p)!r} cannot be written: File name too long"
    q = tmp_path / ("b" * 300)
    with pytest.raises(OSError) as info:
        C.check_output_dir(q / "sub")
    assert one_line(info) == f"out {str(q / 'sub')!r} cannot be written: File name too long"
