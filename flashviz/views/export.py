"""Export a view for slides: one frame as PNG, or the whole run as GIF (MP4 with ffmpeg).

Takes any ``views.protocol.FrameView`` (``fig``, ``n_frames``, ``draw_frame(k)``); a
``LayeredFrameView`` (also ``animated_artists()``) is rendered layer by layer, as below, any
other view with a full draw per frame.

Animations are rendered the way the widget shows them — through the view's blitting layers
(``animated_artists()``: a static background, then the slow layer, then the fast one) — onto a
private Agg canvas, and the RGBA buffer is grabbed (no ``savefig`` per frame). Two caches, both
exact (a frame built incrementally equals the same frame drawn from scratch, bit for bit):

* the slow layer (the big images) is kept from frame to frame; its artists fall into groups
  whose clip regions do not overlap, and a group is re-drawn only when the content of one of
  its artists changed (compared bit for bit with the last frame, not the view's own key);
* the fast layer's texts are pasted from a cache of rendered pixels, keyed by what the text
  draws and the pixels under it, checked on every miss (``compositor.TextCache``; the GIF pieces are in ``gif``).

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

import multiprocessing
import numbers
import os
import subprocess
import threading
import warnings
from pathlib import Path

import numpy as np

from .. import checks
from ..checks import check_real, shown
from . import compositor, gif
from .protocol import BlittedFrameView, FrameView

__all__ = ["save_frame_png", "save_animation", "AnimationExport", "ExportCancelled", "output_path"]


#: Highest frame rate of an exported animation: a GIF stores frame delays in hundredths of a
#: second, so more than 100 frames per second cannot be written.
MAX_FPS = 100.0
#: Lowest frame rate of an exported animation: a GIF's frame delay is a 16-bit count of hundredths
#: of a second, at most 655.35 s, so fewer than 1/655.35 frames per second (about 0.00153) cannot
#: be written (the delay would be cut to 655.35 s, or overflow an int before that).
MIN_FPS = 100 / 0xFFFF
#: Most frames one animation export may hold: at about 50 ms a frame (two cores) 1,000 frames take
#: about a minute and tens of MB; a 16,512-step run would take a quarter of an hour. Keep every
#: n-th frame instead (``frames=range(0, n, step)``; ``flashviz render --every``).
MAX_EXPORT_FRAMES = 1000

class ExportCancelled(Exception):
    """The export was stopped (``AnimationExport.cancel()``); no file is left behind."""


def check_fps(fps) -> float:
    """Frames per second of an exported animation (1/s): from MIN_FPS (1/655.35, the GIF's longest
    frame delay) to MAX_FPS (100); returned as a float. One-line TypeError for a non-number,
    ValueError for NaN, inf, 0 or below, above MAX_FPS or below MIN_FPS. Called before any frame
    is drawn (``AnimationExport``, ``save_gif``, ``flashviz render``)."""
    x = check_real(fps, "fps", 0, MAX_FPS, unit="(a GIF stores delays in 1/100 s)")
    if x < MIN_FPS:
        raise ValueError(f"fps must be at least 1/655.35 = {MIN_FPS:.5f} frames per second (a GIF shows a frame "
                         f"for at most 655.35 s), got {shown(fps)}")
    return x


def check_export_frames(frames, n_frames: int) -> list[int]:
    """The frame indices of an export: None (all) or integers in 0..n_frames-1, at most MAX_EXPORT_FRAMES."""
    want = f"frame indices (integers from 0 to {n_frames - 1})"
    if frames is None:
        out = list(range(n_frames))
    else:
        if isinstance(frames, (str, bytes)) or not hasattr(frames, "__iter__"):
            raise TypeError(f"frames must be a list or range of {want}, or None for all, got {shown(frames)}")
        out = list(frames)
        if not out:
            raise ValueError(f"frames is empty: give at least one of the {want}")
        for k in out:
            if isinstance(k, (bool, np.bool_)) or not isinstance(k, numbers.Integral):
                raise TypeError(f"frames must hold {want}, got {shown(k)}")
            if not 0 <= k < n_frames:
                raise ValueError(f"frames must hold {want}, got {k}")
        out = [int(k) for k in out]
    if len(out) > MAX_EXPORT_FRAMES:
        step = -(-len(out) // MAX_EXPORT_FRAMES)
        raise ValueError(f"{len(out):,} frames is more than one export may hold ({MAX_EXPORT_FRAMES:,}: about a "
                         f"minute to write); keep one frame in {step}, e.g. frames=range(0, {n_frames}, {step})")
    return out


def output_path(path, suffixes) -> Path:
    """``path`` (str or os.PathLike, ``~`` expanded) as a Path, checked before anything is drawn:
    it ends in one of ``suffixes`` (e.g. (".gif", ".mp4")), is not a folder, and its folder
    exists and can be written (as can the file, if it exists already). The one check every
    writer of files uses (``flashviz.checks.check_output_path``).

    Raises one line naming the path and what was expected: TypeError (not a path), ValueError
    (suffix), FileNotFoundError (no such folder), NotADirectoryError (the folder part is a
    file), IsADirectoryError (the path is a folder), PermissionError (not writable).
    """
    return checks.check_output_path(path, suffixes)


def save_frame_png(view: FrameView, k: int, path, *, dpi=None) -> Path:
    """Draw frame k of ``view`` (a FrameView) and save it as a PNG file at ``path`` (returned as a Path).

    Raises ValueError for a frame index outside 0..n_frames-1, and (before drawing) the errors
    of ``output_path`` for a path that is not a writable .png file.
    """
    path = output_path(path, (".png",))
    (k,) = check_export_frames([k], view.n_frames)
    view.draw_frame(k)
    with compositor.all_drawn(view.fig):
        view.fig.savefig(path, dpi=dpi or view.fig.dpi)
    return path


def _render_chunk(view, ks, palette_ks, mode, emit, stop=None, prev_k=None):
    """Render frames ``ks`` of ``view`` and emit(k, payload) for each, in order.

    MP4: the payload is the frame's RGB bytes (H·W·3). GIF: the first emit is ("palette", list of
    768 ints: a median-cut palette of frames ``palette_ks``); then each payload is the frame's
    GIF image block cropped to the pixels that changed since the frame before it (frame
    ``prev_k``, rendered first, for the first of ``ks``; none: the whole frame), or None when
    nothing changed. Stops early when the Event ``stop`` is set."""
    comp = compositor.Compositor(view)
    if mode != "gif":
        for k in ks:
            if stop is not None and stop.is_set():
                return
            emit(k, gif.rgb(comp.frame(k)).tobytes())
        return
    palette = gif.palette_from([comp.frame(k)[..., :3].copy() for k in palette_ks])
    emit("palette", palette.getpalette()[:768])
    prev = None if prev_k is None else gif.indices(comp.frame(prev_k), palette)
    for k in ks:
        if stop is not None and stop.is_set():
            return
        cur = gif.indices(comp.frame(k), palette)
        box = gif.changed_box(prev, cur)
        emit(k, None if box is None else gif.image_block(cur, box))
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

    def __init__(self, view: FrameView, path, *, frames=None, fps: float = 8, dpi=None, progress=None, parallel=None):
        from matplotlib import animation

        self.path = output_path(path, (".gif", ".mp4"))
        self.mode = self.path.suffix.lower()[1:]
        if self.mode == "mp4" and not animation.FFMpegWriter.isAvailable():
            raise ValueError(f"cannot write {str(self.path)!r}: .mp4 needs ffmpeg on the PATH; save a .gif instead")
        if dpi is not None and dpi != view.fig.dpi:
            raise ValueError(f"dpi must be the figure's ({view.fig.dpi}): frames are what the widget shows")
        fps = check_fps(fps)
        if progress is not None and not callable(progress):
            raise TypeError(f"progress must be a function progress(i, n) or None, got {progress!r}")
        self.view, self.fps, self.progress = view, float(fps), progress
        self.ks = check_export_frames(frames, view.n_frames)
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
            if isinstance(self.view, BlittedFrameView) and self.view.blitter is not None:
                self.view.enable_blitting()   # a fresh blitter on the live canvas (the old one was disconnected)
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
            f.write(gif.header(size, pal))
            pending, shown = None, 0
            for _, block in self._counted(frames):
                if block is None and pending is not None:
                    shown += delay
                    continue
                if pending is not None:
                    f.write(gif.delay(shown) + pending)
                pending, shown = block, delay
            if pending is not None:
                f.write(gif.delay(shown) + pending)
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


def save_animation(view: FrameView, path, *, frames=None, fps: float = 8, dpi=None, progress=None, parallel=None) -> Path:
    """Render ``frames`` (default: all) of ``view`` to ``path``: .gif (Pillow) or .mp4 (ffmpeg).

    Every frame is what the widget shows for that step (its blitted layers). fps: frames per
    second, 1/655.35 to 100 (``check_fps``). progress: optional callable(i, n) called after each frame is written (e.g. a tqdm
    update). parallel: see AnimationExport. Returns the Path written. Raises, before rendering
    anything: the one-line errors of ``output_path`` for a path that is not a writable .gif/.mp4
    file, ValueError for bad frames, fps or dpi, or .mp4 when ffmpeg is not installed.
    """
    return AnimationExport(view, path, frames=frames, fps=fps, dpi=dpi, progress=progress, parallel=parallel).run()
