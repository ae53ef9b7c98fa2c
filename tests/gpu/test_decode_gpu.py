"""The decode kernel (kernels/flash_decode.cu, flashviz.gpu.decode): its launch arithmetic on the CPU,
and on a GPU its output against the NumPy split-KV decode (flashviz.decode.decode_attention, float64
on the same fp16 / bf16-rounded inputs) over GQA, Nq, causal, split counts (empty splits included)
and paged caches. The gpu-marked cases have not run on a GPU yet (2026-12-04)."""

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


# ---------------------------------------------------------------- on a GPU

def _inputs(torch, B, H, H_kv, Nq, Nk, d, dtype, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    mk = lambda *s: torch.randn(*s, generator=g, device="cuda", dtype=torch.float32).to(dtype)  # noqa: E731
    return mk(B, H, Nq, d), mk(B, H_kv, Nk, d), mk(B, H_kv, Nk, d)


def _reference(q, k, v, **kw):
    r = decode_attention(*(x.double().cpu().numpy() for x in (q, k, v)), **kw)
    return r.O, r.lse


def _check(torch, q, k, v, *, causal=False, num_splits=None, tol=None, contiguous=None, **paged):
    """flash_decode_gpu against the NumPy decode of the same values (contiguous: the unpaged K, V)."""
    O, lse = gd.flash_decode_gpu(q, k, v, causal=causal, num_splits=num_splits, **paged)
    Oref, Lref = _reference(q, *(contiguous or (k, v)), causal=causal)
    tol = tol or (4e-3 if q.dtype == torch.float16 else 3e-2)
    Og, Lg = O.double().cpu().numpy(), lse.double().cpu().numpy()
    assert np.isfinite(Og).all()
    assert np.array_equal(np.isneginf(Lg), np.isneginf(Lref))
    seen = ~np.isneginf(Lref)
    assert np.abs(Og - Oref).max() <= tol * max(1.0, np.abs(Oref).max())
    assert np.abs(Lg[seen] - Lref[seen]).max(initial=0) <= tol * 10
    assert not Og[~seen].any()                                  # rows that see no key: O = 0


@pytest.mark.gpu
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("G, Nq", [(1, 1), (4, 1), (8, 1), (4, 4), (8, 8)])
@pytest.mark.parametrize("causal", [False, True])
def test_decode_matches_the_numpy_decode(d, G, Nq, causal):
    torch = pytest.importorskip("torch")
    H_kv = 2
    for Nk in (1, 63, 1000):
        q, k, v = _inputs(torch, 2, G * H_kv, Nq, Nk, d, torch.float16, seed=Nk)
        _check(torch, q, k, v, causal=causal)


@pytest.mark.gpu
@pytest.mark.parametrize("num_splits", [1, 2, 7, 40])       # 40 > the 16 key tiles of Nk = 1000: empty splits
def test_every_split_count_gives_the_same_answer(num_splits):
    torch = pytest.importorskip("torch")
    q, k, v = _inputs(torch, 1, 8, 2, 1, 1000, 128, torch.bfloat16)
    _check(torch, q, k, v, num_splits=num_splits)


@pytest.mark.gpu
@pytest.mark.parametrize("page_size", [1, 16, 64])
def test_a_paged_cache_gives_the_contiguous_answer(page_size):
    torch = pytest.importorskip("torch")
    from flashviz.decode import paginate
    B, H_kv, Nk, d = 2, 2, 1000, 128
    q, k, v = _inputs(torch, B, 8, H_kv, 1, Nk, d, torch.float16)
    P = -(-Nk // page_size)
    order = np.random.default_rng(5).permutation(B * P)
    Kp, table = paginate(k.cpu().numpy(), page_size, order)
    Vp, _ = paginate(v.cpu().numpy(), page_size, order)
    Kp, Vp = (torch.from_numpy(x).cuda() for x in (Kp, Vp))
    _check(torch, q, Kp, Vp, block_table=torch.from_numpy(table).cuda(), Nk=Nk, contiguous=(k, v))


@pytest.mark.gpu
def test_rows_that_see_no_key_and_bad_input():
    torch = pytest.importorskip("torch")
    q, k, v = _inputs(torch, 1, 4, 1, 8, 3, 64, torch.float16)      # causal, Nq = 8 > Nk = 3: 5 rows see nothing
    _check(torch, q, k, v, causal=True)
    with pytest.raises(ValueError, match="H % H_kv"):
        gd.flash_decode_gpu(q[:, :3], k[:, :1].expand(1, 2, 3, 64).contiguous(), v[:, :1].expand(1, 2, 3, 64))
    with pytest.raises(ValueError, match="num_splits must be an integer"):
        gd.flash_decode_gpu(q, k, v, num_splits=0)
    with pytest.raises(TypeError, match="CPU torch tensor"):
        gd.flash_decode_gpu(q.cpu(), k, v)
    with pytest.raises(TypeError, match="float16 or bfloat16"):
        gd.flash_decode_gpu(q.float(), k.float(), v.float())
