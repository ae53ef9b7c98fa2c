"""The book (`make book`, scripts/make_book.py): the chapters built into static HTML, served over
http on 127.0.0.1 and read in chromium as a student would, with no network.

Every chapter of notebooks/ is a page linked from the front page; every page loads with no
console error and no request outside the server (MathJax and the theme come with the site); every
<img> decodes; no page shows a cell error, a stderr stream or a widget's text stand-in; each
widget's place holds its animation, a GIF exported by its own save_gif; every page says how to run
the lessons live. Screenshots of two pages go to artifacts/browser/book-*.png.

The book is built once for this module into a temporary folder (about 1.5–3.5 minutes on two
cores); FLASHVIZ_BOOK_HTML=build/book/html (after `make book`) reads that build instead. Skipped
when chromium, playwright, Sphinx or myst-nb is missing."""

from __future__ import annotations

import base64
import functools
import http.server
import io
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import urlparse

import pytest

from .conftest import ARTIFACTS
from .servers import ROOT, isolated_env

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CHAPTERS = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
GIF = re.compile(r'class="flashviz-book-animation" src="data:image/gif;base64,([A-Za-z0-9+/=]+)"')
#: what a widget's display falls back to when it has no static form: its text/plain repr
WIDGET_TEXT = re.compile(r"\b(VBox|HBox|Canvas|Output|Image)\(|object at 0x[0-9a-f]+")


@pytest.fixture(scope="module")
def site(browser, tmp_path_factory) -> Path:
    """The built book's html folder (built here unless FLASHVIZ_BOOK_HTML names one)."""
    given = os.environ.get("FLASHVIZ_BOOK_HTML")
    if given:
        html = Path(given).resolve()
        assert (html / "index.html").exists(), f"FLASHVIZ_BOOK_HTML={given}: no index.html there"
        return html
    pytest.importorskip("sphinx")
    pytest.importorskip("myst_nb")
    out = tmp_path_factory.mktemp("book")
    env = isolated_env(out / "env")           # own HOME, Jupyter and IPython folders: the venv's kernel
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "make_book.py"), "--out", str(out / "book"), "-q"],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"make book failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return out / "book" / "html"


@pytest.fixture(scope="module")
def served(site):
    """The site served by Python's http.server on a free 127.0.0.1 port: yields its base URL."""
    handler = functools.partial(_QuietHandler, directory=str(site))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def _open(browser, url: str, problems: list):
    """A page at ``url`` that records console errors, page errors, failed requests and any
    request that leaves 127.0.0.1 (blocked) into ``problems``."""
    page = browser.new_page(viewport={"width": 1300, "height": 900})
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url} {r.failure}"))

    def route(r):
        if urlparse(r.request.url).hostname in ("127.0.0.1", None) or r.request.url.startswith("data:"):
            r.continue_()
        else:
            problems.append(f"request outside the site: {r.request.url}")
            r.abort()

    page.route("**/*", route)
    page.goto(url, wait_until="load")
    page.wait_for_load_state("networkidle")
    return page


def test_every_chapter_is_a_page_of_the_book(site, served, browser):
    assert CHAPTERS, "no chapters found in notebooks/"
    problems = []
    page = _open(browser, f"{served}/index.html", problems)
    links = set(page.evaluate("[...document.querySelectorAll('a[href]')].map(a => a.getAttribute('href'))"))
    page.screenshot(path=str(ARTIFACTS / "book-index.png"))
    page.close()
    assert problems == []
    for name in CHAPTERS:
        assert (site / f"{name}.html").exists(), f"chapter {name} has no page"
        assert f"{name}.html" in links, f"the front page does not link chapter {name}"


@pytest.mark.parametrize("name", ["index", *CHAPTERS])
def test_a_page_loads_clean_with_its_images(site, served, browser, name):
    problems = []
    page = _open(browser, f"{served}/{name}.html", problems)
    try:
        images = page.evaluate("""async () => Promise.all([...document.images].map(async img => {
            try { await img.decode(); } catch (e) {}
            return {src: img.currentSrc.slice(0, 60), ok: img.complete && img.naturalWidth > 0};
        }))""")
        text = page.inner_text("article")
        outputs = page.evaluate("[...document.querySelectorAll('.cell_output')].map(e => e.innerText).join('\\n')")
        bad_outputs = page.evaluate("""[...document.querySelectorAll(
            '.output.traceback, .output.error, .output.stderr, .cell_output .stderr')].length""")
        live_line = page.inner_text("body")
        maths = page.evaluate("document.querySelectorAll('mjx-container').length")
        has_math = page.evaluate("document.querySelectorAll('.math').length")
        if name == "03_tiling":
            page.locator("img.flashviz-book-animation").first.scroll_into_view_if_needed()
            page.evaluate("window.scrollBy(0, -120)")
            page.screenshot(path=str(ARTIFACTS / "book-03_tiling.png"))
    finally:
        page.close()
    assert problems == [], problems
    assert [i for i in images if not i["ok"]] == [], "images that do not decode"
    assert "Traceback" not in text and bad_outputs == 0, f"{name}: a cell error or stderr output on the page"
    shown = WIDGET_TEXT.search(outputs)
    assert not shown, f"{name}: a widget shown as its text: {shown and shown.group(0)}"
    assert "make lab" in live_line, f"{name}: no line saying how to run the lessons live"
    if has_math:
        assert maths > 0, f"{name}: its math was not typeset (MathJax did not load)"


def test_the_widgets_are_animations_exported_by_their_own_save_gif(site):
    from PIL import Image

    found = {}
    for name in CHAPTERS:
        html = (site / f"{name}.html").read_text()
        gifs = [base64.b64decode(g) for g in GIF.findall(html)]
        found[name] = len(gifs)
        for g in gifs:
            im = Image.open(io.BytesIO(g))
            assert im.format == "GIF" and im.size[0] > 300 and im.size[1] > 200, (name, im.format, im.size)
        if "fv.TileExplorer(" in (ROOT / "notebooks" / f"{name}.md").read_text():
            assert gifs, f"{name}: its TileExplorer shows no animation"
        assert html.count("flashviz-book-caption") >= len(gifs)
    assert sum(found.values()) > 0, found
    tiling = [base64.b64decode(g) for g in GIF.findall((site / "03_tiling.html").read_text())]
    assert Image.open(io.BytesIO(tiling[0])).n_frames > 1, "the tiling chapter's animation has one frame"
