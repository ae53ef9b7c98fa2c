"""The FlashAttention-3 kernel (kernels/flash_fwd_fa3.cu): its launch parameters and tensor-map
rules on the CPU; on a Hopper GPU (tests marked ``gpu``), the runner's choice of kernel, the
block sizes, NaN and keyless rows, broadcast inputs and CUDA-graph capture, each against float64
dense attention (flashviz.reference) or the wgmma kernel's exact semantics."""

import math
import re
import struct

import numpy as np
import pytest

from flashviz import mma_limits as ml
from flashviz.gpu.tensorcore import fa3, tma

ROOT_KERNEL = "flash_fwd_fa3.cu"


# ---------------------------------------------------------------- CPU

def _offsets(types):
    size = {"TensorMap": 128, "*": 8, "int": 4, "long long": 8, "float": 4}
    align = {"TensorMap": 64, "*": 8, "int": 4, "long long": 8, "float": 4}
    off, out = 0, []
    for ty in types:
        k = next(k for k in ("TensorMap", "*", "long long", "int", "float") if k in ty)
        off = -(-off // align[k]) * align[k]
        out.append(off)
        off += size[k]
    return out, off


def test_parameter_block_matches_the_kernel_signature():
    """Three 128-byte tensor maps at 0, 128, 256 (64-byte aligned), then O, lse, Nq, Nk, H, B, O's
    three strides and the scale, at the offsets C gives them (8-byte pointers and int64, 4-byte
    int and float): the pointer array the driver reads must name exactly those fields. The traced
    build (-DFLASHVIZ_TRACE=1) adds FV_TRACE_PARAMS as kernels/fv_trace.cuh defines them: the
    trace buffer's pointer and jmax, after the scale."""
    from flashviz.records.files import kernel_source
    sig = re.search(r"flash_fwd_fa3\((.*?)\)\s*\{", kernel_source(ROOT_KERNEL), re.S).group(1)
    assert sig.rstrip().endswith("FV_TRACE_PARAMS")
    traced = re.search(r"#define FV_TRACE_PARAMS (.*)", kernel_source("fv_trace.cuh")).group(1)

    def types(text):
        return [re.sub(r"\s+", " ", a.strip()).rsplit(" ", 1)[0] for a in text.split(",") if a.strip()]

    plain = types(sig.replace("FV_TRACE_PARAMS", ""))
    assert plain == ["const __grid_constant__ fvtma::TensorMap"] * 3 + ["u16* __restrict__", "float* __restrict__"] \
        + ["int"] * 4 + ["long long"] * 3 + ["float", "int* __restrict__"]
    assert types(sig.replace("FV_TRACE_PARAMS", traced))[len(plain):] == ["unsigned long long* __restrict__", "int"]
    expect, end = _offsets(plain)
    assert list(fa3._OFFSETS) == expect
    assert fa3._TAIL_AT == 384 and fa3._TAIL_AT + fa3._TAIL.size == end
    expect_tr, end_tr = _offsets(types(sig.replace("FV_TRACE_PARAMS", traced)))
    assert list(fa3._TRACE_OFFSETS) == expect_tr and expect_tr[-2] == fa3._TRACE_AT
    assert fa3._TRACE_AT + fa3._TRACE.size == end_tr <= fa3._PARAMS.buf.size
    buf = bytearray(fa3._TAIL.size)
    fa3._TAIL.pack_into(buf, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0.5, 10)
    vals = [struct.unpack_from(fmt, buf, o - 384)[0] for fmt, o in zip("QQiiiiqqqfQ", expect[3:])]
    assert vals == [1, 2, 3, 4, 5, 6, 7, 8, 9, 0.5, 10]
    buf = bytearray(fa3._TRACE.size)
    fa3._TRACE.pack_into(buf, 0, 0xABCDEF12345, 17)
    assert [struct.unpack_from(f, buf, o - fa3._TRACE_AT)[0] for f, o in zip("Qi", expect_tr[-2:])] == [0xABCDEF12345, 17]
    assert fa3._PARAMS.base % 64 == 0


def test_tensor_maps_are_encoded_once_per_buffer_set_and_the_grid_is_per_tile(monkeypatch):
    """launch_fa3 without a GPU: a stand-in encoder writes a map that names its operand and pointer,
    a stand-in cuLaunchKernel records the grid and copies the parameter block. A repeated call on
    the same buffers copies the cached maps (no encode); another pointer encodes again."""
    import ctypes
    from types import SimpleNamespace
    calls, launches = [], []

    def encode(dst, ptr, shape, strides, dtype, rows):
        calls.append((ptr, rows))
        ctypes.memmove(dst, struct.pack("<QQ", ptr, rows) + bytes(112), 128)

    def launch(fn, gx, gy, gz, bx, by, bz, smem, stream, ptrs, extra):
        launches.append(((gx, gy, gz), bytes(fa3._PARAMS.buf), ptrs))

    monkeypatch.setattr(fa3, "encode_bhsd", encode)
    monkeypatch.setattr(fa3, "_MAPS", {})
    mk = SimpleNamespace(d=64, dtype="float16", Br=192, Bc=128, causal=True, sm_count=132, function_ptr=1,
                         threads=512, smem_bytes=1, traced=False)
    args = (2, 3, 1000, 900, (192000, 64000, 64), (172800, 57600, 64), (172800, 57600, 64), (192000, 64000, 64),
            0.125, 0)
    for qp in (4096, 4096, 8192):
        fa3.launch_fa3(launch, mk, qp, 2048, 1024, 7, 9, *args)
    assert calls == [(4096, 192), (2048, 128), (1024, 128)] * 1 + [(8192, 192), (2048, 128), (1024, 128)]
    for (grid, block, ptrs), qp in zip(launches, (4096, 4096, 8192)):
        assert ptrs == fa3._PARAMS.ptrs_addr
        assert grid == (math.ceil(1000 / 192) * 3 * 2, 1, 1)              # one block per (i, h, b)
        assert struct.unpack_from("<QQ", block, 0) == (qp, 192)          # Q's map, then K's and V's
        assert struct.unpack_from("<QQ", block, 128) == (2048, 128)
        assert struct.unpack_from("<QQ", block, 256) == (1024, 128)
        assert struct.unpack_from("<QQiiii", block, 384) == (7, 9, 1000, 900, 3, 2)
        assert struct.unpack_from("<Q", block, 448) == (0,)                 # no tile counter
    monkeypatch.setattr(fa3, "PERSISTENT", True)
    fa3.launch_fa3(launch, mk, 4096, 2048, 1024, 7, 9, *args)
    assert launches[-1][0] == (min(132, math.ceil(1000 / 192) * 6), 1, 1)
    monkeypatch.setattr(fa3, "PERSISTENT", False)
    monkeypatch.setattr(fa3, "DYNAMIC", True)                               # the dynamic scheduler: the
    counters = []                                                           # persistent grid, a counter
    monkeypatch.setattr(fa3, "_tile_counter", lambda sms, sptr: counters.append((sms, sptr)) or 0xC0DE)
    with pytest.raises(ValueError, match="needs the build with FA3_DYNAMIC"):
        fa3.launch_fa3(launch, mk, 4096, 2048, 1024, 7, 9, *args)          # a build without the scheduler
    mk.dynamic = True
    fa3.launch_fa3(launch, mk, 4096, 2048, 1024, 7, 9, *args)
    assert launches[-1][0] == (min(132, math.ceil(1000 / 192) * 6), 1, 1) and counters == [(132, 0)]
    assert struct.unpack_from("<Q", launches[-1][1], 448) == (0xC0DE,)
    monkeypatch.setattr(fa3, "DYNAMIC", False)
    mk.dynamic = False
    traced = SimpleNamespace(**{**vars(mk), "traced": True})
    fa3.launch_fa3(launch, traced, 4096, 2048, 1024, 7, 9, *args, trace=(0xBEEF000, 6))   # the traced build
    _, block, ptrs = launches[-1]
    assert ptrs == fa3._PARAMS.traced_ptrs_addr and struct.unpack_from("<Qi", block, 456) == (0xBEEF000, 6)
    assert np.array_equal(fa3._PARAMS.traced_ptrs[:-2], fa3._PARAMS.ptrs)
    n = len(launches)
    with pytest.raises(ValueError, match="trace buffer goes with the traced build only"):
        fa3.launch_fa3(launch, mk, 4096, 2048, 1024, 7, 9, *args, trace=(0xBEEF000, 6))
    with pytest.raises(ValueError, match="traced build"):
        fa3.launch_fa3(launch, traced, 4096, 2048, 1024, 7, 9, *args)
    assert len(launches) == n                                            # neither was launched


def test_auto_variant_rules_without_a_gpu(monkeypatch):
    """The runner's choice on a (faked) Hopper GPU: fa3 by default; wgmma for FA2-only blocks, for
    d = 64 causal below 2048 keys (the speed rule) and for broadcast axes; fa3 for fa3-only blocks
    whatever the speed rule or the strides say (wgmma could not run them)."""
    from flashviz.gpu.tensorcore import kernel as km
    from flashviz.gpu.tensorcore.operands import Operand
    monkeypatch.setitem(km._VARIANT, 0, "wgmma")

    def op(N, d=64, sb=None):
        return Operand(0, (2, 4, N, d), (4 * N * d if sb is None else sb, N * d, d, 1), "float16", None, "torch", 0)

    short, long_, bcast = [op(1000)] * 3, [op(4096)] * 3, [op(4096), op(4096, sb=0), op(4096)]
    assert km.auto_variant(0, None, None, long_, causal=True) == "fa3"
    assert km.auto_variant(0, None, None, short, causal=True) == "wgmma"          # speed rule
    assert km.auto_variant(0, None, None, short, causal=False) == "fa3"
    assert km.auto_variant(0, 64, 64, long_) == "wgmma"                            # FA2-only Br
    assert km.auto_variant(0, 128, 32, long_) == "wgmma"                           # FA2-only Bc
    assert km.auto_variant(0, None, None, bcast) == "wgmma"
    for Br, Bc in ((192, None), (None, 176), (192, 128)):                          # fa3-only blocks
        assert km.auto_variant(0, Br, Bc, short, causal=True) == "fa3"
        assert km.auto_variant(0, Br, Bc, bcast) == "fa3"
    monkeypatch.setitem(km._VARIANT, 0, "mma.sync")
    assert km.auto_variant(0, None, None, long_) == "mma.sync"


@pytest.mark.parametrize("shape, strides, ok", [
    ((2, 3, 100, 64), (3 * 100 * 64, 100 * 64, 64), True),        # contiguous
    ((2, 3, 100, 64), (100 * 3 * 64, 64, 3 * 64), True),          # BSHD viewed as BHSD
    ((2, 3, 100, 64), (0, 100 * 64, 64), False),                  # batch broadcast (expand)
    ((1, 3, 100, 64), (0, 100 * 64, 64), True),                   # size-1 batch: its stride is unused
    ((2, 3, 1, 64), (3 * 64, 64, 0), True),                       # N = 1
    ((2, 3, 100, 128), (3 * 100 * 136, 100 * 136, 132), False),   # rows not 16-byte multiples
    ((2, 3, 100, 64), (3 * 100 * 64, 100 * 64, 64, 2), False),    # d not contiguous
])
def test_tma_strides_rule(shape, strides, ok):
    assert tma.tma_strides_ok(shape, strides) is ok


@pytest.mark.recorded_data
def test_recorded_data_fa3_is_the_default_exactly_where_the_record_has_it_faster():
    """A check of the committed record, not a speed test: for every benchmarked shape, the runner's
    rule (limits.FA3_FROM_NK) picks fa3 exactly where fa3's public call is at least as fast as the
    wgmma kernel's, or where every larger N is."""
    from flashviz.records.results import latest_results
    res = latest_results("mma")
    rows = [r for r in res["bench"] if "fa3_call_ms" in r]
    assert rows
    for r in rows:
        picked = r["N"] >= ml.FA3_FROM_NK.get((r["d"], r["causal"]), 1)
        longer = [x for x in rows if (x["d"], x["causal"]) == (r["d"], r["causal"]) and x["N"] >= r["N"]]
        faster_from_here = all(x["fa3_call_ms"] <= x["wgmma_call_ms"] * 1.005 for x in longer)
        assert picked == faster_from_here, (r["N"], r["d"], r["causal"], r["fa3_call_ms"], r["wgmma_call_ms"])


def test_fa3_limits_and_defaults():
    for d in (64, 128):
        for causal in (False, True):
            Br, Bc = ml.default_blocks(d, causal, "fa3")
            assert (Br, Bc) in ml.mma_blocks(d, "fa3")
            assert ml.mma_smem_bytes(Br, Bc, d, "fa3") <= 232_448
    with pytest.raises(ValueError, match="Bc=32 is not supported by the fa3 kernel; supported: 64, 128, 176"):
        ml.check_mma_sizes(128, 32, 64, "fa3")


# ---------------------------------------------------------------- GPU (Hopper)

def _hopper():
    pytest.importorskip("torch")
    from flashviz.gpu.tensorcore.kernel import device_variant
    if device_variant() != "wgmma":
        pytest.skip("fa3 needs a Hopper GPU")


def _ref(q, k, v, causal):
    """float64 dense attention of torch tensors (B, H, N, d) -> O (B, H, Nq, d) on the CPU (flashviz.reference)."""
    from flashviz.reference import attention
    Q, K, V = (x.double().cpu().numpy() for x in (q, k, v))
    B, H, Nq, d = Q.shape
    O = np.zeros_like(Q)
    for b in range(B):
        for h in range(H):
            O[b, h] = attention(Q[b, h], K[b, h], V[b, h], causal=causal)
    return O


@pytest.mark.gpu
def test_the_runner_chooses_fa3_on_hopper_and_wgmma_where_fa3_cannot_run():
    _hopper()
    import torch

    from flashviz.gpu.tensorcore import kernel as km
    q, k, v = (torch.randn(2, 3, 200, 64, device="cuda", dtype=torch.float16) for _ in range(3))
    ops = [km.torch_operand(x, "Q", None) for x in (q, k, v)]
    assert km.auto_variant(0, None, None, ops) == "fa3"
    assert km.auto_variant(0, 64, 64, ops) == "wgmma"            # Br = 64 is not an fa3 block
    assert km.auto_variant(0, None, None, ops, causal=True) == "wgmma"     # d = 64 causal, 200 keys < 2048
    long = [km.torch_operand(torch.empty(1, 2, 2048, 64, device="cuda", dtype=torch.float16), "Q", None)] * 3
    assert km.auto_variant(0, None, None, long, causal=True) == "fa3"
    kb = k[:1].expand(2, 3, 200, 64)                               # a broadcast batch axis
    assert km.auto_variant(0, None, None, [ops[0], km.torch_operand(kb, "K", None), ops[2]]) == "wgmma"
    ref = _ref(q, kb, v, False)
    for _ in range(2):                                             # the general path, then the per-call one
        O, _ = km.flash_forward_mma(q, kb, v)
        assert np.abs(O.double().cpu().numpy() - ref).max() < 2e-3
    # forced, fa3 reads the broadcast axis through a tensor map with stride 0 (the H200's driver took
    # it on 2026-12-01: it did not raise); it must then give the same attention
    O, _ = km.flash_forward_mma(q, kb, v, variant="fa3")
    assert np.abs(O.double().cpu().numpy() - ref).max() < 2e-3


@pytest.mark.gpu
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_every_block_size_and_dtype(d, causal):
    _hopper()
    from flashviz.gpu.tensorcore.bench import check_case
    for Br, Bc in ml.mma_blocks(d, "fa3"):
        for dtype in ("float16", "bfloat16"):
            r = check_case("fa3", dtype, d, causal, 300, 257, Br, Bc, seed=Br + Bc + d)
            assert r["pass"], r


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
def test_nan_rows_keyless_rows_and_graph_capture(causal):
    _hopper()
    import torch

    from flashviz.gpu.tensorcore.kernel import flash_forward_mma
    q, k, v = (torch.randn(1, 2, n, 128, device="cuda", dtype=torch.bfloat16) for n in (300, 100, 100))
    q[0, 1, 250, 7] = float("nan")
    O, lse = flash_forward_mma(q, k, v, causal=causal, variant="fa3")
    nan_rows = torch.isnan(O).any(-1)
    assert nan_rows[0, 1, 250] and int(nan_rows.sum()) == 1 and torch.isnan(lse[0, 1, 250])
    if causal:           # Nq - Nk = 200 rows see no key: O = 0 and lse = -inf, never NaN
        assert bool((O[:, :, :200] == 0).all()) and bool(torch.isneginf(lse[:, :, :200]).all())
        assert bool(torch.isfinite(lse[0, 0, 200:]).all())
    # graph capture: replay gives the eager result bit for bit
    q2 = q.clone()
    q2[0, 1, 250, 7] = 0.0
    eager, _ = flash_forward_mma(q2, k, v, causal=causal, variant="fa3")
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        flash_forward_mma(q2, k, v, causal=causal, variant="fa3")
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out, _ = flash_forward_mma(q2, k, v, causal=causal, variant="fa3")
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, eager)
    ref = _ref(q2, k, v, causal)
    err = np.abs(eager.double().cpu().numpy() - ref).max()
    assert err < 2e-2 and math.isfinite(err)


@pytest.mark.gpu
@pytest.mark.parametrize("d, Br, Bc", [(64, 192, 128), (128, 128, 128), (128, 128, 176)])
def test_the_persistent_grid_walks_many_tiles_and_gives_the_same_bits(monkeypatch, d, Br, Bc):
    """One block per SM walking 3-5 tiles each, causal with Nq > Nk (the first 400 query rows see no
    key: whole tiles with no key tile, which producer and consumers must both skip): the rings,
    the Q buffer's parity and the ping-pong barriers run on across tiles. Same bits as one block
    per tile, and float64 attention."""
    _hopper()
    import torch

    from flashviz.gpu.tensorcore.kernel import flash_forward_mma
    B, H = 2, 48                                  # more than two tiles per SM at every Br
    q = torch.randn(B, H, 700, d, device="cuda", dtype=torch.float16)
    k, v = (torch.randn(B, H, 300, d, device="cuda", dtype=torch.float16) for _ in range(2))
    tiles = math.ceil(700 / Br) * B * H
    assert tiles > 2 * 132
    O1, l1 = flash_forward_mma(q, k, v, causal=True, variant="fa3", Br=Br, Bc=Bc)
    monkeypatch.setattr(fa3, "PERSISTENT", True)
    O2, l2 = flash_forward_mma(q, k, v, causal=True, variant="fa3", Br=Br, Bc=Bc)
    torch.cuda.synchronize()
    assert torch.equal(O1, O2) and torch.equal(l1, l2)
    assert bool((O2[:, :, :400] == 0).all()) and bool(torch.isneginf(l2[:, :, :400]).all())
    ref = _ref(q[:1, :4], k[:1, :4], v[:1, :4], True)
    assert np.abs(O2[:1, :4].double().cpu().numpy() - ref).max() < 2e-3


_DYNAMIC_RUN = r"""
import sys
sys.path.insert(0, {root!r})
import torch
from flashviz.gpu.common import source
from flashviz.gpu.tensorcore import fa3, kernel as kmod
from flashviz.gpu.tensorcore.kernel import flash_forward_mma
torch.manual_seed(0)
bad = []
for d, Br, Bc, B, H, Nq, Nk, causal in {cases!r}:
    q = torch.randn(B, H, Nq, d, device="cuda", dtype=torch.float16)
    k, v = (torch.randn(B, H, Nk, d, device="cuda", dtype=torch.float16) for _ in range(2))
    O1, l1 = flash_forward_mma(q, k, v, causal=causal, variant="fa3", Br=Br, Bc=Bc)      # one block per tile
    kmod.SOURCE_OVERRIDE["fa3"] = "#define FA3_DYNAMIC 1\n" + source("flash_fwd_fa3.cu")
    fa3.DYNAMIC = True
    for _ in range(3):
        O2, l2 = flash_forward_mma(q, k, v, causal=causal, variant="fa3", Br=Br, Bc=Bc)
        torch.cuda.synchronize()
        if not (torch.equal(O1, O2) and torch.equal(l1, l2)):
            bad.append((d, Br, Bc, B, H, Nq, Nk, causal))
    fa3.DYNAMIC = False
    kmod.SOURCE_OVERRIDE.clear()
print("DYNAMIC-BAD", bad)
"""


@pytest.mark.gpu
def test_the_dynamic_tile_scheduler_gives_the_same_bits_in_a_process_of_its_own():
    """The FA3_DYNAMIC build on the persistent grid with its tile counter (fa3.DYNAMIC; an experiment,
    benchmarks/NOTES.md fa3 v6) against one block per tile, bit for bit, three launches each:
    whole tiles without a key tile (causal, Nq > Nk), more tiles than SMs and fewer, both d. Run in a
    child process with a time limit, so a hang in the handover fails this test alone."""
    _hopper()
    import subprocess
    import sys
    from pathlib import Path
    cases = [(64, 192, 128, 2, 48, 700, 300, True), (128, 128, 128, 2, 48, 700, 300, True),
             (128, 128, 128, 1, 2, 300, 700, True), (64, 192, 128, 2, 16, 2048, 2048, False),
             (128, 128, 128, 1, 16, 1000, 1000, True)]
    code = _DYNAMIC_RUN.format(root=str(Path(__file__).resolve().parents[2]), cases=cases)
    try:
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        pytest.fail("the FA3_DYNAMIC kernel did not finish within 300 s (a hang in the tile handover?)")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "DYNAMIC-BAD []" in r.stdout, r.stdout[-2000:]
