"""Notebooks run top to bottom headless, and their widgets are then driven in the same kernel."""

from pathlib import Path

import nbformat
import pytest
from nbutil import run_notebook, widget_views

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))

DRIVE_START_HERE = """
import numpy as np
assert w.n_frames > 10 and type(w.fig.canvas).__name__ == "Canvas"   # a real ipympl canvas
before = np.asarray(w.fig.canvas.buffer_rgba()).copy()
w.play.value = 7                               # what Play does on each tick
assert w.state.k == 7 and w.frame.value == 7
after = np.asarray(w.fig.canvas.buffer_rgba())
assert (before != after).any(), "the canvas did not change"
for k in range(w.n_frames):                    # step every frame
    w.show_frame(k)
w.Br.value = 16                                # a slider rebuilds the run and the grid
assert w.result.trace.Br == 16 and w.frame.value == 0
w.source.value = "adversarial"                 # the check cell reads the widget's own inputs
Q, K, V, desc = w.inputs
assert "adversarial" in desc.lower() and Q.shape[0] == w.result.trace.Nq
assert np.abs(w.result.O - fv.attention(Q, K, V, causal=w.result.trace.causal)).max() < 1e-4
w.rescale.value = False
assert "rescale OFF" in w.status.value
assert panel.params["Br"] == 16 and "Br = 16" in panel.config.value   # the GPU panel follows the sliders
print("DRIVEN-OK", w.n_frames)
"""


def test_there_are_notebooks():
    assert (ROOT / "notebooks" / "00_start_here.ipynb") in NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_committed_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None, f"{path.name} has outputs"


def test_start_here_runs_top_to_bottom_and_widgets_respond(tmp_path, monkeypatch):
    nb, texts = run_notebook(ROOT / "notebooks" / "00_start_here.ipynb", tmp_path, monkeypatch, DRIVE_START_HERE)
    assert widget_views(nb), "no widget was displayed"
    assert "DRIVEN-OK" in texts
    assert "equal: True" in texts


@pytest.mark.parametrize("path", [p for p in NOTEBOOKS if p.name[:2].isdigit() and p.name != "00_start_here.ipynb"],
                         ids=lambda p: p.name)
def test_every_chapter_has_its_own_driven_test(path):
    """Each chapter is executed and driven by tests/notebooks/test_nb_<number>.py."""
    assert (ROOT / "tests" / "notebooks" / f"test_nb_{path.name[:2]}.py").exists(), f"no driver test for {path.name}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_markdown_has_no_control_characters(path):
    """No tab, bell or other control character in the markdown: it renders as white space or
    nothing, not as what was meant (when the lessons were Python strings, "$B_r \\times B_c$"
    without a raw string became a tab; in the .md text a pasted tab would)."""
    import re
    nb = nbformat.read(path, as_version=4)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            bad = re.search(r"[\x00-\x09\x0b-\x1f]", cell.source)
            assert bad is None, f"cell {i}: {cell.source[max(0, bad.start() - 30):bad.end() + 10]!r}"
