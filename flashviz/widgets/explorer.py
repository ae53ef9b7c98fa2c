"""TileExplorer: the main widget. Watch FlashAttention's tiled forward pass step by step.

Controls (ipywidgets) drive a recorded run: changing N, d, Br, Bc, the input source,
causal, rescale, the element type or the SRAM budget re-runs ``flash_forward(...,
record=True)``; Play / the frame slider replay its trace through the views. Frames are
drawn by widget events only (no blocking loops), with blitting.
"""

from __future__ import annotations

import io
import numbers

import ipywidgets as W
import matplotlib
import matplotlib.pyplot as plt
import numpy as np

from .. import data as fvdata
from ..reference import attention
from ..replay import Replay
from ..tiled import flash_forward
from ..views import SRAM_BUDGETS, ExplorerFigure
from . import registry

BLOCKS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
HEAD_DIMS = (8, 16, 32, 64, 128)
DTYPES = {"float32 (4 B)": np.float32, "float16 (2 B)": np.float16, "float64 (8 B)": np.float64}
MAX_TILES = 4096          # more tiles than this is no longer an animation: the widget says so
MAX_N = 2048


def _is_widget_canvas(canvas) -> bool:
    return isinstance(canvas, W.DOMWidget)


def _ensure_ipympl() -> bool:
    """In a Jupyter kernel, switch matplotlib to ipympl (``%matplotlib widget``) if possible."""
    backend = matplotlib.get_backend().lower()
    if "ipympl" in backend or backend == "widget":
        return True
    try:
        from IPython import get_ipython

        ip = get_ipython()
        if ip is None or not hasattr(ip, "kernel"):
            return False
        import ipympl  # noqa: F401

        ip.run_line_magic("matplotlib", "widget")
        return True
    except Exception:
        return False


def _in_kernel() -> bool:
    try:
        from IPython import get_ipython

        ip = get_ipython()
        return ip is not None and hasattr(ip, "kernel")
    except Exception:
        return False


def _match_option(value, options: dict, name: str) -> str:
    """A dropdown label from its full text, its first word ('float16', 'A100') or a NumPy dtype."""
    if isinstance(value, str) and value in options:
        return value
    try:
        if not isinstance(value, str):
            value = np.dtype(value).name
    except TypeError:
        pass
    for label in options:
        head = label.split()[0].rstrip(":")
        if isinstance(value, str) and value.lower() in (head.lower(), *head.lower().split("/")):
            return label
    raise ValueError(f"{name} must be one of {tuple(options)} (or their first word), got {value!r}")


def _check_int(value, name, lo, hi=None):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    if value < lo or (hi is not None and value > hi):
        raise ValueError(f"{name} must be between {lo} and {hi}, got {value}" if hi else
                         f"{name} must be >= {lo}, got {value}")
    return int(value)


class TileExplorer:
    """Interactive explainer of FlashAttention's tiled forward pass (FA2 loop order).

    Parameters
    ----------
    N : int, 1..2048 — sequence length (Nq = Nk = N); "real" inputs allow N <= 512.
    d : int — head dimension, one of 8, 16, 32, 64, 128 ("real" inputs have d = 32).
    Br, Bc : int — block rows / block cols, powers of two 1..256.
    causal : bool — bottom-right aligned causal mask.
    source : "real" | "random" | "adversarial" — where Q, K, V come from (flashviz.data).
    rescale : bool — False is the "break it" mode (no exp(m_old − m_new) correction).
    dtype : "float32" | "float16" | "float64" (or the dropdown's label, or a NumPy dtype) — the
        element type; bytes are counted in its size.
    sram_budget : "H100/H200" | "A100" | "toy" (or a key of flashviz.views.SRAM_BUDGETS).
    canvas : "auto" | "ipympl" | "png" — "png" draws static frames into an Image widget
        (for front ends that cannot show ipympl); "auto" uses ipympl in Jupyter.
    figsize, dpi : figure size in inches and dots per inch (11 × 6.8 at 90 dpi ≈ 990 × 612 px).
    key : anything hashable — widgets with the same key replace each other; by default the
        notebook cell and line that created it.

    Public: ``n_frames``, ``show_frame(k)``, ``close()``, ``widget`` (the ipywidgets box),
    ``result`` (the FlashResult drawn), ``state`` (the FrameState of the current frame).

    Raises TypeError/ValueError (one line) for arguments outside those ranges, including a
    configuration of more than 4096 tiles; sliders moved to such a configuration keep the
    previous run and say why in the status line.
    """

    def __init__(self, N: int = 256, d: int = 32, Br: int = 32, Bc: int = 32, causal: bool = False,
                 source: str = "real", *, rescale: bool = True, dtype: str = "float32 (4 B)",
                 sram_budget: str = next(iter(SRAM_BUDGETS)), canvas: str = "auto", seed: int = 0,
                 figsize=(11, 6.8), dpi: int = 90, key=None):
        if source not in fvdata.SOURCES:
            raise ValueError(f"source must be one of {fvdata.SOURCES}, got {source!r}")
        N = _check_int(N, "N", 1, 512 if source == "real" else MAX_N)
        d = _check_int(d, "d", 1)
        if d not in HEAD_DIMS:
            raise ValueError(f"d must be one of {HEAD_DIMS}, got {d}")
        if source == "real" and d != 32:
            raise ValueError(f"real inputs (all-MiniLM-L6-v2) have d = 32, got d = {d}")
        for name, v in (("Br", Br), ("Bc", Bc)):
            _check_int(v, name, 1)
            if v not in BLOCKS:
                raise ValueError(f"{name} must be one of {BLOCKS}, got {v}")
        dtype = _match_option(dtype, DTYPES, "dtype")
        sram_budget = _match_option(sram_budget, SRAM_BUDGETS, "sram_budget")
        tiles = (-(-N // Br)) * (-(-N // Bc))
        if tiles > MAX_TILES:
            raise ValueError(f"N = {N} with Br = {Br}, Bc = {Bc} makes {tiles:,} tiles, more than the {MAX_TILES:,} "
                             f"an animation can show; use larger blocks or a smaller N")
        if canvas not in ("auto", "ipympl", "png"):
            raise ValueError(f"canvas must be 'auto', 'ipympl' or 'png', got {canvas!r}")
        for name, v in (("causal", causal), ("rescale", rescale)):
            if not isinstance(v, (bool, np.bool_)):
                raise TypeError(f"{name} must be True or False, got {v!r}")
        self.seed = seed
        self._key = registry.caller_key() if key is None else key
        registry.register("TileExplorer", self._key, self)
        self._closed = False
        self._fig_view = None
        self.result = None
        self.replay = None
        self.state = None

        use_ipympl = canvas == "ipympl" or (canvas == "auto" and _ensure_ipympl())
        with plt.ioff():
            self.fig = plt.figure(figsize=figsize, dpi=dpi)
        # static PNG frames where the canvas is no widget but someone may look (a kernel), or when asked
        self._png_mode = canvas == "png" or (not _is_widget_canvas(self.fig.canvas) and _in_kernel())
        if use_ipympl and _is_widget_canvas(self.fig.canvas):
            c = self.fig.canvas
            c.header_visible = False
            c.footer_visible = False
            c.toolbar_visible = False
            c.resizable = False
            c.capture_scroll = False
            # The canvas is shown inside our VBox, so ipympl's _repr_mimebundle_ (which sets the
            # size and a PNG data URL) never runs: give it its size, and let the front end ask for
            # frames once attached (ipympl 0.10 would otherwise sync each blitted frame as a bare
            # base64 string, which the browser shows as a broken image).
            c._size = (int(self.fig.bbox.width), int(self.fig.bbox.height))
            c.syncing_data_url = False
            self._canvas_widget = c
        else:
            self._canvas_widget = W.Image(format="png", layout=W.Layout(width="100%", max_width="1200px"))

        # --- controls -------------------------------------------------------------------
        style = {"description_width": "initial"}
        self.play = W.Play(value=0, min=0, max=1, step=1, interval=150, description="Play")
        self.frame = W.IntSlider(value=0, min=0, max=1, description="step", continuous_update=True,
                                 layout=W.Layout(width="420px"))
        W.link((self.play, "value"), (self.frame, "value"))
        self.prev_button = W.Button(description="◀", tooltip="previous step", layout=W.Layout(width="40px"))
        self.next_button = W.Button(description="▶", tooltip="next step", layout=W.Layout(width="40px"))
        self.prev_button.on_click(lambda _: self._step(-1))
        self.next_button.on_click(lambda _: self._step(+1))
        self.speed = W.IntSlider(value=150, min=20, max=1000, step=10, description="ms/step", style=style,
                                 layout=W.Layout(width="220px"))
        W.link((self.speed, "value"), (self.play, "interval"))
        self.skip = W.Dropdown(options=[1, 2, 4, 8, 16], value=1, description="steps/tick", style=style,
                               layout=W.Layout(width="150px"))
        W.link((self.skip, "value"), (self.play, "step"))

        self.source = W.Dropdown(options=list(fvdata.SOURCES), value=source, description="inputs",
                                 layout=W.Layout(width="190px"))
        self.N = W.IntSlider(value=N, min=1, max=512 if source == "real" else MAX_N, step=1, description="N",
                             continuous_update=False, layout=W.Layout(width="260px"))
        self.d = W.Dropdown(options=list(HEAD_DIMS), value=d, description="d", disabled=(source == "real"),
                            style={"description_width": "20px"}, layout=W.Layout(width="110px"))
        self.Br = W.SelectionSlider(options=list(BLOCKS), value=Br, description="Br", continuous_update=False,
                                    layout=W.Layout(width="230px"))
        self.Bc = W.SelectionSlider(options=list(BLOCKS), value=Bc, description="Bc", continuous_update=False,
                                    layout=W.Layout(width="230px"))
        self.causal = W.Checkbox(value=bool(causal), description="causal", indent=False,
                                 layout=W.Layout(width="80px"))
        self.rescale = W.Checkbox(value=bool(rescale), description="rescale (untick: break it)", indent=False,
                                  layout=W.Layout(width="200px"))
        self.dtype = W.Dropdown(options=list(DTYPES), value=dtype, description="elements",
                                layout=W.Layout(width="210px"))
        self.budget = W.Dropdown(options=list(SRAM_BUDGETS), value=sram_budget, description="SRAM",
                                 layout=W.Layout(width="300px"))
        self.status = W.HTML(value="")
        self.export_name = W.Text(value="flashviz", description="file", layout=W.Layout(width="220px"))
        self.png_button = W.Button(description="frame → PNG", tooltip="save the current frame for slides")
        self.gif_button = W.Button(description="run → GIF", tooltip="save every frame as an animated GIF")
        self.export_status = W.HTML(value="")
        self.png_button.on_click(lambda _: self._export("png"))
        self.gif_button.on_click(lambda _: self._export("gif"))

        self.frame.observe(self._on_frame, names="value")
        for w in (self.N, self.d, self.Br, self.Bc, self.causal, self.rescale, self.dtype, self.budget):
            w.observe(self._on_config, names="value")
        self.source.observe(self._on_source, names="value")

        transport = W.HBox([self.play, self.prev_button, self.next_button, self.frame, self.speed, self.skip])
        config1 = W.HBox([self.source, self.N, self.d, self.Br, self.Bc])
        config2 = W.HBox([self.causal, self.rescale, self.dtype, self.budget])
        export = W.HBox([self.export_name, self.png_button, self.gif_button, self.export_status])
        self.widget = W.VBox([transport, config1, config2, self.status, self._canvas_widget, export])
        self._rebuild()

    # --- public API ---------------------------------------------------------------------
    @property
    def n_frames(self) -> int:
        """Number of frames (one per trace event) of the current run."""
        return 0 if self.replay is None else self.replay.n_frames

    def show_frame(self, k: int):
        """Draw frame k (0 <= k < n_frames): the state after the k-th step of the run.

        Returns the FrameState drawn. Raises TypeError for a non-integer k, IndexError out of range.
        """
        if isinstance(k, bool) or not isinstance(k, numbers.Integral):
            raise TypeError(f"k must be an integer frame index, got {k!r}")
        if not 0 <= k < self.n_frames:
            raise IndexError(f"frame {k} is out of range 0..{self.n_frames - 1}")
        if self.frame.value != k:
            self.frame.value = int(k)       # the observer draws it
        else:
            self._render(int(k))
        return self.state

    def save_png(self, path, k: int | None = None):
        """Save frame k (default: the current frame) as a PNG file; returns its Path."""
        from ..views.export import save_frame_png

        k = self.frame.value if k is None else k
        try:
            return save_frame_png(self._fig_view, k, path)
        finally:
            self._redraw_current()

    def save_gif(self, path, *, frames=None, fps: float = 8):
        """Save the run (or the given frame indices) as an animated .gif (.mp4 with ffmpeg); returns its Path."""
        from ..views.export import save_animation

        try:
            return save_animation(self._fig_view, path, frames=frames, fps=fps)
        finally:
            self._redraw_current()

    def _redraw_current(self):
        if self._fig_view is not None and self._fig_view.blitter is not None:
            self._fig_view.blitter.static_bg = None     # force a full redraw of the live canvas
        self._render(self.frame.value)

    def _export(self, kind: str):
        name = (self.export_name.value or "flashviz").strip()
        try:
            if kind == "png":
                path = self.save_png(f"{name}-step{self.frame.value + 1}.png")
            else:
                frames = range(0, self.n_frames, max(1, self.n_frames // 300))  # at most ~300 frames
                self.export_status.value = "writing GIF …"
                path = self.save_gif(f"{name}.gif", frames=frames)
            self.export_status.value = f"saved <code>{path.resolve()}</code>"
        except Exception as exc:  # a full disk or a bad name: say so, keep working
            self.export_status.value = f"<span style='color:#d62728'>export failed: {type(exc).__name__}: {exc}</span>"

    def close(self):
        """Close the figure and every widget of this explorer (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self.play.playing = False
        if self._fig_view is not None and self._fig_view.blitter is not None:
            self._fig_view.blitter.disconnect()
        plt.close(self.fig)
        for w in self.widget.children:
            w.close()
        for w in (self.play, self.frame, self.prev_button, self.next_button, self.speed, self.skip, self.source,
                  self.N, self.d, self.Br, self.Bc, self.causal, self.rescale, self.dtype, self.budget,
                  self.status, self._canvas_widget, self.export_name, self.png_button, self.gif_button,
                  self.export_status):
            w.close()
        self.widget.close()
        registry.unregister("TileExplorer", self._key, self)

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)

    # --- internals ----------------------------------------------------------------------
    def _step(self, delta: int):
        if self.n_frames:
            self.frame.value = int(np.clip(self.frame.value + delta, 0, self.n_frames - 1))

    def _on_frame(self, change):
        self._render(change["new"])

    def _on_source(self, change):
        real = change["new"] == "real"
        with self.d.hold_trait_notifications(), self.N.hold_trait_notifications():
            if real:
                self.d.unobserve(self._on_config, names="value")
                self.d.value = 32
                self.d.observe(self._on_config, names="value")
                if self.N.value > 512:
                    self.N.unobserve(self._on_config, names="value")
                    self.N.value = 512
                    self.N.observe(self._on_config, names="value")
            self.N.max = 512 if real else MAX_N
            self.d.disabled = real
        self._rebuild()

    def _on_config(self, change):
        self._rebuild()

    def _config_problem(self):
        N, Br, Bc = self.N.value, self.Br.value, self.Bc.value
        tiles = (-(-N // Br)) * (-(-N // Bc))
        if tiles > MAX_TILES:
            return (f"N = {N} with Br = {Br}, Bc = {Bc} makes {tiles:,} tiles — too many to animate "
                    f"(limit {MAX_TILES:,}). Pick larger blocks or a smaller N.")
        return None

    def _rebuild(self):
        if self._closed:
            return
        problem = self._config_problem()
        if problem:
            self.status.value = f"<span style='color:#d62728'>⚠ {problem} Showing the previous run.</span>"
            return
        N, d = self.N.value, self.d.value
        Q, K, V, desc = fvdata.get_qkv(self.source.value, N, d, seed=self.seed)
        dt = DTYPES[self.dtype.value]
        Q, K, V = (x.astype(dt) for x in (Q, K, V))
        r = flash_forward(Q, K, V, Br=self.Br.value, Bc=self.Bc.value, causal=self.causal.value,
                          rescale=self.rescale.value, record=True)
        O_ref = attention(Q, K, V, causal=self.causal.value)
        err = float(np.max(np.abs(r.O.astype(np.float64) - O_ref)))
        rel = err / max(float(np.max(np.abs(O_ref))), 1e-300)
        self.result, self.replay = r, Replay(r.trace)
        if self.rescale.value:
            check = f"max |O − O_ref| = {err:.1e} (vs float64 dense attention: exact up to rounding)"
            self.status.value = f"<span style='color:#2ca02c'>✓ {check}</span>"
        else:
            check = (f"rescale OFF: max |O − O_ref| = {err:.3g} ({100 * rel:.0f}% of max |O|) — "
                     f"{'WRONG' if rel > 1e-3 else 'still right: no row max grew after its first block'}")
            self.status.value = f"<span style='color:#d62728'>✗ {check}</span>"
        caption = (f"inputs: {desc}  ·  N = {N}, d = {d}, Br = {self.Br.value}, Bc = {self.Bc.value}, "
                   f"Tr = {r.trace.Tr}, Tc = {r.trace.Tc}{', causal' if self.causal.value else ''}\n{check}")
        if self._fig_view is not None and self._fig_view.blitter is not None:
            self._fig_view.blitter.disconnect()
        self._fig_view = ExplorerFigure(self.fig, self.replay, caption=caption,
                                        sram_budget=SRAM_BUDGETS[self.budget.value], budget_name=self.budget.value)
        self._fig_view.enable_blitting()
        self.play.playing = False
        n = self.replay.n_frames
        with self.frame.hold_trait_notifications():
            self.frame.unobserve(self._on_frame, names="value")
            self.play.value = 0
            self.frame.value = 0
            self.play.max = self.frame.max = max(n - 1, 0)
            self.frame.observe(self._on_frame, names="value")
        self._render(0)

    def _render(self, k: int):
        if self._closed or self._fig_view is None:
            return
        k = int(np.clip(k, 0, self.n_frames - 1))
        self.state = self._fig_view.render(k)
        if self._png_mode:
            buf = io.BytesIO()
            self.fig.savefig(buf, format="png", dpi=self.fig.dpi)
            self._canvas_widget.value = buf.getvalue()
