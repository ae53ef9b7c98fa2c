"""Chapter 6: the BackwardExplorer driven as a user would, its frames against independent float64
references (dense softmax gradients written out here, closed-form byte and FLOP counts), its
blitting against a full redraw, its exports, and the backward-pass exercises."""

import math
import statistics
import time

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pytest
from widget_contract import assert_recreating_leaks_no_figure

import flashviz as fv
from flashviz.exercises.backward import check_dS, check_extra_flops, check_recompute_P, check_stored_bytes
from flashviz.views.backward_view import BackwardFigure, BackwardReplay
from flashviz.widgets.backward import BackwardExplorer

matplotlib.use("Agg")


def grads64(Q, K, V, dO, causal=False):
    """Independent reference: softmax attention's gradients in float64, row by row
    (dS_r = P_r ∘ (dP_r − P_r·dP_r), the softmax Jacobian applied to dP_r)."""
    Q, K, V, dO = (np.asarray(x, np.float64) for x in (Q, K, V, dO))
    N, d = Q.shape
    scale = 1 / math.sqrt(d)
    dQ, dK, dV = np.zeros_like(Q), np.zeros_like(K), np.zeros_like(V)
    P_all = np.zeros((N, K.shape[0]))
    for r in range(N):
        cols = np.arange(K.shape[0]) if not causal else np.arange(r + 1)
        s = scale * K[cols] @ Q[r]
        p = np.exp(s - s.max())
        p /= p.sum()
        P_all[r, cols] = p
        dp = V[cols] @ dO[r]
        ds = p * (dp - p @ dp)
        dQ[r] = scale * ds @ K[cols]
        dK[cols] += scale * np.outer(ds, Q[r])
        dV[cols] += np.outer(p, dO[r])
    return dQ, dK, dV, P_all


def inputs_of(w):
    """The widget's Q, K, V, dO, recovered from the same public sources (float32)."""
    Q, K, V, _ = fv.data.get_qkv(w.source.value, w.N.value, w.d.value, seed=w.seed)
    return (*(x.astype(np.float32) for x in (Q, K, V)), w.dO)


def n_frames_expected(N, Br, Bc):
    Tr, Tc = -(-N // Br), -(-N // Bc)
    return Tr + 2 * Tc + 6 * Tr * Tc          # compute_D per i; load_KV, write_dKdV per j; 6 steps per tile


@pytest.fixture
def w():
    w = BackwardExplorer(N=96, d=32, Br=32, Bc=32, source="real", key="test-backward")
    yield w
    w.close()


def test_every_frame_counts_and_ends_at_the_closed_forms(w):
    assert w.n_frames == n_frames_expected(96, 32, 32) == 63
    b, f, r = [], [], []
    for k in range(w.n_frames):
        s = w.show_frame(k)
        assert s.k == k and w.frame.value == k
        b.append(s.hbm_bytes), f.append(s.flops), r.append(s.recompute_flops)
    assert all(np.diff(b) >= 0) and all(np.diff(f) >= 0) and all(np.diff(r) >= 0)
    N, d, B = 96, 32, 4
    Tc = 3
    # closed form of the tiled backward (written out, not taken from iomodel): see iomodel.flash_backward_io
    reads = (2 * N * d) + Tc * (N * d + N * d + N + N + N * d) + 2 * N * d   # O, dO; per j: Q, dO, lse, D, dQ; K, V
    writes = N + N * d + Tc * N * d + 2 * N * d                              # D, dQ = 0, dQ per j, dK, dV
    assert b[-1] == (reads + writes) * B == w.result.io.hbm_bytes
    assert f[-1] == 2 * N * N * (3 * d + 2 * d)
    assert r[-1] == 2 * N * N * d == fv.iomodel.recompute_extra_flops(N, N, d)
    assert w._view.replay.standard.flops == 2 * N * N * 4 * d               # the standard backward's 4 matmuls
    assert w._view.replay.stored == {"standard (P)": N * N * B, "flash (lse)": N * B}


def test_frames_show_the_true_P_and_gradients(w):
    Q, K, V, dO = inputs_of(w)
    dQ, dK, dV, P = grads64(Q, K, V, dO)
    kinds = [e.kind for e in w.result.trace.events]
    for k, kind in enumerate(kinds):
        if kind == "recompute_P":
            s = w.show_frame(k)
            e = s.event
            np.testing.assert_allclose(s.P, P[e.r0:e.r1, e.c0:e.c1], atol=2e-6)
    s = w.show_frame(w.n_frames - 1)
    np.testing.assert_allclose(s.dQ, dQ, atol=2e-5)
    np.testing.assert_allclose(s.dKV, np.hstack([dK, dV]), atol=2e-5)
    assert "✓" in w.status.value and w.ok
    assert max(w.errors.values()) < 2e-5


def test_state_between_steps_is_what_the_loop_holds(w):
    rp = w._view.replay
    ev = w.result.trace.events
    k = [e.kind for e in ev].index("compute_D")
    s = w.show_frame(k)
    assert np.isnan(s.dQ[32:]).all() and (s.dQ[:32] == 0).all()     # only block 0 zeroed so far
    k = [e.kind for e in ev].index("load_KV")
    s = w.show_frame(k)
    assert (s.dK_j == 0).all() and (s.dV_j == 0).all() and s.P is None and np.isnan(s.dKV).all()
    k = [e.kind for e in ev].index("write_dKdV")
    s = w.show_frame(k)
    assert np.isfinite(s.dKV[:32]).all() and np.isnan(s.dKV[32:]).all() and s.blocks_written == 32
    # the dQ rows of a tile's update hold the sum over the key blocks seen so far
    Q, K, V, dO = inputs_of(w)
    dQ_ref = grads64(Q, K, V, dO)[0]
    last = max(i for i, e in enumerate(ev) if e.kind == "update_dQ")
    np.testing.assert_allclose(w.show_frame(last).dQ, dQ_ref, atol=2e-5)
    assert rp.n_tiles == 9 and np.array_equal(rp.order[:, 0], [0, 1, 2])  # column by column: j outer


def test_recompute_step_flashes_and_says_so(w):
    kinds = [e.kind for e in w.result.trace.events]
    k = kinds.index("recompute_P")
    s = w.show_frame(k)
    v = w._view
    assert v.grid.flash.get_visible() and "never stored" in v.grid.title.get_text()
    assert "P was never stored" in s.text and v.step.get_color() != "k"
    w.show_frame(k + 1)
    assert not v.grid.flash.get_visible() and "never stored" not in v.grid.title.get_text()
    k = kinds.index("update_dQ")
    w.show_frame(k)
    assert v.rmw.get_visible() and "read, add, write" in v.dQ.title.get_text()


def test_play_and_step_buttons_drive_frames(w):
    w.show_frame(2)
    before = np.asarray(w.fig.canvas.buffer_rgba()).copy()
    w.play.value = 5                        # what a Play tick does
    assert w.state.k == 5
    assert (np.asarray(w.fig.canvas.buffer_rgba()) != before).any()
    w.next_button.click()
    assert w.state.k == 6 and w.play.value == 6
    w.prev_button.click()
    w.prev_button.click()
    assert w.state.k == 4
    w.show_frame(0)
    w.prev_button.click()
    assert w.state.k == 0


def test_blitted_frames_equal_a_full_redraw(w, tmp_path):
    from PIL import Image

    for k in range(0, 40):                  # blit through a run of steps, then compare with savefig
        w.show_frame(k)
    blit = np.asarray(w.fig.canvas.buffer_rgba())[..., :3].astype(int).copy()
    path = w.save_png(tmp_path / "full.png")
    full = np.asarray(Image.open(path).convert("RGB")).astype(int)
    differ = (np.abs(blit - full).sum(axis=-1) > 60).mean()
    assert differ < 0.002, differ
    assert (full[:25, :400].sum(axis=-1) < 200).any()   # the step line is in the export


def test_controls_rebuild_the_run(w):
    w.Br.value = 16
    assert w.result.trace.Br == 16 and w.n_frames == n_frames_expected(96, 16, 32) == w.frame.max + 1
    w.causal.value = True
    tr = w.result.trace
    assert tr.causal and any(e.tile == "partial" for e in tr.events)
    skipped = sum(j * 32 > (i + 1) * 16 - 1 for i in range(6) for j in range(3))   # no visible key in the tile
    assert (w._view.replay.tile_kinds == "skipped").sum() == skipped == 6
    assert w.n_frames == 6 + 2 * 3 + 6 * (18 - skipped)
    Q, K, V, dO = inputs_of(w)
    dQ, dK, dV, _ = grads64(Q, K, V, dO, causal=True)
    np.testing.assert_allclose(w.result.dK, dK, atol=2e-5)
    w.dtype.value = "float64 (8 B)"
    assert w.result.trace.itemsize == 8 and max(w.errors.values()) < 1e-12 and "float64 rounding" in w.status.value
    w.N.value = 50
    assert w.result.dQ.shape == (50, 32) and w.result.trace.Nq == 50


def test_source_switch_locks_d_for_real_inputs(w):
    w.source.value = "random"
    assert not w.d.disabled
    w.d.value = 64
    assert w.result.dQ.shape == (96, 64) and "✓" in w.status.value
    w.source.value = "real"
    assert w.d.value == 32 and w.d.disabled and w.result.dQ.shape == (96, 32)


def test_adversarial_and_float16_still_check(w):
    w.source.value = "adversarial"
    assert w.ok and "✓" in w.status.value
    w.dtype.value = "float16 (2 B)"
    assert w.ok and w.result.trace.itemsize == 2 and "float16 rounding" in w.status.value


def test_too_many_tiles_is_refused_with_a_reason(w):
    before = w.result
    w.N.value = 512
    w.Br.value = 1
    assert "too many to animate" in w.status.value and "8,192 tiles" in w.status.value   # 512 · 512/32
    assert w.result is before or w.result.trace.Br != 1


def test_slider_extremes_never_raise():
    w = BackwardExplorer(N=1, d=8, Br=1, Bc=1, source="random", key="bw-extremes")
    try:
        assert w.n_frames == n_frames_expected(1, 1, 1) == 9
        for k in range(w.n_frames):
            w.show_frame(k)
        np.testing.assert_allclose(w.result.dK, 0, atol=1e-6)         # one key: dS = 0, so dK = 0
        w.Br.value, w.Bc.value = 256, 256
        w.N.value = 512
        w.causal.value = True
        w.dtype.value = "float16 (2 B)"
        for k in range(w.n_frames):
            w.show_frame(k)
        assert w.ok and np.isfinite(w.result.dQ.astype(np.float64)).all()
        w.d.value = 128
        w.Br.value, w.Bc.value = 8, 8                                   # 4096 tiles: the limit, allowed
        causal_tiles = 64 * 65 // 2                                     # causal: tiles on or below the diagonal
        assert w.result.trace.Br == 8 and w.n_frames == 64 + 2 * 64 + 6 * causal_tiles
        w.show_frame(w.n_frames - 1)
    finally:
        w.close()


def test_frames_are_fast_enough():
    w = BackwardExplorer(N=256, d=32, Br=32, Bc=32, source="real", key="bw-speed")
    try:
        w.show_frame(1)
        times = []
        for k in range(2, 120):
            t = time.perf_counter()
            w.show_frame(k)
            times.append(time.perf_counter() - t)
        # ~13 ms a frame on an idle 2-core box; generous here so a busy CI machine does not flake
        assert statistics.median(times) < 0.15, statistics.median(times)
    finally:
        w.close()


def test_two_instances_are_independent():
    a = BackwardExplorer(N=64, source="random", key="bw-a")
    b = BackwardExplorer(N=64, source="random", key="bw-b")
    try:
        a.Br.value = 16
        a.show_frame(3)
        assert b.result.trace.Br == 32 and b.state.k == 0 and a.fig is not b.fig
    finally:
        a.close()
        b.close()


def test_recreating_closes_the_old_figure_no_leak():
    w = assert_recreating_leaks_no_figure(lambda: BackwardExplorer(N=32, source="random"))
    w._render(0)                                        # drawing after close does nothing


def test_png_canvas_draws_frames():
    w = BackwardExplorer(N=64, source="random", canvas="png", key="bw-png")
    try:
        first = w._canvas_widget.value
        assert first[:8] == b"\x89PNG\r\n\x1a\n"
        w.show_frame(20)
        assert w._canvas_widget.value != first
        assert w._view.blitter is None
    finally:
        w.close()


def test_export_png_and_gif(tmp_path, w):
    from PIL import Image

    w.show_frame(20)
    png = w.save_png(tmp_path / "f.png")
    assert Image.open(png).size == (int(w.fig.bbox.width), int(w.fig.bbox.height))
    assert w.state.k == 20
    gif = w.save_gif(tmp_path / "run.gif", frames=range(0, w.n_frames, 9), fps=5)
    im = Image.open(gif)
    assert im.n_frames == len(range(0, w.n_frames, 9))
    im.seek(0)
    first = np.asarray(im.convert("RGB")).copy()
    im.seek(im.n_frames - 1)
    assert (np.asarray(im.convert("RGB")) != first).any()
    with pytest.raises(ValueError):
        w.save_png(tmp_path / "f.jpg")
    w.show_frame(21)                                          # the live canvas still blits after exports
    assert w.state.k == 21


def test_export_button_reports_in_the_panel(tmp_path, w, monkeypatch):
    monkeypatch.chdir(tmp_path)
    w.png_button.click()
    assert "saved" in w.export_status.value and list(tmp_path.glob("flashviz-backward-step*.png"))


def test_replay_refuses_a_forward_trace():
    Q, K, V = fv.data.random_qkv(8, 4)
    with pytest.raises(ValueError):
        BackwardReplay(fv.flash_forward(Q, K, V, Br=4, Bc=4, record=True).trace)
    f = fv.flash_forward(Q, K, V, Br=4, Bc=4)
    r = fv.flash_backward(Q, K, V, f.O, Q, f.lse, Br=4, Bc=4, record=True)
    fig = plt.figure()
    try:
        v = BackwardFigure(fig, r.trace)
        with pytest.raises(IndexError):
            v.replay.state(v.n_frames)
    finally:
        plt.close(fig)


@pytest.mark.parametrize("kw,exc", [
    (dict(N=0), ValueError), (dict(N=2.5), TypeError), (dict(N=513, source="random"), ValueError),
    (dict(Br=3), ValueError), (dict(Bc="8"), TypeError), (dict(source="imagenet"), ValueError),
    (dict(d=48, source="random"), ValueError), (dict(d=64), ValueError), (dict(causal="no"), TypeError),
    (dict(canvas="svg"), ValueError), (dict(N=512, Br=4, Bc=8, source="random"), ValueError),
    (dict(dtype="int8"), ValueError), (dict(seed=-1), ValueError), (dict(seed=1.5), ValueError),
])
def test_bad_arguments_one_line_errors(kw, exc):
    plt.close("all")
    with pytest.raises(exc) as info:
        BackwardExplorer(**kw)
    assert "\n" not in str(info.value)
    assert not plt.get_fignums()                              # a refused constructor leaves no figure


def test_show_frame_bad_index(w):
    with pytest.raises(IndexError):
        w.show_frame(w.n_frames)
    with pytest.raises(TypeError):
        w.show_frame(1.5)


# ------------------------------------------------------------------------------------ exercises


def one_line_wrong(result, capsys):
    out = capsys.readouterr().out
    assert not result and result.message.startswith("✗ Not yet") and "\n" not in result.message
    assert out.strip() == result.message
    return result.message


def test_stored_bytes_exercise(capsys):
    N, b = 4096, 2
    assert check_stored_bytes((N * N * b, N * 4), N=N, itemsize=b)     # closed form: N² elements, N float32 numbers
    assert check_stored_bytes((4096 * 4096 * 2, 16_384), N=4096, itemsize=2)    # the numbers the lesson asks for
    assert capsys.readouterr().out.startswith("✓ Right")
    assert check_stored_bytes((N * N * 4, N * 4), N=N, itemsize=4)
    assert check_stored_bytes((N * N * 8, N * 8), N=N, itemsize=8)               # float64 keeps a float64 lse
    capsys.readouterr()
    # lse in the 2-byte element type is wrong (FlashAttention-2 keeps it in fp32); the hint says why, and no
    # wrong answer's line shows an expected number the learner did not give
    msg = one_line_wrong(check_stored_bytes((N * N * b, N * b), N=N, itemsize=b), capsys)
    assert "float32" in msg and f"{N * 4:,}" not in msg
    msg = one_line_wrong(check_stored_bytes((N * b, N * 4), N=N, itemsize=b), capsys)
    assert "N×N" in msg and f"{N * N * b:,}" not in msg
    for bad in ((1, 2), (N * N, N), (N * b, N * N * b), (N * N * b, N * N * b)):
        msg = one_line_wrong(check_stored_bytes(bad, N=N, itemsize=b), capsys)
        assert all(f"{v:,}" not in msg for v in (N * N * b, N * 4) if v not in bad), msg
    assert "element counts" in one_line_wrong(check_stored_bytes((N * N, N), N=N, itemsize=b), capsys)
    assert "swapped" in one_line_wrong(check_stored_bytes((N * b, N * N * b), N=N, itemsize=b), capsys)
    for bad in (None, (None, None), "lots", (1,), (float("nan"), 1), (True, 1), object()):
        one_line_wrong(check_stored_bytes(bad, N=N, itemsize=b), capsys)
    one_line_wrong(check_stored_bytes((1, 1), N=-5, itemsize=b), capsys)           # a bad question: no raise


def test_extra_flops_exercise(capsys):
    N, d = 4096, 64
    assert check_extra_flops(2 * N * N * d, N=N, d=d)
    capsys.readouterr()
    assert "2 FLOPs" in one_line_wrong(check_extra_flops(N * N * d, N=N, d=d), capsys)
    assert "PV" in one_line_wrong(check_extra_flops(4 * N * N * d, N=N, d=d), capsys)
    for bad in (None, "2e9", [1, 2], float("inf")):
        one_line_wrong(check_extra_flops(bad, N=N, d=d), capsys)
    causal = sum(r + 1 for r in range(N)) * 2 * d                                 # visible pairs only
    assert check_extra_flops(causal, N=N, d=d, causal=True)


def test_recompute_P_exercise(capsys):
    assert check_recompute_P(lambda S, lse: np.exp(S - lse[:, None]))
    capsys.readouterr()

    def tile_softmax(S, lse):
        e = np.exp(S - S.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    assert "whole row's lse" in one_line_wrong(check_recompute_P(tile_softmax), capsys)
    assert "lse[:, None]" in one_line_wrong(check_recompute_P(lambda S, lse: np.exp(S - lse)), capsys)
    one_line_wrong(check_recompute_P(lambda S, lse: np.zeros_like(S)), capsys)

    def raises(S, lse):
        raise RuntimeError("boom\nsecond line")

    assert "RuntimeError: boom" in one_line_wrong(check_recompute_P(raises), capsys)
    assert "forget the return" in one_line_wrong(check_recompute_P(lambda S, lse: None), capsys)
    one_line_wrong(check_recompute_P("not a function"), capsys)


def test_dS_exercise(capsys):
    assert check_dS(lambda P, dP, D: P * (dP - D[:, None]))
    capsys.readouterr()
    assert "D[:, None]" in one_line_wrong(check_dS(lambda P, dP, D: P * (dP - D)), capsys)
    assert "whole bracket" in one_line_wrong(check_dS(lambda P, dP, D: P * dP - D[:, None]), capsys)
    assert "multiply by P" in one_line_wrong(check_dS(lambda P, dP, D: dP - D[:, None]), capsys)
    one_line_wrong(check_dS(lambda P, dP, D: np.zeros_like(P)), capsys)
    assert "ZeroDivisionError" in one_line_wrong(check_dS(lambda P, dP, D: 1 / 0), capsys)
    assert "shape" in one_line_wrong(check_dS(lambda P, dP, D: P[:1]), capsys)

    def mutates(P, dP, D):                  # the learner's code cannot corrupt the recorded tiles
        dP[:] = 0
        return P * (dP - D[:, None])

    one_line_wrong(check_dS(mutates), capsys)
    assert check_dS(lambda P, dP, D: P * (dP - D[:, None]))
