"""Chapter 1's measured figures (roofline.measure_intensity, views.roofline_view, the MemoryWall
widget of the app): the counts against closed forms, the bytes split against Algorithm 0 by
hand, the widget's drawing and its one-line errors, and its texts at the notebook's and the
presenter's text scale (no overlap, nothing off the figure, presenter texts large)."""

from __future__ import annotations

import functools

import matplotlib
import matplotlib.pyplot as plt
import pytest
from test_no_overlap import PRESENTER_MIN_PT, text_problems, visible_texts

from flashviz import roofline
from flashviz.views.roofline_view import BYTES_N, draw_memory_wall
from flashviz.views.style import scaled_text
from flashviz.widgets.app import APP_FIGURE, PRESENTER_FIGURE, _accepted
from flashviz.widgets.memory_wall import MemoryWall

matplotlib.use("Agg")


def test_measured_rows_count_what_the_paper_counts():
    rows = roofline.measure_intensity((16, 48), d=8, repeat=2)
    assert [r["N"] for r in rows] == [16, 48]
    for r in rows:
        N, d = r["N"], r["d"]
        assert r["mm_flops"] == 2 * N * N * d and r["mm_bytes"] == (2 * N * d + N * N) * 4
        assert r["ew_flops"] == N * N and r["ew_bytes"] == 2 * N * N * 4
        assert r["mm_s"] > 0 and r["ew_s"] > 0
    assert 1e8 < roofline.copy_bandwidth(256, repeat=2) < 1e13          # bytes/s: between 0.1 GB/s and 10 TB/s


@pytest.mark.parametrize("kw,exc,words", [
    (dict(Ns=(0,)), ValueError, "N must be an integer >= 1"), (dict(Ns=(True,)), TypeError, "N must be an integer"),
    (dict(Ns=(10_000,)), ValueError, "at most 8192"), (dict(Ns=(64,), d="8"), TypeError, "d must be an integer"),
    (dict(Ns=(64,), repeat=0), ValueError, "repeat"),
])
def test_measure_refuses_bad_sizes_in_one_line(kw, exc, words):
    with pytest.raises(exc) as info:
        roofline.measure_intensity(**kw)
    assert words in str(info.value) and "\n" not in str(info.value)


def test_the_bytes_panel_is_algorithm_0():
    """Algorithm 0 moves Q, K, V, O (4·N·d) and S, P four times (write S, read S, write P,
    read P: 4·N²) elements: the N² share is N / (N + d)."""
    fig = plt.figure(figsize=(11, 4.6))
    rows = [dict(N=64, d=64, mm_flops=1.0, mm_bytes=1.0, mm_s=1e-3, ew_flops=1.0, ew_bytes=8.0, ew_s=1e-3)]
    info = draw_memory_wall(fig, rows, 8e9, d=64)
    assert info["sp_share"] == pytest.approx([N / (N + 64) for N in BYTES_N])
    assert info["roof_GBps"] == pytest.approx(8.0)
    roof = info["axes"][0].lines[-1].get_ydata() / info["axes"][0].lines[-1].get_xdata()
    assert roof == pytest.approx(8.0)                                     # the dashed line is x · roof
    left, right = info["axes"]
    assert len(left.lines) == 3 and len(right.patches) == 2 * len(BYTES_N)
    plt.close(fig)


def test_widget_draws_the_measurement_and_measures_again():
    w = MemoryWall(repeat=1)
    try:
        assert len(w.rows) == len(roofline.ROOFLINE_N) and "GFLOP/s" in w.status.value and "best of 1" in w.status.value
        first = w.rows
        assert w.measure() is not first and len(w.rows) == len(first)
        assert len(w.fig.axes) == 2
    finally:
        w.close()
    assert not plt.fignum_exists(w.fig.number)


@pytest.mark.parametrize("kw,exc,words", [
    (dict(figsize="big"), ValueError, "figsize must be (width, height)"), (dict(figsize=(0, 3)), ValueError, "figsize"),
    (dict(dpi=5000), ValueError, "dpi"), (dict(dpi="90"), ValueError, "dpi"), (dict(repeat=0), ValueError, "repeat"),
    (dict(repeat=2.0), TypeError, "repeat"), (dict(figsize=(40, 40), dpi=600), ValueError, "million pixels"),
    (dict(text_scale=0.1), ValueError, "text_scale"), (dict(text_scale="big"), TypeError, "text_scale"),
    (dict(text_scale=True), TypeError, "text_scale"),
])
def test_widget_bad_arguments_one_line(kw, exc, words):
    with pytest.raises(exc) as info:
        MemoryWall(**kw)
    assert words in str(info.value) and "\n" not in str(info.value)


def _sizes(fig) -> dict:
    """{text: font size in points} of every visible text of ``fig`` (laid out by text_problems)."""
    return {t.get_text(): t.get_fontsize() for t, _ in visible_texts(fig, fig.canvas.get_renderer())}


@functools.cache
def _texts_at(mode: str):
    """(overlap problems, {text: points}) of MemoryWall as the app makes it (``mode`` "default":
    APP_FIGURE, "presenter": PRESENTER_FIGURE with its text scale), and of the same measurement
    drawn at the widget's own default figure (11 × 4.6 in) at that text scale. One measurement each."""
    fig_kw = PRESENTER_FIGURE if mode == "presenter" else APP_FIGURE
    kw = _accepted(MemoryWall, fig_kw)
    assert kw.get("text_scale", 1.0) == fig_kw.get("text_scale", 1.0)       # the app's text scale reaches it
    w = MemoryWall(repeat=1, **kw)
    try:
        problems = [f"app figure {fig_kw}: {p}" for p in text_problems(w.fig)]
        sizes = _sizes(w.fig)
        small = plt.figure(figsize=(11, 4.6), dpi=90)
        try:
            with scaled_text(w.text_scale):
                draw_memory_wall(small, w.rows, w.roof_Bps)
            problems += [f"11 × 4.6 in: {p}" for p in text_problems(small)]
            sizes.update(_sizes(small))
        finally:
            plt.close(small)
        return problems, sizes
    finally:
        w.close()


@pytest.mark.parametrize("mode", ["default", "presenter"])
def test_no_text_overlaps_or_leaves_the_figure(mode):
    problems, sizes = _texts_at(mode)
    assert len(sizes) >= 10, sizes
    assert not problems, "\n".join(problems)


def test_presenter_texts_are_large_and_scaled():
    """Presenter mode: every text at least PRESENTER_MIN_PT, and each text drawn in both modes at
    the presenter's text scale times its notebook size."""
    scale = PRESENTER_FIGURE["text_scale"]
    default, presenter = _texts_at("default")[1], _texts_at("presenter")[1]
    small = {t: s for t, s in presenter.items() if s < PRESENTER_MIN_PT - 1e-6}
    assert not small, f"texts under {PRESENTER_MIN_PT} pt in presenter mode: {small}"
    both = default.keys() & presenter.keys()
    assert len(both) >= 8, sorted(both)
    unscaled = {t: (default[t], presenter[t]) for t in both if abs(presenter[t] - scale * default[t]) > 0.05}
    assert not unscaled, f"(notebook pt, presenter pt) not scaled by {scale}: {unscaled}"


@pytest.mark.parametrize("scale", [1.0, 1.4])
def test_point_labels_keep_apart_wherever_the_measurements_land(scale):
    """The QKᵀ points are measured on this machine, so two can land next to each other (a busy CI
    box put N=512 onto N=2048): the labels are moved apart, whatever the numbers."""
    rows = [dict(N=N, mm_flops=1e9 * (1 + 0.05 * k), mm_bytes=1e8, mm_s=0.01, ew_flops=1e6, ew_bytes=8e6, ew_s=1e-3)
            for k, N in enumerate((256, 512, 1024, 2048))]          # four points almost on top of each other
    fig = plt.figure(figsize=(11, 4.6), dpi=90)
    try:
        with scaled_text(scale):
            draw_memory_wall(fig, rows, 4e12)
        labels = [p for p in text_problems(fig) if "N=" in p]
        assert not labels, labels
    finally:
        plt.close(fig)
