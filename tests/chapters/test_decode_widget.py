"""Chapter 9: the DecodeExplorer driven as a user would — sliders, Play, the "break it" toggles —
its frames against numbers computed here independently (``decode_attention`` and
``iomodel.decode_io`` called directly, the merge written out from the partials, dense float64
attention), its model of the SMs, its blitting against a full redraw, its exports and the widget
contract (tests/helpers/widget_contract.py)."""

import statistics
import time

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.text import Text
from widget_contract import assert_close_frees_every_comm, assert_recreating_leaks_no_figure

import flashviz as fv
from flashviz.decode import NUM_SMS, merge_partials, num_splits_heuristic
from flashviz.iomodel import decode_io
from flashviz.masking import split_ranges
from flashviz.replay.decode import DecodeReplay
from flashviz.views.style import FIT_WIDTH_PX, fmt_bytes, fmt_number
from flashviz.widgets.decode import MAX_CACHE_ROWS, DecodeExplorer, decode_inputs, paged_cache

matplotlib.use("Agg")

SMALL = dict(Nk=1024, d=64, key="test-decode")       # B = 1, H_kv = 8, G = 4: 8 blocks before splitting


@pytest.fixture
def w():
    w = DecodeExplorer(**SMALL)
    yield w
    w.close()


def independent_run(w, *, num_splits=None, rescale_check=False):
    """The widget's configuration run again here: its inputs, paged the same way, through
    decode_attention directly; the closed form decode_io; the dense reference per query head."""
    B, G, Nq, Nk = w.B.value, w.group.value, w.Nq.value, w.Nk.value
    H = G * w.H_kv
    ps = 1 if w.tiny_pages.value else w.page_size.value
    Q, K, V, _ = decode_inputs(B, H, w.H_kv, Nq, Nk, w.d_head, source=w.source, seed=w.seed, dtype=np.float16)
    Kp, Vp, table = paged_cache(K, V, ps, w.seed)
    ns = 1 if w.no_splits.value else num_splits
    r = fv.decode_attention(Q, Kp, Vp, num_splits=ns, Bc=w.Bc, causal=True, block_table=table, Nk=Nk)
    model = decode_io(Nq, Nk, w.d_head, H=H, H_kv=w.H_kv, num_splits=r.num_splits, Bc=w.Bc, itemsize=2,
                      page_size=ps, causal=True, B=B)
    ref = np.array([[fv.attention(Q[b, h].astype(np.float64), K[b, h // G].astype(np.float64),
                                  V[b, h // G].astype(np.float64), causal=True) for h in range(H)] for b in range(B)])
    return r, model, ref


def test_the_run_is_the_one_computed_here(w):
    r, model, ref = independent_run(w)
    assert np.array_equal(w.result.O, r.O) and np.array_equal(w.result.lse, r.lse)
    assert w.result.io == r.io == model == w.model
    Tc = 1024 // 64
    assert w.result.num_splits == r.num_splits == num_splits_heuristic(8, Tc) == w.num_splits.value == 16
    assert np.abs(w.reference - ref).max() < 1e-13                   # the same dense reference, batched there
    err = float(np.abs(r.O.astype(np.float64) - ref).max())
    assert w.errors["merge"] == pytest.approx(err, rel=1e-12) and err < 3e-3 and w.ok
    assert "✓" in w.status.value and "16 splits (heuristic)" in w.status.value
    s = w.show_frame(w.n_frames - 1)
    assert s.hbm_bytes == model.hbm_bytes and s.flops == model.flops
    assert s.bytes_by["K, V"] == model.reads["K"] + model.reads["V"]
    assert s.bytes_by["partials"] == sum(model.reads[t] + model.writes[t] for t in ("O_partial", "lse_partial"))
    assert s.bytes_by["block table"] == model.reads["block_table"] and sum(s.bytes_by.values()) == model.hbm_bytes
    assert f"{model.intensity:.1f} FLOP/byte" in w._view.caption.get_text()


@pytest.mark.parametrize("S", [16, 6])          # the heuristic's 16 splits of one key block; 6 of 2 or 3
def test_run_frames_follow_the_splits_on_the_sms(w, S):
    if S != 16:
        w.auto.value = False
        w.num_splits.value = S
    Tc, G, d = 16, 4, 64
    assert w.result.num_splits == S
    sizes = [j1 - j0 for j0, j1 in split_ranges(Tc, S)]
    assert w.n_frames == max(sizes) + S + 1                           # steps, one merge frame per split, write
    n_blocks = 8 * S
    assert n_blocks <= NUM_SMS
    kv_per_key = 2 * d * 2                                            # K and V, float16
    for t in range(max(sizes)):
        s = w.show_frame(t)
        assert s.phase == "run"
        busy = 8 * sum(n > t for n in sizes)                          # blocks that still have key block t
        assert s.sms_busy == busy == int((s.sm_split >= 0).sum())
        assert set(s.sm_block[s.sm_block >= 0]) == {b for b in range(n_blocks) if sizes[b % S] > t}
        keys = 8 * sum(min(t + 1, n) for n in sizes) * 64             # every KV head's keys read so far
        assert s.bytes_by["K, V"] == keys * kv_per_key
        assert s.bytes_by["Q"] == 8 * S * G * d * 2                    # Q once per split, in its first step
        assert f"{busy} of {NUM_SMS} SMs busy" in s.text
    assert w.show_frame(0).sm_progress[0] == 1 / sizes[0]             # block 0 (split 0): one key block done
    s = w.show_frame(max(sizes) - 1)
    assert s.partial_done.all() and s.merged == 0 and np.isnan(s.O).all()
    p = 4                                                              # float32 partials: 4 bytes an element
    assert s.bytes_by["partials"] == 8 * S * G * (d + 1) * p          # every split wrote its (O_s, lse_s)
    assert w._view.replay.sm_busy_share == pytest.approx(8 * Tc / (NUM_SMS * max(sizes)))


def test_the_merge_frames_are_the_merge_written_out(w):
    r, _, ref = independent_run(w)
    lse = np.array([p.lse[0, 0, -1] for p in r.partials], np.float64)          # sequence 0, head 0, newest row
    O = np.array([p.O[0, 0, -1] for p in r.partials], np.float64)
    exact = ref[0, 0, -1]
    run = w._view.replay.run_frames
    for s in range(len(lse)):
        st = w.show_frame(run + s)
        assert st.phase == "merge" and st.s == s and st.merged == s + 1
        m = lse[:s + 1].max()
        wts = np.exp(lse[:s + 1] - m)
        assert st.m == pytest.approx(m, abs=1e-5) and st.l == pytest.approx(wts.sum(), rel=1e-5)
        merged = (wts[:, None] * O[:s + 1]).sum(0) / wts.sum()
        assert np.abs(st.O - merged).max() < 1e-5
        assert st.err == pytest.approx(np.abs(st.O - exact).max(), rel=1e-9)
        old = lse[:s].max() if s else -np.inf
        assert st.alpha == pytest.approx(np.exp(old - m), abs=1e-6) and st.beta == pytest.approx(np.exp(lse[s] - m),
                                                                                               rel=1e-5)
        assert "merge split" in st.text
        numbers = w._view.merge.numbers.get_text()                    # the running state, in numbers
        assert f"m = {fmt_number(st.m)},  l = {fmt_number(st.l)}" in numbers
        assert f"β = {fmt_number(st.beta)}" in numbers
    assert st.err < 1e-6                                              # all splits merged: the exact row
    last = w.show_frame(w.n_frames - 1)
    assert last.phase == "write" and np.array_equal(last.O, r.O[0, 0, -1].astype(np.float64))
    # the panels draw these numbers
    v = w._view
    assert np.array_equal(v.merge.image.get_array()[0], last.O)
    assert np.abs(v.merge.image.get_array()[1] - exact).max() < 1e-13
    xs, ys = v.merge.err_line.get_data()
    assert list(xs) == list(range(1, len(lse) + 1)) and ys[-1] == pytest.approx(st.err)


def test_break_it_merge_without_rescaling_is_wrong_by_the_closed_form(w):
    w.no_rescale.value = True
    r, _, ref = independent_run(w)
    lse_p = np.stack([p.lse for p in r.partials]).astype(np.float64)
    O_p = np.stack([p.O for p in r.partials]).astype(np.float64)
    M = np.maximum.accumulate(lse_p, axis=0)
    wts = np.exp(lse_p - M)
    bad = (wts[..., None] * O_p).sum(0) / wts.sum(0)[..., None]
    assert np.abs(bad - merge_partials(lse_p, O_p, rescale=False)[0]).max() < 1e-12
    err = float(np.abs(bad - ref).max())
    assert w.errors["no rescale"] == pytest.approx(err, rel=1e-9) and err > 0.05     # the rising inputs: wrong
    assert "WRONG" in w.status.value and f"{err:.3g}" in w.status.value
    st = w.show_frame(w.n_frames - 1)
    assert np.abs(st.O_broken - bad[0, 0, -1]).max() < 1e-12
    assert st.err_broken == pytest.approx(np.abs(bad[0, 0, -1] - ref[0, 0, -1]).max())
    v = w._view
    img = v.merge.image.get_array()
    assert img.shape[0] == 3 and np.array_equal(img[2], st.O_broken)
    assert [t.get_text() for t in v.merge.image.axes.get_yticklabels()] == ["merged so far", "exact", "no rescale"]
    assert v.merge.bad_line.get_visible() and v.merge.bad_line.get_data()[1][-1] == pytest.approx(st.err_broken)
    w.no_rescale.value = False
    assert w._view.merge.image.get_array().shape[0] == 2 and "WRONG" not in w.status.value


def test_break_it_no_splits_leaves_the_sms_idle(w):
    w.no_splits.value = True
    assert w.num_splits.disabled and w.auto.disabled and w.result.num_splits == 1
    r, model, _ = independent_run(w)
    assert w.result.io == model and "O_partial" not in model.reads
    assert w.n_frames == 16                                           # Tc steps, no merge frames
    for k in (0, 7, 15):
        s = w.show_frame(k)
        assert s.sms_busy == 8 and s.phase == "run"                   # B·H_kv = 8 blocks, 124 SMs idle
    assert w._view.replay.sm_busy_share == pytest.approx(8 / NUM_SMS)
    assert "1 split (no splits)" in w.status.value and "8 blocks on 132 SMs" in w._view.caption.get_text()
    assert s.bytes_by["partials"] == 0 and s.hbm_bytes == model.hbm_bytes
    assert np.abs(s.O - w.reference[0, 0, -1]).max() < 1e-6           # the one split's output, exact
    w.no_splits.value = False                                         # "auto" again: the heuristic's 16
    assert w.result.num_splits == 16 == w.num_splits.value and w.num_splits.disabled and not w.auto.disabled


def test_break_it_tiny_pages_grow_the_block_table_reads(w):
    before = w.result.io.reads["block_table"]
    w.tiny_pages.value = True
    assert w.page_size.disabled and w.result.trace.page_size == 1
    r, model, _ = independent_run(w)
    bt = model.reads["block_table"]
    assert w.result.io == model and bt == 8 * 16 * 64 * 4             # one 4-byte entry per key of every KV head
    assert bt == 16 * before                                          # 16 times the 16-token pages' look-ups
    assert {k: v for k, v in model.reads.items() if k != "block_table"} == \
        {k: v for k, v in decode_io(1, 1024, 64, H=32, H_kv=8, num_splits=16, Bc=64, itemsize=2).reads.items()}
    rp = w._view.replay
    assert rp.num_pages == 1024 and rp.block_table.shape == (1, 1024)
    assert np.array_equal(np.sort(rp.block_table[0]), np.arange(1024))             # every pool page, shuffled
    legend = [t.get_text() for t in w._view.meters.axes[0].get_legend().get_texts()]
    assert any(t.startswith(f"block table {fmt_bytes(bt)}") for t in legend), legend
    s = w.show_frame(w._view.replay.run_frames - 1)
    assert s.bytes_by["block table"] == bt and (s.page_read == 1).all()
    w.tiny_pages.value = False
    assert w.result.trace.page_size == 16 and not w.page_size.disabled


def test_pages_are_read_by_every_kv_head_and_coloured_by_their_split(w):
    rp = w._view.replay
    assert rp.num_pages == 64 and rp.page_size == 16
    Q, K, V, _ = decode_inputs(1, 32, 8, 1, 1024, 64, seed=0, dtype=np.float16)
    _, _, table = paged_cache(K, V, 16, 0)
    assert np.array_equal(rp.block_table, table)                      # read back off the load_KV events
    starts = [c0 for c0, _ in w.result.trace.splits]
    for p in range(64):
        assert rp.page_split[table[0, p]] == np.searchsorted(starts, p * 16, side="right") - 1
    assert (w.show_frame(0).page_read == 1).all()                     # 16 splits of one key block: all at once
    w.auto.value = False
    w.num_splits.value = 6
    rp = w._view.replay
    first = {j0 for j0, _ in split_ranges(16, 6)}                    # step 0: each split's first key block
    read = w.show_frame(0).page_read
    for p in range(64):                                               # 4 pages of 16 keys a 64-key block
        assert read[table[0, p]] == (1.0 if p // 4 in first else 0.0), p     # by all 8 KV heads at once
    assert 0 < (read == 0).sum() < 64 and (w.show_frame(2).page_read == 1).all()


def test_sliders_rebuild_the_run(w):
    w.Nk.value = 2048
    assert w.result.trace.Nk == 2048 and w.n_frames == w.frame.max + 1
    w.group.value = 8
    assert w.result.O.shape == (1, 64, 1, 64) and w._view.replay.G == 8
    w.Nq.value = 3
    assert w.result.O.shape == (1, 64, 3, 64) and w.ok
    w.page_size.value = 64
    assert w.result.trace.page_size == 64 and w._view.replay.num_pages == 32
    w.B.value = 4                                                     # 32 blocks: fewer splits fill the SMs
    assert w.result.num_splits == num_splits_heuristic(32, 32) == w.num_splits.value
    r, model, ref = independent_run(w)
    assert w.result.io == model and np.array_equal(w.result.O, r.O)
    w.auto.value = False
    assert not w.num_splits.disabled and w.result.num_splits == num_splits_heuristic(32, 32)
    w.num_splits.value = 3
    assert w.result.num_splits == 3 and w.n_frames == -(-32 // 3) + 3 + 1 and "3 splits (chosen)" in w.status.value
    assert w.result.io == independent_run(w, num_splits=3)[1]


def test_more_blocks_than_sms_run_in_waves():
    w = DecodeExplorer(Nk=512, B=8, d=16, num_splits=3, key="decode-waves")          # 8·8·3 = 192 blocks
    try:
        rp = w._view.replay
        assert rp.n_blocks == 192 and rp.waves == 2
        steps = [j1 - j0 for j0, j1 in split_ranges(8, 3)]                         # 2, 3, 3 key blocks
        for b in range(NUM_SMS, 192):                                              # block b after block b − 132
            assert rp.block_start[b] == rp.block_start[b - NUM_SMS] + steps[(b - NUM_SMS) % 3]
        assert w.n_frames == rp.run_frames + 3 + 1 and rp.run_frames == max(
            rp.block_start[b] + steps[b % 3] for b in range(192))
        s = w.show_frame(0)
        assert s.sms_busy == NUM_SMS and list(s.sm_block) == list(range(NUM_SMS))
        last = w.show_frame(rp.run_frames - 1)
        assert set(last.sm_block[last.sm_block >= 0]) <= set(range(NUM_SMS, 192)) and last.sms_busy < NUM_SMS
    finally:
        w.close()


def test_meters_show_the_bytes_against_the_bandwidth(w):
    bw, label, source = w._view.bandwidth
    s = w.show_frame(0)
    text = w._view.meters.label.get_text().strip()
    assert text.startswith(fmt_bytes(s.hbm_bytes)) and f"{fmt_number(s.hbm_bytes / bw * 1e6)} µs" in text
    assert any(source in t.get_text() for t in w.fig.texts) and any(label in t.get_text() for t in w.fig.texts)
    assert w._view.meters.sm_label.get_text().strip() == f"{s.sms_busy} of {NUM_SMS} busy"


@pytest.mark.recorded_data
def test_the_bandwidth_is_the_recorded_copy_bandwidth():
    from flashviz.records.results import hbm_bandwidth, latest_results

    # the decode record's copy when one is installed (its own run), else the tensor-core record's
    rec = latest_results("decode")
    gbps = rec.get("copy_GBps") if rec else None
    if not gbps:
        rec = latest_results("mma")
        gbps = rec["ceilings"]["copy_GBps"]
    bw, label, source = hbm_bandwidth()
    assert bw == gbps * 1e9 and label == f"{gbps / 1e3:.2f} TB/s"
    assert rec["env"]["date"] in source and rec["source_file"] in source and "measured" in source


def test_play_and_step_buttons_drive_frames(w):
    w.show_frame(1)
    before = np.asarray(w.fig.canvas.buffer_rgba()).copy()
    w.play.value = 5                                                  # what a Play tick does
    assert w.state.k == 5 and w.state.phase == "merge"
    assert (np.asarray(w.fig.canvas.buffer_rgba()) != before).any()
    w.next_button.click()
    assert w.state.k == 6 and w.play.value == 6
    w.prev_button.click()
    w.prev_button.click()
    assert w.state.k == 4
    w.step_slider.value = 1
    assert w.state.k == 0


def test_blitted_frames_equal_a_full_redraw(w, tmp_path):
    from PIL import Image

    for k in range(w.n_frames):
        w.show_frame(k)
    w.show_frame(6)
    blit = np.asarray(w.fig.canvas.buffer_rgba())[..., :3].astype(int).copy()
    full = np.asarray(Image.open(w.save_png(tmp_path / "full.png")).convert("RGB")).astype(int)
    assert (np.abs(blit - full).sum(axis=-1) > 60).mean() < 0.002
    assert (full[:20, :300].sum(axis=-1) < 200).any()                 # the step line is in the export


def test_exports_and_the_png_canvas(tmp_path):
    from PIL import Image

    w = DecodeExplorer(Nk=512, d=32, no_rescale=True, canvas="png", key="decode-png")
    try:
        first = w._canvas_widget.value
        assert first[:8] == b"\x89PNG\r\n\x1a\n" and w._view.blitter is None
        w.show_frame(w.n_frames - 1)
        assert w._canvas_widget.value != first
        png = w.save_png(tmp_path / "f.png", 2)
        assert Image.open(png).size == (int(w.fig.bbox.width), int(w.fig.bbox.height))
        assert w.state.k == w.n_frames - 1                            # the current frame is back
        gif = w.save_gif(tmp_path / "run.gif", frames=range(0, w.n_frames, 3), fps=5)
        assert Image.open(gif).n_frames == len(range(0, w.n_frames, 3))
    finally:
        w.close()


def test_the_figure_fits_a_laptop_and_presenter_mode_scales_the_texts():
    w = DecodeExplorer(Nk=512, d=32, key="decode-fit")
    big = DecodeExplorer(Nk=512, d=32, text_scale=1.4, key="decode-fit-big")
    try:
        assert w.fig.bbox.width <= FIT_WIDTH_PX and big.fig.bbox.width == w.fig.bbox.width
        sizes = [t.get_fontsize() for t in w.fig.findobj(Text) if t.get_text().strip()]
        big_sizes = [t.get_fontsize() for t in big.fig.findobj(Text) if t.get_text().strip()]
        assert min(sizes) >= 7 and min(big_sizes) >= 9.8 - 1e-9
    finally:
        w.close()
        big.close()


def test_frames_are_fast_enough():
    w = DecodeExplorer(key="decode-speed")                            # the lesson's default: Nk = 4k, d = 128
    try:
        w.show_frame(1)
        times = []
        for k in list(range(w.n_frames)) * 3:
            t = time.perf_counter()
            w.show_frame(k)
            times.append(time.perf_counter() - t)
        assert statistics.median(times) < 0.15, statistics.median(times)
    finally:
        w.close()


def _picture(w, k):
    """Frame k as the live canvas shows it (RGB pixels), drawn the widget's way (blitted)."""
    w.show_frame(k)
    return np.asarray(w.fig.canvas.buffer_rgba())[..., :3].copy()


def test_break_it_toggles_rerun_only_what_they_change_and_draw_what_the_state_says(monkeypatch):
    """Ticking the three "break it" toggles one after another took ~0.6 s each here (issue 24 saw
    ~6 s for the three in a browser) with no busy sign: every tick made the inputs, the dense
    reference of all 32 heads and the run again. Now a tick runs only what it changes — no splits and tiny pages one
    decode_attention each, no rescale nothing (the replay holds both merges) — and a tick switched
    back finds its run; each picture is the one a widget made with those toggles draws. (The work a
    tick does is asserted by counting the runs, not by a clock: a 2-core box under load took 2.9 s
    for the three ticks that take 0.7 s idle.)"""
    import flashviz.widgets.decode as mod

    calls = {"attention": 0, "decode_attention": 0, "decode_inputs": 0}

    def counted(name):
        real = getattr(mod, name)

        def f(*a, **kw):
            calls[name] += 1
            return real(*a, **kw)
        return f

    for name in calls:
        monkeypatch.setattr(mod, name, counted(name))
    w = DecodeExplorer(key="decode-toggles")                        # the lesson's default: Nk = 4k, d = 128
    try:
        assert calls == {"attention": 8, "decode_attention": 1, "decode_inputs": 1}     # one per KV head
        k = w.n_frames - 2                                            # the last merge frame
        before = _picture(w, k)
        for name, runs in (("no_splits", 1), ("no_rescale", 0), ("tiny_pages", 1)):
            n = calls["decode_attention"]
            getattr(w, name).value = True
            assert calls["decode_attention"] - n == runs, name
        assert calls["attention"] == 8 and calls["decode_inputs"] == 1             # the inputs were kept
        # what the state says: one split over pages of one token, both merges shown
        assert w.result.num_splits == 1 and w.result.trace.page_size == 1 and w._view.broken
        r, model, ref = independent_run(w)
        assert w.result.io == r.io == model == w.model and np.array_equal(w.result.O, r.O)
        assert np.abs(w.reference - ref).max() < 1e-13 and w.ok
        assert "1 split (no splits)" in w.status.value and "nothing to merge with one split" in w.status.value
        fresh = DecodeExplorer(no_splits=True, no_rescale=True, tiny_pages=True, key="decode-toggles-fresh")
        try:
            assert fresh.n_frames == w.n_frames
            for j in (0, w.n_frames - 1):
                assert np.array_equal(_picture(w, j), _picture(fresh, j)), j
        finally:
            fresh.close()
        for name in calls:                                            # count w's calls only
            calls[name] = 0
        # switched back, last first: every run is kept, nothing is run again; the first picture
        for name in ("tiny_pages", "no_rescale", "no_splits"):
            getattr(w, name).value = False
        assert calls == {"attention": 0, "decode_attention": 0, "decode_inputs": 0}
        assert w.result.num_splits == num_splits_heuristic(8, 64) and w.result.trace.page_size == 16
        assert not w._view.broken
        assert np.array_equal(_picture(w, k), before)
        # another shape: new inputs and reference, then the toggle runs on them
        w.Nk.value = 2048
        assert calls == {"attention": 8, "decode_attention": 1, "decode_inputs": 1}
        w.tiny_pages.value = True
        assert calls["decode_attention"] == 2 and w.result.trace.Nk == 2048 and w.result.trace.page_size == 1
        r, model, _ = independent_run(w)
        assert w.result.io == model and np.array_equal(w.result.O, r.O)
    finally:
        w.close()


def test_too_big_a_cache_is_refused_and_a_slider_keeps_the_previous_run():
    with pytest.raises(ValueError) as info:
        DecodeExplorer(Nk=16384, B=8, key="decode-big")
    assert "\n" not in str(info.value) and f"limit {MAX_CACHE_ROWS:,}" in str(info.value)
    # B's slider ends where the cache fits; only a cache too long for one sequence (16 KV heads ×
    # 16,384 keys) is still reachable by a slider, and then the previous run stays, said so
    w = DecodeExplorer(Nk=8192, B=1, H_kv=16, d=16, canvas="png", key="decode-big-heads")
    try:
        before = w.result
        w.Nk.value = 16384
        assert w.result is before and w.result.trace.Nk == 8192
        assert "too many to record" in w.status.value and "Showing the previous run" in w.status.value
    finally:
        w.close()


@pytest.mark.parametrize("kw,exc,words", [
    (dict(Nk=0), ValueError, "Nk must be an integer between 1 and 16,384"),
    (dict(Nk=2.0), TypeError, "Nk must be an integer"),
    (dict(B=17), ValueError, "B must be an integer between 1 and 16"),
    (dict(group=0), ValueError, "group must be an integer between 1 and 16"),
    (dict(num_splits="many"), ValueError, "num_splits must be 'auto' or an integer between 1 and 128"),
    (dict(num_splits=0), ValueError, "num_splits must be an integer between 1 and 128"),
    (dict(num_splits=2.5), TypeError, "num_splits must be an integer"),
    (dict(page_size=300), ValueError, "page_size must be an integer between 1 and 256"),
    (dict(Nq=9), ValueError, "Nq must be an integer between 1 and 8"),
    (dict(d=48), ValueError, "d must be one of 16, 32, 64, 128"),
    (dict(Bc=8), ValueError, "Bc must be one of 16, 32, 64, 128"),
    (dict(no_rescale="yes"), TypeError, "no_rescale must be True or False"),
    (dict(source="real"), ValueError, "source must be one of rising, random"),
    (dict(dtype="int8"), ValueError, "dtype must be one of"),
    (dict(seed=-1), ValueError, "seed must be an integer >= 0"),
])
def test_bad_arguments_one_line_errors(kw, exc, words):
    plt.close("all")
    with pytest.raises(exc) as info:
        DecodeExplorer(**kw)
    assert "\n" not in str(info.value) and words in str(info.value), str(info.value)
    assert not plt.get_fignums()


def test_replay_refuses_what_is_not_a_recorded_decode():
    Q, K, V = np.ones((2, 1, 4)), np.ones((1, 8, 4)), np.ones((1, 8, 4))
    r = fv.decode_attention(Q, K, V, num_splits=2, Bc=4)
    with pytest.raises(ValueError, match="record=True"):
        DecodeReplay(r, r.O)
    r = fv.decode_attention(Q, K, V, num_splits=2, Bc=4, page_size=2, record=True)
    with pytest.raises(ValueError, match="shape"):
        DecodeReplay(r, r.O[0])
    rp = DecodeReplay(r, r.O)
    with pytest.raises(IndexError):
        rp.state(rp.n_frames)


def test_recreating_closes_the_old_figure_and_close_frees_every_comm():
    w = assert_recreating_leaks_no_figure(lambda: DecodeExplorer(Nk=256, d=16, H_kv=2))
    w._render(0)                                                      # drawing after close does nothing
    assert_close_frees_every_comm(lambda: DecodeExplorer(Nk=256, d=16, H_kv=2, key="decode-comms"))


def test_two_instances_are_independent():
    a = DecodeExplorer(Nk=512, d=16, key="decode-a")
    b = DecodeExplorer(Nk=512, d=16, key="decode-b")
    try:
        a.no_splits.value = True
        a.show_frame(2)
        assert b.result.num_splits > 1 and b.state.k == 0 and a.fig is not b.fig
    finally:
        a.close()
        b.close()


def test_the_replay_layer_loads_no_plotting_or_widgets():
    import subprocess
    import sys

    code = ("import sys, flashviz.replay.decode; "
            "print([m for m in ('matplotlib', 'ipywidgets', 'cupy') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_b_slider_ends_where_the_cache_would_be_too_long_to_record(monkeypatch):
    """B's slider ends at max_batch(H_kv, Nk) (B·H_kv·Nk <= MAX_CACHE_ROWS): a longer cache clamps B
    in the same rebuild, so the picture always shows the controls' values, never a stale run."""
    from flashviz.widgets import decode as dw

    w = fv.DecodeExplorer(canvas="png", Nk=1024, B=12)
    try:
        assert w.B.max == 16 == dw.MAX_CACHE_ROWS // (w.H_kv * 1024)
        built = []
        real = type(w)._make_view
        monkeypatch.setattr(type(w), "_make_view", lambda self: built.append(1) or real(self))
        w.Nk.value = 4096
        assert (w.B.max, w.B.value, len(built)) == (4, 4, 1)
        assert w.inputs[1].shape[:3] == (4, w.H_kv, 4096) and "⚠" not in w.status.value
        w.Nk.value = 16384
        assert (w.B.max, w.B.value) == (1, 1) and w.inputs[1].shape[0] == 1 and "⚠" not in w.status.value
        w.Nk.value = 1024
        assert (w.B.max, w.B.value) == (16, 1)          # a higher end keeps B
        w.B.value = 16
        assert w.inputs[1].shape[0] == 16 and "⚠" not in w.status.value
    finally:
        w.close()
