"""The browser the browser tests share: Debian's chromium driven by playwright, one per test
module; skipped when either is missing (.ci/run installs both). Screenshots and reports go to
artifacts/browser/."""

from __future__ import annotations

from pathlib import Path

import pytest

from .servers import CHROMIUM, FLAGS, ROOT

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
