"""``flashviz present`` in a room over a lesson: every page load runs a kernel of its own; a page
that is left or reloaded asks for its kernel's shutdown as it unloads, and the kernel is gone within
seconds (with the culler off, so nothing else could have stopped it); a page
that went away without asking for its kernel's shutdown (playwright's ``page.close()`` skips the
page's unload step, as a crashed browser or a lost connection would) gives its kernel back once it
has been idle ``--cull-idle`` seconds, while a page left open keeps its kernel however long it sits
(a student reading). Also in the browser: a
chapter made on its visit says so beside the picker while it is made (the page shows the line
during the build, not only after it).

Kernels are counted as the server's child processes running ipykernel (Linux /proc)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from .conftest import ARTIFACTS
from .servers import server

playwright = pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.browser

CULL_S = 4           #: --cull-idle for the test (the culler then looks every 2 s)


def _kernels_of(port: int) -> set[int]:
    """PIDs of the ipykernel processes whose parent is the server listening on ``port``."""
    procs = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        procs[int(d.name)] = (ppid, cmd)
    servers = {pid for pid, (_, cmd) in procs.items() if "voila" in cmd and f"--port={port}" in cmd}
    assert servers, f"no Voilà server on port {port}"
    return {pid for pid, (ppid, cmd) in procs.items() if ppid in servers and "ipykernel" in cmd}


def _open(browser, base: str, token: str):
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    page.goto(f"{base}/?token={token}", timeout=120_000)
    page.wait_for_selector(".flashviz-app .jupyter-matplotlib-canvas-div canvas", timeout=120_000)
    return page


#: records, on the page, every text the line beside the picker shows (a MutationObserver)
WATCH_BUSY_JS = """() => { window.__busy = [];
  const box = document.querySelector('.flashviz-app .widget-hbox');
  new MutationObserver(() => { const t = box.innerText; if (t.includes('making')) window.__busy.push(t); })
    .observe(box, {subtree: true, childList: true, characterData: true}); }"""


def _gone_within(port: int, kernels: set[int], seconds: float, log: Path) -> None:
    t0 = time.time()
    while _kernels_of(port) & kernels:
        assert time.time() - t0 < seconds, (f"the kernel of a page that unloaded still runs after {seconds} s "
                                            f"(culler off); server log:\n{log.read_text()[-2000:]}")
        time.sleep(0.2)


def test_a_page_that_unloads_shuts_its_kernel_down_at_once(browser):
    """A page that is left (the student goes to another address) and a page that is reloaded each
    stop their old kernel within seconds, with the culler off; a third page keeps its kernel.
    Before flashviz.voila_page the server refused the page's request every time (403: '_xsrf'
    argument missing from POST). (Headless chromium drops a beacon sent while a tab closes, so
    the tab-close case cannot be driven here; a real browser sends it.)"""
    with server("voila", extra_args=["--cull-idle", "0", "--no-prefetch"]) as (base, token, work):
        port, log = int(base.rsplit(":", 1)[1]), work.parent / "server.log"
        pages, kernels = [], [set()]
        for _ in range(3):
            pages.append(_open(browser, base, token))
            kernels.append(_kernels_of(port))
            assert len(kernels[-1]) == len(pages) and kernels[-2] < kernels[-1], kernels
        left, reloaded, kept = (kernels[1], kernels[2] - kernels[1], kernels[3] - kernels[2])
        pages[0].goto("about:blank")
        _gone_within(port, left, 10, log)
        pages[1].reload(timeout=120_000)
        pages[1].wait_for_selector(".flashviz-app .jupyter-matplotlib-canvas-div canvas", timeout=120_000)
        _gone_within(port, reloaded, 10, log)
        now = _kernels_of(port)
        assert kept <= now and len(now) == 2, (kept, now)      # the open page's, and the reloaded page's new one
        assert "_xsrf" not in log.read_text(), log.read_text()[-2000:]
        assert "is not trusted" not in log.read_text(), "flashviz present signs the app notebook as trusted"
        for page in pages:
            page.close()


def test_a_closed_page_gives_its_kernel_back_and_an_open_one_keeps_it(browser):
    with server("voila", extra_args=["--cull-idle", str(CULL_S), "--no-prefetch"]) as (base, token, _):
        port = int(base.rsplit(":", 1)[1])
        first = _open(browser, base, token)
        one = _kernels_of(port)
        assert len(one) == 1, one
        second = _open(browser, base, token)
        both = _kernels_of(port)
        assert len(both) == 2 and one < both, both
        first.close()
        deadline = time.time() + 10 * CULL_S
        while _kernels_of(port) != both - one:
            assert time.time() < deadline, f"the closed page's kernel still runs after {10 * CULL_S} s"
            time.sleep(0.5)
        time.sleep(2 * CULL_S)                 # the open page's kernel, idle all this time, stays
        assert _kernels_of(port) == both - one
        # ... and still answers: a chapter made on its visit says so while it is made
        second.evaluate(WATCH_BUSY_JS)
        select = second.locator(".flashviz-app select").first
        select.select_option(index=2)
        second.screenshot(path=str(ARTIFACTS / "present_kernels_busy.png"))     # likely during the build
        second.wait_for_function("() => document.querySelector('.flashviz-app i')?.textContent.includes('running max')",
                                 timeout=60_000)
        busy = second.evaluate("() => window.__busy")
        second.screenshot(path=str(ARTIFACTS / "present_kernels_after.png"))
        assert busy and "making this chapter" in busy[0], busy
        time.sleep(0.5)
        assert "making" not in second.locator(".flashviz-app .widget-hbox").first.inner_text()
        second.close()
