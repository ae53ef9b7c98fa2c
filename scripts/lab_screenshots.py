"""Open a notebook in a real JupyterLab + headless Chromium, run all cells, press Play, screenshot.

Usage: python scripts/lab_screenshots.py [notebook] [outdir]. Needs Debian's chromium and the
playwright package (never `playwright install`). Starts and stops its own server on 127.0.0.1.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[1]
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(notebook="notebooks/00_start_here.ipynb", outdir="artifacts"):
    out = Path(outdir)
    out.mkdir(exist_ok=True)
    port, token = free_port(), secrets.token_hex(16)
    tmp = Path(tempfile.mkdtemp(prefix="fv-lab-"))
    # serve a copy: JupyterLab autosaves, and committed notebooks must stay without outputs
    work = tmp / "work"
    shutil.copytree(ROOT / "notebooks", work / "notebooks")
    env = dict(os.environ, HOME=str(tmp), JUPYTER_CONFIG_DIR=str(tmp / "cfg"), JUPYTER_DATA_DIR=str(tmp / "data"),
               JUPYTER_RUNTIME_DIR=str(tmp / "rt"), MPLCONFIGDIR=str(tmp / "mpl"), IPYTHONDIR=str(tmp / "ipy"))
    # keep the kernel finding the installed packages: the venv's python stays first
    server = subprocess.Popen([sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ip=127.0.0.1",
                               f"--port={port}", f"--IdentityProvider.token={token}", "--allow-root",
                               f"--ServerApp.root_dir={work}", "--LabApp.news_url=", "--ServerApp.open_browser=False"],
                              env=env, stdout=subprocess.DEVNULL, stderr=open(tmp / "server.log", "w"))
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token={token}", timeout=1)
                break
            except Exception:
                time.sleep(0.5)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=FLAGS)
            page = browser.new_page(viewport={"width": 1500, "height": 1100})
            errors = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.goto(f"http://127.0.0.1:{port}/lab/tree/{notebook}?token={token}")
            page.wait_for_selector(".jp-Notebook", timeout=60_000)
            time.sleep(3)
            page.screenshot(path=str(out / "lab_opened.png"))
            page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
            page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
            try:
                page.wait_for_selector(".jupyter-matplotlib", state="attached", timeout=120_000)
            finally:
                page.screenshot(path=str(out / "lab_after_run.png"))
            time.sleep(8)
            page.screenshot(path=str(out / "lab_full.png"), full_page=False)
            canvas = page.locator(".jupyter-matplotlib").first
            canvas.scroll_into_view_if_needed()
            time.sleep(1)
            page.screenshot(path=str(out / "lab_widget.png"))
            slider = page.locator(".widget-slider .widget-readout").first
            before = slider.inner_text()
            page.locator(".widget-play button").first.click()      # Play
            time.sleep(4)
            page.screenshot(path=str(out / "lab_playing.png"))
            print("step slider before/after Play:", before, slider.inner_text())
            print("console errors:", errors[:10])
            browser.close()
    finally:
        server.terminate()
        server.wait(10)


if __name__ == "__main__":
    main(*sys.argv[1:])
