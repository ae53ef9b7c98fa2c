"""flashviz.records reads the committed records without a GPU: each of its modules imports in a
fresh process without CuPy, torch, matplotlib, ipywidgets or the GPU runner, and the GPU runner's public names
for them (``flashviz.gpu.latest_results``, ``Timeline``, ...) are the records' own objects."""

import subprocess
import sys

import pytest

MODULES = ["files", "results", "timeline", "timeline_stats", "fa3_records", "bwd_records", "provenance"]


@pytest.mark.parametrize("name", MODULES)
def test_a_records_module_loads_no_gpu_or_front_end_library(name):
    code = (f"import sys, flashviz.records.{name}; "
            "print([m for m in ('cupy', 'torch', 'matplotlib', 'ipywidgets', 'flashviz.gpu') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_runner_names_the_records_own_objects():
    import flashviz.gpu as g
    from flashviz.records import files, results, timeline

    assert g.latest_results is results.latest_results and g.kernel_source is files.kernel_source
    assert (g.Timeline, g.latest_timeline, g.recorded_timelines) == (
        timeline.Timeline, timeline.latest_timeline, timeline.recorded_timelines)
    from flashviz.gpu import latest_results
    assert latest_results is results.latest_results
