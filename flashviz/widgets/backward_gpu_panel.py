"""BackwardGPUPanel: chapter 6's backward on a GPU. It runs the backward teaching kernel
(``kernels/flash_bwd.cu``, FlashAttention-2's Algorithm 2 in float32) with a BackwardExplorer's
Br, Bc, d and causal flag, or shows the recorded measurements of that kernel
(``benchmarks/results/bwd-*.json``, ``records.bwd_records``) when this machine has no usable GPU.

Beside either it shows the IO model's HBM bytes of the backward for those blocks
(``iomodel.flash_backward_io``, float32) against the standard backward's, recomputed whenever the
explorer's controls change. A run times the atomic dQ, then the deterministic dQ, in a background
thread (``gpu_job.GPUJob``); a failing run (no device, out of memory, a compile error, blocks that
do not fit in shared memory) shows its one-line error in the panel, and nothing else breaks.
"""

from __future__ import annotations

import datetime
import html
import math

import ipywidgets as W

from .. import checks, gpu
from ..gpu.teaching.limits import check_bwd_sizes
from ..gpu.tensorcore.bench_bwd import BWD_N, MODEL_DIM, TEACHING_MAX_N, TOKENS, shape_of
from ..iomodel import flash_backward_io, standard_backward_io
from ..records.bwd_records import bwd_label, teaching_rows
from ..records.results import latest_results
from ..views.style import fmt_bytes
from . import checks as widget_checks
from . import registry
from .base import check_bool, close_widget
from .gpu_job import FOLLOWED as CONTROLS
from .gpu_job import GPUJob, check_explorer, red, table_cell
from .notice import LIVE_CLASS, restart_notice

#: the sequence lengths the panel times: the backward benchmark's, up to where it times the teaching kernel
BENCH_N = tuple(n for n in BWD_N if n <= TEACHING_MAX_N)
#: the keys of a deterministic run that the panel keeps, as det_<key>
DET_KEYS = ("call_ms", "kernel_ms", "host_us", "call_tflops", "kernel_tflops", "rel_err", "nan", "kernel_note")

METHODS_HTML = ("<div style='font-size:11px;color:#555'>ms by method: <b>call</b> = public call "
                "(<code>flash_backward_gpu</code>, CUDA events, median), the headline; <b>kernel-only</b> = the GPU "
                "kernels each call launches (profiler, median). TFLOP/s = the backward's FLOPs (2.5 × the forward's "
                "matmul FLOPs, causal halved) / public-call time; GB/s = the IO model's bytes (atomic dQ) / "
                "kernel-only time; deterministic ÷ atomic: the same method on both sides; rel. error: the largest "
                "|grad − ref| ÷ |ref|max over dQ, dK, dV and both dQ paths, against float64 gradients.</div>")


def _ratio(a, b, unit: float = 1.0):
    """a / b / unit, or None when either is missing (or b is 0)."""
    return a / b / unit if a is not None and b else None


def model_bytes(N: int, d: int, Br: int, Bc: int, causal: bool) -> tuple[int, int]:
    """(tiled, standard): HBM bytes of the backward at the backward benchmark's shape (B, H =
    ``bench_bwd.shape_of(N, d)``), float32: ``flash_backward_io`` with blocks Br × Bc (the atomic-dQ
    path the IO model counts) and ``standard_backward_io`` (P stored), each times B·H. Raises like
    those functions for bad sizes."""
    B, H = shape_of(N, d)
    tiled = flash_backward_io(N, N, d, Br=Br, Bc=Bc, itemsize=4, causal=causal).scaled(B * H).hbm_bytes
    return tiled, standard_backward_io(N, N, d, itemsize=4).scaled(B * H).hbm_bytes


def recorded_row(r: dict) -> dict:
    """One of ``bwd_records.teaching_rows`` as a row of the panel's table: N, d, B, H, Br, Bc,
    causal, flops (the backward's), model_hbm_bytes (``model_bytes``' tiled, for the recorded
    blocks), call_ms, kernel_ms, rel_err (atomic dQ) and det_call_ms, det_kernel_ms, det_rel_err
    (deterministic dQ), where the record has them."""
    out = {k: r[k] for k in ("N", "d", "B", "H", "Br", "Bc", "causal")}
    out["flops"] = r["flops_bwd"]
    out["model_hbm_bytes"] = flash_backward_io(r["N"], r["N"], r["d"], Br=r["Br"], Bc=r["Bc"], itemsize=4,
                                               causal=r["causal"]).scaled(r["B"] * r["H"]).hbm_bytes
    for src, dst in (("bwd_teaching_", ""), ("bwd_teaching_det_", "det_")):
        for k in ("call_ms", "kernel_ms", "rel_err"):
            if src + k in r:
                out[dst + k] = r[src + k]
    return out


def closest_recorded(rows: list[dict], p: dict) -> tuple[list[dict], dict | None]:
    """The recorded rows (``recorded_row``'s) of the configuration closest to ``p`` (Br, Bc, d,
    causal), every N of it sorted by N, and that configuration {Br, Bc, d, causal} (None when
    there are no rows). Closest: the nearest d (in powers of two), then the same causal flag,
    then the nearest Br and Bc (in powers of two); ties go to the smaller values."""
    rows = [r for r in rows if isinstance(r.get("Br"), int) and isinstance(r.get("Bc"), int)]
    if not rows:
        return [], None

    def far(r):
        return (abs(math.log2(r["d"]) - math.log2(p["d"])), r["causal"] != p["causal"],
                abs(math.log2(r["Br"]) - math.log2(p["Br"])) + abs(math.log2(r["Bc"]) - math.log2(p["Bc"])),
                r["d"], r["Br"], r["Bc"], r["causal"])

    best = min(rows, key=far)
    cfg = {k: best[k] for k in CONTROLS}
    return sorted((r for r in rows if all(r[k] == cfg[k] for k in CONTROLS)), key=lambda r: r["N"]), cfg


def _config_text(c: dict) -> str:
    return f"Br×Bc = {c['Br']}×{c['Bc']}, d = {c['d']}, {'causal' if c['causal'] else 'no mask'}"


def _recorded_summary(rows: list[dict]) -> str:
    """'Br×Bc = 64×64 at d = 64, 128, causal and not': the recorded configurations, by blocks."""
    parts = []
    for Br, Bc in sorted({(r["Br"], r["Bc"]) for r in rows}):
        mine = [r for r in rows if (r["Br"], r["Bc"]) == (Br, Bc)]
        masks = sorted({bool(r["causal"]) for r in mine})
        mask = "causal and not" if len(masks) == 2 else ("causal" if masks[0] else "no mask")
        parts.append(f"Br×Bc = {Br}×{Bc} at d = {', '.join(str(d) for d in sorted({r['d'] for r in mine}))}, {mask}")
    return "; ".join(parts)


def _table_html(rows: list[dict], selected_N=None) -> str:
    """One line per row (``recorded_row``'s keys, or a live run's): the shape and blocks, the
    model's bytes, the atomic dQ's times by both methods, TFLOP/s by public call, GB/s of the
    model's bytes over kernel-only time, the deterministic dQ's times and its cost over the atomic
    one by each method, and the relative error. The row of N = selected_N is marked
    (``data-selected='true'``) and bold."""
    head = ("<tr><th>N</th><th>d</th><th>B·H</th><th>Br×Bc</th><th>causal</th>"
            "<th title='IO model (flash_backward_io, float32, atomic dQ) × B·H'>model HBM<br>bytes</th>"
            "<th title='atomic dQ; public call, CUDA events, median'>atomic dQ ms<br>(call)</th>"
            "<th title='atomic dQ; profiler kernel time per call, median'>atomic dQ ms<br>(kernel-only)</th>"
            "<th title='backward FLOPs / public-call time'>TFLOP/s<br>(call)</th>"
            "<th title='IO model bytes / kernel-only time'>GB/s, model bytes<br>(kernel-only)</th>"
            "<th>deterministic ms<br>(call)</th><th>deterministic ms<br>(kernel-only)</th>"
            "<th title='deterministic public call / atomic public call'>det. ÷ atomic<br>(call)</th>"
            "<th title='deterministic kernel-only / atomic kernel-only'>det. ÷ atomic<br>(kernel-only)</th>"
            "<th>rel. error</th></tr>")
    body = []
    for r in rows:
        call, kern = r.get("call_ms"), r.get("kernel_ms")
        errs = [r[k] for k in ("rel_err", "det_rel_err") if r.get(k) is not None]
        sel = r["N"] == selected_N
        tr = "<tr data-selected='true' style='font-weight:bold'>" if sel else "<tr>"
        body.append(f"{tr}<td>{r['N']}</td><td>{r['d']}</td><td>{r['B'] * r['H']}</td>"
                    f"<td>{r['Br']}×{r['Bc']}</td><td>{'yes' if r.get('causal') else 'no'}</td>"
                    f"<td>{fmt_bytes(r['model_hbm_bytes']) if 'model_hbm_bytes' in r else '—'}</td>"
                    f"{table_cell(call, '.3f')}{table_cell(kern, '.3f')}"
                    f"{table_cell(_ratio(r.get('flops'), call, 1e9), '.1f')}"
                    f"{table_cell(_ratio(r.get('model_hbm_bytes'), kern, 1e6), '.0f')}"
                    f"{table_cell(r.get('det_call_ms'), '.3f')}{table_cell(r.get('det_kernel_ms'), '.3f')}"
                    f"{table_cell(_ratio(r.get('det_call_ms'), call), '.2f', 'x', bold=True)}"
                    f"{table_cell(_ratio(r.get('det_kernel_ms'), kern), '.2f', 'x')}"
                    f"{table_cell(max(errs) if errs else None, '.1e')}</tr>")
    return ("<table style='border-collapse:collapse;font-size:12px' border='1' cellpadding='3'>"
            + head + "".join(body) + "</table>" + METHODS_HTML)


def _load_record():
    """The newest committed backward record, or None when this installation has none (or it is
    unreadable: the panel then says so instead of showing rows)."""
    try:
        res = latest_results("bwd")
        return res if isinstance(res, dict) and "bench" in res else None
    except Exception:  # a corrupt record only drops the recorded rows
        return None


class BackwardGPUPanel(GPUJob):
    """Times kernels/flash_bwd.cu with a BackwardExplorer's Br, Bc, d and causal flag.

    explorer: a BackwardExplorer whose Br, Bc, d and causal the panel follows (or None: use ``Br``,
    ``Bc``, ``d``, ``causal`` given here). N: the benchmark sequence length, one of BENCH_N (1024,
    2048, 4096); the shape is the backward benchmark's (B·N = 16,384 tokens, H = 2048 / d, float32),
    so a live run compares with the recorded rows. ``run()`` (the button) times the atomic dQ and
    then the deterministic dQ (``gpu.benchmark_backward``) and returns the atomic run's dict (call_ms
    and kernel_ms in ms, host_us in µs, call_tflops / kernel_tflops in TFLOP/s, model_hbm_bytes in
    bytes, model_GBps in GB/s, rel_err, compile_ms, ...) with the deterministic run's figures as
    ``det_<key>`` and det_over_atomic_call / det_over_atomic_kernel — or None with the reason
    shown in the panel. Without a GPU it shows the recorded rows of the configuration closest to
    the explorer's, labelled with device and date, and says which of Br, Bc, d, causal differ.

    Public after each change: ``params`` (Br, Bc, d, causal now), ``model_hbm_bytes`` and
    ``standard_hbm_bytes`` (the IO model's bytes at the panel's N, float32, times B·H),
    ``problem`` (why this configuration cannot run, or None), ``recorded_config`` (the recorded
    configuration shown, or None), ``recorded_differs`` (the names among Br, Bc, d, causal where it
    differs from ``params``); after a run, ``last``.

    Raises one-line TypeError/ValueError for an N not in BENCH_N, Br/Bc/d the kernel does not
    support (Br, Bc in 16, 32, 64, 128; d in 16, 32, 64, 128), a non-bool causal, an explorer
    without Br, Bc, d and causal controls, or an unhashable key.
    """

    #: the header the app folds the panel under
    TITLE = "The same backward on a GPU (the CUDA teaching kernel)"

    kind = "BackwardGPUPanel"

    def __init__(self, explorer=None, *, N: int = 4096, Br: int = 64, Bc: int = 64, d: int = 64,
                 causal: bool = False, key=None):
        N = checks.check_choice(N, "N", BENCH_N)
        Br, Bc, d = check_bwd_sizes(Br, Bc, d)
        causal = check_bool(causal, "causal")
        check_explorer(explorer, "BackwardExplorer")
        widget_checks.check_key(key)
        self._key = registry.caller_key() if key is None else key
        registry.register(self.kind, self._key, self)
        self.ok, self.reason = gpu.gpu_status()
        self.last = None
        self.problem = self.recorded_config = None
        self.recorded_differs: tuple = ()
        self._record = _load_record()
        self.N = W.Dropdown(options=list(BENCH_N), value=N, description="N", layout=W.Layout(width="150px"))
        self.config = W.HTML()
        self.run_button = W.Button(description="Run on GPU", icon="play", button_style="primary",
                                   layout=W.Layout(min_width="132px", flex="0 0 auto"),   # never cut to "Run o…"
                                   disabled=not self.ok, tooltip="compile, check and time the backward kernel")
        self.status = W.HTML()
        self.result_html = W.HTML()
        self.recorded_html = W.HTML()
        self._init_job()
        self.run_button.on_click(lambda _: self.run(wait=False))
        self._follow(explorer, dict(Br=Br, Bc=Bc, d=d, causal=causal))
        self.N.observe(self._refresh, names="value")
        self._boxes = [W.HTML("<b>The same backward on a GPU</b> — kernels/flash_bwd.cu (float32): key blocks "
                              "outside, query blocks inside, P<sub>ij</sub> recomputed from lse, with the explorer's "
                              "blocks; timed with the atomic dQ and the deterministic one. The tensor-core backward beside "
                              "PyTorch's: the recorded tables further down this section."),
                       W.HBox([self.N, self.run_button, self.stop_button, self.progress, self.config])]
        self._notice = restart_notice()      # the page says so if the kernel goes
        self.widget = W.VBox([*self._boxes, self.status, self.result_html, self.recorded_html, self._notice])
        self.widget.add_class(LIVE_CLASS)
        self._refresh()

    def _refresh(self, *_):
        p, N = self.params, self.N.value
        B, H = shape_of(N, p["d"])
        self.model_hbm_bytes, self.standard_hbm_bytes = model_bytes(N, p["d"], p["Br"], p["Bc"], p["causal"])
        problem, smem = None, None
        try:
            smem = gpu.check_bwd_launch(p["Br"], p["Bc"], p["d"])
        except ValueError as exc:
            problem = str(exc)
        self.problem = problem
        self.config.value = (f"&nbsp;B = {B}, H = {H}, d = {p['d']}, Br = {p['Br']}, Bc = {p['Bc']}"
                             f"{', causal' if p['causal'] else ''} · model HBM bytes of the backward: tiled "
                             f"{fmt_bytes(self.model_hbm_bytes)} vs standard {fmt_bytes(self.standard_hbm_bytes)}"
                             f"{f' · shared memory {smem:,} B per block' if smem else ''}")
        if not self.ok:
            self.status.value = red(f"No GPU here: {self.reason}. Showing recorded results; the explorer above "
                                    f"works unchanged.")
        elif problem:
            self.status.value = red(f"This configuration cannot run: {problem}")
        else:
            self.status.value = "Ready: press <i>Run on GPU</i>."
        self.run_button.disabled = not self.ok or problem is not None or self._busy()
        self._show_recorded(p, N)

    def _show_recorded(self, p, N):
        every = [recorded_row(r) for r in teaching_rows(self._record)] if self._record is not None else []
        rows, cfg = closest_recorded(every, p)
        self.recorded_config = cfg
        self.recorded_differs = tuple(k for k in CONTROLS if cfg is not None and cfg[k] != p[k])
        if cfg is None:
            self.recorded_html.value = ("<i>No recorded runs of the backward teaching kernel "
                                        "(benchmarks/results/bwd-*.json) in this installation.</i>")
            return
        note = ""
        if self.recorded_differs:
            listed = _recorded_summary(every)
            note = (f"<div data-closest='true' style='font-size:12px;color:#b35900'><b>Not the explorer's "
                    f"configuration:</b> the record has no run with {html.escape(_config_text(p))}; it differs in "
                    f"{', '.join(self.recorded_differs)}. Showing the closest, {html.escape(_config_text(cfg))} "
                    f"(recorded: {html.escape(listed)}).</div>")
        self.recorded_html.value = (
            f"<div style='font-size:12px'>Recorded on <b>{html.escape(bwd_label(self._record))}</b>: the same kernel "
            f"at the shapes a run here uses (B·N = {TOKENS:,} tokens, H = {MODEL_DIM} / d), on float32 copies of "
            f"fp16 inputs:</div>"
            f"{note}{_table_html(rows, selected_N=N)}")

    def run(self, *, wait: bool = True):
        """Compile, check and time the backward kernel with the atomic dQ, then the deterministic dQ
        (several seconds each: a float64 check on the CPU, then the timing).

        Runs in a background thread with a progress bar; the Stop button (or ``stop()``) ends it
        after the current stage. wait=True (the API default) blocks and returns the result dict,
        or None with the reason shown in the panel; the button uses wait=False.
        """
        p, N = self.params, self.N.value
        if self.problem is not None and self.ok:
            self.status.value = red(f"This configuration cannot run: {self.problem}")
            return None
        return self._start_job(lambda: self._work(p, N), buttons=(self.run_button,), steps=2, wait=wait,
                               running=(f"Running the backward with Br = {p['Br']}, Bc = {p['Bc']}, d = {p['d']}, "
                                        f"N = {N}{', causal' if p['causal'] else ''} …"),
                               failed="GPU run failed")

    def _work(self, p, N) -> dict:
        kw = dict(Br=p["Br"], Bc=p["Bc"], causal=p["causal"])
        self.progress.description = "atomic dQ"
        res = dict(gpu.benchmark_backward(N, p["d"], deterministic=False, **kw))
        self.progress.value = 1
        if self._stop.is_set():
            done = "Stopped after timing the atomic dQ (the deterministic dQ not timed)."
        else:
            self.progress.description = "deterministic"
            det = gpu.benchmark_backward(N, p["d"], deterministic=True, **kw)
            res.update({f"det_{k}": det[k] for k in DET_KEYS if k in det})
            for m in ("call", "kernel"):
                r = _ratio(res.get(f"det_{m}_ms"), res.get(f"{m}_ms"))
                if r is not None:
                    res[f"det_over_atomic_{m}"] = r
            self.progress.value = 2
            done = (f"<span style='color:#2ca02c'>Measured now (compile {res['compile_ms']:.0f} ms, "
                    f"not included).</span>")
        self.last = res
        self.result_html.value = (f"<div style='font-size:12px'>Measured here on {datetime.date.today().isoformat()}: "
                                  f"{html.escape(self.reason)}</div>{_table_html([res])}")
        self.status.value = done
        return res

    def _job_finished(self) -> None:
        """After a run: the button stays off for a configuration that cannot run."""
        self.run_button.disabled = not self.ok or self.problem is not None

    def close(self):
        """Stop following the explorer and close every control of the panel (idempotent)."""
        self._unfollow()
        try:
            self.N.unobserve(self._refresh, names="value")
        except ValueError:
            pass
        self._stop.set()
        for w in (self.N, self.config, self.run_button, self.stop_button, self.progress, self.status,
                  self.result_html, self.recorded_html, self._notice, *self._boxes, self.widget):
            close_widget(w)
        registry.unregister(self.kind, self._key, self)

    def _repr_mimebundle_(self, **kwargs):
        from . import book
        if book.enabled():       # building the static book (FLASHVIZ_BOOK=1): its texts and tables
            return book.panel_bundle(self)
        return self.widget._repr_mimebundle_(**kwargs)
