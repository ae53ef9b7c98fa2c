"""Chapter 3 (tiling) runs top to bottom; its widgets and exercises are then driven in the same kernel."""

from pathlib import Path

from nbutil import run_notebook, widget_views

ROOT = Path(__file__).resolve().parents[2]

DRIVE = """
import numpy as np
from flashviz.iomodel import flash_forward_io
assert type(w.fig.canvas).__name__ == "Canvas"            # a real ipympl canvas
before = np.asarray(w.fig.canvas.buffer_rgba()).copy()
w.play.value = 9                                           # what a Play tick does
assert w.state.k == 9 and (np.asarray(w.fig.canvas.buffer_rgba()) != before).any()
for k in range(w.n_frames):
    w.show_frame(k)
assert w.state.hbm_bytes == flash_forward_io(64, 64, 32, Br=16, Bc=16).hbm_bytes
w.Br.value = 32                                            # a slider rebuilds the run
assert w.result.trace.Tr == 2 and w.frame.value == 0
assert "WRONG" in broken.status.value and not broken.result.trace.rescale
# the stubs were reported, not raised; the right answers pass
assert my_tiles is None and my_bytes is None
r1 = check_tile_count(28, Nq=200, Nk=200, Br=32, Bc=64)
r2 = check_run_bytes(flash_forward_io(512, 512, 64, Br=128, Bc=128).hbm_bytes, N=512, d=64, Br=128, Bc=128, itemsize=4)
assert r1.ok and r2.ok
w.close(); broken.close(); w.close()
print("DRIVEN-OK")
"""


def test_nb_03_runs_and_is_driven(tmp_path, monkeypatch):
    nb, texts = run_notebook(ROOT / "notebooks" / "03_tiling.ipynb", tmp_path, monkeypatch, DRIVE)
    assert len(widget_views(nb)) == 2                       # the explainer and the "break it" one
    assert "DRIVEN-OK" in texts
    assert texts.count("✗ Not yet: replace the placeholder") == 2       # both stubs, reported
    assert texts.count("✓ Right") == 2                                  # the answers given by the driver
    assert "← no S, no P" in texts and "'S'" not in texts.split("← no S")[0].split("bytes written")[1]
    table = [line for line in texts.splitlines() if line.strip()[:3].strip().isdigit() and "MiB" not in line
             and line.split()[-2] in ("True", "False")]
    assert len(table) == 5 and all(line.split()[-2] == "True" for line in table)   # IO model = the runs
    assert "max |by hand − the run's O_3|" in texts
    assert "rescale=False: max |O − O_ref|" in texts
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.get("output_type") == "error" or o.get("name") == "stderr"
                and "Traceback" in o.get("text", "")]
