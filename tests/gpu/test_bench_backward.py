"""``gpu.benchmark_backward`` (flashviz/gpu/teaching/bench_backward.py): one configuration of the
backward teaching kernel timed, what chapter 6's BackwardGPUPanel runs.

CPU: its arguments are refused in one line before CuPy is needed, and its dense forward (O and lse
for the backward) is checked with NumPy standing in for CuPy against float64 attention and
log-sum-exp written out here. Tests marked ``gpu`` run the kernel and the panel live and skip
cleanly without CuPy or a GPU.
"""

from __future__ import annotations

import numpy as np
import pytest

import flashviz as fv
from flashviz import gpu, iomodel
from flashviz.gpu.teaching import bench_backward

# ---------------------------------------------------------------- CPU: no CuPy needed

@pytest.mark.parametrize("kw, exc, start", [
    (dict(N=0), ValueError, "N must be"), (dict(N=1.5), TypeError, "N must be"), (dict(N=True), TypeError, "N must"),
    (dict(Br=8), ValueError, "Br=8"), (dict(Bc=256), ValueError, "Bc=256"), (dict(d=48), ValueError, "d=48"),
    (dict(B=0), ValueError, "B must be"), (dict(H=2.0), TypeError, "H must be"),
    (dict(causal="yes"), TypeError, "causal"), (dict(deterministic=1), TypeError, "deterministic"),
    (dict(phase="fast"), ValueError, "phase must be one of timed, kernel, all"),
])
def test_bad_arguments_fail_in_one_line_before_cupy(monkeypatch, kw, exc, start):
    monkeypatch.setattr(bench_backward, "cupy", lambda: pytest.fail("CuPy asked for before the checks"))
    monkeypatch.setattr(bench_backward, "compile_backward", lambda *a: pytest.fail("compiled before the checks"))
    args = {"N": 1024, "d": 64, **kw}
    with pytest.raises(exc) as info:
        gpu.benchmark_backward(args.pop("N"), args.pop("d"), **args)
    assert type(info.value) is exc and str(info.value).startswith(start) and "\n" not in str(info.value)


def _lse64(Q, K, causal):
    """float64 log-sum-exp of the scaled scores, row by row (−inf for a row that sees no key)."""
    Q, K = Q.astype(np.float64), K.astype(np.float64)
    Nq, Nk = Q.shape[0], K.shape[0]
    out = np.full(Nq, -np.inf)
    for r in range(Nq):
        cols = np.arange(Nk) if not causal else np.arange(max(0, min(Nk, r + Nk - Nq + 1)))
        if cols.size:
            s = K[cols] @ Q[r] / np.sqrt(Q.shape[1])
            out[r] = s.max() + np.log(np.exp(s - s.max()).sum())
    return out


@pytest.mark.parametrize("Nq, Nk, causal", [(9, 9, False), (9, 9, True), (7, 5, True), (5, 8, True), (6, 4, False)])
def test_dense_forward_equals_float64_attention(monkeypatch, Nq, Nk, causal):
    monkeypatch.setattr(bench_backward, "cupy", lambda: np)                # NumPy stands in for CuPy
    rng = np.random.default_rng(3)
    BH, d = 5, 8
    Q = rng.standard_normal((BH, Nq, d)).astype(np.float32)
    K, V = (rng.standard_normal((BH, Nk, d)).astype(np.float32) for _ in range(2))
    with np.errstate(divide="ignore"):                                     # log 0 = −inf: a row with no key
        O, lse = bench_backward.forward_dense(Q, K, V, causal=causal, scale=1 / np.sqrt(d), chunk_bytes=2 * Nq * Nk * 4)
    assert O.dtype == np.float32 and lse.dtype == np.float32 and O.shape == (BH, Nq, d) and lse.shape == (BH, Nq)
    for h in range(BH):                                                    # three chunks of two heads, then one
        np.testing.assert_allclose(O[h], fv.attention(Q[h], K[h], V[h], causal=causal), atol=2e-6)
        want = _lse64(Q[h], K[h], causal)
        assert np.array_equal(np.isneginf(lse[h]), np.isneginf(want))
        np.testing.assert_allclose(lse[h][np.isfinite(want)], want[np.isfinite(want)], rtol=1e-6)
    assert not np.isnan(O).any()


class _DeviceArray(np.ndarray):
    """A NumPy array with CuPy's ``.get()`` (the copy to the host)."""

    def get(self):
        return np.asarray(self).copy()


def _fake_cupy():
    """Enough of CuPy for ``benchmark_backward``, on NumPy: seeded normal inputs, the dense
    forward's operations, a device to synchronise and a memory pool to empty."""
    from types import SimpleNamespace

    class RandomState:
        def __init__(self, seed):
            self.rng = np.random.default_rng(seed)

        def standard_normal(self, shape, dtype):
            return self.rng.standard_normal(shape).astype(dtype).view(_DeviceArray)

    pool = SimpleNamespace(freed=0)
    pool.free_all_blocks = lambda: setattr(pool, "freed", pool.freed + 1)
    return SimpleNamespace(
        random=SimpleNamespace(RandomState=RandomState), float32=np.float32, matmul=np.matmul, where=np.where,
        isneginf=np.isneginf, exp=np.exp, log=np.log, arange=np.arange,
        empty=lambda shape, dtype: np.empty(shape, dtype).view(_DeviceArray),
        cuda=SimpleNamespace(Device=lambda: SimpleNamespace(synchronize=lambda: None)),
        get_default_memory_pool=lambda: pool, pool=pool)


@pytest.mark.parametrize("causal, deterministic, torch_missing", [(False, False, False), (True, True, False),
                                                                  (True, False, True)])
def test_benchmark_backward_plumbing_on_a_pretend_device(monkeypatch, causal, deterministic, torch_missing):
    """The whole call with NumPy standing in for CuPy, the NumPy tiled backward (flashviz.flash_backward)
    for the kernel and fixed times for ``timing.measure``: the inputs, the forward, the check of head
    (0, 0), the two timing phases and every figure derived from them."""
    from types import SimpleNamespace

    fake, calls, seen = _fake_cupy(), [], []
    monkeypatch.setattr(bench_backward, "cupy", lambda: fake)
    monkeypatch.setattr(bench_backward, "compile_backward", lambda Br, Bc, d: SimpleNamespace(
        Br=Br, Bc=Bc, d=d, compile_ms=5.0, num_regs=(96, 80), local_bytes=(0, 0), smem_bytes=gpu.bwd_smem_bytes(Br, Bc, d)))

    def backward(Q, K, V, O, dO, lse, *, Br, Bc, causal, scale, deterministic):
        calls.append((Q.shape, Br, Bc, causal, deterministic))
        with np.errstate(divide="ignore"):
            r = fv.flash_backward(*(np.asarray(x) for x in (Q, K, V, O, dO, lse)), Br=Br, Bc=Bc, causal=causal,
                                  scale=scale)
        return tuple(np.asarray(g, np.float32).view(_DeviceArray) for g in (r.dQ, r.dK, r.dV))

    def fake_measure(call, *, parts: tuple, repeat: int, warmup: int) -> dict:
        seen.append(parts)
        call()
        if parts == ("kernel",):
            if torch_missing:
                raise ModuleNotFoundError("No module named 'torch'")
            return {"kernel_ms": 1.5, "per_call": 2, "kernel_name": "void flash_bwd<32, 16, 16>(float const*)"}
        return {"call_ms": 2.0, "host_us": 30.0, "host_repeat": 3}

    monkeypatch.setattr(bench_backward, "flash_backward_gpu", backward)
    monkeypatch.setattr(bench_backward, "measure", fake_measure)
    res = gpu.benchmark_backward(48, 16, Br=32, Bc=16, causal=causal, deterministic=deterministic, B=2, H=3)
    assert seen == [("call", "host"), ("kernel",)] and fake.pool.freed == 1
    assert calls == [((2, 3, 48, 16), 32, 16, causal, deterministic)] * 3      # the check, then one call per phase
    assert res["rel_err"] < 1e-5 and not res["nan"]             # the tiled backward on the dense forward's O and lse
    assert max(res[f"{g}_max_abs_err"] for g in ("dQ", "dK", "dV")) > 0
    flops = 2.5 * 4 * 2 * 3 * 48 * 48 * 16 / (2 if causal else 1)
    model = iomodel.flash_backward_io(48, 48, 16, Br=32, Bc=16, itemsize=4, causal=causal).hbm_bytes * 6
    assert (res["flops"], res["model_hbm_bytes"], res["call_ms"], res["host_us"]) == (flops, model, 2.0, 30.0)
    assert res["standard_model_hbm_bytes"] == iomodel.standard_backward_io(48, 48, 16, itemsize=4).hbm_bytes * 6
    assert res["call_tflops"] == pytest.approx(flops / 2.0 / 1e9)
    assert (res["Br"], res["Bc"], res["d"], res["B"], res["H"], res["smem_bytes"]) == (
        32, 16, 16, 2, 3, gpu.bwd_smem_bytes(32, 16, 16))
    if torch_missing:
        assert "kernel_ms" not in res and "model_GBps" not in res and "torch" in res["kernel_note"]
    else:
        assert res["kernel_ms"] == 1.5 and res["kernel_tflops"] == pytest.approx(flops / 1.5 / 1e9)
        assert ("model_GBps" in res) == (not deterministic)
        assert res.get("model_GBps", model / 1.5 / 1e6) == pytest.approx(model / 1.5 / 1e6)


# ---------------------------------------------------------------- on a GPU

@pytest.fixture
def cp():
    cupy = pytest.importorskip("cupy")
    ok, reason = gpu.gpu_status()
    if not ok:
        pytest.skip(reason)
    return cupy


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
def test_benchmark_backward_checks_and_times_the_kernel(cp, causal):
    res = gpu.benchmark_backward(1024, 64, Br=64, Bc=32, causal=causal, phase="timed")
    B, H = 16, 32
    assert (res["B"], res["H"], res["Br"], res["Bc"]) == (B, H, 64, 32)
    assert res["rel_err"] < 1e-3 and not res["nan"] and res["call_ms"] > 0 and res["host_us"] > 0
    assert res["model_hbm_bytes"] == iomodel.flash_backward_io(1024, 1024, 64, Br=64, Bc=32, itemsize=4,
                                                               causal=causal).hbm_bytes * B * H
    flops = 2.5 * 4 * B * H * 1024 * 1024 * 64 / (2 if causal else 1)
    assert res["flops"] == flops and res["call_tflops"] == pytest.approx(flops / res["call_ms"] / 1e9)
    det = gpu.benchmark_backward(1024, 64, Br=64, Bc=32, causal=causal, deterministic=True, phase="timed")
    assert det["rel_err"] < 1e-3 and det["deterministic"] and "model_GBps" not in det


@pytest.mark.gpu
def test_backward_panel_runs_live_with_the_explorers_blocks(cp):
    pytest.importorskip("torch")                                           # kernel-only times by torch.profiler
    w = fv.BackwardExplorer(N=64, d=64, Br=32, Bc=64, source="random", canvas="png", key="bgp-live")
    panel = fv.BackwardGPUPanel(w, N=1024, key="bgp-live")
    try:
        assert panel.ok and not panel.run_button.disabled
        res = panel.run()
        assert res is not None, panel.status.value
        assert (res["Br"], res["Bc"], res["d"]) == (32, 64, 64) and res["rel_err"] < 1e-3
        assert res["kernel_ms"] > 0 and res["det_call_ms"] > 0 and res["det_rel_err"] < 1e-3
        assert res["det_over_atomic_call"] == pytest.approx(res["det_call_ms"] / res["call_ms"])
        assert f"<td>{res['call_ms']:.3f}</td><td>{res['kernel_ms']:.3f}</td>" in panel.result_html.value
        w.d.value, w.Br.value, w.Bc.value = 128, 64, 128                   # 270,848 B of shared memory: cannot run
        assert panel.problem is not None and panel.run_button.disabled
    finally:
        panel.close()
        w.close()
