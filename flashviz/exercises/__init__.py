"""Self-checking exercises for the lessons.

Every check takes the learner's answer (a number, an array or a function), compares it with
flashviz's own computation, and returns a CheckResult made by ``right()`` or ``wrong()``: one
line, "✓ Right: …" (which may show the computed value, as confirmation) or "✗ Not yet: …".
A wrong line never gives the expected value, nor anything it can be read off from (no
"2.00x the right value"): it says which way the answer is off and roughly how far
(``direction``), and names the idea to revisit. A check never raises: an exception in the
learner's code is reported in that one line too.

One way to show a line: every check ends in ``say(result)``, which shows it through ``show``
— in a notebook (any IPython) as the result's HTML, ``CheckResult._repr_html_``: ✓ in bold green,
✗ in bold red, the same in every chapter; elsewhere (a script, pytest) printed as plain text —
and returns it marked as shown (``Printed``), so a cell ending in the call shows it once.

Known wrong answers are recognised by name, never hidden by a tolerance: a check lists the
values of the mistakes a learner plausibly makes (a missing tensor, a missing factor of 2, the
wrong element size, an off-by-one tile count, the causal skip forgotten, …) with the hint each
deserves, ``known_mistake`` finds the one an answer equals, and ``safe_rel`` narrows a check's
tolerance to under half the distance to the nearest of them, so none of them is ever accepted.
Exact integer answers (bytes, tiles, FLOPs) are compared exactly.
"""

from __future__ import annotations

import functools
import html
import numbers
import sys
from dataclasses import dataclass

import numpy as np

#: the class of the one <span> a check's line is shown in (a notebook's HTML output)
CHECK_CLASS = "flashviz-check"
#: colours of a right and a wrong line
RIGHT_COLOUR, WRONG_COLOUR = "#2ca02c", "#d62728"


def check_html(ok: bool, message: str) -> str:
    """The markup of a check's line in a notebook: one bold span, green for ✓, red for ✗."""
    colour = RIGHT_COLOUR if ok else WRONG_COLOUR
    return f"<span class='{CHECK_CLASS}' style='color:{colour};font-weight:bold'>{html.escape(message)}</span>"


@dataclass
class CheckResult:
    """ok: whether the answer is right; message: the one line shown to the learner."""

    ok: bool
    message: str

    def __bool__(self) -> bool:
        return self.ok

    def _repr_html_(self):
        return check_html(self.ok, self.message)

    def __repr__(self):
        return self.message


def right(message: str) -> CheckResult:
    return CheckResult(True, f"✓ Right: {message}")


def wrong(message: str) -> CheckResult:
    return CheckResult(False, f"✗ Not yet: {message}")


class Printed(CheckResult):
    """A CheckResult its check has already shown: as a notebook cell's value it shows nothing
    more (the line is not repeated); ``ok``, ``message``, ``bool()`` and ``repr()`` as usual."""

    def _ipython_display_(self):
        pass


def _ipython():
    """The running IPython shell (a notebook's kernel, Voilà, the IPython console), or None.
    IPython is not imported here: a plain script or pytest has none."""
    ip = sys.modules.get("IPython")
    return ip.get_ipython() if ip is not None else None


def _display(obj) -> None:
    from IPython.display import display

    display(obj)


def show(result: CheckResult) -> None:
    """Show a check's line, the one way every exercise does: under IPython as a rich display of
    a plain CheckResult (its ``_repr_html_``: ``check_html``; text/plain: the line), elsewhere
    printed."""
    if _ipython() is None:
        print(result.message)
    else:
        _display(CheckResult(bool(result.ok), result.message))


def say(result: CheckResult) -> CheckResult:
    """Show a check's one line (``show``) and return it, marked as shown, so that a cell ending
    in the call does not show it a second time. Every check of every chapter ends here."""
    show(result)
    return Printed(bool(result.ok), result.message)


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


def fmt_answer(x: float) -> str:
    """A number as a check's one-line reply shows it (the learner's answer or flashviz's value):
    whole numbers of 10,000 or more with thousands separators (136,314,880), others to 6
    significant digits (0.333333, 1,234.5). x: an int or float; returns a str; no checks (the
    callers have a finite number, ``finite_number``)."""
    return f"{x:,.0f}" if abs(x) >= 1e4 and float(x).is_integer() else f"{x:,.6g}"


def _matches(answer: float, value: float, rel: float) -> bool:
    """answer is value within rel of it (rel 0: equal, up to float rounding of an exact integer)."""
    return abs(answer - value) <= max(rel, 1e-12) * abs(value) if value else answer == 0


def known_mistake(answer: float, mistakes, expected: float | None = None, *, rel: float = 0.0) -> str | None:
    """The hint of the first known wrong answer that ``answer`` is, or None. ``mistakes``: pairs
    (value, hint) or triples (value, hint, rel): a value matches within its own rel, else within
    ``rel`` (0: equal). A listed value equal to ``expected`` (a mistake that, for this question,
    gives the right answer) is skipped."""
    for m in mistakes:
        value, hint, r = (*m, rel)[:3]
        if expected is not None and _matches(value, expected, 0.0):
            continue
        if _matches(answer, value, r):
            return hint
    return None


def safe_rel(expected: float, rel: float, mistakes) -> float:
    """``rel`` narrowed to under half the relative distance from ``expected`` to the nearest
    known wrong answer in ``mistakes`` (as for ``known_mistake``): a tolerance never accepts a
    named mistake. Mistakes equal to ``expected`` are left out."""
    if not expected:
        return rel
    gaps = [abs(m[0] - expected) / abs(expected) for m in mistakes]
    return min([rel] + [g / 2 for g in gaps if g > 1e-12])


def close_number(answer, expected: float, *, rel: float = 0.05, what: str = "your answer", unit: str = "",
                 hint: str = "", mistakes=()):
    """Compare a numeric prediction with the computed value: within ``rel`` (narrowed by
    ``safe_rel`` so that no known mistake passes; rel = 0: exactly, for exact integer answers).
    Right: both values are shown. Wrong: the learner's value, which way it is off and roughly how
    far, and the hint of the known mistake it is (``mistakes``, see ``known_mistake``) or else
    ``hint`` (the idea to revisit) — never the expected value."""
    a = finite_number(answer)
    if a is None:
        return wrong(f"{what} should be a number (a finite one), got {answer!r:.60}")
    mistakes = list(mistakes)
    rel = safe_rel(expected, rel, mistakes)
    if _matches(a, expected, rel):
        return right(f"{what} = {fmt_answer(a)}{unit} (flashviz computes {fmt_answer(expected)}{unit})")
    said = f"{what} = {fmt_answer(a)}{unit} is {direction(a, expected)}"
    named = known_mistake(a, mistakes, expected, rel=rel)
    if named:
        return wrong(f"{said}. hint: {named}")
    return wrong(said + (f". hint: {hint}" if hint else "") + exact_note(a, expected, rel))


def exact_note(answer: float, expected: float, rel: float) -> str:
    """For an exact answer (rel 0) within 1 % of it: say it is an exact count, to be worked out
    in full (a rounded figure is not it). '' otherwise."""
    if rel or not expected or abs(answer - expected) > 0.01 * abs(expected):
        return ""
    return " (the answer is an exact integer: work it out in full, Python can do the arithmetic)"
