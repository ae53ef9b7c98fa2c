"""The kernels share one header of inline-PTX wrappers (kernels/fv_ptx.cuh): every kernel includes
it, and the text NVRTC compiles (``gpu.common.source``) has it pasted in — so it is part of the
compile-cache key and of the source hash a benchmark record keeps — with ``#line`` directives
that keep compiler messages pointing at the right file and line. With nvcc present, the pasted
text compiles to the same machine code as the file compiled with its header beside it."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from flashviz.gpu import common

ROOT = Path(__file__).resolve().parents[2]
KERNELS = sorted(p.name for p in (ROOT / "kernels").glob("*.cu"))
WRAPPERS = ("neg_inf", "smem_addr", "cp_async16", "cp_async_commit", "cp_async_wait", "ex2", "pack2")


def test_every_kernel_includes_the_shared_header():
    assert len(KERNELS) >= 3
    for name in KERNELS:
        text = (ROOT / "kernels" / name).read_text()
        assert '#include "fv_ptx.cuh"' in text, name
        for w in WRAPPERS:          # defined once, in the header, never again in a kernel
            assert not re.search(rf"__device__[^;{{]*\b{w}\s*\(", text), f"{name} defines {w} itself"
    header = (ROOT / "kernels" / "fv_ptx.cuh").read_text()
    for w in WRAPPERS:
        assert re.search(rf"__device__[^;{{]*\b{w}\s*\(", header), w


def test_source_pastes_the_header_with_line_directives():
    """Every line NVRTC compiles is a line of some kernels/ file, and the #line directive before it
    says which file and line: compiler messages point at the right place."""
    common._SOURCES.clear()
    for name in KERNELS:
        text = common.source(name)
        assert not re.search(r"^\s*#\s*include", text, re.M) and "namespace fvptx" in text
        assert "#pragma once" not in text
        files = {n: common.kernel_source(n).splitlines() for n in (name, "fv_ptx.cuh", "fv_trace.cuh")}
        where, checked = (name, 1), 0
        for ln in text.splitlines():
            m = re.fullmatch(r'#line (\d+) "([\w.]+)"', ln)
            if m:
                where = (m.group(2), int(m.group(1)))
                continue
            f, k = where
            src = files[f][k - 1]
            assert ln == src or (src.lstrip().startswith("#pragma once") and ln == ""), (name, f, k, ln, src)
            where, checked = (f, k + 1), checked + 1
        assert checked > 200


def test_expand_includes_on_a_toy_tree(monkeypatch):
    files = {"a.cuh": '#pragma once\n#include "b.cuh"\nint a;\n', "b.cuh": "int b;\n",
             "k.cu": '// k\n#include "a.cuh"\n#include "b.cuh"\nint k;\n'}
    monkeypatch.setattr(common, "kernel_source", lambda n: files[n])
    out = common.expand_includes(files["k.cu"], "k.cu")
    assert out.count("int b;") == 1                 # each header once
    assert out.index("int b;") < out.index("int a;") < out.index("int k;")
    assert out.endswith('#line 3 "k.cu"\n\nint k;\n') and "#pragma once" not in out   # k.cu line 3: the skipped include
    monkeypatch.setattr(common, "kernel_source", lambda n: (_ for _ in ()).throw(FileNotFoundError(n)))
    with pytest.raises(FileNotFoundError):
        common.expand_includes('#include "missing.cuh"\n', "k.cu")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_pasted_source_compiles_to_the_same_cubin(tmp_path):
    common._SOURCES.clear()
    name = "flash_fwd_mma.cu"
    pasted = tmp_path / "pasted" / name
    pasted.parent.mkdir()
    pasted.write_text(common.source(name))
    outs = []
    for src in (ROOT / "kernels" / name, pasted):
        out = tmp_path / (src.parent.name + ".cubin")
        subprocess.run(["nvcc", "-std=c++17", "-arch=sm_90a", "-cubin", "-DFLASHVIZ_PTX_CHECK", "-o", str(out),
                        str(src)], check=True, capture_output=True, timeout=600)
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]
