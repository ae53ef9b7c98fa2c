"""A lesson from the working copy `make lab` makes opens clean in JupyterLab: no unsaved-changes
dot once its kernel has connected (JupyterLab rewrites the kernel metadata then; a copy whose
metadata differed was marked changed at once), and the server does not warn that it is not trusted.
Skipped when chromium or playwright is missing (.ci/run installs both)."""

from __future__ import annotations

import os
import shutil
import time

import pytest

from flashviz.lessons import prepare

from .conftest import ARTIFACTS
from .servers import ROOT, server

pytestmark = pytest.mark.browser

LESSON = "03_tiling.ipynb"


def _working_copy(work):
    """The server's notebooks/ becomes the working copy prepare makes, signed into the server's
    own signature store (the isolated JUPYTER_DATA_DIR servers.server gives it)."""
    store = work.parent / "jupyter_data_dir"
    old = os.environ.get("JUPYTER_DATA_DIR")
    os.environ["JUPYTER_DATA_DIR"] = str(store)
    try:
        shutil.rmtree(work / "notebooks")
        prepare(work / "notebooks", ROOT / "notebooks")
    finally:
        if old is None:
            os.environ.pop("JUPYTER_DATA_DIR")
        else:
            os.environ["JUPYTER_DATA_DIR"] = old


def test_a_lesson_opens_without_the_unsaved_dot_and_trusted(browser):
    with server("lab", prepare=_working_copy) as (base, token, work):
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(f"{base}/lab/tree/notebooks/{LESSON}?reset&token={token}")
        page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=60_000)
        page.wait_for_function("document.querySelector('.jp-Notebook-ExecutionIndicator')"
                               "?.getAttribute('data-status') === 'idle'", timeout=60_000)
        time.sleep(3)                  # the kernel's info has reached the notebook's metadata
        dirty = page.evaluate("[...document.querySelectorAll('.lm-TabBar-tab.jp-mod-dirty')].map(e => e.innerText)")
        page.screenshot(path=str(ARTIFACTS / "lesson_opens_clean.png"))
        page.close()
        assert dirty == [], f"tabs marked as changed on opening: {dirty}"
        log = (work.parent / "server.log").read_text()
        assert "is not trusted" not in log, [line for line in log.splitlines() if "trusted" in line]
