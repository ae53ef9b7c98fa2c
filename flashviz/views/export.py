"""Export a view for slides: one frame as PNG, or the whole run as GIF (MP4 with ffmpeg).

Works with any view object that has ``fig``, ``n_frames`` and ``draw_frame(k)``.

Animations are rendered the way the widget shows them — through the view's blitting layers
(``animated_artists()``: a static background, then the slow layer, then the fast one) — onto a
private Agg canvas, and the RGBA buffer is grabbed (no ``savefig`` per frame). The slow layer
(the big images) is re-rendered only when the content of one of its artists changed (a content
fingerprint, not the view's own key), from the last unchanged artist on. Where the platform can
fork, the frames are split between worker processes (one per core), each on its own copy of the
figure: the live (ipympl) figure is never touched, so the export can run while the widget keeps
working. A GIF is written by Pillow with one palette computed once (median cut over a few
frames), every frame mapped to it without dithering; an MP4 by piping raw frames to ffmpeg.
Issue 10, item 5: the N = 512 causal explorer (576 steps) went from ~190 s to the figure in
benchmarks/NOTES.md ("Export speed").
"""

from __future__ import annotations

import hashlib
import multiprocessing
import numbers
import os
import subprocess
import threading
import warnings
from contextlib import contextmanager
from pathlib import Path

import numpy as np

__all__ = ["save_frame_png", "save_animation", "AnimationExport", "ExportCancelled"]


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

    Raises ValueError for a frame index outside 0..n_frames-1 or a path not ending in .png.
    """
    path = Path(path)
    if path.suffix.lower() != ".png":
        raise ValueError(f"path must end in .png, got {str(path)!r}")
    (k,) = _frames(view.n_frames, [k])
    view.draw_frame(k)
    with _all_drawn(view.fig):
        view.fig.savefig(path, dpi=dpi or view.fig.dpi)
    return path


# --- rendering frames off screen ---------------------------------------------------------------

def _fingerprint(a):
    """A digest of what an artist draws, or None when unknown (then it counts as changed)."""
    from matplotlib.collections import Collection
    from matplotlib.image import AxesImage

    h = hashlib.blake2b(digest_size=16)

    def add(*parts):
        for p in parts:
            if isinstance(p, np.ndarray):
                h.update(str((p.dtype, p.shape)).encode())
                h.update(np.ascontiguousarray(p).view(np.uint8).tobytes())
            else:
                h.update(repr(p).encode())

    common = (type(a).__name__, a.get_visible(), a.get_alpha(), a.get_zorder(), a.get_clip_on())
    if isinstance(a, AxesImage):
        arr = a.get_array()
        add(*common, np.ma.getdata(arr), np.ma.getmaskarray(arr), a.get_clim(), a.get_extent(),
            a.get_cmap().name, a.get_interpolation())
    elif isinstance(a, Collection):
        add(*common, np.asarray(a.get_offsets()), a.get_facecolor(), a.get_edgecolor(),
            np.asarray(a.get_linewidth()), *[np.asarray(p.vertices) for p in a.get_paths()])
    else:
        return None
    return h.digest()


class _Compositor:
    """Renders frames of ``view`` like its Blitter does, on ``fig``'s own (Agg) canvas.

    Pixel for pixel the widget's picture: the same static background, the same slow and fast
    layers drawn in the same order; only the slow layer is cached by content.
    """

    def __init__(self, view):
        from matplotlib.backends.backend_agg import FigureCanvasAgg

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
        self.static = None
        self.snaps = []               # [(fingerprints of slow[:i+1], region after drawing slow[i])]

    def _setup(self):
        for a in self.slow + self.fast:
            a.set_animated(True)
        self.canvas.draw()            # static parts only: animated artists are skipped
        self.static = self.canvas.copy_from_bbox(self.fig.bbox)

    def frame(self, k: int) -> np.ndarray:
        """Render frame k; returns the canvas's RGBA buffer (H, W, 4) (a view: copy to keep)."""
        view, fig, canvas = self.view, self.fig, self.canvas
        view.draw_frame(k)
        if self.slow is None:
            with _all_drawn(fig):
                canvas.draw()
            return np.asarray(canvas.buffer_rgba())
        if self.static is None:
            self._setup()
        fps = [_fingerprint(a) for a in self.slow]
        p = 0
        while p < len(self.snaps) and fps[p] is not None and self.snaps[p][0] == fps[p]:
            p += 1
        canvas.restore_region(self.snaps[p - 1][1] if p else self.static)
        del self.snaps[p:]
        for i in range(p, len(self.slow)):
            fig.draw_artist(self.slow[i])
            self.snaps.append((fps[i], canvas.copy_from_bbox(fig.bbox)))
        for a in self.fast:
            fig.draw_artist(a)
        return np.asarray(canvas.buffer_rgba())


def _palette_from(rgb_frames):
    """One 256-colour palette (a P image) for all frames: median cut over the given ones."""
    from PIL import Image

    stack = np.concatenate(rgb_frames, axis=0)
    return Image.fromarray(stack).quantize(256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)


def _encode(rgba, mode, palette):
    rgb = np.ascontiguousarray(rgba[..., :3])
    if mode == "mp4":
        return rgb.tobytes()
    from PIL import Image

    return Image.fromarray(rgb).quantize(palette=palette, dither=Image.Dither.NONE).tobytes()


def _render_chunk(view, ks, palette_ks, mode, emit, stop=None):
    """Render frames ``ks`` of ``view``; emit(k, payload) for each (payload: P-mode bytes for a
    GIF, RGB bytes for an MP4). The first emit is ("palette", bytes, size) for a GIF."""
    comp = _Compositor(view)
    palette = None
    if mode == "gif":
        palette = _palette_from([comp.frame(k)[..., :3].copy() for k in palette_ks])
        emit("palette", palette.getpalette()[:768])
    for k in ks:
        if stop is not None and stop.is_set():
            return
        emit(k, _encode(comp.frame(k), mode, palette))


def _worker(view, ks, palette_ks, mode, conn):
    # A forked copy of the kernel: it must never run a widget's finaliser (ipywidgets closes its
    # comm in __del__, which would close the widget in the browser). No cyclic collection here,
    # and the process leaves with os._exit (multiprocessing's fork start) without finalisers.
    import gc
    gc.disable()
    try:
        import matplotlib

        matplotlib.interactive(False)
        _render_chunk(view, ks, palette_ks, mode, lambda k, data: conn.send((k, data)))
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

        self.path = Path(path)
        suffix = self.path.suffix.lower()
        if suffix == ".gif":
            self.mode = "gif"
        elif suffix == ".mp4":
            if not animation.FFMpegWriter.isAvailable():
                raise ValueError("writing .mp4 needs ffmpeg on the PATH; save a .gif instead")
            self.mode = "mp4"
        else:
            raise ValueError(f"path must end in .gif or .mp4, got {str(self.path)!r}")
        if dpi is not None and dpi != view.fig.dpi:
            raise ValueError(f"dpi must be the figure's ({view.fig.dpi}): frames are what the widget shows")
        if not (isinstance(fps, numbers.Real) and fps > 0):
            raise ValueError(f"fps must be a positive number, got {fps!r}")
        if not self.path.parent.is_dir():
            raise FileNotFoundError(f"no such directory: {str(self.path.parent)!r}")
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
                p = ctx.Process(target=_worker, args=(view, self.ks[bounds[w]:bounds[w + 1]], pk, self.mode, send),
                                daemon=True)
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
        from PIL import Image

        frames = iter(frames)
        tag, pal = next(frames)
        assert tag == "palette"

        def images():
            for _, data in self._counted(frames):
                im = Image.frombytes("P", size, data)
                im.putpalette(pal)
                yield im

        it = images()
        first = next(it)
        first.save(self.path, save_all=True, append_images=it, duration=int(1000 / self.fps), loop=0,
                   optimize=False)

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
    update). parallel: see AnimationExport. Returns the Path written. Raises ValueError for an
    unsupported suffix, bad frames, or .mp4 when ffmpeg is not installed.
    """
    return AnimationExport(view, path, frames=frames, fps=fps, dpi=dpi, progress=progress, parallel=parallel).run()
