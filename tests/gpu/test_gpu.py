"""The GPU runner: CPU-side arithmetic and errors everywhere; the kernel itself where a GPU is.

Tests marked ``gpu`` need CuPy and a CUDA device and skip cleanly without them (conftest.py
and the ``cp`` fixture). Run them with  PYTHONPATH=. python3 -m pytest tests/gpu/test_gpu.py -m gpu
"""

import json
import re
import subprocess
import sys

import numpy as np
import pytest

import flashviz as fv
from flashviz import gpu
from flashviz.gpu import common as gpu_common
from flashviz.records import results as recorded

# ---------------------------------------------------------------- CPU: no CuPy needed

def test_import_does_not_import_cupy():
    code = "import sys, flashviz.gpu; print('cupy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("Br, Bc, d, expected", [
    (64, 64, 64, 69_632), (128, 128, 128, 270_336), (16, 16, 32, (16 * 36 * 2 + 32 * 20 + 16 * 20) * 4),
    (128, 64, 128, (128 * 132 + 64 * 132 + 128 * 68 + 128 * 68) * 4)])
def test_smem_bytes(Br, Bc, d, expected):
    assert gpu.smem_bytes(Br, Bc, d) == expected


def test_check_launch_too_much_shared_memory():
    with pytest.raises(ValueError) as exc:
        gpu.check_launch(128, 128, 128, 232_448)
    msg = str(exc.value)
    assert "Br=128, Bc=128, d=128 needs 270,336 bytes of shared memory" in msg
    assert "232,448 per block (opt-in)" in msg
    assert gpu.check_launch(64, 64, 64, 232_448) == 69_632


@pytest.mark.parametrize("args, err, text", [
    ((48, 64, 64), ValueError, "supported: 16, 32, 64, 128"),
    ((64, 8, 64), ValueError, "Bc=8"),
    ((64, 64, 80), ValueError, "supported: 32, 64, 128"),
    ((64.0, 64, 64), TypeError, "Br must be an integer"),
    ((True, 64, 64), TypeError, "Br must be an integer"),
])
def test_check_launch_bad_values(args, err, text):
    with pytest.raises(err, match=text):
        gpu.check_launch(*args)
    with pytest.raises(err):
        gpu.smem_bytes(*args)


def test_supported_blocks():
    blocks = gpu.supported_blocks(128)
    assert (64, 64) in blocks and (128, 128) not in blocks
    assert all(gpu.smem_bytes(Br, Bc, 128) <= 232_448 for Br, Bc in blocks)
    assert len(gpu.supported_blocks(64)) == 16
    with pytest.raises(ValueError, match="d=96"):
        gpu.supported_blocks(96)


def test_gpu_status_never_raises_and_says_why(monkeypatch):
    ok, reason = gpu.gpu_status()
    assert isinstance(ok, bool) and isinstance(reason, str) and reason and "\n" not in reason
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy -> ImportError
    ok, reason = gpu.gpu_status()
    assert ok is False and "CuPy" in reason


def test_kernel_source_found():
    src = gpu.kernel_source("flash_fwd.cu")
    assert "template <int Br, int Bc, int D>" in src
    # no system headers (NVRTC from the pip wheels has none); only kernels/ headers, pasted in by source()
    assert not re.search(r"#\s*include\s*<", src)
    assert not re.search(r"^\s*#\s*include", gpu_common.source("flash_fwd.cu"), re.M)
    with pytest.raises(FileNotFoundError):
        gpu.kernel_source("no_such_kernel.cu")


def test_latest_results_picks_newest(tmp_path, monkeypatch):
    monkeypatch.setattr(recorded, "package_dir", lambda pkg: tmp_path)
    assert gpu.latest_results() is None
    (tmp_path / "gpu-h200-2026-01-02.json").write_text(json.dumps({"env": {"date": "2026-01-02"}}))
    (tmp_path / "gpu-h200-2026-03-01.json").write_text(json.dumps({"env": {"date": "2026-03-01"}}))
    (tmp_path / "notes.txt").write_text("not json")
    r = gpu.latest_results()
    assert r["env"]["date"] == "2026-03-01" and r["source_file"] == "gpu-h200-2026-03-01.json"


def test_latest_results_real_folder():
    r = gpu.latest_results()
    assert r is None or ("env" in r and "source_file" in r)


def _recorded_teaching():
    """The newest committed gpu-*.json, read directly (by its dated name, not through latest_results)."""
    from flashviz.records.files import package_dir
    files = sorted(f for f in package_dir("flashviz.results").iterdir()
                   if f.name.startswith("gpu-") and f.name.endswith(".json"))
    return json.loads(files[-1].read_text()), files[-1].name


def _html_cells(tr):
    import re
    return [re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td[^>]*>(.*?)</td>", tr)]


@pytest.mark.recorded_data
def test_recorded_data_teaching_rows_are_consistent():
    """The record's derived figures agree with its raw times: TFLOP/s = flops / ms by each method,
    and naive / kernel compares the same method on both sides."""
    raw, _ = _recorded_teaching()
    assert raw["timing"] and {"call_ms", "kernel_ms", "host_us"} <= set(raw["methods"])
    for r in raw["timing"]:
        flops = 4 * r["B"] * r["H"] * r["N"] ** 2 * r["d"] / (2 if r["causal"] else 1)
        assert r["call_tflops"] == pytest.approx(flops / r["call_ms"] / 1e9)
        assert r["kernel_tflops"] == r["tflops"] == pytest.approx(flops / r["kernel_ms"] / 1e9)
        if "naive_call_ms" in r:
            assert r["ratio_naive_over_call"] == pytest.approx(r["naive_call_ms"] / r["call_ms"])
            assert r["ratio_naive_over_kernel"] == pytest.approx(r["naive_kernel_ms"] / r["kernel_ms"])


@pytest.mark.recorded_data
def test_recorded_data_summary_by_both_methods():
    raw, name = _recorded_teaching()
    text = recorded.recorded_summary(gpu.latest_results(), Br=64, Bc=64)
    assert text.startswith(f"Recorded on {raw['env']['device']}, {raw['env']['date']}") and name in text
    assert "public call (CUDA events, median), the headline" in text and "kernel-only (profiler" in text
    lines = text.splitlines()
    want = [r for r in raw["timing"] if (r["Br"], r["Bc"]) == (64, 64)]
    body = [line for line in lines if line.split() and line.split()[0].isdigit()]
    assert len(body) == len(want) >= 10
    for line, r in zip(body, want):
        flops = 4 * r["B"] * r["H"] * r["N"] ** 2 * r["d"] / (2 if r["causal"] else 1)
        w = line.replace("│", " ").split()
        assert [int(w[0]), int(w[1])] == [r["N"], r["d"]] and w[3] == "64×64"
        assert w[5:8] == [f"{r['call_ms']:.3f}", f"{r['kernel_ms']:.3f}", f"{flops / r['call_ms'] / 1e9:.1f}"]
        assert w[8:12] == [f"{r['naive_call_ms']:.2f}", f"{r['naive_kernel_ms']:.2f}",
                           f"{r['naive_call_ms'] / r['call_ms']:.2f}x", f"{r['naive_kernel_ms'] / r['kernel_ms']:.2f}x"]


@pytest.mark.recorded_data
def test_recorded_data_gpu_panel_table_by_both_methods(monkeypatch):
    import re

    import matplotlib
    matplotlib.use("Agg")
    monkeypatch.setattr(gpu, "gpu_status", lambda: (False, "a test says there is no GPU"))
    raw, name = _recorded_teaching()
    panel = fv.GPUPanel(Br=128, Bc=64, d=128, key="recorded-gpu-panel")
    try:
        v = panel.recorded_html.value
        assert f"Recorded on <b>{raw['env']['device']}, {raw['env']['date']}" in v and name in v
        for head in ("kernel ms<br>(call)", "kernel ms<br>(kernel-only)", "TFLOP/s<br>(call)",
                     "naive / kernel<br>(call)", "naive / kernel<br>(kernel-only)"):
            assert head in v
        assert "public call" in v and "kernel-only</b> = " in v                   # the note under the table
        want = [r for r in raw["timing"] + raw["sweep"] if (r["Br"], r["Bc"], r["d"]) == (128, 64, 128)]
        rows = [_html_cells(tr) for tr in re.findall(r"<tr>(<td.*?)</tr>", v)]
        assert len(rows) == len(want) >= 5
        for c, r in zip(rows, want):
            flops = 4 * r["B"] * r["H"] * r["N"] ** 2 * r["d"] / (2 if r["causal"] else 1)
            assert c[:5] == [str(r["N"]), "128", str(r["B"] * r["H"]), "128×64", "no"]
            assert c[5:9] == [f"{r['call_ms']:.3f}", f"{r['kernel_ms']:.3f}", f"{flops / r['call_ms'] / 1e9:.1f}",
                              f"{r['model_hbm_bytes'] / r['kernel_ms'] / 1e6:.0f}"]
            assert c[9:13] == [f"{r['naive_call_ms']:.2f}", f"{r['naive_kernel_ms']:.2f}",
                               f"{r['naive_call_ms'] / r['call_ms']:.2f}x", f"{r['naive_kernel_ms'] / r['kernel_ms']:.2f}x"]
        note = panel._boxes[0].value                                           # the tensor-core note: public call
        mma = json.loads(recorded.package_dir("flashviz.results").joinpath(
            recorded.latest_results("mma")["source_file"]).read_text())
        (b,) = [r for r in mma["bench"] if (r["N"], r["d"], r["causal"]) == (4096, 64, False)]
        assert (f"{b['flops'] / b['wgmma_call_ms'] / 1e9:.0f} TFLOP/s against this kernel's "
                f"{b['flops'] / b['teaching_call_ms'] / 1e9:.0f}") in note and "public call" in note
    finally:
        panel.close()


def test_runner_without_cupy_raises_runtime_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)
    with pytest.raises(RuntimeError, match="CuPy"):
        gpu.flash_forward_gpu(np.zeros((4, 32)), np.zeros((4, 32)), np.zeros((4, 32)))


# ---------------------------------------------------------------- GPU

@pytest.fixture
def cp():
    cupy = pytest.importorskip("cupy")
    ok, reason = gpu.gpu_status()
    if not ok:
        pytest.skip(reason)
    return cupy


def _qkv(rng, lead, Nq, Nk, d):
    return (rng.standard_normal((*lead, Nq, d)).astype(np.float32),
            rng.standard_normal((*lead, Nk, d)).astype(np.float32),
            rng.standard_normal((*lead, Nk, d)).astype(np.float32))


@pytest.mark.gpu
@pytest.mark.parametrize("lead, Nq, Nk, d, Br, Bc, causal", [
    ((2, 3), 200, 200, 64, 64, 64, False),
    ((2, 3), 200, 200, 64, 64, 64, True),
    ((1, 2), 77, 333, 32, 32, 64, True),       # Nq < Nk, partial tiles
    ((1, 2), 333, 77, 128, 64, 32, True),      # Nq > Nk: the first 256 rows see no key
    ((), 5, 9, 64, 128, 64, False),            # N < Br, one head as (N, d)
    ((3,), 1, 1, 128, 16, 16, True),
    ((1, 1), 1000, 1000, 64, 128, 128, True),
])
def test_kernel_matches_float64_reference(cp, rng, lead, Nq, Nk, d, Br, Bc, causal):
    Q, K, V = _qkv(rng, lead, Nq, Nk, d)
    O, lse = gpu.flash_forward_gpu(Q, K, V, Br=Br, Bc=Bc, causal=causal)
    assert isinstance(O, cp.ndarray) and O.dtype == cp.float32 and O.shape == (*lead, Nq, d)
    assert lse.shape == (*lead, Nq)
    O, lse = O.get(), lse.get()
    ref_O, ref_lse = fv.attention(Q, K, V, causal=causal, return_lse=True)
    assert not np.isnan(O).any() and not np.isnan(lse).any()
    assert np.linalg.norm(O - ref_O) / np.linalg.norm(ref_O) <= 1e-5
    fin = np.isfinite(ref_lse)
    np.testing.assert_array_equal(np.isneginf(lse), ~fin)
    np.testing.assert_allclose(lse[fin], ref_lse[fin], rtol=1e-5, atol=1e-5)
    assert np.all(O[~fin] == 0)


@pytest.mark.gpu
def test_kernel_cupy_inputs_scale_and_naive(cp, rng):
    Q, K, V = (cp.asarray(x) for x in _qkv(rng, (2, 2), 300, 300, 64))
    O, _ = gpu.flash_forward_gpu(Q, K, V, causal=True, scale=0.3)
    ref = fv.attention(Q.get(), K.get(), V.get(), causal=True, scale=0.3)
    assert np.linalg.norm(O.get() - ref) / np.linalg.norm(ref) <= 1e-5
    O_naive = gpu.naive_attention_gpu(Q, K, V, causal=True, scale=0.3)
    assert np.linalg.norm(O_naive.get() - ref) / np.linalg.norm(ref) <= 1e-5


@pytest.mark.gpu
def test_naive_rows_without_keys_are_zero(cp, rng):
    Q, K, V = _qkv(rng, (1,), 40, 10, 32)
    O = gpu.naive_attention_gpu(Q, K, V, causal=True).get()
    assert not np.isnan(O).any() and np.all(O[0, :30] == 0)


@pytest.mark.gpu
def test_kernel_shared_memory_error(cp, rng):
    Q, K, V = _qkv(rng, (1,), 8, 8, 128)
    limit = gpu.device_smem_optin()
    with pytest.raises(ValueError, match=rf"needs 270,336 bytes of shared memory; the device limit is {limit:,}"):
        gpu.flash_forward_gpu(Q, K, V, Br=128, Bc=128)


@pytest.mark.gpu
def test_kernel_bad_inputs(cp, rng):
    Q, K, V = _qkv(rng, (1,), 8, 8, 64)
    with pytest.raises(ValueError, match="supported: 32, 64, 128"):
        gpu.flash_forward_gpu(Q[..., :48], K[..., :48], V[..., :48])
    with pytest.raises(ValueError, match="Br=48"):
        gpu.flash_forward_gpu(Q, K, V, Br=48)
    with pytest.raises(TypeError, match="float dtype"):
        gpu.flash_forward_gpu(Q.astype(np.int32), K, V)
    with pytest.raises(ValueError, match="head dimension"):
        gpu.flash_forward_gpu(Q, K[..., :32], V)
    with pytest.raises(ValueError, match="same number of keys"):
        gpu.flash_forward_gpu(Q, K, V[:, :4])
    with pytest.raises(ValueError, match="leading"):
        gpu.flash_forward_gpu(Q, K[None], V[None])
    with pytest.raises(ValueError, match="ndim >= 2"):
        gpu.flash_forward_gpu(Q[0, 0], K, V)
    with pytest.raises(TypeError, match="causal"):
        gpu.flash_forward_gpu(Q, K, V, causal="yes")
    with pytest.raises(ValueError, match="scale"):
        gpu.flash_forward_gpu(Q, K, V, scale=float("nan"))


@pytest.mark.gpu
def test_compile_cached_and_timed(cp):
    a = gpu.compile_kernel(32, 32, 32)
    b = gpu.compile_kernel(32, 32, 32)
    assert a is b and a.compile_ms > 0 and a.local_bytes == 0 and a.smem_bytes == gpu.smem_bytes(32, 32, 32)


@pytest.mark.gpu
def test_gpu_panel_runs_the_kernel_with_the_explorers_blocks(cp):
    import matplotlib

    matplotlib.use("Agg")
    import flashviz as fv

    w = fv.TileExplorer(N=64, d=64, Br=64, Bc=32, source="random", key="gpu-panel")
    panel = fv.GPUPanel(w, N=1024, key="gpu-panel")
    try:
        assert panel.ok and not panel.run_button.disabled
        res = panel.run()
        assert res is not None, panel.status.value
        assert (res["Br"], res["Bc"], res["d"]) == (64, 32, 64)
        assert res["rel_err"] < 1e-5 and res["call_ms"] > 0 and res["kernel_ms"] > 0 and res["host_us"] > 0
        assert res["naive_call_ms"] > 0 and res["naive_kernel_ms"] > 0
        assert res["ratio_naive_over_call"] == pytest.approx(res["naive_call_ms"] / res["call_ms"])
        assert res["ratio_naive_over_kernel"] == pytest.approx(res["naive_kernel_ms"] / res["kernel_ms"])
        assert "Measured now" in panel.status.value and "64×32" in panel.result_html.value
        assert f"<td>{res['call_ms']:.3f}</td><td>{res['kernel_ms']:.3f}</td>" in panel.result_html.value
        w.Br.value, w.Bc.value, w.d.value = 128, 128, 128      # 270,336 B of shared memory: cannot run
        assert "cannot run" in panel.status.value and panel.run_button.disabled
    finally:
        panel.close()
        w.close()


def _panel_with_fake_gpu(monkeypatch, benchmark):
    import matplotlib

    matplotlib.use("Agg")
    import flashviz as fv
    import flashviz.gpu as g

    monkeypatch.setattr(g, "gpu_status", lambda: (True, "a pretend GPU"))
    monkeypatch.setattr(g, "benchmark", benchmark)
    return fv.GPUPanel(Br=64, Bc=64, d=64, key=("fake", id(benchmark)))


@pytest.mark.parametrize("error", [MemoryError("out of memory allocating 17,179,869,184 bytes\nmore detail"),
                                   RuntimeError("nvrtc: error: identifier \"x\" is undefined"),
                                   ValueError("Br=128, Bc=128, d=128 needs 270,336 bytes of shared memory")])
def test_gpu_failures_are_one_line_messages_in_the_panel(monkeypatch, error):
    def boom(*a, **k):
        raise error

    panel = _panel_with_fake_gpu(monkeypatch, boom)
    try:
        assert panel.run() is None
        msg = panel.status.value
        assert "GPU run failed" in msg and type(error).__name__ in msg and "more detail" not in msg
        assert not panel.run_button.disabled                        # ready for another try
    finally:
        panel.close()


def test_gpu_panel_progress_and_stop(monkeypatch):
    import threading

    release = threading.Event()
    calls = []

    def slow(N, d, **kw):
        calls.append(kw["naive"])
        release.wait(5)
        res = {"N": N, "d": d, "B": 16384 // N, "H": 32, "Br": kw["Br"], "Bc": kw["Bc"], "causal": False,
               "compile_ms": 1.0, "flops": 2e9, "call_ms": 2.1, "kernel_ms": 2.0, "host_us": 30.0,
               "call_tflops": 2e9 / 2.1 / 1e9, "kernel_tflops": 1.0, "tflops": 1.0, "model_GBps": 1.0}
        if kw["naive"]:
            res.update(naive_call_ms=6.3, naive_kernel_ms=6.0, ratio_naive_over_call=3.0, ratio_naive_over_kernel=3.0)
        return res

    panel = _panel_with_fake_gpu(monkeypatch, slow)
    try:
        assert panel.run(wait=False) is None
        assert panel.run_button.disabled and not panel.stop_button.disabled
        assert panel.progress.layout.visibility == "visible"
        panel.stop()
        release.set()
        panel._thread.join(5)
        assert calls == [False]                                      # stopped before timing naive attention
        assert "Stopped" in panel.status.value and panel.last["kernel_ms"] == 2.0
        assert "naive_call_ms" not in panel.last
        assert "<td>2.100</td><td>2.000</td><td>1.0</td>" in panel.result_html.value     # call, kernel-only, TFLOP/s (call)
        assert not panel.run_button.disabled and panel.stop_button.disabled
    finally:
        panel.close()


def test_gpu_panel_fake_run_shows_both_methods(monkeypatch):
    def fake(N, d, **kw):
        res = {"N": N, "d": d, "B": 16384 // N, "H": 32, "Br": kw["Br"], "Bc": kw["Bc"], "causal": False,
               "compile_ms": 1.0, "flops": 4e9, "call_ms": 2.0, "kernel_ms": 1.6, "host_us": 30.0,
               "call_tflops": 2.0, "kernel_tflops": 2.5, "tflops": 2.5, "model_hbm_bytes": 3.2e9, "rel_err": 1e-7}
        if kw["naive"]:          # the naive run times the kernel again: its own ratios are not the ones shown
            res.update(call_ms=2.2, kernel_ms=1.8, naive_call_ms=7.0, naive_kernel_ms=6.4,
                       ratio_naive_over_call=7.0 / 2.2, ratio_naive_over_kernel=6.4 / 1.8)
        return res

    panel = _panel_with_fake_gpu(monkeypatch, fake)
    try:
        res = panel.run()
        assert (res["call_ms"], res["kernel_ms"]) == (2.0, 1.6)                   # the first run's kernel times
        assert res["ratio_naive_over_call"] == pytest.approx(3.5)                 # 7.0 / 2.0, public call
        assert res["ratio_naive_over_kernel"] == pytest.approx(4.0)               # 6.4 / 1.6, kernel-only
        assert ("<td>2.000</td><td>1.600</td><td>2.0</td><td>2000</td><td>7.00</td><td>6.40</td>"
                "<td><b>3.50x</b></td><td>4.00x</td><td>1.0e-07</td>") in panel.result_html.value
    finally:
        panel.close()
