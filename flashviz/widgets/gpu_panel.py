"""GPUPanel: run the CUDA teaching kernel with the explainer's Br and Bc, or show the
recorded measurements when this machine has no usable GPU.

A failing GPU run (no device, out of memory, a compile error, a configuration that does
not fit in shared memory) shows its one-line error in the panel; nothing else breaks.
"""

from __future__ import annotations

import html

import ipywidgets as W

from .. import checks, gpu
from ..gpu.teaching.limits import check_sizes
from ..iomodel import flash_forward_io, standard_attention_io
from ..records.results import recorded_label, recorded_rows, recorded_summary, teaching_figures  # noqa: F401 (re-exported)
from ..views.style import fmt_bytes
from . import checks as widget_checks
from . import registry
from .base import check_bool, close_widget
from .gpu_job import GPUJob, check_explorer, red, table_cell
from .notice import LIVE_CLASS, restart_notice

BENCH_N = (1024, 2048, 4096, 8192, 16384)


METHODS_HTML = ("<div style='font-size:11px;color:#555'>ms by method: <b>call</b> = public call "
                "(<code>flash_forward_gpu</code> / naive CuPy, CUDA events, median), the headline; <b>kernel-only</b> = "
                "the GPU kernels each call launches (profiler, median). TFLOP/s by public call; GB/s = the IO "
                "model's bytes / kernel-only time; naive / kernel = naive's time / the kernel's, same method on "
                "both sides.</div>")


def _table_html(rows: list[dict]) -> str:
    """One line per timing row (gpu.benchmark's keys, or a recorded "timing" / "sweep" row):
    the kernel's time by public call and kernel-only, TFLOP/s by public call, GB/s of the
    model's bytes over kernel-only time, naive CuPy's time and naive / kernel by both methods
    (each ratio compares the same method on both sides), and the relative error."""
    head = ("<tr><th>N</th><th>d</th><th>B·H</th><th>Br×Bc</th><th>causal</th>"
            "<th title='public call, CUDA events, median'>kernel ms<br>(call)</th>"
            "<th title='profiler kernel time per call, median'>kernel ms<br>(kernel-only)</th>"
            "<th title='FLOPs / public-call time'>TFLOP/s<br>(call)</th>"
            "<th title='IO model bytes / kernel-only time'>GB/s, model bytes<br>(kernel-only)</th>"
            "<th>naive CuPy ms<br>(call)</th><th>naive CuPy ms<br>(kernel-only)</th>"
            "<th title='naive public call / kernel public call'>naive / kernel<br>(call)</th>"
            "<th title='naive kernel-only / kernel kernel-only'>naive / kernel<br>(kernel-only)</th>"
            "<th>rel. error</th></tr>")
    body = []
    for r in rows:
        f = teaching_figures(r)
        gbps = (r["model_hbm_bytes"] / f["kernel_ms"] / 1e6 if "model_hbm_bytes" in r and "kernel_ms" in f
                else r.get("model_GBps"))
        body.append(f"<tr><td>{r['N']}</td><td>{r['d']}</td><td>{r['B'] * r['H']}</td>"
                    f"<td>{r['Br']}×{r['Bc']}</td><td>{'yes' if r.get('causal') else 'no'}</td>"
                    f"{table_cell(f.get('call_ms'), '.3f')}{table_cell(f.get('kernel_ms'), '.3f')}"
                    f"{table_cell(f.get('call_tflops'), '.1f')}{table_cell(gbps, '.0f')}"
                    f"{table_cell(f.get('naive_call_ms'), '.2f')}{table_cell(f.get('naive_kernel_ms'), '.2f')}"
                    f"{table_cell(f.get('naive_over_call'), '.2f', 'x', bold=True)}"
                    f"{table_cell(f.get('naive_over_kernel'), '.2f', 'x')}"
                    f"{table_cell(r.get('rel_err'), '.1e')}</tr>")
    return ("<table style='border-collapse:collapse;font-size:12px' border='1' cellpadding='3'>"
            + head + "".join(body) + "</table>" + METHODS_HTML)


def _tensor_core_note() -> str:
    """One line pointing at the tensor-core kernel, with its recorded speed beside this
    kernel's, both by public call in the same run."""
    try:
        from ..records.results import latest_results, mma_table
        rows = [r for r in mma_table(latest_results("mma"), d=64, causal=False) if r["N"] == 4096]
    except Exception:  # a missing or unreadable recording only drops the note
        rows = []
    if not rows or "wgmma_call_tflops" not in rows[0] or "teaching_call_tflops" not in rows[0]:
        return ""
    r = rows[0]
    return (f"<br><span style='font-size:12px'>The same algorithm on tensor cores (fp16): "
            f"{r['wgmma_call_tflops']:.0f} TFLOP/s against this kernel's {r['teaching_call_tflops']:.0f} "
            f"(with 64×64 blocks; both by public call, CUDA events, median, in the same run) at N = 4096, "
            f"d = 64 (recorded) — chapter 7, <code>flashviz.TensorCorePanel()</code>.</span>")


class GPUPanel(GPUJob):
    """Times kernels/flash_fwd.cu with the explainer's Br, Bc, d and causal flag.

    explorer: a TileExplorer whose Br, Bc, d and causal the panel follows (or None: use
    ``Br``, ``Bc``, ``d`` given here). N: the benchmark sequence length (B·N = 16,384 tokens,
    H = 32 heads, float32). ``run()`` (the button) measures on the GPU and returns the result
    dict of ``gpu.benchmark`` — call_ms (public call, CUDA events, median: the headline),
    kernel_ms (kernel-only, profiler), host_us, call_tflops / kernel_tflops, model_GBps (the
    model's bytes / kernel_ms), naive_call_ms / naive_kernel_ms and ratio_naive_over_call /
    ratio_naive_over_kernel (same method on both sides), rel_err — or None with the reason
    shown in the panel. Without a GPU the panel shows the recorded results, labelled the same way.

    Raises one-line TypeError/ValueError for an N not in (1024, …, 16384), Br/Bc/d the kernel does
    not support (Br, Bc in 16, 32, 64, 128; d in 32, 64, 128), a non-bool causal, an explorer
    without Br, Bc, d and causal controls, or an unhashable key.
    """

    #: the header the app folds the panel under
    TITLE = "The same tiling on a GPU (the CUDA teaching kernel)"

    def __init__(self, explorer=None, *, N: int = 4096, Br: int = 64, Bc: int = 64, d: int = 64,
                 causal: bool = False, key=None):
        N = checks.check_choice(N, "N", BENCH_N)
        Br, Bc, d = check_sizes(Br, Bc, d)
        causal = check_bool(causal, "causal")
        check_explorer(explorer, "TileExplorer")
        widget_checks.check_key(key)
        self._key = registry.caller_key() if key is None else key
        registry.register("GPUPanel", self._key, self)
        self.ok, self.reason = gpu.gpu_status()
        self.last = None
        self.N = W.Dropdown(options=list(BENCH_N), value=N, description="N", layout=W.Layout(width="150px"))
        self.config = W.HTML()
        self.run_button = W.Button(description="Run on GPU", icon="play", button_style="primary",
                                   layout=W.Layout(min_width="132px", flex="0 0 auto"),   # never cut to "Run o…"
                                   disabled=not self.ok, tooltip="compile, check and time the kernel")
        self.status = W.HTML()
        self.result_html = W.HTML()
        self.recorded_html = W.HTML()
        self._init_job()
        self.run_button.on_click(lambda _: self.run(wait=False))
        self._follow(explorer, dict(Br=Br, Bc=Bc, d=d, causal=causal))
        self.N.observe(self._refresh, names="value")
        self._boxes = [W.HTML("<b>The same tiling on a GPU</b> — kernels/flash_fwd.cu (float32)" + _tensor_core_note()),
                       W.HBox([self.N, self.run_button, self.stop_button, self.progress, self.config])]
        self._notice = restart_notice()      # the page says so if the kernel goes
        self.widget = W.VBox([*self._boxes, self.status, self.result_html, self.recorded_html, self._notice])
        self.widget.add_class(LIVE_CLASS)
        self._refresh()

    def _refresh(self, *_):
        p, N = self.params, self.N.value
        B, H = max(1, 16384 // N), 32
        model = flash_forward_io(N, N, p["d"], Br=p["Br"], Bc=p["Bc"], itemsize=4, causal=p["causal"]).scaled(B * H)
        std = standard_attention_io(N, N, p["d"], itemsize=4).scaled(B * H)
        self.config.value = (f"&nbsp;B = {B}, H = {H}, d = {p['d']}, Br = {p['Br']}, Bc = {p['Bc']}"
                             f"{', causal' if p['causal'] else ''} · model HBM bytes: tiled "
                             f"{fmt_bytes(model.hbm_bytes)} vs standard {fmt_bytes(std.hbm_bytes)}")
        problem = None
        try:
            gpu.check_launch(p["Br"], p["Bc"], p["d"])
        except ValueError as exc:
            problem = str(exc)
        if not self.ok:
            self.status.value = red(f"No GPU here: {self.reason}. Showing recorded results; the explainer above "
                                    f"works unchanged.")
        elif problem:
            self.status.value = red(f"This configuration cannot run: {problem}")
        else:
            self.status.value = "Ready: press <i>Run on GPU</i>."
        self.run_button.disabled = not self.ok or problem is not None
        self._show_recorded(p)

    def _show_recorded(self, p):
        res = gpu.latest_results()
        if not res:
            self.recorded_html.value = "<i>No recorded GPU results in this installation.</i>"
            return
        rows = recorded_rows(res, Br=p["Br"], Bc=p["Bc"], d=p["d"]) or recorded_rows(res, d=p["d"]) \
            or recorded_rows(res)
        note = ""
        if not (rows and rows[0]["Br"] == p["Br"] and rows[0]["Bc"] == p["Bc"]):
            have = sorted({(r["Br"], r["Bc"]) for r in recorded_rows(res, d=p["d"]) or recorded_rows(res)})
            note = (f" (no recording with Br×Bc = {p['Br']}×{p['Bc']} at d = {p['d']}; recorded: "
                    f"{', '.join(f'{a}×{b}' for a, b in have)}; showing the closest)")
        self.recorded_html.value = (f"<div style='font-size:12px'>Recorded on <b>{html.escape(recorded_label(res))}</b>"
                                    f"{note}:</div>{_table_html(rows[:12])}")

    def run(self, *, wait: bool = True):
        """Compile, check and time the kernel, then naive CuPy attention (a few seconds).

        Runs in a background thread with a progress bar; the Stop button (or ``stop()``) ends it
        after the current stage. wait=True (the API default) blocks and returns the result dict,
        or None with the reason shown in the panel; the button uses wait=False.
        """
        p, N = self.params, self.N.value
        return self._start_job(lambda: self._work(p, N), buttons=(self.run_button,), steps=2, wait=wait,
                               running=f"Running Br = {p['Br']}, Bc = {p['Bc']}, d = {p['d']}, N = {N} …",
                               failed="GPU run failed")

    def _work(self, p, N) -> dict:
        kw = dict(Br=p["Br"], Bc=p["Bc"], causal=p["causal"], sdpa=False, repeat=10)
        self.progress.description = "kernel"
        res = gpu.benchmark(N, p["d"], naive=False, **kw)          # compile, check, time the kernel
        self.progress.value = 1
        if self._stop.is_set():
            self.status.value = "Stopped after timing the kernel (naive attention not timed)."
        else:
            self.progress.description = "naive"
            naive = gpu.benchmark(N, p["d"], naive=True, check=False, **kw)
            res.update({k: v for k, v in naive.items() if k.startswith(("naive", "ratio"))})
            # the ratios against the kernel times shown (the first run's), same method on both sides
            if "naive_kernel_ms" in res:
                res["ratio_naive_over_kernel"] = res["naive_kernel_ms"] / res["kernel_ms"]
            if "naive_call_ms" in res:
                res["ratio_naive_over_call"] = res["naive_call_ms"] / res["call_ms"]
            self.progress.value = 2
            self.status.value = (f"<span style='color:#2ca02c'>Measured now (compile {res['compile_ms']:.0f} ms, "
                                 f"not included).</span>")
        self.last = res
        self.result_html.value = _table_html([res])
        return res

    def close(self):
        """Stop following the explorer and close every control of the panel (idempotent)."""
        self._unfollow()
        self._stop.set()
        for w in (self.N, self.config, self.run_button, self.stop_button, self.progress, self.status,
                  self.result_html, self.recorded_html, self._notice,
                  *self._boxes, self.widget):
            close_widget(w)
        registry.unregister("GPUPanel", self._key, self)

    def _repr_mimebundle_(self, **kwargs):
        from . import book
        if book.enabled():       # building the static book (FLASHVIZ_BOOK=1): its texts and tables
            return book.panel_bundle(self)
        return self.widget._repr_mimebundle_(**kwargs)
