"""The GPU timeline's data side, without a GPU (issue 12): the stage table matches the kernels'
header, the decoder reads a trace buffer laid out as kernels/fv_trace.cuh documents (built here
by hand from known times), and a Timeline survives save / load (JSON and .json.gz, sampled)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from trace_buffers import trace_buffer as _buffer

from flashviz import steps
from flashviz.gpu.tracing import FV_HEAD, FV_MAGIC, FV_NSTAGE, decode
from flashviz.records.timeline import STAGES, Timeline

ROOT = Path(__file__).resolve().parents[2]
META = dict(kernel="wgmma", N=256, d=64, Br=128, Bc=64, causal=False, dtype="float16", sm_count=132,
            device="test GPU", date="2026-12-01", kernel_ms=1.0, traced_ms=1.03)


def test_stage_numbers_match_the_kernel_header_and_the_vocabulary():
    header = (ROOT / "kernels" / "fv_trace.cuh").read_text()
    defined = {int(v): n.lower() for n, v in re.findall(r"#define FV_STAGE_(\w+) (\d+)", header)}
    assert [defined[k] for k in sorted(defined)] == [s.lower() for s in STAGES]
    assert int(re.search(r"#define FV_NSTAGE (\d+)", header).group(1)) == FV_NSTAGE == len(STAGES)
    assert int(re.search(r"#define FV_HEAD (\d+)", header).group(1)) == FV_HEAD
    assert int(re.search(r"#define FV_MAGIC (0x[0-9A-Fa-f]+)ull", header).group(1), 16) == FV_MAGIC
    for name in STAGES:                        # every stage is a step of the one vocabulary
        assert steps.step(name).name == name


def _plan():
    evs = [(0, -1, "load_Q", 0, 400), (0, 0, "load_K", 0, 400), (0, 0, "compute_S", 420, 900),
           (1, 0, "compute_S", 430, 910), (0, 1, "compute_S", 1200, 1700), (1, 1, "accumulate_O", 1800, 2300),
           (0, -1, "write_O", 2400, 2600)]
    return {0: (3, 1, 0, evs, 2700), 1: (7, 0, 3200, evs[:4] + [(0, -1, "write_O", 1000, 1100)], 1200)}


def test_decode_places_every_event_on_one_time_axis():
    tl = decode(_buffer((2, 1, 1), 2, 2, _plan()), grid=(2, 1, 1), groups=2, jmax=2, **META)
    assert tl.notes["ns_per_cycle"] == pytest.approx(0.5, rel=1e-3)
    assert list(tl.blocks["sm"]) == [3, 7] and list(tl.blocks["i"]) == [1, 0] and list(tl.blocks["n_j"]) == [2, 1]
    np.testing.assert_allclose(tl.blocks["t0_ns"], [0, 3200])
    np.testing.assert_allclose(tl.blocks["t1_ns"], [2700, 4400], atol=2)
    assert len(tl.events) == 7 + 5
    e = tl.events[(tl.events["cta"] == 1) & (tl.events["group"] == 1)]
    assert [STAGES[s] for s in e["stage"]] == ["compute_S"] and e["j"][0] == 0
    np.testing.assert_allclose([e["t0_ns"][0], e["t1_ns"][0]], [3200 + 430, 3200 + 910], atol=1)
    w = tl.events[(tl.events["cta"] == 0) & (tl.events["j"] == -1)]
    assert sorted(STAGES[s] for s in w["stage"]) == ["load_Q", "write_O"]
    # tiles: block 0 visited j = 0 (0..910) and j = 1 (1200..2300); block 1 only j = 0
    t = tl.tiles
    assert [(int(c), int(j)) for c, j in zip(t["cta"], t["j"])] == [(0, 0), (0, 1), (1, 0)]
    np.testing.assert_allclose(t["t0_ns"], [0, 1200, 3200], atol=1)
    np.testing.assert_allclose(t["t1_ns"], [910, 2300, 3200 + 910], atol=1)
    assert list(t["i"]) == [1, 1, 0]
    assert tl.busy_sms([100, 3000, 3300]).tolist() == [1, 0, 1]


def test_each_block_converts_cycles_with_its_own_clock_rate():
    """Two SMs at different clock rates (the H200's drops under tensor-core load): each block's
    steps land at their true times, and each block ends at its own timer end."""
    plan = _plan()
    plan[1] = (*plan[1][:4], 2500)               # long enough (> 2 µs) for its own rate to be measured
    tl = decode(_buffer((2, 1, 1), 2, 2, plan, ns_per_cycle={0: 0.505, 1: 0.58}), grid=(2, 1, 1), groups=2,
                jmax=2, **META)
    np.testing.assert_allclose(tl.blocks["t1_ns"], [2700, 3200 + 2500], atol=2)
    e = tl.events[(tl.events["cta"] == 1) & (tl.events["group"] == 1)]
    np.testing.assert_allclose([e["t0_ns"][0], e["t1_ns"][0]], [3200 + 430, 3200 + 910], atol=1.5)
    e = tl.events[(tl.events["cta"] == 0) & (tl.events["j"] == 1) & (tl.events["group"] == 1)]
    np.testing.assert_allclose([e["t0_ns"][0], e["t1_ns"][0]], [1800, 2300], atol=1.5)
    assert tl.notes["ns_per_cycle_range"] == pytest.approx([0.505, 0.58], rel=2e-3)


def test_a_short_buffer_is_a_one_line_error():
    with pytest.raises(ValueError, match="needs .* words; got"):
        decode(np.zeros(10, np.uint64), grid=(2, 1, 1), groups=2, jmax=2, **META)


def test_decode_refuses_an_unfinished_block():
    buf = _buffer((2, 1, 1), 2, 2, _plan())
    buf[7] = 0                                   # block 0 never wrote FV_MAGIC
    with pytest.raises(RuntimeError, match="1 of 2 blocks did not finish"):
        decode(buf, grid=(2, 1, 1), groups=2, jmax=2, **META)


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_save_load_round_trip(tmp_path, suffix):
    tl = decode(_buffer((2, 1, 1), 2, 2, _plan()), grid=(2, 1, 1), groups=2, jmax=2, **META)
    back = Timeline.load(tl.save(tmp_path / f"t{suffix}"))
    for name in ("blocks", "tiles", "events"):
        a, b = getattr(tl, name), getattr(back, name)
        assert a.dtype.names == b.dtype.names and len(a) == len(b)
        for col in a.dtype.names:                # times are stored as float32: exact to < 1 ns here
            np.testing.assert_allclose(a[col], b[col], atol=1e-3 if "ns" in col else 0)
    assert (back.kernel, back.grid, back.kernel_ms, back.traced_ms, back.stages) == \
        (tl.kernel, tl.grid, tl.kernel_ms, tl.traced_ms, tl.stages)


def test_sampled_keeps_blocks_and_tiles_and_the_chosen_events(tmp_path):
    rng = np.random.default_rng(0)
    plan = {c: (c % 5, c, int(rng.integers(0, 5000)), [(0, 0, "compute_S", 10, 50 + c)], 100 + 10 * c)
            for c in range(20)}
    tl = decode(_buffer((20, 1, 1), 1, 1, plan), grid=(20, 1, 1), groups=1, jmax=1, **META)
    s = tl.sampled(4)
    assert len(s.detail_ctas) == 4 and int(np.argmax(tl.blocks["t1_ns"] - tl.blocks["t0_ns"])) in s.detail_ctas
    assert len(s.blocks) == 20 and len(s.tiles) == 20 and sorted(set(s.events["cta"])) == list(s.detail_ctas)
    back = Timeline.load(tl.save(tmp_path / "s.json", detail=4))
    assert back.detail_ctas == s.detail_ctas and len(back.events) == 4


def test_bad_files_and_values_are_one_line_errors(tmp_path):
    (tmp_path / "x.json").write_text('{"format": "something else"}')
    with pytest.raises(ValueError, match="not a flashviz timeline"):
        Timeline.load(tmp_path / "x.json")
    (tmp_path / "y.json").write_text("not json")
    with pytest.raises(ValueError, match="is not a timeline file"):
        Timeline.load(tmp_path / "y.json")
    with pytest.raises(FileNotFoundError, match="no timeline file"):
        Timeline.load(tmp_path / "missing.json")
    tl = decode(_buffer((2, 1, 1), 2, 2, _plan()), grid=(2, 1, 1), groups=2, jmax=2, **META)
    with pytest.raises(ValueError, match="must end in .json or .gz"):
        tl.save(tmp_path / "t.txt")
    with pytest.raises(ValueError, match="kernel must be one of"):
        Timeline(**{**META, "kernel": "fa9"}, grid=(2, 1, 1), blocks=tl.blocks, tiles=tl.tiles, events=tl.events)
    with pytest.raises(ValueError, match="has 2 blocks; the timeline has 1"):
        Timeline(**META, grid=(2, 1, 1), blocks=tl.blocks[:1], tiles=tl.tiles, events=tl.events)
    with pytest.raises(ValueError, match="order must be one of kernel, ascending, longest_first"):
        Timeline(**META, grid=(2, 1, 1), blocks=tl.blocks, tiles=tl.tiles, events=tl.events, order="random")


def test_each_block_names_its_query_block_head_and_batch(tmp_path):
    """rec[5] = i | h << 24 | b << 44 (kernels/fv_trace.cuh): the decoder reads every block's
    work from its own record, whatever order the blocks ran in (here longest first: cta c did
    query block Tr - 1 - c // (H·B), head c mod H, batch (c // H) mod B); the teaching kernel
    records b·H + h as its head; a grid not covered once is refused; the order survives a file."""
    Tr, H, B = 3, 2, 2
    work = {c: (Tr - 1 - c // (H * B), c % H, c // H % B) for c in range(Tr * H * B)}
    plan = {c: (c % 4, work[c], 100 * c, [(0, 0, "compute_S", 10, 50)], 500) for c in work}
    grid = (Tr, H, B)
    tl = decode(_buffer(grid, 1, 1, plan), grid=grid, groups=1, jmax=1, **META, order="longest_first")
    assert [tuple(int(x) for x in b) for b in tl.blocks[["i", "h", "b"]]] == [work[c] for c in range(Tr * H * B)]
    assert Timeline.load(tl.save(tmp_path / "o.json.gz")).order == "longest_first"
    teach = {c: (*p[:1], (p[1][0], p[1][2] * H + p[1][1], 0), *p[2:]) for c, p in plan.items()}
    tt = decode(_buffer(grid, 1, 1, teach), grid=grid, groups=1, jmax=1, **{**META, "kernel": "teaching"})
    assert [tuple(int(x) for x in b) for b in tt.blocks[["i", "h", "b"]]] == [work[c] for c in range(Tr * H * B)]
    twice = dict(plan)
    twice[1] = (*plan[1][:1], work[0], *plan[1][2:])                  # two blocks did the same work
    with pytest.raises(RuntimeError, match="did not record each \\(i, head, batch\\) of the grid 3×2×2 once"):
        decode(_buffer(grid, 1, 1, twice), grid=grid, groups=1, jmax=1, **META)


def test_recorded_names_carry_the_block_order(monkeypatch, tmp_path):
    from flashviz.records import timeline as T

    tl = decode(_buffer((2, 1, 1), 2, 2, _plan()), grid=(2, 1, 1), groups=2, jmax=2, **META)
    for name in ("timeline-wgmma-d64-causal-n4096-h200-2026-12-01.json.gz",
                 "timeline-wgmma-d64-causal-ascending-n4096-h200-2026-12-01.json.gz",
                 "timeline-wgmma-d64-causal-longest_first-n4096-h200-2026-12-01.json.gz",
                 "timeline-wgmma-d64-causal-sideways-n4096-h200-2026-12-01.json.gz"):   # not a name we write
        tl.save(tmp_path / name)
    monkeypatch.setattr(T, "package_dir", lambda pkg: tmp_path)
    rows = T.recorded_timelines()
    assert sorted(r["order"] for r in rows) == ["ascending", "kernel", "longest_first"]
    assert T.latest_timeline("wgmma", causal=True, order="ascending").kernel == "wgmma"
    with pytest.raises(LookupError, match=r"no recorded timeline of wgmma \(longest_first\); recorded: .*"
                                          r"wgmma d=64 N=4096 causal ascending"):
        T.latest_timeline("wgmma", causal=False, order="longest_first")
    with pytest.raises(ValueError, match="order must be one of"):
        T.latest_timeline("wgmma", order="reversed")


def test_every_kernel_s_recorded_name_reads_back(monkeypatch, tmp_path):
    """The names benchmarks/record_timelines.py writes, for every kernel of KERNELS (fa3's has a
    digit in it), are found by recorded_timelines and latest_timeline."""
    from flashviz.records import timeline as T

    tl = decode(_buffer((2, 1, 1), 2, 2, _plan()), grid=(2, 1, 1), groups=2, jmax=2, **META)
    for kernel in T.FORWARD_KERNELS:
        tl.save(tmp_path / f"timeline-{kernel}-d128-causal-n4096-h200-2026-12-02.json.gz")
    for S in (1, 16):                          # the decode runs: one name per split count
        tl.save(tmp_path / f"timeline-decode-d128-n32768-s{S}-h200-2026-12-02.json.gz")
    monkeypatch.setattr(T, "package_dir", lambda pkg: tmp_path)
    rows = T.recorded_timelines()
    assert sorted(r["kernel"] for r in rows) == sorted(T.FORWARD_KERNELS + ("decode", "decode"))
    assert sorted(r["splits"] for r in rows if r["kernel"] == "decode") == [1, 16]
    assert all(r["splits"] is None for r in rows if r["kernel"] != "decode")
    for kernel in T.FORWARD_KERNELS:
        assert T.latest_timeline(kernel, causal=True, d=128, N=4096).N == tl.N
    with pytest.raises(ValueError, match="kernel must be one of"):
        T.latest_timeline("decode")


def _fa3_timeline():
    """The fa3 ping-pong trace written by hand below, decoded: cta 0 (i = 1) visits key tiles 1
    then 0, cta 1 sees no key; a consumer's softmax overlapped by the other's products 900 of
    1200 ns."""
    evs = [(0, -1, "load_Q", -100, 100), (0, 1, "load_K", 100, 150), (0, 1, "load_V", 150, 200),
           (0, 0, "load_K", 200, 250), (0, 0, "load_V", 250, 300),
           (1, -1, "load_Q", 10, 300), (2, -1, "load_Q", 10, 300),
           (1, 1, "compute_S", 300, 500), (1, 1, "update_ml", 500, 800),        # wg 1 softmax 500..800
           (2, 1, "compute_S", 500, 700), (2, 1, "update_ml", 700, 1000),       # wg 2 S under it
           (1, 0, "compute_S", 800, 1000), (1, 0, "update_ml", 1000, 1300),
           (1, 1, "accumulate_O", 800, 1100), (2, 0, "compute_S", 1000, 1200), (2, 0, "update_ml", 1200, 1500),
           (1, 0, "accumulate_O", 1300, 1500), (2, 1, "accumulate_O", 1000, 1300), (2, 0, "accumulate_O", 1500, 1700),
           (1, -1, "write_O", 1500, 1600), (2, -1, "write_O", 1700, 1800)]
    # tile 1 sees no key: no steps, and its producer never started (its base word stays 0); the
    # producer of tile 0 started 200 cycles (100 ns) before the header's thread
    plan = {0: (5, (1, 0, 0), 0, evs, 2100), 1: (9, (0, 0, 0), 0, [], 50)}
    meta = {**META, "kernel": "fa3", "Br": 128, "Bc": 128}
    buf = _buffer((2, 1, 1), 3, 2, plan, bases={0: [-200, 3, 6], 1: [None, 3, 6]})
    return decode(buf, grid=(2, 1, 1), groups=3, jmax=2, **meta)


def test_an_fa3_trace_one_record_per_tile_producer_lane_and_ping_pong_overlap():
    """kernels/flash_fwd_fa3.cu's layout: one record per tile of its work list, Br/64 + 1 groups,
    group 0 the producer warpgroup (copies only), groups 1, 2 the consumers. A ping-pong schedule
    written by hand (warpgroup 1's softmax while warpgroup 2's products run, and back) decodes to
    those times, the view gives the producer one lane, and softmax_overlap measures the share
    computed here by hand."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from flashviz.records.timeline_stats import softmax_overlap
    from flashviz.views.timeline_view import TimelineFigure

    tl = _fa3_timeline()
    assert list(tl.blocks["i"]) == [1, 0] and list(tl.blocks["n_j"]) == [2, 0]
    # time 0 is the producer's first step; a tile starts with its consumers, its key tiles too
    assert tl.events["t0_ns"].min() == pytest.approx(0, abs=1)
    np.testing.assert_allclose(tl.blocks["t0_ns"], [100, 100], atol=1)
    spans = {int(j): (t0, t1) for j, t0, t1 in zip(tl.tiles["j"], tl.tiles["t0_ns"], tl.tiles["t1_ns"])}
    np.testing.assert_allclose(spans[1], [100 + 300, 100 + 1300], atol=1)     # not the producer's 100-200
    np.testing.assert_allclose(spans[0], [100 + 800, 100 + 1700], atol=1)
    p = tl.events[tl.events["group"] == 0]
    assert sorted(STAGES[s] for s in p["stage"]) == ["load_K", "load_K", "load_Q", "load_V", "load_V"]
    share, soft = softmax_overlap(tl)
    # softmax (update_ml) per consumer, against the other consumer's compute_S / accumulate_O:
    # wg1 500-800 vs wg2 S 500-700 -> 200; wg1 1000-1300 vs wg2 S 1000-1200, PV 1000-1300 -> 300
    # wg2 700-1000 vs wg1 S 800-1000, PV 800-1100 -> 200; wg2 1200-1500 vs wg1 PV 1300-1500 -> 200
    assert soft == pytest.approx(1200, abs=4) and share == pytest.approx(900 / 1200, abs=0.01)
    fig = plt.figure(figsize=(11, 6.8))
    try:
        view = TimelineFigure(fig, tl)
        _, labels = view._group_rows()
        assert labels == ["producer", "wg 1 loads", "wg 1 math", "wg 2 loads", "wg 2 math"]
    finally:
        plt.close(fig)


def test_the_block_steps_of_two_kernels_side_by_side():
    """Chapter 8's figure (views.timeline_pair): one panel per timeline — the recorded FA2 wgmma
    run and the hand-written fa3 trace. fa3: the block's window is its two key tiles' span (400 to
    1800 ns, from the trace; j = 1 starts first), the producer on one lane, the overlap computed by
    hand (75 %) in the title, every event of the block inside the window one bar. FA2: two lanes a
    warpgroup, four key tiles consecutive in start order from the middle of the block's run (as
    many of its tiles start before them as after), the window their span. At 2.5x text the legend
    stays inside the figure. Bad arguments: one-line errors, raised before any figure is made."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.collections import PolyCollection

    from flashviz.records.timeline import latest_timeline
    from flashviz.views.style import scaled_text
    from flashviz.views.timeline_pair import plot_block_steps

    fa3, fa2 = _fa3_timeline(), latest_timeline("wgmma", d=128, N=4096)
    before = plt.get_fignums()
    fig = plot_block_steps({"FA2": fa2, "FA3": fa3})
    try:
        p2, p3 = fig.panels
        assert p3["cta"] == 0 and p3["window_ns"] == pytest.approx((400, 1800), abs=1) and p3["tiles_j"] == (1, 0)
        assert p3["lanes"] == ["producer", "wg 1 loads", "wg 1 math", "wg 2 loads", "wg 2 math"]
        assert p3["softmax_overlap"] == pytest.approx(0.75, abs=0.01) and "75 % of its time" in p3["title"]
        e = fa3.events
        inside = (e["cta"] == 0) & (e["t1_ns"] > 400 + 1) & (e["t0_ns"] < 1800 - 1)
        assert p3["bars"] == int(inside.sum())
        ax3 = fig.axes[1]
        (bars,) = [c for c in ax3.collections if isinstance(c, PolyCollection)]
        assert len(bars.get_paths()) == p3["bars"] and ax3.get_xlim() == pytest.approx((0, 1.4))
        assert "key tiles j = 1, 0 of block 0" in ax3.get_xlabel().replace("\n", " ")
        assert p2["lanes"] == ["wg 0 loads", "wg 0 math", "wg 1 loads", "wg 1 math"]
        cta = p2["cta"]
        kept = {int(c): len(np.unique(fa2.events["j"][(fa2.events["cta"] == c) & (fa2.events["j"] >= 0)]))
                for c in fa2.detail_ctas}
        assert kept[cta] == max(kept.values())                               # the block with the most key tiles
        t = fa2.tiles[fa2.tiles["cta"] == cta]
        starts = np.sort(t["t0_ns"])
        mine = t[np.isin(t["j"], p2["tiles_j"])]
        assert len(mine) == 4 and p2["window_ns"] == pytest.approx((mine["t0_ns"].min(), mine["t1_ns"].max()))
        n_before = int((starts < mine["t0_ns"].min()).sum())
        n_after = int((starts > mine["t0_ns"].max()).sum())
        assert n_before + n_after + 4 == len(t) and abs(n_before - n_after) <= 1       # consecutive, in the middle
        assert "over the 16 blocks whose steps were kept" in p2["title"] and len(fa2.detail_ctas) == 16
        assert fig.axes[0].get_title(loc="left").startswith("FA2: d = 128, N = 4096")
    finally:
        plt.close(fig)
    with scaled_text(2.5):                                                    # Fa3Figures' largest text scale
        big = plot_block_steps([fa2], tiles=np.int64(4), figsize=(11, 6.0))
        try:
            big.canvas.draw()
            box = big.legends[0].get_window_extent()
            assert box.x0 >= 0 and box.x1 <= big.bbox.width and box.y0 >= 0
        finally:
            plt.close(big)
    for bad, err, what in ((dict(timelines=["not a timeline"]), TypeError, "Timeline"),
                           (dict(timelines=[fa3], tiles=0), ValueError, "tiles must be a positive int"),
                           (dict(timelines={}), ValueError, "at least one timeline"),
                           (dict(timelines=[fa3], figsize="ab"), TypeError, "figsize must be"),
                           (dict(timelines=[fa3], figsize=(10, 1)), ValueError, "leaves no room"),
                           (dict(timelines=[fa3], figsize=(1, 6)), ValueError, "too narrow")):
        with pytest.raises(err, match=what) as info:
            plot_block_steps(**bad)
        assert "\n" not in str(info.value)
    assert plt.get_fignums() == before                                        # no figure left behind


def test_backward_stage_numbers_match_the_kernel_header_and_the_vocabulary():
    """FV_BSTAGE_* of kernels/fv_trace.cuh are BWD_STAGES in order, fit FV_NSTAGE slots, and each is a
    step of FA2's Algorithm 2 in the one vocabulary; flash_bwd.cu uses every one of them."""
    from flashviz.records.timeline import BWD_STAGES

    header = (ROOT / "kernels" / "fv_trace.cuh").read_text()
    defined = {int(v): n.lower() for n, v in re.findall(r"#define FV_BSTAGE_(\w+) (\d+)", header)}
    assert [defined[k] for k in sorted(defined)] == [s.lower() for s in BWD_STAGES]
    assert len(BWD_STAGES) <= FV_NSTAGE
    for name in BWD_STAGES:
        assert steps.step(name).backward, name
    kernel = (ROOT / "kernels" / "flash_bwd.cu").read_text()
    assert {n.lower() for n in re.findall(r"FV_EVENT\([^,]+, FV_BSTAGE_(\w+),", kernel)} == set(defined.values())


def test_a_backward_trace_has_key_blocks_as_blocks_and_query_blocks_as_rows():
    """flash_bwd's records, written by hand: block = key block j of head h (its recorded i), rows =
    the query blocks it visits; the Timeline names its steps BWD_STAGES and splits b·H + h."""
    from flashviz.gpu.bwd_trace import GROUPS, backward_timeline
    from flashviz.records.timeline import BWD_STAGES

    def evs(i_list):
        out = [(0, -1, "load_Q", 0, 500)]                    # slot 0: load_KV in the backward's numbering
        for n, i in enumerate(i_list):
            t = 500 + 4000 * n
            out += [(w, i, "load_KV", t, t + 500) for w in (0, 7)]          # slot 1: load_Qi
            out += [(w, i, "load_K", t + 500, t + 2000) for w in (0, 7)]    # slot 2: recompute_P
        return out

    # causal, Tr = Tc = 3, H = 2: key block j sees query blocks j .. 2
    plan = {}
    for h in range(2):
        for j in range(3):
            cta = j + 3 * h
            plan[cta] = (cta, (j, h, 0), 0, evs(list(range(j, 3))), 500 + 4000 * (3 - j) + 100)
    meta = {k: v for k, v in META.items() if k != "kernel"}
    tl = backward_timeline(_buffer((3, 2, 1), GROUPS, 3, plan), grid=(3, 2, 1), Tr=3, **meta)
    assert tl.kernel == "bwd_teaching" and tl.stages == BWD_STAGES
    assert sorted(zip(tl.blocks["i"].tolist(), tl.blocks["h"].tolist())) == [(j, h) for j in range(3) for h in range(2)]
    assert tl.blocks["n_j"].tolist() == [3, 2, 1, 3, 2, 1]
    for j in range(3):                                   # the rows of key block j are query blocks j .. 2
        rows = sorted(set(tl.tiles["j"][tl.tiles["i"] == j].tolist()))
        assert rows == list(range(j, 3))
    assert len(tl.stage_events("load_Qi")) == 2 * 2 * (3 + 2 + 1)
    assert len(tl.stage_events("load_KV")) == 6 and np.all(tl.stage_events("load_KV")["j"] == -1)
