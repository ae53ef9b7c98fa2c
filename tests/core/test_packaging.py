"""An installed (non-editable) flashviz finds its kernels, data and recorded results."""

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_wheel_contains_kernels_data_and_results(tmp_path):
    # build from a copy without build/: setuptools would otherwise reuse build/lib, whose stale
    # modules hide a package missing from pyproject's list
    src = tmp_path / "src"
    # nor the folders other test processes write into while this one copies (pytest-xdist runs them at
    # once: Hypothesis's example database, the browser artifacts, the lessons' working copy, caches)
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".git", ".venv", "build", "*.egg-info", "__pycache__",
                                                            ".pytest_cache", "node_modules", ".hypothesis",
                                                            "artifacts", "lessons", ".ruff_cache", ".whl", ".gl",
                                                            ".device"))
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                           "-w", str(tmp_path), str(src)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (wheel,) = tmp_path.glob("flashviz-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for cu in [*(ROOT / "kernels").glob("*.cu"), *(ROOT / "kernels").glob("*.cuh")]:
        assert f"flashviz/kernels/{cu.name}" in names
    assert "flashviz/data/real_qkv.npz" in names
    modules = {py.relative_to(ROOT).as_posix() for py in (ROOT / "flashviz").rglob("*.py")}
    installed = {n for n in names if n.endswith(".py") and n.split("/")[1] not in ("kernels", "results")}
    assert modules == installed  # every package of flashviz/, and no stale module
    for js in (ROOT / "benchmarks" / "results").glob("*.json"):
        assert f"flashviz/results/{js.name}" in names

    # install it into a throwaway target and read the kernel through the installed package
    target = tmp_path / "site"
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target),
                           str(wheel)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    code = ("import flashviz, flashviz.gpu as g, flashviz.data as D; "
            "assert 'site' in flashviz.__file__, flashviz.__file__; "
            "src = g.kernel_source(); assert 'flash_fwd' in src; "
            "from flashviz.gpu.common import source; assert 'namespace fvptx' in source('flash_fwd_mma.cu'); "
            "Q, K, V, p = D.load_real_qkv(N=8); assert Q.shape == (8, 32); print('installed-ok')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                          env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"})
    assert "installed-ok" in proc.stdout, proc.stderr[-2000:]
