"""Issue 20, item 5.2: one style of check output. Chapters 1–2 showed their lines as bold colour
(a CheckResult left as a cell's value), chapters 3–8 printed them (plain monospace). Now every
check of every exercise module shows its line through the one function, ``exercises.show``
(through ``say``): in a notebook (under IPython) as the CheckResult's HTML — ``check_html``, ✓ in
bold green, ✗ in bold red —, elsewhere printed; and returns it marked as shown (``Printed``), so a
cell ending in the call shows it once.

Every ``check_*`` function of every module in flashviz/exercises is found and called here (with
its placeholder answer, and some with a right one), under a pretend IPython and without one.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import pytest

import flashviz.exercises as ex

#: values for the question's parameters a check requires (the answers themselves are None)
QUESTION = {"N": 256, "d": 64, "Nq": 256, "Nk": 256, "Br": 64, "Bc": 64, "sram_budget": "A100",
            "bound": "memory", "step": "producer"}
MODULES = ["backward", "blocksize", "decode", "fa3", "gpu", "memory", "online", "tiling", "timeline"]


def exercise_checks():
    """(module name, function) of every public check_* function defined in flashviz/exercises."""
    out = []
    for info in pkgutil.iter_modules(ex.__path__):
        mod = importlib.import_module(f"flashviz.exercises.{info.name}")
        for name, fn in vars(mod).items():
            if name.startswith("check_") and inspect.isfunction(fn) and fn.__module__ == mod.__name__:
                out.append((info.name, fn))
    return out


CHECKS = exercise_checks()


def _call(fn, **answers):
    params = inspect.signature(fn).parameters
    args = {}
    for k, p in params.items():
        if p.default is not inspect.Parameter.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        args[k] = answers.get(k, QUESTION.get(k))
    return fn(**args)


def test_every_exercise_module_has_checks():
    assert sorted({m for m, _ in CHECKS}) == MODULES
    assert len(CHECKS) >= 20


@pytest.fixture
def notebook(monkeypatch):
    """A pretend IPython: what show() hands to IPython's display, in order."""
    shown = []
    monkeypatch.setattr(ex, "_ipython", lambda: object())
    monkeypatch.setattr(ex, "_display", shown.append)
    return shown


_SPAN = re.compile(r"^<span class='flashviz-check' style='color:(#[0-9a-f]{6});font-weight:bold'>[^<>]*</span>$")


@pytest.mark.parametrize("module, fn", CHECKS, ids=[f"{m}.{f.__name__}" for m, f in CHECKS])
def test_every_check_shows_its_line_the_one_way(module, fn, notebook, capsys):
    result = _call(fn)
    assert isinstance(result, ex.Printed), f"{module}.{fn.__name__} returned {type(result).__name__}, not Printed"
    assert result.message.startswith(("✓ Right: ", "✗ Not yet: ")) and "\n" not in result.message
    assert len(notebook) == 1, f"{module}.{fn.__name__} showed {len(notebook)} lines"
    (obj,) = notebook
    assert type(obj) is ex.CheckResult and (obj.ok, obj.message) == (result.ok, result.message)
    html = obj._repr_html_()
    assert html == ex.check_html(result.ok, result.message)
    colour = _SPAN.match(html)
    assert colour and colour[1] == (ex.RIGHT_COLOUR if result.ok else ex.WRONG_COLOUR), html
    assert repr(obj) == result.message
    assert capsys.readouterr().out == ""                     # nothing printed beside it
    assert result._ipython_display_() is None                # as a cell's value: shown once, not twice


@pytest.mark.parametrize("module, fn", CHECKS, ids=[f"{m}.{f.__name__}" for m, f in CHECKS])
def test_outside_ipython_the_line_is_printed(module, fn, capsys):
    result = _call(fn)
    assert capsys.readouterr().out == result.message + "\n"


def test_right_and_wrong_lines_share_the_markup(notebook):
    from flashviz.exercises.memory import check_softmax_intensity
    from flashviz.exercises.tiling import check_tile_count

    good, bad = check_softmax_intensity(5 / 24), check_tile_count(3, Nq=64, Nk=64, Br=16, Bc=16)
    assert good.ok and not bad.ok
    a, b = (o._repr_html_() for o in notebook)
    assert _SPAN.match(a)[1] == ex.RIGHT_COLOUR and _SPAN.match(b)[1] == ex.WRONG_COLOUR
    assert a.replace(ex.RIGHT_COLOUR, "").split(">")[0] == b.replace(ex.WRONG_COLOUR, "").split(">")[0]
    assert "✓ Right" in a and "✗ Not yet" in b


def test_markup_escapes_the_message():
    assert ex.check_html(False, "✗ Not yet: a < b & c").endswith(">✗ Not yet: a &lt; b &amp; c</span>")
