"""Chapter 1 runs top to bottom; its exercises say wrong for the stubs and right for the answers."""

from nbutil import ROOT, run_notebook

from flashviz.exercises import memory as ex
from flashviz.iomodel import standard_attention_io

DRIVE = """
from flashviz.exercises import memory as ex
r1 = ex.check_softmax_intensity(5 / 24)
r2 = ex.check_standard_bytes((4 * 4096 * 64 + 4 * 4096 ** 2) * 2, 4096, 64, itemsize=2)
assert r1.ok and r2.ok, (r1, r2)
assert len(rows) == 4 and all(r["mm_s"] > 0 and r["ew_s"] > 0 for r in rows)
print("DRIVEN-OK")
"""


def test_notebook_runs_and_checks_respond(tmp_path, monkeypatch):
    nb, text = run_notebook(ROOT / "notebooks" / "01_memory_wall.ipynb", tmp_path, monkeypatch, DRIVE)
    assert "DRIVEN-OK" in text
    reprs = "".join(o.get("data", {}).get("text/plain", "") for c in nb.cells if c.cell_type == "code"
                    for o in c.outputs)
    assert reprs.count("✗ Not yet") == 3            # the three stubs, reported in one line each
    assert "Traceback" not in text


def test_exercise_checks_against_closed_forms():
    assert ex.check_softmax_intensity(5 / 24).ok and not ex.check_softmax_intensity(1.0).ok
    assert not ex.check_softmax_intensity("lots").ok
    right = standard_attention_io(4096, 4096, 64, itemsize=2).hbm_bytes
    assert right == (4 * 4096 * 64 + 4 * 4096 ** 2) * 2
    assert ex.check_standard_bytes(right, 4096, 64).ok
    bad = ex.check_standard_bytes(right / 2, 4096, 64)
    assert not bad.ok and "\n" not in bad.message and "136,314,880" not in bad.message  # never the answer
    N, d = 1024, 64
    assert ex.check_matmul_intensity(2 * N * N * d / ((2 * N * d + N * N) * 4), N, d).ok
