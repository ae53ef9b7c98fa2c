"""App mode in a room (issue 10, item 3), in a real browser at 1280×720 and 1920×1080, plain and
presenter: the chapter picker and the whole figure are visible without scrolling, the figure is
scaled to the window (its canvas fills the box the page leaves, keeping its aspect), no control
label is cut, a chapter opens in ≤ 1.5 s (median of first visits; every revisit), and the text sizes inside the figures on screen
are recorded (artifacts/browser/app_room.json) beside a screenshot of every chapter. Image
chapters (recorded figures as tabs of PNGs: FigureTabs) are checked alike: their first tab's
image is decoded and shown whole inside the window (nothing covers or clips its corners, its
aspect kept), and no tab title is cut.

First visits go in picker order, as a class does, about 1.5 s apart: the app makes the next
chapter in the kernel's idle time PREFETCH_DELAY_S after one opens, so a first visit finds its
chapter made or being made (the first one, and any cold build, must stay within 2 × the bound)."""

from __future__ import annotations

import json
import os
import statistics
import time

import pytest

from .conftest import ARTIFACTS
from .servers import server

playwright = pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.browser

SIZES = [(1280, 720), (1920, 1080)]
SWITCH_S = 1.5            #: a chapter switch, from picking it to its figure drawn (the issue's bound)

#: the layout facts the page reports: picker box, the figure's canvas box and bitmap size, and
#: every control whose text does not fit (labels, buttons, the shown option of a dropdown)
LAYOUT_JS = """() => {
  const box = e => { const b = e.getBoundingClientRect(); return [b.x, b.y, b.width, b.height]; };
  const app = document.querySelector('.flashviz-app');
  const sel = app.querySelector('select');
  const canvases = [...app.querySelectorAll('.jupyter-matplotlib-canvas-div canvas:first-child')]
      .filter(c => c.getBoundingClientRect().width > 0);
  const ctx = document.createElement('canvas').getContext('2d');
  const cut = [];
  for (const e of app.querySelectorAll('.widget-label, .jupyter-button, .widget-readout, .widget-label-basic span, '
                                     + '.lm-TabBar-tabLabel')) {
    if (e.offsetParent !== null && e.scrollWidth > e.clientWidth + 1) cut.push(e.textContent.trim());
  }
  for (const s of app.querySelectorAll('select')) {
    if (s.offsetParent === null || s.selectedIndex < 0) continue;
    const st = getComputedStyle(s);
    ctx.font = `${st.fontSize} ${st.fontFamily}`;
    const text = s.options[s.selectedIndex].text;
    if (ctx.measureText(text).width > s.clientWidth - 18) cut.push(text);
  }
  const images = [...app.querySelectorAll('.flashviz-app-body img')].filter(i => i.getBoundingClientRect().width > 0);
  // an image is shown whole when the element found at each of its corners (2 px inside) is itself
  const whole = i => { const b = i.getBoundingClientRect();
    return [[b.left + 2, b.top + 2], [b.right - 2, b.top + 2], [b.left + 2, b.bottom - 2], [b.right - 2, b.bottom - 2]]
      .every(([x, y]) => document.elementFromPoint(x, y) === i); };
  return {picker: box(sel), canvases: canvases.map(c => ({box: box(c), w: c.width, h: c.height})),
          images: images.map(i => ({box: box(i), w: i.naturalWidth, h: i.naturalHeight, complete: i.complete,
                                    whole: whole(i), fit: getComputedStyle(i).objectFit})),
          caption: app.querySelector('i') ? app.querySelector('i').textContent : '', cut,
          scroll: [document.scrollingElement.scrollHeight, app.querySelector('.flashviz-app-body').scrollHeight,
                   app.querySelector('.flashviz-app-body').clientHeight,
                   Math.max(0, ...[...app.querySelectorAll('.flashviz-app-body > .jupyter-widget-Accordion')]
                     .map(a => a.getBoundingClientRect().height))],
          viewport: [window.innerWidth, window.innerHeight], dpr: window.devicePixelRatio};
}"""


def _text_points(label: str, presenter: bool = False) -> tuple[float, float]:
    """(smallest, median) size in points of the visible texts in the chapter's figure, drawn on
    the CPU the way the app builds it (Agg: the same figure the kernel draws; presenter mode
    builds it at PRESENTER_FIGURE's text scale); for an image chapter, its first tab's figure."""
    import matplotlib
    import numpy as np
    from matplotlib.text import Text

    from flashviz.widgets.app import ChapterApp

    matplotlib.use("Agg")
    app = ChapterApp(label, key=("test_app_room", label, presenter), presenter=presenter, prefetch=False)
    w = app.current[0]
    fig = getattr(w, "fig", None) or w.figure(w.NAMES[0])
    try:
        fig.canvas.draw()
        sizes = [t.get_fontsize() for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()
                 and t.get_window_extent().width > 0]
        return float(min(sizes)), float(np.median(sizes))
    finally:
        if fig is not getattr(w, "fig", None):
            import matplotlib.pyplot as plt
            plt.close(fig)
        app.close()


#: an image of the app's body is shown (laid out) and decoded
SHOWN_IMAGE_JS = ("() => [...document.querySelectorAll('.flashviz-app-body img')].some(m =>"
                  " m.getBoundingClientRect().width > 0 && m.complete && m.naturalWidth > 0)")


def _image_shown(what: str, info: dict, vw: int, vh: int):
    """The image an image chapter shows (``info`` from LAYOUT_JS): decoded, inside the window,
    nothing covering or clipping its corners, scaled into its box keeping its aspect. Returns
    (the image's facts, shown width, shown height) in CSS pixels."""
    assert info["images"], (what, "no figure shown")
    im = info["images"][0]
    ix, iy, iw, ih = im["box"]
    assert im["complete"] and im["w"] > 0, (what, "image not decoded", im)
    assert 0 <= ix and 0 <= iy and iy + ih <= vh + 1 and ix + iw <= vw + 1, (what, "figure not inside the window", im)
    assert im["whole"], (what, "something covers or clips the figure", im)
    assert im["fit"] == "contain", (what, "image aspect not kept", im)      # object-fit: contain
    return (im, *_fit({"box": im["box"], "w": im["w"], "h": im["h"]}))


def _no_scrolling(what, info):
    """The page never scrolls (a trial found chapter 8's presenter page 11 px too tall), and the
    chapter's box scrolls by at most a few pixels (rounding) beyond a folded panel's header: an
    image chapter keeps its figure's full height and leaves its GPU panel's header (about 40 px)
    just under the window, reached by scrolling the chapter (shrinking the figure instead would
    take presenter mode's text below its bound at 1280×720)."""
    page_h, body_h, body_box, fold = info["scroll"]
    assert page_h <= info["viewport"][1] + 1, (what, "the page scrolls", info["scroll"])
    assert body_h <= body_box + fold + 6, (what, "the chapter's box scrolls", info["scroll"])


def _fit(canvas):
    """Where the bitmap lands in its box under object-fit: contain: (shown width, height)."""
    (_, _, bw, bh), w, h = canvas["box"], canvas["w"], canvas["h"]
    s = min(bw / w, bh / h)
    return w * s, h * s


@pytest.mark.parametrize("presenter", [False, True], ids=["app", "presenter"])
def test_every_chapter_fits_the_window(browser, presenter):
    from flashviz.widgets.app import APP_FIGURE, CAPTIONS, PRESENTER_FIGURE, available_chapters

    inches = (PRESENTER_FIGURE if presenter else APP_FIGURE)["figsize"]
    dpi = (PRESENTER_FIGURE if presenter else APP_FIGURE)["dpi"]
    labels = available_chapters()
    tag = "presenter" if presenter else "app"
    report, points = {}, {}
    with server("voila", extra_args=["--presenter"] if presenter else []) as (base, token, _):
        for vw, vh in SIZES:
            page = browser.new_page(viewport={"width": vw, "height": vh})
            errors = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            try:
                page.goto(f"{base}/?token={token}", timeout=120_000)
                page.wait_for_selector(".flashviz-app .jupyter-matplotlib-canvas-div canvas", timeout=120_000)
                time.sleep(2)
                select = page.locator(".flashviz-app select").first
                rows, switch, again = [], [], []

                def pick(n: int, label: str) -> float:
                    """Pick chapter n; seconds until its caption and its figure are shown: a
                    canvas, or for an image chapter its first tab's image, decoded."""
                    return _pick(page, select, n, CAPTIONS[label], errors)

                for n, label in enumerate(labels):
                    if n:
                        switch.append(pick(n, label))
                        time.sleep(1.0)            # the first frame's image lands
                    info = page.evaluate(LAYOUT_JS)
                    page.screenshot(path=str(ARTIFACTS / f"app_{tag}_{vw}x{vh}_{n}.png"))
                    body = page.locator("body").inner_text()
                    assert "could not start" not in body and "Traceback" not in body, (label, body[-300:])
                    assert info["caption"] == CAPTIONS[label]
                    _no_scrolling(label, info)
                    x, y, w, h = info["picker"]
                    assert 0 <= y and y + h <= vh and x + w <= vw, (label, "picker off screen", info["picker"])
                    assert not info["cut"], (label, "cut labels", info["cut"])
                    row = {"chapter": label}
                    if not info["canvases"]:                  # an image chapter: its shown tab's PNG fits, whole
                        im, fw, fh = _image_shown(label, info, vw, vh)
                        px_per_in = fw / (im["w"] / dpi)       # the PNG is inches × dpi pixels
                        if label not in points:
                            points[label] = _text_points(label, presenter)
                        smallest, median = points[label]
                        row.update(kind="image", image_box=[round(v) for v in im["box"]], png=[im["w"], im["h"]],
                                   shown=[round(fw), round(fh)],
                                   shown_px_per_inch=round(px_per_in, 1), smallest_text_pt=smallest,
                                   median_text_pt=median, smallest_text_px=round(smallest * px_per_in / 72, 1),
                                   median_text_px=round(median * px_per_in / 72, 1))
                        # every other tab: drawn when first shown, then shown whole too
                        tabs = page.locator(".flashviz-app-body .lm-TabBar-tab")
                        row["tabs_shown"] = [[round(fw), round(fh)]]
                        for k in range(1, tabs.count()):
                            tabs.nth(k).click()
                            page.wait_for_function(SHOWN_IMAGE_JS, timeout=30_000)
                            time.sleep(0.3)
                            tab = page.evaluate(LAYOUT_JS)
                            _no_scrolling(f"{label}, tab {k}", tab)
                            page.screenshot(path=str(ARTIFACTS / f"app_{tag}_{vw}x{vh}_{n}_tab{k}.png"))
                            assert not tab["cut"], (label, k, "cut labels", tab["cut"])
                            row["tabs_shown"].append([round(v) for v in _image_shown(f"{label}, tab {k}", tab, vw, vh)[1:]])
                        tabs.nth(0).click()
                        page.wait_for_function(SHOWN_IMAGE_JS, timeout=30_000)
                    if info["canvases"]:
                        c = info["canvases"][0]
                        cx, cy, cw, ch = c["box"]
                        assert cy + ch <= vh + 1 and cx + cw <= vw + 1, (label, "figure below the fold", c["box"])
                        fw, fh = _fit(c)
                        # scaled to the window: it fills its box's width or height
                        assert fw >= 0.97 * cw or fh >= 0.97 * ch, (label, c)
                        px_per_in = fw / inches[0] if label != "1 · The memory wall" else fh / inches[1]
                        if label not in points:
                            points[label] = _text_points(label, presenter)
                        smallest, median = points[label]
                        row.update(kind="canvas", canvas_box=[round(v) for v in c["box"]], bitmap=[c["w"], c["h"]],
                                   shown=[round(fw), round(fh)], shown_px_per_inch=round(px_per_in, 1),
                                   smallest_text_pt=smallest, median_text_pt=median,
                                   smallest_text_px=round(smallest * px_per_in / 72, 1),
                                   median_text_px=round(median * px_per_in / 72, 1))
                    if n == 0:                                 # opening the GPU panel keeps the explainer whole
                        row["canvas_h_panel_open"] = _open_fold_keeps_the_figure(page, label)
                    rows.append(row)
                for n, label in enumerate(labels):         # every chapter again: kept, so no drawing
                    again.append(pick(n, label))
                report[f"{vw}x{vh}"] = {"chapters": rows, "first_visit_s": [round(s, 2) for s in switch],
                                        "revisit_s": [round(s, 2) for s in again]}
                # the bound is for this 2-core box alone; a box busy with other work (1-minute load
                # above 2) stretches it in proportion, and the report says so
                load = os.getloadavg()[0]
                bound = SWITCH_S * max(1.0, load / 2)
                report[f"{vw}x{vh}"]["load"] = round(load, 2)
                assert statistics.median(switch) <= bound and max(switch) <= 2 * bound, (switch, load)
                assert max(again) <= bound, (again, load)
                assert not [e for e in errors if "flashviz" in e], errors[:3]
            finally:
                page.close()
    (ARTIFACTS / f"app_room_{tag}.json").write_text(json.dumps(report, indent=1))
    # text inside the figures on screen: at 1920×1080 at least 1.4x what a notebook shows (90 dpi,
    # unscaled: a 7 pt text is 8.75 px there); the sizes reached are in the report
    big = report["1920x1080"]["chapters"][0]
    assert big["median_text_px"] >= 1.4 * big["median_text_pt"] * 90 / 72, big
    if presenter:
        # presenter mode draws every figure text 1.4x larger (at least 9 pt): measured 2026-12-01, the
        # smallest text (tick labels) of every animated chapter is 17-18 px on a 1920×1080 projector
        # and 9.7-10.4 px at 1280×720 (1.3x the plain app's 7.6-8.1 px there: the presenter's controls
        # column is wider, 410 px, for its 20 px labels); the image chapters' first tabs 16.9-17.8 px
        # and 9.6-10.1 px
        for size, least in (("1920x1080", 16.0), ("1280x720", 9.5)):
            for row in report[size]["chapters"]:
                if "smallest_text_px" in row:
                    assert row["smallest_text_pt"] >= 9.0 and row["smallest_text_px"] >= least, (size, row)


#: a pick is done when the page shows the chapter's caption and its figure: a canvas, or for an
#: image chapter its first tab's image, decoded
SHOWN_JS = ("(cap) => { const a = document.querySelector('.flashviz-app');"
            " const i = a.querySelector('i'); if (!i || i.textContent !== cap) return false;"
            " const c = a.querySelector('.jupyter-matplotlib-canvas-div canvas');"
            " if (c && c.getBoundingClientRect().width > 0) return true;"
            " return [...a.querySelectorAll('.flashviz-app-body img')].some(m =>"
            "   m.getBoundingClientRect().width > 0 && m.complete && m.naturalWidth > 0); }")


def _pick(page, select, n: int, caption: str, errors: list | None = None) -> float:
    """Pick chapter n in the picker; seconds until SHOWN_JS holds for its caption. On a timeout the
    failure names what the page shows instead: its text, the page's JavaScript errors (``errors``,
    gathered by the caller) and any widget error's details (revealed by clicking it)."""
    t0 = time.perf_counter()
    select.select_option(index=n)
    try:
        page.wait_for_function(SHOWN_JS, arg=caption, timeout=30_000)
    except Exception:
        # what the page shows instead, for the failure report
        try:
            page.screenshot(path=str(ARTIFACTS / f"app_pick_{n}_failed.png"))
            for shown in page.get_by_text("Click to show javascript error").all():
                shown.click(timeout=2_000)
            text = page.locator("body").inner_text()[-1500:]
        except Exception as exc:        # a crashed page: say so rather than lose the timeout
            text = f"(the page could not be read: {type(exc).__name__})"
        raise AssertionError(f"chapter {n} ({caption!r}) not shown after 30 s; the page says: {text!r}; "
                             f"its JavaScript errors: {errors or []}") from None
    return time.perf_counter() - t0


CANVAS_H_JS = ("() => document.querySelector('.flashviz-app .jupyter-matplotlib-canvas-div canvas')"
               ".getBoundingClientRect().height")


def _open_fold_keeps_the_figure(page, label) -> float:
    """Open the chapter's folded panel (chapter 0: the GPU panel) and close it again: the figure
    keeps its height (the page scrolls to the panel; it once squeezed the figure to 0 px at
    1280×720). Returns the figure's height with the panel open."""
    before = page.evaluate(CANVAS_H_JS)
    header = page.locator(".flashviz-app-body .jupyter-widget-Collapse-header").first
    header.click()
    time.sleep(1.0)
    opened = page.evaluate(CANVAS_H_JS)
    header.click()
    time.sleep(0.5)
    assert opened >= 0.95 * before, (label, "the open panel squeezes the figure", before, opened)
    return round(opened)


COLD_S = 2.0     #: a cold first visit (the chapter made when picked), median; 1.2-1.5 s measured here


def test_cold_first_visits_without_prefetch(browser):
    """``flashviz present --no-prefetch``: every chapter is made when it is picked, as for a jump
    out of order. Cold first visits at 1280×720: median ≤ COLD_S, each ≤ 2 × SWITCH_S (measured on
    this 2-core box 2026-12-01, 11 chapters: 0.73-1.84 s, median 1.46 s; with the in-order prefetch
    off and before the blitters stopped sending a second image after each full draw, CI measured
    medians of 1.54 and 1.64 s). The app variants above check the in-order visits with prefetch."""
    from flashviz.widgets.app import available_chapters

    labels = available_chapters()
    with server("voila", extra_args=["--no-prefetch"]) as (base, token, _):
        page = browser.new_page(viewport={"width": 1280, "height": 720})
        try:
            page.goto(f"{base}/?token={token}", timeout=120_000)
            page.wait_for_selector(".flashviz-app .jupyter-matplotlib-canvas-div canvas", timeout=120_000)
            time.sleep(2)
            select = page.locator(".flashviz-app select").first
            cold = []
            for n, label in enumerate(labels[1:], 1):
                cold.append(_pick(page, select, n, _caption(label)))
                time.sleep(1.5)                # longer than PREFETCH_DELAY_S: a prefetch would have run
            load = os.getloadavg()[0]
            stretch = max(1.0, load / 2)
            (ARTIFACTS / "app_room_cold.json").write_text(json.dumps(
                {"cold_first_visit_s": [round(s, 2) for s in cold], "load": round(load, 2)}, indent=1))
            assert statistics.median(cold) <= COLD_S * stretch and max(cold) <= 2 * SWITCH_S * stretch, (cold, load)
            # really cold: nothing was made ahead. A prefetched first visit takes 0.03-0.26 s here and a cold
            # one 0.29-1.04 s (2026-12-04): the two overlap at the edges, so the median tells them apart
            # (the minimum did not: one fast chapter at 0.29 s failed it)
            assert statistics.median(cold) > 0.3, cold
        finally:
            page.close()


def _caption(label: str) -> str:
    from flashviz.widgets.app import CAPTIONS

    return CAPTIONS[label]
