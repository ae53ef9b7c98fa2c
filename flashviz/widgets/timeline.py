"""TimelineExplorer (issue 12): watch a measured GPU run of the kernels, beside the tiles.

Works from a ``gpu.Timeline``: the newest recorded one for the chosen kernel, causal flag and d
(``gpu.latest_timeline``; no GPU needed) or one given (``trace_kernel`` on a GPU, or
``Timeline.load``). Play / the step slider move a "now" instant through the run, in
``n_frames`` equal slices, through ``views.timeline_view.TimelineFigure``.
"""

from __future__ import annotations

import ipywidgets as W

from .._checks import check_choice
from ..gpu.timeline import KERNELS, Timeline, latest_timeline, recorded_timelines
from ..views.timeline_view import N_FRAMES, TimelineFigure
from .base import FrameWidget, check_bool

AUTO = "a detailed block running now"


def recorded_head_dims(kernel: str, causal: bool) -> list[int]:
    """The head dimensions d recorded for this kernel and causal flag, ascending."""
    return sorted({r["d"] for r in recorded_timelines() if r["kernel"] == kernel and r["causal"] == bool(causal)})


class TimelineExplorer(FrameWidget):
    """A measured kernel run: every block on its SM, one block's steps, the tiles in flight.

    Parameters
    ----------
    timeline : a ``flashviz.gpu.Timeline`` or None — None: the newest recorded timeline of
        (kernel, causal, d) (``gpu.latest_timeline``; N = 4096 for the recorded ones).
    kernel : "wgmma" | "teaching"; causal : bool; d : int or None (None: the smallest recorded)
        — which recorded run to show (ignored for the first view when a timeline is given: the
        controls then show its kernel, causal flag and d).
    block : a cta of the timeline's ``detail_ctas`` to zoom, or None (each frame: a detailed block
        running at that instant).
    canvas, figsize, dpi, key, text_scale : as for every FrameWidget (see flashviz.widgets.base).

    Public: ``timeline`` (the Timeline drawn), ``n_frames`` (the run cut into 120 slices),
    ``show_frame(k)`` → TimelineState, ``state``, ``save_png``, ``save_gif``, ``close()``,
    ``widget``. Raises one-line TypeError/ValueError for bad arguments and LookupError when
    nothing is recorded for the choice.
    """

    kind = "TimelineExplorer"
    export_stem = "flashviz-timeline"

    def __init__(self, timeline: Timeline | None = None, *, kernel: str = "wgmma", causal: bool = False,
                 d: int | None = None, block: int | None = None, canvas: str = "auto", figsize=(11, 6.8),
                 dpi: int = 90, key=None, text_scale: float = 1.0):
        if timeline is not None and not isinstance(timeline, Timeline):
            raise TypeError(f"timeline must be a flashviz.gpu.Timeline or None, got {type(timeline).__name__}")
        kernel = check_choice(kernel, "kernel", KERNELS)
        causal = check_bool(causal, "causal")
        if timeline is not None:
            kernel, causal, d = timeline.kernel, bool(timeline.causal), timeline.d
            if timeline.detail_ctas is None:     # a live trace has every block's steps: zoom on a sample
                timeline = timeline.sampled(16)
        dims = recorded_head_dims(kernel, causal)
        if timeline is None:
            if not dims:
                raise LookupError(f"no recorded timeline of the {kernel} kernel{' (causal)' if causal else ''}")
            d = dims[0] if d is None else check_choice(d, "d", tuple(dims))
            timeline = latest_timeline(kernel, causal=causal, d=d)
        if block is not None:
            detail = timeline.detail_ctas or ()
            block = check_choice(block, "block", tuple(detail))
        super().__init__(canvas=canvas, figsize=figsize, dpi=dpi, key=key, text_scale=text_scale, interval=150)
        try:
            self._build(timeline, kernel, causal, d, dims, block)
        except BaseException:
            self.close()       # a failed constructor leaves no figure behind
            raise

    def _build(self, timeline, kernel, causal, d, dims, block):
        self._given = timeline
        self._cache = {(kernel, causal, d): timeline}
        self.timeline = timeline
        self.kernel = W.Dropdown(options=list(KERNELS), value=kernel, description="kernel",
                                 layout=W.Layout(width="200px"))
        self.causal = W.Checkbox(value=causal, description="causal", indent=False, layout=W.Layout(width="90px"))
        self.d = W.Dropdown(options=sorted(set(dims) | {d}), value=d, description="d",
                            style={"description_width": "20px"}, layout=W.Layout(width="110px"))
        self.block = W.Dropdown(options=self._block_options(timeline), value=block, description="zoomed block",
                                style={"description_width": "initial"}, layout=W.Layout(width="420px"))
        self._watch(self.kernel, self.causal, self.d)
        self.block.observe(self._on_block, names="value")
        self._controls.append(self.block)
        self._layout(W.HBox([self.kernel, self.causal, self.d, self.block]))
        self._rebuild()

    @staticmethod
    def _block_options(tl):
        rows = {int(b["cta"]): b for b in tl.blocks}
        out = [(AUTO, None)]
        for c in tl.detail_ctas or ():
            b = rows[c]
            out.append((f"block {c}: i = {b['i']}, head {b['h']}, SM {b['sm']}, "
                        f"{b['t0_ns'] / 1e3:.0f}–{b['t1_ns'] / 1e3:.0f} µs", c))
        return out

    def _on_config(self, change=None):
        if getattr(self, "_suspended", False):
            return
        owner = change.get("owner") if isinstance(change, dict) else getattr(change, "owner", None)
        if owner is not self.d:           # kernel or causal: offer the d recorded for it
            dims = recorded_head_dims(self.kernel.value, self.causal.value)
            given = self._given
            if (self.kernel.value, self.causal.value) == (given.kernel, bool(given.causal)):
                dims = sorted(set(dims) | {given.d})
            self._suspended = True
            try:
                keep = self.d.value
                self.d.options = dims
                self.d.value = keep if keep in dims else (dims[0] if dims else None)
            finally:
                self._suspended = False
        self._rebuild()

    def _config_problem(self):
        if self.d.value is None:
            return (f"no recorded timeline of the {self.kernel.value} kernel"
                    f"{' (causal)' if self.causal.value else ''}.")
        return None

    def _timeline_for(self, kernel, causal, d):
        key = (kernel, bool(causal), d)
        if key not in self._cache:
            self._cache[key] = latest_timeline(kernel, causal=causal, d=d)
        return self._cache[key]

    def _make_view(self):
        tl = self._timeline_for(self.kernel.value, self.causal.value, self.d.value)
        if tl is not self.timeline or self.block.value not in (tl.detail_ctas or ()):
            self.block.unobserve(self._on_block, names="value")
            try:
                self.block.options = self._block_options(tl)
                if self.block.value not in (tl.detail_ctas or ()):
                    self.block.value = None
            finally:
                self.block.observe(self._on_block, names="value")
        self.timeline = tl
        view = TimelineFigure(self.fig, tl, block=self.block.value, n_frames=N_FRAMES)
        view.enable_blitting()
        over = f" (+{100 * (tl.traced_ms / tl.kernel_ms - 1):.1f} % traced)" if tl.kernel_ms and tl.traced_ms else ""
        kms = f"{tl.kernel_ms:.3f} ms" if tl.kernel_ms else "not recorded"
        self.status.value = (f"recorded on the {tl.device}, {tl.date} (commit {tl.commit[:7] or '?'}) · "
                             f"kernel {kms}{over} · {len(tl.blocks):,} blocks, {len(tl.tiles):,} tiles · "
                             f"steps kept for {len(view.detail)} blocks")
        return view

    def _on_block(self, change):
        if self._closed or self._view is None:
            return
        self._view.set_block(change["new"])
        self._render(self.frame.value)
