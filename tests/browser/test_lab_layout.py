"""`make lab` opens the first chapter alone, every time: the tabs a student left open last time
(each a kernel) do not come back. The server runs the Makefile's own command (``python -m
flashviz.lessons --lab``: the working copy, JupyterLab's arguments from ``lab_args``), is stopped
and started again in the same HOME, on the same port, and the page opens the URL JupyterLab's
own browser-open file names, in the same browser profile. Skipped when chromium or playwright is
missing (.ci/run installs both)."""

from __future__ import annotations

import json
import re
import time
import urllib.request
from pathlib import Path

import pytest

from flashviz.lessons import FIRST

from .conftest import ARTIFACTS
from .servers import free_port, scratch, server

pytestmark = pytest.mark.browser

OPENED = ["01_memory_wall.ipynb", "02_online_softmax.ipynb"]

TABS_JS = "[...document.querySelectorAll('#jp-main-dock-panel .lm-TabBar-tabLabel')].map(e => e.innerText)"


def _open_url(tmp: Path, port: int, token: str) -> str:
    """The URL a browser started by `make lab` opens: the one in the server's redirect file for
    the notebook given on its command line (jpserver-file-to-run-<pid>-open.html) of the server
    with this port and token (a file an earlier server left behind names another token)."""
    for f in (tmp / "jupyter_runtime_dir").glob("jpserver-file-to-run-*-open.html"):
        url = re.search(r'url=(http[^"]+)"', f.read_text()).group(1).replace("&amp;", "&")
        if f":{port}/" in url and f"token={token}" in url:
            return url
    raise AssertionError("no browser-open file for the notebook make lab opens")


def _get(base: str, token: str, path: str):
    return json.load(urllib.request.urlopen(f"{base}{path}?token={token}", timeout=5))


def _wait_tabs(page, names) -> None:
    page.wait_for_function(f"(names => names.every(n => ({TABS_JS}).includes(n)))({json.dumps(names)})",
                           timeout=60_000)


def test_make_lab_reopens_the_first_chapter_alone(browser):
    tmp, port = scratch("fv-make-lab-"), free_port()
    profile = browser.new_context(viewport={"width": 1366, "height": 768})   # one browser profile for both
    with server("make-lab", tmp=tmp, port=port) as (base, token, work):
        page = profile.new_page()
        page.goto(_open_url(tmp, port, token))
        _wait_tabs(page, [FIRST])
        for name in OPENED:                  # the student opens two more chapters from the file browser
            page.locator(".jp-DirListing-itemText", has_text=name).dblclick()
        _wait_tabs(page, [FIRST, *OPENED])
        deadline = time.time() + 30          # JupyterLab has saved that layout on the server
        while True:
            saved = json.dumps(_get(base, token, "/lab/api/workspaces/")["workspaces"]["values"])
            if all(f"notebook:{n}" in saved for n in [FIRST, *OPENED]):
                break
            assert time.time() < deadline, f"the layout with {OPENED} was never saved: {saved[:500]}"
            time.sleep(0.5)
        page.close()
    with server("make-lab", tmp=tmp, port=port) as (base, token, work):
        page = profile.new_page()
        page.goto(_open_url(tmp, port, token))
        _wait_tabs(page, [FIRST])
        page.wait_for_function("document.querySelector('.jp-Notebook-ExecutionIndicator')"
                               "?.getAttribute('data-status') === 'idle'", timeout=60_000)
        time.sleep(3)                        # a restored tab would have started its kernel by now
        tabs = page.evaluate(TABS_JS)
        kernels = _get(base, token, "/api/kernels")
        # JupyterLab's toast asking to fetch Jupyter news (it covered the chapter's text) is off
        news_toasts = page.get_by_text("Jupyter news").count()
        page.screenshot(path=str(ARTIFACTS / "make_lab_reopened.png"))
        page.close()
    profile.close()
    assert tabs == [FIRST], f"tabs open after a restart: {tabs}"
    assert len(kernels) == 1, f"{len(kernels)} kernels run after a restart"
    assert news_toasts == 0, "JupyterLab asks about Jupyter news over the lesson"
    # JupyterLab's default workspaces folder, every lab's: under JUPYTER_CONFIG_DIR (the server's
    # environment sets it), else ~/.jupyter
    for shared in (tmp / "jupyter_config_dir" / "lab" / "workspaces", tmp / "home" / ".jupyter" / "lab" / "workspaces"):
        assert not shared.exists() or not any(shared.iterdir()), f"make lab wrote into {shared}"
