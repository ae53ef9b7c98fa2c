"""Frames of a view rendered off screen, the way the widget shows them, with exact caches.

``Compositor(view).frame(k)`` draws frame k of a view (``fig``, ``n_frames``, ``draw_frame(k)``,
``animated_artists()`` -> (slow, fast)) onto a private Agg canvas through the view's blitting
layers — a static background, the slow layer, the fast one — and returns the RGBA pixels
(H, W, 4) uint8. Both caches are exact: a frame built incrementally equals the same frame drawn
from scratch, bit for bit (tests/chapters/test_export_cache.py).

* the slow layer is kept from frame to frame; its artists fall into groups whose clip regions do
  not overlap (``overlap_groups``), and a group is re-drawn only when the content of one of its
  artists changed (``kept`` / ``same``: compared bit for bit with the last frame);
* the fast layer's texts are pasted from ``TextCache``: rendered pixels keyed by what the text
  draws and the pixels under it, checked on every miss.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from contextlib import contextmanager

import numpy as np

from .protocol import FrameView, LayeredFrameView

__all__ = ["Compositor", "TextCache", "all_drawn", "overlap_groups", "kept", "same"]


@contextmanager
def all_drawn(fig):
    """While saving, draw the blitted (animated) artists too: matplotlib skips figure-level ones."""
    animated = [a for a in fig.findobj() if a.get_animated()]
    for a in animated:
        a.set_animated(False)
    try:
        yield
    finally:
        for a in animated:
            a.set_animated(True)


def _content(a):
    """What artist ``a`` draws, as a list of arrays and plain values; None when unknown (then it
    counts as changed on every frame). Images: data, mask, limits, extent, colour map;
    collections: offsets, colours, widths, paths."""
    from matplotlib.collections import Collection
    from matplotlib.image import AxesImage

    common = [type(a).__name__, a.get_visible(), a.get_alpha(), a.get_zorder(), a.get_clip_on(),
              _bounds(a.get_clip_box())]
    if a.axes is not None:               # where the data lands on the canvas
        common += [_bounds(a.axes.viewLim), _bounds(a.axes.bbox)]
    if isinstance(a, AxesImage):
        arr = a.get_array()
        return common + [np.ma.getdata(arr), np.ma.getmaskarray(arr), a.get_clim(), a.get_extent(),
                         a.get_cmap().name, a.get_interpolation()]
    if isinstance(a, Collection):
        return common + [np.asarray(a.get_offsets()), a.get_facecolor(), a.get_edgecolor(),
                         np.asarray(a.get_linewidth()), *[np.asarray(p.vertices) for p in a.get_paths()]]
    return None


def _bounds(bbox):
    """(x0, y0, width, height) of a matplotlib Bbox as plain floats, or None."""
    return None if bbox is None else tuple(float(v) for v in bbox.bounds)


def _region(a, shape):
    """Pixel rows and columns (slices) that slow artist ``a`` may draw on, on a canvas of
    ``shape`` (H, W, ...): its clip box rounded out, one pixel more on each side (Agg rounds the
    clip rectangle to whole pixels); the whole canvas when it is not clipped to a box."""
    h, w = shape[:2]
    box = a.get_clip_box() if a.get_clip_on() else None
    if box is None or not np.isfinite(box.extents).all():
        return slice(0, h), slice(0, w)
    x0, y0, x1, y1 = box.extents
    return (slice(max(0, int(np.floor(h - y1)) - 1), min(h, int(np.ceil(h - y0)) + 1)),
            slice(max(0, int(np.floor(x0)) - 1), min(w, int(np.ceil(x1)) + 1)))


def overlap_groups(regions):
    """Indices of ``regions`` (pairs of row and column slices) in groups: two regions that
    overlap, directly or through others, share a group. Groups in order of their first member,
    members in order. E.g. the tile explorer's slow layer: [score image, grid], [O_i], [O]."""
    def meet(a, b):
        return all(x.start < y.stop and y.start < x.stop for x, y in zip(a, b))

    group = list(range(len(regions)))
    for i in range(len(regions)):
        for j in range(i):
            if meet(regions[i], regions[j]):
                old, new = group[i], group[j]
                group = [new if g == old else g for g in group]
    out = {}
    for i, g in enumerate(group):
        out.setdefault(g, []).append(i)
    return sorted(out.values())


def kept(content):
    """A copy of ``content`` (from _content) that later changes to the artist cannot alter."""
    return None if content is None else [np.array(p) if isinstance(p, np.ndarray) else p for p in content]


def same(kept, content) -> bool:
    """True when ``content`` equals ``kept`` bit for bit (arrays: dtype, shape and bytes; so NaN
    equals NaN, and -0.0 differs from 0.0: never a false 'unchanged')."""
    if kept is None or content is None or len(kept) != len(content):
        return False
    for x, y in zip(kept, content):
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            if not (isinstance(x, np.ndarray) and isinstance(y, np.ndarray)) or x.dtype != y.dtype \
                    or x.shape != y.shape:
                return False
            if x.dtype.hasobject:
                if not np.array_equal(x, y):
                    return False
            elif not np.array_equal(np.ascontiguousarray(x).reshape(-1).view(np.uint8),
                                    np.ascontiguousarray(y).reshape(-1).view(np.uint8)):
                return False
        elif not _plain_equal(x, y):
            return False
    return True


def _plain_equal(x, y) -> bool:
    """x == y for plain values and tuples of them, of the same type; False when incomparable."""
    try:
        return bool(x == y) and type(x) is type(y)
    except (TypeError, ValueError):
        return False


# Text attributes that change without changing what is drawn (or that are compared otherwise).
_TEXT_SKIP = frozenset({"_stale", "stale", "_remove_method", "_renderer"})
_PLAIN = (str, int, float, bool, type(None))


def _text_state(t):
    """What Text ``t`` draws, as a hashable key, or None when ``t`` is not one the text cache can
    keep (invisible, empty, usetex, a bbox patch, path effects, a filter, a clip path, sketched,
    rasterised, rotating with its transform).

    The key holds the string, colour, font properties, alignment, rotation, line spacing, the
    anchor in display pixels, the clip box, and every plain-valued attribute of the object (so a
    property without a public getter, e.g. multi-line alignment, still counts)."""
    from matplotlib.colors import to_rgba

    if not t.get_visible() or not t.get_text():
        return None
    if (t.get_usetex() or t.get_bbox_patch() is not None or t.get_path_effects()
            or t.get_agg_filter() is not None or t.get_sketch_params() is not None
            or t.get_clip_path() is not None or t.get_transform_rotates_text() or t.get_rasterized()):
        return None
    plain = []
    for name, value in vars(t).items():
        if name in _TEXT_SKIP:
            continue
        if isinstance(value, _PLAIN) or (isinstance(value, tuple) and all(isinstance(v, _PLAIN) for v in value)):
            plain.append((name, value))
    clip = t.get_clip_box() if t.get_clip_on() else None
    anchor = tuple(np.asarray(t.get_transform().transform(t.get_unitless_position()), float).ravel())
    key = (t.get_text(), to_rgba(t.get_color(), t.get_alpha()), t.get_fontproperties().copy(),
           t.get_rotation(), t.get_rotation_mode(), t.get_horizontalalignment(), t.get_verticalalignment(),
           t.get_linespacing(), t.get_antialiased(), t.get_wrap(), t.get_parse_math(), anchor,
           None if clip is None else tuple(clip.bounds), tuple(sorted(plain, key=repr)))
    try:
        hash(key)
    except TypeError:
        return None
    return key


class TextCache:
    """Rendered Text artists: the pixels of a text's core after drawing it, kept under (what the
    text draws, the pixels of its core before). Agg draws a text the same way onto the same
    pixels, so pasting a kept patch gives exactly the pixels a draw would give.

    The core is the text's window extent rounded out to whole pixels, grown by a margin of 0 px
    at first (the layout is a function of the text's state, so the core is kept per state and
    margin). On every miss the whole canvas is compared before and after drawing; where the draw
    changed a pixel outside the core (glyphs can overshoot the extent by under a pixel, measured;
    more with rotation or mathtext), nothing is kept and that text's margin grows by one pixel,
    up to MAX_MARGIN, past which the text is drawn normally from then on. So a kept patch is
    only ever one whose text drew nothing outside its core. A text that missed GIVE_UP times or
    more with fewer than one hit per four misses (e.g. a step counter) is drawn normally from
    then on too. At most MAX_ENTRIES patches and cores are kept (least recently used dropped).

    What the check cannot see: a glyph pixel outside the core that the draw left unchanged
    because it already had the drawn colour. A text is kept only after a miss on which it
    changed nothing outside its core, so this needs overshoot onto pixels of exactly the text's
    blended colour; tests compare whole runs with full redraws.
    """

    MAX_MARGIN = 2   # pixels
    GIVE_UP = 16     # misses (with under one hit per four misses)
    MAX_ENTRIES = 256

    def __init__(self, fig, canvas):
        self.fig, self.canvas = fig, canvas
        self.entries = OrderedDict()      # (state, margin, digest of the core's pixels) -> patch (h, w, 4) uint8
        self.cores = OrderedDict()        # (state, margin) -> (rows, cols) slices, or None (off the canvas)
        self.tally = {}                   # id(text) -> [hits, misses]
        self.margin = {}                  # id(text) -> margin in pixels (default 0)
        self.off = set()                  # id(text) of texts drawn normally

    def _pixels(self) -> np.ndarray:
        """The canvas's RGBA buffer (H, W, 4) uint8, writable (rows top to bottom)."""
        return np.asarray(self.canvas.buffer_rgba())

    @staticmethod
    def _core(box, margin: int, shape):
        """Pixel rows and columns (slices) of display Bbox ``box`` rounded out to whole pixels and
        grown by ``margin``, clipped to the canvas of ``shape`` (H, W, ...); None when empty."""
        h, w = shape[:2]
        if not np.isfinite([box.x0, box.x1, box.y0, box.y1]).all():
            return None
        x0 = max(0, int(np.floor(box.x0)) - margin)
        x1 = min(w, int(np.ceil(box.x1)) + margin)
        r0 = max(0, int(np.floor(h - box.y1)) - margin)
        r1 = min(h, int(np.ceil(h - box.y0)) + margin)
        return (slice(r0, r1), slice(x0, x1)) if x1 > x0 and r1 > r0 else None

    @staticmethod
    def _remember(table, key, value, limit):
        table[key] = value
        if len(table) > limit:
            table.popitem(last=False)

    def draw(self, t):
        """Draw Text ``t`` onto the canvas: a kept patch when one matches, else a normal draw."""
        state = None if id(t) in self.off else _text_state(t)
        if state is None:
            self.fig.draw_artist(t)
            return
        buf = self._pixels()
        where = (state, self.margin.get(id(t), 0))
        if where in self.cores:
            core = self.cores[where]
            self.cores.move_to_end(where)
        else:
            core = self._core(t.get_window_extent(self.canvas.get_renderer()), where[1], buf.shape)
            self._remember(self.cores, where, core, self.MAX_ENTRIES)
        if core is None:
            self.fig.draw_artist(t)
            return
        key = (*where, hashlib.blake2b(np.ascontiguousarray(buf[core]).data, digest_size=16).digest())
        tally = self.tally.setdefault(id(t), [0, 0])
        patch = self.entries.get(key)
        if patch is not None:
            self.entries.move_to_end(key)
            buf[core] = patch
            tally[0] += 1
            return
        tally[1] += 1
        before = buf.copy()
        self.fig.draw_artist(t)
        changed = before.view(np.uint32)[..., 0] != buf.view(np.uint32)[..., 0]   # (H, W): any channel
        changed[core] = False
        if tally[1] >= self.GIVE_UP and 4 * tally[0] < tally[1]:
            self.off.add(id(t))
        elif changed.any():
            if where[1] >= self.MAX_MARGIN:
                self.off.add(id(t))
            else:
                self.margin[id(t)] = where[1] + 1
        else:
            self._remember(self.entries, key, buf[core].copy(), self.MAX_ENTRIES)


class Compositor:
    """Renders frames of ``view`` (a ``views.protocol.FrameView``) like its blitter does, on
    ``fig``'s own (Agg) canvas: layer by layer for a ``LayeredFrameView``, else a full draw a frame.

    Pixel for pixel the widget's picture: the same static background, the same slow and fast
    layers drawn in the same order. Two caches, both exact. The slow layer is kept from the last
    frame and re-drawn only where it changed: its artists fall into groups whose regions (clip
    boxes) do not overlap, and a group is re-drawn (its regions back to the static background,
    then its artists in order) only when the content of one of its artists changed, compared bit
    for bit with the last frame. The fast layer's texts come from a TextCache.
    """

    def __init__(self, view: FrameView):
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.text import Text

        self.view, self.fig = view, view.fig
        old = getattr(view, "blitter", None)    # any view's, protocol or not: draw events are the figure's
        if old is not None:
            old.disconnect()           # its draw_event hook belongs to the live canvas
        self.canvas = FigureCanvasAgg(self.fig)
        self.fig.stale_callback = None  # pyplot's interactive auto-draw: never a full redraw per change
        layers = view.animated_artists() if isinstance(view, LayeredFrameView) else None
        if layers is None:
            self.slow, self.fast = None, None
        elif len(layers) == 2 and all(isinstance(x, (list, tuple)) for x in layers):
            self.slow, self.fast = list(layers[0]), list(layers[1])
        else:
            self.slow, self.fast = [], list(layers)
        self.static = None            # (H, W, 4) uint8: the canvas without animated artists
        self.slow_px = None           # (H, W, 4) uint8: static + slow layer of the last frame
        self.groups = None            # overlap_groups of the slow artists' regions
        self.kept = []                # content of each slow artist when last drawn (kept)
        self.texts = TextCache(self.fig, self.canvas)
        self._is_text = Text
        self.slow_draws = 0           # slow artists drawn so far (a measure of the cache's use)

    def _pixels(self) -> np.ndarray:
        """The canvas's RGBA buffer (H, W, 4) uint8, writable (rows top to bottom)."""
        return np.asarray(self.canvas.buffer_rgba())

    def _setup(self):
        for a in self.slow + self.fast:
            a.set_animated(True)
        self.canvas.draw()            # static parts only: animated artists are skipped
        self.static = self._pixels().copy()

    def _draw_slow(self):
        """Bring the canvas to static + slow layer, re-drawing only the groups that changed."""
        buf = self._pixels()
        now = [_content(a) for a in self.slow]
        regions = [_region(a, buf.shape) for a in self.slow]
        groups = overlap_groups(regions)
        if self.slow_px is None or groups != self.groups or buf.shape != self.slow_px.shape:
            np.copyto(buf, self.static)
            redraw = [list(range(len(self.slow)))]
            self.groups, self.kept = groups, [None] * len(self.slow)
        else:
            np.copyto(buf, self.slow_px)
            redraw = [g for g in groups if not all(same(self.kept[i], now[i]) for i in g)]
            for g in redraw:
                for i in g:
                    buf[regions[i]] = self.static[regions[i]]
        for g in redraw:
            for i in g:
                self.fig.draw_artist(self.slow[i])
                self.kept[i] = kept(now[i])
                self.slow_draws += 1
        if redraw:
            self.slow_px = buf.copy()

    def frame(self, k: int) -> np.ndarray:
        """Render frame k; returns the canvas's RGBA buffer (H, W, 4) (a view: copy to keep)."""
        view, fig, canvas = self.view, self.fig, self.canvas
        view.draw_frame(k)
        if self.slow is None:
            with all_drawn(fig):
                canvas.draw()
            return self._pixels()
        if self.static is None:
            self._setup()
        self._draw_slow()
        for a in self.fast:
            if isinstance(a, self._is_text):
                self.texts.draw(a)
            else:
                fig.draw_artist(a)
        return self._pixels()
