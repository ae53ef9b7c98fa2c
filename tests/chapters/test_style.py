"""The number formatters (flashviz.formatting, re-exported by flashviz.views.style) against
values computed by hand."""

import math

import pytest

from flashviz import formatting
from flashviz.views import style
from flashviz.views.style import byte_unit, exp_math, fmt_bytes, fmt_count, fmt_flops, fmt_number, sci_html, sci_math

KiB, MiB, GiB, TiB = 1 << 10, 1 << 20, 1 << 30, 1 << 40


def test_style_re_exports_the_one_home():
    for name in formatting.__all__:
        assert getattr(style, name) is getattr(formatting, name), name


@pytest.mark.parametrize("n, text", [
    (0, "0 B"),
    (1, "1 B"),
    (999, "999 B"),
    (1000, "1000 B"),           # below 1 KiB: whole bytes
    (1023, "1023 B"),
    (1024, "1 KiB"),
    (1536, "1.5 KiB"),          # 1536 / 1024 = 1.5
    (64 * KiB, "64 KiB"),
    (232_448, "227 KiB"),       # the H100/H200 budget: 232448 / 1024 = 227
    (1000 * KiB, "1000 KiB"),   # 1000 to 1023 of a unit: no raw exponent
    (1_040_000, "1020 KiB"),    # 1015.6 KiB → three significant digits
    (1023 * KiB, "1020 KiB"),
    (1023.6 * KiB, "1020 KiB"),
    (1024 * KiB, "1 MiB"),
    (int(1.25 * MiB), "1.25 MiB"),
    (3 * GiB, "3 GiB"),
    (1010 * GiB, "1010 GiB"),
    (int(2.5 * TiB), "2.5 TiB"),
    (-2048, "-2 KiB"),          # negative: the sign kept, the unit chosen by |n|
    (-1000 * MiB, "-1000 MiB"),
    (-5, "-5 B"),
    (12.6, "13 B"),             # a float below 1 KiB is rounded (a tick value)
])
def test_fmt_bytes(n, text):
    assert fmt_bytes(n) == text
    assert "e+" not in text and "e-" not in text


def test_fmt_bytes_is_a_tick_formatter():
    assert fmt_bytes(4 * MiB, 3) == "4 MiB"


@pytest.mark.parametrize("n, min_count, unit", [
    (0, 1, ("B", 1)),
    (1023, 1, ("B", 1)),
    (1024, 1, ("KiB", KiB)),
    (1024, 2, ("B", 1)),                    # fewer than 2 KiB: bytes
    (2 * KiB, 2, ("KiB", KiB)),
    (int(1.5 * MiB), 1, ("MiB", MiB)),
    (int(1.5 * MiB), 2, ("KiB", KiB)),
    (5 * GiB, 2, ("GiB", GiB)),
    (3 * TiB, 1, ("TiB", TiB)),
    (-5 * MiB, 1, ("B", 1)),                # a negative size has no unit above bytes
])
def test_byte_unit(n, min_count, unit):
    assert byte_unit(n, min_count=min_count) == unit


@pytest.mark.parametrize("n, text", [
    (0, "0"),
    (7, "7"),
    (999, "999"),
    (999.9, "999"),             # below 1000: whole number, truncated
    (1000, "1 k"),
    (1234, "1.23 k"),
    (999_600, "1000 k"),        # 999.6 k: three significant digits, no exponent
    (1_016_000, "1.02 M"),
    (3.4e9, "3.4 G"),
    (2.5e12, "2.5 T"),
    (1.5e15, "1500 T"),
    (-1234, "-1.23 k"),
    (-3, "-3"),
])
def test_fmt_count(n, text):
    assert fmt_count(n) == text


def test_fmt_count_with_a_unit():
    assert fmt_count(2.5e6, "FLOP") == "2.5 MFLOP"
    assert fmt_count(12, "FLOP") == "12 FLOP"
    assert fmt_count(0, "pairs") == "0 pairs"


@pytest.mark.parametrize("n, text", [
    (0, "0 FLOP"),
    (512, "512 FLOP"),
    (1000, "1 kFLOP"),
    (2 * 256 * 256 * 32, "4.19 MFLOP"),          # 4,194,304
    (4 * 1024 * 1024 * 64, "268 MFLOP"),         # 268,435,456
    (2.1e9, "2.1 GFLOP"),
    (1.0e12, "1 TFLOP"),
    (999.7e9, "1000 GFLOP"),                     # 999.7 G: no '1e+03 GFLOP'
    (1023e9, "1.02 TFLOP"),
    (-3e6, "-3 MFLOP"),
])
def test_fmt_flops(n, text):
    assert fmt_flops(n) == text


@pytest.mark.parametrize("v, nd, text", [
    (0.0, 3, "0"),
    (0.5, 3, "0.5"),
    (1 / 3, 3, "0.333"),
    (1 / 3, 5, "0.33333"),
    (-2.71828, 4, "-2.718"),
    (12345.678, 3, "$1.235{\\times}10^{4}$"),   # from 10⁴ on: four digits, a power of ten
    (3e-08, 3, "$3{\\times}10^{-8}$"),
    (1e-08, 3, "$10^{-8}$"),
    (math.nan, 3, "NaN"),
    (-math.inf, 3, "−∞"),
    (math.inf, 3, "inf"),
])
def test_fmt_number(v, nd, text):
    assert fmt_number(v, nd) == text


def test_fmt_number_takes_numpy_scalars():
    np = pytest.importorskip("numpy")
    assert fmt_number(np.float32(0.25)) == "0.25"
    assert fmt_number(np.float64("nan")) == "NaN"


def test_exp_math():
    assert exp_math(-46.2) == "e^{-46}"
    assert exp_math(-46.25, 1) == "e^{-46.2}"        # round half to even
    assert exp_math(0) == "e^{0}"
    assert exp_math(3.0) == "e^{3}"


def test_sci_math():
    assert sci_math("3.1e-07") == "$3.1{\\times}10^{-7}$"
    assert sci_math("1e-07") == "$10^{-7}$"
    assert sci_math("err 2.5e+12 and 7") == "err $2.5{\\times}10^{12}$ and 7"
    assert sci_math("Q_1e3 x1e5") == "Q_1e3 x1e5"       # inside a word: unchanged
    assert sci_math("0") == "0"
    assert sci_math("-4e-05") == "-$4{\\times}10^{-5}$"


def test_sci_html():
    assert sci_html("3.1e-07") == "3.1×10<sup>−7</sup>"
    assert sci_html("1e-07") == "10<sup>−7</sup>"
    assert sci_html("1.0e+03 B") == "10<sup>3</sup> B"
    assert sci_html("no numbers") == "no numbers"


def test_formatting_needs_no_matplotlib():
    import subprocess
    import sys

    code = ("import sys, flashviz.formatting, flashviz.replay.blocksize; "
            "print([m for m in ('matplotlib', 'ipywidgets') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
