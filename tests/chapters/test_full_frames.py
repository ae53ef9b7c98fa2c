"""Every ipympl frame a widget sends is a complete image (widgets.base.send_full_frames).

Why it matters is in send_full_frames' docstring; the browser test tests/browser/test_frames.py
checks the outcome on screen. Here, without a browser: after fast stepping, each image the
canvas hands to the front end is in 'full' mode and decodes to exactly the canvas's pixels."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

pytest.importorskip("ipympl")


@pytest.mark.parametrize("make", [
    lambda fv: fv.TileExplorer(N=64, d=32, Br=16, Bc=16, source="random", canvas="ipympl", key="ff-tile"),
    lambda fv: fv.OnlineSoftmaxExplorer(N=32, block=8, source="random", canvas="ipympl", key="ff-online"),
    lambda fv: fv.DecodeExplorer(Nk=512, d=32, canvas="ipympl", key="ff-decode"),
])
def test_every_image_sent_is_complete(widget_backend, make):
    import flashviz as fv
    w = make(fv)
    try:
        canvas = w.fig.canvas
        sent = []
        canvas.send_binary = lambda data: sent.append(data)      # what would go to the browser
        for k in (1, 2, 3, 2, min(5, w.n_frames - 1)):
            w.show_frame(k)
            canvas.draw()                                        # the path a front end's request takes
        assert sent, "no image was sent"
        assert canvas._current_image_mode == "full"
        last = np.asarray(Image.open(io.BytesIO(sent[-1])).convert("RGBA"))
        assert np.array_equal(last, np.asarray(canvas.buffer_rgba())), "the image is not the canvas"
        for png in sent:                                         # no diff: no transparent 'unchanged' pixels
            assert np.asarray(Image.open(io.BytesIO(png)).convert("RGBA"))[..., 3].min() == 255
    finally:
        w.close()


def test_a_canvas_that_is_not_a_web_canvas_is_left_alone():
    from matplotlib.figure import Figure

    from flashviz.widgets.base import send_full_frames
    fig = Figure()
    assert send_full_frames(fig.canvas) is False and "get_diff_image" not in vars(fig.canvas)
