"""TimelineExplorer (issue 12): watch a measured GPU run of the kernels, beside the tiles.

Works from a ``gpu.Timeline``: the newest recorded one for the chosen kernel, causal flag, d and
N (``gpu.recorded_timelines``; no GPU needed), one given (``trace_kernel`` on a GPU, or
``Timeline.load``), or one measured now: on a machine with a GPU, *Run on this GPU* traces the
chosen configuration with ``gpu.trace_kernel`` (the GPU panels' ``GPUJob``: one job at a time, a
progress bar, Stop, one red line for a failure). Play / the step slider move a "now" instant
through the run, in ``n_frames`` equal slices, through ``views.timeline_view.TimelineFigure``;
its numbers include a block's time per tile against what the device's measured matmul ceiling
allows (``matmul_ceiling``, ``views.timeline_view.tile_vs_ceiling``).
"""

from __future__ import annotations

import asyncio
import html

import ipywidgets as W
import numpy as np

from ..checks import check_choice
from ..gpu.common import gpu_status
from ..gpu.tracing import MAX_TRACE_BYTES, trace_kernel, trace_words
from ..records.results import latest_results
from ..records.timeline import FORWARD_KERNELS, Timeline, recorded_timelines
from ..views.drawlock import DRAW_LOCK, serialised
from ..views.style import NOTEBOOK_FIGSIZE_SHORT
from ..views.timeline_view import N_FRAMES, Ceiling, TimelineFigure
from .base import NOTEBOOK_DPI, FrameWidget, check_bool, error_line
from .gpu_job import GPUJob, red
from .lines import text_lines

AUTO = "any running block"     #: each frame zooms on a block running at that moment
#: the zoom menu's value for AUTO (ipywidgets 8 shows a None value as nothing selected)
AUTO_BLOCK = -1
#: sequence lengths a live run offers besides the recorded ones (on a machine with a GPU)
LIVE_N = (1024, 2048, 4096, 8192, 16384)
#: blocks whose step events a live trace keeps for the zoom (as the recorded files)
DETAIL = 16
#: the model width a live run without a recorded twin uses: H = MODEL_DIM / d heads, B = 1
MODEL_DIM = 2048
#: the element type of each kernel's inputs, and the key of its matmul ceiling in the "mma" results
CEILING_KEYS = {"float16": ("matmul_fp16_TFLOPs", "fp16 matmul"), "bfloat16": ("matmul_bf16_TFLOPs", "bf16 matmul")}


def _recorded(kernel: str | None = None, causal: bool | None = None, d: int | None = None,
              N: int | None = None) -> list[dict]:
    """The rows of ``recorded_timelines()`` in the kernel's own block order (rows of another
    ``order`` variant are left out), filtered by the values given; newest first."""
    return [r for r in recorded_timelines() if r.get("order", "kernel") == "kernel"
            and (kernel is None or r["kernel"] == kernel) and (causal is None or r["causal"] == bool(causal))
            and (d is None or r["d"] == d) and (N is None or r["N"] == N)]


def recorded_head_dims(kernel: str, causal: bool) -> list[int]:
    """The head dimensions d recorded for this kernel and causal flag, ascending."""
    return sorted({r["d"] for r in _recorded(kernel, causal)})


def recorded_lengths(kernel: str, causal: bool, d: int | None) -> list[int]:
    """The sequence lengths N recorded for this kernel, causal flag and d, ascending."""
    return sorted({r["N"] for r in _recorded(kernel, causal, d)}) if d is not None else []


def matmul_ceiling(tl: Timeline, res: dict | None = None) -> tuple[Ceiling | None, str]:
    """(ceiling, note): the measured dense-matmul rate of ``tl``'s device in its element type, from
    the newest tensor-core results (``gpu.latest_results("mma")``'s "ceilings": an 8192³ cuBLAS
    matmul, TFLOP/s for the whole GPU), or (None, why there is none): the teaching kernel runs
    fp32 on CUDA cores and no fp32 ceiling is recorded (the fp16 tensor-core ceiling does not
    apply to it); a run on another device than the recording's; no recording. res: a results
    dict to read instead of the newest file."""
    if res is None:
        try:
            res = latest_results("mma")
        except Exception:             # a corrupt recording only drops the comparison
            res = None
    if tl.dtype not in CEILING_KEYS:
        return None, f"no {tl.dtype.replace('float', 'fp')} (CUDA-core) matmul ceiling is recorded"
    key, what = CEILING_KEYS[tl.dtype]
    ceil = (res or {}).get("ceilings", {})
    env = (res or {}).get("env", {})
    if not ceil.get(key):
        return None, f"no {what} ceiling is recorded in this installation"
    if env.get("device") != tl.device:
        return None, f"no {what} ceiling is recorded for the {tl.device} (recorded: {env.get('device', '?')})"
    return Ceiling(float(ceil[key]), what, str(env["device"]), str(env.get("date", "?")),
                   str(res.get("source_file", ""))), ""




class TimelineExplorer(GPUJob, FrameWidget):
    """A measured kernel run: every block on its SM, one block's steps, the tiles in flight.

    Parameters
    ----------
    timeline : a ``flashviz.gpu.Timeline`` or None — None: the newest recorded timeline of
        (kernel, causal, d, N).
    kernel : "wgmma" | "teaching"; causal : bool; d : int or None (None: the smallest recorded);
        N : int or None (None: the smallest recorded for that d; the recorded runs have N = 4096,
        and the wgmma kernel at d = 64 also N = 16384) — which recorded run to show (ignored for
        the first view when a timeline is given: the controls then show its kernel, causal flag,
        d and N).
    block : a cta of the timeline's ``detail_ctas`` to zoom, or None (each frame: a detailed block
        running at that instant).
    canvas, figsize, dpi, key, text_scale : as for every FrameWidget (see flashviz.widgets.base).

    Live mode (``run()``, the *Run on this GPU* button): traces the chosen kernel, causal flag, d
    and N with ``gpu.trace_kernel`` (repeat 10, rounds 5: kernel-only times of the normal and the
    traced build, outputs compared bit for bit) on random inputs — NumPy ``default_rng(0)``,
    standard normal, Q, K, V drawn in that order as benchmarks/record_timelines.py does, in the
    recorded run's shape (B, H) where one is recorded, else B = 1, H = 2048 / d — and shows the
    Timeline (step events kept for 16 sampled blocks); the status line says "measured now on
    <device>". On a GPU the N control also offers N = 1024 … 16384 that are not recorded. The
    progress bar counts three stages: inputs, the trace (one ``trace_kernel`` call: it compiles,
    times and decodes with no progress of its own), drawing. Stop acts between stages: before the
    trace nothing is measured; pressed during the trace (which cannot be interrupted) its result
    is dropped when it returns, and the view shown stays. A measurement replaces the recorded run
    of its configuration in this widget. Without a GPU the button is disabled and says why; a
    failing run is one red line in the status, and the widget keeps working.

    Numbers panel, per tile (``views.timeline_view.tile_vs_ceiling``): "block time per tile" is
    the median over blocks of (block end − start) / key tiles visited (µs); "at the ceiling" is
    the time a block's tile may take at the device's measured dense-matmul ceiling
    (``matmul_ceiling``: fp16 cuBLAS 8192³ from the recorded tensor-core results): one SM's
    share, ceiling / SM count, needs 4·Br·Bc·d / share for the tile's FLOPs, times the blocks
    that share an SM (the most common count seen at the blocks' midpoints); "measured /
    ceiling" is their ratio (1: at the ceiling). The teaching kernel (fp32, CUDA cores) has no
    recorded ceiling: the panel says so.

    Public: ``timeline`` (the Timeline drawn), ``n_frames`` (the run cut into 120 slices),
    ``show_frame(k)`` → TimelineState, ``state``, ``run(wait=True)``, ``stop()``, ``ok`` and
    ``reason`` (is there a GPU), ``save_png``, ``save_gif``, ``close()``, ``widget``. Raises
    one-line TypeError/ValueError for bad arguments and LookupError when nothing is recorded for
    the choice.
    """

    kind = "TimelineExplorer"
    export_stem = "flashviz-timeline"

    def __init__(self, timeline: Timeline | None = None, *, kernel: str = "wgmma", causal: bool = False,
                 d: int | None = None, N: int | None = None, block: int | None = None, canvas: str = "auto",
                 figsize=NOTEBOOK_FIGSIZE_SHORT, dpi: float = NOTEBOOK_DPI, key=None, text_scale: float = 1.0):
        if timeline is not None and not isinstance(timeline, Timeline):
            raise TypeError(f"timeline must be a flashviz.gpu.Timeline or None, got {type(timeline).__name__}")
        kernel = check_choice(kernel, "kernel", FORWARD_KERNELS)
        causal = check_bool(causal, "causal")
        if timeline is not None:
            if timeline.kernel not in FORWARD_KERNELS:
                raise ValueError(f"TimelineExplorer shows a forward kernel's timeline ({', '.join(FORWARD_KERNELS)}), "
                                 f"got one of {timeline.kernel!r} (views.decode_timeline and views.backward_timeline "
                                 f"draw those)")
            kernel, causal, d, N = timeline.kernel, bool(timeline.causal), timeline.d, timeline.N
            if timeline.detail_ctas is None:     # a live trace has every block's steps: zoom on a sample
                timeline = timeline.sampled(DETAIL)
        else:
            dims = recorded_head_dims(kernel, causal)
            if not dims:
                raise LookupError(f"no recorded timeline of the {kernel} kernel{' (causal)' if causal else ''}")
            d = dims[0] if d is None else check_choice(d, "d", tuple(dims))
            lengths = recorded_lengths(kernel, causal, d)
            N = lengths[0] if N is None else check_choice(N, "N", tuple(lengths))
            timeline = Timeline.load(_recorded(kernel, causal, d, N)[0]["file"])
        if block is not None:
            detail = timeline.detail_ctas or ()
            block = check_choice(block, "block", tuple(detail))
        super().__init__(canvas=canvas, figsize=figsize, dpi=dpi, key=key, text_scale=text_scale, interval=150)
        try:
            self._build(timeline, kernel, causal, d, N, block)
        except BaseException:
            self.close()       # a failed constructor leaves no figure behind
            raise

    def _build(self, timeline, kernel, causal, d, N, block):
        self._given = timeline
        self._cache = {(kernel, causal, d, N): timeline}
        self._live = set()                      # configurations measured now, in this widget
        self.timeline = timeline
        self.ok, self.reason = gpu_status()
        self.variant = None                     # the tensor-core kernel this GPU runs
        if self.ok:
            try:
                from ..gpu.tensorcore.kernel import device_variant
                self.variant = device_variant()
            except Exception as exc:            # no tensor cores: the teaching kernel still runs
                self.variant = f"none ({error_line(exc)})"
        try:
            self._results = latest_results("mma")
        except Exception:                       # a corrupt recording only drops the ceiling
            self._results = None
        # the kernels there is something to show for: a recorded timeline (fa3's comes later than
        # the others), or the one given
        shown = [k for k in FORWARD_KERNELS if k == kernel or any(r["kernel"] == k for r in recorded_timelines())]
        self.kernel = W.Dropdown(options=shown, value=kernel, description="kernel",
                                 layout=W.Layout(width="200px"))
        self.causal = W.Checkbox(value=causal, description="causal", indent=False, layout=W.Layout(width="90px"))
        self.d = W.Dropdown(options=self._d_options(), value=d, description="d",
                            style={"description_width": "20px"}, layout=W.Layout(width="110px"))
        self.N = W.Dropdown(options=self._n_options(), value=N, description="N",
                            style={"description_width": "20px"}, layout=W.Layout(width="190px"))
        self.block = W.Dropdown(options=self._block_options(timeline), value=AUTO_BLOCK if block is None else block,
                                description="zoomed block",
                                style={"description_width": "initial"},
                                layout=W.Layout(width="420px", max_width="calc(100% - 4px)"))   # the app's column is
        # narrower: its width less the widget's 2 px margins, so the column does not clip its right edge
        self.run_button = W.Button(description="Run on this GPU", icon="play", button_style="primary",
                                   layout=W.Layout(width="170px"))
        self.gpu_note = text_lines(W.HTML())
        self._init_job("stop between stages: before the trace, or drop its result when it returns")
        self.run_button.on_click(lambda _: self.run(wait=False))
        self._watch(self.kernel, self.causal, self.d, self.N)
        self.block.observe(self._on_block, names="value")
        self._controls.append(self.block)
        self._layout(W.HBox([self.kernel, self.causal, self.d, self.N, self.block]),
                     W.HBox([self.run_button, self.stop_button, self.progress, self.gpu_note]))
        self._refresh_run()
        self._rebuild()

    # ------------------------------------------------------------------ choices
    def _kcd(self):
        """(kernel, causal, d) chosen now (while the controls are being made: the given timeline's)."""
        g = self._given
        return (self.kernel.value if hasattr(self, "kernel") else g.kernel,
                bool(self.causal.value) if hasattr(self, "causal") else bool(g.causal),
                self.d.value if hasattr(self, "d") else g.d)

    def _d_options(self):
        """The d recorded or measured for the chosen kernel and causal flag, ascending."""
        k, c, _ = self._kcd()
        return sorted(set(recorded_head_dims(k, c)) | {kk[2] for kk in self._cache if kk[:2] == (k, c)})

    def _n_options(self):
        """(label, N) pairs: the N recorded or measured for the chosen kernel, causal flag and d, and
        on a GPU the other lengths a live run can measure (labelled "not recorded")."""
        k, c, d = self._kcd()
        have = set(recorded_lengths(k, c, d)) | {kk[3] for kk in self._cache if kk[:3] == (k, c, d)}
        live = {n for n in LIVE_N if self._buffer_fits((k, c, d, n))} if self.ok and d is not None else set()
        every = sorted(have | live)
        return [(f"{n:,}" if n in have else f"{n:,} (not recorded)", n) for n in every]

    def _buffer_fits(self, key) -> bool:
        """Whether a live run of ``key`` at its live shape stays under trace_kernel's buffer limit
        (counted with the smallest blocks the kernel may choose, 64 × 64: an upper bound)."""
        B, H = self._live_shape(key)
        tiles = -(-key[3] // 64)
        groups = {"teaching": 8, "fa3": 4}.get(key[0], 2)     # fa3: its producer + up to three consumers
        return 8 * trace_words(tiles * H * B, groups, tiles) <= MAX_TRACE_BYTES

    @staticmethod
    def _block_options(tl):
        rows = {int(b["cta"]): b for b in tl.blocks}
        out = [(AUTO, AUTO_BLOCK)]
        for c in tl.detail_ctas or ():
            b = rows[c]
            out.append((f"block {c}: i = {b['i']}, head {b['h']}, SM {b['sm']}, "
                        f"{b['t0_ns'] / 1e3:.0f}–{b['t1_ns'] / 1e3:.0f} µs", c))
        return out

    def _choice(self):
        return (self.kernel.value, bool(self.causal.value), self.d.value, self.N.value)

    def _on_config(self, change=None):
        if getattr(self, "_suspended", False):
            return
        owner = change.get("owner") if isinstance(change, dict) else getattr(change, "owner", None)
        self._suspended = True
        try:
            if owner in (self.kernel, self.causal):   # offer the d recorded for it
                dims = self._d_options()
                keep = self.d.value
                self.d.options = dims
                self.d.value = keep if keep in dims else (dims[0] if dims else None)
            if owner is not self.N:                    # and the N recorded for that d
                opts = self._n_options()
                have = [n for label, n in opts if "not recorded" not in label]
                keep = self.N.value
                self.N.options = opts
                self.N.value = keep if keep in have else (have[0] if have else None)
        finally:
            self._suspended = False
        self._refresh_run()
        self._rebuild()

    def _config_problem(self):
        kernel, causal, d, N = self._choice()
        if d is None or N is None:
            return f"no recorded timeline of the {kernel} kernel{' (causal)' if causal else ''}."
        if (kernel, causal, d, N) not in self._cache and not _recorded(kernel, causal, d, N):
            return f"no timeline of N = {N:,} yet: press “Run on this GPU” to measure one."
        return None

    def _timeline_for(self, key):
        if key not in self._cache:
            self._cache[key] = Timeline.load(_recorded(*key)[0]["file"])
        return self._cache[key]

    # ------------------------------------------------------------------ drawing
    def _make_view(self):
        key = self._choice()
        tl = self._timeline_for(key)
        if tl is not self.timeline or self.block.value not in (tl.detail_ctas or ()):
            self.block.unobserve(self._on_block, names="value")
            try:
                self.block.options = self._block_options(tl)
                if self.block.value not in (tl.detail_ctas or ()):
                    self.block.value = AUTO_BLOCK
            finally:
                self.block.observe(self._on_block, names="value")
        self.timeline = tl
        live = key in self._live
        ceiling, note = matmul_ceiling(tl, self._results)
        view = TimelineFigure(self.fig, tl, block=self._zoomed(), n_frames=N_FRAMES, ceiling=ceiling,
                              ceiling_note=note, live=live)
        view.enable_blitting()
        over = f" (+{100 * (tl.traced_ms / tl.kernel_ms - 1):.1f} % traced)" if tl.kernel_ms and tl.traced_ms else ""
        kms = f"{tl.kernel_ms:.3f} ms" if tl.kernel_ms else "not recorded"
        where = (f"<span style='color:#2ca02c'>measured now on the {html.escape(tl.device)}</span>, {tl.date}" if live
                 else f"recorded on the {html.escape(tl.device)}, {tl.date} (commit {tl.commit[:7] or '?'})")
        B, H = tl.grid[2], tl.grid[1]
        order = getattr(tl, "order", "kernel")
        if order != "kernel":
            where += f" · blocks started {order.replace('_', '-')}"
        self.status.value = (f"{where} · kernel {kms}{over} · B·H = {B}·{H}, {len(tl.blocks):,} blocks, "
                             f"{len(tl.tiles):,} tiles · steps kept for {len(view.detail)} blocks")
        return view

    def _zoomed(self) -> int | None:
        """The cta chosen in the zoom menu, or None for AUTO (each frame: a block running then)."""
        return None if self.block.value == AUTO_BLOCK else int(self.block.value)

    @serialised
    def _on_block(self, change):
        if self._closed or self._view is None:
            return
        self._view.set_block(self._zoomed())
        self._render(self.frame.value)

    # ------------------------------------------------------------------ live mode
    def _run_problem(self) -> str | None:
        """Why the chosen configuration cannot be measured here, or None."""
        if not self.ok:
            return f"No GPU here, showing recorded timelines. {self.reason[:1].upper()}{self.reason[1:]}"
        kernel, _, d, N = self._choice()
        if d is None or N is None:
            return "choose d and N"
        if kernel in ("wgmma", "fa3") and self.variant != "wgmma":
            return f"the {kernel} kernel needs a Hopper GPU (sm_90a); this one runs {self.variant}"
        return None

    def _refresh_run(self):
        if self._busy():
            return
        problem = self._run_problem()
        self.run_button.disabled = problem is not None
        self.run_button.tooltip = problem or "trace this kernel, causal flag, d and N on this GPU (a few seconds)"
        self.gpu_note.value = (f"<span style='color:#666;font-size:12px'>{html.escape(problem)}.</span>" if problem
                               else f"<span style='color:#666;font-size:12px'>on {html.escape(self.reason)}</span>")

    def _job_finished(self) -> None:
        self._refresh_run()

    def _live_shape(self, key) -> tuple[int, int]:
        """(B, H) of a live run: the recorded (or already measured) run's, else (1, 2048 / d)."""
        if key in self._cache or _recorded(*key):
            grid = self._timeline_for(key).grid
            return grid[2], grid[1]
        return 1, max(1, MODEL_DIM // key[2])

    def run(self, *, wait: bool = True):
        """Trace the chosen kernel, causal flag, d and N on this GPU and show the result (a few
        seconds; the first trace of a configuration compiles two kernel builds). Runs in a
        background thread with a progress bar of three stages (inputs, trace, drawing); Stop (or
        ``stop()``) acts between stages — see the class docstring. wait=True (the API default)
        blocks and returns the Timeline measured (every block's steps) or None with the reason in
        the status line; the button uses wait=False."""
        problem = self._run_problem() if self.ok else None
        if problem:
            self.status.value = red(f"Cannot run here: {problem}.")
            return None
        key = self._choice()
        B, H = self._live_shape(key) if self.ok else (1, 1)
        kernel, causal, d, N = key
        what = (f"the {kernel} kernel, N = {N:,}, d = {d}, B·H = {B}·{H}{', causal' if causal else ''}")
        # wait=False (the button): the result is drawn on this (the kernel's main) thread, where ipympl
        # handles the canvas's messages, through its event loop; wait=True blocks this thread, so the
        # job may draw itself
        self._main_loop = None
        if not wait:
            try:
                self._main_loop = asyncio.get_running_loop()
            except RuntimeError:
                loop = asyncio.get_event_loop_policy().get_event_loop()
                self._main_loop = loop if loop.is_running() else None
        return self._start_job(lambda: self._work(key, B, H), wait=wait, steps=3, failed="GPU run failed",
                               buttons=(self.run_button, self.kernel, self.causal, self.d, self.N),
                               running=(f"Tracing {html.escape(what)} … (one trace_kernel call: compiles, times "
                                        f"both builds, decodes; no progress inside it)"))

    def _work(self, key, B, H):
        kernel, causal, d, N = key
        self.progress.description = "inputs"
        rng = np.random.default_rng(0)
        Q, K, V = (rng.standard_normal((B, H, N, d)).astype(np.float32) for _ in range(3))
        self.progress.value = 1
        if self._stop.is_set():
            self.status.value = "Stopped before the trace: nothing was measured."
            return None
        self.progress.description = "trace"
        tl = trace_kernel(Q, K, V, kernel=kernel, causal=causal, repeat=10, rounds=5)
        self.progress.value = 2
        if self._stop.is_set():
            self.status.value = "Stopped: the trace that was running finished and was dropped; the view is unchanged."
            return None
        self.progress.description = "drawing"
        shown = tl.sampled(DETAIL) if tl.detail_ctas is None else tl
        loop = getattr(self, "_main_loop", None)
        if loop is not None and loop.is_running():
            loop.call_soon_threadsafe(self._show_live, key, shown)
        else:
            self._show_live(key, shown)
        return tl

    def _show_live(self, key, shown):
        """Draw a live Timeline (on the main thread when the button started the run)."""
        try:
            with DRAW_LOCK:                         # the figure's lock (views.drawlock): never while another thread draws
                if self._closed:
                    return
                self._cache[key] = shown
                self._live.add(key)
                self._suspended = True
                try:                               # the measured N is offered now (labelled, not "not recorded")
                    self.N.options = self._n_options()
                    self.N.value = key[3]
                finally:
                    self._suspended = False
                self._rebuild()
            self.progress.value = 3
        except Exception as exc:  # a drawing failure is a line in the panel, never a traceback
            self.status.value = red(f"Drawing the live run failed: {error_line(exc)}")

    def close(self):
        """Stop a live run (between its stages), close the figure and every control (idempotent)."""
        stop = getattr(self, "_stop", None)
        if stop is not None:
            stop.set()
        super().close()                             # under the drawing lock: never while a live result is drawn
