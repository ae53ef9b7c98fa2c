"""Every kernel file is accepted by NVRTC, the compiler the GPU runs use (``gpu.nvrtc``), not only
by nvcc (``make ptx``). NVRTC compiles in JIT mode, where a function without ``__device__`` /
``__global__`` (a plain ``constexpr`` helper, say) is an error even if nothing calls it; nvcc
accepts it as host code. The first GPU run of the decode kernel (2026-12-05) failed on exactly
that. Each text ``gpu.common.source`` gives NVRTC is compiled here, normal and with the timeline
switch (``-DFLASHVIZ_TRACE=1``), without instantiating a template (the instantiations are ``make
ptx``'s job): a parse of the whole file, well under a second each. Needs the NVRTC library
(``cuda-bindings`` and ``nvidia-cuda-nvrtc`` from PyPI, in the test extras); skipped without it."""

from __future__ import annotations

from pathlib import Path

import pytest

from flashviz.records.files import compiled_source

ROOT = Path(__file__).resolve().parents[2]
KERNELS = sorted(p.name for p in (ROOT / "kernels").glob("*.cu"))


@pytest.fixture(scope="module")
def nvrtc():
    mod = pytest.importorskip("cuda.bindings.nvrtc")
    try:
        err, _major, _minor = mod.nvrtcVersion()
    except Exception as exc:                      # the library itself is missing
        pytest.skip(f"NVRTC library not loadable: {exc}")
    if err != mod.nvrtcResult.NVRTC_SUCCESS:
        pytest.skip(f"nvrtcVersion: {err}")
    return mod


def _log(nvrtc, prog) -> str:
    """NVRTC's log of ``prog``, read into a fresh writable buffer. Never into ``b" " * size``
    (cuda-python's own examples): for an empty log (size 1) that is CPython's shared one-byte
    object b" ", which NVRTC's NUL then turns into b"\\0" for the whole process — every later
    one-byte read of a space (Pillow's GIF reader: sub-block lengths of 32) saw 0."""
    _, size = nvrtc.nvrtcGetProgramLogSize(prog)
    log = bytearray(size)
    nvrtc.nvrtcGetProgramLog(prog, log)
    return bytes(log).rstrip(b"\0 ").decode(errors="replace")


def _compile(nvrtc, text: str, options: list[str]) -> tuple[bool, str]:
    """(accepted, NVRTC's log) for ``text`` compiled with ``options``."""
    err, prog = nvrtc.nvrtcCreateProgram(text.encode(), b"flashviz_kernel.cu", 0, [], [])
    assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS, err
    try:
        opts = [o.encode() for o in options]
        (res,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        return res == nvrtc.nvrtcResult.NVRTC_SUCCESS, _log(nvrtc, prog)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def _options(text: str, traced: bool) -> list[str]:
    # the arch-specific target for the kernels with wgmma (as `make ptx` and the runners choose)
    arch = "compute_90a" if "wgmma.mma_async" in text else "compute_90"
    return [f"--gpu-architecture={arch}", "-std=c++17", "--use_fast_math", *(["-DFLASHVIZ_TRACE=1"] if traced else [])]


def test_there_are_kernels_to_check():
    assert {"flash_fwd.cu", "flash_bwd.cu", "flash_decode.cu", "flash_fwd_fa3.cu"} <= set(KERNELS)


@pytest.mark.parametrize("traced", [False, True], ids=["normal", "traced"])
@pytest.mark.parametrize("name", KERNELS)
def test_nvrtc_accepts_every_kernel_file(nvrtc, name, traced):
    text = compiled_source(name)
    ok, log = _compile(nvrtc, text, _options(text, traced))
    assert ok, f"NVRTC rejects {name}{' (traced)' if traced else ''}:\n{log[:2000]}"


def test_reading_an_empty_log_leaves_python_bytes_alone(nvrtc):
    """A kernel NVRTC compiles without a word (a one-byte log: its NUL) must not change any
    Python object: the one-byte bytes objects CPython shares stay what they are."""
    ok, log = _compile(nvrtc, "__global__ void k() {}", ["--gpu-architecture=compute_90"])
    assert ok and log == ""
    assert [bytes([b])[0] for b in range(256)] == list(range(256))
    assert b" "[0] == 32 and b"a b"[1:2] == b"\x20"


def test_a_host_function_is_what_nvrtc_rejects(nvrtc):
    """The check can fail: the decode kernel's text with the unannotated constexpr helper it once had."""
    text = compiled_source("flash_decode.cu")
    bad = text.replace("constexpr int NT = 128;", "constexpr int NT = 128;\ntemplate <int D>\n"
                       "constexpr int smem_bytes() { return D * 4; }", 1)
    assert bad != text
    ok, log = _compile(nvrtc, bad, _options(bad, False))
    assert not ok and "smem_bytes" in log      # the log points at the helper


def _instantiate(nvrtc, text: str, expr: str, options: list[str]) -> tuple[bool, str, int]:
    """(accepted, log, cubin bytes) for ``expr`` instantiated from ``text`` and compiled to a cubin,
    as ``gpu.nvrtc.compile_cubin`` does on a GPU machine."""
    err, prog = nvrtc.nvrtcCreateProgram(text.encode(), b"flashviz_kernel.cu", 0, [], [])
    assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS, err
    try:
        nvrtc.nvrtcAddNameExpression(prog, expr.encode())
        opts = [o.encode() for o in options]
        (res,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        ok = res == nvrtc.nvrtcResult.NVRTC_SUCCESS
        cubin = nvrtc.nvrtcGetCUBINSize(prog)[1] if ok else 0
        return ok, _log(nvrtc, prog), cubin
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


@pytest.mark.parametrize("traced", [False, True], ids=["normal", "traced"])
@pytest.mark.parametrize("variant", ["simt", "mma"])
def test_the_decode_kernels_the_runner_builds_compile_to_cubins(nvrtc, variant, traced):
    """The decode runner's own name expressions (``gpu.decode.decode_expressions``), instantiated and
    compiled for sm_90 as on the GPU: both dtypes, d, cache layouts, and v1's smallest and largest
    ROWS. (A template that is never instantiated is only parsed, so the check above cannot see an
    error inside one.)"""
    from flashviz.gpu.decode import decode_expressions
    text = compiled_source("flash_decode.cu")
    opts = ["--gpu-architecture=sm_90", "-std=c++17", "--use_fast_math", *(["-DFLASHVIZ_TRACE=1"] if traced else [])]
    for dtype in ("float16", "bfloat16"):
        for d in (64, 128):
            for paged in (False, True):
                for rows in ((1, 32) if variant == "simt" else (16,)):
                    for expr in decode_expressions(dtype, d, paged, rows, variant)[:1 if traced else 2]:
                        ok, log, size = _instantiate(nvrtc, text, expr, opts)
                        assert ok and size > 0, f"NVRTC rejects {expr}{' (traced)' if traced else ''}:\n{log[:2000]}"


@pytest.mark.parametrize("traced", [False, True], ids=["normal", "traced"])
def test_the_fa3_dynamic_scheduler_build_compiles_to_cubins(nvrtc, traced):
    """The fa3 kernel with ``FA3_DYNAMIC`` (the dynamic tile scheduler, an experiment that
    benchmarks/ab_fa3.py builds through ``SOURCE_OVERRIDE``) at the runner's default blocks, as NVRTC
    compiles it on a GPU machine (sm_90a): the code behind the define is instantiated nowhere else."""
    text = "#define FA3_DYNAMIC 1\n" + compiled_source("flash_fwd_fa3.cu")
    opts = ["--gpu-architecture=sm_90a", "-std=c++17", "--use_fast_math", *(["-DFLASHVIZ_TRACE=1"] if traced else [])]
    for expr in ("flash_fwd_fa3<0,128,128,128,true>", "flash_fwd_fa3<1,192,128,64,false>"):
        ok, log, size = _instantiate(nvrtc, text, expr, opts)
        assert ok and size > 0, f"NVRTC rejects {expr} with FA3_DYNAMIC:\n{log[:2000]}"


@pytest.mark.parametrize("stages", [1, 2])
def test_the_tensor_core_backward_kernels_the_runner_builds_compile_to_cubins(nvrtc, stages):
    """The tensor-core backward's own name expressions (``backward_expressions``), one and two
    pipeline stages (two: the v2 double buffering, not yet the default), atomic and deterministic
    dQ, compiled to sm_90 cubins as on the GPU; the largest shape class, and its timeline build."""
    from flashviz.gpu.tensorcore.backward import backward_expressions
    text = compiled_source("flash_bwd_mma.cu")
    base = ["--gpu-architecture=sm_90", "-std=c++17", "--use_fast_math"]
    for det in (False, True):
        names = backward_expressions("bfloat16", 128, 128, True, det, stages)
        assert names["main"] == f"flash_bwd_mma<1,128,128,true,{'false' if det else 'true'},{stages}>"
        for key, expr in names.items():
            for opts in ([base, base + ["-DFLASHVIZ_TRACE=1"]] if key == "main" else [base]):
                ok, log, size = _instantiate(nvrtc, text, expr, opts)
                assert ok and size > 0, f"NVRTC rejects {expr} {opts[3:]}:\n{log[:2000]}"


@pytest.mark.parametrize("dq", ["bulk", "atomic", "separate"])
def test_the_wgmma_backward_kernels_the_runner_builds_compile_to_cubins(nvrtc, dq):
    """The Hopper backward's own name expressions (``wgmma_backward_expressions``): its main kernel
    from kernels/flash_bwd_wgmma.cu for sm_90a (every Bc, d, dtype of one dQ algorithm, causal and
    not), and the mma file's kernels it borrows (preprocess, convert or the dQ pass) for sm_90."""
    from flashviz.gpu.tensorcore.backward import wgmma_backward_expressions
    main_text, mma_text = compiled_source("flash_bwd_wgmma.cu"), compiled_source("flash_bwd_mma.cu")
    base = ["-std=c++17", "--use_fast_math"]
    for dtype in ("float16", "bfloat16"):
        for Bc, d in ((64, 64), (128, 128), (128, 64), (64, 128)):
            causal = (Bc + d + len(dtype)) % 2 == 0 or Bc == d   # both flags over the grid
            names = wgmma_backward_expressions(dtype, Bc, d, causal, dq)
            assert set(names) == {"preprocess", "main", "dq" if dq == "separate" else "convert"}
            ok, log, size = _instantiate(nvrtc, main_text, names["main"], ["--gpu-architecture=sm_90a", *base])
            assert ok and size > 0, f"NVRTC rejects {names['main']}:\n{log[:2000]}"
    for key, expr in names.items():
        if key != "main":
            ok, log, size = _instantiate(nvrtc, mma_text, expr, ["--gpu-architecture=sm_90", *base])
            assert ok and size > 0, f"NVRTC rejects {expr}:\n{log[:2000]}"
