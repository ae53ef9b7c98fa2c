"""ChapterApp: every lesson's widget behind one chapter picker — the page Voilà serves in class.

Switching chapters closes the previous widgets (no figures pile up). ``presenter=True``
draws figures larger and the controls in a larger font, for a projector.
"""

from __future__ import annotations

import importlib
import inspect

import ipywidgets as W

from .base import close_widget

# chapter label → [(module, class, kwargs), ...]; a chapter's widgets are made when it is picked
CHAPTERS = {
    "0 · Start here: tiles on real inputs": [("flashviz.widgets.explorer", "TileExplorer", {}),
                                             ("flashviz.widgets.gpu_panel", "GPUPanel", {"explorer": 0})],
    "2 · Online softmax": [("flashviz.widgets.online_softmax", "OnlineSoftmaxExplorer", {})],
    "3 · Tiling": [("flashviz.widgets.explorer", "TileExplorer", {"N": 128, "Br": 16, "Bc": 16})],
    "4 · Block size": [("flashviz.widgets.blocksize", "BlockSizeExplorer", {})],
    "5 · Causal masking": [("flashviz.widgets.causal", "CausalExplorer", {})],
    "5 · Loop order: FA1 vs FA2": [("flashviz.widgets.loop_order", "LoopOrderExplorer", {})],
    "6 · Backward pass": [("flashviz.widgets.backward", "BackwardExplorer", {})],
    "7 · The GPU kernel": [("flashviz.widgets.recorded_figures", "RecordedFigures", {}),
                           ("flashviz.widgets.mma_panel", "TensorCorePanel", {})],
}

PRESENTER_CSS = """<style>
.jupyter-widgets, .widget-label, .widget-readout, .widget-html-content, .widget-dropdown select,
.widget-button, .jupyter-button { font-size: 20px !important; }
.widget-html-content { line-height: 1.4 !important; }
</style>"""


def _accepted(cls, kwargs: dict) -> dict:
    """The keyword arguments of ``kwargs`` that ``cls(...)`` accepts (all of them if it takes
    **kwargs): the app's extras (key, figsize, dpi) go only to widgets that take them."""
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return kwargs
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return kwargs
    return {k: v for k, v in kwargs.items() if k in params}


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

    chapter: label to open first (default: the first); presenter: larger figures and fonts.
    Public: ``chapter`` (the Dropdown), ``current`` (the widgets shown), ``widget``, ``close()``.
    Raises ValueError for an unknown chapter label.
    """

    def __init__(self, chapter: str | None = None, *, presenter: bool = False):
        labels = available_chapters()
        if chapter is not None and chapter not in labels:
            raise ValueError(f"chapter must be one of {labels}, got {chapter!r}")
        self.presenter = bool(presenter)
        self.chapter = W.Dropdown(options=labels, value=chapter or labels[0], description="chapter",
                                  layout=W.Layout(width="480px"))
        self.title = W.HTML("<h2 style='margin:4px 0'>FlashAttention, seen and checked</h2>"
                            + (PRESENTER_CSS if self.presenter else ""))
        self.body = W.VBox([])
        self.status = W.HTML()
        self.current = []
        self.widget = W.VBox([self.title, self.chapter, self.status, self.body])
        self.chapter.observe(lambda change: self._open(change["new"]), names="value")
        self._open(self.chapter.value)

    def _open(self, label: str):
        for w in self.current:
            w.close()
        self.current = []
        big = {"figsize": (12.5, 7.6), "dpi": 100} if self.presenter else {}
        try:
            for module, cls, kwargs in CHAPTERS[label]:
                Widget = getattr(importlib.import_module(module), cls)
                kw = {k: (self.current[v] if k == "explorer" else v) for k, v in kwargs.items()}
                extra = {"key": ("ChapterApp", id(self), cls), **({} if "explorer" in kw else big)}
                self.current.append(Widget(**kw, **_accepted(Widget, extra)))
            self.status.value = ""
        except Exception as exc:  # a chapter that fails says so; the picker keeps working
            self.status.value = f"<span style='color:#d62728'>This chapter could not start: {type(exc).__name__}: {exc}</span>"
        self.body.children = [w.widget for w in self.current]

    def close(self):
        """Close the shown chapter's widgets and the picker (idempotent)."""
        for w in self.current:
            w.close()
        self.current = []
        for w in (self.chapter, self.title, self.status, self.body, self.widget):
            close_widget(w)

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)
