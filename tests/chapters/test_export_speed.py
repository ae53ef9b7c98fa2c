"""Exports that don't stall a class (issue 10, item 5): GIF frames are the widget's frames, the
run → GIF button leaves the widget responsive, and the N = 512 causal explorer exports fast."""

import os
import time

import numpy as np
import pytest
from PIL import Image

import flashviz as fv


@pytest.fixture
def small():
    w = fv.TileExplorer(N=96, Br=16, Bc=16, causal=True, canvas="png", key="test-export-speed")
    yield w
    w.close()


def _gif_frames(path):
    im = Image.open(path)
    out = []
    for i in range(im.n_frames):
        im.seek(i)
        out.append(np.asarray(im.convert("RGB")).astype(int))
    return out


def test_gif_frames_are_the_widgets_frames(tmp_path, small):
    w = small
    gif = w.save_gif(tmp_path / "all.gif")
    frames = _gif_frames(gif)
    assert len(frames) == w.n_frames                    # every step kept
    for k in (0, 1, w.n_frames // 2, w.n_frames - 1):
        png = np.asarray(Image.open(w.save_png(tmp_path / f"f{k}.png", k)).convert("RGB")).astype(int)
        diff = np.abs(frames[k] - png).max(axis=2)
        # palette quantisation: small colour error; blitting order may differ on a few edge pixels
        assert np.percentile(diff, 99) <= 32, k
        assert (diff > 64).mean() < 0.005, k      # save_png draws by zorder, the widget by layers


def test_parallel_and_inline_exports_agree(tmp_path, small):
    from flashviz.views.export import save_animation

    a = save_animation(small._view, tmp_path / "a.gif", frames=range(0, small.n_frames, 3), parallel=True)
    b = save_animation(small._view, tmp_path / "b.gif", frames=range(0, small.n_frames, 3), parallel=False)
    fa, fb = _gif_frames(a), _gif_frames(b)
    assert len(fa) == len(fb) == len(range(0, small.n_frames, 3))
    assert all(np.array_equal(x, y) for x, y in zip(fa, fb))


def test_gif_button_leaves_the_widget_responsive(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    w = fv.TileExplorer(N=256, causal=True, canvas="png", key="test-export-responsive")
    try:
        w.gif_button.click()
        assert w._export_job is not None and w.gif_button.description == "stop export"
        t = time.perf_counter()
        assert w.show_frame(40).k == 40            # the kernel answers while the export runs
        assert w._export_thread.is_alive(), f"export finished before show_frame returned ({time.perf_counter() - t:.1f} s)"
        assert w.show_frame(7).k == 7
        assert w.wait_export(300)
        assert "saved" in w.export_status.value and w.export_progress.layout.visibility == "hidden"
        assert Image.open(tmp_path / "flashviz-tiles.gif").n_frames == w.n_frames
    finally:
        w.close()


def test_gif_export_can_be_stopped(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    w = fv.TileExplorer(N=256, causal=True, canvas="png", key="test-export-stop")
    try:
        w.gif_button.click()
        w.gif_button.click()                       # "stop export"
        assert w.wait_export(60)
        assert "stopped" in w.export_status.value and not (tmp_path / "flashviz-tiles.gif").exists()
        assert w.gif_button.description == "run → GIF"
    finally:
        w.close()


def test_unwritable_path_is_one_line(tmp_path, small, monkeypatch):
    small.export_name.value = str(tmp_path / "no-such-dir" / "x")
    small.gif_button.click()
    small.wait_export(60)
    assert "export failed" in small.export_status.value and "\n" not in small.export_status.value


def _cpu_seconds() -> float:
    """User + system CPU seconds of this process and its finished (joined) child processes."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


@pytest.mark.slow
def test_n512_causal_export_speed(tmp_path):
    """All 576 steps of the N = 512 causal explorer to GIF, default (parallel) settings.

    Measured on the 2-core dev box (benchmarks/NOTES.md, "Export speed"): 11-13 s wall and
    ~20 s CPU with the box otherwise idle, 19-22 s wall with one other busy process. Bounds:
    30 s wall (the issue's target; 2.3x the idle figure) while the 1-minute load average before
    the test is at most 2, growing in proportion above that (our two workers then get about
    2/load of the box); and 45 s CPU (workers included: 2x the measured), whatever the load."""
    w = fv.TileExplorer(N=512, causal=True, canvas="png", key="test-export-512")
    try:
        load = os.getloadavg()[0]
        cpu, t = _cpu_seconds(), time.perf_counter()
        w.save_gif(tmp_path / "run.gif")
        dt, cpu = time.perf_counter() - t, _cpu_seconds() - cpu
        assert Image.open(tmp_path / "run.gif").n_frames == w.n_frames == 576
        seen = f"{dt:.1f} s wall, {cpu:.1f} s CPU, load average {load:.2f} before"
        assert cpu <= 45, seen
        assert dt <= 30 * max(1.0, load / 2), seen
    finally:
        w.close()
