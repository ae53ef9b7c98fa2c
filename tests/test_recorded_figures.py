"""RecordedFigures: the chapter-7 results as captioned PNG figures (app mode), from the JSON."""

import json

import ipywidgets as W
import pytest

from flashviz.gpu.common import package_dir
from flashviz.widgets.recorded_figures import RecordedFigures, captions
from widget_contract import assert_close_frees_every_comm

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
        long = [r for r in mma["bench"] if r["N"] >= 2048]
        cap = w.captions["benchmark"]
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
    for bad in ({"dpi": 0}, {"dpi": True}, {"figsize": "big"}, {"figsize": (-1, 2)}):
        with pytest.raises(ValueError):
            RecordedFigures(key="t-bad", **bad)


def test_close_frees_every_comm():
    assert_close_frees_every_comm(lambda: RecordedFigures(key="t-rf-comm", dpi=30), at_least=8)
