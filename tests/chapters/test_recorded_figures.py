"""RecordedFigures: the chapter-7 results as captioned PNG figures (app mode), from the JSON;
their texts at the notebook's and the presenter's text scale (no overlap, nothing off the
figure, presenter texts large)."""

import functools
import json

import ipywidgets as W
import matplotlib
import matplotlib.pyplot as plt
import pytest
from test_no_overlap import PRESENTER_MIN_PT, text_problems, visible_texts
from widget_contract import assert_close_frees_every_comm

from flashviz import report
from flashviz.records.files import package_dir
from flashviz.widgets import figure_tabs
from flashviz.widgets.app import APP_FIGURE, PRESENTER_FIGURE, _accepted
from flashviz.widgets.recorded_figures import RecordedFigures, captions

matplotlib.use("Agg")

RES = package_dir("flashviz.results")


def _load(prefix):
    f = sorted(p for p in RES.iterdir() if p.name.startswith(prefix) and p.name.endswith(".json"))[-1]
    return json.loads(f.read_text())


@pytest.mark.recorded_data
def test_recorded_data_figures_are_pngs_and_captions_carry_the_numbers_by_method():
    mma, dram = _load("mma-"), _load("dram-")
    w = RecordedFigures(key="t-rf", dpi=40)
    try:
        assert isinstance(w.tabs.children[0].children[1], W.Image)       # the first tab drawn at once
        assert not isinstance(w.tabs.children[1].children[1], W.Image)
        w.tabs.selected_index = 1                                          # another, when it is shown
        assert isinstance(w.tabs.children[1].children[1], W.Image)
        pngs = [w.image(name).value for name in ("benchmark", "sweep", "dram")]
        assert [page.children[1].value for page in w.tabs.children] == pngs  # each shown in its tab
        assert len(pngs) == 3 and all(p[:8] == b"\x89PNG\r\n\x1a\n" and len(p) > 5_000 for p in pngs)
        from_n = report.FROM_N["wgmma"]   # the range of the README's table (and of chapter 7)
        long = [r for r in mma["bench"] if r["N"] >= from_n]
        cap = w.captions["benchmark"]
        assert cap.startswith(f"For N ≥ {from_n}, ")
        by_call = [r["sdpa_flash_call_ms"] / r["wgmma_call_ms"] for r in long]        # public call, the headline
        by_kernel = [r["sdpa_flash_kernel_ms"] / r["wgmma_kernel_ms"] for r in long]  # kernel-only
        cudnn = [r["sdpa_cudnn_call_ms"] / r["wgmma_call_ms"] for r in long]
        assert f"by public call (CUDA events, median), the wgmma kernel is {min(by_call):.2f}–{max(by_call):.2f}x" in cap
        assert f"and {min(cudnn):.2f}–{max(cudnn):.2f}x cuDNN" in cap
        assert f"kernel-only (profiler): {min(by_kernel):.2f}–{max(by_kernel):.2f}x" in cap
        sweep = [r for r in mma["sweep"] if r["variant"] == "wgmma" and r["d"] == 64 and not r["causal"]]
        fast = min(sweep, key=lambda r: r["kernel_ms"])
        assert "kernel-only time" in w.captions["sweep"]
        assert f"{fast['Br']}×{fast['Bc']} is fastest ({fast['kernel_ms']:.2f} ms)" in w.captions["sweep"]
        meas = [r["dram_bytes"] for r in dram["rows"] if r["impl"] == "mma"]
        assert f"Measured {min(meas) / 1e6:.0f}–{max(meas) / 1e6:.0f} MB" in w.captions["dram"]
        assert "H200" in w.widget.children[0].value
    finally:
        w.close()


def test_captions_without_results_are_empty_and_bad_arguments_raise():
    assert captions(None, None) == {"benchmark": "", "sweep": "", "dram": ""}
    for bad in ({"dpi": 0}, {"dpi": True}, {"figsize": "big"}, {"figsize": (-1, 2)}, {"text_scale": 0.1},
                {"text_scale": 3}):
        with pytest.raises(ValueError):
            RecordedFigures(key="t-bad", **bad)
    with pytest.raises(TypeError, match="text_scale"):
        RecordedFigures(key="t-bad", text_scale="big")


def test_close_frees_every_comm():
    assert_close_frees_every_comm(lambda: RecordedFigures(key="t-rf-comm", dpi=30), at_least=8)


#: the sizes the figures are drawn at: the notebook's default, and the app's (ChapterApp passes
#: its figure: 11 in wide, so each figure is 1.1 times its default inches), at each text scale
#: (overlap depends on inches and text scale only: dpi scales texts and figure alike)
FIGURE_SIZES = {"notebook": {}, "app": {"figsize": APP_FIGURE["figsize"]}}
TEXT_SCALES = {"default": 1.0, "presenter": PRESENTER_FIGURE["text_scale"]}


@functools.cache
def _scan(size: str, mode: str):
    """{figure name: (overlap problems, {text: points})} of the three figures, each built as the
    widget builds it (``figure(name)``) at ``size`` and the text scale of ``mode``."""
    w = RecordedFigures(key=("t-rf-texts", size, mode), dpi=60, text_scale=TEXT_SCALES[mode], **FIGURE_SIZES[size])
    out = {}
    try:
        for name in RecordedFigures.NAMES:
            try:
                fig = w.figure(name)
            except ValueError:                     # no recording of this kind in the installation
                continue
            try:
                problems = text_problems(fig)
                out[name] = (problems, {t.get_text(): t.get_fontsize()
                                        for t, _ in visible_texts(fig, fig.canvas.get_renderer())})
            finally:
                plt.close(fig)
    finally:
        w.close()
    return out


@pytest.mark.recorded_data
@pytest.mark.parametrize("mode", list(TEXT_SCALES))
@pytest.mark.parametrize("size", list(FIGURE_SIZES))
def test_no_text_overlaps_or_leaves_the_figures(size, mode):
    found = _scan(size, mode)
    assert set(found) == set(RecordedFigures.NAMES), sorted(found)
    problems = [f"{name}: {p}" for name, (ps, _) in found.items() for p in ps]
    assert not problems, f"{size} size, {mode} text:\n" + "\n".join(problems)


@pytest.mark.recorded_data
@pytest.mark.parametrize("size", list(FIGURE_SIZES))
def test_presenter_texts_are_large_and_scaled(size):
    """Presenter mode: every text at least PRESENTER_MIN_PT, and each text drawn in both modes at
    the presenter's text scale times its notebook size."""
    scale = TEXT_SCALES["presenter"]
    for name in RecordedFigures.NAMES:
        default, presenter = _scan(size, "default")[name][1], _scan(size, "presenter")[name][1]
        small = {t: s for t, s in presenter.items() if s < PRESENTER_MIN_PT - 1e-6}
        assert not small, f"{name}: texts under {PRESENTER_MIN_PT} pt in presenter mode: {small}"
        both = default.keys() & presenter.keys()
        assert len(both) >= 5, (name, sorted(both))
        unscaled = {t: (default[t], presenter[t]) for t in both if abs(presenter[t] - scale * default[t]) > 0.05}
        assert not unscaled, f"{name}: (notebook pt, presenter pt) not scaled by {scale}: {unscaled}"


@pytest.mark.recorded_data
def test_the_app_passes_its_text_scale_and_the_png_cache_keeps_scales_apart():
    assert _accepted(RecordedFigures, PRESENTER_FIGURE)["text_scale"] == PRESENTER_FIGURE["text_scale"]
    figure_tabs.PNG_CACHE.clear()
    pngs = {}
    for scale in (1.0, 1.4):
        w = RecordedFigures(key=("t-rf-cache", scale), dpi=30, text_scale=scale)
        try:
            pngs[scale] = w.image("sweep").value
        finally:
            w.close()
    assert pngs[1.0] != pngs[1.4]
    assert {k[-1] for k in figure_tabs.PNG_CACHE if k[:2] == ("RecordedFigures", "sweep")} == {1.0, 1.4}
