"""records.kernel_params: a kernel's parameter layout read from its signature, checked against the
``.param`` declarations nvcc writes into the PTX (the compiler's own layout of the same kernel),
for every kernel whose launch packs a parameter block by hand (flashviz.gpu.tensorcore)."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess

import pytest

from flashviz.mma_limits import KERNEL_FILES
from flashviz.records import kernel_params as kp
from flashviz.records.files import compiled_source

#: kernel -> one template instance (the runner's first choice) for the PTX
INSTANCES = {"wgmma": "0, 128, 64, 64, false", "mma.sync": "0, 64, 64, 64, false", "fa3": "0, 128, 128, 128, true"}
#: the decode kernels (flashviz.gpu.decode packs them too): name -> (file, kernel, instance expression)
DECODE = {"decode": ("flash_decode.cu", "flash_decode", "fvdec::flash_decode<0, 128, true, 4>"),
          "decode_mma": ("flash_decode.cu", "flash_decode_mma", "fvdec::flash_decode_mma<1, 64, true>"),
          "decode_merge": ("flash_decode.cu", "flash_decode_merge", "fvdec::flash_decode_merge<0, 128>")}
#: PTX .param type -> (bytes, alignment)
PTX_TYPES = {"u64": (8, 8), "s64": (8, 8), "b64": (8, 8), "f64": (8, 8), "u32": (4, 4), "s32": (4, 4),
             "b32": (4, 4), "f32": (4, 4)}


def _ptx_params(ptx: str, kernel: str) -> list[tuple[int, int]]:
    """(bytes, alignment) of each parameter of the one .entry of ``kernel`` in ``ptx``, in order."""
    m = re.search(r"\.entry\s+(_Z\w*?\d" + kernel + r"I\w*)\s*\((.*?)\)", ptx, re.S)
    assert m, kernel
    out = []
    for decl in m.group(2).split(","):
        a = re.search(r"\.param\s+\.align\s+(\d+)\s+\.b8\s+\w+\[(\d+)\]", decl)
        if a:
            out.append((int(a.group(2)), int(a.group(1))))
            continue
        b = re.search(r"\.param\s+\.(\w+)\s+\w+", decl)
        out.append(PTX_TYPES[b.group(1)])
    return out


def _offsets(params: list[tuple[int, int]]) -> list[int]:
    out, at = [], 0
    for size, align in params:
        at = -(-at // align) * align
        out.append(at)
        at += size
    return out


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("traced", [False, True], ids=["normal", "traced"])
@pytest.mark.parametrize("variant", sorted(INSTANCES))
def test_the_layout_is_the_one_nvcc_gives_the_kernel(tmp_path, variant, traced):
    file, kernel = KERNEL_FILES[variant]
    cu = tmp_path / "k.cu"
    cu.write_text(compiled_source(file) + f"\n__attribute__((used)) static const void* fv_k = "
                  f"(const void*)&{kernel}<{INSTANCES[variant]}>;\n")
    arch = "compute_80" if variant == "mma.sync" else "compute_90a"
    subprocess.run(["nvcc", "-std=c++17", f"-arch={arch}", "-ptx", f"-DFLASHVIZ_TRACE={int(traced)}",
                    "-o", str(tmp_path / "k.ptx"), str(cu)], check=True, capture_output=True, timeout=600)
    ptx = _ptx_params((tmp_path / "k.ptx").read_text(), kernel)
    lay = kp.layout(file, kernel, traced)
    assert [(p.size, p.align) for p in lay.params] == ptx
    assert list(lay.offsets) == _offsets(ptx)
    if traced and variant != "mma.sync":            # the Ampere kernel has no timeline switch
        assert lay.names[-2:] == ("fv_trace", "fv_jmax") and len(lay.params) == len(kp.layout(file, kernel).params) + 2


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("traced", [False, True], ids=["normal", "traced"])
@pytest.mark.parametrize("name", sorted(DECODE))
def test_the_decode_layouts_are_the_ones_nvcc_gives(tmp_path, name, traced):
    file, kernel, expr = DECODE[name]
    cu = tmp_path / "k.cu"
    cu.write_text(compiled_source(file) + f"\n__attribute__((used)) static const void* fv_k = (const void*)&{expr};\n")
    subprocess.run(["nvcc", "-std=c++17", "-arch=compute_90", "-ptx", f"-DFLASHVIZ_TRACE={int(traced)}",
                    "-o", str(tmp_path / "k.ptx"), str(cu)], check=True, capture_output=True, timeout=600)
    ptx = _ptx_params((tmp_path / "k.ptx").read_text(), kernel)
    lay = kp.layout(file, kernel, traced)
    assert [(p.size, p.align) for p in lay.params] == ptx and list(lay.offsets) == _offsets(ptx)


def test_a_packed_block_puts_every_value_at_its_offset():
    """Pack distinct values with the derived struct and read each back at its parameter's offset:
    the struct's padding matches the offsets the driver is handed."""
    for variant in INSTANCES:
        for traced in (False, True):
            lay = kp.layout(*KERNEL_FILES[variant], traced=traced)
            first = 3 if variant == "fa3" else 0          # after fa3's three tensor maps
            at, st = lay.struct(first)
            values = [k + 1 if p.fmt in "QqiI" else k + 0.5 for k, p in enumerate(lay.params[first:])]
            buf = bytearray(st.size)
            st.pack_into(buf, 0, *values)
            got = [struct.unpack_from("<" + p.fmt, buf, p.offset - at)[0] for p in lay.params[first:]]
            assert got == values, (variant, traced)
            assert at + st.size == lay.size


def test_the_runner_packs_with_the_derived_layouts():
    from flashviz.gpu import decode
    from flashviz.gpu.tensorcore import fa3, kernel
    for block, (file, name, _), traced in ((decode._MAIN, DECODE["decode"], False),
                                           (decode._MAIN_TRACED, DECODE["decode"], True),
                                           (decode._MERGE, DECODE["decode_merge"], False)):
        lay = kp.layout(file, name, traced)
        assert [int(p) - int(block.ptrs[0]) for p in block.ptrs] == list(lay.offsets)
        values = [k + 1 if p.fmt in "QqiI" else k + 0.5 for k, p in enumerate(lay.params)]
        block.pack(*values)
        raw = block.buf.tobytes()
        assert [struct.unpack_from("<" + p.fmt, raw, p.offset)[0] for p in lay.params] == values
    assert decode._MAIN.buf.ctypes.data == int(decode._MAIN.ptrs[0])
    for traced in (False, True):                     # one parameter block packs both split kernels
        v1, v2 = (kp.layout("flash_decode.cu", k, traced) for k in ("flash_decode", "flash_decode_mma"))
        assert [(p.name, p.ctype, p.offset) for p in v1.params] == [(p.name, p.ctype, p.offset) for p in v2.params]
    assert [p.name for p in kp.layout("flash_decode.cu", "flash_decode").params][-7:] == [
        "H", "H_kv", "Nq", "Nk", "S", "causal", "scale"]      # the order gpu.decode.launch_ptrs packs
    assert kernel._OFFSETS == kp.layout(*KERNEL_FILES["wgmma"]).offsets == kp.layout(*KERNEL_FILES["mma.sync"]).offsets
    assert kernel._ARGS.size == kp.layout(*KERNEL_FILES["wgmma"]).size
    assert fa3._OFFSETS[:3] == (0, 128, 256) and fa3._TAIL_AT == 384       # three 128-byte maps
    assert fa3._TRACE_OFFSETS[:-2] == fa3._OFFSETS


def test_signature_errors_are_named(monkeypatch):
    src = {"k.cu": "__global__ void good(int only_declared);\n"
                   "__global__ void __launch_bounds__(128, 1) good(const float* __restrict__ x, /* a */ int n,\n"
                   "    long long s, float a) {}\n__global__ void bad(half h) {}\n",
           "fv_trace.cuh": "#define FV_TRACE_PARAMS , unsigned long long* t, int j\n"}
    monkeypatch.setattr(kp, "kernel_source", lambda n: src[n])
    kp.layout.cache_clear()
    try:
        lay = kp.layout("k.cu", "good")
        assert lay.names == ("x", "n", "s", "a") and lay.offsets == (0, 8, 16, 24) and lay.size == 28
        with pytest.raises(ValueError, match="unknown type 'half'"):
            kp.layout("k.cu", "bad")
        with pytest.raises(LookupError, match="missing"):
            kp.layout("k.cu", "missing")
        with pytest.raises(IndexError):
            lay.struct(4)
    finally:
        kp.layout.cache_clear()
