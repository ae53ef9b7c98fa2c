"""timing.host_times_us on the CPU: the per-call figure it reports against known busy-wait
durations, the rounds alternating between implementations, and a context (SDPA's backend
choice) entered outside the timed region. The GPU synchronisation is replaced by a no-op."""

from __future__ import annotations

import time
from contextlib import contextmanager

import pytest

from flashviz.gpu import timing


def _busy(us: float):
    def call():
        end = time.perf_counter() + us * 1e-6
        while time.perf_counter() < end:
            pass
    return call


@pytest.fixture
def no_gpu_sync(monkeypatch):
    monkeypatch.setattr(timing, "_sync", lambda: None)


def test_host_times_match_known_durations_and_skip_context_entry(no_gpu_sync):
    order = []

    @contextmanager
    def slow_backend_choice():
        order.append("enter")
        time.sleep(0.02)                     # 20 ms: must not reach the per-call figure
        yield

    a, b = _busy(200), _busy(600)
    calls = {"a": lambda: (order.append("a"), a()), "b": lambda: (order.append("b"), b())}
    us = timing.host_times_us(calls, repeat={"a": 20, "b": 10}, rounds=3, contexts={"b": slow_backend_choice})
    assert 190 <= us["a"] <= 300, us
    assert 590 <= us["b"] <= 750, us
    # rounds alternate: a's calls, then b's (entered once per round), three times
    runs = [k for i, k in enumerate(order) if i == 0 or order[i - 1] != k]
    assert runs == ["a", "enter", "b"] * 3


def test_one_implementation_and_a_list_of_input_sets(no_gpu_sync):
    seen = []
    sets = [lambda i=i: (seen.append(i), _busy(100)()) for i in range(3)]
    us = timing.host_time_us(sets, repeat=9, rounds=2)
    assert 95 <= us <= 180
    assert set(seen) == {0, 1, 2}             # the input sets are used in turn


# ---------------------------------------------------------------- the two passes merged (CPU)

def test_kernel_pass_merges_into_the_timed_row_without_overwriting_it():
    from flashviz.gpu.tensorcore.bench import merge_kernel_pass

    timed = {"N": 512, "wgmma_call_ms": 1.0, "wgmma_host_us": 16.0, "naive_error": "MemoryError: timed"}
    kern = {"N": 512, "wgmma_kernel_ms": 0.9, "wgmma_launches": 1, "naive_error": "MemoryError: kernel",
            "sdpa_cudnn_error": "RuntimeError: no cuDNN"}
    out = merge_kernel_pass(timed, kern)
    assert out is timed and out["wgmma_call_ms"] == 1.0 and out["wgmma_kernel_ms"] == 0.9
    assert out["naive_error"] == "MemoryError: timed" and out["naive_kernel_error"] == "MemoryError: kernel"
    assert out["sdpa_cudnn_kernel_error"] == "RuntimeError: no cuDNN" and "sdpa_cudnn_error" not in out


def test_sweep_rows_merge_on_their_blocks():
    from flashviz.gpu.tensorcore.bench import merge_sweep_passes

    timed = [{"Br": 64, "Bc": 64, "call_ms": 2.0}, {"Br": 128, "Bc": 64, "call_ms": 1.5},
             {"Br": 128, "Bc": 128, "error": "ValueError: too much shared memory"}]
    kern = [{"Br": 128, "Bc": 64, "kernel_ms": 1.4, "kernel_tflops": 300.0}, {"Br": 64, "Bc": 64, "kernel_ms": 1.9}]
    out = merge_sweep_passes(timed, kern)
    assert [(r["Br"], r["Bc"], r.get("kernel_ms")) for r in out] == [(64, 64, 1.9), (128, 64, 1.4), (128, 128, None)]
    assert out[2]["error"].startswith("ValueError") and out[0]["call_ms"] == 2.0
    failed = merge_sweep_passes([{"Br": 64, "Bc": 64, "call_ms": 2.0}], [{"d": 64, "error": "RuntimeError: x"}])
    assert failed == [{"Br": 64, "Bc": 64, "call_ms": 2.0, "d": 64, "kernel_error": "RuntimeError: x"}]


def test_measure_refuses_unknown_parts():
    with pytest.raises(ValueError, match="parts must be"):
        timing.measure(lambda: None, parts=("wall",))
    with pytest.raises(ValueError, match="parts must be"):
        timing.measure(lambda: None, parts=())
