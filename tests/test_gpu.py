"""The GPU runner: CPU-side arithmetic and errors everywhere; the kernel itself where a GPU is.

Tests marked ``gpu`` need CuPy and a CUDA device and skip cleanly without them (conftest.py
and the ``cp`` fixture). Run them with  PYTHONPATH=. python3 -m pytest tests/test_gpu.py -m gpu
"""

import json
import subprocess
import sys

import numpy as np
import pytest

import flashviz as fv
from flashviz import gpu
from flashviz.gpu import results as gpu_results


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
    assert "template <int Br, int Bc, int D>" in src and "#include" not in src
    with pytest.raises(FileNotFoundError):
        gpu.kernel_source("no_such_kernel.cu")


def test_latest_results_picks_newest(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_results, "package_dir", lambda pkg: tmp_path)
    assert gpu.latest_results() is None
    (tmp_path / "gpu-h200-2026-01-02.json").write_text(json.dumps({"env": {"date": "2026-01-02"}}))
    (tmp_path / "gpu-h200-2026-03-01.json").write_text(json.dumps({"env": {"date": "2026-03-01"}}))
    (tmp_path / "notes.txt").write_text("not json")
    r = gpu.latest_results()
    assert r["env"]["date"] == "2026-03-01" and r["source_file"] == "gpu-h200-2026-03-01.json"


def test_latest_results_real_folder():
    r = gpu.latest_results()
    assert r is None or ("env" in r and "source_file" in r)


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
    with pytest.raises(ValueError, match=rf"needs 270,336 bytes of shared memory; this GPU allows {limit:,}"):
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
        assert res["rel_err"] < 1e-5 and res["kernel_ms"] > 0 and "naive_ms" in res
        assert "Measured now" in panel.status.value and "64×32" in panel.result_html.value
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
        return {"N": N, "d": d, "B": 16384 // N, "H": 32, "Br": kw["Br"], "Bc": kw["Bc"], "causal": False,
                "compile_ms": 1.0, "kernel_ms": 2.0, "tflops": 1.0, "model_GBps": 1.0, "naive_ms": 6.0}

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
        assert not panel.run_button.disabled and panel.stop_button.disabled
    finally:
        panel.close()
