"""Book mode (FLASHVIZ_BOOK=1, flashviz/widgets/book.py): what a widget displays while `make book`
executes the chapters: static HTML holding a GIF made by the widget's own save_gif from its run
(an animated widget) or its texts and tables (a panel); live widgets as always without it.
The book itself, built and read in chromium: tests/browser/test_book.py."""

from __future__ import annotations

import base64
import io
import re

import pytest
from PIL import Image

import flashviz as fv
from flashviz.widgets import book

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
GIF = re.compile(r'src="data:image/gif;base64,([A-Za-z0-9+/=]+)"')


@pytest.fixture
def explorer():
    w = fv.TileExplorer(N=64, d=32, Br=16, Bc=16, source="real", key="test-book-mode")
    yield w
    w.close()


def test_book_frames_spread_over_the_run():
    assert book.book_frames(0) == []
    assert book.book_frames(1) == [0]
    assert book.book_frames(5) == [0, 1, 2, 3, 4]
    ks = book.book_frames(72)
    assert len(ks) == book.FRAMES and ks[0] == 0 and ks[-1] == 71 and ks == sorted(set(ks))


def test_a_frame_widget_shows_its_exported_animation_in_book_mode(explorer, monkeypatch):
    assert WIDGET_VIEW in explorer._repr_mimebundle_()             # live without FLASHVIZ_BOOK
    monkeypatch.setenv(book.BOOK_ENV, "1")
    explorer.show_frame(7)
    bundle = explorer._repr_mimebundle_()
    assert WIDGET_VIEW not in bundle and set(bundle) == {"text/html", "text/plain"}
    page = bundle["text/html"]
    (gif,) = GIF.findall(page)
    with Image.open(io.BytesIO(base64.b64decode(gif))) as im:
        assert im.format == "GIF" and im.n_frames == book.FRAMES
        assert im.size == (round(explorer.fig.bbox.width), round(explorer.fig.bbox.height))
    assert "max |O − O_ref|" in page                                # its status line
    assert "N = 64" in page and "Br = 16" in page and "make lab" in page
    assert "steps 1, " in page and f"of {explorer.n_frames}" in page
    assert explorer.frame.value == 7                                # the export left the widget where it was


def test_a_panel_shows_its_texts_and_tables_in_book_mode(monkeypatch):
    panel = fv.GPUPanel(Br=64, Bc=64, d=64, key="test-book-mode-panel")
    try:
        monkeypatch.setenv(book.BOOK_ENV, "1")
        bundle = panel._repr_mimebundle_()
    finally:
        panel.close()
    assert WIDGET_VIEW not in bundle
    page = bundle["text/html"]
    assert "The same tiling on a GPU" in page and "<table" in page and "make lab" in page
    assert "jupyter-widgets-disconnected" not in page               # the hidden restart notice stays out
