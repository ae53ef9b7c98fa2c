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
from flashviz.records import files as kernel_files

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
        headers = [h.name for h in (ROOT / "kernels").glob("*.cuh")]
        files = {n: common.kernel_source(n).splitlines() for n in (name, *headers)}
        where, checked = (name, 1), 0
        for ln in text.splitlines():
            m = re.fullmatch(r'#line (\d+) "([\w.]+)"', ln)
            if m:
                where = (m.group(2), int(m.group(1)))
                continue
            f, k = where
            src = files[f][k - 1]
            # '#pragma once' and the include of a header already pasted leave an empty line
            blank = src.lstrip().startswith(("#pragma once", "#include"))
            assert ln == src or (blank and ln == ""), (name, f, k, ln, src)
            where, checked = (f, k + 1), checked + 1
        assert checked > 200


def test_expand_includes_on_a_toy_tree(monkeypatch):
    files = {"a.cuh": '#pragma once\n#include "b.cuh"\nint a;\n', "b.cuh": "int b;\n",
             "k.cu": '// k\n#include "a.cuh"\n#include "b.cuh"\nint k;\n'}
    monkeypatch.setattr(kernel_files, "kernel_source", lambda n: files[n])
    out = kernel_files.expand_includes(files["k.cu"], "k.cu")
    assert out.count("int b;") == 1                 # each header once
    assert out.index("int b;") < out.index("int a;") < out.index("int k;")
    assert out.endswith('#line 3 "k.cu"\n\nint k;\n') and "#pragma once" not in out   # k.cu line 3: the skipped include
    monkeypatch.setattr(kernel_files, "kernel_source", lambda n: (_ for _ in ()).throw(FileNotFoundError(n)))
    with pytest.raises(FileNotFoundError):
        kernel_files.expand_includes('#include "missing.cuh"\n', "k.cu")


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


def _instance(kernel: str, args: str) -> str:
    """A line that instantiates ``kernel<args>`` by taking its address (no copy of the signature)."""
    tag = re.sub(r"\W", "_", args)
    return f"__attribute__((used)) static const void* fv_k_{tag} = (const void*)&{kernel}<{args}>;"


INSTANCE = {  # one instantiation per kernel, appended to the text under test
    "flash_fwd.cu": _instance("flash_fwd", "64, 64, 64"),
    "flash_fwd_mma.cu": _instance("flash_fwd_mma", "0, 128, 64, 64, false"),
    "flash_fwd_fa3.cu": _instance("flash_fwd_fa3", "0, 128, 128, 128, true"),
    "flash_decode.cu": _instance("fvdec::flash_decode", "0, 128, false, 4"),
    "flash_bwd.cu": _instance("flash_bwd", "64, 64, 64"),
}


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("name", sorted(INSTANCE))
def test_timeline_hooks_compile_to_nothing(tmp_path, name):
    """Without -DFLASHVIZ_TRACE the kernel is the same machine code as the kernel with every timeline
    hook (FV_NOW32, FV_EVENT, FV_WRITER_BLOCK({...}), ...) deleted from its text and each scoped step
    hook (FV_SCOPE(...) stmt, FV_SPAN(...) { ... }) taken off the code it times: a hook can never
    change the normal build (an empty macro once swallowed the statement after an `if`)."""
    from flashviz.views.code_pairs import without_timeline_hooks

    common._SOURCES.clear()
    text = common.source(name)
    stripped = "\n".join(without_timeline_hooks(text.splitlines())) + "\n"
    hook = (r"^\s*(if \(.*\)\s*)?FV_(NOW|DECL|MARKS|SET|EVENT|STEP|STAMP|TRACE_BEGIN|TRACE_END|WRITER_BLOCK"
            r"|SCOPE|SPAN|UNTIL)\w*\(")
    assert re.search(hook, text, re.M) and not re.search(hook, stripped, re.M)
    arch = "sm_90a" if "mma" in name or "fa3" in name else "sm_90"     # wgmma, setmaxnreg: sm_90a only
    outs = []
    for tag, src in (("hooks", text), ("none", stripped)):
        cu = tmp_path / f"{tag}.cu"
        cu.write_text(src + "\n" + INSTANCE[name] + "\n")
        out = tmp_path / f"{tag}.cubin"
        subprocess.run(["nvcc", "-std=c++17", f"-arch={arch}", "-cubin", "-o", str(out), str(cu)], check=True,
                       capture_output=True, timeout=600)
        outs.append(out.read_bytes())
    assert outs[0] == outs[1], f"{name}: the timeline hooks change the normal build"


def test_scoped_step_hooks_leave_the_code_they_time():
    """A scoped step hook (kernels/fv_trace.cuh) is the prefix of a statement or a block: taken off,
    the statement stays (its comment in its column) and the block's lines come back to the hook's
    indent without their braces; every other hook line goes, as before."""
    from flashviz.views.code_pairs import without_timeline_hooks

    text = """\
    FV_MARKS(t_a, t_b, t_c);
    FV_SCOPE(j, FV_STAGE_LOAD_K, t_a, t_b) Kr.wait_full(Kj);   // landed
    FV_SCOPE_STAMP(j, FV_STAGE_COMPUTE_S, t_b, f(t_c)) {
        issue_S<DT, Br, Bc, D>(s, sQw, Kr.tile(Kj));
        FV_UNTIL(t_c) {
            wgmma_wait<0>();
#pragma unroll
        }
    }
    FV_EVENT32(j, FV_STAGE_UPDATE_ML, t_b, t_c);
    next();"""
    assert without_timeline_hooks(text.splitlines()) == [
        "    Kr.wait_full(Kj);".ljust(63) + "// landed",          # the comment keeps its column
        "    issue_S<DT, Br, Bc, D>(s, sQw, Kr.tile(Kj));",
        "    wgmma_wait<0>();",
        "#pragma unroll",
        "    next();"]


ORDER_INSTANCES = {  # the block-order experiment's shapes (benchmarks/record_timelines.py), causal
    "flash_fwd.cu": ("sm_90", [_instance("flash_fwd", "64, 64, 64")]),
    "flash_fwd_mma.cu": ("sm_90a", [_instance("flash_fwd_mma", f"0, {br}, {bc}, {d}, true")
                                    for br, bc, d in ((64, 128, 64), (128, 128, 128))]),
}


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("name", sorted(ORDER_INSTANCES))
def test_block_orders_keep_the_kernels_registers(tmp_path, name):
    """Chapter 7 compares block orders like for like only if each order's (untraced) build runs as
    many blocks per SM as the kernel's own: the same registers (ptxas -v) at every recorded shape,
    and the same shared memory (the kernel's, set by the host). An order that computes its mapping
    with a division once raised the d = 64 causal build from 147 to 170 registers (3 blocks/SM → 2)."""
    common._SOURCES.clear()
    text = common.source(name)
    arch, instances = ORDER_INSTANCES[name]
    for inst in instances:
        cu = tmp_path / "k.cu"
        cu.write_text(text + "\n" + inst + "\n")
        regs = []
        for order in (0, 1, 2):
            out = subprocess.run(["nvcc", "-std=c++17", f"-arch={arch}", "-cubin", "-Xptxas", "-v",
                                  f"-DFLASHVIZ_BLOCK_ORDER={order}", "-o", str(tmp_path / "k.cubin"), str(cu)],
                                 check=True, capture_output=True, text=True, timeout=600)
            regs.append(int(re.search(r"Used (\d+) registers", out.stderr).group(1)))
        assert regs[1] == regs[0] and regs[2] == regs[0], (inst[:60], regs)


#: a lambda expression: a capture list ([&], [=], [&x, y], [this]) followed by a parameter list
LAMBDA = re.compile(r"\[\s*(?:&|=|this|&?\w+)(?:\s*,\s*&?\w+)*\s*\]\s*\(")


def test_no_kernel_defines_a_lambda():
    """The device's NVRTC (CuPy 14.2, CUDA 13.2) compiles in JIT mode, where a lambda in a kernel is
    a host function and refused ("host functions are not allowed in JIT mode"); nvcc 13.0 and the
    NVRTC of a CPU box accept it, so no compile here catches it. It cost a GPU run (FA3 v7,
    benchmarks/NOTES.md): write a step as a __device__ function (template) instead."""
    assert LAMBDA.search("auto f = [&](auto kind, const int t) {") and LAMBDA.search("[=, &x](int i)")
    for p in sorted((ROOT / "kernels").glob("*.cu*")):
        for n, line in enumerate(p.read_text().splitlines(), 1):
            code = line.split("//", 1)[0]
            assert not LAMBDA.search(code), f"kernels/{p.name}:{n} defines a lambda: {line.strip()}"
