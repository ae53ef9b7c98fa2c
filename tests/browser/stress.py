"""Stress the animated widgets in a real browser at full speed; count kernel deaths and mixed frames.

    python -m tests.browser.stress --front-end lab|voila --bursts N --out FILE [--root DIR]

DIR is the checkout whose notebooks are served (default this one); the kernel imports flashviz
from the server's environment, so to stress an older commit make a worktree of it and run with
``PYTHONPATH=<worktree>`` (the record names the flashviz the kernel imported, and DIR's commit).

What it does (issue 20):
* serves a notebook made for the run (tests.browser.servers: JupyterLab with its default
  settings — ``commsOverSubshells`` is ``perCommTarget`` — or Voilà) that shows the online-softmax
  explorer of chapter 2 (where the kernel died), TileExplorer, BackwardExplorer, CausalExplorer,
  LoopOrderExplorer and DecodeExplorer at small sizes;
* fires bursts at one widget at a time (the online-softmax explorer first, then in turn), each
  at full speed: ~90 ◀/▶ clicks, ~70 arrow keys on the step slider, ~10 drags of the slider that
  rebuilds the run (CONFIG_SLIDER: the block size, "block" or "Br"; DecodeExplorer's "splits"),
  ~20 Play/Pause toggles at 20 ms a step, ~15 ▶ clicks;
* **deaths**: after each burst (and while waiting for the kernel) it reads the server's log,
  where the kernel's own stderr goes (servers.py turns ipykernel's fd capture off): glibc's heap
  checks, faulthandler's "Fatal Python error", "Segmentation fault", the restarter's "restarting
  kernel" note; a kernel that stops its heartbeat for HANG_S without any of those is recorded as
  unresponsive. Each death is recorded with the log's excerpt, and the run recovers (JupyterLab:
  reload and Run All; Voilà: reload, a new kernel) and goes on;
* **mixed frames**: the notebook records, kernel side, every image the ipympl canvas of each
  widget sends to the browser (the full PNG ``get_diff_image`` returns: flashviz sends complete
  frames), with its time and the frame it belongs to (view, frame index); a thread of the kernel
  writes them out (each distinct image once), so the browser's messages are not disturbed.
  Several times a burst, *during* it, the browser's canvas is read (``canvas.toDataURL``) and
  compared with every image the kernel sent in [t - WINDOW_S, t] plus the last one before (the
  browser may still show an earlier whole frame while the next one loads): a sample that is
  within MAX_DIFF_SHARE of none of them is a mixed frame, saved as a PNG beside its nearest
  frames. Samples of a blank canvas are counted apart (never as matches). The kernel's images
  of one frame are also compared with each other (a frame drawn over another in the kernel
  would be sent, and then the browser's copy of it would match).
* writes a JSON record (the fields are listed in ``main``). Never edit a record by hand: run again.
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import hashlib
import io
import json
import os
import random
import re
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import numpy as np

from .servers import CHROMIUM, DIFF_LEVELS, FLAGS, MAX_DIFF_SHARE, ROOT, open_notebook, server

#: a browser sample is compared with the images sent in the last WINDOW_S seconds (and the one before)
WINDOW_S = 10.0
#: a kernel whose heartbeat stops this long is recorded as unresponsive
HANG_S = 45.0
#: at most this many seconds waiting for the kernel to finish a burst's messages
SETTLE_MAX_S = 60.0

#: name -> constructor: the online-softmax explorer of chapter 2 first, with the chapter's N and
#: block (the deaths were there), then the others at small sizes; every figure smaller than a
#: chapter's (540 x 336 px instead of 924 x 571): a burst's ~200 frames then cost the kernel
#: ~5-10 s instead of 10-35 s on a 2-core box, so 200 bursts fit in an hour. The threads race
#: the same way: the run before the fix (benchmarks/results/stress-lab-*-before.json) shows it.
SMALL = "figsize=(9, 5.6), dpi=60"
WIDGETS = {
    "online": f"fv.OnlineSoftmaxExplorer(N=32, block=8, source='random', key='s-online', {SMALL})",
    "tile": f"fv.TileExplorer(N=128, d=32, Br=32, Bc=32, source='random', key='s-tile', {SMALL})",
    "backward": f"fv.BackwardExplorer(N=64, d=32, Br=16, Bc=16, key='s-backward', {SMALL})",
    "causal": f"fv.CausalExplorer(Nq=128, Nk=192, Br=32, Bc=32, key='s-causal', {SMALL})",
    "loop": f"fv.LoopOrderExplorer(N=128, d=32, Br=32, Bc=32, key='s-loop', {SMALL})",
    # a split count, not "auto": the splits slider is live (1..128 splits of 32 key blocks)
    "decode": f"fv.DecodeExplorer(Nk=1024, d=16, H_kv=2, Bc=32, num_splits=4, key='s-decode', {SMALL})",
}
#: the label (a regex, matched whole) of the slider each burst drags: one that rebuilds the run
CONFIG_SLIDER = "block|Br|splits"

#: kernel side: record every image each widget's canvas sends; a thread writes them out
KERNEL_CODE = r'''
import faulthandler, sys
faulthandler.enable(file=sys.__stderr__, all_threads=True)   # to the server's log
%matplotlib widget
import collections, contextlib, hashlib, json, os, threading, time
import flashviz as fv
try:
    from flashviz.views.drawlock import DRAW_LOCK as _LOCK     # after the fix: label frames under it
except ImportError:                                             # before the fix: add no lock at all
    _LOCK = contextlib.nullcontext()
OUT = os.path.join({out!r}, str(os.getpid()))
os.makedirs(os.path.join(OUT, "frames"), exist_ok=True)

class Recorder:
    """Keeps every image the widget's canvas sends: (time, sha1 of the PNG, (view id, frame))."""
    def __init__(self, name, w):
        self.name, self.w, self.cur = name, w, None
        self.events, self.new, self.seen = collections.deque(), collections.deque(), set()
        canvas = w.fig.canvas
        send_image = canvas.get_diff_image              # flashviz's full-frame version
        def recorded():
            png = send_image()
            if png:
                h = hashlib.sha1(png).hexdigest()[:20]
                if h not in self.seen:
                    self.seen.add(h)
                    self.new.append((h, png))
                self.events.append((time.time(), h, self.cur))
            return png
        canvas.get_diff_image = recorded
        render = w._render
        # a view is numbered when first seen (id() of a freed view is reused by the next ones);
        # the last one is kept referenced, so "is" tells a new view from it
        self.view, self.n_view = w._view, 0
        def labelled(k):
            with _LOCK:
                if w._view is not self.view:
                    self.view, self.n_view = w._view, self.n_view + 1
                self.cur = [self.n_view, int(k)]
                return render(k)
        w._render = labelled
        self.cur = [0, int(w.frame.value)]

    def flush(self):
        while self.new:
            h, png = self.new.popleft()
            with open(os.path.join(OUT, "frames", h + ".png"), "wb") as f:
                f.write(png)
        events = [self.events.popleft() for _ in range(len(self.events))]
        if events:
            with open(os.path.join(OUT, self.name + ".jsonl"), "a") as f:
                f.write("".join(json.dumps(e) + "\n" for e in events))

RECORDERS = []
def _writer():
    while True:
        for r in list(RECORDERS):
            r.flush()
        with open(os.path.join(OUT, "beat.tmp"), "w") as f:
            f.write(repr(time.time()))
        os.replace(os.path.join(OUT, "beat.tmp"), os.path.join(OUT, "beat"))
        time.sleep(0.25)
threading.Thread(target=_writer, daemon=True, name="stress-writer").start()
ws = {{}}
'''

LAST_CELL = r'''
with open(os.path.join(OUT, "ready.json"), "w") as f:
    json.dump({{"pid": os.getpid(), "flashviz": fv.__file__, "widgets": list(ws),
               "sizes": {{n: list(w.fig.canvas.get_width_height()) for n, w in ws.items()}}}}, f)
with open(os.path.join({out!r}, "current"), "w") as f:
    f.write(str(os.getpid()))
print("stress notebook ready")
'''


def write_notebook(path: Path, out: Path) -> None:
    import nbformat
    nb = nbformat.v4.new_notebook()
    cells = [KERNEL_CODE.format(out=str(out))]
    for name, make in WIDGETS.items():
        cells.append(f"ws[{name!r}] = {make}\nRECORDERS.append(Recorder({name!r}, ws[{name!r}]))\nws[{name!r}]")
    cells.append(LAST_CELL.format(out=str(out)))
    nb.cells = [nbformat.v4.new_code_cell(c.strip("\n")) for c in cells]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, str(path))


# --- deaths -----------------------------------------------------------------------------------

#: what a dying kernel process writes to its stderr (lines that do not start with the server's "[")
KERNEL_STDERR = ("Fatal Python error", "malloc(): ", "malloc_consolidate(): ", "free(): ", "double free",
                 "corrupted size", "corrupted double-linked list", "Segmentation fault", "realloc(): ",
                 "munmap_chunk(): ", "Aborted")


def died(line: str) -> bool:
    if line.startswith("["):       # the server's own line: only its notes that a kernel died or restarted
        return ("KernelRestarter: restarting" in line or "restarting kernel" in line
                or ("kernel" in line.lower() and line.rstrip().endswith(("restarted", "died"))))
    return line.lstrip().startswith(KERNEL_STDERR)


def kernel_death(log: str) -> str | None:
    """The lines of a server log that say a kernel process died (with faulthandler's stacks), or None."""
    lines = log.splitlines()
    hits = [n for n, line in enumerate(lines) if died(line)]
    if not hits:
        return None
    return "\n".join(lines[max(0, hits[0] - 5):hits[-1] + 60])[:12000]


class LogWatch:
    """Reads the server's log as it grows; returns the excerpt of a kernel's death, if any."""

    def __init__(self, path: Path):
        self.path, self.offset = path, 0

    def check(self, wait_for_rest: float = 3.0) -> str | None:
        text = self.path.read_text(errors="replace")
        new = text[self.offset:]
        lines = new.splitlines()
        hits = [n for n, line in enumerate(lines) if died(line)]
        if not hits:
            self.offset = len(text) - len(lines[-1]) if lines and not new.endswith("\n") else len(text)
            return None
        time.sleep(wait_for_rest)                       # faulthandler's stacks and the restart follow
        text = self.path.read_text(errors="replace")
        lines = text[self.offset:].splitlines()
        hits = [n for n, line in enumerate(lines) if died(line)]
        self.offset = len(text)
        start = max(0, hits[0] - 5)
        return "\n".join(lines[start:hits[-1] + 60])[:12000]


# --- pictures ----------------------------------------------------------------------------------

def decode(png: bytes) -> np.ndarray:
    from PIL import Image
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGBA"))


def share_differing(a: np.ndarray, b: np.ndarray) -> float:
    if a.shape != b.shape:
        return 1.0
    return float((np.abs(a[..., :3].astype(np.int16) - b[..., :3].astype(np.int16)).max(-1) > DIFF_LEVELS).mean())


def blank(img: np.ndarray) -> bool:
    """A canvas with no picture yet: transparent, or one colour all over."""
    return bool(img[..., 3].max() == 0 or (img[..., :3] == img[0, 0, :3]).all())


class Frames:
    """The images one kernel session sent, read from its folder as the kernel writes them."""

    def __init__(self, folder: Path, names):
        self.folder = folder
        self.events = {n: [] for n in names}           # name -> [(t, sha, label)]
        self.offsets = {n: 0 for n in names}
        self.exact = {}                                 # sha of the PNG -> sha of its decoded pixels
        self.small = {}                                 # sha -> downscaled pixels (nearest-frame search)
        self.cache = {}                                 # sha -> full pixels (a few)

    def beat(self) -> float:
        try:
            return float((self.folder / "beat").read_text())
        except (OSError, ValueError):
            return 0.0

    def read(self) -> None:
        for n in self.events:
            p = self.folder / f"{n}.jsonl"
            if not p.exists():
                continue
            with open(p) as f:
                f.seek(self.offsets[n])
                chunk = f.read()
            keep = chunk[:chunk.rfind("\n") + 1]
            self.offsets[n] += len(keep.encode())
            self.events[n].extend(tuple(json.loads(line)) for line in keep.splitlines())

    def pixels(self, h: str) -> np.ndarray:
        """The image's pixels (a few kept); on first sight also its pixels' hash and a small copy."""
        img = self.cache.get(h)
        if img is None:
            img = decode((self.folder / "frames" / f"{h}.png").read_bytes())
            if len(self.cache) > 32:
                self.cache.pop(next(iter(self.cache)))
            self.cache[h] = img
            if h not in self.exact:
                self.exact[h] = hashlib.sha1(img.tobytes()).hexdigest()
                self.small[h] = img[::4, ::4, :3].copy()
        return img

    def know(self, h: str) -> None:
        if h not in self.exact:
            self.pixels(h)

    def window(self, name: str, t0: float, t1: float):
        """The distinct images sent in [t0 - WINDOW_S, t1] and the last one before."""
        ev = self.events[name]
        before, inside = None, []
        for t, h, _ in ev:
            if t < t0 - WINDOW_S:
                before = h
            elif t <= t1:
                inside.append(h)
        hs = ([before] if before else []) + inside
        return list(dict.fromkeys(hs))

    def last_before(self, name: str, t: float):
        hs = [h for tt, h, _ in self.events[name] if tt <= t]
        return hs[-1] if hs else None


def compare(sample: np.ndarray, frames: Frames, candidates):
    """(best share differing, its sha, share of the nearest *other* distinct image or None).
    A sample whose pixels are exactly those of a candidate is that image (no pixel compared)."""
    for h in candidates:
        frames.know(h)
    key = hashlib.sha1(sample.tobytes()).hexdigest()
    small = sample[::4, ::4, :3].astype(np.int16)

    def near(h):
        s = frames.small[h]
        return float(np.abs(s.astype(np.int16) - small).mean()) if s.shape == small.shape else 1e9

    exact = [h for h in candidates if frames.exact[h] == key]
    others = [h for h in candidates if frames.exact[h] != key]
    scored = sorted((near(h), h) for h in others)
    if exact:
        best, best_h = 0.0, exact[-1]
    else:
        best, best_h = 1.0, None
        for _, h in scored[:4]:
            s = share_differing(sample, frames.pixels(h))
            if s < best:
                best, best_h = s, h
    # the margin: how far the nearest distinct image that is not the match is (a match must be distinctive)
    rest = [h for _, h in scored if h != best_h and frames.exact[h] != frames.exact.get(best_h)][:2]
    margin = min((share_differing(sample, frames.pixels(h)) for h in rest), default=None)
    return best, best_h, margin


def self_check(frames: Frames, name: str, candidates) -> bool | None:
    """A made-up mixed frame (the top of one image, the bottom of another distinct one sent in the
    window, cut at the row that leaves half of their differing pixels on each side, so the made-up
    image differs from each in more than 2 x MAX_DIFF_SHARE) must match none of them: True when
    the comparison catches it; None without two images that differ in more than 4 x MAX_DIFF_SHARE."""
    distinct = list({frames.exact[h]: h for h in candidates if frames.know(h) is None}.values())
    m = (len(distinct) - 1) // 2
    for a, b in zip(distinct[m:], distinct[m + 1:]):
        A, B = frames.pixels(a), frames.pixels(b)
        if A.shape != B.shape or share_differing(A, B) <= 4 * MAX_DIFF_SHARE:
            continue
        per_row = np.cumsum((np.abs(A[..., :3].astype(np.int16) - B[..., :3]).max(-1) > DIFF_LEVELS).sum(1))
        cut = int(np.searchsorted(per_row, per_row[-1] / 2)) + 1
        mixed = A.copy()
        mixed[cut:] = B[cut:]
        best, best_h, _ = compare(mixed, frames, candidates)
        if best <= MAX_DIFF_SHARE and best_h not in (a, b):
            continue                # the made-up image is a real frame (its parts change apart): no test
        return best > MAX_DIFF_SHARE
    return None


def kernel_consistency(frames: Frames, name: str, checked: set) -> list:
    """Images the kernel sent for one frame (same view, same index) that differ from each other."""
    by_label = {}
    for _, h, label in frames.events[name]:
        if label is not None:
            by_label.setdefault(tuple(label), []).append(h)
    bad = []
    for label, hs in by_label.items():
        hs = list(dict.fromkeys(hs))
        if len(hs) < 2:
            continue
        for h in hs[1:]:
            if (hs[0], h) in checked:
                continue
            checked.add((hs[0], h))
            frames.know(h)
            frames.know(hs[0])
            if frames.exact[h] == frames.exact[hs[0]]:
                continue
            s = share_differing(frames.pixels(hs[0]), frames.pixels(h))
            if s > MAX_DIFF_SHARE:
                bad.append({"label": list(label), "images": [hs[0], h], "share_differing": s})
    return bad


# --- the page ----------------------------------------------------------------------------------

def widget_box(page, i):
    return page.locator(".flashviz-frame-widget").nth(i)


def canvas_sample(page, i) -> tuple[float, float, bytes]:
    loc = widget_box(page, i).locator(".jupyter-matplotlib-canvas-div canvas").first
    t0 = time.time()
    url = loc.evaluate("c => c.toDataURL('image/png')")
    t1 = time.time()
    return t0, t1, base64.b64decode(url.split(",", 1)[1])


def centre(loc):
    b = loc.bounding_box(timeout=5000)
    return b["x"] + b["width"] / 2, b["y"] + b["height"] / 2


def slider(box, page, label: str):
    """The slider of this widget box whose label is exactly ``label`` (a regex)."""
    return box.locator(".widget-slider", has=page.locator(".widget-label", has_text=re.compile(f"^({label})$"))).first


def burst(page, i: int, rng: random.Random, samples: list, n_samples: int) -> dict:
    """One full-speed burst at widget i. Browser samples go to ``samples`` as they are taken."""
    box = widget_box(page, i)
    box.scroll_into_view_if_needed()
    counts = {"clicks": 0, "keys": 0, "drags": 0, "toggles": 0}
    # The step slider: 1-based "step" after the fix; before it the 0-based frame slider is named "step" too
    step = slider(box, page, "step")
    speed = slider(box, page, "ms/step")
    block = slider(box, page, CONFIG_SLIDER)
    speed.locator(".noUi-handle").first.focus()
    page.keyboard.press("Home")                           # Play at 20 ms a step

    def coords():
        return {"prev": centre(box.locator("button", has_text="◀").first),
                "next": centre(box.locator("button", has_text="▶").first),
                "play": centre(box.locator(".widget-play button").first)}

    def clicks(n, which=None):
        c = coords()
        for _ in range(n):
            b = which or ("next" if rng.random() < 0.6 else "prev")
            page.mouse.click(*c[b])
            counts["clicks"] += 1

    def keys(n):
        step.locator(".noUi-handle").first.focus()
        for _ in range(n):
            page.keyboard.press("ArrowRight" if rng.random() < 0.6 else "ArrowLeft", delay=0)
            counts["keys"] += 1

    def drags(n):
        handle = block.locator(".noUi-handle").first
        track = block.locator(".noUi-target").first
        tb = track.bounding_box(timeout=5000)
        for _ in range(n):
            x, y = centre(handle)
            page.mouse.move(x, y)
            page.mouse.down()
            page.mouse.move(tb["x"] + rng.random() * tb["width"], y, steps=3)
            page.mouse.up()
            counts["drags"] += 1

    def toggles(n):
        c = coords()
        for _ in range(n):
            page.mouse.click(*c["play"])
            counts["toggles"] += 1
            time.sleep(rng.random() * 0.12)

    plan = [lambda: clicks(30), lambda: clicks(30), lambda: clicks(30), lambda: keys(35), lambda: keys(35),
            lambda: drags(5), lambda: drags(5), lambda: toggles(10), lambda: toggles(10)]
    rng.shuffle(plan)
    plan.append(lambda: clicks(15, "next"))
    at = {round((k + 1) * len(plan) / n_samples) - 1 for k in range(n_samples)}
    for n, part in enumerate(plan):
        part()
        if n in at:
            samples.append(canvas_sample(page, i) + (False,))
    pause(page, i)
    return counts


def pause(page, i: int) -> None:
    """Pause the widget's Play if it runs (its button shows the pause icon while it plays): a
    Play left running at 20 ms a step would keep the kernel busy for the rest of the run."""
    button = widget_box(page, i).locator(".widget-play button").first
    for _ in range(3):
        if not button.locator("i.fa-pause").count():
            return
        button.click()
        time.sleep(0.2)


def open_page(page, front_end: str, base: str, token: str) -> None:
    open_notebook(page, base, token, front_end, "stress.ipynb", lab_timeout_ms=90_000, voila_timeout_ms=240_000)


def wait_ready(out: Path, previous: str | None, timeout: float = 240) -> Path:
    """The folder of the kernel session whose notebook finished (a new one after a recovery)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            pid = (out / "current").read_text().strip()
        except OSError:
            pid = None
        if pid and pid != previous and (out / pid / "ready.json").exists():
            return out / pid
        time.sleep(0.5)
    raise TimeoutError("the stress notebook never finished running")


def settle(frames: Frames, name: str, t_end: float, page, i: int) -> bool:
    """Wait until the kernel has caught up: no image sent for 1.5 s after the burst (a Play left
    running runs to its last frame). False if the kernel seems stuck (no heartbeat for HANG_S)."""
    deadline = time.time() + SETTLE_MAX_S
    while time.time() < deadline:
        time.sleep(0.5)
        frames.read()
        beat = frames.beat()
        if time.time() - beat > HANG_S:
            return False
        ev = frames.events[name]
        last = ev[-1][0] if ev else 0
        if beat > max(last, t_end) + 1.5:      # the kernel's writer is 1.5 s past the last image sent
            return True
        pause(page, i)
    return time.time() - frames.beat() < HANG_S


def versions(browser) -> dict:
    v = {}
    for pkg in ("jupyterlab", "jupyter_server", "ipykernel", "ipympl", "ipywidgets", "matplotlib", "voila",
                "notebook", "playwright", "numpy"):
        try:
            v[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            v[pkg] = None
    v["chromium"] = browser.version
    v["python"] = sys.version.split()[0]
    return v


def git_commit(root: Path) -> dict:
    def git(*a):
        return subprocess.run(["git", "-C", str(root), *a], capture_output=True, text=True).stdout.strip()
    return {"commit": git("rev-parse", "HEAD"), "subject": git("log", "-1", "--format=%s")[:120],
            "dirty_files": [line[3:] for line in git("status", "--porcelain").splitlines()][:50]}


def comms_setting() -> dict:
    """JupyterLab's commsOverSubshells: the schema's default, and that no user setting changes it."""
    import jupyterlab
    schema = Path(sys.prefix) / "share" / "jupyter" / "lab" / "schemas" / "@jupyterlab" / "apputils-extension" \
        / "kernels-settings.json"
    try:
        default = json.loads(schema.read_text())["properties"]["commsOverSubshells"]["default"]
    except (OSError, KeyError, ValueError):
        default = None
    return {"commsOverSubshells": default, "set_by_test": False, "jupyterlab": jupyterlab.__version__}


def run(front_end: str, bursts: int, out_file: Path, root: Path, seed: int = 0, artifacts: Path | None = None,
        samples_per_burst: int = 5, log=print) -> dict:
    from playwright.sync_api import sync_playwright

    start = time.time()
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    artifacts = artifacts or ROOT / "artifacts" / "stress" / f"{front_end}-{stamp}"
    artifacts.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    names = list(WIDGETS)
    holder = {}

    def prepare(work: Path) -> None:
        out = work / "stress-out"
        out.mkdir()
        write_notebook(work / "notebooks" / "stress.ipynb", out)
        holder["out"] = out

    record = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "front_end": front_end,
              "served_tree": str(root), "git": git_commit(root), "harness_git": git_commit(ROOT),
              "pythonpath": os.environ.get("PYTHONPATH"),
              "bursts_asked": bursts, "seed": seed, "widgets": WIDGETS,
              "per_burst_plan": {"clicks": "90 random ◀/▶ + 15 ▶", "arrow_keys": 70, "block_drags": 10,
                                 "play_toggles": 20, "samples": samples_per_burst},
              "compare": {"diff_levels": DIFF_LEVELS, "max_diff_share": MAX_DIFF_SHARE, "window_s": WINDOW_S},
              "lab_settings": comms_setting() if front_end == "lab" else None,
              "load_start": os.getloadavg()}
    deaths, mixed, bursts_done, burst_times, loads = [], [], [], [], []
    n_samples = n_blank = n_exact = n_near = 0
    margins, self_checks, kernel_bad, stale_settled = [], [], [], 0
    checked = set()
    saved_examples = 0
    kind = "lab" if front_end == "lab" else "voila-notebook"
    with server(kind, notebook="stress.ipynb", prepare=prepare, root=root) as (base, token, work):
        out = holder["out"]
        watch = LogWatch(work.parent / "server.log")
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
            record["versions"] = versions(browser)
            page = browser.new_page(viewport={"width": 1500, "height": 1100})
            session, frames = None, None

            def recover(reason: str):
                nonlocal session, frames
                log(f"  recovering ({reason})")
                previous = session.name if session else None
                for _attempt in range(3):
                    try:
                        open_page(page, front_end, base, token)
                        session = wait_ready(out, previous)
                        break
                    except Exception as exc:            # a page that did not come up: once more
                        log(f"  page did not come up: {exc!r}")
                        death = watch.check()
                        if death:
                            deaths.append({"burst": len(bursts_done), "while": "recovering", "excerpt": death})
                else:
                    raise RuntimeError("could not bring the notebook back")
                frames = Frames(session, names)
                page.wait_for_function(f"document.querySelectorAll('.flashviz-frame-widget').length >= {len(names)}",
                                       timeout=120_000)
                time.sleep(3)
                record.setdefault("sessions", []).append(json.loads((session / "ready.json").read_text()))

            recover("first page")
            for b in range(bursts):
                name = names[b % len(names)] if b >= len(names) else names[b]
                i = names.index(name)
                t_start = time.time()
                samples = []
                problem = None
                try:
                    counts = burst(page, i, rng, samples, samples_per_burst)
                except Exception as exc:
                    counts, problem = None, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                t_end = time.time()
                ok = problem is None and settle(frames, name, t_end, page, i)
                if ok:
                    samples.append(canvas_sample(page, i) + (True,))     # settled: the last frame, whole
                t_settled = time.time()
                death = watch.check()
                if death is None and not ok:
                    death = watch.check(wait_for_rest=5) or (
                        f"no death in the log; the burst failed ({problem})" if problem else
                        f"kernel unresponsive: no heartbeat for {HANG_S:.0f} s, nothing in the server log")
                # compare the samples taken while the kernel lived
                frames.read()
                for n_s, (s0, s1, png, settled) in enumerate(samples):
                    img = decode(png)
                    n_samples += 1
                    if blank(img):
                        n_blank += 1
                        continue
                    cands = frames.window(name, s0, s1 + 0.3)
                    if not cands:
                        n_blank += 1
                        continue
                    best, best_h, margin = compare(img, frames, cands)
                    if best == 0.0:
                        n_exact += 1
                    elif best <= MAX_DIFF_SHARE:
                        n_near += 1
                    if margin is not None:
                        margins.append(margin)
                    if settled and best_h is not None and frames.exact.get(best_h) != frames.exact.get(
                            frames.last_before(name, s1)):
                        stale_settled += 1
                    if best > MAX_DIFF_SHARE:
                        tag = f"mixed-b{b:04d}-{name}-s{n_s}"
                        (artifacts / f"{tag}-browser.png").write_bytes(png)
                        near = sorted(cands, key=lambda h: share_differing(img, frames.pixels(h)))[:3]
                        for r, h in enumerate(near):
                            (artifacts / f"{tag}-near{r}-{h}.png").write_bytes((frames.folder / "frames" / f"{h}.png").read_bytes())
                        mixed.append({"burst": b, "widget": name, "sample": n_s, "t": s0, "settled": settled,
                                      "share_differing_best": best, "candidates": len(cands), "artifact": tag})
                    elif saved_examples < 12 and (b % max(1, bursts // 6) == 0) and n_s in (0, len(samples) - 1):
                        tag = f"match-b{b:04d}-{name}-s{n_s}"
                        (artifacts / f"{tag}-browser.png").write_bytes(png)
                        (artifacts / f"{tag}-kernel-{best_h}.png").write_bytes(
                            (frames.folder / "frames" / f"{best_h}.png").read_bytes())
                        saved_examples += 1
                if samples:
                    sc = self_check(frames, name, frames.window(name, samples[0][0], samples[-1][1]))
                    if sc is not None:
                        self_checks.append(sc)
                kernel_bad += [dict(x, burst=b, widget=name) for x in kernel_consistency(frames, name, checked)]
                load = os.getloadavg()[0]
                loads.append(load)
                bursts_done.append({"burst": b, "widget": name, "counts": counts, "actions_s": round(t_end - t_start, 2),
                                    "settle_s": round(t_settled - t_end, 2), "total_s": round(time.time() - t_start, 2),
                                    "samples": len(samples), "load1": load, "problem": problem})
                burst_times.append(t_end - t_start)
                log(f"burst {b + 1}/{bursts} {name}: {t_end - t_start:.1f} s actions, {t_settled - t_end:.1f} s settle, "
                    f"{len(samples)} samples, mixed so far {len(mixed)}, deaths so far {len(deaths) + (death is not None)}"
                    f", load {load:.2f}")
                if death is not None:
                    log("  DEATH:\n" + "\n".join("    " + x for x in death.splitlines()[:30]))
                    deaths.append({"burst": b, "widget": name, "t": t_end, "excerpt": death})
                    (artifacts / f"death-b{b:04d}.txt").write_text(death)
                    try:
                        page.screenshot(path=str(artifacts / f"death-b{b:04d}-page.png"))
                    except Exception:
                        pass
                    recover(f"death in burst {b}")
            browser.close()
        (artifacts / "server.log").write_text((work.parent / "server.log").read_text(errors="replace")[-2_000_000:])
    dur = time.time() - start
    bt = np.array(burst_times) if burst_times else np.zeros(1)
    totals = np.array([x["total_s"] for x in bursts_done]) if bursts_done else np.zeros(1)
    record.update({
        "bursts": len(bursts_done), "duration_s": round(dur, 1),
        "burst_actions_s": {"median": round(float(np.median(bt)), 2), "min": round(float(bt.min()), 2),
                            "max": round(float(bt.max()), 2)},
        "burst_total_s": {"median": round(float(np.median(totals)), 2), "max": round(float(totals.max()), 2)},
        "deaths": deaths, "n_deaths": len(deaths),
        "samples": n_samples, "samples_blank_or_before_first_frame": n_blank, "samples_exact": n_exact,
        "samples_near": n_near, "near_means": "matched an image within max_diff_share, not pixel for pixel",
        "mixed": mixed, "n_mixed": len(mixed),
        "match_margin": {"min": min(margins) if margins else None,
                         "median": float(np.median(margins)) if margins else None, "n": len(margins),
                         "what": "share of pixels differing between a sample and the nearest other distinct "
                                 "image of its window (a match at <= max_diff_share must be far from the rest)"},
        "self_check_mixed_caught": {"caught": sum(self_checks), "tried": len(self_checks)},
        "kernel_inconsistent_frames": kernel_bad[:50], "n_kernel_inconsistent": len(kernel_bad),
        "settled_samples_not_last_frame": stale_settled,
        "load_avg_1min": {"mean": round(float(np.mean(loads)), 2) if loads else None,
                          "max": round(float(np.max(loads)), 2) if loads else None},
        "load_end": os.getloadavg(), "artifacts": str(artifacts), "per_burst": bursts_done,
    })
    out_file.parent.mkdir(parents=True, exist_ok=True)
    out_file.write_text(json.dumps(record, indent=1, default=str) + "\n")
    return record


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--front-end", choices=["lab", "voila"], required=True)
    ap.add_argument("--bursts", type=int, required=True)
    ap.add_argument("--out", type=Path, required=True, help="the JSON record to write")
    ap.add_argument("--root", type=Path, default=ROOT, help="the checkout to serve (default: this one)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--samples", type=int, default=5, help="browser samples a burst (plus one settled)")
    ap.add_argument("--artifacts", type=Path, default=None)
    a = ap.parse_args(argv)
    rec = run(a.front_end, a.bursts, a.out, a.root.resolve(), seed=a.seed, artifacts=a.artifacts,
              samples_per_burst=a.samples, log=lambda s: print(s, flush=True))
    print(json.dumps({k: rec[k] for k in ("front_end", "bursts", "duration_s", "n_deaths", "samples", "n_mixed",
                                          "samples_exact", "self_check_mixed_caught", "n_kernel_inconsistent",
                                          "load_avg_1min")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
