"""The decode kernel (kernels/flash_decode.cu, flashviz.gpu.decode): its launch arithmetic on the CPU,
and on a GPU its output against the NumPy split-KV decode (flashviz.decode.decode_attention, float64
on the same fp16 / bf16-rounded inputs) over GQA, Nq, causal, split counts (empty splits included)
and paged caches. Their first GPU run (2026-12-05) stopped at NVRTC (fixed in 724019e)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from flashviz.decode import decode_attention, num_splits_heuristic
from flashviz.gpu import decode as gd

KERNEL = (Path(__file__).resolve().parents[2] / "kernels" / "flash_decode.cu").read_text()


def _constant(name: str) -> int:
    return int(re.search(rf"constexpr int {name} = (\d+);", KERNEL).group(1))


def test_the_runner_uses_the_kernels_own_constants_and_shared_memory():
    assert (gd.DECODE_BC, gd.DECODE_RM, gd.DECODE_THREADS) == (_constant("Bc"), _constant("RM"), _constant("NT"))
    formula = re.search(r"smem_bytes\(\) \{ return (.*?); \}", KERNEL).group(1)
    for D in gd.DECODE_D:
        want = eval(formula, {}, {"RM": _constant("RM"), "Bc": _constant("Bc"), "D": D})   # the kernel's own sum
        assert gd.decode_smem_bytes(D, "simt") == want
    assert gd.decode_smem_bytes(128, "simt") == 32 * 128 * 4 + 4 * 64 * 128 * 2 + 32 * 64 * 4 + 3 * 32 * 4 == 90_496
    # v2: its own constants and sum (flash_decode_mma)
    assert (gd.DECODE_RM_MMA, gd.DECODE_KW, gd.DECODE_ST) == (_constant("RM2"), _constant("KW"), _constant("ST"))
    formula2 = re.search(r"mma_smem_bytes\(\) \{ return (.*?); \}", KERNEL).group(1)
    assert "constexpr int NW = NT / 32;" in KERNEL
    consts = {"RM2": _constant("RM2"), "ST": _constant("ST"), "KW": _constant("KW"), "NW": _constant("NT") // 32}
    for D in gd.DECODE_D:
        assert gd.decode_smem_bytes(D, "mma") == eval(formula2, {}, {**consts, "D": D})
    assert gd.decode_smem_bytes(128, "mma") == 16 * 128 * 2 + 4 * 3 * 2 * 16 * 128 * 2 == 102_400
    assert gd.decode_smem_bytes(64, "mma") == 51_200
    assert [gd.decode_smem_bytes(D) for D in gd.DECODE_D] == [51_200, 102_400]      # no variant: v2, the default
    with pytest.raises(ValueError, match="variant must be one of"):
        gd.decode_smem_bytes(128, "wgmma")
    with pytest.raises(ValueError, match=r"d in \(64, 128\), got d = 96"):
        gd.decode_smem_bytes(96)


def test_the_launch_follows_the_numpy_decodes_split_rule_with_the_kernels_occupancy():
    # the H200's shared memory: 233,472 bytes an SM, 1,024 reserved a block; 2048 threads an SM
    # v1 (variant "simt"), the split rule's first user; v2 below
    assert gd.decode_blocks_per_sm(128, "simt") == 233_472 // (90_496 + 1_024) == 2
    assert gd.decode_blocks_per_sm(64, "simt") == 233_472 // (49_536 + 1_024) == 4
    assert gd.decode_blocks_per_sm(64, "simt", smem_per_sm=10**9) == 2048 // 128    # then threads limit it
    assert gd.decode_blocks_per_sm(128, "simt", smem_per_sm=50_000) == 1              # a block always fits (optin)
    for B, H, H_kv, Nq, Nk in [(1, 32, 8, 1, 4096), (8, 32, 32, 1, 32_768), (1, 32, 4, 8, 1000), (2, 64, 1, 1, 77)]:
        chunks = -(-(H // H_kv) * Nq // 32)
        got = gd.decode_launch(B, H, H_kv, Nq, Nk, 128, variant="simt")
        assert got["chunks"] == chunks and got["tiles"] == -(-Nk // 64)
        assert got["splits"] == num_splits_heuristic(B * H_kv * chunks, -(-Nk // 64), blocks_per_sm=2)
        assert got["blocks"] == got["splits"] * H_kv * chunks * B
    # v1 at the recorded sweep's shapes (decode-h200-2026-12-05.json): one wave of 264 slots
    v1 = dict(variant="simt")
    assert gd.decode_launch(1, 32, 8, 1, 4096, 128, **v1)["splits"] == 32    # ⌈64/33⌉ = 2 key tiles, as 32 gives
    assert gd.decode_launch(1, 32, 8, 1, 32_768, 128, **v1)["splits"] == 32  # ⌈512/33⌉ = 16 = 512/32
    assert gd.decode_launch(8, 32, 8, 1, 4096, 128, **v1)["splits"] == 4     # 64 blocks: 4 splits, 256 of 264
    assert gd.decode_launch(8, 32, 32, 1, 4096, 128, **v1)["splits"] == 1    # 256 >= 0.8 · 264: full already
    # v2, the default, counts one block an SM (split_slots_per_sm): 132 slots
    assert gd.split_slots_per_sm(128) == gd.split_slots_per_sm(64, "mma") == 1
    assert gd.split_slots_per_sm(128, "simt") == gd.decode_blocks_per_sm(128, "simt") == 2
    assert gd.decode_launch(1, 32, 8, 1, 4096, 128)["splits"] == 16          # ⌊132/8⌋ = 16: 4 key tiles each
    assert gd.decode_launch(1, 32, 8, 1, 32_768, 128)["splits"] == 16        # 32 key tiles each
    assert gd.decode_launch(8, 32, 8, 1, 4096, 128)["splits"] == 2           # 64 blocks: ⌊132/64⌋ = 2
    assert gd.decode_launch(8, 32, 32, 1, 4096, 128)["splits"] == 1          # 256 blocks: full already
    assert gd.decode_launch(1, 32, 8, 1, 4096, 64, num_splits=3)["blocks"] == 3 * 8
    with pytest.raises(ValueError, match="H % H_kv"):
        gd.decode_launch(1, 6, 4, 1, 64, 64)
    with pytest.raises(ValueError, match="num_splits must be an integer"):
        gd.decode_launch(1, 32, 8, 1, 4096, 64, num_splits=0)
    assert gd.decode_launch(1, 32, 8, 1, 4096, 64, num_sms=66, variant="simt")["splits"] == num_splits_heuristic(
        8, 64, num_sms=66, blocks_per_sm=4) == 32
    assert gd.decode_launch(1, 32, 8, 1, 4096, 64, num_sms=66)["splits"] == num_splits_heuristic(
        8, 64, num_sms=66, blocks_per_sm=1) == 8
    # v2 takes 16 rows a block: G·Nq = 64 rows are 4 chunks there, 2 for v1; the same blocks an SM
    assert gd.decode_blocks_per_sm(128, "mma") == 233_472 // (102_400 + 1_024) == 2
    assert gd.decode_blocks_per_sm(64, "mma") == 233_472 // (51_200 + 1_024) == 4
    v1, v2 = (gd.decode_launch(1, 32, 4, 8, 1000, 128, variant=v) for v in gd.DECODE_VARIANTS)
    assert (v1["chunks"], v2["chunks"], v1["rows"], v2["rows"]) == (2, 4, 32, 16)
    assert v2["splits"] == num_splits_heuristic(4 * 4, 16, blocks_per_sm=1) and v2["variant"] == "mma"
    assert v2["smem_bytes"] == 102_400 and v1["variant"] == "simt" and gd.DEFAULT_VARIANT == "mma"
    assert gd.decode_launch(1, 32, 4, 8, 1000, 128) == v2                    # no variant: v2 on an H200


def test_the_launch_hands_the_driver_each_parameter_by_name(monkeypatch):
    """launch_ptrs through a stand-in cuLaunchKernel: the function, grid, block, shared memory and
    stream it is given, and each parameter read back from the block at its signature's offset."""
    import dataclasses
    import struct

    from flashviz.records import kernel_params as kp
    calls, mode = [], {}

    def launch(f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        tr = f == 11 and mode["traced"]
        block = gd._MAIN_TRACED if tr else gd._MAIN if f == 11 else gd._MERGE
        assert params == block.ptrs_addr
        lay = kp.layout("flash_decode.cu", "flash_decode" if f == 11 else "flash_decode_merge", tr)
        raw = block.buf.tobytes()
        calls.append((f, (gx, gy, gz), (bx, by, bz), smem, stream, extra,
                      {p.name: struct.unpack_from("<" + p.fmt, raw, p.offset)[0] for p in lay.params}))

    monkeypatch.setattr(gd, "_DRIVER", [launch, lambda: 0])             # (cuLaunchKernel, cudaGetDevice)
    for traced in (False, True):
        calls.clear()
        mode["traced"] = traced
        kern = gd.DecodeKernels(None, None, 90_496, main_ptr=11, merge_ptr=22, traced=traced)
        L = gd.DecodeLaunch(kern, 0, (5, 8, 2), (9, 16), (32, 8, 1, 4000, 5, 1), 0.125, 2 * 32, 5, 128,
                            (2, 32, 1, 128), (2, 32, 1), None)
        gd.launch_ptrs(L, 0x1000, 0x2000, 0x3000, 0x4000, 0x5000, 0x6000, 0x7000, 0x8000, 77,
                       (0x9000, 63) if traced else None)
        (f, grid, block, smem, stream, extra, main), merge = calls
        assert (f, grid, block, smem, stream, extra) == (11, (5, 8, 2), (128, 1, 1), 90_496, 77, 0)
        want = dict(Q=0x1000, K=0x2000, V=0x3000, block_table=0x4000, max_pages=9, page_size=16, O_part=0x5000,
                    lse_part=0x6000, O=0x7000, lse=0x8000, H=32, H_kv=8, Nq=1, Nk=4000, S=5, causal=1, scale=0.125)
        assert main == want | ({"fv_trace": 0x9000, "fv_jmax": 63} if traced else {})
        assert merge[:6] == (22, (64, 1, 1), (128, 1, 1), 0, 77, 0)
        assert merge[6] == dict(O_part=0x5000, lse_part=0x6000, O=0x7000, lse=0x8000, S=5)
    calls.clear()
    mode["traced"] = False
    gd.launch_ptrs(gd.DecodeLaunch(gd.DecodeKernels(None, None, 1, 11, 22), 0, (1, 8, 1), (0, 0), (8, 8, 1, 9, 1, 0),
                                   0.1, 8, 1, 64, (1, 8, 1, 64), (1, 8, 1), None), 1, 2, 3, 0, 0, 0, 4, 5, 0)
    assert len(calls) == 1                                                  # one split: no merge
    with pytest.raises(ValueError, match="traced decode kernel needs trace"):
        gd.launch_ptrs(dataclasses.replace(L, kern=gd.DecodeKernels(None, None, 1, 11, 22, True)), 1, 2, 3, 0, 0, 0, 4, 5, 0)


class _FakeTensor:
    """What ``decode._call_key`` and ``decode._run`` read of a torch tensor."""

    def __init__(self, shape=(1, 32, 1, 128), dtype="float16", device="cuda:0", ptr=1 << 20, contiguous=True):
        self.shape, self.dtype, self.device, self._ptr, self._contiguous = tuple(shape), dtype, device, ptr, contiguous

    def data_ptr(self):
        return self._ptr

    def is_contiguous(self):
        return self._contiguous

    def new_empty(self, n, dtype=None):
        return _FakeTensor((n,), dtype or self.dtype, self.device, 0)

    def expand(self, *shape):
        return _FakeTensor(shape[0] if len(shape) == 1 and isinstance(shape[0], tuple) else shape, self.dtype,
                           self.device, 0)


@pytest.fixture
def fake_torch(monkeypatch):
    """A stand-in ``torch`` (its Tensor: _FakeTensor; empty_like hands out addresses 1 MB apart), the
    driver already looked up with current device ``current[0]``, and no kept calls."""
    import sys
    import types
    fake = types.ModuleType("torch")
    made: list = []

    def empty_like(t):
        made.append(t)
        return _FakeTensor(t.shape, t.dtype, t.device, len(made) << 20)

    fake.Tensor, fake.float32, fake.empty_like = _FakeTensor, "float32", empty_like
    monkeypatch.setitem(sys.modules, "torch", fake)
    current = [0]
    monkeypatch.setattr(gd, "_DRIVER", [None, lambda: current[0]])
    monkeypatch.setattr(gd, "_LAUNCHES", {})
    return current


def test_the_call_key_tells_apart_everything_the_checks_read(fake_torch):
    current = fake_torch
    T = _FakeTensor

    def key(Q=None, K=None, V=None, num_splits=None, causal=False, scale=None, block_table=None, Nk=None,
            variant=None):
        hit = gd._call_key(Q or T(), K or T((1, 8, 4096, 128)), V or T((1, 8, 4096, 128)), num_splits, causal, scale,
                           block_table, Nk, variant)
        return None if hit is None else hit[0]

    base = key()
    assert base is not None and key() == base and hash(key()) == hash(base)      # new objects, the same key
    assert key(Q=T(ptr=(1 << 20) + 4096)) == base                                # another aligned address
    hit = gd._call_key(T(ptr=16), T(ptr=32), T(ptr=48), None, False, None, T((1, 4), "int32", ptr=64), 77, None)
    assert hit[1:] == (16, 32, 48, 64)                                           # the pointers the launch needs
    assert gd._call_key(T(), T(), T(), None, False, None, None, None, None)[4] == 0   # no block table: 0
    table = T((1, 4), "int32")
    others = [
        key(Q=T((1, 32, 2, 128))), key(K=T((1, 8, 4000, 128)), V=T((1, 8, 4000, 128))),  # shapes
        key(Q=T(dtype="bfloat16")), key(V=T((1, 8, 4096, 128), dtype="bfloat16")),     # dtypes
        key(K=T((1, 8, 4096, 128), device="cuda:1")), key(Q=T(device="cpu")),          # devices
        key(Q=T((32, 1, 128)), K=T((8, 4096, 128)), V=T((8, 4096, 128))),              # no batch axis
        key(num_splits=1), key(num_splits=16), key(causal=True), key(scale=0.1), key(Nk=4000),
        key(variant="mma"), key(variant="simt"), key(block_table=table), key(block_table=T((4,), "int32")),
        key(block_table=T((1, 4), "int64")), key(block_table=T((1, 4), "int32", "cuda:1")),
    ]
    current[0] = 1
    others.append(key())                                                          # another current device
    keys = [base, *others]
    assert None not in keys and len(set(keys)) == len(keys)


@pytest.mark.parametrize("kw", [
    {"Q": _FakeTensor(contiguous=False)}, {"V": _FakeTensor((1, 8, 4096, 128), contiguous=False)},
    {"K": _FakeTensor((1, 8, 4096, 128), ptr=(1 << 20) + 8)},                     # not 16-byte aligned
    {"block_table": _FakeTensor((1, 4), "int32", contiguous=False)},
    {"causal": 1}, {"causal": np.True_}, {"scale": 1}, {"scale": np.float64(0.1)}, {"num_splits": np.int64(2)},
    {"num_splits": 2.0}, {"Nk": np.int64(100)}, {"variant": ["mma"]}, {"Q": object()},
])
def test_calls_the_general_path_copies_or_rejects_have_no_key(fake_torch, kw):
    """A call the general path would copy (not contiguous: nothing is kept for it) or reject (not
    aligned), and values that compare equal to valid ones but that the checks treat otherwise, give
    no key: such calls always take the general path (its result or its error)."""
    args = dict(Q=_FakeTensor(), K=_FakeTensor((1, 8, 4096, 128)), V=_FakeTensor((1, 8, 4096, 128)), num_splits=None,
                causal=False, scale=None, block_table=None, Nk=None, variant=None) | kw
    assert gd._call_key(*args.values()) is None


def test_a_kept_call_gives_o_and_lse_their_own_allocations(fake_torch, monkeypatch):
    """_run's allocations: O like Q and lse float32, each its own tensor (what a caller keeps keeps
    nothing else alive); when S > 1 also one float32 workspace of the partials, O_part (rows·S·d
    floats) then lse_part (rows·S floats), as the kernels' partial layout (kernels/flash_decode.cu)
    reads them, dropped when the call returns."""
    launched = []
    monkeypatch.setattr(gd, "ensure_context", lambda dev: None)
    monkeypatch.setattr(gd, "raw_torch_stream", lambda dev: 99)
    monkeypatch.setattr(gd, "launch_ptrs", lambda *a: launched.append(a))
    kern = gd.DecodeKernels(None, None, 102_400, 11, 22)
    H, Nq, d = 32, 3, 128
    for S, B, lead in ((16, 2, (2,)), (1, 2, (2,)), (3, 1, ())):         # lead: Q's batch axis, if it had one
        rows = B * H * Nq
        L = gd.DecodeLaunch(kern, 0, (S, 8, B), (0, 0), (H, 8, Nq, 4096, S, 0), 0.088, rows, S, d,
                            (*lead, H, Nq, d), (*lead, H, Nq), None)
        C = gd.make_call(L, _FakeTensor((B, H, Nq, d)))
        assert C.o_like.shape == L.o_shape and C.o_like.dtype == "float16"
        assert C.lse_like.shape == L.lse_shape and C.lse_like.dtype == "float32"
        launched.clear()
        O, lse = gd._run(C, 1, 2, 3, 4)
        (_, q, k, v, table, O_part, lse_part, o, lse_p, stream), = launched
        assert (q, k, v, table, stream, o, lse_p) == (1, 2, 3, 4, 99, O.data_ptr(), lse.data_ptr())
        assert O.shape == L.o_shape and lse.shape == L.lse_shape and O.dtype == "float16" and lse.dtype == "float32"
        if S == 1:                                                       # no partials, no workspace
            assert (O_part, lse_part) == (0, 0) and C.ws_like is None
            continue
        assert C.ws_like.shape == (S * (d + 1), *L.lse_shape) and C.ws_like.dtype == "float32"
        assert lse_part == O_part + rows * S * d * 4                       # after O_part (B, H, Nq, S, d)
        assert len({O_part, o, lse_p}) == 3                                # three allocations: nothing shared


def test_a_block_is_compiled_for_the_fewest_rows_that_hold_it():
    """ROWS: the smallest power of two >= min(G·Nq, 32), for every G·Nq up to 80."""
    for G in range(1, 17):
        for Nq in range(1, 6):
            R = min(G * Nq, 32)
            rows = gd.block_rows(G, Nq)
            assert rows >= R and rows & (rows - 1) == 0 and (rows == 1 or rows // 2 < R)
            assert gd.decode_launch(2, 4 * G, 4, Nq, 100, 64, variant="simt")["rows"] == rows
    with pytest.raises(ValueError, match="G and Nq must be >= 1"):
        gd.block_rows(0, 1)


# ---------------------------------------------------------------- on a GPU

def _inputs(torch, B, H, H_kv, Nq, Nk, d, dtype, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    mk = lambda *s: torch.randn(*s, generator=g, device="cuda", dtype=torch.float32).to(dtype)  # noqa: E731
    return mk(B, H, Nq, d), mk(B, H_kv, Nk, d), mk(B, H_kv, Nk, d)


def _reference(q, k, v, **kw):
    r = decode_attention(*(x.double().cpu().numpy() for x in (q, k, v)), **kw)
    return r.O, r.lse


def _check(torch, q, k, v, *, causal=False, num_splits=None, tol=None, contiguous=None, variant=None, **paged):
    """flash_decode_gpu against the NumPy decode of the same values (contiguous: the unpaged K, V).
    O to the output dtype's rounding; lse (fp32 math on the same rounded inputs) to 2e-3."""
    O, lse = gd.flash_decode_gpu(q, k, v, causal=causal, num_splits=num_splits, variant=variant, **paged)
    Oref, Lref = _reference(q, *(contiguous or (k, v)), causal=causal)
    tol = tol or (4e-3 if q.dtype == torch.float16 else 3e-2)
    Og, Lg = O.double().cpu().numpy(), lse.double().cpu().numpy()
    assert O.shape == q.shape and lse.shape == q.shape[:-1]
    assert np.isfinite(Og).all()
    assert np.array_equal(np.isneginf(Lg), np.isneginf(Lref))
    seen = ~np.isneginf(Lref)
    assert np.abs(Og - Oref).max() <= tol * max(1.0, np.abs(Oref).max())
    assert np.abs(Lg[seen] - Lref[seen]).max(initial=0) <= 2e-3
    assert not Og[~seen].any()                                  # rows that see no key: O = 0


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("G, Nq", [(1, 1), (2, 1), (4, 1), (8, 1), (4, 3), (4, 4), (8, 5), (8, 8)])   # every ROWS;
@pytest.mark.parametrize("causal", [False, True])                                                  # (8, 5): 2 chunks
@pytest.mark.parametrize("variant", gd.DECODE_VARIANTS)                       # v2: (8, 5) is 3 chunks of 16 rows
def test_decode_matches_the_numpy_decode(dtype, d, G, Nq, causal, variant):
    torch = pytest.importorskip("torch")
    H_kv = 2
    for Nk in (1, 63, 1000):
        q, k, v = _inputs(torch, 2, G * H_kv, H_kv, Nq, Nk, d, getattr(torch, dtype), seed=Nk)
        _check(torch, q, k, v, causal=causal, variant=variant)


@pytest.mark.gpu
@pytest.mark.parametrize("num_splits", [1, 2, 7, 40])       # 40 > the 16 key tiles of Nk = 1000: empty splits
@pytest.mark.parametrize("variant", gd.DECODE_VARIANTS)
def test_every_split_count_gives_the_same_answer(num_splits, variant):
    torch = pytest.importorskip("torch")
    q, k, v = _inputs(torch, 1, 8, 2, 1, 1000, 128, torch.bfloat16)
    _check(torch, q, k, v, num_splits=num_splits, variant=variant)


@pytest.mark.gpu
@pytest.mark.parametrize("page_size, d, causal, num_splits, dtype", [
    (1, 128, False, None, "float16"), (16, 128, False, None, "float16"), (64, 128, False, None, "bfloat16"),
    (16, 64, True, 3, "float16"), (64, 64, True, 1, "bfloat16")])
@pytest.mark.parametrize("variant", gd.DECODE_VARIANTS)
def test_a_paged_cache_gives_the_contiguous_answer(page_size, d, causal, num_splits, dtype, variant):
    """Shuffled pages, and a table padded past the last page a sequence needs with pages full of
    NaN: a read of a padded page would show as NaN in O."""
    torch = pytest.importorskip("torch")
    from flashviz.decode import paginate
    B, H_kv, Nk, Nq = 2, 2, 1000, 2 if causal else 1
    q, k, v = _inputs(torch, B, 8, H_kv, Nq, Nk, d, getattr(torch, dtype))
    P = -(-Nk // page_size)
    order = np.random.default_rng(5).permutation(B * P)
    Kp, table = paginate(k.float().cpu().numpy(), page_size, order)
    Vp, _ = paginate(v.float().cpu().numpy(), page_size, order)
    nan_page = np.full((1, *Kp.shape[1:]), np.nan, dtype=Kp.dtype)
    Kp, Vp = np.concatenate([Kp, nan_page]), np.concatenate([Vp, nan_page])
    table = np.concatenate([table, np.full((B, 3), len(Kp) - 1, dtype=table.dtype)], axis=1)
    Kp, Vp = (torch.from_numpy(x).cuda().to(q.dtype) for x in (Kp, Vp))
    _check(torch, q, Kp, Vp, block_table=torch.from_numpy(table).cuda(), Nk=Nk, contiguous=(k, v),
           causal=causal, num_splits=num_splits, variant=variant)


@pytest.mark.gpu
def test_unbatched_inputs_and_a_one_dimensional_block_table():
    torch = pytest.importorskip("torch")
    from flashviz.decode import paginate
    q, k, v = _inputs(torch, 1, 8, 2, 1, 300, 64, torch.float16)
    O3, L3 = gd.flash_decode_gpu(q[0], k[0], v[0])
    O4, L4 = gd.flash_decode_gpu(q, k, v)
    assert O3.shape == q[0].shape and torch.equal(O3, O4[0]) and torch.equal(L3, L4[0])
    Kp, table = paginate(k.cpu().numpy(), 32, np.arange(10))
    Vp, _ = paginate(v.cpu().numpy(), 32, np.arange(10))
    _check(torch, q[0], torch.from_numpy(Kp).cuda(), torch.from_numpy(Vp).cuda(),
           block_table=torch.from_numpy(table[0]).cuda(), Nk=300, contiguous=(k[0], v[0]))


@pytest.mark.gpu
def test_rows_that_see_no_key_and_bad_input():
    torch = pytest.importorskip("torch")
    q, k, v = _inputs(torch, 1, 4, 1, 8, 3, 64, torch.float16)      # causal, Nq = 8 > Nk = 3: 5 rows see nothing
    q2, k2, v2 = _inputs(torch, 1, 4, 1, 8, 130, 64, torch.float16)
    for variant in gd.DECODE_VARIANTS:
        _check(torch, q, k, v, causal=True, variant=variant)
        _check(torch, q, k, v, causal=True, num_splits=4, variant=variant)     # every split empty for them: the
        _check(torch, q2, k2, v2, causal=True, num_splits=3, variant=variant)  # merge's all −inf branch; and
    with pytest.raises(ValueError, match="variant must be one of"):            # splits with keys some rows miss
        gd.flash_decode_gpu(q, k, v, variant="wgmma")
    with pytest.raises(ValueError, match="H % H_kv"):
        gd.flash_decode_gpu(q[:, :3], k[:, :1].expand(1, 2, 3, 64).contiguous(), v[:, :1].expand(1, 2, 3, 64))
    with pytest.raises(ValueError, match="num_splits must be an integer"):
        gd.flash_decode_gpu(q, k, v, num_splits=0)
    with pytest.raises(TypeError, match="CPU torch tensor"):
        gd.flash_decode_gpu(q.cpu(), k, v)
    with pytest.raises(TypeError, match="float16 or bfloat16"):
        gd.flash_decode_gpu(q.float(), k.float(), v.float())
    with pytest.raises(ValueError, match="Nk = 5 is for a paged cache"):
        gd.flash_decode_gpu(q, k, v, Nk=5)
    with pytest.raises(TypeError, match="int32 or int64"):
        gd.flash_decode_gpu(q, k.view(1, 3, 1, 64), v.view(1, 3, 1, 64), block_table=torch.zeros(1, 3, device="cuda"))
    flat = torch.empty(q.numel() + 8, dtype=q.dtype, device="cuda")
    with pytest.raises(ValueError, match="16-byte boundary"):
        gd.flash_decode_gpu(flat[1:1 + q.numel()].view(q.shape), k, v)


@pytest.mark.gpu
@pytest.mark.parametrize("variant", gd.DECODE_VARIANTS)
@pytest.mark.parametrize("d", [64, 128])
def test_the_occupancy_the_heuristic_assumes_is_the_drivers(d, variant):
    """decode_blocks_per_sm (shared memory and threads; registers assumed not to limit) against
    the CUDA occupancy calculator for the compiled kernel, at every ROWS, paged and not."""
    pytest.importorskip("torch")
    from flashviz.gpu.common import cupy, device_facts
    cp, f = cupy(), device_facts()
    want = gd.decode_blocks_per_sm(d, variant, smem_per_sm=f.smem_per_sm, smem_reserved=f.smem_reserved)
    for rows in ((1, 2, 4, 8, 16, 32) if variant == "simt" else (32,)):
        for paged in (False, True):
            kern = gd.compile_decode("float16", d, paged, rows, variant=variant)
            got = cp.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(kern.main_ptr, gd.DECODE_THREADS,
                                                                           kern.smem_bytes)
            assert got == want, (rows, paged, got, want)


@pytest.mark.gpu
def test_a_repeated_call_launches_its_kept_plan_on_new_data_streams_and_threads(monkeypatch):
    """The second call with a key launches the DecodeLaunch the first one kept (no second plan):
    the NumPy decode's answer on new values at the same shapes, unbatched too, on torch's current
    stream (the stream handed to the launch), and from another thread (whose CUDA context is bound
    before the driver-API launch); a call whose Q had to be copied (not contiguous) keeps nothing."""
    import threading
    torch = pytest.importorskip("torch")
    gd._LAUNCHES.clear()
    kinds = (*gd.DECODE_VARIANTS, None)                               # None: the default, a key of its own
    for variant in kinds:
        q, k, v = _inputs(torch, 2, 8, 2, 1, 1000, 128, torch.float16, seed=1)
        _check(torch, q, k, v, variant=variant)
        _check(torch, q[0], k[0], v[0], variant=variant)
    assert len(gd._LAUNCHES) == 6
    assert gd.plan_decode(q, k, v).variant == "mma"                  # an H100 / H200 runs v2 by default
    planned, streams = [], []
    real_plan, real_launch = gd.plan_decode, gd.launch_ptrs
    monkeypatch.setattr(gd, "plan_decode", lambda *a, **kw: planned.append(a) or real_plan(*a, **kw))
    monkeypatch.setattr(gd, "launch_ptrs", lambda *a, **kw: streams.append(a[9]) or real_launch(*a, **kw))
    for seed in (2, 3):
        for variant in kinds:
            q, k, v = _inputs(torch, 2, 8, 2, 1, 1000, 128, torch.float16, seed=seed)
            _check(torch, q, k, v, variant=variant)
            _check(torch, q[0], k[0], v[0], variant=variant)
    assert planned == [] and len(gd._LAUNCHES) == 6                    # every call launched a kept plan
    s = torch.cuda.Stream()
    q, k, v = _inputs(torch, 2, 8, 2, 1, 1000, 128, torch.float16, seed=4)
    Oref, _ = _reference(q, k, v)
    with torch.cuda.stream(s):
        O, lse = gd.flash_decode_gpu(q, k, v, variant=gd.DEFAULT_VARIANT)      # a key kept above
        O = O.double()                                                # on s, after the launch
    s.synchronize()
    assert streams[-1] == s.cuda_stream and planned == []
    assert np.abs(O.cpu().numpy() - Oref).max() <= 4e-3 * max(1.0, np.abs(Oref).max())
    out = {}

    def worker():                                                     # a fresh thread: no CUDA call yet
        try:
            out["O"] = gd.flash_decode_gpu(q, k, v, variant="mma")[0].double().cpu().numpy()
        except Exception as exc:                                      # noqa: BLE001 - reported below
            out["error"] = repr(exc)

    th = threading.Thread(target=worker)
    th.start()
    th.join()
    assert "error" not in out, out.get("error")
    assert planned == [] and np.abs(out["O"] - Oref).max() <= 4e-3 * max(1.0, np.abs(Oref).max())
    before = len(gd._LAUNCHES)
    q_gap = torch.empty(2, 8, 2, 128, dtype=q.dtype, device="cuda")[:, :, :1]      # rows 256 elements apart
    q_gap.copy_(q)
    assert not q_gap.is_contiguous()
    _check(torch, q_gap, k, v)
    _check(torch, q_gap, k, v)
    assert len(planned) == 2 and len(gd._LAUNCHES) == before                   # planned each time, kept never


@pytest.mark.gpu
@pytest.mark.parametrize("num_splits", [None, 1])                 # the rule's 16 splits (workspace with partials), none
def test_the_public_call_works_inside_cuda_graph_capture(num_splits):
    """A kept call captured into a CUDA graph (its two allocations from the graph's pool, its two
    launches on the capture stream) gives the NumPy decode's answer for new values of Q, K, V
    written into the same buffers before each replay; lse, a view of the workspace, included."""
    torch = pytest.importorskip("torch")
    q, k, v = _inputs(torch, 1, 32, 8, 1, 4096, 128, torch.float16, seed=5)
    gd.flash_decode_gpu(q, k, v, num_splits=num_splits)                  # compile and keep outside capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        O, lse = gd.flash_decode_gpu(q, k, v, num_splits=num_splits)
    for seed in (6, 7):
        for x, y in zip((q, k, v), _inputs(torch, 1, 32, 8, 1, 4096, 128, torch.float16, seed=seed)):
            x.copy_(y)
        graph.replay()
        torch.cuda.synchronize()
        Oref, Lref = _reference(q, k, v)
        assert np.abs(O.double().cpu().numpy() - Oref).max() <= 4e-3 * max(1.0, np.abs(Oref).max())
        assert np.abs(lse.double().cpu().numpy() - Lref).max() <= 2e-3


@pytest.mark.gpu
@pytest.mark.parametrize("B, H, H_kv, Nq, Nk, num_splits, causal", [
    (1, 32, 8, 1, 4096, 1, False), (1, 32, 8, 1, 4096, None, False), (2, 8, 2, 3, 1000, 7, True),
    (1, 4, 1, 1, 640, 40, False)])                 # 40 splits of 10 key tiles: 30 empty splits
@pytest.mark.parametrize("variant", gd.DECODE_VARIANTS)
def test_decode_timeline_is_complete_ordered_and_exact(B, H, H_kv, Nq, Nk, num_splits, causal, variant):
    """kernels/flash_decode.cu traced (trace_decode; its O and lse are bit-identical to the normal
    kernel's there): one record per block, each (split, KV head, sequence) once; over each KV head
    the splits' tiles are the key tiles 0 .. Tc − 1 once; in each warp the steps of a tile run in
    the kernel's order (load_KV, compute_S, update_ml, accumulate_O) and the tiles one after the
    other; the last step is write_partial when S > 1; both times measured."""
    pytest.importorskip("torch")
    from flashviz.gpu.decode_trace import trace_decode
    tl = trace_decode(B, H, H_kv, Nk, 128, Nq=Nq, num_splits=num_splits, causal=causal, repeat=3, rounds=2,
                      variant=variant)
    assert tl.notes["variant"] == (variant or gd.DEFAULT_VARIANT)
    S, Tc = tl.grid[0], -(-Nk // 64)
    assert tl.kernel == "decode" and tl.grid == (S, H_kv * tl.notes["chunks"], B) and tl.notes["S"] == S
    if num_splits:
        assert S == num_splits
    assert len(tl.blocks) == S * tl.grid[1] * B
    for b in range(B):
        for h in range(tl.grid[1]):
            mine = tl.tiles[(tl.blocks["b"][tl.tiles["cta"]] == b) & (tl.blocks["h"][tl.tiles["cta"]] == h)]
            assert sorted(mine["j"].tolist()) == list(range(Tc))
    order = ("load_KV", "compute_S", "update_ml", "accumulate_O")
    for blk in tl.blocks[:64]:
        for w in range(4):
            e = tl.events[(tl.events["cta"] == blk["cta"]) & (tl.events["group"] == w) & (tl.events["j"] >= 0)]
            e = e[np.lexsort((e["t0_ns"], e["j"]))]
            names = [tl.stages[s] for s in e["stage"]]
            assert names == list(order) * (len(e) // 4), names[:8]
            assert np.all(np.diff(e["t0_ns"]) >= -1.0)          # one step after the other, tiles in order
    assert tl.stages[-1] == ("write_partial" if S > 1 else "write_O")
    writes = tl.stage_events(tl.stages[-1])
    assert len(writes) == 4 * len(tl.blocks) and np.all(writes["j"] == -1)
    starts = [s * Tc // S for s in range(S + 1)]                     # split s: key tiles [starts[s], starts[s+1])
    assert [int(b["n_j"]) for b in tl.blocks] == [starts[int(b["i"]) + 1] - starts[int(b["i"])] for b in tl.blocks]
    assert tl.kernel_ms > 0 and tl.traced_ms > 0
