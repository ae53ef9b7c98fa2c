"""Printed text: the one helper the chapters use to keep their printed lines readable.

JupyterLab breaks a long output line wherever the cell ends, often mid-word. ``wrap`` breaks it
at spaces instead, to 100 columns, before it is printed. Plain Python (the standard library's
``textwrap``): importable from every layer.
"""

from __future__ import annotations

import textwrap

__all__ = ["WIDTH", "wrap"]

#: the width of a printed line, in characters
WIDTH = 100


def wrap(text: str, indent: str = "", width: int = WIDTH) -> str:
    """``text`` broken at spaces into lines of at most ``width`` columns (default 100), its later
    lines indented by ``indent``. Words are never split, nor broken at hyphens: a word longer than
    ``width`` (a path, a URL) keeps its own line whole. Each newline in ``text`` starts a new
    paragraph, wrapped on its own; an empty ``text`` gives ``""``."""
    return "\n".join(textwrap.fill(part, width, subsequent_indent=indent, break_on_hyphens=False,
                                   break_long_words=False) for part in text.split("\n"))
