"""Sphinx configuration of the book (`make book`, scripts/make_book.py): the chapters of
notebooks/ as static HTML pages, executed at build time (myst-nb), readable with no network.

scripts/make_book.py copies this folder and the chapters (notebooks/NN_name.ipynb) into
build/book/src, runs every chapter in a fresh kernel with FLASHVIZ_BOOK=1 (the widgets then
show animations exported by their own `save_gif`: flashviz/widgets/book.py) and writes the site
to build/book/html. A cell that raises fails the build.
"""

import importlib.util
import shutil
from pathlib import Path

project = "flashviz"
html_title = "flashviz: FlashAttention, step by step"
author = "the flashviz authors"
copyright = "the flashviz authors, MIT licence"

extensions = ["myst_nb"]        # MyST Markdown notebooks, executed
exclude_patterns = ["_build", "**/.ipynb_checkpoints"]
myst_enable_extensions = ["dollarmath", "amsmath"]
myst_heading_anchors = 3

# --- execution: every chapter, every build, top to bottom; a cell error fails the build
nb_execution_mode = "force"
nb_execution_raise_on_error = True
nb_execution_show_tb = True
nb_execution_timeout = 600          # seconds per cell (the longest cells export animations or sweep)
nb_merge_streams = True

# --- outputs: no live widgets in a static page. The widgets show static HTML in book mode;
# matplotlib figures (ipympl canvases) fall back to their PNG (before their HTML, an inline copy of
# the same PNG). No ipywidgets JavaScript (it would come from a CDN) and no widget views.
nb_ipywidgets_js = {}
nb_mime_priority_overrides = [
    ("html", "application/vnd.jupyter.widget-view+json", None),
    ("html", "application/javascript", None),
    ("html", "image/png", 25),
]

html_theme = "furo"
html_static_path = ["_static"]
html_css_files = ["book.css"]
html_theme_options = {
    "announcement": ("A static copy of the lessons: the widgets are animations exported from this build. "
                     "Run them live: <code>make lab</code> in a clone of the repository (see its README)."),
}
html_show_sourcelink = False
html_copy_source = False

# --- math: MathJax 3 from the sphinx-mathjax-offline package, copied into the site (no CDN at
# view time). Done here rather than by listing that extension, which does not declare itself safe
# for parallel reading (Sphinx would then read, that is execute, one chapter at a time).
MATHJAX = Path(importlib.util.find_spec("sphinx-mathjax-offline").origin).parent / "static" / "mathjax"
mathjax_path = "mathjax/tex-chtml.js"


def _copy_mathjax(app, exc):
    if exc is None and app.builder.format == "html":
        shutil.copytree(MATHJAX, Path(app.outdir) / "_static" / "mathjax", dirs_exist_ok=True)


def setup(app):
    app.connect("build-finished", _copy_mathjax)
