"""Blitting: redraw only the artists that change between frames.

The static part of the figure (axes, ticks, labels, tile borders) is rendered once and
kept as a background; a frame restores it and draws the animated artists on top. Any
full redraw (a resize, the first display) refreshes the background through draw_event.
Follows matplotlib's documented blitting recipe (Animations using blitting).
"""

from __future__ import annotations


class Blitter:
    def __init__(self, fig, artists):
        self.fig = fig
        self.canvas = fig.canvas
        self.artists = list(artists)
        for a in self.artists:
            a.set_animated(True)
        self.background = None
        self._cid = self.canvas.mpl_connect("draw_event", self._on_draw)

    def _on_draw(self, event):
        self.background = self.canvas.copy_from_bbox(self.fig.bbox)
        self._draw_animated()

    def _draw_animated(self):
        for a in self.artists:
            self.fig.draw_artist(a)

    def update(self):
        """Render the current state of the animated artists onto the canvas."""
        size = self.canvas.get_width_height()
        if self.background is None or getattr(self, "_size", None) != size:
            self._size = size
            self.canvas.draw()      # fires draw_event: background + animated artists
        else:
            self.canvas.restore_region(self.background)
            self._draw_animated()
        self.canvas.blit(self.fig.bbox)

    def disconnect(self):
        self.canvas.mpl_disconnect(self._cid)
