"""Numbers as text: bytes, FLOPs, counts, figure numbers and powers of ten. The one home of
flashviz's number formatting.

The views use these through ``flashviz.views.style`` (which re-exports every name here); the
replay layer (step texts) and the widgets' status lines use the same functions, so a byte count
reads the same in a figure, a status line and a step text. Plain Python: no matplotlib, no NumPy,
importable from every layer.

Every formatter writes at most three significant digits in a unit that keeps the number below
1000 (1024 for binary units) and never an exponent: ``fmt_bytes(1_040_000)`` is ``'1020 KiB'``,
not ``'1.02e+03 KiB'``.
"""

from __future__ import annotations

import math
import re

__all__ = ["BYTE_UNITS", "byte_unit", "fmt_bytes", "fmt_count", "fmt_flops", "fmt_number", "exp_math",
           "sci_math", "sci_html"]

#: binary byte units, largest first: (name, bytes)
BYTE_UNITS = (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))
#: decimal prefixes of counts, largest first: (prefix, size)
_COUNT_PREFIXES = (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3))


def _sig3(x: float) -> str:
    """``x`` to three significant digits without an exponent: 1.234 → '1.23', 1013.4 → '1010'."""
    s = f"{x:.3g}"
    return f"{float(s):.0f}" if "e" in s else s


def byte_unit(n: float, min_count: float = 1) -> tuple[str, int]:
    """The binary unit (name, size in bytes) an axis of ``n`` bytes reads best in: the largest of
    TiB, GiB, MiB, KiB of which ``n`` holds at least ``min_count`` (else ("B", 1)).
    byte_unit(3 << 20) → ("MiB", 1048576); byte_unit(1.5 * 2**20, min_count=2) → ("KiB", 1024)."""
    for name, size in BYTE_UNITS:
        if n >= min_count * size:
            return name, size
    return "B", 1


def fmt_bytes(n: float, _pos=None) -> str:
    """``n`` bytes (int or float, may be negative) as text in B, KiB, MiB, GiB or TiB (powers of
    1024) with three significant digits: 0 → '0 B', 1000 → '1000 B', 1536 → '1.5 KiB',
    1_040_000 → '1020 KiB', -2048 → '-2 KiB'. Below 1 KiB: whole bytes, rounded. Also a matplotlib
    tick formatter (``FuncFormatter(fmt_bytes)``: the tick position ``_pos`` is ignored)."""
    for unit, size in BYTE_UNITS:
        if abs(n) >= size:
            return f"{_sig3(n / size)} {unit}"
    return f"{n:.0f} B"


def fmt_count(n: float, unit: str = "") -> str:
    """A count (of FLOPs, pairs, …) with a decimal prefix k, M, G, T (powers of 1000) and three
    significant digits, followed by ``unit``: 1234 → '1.23 k', 3.4e9 → '3.4 G',
    fmt_count(2.5e6, "FLOP") → '2.5 MFLOP'. Below 1000: the whole number (truncated), then
    ``unit`` after a space: 999 → '999', fmt_count(12, "FLOP") → '12 FLOP'; negative counts
    keep their sign."""
    for prefix, size in _COUNT_PREFIXES:
        if abs(n) >= size:
            return f"{_sig3(n / size)} {prefix}{unit}"
    return f"{int(n)} {unit}" if unit else f"{int(n)}"


def fmt_flops(n: float) -> str:
    """Floating-point operations (the matmul FLOPs of the IO model) as kFLOP, MFLOP, GFLOP or
    TFLOP (powers of 1000), three significant digits: 2.1e9 → '2.1 GFLOP', 512 → '512 FLOP'.
    Same as ``fmt_count(n, "FLOP")``."""
    return fmt_count(n, "FLOP")


def fmt_number(v: float, nd: int = 3) -> str:
    """A value shown in a figure (a running max, a sum, an error): ``nd`` significant digits
    (four from 10⁴ on), e-notation written as mathtext powers of ten (``sci_math``): 0.5 → '0.5',
    3e-08 → '$3{\\times}10^{-8}$'; NaN → 'NaN', −∞ → '−∞', +∞ → 'inf'."""
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "−∞" if v < 0 else "inf"
    return sci_math(f"{v:.{nd}g}" if abs(v) < 1e4 else f"{v:.4g}")


def exp_math(power: float, nd: int = 0) -> str:
    """e to a power as mathtext (without the $ signs), the power with ``nd`` decimals:
    exp_math(-46.2) → 'e^{-46}'."""
    return f"e^{{{power:.{nd}f}}}"


_SCI = re.compile(r"(?<![\w.$])(\d+(?:\.\d+)?)[eE]([-+]?)0*(\d+)(?![\w.])")


def sci_math(text: str) -> str:
    """Numbers in e-notation written as mathtext powers of ten: '3.1e-07' → '$3.1{\\times}10^{-7}$'
    (and '1e-07' → '$10^{-7}$'), so a figure never shows a raw exponent. Other text is unchanged."""

    def one(m):
        mant, sign, exp = m.group(1), "-" if m.group(2) == "-" else "", m.group(3)
        power = f"10^{{{sign}{exp}}}"
        return f"${power}$" if mant in ("1", "1.0") else f"${mant}{{\\times}}{power}$"

    return _SCI.sub(one, text)


def sci_html(text: str) -> str:
    """Numbers in e-notation written as HTML powers of ten, for status lines:
    '3.1e-07' → '3.1×10<sup>−7</sup>' ('1e-07' → '10<sup>−7</sup>'). Other text is unchanged."""

    def one(m):
        mant, sign, exp = m.group(1), "−" if m.group(2) == "-" else "", m.group(3)
        power = f"10<sup>{sign}{exp}</sup>"
        return power if mant in ("1", "1.0") else f"{mant}×{power}"

    return _SCI.sub(one, text)
