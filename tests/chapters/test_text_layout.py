"""views/text.py: the measured-text helpers the views lay themselves out with."""

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from flashviz.views import text  # noqa: E402
from flashviz.views.style import scaled_text  # noqa: E402


def test_presenter_follows_the_text_scale():
    assert not text.presenter()
    with scaled_text(1.4):
        assert text.presenter()
        assert text.presenter(1.15) and not text.presenter(1.5)
    with scaled_text(0.8):
        assert not text.presenter()


def test_line_heights():
    assert text.line_height(10) == pytest.approx(12)             # 1.2 em
    assert text.line_height(10, 3) == pytest.approx(36)          # + 2 × 1.2 em
    assert text.line_height(10, 2, spacing=1.5) == pytest.approx(27)
    assert text.line_height(10, 0) == 0
    assert text.font_height(10) == pytest.approx(10.2)           # 1.02 em
    assert text.font_height(10, 2, 1.35) == pytest.approx(10.2 + 1.35 * 10.2)
    assert text.tick_row(7) == pytest.approx(7 + 8.4)
    with scaled_text(2.0):
        assert text.tick_row(7) == pytest.approx(7 + 16.8)


def test_widths_grow_with_text_and_size():
    a, b = text.text_width("flash", 10), text.text_width("flashattention", 10)
    assert 0 < a < b
    assert text.text_width("flash", 20) == pytest.approx(2 * a, rel=0.05)
    assert text.text_width("short\nflashattention", 10) == pytest.approx(b)       # the widest line
    fig = Figure(figsize=(4, 2), dpi=100)
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    px = text.drawn_width(fig, "flash", fontsize=10)
    assert px == pytest.approx(a / 72 * 100, rel=0.15)          # points → pixels at 100 dpi
    assert not fig.texts                                         # the measuring text is removed


def test_wrap_text_breaks_at_separators_and_balances():
    line = "one · two · three · four · five · six"
    w = text.text_width(line, 10)
    out = text.wrap_text(line, 10, 0.6 * w)
    parts = out.split("\n")
    assert len(parts) == 2 and all(text.text_width(p, 10) <= 0.6 * w for p in parts)
    assert " · ".join(parts) == line
    assert text.wrap_text(line, 10, 2 * w) == line


def test_fit_lines_fits_the_width_on_a_figure():
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = Figure(figsize=(4, 2), dpi=100)
    FigureCanvasAgg(fig)
    line = "inputs: random, seed 0, N = 256, d = 64, Br = 32, Bc = 32, max error 3e-07"
    out = text.fit_lines(fig, line, 250, fontsize=9)
    assert "\n" in out and "10^{-7}" in out                      # broken, e-notation as mathtext
    assert all(text.drawn_width(fig, p, fontsize=9) <= 250 for p in out.split("\n"))


def test_number_paths_are_centred():
    (p,) = text.number_paths([42], 7.0)
    ext = p.get_extents()
    assert ext.x0 == pytest.approx(-ext.x1, abs=0.6)
