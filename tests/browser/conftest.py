"""The browser the browser tests share: Debian's chromium driven by playwright, one per test
module; skipped when either is missing (.ci/run installs both). Screenshots and reports go to
artifacts/browser/.

Helpers of the tests that compare the frame the browser shows with the frame the kernel drew
(test_frames.py, test_timeline_browser.py): open a notebook made for the test in JupyterLab or
Voilà, find the n-th FrameWidget on the page, read its step slider and the pixels of its ipympl
canvas, and count the pixels that differ between two pictures."""

from __future__ import annotations

import base64
import io
from pathlib import Path

import numpy as np
import pytest

from .servers import CHROMIUM, DIFF_LEVELS, FLAGS, ROOT, open_notebook  # noqa: F401 (the tests import it from here)

ARTIFACTS = ROOT / "artifacts" / "browser"


@pytest.fixture(scope="module")
def browser():
    playwright = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} not installed (apt-get install chromium)")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with playwright.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield b
        b.close()


def frame_widget(page, i: int):
    """The i-th FrameWidget on the page (its box carries the class flashviz-frame-widget)."""
    return page.locator(".flashviz-frame-widget").nth(i)


def browser_canvas(page, i: int) -> np.ndarray:
    """The RGBA pixels the i-th FrameWidget's ipympl canvas shows (``canvas.toDataURL``)."""
    from PIL import Image

    loc = frame_widget(page, i).locator(".jupyter-matplotlib-canvas-div canvas").first
    loc.scroll_into_view_if_needed()
    url = loc.evaluate("c => c.toDataURL('image/png')")
    return np.asarray(Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))).convert("RGBA"))


def step_slider(page, i: int):
    """The i-th FrameWidget's step slider."""
    return frame_widget(page, i).locator(".widget-hslider", has=page.locator(".widget-label", has_text="step")).first


def slider_value(page, i: int) -> int:
    """The frame index (0-based, the kernel's ``w.frame.value``) the i-th FrameWidget's step
    slider shows: its readout counts steps from 1, as the figures' titles do."""
    return int(step_slider(page, i).locator(".widget-readout").inner_text()) - 1


def differing(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Boolean mask of the pixels whose colour differs by more than DIFF_LEVELS in a channel."""
    return np.abs(a[..., :3].astype(int) - b[..., :3].astype(int)).max(-1) > DIFF_LEVELS
