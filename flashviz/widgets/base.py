"""FrameWidget: what every flashviz animation widget shares.

A figure (ipympl canvas in Jupyter; static PNG frames where ipympl cannot render), a Play /
step / speed transport, export buttons (frame → PNG, run → GIF), a status line, close()
that frees the figure and every control, and replacement on re-run (the registry).

A subclass supplies its configuration controls and ``_make_view()``, returning a
``views.protocol.FrameView`` (``fig``, ``n_frames``, ``draw_frame(k)``: update artists, return
the frame's state), best a ``BlittedFrameView`` (also ``blitter`` and ``render(k)``: draw +
blit). Frames are drawn by widget events only.
The view is built inside ``views.style.scaled_text(text_scale)``: the widget's ``text_scale``
keyword (0.5–2.5, default 1) multiplies every text size of its figure.
"""

from __future__ import annotations

import io
import numbers
import os
import threading
import weakref

import ipywidgets as W
import matplotlib
import matplotlib.pyplot as plt
import numpy as np

from .. import checks
from ..views import export
from ..views.drawlock import serialise_canvas, serialised
from ..views.protocol import BlittedFrameView
from ..views.style import NOTEBOOK_DPI, NOTEBOOK_FIGSIZE, scaled_text
from . import checks as widget_checks
from . import registry
from .lines import lines_style, text_lines
from .notice import LIVE_CLASS, restart_notice


def is_widget_canvas(canvas) -> bool:
    return isinstance(canvas, W.DOMWidget)


def in_kernel() -> bool:
    try:
        from IPython import get_ipython

        ip = get_ipython()
        return ip is not None and hasattr(ip, "kernel")
    except Exception:
        return False


def ensure_ipympl() -> bool:
    """In a Jupyter kernel, switch matplotlib to ipympl (``%matplotlib widget``) if possible."""
    backend = matplotlib.get_backend().lower()
    if "ipympl" in backend or backend == "widget":
        return True
    if not in_kernel():
        return False
    try:
        import ipympl  # noqa: F401
        from IPython import get_ipython

        get_ipython().run_line_magic("matplotlib", "widget")
        return True
    except Exception:
        return False


def send_full_frames(canvas) -> bool:
    """Make an ipympl canvas send every frame as a complete image, never as a diff.

    Why (the fault behind "two frames drawn over each other" under fast stepping): ipympl's
    front end loads each image it receives into one ``<img>`` and paints it when it has
    loaded. An image that arrives before the previous one has loaded replaces it, and the
    previous one is never painted. matplotlib's web backend sends *diffs* (only the pixels
    that changed since the last image it sent); a diff painted over a frame the browser
    never showed leaves parts of older frames on screen — the data are right, the picture
    is not. A complete image is correct whatever was dropped before it. Costs one full PNG
    a frame (about 20–35 ms for a 1000×600 figure on a 2-core box) instead of a smaller diff.

    Returns False (and does nothing) for a canvas that is not matplotlib's web canvas.
    """
    get_diff_image = getattr(type(canvas), "get_diff_image", None)
    if get_diff_image is None or not hasattr(canvas, "_force_full"):
        return False

    ref = weakref.ref(canvas)              # no reference cycle: the canvas is freed as soon as it is closed

    def get_full_image():
        c = ref()
        if c is None:
            return None
        c._force_full = True               # the web backend's own switch: next image complete
        return get_diff_image(c)

    canvas.get_diff_image = get_full_image
    return True



def canvas_widget(fig, use_ipympl: bool):
    """The widget that shows ``fig``: its ipympl canvas (bare: no toolbar, header, footer or
    resize handle; full frames, see ``send_full_frames``) when ``use_ipympl`` and the figure's
    canvas is ipympl's, else an ipywidgets Image that the caller fills with PNG bytes."""
    if use_ipympl and is_widget_canvas(fig.canvas):
        c = fig.canvas
        c.header_visible = c.footer_visible = c.toolbar_visible = False
        c.resizable = False
        c.capture_scroll = False
        # Shown inside our VBox, ipympl's _repr_mimebundle_ (which sets the size and a PNG data
        # URL) never runs: give the canvas its size, and let the front end ask for frames once
        # attached (ipympl 0.10 would otherwise sync each frame drawn before display as a bare
        # base64 string, which the browser shows as a broken image).
        c._size = (int(fig.bbox.width), int(fig.bbox.height))
        c.syncing_data_url = False
        send_full_frames(c)
        serialise_canvas(c)                # its messages draw under the one drawing lock (views.drawlock)
        return c
    return W.Image(format="png", layout=W.Layout(width="100%", max_width="1200px"))


def error_line(exc: BaseException) -> str:
    """'TypeName: first line of the message' — how a panel reports a failure in one line."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


def check_int(value, name, lo, hi=None):
    """An integer in [lo, hi]; one-line TypeError/ValueError otherwise (flashviz.checks.check_int)."""
    return checks.check_int(value, name, lo, hi)


def check_bool(value, name):
    """True/False (NumPy bools too); one-line TypeError otherwise."""
    return checks.check_flag(value, name)


def check_open(widget) -> None:
    """Refuse to draw or export with a widget that was closed (its figure is gone)."""
    if getattr(widget, "_closed", False):
        raise ValueError(f"this {widget.kind} is closed (close() was called); create a new one to draw or export")


def close_widget(w) -> None:
    """Close an ipywidget and the Layout/Style models it owns (each is a comm of its own)."""
    for part in ("layout", "style"):
        sub = getattr(w, part, None)
        if isinstance(sub, W.Widget):
            sub.close()
    w.close()


REAL_D = 32          # head dimension of the shipped real inputs (all-MiniLM-L6-v2)
REAL_MAX_N = 512     # tokens captured


class FrameWidget:
    """Base class: transport, canvas, export, status and cleanup for one animated figure.

    Widgets with ``source``, ``N`` and ``d`` controls get the input-source switch for free:
    observe ``source`` with ``self._on_source``; ``max_N`` is N's limit for other sources.
    """

    kind = "FrameWidget"
    export_stem = "flashviz"
    max_N = 2048

    def __init__(self, *, canvas: str = "auto", figsize=NOTEBOOK_FIGSIZE, dpi: float = NOTEBOOK_DPI, key=None, interval: int = 150,
                 text_scale: float = 1.0):
        if isinstance(canvas, str) and canvas == "auto" and os.environ.get("FLASHVIZ_CANVAS") in ("png", "ipympl"):
            canvas = os.environ["FLASHVIZ_CANVAS"]      # a front end that cannot show ipympl: static frames
        if not isinstance(canvas, str) or canvas not in ("auto", "ipympl", "png"):
            raise ValueError(f"canvas must be 'auto', 'ipympl' or 'png', got {checks.shown(canvas)}")
        figsize, dpi = widget_checks.check_figure(figsize, dpi)
        self._text_scale = widget_checks.check_text_scale(text_scale)
        widget_checks.check_key(key)
        self._key = registry.caller_key(depth=3) if key is None else key
        registry.register(self.kind, self._key, self)
        self._closed = False
        self._view = None
        self.state = None
        use_ipympl = canvas == "ipympl" or (canvas == "auto" and ensure_ipympl())
        with plt.ioff():
            self.fig = plt.figure(figsize=figsize, dpi=dpi)
        # static PNG frames where the canvas is no widget but someone may look (a kernel), or when asked
        self._png_mode = canvas == "png" or (not is_widget_canvas(self.fig.canvas) and in_kernel())
        self._canvas_widget = canvas_widget(self.fig, use_ipympl)

        style = {"description_width": "initial"}
        self.play = W.Play(value=0, min=0, max=1, step=1, interval=interval, description="Play")
        # frame: the 0-based frame index (the API's k; never shown); step_slider: the same step
        # counted from 1, as every title counts it ("step 25/272" beside a slider at 25)
        self.frame = W.IntSlider(value=0, min=0, max=1)
        self.step_slider = W.IntSlider(value=1, min=1, max=2, description="step", continuous_update=True,
                                       layout=W.Layout(width="420px"))
        W.link((self.play, "value"), (self.frame, "value"))
        W.link((self.frame, "value"), (self.step_slider, "value"), transform=(lambda k: k + 1, lambda s: s - 1))
        self.prev_button = W.Button(description="◀", tooltip="previous step", layout=W.Layout(width="40px"))
        self.next_button = W.Button(description="▶", tooltip="next step", layout=W.Layout(width="40px"))
        self.prev_button.on_click(lambda _: self._step(-1))
        self.next_button.on_click(lambda _: self._step(+1))
        self.speed = W.IntSlider(value=interval, min=20, max=1000, step=10, description="ms/step", style=style,
                                 layout=W.Layout(width="220px"))
        W.link((self.speed, "value"), (self.play, "interval"))
        self.skip = W.Dropdown(options=[1, 2, 4, 8, 16], value=1, description="steps/tick", style=style,
                               layout=W.Layout(width="150px"))
        W.link((self.skip, "value"), (self.play, "step"))
        self.status = text_lines(W.HTML(value=""))
        self.export_name = W.Text(value=self.export_stem, description="file", layout=W.Layout(width="220px"))
        self.png_button = W.Button(description="frame → PNG", tooltip="save the current frame for slides")
        self.gif_button = W.Button(description="run → GIF", tooltip="save every frame as an animated GIF")
        self.export_status = W.HTML(value="")
        self.export_progress = W.IntProgress(value=0, min=0, max=1, layout=W.Layout(width="160px",
                                                                                     visibility="hidden"))
        self.png_button.on_click(lambda _: self._export("png"))
        self.gif_button.on_click(lambda _: self._export("gif"))
        self.frame.observe(self._on_frame, names="value")
        self.transport = W.HBox([self.play, self.prev_button, self.next_button, self.step_slider, self.speed,
                                 self.skip])
        self.export_row = W.HBox([self.export_name, self.png_button, self.gif_button, self.export_progress,
                                  self.export_status])
        self._controls = []          # config widgets, closed with the rest
        self._export_job = None      # the running run → GIF export (AnimationExport), if any
        self._export_thread = None
        self.widget = W.VBox([])
        self.widget.add_class("flashviz-frame-widget")     # a handle for browser tests, in any front end
        self.widget.add_class(LIVE_CLASS)                  # says so on the page if the kernel goes
        self._notice = restart_notice()
        self._lines_style = lines_style()

    @property
    def canvas_widget(self):
        """The widget that shows the figure (ipympl's canvas, or an Image of PNG frames)."""
        return self._canvas_widget

    @property
    def controls(self) -> tuple:
        """The configuration widgets (block sizes, N, toggles...) in the order they were laid out."""
        return tuple(self._controls)

    # --- for subclasses -----------------------------------------------------------------
    def _layout(self, *config_rows):
        """Assemble the box: transport, the subclass's config rows, status, canvas, export."""
        for row in config_rows:
            self._controls.extend(getattr(row, "children", ()))
        self.widget.children = [self.transport, *config_rows, self.status, self._canvas_widget, self.export_row,
                                self._notice, self._lines_style]

    def _watch(self, *controls):
        """Rebuild the view whenever one of these controls changes."""
        for w in controls:
            w.observe(self._on_config, names="value")
            self._controls.append(w)

    def _make_view(self):
        """Build and return the view for the current configuration (subclasses override)."""
        raise NotImplementedError

    def _config_problem(self):
        """A one-line reason the current configuration cannot be shown, or None."""
        return None

    # --- public API ---------------------------------------------------------------------
    @property
    def n_frames(self) -> int:
        """Number of frames of the current view."""
        return 0 if self._view is None else self._view.n_frames

    @serialised
    def show_frame(self, k: int):
        """Draw frame k (0 <= k < n_frames); returns the frame's state.
        Raises TypeError for a non-integer k and IndexError out of range."""
        check_open(self)
        if isinstance(k, bool) or not isinstance(k, numbers.Integral):
            raise TypeError(f"k must be an integer frame index from 0 to {self.n_frames - 1}, got {checks.shown(k)}")
        if not 0 <= k < self.n_frames:
            raise IndexError(f"frame {k} is out of range 0..{self.n_frames - 1}")
        if self.frame.value != k:
            self.frame.value = int(k)       # the observer draws it
        else:
            self._render(int(k))
        return self.state

    @serialised
    def save_png(self, path, k: int | None = None):
        """Save frame k (default: the current frame) as a PNG file; returns its Path.

        Raises one-line errors before drawing anything: TypeError/ValueError for a path not
        ending in .png or a k outside 0..n_frames-1; FileNotFoundError, NotADirectoryError,
        IsADirectoryError or PermissionError (OSError) for a path that cannot be written."""
        check_open(self)
        path = checks.check_output_path(path, (".png",))
        k = self.frame.value if k is None else k
        if isinstance(k, bool) or not isinstance(k, numbers.Integral) or not 0 <= k < self.n_frames:
            raise (ValueError if isinstance(k, numbers.Integral) and not isinstance(k, bool) else TypeError)(
                f"k must be a frame index from 0 to {self.n_frames - 1} (or None: the current frame), got {checks.shown(k)}")
        try:
            return export.save_frame_png(self._view, int(k), path)
        except OSError as exc:
            raise checks.os_error_line(exc, path) from None
        finally:
            self._redraw_current()

    @serialised
    def save_gif(self, path, *, frames=None, fps: float = 8, progress=None):
        """Save the run (or the given frame indices) as .gif (.mp4 with ffmpeg); returns its Path.
        progress: optional callable(i, n) after each frame (e.g. a tqdm update).

        Raises one-line errors before rendering anything: TypeError/ValueError for a path not
        ending in .gif/.mp4, bad frame indices, more than ``MAX_EXPORT_FRAMES`` frames (keep one
        in n), fps outside [1/655.35, 100] frames per second (``export.check_fps``) or a progress
        that is not callable; OSError subclasses for a path that cannot be written."""
        check_open(self)
        path = checks.check_output_path(path, (".gif", ".mp4"))
        frames = export.check_export_frames(frames, self.n_frames)
        fps = export.check_fps(fps)
        checks.check_callable(progress, "progress", "a function progress(i, n)")
        try:
            return export.save_animation(self._view, path, frames=frames, fps=fps, progress=progress)
        except OSError as exc:
            raise checks.os_error_line(exc, path) from None
        finally:
            self._redraw_current()

    @serialised
    def close(self):
        """Close the figure and every control of this widget (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self.play.playing = False
        job = getattr(self, "_export_job", None)
        if job is not None:
            job.cancel()
        blitter = self._blitter()
        if blitter is not None:
            blitter.disconnect()
        toolbar = getattr(self.fig.canvas, "toolbar", None)
        plt.close(self.fig)
        if isinstance(toolbar, W.Widget):
            close_widget(toolbar)          # ipympl's toolbar widget: closed now, not when the canvas is collected
        for w in (self.play, self.frame, self.step_slider, self.prev_button, self.next_button, self.speed, self.skip, self.status,
                  self._canvas_widget, self.export_name, self.png_button, self.gif_button, self.export_status,
                  self.export_progress, self._notice, self._lines_style,
                  self.transport, self.export_row, *self._controls, *self.widget.children, self.widget):
            close_widget(w)
        registry.unregister(self.kind, self._key, self)

    def _repr_mimebundle_(self, **kwargs):
        from . import book
        if book.enabled():       # building the static book (FLASHVIZ_BOOK=1): its exported animation instead
            return book.frame_widget_bundle(self)
        return self.widget._repr_mimebundle_(**kwargs)

    # --- internals ----------------------------------------------------------------------
    @serialised
    def _step(self, delta: int):
        if self.n_frames:
            self.frame.value = int(np.clip(self.frame.value + delta, 0, self.n_frames - 1))

    @serialised
    def _on_frame(self, change):
        self._render(change["new"])

    @serialised
    def _on_config(self, change=None):
        if getattr(self, "_suspended", False):
            return
        source, d = getattr(self, "source", None), getattr(self, "d", None)
        if source is not None and d is not None and source.value == "real" and d.value != REAL_D:
            d.value = REAL_D          # the real inputs have d = 32 (this change rebuilds once)
            return
        self._rebuild()

    @serialised
    def _on_source(self, change):
        """Switching the input source: lock d (and cap N) for the real inputs, then rebuild once."""
        real = change["new"] == "real"
        self._suspended = True            # one rebuild for the whole switch, not one per control
        try:
            if real:
                self.d.value = REAL_D
                self.N.value = min(self.N.value, REAL_MAX_N)
            self.N.max = REAL_MAX_N if real else self.max_N
            self.d.disabled = real
        finally:
            self._suspended = False
        self._rebuild()

    @serialised
    def _rebuild(self):
        """Re-make the view from the controls and go to frame 0; keep the old one if impossible."""
        if self._closed:
            return
        problem = self._config_problem()
        if problem:
            self.status.value = f"<span style='color:#d62728'>⚠ {problem} Showing the previous run.</span>"
            return
        old = self._blitter()
        if old is not None:
            old.disconnect()
        with scaled_text(self._text_scale):
            self._view = self._make_view()
        self.play.playing = False
        n = self._view.n_frames
        with self.frame.hold_trait_notifications():
            self.frame.unobserve(self._on_frame, names="value")
            self.play.value = 0
            self.frame.value = 0
            self.play.max = self.frame.max = max(n - 1, 0)
            self.step_slider.value = 1          # first: a lower max would clamp it, and the link move the frame
            self.step_slider.max = max(n, 1)
            self.frame.observe(self._on_frame, names="value")
        self._render(0)

    @serialised
    def _render(self, k: int):
        if self._closed or self._view is None:
            return
        k = int(np.clip(k, 0, self.n_frames - 1))
        if isinstance(self._view, BlittedFrameView):
            self.state = self._view.render(k)
        else:
            self.state = self._view.draw_frame(k)
            self.fig.canvas.draw_idle()
        if self._png_mode:
            buf = io.BytesIO()
            self.fig.savefig(buf, format="png", dpi=self.fig.dpi)
            self._canvas_widget.value = buf.getvalue()

    def _blitter(self):
        """The view's blitter (views.blit), or None (no view, a view that does not blit, or not yet enabled)."""
        return self._view.blitter if isinstance(self._view, BlittedFrameView) else None

    @serialised
    def _redraw_current(self):
        blitter = self._blitter()
        if blitter is not None:
            blitter.static_bg = None     # force a full redraw of the live canvas
        self._render(self.frame.value)

    @serialised
    def _export(self, kind: str):
        if kind == "gif" and self._export_job is not None:
            self._export_job.cancel()          # the button reads "stop" while an export runs
            return
        name = (self.export_name.value or self.export_stem).strip()
        try:
            if kind == "png":
                path = self.save_png(f"{name}-step{self.frame.value + 1}.png")
            else:
                self._start_gif_export(checks.check_output_path(f"{name}.gif", (".gif",), name="file"))
                return
            self.export_status.value = f"saved <code>{path.resolve()}</code>"
        except Exception as exc:  # a full disk or a bad name: say so, keep working
            self.export_status.value = f"<span style='color:#d62728'>export failed: {error_line(exc)}</span>"

    def _start_gif_export(self, path):
        """run → GIF, every step: frames are rendered by worker processes on copies of the figure
        (forked here, in the thread that owns it); a background thread collects them and writes
        the file, so the kernel and every widget stay responsive. The button stops it."""
        from ..views.export import AnimationExport, ExportCancelled

        bar = self.export_progress

        def tick(i, n):
            bar.value = i

        n = self.n_frames
        step = -(-n // export.MAX_EXPORT_FRAMES)          # a very long run: keep one frame in `step`
        job = AnimationExport(self._view, path, frames=range(0, n, step) if step > 1 else None, progress=tick)
        bar.max, bar.value, bar.layout.visibility = job.n, 0, "visible"
        self.export_status.value = ("writing GIF …" if step == 1 else
                                    f"writing GIF of one step in {step} ({job.n:,} of {n:,}: at most "
                                    f"{export.MAX_EXPORT_FRAMES:,} frames) …")

        def finish(msg):
            bar.layout.visibility = "hidden"
            self.gif_button.description = "run → GIF"
            self._export_job = None
            self.export_status.value = msg

        def work():
            try:
                written = job.run()
                msg = f"saved <code>{written.resolve()}</code>"
            except ExportCancelled:
                msg = "export stopped"
            except Exception as exc:
                msg = f"<span style='color:#d62728'>export failed: {error_line(exc)}</span>"
            finally:
                if not job.parallel:
                    self._redraw_current()   # rendered on the live figure: put the current frame back
            finish(msg)

        if not job.parallel:                   # no fork here: render in this thread, as before
            work()
            return
        self._export_job = job
        self.gif_button.description = "stop export"
        self._export_thread = threading.Thread(target=work, name="flashviz-export", daemon=True)
        self._export_thread.start()

    def wait_export(self, timeout=None) -> bool:
        """Wait for a running "run → GIF" export to finish; True when none is running any more."""
        t = self._export_thread
        if t is not None:
            t.join(timeout)
            return not t.is_alive()
        return True
