"""TensorCorePanel: the tensor-core kernels' panel, checked against the committed H200 recording.

CPU tests marked ``recorded_data`` read the newest benchmarks/results/mma-*.json directly (not
through flashviz.records.results) and compare what the panel shows with it, recomputing every ratio
and rate from the raw times: they check the display of the committed record, not any speed. A
pretend GPU (monkeypatched gpu_status / device_variant / bench_shape, returning bench_shape's
keys: <impl>_call_ms, <impl>_kernel_ms, <impl>_host_us) drives the run, sweep, progress, Stop
and error paths. Tests marked ``gpu`` time the real kernels and skip cleanly without CuPy, a GPU
or torch.
"""

import json
import re
import sys
import threading
from pathlib import Path

import pytest
from widget_contract import assert_close_frees_every_comm

import flashviz.gpu as gpu
import flashviz.gpu.common as gpu_common
import flashviz.gpu.tensorcore.bench as mma_bench
import flashviz.gpu.tensorcore.kernel as gpu_mma
from flashviz.iomodel import flash_forward_io
from flashviz.mma_limits import DTYPES, MMA_BC, MMA_BR, MMA_D, default_blocks, impl_name, mma_blocks
from flashviz.views.style import fmt_bytes
from flashviz.widgets import mma_panel, registry
from flashviz.widgets.mma_panel import TensorCorePanel

REAL_BENCH_SHAPE = mma_bench.bench_shape
RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
RECORDING = sorted(RESULTS.glob("mma-*.json"))[-1]          # the newest by its dated name


@pytest.fixture(scope="module")
def rec():
    return json.loads(RECORDING.read_text())


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(gpu, "gpu_status", lambda: (False, "a test says there is no GPU"))


@pytest.fixture
def panel(no_gpu):
    p = TensorCorePanel(key="test-mma-panel")
    yield p
    p.close()


def sweep_row(rec, variant, d, causal, Br, Bc):
    (row,) = [r for r in rec["sweep"] if (r["variant"], r["d"], r["causal"], r["Br"], r["Bc"]) ==
              (variant, d, causal, Br, Bc)]
    return row


def bench_row(rec, N, d, causal):
    (row,) = [r for r in rec["bench"] if (r["N"], r["d"], r["causal"]) == (N, d, causal)]
    return row


def cells(tr_html):
    return [re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td[^>]*>(.*?)</td>", tr_html)]


def highlighted(p):
    rows = re.findall(r"<tr[^>]*data-selected='true'[^>]*>(.*?)</tr>", p.recorded_html.value)
    assert len(rows) == 1
    return cells(rows[0])


def bench_part(p):
    return p.recorded_html.value.split("Benchmark at", 1)[1]


def bench_line(part, name):
    """The cells of one implementation's line in a benchmark table."""
    (tr,) = [t for t in re.findall(r"<tr>(.*?)</tr>", part) if t.startswith(f"<td>{name}</td>")]
    return cells(tr)


def x(num, den):
    return f"{num / den:.2f}×"


# ---------------------------------------------------------------- CPU: construction and layout

def test_defaults_controls_and_layout(panel):
    assert (panel.N.value, panel.d.value, panel.causal.value, panel.dtype.value) == (4096, 64, False, "float16")
    assert (panel.Br.value, panel.Bc.value) == default_blocks(64, False, "wgmma") == (128, 64)
    assert panel.Br.options == MMA_BR and panel.Bc.options == MMA_BC and panel.d.options == MMA_D
    assert panel.dtype.options == DTYPES and panel.N.options == (512, 1024, 2048, 4096, 8192, 16384)
    title = panel.widget.children[0].value
    assert "Tensor cores: kernels/flash_fwd_mma.cu (fp16 / bf16)" in title
    assert panel.status in panel.widget.children and panel.recorded_html in panel.widget.children
    assert panel.last is None and panel.result_html.value == ""
    bundle = panel._repr_mimebundle_()
    assert bundle["application/vnd.jupyter.widget-view+json"]["model_id"] == panel.widget.model_id


def test_default_blocks_follow_d_and_causal(no_gpu):
    p = TensorCorePanel(d=64, causal=True, key="defaults")
    try:
        assert (p.Br.value, p.Bc.value) == (64, 128)
    finally:
        p.close()


def test_no_gpu_disables_buttons_and_says_why(panel):
    assert panel.run_button.disabled and panel.sweep_button.disabled and panel.stop_button.disabled
    assert ("No GPU here: a test says there is no GPU. Showing the recorded H200 measurements."
            in panel.status.value)


@pytest.mark.recorded_data
def test_recorded_data_config_line(panel, rec):
    text = panel.config.value
    assert "B = 4, H = 32" in text
    assert f"{1024 + 2 * (128 * 64 + 4 * 64 * 64):,} B (wgmma)" in text          # 50,176
    assert f"{2 * (128 * 64 + 4 * 64 * 64):,} B (mma.sync)" in text             # 49,152
    assert fmt_bytes(sweep_row(rec, "wgmma", 64, False, 128, 64)["model_hbm_bytes"]) in text
    panel.N.value, panel.d.value, panel.Br.value, panel.Bc.value = 1024, 128, 64, 32
    text = panel.config.value
    assert "B = 16, H = 16" in text and f"{1024 + 2 * (64 * 128 + 4 * 32 * 128):,} B (wgmma)" in text
    B, H = 16, 16
    io = flash_forward_io(1024, 1024, 128, Br=64, Bc=32, itemsize=2).hbm_bytes * B * H
    assert fmt_bytes(io) in text


@pytest.mark.recorded_data
def test_recorded_data_label(panel, rec):
    v = panel.recorded_html.value
    assert f"Recorded on <b>{rec['env']['device']}, {rec['env']['date']}" in v and "H200" in v
    assert RECORDING.name in v


# ---------------------------------------------------------------- CPU: values against the recording

@pytest.mark.recorded_data
@pytest.mark.parametrize("d, causal, Br, Bc", [(64, False, 128, 64), (64, True, 64, 32), (128, False, 128, 128),
                                                (128, True, 64, 128), (128, True, 128, 32)])
def test_recorded_data_highlighted_row_equals_the_sweep(no_gpu, rec, d, causal, Br, Bc):
    p = TensorCorePanel(d=d, causal=causal, Br=Br, Bc=Bc, key="highlight")
    try:
        row = highlighted(p)
        w, m = sweep_row(rec, "wgmma", d, causal, Br, Bc), sweep_row(rec, "mma.sync", d, causal, Br, Bc)
        flops = 4 * w["B"] * w["H"] * w["N"] ** 2 * d / (2 if causal else 1)
        assert row[0] == f"{Br}×{Bc}"
        assert row[1] == fmt_bytes(w["model_hbm_bytes"])
        assert row[2].rstrip(" ★") == f"{w['kernel_ms']:.3f}" and row[3] == f"{flops / w['kernel_ms'] / 1e9:.1f}"
        assert row[4].rstrip(" ★") == f"{m['kernel_ms']:.3f}" and row[5] == f"{flops / m['kernel_ms'] / 1e9:.1f}"
        assert row[2].endswith("★") == (default_blocks(d, causal, "wgmma") == (Br, Bc))
        table = p.recorded_html.value.split("Benchmark at")[0]
        assert table.count("<tr") == 1 + len(mma_blocks(d, "wgmma"))           # header + one row per block
        assert "wgmma ms<br>(kernel-only)" in table and "kernel-only times" in table   # the sweep names its method
    finally:
        p.close()


@pytest.mark.recorded_data
def test_recorded_data_rows_are_the_json_sweep(panel, rec):
    for d, causal in ((64, False), (128, True)):
        panel.d.value, panel.causal.value = d, causal
        want = [{**r, "ms": r["kernel_ms"], "tflops": r["kernel_tflops"]} for v in ("wgmma", "mma.sync")
                for r in sorted((r for r in rec["sweep"] if (r["variant"], r["d"], r["causal"]) == (v, d, causal)),
                                key=lambda r: (r["Br"], r["Bc"]))]
        assert panel.recorded_rows == want and len(want) == 12
    panel.recorded_rows[0]["ms"] = -1.0                                        # a copy: the panel is unchanged
    assert panel.recorded_rows[0]["ms"] > 0


@pytest.mark.recorded_data
def test_recorded_data_benchmark_table_by_both_methods(panel, rec):
    names = {"wgmma": "flashviz wgmma (tensor cores, sm_90a)", "mmasync": "flashviz mma.sync (sm_80+)",
             "sdpa_flash": "SDPA flash (FlashAttention-2)", "sdpa_cudnn": "SDPA cuDNN"}
    for N, d, causal in ((4096, 64, False), (512, 128, True), (16384, 64, True)):
        panel.N.value, panel.d.value, panel.causal.value = N, d, causal
        r, part = bench_row(rec, N, d, causal), bench_part(panel)
        assert f"N = {N}, d = {d}" in part and "headline: public call" in part
        assert "ms<br>(call)" in part and "ms<br>(kernel-only)" in part and "TFLOP/s<br>(call)" in part
        assert "× SDPA flash<br>(call)" in part and "× SDPA flash<br>(kernel-only)" in part
        flops = 4 * r["B"] * r["H"] * N ** 2 * d / (2 if causal else 1)
        for key, name in names.items():
            c = bench_line(part, name)
            assert c[2:6] == [f"{r[key + '_call_ms']:.3f}", f"{r[key + '_kernel_ms']:.3f}", f"{r[key + '_host_us']:.0f}",
                              f"{flops / r[key + '_call_ms'] / 1e9:.1f}"]
            assert c[6:] == [x(r["sdpa_flash_call_ms"], r[key + "_call_ms"]),
                             x(r["sdpa_flash_kernel_ms"], r[key + "_kernel_ms"])]
        for key in ("wgmma", "mmasync"):
            assert bench_line(part, names[key])[1] == f"{r[key + '_Br']}×{r[key + '_Bc']}"


@pytest.mark.recorded_data
def test_recorded_data_follows_the_controls(panel, rec):
    before = panel.recorded_html.value
    panel.Br.value, panel.Bc.value = 64, 32
    assert highlighted(panel)[0] == "64×32" and panel.recorded_html.value != before
    assert highlighted(panel)[2].rstrip(" ★") == f"{sweep_row(rec, 'wgmma', 64, False, 64, 32)['kernel_ms']:.3f}"

    before = panel.recorded_html.value
    panel.d.value = 128                                                       # new sweep and benchmark
    w = sweep_row(rec, "wgmma", 128, False, 64, 32)
    assert panel.recorded_html.value != before and highlighted(panel)[2].rstrip(" ★") == f"{w['kernel_ms']:.3f}"
    r = bench_row(rec, 4096, 128, False)
    assert f"<td>{r['flops'] / r['wgmma_call_ms'] / 1e9:.1f}</td>" in bench_part(panel)

    before, config = panel.recorded_html.value, panel.config.value
    panel.causal.value = True
    w = sweep_row(rec, "wgmma", 128, True, 64, 32)
    assert highlighted(panel)[2].rstrip(" ★") == f"{w['kernel_ms']:.3f}" and panel.recorded_html.value != before
    assert panel.config.value != config                                       # causal halves the model's bytes

    before = bench_part(panel)
    panel.N.value = 8192
    assert bench_part(panel) != before and "B = 2, H = 16" in panel.config.value
    assert f"<td>{bench_row(rec, 8192, 128, True)['wgmma_call_ms']:.3f}</td>" in bench_part(panel)
    assert highlighted(panel)[2].rstrip(" ★") == f"{w['kernel_ms']:.3f}"      # the sweep is recorded at N = 4096

    panel.dtype.value = "bfloat16"
    assert "recorded in float16 only" in panel.recorded_html.value


def test_without_a_recording(no_gpu, monkeypatch):
    monkeypatch.setattr(mma_panel, "latest_results", lambda kind: None)
    p = TensorCorePanel(key="no-recording")
    try:
        assert "No recorded tensor-core measurements" in p.recorded_html.value and p.recorded_rows == []
    finally:
        p.close()


@pytest.mark.parametrize("kw, exc, text", [
    (dict(N=1000), ValueError, "N must be one of 512, 1024, 2048, 4096, 8192, 16384; got 1000"),
    (dict(N=4096.0), TypeError, "N must be one of"),
    (dict(d=32), ValueError, "d must be one of 64, 128; got 32"),
    (dict(d=True), TypeError, "d must be one of"),
    (dict(Br=32), ValueError, "Br must be one of 64, 128; got 32"),
    (dict(Bc=16), ValueError, "Bc must be one of 32, 64, 128; got 16"),
    (dict(Bc="64"), TypeError, "Bc must be one of"),
    (dict(dtype="float32"), ValueError, "dtype must be one of float16, bfloat16"),
    (dict(dtype=None), TypeError, "dtype must be one of"),
    (dict(causal="yes"), TypeError, "causal must be True or False"),
])
def test_bad_arguments_one_line_errors(no_gpu, kw, exc, text):
    with pytest.raises(exc, match=re.escape(text)) as info:
        TensorCorePanel(key="bad", **kw)
    assert "\n" not in str(info.value)


def test_run_and_sweep_without_gpu_return_none(panel):
    assert panel.run() is None and "No GPU here: a test says there is no GPU" in panel.status.value
    assert panel.sweep() is None and "No GPU here" in panel.status.value
    assert panel.last is None and panel.result_html.value == ""


def test_close_frees_every_comm(no_gpu):
    assert_close_frees_every_comm(lambda: TensorCorePanel(key="comms"), at_least=20)


def test_recreating_with_the_same_key_replaces_the_old_panel(no_gpu):
    from ipywidgets.widgets.widget import _instances

    first = TensorCorePanel(key="same")
    second = TensorCorePanel(key="same")
    try:
        assert first.widget.comm is None and first.Br.comm is None            # closed
        assert second.widget.comm is not None and registry._live[("TensorCorePanel", "same")] is second
        counts = []
        for _ in range(6):
            p = TensorCorePanel()                                             # one line: each replaces the last
            counts.append(len(_instances))
        assert len(set(counts)) == 1                                          # no widget leaks
        p.close()
        other = TensorCorePanel(key="other")                                  # another key is independent
        assert second.widget.comm is not None
        other.close()
    finally:
        second.close()
        first.close()                                                         # idempotent


# ---------------------------------------------------------------- CPU: a pretend GPU

def fake_result(N, d, causal, *, dtype, variants, sdpa, blocks, **kw):
    """bench_shape's keys (mma_bench.bench_shape): <key>_call_ms, <key>_kernel_ms, <key>_host_us; no rates."""
    (v,) = variants
    key = impl_name(v)
    Br, Bc = blocks[v]
    B, H = 16384 // N, 2048 // d
    res = {"N": N, "d": d, "B": B, "H": H, "causal": causal, "dtype": dtype,
           "flops": 4.0 * B * H * N * N * d / (2 if causal else 1),
           f"{key}_call_ms": Br / 100 + Bc / 1000, f"{key}_kernel_ms": Br / 100 + Bc / 1000 - 0.018,
           f"{key}_host_us": 21.0, f"{key}_Br": Br, f"{key}_Bc": Bc}
    if sdpa:
        res.update(sdpa_flash_call_ms=2.5, sdpa_flash_kernel_ms=2.25, sdpa_flash_host_us=15.0,
                   sdpa_cudnn_call_ms=2.0, sdpa_cudnn_kernel_ms=1.5, sdpa_cudnn_host_us=27.0)
    return res


@pytest.fixture
def fake_gpu(monkeypatch):
    monkeypatch.setattr(gpu, "gpu_status", lambda: (True, "a pretend GPU"))
    monkeypatch.setattr(gpu_mma, "device_variant", lambda: "wgmma")
    monkeypatch.setattr(gpu_common, "device_smem_optin", lambda: 232_448)
    monkeypatch.setattr(mma_bench, "bench_shape", fake_result)
    return monkeypatch


def test_fake_gpu_run_shows_the_result(fake_gpu):
    p = TensorCorePanel(N=2048, d=64, Br=64, Bc=128, key="fake-run")
    try:
        assert not p.run_button.disabled and not p.sweep_button.disabled and "Ready on a pretend GPU" in p.status.value
        res = p.run()
        assert res is p.last and res["wgmma_call_ms"] == pytest.approx(0.768) and (res["Br"], res["Bc"]) == (64, 128)
        flops = 4.0 * 8 * 32 * 2048 ** 2 * 64
        assert res["wgmma_call_tflops"] == pytest.approx(flops / 0.768 / 1e9)           # derived by mma_table
        assert res["wgmma_call_vs_sdpa_flash"] == pytest.approx(2.5 / 0.768)
        assert res["wgmma_kernel_vs_sdpa_flash"] == pytest.approx(2.25 / 0.75)
        assert "Measured now" in p.status.value
        html = p.result_html.value
        tflops = f"{flops / 0.768 / 1e9:.1f}"
        assert (f"<td>64×128</td><td>0.768</td><td>0.750</td><td>21</td><td>{tflops}</td>"
                f"<td>3.26×</td><td>3.00×</td>") in html          # 2.5 / 0.768 by call, 2.25 / 0.75 kernel-only
        assert "<td>SDPA flash (FlashAttention-2)</td><td>—</td><td>2.500</td><td>2.250</td><td>15</td>" in html
        assert "SDPA cuDNN" in html and "N = 2048, d = 64" in html
        assert "public call" in html and "kernel-only" in html
        assert not p.run_button.disabled and p.stop_button.disabled and p.progress.layout.visibility == "hidden"
    finally:
        p.close()


def test_fake_gpu_sweep_times_every_block(fake_gpu):
    p = TensorCorePanel(N=1024, d=128, causal=True, Br=128, Bc=32, key="fake-sweep")
    try:
        rows = p.sweep()
        assert [(r["Br"], r["Bc"]) for r in rows] == mma_blocks(128, "wgmma")
        for r in rows:
            io = flash_forward_io(1024, 1024, 128, Br=r["Br"], Bc=r["Bc"], itemsize=2, causal=True)
            assert r["model_hbm_bytes"] == io.hbm_bytes * 16 * 16 and r["variant"] == "wgmma"
            assert r["call_ms"] == pytest.approx(r["Br"] / 100 + r["Bc"] / 1000)
            assert r["ms"] == r["kernel_ms"] == pytest.approx(r["call_ms"] - 0.018)      # the sweep is kernel-only
            assert r["tflops"] == r["kernel_tflops"] == pytest.approx(
                4.0 * 16 * 16 * 1024 ** 2 * 128 / 2 / r["kernel_ms"] / 1e9)
        assert p.progress.value == p.progress.max == len(rows)
        sel = re.findall(r"<tr[^>]*data-selected='true'[^>]*>(.*?)</tr>", p.result_html.value)
        assert cells(sel[0])[:3] == ["128×32", fmt_bytes(rows[3]["model_hbm_bytes"]), "1.294"]   # 1.312 - 0.018
        assert "wgmma ms<br>(kernel-only)" in p.result_html.value
        assert f"Timed {len(rows)} block sizes" in p.status.value
    finally:
        p.close()


def test_fake_gpu_sweep_stop(fake_gpu):
    release, started = threading.Event(), threading.Event()

    def slow(*a, **kw):
        started.set()
        release.wait(5)
        return fake_result(*a, **kw)

    fake_gpu.setattr(mma_bench, "bench_shape", slow)
    p = TensorCorePanel(key="fake-stop")
    try:
        assert p.sweep(wait=False) is None
        assert started.wait(5)
        assert p.run_button.disabled and p.sweep_button.disabled and not p.stop_button.disabled
        assert p.progress.layout.visibility == "visible"
        assert p.run() is None and "already going" in p.status.value
        p.stop_button.click()
        release.set()
        p._thread.join(5)
        assert len(p.last) == 1 and "Stopped after 1 of 6 block sizes" in p.status.value
        assert not p.run_button.disabled and p.stop_button.disabled
    finally:
        p.close()


def test_fake_gpu_sweep_shows_a_failed_block_in_its_row(fake_gpu):
    def some_fail(*a, blocks, variants, **kw):
        if blocks[variants[0]] == (128, 128):
            return {f"{variants[0]}_error": "ValueError: 128×128 does not fit"}
        return fake_result(*a, blocks=blocks, variants=variants, **kw)

    fake_gpu.setattr(mma_bench, "bench_shape", some_fail)
    p = TensorCorePanel(key="fake-partial")
    try:
        rows = p.sweep()
        assert len(rows) == 6 and rows[-1]["error"] == "ValueError: 128×128 does not fit"
        assert not {"ms", "call_ms", "kernel_ms"} & set(rows[-1])
        assert "1 failed (see the table)" in p.status.value
        last = re.findall(r"<tr[^>]*>(.*?)</tr>", p.result_html.value)[-1]
        assert cells(last)[0] == "128×128" and "does not fit" in last and "color:#d62728" in last
    finally:
        p.close()


@pytest.mark.parametrize("how", ["raise", "recorded"])
def test_fake_gpu_failures_are_one_red_line(fake_gpu, how):
    def broken(*a, variants, **kw):
        if how == "raise":
            raise MemoryError("out of memory allocating 201,326,592 bytes\nmore detail")
        return {"N": a[0], f"{variants[0]}_error": "RuntimeError: nvrtc: error: bad thing\nmore detail"}

    fake_gpu.setattr(mma_bench, "bench_shape", broken)
    p = TensorCorePanel(key="fake-fail")
    try:
        for method, word in ((p.run, "run"), (p.sweep, "sweep")):
            assert method() is None
            msg = p.status.value
            assert f"GPU {word} failed:" in msg and "color:#d62728" in msg and "more detail" not in msg
            assert ("MemoryError: out of memory" if how == "raise" else "RuntimeError: nvrtc: error: bad thing") in msg
            assert not p.run_button.disabled and not p.sweep_button.disabled
        assert p.last is None
    finally:
        p.close()


def test_fake_gpu_without_torch_says_so(fake_gpu):
    fake_gpu.setitem(sys.modules, "torch", None)            # import torch -> ImportError
    fake_gpu.setattr(mma_bench, "bench_shape", REAL_BENCH_SHAPE)   # which imports torch first
    fake_gpu.setattr(gpu_mma, "device_variant", lambda: "mma.sync")
    p = TensorCorePanel(key="fake-torch")
    try:
        assert p.run() is None
        assert "GPU run failed: ModuleNotFoundError" in p.status.value and "needs PyTorch" in p.status.value
        assert p.sweep() is None and "GPU sweep failed" in p.status.value
    finally:
        p.close()


def test_fake_small_gpu_refuses_blocks_that_do_not_fit(fake_gpu):
    fake_gpu.setattr(gpu_mma, "device_variant", lambda: "mma.sync")
    fake_gpu.setattr(gpu_common, "device_smem_optin", lambda: 101_376)          # an sm_86 GPU
    p = TensorCorePanel(d=128, Br=128, Bc=128, key="fake-small")
    try:
        assert p.run_button.disabled and "cannot run on this GPU" in p.status.value
        assert "163,840 bytes of shared memory" in p.status.value
        assert p.run() is None
        rows = p.sweep()
        assert [(r["Br"], r["Bc"]) for r in rows] == mma_blocks(128, "mma.sync", 101_376)
        assert len(rows) < 6 and p.run_button.disabled                        # still the same blocks
        p.Bc.value = 32
        assert not p.run_button.disabled and "Ready" in p.status.value
    finally:
        p.close()


# ---------------------------------------------------------------- GPU

@pytest.fixture
def real_gpu():
    pytest.importorskip("cupy")
    pytest.importorskip("torch")
    ok, reason = gpu.gpu_status()
    if not ok:
        pytest.skip(reason)


@pytest.mark.gpu
def test_gpu_run_times_the_chosen_blocks(real_gpu):
    p = TensorCorePanel(N=2048, d=64, Br=64, Bc=64, key="gpu-run")
    try:
        res = p.run()
        assert res is not None, p.status.value
        key = "wgmma" if p.variant == "wgmma" else "mmasync"
        assert res[key + "_call_ms"] > 0 and res[key + "_kernel_ms"] > 0 and res[key + "_host_us"] > 0
        assert res[key + "_call_tflops"] > 0 and res[key + "_kernel_tflops"] > 0
        assert (res[key + "_Br"], res[key + "_Bc"]) == (64, 64)
        assert res[key + "_call_vs_sdpa_flash"] == pytest.approx(res["sdpa_flash_call_ms"] / res[key + "_call_ms"])
        assert "Measured now" in p.status.value and f"<td>{res[key + '_call_ms']:.3f}</td>" in p.result_html.value
        assert f"<td>{res[key + '_kernel_ms']:.3f}</td>" in p.result_html.value
    finally:
        p.close()


@pytest.mark.gpu
def test_gpu_sweep_one_row_per_supported_block(real_gpu):
    p = TensorCorePanel(N=1024, d=64, causal=True, key="gpu-sweep")
    try:
        rows = p.sweep()
        assert rows is not None, p.status.value
        assert [(r["Br"], r["Bc"]) for r in rows] == mma_blocks(64, p.variant, gpu_common.device_smem_optin())
        assert all(r.get("kernel_ms", 0) > 0 and r.get("call_ms", 0) > 0 for r in rows), [r.get("error") for r in rows]
        assert all(r["ms"] == r["kernel_ms"] and r["tflops"] == r["kernel_tflops"] for r in rows)
    finally:
        p.close()


@pytest.mark.parametrize("after", [False, True])
def test_bench_table_says_when_host_times_follow_a_profiler_session(after):
    from flashviz.widgets.mma_panel import bench_table_html
    row = fake_result(2048, 64, False, dtype="float16", variants=("wgmma",), sdpa=True, blocks={"wgmma": (64, 128)})
    if after:
        row["host_after_profiler"] = True
    html = bench_table_html(row)
    assert "<td>21</td>" in html and "<td>15</td>" in html                       # the host figures are shown
    assert ("after an earlier profiler session" in html) is after
