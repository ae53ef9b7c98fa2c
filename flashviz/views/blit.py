"""Blitting: redraw only the artists that change between frames.

The static part of the figure (axes, ticks, labels, hatching) is rendered once and kept
as a background. Animated artists come in two layers: ``slow`` ones (the big images,
which change only on some steps) are composited onto a second cached background
whenever their content key changes; ``fast`` ones (lines, bars, texts) are drawn on top
every frame. Any full redraw (a resize, the first display) refreshes the caches through
draw_event. Follows matplotlib's documented blitting recipe (Animations using blitting).
"""

from __future__ import annotations


class Blitter:
    def __init__(self, fig, slow, fast):
        self.fig = fig
        self.canvas = fig.canvas
        self.slow, self.fast = list(slow), list(fast)
        for a in self.slow + self.fast:
            a.set_animated(True)
        self.static_bg = None     # axes, ticks, labels
        self.slow_bg = None       # static + slow artists
        self.slow_key = object()
        self._size = None
        self._cid = self.canvas.mpl_connect("draw_event", self._on_draw)

    def _on_draw(self, event):
        if self.canvas.is_saving():
            # savefig draws the animated artists itself: caching now would paint them twice
            self.static_bg = None
            return
        self.static_bg = self.canvas.copy_from_bbox(self.fig.bbox)
        self._compose_slow()
        self._draw(self.fast)

    def _compose_slow(self):
        self._draw(self.slow)
        self.slow_bg = self.canvas.copy_from_bbox(self.fig.bbox)

    def _draw(self, artists):
        for a in artists:
            self.fig.draw_artist(a)

    def update(self, slow_key):
        """Render the animated artists; re-composite the slow layer only if ``slow_key`` changed."""
        size = self.canvas.get_width_height()
        if self.static_bg is None or self._size != size:
            self._size = size
            self.slow_key = slow_key
            self.canvas.draw()      # fires draw_event: rebuilds both caches
        else:
            if slow_key != self.slow_key:
                self.slow_key = slow_key
                self.canvas.restore_region(self.static_bg)
                self._compose_slow()
            else:
                self.canvas.restore_region(self.slow_bg)
            self._draw(self.fast)
        self.canvas.blit(self.fig.bbox)

    def disconnect(self):
        self.canvas.mpl_disconnect(self._cid)


class BlittedView:
    """Mixin for a view with ``fig``, ``draw_frame(k)`` and ``animated_artists()`` (all moving
    artists in one layer): ``enable_blitting()`` and ``render(k)``."""

    blitter = None

    def enable_blitting(self):
        """Render later frames by blitting (call once the figure has its canvas)."""
        self.blitter = Blitter(self.fig, [], self.animated_artists())

    def render(self, k: int):
        """Update to frame k and render it (blitting when enabled); returns the frame's state."""
        s = self.draw_frame(k)
        if self.blitter is not None:
            self.blitter.update(None)
        else:
            self.fig.canvas.draw_idle()
        return s
