"""The frame the browser shows is the frame we drew — for every animation widget.

A notebook made for this test shows each FrameWidget and a "dump" button. The browser first
ticks a few "break it" checkboxes (TICK: the widget rebuilds its figure and its run), then fires
fast bursts at each widget (arrow keys on the step slider, Play then Pause at 20 ms a step),
clicks "dump" — the kernel handles comm messages in order, so the click is handled after
the whole burst — until the kernel's steps are the ones the page's sliders show. The test
then reads the pixels the browser's ipympl canvas shows (``canvas.toDataURL``), and only then
asks the kernel ("render") to draw each widget's current frame afresh (a full draw) as the
reference, and compares: a stale or superimposed frame differs in many pixels, the same frame
in none. (The canvas's buffer at the dump is reported beside it: once, in CI, it lacked the
blitted layer while the browser showed the whole frame.)

Skipped when chromium or playwright is missing (.ci/run installs both).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

from .conftest import (
    ARTIFACTS,
    browser_canvas,
    differing,
    frame_widget,
    open_notebook,
    slider_value,
    step_slider,
)
from .servers import CHROMIUM, FLAGS, MAX_DIFF_SHARE, server
from .stress import kernel_death

playwright = pytest.importorskip("playwright.sync_api")
if not Path(CHROMIUM).exists():
    pytest.skip(f"{CHROMIUM} not installed (apt-get install chromium)", allow_module_level=True)

pytestmark = pytest.mark.browser

#: name -> constructor call (small sizes: the test is about frames, not about big runs)
WIDGETS = {
    "tile": "fv.TileExplorer(N=128, d=32, Br=32, Bc=32, source='random', key='t-tile')",
    "online": "fv.OnlineSoftmaxExplorer(N=32, block=8, source='random', key='t-online')",
    "loop": "fv.LoopOrderExplorer(N=128, d=32, Br=32, Bc=32, key='t-loop')",
    "causal": "fv.CausalExplorer(Nq=128, Nk=192, Br=32, Bc=32, key='t-causal')",
    "backward": "fv.BackwardExplorer(N=64, d=32, Br=16, Bc=16, key='t-backward')",
    "blocksize": "fv.BlockSizeExplorer(key='t-blocksize')",
    # 4 splits of 8 key blocks (Nk = 1,024, Bc = 32): 8 run frames, 4 merge frames, the write
    "decode": "fv.DecodeExplorer(Nk=1024, d=16, H_kv=2, Bc=32, num_splits=4, key='t-decode')",
}
#: name -> checkboxes (their labels) the browser ticks before the bursts: the widget rebuilds its
#: figure (another layout, another run), and the frames after that are the ones compared
TICK = {
    "decode": ("break it: merge without rescaling", "break it: tiny pages"),
}


def _notebook(path: Path, out: Path) -> None:
    import nbformat
    nb = nbformat.v4.new_notebook()
    # faulthandler: a crash of the kernel prints every thread's Python stack to the server's log
    # (the kernel's fd 2: servers.py keeps ipykernel from capturing it)
    cells = ["import faulthandler, sys\nfaulthandler.enable(file=sys.__stderr__, all_threads=True)\n"
             "%matplotlib widget\nimport json, numpy as np, ipywidgets as W\nfrom PIL import Image\n"
             "import flashviz as fv\nfrom flashviz.views.drawlock import DRAW_LOCK\nws = {}"]
    for name, make in WIDGETS.items():
        cells.append(f"ws[{name!r}] = {make}\nws[{name!r}]")
    cells.append(
        # both read and draw the canvases under flashviz's drawing lock, as every draw must
        # (views/drawlock.py): ipympl's messages draw the same figures on another thread (without
        # it, a JupyterLab run once got a nearly blank "fresh draw" of the TileExplorer)
        "def dump(_=None):\n"
        "    info = {}\n"
        "    for name, w in ws.items():\n"
        "        with DRAW_LOCK:\n"
        "            buf = np.asarray(w.fig.canvas.buffer_rgba()).copy()\n"
        f"        Image.fromarray(buf).save({str(out)!r} + f'/{{name}}.png')\n"
        "        info[name] = int(w.frame.value)\n"
        "    checked = {name: sorted(c.description for c in w.controls if isinstance(c, W.Checkbox) and c.value)\n"
        "               for name, w in ws.items()}\n"
        f"    open({str(out)!r} + '/checked.json', 'w').write(json.dumps(checked))\n"
        f"    open({str(out)!r} + '/frames.json', 'w').write(json.dumps(info))\n"
        "def render(_=None):\n"
        "    for name, w in ws.items():\n"
        "        with DRAW_LOCK:\n"
        "            w.fig.canvas.draw()\n"
        "            buf = np.asarray(w.fig.canvas.buffer_rgba()).copy()\n"
        f"        Image.fromarray(buf).save({str(out)!r} + f'/{{name}}_full.png')\n"
        f"    open({str(out)!r} + '/rendered.json', 'w').write('{{}}')\n"
        "button = W.Button(description='dump')\nbutton.on_click(dump)\n"
        "again = W.Button(description='render')\nagain.on_click(render)\nW.HBox([button, again])")
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, str(path))


def _burst(page, i: int) -> None:
    out = frame_widget(page, i)
    out.scroll_into_view_if_needed()
    step = step_slider(page, i)
    handle = step.locator(".noUi-handle").first
    handle.focus()
    for key in ["ArrowRight"] * 7 + ["ArrowLeft"] * 2 + ["ArrowRight"] * 5:
        page.keyboard.press(key, delay=0)
    speed = out.locator(".widget-hslider", has=page.locator(".widget-label", has_text="ms/step")).first
    speed.locator(".noUi-handle").first.focus()
    page.keyboard.press("Home")                         # 20 ms a step
    play = out.locator(".widget-play button").first
    play.click()
    time.sleep(1.2)
    play.click()                                        # pause
    handle.focus()
    for key in ["ArrowLeft"] * 3 + ["End"] + ["ArrowLeft"] * 4:
        page.keyboard.press(key, delay=0)


def _tick(page, i: int, label: str) -> None:
    """Tick the i-th FrameWidget's checkbox whose label is ``label``."""
    box = page.locator(".flashviz-frame-widget").nth(i).locator(".widget-checkbox", has_text=label).first
    box.scroll_into_view_if_needed()
    tick = box.locator("input[type=checkbox]").first
    assert not tick.is_checked(), f"{label!r} is ticked already"
    tick.click()


def _dump(dump, out: Path, deadline: float) -> dict:
    """Click "dump" and wait for the kernel's frames (it handles the page's messages in order:
    everything sent before the click is done when it writes them)."""
    (out / "frames.json").unlink(missing_ok=True)
    dump.click()
    while not (out / "frames.json").exists():
        assert time.time() < deadline, "the kernel never wrote its frames"
        time.sleep(0.5)
    time.sleep(1)
    return json.loads((out / "frames.json").read_text())


def _compare(page, out: Path, front_end: str) -> None:
    """Tick the TICK checkboxes, burst every widget, dump the kernel's frames, compare with what
    the page shows."""
    from PIL import Image
    dump = page.locator("button", has_text="dump").first
    dump.wait_for(timeout=240_000)
    page.wait_for_function(f"document.querySelectorAll('.flashviz-frame-widget').length >= {len(WIDGETS)}",
                           timeout=120_000)
    time.sleep(3)
    names = list(WIDGETS)
    for name, labels in TICK.items():
        for label in labels:
            _tick(page, names.index(name), label)
    _dump(dump, out, time.time() + 120)                 # the kernel has rebuilt the ticked widgets
    checked = json.loads((out / "checked.json").read_text())
    for name, labels in TICK.items():                   # the kernel's checkboxes say so too
        assert all(any(c.startswith(label) for c in checked[name]) for label in labels), (name, checked[name])
    for i in range(len(WIDGETS)):
        _burst(page, i)
    # The front end holds back widget updates while messages are pending, so a click can reach
    # the kernel before the last slider value: dump until the kernel's frames are the ones the
    # page's sliders show, then compare pictures.
    deadline = time.time() + 120
    while True:
        frames = _dump(dump, out, deadline)
        shown_steps = {name: slider_value(page, i) for i, name in enumerate(WIDGETS)}
        if shown_steps == frames:
            break
        assert time.time() < deadline, f"the kernel's frames {frames} never matched the page's {shown_steps}"
        time.sleep(2)
    time.sleep(4)                     # the last images reach the browser and load
    frames = json.loads((out / "frames.json").read_text())
    shown = {name: browser_canvas(page, i) for i, name in enumerate(WIDGETS)}
    # The reference: the kernel draws each widget's current frame afresh (a full draw: the
    # static figure, then the blitted layers), after the browser's pictures were taken.
    page.locator("button", has_text="render").first.click()
    deadline = time.time() + 120
    while not (out / "rendered.json").exists():
        assert time.time() < deadline, "the kernel never rendered its frames"
        time.sleep(0.5)
    time.sleep(1)
    report = {}
    for name in WIDGETS:
        drawn = np.asarray(Image.open(out / f"{name}_full.png").convert("RGBA"))
        buffer = np.asarray(Image.open(out / f"{name}.png").convert("RGBA"))
        Image.fromarray(shown[name]).save(ARTIFACTS / f"frames_{front_end}_{name}_browser.png")
        Image.fromarray(drawn).save(ARTIFACTS / f"frames_{front_end}_{name}_kernel.png")
        assert shown[name].shape == drawn.shape, (name, shown[name].shape, drawn.shape)
        bad = differing(shown[name], drawn)
        # beside it: how far the canvas's buffer at the dump was from the fresh drawing
        buffer_bad = differing(buffer, drawn)
        report[name] = {"frame": frames[name], "diff_share": float(bad.mean()),
                        "buffer_diff_share": float(buffer_bad.mean())}
    (ARTIFACTS / f"frames_{front_end}_report.json").write_text(json.dumps(report, indent=1))
    wrong = {k: v for k, v in report.items() if v["diff_share"] > MAX_DIFF_SHARE}
    assert not wrong, f"{front_end}: the browser shows another picture than the kernel drew: {wrong}"


def _prepare(work: Path) -> None:
    out = work / "frames-out"
    out.mkdir(exist_ok=True)
    _notebook(work / "notebooks" / "frames_test.ipynb", out)


def _run(front_end: str) -> None:
    """The comparison on a fresh server. A kernel that dies on the way fails the test, named by
    what it wrote to its stderr (the server's log: glibc, faulthandler, a signal) or the server's
    restart note (tests.browser.stress.kernel_death)."""
    kind = "lab" if front_end == "lab" else "voila-notebook"
    with server(kind, notebook="frames_test.ipynb", prepare=_prepare) as (base, token, work):
        log = work.parent / "server.log"
        with playwright.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
            page = browser.new_page(viewport={"width": 1500, "height": 1100})
            try:
                open_notebook(page, base, token, front_end, "frames_test.ipynb")
                _compare(page, work / "frames-out", front_end)
            except Exception as exc:
                death = kernel_death(log.read_text(errors="replace"))
                if death is None:
                    raise
                (ARTIFACTS / f"frames_{front_end}_kernel_death.txt").write_text(death)
                raise AssertionError(f"the {front_end} kernel died during the frame bursts; its log:\n{death}") from exc
            finally:
                try:                    # a crashed page cannot be photographed: keep the first error
                    page.screenshot(path=str(ARTIFACTS / f"frames_{front_end}_page.png"))
                except Exception:
                    pass
                browser.close()
        death = kernel_death(log.read_text(errors="replace"))
        assert death is None, f"the {front_end} kernel died during the frame bursts (and was restarted); its log:\n{death}"


@pytest.mark.parametrize("front_end", ["lab", "voila"])
def test_the_browser_shows_the_frame_the_kernel_drew(front_end):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    _run(front_end)
