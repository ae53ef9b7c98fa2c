"""No code line of a lesson is wider than JupyterLab's code editor shows without scrolling sideways,
at 1366×768 with the file browser open (JupyterLab's default layout).

MAX_CODE_CHARS was measured in Debian's chromium, JupyterLab 4.6, a notebook open at a 1366×768
viewport beside the 250 px file browser, with the notebook's 15 px scrollbar drawn (a desktop
browser draws it; headless chromium hides it unless told not to): the code font (13 px
``Menlo, Consolas, 'DejaVu Sans Mono'``, here DejaVu Sans Mono) advances 7.827 px a character;
the editor is 919 px wide, 909 px of it for text (its scroller 917 px less the line's 6 + 2 px
padding): 909 / 7.827 = 116.1 characters. A line of 116 fits and one of 117 scrolled. Menlo (macOS)
has the same advance; Consolas (Windows) is narrower. Every non-ASCII character the lessons' code
uses (→, │, ×, Σ, µ, ≥ …) has that advance too, except ℓ, which is narrower: counting characters
is safe. The lessons' code is checked in the notebooks students open (``notebooks/*.ipynb``;
tests/notebooks/test_paired_notebooks.py checks that the ``.md`` twins hold the same code)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
#: the widest code line, in characters, JupyterLab shows whole at 1366×768 (measured: see above)
MAX_CODE_CHARS = 116


def too_wide(nb: dict, limit: int = MAX_CODE_CHARS) -> list[str]:
    """'cell C, line L: W characters' for each code line of the notebook ``nb`` (its JSON) wider
    than ``limit``."""
    wide = []
    for c, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        for n, line in enumerate(source.splitlines(), 1):
            if len(line) > limit:
                wide.append(f"cell {c}, line {n}: {len(line)} characters")
    return wide


def test_there_are_notebooks():
    assert len(NOTEBOOKS) >= 10


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_code_line_fits_the_editor(path):
    wide = too_wide(json.loads(path.read_text(encoding="utf-8")))
    assert not wide, (f"{path.name}: code lines wider than {MAX_CODE_CHARS} characters (JupyterLab scrolls them "
                      f"sideways at 1366×768; rewrap them in the .md, then jupytext --sync): {wide}")


def test_the_check_sees_a_wide_line_and_only_in_code():
    line = "x = " + "1" * (MAX_CODE_CHARS - 4)
    nb = {"cells": [{"cell_type": "markdown", "source": "y" * 300},
                    {"cell_type": "code", "source": [line + "\n", line + "1"]}]}
    assert too_wide(nb) == [f"cell 1, line 2: {MAX_CODE_CHARS + 1} characters"]
