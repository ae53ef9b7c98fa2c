"""$FLASHVIZ_NVRTC_OPTIONS on the CPU: the options it names reach every NVRTC compile of
``gpu.nvrtc.compile_cubin`` and its cache key (a build with them never replaces or is mistaken for
one without), and ``gpu.common.environment`` stamps them into a record's env when set. NVRTC and
CuPy are stand-ins here (``cupy_backends.cuda.libs.nvrtc``, ``cupy.RawModule``) that record the
options they were given; tests/core/test_kernels_nvrtc.py compiles with the real NVRTC."""

from __future__ import annotations

import sys
import types

import pytest

from flashviz.gpu import common
from flashviz.gpu import nvrtc as fv_nvrtc

BASE = ("--gpu-architecture=sm_90", "-std=c++17", "--use_fast_math")


@pytest.fixture
def fake_nvrtc(monkeypatch, tmp_path):
    """compile_cubin with a stand-in NVRTC and CuPy, its cache in tmp_path; returns the list of the
    option tuples each compile was given."""
    compiled: list[tuple] = []
    nv = types.ModuleType("cupy_backends.cuda.libs.nvrtc")

    class NVRTCError(Exception):
        pass

    nv.NVRTCError = NVRTCError
    nv.getVersion = lambda: (13, 2)
    nv.createProgram = lambda src, name, headers, includes: {"src": src, "exprs": []}
    nv.addNameExpression = lambda prog, expr: prog["exprs"].append(expr)

    def compile_program(prog, opts):
        compiled.append(tuple(opts))
        prog["opts"] = tuple(opts)

    nv.compileProgram = compile_program
    nv.getProgramLog = lambda prog: ""
    nv.getLoweredName = lambda prog, expr: f"_lowered_{expr}"
    nv.getCUBIN = lambda prog: ("cubin " + " ".join(prog["opts"])).encode()
    nv.destroyProgram = lambda prog: None
    libs = types.ModuleType("cupy_backends.cuda.libs")
    libs.nvrtc = nv
    cuda = types.ModuleType("cupy_backends.cuda")
    cuda.libs = libs
    backends = types.ModuleType("cupy_backends")
    backends.cuda = cuda

    class RawModule:
        def __init__(self, path):
            self.path = path

        def get_function(self, name):
            return types.SimpleNamespace(name=name, path=self.path)

    cp = types.ModuleType("cupy")
    cp.RawModule = RawModule
    for name, mod in (("cupy", cp), ("cupy_backends", backends), ("cupy_backends.cuda", cuda),
                      ("cupy_backends.cuda.libs", libs), ("cupy_backends.cuda.libs.nvrtc", nv)):
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.setenv("FLASHVIZ_CACHE", str(tmp_path))
    monkeypatch.delenv(fv_nvrtc.OPTIONS_ENV, raising=False)
    monkeypatch.setattr(fv_nvrtc, "_LOADED", {})
    return compiled


def test_the_options_reach_the_compile_and_change_the_cache_key(fake_nvrtc, monkeypatch, tmp_path):
    compiled = fake_nvrtc
    plain, _, hit = fv_nvrtc.compile_cubin("src", "k<1>", "sm_90", options=("-DX=1",))
    assert not hit and compiled == [("-DX=1", *BASE)]
    monkeypatch.setenv(fv_nvrtc.OPTIONS_ENV, "  -lineinfo   -DFLASHVIZ_EXTRA=2 ")
    assert fv_nvrtc.env_options() == ("-lineinfo", "-DFLASHVIZ_EXTRA=2")
    lined, _, hit = fv_nvrtc.compile_cubin("src", "k<1>", "sm_90", options=("-DX=1",))
    # compiled again, with the options after the caller's, into a cache file of its own
    assert not hit and compiled[-1] == ("-DX=1", "-lineinfo", "-DFLASHVIZ_EXTRA=2", *BASE)
    assert lined.path != plain.path and len(list((tmp_path / "cubin").glob("*.cubin"))) == 2
    assert fv_nvrtc.compile_cubin("src", "k<1>", "sm_90", options=("-DX=1",))[2]           # now a cache hit
    monkeypatch.delenv(fv_nvrtc.OPTIONS_ENV)
    again, _, hit = fv_nvrtc.compile_cubin("src", "k<1>", "sm_90", options=("-DX=1",))
    assert hit and again.path == plain.path and len(compiled) == 2      # the build without them, unreplaced
    monkeypatch.setenv(fv_nvrtc.OPTIONS_ENV, "   ")                      # blank: no options, the same key
    assert fv_nvrtc.env_options() == () and fv_nvrtc.compile_cubin("src", "k<1>", "sm_90", options=("-DX=1",))[2]


def test_the_environment_stamp_names_the_options_when_they_are_set(monkeypatch):
    dev = types.SimpleNamespace(id=0, compute_capability="90",
                                attributes={"MultiProcessorCount": 132, "MaxSharedMemoryPerBlockOptin": 232_448})
    runtime = types.SimpleNamespace(getDeviceProperties=lambda i: {"name": b"Pretend GPU"},
                                    memGetInfo=lambda: (0, 80 << 30), runtimeGetVersion=lambda: 13020,
                                    driverGetVersion=lambda: 13020)
    cp = types.SimpleNamespace(__version__="14.2.0", cuda=types.SimpleNamespace(Device=lambda: dev, runtime=runtime))
    monkeypatch.setitem(sys.modules, "cupy", cp)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(__version__="2.11.0"))
    monkeypatch.delenv(fv_nvrtc.OPTIONS_ENV, raising=False)
    env = common.environment()
    assert env["device"] == "Pretend GPU" and "nvrtc_options" not in env
    monkeypatch.setenv(fv_nvrtc.OPTIONS_ENV, "-lineinfo -G")
    assert common.environment()["nvrtc_options"] == ["-lineinfo", "-G"]
