"""Export a view for slides: one frame as PNG, or the whole run as GIF (MP4 with ffmpeg).

Works with any view object that has ``fig``, ``n_frames`` and ``draw_frame(k)``.

Animations are rendered the way the widget shows them — through the view's blitting layers
(``animated_artists()``: a static background, then the slow layer, then the fast one) — onto a
private Agg canvas, and the RGBA buffer is grabbed (no ``savefig`` per frame). Two caches, both
exact (a frame built incrementally equals the same frame drawn from scratch, bit for bit):

* the slow layer (the big images) is kept from frame to frame; its artists fall into groups
  whose clip regions do not overlap, and a group is re-drawn only when the content of one of
  its artists changed (compared bit for bit with the last frame, not the view's own key);
* the fast layer's texts are pasted from a cache of rendered pixels, keyed by what the text
  draws and the pixels under it, checked on every miss (``_TextCache``).

Where the platform can fork, the frames are split between worker processes (one per core),
each on its own copy of the figure: the live (ipympl) figure is never touched, so the export can
run while the widget keeps working. A GIF has one palette computed once (median cut over a few
frames), every frame mapped to it without dithering; each worker crops a frame to the pixels
that changed since the frame before and LZW-encodes it (Pillow), and the file is written as the
frames arrive. An MP4 gets raw frames piped to ffmpeg. Paths are checked (``output_path``)
before anything is rendered. Issue 10, item 5: the N = 512 causal explorer (576 steps) went
from ~190 s to the figures in benchmarks/NOTES.md ("Export speed").
"""

from __future__ import annotations

import hashlib
import multiprocessing
import numbers
import os
import struct
import subprocess
import threading
import warnings
from collections import OrderedDict
from contextlib import contextmanager
from pathlib import Path

import numpy as np

__all__ = ["save_frame_png", "save_animation", "AnimationExport", "ExportCancelled", "output_path"]


class ExportCancelled(Exception):
    """The export was stopped (``AnimationExport.cancel()``); no file is left behind."""


def _frames(n_frames: int, frames):
    if frames is None:
        return list(range(n_frames))
    out = list(frames)
    for k in out:
        if isinstance(k, bool) or not isinstance(k, numbers.Integral) or not 0 <= k < n_frames:
            raise ValueError(f"frames must be integers in 0..{n_frames - 1}, got {k!r}")
    if not out:
        raise ValueError("frames is empty: give at least one frame index")
    return [int(k) for k in out]


def output_path(path, suffixes) -> Path:
    """``path`` (str or os.PathLike, ``~`` expanded) as a Path, checked before anything is drawn:
    it ends in one of ``suffixes`` (e.g. (".gif", ".mp4")), is not a directory, and its directory
    exists and can be written (as can the file, if it exists already).

    Raises one line naming the path and what was expected: TypeError (not a path), ValueError
    (suffix), FileNotFoundError (no such directory), NotADirectoryError (the directory part is a
    file), IsADirectoryError (the path is a directory), PermissionError (not writable).
    """
    ends = " or ".join(suffixes)
    if isinstance(path, bytes) or not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a file name (str or pathlib.Path) ending in {ends}, got {path!r}")
    p = Path(os.fspath(path)).expanduser()
    if p.suffix.lower() not in suffixes:
        raise ValueError(f"cannot write {str(p)!r}: expected a file name ending in {ends}")
    if p.is_dir():
        raise IsADirectoryError(f"cannot write {str(p)!r}: it is a directory; expected a file name ending in {ends}")
    parent = p.parent
    if not parent.exists():
        raise FileNotFoundError(f"cannot write {str(p)!r}: directory {str(parent)!r} does not exist "
                                f"(expected an existing directory)")
    if not parent.is_dir():
        raise NotADirectoryError(f"cannot write {str(p)!r}: {str(parent)!r} is a file, expected a directory")
    if not os.access(parent, os.W_OK | os.X_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise PermissionError(f"cannot write {str(p)!r}: no permission to write "
                              f"{'the file' if p.exists() else f'in {str(parent)!r}'}")
    return p


@contextmanager
def _all_drawn(fig):
    """While saving, draw the blitted (animated) artists too: matplotlib skips figure-level ones."""
    animated = [a for a in fig.findobj() if a.get_animated()]
    for a in animated:
        a.set_animated(False)
    try:
        yield
    finally:
        for a in animated:
            a.set_animated(True)


def save_frame_png(view, k: int, path, *, dpi=None) -> Path:
    """Draw frame k of ``view`` and save it as a PNG file at ``path`` (returned as a Path).

    Raises ValueError for a frame index outside 0..n_frames-1, and (before drawing) the errors
    of ``output_path`` for a path that is not a writable .png file.
    """
    path = output_path(path, (".png",))
    (k,) = _frames(view.n_frames, [k])
    view.draw_frame(k)
    with _all_drawn(view.fig):
        view.fig.savefig(path, dpi=dpi or view.fig.dpi)
    return path


# --- rendering frames off screen ---------------------------------------------------------------

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


def _overlap_groups(regions):
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


def _kept(content):
    """A copy of ``content`` (from _content) that later changes to the artist cannot alter."""
    return None if content is None else [np.array(p) if isinstance(p, np.ndarray) else p for p in content]


def _same(kept, content) -> bool:
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


class _TextCache:
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


class _Compositor:
    """Renders frames of ``view`` like its Blitter does, on ``fig``'s own (Agg) canvas.

    Pixel for pixel the widget's picture: the same static background, the same slow and fast
    layers drawn in the same order. Two caches, both exact. The slow layer is kept from the last
    frame and re-drawn only where it changed: its artists fall into groups whose regions (clip
    boxes) do not overlap, and a group is re-drawn (its regions back to the static background,
    then its artists in order) only when the content of one of its artists changed, compared bit
    for bit with the last frame. The fast layer's texts come from a _TextCache.
    """

    def __init__(self, view):
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.text import Text

        self.view, self.fig = view, view.fig
        old = getattr(view, "blitter", None)
        if old is not None:
            old.disconnect()           # its draw_event hook belongs to the live canvas
        self.canvas = FigureCanvasAgg(self.fig)
        self.fig.stale_callback = None  # pyplot's interactive auto-draw: never a full redraw per change
        layers = view.animated_artists() if hasattr(view, "animated_artists") else None
        if layers is None:
            self.slow, self.fast = None, None
        elif len(layers) == 2 and all(isinstance(x, (list, tuple)) for x in layers):
            self.slow, self.fast = list(layers[0]), list(layers[1])
        else:
            self.slow, self.fast = [], list(layers)
        self.static = None            # (H, W, 4) uint8: the canvas without animated artists
        self.slow_px = None           # (H, W, 4) uint8: static + slow layer of the last frame
        self.groups = None            # _overlap_groups of the slow artists' regions
        self.kept = []                # content of each slow artist when last drawn (_kept)
        self.texts = _TextCache(self.fig, self.canvas)
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
        groups = _overlap_groups(regions)
        if self.slow_px is None or groups != self.groups or buf.shape != self.slow_px.shape:
            np.copyto(buf, self.static)
            redraw = [list(range(len(self.slow)))]
            self.groups, self.kept = groups, [None] * len(self.slow)
        else:
            np.copyto(buf, self.slow_px)
            redraw = [g for g in groups if not all(_same(self.kept[i], now[i]) for i in g)]
            for g in redraw:
                for i in g:
                    buf[regions[i]] = self.static[regions[i]]
        for g in redraw:
            for i in g:
                self.fig.draw_artist(self.slow[i])
                self.kept[i] = _kept(now[i])
                self.slow_draws += 1
        if redraw:
            self.slow_px = buf.copy()

    def frame(self, k: int) -> np.ndarray:
        """Render frame k; returns the canvas's RGBA buffer (H, W, 4) (a view: copy to keep)."""
        view, fig, canvas = self.view, self.fig, self.canvas
        view.draw_frame(k)
        if self.slow is None:
            with _all_drawn(fig):
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


def _palette_from(rgb_frames):
    """One 256-colour palette (a P image) for all frames: median cut over the given ones."""
    from PIL import Image

    stack = np.concatenate(rgb_frames, axis=0)
    return Image.fromarray(stack).quantize(256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)


def _rgb(rgba):
    """A Pillow RGB image of the RGBA pixels ``rgba`` (H, W, 4) uint8 (Pillow drops the alpha
    channel: a strided NumPy copy of rgba[..., :3] took ~5 ms a frame, this ~1 ms)."""
    from PIL import Image

    rgba = np.ascontiguousarray(rgba)
    return Image.frombuffer("RGBA", (rgba.shape[1], rgba.shape[0]), rgba, "raw", "RGBA", 0, 1).convert("RGB")


def _indices(rgba, palette) -> np.ndarray:
    """Palette indices (H, W) uint8 of the RGBA pixels ``rgba`` (H, W, 4): each pixel's nearest
    colour of the P image ``palette`` (Pillow's mapping), no dithering."""
    from PIL import Image

    return np.asarray(_rgb(rgba).quantize(palette=palette, dither=Image.Dither.NONE))


def _changed_box(prev, cur):
    """The smallest box (x0, y0, x1, y1), in pixels, holding every pixel where the index images
    ``prev`` and ``cur`` (H, W) differ; the whole image when prev is None; None when equal."""
    if prev is None:
        return 0, 0, cur.shape[1], cur.shape[0]
    diff = prev != cur
    rows = np.flatnonzero(diff.any(axis=1))
    if rows.size == 0:
        return None
    cols = np.flatnonzero(diff[rows[0]:rows[-1] + 1].any(axis=0))
    return int(cols[0]), int(rows[0]), int(cols[-1]) + 1, int(rows[-1]) + 1


def _gif_image_block(indices, box) -> bytes:
    """The GIF image block (image descriptor, LZW data, terminator; no local colour table, so the
    file's global one) of the ``box`` (x0, y0, x1, y1) of the index image ``indices`` (H, W)
    uint8, placed at the box's corner: what Pillow writes for a frame cropped to its changes."""
    from PIL import GifImagePlugin, Image

    x0, y0, x1, y1 = box
    crop = np.ascontiguousarray(indices[y0:y1, x0:x1])
    im = Image.frombytes("P", (x1 - x0, y1 - y0), crop.tobytes())
    return b"".join(GifImagePlugin.getdata(im, offset=(x0, y0)))


def _gif_header(size, palette, loop: int = 0) -> bytes:
    """GIF89a header: logical screen ``size`` (w, h) pixels, a 256-entry global colour table from
    ``palette`` (a flat list of at most 768 RGB values, padded with black), and the NETSCAPE2.0
    extension that plays the animation ``loop`` times (0: forever)."""
    w, h = size
    table = bytes(palette[:768]) + bytes(768 - min(len(palette), 768))
    return (b"GIF89a" + struct.pack("<HHBBB", w, h, 0x80 | 7, 0, 0) + table
            + b"!\xff\x0bNETSCAPE2.0\x03\x01" + struct.pack("<H", loop) + b"\x00")


def _gif_delay(milliseconds: float) -> bytes:
    """A graphic control extension: show the next image for ``milliseconds`` (stored, as Pillow
    does, in whole centiseconds rounded down, at most 655.35 s)."""
    return b"!\xf9\x04\x00" + struct.pack("<H", min(max(int(milliseconds / 10), 0), 0xFFFF)) + b"\x00\x00"


def _render_chunk(view, ks, palette_ks, mode, emit, stop=None, prev_k=None):
    """Render frames ``ks`` of ``view`` and emit(k, payload) for each, in order.

    MP4: the payload is the frame's RGB bytes (H·W·3). GIF: the first emit is ("palette", list of
    768 ints: a median-cut palette of frames ``palette_ks``); then each payload is the frame's
    GIF image block cropped to the pixels that changed since the frame before it (frame
    ``prev_k``, rendered first, for the first of ``ks``; none: the whole frame), or None when
    nothing changed. Stops early when the Event ``stop`` is set."""
    comp = _Compositor(view)
    if mode != "gif":
        for k in ks:
            if stop is not None and stop.is_set():
                return
            emit(k, _rgb(comp.frame(k)).tobytes())
        return
    palette = _palette_from([comp.frame(k)[..., :3].copy() for k in palette_ks])
    emit("palette", palette.getpalette()[:768])
    prev = None if prev_k is None else _indices(comp.frame(prev_k), palette)
    for k in ks:
        if stop is not None and stop.is_set():
            return
        cur = _indices(comp.frame(k), palette)
        box = _changed_box(prev, cur)
        emit(k, None if box is None else _gif_image_block(cur, box))
        prev = cur


def _worker(view, ks, palette_ks, mode, conn, prev_k=None):
    # A forked copy of the kernel: it must never run a widget's finaliser (ipywidgets closes its
    # comm in __del__, which would close the widget in the browser). No cyclic collection here,
    # and the process leaves with os._exit (multiprocessing's fork start) without finalisers.
    import gc
    gc.disable()
    try:
        import matplotlib

        matplotlib.interactive(False)
        _render_chunk(view, ks, palette_ks, mode, lambda k, data: conn.send((k, data)), prev_k=prev_k)
        conn.send(("done", None))
    except BaseException as exc:  # report, never hang the parent
        try:
            conn.send(("error", f"{type(exc).__name__}: {exc}"))
        except Exception:
            pass
    finally:
        conn.close()


def _n_workers(n_frames: int) -> int:
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    return max(1, min(cores, 8, n_frames // 16))


def _can_fork() -> bool:
    return "fork" in multiprocessing.get_all_start_methods()


class AnimationExport:
    """One GIF/MP4 export, in two halves: the constructor checks the arguments and starts the
    rendering (worker processes forked from a copy of the figure — call it in the thread that
    owns the figure); ``run()`` collects the frames and writes the file (any thread; the live
    figure is not touched when workers are used); ``cancel()`` stops it (``run`` then raises
    ExportCancelled and removes the partial file).

    ``parallel``: None (default) forks workers when the platform can; False renders in ``run()``
    on the view's own figure (its canvas is swapped for an Agg one and restored afterwards).
    """

    def __init__(self, view, path, *, frames=None, fps: float = 8, dpi=None, progress=None, parallel=None):
        from matplotlib import animation

        self.path = output_path(path, (".gif", ".mp4"))
        self.mode = self.path.suffix.lower()[1:]
        if self.mode == "mp4" and not animation.FFMpegWriter.isAvailable():
            raise ValueError(f"cannot write {str(self.path)!r}: .mp4 needs ffmpeg on the PATH; save a .gif instead")
        if dpi is not None and dpi != view.fig.dpi:
            raise ValueError(f"dpi must be the figure's ({view.fig.dpi}): frames are what the widget shows")
        if isinstance(fps, bool) or not isinstance(fps, numbers.Real) or not 0 < fps < float("inf"):
            raise ValueError(f"fps must be a positive number of frames per second, got {fps!r}")
        if progress is not None and not callable(progress):
            raise TypeError(f"progress must be a function progress(i, n) or None, got {progress!r}")
        self.view, self.fps, self.progress = view, float(fps), progress
        self.ks = _frames(view.n_frames, frames)
        self.n = len(self.ks)
        pk = sorted({self.ks[0], self.ks[len(self.ks) // 3], self.ks[2 * len(self.ks) // 3], self.ks[-1]})
        self.palette_ks = pk
        self._stop = threading.Event()
        self._procs, self._conns = [], []
        self.parallel = _can_fork() and self.n >= 16 if parallel is None else bool(parallel) and _can_fork()
        if self.parallel:
            ctx = multiprocessing.get_context("fork")
            nw = _n_workers(self.n)
            bounds = np.linspace(0, self.n, nw + 1).round().astype(int)
            for w in range(nw):
                recv, send = ctx.Pipe(duplex=False)
                a, b = bounds[w], bounds[w + 1]
                prev_k = self.ks[a - 1] if a > 0 else None     # a GIF frame holds the changes since this one
                p = ctx.Process(target=_worker, args=(view, self.ks[a:b], pk, self.mode, send, prev_k), daemon=True)
                with warnings.catch_warnings():
                    # Python >= 3.12 warns that fork() in a threaded process may deadlock the child;
                    # the child only renders with Agg and writes to its pipe (no lock of another
                    # thread's is taken there)
                    warnings.filterwarnings("ignore", category=DeprecationWarning, message=".*fork.*")
                    p.start()
                send.close()
                self._procs.append(p)
                self._conns.append(recv)

    def cancel(self):
        """Stop the export (from any thread)."""
        self._stop.set()

    # frames in order, as (k, payload); palette first for a GIF
    def _frames_parallel(self):
        from multiprocessing.connection import wait

        pending = {}
        order = iter(self.ks)
        nxt = next(order, None)
        live = list(self._conns)
        palettes = {}
        while nxt is not None:
            if self._stop.is_set():
                raise ExportCancelled("export stopped")
            if nxt in pending:
                yield nxt, pending.pop(nxt)
                nxt = next(order, None)
                continue
            if not live:
                raise RuntimeError("export worker ended early")
            for c in wait(live, timeout=0.2):
                try:
                    k, data = c.recv()
                except EOFError:
                    live.remove(c)
                    continue
                if k == "error":
                    raise RuntimeError(f"export worker failed: {data}")
                if k == "done":
                    live.remove(c)
                elif k == "palette":
                    if "first" not in palettes:
                        palettes["first"] = data
                        yield "palette", data
                else:
                    pending[k] = data

    def _frames_inline(self):
        fig = self.view.fig
        old_canvas, old_cb = fig.canvas, fig.stale_callback
        out = []
        try:
            _render_chunk(self.view, self.ks, self.palette_ks, self.mode, lambda k, d: out.append((k, d)),
                          self._stop)
        finally:
            fig.set_canvas(old_canvas)
            fig.stale_callback = old_cb
            blit = getattr(self.view, "enable_blitting", None)
            if getattr(self.view, "blitter", None) is not None and blit is not None:
                blit()                   # a fresh Blitter on the live canvas (the old one was disconnected)
        if self._stop.is_set():
            raise ExportCancelled("export stopped")
        yield from out

    def _close(self):
        for c in self._conns:
            c.close()
        for p in self._procs:
            if p.is_alive():
                p.terminate()
            p.join(timeout=5)

    def run(self) -> Path:
        """Collect the frames and write the file; returns its Path. Raises ExportCancelled when
        cancelled, RuntimeError when a worker failed, OSError when the file cannot be written."""
        frames = self._frames_parallel() if self.parallel else self._frames_inline()
        w, h = self.view.fig.canvas.get_width_height(physical=True)
        try:
            if self.mode == "gif":
                self._write_gif(frames, (w, h))
            else:
                self._write_mp4(frames, (w, h))
        except BaseException:
            try:
                self.path.unlink()
            except OSError:
                pass
            raise
        finally:
            self._close()
        return self.path

    def _counted(self, frames):
        for i, (k, data) in enumerate(frames):
            yield k, data
            if self.progress is not None:
                self.progress(i + 1, self.n)

    def _write_gif(self, frames, size):
        """Write the GIF as the frames come: header and global palette, then each frame's image
        block behind its delay (a frame equal to the one before lengthens that one's delay)."""
        frames = iter(frames)
        tag, pal = next(frames)
        assert tag == "palette"
        delay = int(1000 / self.fps)                  # milliseconds (Pillow's duration)
        with open(self.path, "wb") as f:
            f.write(_gif_header(size, pal))
            pending, shown = None, 0
            for _, block in self._counted(frames):
                if block is None and pending is not None:
                    shown += delay
                    continue
                if pending is not None:
                    f.write(_gif_delay(shown) + pending)
                pending, shown = block, delay
            if pending is not None:
                f.write(_gif_delay(shown) + pending)
            f.write(b";")

    def _write_mp4(self, frames, size):
        from matplotlib import animation

        w, h = size
        cmd = [animation.FFMpegWriter.bin_path(), "-y", "-loglevel", "error", "-f", "rawvideo", "-pix_fmt", "rgb24",
               "-s", f"{w}x{h}", "-r", str(self.fps), "-i", "-", "-vf", "pad=ceil(iw/2)*2:ceil(ih/2)*2",
               "-vcodec", "libx264", "-pix_fmt", "yuv420p", str(self.path)]
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            for _, data in self._counted(frames):
                proc.stdin.write(data)
            proc.stdin.close()
            err = proc.stderr.read().decode(errors="replace").strip()
            if proc.wait() != 0:
                raise OSError(f"ffmpeg failed: {err.splitlines()[-1] if err else proc.returncode}")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def save_animation(view, path, *, frames=None, fps: float = 8, dpi=None, progress=None, parallel=None) -> Path:
    """Render ``frames`` (default: all) of ``view`` to ``path``: .gif (Pillow) or .mp4 (ffmpeg).

    Every frame is what the widget shows for that step (its blitted layers). fps: frames per
    second. progress: optional callable(i, n) called after each frame is written (e.g. a tqdm
    update). parallel: see AnimationExport. Returns the Path written. Raises, before rendering
    anything: the one-line errors of ``output_path`` for a path that is not a writable .gif/.mp4
    file, ValueError for bad frames, fps or dpi, or .mp4 when ffmpeg is not installed.
    """
    return AnimationExport(view, path, frames=frames, fps=fps, dpi=dpi, progress=progress, parallel=parallel).run()
