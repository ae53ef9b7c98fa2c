"""A real browser (Debian's chromium via playwright) runs the notebooks in JupyterLab and the
app in Voilà, and checks that the widgets and the ipympl canvas render and respond.

Skipped when chromium or playwright is missing (.ci/run installs both)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from .conftest import ARTIFACTS
from .servers import CHROMIUM, ROOT, server

playwright = pytest.importorskip("playwright.sync_api")
if not Path(CHROMIUM).exists():
    pytest.skip(f"{CHROMIUM} not installed (apt-get install chromium)", allow_module_level=True)

NOTEBOOKS = sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb"))
pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def lab():
    with server("lab") as s:
        yield s


def open_and_run_all(browser, lab, name):
    base, token, _ = lab
    page = browser.new_page(viewport={"width": 1500, "height": 1100})
    errors = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    # ?reset: start from an empty workspace, so only this notebook is open
    page.goto(f"{base}/lab/tree/notebooks/{name}?reset&token={token}")
    page.wait_for_selector(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell", timeout=60_000)
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle'], .jp-mod-idle, "
                           ".jp-Toolbar-kernelStatus", state="attached", timeout=60_000)
    time.sleep(2)
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
    return page, errors


NB = ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook"     # the notebook in the visible tab
#: an app chapter's figure: a matplotlib canvas, or the PNG of an image chapter (FigureTabs)
APP_FIGURE_SELECTOR = ".jupyter-matplotlib-canvas-div canvas, .flashviz-app-body img"


def wait_until_done(page, timeout=240):
    """Wait until no cell shows [*] (running / queued)."""
    deadline = time.time() + timeout
    time.sleep(2)
    while time.time() < deadline:
        prompts = page.locator(f"{NB} .jp-InputArea-prompt").all_inner_texts()
        if prompts and not any("*" in p for p in prompts):
            return
        time.sleep(1)
    raise AssertionError("the notebook did not finish running")


def assert_rendered(page, errors, name):
    body = page.locator(NB).inner_text()
    assert "Error displaying widget" not in body
    assert "Traceback" not in body, f"{name}: a cell raised"
    time.sleep(2)
    assert page.locator(".widget-label, .jupyter-widgets").count() > 0, f"{name}: no widget rendered"
    assert "Loading widget" not in page.locator(NB).inner_text()
    bad = [e for e in errors if "flashviz" in e or "widget" in e.lower()]
    assert not bad, f"{name}: console errors {bad[:3]}"


def canvas_png(page):
    canvas = page.locator(".jupyter-matplotlib-canvas-div canvas").first
    canvas.scroll_into_view_if_needed()
    return canvas.screenshot()


def test_start_here_renders_plays_and_redraws(browser, lab):
    page, errors = open_and_run_all(browser, lab, "00_start_here.ipynb")
    try:
        wait_until_done(page)
        page.wait_for_selector(".jupyter-matplotlib-canvas-div canvas", timeout=60_000)
        assert_rendered(page, errors, "00_start_here")
        time.sleep(2)
        readout = page.locator(".widget-slider .widget-readout").first
        before, shot0 = readout.inner_text(), canvas_png(page)
        page.screenshot(path=str(ARTIFACTS / "start_here_loaded.png"))
        page.locator(".widget-play button").first.click()            # Play
        time.sleep(4)
        page.locator(".widget-play button").first.click()            # pause
        time.sleep(3)                                                 # let queued frames drain
        after, shot1 = readout.inner_text(), canvas_png(page)
        page.screenshot(path=str(ARTIFACTS / "start_here_playing.png"))
        assert int(after) > int(before), "Play did not advance the step slider"
        assert shot0 != shot1, "the canvas did not change while playing"
        # move the Br slider one notch: the run and the grid are rebuilt
        br = page.locator(".widget-hslider", has=page.locator(".widget-label", has_text="Br")).first
        br_readout = br.locator(".widget-readout")
        old_br = br_readout.inner_text()
        br.locator(".noUi-handle").first.focus()
        page.keyboard.press("ArrowRight")
        deadline = time.time() + 45          # a rebuild re-runs the algorithm: allow a busy CI box time
        while True:
            time.sleep(2)
            shot2 = canvas_png(page)
            if shot2 != shot1 or time.time() > deadline:
                break
        assert br_readout.inner_text() != old_br, "the Br slider did not move"
        assert shot2 != shot1, "the grid did not redraw after Br changed"
        assert readout.inner_text() == "1", "a new run starts at step 1 (the slider counts steps from 1)"
        page.screenshot(path=str(ARTIFACTS / "start_here_br_moved.png"))
    finally:
        page.close()


@pytest.mark.parametrize("name", [n for n in NOTEBOOKS if n != "00_start_here.ipynb"])
def test_chapter_renders_in_jupyterlab(browser, lab, name):
    page, errors = open_and_run_all(browser, lab, name)
    try:
        wait_until_done(page)
        assert_rendered(page, errors, name)
        page.screenshot(path=str(ARTIFACTS / f"{Path(name).stem}.png"), full_page=False)
    finally:
        page.close()


def test_voila_app_serves_every_chapter(browser):
    from flashviz.widgets.app import available_chapters

    with server("voila") as (base, token, _):
        page = browser.new_page(viewport={"width": 1500, "height": 1200})
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        try:
            page.goto(f"{base}/?token={token}", timeout=120_000)
            page.wait_for_selector(".jupyter-matplotlib-canvas-div canvas", timeout=120_000)
            time.sleep(3)
            text = page.locator("body").inner_text()
            assert "chapter" in text and "Traceback" not in text and "In [" not in text   # no code cells
            page.screenshot(path=str(ARTIFACTS / "voila_start.png"))
            select = page.locator("select").first
            labels = available_chapters()
            assert select.locator("option").count() == len(labels)
            for n, label in enumerate(labels[1:], start=1):
                select.select_option(index=n)
                page.wait_for_selector(APP_FIGURE_SELECTOR, timeout=60_000)
                time.sleep(3)
                body = page.locator("body").inner_text()
                assert "could not start" not in body, f"{label}: {body[-300:]}"
                page.screenshot(path=str(ARTIFACTS / f"voila_chapter_{n}.png"))
            assert not [e for e in errors if "flashviz" in e], errors[:3]
        finally:
            page.close()
