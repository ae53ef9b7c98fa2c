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
