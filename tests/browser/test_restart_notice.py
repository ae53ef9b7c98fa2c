"""A widget whose kernel dies says so on the page, in JupyterLab and in Voilà: one line at the top
of the widget (the kernel stopped; run the cell again / reload the page), the stale controls dimmed
— not a page of silent broken-link icons. The kernel process is killed (SIGKILL, as a crash would);
the server restarts it and the page's widget manager marks every view disconnected.
Skipped when chromium or playwright is missing (.ci/run installs both)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from flashviz.widgets.notice import MESSAGE

from .conftest import ARTIFACTS, open_notebook
from .servers import server

pytestmark = pytest.mark.browser

CELLS = ["%matplotlib widget\nimport flashviz as fv", "w = fv.TileExplorer(N=64, d=16, Br=16, Bc=16, source='random')\nw"]

#: the text of the notice the widget's box shows (its ::before), '' when none
NOTICE_JS = """() => { const el = document.querySelector('.flashviz-live');
  if (!el) return null; const c = getComputedStyle(el, '::before').content;
  return c === 'none' || c === 'normal' ? '' : c; }"""


def _prepare(work: Path) -> None:
    import nbformat
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, str(work / "notebooks" / "restart_test.ipynb"))


def _kernel_pids(work: Path) -> list[int]:
    """The ipykernel processes the server of ``work`` started: they inherit its isolated HOME
    (found in each process's environment; a kernel's command line need not name the server's
    directories — Voilà's connection files may lie elsewhere)."""
    home = f"HOME={work.parent / 'home'}".encode()
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes()
                env = (d / "environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"ipykernel" in cmd and home in env:
                pids.append(int(d.name))
    return pids


@pytest.mark.parametrize("front_end", ["lab", "voila"])
def test_a_widget_whose_kernel_died_says_so(browser, front_end):
    kind = "lab" if front_end == "lab" else "voila-notebook"
    with server(kind, notebook="restart_test.ipynb", prepare=_prepare) as (base, token, work):
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        open_notebook(page, base, token, front_end, "restart_test.ipynb")
        page.wait_for_selector(".flashviz-live .jupyter-matplotlib-canvas-div canvas", timeout=120_000)
        time.sleep(2)
        assert page.evaluate(NOTICE_JS) == "", "the notice shows while the kernel is alive"
        pids = _kernel_pids(work)
        assert pids, "no kernel process found"
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        page.wait_for_function(f"({NOTICE_JS})()?.includes('kernel')", timeout=60_000)
        page.locator(".flashviz-live").first.scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / f"restart_notice_{front_end}.png"))
        shown = page.evaluate(NOTICE_JS)
        assert MESSAGE in shown.strip('"').replace('\\"', '"'), shown
        page.close()
