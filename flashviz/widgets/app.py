"""ChapterApp: every lesson's widget behind one chapter picker — the page Voilà serves in class.

A chapter's widgets are made once and kept (a revisit finds them as they were left);
``close()`` closes them all. In a running kernel (Voilà, JupyterLab) the chapter after the one
shown, in picker order, is made in the kernel's idle time shortly after a chapter opens, so a
class going through the lessons in order finds the next one, figure included, already made.
The build waits while the shown chapter plays or is being stepped; a click or a slider move that
arrives during it waits for it (one chapter's build: 0.6-1.6 s on a 2-core machine). It also
waits for the page: none is made before a front end has loaded the kernel's widgets (see
``page_connected``), so Voilà, which runs the app's cell before its page connects, never makes a
chapter while the page connects.
``flashviz present --no-prefetch`` turns it off (``prefetch=False``).

The page fills the window: one header row (title and chapter picker), a one-line caption, and
the chapter's widgets, the controls in a column beside the figure (a 16:9 window is wider than
the figure needs, so beside the controls it gets the window's height: its text about 1.3x
larger on screen at 1280×720 than with the controls above it), the figure's canvas scaled by
the browser to the box left, keeping its aspect (the bitmap drawn at about its 1080p size).
``presenter=True`` for a projector: controls in a 20 px font, the export row and speed
controls hidden; every figure text 1.4x larger.
"""

from __future__ import annotations

import html
import importlib
import inspect

import ipywidgets as W

from ..checks import shown
from ..views.drawlock import serialised
from . import checks as widget_checks
from . import registry
from .base import close_widget
from .notice import LIVE_CLASS, restart_notice

# chapter label → [(module, class, kwargs), ...]; a chapter's widgets are made when it is picked
CHAPTERS = {
    "0 · Start here: tiles on real inputs": [("flashviz.widgets.explorer", "TileExplorer", {}),
                                             ("flashviz.widgets.gpu_panel", "GPUPanel", {"explorer": 0})],
    "1 · The memory wall": [("flashviz.widgets.memory_wall", "MemoryWall", {"repeat": 3})],
    "2 · Online softmax": [("flashviz.widgets.online_softmax", "OnlineSoftmaxExplorer", {})],
    "3 · Tiling": [("flashviz.widgets.explorer", "TileExplorer", {"N": 128, "Br": 16, "Bc": 16})],
    "4 · Block size": [("flashviz.widgets.blocksize", "BlockSizeExplorer", {})],
    "5 · Causal masking": [("flashviz.widgets.causal", "CausalExplorer", {})],
    "5 · Loop order: FA1 vs FA2": [("flashviz.widgets.loop_order", "LoopOrderExplorer", {})],
    "6 · Backward pass": [("flashviz.widgets.backward", "BackwardExplorer", {}),
                          ("flashviz.widgets.backward_gpu_panel", "BackwardGPUPanel", {"explorer": 0})],
    "7 · The GPU kernel": [("flashviz.widgets.recorded_figures", "RecordedFigures", {}),
                           ("flashviz.widgets.mma_panel", "TensorCorePanel", {})],
    "7 · What the GPU actually does": [("flashviz.widgets.timeline", "TimelineExplorer", {})],
    "8 · FlashAttention-3 on Hopper": [("flashviz.widgets.fa3_figures", "Fa3Figures", {})],
    "9 · Decode: a different bottleneck": [("flashviz.widgets.decode", "DecodeExplorer", {})],
}

# one line per chapter, under the picker
CAPTIONS = {
    "0 · Start here: tiles on real inputs": "Step through FlashAttention's tiles on real inputs: what sits "
                                            "in SRAM, what goes to HBM, the running softmax.",
    "1 · The memory wall": "Measured here: QKᵀ does ~30 FLOPs per byte, the exp over S 1/8; "
                           "S and P grow as N².",
    "2 · Online softmax": "The running max m and sum l: one pass over the keys, rescaled as the max grows.",
    "3 · Tiling": "Q, K, V in tiles that fit in SRAM; S and P never leave the chip.",
    "4 · Block size": "Bigger tiles, fewer re-reads of K and V, until the tiles no longer fit in SRAM.",
    "5 · Causal masking": "Tiles above the diagonal are skipped; only the diagonal ones are masked.",
    "5 · Loop order: FA1 vs FA2": "Keys outer (FA1) or queries outer (FA2): the same result, different traffic.",
    "6 · Backward pass": "Recompute P from Q, K and lse instead of storing it: more FLOPs, far fewer bytes.",
    "7 · The GPU kernel": "The same tiling on tensor cores: recorded H200 figures, and a live run where a GPU is.",
    "7 · What the GPU actually does": "A measured H200 run: every thread block on its SM, one block's steps, "
                                      "the tiles in flight.",
    "8 · FlashAttention-3 on Hopper": "A producer warpgroup copies by TMA, consumers take turns on the tensor "
                                      "cores: the design, then H200 timings.",
    "9 · Decode: a different bottleneck": "One query row against the KV cache: split the keys to fill the SMs, "
                                          "merge by lse; GQA, pages.",
}

#: the figure every animated widget gets in the app: (width, height) inches and dpi. The
#: browser scales the bitmap to the window (CSS below); dpi is chosen so that it is drawn
#: at about the size it is shown at 1920×1080, never enlarged much.
APP_FIGURE = {"figsize": (11.0, 6.8), "dpi": 130}
#: presenter: the same inches, a sharper bitmap, and every text of the figure 1.4x its notebook
#: size (the views lay themselves out for it; tests/chapters/test_no_overlap.py checks both scales)
PRESENTER_FIGURE = {"figsize": (11.0, 6.8), "dpi": 140, "text_scale": 1.4}

#: seconds after a chapter opens before the next one is made in idle time: the chapter shown
#: first gets its figure (the browser asks for a redraw right after a chapter appears); the
#: build waits this long again whenever the shown chapter played or moved in the meantime
PREFETCH_DELAY_S = 0.6

#: beside the picker while a chapter is made on its visit (0.6-2 s on a 2-core machine)
BUSY_HTML = "<span class='flashviz-app-busy-line' title='{label}'>making this chapter…</span>"

#: the page fills the window; the canvas of the chapter's figure takes the height left and is
#: scaled by the browser into that box, keeping its aspect (object-fit: contain). An image
#: chapter's PNG gets the window's height less what is above it (about 196 px with a two-line tab
#: caption, set compact) and a small margin: at 1366×768 the tallest first tab (chapter 7's
#: benchmark) shows its 7.5 pt texts at 8.1 px (issue 20). Presenter mode keeps its own spacing.
APP_CSS = """<style>
.flashviz-app { height: calc(100vh - 24px); overflow: hidden !important; }
.flashviz-app > .flashviz-app-body { flex: 1 1 0; min-height: 0; overflow-y: auto !important; }
.flashviz-app-body img { max-width: 100%; max-height: calc(100vh - 214px); object-fit: contain; }
.flashviz-app-body .jupyter-widget-TabPanel-tabContents.widget-tab-contents { padding-top: 6px; padding-bottom: 8px; }
.flashviz-app-body .jupyter-widget-TabPanel-tabContents .widget-html-content { line-height: 1.35; }
.flashviz-app-body > * { flex: 0 0 auto; }
.flashviz-app-body > .flashviz-fit { flex: 1 1 0; min-height: calc(100% - 48px); overflow: hidden !important; }
.flashviz-fit > * { flex: 0 0 auto; }
.flashviz-fit > .jupyter-matplotlib { flex: 1 1 0; min-height: 120px; width: 100%; display: flex;
  flex-direction: column; }
.flashviz-fit .jupyter-matplotlib-figure, .flashviz-fit .jupyter-matplotlib-canvas-container {
  flex: 1 1 0; min-height: 0; width: 100%; display: flex; flex-direction: column; }
.flashviz-app .jupyter-matplotlib-canvas-div { width: 100% !important; height: 100% !important; flex: 1 1 0; }
.flashviz-app .jupyter-matplotlib-canvas-div, .flashviz-app .jupyter-matplotlib-canvas-container {
  margin: 0 !important; }   /* their 2 px margins took the canvas past the window's edge */
.flashviz-app .jupyter-matplotlib-canvas-div canvas { width: 100% !important; height: 100% !important;
  object-fit: contain; object-position: left top; }
.flashviz-app-busy .flashviz-app-body { opacity: 0.35; cursor: progress; }
.flashviz-app-busy-line { font-style: italic; color: #555; }
.flashviz-tabs-header .widget-html-content { white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
.flashviz-app-caption .widget-html-content { white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
.flashviz-app .lm-TabBar-tab { flex: 0 0 auto !important; }
.flashviz-side > .widget-hbox { flex: 1 1 0; min-height: 0; align-items: stretch; }
.flashviz-side-controls { flex: 0 0 330px; width: 330px; overflow-x: hidden !important; }
.flashviz-side-controls .widget-hbox { flex-wrap: wrap; }
.flashviz-side-controls .widget-html-content { white-space: normal; }
.flashviz-side-controls .widget-slider, .flashviz-side-controls .widget-text { width: 300px !important; }
.flashviz-side > .widget-hbox > .jupyter-matplotlib { flex: 1 1 0; min-width: 0; display: flex; flex-direction: column; }
</style>"""

PRESENTER_CSS = """<style>
.flashviz-app .jupyter-widgets, .flashviz-app .widget-label, .flashviz-app .widget-readout,
.flashviz-app .widget-html-content, .flashviz-app .widget-dropdown select, .flashviz-app .widget-button,
.flashviz-app .jupyter-button { font-size: 20px !important; }
.flashviz-app .widget-label { width: auto !important; max-width: none !important; }
.flashviz-app .widget-dropdown, .flashviz-app .widget-dropdown select, .flashviz-app .jupyter-button {
  width: auto !important; max-width: none !important; }
.flashviz-app .widget-html-content { line-height: 1.4 !important; }
.flashviz-app .flashviz-side-controls { flex: 0 0 410px; width: 410px; }
.flashviz-app .widget-checkbox label, .flashviz-app .widget-checkbox input { font-size: 20px !important; }
.flashviz-app .widget-checkbox, .flashviz-app .widget-label-basic, .flashviz-app .widget-label-basic span {
  width: auto !important; max-width: none !important; overflow: visible !important; }
.flashviz-app .widget-checkbox { margin-right: 12px !important; }
.flashviz-app .widget-checkbox input { width: 20px; height: 20px; }
.flashviz-app .lm-TabBar-tab { font-size: 17px !important; }
.flashviz-app-body img { max-height: calc(100vh - 250px); }
.flashviz-app-body .jupyter-widget-TabPanel-tabContents.widget-tab-contents { padding-top: 15px; padding-bottom: 15px; }
.flashviz-app .flashviz-side-controls .widget-dropdown { max-width: calc(100% - 4px) !important; }   /* its margins */
.flashviz-app .flashviz-side-controls .widget-dropdown select { min-width: 0 !important; flex: 1 1 auto; }
</style>"""


def _accepted(cls, kwargs: dict) -> dict:
    """The keyword arguments of ``kwargs`` that ``cls(...)`` accepts (all of them if it takes
    **kwargs): the app's extras (key, figsize, dpi, text_scale) go only to widgets that take them."""
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return kwargs
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return kwargs
    return {k: v for k, v in kwargs.items() if k in params}


def _close_all(widgets, folds) -> None:
    for w in widgets:
        w.close()
    for box in folds:
        close_widget(box)


def _kernel_loop():
    """The running kernel's event loop (ipykernel's tornado IOLoop), or None outside a kernel."""
    try:
        from IPython import get_ipython
    except ImportError:      # pragma: no cover - IPython comes with ipywidgets
        return None
    return getattr(getattr(get_ipython(), "kernel", None), "io_loop", None)


def page_connected() -> bool:
    """Whether a front end has asked this kernel for its widgets (True outside a kernel).

    Why the idle build waits for it: Voilà runs the app's cell, then serves the page, whose widget
    manager connects to the kernel and loads every widget made so far at once (ipywidgets' control
    comm: ``request_states``). Widgets made while it connects reach it half: the comm-open messages
    sent before it listens are lost, the later ones arrive, and a model whose state names a lost
    one (a canvas its Layout) cannot be made ("widget model not found", after 2 s), so ipywidgets
    makes an error model in its place; the states it then loads give that model the canvas's view
    name, and showing the chapter fails: ipympl's MPLCanvasView on a model that is no
    MPLCanvasModel ("Cannot read properties of undefined (reading '0')" in
    ``resize_and_update_canvas``: the model has no ``size``). The manager registers its comm
    target before it opens the control comm, so once the kernel has seen that comm open, every
    widget made afterwards reaches the page whole. ipywidgets keeps that comm in
    ``Widget._control_comm`` (None until a front end opened one; a missing attribute counts as
    connected, as before this check)."""
    if _kernel_loop() is None:
        return True
    return getattr(W.Widget, "_control_comm", True) is not None


def available_chapters() -> list[str]:
    """Chapter labels whose widget modules are importable in this installation."""
    out = []
    for label, parts in CHAPTERS.items():
        try:
            for module, cls, _ in parts:
                getattr(importlib.import_module(module), cls)
            out.append(label)
        except (ImportError, AttributeError):
            continue
    return out


class ChapterApp:
    """A chapter picker over the lesson widgets.

    chapter: label to open first (default: the first); presenter: larger figures and fonts;
    prefetch: make the next chapter in the kernel's idle time (only where a kernel runs;
    ``loop`` is that event loop, found by default: anything with tornado's ``call_later`` and
    ``remove_timeout``). Public: ``chapter`` (the Dropdown), ``current`` (the widgets shown),
    ``busy`` (beside the picker: says which chapter is being made while it is; the page dims the
    last chapter meanwhile), ``widget``, ``built`` (labels made so far), ``close()``.
    Raises ValueError for an unknown chapter label, TypeError for a non-bool flag.
    """

    def __init__(self, chapter: str | None = None, *, presenter: bool = False, prefetch: bool = True,
                 key=None, loop=None):
        labels = available_chapters()
        if chapter is not None and chapter not in labels:
            raise ValueError(f"chapter must be one of {labels}, got {shown(chapter)}")
        for name, flag in (("presenter", presenter), ("prefetch", prefetch)):
            if not isinstance(flag, bool):
                raise TypeError(f"{name} must be True or False, got {shown(flag)}")
        self.presenter = presenter
        widget_checks.check_key(key)
        self._key = registry.caller_key() if key is None else key
        registry.register("ChapterApp", self._key, self)      # a re-run cell closes the old app
        self.chapter = W.Dropdown(options=labels, value=chapter or labels[0], description="chapter",
                                  layout=W.Layout(width="560px" if presenter else "460px"))
        self.title = W.HTML("<b style='font-size:1.25em'>FlashAttention, seen and checked</b>" + APP_CSS
                            + (PRESENTER_CSS if presenter else ""), layout=W.Layout(margin="0 24px 0 0"))
        self.caption = W.HTML()
        self.caption.add_class("flashviz-app-caption")
        self.body = W.VBox([])
        self.body.add_class("flashviz-app-body")
        self.status = W.HTML()
        self.current, self._folds = [], []
        self._chapters, self._failed = {}, None     #: label -> (widgets, folds, body children); a failed build
        self._loop = (loop or _kernel_loop()) if prefetch else None
        self._skip, self._timer = set(), None       #: labels whose idle build failed; the pending call
        self._seen = ()                             #: the shown chapter's activity when the timer started
        self._page = False                          #: a page had loaded the widgets when the timer started
        self.busy = W.HTML(layout=W.Layout(margin="0 0 0 16px"))    #: says a chapter is being made
        self.header = W.HBox([self.title, self.chapter, self.busy], layout=W.Layout(align_items="center"))
        self._notice = restart_notice()      # the page says so if the kernel goes
        self.widget = W.VBox([self.header, self.caption, self.status, self.body, self._notice])
        self.widget.add_class("flashviz-app")
        self.widget.add_class(LIVE_CLASS)
        self.chapter.observe(lambda change: self._open(change["new"]), names="value")
        self._open(self.chapter.value)

    @serialised
    def _open(self, label: str):
        """Show chapter ``label``: built on its first visit, kept afterwards (a teacher who goes
        back finds it at the step they left; a revisit costs no drawing). A chapter that
        failed to start is not kept: the next visit tries again."""
        self._drop_failed()
        built = self._chapters.get(label)
        if built is None:
            # said before the build, so the page shows it while the kernel works (a widget's
            # update leaves at once); the last chapter shown is dimmed under it
            self.busy.value = BUSY_HTML.format(label=html.escape(label))
            self.widget.add_class("flashviz-app-busy")
            try:
                *built, error = self._build(label)
            finally:
                self.busy.value = ""
                self.widget.remove_class("flashviz-app-busy")
            if error:
                self._failed = built
            else:
                self._chapters[label] = built
            self.status.value = error
        else:
            self.status.value = ""
        self.current, self._folds, children = built
        self.body.children = children
        self.caption.value = f"<i>{CAPTIONS.get(label, '')}</i>"     # last: the page shows the chapter whole
        self._schedule_prefetch()

    @property
    def built(self) -> list[str]:
        """Labels of the chapters made so far (visited or made in idle time), in picker order."""
        return [label for label in self.chapter.options if label in self._chapters]

    def _activity(self) -> tuple:
        """What the shown chapter is doing: each animated widget's (step, playing)."""
        return tuple((getattr(w.frame, "value", None), bool(getattr(w.play, "playing", False)))
                     for w in self.current if hasattr(w, "frame") and hasattr(w, "play"))

    def _schedule_prefetch(self) -> None:
        """(Re)start the timer that makes the next chapter; a new pick cancels the previous one."""
        if self._loop is None:
            return
        if self._timer is not None:
            self._loop.remove_timeout(self._timer)
        self._seen = self._activity()
        self._page = page_connected()
        self._timer = self._loop.call_later(PREFETCH_DELAY_S, self._prefetch)

    @serialised
    def _prefetch(self) -> None:
        """Make the chapter after the shown one (picker order, wrapping) if it is not made yet;
        while the shown chapter plays or moved since the timer started, wait again; until a page
        has loaded the widgets, and PREFETCH_DELAY_S after it did (its first chapter gets its
        figure first), wait too (``page_connected``). One that fails here is not kept: its visit
        builds it again and shows the error."""
        self._timer = None
        now = self._activity()
        if now != self._seen or any(playing for _, playing in now):
            self._schedule_prefetch()                   # a class is watching: do not stall it
            return
        if not self._page:
            self._schedule_prefetch()                   # no page yet, or one just connecting: made now, it could get half
            return
        labels = list(self.chapter.options)
        label = labels[(labels.index(self.chapter.value) + 1) % len(labels)]
        if label in self._chapters or label in self._skip:
            return
        widgets, folds, children, error = self._build(label)
        if error:
            self._skip.add(label)
            _close_all(widgets, folds)
        else:
            self._chapters[label] = (widgets, folds, children)

    def _build(self, label: str):
        """(widgets, folds, body children, error HTML or ""): the chapter made, not shown."""
        current, folds, error = [], [], ""
        fig = PRESENTER_FIGURE if self.presenter else APP_FIGURE
        try:
            for module, cls, kwargs in CHAPTERS[label]:
                Widget = getattr(importlib.import_module(module), cls)
                kw = {k: (current[v] if k == "explorer" else v) for k, v in kwargs.items()}
                extra = {"key": ("ChapterApp", id(self), label, cls), **({} if "explorer" in kw else fig)}
                current.append(Widget(**kw, **_accepted(Widget, extra)))
        except Exception as exc:  # a chapter that fails says so; the picker keeps working
            error = f"<span style='color:#d62728'>This chapter could not start: {type(exc).__name__}: {exc}</span>"
        try:                      # the widgets made before a failure are shown (a GPU panel's, say, not the lesson's)
            for w in current:
                folds.extend(self._fit(w))
            children = tuple(self._placed(n, w, folds) for n, w in enumerate(current))
        except Exception as exc:  # laying them out failed: nothing shown, all closed with the chapter
            error = error or f"<span style='color:#d62728'>This chapter could not start: {type(exc).__name__}: {exc}</span>"
            children = ()
        return current, folds, children, error

    def _drop_failed(self) -> None:
        if self._failed is not None:
            widgets, folds, _ = self._failed
            self._failed = None
            _close_all(widgets, folds)

    @staticmethod
    def _placed(n: int, w, folds: list):
        """The chapter's first widget as it is; a GPU panel after it folded under a header
        (closed: the figure keeps the window's height; a click opens it), the header added to
        ``folds``."""
        if n == 0 or getattr(w, "fig", None) is not None:
            return w.widget
        title = getattr(w, "TITLE", type(w).__name__)
        box = W.Accordion(children=[w.widget], titles=(title,),
                          selected_index=None)
        folds.append(box)
        return box

    def _fit(self, w) -> tuple:
        """A widget with a figure: controls in a column beside it, the figure takes the height
        left and scales its canvas into it (APP_CSS); presenter: hide what a class does not
        need (the export row, the speed controls). Returns the boxes made here (they close
        with the chapter)."""
        if getattr(w, "fig", None) is None:
            return ()
        w.widget.add_class("flashviz-fit")
        if self.presenter:
            for name in ("export_row", "speed", "skip"):
                part = getattr(w, name, None)
                if isinstance(part, W.Widget):
                    part.layout.display = "none"
        return self._side_by_side(w)

    @staticmethod
    def _side_by_side(w):
        """The controls in a column left of the figure. A 16:9 window is wider than the figure
        (aspect 1.6) needs once the controls sit above it, so beside them the figure gets the
        window's height: its text is about 1.3x larger on screen at 1280×720 than stacked."""
        kids = list(w.widget.children)
        canvas = next((c for c in kids if c is getattr(w.fig, "canvas", None)), None) or \
            next((c for c in kids if isinstance(c, W.Image)), None)
        if canvas is None:
            return ()
        controls = W.VBox([c for c in kids if c is not canvas])
        controls.add_class("flashviz-side-controls")
        row = W.HBox([controls, canvas])
        w.widget.children = [row]
        w.widget.add_class("flashviz-side")
        return (controls, row, *controls.children)    # the widget's close() no longer sees its old rows

    def close(self):
        """Close every chapter's widgets and the picker (idempotent); nothing more is made."""
        if self._timer is not None:
            self._loop.remove_timeout(self._timer)
            self._timer = None
        self._loop = None
        self._drop_failed()
        for widgets, folds, _ in self._chapters.values():
            _close_all(widgets, folds)
        self._chapters.clear()
        self.current, self._folds = [], []
        for w in (self.chapter, self.title, self.busy, self.header, self.caption, self.status, self.body,
                  self._notice, self.widget):
            close_widget(w)
        registry.unregister("ChapterApp", self._key, self)

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)
