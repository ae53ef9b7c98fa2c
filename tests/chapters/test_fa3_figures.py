"""Fa3Figures: chapter 8 in the app as three captioned PNG tabs (the roles schematic, the measured
steps, the benchmark), from the committed JSON: every number of the captions recomputed here
from the raw keys of the files; tabs drawn when first shown and kept per process; one-line
errors for bad arguments; close() closes every widget it made; the app builds it at its size.
Text layout at the app's sizes and both text scales: tests/chapters/test_no_overlap.py
(``test_image_chapters_*``)."""

import json
import re

import ipywidgets as W
import matplotlib
import matplotlib.pyplot as plt
import pytest
from widget_contract import assert_close_frees_every_comm

from flashviz.records.files import package_dir
from flashviz.widgets import fa3_figures, figure_tabs
from flashviz.widgets.app import APP_FIGURE, PRESENTER_FIGURE, ChapterApp, _accepted
from flashviz.widgets.fa3_figures import Fa3Figures, captions

matplotlib.use("Agg")

RES = package_dir("flashviz.results")
PNG = b"\x89PNG\r\n\x1a\n"
CHAPTER = "8 · FlashAttention-3 on Hopper"


def _newest(pattern):
    files = sorted(RES.glob(pattern), key=lambda f: (re.search(r"\d{4}-\d{2}-\d{2}", f.name)[0], f.name))
    return json.loads(files[-1].read_text())


def _span(xs):
    return f"{min(xs):.2f}–{max(xs):.2f}x"


def _step_keys(row):
    """The steps' implementations in a raw steps-probe row, from its own keys: the FA2 kernel,
    the FEAT 0 build of the default blocks, the default build, the FEAT 3 build."""
    f0 = [k[:-len("_kernel_ms")] for k in row if re.fullmatch(r"fa3_\d+x\d+_f0_kernel_ms", k)]
    if len(f0) != 1:
        return None
    blk = f0[0][len("fa3_"):-len("_f0")]
    keys = ["wgmma", f"fa3_{blk}_f0", "fa3", f"fa3_{blk}_f3"]
    return keys if all(f"{k}_kernel_ms" in row for k in keys) else None


@pytest.mark.recorded_data
def test_recorded_data_captions_carry_the_numbers_of_the_json_by_method():
    steps, mma = _newest("probe-fa3-steps-*.json"), _newest("mma-*.json")
    w = Fa3Figures(key="t-fa3-captions", dpi=30)
    try:
        # steps: every row that timed the four steps; each step's gain = the step before's
        # kernel-only time ÷ its own; the default build ("fa3") against cuDNN, same method
        rows = [(r, k) for r in steps["times"] if (k := _step_keys(r))]
        assert len(rows) == 4
        cap = w.captions["steps"]
        assert "kernel-only (CUDA-graph replay of 10 calls, median of 7)" in cap and "One run" in cap
        assert f"N = {rows[0][0]['N']:,}" in cap and f"over {len(rows)} shapes" in cap
        for n, what in ((1, "TMA + producer"), (2, "ping-pong"), (3, "intra-warpgroup overlap")):
            gains = [r[f"{k[n - 1]}_kernel_ms"] / r[f"{k[n]}_kernel_ms"] for r, k in rows]
            assert f"{what} {_span(gains)}" in cap, (what, cap)
        cudnn = [r["sdpa_cudnn_kernel_ms"] / r["fa3_kernel_ms"] for r, _ in rows]
        assert f"(ping-pong) at {_span(cudnn)} cuDNN's speed" in cap
        # benchmark: the rows with fa3 times; their time ÷ fa3's, public call and kernel-only
        bench = [r for r in mma["bench"] if "fa3_call_ms" in r and "fa3_kernel_ms" in r]
        cap = w.captions["benchmark"]

        def vs(other, m):
            return [r[f"{other}_{m}_ms"] / r[f"fa3_{m}_ms"] for r in bench]

        assert f"Over {len(bench)} shapes (N = {min(r['N'] for r in bench):,}–{max(r['N'] for r in bench):,})" in cap
        assert (f"{_span(vs('sdpa_cudnn', 'call'))} SDPA-cuDNN's speed and {_span(vs('sdpa_flash', 'call'))} "
                f"SDPA-flash's (FA2) by public call (CUDA events, median)") in cap
        assert f"kernel-only (profiler): {_span(vs('sdpa_cudnn', 'kernel'))} and {_span(vs('sdpa_flash', 'kernel'))}" in cap
        assert f"in {sum(x >= 1 for x in vs('sdpa_cudnn', 'call'))} of {len(bench)} shapes" in cap
        # roles: a schematic; the busy shares summed from the schedules' tensor-core bars
        from flashviz.records.fa3_records import fa3_config
        from flashviz.replay.fa3_roles import roles_schedule
        cfg = fa3_config(128)
        cap = w.captions["roles"]
        assert cap.startswith("Schematic, not a measurement") and "made-up durations" in cap
        assert f"{cfg.consumers} consumer warpgroups + 1 producer, {cfg.stages}-slot K/V ring" in cap
        for pp, words in ((False, "in lock-step"), (True, "with ping-pong")):
            s = roles_schedule(cfg.consumers, cfg.stages, 128, 4, pp)
            busy = sum(b.t1 - b.t0 for b in s.bars if b.kind == "tc") / max(b.t1 for b in s.bars)
            assert f"{100 * busy:.0f} % of the span {words}" in cap or f"{100 * busy:.0f} % {words}" in cap, cap
        # timeline: the recorded FA2 wgmma run at d = 128, N = 4096 (and fa3's once recorded); the
        # overlap share of each, the run's device and date, and that fa3's is not recorded yet
        from flashviz.records.timeline import latest_timeline, recorded_timelines
        from flashviz.records.timeline_stats import softmax_overlap
        tl = latest_timeline("wgmma", d=128, N=4096)
        cap = w.captions["timeline"]
        assert cap.startswith("Measured (GPU timeline, one traced run each, d = 128, N = 4,096)")
        assert (f"FA2 on wgmma, {tl.device}, {tl.date}: a warpgroup's softmax under another's products "
                f"{100 * softmax_overlap(tl)[0]:.0f} % of its time") in cap
        fa3 = [r for r in recorded_timelines() if r["kernel"] == "fa3"]
        assert ("no fa3 timeline is recorded yet" in cap) == (not fa3)
        for line in w.captions.values():
            assert line and "\n" not in line
        header = w.widget.children[0].value
        assert steps["env"]["device"] in header and "probe-fa3-steps-" in header and "mma-" in header
    finally:
        w.close()


@pytest.mark.recorded_data
def test_tabs_draw_when_first_shown_and_are_kept_per_process(monkeypatch):
    figure_tabs.PNG_CACHE.clear()
    drawn = []
    real = Fa3Figures.figure

    def counting(self, name):
        drawn.append(name)
        return real(self, name)

    monkeypatch.setattr(Fa3Figures, "figure", counting)
    w = Fa3Figures(key="t-fa3-lazy", dpi=30)
    try:
        assert drawn == ["roles"]                                           # the first tab at once
        assert [isinstance(p.children[1], W.Image) for p in w.tabs.children] == [True, False, False, False]
        w.tabs.selected_index = 2                                           # another, when it is shown
        assert drawn == ["roles", "benchmark"] and isinstance(w.tabs.children[2].children[1], W.Image)
        w.tabs.selected_index = 0
        w.tabs.selected_index = 2                                           # shown again: not redrawn
        assert drawn == ["roles", "benchmark"]
        pngs = [w.image(name).value for name in Fa3Figures.NAMES]
        assert drawn == ["roles", "benchmark", "steps", "timeline"]
        assert [p.children[1].value for p in w.tabs.children] == pngs
        assert all(p[:8] == PNG and len(p) > 5_000 for p in pngs)
    finally:
        w.close()
    again = Fa3Figures(key="t-fa3-lazy-2", dpi=30)                         # the same size: from the cache
    try:
        assert [again.image(name).value for name in Fa3Figures.NAMES] == pngs
        assert drawn == ["roles", "benchmark", "steps", "timeline"]
    finally:
        again.close()
    bigger = Fa3Figures(key="t-fa3-lazy-3", dpi=30, text_scale=1.4)         # another text scale: drawn anew
    try:
        assert drawn[-1] == "roles" and len(drawn) == 5 and bigger.image("roles").value != pngs[0]
    finally:
        bigger.close()
    assert {k[:2] for k in figure_tabs.PNG_CACHE} == {("Fa3Figures", n) for n in Fa3Figures.NAMES}


def test_bad_arguments_raise_one_line_errors():
    for bad, err in (({"dpi": 0}, ValueError), ({"dpi": True}, ValueError), ({"dpi": 601}, ValueError),
                     ({"figsize": "big"}, ValueError), ({"figsize": (-1, 2)}, ValueError), ({"figsize": (11,)}, ValueError),
                     ({"figsize": (40, 20), "dpi": 300}, ValueError),          # 12,000 × 7,636 pixels
                     ({"text_scale": 0.1}, ValueError), ({"text_scale": 3}, ValueError),
                     ({"text_scale": "big"}, TypeError), ({"text_scale": None}, TypeError), ({"key": []}, TypeError)):
        with pytest.raises(err) as e:
            Fa3Figures(**bad)
        assert "\n" not in str(e.value), bad
    with pytest.raises(ValueError, match="million pixels"):
        Fa3Figures(figsize=(40, 20), dpi=300)
    w = Fa3Figures(key="t-fa3-names", dpi=30)
    try:
        for call in (w.figure, w.image):
            with pytest.raises(ValueError, match="name must be one of"):
                call("dram")
    finally:
        w.close()


def test_without_recordings_the_tabs_say_so(monkeypatch):
    assert captions(None, None, None, None) == {"roles": "", "steps": "", "benchmark": "", "timeline": ""}
    monkeypatch.setattr(fa3_figures, "latest_probe", lambda run="steps": None)
    monkeypatch.setattr(fa3_figures, "latest_results", lambda kind="mma": None)
    monkeypatch.setattr(fa3_figures, "recorded_timelines", lambda: [])
    figure_tabs.PNG_CACHE.clear()
    w = Fa3Figures(key="t-fa3-none", dpi=30)
    try:
        assert w.captions["steps"] == w.captions["benchmark"] == w.captions["timeline"] == "" and w.captions["roles"]
        assert isinstance(w.image("roles"), W.Image)                    # the schematic needs no recording
        for name in ("steps", "benchmark", "timeline"):
            note = w.image(name)
            assert isinstance(note, W.HTML) and Fa3Figures.MISSING in note.value
    finally:
        w.close()
    figure_tabs.PNG_CACHE.clear()


def test_close_frees_every_comm_and_a_rerun_replaces_the_widget():
    assert_close_frees_every_comm(lambda: Fa3Figures(key="t-fa3-comm", dpi=30), at_least=8)
    first = Fa3Figures(key="t-fa3-rerun", dpi=30)
    second = Fa3Figures(key="t-fa3-rerun", dpi=30)            # the same cell run again
    try:
        assert first.widget.comm is None and first.tabs.comm is None and second.widget.comm is not None
    finally:
        second.close()
        second.close()                                        # idempotent
    assert plt.get_fignums() == []


@pytest.mark.recorded_data
def test_the_app_builds_chapter_8_at_its_size_and_text_scale():
    assert _accepted(Fa3Figures, PRESENTER_FIGURE) == {k: PRESENTER_FIGURE[k] for k in ("figsize", "dpi", "text_scale")}
    for presenter in (False, True):
        app = ChapterApp(CHAPTER, presenter=presenter, prefetch=False, key=("t-fa3-app", presenter))
        try:
            (w,) = app.current
            assert isinstance(w, Fa3Figures) and app.status.value == ""
            assert w.text_scale == (PRESENTER_FIGURE["text_scale"] if presenter else 1.0)
            img = w.tabs.children[0].children[1]
            assert isinstance(img, W.Image) and app.body.children == (w.widget,)
            width = int.from_bytes(img.value[16:20], "big")                 # the PNG's IHDR width, pixels
            fig = PRESENTER_FIGURE if presenter else APP_FIGURE
            assert width == round(fig["figsize"][0] * fig["dpi"])               # the roles figure: 11 in wide
        finally:
            app.close()
    assert plt.get_fignums() == []
