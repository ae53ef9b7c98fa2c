"""The widget/view contract (flashviz.views.protocol): every widget's view is a FrameView and a
BlittedFrameView; the layered ones (all but the backward figure, which blits by areas) are
LayeredFrameViews; the widgets and exports drive them through these protocols."""

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

import flashviz as fv  # noqa: E402
from flashviz.views.blit import BlittedView  # noqa: E402
from flashviz.views.protocol import BlittedFrameView, FrameView, LayeredFrameView  # noqa: E402

WIDGETS = {
    "TileExplorer": dict(N=64, d=32, Br=16, Bc=16),
    "OnlineSoftmaxExplorer": {},
    "LoopOrderExplorer": {},
    "CausalExplorer": {},
    "BackwardExplorer": {},
    "BlockSizeExplorer": {},
    "TimelineExplorer": {},
    "DecodeExplorer": dict(Nk=512, d=32),
}
NOT_LAYERED = {"BackwardExplorer"}        # RegionBlitter: areas, not layers


@pytest.mark.parametrize("name", sorted(WIDGETS))
def test_every_widgets_view_follows_the_protocols(name):
    w = getattr(fv, name)(key=("test_view_protocol", name), **WIDGETS[name])
    try:
        view = w._view
        assert isinstance(view, FrameView)
        assert isinstance(view, BlittedFrameView)
        assert isinstance(view, BlittedView)
        assert isinstance(view, LayeredFrameView) == (name not in NOT_LAYERED)
        assert view.n_frames == w.n_frames >= 1
        assert view.blitter is not None                 # the widget enabled blitting
        assert w._blitter() is view.blitter
        state = w.show_frame(w.n_frames - 1)
        assert state is not None
    finally:
        w.close()


def test_a_plain_frame_view_is_drawn_in_full_and_exported():
    """A view with only fig, n_frames and draw_frame: a FrameView, not a blitted or layered one;
    the export draws it in full."""
    import numpy as np
    from matplotlib.figure import Figure

    from flashviz.views.compositor import Compositor

    class Plain:
        n_frames = 3

        def __init__(self):
            self.fig = Figure(figsize=(2, 1), dpi=50)
            self.t = self.fig.text(0.1, 0.5, "")

        def draw_frame(self, k):
            self.t.set_text(f"frame {k}")
            return k

    v = Plain()
    assert isinstance(v, FrameView)
    assert not isinstance(v, BlittedFrameView) and not isinstance(v, LayeredFrameView)
    comp = Compositor(v)
    assert comp.slow is None
    a, b = comp.frame(0).copy(), comp.frame(2).copy()
    assert a.shape == (50, 100, 4) and not np.array_equal(a, b)


def test_objects_without_the_members_are_not_views():
    assert not isinstance(object(), FrameView)

    class NoDraw:
        fig, n_frames = None, 1

    assert not isinstance(NoDraw(), FrameView)


def test_no_views_module_is_over_500_lines():
    """Issue #11: a newcomer reads a view module in one sitting; split one by job when it grows."""
    from pathlib import Path

    import flashviz.views

    long = {p.name: n for p in Path(flashviz.views.__file__).parent.glob("*.py")
            if (n := len(p.read_text().splitlines())) > 500}
    assert not long, long
