"""Self-checking exercises for the lessons.

Every check takes the learner's answer (a number, an array or a function), compares it with
flashviz's own computation, and returns a CheckResult made by ``right()`` or ``wrong()``: one
line, "✓ Right: …" (which may show the computed value, as confirmation) or "✗ Not yet: …".
A wrong line never gives the expected value, nor anything it can be read off from (no
"2.00x the right value"): it says which way the answer is off and roughly how far
(``direction``), and names the idea to revisit. A check never raises: an exception in the
learner's code is reported in that one line too.
"""

from __future__ import annotations

import functools
import numbers
from dataclasses import dataclass

import numpy as np


@dataclass
class CheckResult:
    """ok: whether the answer is right; message: the one line shown to the learner."""

    ok: bool
    message: str

    def __bool__(self) -> bool:
        return self.ok

    def _repr_html_(self):
        colour = "#2ca02c" if self.ok else "#d62728"
        return f"<span style='color:{colour};font-weight:bold'>{self.message}</span>"

    def __repr__(self):
        return self.message


def right(message: str) -> CheckResult:
    return CheckResult(True, f"✓ Right: {message}")


def wrong(message: str) -> CheckResult:
    return CheckResult(False, f"✗ Not yet: {message}")


class Printed(CheckResult):
    """A CheckResult its check has already printed: as a notebook cell's value it shows nothing
    more (the line is not repeated); ``ok``, ``message``, ``bool()`` and ``repr()`` as usual."""

    def _ipython_display_(self):
        pass


def say(result: CheckResult) -> CheckResult:
    """Print a check's one line (for checks called as statements) and return it, marked as
    printed so that a cell ending in the call does not show it a second time."""
    print(result.message)
    return Printed(result.ok, result.message)


def direction(answer: float, expected: float) -> str:
    """Which way a wrong number is off and roughly how far — never by how much exactly:
    "too high, but within 2x", "too low by 2x or more", "close, but slightly too high"."""
    if expected == 0:
        return "it should be zero"
    if answer == 0 or (answer > 0) != (expected > 0):
        return "it has the wrong sign" if answer else "it should not be zero"
    r = answer / expected
    side = "too high" if r > 1 else "too low"
    r = max(r, 1 / r)
    if r < 1.1:
        return f"close, but slightly {side}"
    if r < 2:
        return f"{side}, but within 2x"
    return f"{side} by 2x or more"


def finite_number(x):
    """x as a float, or None when it is not a finite real number (bools are not numbers here)."""
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (numbers.Real, np.number)):
        return None
    x = float(x)
    return x if np.isfinite(x) else None


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message."""
    return (str(exc).strip().splitlines() or [""])[0]


def never_raises(say):
    """Decorator for a check: whatever goes wrong inside it (a bad question, an odd answer
    object) becomes its one ✗ line, shown through ``say`` — never a traceback."""
    def decorate(check):
        @functools.wraps(check)
        def wrapper(*args, **kwargs):
            try:
                return check(*args, **kwargs)
            except Exception as exc:
                return say(wrong(f"could not check {args[0] if args else 'the answer'!r}: "
                                 f"{type(exc).__name__}: {first_line(exc)}"))
        return wrapper
    return decorate


def guarded(fn, *args, what: str = "your code", **kwargs):
    """Call the learner's ``fn``; return (value, None) or (None, a one-line CheckResult)."""
    try:
        return fn(*args, **kwargs), None
    except Exception as exc:  # the learner's code failed: say how, in one line
        return None, wrong(f"{what} raised {type(exc).__name__}: {first_line(exc)}")


def _fmt(x: float) -> str:
    """Whole numbers with thousands separators (136,314,880); others to 6 significant digits."""
    return f"{x:,.0f}" if abs(x) >= 1e4 and float(x).is_integer() else f"{x:,.6g}"


def close_number(answer, expected: float, *, rel: float = 0.05, what: str = "your answer", unit: str = "",
                 hint: str = ""):
    """Compare a numeric prediction with the computed value (relative tolerance ``rel``). Right:
    both values are shown. Wrong: the learner's value, which way it is off and roughly how far,
    and ``hint`` (the idea to revisit) — never the expected value."""
    a = finite_number(answer)
    if a is None:
        return wrong(f"{what} should be a number (a finite one), got {answer!r:.60}")
    if abs(a - expected) <= rel * max(abs(expected), 1e-300):
        return right(f"{what} = {_fmt(a)}{unit} (flashviz computes {_fmt(expected)}{unit})")
    return wrong(f"{what} = {_fmt(a)}{unit} is {direction(a, expected)}" + (f". hint: {hint}" if hint else ""))
