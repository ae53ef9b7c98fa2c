"""Every figure fits on a laptop (issue 20, item 3): each chapter notebook (notebooks/[0-9]*.ipynb,
all cells run) in JupyterLab at 1366×768 and 1400×900 with the file browser open (the default
layout), each chapter notebook as Voilà renders it, and the app (``flashviz present``): no canvas,
image or widget box reaches past the right edge of its output area or is clipped by a box that
hides overflow, no output area scrolls sideways, and the smallest text of every figure is at
least MIN_TEXT_PX CSS pixels on screen. In the notebooks, every flashviz widget's box (its
controls and its figure) is at most the height of the notebook shown at once (JupyterLab's
scrolling notebook, Voilà's window) less HEIGHT_SLACK_PX: a student who presses Play sees the
controls and the whole figure. Bare figures (no controls) are measured, not checked.

How they fit in height (flashviz.views.style.FIT_HEIGHT_PX): JupyterLab shows 647 px of notebook
at 1366×768 (779 px at 1400×900). Measured before (2026-12-05, 1366×768): the widgets were
744 px (TileExplorer, OnlineSoftmaxExplorer, CausalExplorer, BackwardExplorer), 768 px
(BlockSizeExplorer, LoopOrderExplorer), 796 px (TimelineExplorer) and 804 px (DecodeExplorer)
tall, their figures 571 px; after, 605-636 px (figures 11 × 5.25 in, 441 px; decode's and the
timeline's 11 × 5 in, 420 px), with status lines at text height (flashviz.widgets.lines).

How they fit (flashviz.views.style): a notebook's figures are drawn at most FIT_WIDTH_PX = 924 px
wide (widgets at NOTEBOOK_DPI = 84, view figures at ``fit_dpi``), inside JupyterLab's 934 px output
area beside the file browser at 1366×768; the app scales its bitmaps into the window. Measured
before that (2026-12-02): the explorers' 990 px canvases ran 26 px past the output area at
1400×900 and 56 px at 1366×768, chapter 7's 1000 px figures 36 / 66 px, chapter 8's 1100-1150 px
figures 136-186 / 166-216 px (its 940 px one 10 px at 1366); the app's canvases 4 px past the
window, and its image chapters' smallest texts 7.55 px (chapter 7) and 7.94 px (chapter 8) at
1366×768.

The text size on screen is the figure's smallest drawn font (points, read from the kernel) ×
its dpi / 72 × the width the browser shows it at / its width in pixels. A probe cell appended to
each notebook's copy reads the sizes of every open figure in the kernel, tags its ipympl canvas
with the DOM class ``fvfit-<figure number>`` and prints them (one JSON line); the app's figures
are drawn on the CPU as the app makes them.

Servers, one at a time: the app's, then one JupyterLab server that runs every notebook once in
one page (its app exposed to the page: no reload per notebook), measured at both sizes (the
viewport is resized), and whose Voilà server extension renders every notebook again. About 3.5
minutes on a 2-core box. Screenshots (the widest figure scrolled into view; at 1366×768 also each
widget scrolled to the top) and a report (with every widget's height and the visible height) go
to artifacts/browser/fit_*.png and fit.json.

Skipped when chromium or playwright is missing (.ci/run installs both).
"""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import pytest

from .conftest import ARTIFACTS
from .servers import CHROMIUM, ROOT, server

playwright = pytest.importorskip("playwright.sync_api")
if not Path(CHROMIUM).exists():
    pytest.skip(f"{CHROMIUM} not installed (apt-get install chromium)", allow_module_level=True)

pytestmark = pytest.mark.browser

#: the chapter notebooks (app.ipynb is the app's page: checked as the app, below)
NOTEBOOKS = sorted(p.name for p in (ROOT / "notebooks").glob("[0-9]*.ipynb"))
#: (width, height) of the window; the first is measured first (the notebook runs at it)
SIZES = [(1400, 900), (1366, 768)]
MIN_TEXT_PX = 8.0        #: the smallest figure text on screen, CSS pixels
SLACK_PX = 1.0           #: subpixel rounding allowed at an edge
#: a widget box (its controls and its figure) is at most the visible notebook's height less this,
#: CSS pixels: the room to scroll it into view with a little of the cell above or below showing
HEIGHT_SLACK_PX = 10

#: appended to each notebook's copy: the kernel-side facts of every open figure, and a DOM class
#: on its ipympl canvas (``fvfit-<n>``) so the browser can find it
PROBE = r'''
import json as _fv_json
import matplotlib.pyplot as _fv_plt
from matplotlib.text import Text as _FvText

def _fv_texts(a):
    if not a.get_visible():
        return
    if isinstance(a, _FvText) and a.get_text().strip():
        yield a
    for c in a.get_children():
        yield from _fv_texts(c)

_fv_figs = {}
for _fv_n in _fv_plt.get_fignums():
    _fv_f = _fv_plt.figure(_fv_n)
    if not hasattr(_fv_f.canvas, "add_class"):
        continue
    _fv_f.canvas.add_class(f"fvfit-{_fv_n}")
    _fv_sizes = [t.get_fontsize() for t in _fv_texts(_fv_f)]
    _fv_figs[_fv_n] = [_fv_f.bbox.width, _fv_f.dpi, min(_fv_sizes) if _fv_sizes else None]

import gc as _fv_gc
import ipywidgets as _FvW
for _fv_o in _fv_gc.get_objects():             # every flashviz widget's box, tagged with its class's name
    try:
        if type(_fv_o).__module__.startswith("flashviz.widgets") and isinstance(_fv_o.__dict__.get("widget"), _FvW.DOMWidget):
            _fv_o.widget.add_class(f"fvbox-{type(_fv_o).__name__}")
    except Exception:
        pass
print("FVFIT " + _fv_json.dumps(_fv_figs))
'''


def _add_probe(work: Path) -> None:
    """Append PROBE to every notebook of the work folder's copy, and unpair the copies from
    their .md twins (jupytext would refuse a notebook newer than its twin)."""
    import nbformat

    for twin in [*(work / "notebooks").glob("*.md"), work / "notebooks" / "jupytext.toml"]:
        twin.unlink(missing_ok=True)
    for path in (work / "notebooks").glob("*.ipynb"):
        nb = nbformat.read(path, as_version=4)
        nb.cells.append(nbformat.v4.new_code_cell(PROBE))
        nbformat.write(nb, path)


#: what the page shows, measured: every output area (lab: of the visible notebook) with its
#: canvases, images and widget boxes that reach past its right edge or are clipped by a box that
#: hides overflow, the output areas that scroll sideways, and every tagged canvas's shown width
MEASURE_JS = """(root) => {
  const shown = e => { const b = e.getBoundingClientRect(); return b.width > 0 && b.height > 0; };
  const name = e => (e.tagName.toLowerCase() + '.' + [...e.classList].slice(0, 3).join('.')).slice(0, 90);
  const out = {areas: 0, cut: [], clipped: [], scrolls: [], figures: {}, widest: 0, area_w: [], boxes: []};
  for (const area of document.querySelectorAll(root + ' .jp-OutputArea-output')) {
    if (!shown(area)) continue;
    out.areas += 1;
    const a = area.getBoundingClientRect();
    const right = a.left + area.clientLeft + area.clientWidth;
    out.area_w.push(Math.round(area.clientWidth));
    if (area.scrollWidth > area.clientWidth + 1) out.scrolls.push([name(area), area.scrollWidth, area.clientWidth]);
    const els = area.querySelectorAll('.jupyter-matplotlib-canvas-div > canvas:first-child, img, .jupyter-widgets');
    for (const e of els) {
      if (!shown(e)) continue;
      // ipympl's own boxes (its footer is 2 px wider than its figure, always) count through its canvas
      if (e.tagName !== 'CANVAS' && e.closest('.jupyter-matplotlib-figure')) continue;
      const b = e.getBoundingClientRect();
      if (e.tagName === 'CANVAS' || e.tagName === 'IMG') out.widest = Math.max(out.widest, b.right - a.left);
      if (b.right > right + SLACK) out.cut.push([name(e), Math.round(b.width), Math.round(b.right - right)]);
      for (let p = e.parentElement; p && p !== area.parentElement; p = p.parentElement) {
        if (getComputedStyle(p).overflowX === 'visible') continue;
        const pb = p.getBoundingClientRect();
        const pr = pb.left + p.clientLeft + p.clientWidth;
        if (b.right > pr + SLACK) { out.clipped.push([name(e), name(p), Math.round(b.right - pr)]); break; }
      }
    }
    for (const c of area.querySelectorAll('[class*="fvfit-"]')) {
      const n = [...c.classList].find(k => k.startsWith('fvfit-')).slice(6);
      const cv = c.querySelector('.jupyter-matplotlib-canvas-div > canvas');
      if (cv && shown(cv)) out.figures[n] = cv.getBoundingClientRect().width;
    }
    // the outermost widget boxes of the area that show a figure: [flashviz widget class (null: a
    // bare figure), height, figure height]
    for (const e of area.querySelectorAll('.jupyter-widgets')) {
      const up = e.parentElement.closest('.jupyter-widgets');
      if ((up && area.contains(up) && up !== area) || !shown(e)) continue;
      const figs = [...e.querySelectorAll('.jupyter-matplotlib-canvas-div > canvas:first-child, img')].filter(shown);
      if (!figs.length) continue;
      const tag = [...e.classList].find(k => k.startsWith('fvbox-'));
      out.boxes.push([tag ? tag.slice(6) : null, Math.round(e.getBoundingClientRect().height),
                      Math.round(Math.max(...figs.map(f => f.getBoundingClientRect().height)))]);
    }
  }
  // the height of the visible notebook: its scrolling box (JupyterLab's notebook), else the window (Voila)
  const first = document.querySelector(root + ' .jp-OutputArea-output');
  out.visible_h = document.documentElement.clientHeight;
  for (let p = first && first.parentElement; p && p !== document.body; p = p.parentElement) {
    const oy = getComputedStyle(p).overflowY;
    if ((oy === 'auto' || oy === 'scroll') && p.scrollHeight > p.clientHeight + 1) { out.visible_h = p.clientHeight; break; }
  }
  return out;
}""".replace("SLACK", str(SLACK_PX))

#: the widest figure (canvas or image) of the page scrolled into view, for the screenshot
SCROLL_WIDEST_JS = """(root) => {
  let best = null, w = 0;
  for (const e of document.querySelectorAll(root + ' .jupyter-matplotlib-canvas-div > canvas:first-child, '
                                            + root + ' .jp-OutputArea-output img')) {
    const b = e.getBoundingClientRect();
    if (b.width > w) { w = b.width; best = e; }
  }
  if (best) best.scrollIntoView({block: 'center'});
  return w;
}"""


#: the n-th flashviz widget box of the page scrolled to the top of its scrolling box, for the
#: screenshot of what a student sees of it; its class name, or null when there is no n-th
SCROLL_WIDGET_JS = """([root, n]) => {
  const e = [...document.querySelectorAll(root + ' [class*="fvbox-"]')][n];
  if (!e) return null;
  e.scrollIntoView({block: 'start'});
  return [...e.classList].find(k => k.startsWith('fvbox-')).slice(6);
}"""


def _probe_facts(text: str) -> dict:
    """{figure number: (width px, dpi, smallest font pt)} from the probe's printed line."""
    for line in text.splitlines():
        if line.startswith("FVFIT "):
            return {k: tuple(v) for k, v in json.loads(line[6:]).items()}
    return {}


def _check(where: str, m: dict, facts: dict, report: dict, heights: bool = True) -> list:
    """The faults of one measurement; records the text sizes shown, the visible height of the
    notebook and the height of every widget box with a figure in ``report``. ``heights``: a
    widget box taller than the visible notebook (less HEIGHT_SLACK_PX) is a fault."""
    faults = []
    if m["cut"]:
        faults.append(f"{where}: past the output area's right edge [element, width, px past]: {m['cut'][:4]}")
    if m["clipped"]:
        faults.append(f"{where}: clipped [element, clipping box, px hidden]: {m['clipped'][:4]}")
    if m["scrolls"]:
        faults.append(f"{where}: an output area scrolls sideways: {m['scrolls'][:3]}")
    texts = {}
    for n, (width, dpi, smallest) in facts.items():
        shown = m["figures"].get(n)
        if shown is None or smallest is None:
            continue
        px = smallest * dpi / 72 * shown / width
        texts[n] = {"figure_px": round(width), "shown_px": round(shown, 1), "smallest_pt": smallest,
                    "smallest_text_px": round(px, 2)}
        if px < MIN_TEXT_PX:
            faults.append(f"{where}: figure {n}'s smallest text is {px:.2f} px on screen ({smallest} pt at {dpi:g} dpi, "
                          f"{width:.0f} px shown at {shown:.0f})")
    if heights:
        for box, height, figure in m["boxes"]:
            if box and height > m["visible_h"] - HEIGHT_SLACK_PX:
                faults.append(f"{where}: {box} is {height} px tall (its figure {figure} px): more than the "
                              f"{m['visible_h']} px of notebook a student sees at once, less {HEIGHT_SLACK_PX} px")
    report[where] = {"output_area_px": max(m["area_w"], default=0), "widest_figure_px": round(m["widest"]),
                     "cut": m["cut"], "clipped": m["clipped"], "texts": texts, "visible_px": m["visible_h"],
                     "widgets": [{"widget": box or "figure", "height_px": height, "figure_px": figure}
                                 for box, height, figure in m["boxes"]]}
    return faults


LAB_NB = ".jp-NotebookPanel:not(.lm-mod-hidden)"


#: open a notebook in the JupyterLab page (its app exposed: --expose-app-in-browser) and run all
#: its cells; the panel is kept as window._fvPanel
LAB_OPEN_RUN_JS = """async (path) => {
  const app = window.jupyterapp;
  await app.restored;
  const panel = await app.commands.execute('docmanager:open', {path, factory: 'Notebook'});
  window._fvPanel = panel;
  await panel.context.ready;
  await panel.sessionContext.ready;
  app.shell.activateById(panel.id);
  await app.commands.execute('notebook:run-all-cells');
  return panel.id;
}"""
#: the notebook ran to its end: the probe printed, no cell running or queued
LAB_DONE_JS = """() => { const nb = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook');
  if (!nb || !nb.innerText.includes('FVFIT ')) return false;
  return ![...nb.querySelectorAll('.jp-InputArea-prompt')].some(p => p.textContent.includes('*')); }"""
#: close the notebook without a dialog, shutting its kernel down
LAB_CLOSE_JS = """async () => { const p = window._fvPanel; if (!p) return;
  try { await p.sessionContext.shutdown(); } catch (e) {} p.dispose(); window._fvPanel = null; }"""


def _lab_run(page, name: str) -> None:
    """Open notebooks/<name> in the JupyterLab page and run all its cells, to the probe's line."""
    page.evaluate(LAB_OPEN_RUN_JS, f"notebooks/{name}")
    page.wait_for_function(LAB_DONE_JS, timeout=180_000, polling=500)
    time.sleep(1.0)          # the last widgets render and their first frames land


def _file_browser_open(page) -> bool:
    """Open JupyterLab's file browser if it is not (the default layout shows it)."""
    fb = page.locator("#filebrowser")
    if fb.count() and fb.first.is_visible():
        return True
    page.locator(".jp-SideBar.jp-mod-left .lm-TabBar-tab[data-id='filebrowser']").first.click()
    time.sleep(0.5)
    return page.locator("#filebrowser").first.is_visible()


def _dismiss_news(page) -> None:
    """Answer JupyterLab's "notified about official Jupyter news?" toast (it covers the bottom
    right of the screenshots); nothing when it has not come."""
    try:
        page.locator(".jp-toast-button, .Toastify__toast button", has_text="No").first.click(timeout=4_000)
    except Exception:
        pass


def _shut_kernels(base: str, token: str) -> None:
    """Shut down every kernel of the server (one notebook's kernel per page)."""
    for k in json.loads(urllib.request.urlopen(f"{base}/api/kernels?token={token}", timeout=10).read()):
        req = urllib.request.Request(f"{base}/api/kernels/{k['id']}?token={token}", method="DELETE")
        try:
            urllib.request.urlopen(req, timeout=10)
        except Exception:
            pass


def _shots(page, root: str, tag: str, size) -> None:
    """fit_<tag>_<size>.png: the widest figure in view; at the smallest size also
    fit_<tag>_<n>_<widget>_<size>.png: each flashviz widget scrolled to the top."""
    if size == min(SIZES, key=lambda s: s[1]):
        for n in range(20):
            kind = page.evaluate(SCROLL_WIDGET_JS, [root, n])
            if kind is None:
                break
            time.sleep(0.3)
            page.screenshot(path=str(ARTIFACTS / f"fit_{tag}_{n}_{kind}_{size[0]}x{size[1]}.png"))
    page.evaluate(SCROLL_WIDEST_JS, root)
    time.sleep(0.3)
    page.screenshot(path=str(ARTIFACTS / f"fit_{tag}_{size[0]}x{size[1]}.png"))


def _write(report: dict, part: str) -> None:
    path = ARTIFACTS / "fit.json"
    old = json.loads(path.read_text()) if path.exists() else {}
    old[part] = report
    path.write_text(json.dumps(old, indent=1))


#: the app's figure: the canvas or image shown, its box and its bitmap's size (CSS pixels), and
#: its caption. The app scales the bitmap into its box keeping its aspect (object-fit: contain)
APP_JS = """() => {
  const app = document.querySelector('.flashviz-app');
  const cap = app.querySelector('.flashviz-app-caption');
  const ratio = window.devicePixelRatio || 1;
  const out = {caption: cap ? cap.textContent : '', figures: []};
  for (const e of app.querySelectorAll('.jupyter-matplotlib-canvas-div > canvas:first-child, .flashviz-app-body img')) {
    const b = e.getBoundingClientRect();
    if (b.width === 0 || b.height === 0) continue;
    const img = e.tagName === 'IMG';
    out.figures.push({img, box: [b.left, b.top, b.width, b.height], right: b.right,
                      w: img ? e.naturalWidth : e.width / ratio, h: img ? e.naturalHeight : e.height / ratio});
  }
  return out;
}"""


def _app_smallest_pt(label: str) -> float:
    """The smallest drawn text, in points, of the figure the app shows first for chapter ``label``
    (Agg, made as the app makes it; an image chapter: its first tab's figure)."""
    import matplotlib
    import matplotlib.pyplot as plt

    from flashviz.widgets.app import ChapterApp

    matplotlib.use("Agg")
    app = ChapterApp(label, key=("test_fit", label), prefetch=False)
    w = next(w for w in app.current if getattr(w, "fig", None) is not None or hasattr(w, "NAMES"))
    fig = getattr(w, "fig", None) or w.figure(w.NAMES[0])
    try:
        fig.canvas.draw()
        return min(t.get_fontsize() for t in _drawn_texts(fig))
    finally:
        if fig is not getattr(w, "fig", None):
            plt.close(fig)
        app.close()


def _drawn_texts(artist):
    from matplotlib.text import Text

    if not artist.get_visible():
        return
    if isinstance(artist, Text) and artist.get_text().strip():
        yield artist
    for c in artist.get_children():
        yield from _drawn_texts(c)


def test_the_app_fits(browser):
    """The app (``flashviz present``) at both sizes: every chapter's figure inside the window,
    nothing cut, and its smallest text at least MIN_TEXT_PX on screen."""
    from flashviz.widgets.app import APP_FIGURE, CAPTIONS, available_chapters

    t0 = time.time()
    labels = available_chapters()
    smallest = {label: _app_smallest_pt(label) for label in labels}
    faults, report = [], {}
    with server("voila") as (base, token, _):
        page = browser.new_page(viewport={"width": SIZES[0][0], "height": SIZES[0][1]})
        try:
            page.goto(f"{base}/?token={token}", timeout=120_000)
            page.wait_for_selector(".flashviz-app .jupyter-matplotlib-canvas-div canvas", timeout=120_000)
            select = page.locator(".flashviz-app select").first
            for n, label in enumerate(labels):
                page.set_viewport_size({"width": SIZES[0][0], "height": SIZES[0][1]})
                if n:
                    select.select_option(index=n)
                page.wait_for_function(
                    "(cap) => { const a = document.querySelector('.flashviz-app');"
                    " const c = a.querySelector('.flashviz-app-caption');"
                    " return c && c.textContent === cap && [...a.querySelectorAll("
                    "'.jupyter-matplotlib-canvas-div > canvas, .flashviz-app-body img')].some(e =>"
                    " e.getBoundingClientRect().width > 0 && (e.tagName !== 'IMG' || e.naturalWidth > 0)); }",
                    arg=CAPTIONS[label], timeout=60_000)
                time.sleep(0.8)
                for size in SIZES:
                    page.set_viewport_size({"width": size[0], "height": size[1]})
                    time.sleep(0.5)
                    where = f"app {size[0]}x{size[1]} {n}"
                    faults += _check(where, page.evaluate(MEASURE_JS, "body"), {}, report, heights=False)
                    info = page.evaluate(APP_JS)
                    assert info["figures"], (where, "no figure shown")
                    f = info["figures"][0]
                    _, _, bw, bh = f["box"]
                    scale = min(bw / f["w"], bh / f["h"])              # object-fit: contain
                    px = smallest[label] * APP_FIGURE["dpi"] / 72 * scale
                    report[where]["texts"] = {"app": {"bitmap_px": [round(f["w"]), round(f["h"])],
                                                      "shown_px": round(f["w"] * scale, 1),
                                                      "smallest_pt": smallest[label],
                                                      "smallest_text_px": round(px, 2)}}
                    if f["right"] > size[0] + SLACK_PX:
                        faults.append(f"{where}: the figure ends {f['right'] - size[0]:.0f} px right of the window")
                    if px < MIN_TEXT_PX:
                        faults.append(f"{where} ({label}): smallest text {px:.2f} px on screen "
                                      f"({smallest[label]} pt at {APP_FIGURE['dpi']} dpi, scaled {scale:.2f})")
                    page.screenshot(path=str(ARTIFACTS / f"fit_app_{size[0]}x{size[1]}_{n}.png"))
        finally:
            page.close()
    report["seconds"] = round(time.time() - t0, 1)
    _write(report, "app")
    assert not faults, "\n".join(faults)


@pytest.fixture(scope="module")
def lab():
    """One JupyterLab server for the module (its Voilà server extension renders the notebooks
    too), serving the notebooks' copies with PROBE appended; its app is exposed to the page, so
    one page opens every notebook in turn (no reload of JupyterLab for each)."""
    with server("lab", prepare=_add_probe, extra_args=["--LabApp.expose_app_in_browser=True"]) as s:
        yield s


def test_notebooks_fit_jupyterlab_with_the_file_browser_open(browser, lab):
    base, token, _ = lab
    t0 = time.time()
    faults, report = [], {}
    page = browser.new_page(viewport={"width": SIZES[0][0], "height": SIZES[0][1]})
    try:
        # ?reset: the default layout (the file browser open), nothing else open
        page.goto(f"{base}/lab?reset&token={token}")
        page.wait_for_function("() => window.jupyterapp !== undefined", timeout=60_000)
        page.wait_for_selector("#filebrowser", timeout=60_000)
        _dismiss_news(page)
        for name in NOTEBOOKS:
            stem = Path(name).stem
            t1 = time.time()
            page.set_viewport_size({"width": SIZES[0][0], "height": SIZES[0][1]})
            _lab_run(page, name)
            facts = _probe_facts(page.locator(LAB_NB).inner_text())
            assert facts, (name, "the probe found no figure")
            for size in SIZES:
                page.set_viewport_size({"width": size[0], "height": size[1]})
                time.sleep(0.5)
                assert _file_browser_open(page), "the file browser is not open"
                where = f"lab {size[0]}x{size[1]} {stem}"
                faults += _check(where, page.evaluate(MEASURE_JS, LAB_NB), facts, report)
                _shots(page, LAB_NB, f"lab_{stem}", size)
            page.evaluate(LAB_CLOSE_JS)
            report[f"lab {SIZES[0][0]}x{SIZES[0][1]} {stem}"]["seconds"] = round(time.time() - t1, 1)
        _shut_kernels(base, token)
    finally:
        page.close()
    report["seconds"] = round(time.time() - t0, 1)
    _write(report, "lab")
    assert not faults, "\n".join(faults)


def test_notebooks_fit_voila(browser, lab):
    """Every chapter notebook as Voilà renders it (the server's Voilà extension: the page a class
    sees with ``voila notebooks/NN.ipynb``), at both sizes."""
    base, token, _ = lab
    t0 = time.time()
    faults, report = [], {}
    page = browser.new_page(viewport={"width": SIZES[0][0], "height": SIZES[0][1]})
    try:
        for name in NOTEBOOKS:
            stem = Path(name).stem
            t1 = time.time()
            page.set_viewport_size({"width": SIZES[0][0], "height": SIZES[0][1]})
            page.goto(f"{base}/voila/render/notebooks/{name}?token={token}", timeout=180_000)
            page.wait_for_function("() => document.body.innerText.includes('FVFIT ')", timeout=180_000)
            page.wait_for_function("() => !document.body.innerText.includes('Loading widget')", timeout=60_000)
            time.sleep(1.0)
            facts = _probe_facts(page.locator("body").inner_text())
            assert facts, (name, "the probe found no figure")
            for size in SIZES:
                page.set_viewport_size({"width": size[0], "height": size[1]})
                time.sleep(0.4)
                where = f"voila {size[0]}x{size[1]} {stem}"
                m = page.evaluate(MEASURE_JS, "body")
                assert m["areas"], (where, "no output area found")
                faults += _check(where, m, facts, report)
                _shots(page, "body", f"voila_{stem}", size)
            page.goto("about:blank")
            _shut_kernels(base, token)
            report[f"voila {SIZES[0][0]}x{SIZES[0][1]} {stem}"]["seconds"] = round(time.time() - t1, 1)
    finally:
        page.close()
    report["seconds"] = round(time.time() - t0, 1)
    _write(report, "voila")
    assert not faults, "\n".join(faults)
