"""TensorCorePanel: time the tensor-core FlashAttention kernels (fp16 / bf16) at the block
sizes they support, live on a GPU, or from the committed H200 recording without one.

Kernels: kernels/flash_fwd_mma.cu (Hopper, warpgroup MMA ``wgmma``) and
kernels/flash_fwd_mma_sm80.cu (``mma.sync``, any GPU from Ampere on); a live run uses the one
this GPU supports (``flashviz.gpu.device_variant``). Shape of a run: B = 16,384 / N
sequences, H = 2,048 / d heads, inputs (B, H, N, d). Every time names its method
(``flashviz.gpu.timing``, compilation excluded): the benchmark's headline is the public call
(CUDA events, median), with kernel-only (the profiler's kernel time per call, median) and host
µs per call beside it; the block sweep compares one kernel's block sizes, so it is kernel-only.
Rates are TFLOP/s of matmul FLOPs (4·B·H·N²·d, halved when causal) over the time of the method
named; bytes are the IO model's HBM bytes (``flash_forward_io``, 2-byte elements, all heads).
Any GPU failure is one red line in the panel, never a traceback.
"""

from __future__ import annotations

import html
import numbers

import ipywidgets as W
import numpy as np

from .. import gpu
from ..checks import shown
from ..iomodel import flash_forward_io
from ..mma_limits import (
    BENCH_N,
    DTYPES,
    MMA_BC,
    MMA_BR,
    MMA_D,
    VARIANTS,
    check_mma_launch,
    default_blocks,
    mma_blocks,
    mma_smem_bytes,
)
from ..mma_limits import IMPL_NAMES as KEY  # variant -> prefix of its result keys
from ..records.results import IMPLS as RESULT_IMPLS
from ..records.results import METHOD_NAMES, latest_results, mma_sweep, mma_table, recorded_label
from ..views.style import fmt_bytes
from . import checks as widget_checks
from . import registry
from .base import check_bool, close_widget, error_line
from .gpu_job import GPUJob, red
from .notice import LIVE_CLASS, restart_notice

TOKENS, MODEL_DIM = 16384, 2048      # B·N tokens and H·d model width of every run
REPEAT = 20                          # timed calls per measurement (median)
IMPLS = tuple(i for i in RESULT_IMPLS if i[0] in ("wgmma", "mmasync", "sdpa_flash", "sdpa_cudnn"))
HIGHLIGHT = "background:#fff3b0;font-weight:bold"
_TABLE = "<table style='border-collapse:collapse;font-size:12px' border='1' cellpadding='3'>"


class _KernelFailed(RuntimeError):
    """A kernel error that bench_shape recorded as text ("ValueError: ..."), shown as it is."""


def _member(value, name: str, allowed):
    """value if it is one of ``allowed`` (ints, or strings); one-line TypeError/ValueError otherwise."""
    kind = str if isinstance(allowed[0], str) else numbers.Integral
    if isinstance(value, bool) or not isinstance(value, kind):
        raise TypeError(f"{name} must be one of {', '.join(map(str, allowed))}; got {shown(value)}")
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(map(str, allowed))}; got {shown(value)}")
    return value if kind is str else int(value)


SWEEP_METHOD = METHOD_NAMES["kernel"]                # "kernel-only (profiler kernel time, median)"
BENCH_METHOD = (f"ms by {METHOD_NAMES['call']}, the headline, and {METHOD_NAMES['kernel']}; host µs per call "
                f"(median); TFLOP/s by public call; × SDPA flash = SDPA flash's time / this one's, the same method "
                f"on both sides (above 1: faster than FlashAttention-2)")


def _note(text: str) -> str:
    return f"<div style='font-size:11px;color:#555'>{html.escape(text)}</div>"


def sweep_table_html(rows: list[dict], *, selected=None, defaults=None) -> str:
    """One row per (Br, Bc): the model's HBM bytes, then the kernel-only ms and TFLOP/s of each
    variant in ``rows`` (block-sweep rows: variant, Br, Bc, kernel_ms, kernel_tflops,
    model_hbm_bytes; or error). A sweep compares one kernel's block sizes, so it is read
    kernel-only (the profiler's kernel time per call, median); the table says so. The row of
    ``selected`` (Br, Bc) is highlighted; ★ marks ``defaults[variant]``, the runner's default."""
    variants = [v for v in VARIANTS if any(r.get("variant") == v for r in rows)]
    by = {(r["Br"], r["Bc"], r["variant"]): r for r in rows}
    head = "<tr><th>Br×Bc</th><th>model HBM bytes</th>" + "".join(
        f"<th title='{SWEEP_METHOD}'>{v} ms<br>(kernel-only)</th><th>{v} TFLOP/s<br>(kernel-only)</th>"
        for v in variants) + "</tr>"
    body = []
    for Br, Bc in sorted({(r["Br"], r["Bc"]) for r in rows}):
        some = next(by[(Br, Bc, v)] for v in variants if (Br, Bc, v) in by)
        cells = [f"<td>{Br}×{Bc}</td><td>{fmt_bytes(some['model_hbm_bytes'])}</td>"]
        for v in variants:
            r = by.get((Br, Bc, v), {})
            star = " ★" if (defaults or {}).get(v) == (Br, Bc) else ""
            if "kernel_ms" in r:
                cells.append(f"<td>{r['kernel_ms']:.3f}{star}</td><td>{r['kernel_tflops']:.1f}</td>")
            else:
                cells.append(f"<td colspan='2'>{red(r.get('error', 'not measured'))}</td>")
        sel = (Br, Bc) == selected
        attrs = f" style='{HIGHLIGHT}' data-selected='true'" if sel else ""
        body.append(f"<tr{attrs}>{''.join(cells)}</tr>")
    return _TABLE + head + "".join(body) + "</table>" + _note(f"ms and TFLOP/s: {SWEEP_METHOD}.")


def _x(num, den) -> str:
    return f"{num / den:.2f}×" if num is not None and den else "—"


def bench_table_html(row: dict) -> str:
    """One benchmark row (``mma_table`` keys, or ``bench_shape``'s: <impl>_call_ms,
    <impl>_kernel_ms, <impl>_host_us) as a table: one line per implementation that ran, with
    its blocks, its time by public call (the headline), kernel-only and host µs per call,
    TFLOP/s by public call, and its ratio to SDPA flash by public call and by kernel-only
    (SDPA flash's time / its time, the same method on both sides: above 1 is faster than
    FlashAttention-2). A note under the table names the methods."""
    head = ("<tr><th>implementation</th><th>Br×Bc</th>"
            f"<th title='{METHOD_NAMES['call']}'>ms<br>(call)</th>"
            f"<th title='{METHOD_NAMES['kernel']}'>ms<br>(kernel-only)</th>"
            "<th title='host time per call, median'>host µs<br>per call</th>"
            "<th title='FLOPs / public-call time'>TFLOP/s<br>(call)</th>"
            "<th title='SDPA flash public call / this public call: above 1 is faster'>× SDPA flash<br>(call)</th>"
            "<th title='SDPA flash kernel-only / this kernel-only: above 1 is faster'>× SDPA flash<br>(kernel-only)</th>"
            "</tr>")
    flops = row.get("flops")
    body = []
    for key, name in IMPLS:
        if key + "_call_ms" not in row:
            if key + "_error" in row:
                body.append(f"<tr><td>{name}</td><td colspan='7'>{red(row[key + '_error'])}</td></tr>")
            continue
        call, kern, host = row[key + "_call_ms"], row.get(key + "_kernel_ms"), row.get(key + "_host_us")
        blocks = f"{row[key + '_Br']}×{row[key + '_Bc']}" if key + "_Br" in row else "—"
        tflops = row.get(key + "_call_tflops", flops / call / 1e9 if flops else None)
        body.append(f"<tr><td>{name}</td><td>{blocks}</td><td>{call:.3f}</td>"
                    f"<td>{'—' if kern is None else f'{kern:.3f}'}</td>"
                    f"<td>{'—' if host is None else f'{host:.0f}'}</td>"
                    f"<td>{'—' if tflops is None else f'{tflops:.1f}'}</td>"
                    f"<td>{_x(row.get('sdpa_flash_call_ms'), call)}</td>"
                    f"<td>{_x(row.get('sdpa_flash_kernel_ms'), kern)}</td></tr>")
    note = BENCH_METHOD + "."
    if row.get("host_after_profiler"):
        note += (" These host times were taken after an earlier profiler session in this kernel, which leaves"
                 " every later torch call slower on the host (SDPA more than ours); restart the kernel for"
                 " clean host figures.")
    return _TABLE + head + "".join(body) + "</table>" + _note(note)


def _derived(res: dict) -> dict:
    """A bench_shape result with mma_table's derived figures (TFLOP/s and ratios by method) added."""
    rows = mma_table({"bench": [res]}) if all(k in res for k in ("N", "d", "causal")) else []
    return {**res, **rows[0]} if rows else dict(res)


def _shape(p: dict) -> str:
    return (f"N = {p['N']}, d = {p['d']}, {'causal' if p['causal'] else 'not causal'}, "
            f"B·H = {(TOKENS // p['N']) * (MODEL_DIM // p['d'])}")


class TensorCorePanel(GPUJob):
    """Times the tensor-core kernels at exactly the block sizes they support.

    N: sequence length (B = 16,384 / N); d: head dimension (H = 2,048 / d); causal; dtype:
    "float16" | "bfloat16"; Br, Bc: block rows / columns (None: the runner's default for d and
    causal, ``default_blocks(d, causal, "wgmma")``); key: registry key (default: the calling
    cell and line, so re-running the cell replaces the panel). ``run()`` times the chosen
    configuration against PyTorch SDPA; ``sweep()`` times every supported Br×Bc. Without a
    GPU both return None, and the panel shows the recorded H200 measurements.
    """

    #: the header the app folds the panel under
    TITLE = "The same tiling on tensor cores (fp16 / bf16)"

    def __init__(self, *, N: int = 4096, d: int = 64, causal: bool = False, dtype: str = "float16",
                 Br: int | None = None, Bc: int | None = None, key=None):
        N, d = _member(N, "N", BENCH_N), _member(d, "d", MMA_D)
        if dtype is not None and not isinstance(dtype, str):
            try:                                    # a NumPy dtype (np.float16) is fine too
                dtype = np.dtype(dtype).name if np.dtype(dtype).name in DTYPES else dtype
            except (TypeError, ValueError, AttributeError):
                pass
        causal, dtype = check_bool(causal, "causal"), _member(dtype, "dtype", DTYPES)
        Br = None if Br is None else _member(Br, "Br", MMA_BR)
        Bc = None if Bc is None else _member(Bc, "Bc", MMA_BC)
        widget_checks.check_key(key)
        self.ok, self.reason = gpu.gpu_status()
        self.variant, self._smem_limit = None, None       # the live GPU's kernel and shared memory (bytes)
        if self.ok:
            try:
                from ..gpu.common import device_smem_optin
                from ..gpu.tensorcore import kernel as mma
                self.variant, self._smem_limit = mma.device_variant(), device_smem_optin()
            except Exception as exc:
                self.ok, self.reason = False, error_line(exc)
        dBr, dBc = default_blocks(d, causal, self.variant or "wgmma")   # this GPU's kernel's defaults
        Br, Bc = dBr if Br is None else Br, dBc if Bc is None else Bc
        self._key = registry.caller_key() if key is None else key
        registry.register("TensorCorePanel", self._key, self)
        try:
            self._res = latest_results("mma")
        except Exception:              # a corrupt recording must not break the panel
            self._res = None
        self.last, self._recorded = None, []
        self._init_job("stop after the current block size")

        style = {"description_width": "initial"}
        dd = lambda name, opts, v, w, tip: W.Dropdown(options=list(opts), value=v, description=name,  # noqa: E731
                                                      style=style, layout=W.Layout(width=w), tooltip=tip)
        self.N = dd("N", BENCH_N, N, "110px", "sequence length (B = 16,384 / N)")
        self.d = dd("d", MMA_D, d, "90px", "head dimension (H = 2,048 / d)")
        self.dtype = dd("dtype", DTYPES, dtype, "150px", "element type of Q, K, V and O")
        self.Br = dd("Br", MMA_BR, Br, "95px", "query rows per block")
        self.Bc = dd("Bc", MMA_BC, Bc, "95px", "key columns per block")
        self.causal = W.Checkbox(value=causal, description="causal", indent=False, layout=W.Layout(width="80px"))
        self.run_button = W.Button(description="Run on GPU", icon="play", button_style="primary",
                                   layout=W.Layout(min_width="132px", flex="0 0 auto"),   # never cut to "Run o…"
                                   tooltip="time this configuration against PyTorch SDPA")
        self.sweep_button = W.Button(description="Sweep Br×Bc", icon="table",
                                     tooltip="time every supported block size at this N, d, causal")
        self.config, self.status, self.result_html, self.recorded_html = W.HTML(), W.HTML(), W.HTML(), W.HTML()
        self._controls = (self.N, self.d, self.causal, self.dtype, self.Br, self.Bc)
        for c in self._controls:
            c.observe(self._refresh, names="value")
        self.run_button.on_click(lambda _: self.run(wait=False))
        self.sweep_button.on_click(lambda _: self.sweep(wait=False))
        self._boxes = [W.HTML("<b>Tensor cores: kernels/flash_fwd_mma.cu (fp16 / bf16)</b>"),
                       W.HBox([*self._controls, self.run_button, self.sweep_button, self.stop_button,
                               self.progress], layout=W.Layout(flex_flow="row wrap"))]
        self._notice = restart_notice()      # the page says so if the kernel goes
        self.widget = W.VBox([*self._boxes, self.config, self.status, self.result_html, self.recorded_html,
                              self._notice])
        self.widget.add_class(LIVE_CLASS)
        self._refresh()

    @property
    def params(self) -> dict:
        """The configuration now: N, d, causal, dtype, Br, Bc."""
        return {"N": self.N.value, "d": self.d.value, "causal": self.causal.value, "dtype": self.dtype.value,
                "Br": self.Br.value, "Bc": self.Bc.value}

    @property
    def recorded_rows(self) -> list[dict]:
        """The recorded block-sweep rows shown now (copies of the JSON's "sweep" rows for this d
        and causal: wgmma, then mma.sync, each by (Br, Bc)); [] without a recording."""
        return [dict(r) for r in self._recorded]

    def _launch_problem(self, p) -> str | None:
        """Why this GPU cannot run the configuration (too much shared memory), or None."""
        try:
            check_mma_launch(p["Br"], p["Bc"], p["d"], self.variant, self._smem_limit)
        except ValueError as exc:
            return str(exc)
        return None

    def _refresh(self, *_):
        p = self.params
        io = flash_forward_io(p["N"], p["N"], p["d"], Br=p["Br"], Bc=p["Bc"], itemsize=2, causal=p["causal"])
        io = io.scaled((TOKENS // p["N"]) * (MODEL_DIM // p["d"]))
        smem = ", ".join(f"{mma_smem_bytes(p['Br'], p['Bc'], p['d'], v):,} B ({v})" for v in VARIANTS)
        self.config.value = (f"B = {TOKENS // p['N']}, H = {MODEL_DIM // p['d']}, Br×Bc = {p['Br']}×{p['Bc']}"
                             f" · shared memory per block: {smem} · IO model HBM bytes: {fmt_bytes(io.hbm_bytes)}")
        if not self._busy():
            problem = self._launch_problem(p) if self.ok else None
            if not self.ok:
                where = (self._res or {}).get("env", {}).get("device", "").replace("NVIDIA ", "") or "GPU"
                self.status.value = red(f"No GPU here: {self.reason}. Showing the recorded {where} measurements.")
            elif problem:
                self.status.value = red(f"This configuration cannot run on this GPU: {problem}")
            else:
                self.status.value = (f"Ready on {html.escape(self.reason)} ({self.variant} kernel): "
                                     f"press <i>Run</i> or <i>Sweep</i>.")
            self.run_button.disabled = not self.ok or problem is not None
            self.sweep_button.disabled = not self.ok
        self._show_recorded(p)

    def _show_recorded(self, p):
        res = self._res
        if not res:
            self._recorded = []
            self.recorded_html.value = "<i>No recorded tensor-core measurements in this installation.</i>"
            return
        self._recorded = [r for v in VARIANTS for r in mma_sweep(res, variant=v, d=p["d"], causal=p["causal"])]
        bench = [r for r in mma_table(res, d=p["d"], causal=p["causal"]) if r["N"] == p["N"]]
        rec_dtype = bench[0].get("dtype", "float16") if bench else "float16"
        note = f" (recorded in {rec_dtype} only)" if p["dtype"] != rec_dtype else ""
        sweep_N = sorted({r["N"] for r in self._recorded})
        defaults = {v: default_blocks(p["d"], p["causal"], v) for v in VARIANTS}
        parts = [f"<div style='font-size:12px;margin-top:6px'>Recorded on <b>{html.escape(recorded_label(res))}</b>"
                 f"{note}</div>"]
        if self._recorded:
            shape = _shape({**p, "N": sweep_N[0]})
            have = sorted({(r["Br"], r["Bc"]) for r in self._recorded})
            chosen = (f"highlighted, the selected {p['Br']}×{p['Bc']}" if (p["Br"], p["Bc"]) in have else
                      f"no recording at the selected {p['Br']}×{p['Bc']} (recorded: "
                      f"{', '.join(f'{a}×{b}' for a, b in have)})")
            parts.append(f"<div style='font-size:12px'>Block sweep at {shape}, kernel-only times: {chosen}; "
                         f"★ the runner's default</div>"
                         + sweep_table_html(self._recorded, selected=(p["Br"], p["Bc"]), defaults=defaults))
        else:
            parts.append("<i>No recorded block sweep for this d and causal flag.</i>")
        if bench:
            parts.append(f"<div style='font-size:12px;margin-top:4px'>Benchmark at {_shape(p)} (each kernel "
                         f"with its default blocks; headline: public call)</div>" + bench_table_html(bench[0]))
        else:
            parts.append(f"<i>No recorded benchmark at {_shape(p)}.</i>")
        self.recorded_html.value = "".join(parts)

    # -------------------------------------------------------------- GPU work
    def run(self, *, wait: bool = True):
        """Time the chosen N, d, causal, dtype, Br, Bc on this GPU's kernel and PyTorch SDPA
        (flash, cuDNN, memory-efficient) on the same inputs: a few seconds, more when a block
        size compiles for the first time (not timed). Needs torch. Returns the
        ``gpu.tensorcore.bench.bench_shape`` dict (<key>_call_ms: public call, <key>_kernel_ms:
        kernel-only, <key>_host_us, for key "wgmma" or "mmasync" and sdpa_flash, sdpa_cudnn,
        sdpa_efficient) with ``mma_table``'s derived figures (<key>_call_tflops,
        <key>_kernel_tflops, <key>_call_vs_sdpa_flash, <key>_kernel_vs_sdpa_flash, ...) and
        variant, Br, Bc; or None with the reason shown. wait=False (the button) returns None
        at once."""
        return self._start("run", wait)

    def sweep(self, *, wait: bool = True):
        """Time every (Br, Bc) the kernel supports at this N, d, causal and dtype (no SDPA);
        the table fills in as it goes, Stop ends it after the current block size. Returns a
        list of rows (variant, Br, Bc, call_ms, kernel_ms, host_us, kernel_tflops,
        model_hbm_bytes in bytes, and ms / tflops: the kernel-only figures, as ``mma_sweep``'s
        recorded rows; a block that failed has "error" instead of the times), or None with the
        reason shown."""
        return self._start("sweep", wait)

    def _start(self, job: str, wait: bool):
        p = self.params
        problem = self._launch_problem(p) if job == "run" and self.ok else None
        if problem:
            self.status.value = red(f"This configuration cannot run on this GPU: {problem}")
            return None
        sweep = job == "sweep" and self.ok          # (without a GPU _start_job says so)
        blocks = mma_blocks(p["d"], self.variant, self._smem_limit) if sweep else [(p["Br"], p["Bc"])]

        def work():
            self.last = self._run_one(p) if job == "run" else self._sweep_all(p, blocks)
            return self.last

        return self._start_job(work, buttons=(self.run_button, self.sweep_button), steps=len(blocks), wait=wait,
                               running=f"Timing {self.variant} at {_shape(p)}, {p['dtype']} …",
                               failed=f"GPU {job} failed")

    def _time(self, p, Br, Bc, sdpa: bool) -> dict:
        from ..gpu.tensorcore import bench as mma_bench
        v = self.variant
        return mma_bench.bench_shape(p["N"], p["d"], p["causal"], dtype=p["dtype"], variants=(v,), teaching=False,
                                     naive=False, sdpa=sdpa, blocks={v: (Br, Bc)}, repeat=REPEAT)

    def _job_failure(self, exc) -> str:
        msg = (str(exc).strip().splitlines() or [""])[0] if isinstance(exc, _KernelFailed) else error_line(exc)
        if isinstance(exc, ImportError) and "torch" in str(exc):
            msg += " (the benchmark needs PyTorch: pip install torch)"
        return msg

    def _job_finished(self) -> None:
        if self.ok and self._launch_problem(self.params):
            self.run_button.disabled = True

    def _caption(self, p) -> str:
        return (f"<div style='font-size:12px'>Measured now on {html.escape(self.reason)}: {_shape(p)}, "
                f"{p['dtype']}</div>")

    def _run_one(self, p) -> dict:
        v, key = self.variant, KEY[self.variant]
        res = self._time(p, p["Br"], p["Bc"], sdpa=True)
        if key + "_call_ms" not in res:
            raise _KernelFailed(res.get(key + "_error") or res.get(v + "_error") or "the kernel did not run")
        res = _derived(res)
        res.update(variant=v, Br=p["Br"], Bc=p["Bc"])
        self.progress.value = 1
        self.result_html.value = self._caption(p) + bench_table_html(res)
        self.status.value = "<span style='color:#2ca02c'>Measured now (compilation not included).</span>"
        return res

    def _sweep_all(self, p, blocks) -> list[dict]:
        v, key = self.variant, KEY[self.variant]
        B, H = TOKENS // p["N"], MODEL_DIM // p["d"]
        rows = []
        for Br, Bc in blocks:
            if self._stop.is_set():
                break
            self.progress.description = f"{Br}×{Bc}"
            io = flash_forward_io(p["N"], p["N"], p["d"], Br=Br, Bc=Bc, itemsize=2, causal=p["causal"])
            row = {"variant": v, "N": p["N"], "d": p["d"], "B": B, "H": H, "Br": Br, "Bc": Bc,
                   "causal": p["causal"], "dtype": p["dtype"], "model_hbm_bytes": io.scaled(B * H).hbm_bytes}
            r = self._time(p, Br, Bc, sdpa=False)     # raises only outside the kernel (torch, memory)
            if key + "_call_ms" in r and key + "_kernel_ms" in r:
                flops = r.get("flops") or 4.0 * B * H * p["N"] ** 2 * p["d"] / (2 if p["causal"] else 1)
                row.update(call_ms=r[key + "_call_ms"], kernel_ms=r[key + "_kernel_ms"],
                           host_us=r.get(key + "_host_us"), kernel_tflops=flops / r[key + "_kernel_ms"] / 1e9)
                row.update(ms=row["kernel_ms"], tflops=row["kernel_tflops"])     # as mma_sweep: kernel-only
            else:
                row["error"] = r.get(key + "_error") or r.get(v + "_error") or "the kernel did not run"
            rows.append(row)
            self.progress.value = len(rows)
            self.result_html.value = self._caption(p) + sweep_table_html(rows, selected=(p["Br"], p["Bc"]))
        bad = sum("error" in r for r in rows)
        if rows and bad == len(rows):
            raise _KernelFailed(rows[0]["error"])
        done = (f"Stopped after {len(rows)} of {len(blocks)} block sizes." if len(rows) < len(blocks) else
                f"Timed {len(rows)} block sizes (compilation not included).")
        failed = f" {bad} failed (see the table)." if bad else ""
        self.status.value = f"<span style='color:#2ca02c'>{done}{failed}</span>"
        return rows

    def close(self):
        """Stop any measurement (after its current step) and close every control (idempotent)."""
        self._stop.set()
        for w in (*self._controls, self.run_button, self.sweep_button, self.stop_button, self.progress,
                  self.config, self.status, self.result_html, self.recorded_html, self._notice, *self._boxes, self.widget):
            close_widget(w)
        registry.unregister("TensorCorePanel", self._key, self)

    def _repr_mimebundle_(self, **kwargs):
        from . import book
        if book.enabled():       # building the static book (FLASHVIZ_BOOK=1): its texts and tables
            return book.panel_bundle(self)
        return self.widget._repr_mimebundle_(**kwargs)
