"""Self-checking exercises for the lessons.

Every check takes the learner's answer (a number, an array or a function), compares it with
flashviz's own computation, and returns a CheckResult that shows as one line: ✓ right, or
✗ wrong with what was expected and what was given. A check never raises: an exception in
the learner's code is reported in that one line too.
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


def say(result: CheckResult) -> CheckResult:
    """Print a check's one line (for checks called as statements) and return it."""
    print(result.message)
    return result


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


def close_number(answer, expected: float, *, rel: float = 0.05, what: str = "your answer", unit: str = ""):
    """Compare a numeric prediction with the computed value (relative tolerance ``rel``)."""
    try:
        a = float(answer)
    except (TypeError, ValueError):
        return wrong(f"{what} should be a number, got {answer!r}")
    if abs(a - expected) <= rel * max(abs(expected), 1e-300):
        return right(f"{what} = {_fmt(a)}{unit} (flashviz computes {_fmt(expected)}{unit})")
    return wrong(f"{what} = {_fmt(a)}{unit}, but flashviz computes {_fmt(expected)}{unit}")
