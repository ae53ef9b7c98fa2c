"""One draw at a time (views.drawlock), and one step numbering (issue 20, items 1, 2 and 5).

ipykernel 7 handles a widget's messages on more than one thread (JupyterLab's default
``commsOverSubshells: "perCommTarget"``): a ◀/▶ click's handler and ipympl's own 'draw' and
'refresh' messages then ran at once on one figure, which corrupted the C heap (the kernel died)
or sent a picture half of one frame and half of another. Here two threads play those parts
without a browser: one steps the widget as clicks and the step slider do, the other handles the
canvas's messages as ipympl does (``manager.handle_json``). Every drawing primitive of the
figure is watched: no two threads may be inside one at the same time, and every image the
canvas sends must be one whole frame (the same frame drawn afresh, alone). The browser side of
the same check is tests/browser/test_stress.py."""

from __future__ import annotations

import io
import threading
import time

import matplotlib
import numpy as np
import pytest
from PIL import Image

pytest.importorskip("ipympl")

#: a pixel differs when a colour channel differs by more than this many levels (antialiasing)
DIFF_LEVELS = 24
#: the largest share of pixels that may differ between a sent image and its frame drawn alone
MAX_DIFF_SHARE = 0.002


class Watch:
    """Counts the moments two threads were inside the figure's drawing primitives at once."""

    def __init__(self):
        self.meta = threading.Lock()
        self.inside = {}
        self.overlaps = 0
        self.calls = 0

    def wrap(self, obj, name):
        fn = getattr(obj, name)

        def watched(*args, **kwargs):
            me = threading.get_ident()
            with self.meta:
                self.calls += 1
                if any(n for t, n in self.inside.items() if t != me):
                    self.overlaps += 1
                self.inside[me] = self.inside.get(me, 0) + 1
            try:
                time.sleep(0)                  # let the other thread run here, if it may
                return fn(*args, **kwargs)
            finally:
                with self.meta:
                    self.inside[me] -= 1

        setattr(obj, name, watched)


def decoded(png: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGBA"))


def share_differing(a: np.ndarray, b: np.ndarray) -> float:
    if a.shape != b.shape:
        return 1.0
    return float((np.abs(a[..., :3].astype(int) - b[..., :3].astype(int)).max(-1) > DIFF_LEVELS).mean())


@pytest.mark.slow
@pytest.mark.parametrize("make", [
    lambda fv: fv.OnlineSoftmaxExplorer(N=32, block=8, source="random", canvas="ipympl", key="dl-online",
                                        figsize=(9, 5.6), dpi=60),
    lambda fv: fv.TileExplorer(N=64, d=32, Br=32, Bc=16, source="random", canvas="ipympl", key="dl-tile",
                               figsize=(9, 5.6), dpi=60),
], ids=["online", "tile"])
def test_two_threads_never_draw_at_once_and_every_image_sent_is_one_whole_frame(widget_backend, make):
    import flashviz as fv
    w = make(fv)
    try:
        fig, canvas = w.fig, w.fig.canvas
        sent = []
        canvas.send_binary = lambda data: sent.append(data)
        watch = Watch()
        for obj, name in ((fig, "draw"), (fig, "draw_artist"), (canvas, "restore_region"),
                          (canvas, "copy_from_bbox"), (canvas, "get_diff_image")):
            watch.wrap(obj, name)
        n = w.n_frames
        errors = []

        def clicks():                       # what ◀/▶, the step slider and Play do, on one thread
            try:
                rng = np.random.default_rng(1)
                for _ in range(60):
                    r = rng.integers(4)
                    if r == 0:
                        w.next_button.click()
                    elif r == 1:
                        w.prev_button.click()
                    elif r == 2:
                        w.step_slider.value = int(rng.integers(1, n + 1))
                    else:
                        w.play.value = int(rng.integers(0, n))
            except Exception as exc:        # pragma: no cover - reported below
                errors.append(exc)

        def ipympl_messages():              # what the front end's requests do, on another thread
            try:
                for i in range(60):
                    canvas.manager.handle_json({"type": "draw" if i % 2 else "refresh"})
            except Exception as exc:        # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=clicks), threading.Thread(target=ipympl_messages)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors, errors
        assert watch.calls > 100, "the watch saw no drawing"
        assert watch.overlaps == 0, f"two threads drew the figure at once {watch.overlaps} times"
        assert len(sent) >= 60
        # every image sent is one whole frame: the same frame drawn afresh, alone
        frames = {}
        for k in range(n):
            w.show_frame(k)
            canvas.draw()
            frames[k] = np.asarray(canvas.buffer_rgba()).copy()
        exact = {f.tobytes() for f in frames.values()}
        small = {k: f[::4, ::4, :3].astype(int) for k, f in frames.items()}
        for i, png in enumerate(sent):
            img = decoded(png)
            if img.tobytes() in exact:
                continue
            near = sorted(small, key=lambda k: np.abs(small[k] - img[::4, ::4, :3]).mean())[:3]
            best = min(share_differing(img, frames[k]) for k in near)
            assert best <= MAX_DIFF_SHARE, f"image {i} of {len(sent)} is no whole frame ({best:.2%} of it differs)"
    finally:
        w.close()


def test_the_canvas_handles_its_messages_under_the_drawing_lock(widget_backend):
    from matplotlib.figure import Figure

    import flashviz as fv
    from flashviz.views.drawlock import DRAW_LOCK, serialise_canvas
    w = fv.OnlineSoftmaxExplorer(N=16, block=8, source="random", canvas="ipympl", key="dl-held")
    try:
        canvas = w.fig.canvas
        held = []

        def draw():                                                  # what a 'draw' message calls
            other = []
            t = threading.Thread(target=lambda: other.append(DRAW_LOCK.acquire(blocking=False)))
            t.start()
            t.join()
            held.append(other == [False])                            # another thread cannot take the lock now

        canvas.draw = draw
        canvas.manager.handle_json({"type": "draw"})
        assert held == [True]
        assert serialise_canvas(canvas) is True                      # idempotent: wrapped once, not twice
        assert not hasattr(canvas.manager.handle_json.__wrapped__, "__wrapped__")
    finally:
        w.close()
    assert serialise_canvas(Figure().canvas) is False                # Agg: nothing to wrap


def test_another_thread_waits_for_a_draw_to_finish(widget_backend):
    """A handler on a second thread blocks while the first draws, then runs (no deadlock)."""
    import flashviz as fv
    from flashviz.views.drawlock import DRAW_LOCK
    w = fv.OnlineSoftmaxExplorer(N=16, block=8, source="random", canvas="ipympl", key="dl-wait")
    try:
        done = threading.Event()
        with DRAW_LOCK:
            t = threading.Thread(target=lambda: (w.next_button.click(), done.set()))
            t.start()
            time.sleep(0.3)
            assert not done.is_set() and w.frame.value == 0       # waiting for the lock
        t.join(30)
        assert done.is_set() and w.frame.value == 1
    finally:
        w.close()


def test_the_step_slider_counts_from_one_as_the_titles_do():
    import flashviz as fv
    w = fv.OnlineSoftmaxExplorer(N=32, block=8, source="random", canvas="png", key="dl-steps")
    try:
        n = w.n_frames
        assert (w.step_slider.min, w.step_slider.max, w.step_slider.value) == (1, n, 1)
        assert w.step_slider in w.transport.children and w.frame not in w.transport.children

        def title():
            return " ".join(t.get_text() for t in w.fig.findobj(matplotlib.text.Text) if t.get_text().startswith("step "))

        w.show_frame(2)
        assert w.step_slider.value == 3 and f"step 3/{n}" in title()
        w.step_slider.value = n                                   # the slider's last step is the last frame
        assert w.frame.value == n - 1 and f"step {n}/{n}" in title()
        w.next_button.click()                                     # past the end: stays
        assert w.step_slider.value == n
        w.N.value = 16                                            # fewer steps: back to step 1 of the new run
        assert w.n_frames < n and w.step_slider.max == w.n_frames and w.step_slider.value == 1 and w.frame.value == 0
    finally:
        w.close()
