"""Chapter 1's measured figures (roofline.measure_intensity, views.roofline_view, the MemoryWall
widget of the app): the counts against closed forms, the bytes split against Algorithm 0 by
hand, the widget's drawing and its one-line errors."""

from __future__ import annotations

import matplotlib
import matplotlib.pyplot as plt
import pytest

from flashviz import roofline
from flashviz.views.roofline_view import BYTES_N, draw_memory_wall
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
])
def test_widget_bad_arguments_one_line(kw, exc, words):
    with pytest.raises(exc) as info:
        MemoryWall(**kw)
    assert words in str(info.value) and "\n" not in str(info.value)
