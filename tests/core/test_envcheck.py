import matplotlib
import numpy as np
import pytest

import flashviz as fv
from flashviz.envcheck import TESTED, detect_frontend

matplotlib.use("Agg")


def test_report_lists_versions_frontend_and_gpu(capsys):
    rep = fv.check_environment()
    out = capsys.readouterr().out
    assert rep["packages"]["numpy"] == np.__version__ and rep["packages"]["matplotlib"] == matplotlib.__version__
    assert rep["frontend"] == "python" and "Agg" in " ".join(rep["advice"])
    assert isinstance(rep["gpu"], tuple) and ("GPU usable: yes" in out or "GPU usable: no" in out)
    assert "ipympl" in out and "ipywidgets" in out


def test_out_of_range_and_missing_packages_become_problems(monkeypatch):
    import flashviz.envcheck as ec

    real = ec._version
    monkeypatch.setattr(ec, "_version", lambda n: {"ipympl": "0.8.0", "ipywidgets": None}.get(n, real(n)))
    rep = fv.check_environment(verbose=False)
    assert any("ipympl 0.8.0 is outside the tested range" in p for p in rep["problems"])
    assert any("ipywidgets is not installed" in p for p in rep["problems"])


@pytest.mark.parametrize("var,value,expected", [("COLAB_RELEASE_TAG", "x", "colab"), ("VSCODE_PID", "1", "vscode")])
def test_frontend_detection_and_advice(monkeypatch, var, value, expected):
    monkeypatch.setenv(var, value)
    assert detect_frontend() == expected
    rep = fv.check_environment(verbose=False)
    assert any("canvas=\"png\"" in a for a in rep["advice"])


def test_tested_ranges_match_pyproject():
    from pathlib import Path

    tomllib = pytest.importorskip("tomllib")   # Python >= 3.11

    deps = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())["project"]["dependencies"]
    spec = {d.split(">=")[0].split("<")[0]: d for d in deps}
    for name in ("ipywidgets", "ipympl"):
        lo, hi = TESTED[name]
        assert f">={lo[0]}.{lo[1]}" in spec[name] and f"<{hi[0]}" in spec[name]


def test_env_var_forces_the_png_fallback(monkeypatch):
    monkeypatch.setenv("FLASHVIZ_CANVAS", "png")
    w = fv.TileExplorer(N=32, source="random", key="envpng")
    try:
        assert w._png_mode and w._canvas_widget.value[:4] == b"\x89PNG"
    finally:
        w.close()
