"""Chapter 7, section 7 ("What the GPU actually does"), without a GPU: the numbers read off the
recorded timelines (flashviz.records.timeline_stats) against brute-force recounts, the block-order
figure (flashviz.views.timeline_compare) against the records it draws, and the section's
exercises (flashviz.exercises.timeline): right answers pass, wrong ones say which way without
the value, odd input never raises.

Tests that read the committed timelines check the records and their reading, not any speed."""

from __future__ import annotations

import matplotlib
import numpy as np
import pytest
from matplotlib.collections import PolyCollection
from test_no_overlap import text_problems

from flashviz.exercises.timeline import check_order_speedup, check_tail_share, check_waves
from flashviz.records.timeline import EVENT_DTYPE, Timeline, latest_timeline
from flashviz.records.timeline_stats import most_at_once, recorded_orders, softmax_overlap, tail_share, waves
from flashviz.views import style
from flashviz.views.timeline_compare import ORDER_NAMES, SHORT_NAMES, plot_block_orders

matplotlib.use("Agg")


def _brute_most(t0, t1):
    """The most intervals open at once, counted at every start (an interval is [t0, t1))."""
    return max((int(((t0 <= t) & (t < t1)).sum()) for t in t0), default=0)


@pytest.mark.parametrize("seed", range(20))
def test_most_at_once_equals_a_count_at_every_start(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 40))
    t0 = rng.integers(0, 50, n).astype(float)       # integer times: many ties of one end with another start
    t1 = t0 + rng.integers(1, 20, n)
    assert most_at_once(t0, t1) == _brute_most(t0, t1)


@pytest.mark.parametrize("kernel,d,causal", [("wgmma", 64, False), ("wgmma", 128, True), ("teaching", 64, True)])
def test_recorded_data_waves_recounted(kernel, d, causal):
    tl = latest_timeline(kernel, causal=causal, d=d, N=4096)
    b = tl.blocks
    sms = np.unique(b["sm"])
    per_sm = max(_brute_most(b["t0_ns"][b["sm"] == s], b["t1_ns"][b["sm"] == s]) for s in sms)
    w = waves(tl)
    assert (w.blocks, w.sms, w.per_sm, w.slots) == (int(np.prod(tl.grid)), len(sms), per_sm, len(sms) * per_sm)
    assert w.waves == pytest.approx(len(b) / (len(sms) * per_sm))
    assert w.sms == tl.sm_count == 132 and 1 <= w.per_sm <= 4       # an H200 SM holds a few such blocks


def _timeline(events):
    """A one-block wgmma timeline holding ``events`` [(group, stage, t0, t1)]."""
    ev = np.zeros(len(events), EVENT_DTYPE)
    for k, (g, stage, a, b) in enumerate(events):
        ev[k] = (0, 0, g, 0, Timeline.__dataclass_fields__["stages"].default.index(stage), a, b)
    blocks = np.zeros(1, [("cta", "<i4"), ("sm", "<i2"), ("i", "<i4"), ("h", "<i4"), ("b", "<i4"), ("n_j", "<i4"),
                          ("t0_ns", "<f8"), ("t1_ns", "<f8")])
    blocks["t1_ns"] = 1000
    return Timeline(kernel="wgmma", grid=(1, 1, 1), N=64, d=64, Br=128, Bc=64, causal=False, dtype="float16",
                    sm_count=132, device="test", date="2026-12-01", blocks=blocks, tiles=np.zeros(0, [
                        ("cta", "<i4"), ("i", "<i4"), ("j", "<i4"), ("t0_ns", "<f8"), ("t1_ns", "<f8")]), events=ev)


def _brute_overlap(tl, step=0.25):
    """The same share on a fine grid of instants (every event time is a multiple of the step)."""
    e, st = tl.events, tl.stages
    grid = np.arange(0, 1000, step) + step / 2
    total = over = 0.0
    for g in np.unique(e["group"]):
        soft = [x for x in e if x["group"] == g and st[x["stage"]] in ("update_ml", "convert_P")]
        mm = [x for x in e if x["group"] != g and st[x["stage"]] in ("compute_S", "accumulate_O")]
        for s in soft:
            inside = (grid >= s["t0_ns"]) & (grid < s["t1_ns"])
            busy = np.zeros_like(grid, bool)
            for m in mm:
                busy |= (grid >= m["t0_ns"]) & (grid < m["t1_ns"])
            total += inside.sum() * step
            over += (inside & busy).sum() * step
    return over / total, total


def test_softmax_overlap_on_known_schedules():
    lockstep = _timeline([(0, "compute_S", 0, 100), (1, "compute_S", 0, 100), (0, "update_ml", 100, 150),
                          (1, "update_ml", 100, 150), (0, "convert_P", 150, 170), (1, "convert_P", 150, 170)])
    assert softmax_overlap(lockstep) == (0.0, 140.0)
    # ping-pong: group 1's S (and its P V) run while group 0 does its softmax; overlapping matmuls counted once
    pingpong = _timeline([(0, "compute_S", 0, 100), (1, "compute_S", 100, 200), (1, "accumulate_O", 150, 260),
                          (0, "update_ml", 100, 180), (0, "convert_P", 180, 230), (1, "update_ml", 260, 300)])
    share, ns = softmax_overlap(pingpong)
    assert ns == 170 and share == pytest.approx(130 / 170)
    assert (share, ns) == pytest.approx(_brute_overlap(pingpong))
    with pytest.raises(ValueError, match="keeps no softmax step"):
        softmax_overlap(_timeline([(0, "compute_S", 0, 10), (1, "compute_S", 0, 10)]))
    with pytest.raises(TypeError, match="expected a flashviz.gpu.Timeline"):
        waves("timeline")


@pytest.mark.parametrize("seed", range(5))
def test_softmax_overlap_equals_a_fine_grid(seed):
    rng = np.random.default_rng(seed)
    evs = []
    for g in (0, 1):
        t = float(rng.integers(0, 40))
        for stage in ("compute_S", "update_ml", "convert_P", "accumulate_O") * 3:
            dt = float(rng.integers(5, 60))
            evs.append((g, stage, t, t + dt))
            t += dt
    tl = _timeline(evs)
    assert softmax_overlap(tl) == pytest.approx(_brute_overlap(tl))


def test_recorded_data_wgmma_softmax_is_exposed():
    """The recorded wgmma runs with two warpgroups a block: under 15 % of a warpgroup's softmax
    overlaps the other warpgroup's matmuls, as chapter 7 says; a brute-force recount on a fine
    grid agrees. At Br = 64 (one warpgroup) there is nothing to compare: a one-line ValueError."""
    for d, causal in [(64, False), (128, False), (128, True)]:
        tl = latest_timeline("wgmma", causal=causal, d=d, N=4096)
        assert tl.Br == 128
        share, ns = softmax_overlap(tl)
        assert 0 <= share < 0.15 and ns > 0
    one = latest_timeline("wgmma", causal=True, d=64, N=4096)
    assert one.Br == 64
    with pytest.raises(ValueError, match="one group per block here \\(Br = 64\\)"):
        softmax_overlap(one)


def test_recorded_data_block_orders_are_one_run_each():
    runs = recorded_orders("wgmma", d=128, N=4096)
    assert list(runs) == ["kernel", "ascending", "longest_first"]
    assert {(t.kernel, t.d, t.N, t.causal) for t in runs.values()} == {("wgmma", 128, 4096, True)}
    assert [t.order for t in runs.values()] == list(runs)
    for order in ("ascending", "longest_first"):      # the own order was timed beside each, same rounds
        assert runs[order].notes["kernel_order_ms"] > 0 and runs[order].commit == runs["kernel"].commit
    first = {o: t.blocks["i"][np.argsort(t.blocks["t0_ns"], kind="stable")[:132]] for o, t in runs.items()}
    longest = np.sort(runs["longest_first"].blocks["i"])[::-1][:132]      # the 132 longest rows of the grid
    assert np.all(first["longest_first"] >= longest.min() - 1)           # (a row's worth of start-time jitter)
    assert np.median(first["ascending"]) < np.median(first["kernel"])


@pytest.mark.parametrize("scale", [1.0, 1.4])
def test_recorded_data_block_order_figure_draws_the_records(scale):
    runs = recorded_orders("wgmma", d=128, N=4096)
    with style.scaled_text(scale):
        fig = plot_block_orders(runs)
    try:
        panels = [ax for ax in fig.axes if ax.get_title(loc="left")]
        assert len(panels) == 3
        for ax, (order, tl) in zip(panels, runs.items()):
            bars = [c for c in ax.collections if isinstance(c, PolyCollection)][0]
            paths = bars.get_paths()
            assert len(paths) == len(tl.blocks)
            t0 = tl.blocks["t0_ns"].min()
            xs = np.array([p.vertices[:, 0].min() for p in paths])
            np.testing.assert_allclose(xs, (tl.blocks["t0_ns"] - t0) / 1e3, atol=1e-6)
            title = ax.get_title(loc="left")
            assert f"{tl.kernel_ms:.3f} ms" in title and f"tail {100 * tail_share(tl)[0]:.0f} %" in title
            assert title.startswith((ORDER_NAMES if scale == 1 else SHORT_NAMES)[order])
            span = [p for p in ax.patches if p.get_alpha() == pytest.approx(0.12)][0]
            x0 = span.get_x()                                  # axvspan: a Rectangle in matplotlib 3.9+
            assert x0 == pytest.approx((tail_share(tl)[1] - t0) / 1e3)
        assert "NVIDIA H200" in fig.get_suptitle()
        assert text_problems(fig) == []
    finally:
        matplotlib.pyplot.close(fig)


def test_block_order_figure_refuses_bad_input():
    with pytest.raises(TypeError, match="non-empty dict"):
        plot_block_orders({})
    a = latest_timeline("wgmma", causal=True, d=64, N=4096)
    b = latest_timeline("wgmma", causal=True, d=128, N=4096)
    with pytest.raises(ValueError, match="one kernel at one N, d and mask"):
        plot_block_orders({"kernel": a, "ascending": latest_timeline("wgmma", causal=True, d=128, N=4096,
                                                                     order="ascending")})
    with pytest.raises(ValueError, match="each key of runs must be its timeline's block order"):
        plot_block_orders({"kernel": a, "ascending": b})


def _recount_tail(tl):
    b = tl.blocks
    idle = min(b["t1_ns"][b["sm"] == s].max() for s in np.unique(b["sm"]))
    return (b["t1_ns"].max() - idle) / (b["t1_ns"].max() - b["t0_ns"].min())


def test_recorded_data_exercises_right_and_wrong(capsys):
    tl = latest_timeline("wgmma", causal=False, d=64, N=4096)
    b = tl.blocks
    sms = np.unique(b["sm"])
    right_waves = len(b) / (len(sms) * max(_brute_most(b["t0_ns"][b["sm"] == s], b["t1_ns"][b["sm"] == s]) for s in sms))
    assert check_waves(right_waves) and check_waves(round(right_waves, 2))
    w = check_waves(np.ceil(right_waves))
    assert not w and "too high" in w.message and f"{right_waves:.2f}" not in w.message
    tail = _recount_tail(latest_timeline("wgmma", causal=True, d=128, N=4096))
    assert check_tail_share(tail) and check_tail_share(round(tail, 2))
    pct = check_tail_share(100 * tail)
    assert not pct and "as a fraction" in pct.message and f"{tail:.3f}" not in pct.message
    assert "as a fraction" in check_tail_share(50).message
    low = check_tail_share(tail / 2)
    assert not low and "too low" in low.message and f"{tail:.3f}" not in low.message
    lf = latest_timeline("wgmma", causal=True, d=128, N=4096, order="longest_first")
    speed = lf.notes["kernel_order_ms"] / lf.kernel_ms
    assert check_order_speedup(speed) and not check_order_speedup(1 / speed)
    for check in (check_waves, check_tail_share, check_order_speedup):   # odd input: one ✗ line, no exception
        for answer in (None, "3", float("nan"), [1], True):
            r = check(answer)
            assert not r and r.message.startswith("✗ Not yet")
    assert not check_waves(3.9, d=96) and "no recorded timeline" in check_waves(3.9, d=96).message
    capsys.readouterr()
