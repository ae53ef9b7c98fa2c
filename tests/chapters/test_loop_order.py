"""LoopOrderExplorer and its view: FA1 and FA2 side by side, driven as a user would."""

import time

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pytest
from widget_contract import assert_close_frees_every_comm, assert_recreating_leaks_no_figure

import flashviz as fv
from flashviz.exercises.tiling import check_fa1_extra_bytes, check_run_bytes
from flashviz.iomodel import flash_forward_io
from flashviz.views.loop_order_view import TENSORS, LoopOrderFigure, TileSteps
from flashviz.widgets.loop_order import LoopOrderExplorer

matplotlib.use("Agg")


@pytest.fixture
def explorer():
    w = LoopOrderExplorer(N=96, d=32, Br=32, Bc=32, source="real", key="test-loop-order")
    yield w
    w.close()


def by_tensor(io):
    return {t: io.reads.get(t, 0) + io.writes.get(t, 0) for t in TENSORS}


def test_every_frame_both_orders_in_lockstep(explorer):
    w = explorer
    assert w.n_frames == 9 and w.frame.max == 8
    tiles = {"fa1": [], "fa2": []}
    last = {"fa1": 0, "fa2": 0}
    for k in range(w.n_frames):
        s = w.show_frame(k)
        assert s.k == k and w.frame.value == k
        for o in ("fa1", "fa2"):
            run = getattr(s, o)
            tiles[o].append(run.tile)
            assert run.hbm_bytes == sum(run.bytes.values()) >= last[o]
            last[o] = run.hbm_bytes
    # FA2 sweeps rows (query blocks outer), FA1 sweeps columns (key blocks outer); the same tiles
    assert tiles["fa2"] == [(i, j) for i in range(3) for j in range(3)]
    assert tiles["fa1"] == [(i, j) for j in range(3) for i in range(3)]
    assert "tile step 9/9" in w._view.step.get_text()


def test_counts_shown_equal_the_io_model(explorer):
    w = explorer
    for N, Br, Bc, causal in [(96, 32, 32, False), (50, 16, 8, True), (77, 32, 16, False)]:
        w.N.value, w.Br.value, w.Bc.value, w.causal.value = N, Br, Bc, causal
        s = w.show_frame(w.n_frames - 1)
        for o in ("fa1", "fa2"):
            model = flash_forward_io(N, N, 32, Br=Br, Bc=Bc, order=o, causal=causal)
            assert getattr(s, o).bytes == by_tensor(model)
            assert getattr(s, o).hbm_bytes == model.hbm_bytes == w.results[o].io.hbm_bytes
            assert w.io_model[o] == model
            # the meter's bar ends where the bytes say
            seg = w._view.meters.segments[o][-1]
            assert seg.get_x() + seg.get_width() == pytest.approx(model.hbm_bytes / w._view.meters.u)
        assert "✓" in w.status.value and "= flash_forward_io" in w.status.value


def test_fa2_writes_O_once_fa1_every_tile(explorer):
    w = explorer
    s = w.show_frame(w.n_frames - 1)
    assert s.fa2.o_writes == 3                       # one write per query block
    assert s.fa1.o_writes == 1 + 9                   # O = 0 initialised, then every tile
    assert s.fa1.hbm_bytes > s.fa2.hbm_bytes


def test_tile_steps_split_every_event():
    Q, K, V = fv.data.random_qkv(70, 16, dtype=np.float32)
    for o in ("fa1", "fa2"):
        for causal in (False, True):
            tr = fv.flash_forward(Q[:50], K, V, Br=16, Bc=8, causal=causal, order=o, record=True).trace
            st = TileSteps(tr)
            io = tr.io()
            assert st.bytes_at(st.n_steps - 1) == by_tensor(io)
            assert (np.diff(st.cum, axis=0) >= 0).all()
            computed = st.visit >= 0
            kinds = np.array([[e for e in row] for row in fv.replay.Replay(tr).tile_kinds])
            assert (computed == (kinds != "skipped")).all()
            assert sorted(st.visit[computed]) == list(range(st.n_steps))


def test_figure_refuses_mismatched_traces():
    Q, K, V = fv.data.random_qkv(32, 8)
    a = fv.flash_forward(Q, K, V, Br=8, Bc=8, order="fa1", record=True).trace
    b = fv.flash_forward(Q, K, V, Br=16, Bc=8, order="fa2", record=True).trace
    fig = plt.figure()
    try:
        with pytest.raises(ValueError, match="differ in Br"):
            LoopOrderFigure(fig, a, b)
        with pytest.raises(ValueError, match="order='fa1'"):
            LoopOrderFigure(fig, b, a)
    finally:
        plt.close(fig)


def test_play_and_step_buttons(explorer):
    w = explorer
    w.play.value = 4
    assert w.state.k == 4 and w.state.fa2.tile == (1, 1)
    w.next_button.click()
    assert w.state.k == 5
    w.prev_button.click()
    w.prev_button.click()
    assert w.state.k == 3


def test_pixels_change_between_frames(explorer):
    w = explorer
    w.show_frame(1)
    a = np.asarray(w.fig.canvas.buffer_rgba()).copy()
    w.show_frame(7)
    assert (a != np.asarray(w.fig.canvas.buffer_rgba())).any(axis=-1).mean() > 0.005


def test_each_control_rebuilds(explorer):
    w = explorer
    w.source.value = "random"
    assert not w.d.disabled
    w.d.value = 64
    assert w.results["fa2"].O.shape == (96, 64)
    w.Br.value = 16
    assert w.results["fa1"].trace.Br == 16 and w.n_frames == 6 * 3
    w.Bc.value = 64
    assert w.results["fa1"].trace.Bc == 64 and w.n_frames == 6 * 2
    w.causal.value = True
    assert w.results["fa2"].trace.causal and w.n_frames < 12
    w.N.value = 200
    assert w.results["fa1"].O.shape == (200, 64)
    w.source.value = "adversarial"
    assert "✓" in w.status.value
    w.source.value = "real"
    assert w.d.value == 32 and w.d.disabled and w.results["fa2"].O.shape == (200, 32)


def test_extremes():
    w = LoopOrderExplorer(N=1, d=8, Br=1, Bc=1, source="random", key="lo-extremes")
    try:
        assert w.n_frames == 1
        s = w.show_frame(0)
        assert s.fa1.tile == s.fa2.tile == (0, 0)
        w.Br.value = w.Bc.value = 256
        w.N.value = 512
        w.causal.value = True
        assert w.n_frames == 3                                  # 2 × 2 tiles, one skipped
        w.show_frame(w.n_frames - 1)
        w.Br.value = w.Bc.value = 8                             # 64 × 64 = 4096 tiles: the limit
        assert w.n_frames == 64 * 65 // 2
        w.show_frame(w.n_frames - 1)
        before = w.results
        w.Br.value = 1                                          # 512 × 64 tiles: refused, with the reason
        assert "too many to animate" in w.status.value and w.results is before
        assert "✓" not in w.status.value
    finally:
        w.close()


def test_render_is_fast_enough():
    w = LoopOrderExplorer(N=256, Br=16, Bc=16, source="random", key="lo-speed")
    try:
        w.show_frame(1)
        times = []
        for k in range(2, 40):
            t = time.perf_counter()
            w.show_frame(k)
            times.append(time.perf_counter() - t)
        assert np.median(times) < 0.1          # ~20 ms on the 2-core CI box; generous for slower ones
    finally:
        w.close()


def test_no_figure_leak_and_close_is_idempotent():
    assert_recreating_leaks_no_figure(lambda: LoopOrderExplorer(N=32, source="random"))


def test_close_closes_every_comm():
    assert_close_frees_every_comm(lambda: LoopOrderExplorer(N=32, source="random", key="lo-comms"), at_least=15)


def test_export_png_and_gif(tmp_path, explorer):
    from PIL import Image

    w = explorer
    w.show_frame(4)
    png = w.save_png(tmp_path / "f.png")
    assert Image.open(png).size == (int(w.fig.bbox.width), int(w.fig.bbox.height))
    assert w.state.k == 4
    gif = w.save_gif(tmp_path / "run.gif", fps=5)
    im = Image.open(gif)
    assert im.n_frames == w.n_frames
    im.seek(0)
    first = np.asarray(im.convert("RGB")).copy()
    im.seek(im.n_frames - 1)
    assert (np.asarray(im.convert("RGB")) != first).any()


@pytest.mark.parametrize("kw,exc", [
    (dict(N=0), ValueError), (dict(N=513), ValueError), (dict(N=2.5), TypeError), (dict(Br=3), ValueError),
    (dict(Bc="8"), TypeError), (dict(source="imagenet"), ValueError), (dict(d=64), ValueError),
    (dict(d=48, source="random"), ValueError), (dict(causal="no"), TypeError), (dict(canvas="svg"), ValueError),
    (dict(N=512, Br=1, Bc=32, source="random"), ValueError), (dict(seed=-1), ValueError),
])
def test_bad_arguments_one_line_errors(kw, exc):
    plt.close("all")
    with pytest.raises(exc) as info:
        LoopOrderExplorer(**kw)
    assert "\n" not in str(info.value)
    assert plt.get_fignums() == []


def test_show_frame_bad_index(explorer):
    with pytest.raises(IndexError):
        explorer.show_frame(explorer.n_frames)
    with pytest.raises(TypeError):
        explorer.show_frame(1.5)


# --- exercises -----------------------------------------------------------------------------------

def test_check_run_bytes(capsys):
    for order in ("fa2", "fa1"):
        exact = flash_forward_io(256, 256, 32, Br=32, Bc=64, order=order).hbm_bytes
        assert check_run_bytes(exact, 256, 32, 32, 64, order=order).ok
    assert not check_run_bytes(exact // 2, 256, 32, 32, 64, order="fa1")
    assert "✓ Right" in capsys.readouterr().out.splitlines()[0]
    for bad in (None, "many", float("inf"), True, [1]):
        r = check_run_bytes(bad, 256, 32, 32, 64)
        assert not r.ok and r.message.startswith("✗ Not yet")
    assert "invalid" in check_run_bytes(1, 0, 32, 32, 64).message


def test_check_fa1_extra_bytes(capsys):
    fa1, fa2 = (flash_forward_io(512, 512, 64, Br=64, Bc=32, order=o).hbm_bytes for o in ("fa1", "fa2"))
    assert check_fa1_extra_bytes(fa1 - fa2, 512, 64, 64, 32).ok
    r = check_fa1_extra_bytes(fa1, 512, 64, 64, 32)
    assert not r.ok and "hint" in r.message
    assert not check_fa1_extra_bytes(None, 512, 64, 64, 32).ok
    assert "invalid" in check_fa1_extra_bytes(1, 512, 64, 0, 32).message

    class Strange(float):
        def __float__(self):
            raise RuntimeError("boom")

    r = check_fa1_extra_bytes(Strange(1.0), 512, 64, 64, 32)      # never raises
    assert not r.ok and "boom" in r.message
    out = capsys.readouterr().out
    assert out.count("✗ Not yet") == 4 and out.count("✓ Right") == 1
