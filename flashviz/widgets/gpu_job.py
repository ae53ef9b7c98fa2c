"""GPUJob: what every GPU panel shares — one measurement at a time in a background thread,
a progress bar, a Stop button, and one lock for the whole process.

A panel (GPUPanel, BackwardGPUPanel, TensorCorePanel) mixes it in, calls ``_init_job`` in its
constructor and starts measurements with ``_start_job``. The panel has ``ok`` and ``reason`` (is
there a usable GPU, and which, or why not) and a ``status`` HTML line. The job's work runs off the kernel's
thread so the notebook stays responsive; it reads ``self._stop`` between its stages and
advances ``self.progress``. Whatever the work raises becomes one red line in ``status`` (never
a traceback), and the panel is left ready for the next measurement.

``GPU_LOCK``: two panels timing at once would time each other, so a second one is refused with
a message while the first runs (any panel, any notebook cell, one process).
"""

from __future__ import annotations

import html
import threading

import ipywidgets as W

from .base import error_line

GPU_LOCK = threading.Lock()

#: the explorer controls a panel follows (``GPUJob._follow``)
FOLLOWED = ("Br", "Bc", "d", "causal")


def check_explorer(explorer, kind: str):
    """``explorer`` if it is None or has Br, Bc, d and causal controls (``FOLLOWED``); else a
    one-line TypeError naming ``kind``, the explorer the panel expects."""
    if explorer is not None and not all(hasattr(getattr(explorer, name, None), "observe") for name in FOLLOWED):
        raise TypeError(f"explorer must be a {kind} (a widget with Br, Bc, d and causal controls) or None, "
                        f"got {type(explorer).__name__}")
    return explorer


def table_cell(v, fmt: str, suffix: str = "", bold: bool = False) -> str:
    """One HTML table cell of a panel's results: v formatted with ``fmt`` (and ``suffix``), bold
    when asked; "—" when v is None."""
    if v is None:
        return "<td>—</td>"
    text = format(v, fmt) + suffix
    return f"<td><b>{text}</b></td>" if bold else f"<td>{text}</td>"


def red(text: str) -> str:
    """``text`` (plain, escaped here) as one red HTML line: how a panel shows what went wrong."""
    return f"<span style='color:#d62728'>{html.escape(text)}</span>"


class GPUJob:
    """Mixin: run / progress / Stop / lock for a panel with ``ok``, ``reason`` and ``status``."""

    def _init_job(self, stop_tooltip: str = "stop after the current stage"):
        """Make ``stop_button`` and ``progress`` (hidden until a job runs)."""
        self.stop_button = W.Button(description="Stop", icon="stop", disabled=True, tooltip=stop_tooltip)
        self.progress = W.IntProgress(value=0, min=0, max=1, description="",
                                      layout=W.Layout(width="160px", visibility="hidden"))
        self._stop, self._thread = threading.Event(), None
        self.stop_button.on_click(lambda _: self.stop())

    def _follow(self, explorer, fixed: dict) -> None:
        """Follow ``explorer``'s Br, Bc, d and causal controls (checked with ``check_explorer``):
        ``params`` reads them and ``self._refresh`` runs when one changes; with explorer None,
        ``params`` is ``fixed``."""
        self.explorer, self._fixed = explorer, dict(fixed)
        if explorer is not None:
            for name in FOLLOWED:
                getattr(explorer, name).observe(self._refresh, names="value")

    def _unfollow(self) -> None:
        """Stop following the explorer (idempotent)."""
        if self.explorer is not None:
            for name in FOLLOWED:
                try:
                    getattr(self.explorer, name).unobserve(self._refresh, names="value")
                except ValueError:
                    pass

    @property
    def params(self) -> dict:
        """The kernel configuration now: Br, Bc, d and causal (from the explorer when there is one)."""
        if self.explorer is None:
            return dict(self._fixed)
        return {name: getattr(self.explorer, name).value for name in FOLLOWED} | \
            {"causal": bool(self.explorer.causal.value)}

    def _busy(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self):
        """Ask a running measurement to stop after its current stage (a no-op when none runs)."""
        self._stop.set()

    def _job_failure(self, exc: BaseException) -> str:
        """The one line shown for an exception of the work (panels may add a hint)."""
        return error_line(exc)

    def _job_finished(self) -> None:
        """Called on the job's thread after every job, success or not (panels may re-check buttons)."""

    def _start_job(self, work, *, buttons, steps: int, running: str, failed: str, wait: bool):
        """Run ``work()`` (returns the result) in a background thread, one job at a time.

        buttons: the panel's start buttons, disabled while it runs; steps: the progress bar's
        maximum (``work`` advances ``self.progress.value``); running: the status line while it
        runs (HTML); failed: what a failure's line starts with ("GPU run failed"). Returns the
        result with wait=True (None when the work failed, stopped without a result, or could not
        start: no GPU, a job already running here, or another panel holding the GPU — each
        with its reason in ``status``); with wait=False None at once."""
        if not self.ok:
            self.status.value = red(f"No GPU here: {self.reason}.")
            return None
        if self._busy():
            self.status.value = "A measurement is already going: wait for it or press Stop."
            return None
        if not GPU_LOCK.acquire(blocking=False):
            self.status.value = "Another panel is measuring on the GPU: wait for it (two at once would time each other)."
            return None
        self._stop.clear()
        for b in buttons:
            b.disabled = True
        self.stop_button.disabled = False
        self.progress.max, self.progress.value, self.progress.layout.visibility = max(int(steps), 1), 0, "visible"
        self.status.value = running
        box = {}

        def target():
            try:
                box["res"] = work()
            except Exception as exc:  # any GPU failure is a message in the panel, never a traceback
                self.status.value = red(f"{failed}: {self._job_failure(exc)}")
            finally:
                GPU_LOCK.release()
                for b in buttons:
                    b.disabled = False
                self.stop_button.disabled = True
                self.progress.layout.visibility = "hidden"
                self._job_finished()

        self._thread = threading.Thread(target=target, daemon=True)
        self._thread.start()
        if not wait:
            return None
        self._thread.join()
        return box.get("res")
