"""Blitting: redraw only the artists that change between frames. Every blitting class of the
views is here; a view builds one in ``enable_blitting()`` and calls its ``update(key)`` in
``render(k)`` (``BlittedView`` does both).

* ``Blitter`` — the whole figure in two layers. The static part (axes, ticks, labels, hatching)
  is rendered once and kept as a background. Animated artists come in two layers: ``slow`` ones
  (the big images, which change only on some steps) are composited onto a second cached
  background whenever their content key changes; ``fast`` ones (lines, bars, texts) are drawn on
  top every frame. Follows matplotlib's documented blitting recipe (Animations using blitting).
* ``RegionBlitter`` — by areas of the figure: only the areas whose key changed are redrawn (the
  backward explainer, where most of a frame stays as it was).

Any full redraw (a resize, the first display, ``static_bg = None``) refreshes the caches through
matplotlib's draw_event. The exports (``views.export``, ``views.compositor``) render the same
layers on a private canvas without these classes.
"""

from __future__ import annotations

from matplotlib.transforms import Bbox, TransformedBbox

__all__ = ["Blitter", "RegionBlitter", "BlittedView"]


class Blitter:
    """Blit ``fig`` in two layers: ``slow`` artists (re-composited when their key changes) under
    ``fast`` artists (drawn every frame); both are set animated (left out of full draws).

    figure_artists_on_save: what a savefig does to the caches. False (default): matplotlib draws
    the animated artists itself, so the caches are dropped and rebuilt by the next ``update``.
    True: the caches are kept, and the fast artists that belong to no axes (figure texts, which a
    savefig leaves out) are drawn onto the saved image here (the online-softmax figure).

    Public: ``update(slow_key)``, ``disconnect()``, ``static_bg`` (set to None to force a full
    redraw), ``slow``, ``fast``, ``fig``, ``canvas``.
    """

    def __init__(self, fig, slow, fast, *, figure_artists_on_save: bool = False):
        self.fig = fig
        self.canvas = fig.canvas
        self.slow, self.fast = list(slow), list(fast)
        self.figure_artists_on_save = figure_artists_on_save
        for a in self.slow + self.fast:
            a.set_animated(True)
        self.static_bg = None     # axes, ticks, labels
        self.slow_bg = None       # static + slow artists
        self.slow_key = object()
        self._size = None
        self._cid = self.canvas.mpl_connect("draw_event", self._on_draw)

    def _on_draw(self, event):
        if self.canvas.is_saving():
            if self.figure_artists_on_save:
                # axes draw their animated artists when saving, the figure skips its own: add those
                self._draw([a for a in self.fast if a.axes is None])
            else:
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
            self.canvas.draw()      # fires draw_event: rebuilds both caches, draws the animated
            return                  # artists; the canvas sends this image (a blit would send a second)
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
        """Stop listening to the canvas's draw events (the view is being replaced or closed)."""
        self.canvas.mpl_disconnect(self._cid)


class RegionBlitter:
    """Blitting by areas: redraw only the parts of the figure whose content changed.

    ``regions``: {name: ((x0, y0, x1, y1) in figure fractions, slow artists, fast artists, cache)}:
    areas that do not overlap. The static figure is rendered once (a full draw) and each area's
    piece of it kept; an area's slow artists (big images) are composited onto that piece and
    cached whenever their key changes; its fast artists are drawn on top whenever its key
    changes; with ``cache`` the finished pixels are kept per key (for texts that take a few
    values). Areas whose key did not change are left as they are. Text costs about 0.1 ms a
    glyph to render, so a frame costs only what moved. Any full redraw (first display, resize,
    ``static_bg = None``) refreshes every cache through draw_event. Animated artists are clipped
    to their area, so an area never paints over another.

    Public: ``update(keys)`` ({name: (slow key, fast key)}), ``disconnect()``, ``static_bg``.
    """

    def __init__(self, fig, regions):
        self.fig, self.canvas = fig, fig.canvas
        self.regions = {}
        for name, (frac, slow, fast, cache) in regions.items():
            box = TransformedBbox(Bbox.from_extents(*frac), fig.transFigure)
            for a in (*slow, *fast):
                a.set_animated(True)
                a.set_clip_box(box)
                a.set_clip_on(True)
            self.regions[name] = {"box": box, "slow": list(slow), "fast": list(fast), "cache": {} if cache else None,
                                  "static": None, "base": None, "key": None}
        self._static_ok = False
        self._keys = {}
        self._size = None
        self._cid = self.canvas.mpl_connect("draw_event", self._on_draw)

    @property
    def static_bg(self):
        """Truthy once the static figure is cached; set to None to force a full redraw."""
        return self._static_ok or None

    @static_bg.setter
    def static_bg(self, value):
        if value is None:
            self._static_ok = False

    def _on_draw(self, event):
        if self.canvas.is_saving():          # savefig draws every artist itself; re-cache after it
            self._static_ok = False
            return
        for r in self.regions.values():
            r["static"] = self.canvas.copy_from_bbox(r["box"])
            r["base"] = r["key"] = None
            if r["cache"] is not None:
                r["cache"].clear()
        self._static_ok = True
        self._draw_changed(self._keys)

    def _draw_changed(self, keys) -> bool:
        changed = False
        for name, r in self.regions.items():
            key = keys.get(name, (None, None))
            if r["key"] == key and r["base"] is not None:
                continue
            changed = True
            cache = r["cache"]
            if cache is not None and key in cache:
                self.canvas.restore_region(cache[key])
                r["key"] = key
                continue
            if r["base"] is None or r["key"] is None or r["key"][0] != key[0]:
                self.canvas.restore_region(r["static"])
                for a in r["slow"]:
                    self.fig.draw_artist(a)
                r["base"] = self.canvas.copy_from_bbox(r["box"]) if r["slow"] else r["static"]
            else:
                self.canvas.restore_region(r["base"])
            for a in r["fast"]:
                self.fig.draw_artist(a)
            if cache is not None and len(cache) < 64:
                cache[key] = self.canvas.copy_from_bbox(r["box"])
            r["key"] = key
        return changed

    def update(self, keys):
        """Render the areas whose (slow key, fast key) changed since they were last drawn."""
        self._keys = keys
        size = self.canvas.get_width_height()
        if not self._static_ok or self._size != size:
            self._size = size
            self.canvas.draw()                 # fires draw_event: caches the static pieces, draws every area
            return                             # (and the canvas sends the image: no blit after it)
        elif not self._draw_changed(keys):
            return
        self.canvas.blit(self.fig.bbox)

    def disconnect(self):
        """Stop listening to the canvas's draw events (the view is being replaced or closed)."""
        self.canvas.mpl_disconnect(self._cid)


class BlittedView:
    """Mixin for a view with ``fig``, ``draw_frame(k)`` and ``animated_artists()``: gives it
    ``enable_blitting()`` and ``render(k)``. By default the animated artists form one fast layer
    (a ``Blitter`` with no slow layer, key None); a view overrides ``make_blitter()`` for other
    layers or another blitter, and ``blit_key(state)`` for the key its blitter's ``update`` takes."""

    blitter = None

    def make_blitter(self):
        """The blitter ``enable_blitting`` installs (default: every animated artist fast)."""
        return Blitter(self.fig, [], self.animated_artists())

    def blit_key(self, state):
        """The key ``render`` passes to the blitter's ``update`` for a frame's state (default None)."""
        return None

    def enable_blitting(self):
        """Render later frames by blitting (call once the figure has its canvas)."""
        self.blitter = self.make_blitter()

    def render(self, k: int):
        """Update to frame k and render it (blitting when enabled); returns the frame's state."""
        s = self.draw_frame(k)
        if self.blitter is not None:
            self.blitter.update(self.blit_key(s))
        else:
            self.fig.canvas.draw_idle()
        return s
