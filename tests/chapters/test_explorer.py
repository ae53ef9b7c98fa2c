"""The TileExplorer driven as a user would: sliders, Play, step buttons, every frame."""


import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pytest
from widget_contract import assert_close_frees_every_comm, assert_recreating_leaks_no_figure

import flashviz as fv

matplotlib.use("Agg")


@pytest.fixture
def explorer():
    w = fv.TileExplorer(N=96, d=32, Br=32, Bc=32, source="real", key="test-fixture")
    yield w
    w.close()


def test_defaults_and_every_frame_changes_state(explorer):
    w = explorer
    # FA2 order: per query block 1 load_Q + Tc·4 tile steps + 1 write_O
    assert w.n_frames == 3 * (2 + 3 * 4)
    seen_bytes = []
    for k in range(w.n_frames):
        s = w.show_frame(k)
        assert s.k == k and w.frame.value == k
        seen_bytes.append(s.hbm_bytes)
    assert all(b2 >= b1 for b1, b2 in zip(seen_bytes, seen_bytes[1:]))
    assert seen_bytes[-1] == w.result.io.hbm_bytes == fv.iomodel.flash_forward_io(96, 96, 32, Br=32, Bc=32).hbm_bytes
    assert w._fig_view.step.get_text().startswith(f"step {w.n_frames}/{w.n_frames}")


def test_pixels_change_between_frames(explorer):
    w = explorer
    w.show_frame(2)
    a = np.asarray(w.fig.canvas.buffer_rgba()).copy()
    w.show_frame(30)
    b = np.asarray(w.fig.canvas.buffer_rgba())
    assert (a != b).any(axis=-1).mean() > 0.01


def test_play_and_step_buttons_drive_frames(explorer):
    w = explorer
    w.play.value = 5                      # what a Play tick does
    assert w.state.k == 5
    w.next_button.click()
    assert w.state.k == 6 and w.play.value == 6
    w.prev_button.click()
    w.prev_button.click()
    assert w.state.k == 4
    w.show_frame(0)
    w.prev_button.click()                 # clamps at 0
    assert w.state.k == 0


def test_slider_changes_rebuild_the_run(explorer):
    w = explorer
    w.Br.value = 16
    assert w.result.trace.Br == 16 and w.n_frames == 6 * (2 + 3 * 4) and w.frame.max == w.n_frames - 1
    w.causal.value = True
    assert w.result.trace.causal and any(e.tile == "partial" for e in w.result.trace.events)
    w.N.value = 50
    assert w.result.O.shape == (50, 32)
    np.testing.assert_allclose(w.result.O, fv.attention(*fv.data.load_real_qkv(N=50)[:3], causal=True), atol=1e-5)


def test_break_it_shows_a_wrong_result(explorer):
    w = explorer
    w.source.value = "adversarial"
    assert "✓" in w.status.value
    w.rescale.value = False
    assert "WRONG" in w.status.value
    ref = fv.attention(*(x.astype(np.float32) for x in fv.data.adversarial_qkv(96, 32)))
    assert np.abs(w.result.O - ref).max() > 0.1


def test_source_switch_locks_d_for_real_inputs(explorer):
    w = explorer
    w.source.value = "random"
    assert not w.d.disabled
    w.d.value = 64
    assert w.result.O.shape[1] == 64
    w.N.value = 700
    w.source.value = "real"
    assert w.d.value == 32 and w.d.disabled and w.N.value == 512 and w.result.O.shape == (512, 32)


def test_too_many_tiles_is_refused_with_a_reason(explorer):
    w = explorer
    w.source.value = "random"
    before = w.result
    w.N.value = 2048
    w.Br.value = 1
    assert "too many to animate" in w.status.value
    assert w.result is before or w.result.trace.Br != 1


def test_slider_extremes_never_raise():
    w = fv.TileExplorer(N=1, d=8, Br=1, Bc=1, source="random", key="extremes")
    try:
        for k in range(w.n_frames):
            w.show_frame(k)
        w.Br.value, w.Bc.value = 256, 256
        w.N.value = 300
        w.causal.value = True
        w.show_frame(w.n_frames - 1)
        w.dtype.value = "float16 (2 B)"
        w.budget.value = "toy: 16 KiB"
        w.show_frame(w.n_frames - 1)
        assert np.isfinite(w.result.O.astype(np.float64)).all()
    finally:
        w.close()


def test_two_instances_are_independent():
    a = fv.TileExplorer(N=64, source="random", key="a")
    b = fv.TileExplorer(N=64, source="random", key="b")
    try:
        a.Br.value = 16
        a.show_frame(3)
        assert b.result.trace.Br == 32 and b.state.k == 0 and a.fig is not b.fig
    finally:
        a.close()
        b.close()


def test_recreating_closes_the_old_figure_no_leak():
    assert_recreating_leaks_no_figure(lambda: fv.TileExplorer(N=32, source="random"))


def test_png_fallback_draws_frames():
    w = fv.TileExplorer(N=64, source="random", canvas="png", key="png")
    try:
        first = w._canvas_widget.value
        assert first[:8] == b"\x89PNG\r\n\x1a\n"
        w.show_frame(10)
        assert w._canvas_widget.value != first
    finally:
        w.close()


@pytest.mark.parametrize("kw,exc", [
    (dict(N=0), ValueError), (dict(N=2.5), TypeError), (dict(Br=3), ValueError), (dict(Bc="8"), TypeError),
    (dict(source="imagenet"), ValueError), (dict(d=48, source="random"), ValueError), (dict(d=64), ValueError),
    (dict(N=600), ValueError), (dict(causal="no"), TypeError), (dict(canvas="svg"), ValueError),
    (dict(N=2048, Br=8, Bc=8, source="random"), ValueError), (dict(dtype="int8"), ValueError),
    (dict(sram_budget="TPU"), ValueError),
])
def test_bad_arguments_one_line_errors(kw, exc):
    with pytest.raises(exc) as info:
        fv.TileExplorer(**kw)
    assert "\n" not in str(info.value)


def test_show_frame_bad_index(explorer):
    with pytest.raises(IndexError):
        explorer.show_frame(explorer.n_frames)
    with pytest.raises(TypeError):
        explorer.show_frame(1.5)


def test_export_png_and_gif(tmp_path, explorer):
    from PIL import Image

    w = explorer
    w.show_frame(20)
    png = w.save_png(tmp_path / "f.png")
    img = Image.open(png)
    assert img.size == (int(w.fig.bbox.width), int(w.fig.bbox.height))
    assert w.state.k == 20                       # the live view is back on its frame
    gif = w.save_gif(tmp_path / "run.gif", frames=range(0, w.n_frames, 7), fps=5)
    im = Image.open(gif)
    assert im.n_frames == len(range(0, w.n_frames, 7))
    im.seek(0)
    first = np.asarray(im.convert("RGB")).copy()
    im.seek(im.n_frames - 1)
    assert (np.asarray(im.convert("RGB")) != first).any()
    with pytest.raises(ValueError):
        w.save_png(tmp_path / "f.jpg")
    with pytest.raises(ValueError):
        w.save_gif(tmp_path / "x.gif", frames=[w.n_frames])


def test_export_buttons_report_in_the_panel(tmp_path, explorer, monkeypatch):
    monkeypatch.chdir(tmp_path)
    explorer.png_button.click()
    assert "saved" in explorer.export_status.value and list(tmp_path.glob("flashviz-tiles-step*.png"))


def test_short_option_names_are_accepted():
    w = fv.TileExplorer(N=32, source="random", dtype=np.float16, sram_budget="A100", key="short")
    try:
        assert w.dtype.value == "float16 (2 B)" and w.budget.value.startswith("A100")
        assert w.result.trace.itemsize == 2
    finally:
        w.close()


def test_bad_seed_is_refused_and_a_failed_constructor_leaks_no_figure():
    plt.close("all")
    for seed in ("abc", -1):
        with pytest.raises((TypeError, ValueError)) as info:
            fv.TileExplorer(source="random", seed=seed)
        assert "seed" in str(info.value)
    assert plt.get_fignums() == []


def test_switching_to_real_inputs_rebuilds_once(monkeypatch):
    w = fv.TileExplorer(N=600, d=64, source="random", key="switch")
    try:
        calls = []
        original = type(w)._make_view
        monkeypatch.setattr(type(w), "_make_view", lambda self: calls.append(1) or original(self))
        w.source.value = "real"
        assert len(calls) == 1 and w.result.O.shape == (512, 32)
    finally:
        w.close()


def test_close_closes_every_comm():
    assert_close_frees_every_comm(lambda: fv.TileExplorer(N=32, source="random", key="comms"), at_least=20)


def test_break_it_panel_says_not_applied(explorer):
    w = explorer
    w.source.value = "adversarial"
    w.rescale.value = False
    k = next(k for k, e in enumerate(w.result.trace.events) if e.kind == "update_ml" and e.j == 1)
    w.show_frame(k)
    assert "NOT applied" in w._view.rows.fired.get_text()
    assert "WITHOUT rescaling" in w._view.step.get_text()


def test_exported_png_equals_the_live_canvas(tmp_path, explorer):
    from PIL import Image

    w = explorer
    w.show_frame(5)
    live = np.asarray(w.fig.canvas.buffer_rgba())[..., :3].copy()
    png = np.asarray(Image.open(w.save_png(tmp_path / "f.png", 5)).convert("RGB"))
    assert png.shape == live.shape
    differ = (png != live).any(axis=-1)
    assert differ.mean() < 0.01            # the moving parts are drawn once (only stacking order may differ)
    assert differ[:40].mean() < 0.001      # the step title (a figure-level moving text) is in the file


def test_rapid_play_pause_and_displaying_twice(explorer):
    w = explorer
    for k in range(0, w.n_frames, 3):        # what fast Play ticks and pauses send
        w.play.playing = not w.play.playing
        w.play.value = k
    assert w.state.k == range(0, w.n_frames, 3)[-1]
    a, b = w._repr_mimebundle_(), w._repr_mimebundle_()
    assert a == b and "application/vnd.jupyter.widget-view+json" in a


def test_gif_button_shows_progress_and_writes_the_file(tmp_path, explorer, monkeypatch):
    monkeypatch.chdir(tmp_path)
    seen = []
    explorer.export_progress.observe(lambda c: seen.append(c["new"]), names="value")
    explorer.gif_button.click()
    assert explorer.wait_export(120)             # the export runs in the background (issue 10, item 5)
    assert (tmp_path / "flashviz-tiles.gif").exists() and "saved" in explorer.export_status.value
    assert seen and seen[-1] == explorer.export_progress.max == explorer.n_frames
    assert explorer.export_progress.layout.visibility == "hidden"
