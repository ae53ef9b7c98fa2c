"""BackwardGPUPanel (chapter 6's backward on a GPU), without a GPU and with a pretend one.

Without a GPU (``gpu_status`` monkeypatched to say so) the panel shows the committed backward
record's teaching-kernel rows: checked here against the newest benchmarks/results/bwd-*.json read
directly (not through flashviz.records), every figure recomputed from the raw times (TFLOP/s from
flops_bwd, GB/s from the IO model's bytes, deterministic ÷ atomic with one method on both sides),
the closest recorded configuration when the explorer's is not recorded, and which of Br, Bc, d,
causal differ. The IO model's bytes follow the explorer and equal ``iomodel.flash_backward_io``
called here. Bad arguments fail in one line; close() frees every comm and stops following the
explorer. A pretend GPU (``gpu_status`` and ``benchmark_backward`` monkeypatched) drives a run:
its figures land in the panel, a raising run becomes one red line, Stop ends after the first stage.

Tests that read the recorded JSON carry the ``recorded_data`` marker.
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path

import matplotlib
import pytest
from widget_contract import assert_close_frees_every_comm

matplotlib.use("Agg")

import flashviz as fv  # noqa: E402
import flashviz.gpu as gpu  # noqa: E402
from flashviz import iomodel  # noqa: E402
from flashviz.views.style import fmt_bytes  # noqa: E402
from flashviz.widgets import backward_gpu_panel as bgp  # noqa: E402
from flashviz.widgets import book, registry  # noqa: E402
from flashviz.widgets.backward import BackwardExplorer  # noqa: E402
from flashviz.widgets.backward_gpu_panel import BackwardGPUPanel  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
recorded_data = pytest.mark.recorded_data


def _newest_bwd():
    files = sorted(RESULTS.glob("bwd-*.json"), key=lambda f: (re.search(r"\d{4}-\d{2}-\d{2}", f.name)[0], f.name))
    return files[-1].name, json.loads(files[-1].read_text())


REC_FILE, REC = _newest_bwd()


def shape(N, d):
    """The backward benchmark's shape, written out here: B·N = 16,384 tokens, H = 2048 / d."""
    return max(1, 16384 // N), 2048 // d


def model(N, d, Br, Bc, causal):
    B, H = shape(N, d)
    return iomodel.flash_backward_io(N, N, d, Br=Br, Bc=Bc, itemsize=4, causal=causal).hbm_bytes * B * H


def one_line(info):
    text = str(info.value)
    assert "\n" not in text
    return text


def cells(tr_html):
    return [re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td[^>]*>(.*?)</td>", tr_html)]


def table_rows(value):
    """The cells of each body row of the panel's table (header excluded)."""
    return [cells(tr) for tr in re.findall(r"<tr[^>]*>(<td.*?)</tr>", value)]


def selected(value):
    rows = re.findall(r"<tr[^>]*data-selected='true'[^>]*>(.*?)</tr>", value)
    assert len(rows) == 1
    return cells(rows[0])


def rel_err(impl, N, d, causal):
    (c,) = [c for c in REC["correctness"] if (c["impl"], c["N"], c["d"], c["causal"]) == (impl, N, d, causal)]
    return max(c[f"{g}_max_abs_err"] / c[f"{g}_ref_max_abs"] for g in ("dQ", "dK", "dV"))


def want_cells(r):
    """A recorded row's cells, computed here from the raw keys of the JSON."""
    N, d, causal = r["N"], r["d"], r["causal"]
    call, kern = r["bwd_teaching_call_ms"], r["bwd_teaching_kernel_ms"]
    dcall, dkern = r["bwd_teaching_det_call_ms"], r["bwd_teaching_det_kernel_ms"]
    flops = 2.5 * 4 * r["B"] * r["H"] * N * N * d / (2 if causal else 1)
    m = model(N, d, r["bwd_teaching_Br"], r["bwd_teaching_Bc"], causal)
    err = max(rel_err("bwd_teaching", N, d, causal), rel_err("bwd_teaching_det", N, d, causal))
    return [str(N), str(d), str(r["B"] * r["H"]), f"{r['bwd_teaching_Br']}×{r['bwd_teaching_Bc']}",
            "yes" if causal else "no", fmt_bytes(m), f"{call:.3f}", f"{kern:.3f}", f"{flops / call / 1e9:.1f}",
            f"{m / kern / 1e6:.0f}", f"{dcall:.3f}", f"{dkern:.3f}", f"{dcall / call:.2f}x", f"{dkern / kern:.2f}x",
            f"{err:.1e}"]


def raw_teaching(d, causal):
    return sorted((r for r in REC["bench"] if (r["d"], r["causal"]) == (d, causal) and "bwd_teaching_call_ms" in r),
                  key=lambda r: r["N"])


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(gpu, "gpu_status", lambda: (False, "a test says there is no GPU"))


@pytest.fixture
def explorer():
    w = BackwardExplorer(N=64, d=64, Br=64, Bc=64, source="random", canvas="png", key="bgp-explorer")
    yield w
    w.close()


@pytest.fixture
def panel(no_gpu, explorer):
    p = BackwardGPUPanel(explorer, N=2048, key="bgp-panel")
    yield p
    p.close()


# ---------------------------------------------------------------- CPU: the recorded rows

@recorded_data
@pytest.mark.parametrize("d, causal", [(64, False), (64, True), (128, False), (128, True)])
def test_recorded_data_rows_equal_the_record(no_gpu, d, causal):
    p = BackwardGPUPanel(N=2048, d=d, causal=causal, key="bgp-rows")
    try:
        v = p.recorded_html.value
        env = REC["env"]
        assert f"Recorded on <b>{env['device']}, {env['time_utc'][:10]}" in v and REC_FILE in v   # device, date, file
        raw = raw_teaching(d, causal)
        assert len(raw) >= 3 and table_rows(v) == [want_cells(r) for r in raw]
        assert selected(v)[0] == "2048"
        assert p.recorded_config == {"Br": 64, "Bc": 64, "d": d, "causal": causal}
        assert p.recorded_differs == () and "data-closest" not in v      # the explorer's own configuration
        assert p.run_button.disabled and p.result_html.value == ""
    finally:
        p.close()


@recorded_data
def test_recorded_data_closest_configuration_and_what_differs(panel, explorer):
    assert panel.recorded_differs == () and panel.recorded_config == {"Br": 64, "Bc": 64, "d": 64, "causal": False}
    explorer.Br.value, explorer.Bc.value = 32, 16                       # blocks the record did not run
    assert panel.recorded_config == {"Br": 64, "Bc": 64, "d": 64, "causal": False}
    assert panel.recorded_differs == ("Br", "Bc") and "data-closest='true'" in panel.recorded_html.value
    assert table_rows(panel.recorded_html.value) == [want_cells(r) for r in raw_teaching(64, False)]
    explorer.causal.value = True                                         # the recorded rows follow the mask
    assert panel.recorded_config["causal"] is True and panel.recorded_differs == ("Br", "Bc")
    assert [c[4] for c in table_rows(panel.recorded_html.value)] == ["yes"] * len(raw_teaching(64, True))
    explorer.d.value = 128
    assert panel.recorded_config == {"Br": 64, "Bc": 64, "d": 128, "causal": True}
    assert table_rows(panel.recorded_html.value) == [want_cells(r) for r in raw_teaching(128, True)]
    explorer.d.value, explorer.Br.value, explorer.Bc.value = 8, 64, 64   # the nearest recorded d: 64
    assert panel.recorded_config == {"Br": 64, "Bc": 64, "d": 64, "causal": True}
    assert panel.recorded_differs == ("d",)
    explorer.d.value = 64
    assert panel.recorded_differs == () and "data-closest" not in panel.recorded_html.value
    panel.N.value = 4096                                                 # the panel's N is the marked row
    assert selected(panel.recorded_html.value)[0] == "4096"


def test_closest_recorded_prefers_d_then_the_mask_then_the_blocks():
    rows = [{"N": n, "d": d, "causal": c, "Br": br, "Bc": bc} for n in (2048, 1024) for d in (64, 128)
            for c in (False, True) for br, bc in ((64, 64), (32, 128))]
    got, cfg = bgp.closest_recorded(rows, {"Br": 16, "Bc": 128, "d": 32, "causal": True})
    assert cfg == {"Br": 32, "Bc": 128, "d": 64, "causal": True} and [r["N"] for r in got] == [1024, 2048]
    _, cfg = bgp.closest_recorded([r for r in rows if not r["causal"]], {"Br": 64, "Bc": 64, "d": 128, "causal": True})
    assert cfg == {"Br": 64, "Bc": 64, "d": 128, "causal": False}
    assert bgp.closest_recorded([], {"Br": 64, "Bc": 64, "d": 64, "causal": False}) == ([], None)


def test_without_a_record_the_panel_says_so_and_still_works(no_gpu, monkeypatch):
    monkeypatch.setattr(bgp, "latest_results", lambda kind="teaching": None)
    p = BackwardGPUPanel(key="bgp-no-record")
    try:
        assert p.recorded_config is None and "<table" not in p.recorded_html.value
        assert p.model_hbm_bytes == model(4096, 64, 64, 64, False)
    finally:
        p.close()


# ---------------------------------------------------------------- CPU: the IO model's bytes

@pytest.mark.parametrize("Br, Bc, causal", [(64, 64, False), (16, 64, False), (64, 16, True), (128, 32, True),
                                             (16, 64, True), (8, 256, False)])
def test_model_bytes_follow_the_explorer(panel, explorer, Br, Bc, causal):
    before = panel.model_hbm_bytes
    explorer.Br.value, explorer.Bc.value, explorer.causal.value = Br, Bc, causal
    want = model(2048, 64, Br, Bc, causal)
    assert panel.params == {"Br": Br, "Bc": Bc, "d": 64, "causal": causal}
    assert panel.model_hbm_bytes == want
    assert panel.standard_hbm_bytes == iomodel.standard_backward_io(2048, 2048, 64, itemsize=4).hbm_bytes * 8 * 32
    assert fmt_bytes(want) in panel.config.value and "B = 8, H = 32" in panel.config.value
    # key blocks outer: without a mask the traffic depends on Bc alone (dQ, Q, dO once per key block)
    assert (want == before) == (Bc == 64 and not causal)


def test_model_bytes_follow_the_panels_N_and_the_explorers_d(panel, explorer):
    panel.N.value = 1024
    assert panel.model_hbm_bytes == model(1024, 64, 64, 64, False) and "B = 16, H = 32" in panel.config.value
    explorer.d.value = 128
    assert panel.model_hbm_bytes == model(1024, 128, 64, 64, False) and "B = 16, H = 16" in panel.config.value
    # Bc = 16 re-reads Q, dO and dQ four times as often as Bc = 64
    explorer.d.value, explorer.Bc.value = 64, 16
    assert panel.model_hbm_bytes > 3 * model(1024, 64, 64, 64, False)


def test_shared_memory_and_what_cannot_run(no_gpu, monkeypatch, explorer):
    monkeypatch.setattr(gpu, "gpu_status", lambda: (True, "a pretend GPU"))
    calls = []
    monkeypatch.setattr(gpu, "benchmark_backward", lambda *a, **k: calls.append((a, k)))
    p = BackwardGPUPanel(explorer, key="bgp-cannot")
    try:
        assert p.problem is None and not p.run_button.disabled
        assert f"shared memory {gpu.bwd_smem_bytes(64, 64, 64):,} B per block" in p.config.value
        for Br, Bc, d in ((8, 64, 64), (64, 128, 128), (64, 64, 8)):
            explorer.d.value, explorer.Br.value, explorer.Bc.value = d, Br, Bc
            with pytest.raises(ValueError) as info:
                gpu.check_bwd_launch(Br, Bc, d)
            assert p.problem == str(info.value) and p.problem in p.status.value
            assert p.run_button.disabled and p.run() is None and calls == []
        explorer.d.value, explorer.Br.value, explorer.Bc.value = 64, 64, 64
        assert p.problem is None and not p.run_button.disabled
    finally:
        p.close()


# ---------------------------------------------------------------- CPU: the contract

@pytest.mark.parametrize("kw, exc, names", [
    (dict(N=1000), ValueError, "N"), (dict(N=8192), ValueError, "N"), (dict(N=4096.0), TypeError, "N"),
    (dict(N=True), TypeError, "N"), (dict(Br=8), ValueError, "Br=8"), (dict(Bc=256), ValueError, "Bc=256"),
    (dict(Br="64"), TypeError, "Br"), (dict(d=48), ValueError, "d=48"), (dict(d=8), ValueError, "d=8"),
    (dict(d=None), TypeError, "d"), (dict(causal=1), TypeError, "causal"), (dict(explorer=5), TypeError, "explorer"),
    (dict(explorer="tiles"), TypeError, "explorer"), (dict(key=[1]), TypeError, "key"),
])
def test_bad_arguments_fail_in_one_line(no_gpu, kw, exc, names):
    explorer = kw.pop("explorer", None)
    before = set(registry._live)
    with pytest.raises(exc) as info:
        BackwardGPUPanel(explorer, **kw)
    assert type(info.value) is exc and one_line(info).startswith(names)
    assert set(registry._live) == before                                 # nothing registered, nothing left open


def test_exported_from_the_package():
    assert fv.BackwardGPUPanel is BackwardGPUPanel and "BackwardGPUPanel" in dir(fv)
    assert gpu.benchmark_backward is not None and "benchmark_backward" in gpu.__all__


def test_close_frees_every_comm_and_stops_following(no_gpu, explorer):
    assert_close_frees_every_comm(lambda: BackwardGPUPanel(key="bgp-comms"))
    assert_close_frees_every_comm(lambda: BackwardGPUPanel(explorer, key="bgp-comms-explorer"))
    p = BackwardGPUPanel(explorer, key="bgp-close")
    before = p.model_hbm_bytes
    p.close()
    p.close()                                                            # idempotent
    explorer.Bc.value = 16                                               # no longer followed: nothing refreshes
    assert p.model_hbm_bytes == before and ("BackwardGPUPanel", "bgp-close") not in registry._live


def test_a_panel_made_again_on_the_same_key_replaces_the_old_one(no_gpu):
    a = BackwardGPUPanel(key="bgp-same")
    b = BackwardGPUPanel(key="bgp-same")
    try:
        assert a.widget.comm is None and b.widget.comm is not None
        assert registry._live[("BackwardGPUPanel", "bgp-same")] is b
    finally:
        b.close()


def test_book_mode_shows_texts_and_tables(no_gpu, monkeypatch):
    p = BackwardGPUPanel(key="bgp-book")
    try:
        assert WIDGET_VIEW in p._repr_mimebundle_()
        monkeypatch.setenv(book.BOOK_ENV, "1")
        bundle = p._repr_mimebundle_()
    finally:
        p.close()
    assert WIDGET_VIEW not in bundle and "<table" in bundle["text/html"] and "BackwardGPUPanel" in bundle["text/html"]


# ---------------------------------------------------------------- a pretend GPU

def fake_result(N, d, *, Br, Bc, causal, deterministic):
    """What ``benchmark_backward`` returns, with made-up times (the deterministic run slower)."""
    B, H = shape(N, d)
    call, kern = (3.0, 2.5) if not deterministic else (4.2, 3.0)
    flops = 2.5 * 4 * B * H * N * N * d / (2 if causal else 1)
    m = model(N, d, Br, Bc, causal)
    return {"N": N, "d": d, "B": B, "H": H, "Br": Br, "Bc": Bc, "causal": causal, "deterministic": deterministic,
            "compile_ms": 12.0, "flops": flops, "model_hbm_bytes": m, "call_ms": call, "kernel_ms": kern,
            "host_us": 40.0, "call_tflops": flops / call / 1e9, "kernel_tflops": flops / kern / 1e9,
            "rel_err": 2e-6 if not deterministic else 3e-6, "nan": False}


@pytest.fixture
def pretend_gpu(monkeypatch):
    calls = []

    def fake(N, d, **kw):
        calls.append((N, d, kw))
        return fake_result(N, d, **kw)

    monkeypatch.setattr(gpu, "gpu_status", lambda: (True, "a pretend GPU"))
    monkeypatch.setattr(gpu, "benchmark_backward", fake)
    return calls


def test_a_run_lands_in_the_panel_with_the_explorers_blocks(pretend_gpu, explorer):
    explorer.Br.value, explorer.Bc.value, explorer.causal.value = 32, 128, True
    p = BackwardGPUPanel(explorer, N=1024, key="bgp-run")
    try:
        assert not p.run_button.disabled and p.status.value == "Ready: press <i>Run on GPU</i>."
        res = p.run()
        kw = {"Br": 32, "Bc": 128, "causal": True}
        assert pretend_gpu == [(1024, 64, {**kw, "deterministic": False}), (1024, 64, {**kw, "deterministic": True})]
        atomic, det = (fake_result(1024, 64, **kw, deterministic=x) for x in (False, True))
        assert res == p.last and res["call_ms"] == atomic["call_ms"] and res["det_call_ms"] == det["call_ms"]
        assert res["det_kernel_ms"] == det["kernel_ms"] and res["det_rel_err"] == det["rel_err"]
        assert res["det_over_atomic_call"] == pytest.approx(4.2 / 3.0)
        assert res["det_over_atomic_kernel"] == pytest.approx(3.0 / 2.5)
        m = model(1024, 64, 32, 128, True)
        assert table_rows(p.result_html.value) == [[
            "1024", "64", str(16 * 32), "32×128", "yes", fmt_bytes(m), "3.000", "2.500",
            f"{atomic['flops'] / 3.0 / 1e9:.1f}", f"{m / 2.5 / 1e6:.0f}", "4.200", "3.000", "1.40x", "1.20x",
            "3.0e-06"]]
        assert "a pretend GPU" in p.result_html.value and "#2ca02c" in p.status.value
        assert not p.run_button.disabled and p.stop_button.disabled and p.progress.value == 2
    finally:
        p.close()


@pytest.mark.parametrize("error", [MemoryError("out of memory allocating 17,179,869,184 bytes\nmore detail"),
                                   RuntimeError("nvrtc: error: identifier \"x\" is undefined\nmore detail"),
                                   ValueError("the backward kernel with Br=64 needs 270,848 bytes\nmore detail")])
def test_a_failing_run_is_one_red_line(monkeypatch, error):
    def boom(*a, **k):
        raise error

    monkeypatch.setattr(gpu, "gpu_status", lambda: (True, "a pretend GPU"))
    monkeypatch.setattr(gpu, "benchmark_backward", boom)
    p = BackwardGPUPanel(key="bgp-fail")
    try:
        assert p.run() is None and p.last is None and p.result_html.value == ""
        status = p.status.value
        assert status.count("<span style='color:#d62728'>") == 1 and status.endswith("</span>")
        assert type(error).__name__ in status and "more detail" not in status and "\n" not in status
        assert not p.run_button.disabled and p.stop_button.disabled        # ready for another try
    finally:
        p.close()


def test_stop_after_the_atomic_dq(monkeypatch):
    release, calls = threading.Event(), []

    def slow(N, d, **kw):
        calls.append(kw["deterministic"])
        release.wait(5)
        return fake_result(N, d, **kw)

    monkeypatch.setattr(gpu, "gpu_status", lambda: (True, "a pretend GPU"))
    monkeypatch.setattr(gpu, "benchmark_backward", slow)
    p = BackwardGPUPanel(N=1024, key="bgp-stop")
    try:
        assert p.run(wait=False) is None
        assert p.run_button.disabled and not p.stop_button.disabled and p.progress.layout.visibility == "visible"
        assert p.run() is None                                           # one measurement at a time
        p.stop()
        release.set()
        p._thread.join(5)
        assert calls == [False]                                          # the deterministic dQ never started
        assert p.last["call_ms"] == 3.0 and "det_call_ms" not in p.last
        assert table_rows(p.result_html.value)[0][6:8] == ["3.000", "2.500"]
        assert table_rows(p.result_html.value)[0][10:14] == ["—", "—", "—", "—"]
        assert not p.run_button.disabled and p.stop_button.disabled and p.progress.value == 1
    finally:
        p.close()


def test_no_gpu_refuses_a_run_in_one_line(no_gpu, monkeypatch):
    monkeypatch.setattr(gpu, "benchmark_backward", lambda *a, **k: pytest.fail("ran without a GPU"))
    p = BackwardGPUPanel(key="bgp-no-gpu")
    try:
        assert p.run_button.disabled and p.run() is None
        assert "No GPU here: a test says there is no GPU" in p.status.value
    finally:
        p.close()
