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
        assert gd.decode_smem_bytes(D) == want
    assert gd.decode_smem_bytes(128) == 32 * 128 * 4 + 4 * 64 * 128 * 2 + 32 * 64 * 4 + 3 * 32 * 4 == 90_496
    with pytest.raises(ValueError, match=r"d in \(64, 128\), got d = 96"):
        gd.decode_smem_bytes(96)


def test_the_launch_follows_the_numpy_decodes_split_rule():
    for B, H, H_kv, Nq, Nk in [(1, 32, 8, 1, 4096), (8, 32, 32, 1, 32_768), (1, 32, 4, 8, 1000), (2, 64, 1, 1, 77)]:
        chunks = -(-(H // H_kv) * Nq // 32)
        got = gd.decode_launch(B, H, H_kv, Nq, Nk, 128)
        assert got["chunks"] == chunks and got["tiles"] == -(-Nk // 64)
        assert got["splits"] == num_splits_heuristic(B * H_kv * chunks, -(-Nk // 64))
        assert got["blocks"] == got["splits"] * H_kv * chunks * B
    assert gd.decode_launch(1, 32, 8, 1, 4096, 64, num_splits=3)["blocks"] == 3 * 8
    with pytest.raises(ValueError, match="H % H_kv"):
        gd.decode_launch(1, 6, 4, 1, 64, 64)
    with pytest.raises(ValueError, match="num_splits must be an integer"):
        gd.decode_launch(1, 32, 8, 1, 4096, 64, num_splits=0)
    assert gd.decode_launch(1, 32, 8, 1, 4096, 64, num_sms=66)["splits"] == num_splits_heuristic(8, 64, num_sms=66)


def test_a_block_is_compiled_for_the_fewest_rows_that_hold_it():
    """ROWS: the smallest power of two >= min(G·Nq, 32), for every G·Nq up to 80."""
    for G in range(1, 17):
        for Nq in range(1, 6):
            R = min(G * Nq, 32)
            rows = gd.block_rows(G, Nq)
            assert rows >= R and rows & (rows - 1) == 0 and (rows == 1 or rows // 2 < R)
            assert gd.decode_launch(2, 4 * G, 4, Nq, 100, 64)["rows"] == rows
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


def _check(torch, q, k, v, *, causal=False, num_splits=None, tol=None, contiguous=None, **paged):
    """flash_decode_gpu against the NumPy decode of the same values (contiguous: the unpaged K, V).
    O to the output dtype's rounding; lse (fp32 math on the same rounded inputs) to 2e-3."""
    O, lse = gd.flash_decode_gpu(q, k, v, causal=causal, num_splits=num_splits, **paged)
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
def test_decode_matches_the_numpy_decode(dtype, d, G, Nq, causal):
    torch = pytest.importorskip("torch")
    H_kv = 2
    for Nk in (1, 63, 1000):
        q, k, v = _inputs(torch, 2, G * H_kv, H_kv, Nq, Nk, d, getattr(torch, dtype), seed=Nk)
        _check(torch, q, k, v, causal=causal)


@pytest.mark.gpu
@pytest.mark.parametrize("num_splits", [1, 2, 7, 40])       # 40 > the 16 key tiles of Nk = 1000: empty splits
def test_every_split_count_gives_the_same_answer(num_splits):
    torch = pytest.importorskip("torch")
    q, k, v = _inputs(torch, 1, 8, 2, 1, 1000, 128, torch.bfloat16)
    _check(torch, q, k, v, num_splits=num_splits)


@pytest.mark.gpu
@pytest.mark.parametrize("page_size, d, causal, num_splits, dtype", [
    (1, 128, False, None, "float16"), (16, 128, False, None, "float16"), (64, 128, False, None, "bfloat16"),
    (16, 64, True, 3, "float16"), (64, 64, True, 1, "bfloat16")])
def test_a_paged_cache_gives_the_contiguous_answer(page_size, d, causal, num_splits, dtype):
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
           causal=causal, num_splits=num_splits)


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
    _check(torch, q, k, v, causal=True)
    _check(torch, q, k, v, causal=True, num_splits=4)                 # every split empty for them: the merge's
    q2, k2, v2 = _inputs(torch, 1, 4, 1, 8, 130, 64, torch.float16)   # all −inf branch; and splits with keys
    _check(torch, q2, k2, v2, causal=True, num_splits=3)              # that some of their rows do not see
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
@pytest.mark.parametrize("B, H, H_kv, Nq, Nk, num_splits, causal", [
    (1, 32, 8, 1, 4096, 1, False), (1, 32, 8, 1, 4096, None, False), (2, 8, 2, 3, 1000, 7, True),
    (1, 4, 1, 1, 640, 40, False)])                 # 40 splits of 10 key tiles: 30 empty splits
def test_decode_timeline_is_complete_ordered_and_exact(B, H, H_kv, Nq, Nk, num_splits, causal):
    """kernels/flash_decode.cu traced (trace_decode; its O and lse are bit-identical to the normal
    kernel's there): one record per block, each (split, KV head, sequence) once; over each KV head
    the splits' tiles are the key tiles 0 .. Tc − 1 once; in each warp the steps of a tile run in
    the kernel's order (load_KV, compute_S, update_ml, accumulate_O) and the tiles one after the
    other; the last step is write_partial when S > 1; both times measured."""
    pytest.importorskip("torch")
    from flashviz.gpu.decode_trace import trace_decode
    tl = trace_decode(B, H, H_kv, Nk, 128, Nq=Nq, num_splits=num_splits, causal=causal, repeat=3, rounds=2)
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
