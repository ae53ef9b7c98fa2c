"""The split-KV decode (flashviz.decode): exact against the dense float64 reference head by head
(MHA and GQA, Nq = 1..8, causal, keyless rows, any split count, partial last key block, a paged
cache with a shuffled block table, a batch axis), its counted IO equal to the closed form
``iomodel.decode_io``, its trace consistent with both, the merge equal to a single-split run, the
default split count, and one-line errors for bad input."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import flashviz as fv
from flashviz.decode import DecodeEvent, DecodeTrace, merge_partials, merge_step, num_splits_heuristic
from flashviz.iomodel import decode_io, sram_working_set
from flashviz.masking import split_ranges
from flashviz.steps import BY_NAME, EVENT_KINDS, find_tags, step

ROOT = Path(__file__).resolve().parents[2]
TOL = 1e-12


def qkv(rng, H, H_kv, Nq, Nk, d, B=None, dv=None, dtype=np.float64):
    lead = () if B is None else (B,)
    Q = rng.standard_normal((*lead, H, Nq, d))
    K = rng.standard_normal((*lead, H_kv, Nk, d))
    V = rng.standard_normal((*lead, H_kv, Nk, d if dv is None else dv))
    return Q.astype(dtype), K.astype(dtype), V.astype(dtype)


def per_head_reference(Q, K, V, causal):
    """Dense float64 attention of each query head h against KV head h // (H // H_kv), one head at a time."""
    H, H_kv = Q.shape[-3], K.shape[-3]
    G = H // H_kv
    O = np.zeros(Q.shape[:-1] + V.shape[-1:])
    lse = np.zeros(Q.shape[:-1])
    for idx in np.ndindex(Q.shape[:-3]):
        for h in range(H):
            O[idx + (h,)], lse[idx + (h,)] = fv.attention(Q[idx + (h,)], K[idx + (h // G,)], V[idx + (h // G,)],
                                                          causal=causal, return_lse=True)
    return O, lse


def assert_exact(r, O_ref, lse_ref, tol=TOL):
    assert r.O.shape == O_ref.shape and r.lse.shape == lse_ref.shape
    assert not np.isnan(r.O).any() and not np.isnan(r.lse).any()
    assert np.abs(r.O - O_ref).max() <= tol
    assert np.array_equal(np.isneginf(r.lse), np.isneginf(lse_ref))
    fin = np.isfinite(lse_ref)
    assert np.abs(r.lse[fin] - lse_ref[fin]).max(initial=0.0) <= tol


def model_of(r, Q, K, V, *, Bc, causal, page_size=None, Nk=None):
    """decode_io for the shapes of a run."""
    B = Q.shape[0] if Q.ndim == 4 else 1
    H, Nq, d = Q.shape[-3:]
    H_kv = K.shape[2] if page_size is not None and K.ndim == 4 and Nk is not None else K.shape[-3]
    Nk = K.shape[-2] if Nk is None else Nk
    return decode_io(Nq, Nk, d, H=H, H_kv=H_kv, num_splits=r.num_splits, Bc=Bc, itemsize=r.O.dtype.itemsize,
                     page_size=page_size, causal=causal, B=B, dv=V.shape[-1])


# --- exact against the reference ---------------------------------------------------------------------

@pytest.mark.parametrize("H,H_kv", [(4, 4), (8, 2), (6, 1), (3, 3)], ids=["mha", "gqa4", "mqa", "h3"])
@pytest.mark.parametrize("causal", [False, True])
def test_exact_against_the_per_head_reference(H, H_kv, causal):
    rng = np.random.default_rng(H * 10 + H_kv + causal)
    for Nq in range(1, 9):
        Nk = int(rng.integers(1, 90))
        Q, K, V = qkv(rng, H, H_kv, Nq, Nk, 8, dv=5)
        O_ref, lse_ref = per_head_reference(Q, K, V, causal)
        for S in (1, 2, 3, 9):
            r = fv.decode_attention(Q, K, V, num_splits=S, Bc=7, causal=causal)
            assert r.O.dtype == np.float64 and r.lse.dtype == np.float64 and r.num_splits == S
            assert_exact(r, O_ref, lse_ref)


def test_gqa_query_head_h_reads_kv_head_h_over_G():
    """Each query head against its own KV head: changing KV head 1 changes exactly query heads 3, 4, 5."""
    rng = np.random.default_rng(7)
    Q, K, V = qkv(rng, 6, 2, 2, 40, 8)
    r0 = fv.decode_attention(Q, K, V, num_splits=3, Bc=8)
    V2 = V.copy()
    V2[1] += 1.0
    r1 = fv.decode_attention(Q, K, V2, num_splits=3, Bc=8)
    changed = [h for h in range(6) if not np.array_equal(r0.O[h], r1.O[h])]
    assert changed == [3, 4, 5]
    assert np.abs(r1.O[3:] - r0.O[3:] - 1.0).max() <= TOL          # softmax rows sum to 1


def test_keyless_rows_get_zero_and_minus_inf():
    """causal with Nk < Nq: query row i sees key j iff j <= i + Nk - Nq, so rows 0..Nq-Nk-1 see nothing."""
    rng = np.random.default_rng(3)
    Nq, Nk = 8, 3
    Q, K, V = qkv(rng, 4, 2, Nq, Nk, 6)
    for S in (1, 2, 3, 5):
        r = fv.decode_attention(Q, K, V, num_splits=S, Bc=2, causal=True)
        assert np.all(r.O[:, :Nq - Nk] == 0.0) and np.all(np.isneginf(r.lse[:, :Nq - Nk]))
        assert np.isfinite(r.lse[:, Nq - Nk:]).all() and np.abs(r.O[:, Nq - Nk:]).max() > 0
        assert_exact(r, *per_head_reference(Q, K, V, True))
        for p in r.partials:
            assert np.all(np.isneginf(p.m[:, :Nq - Nk])) and np.all(p.l[:, :Nq - Nk] == 0)
            assert np.all(p.O[:, :Nq - Nk] == 0) and not np.isnan(p.O).any()


def test_partial_last_key_block():
    rng = np.random.default_rng(5)
    Q, K, V = qkv(rng, 2, 1, 3, 37, 4)
    r = fv.decode_attention(Q, K, V, num_splits=2, Bc=16, causal=True, record=True)
    kv = [e for e in r.trace.events if e.kind == "load_KV"]
    assert [(e.c0, e.c1) for e in kv] == [(0, 16), (16, 32), (32, 37)]
    assert kv[-1].reads == {"K": 5 * 4 * 8, "V": 5 * 4 * 8}
    assert_exact(r, *per_head_reference(Q, K, V, True))


@pytest.mark.parametrize("dtype,lse_dtype,tol", [(np.float32, np.float32, 2e-6), (np.float16, np.float32, 2e-3)])
def test_lower_precision_inputs(dtype, lse_dtype, tol):
    rng = np.random.default_rng(11)
    Q, K, V = qkv(rng, 4, 2, 2, 50, 8, dtype=dtype)
    r = fv.decode_attention(Q, K, V, num_splits=4, Bc=8, causal=True)
    assert r.O.dtype == dtype and r.lse.dtype == lse_dtype
    O_ref, lse_ref = per_head_reference(Q.astype(np.float64), K.astype(np.float64), V.astype(np.float64), True)
    assert np.abs(r.O.astype(np.float64) - O_ref).max() <= tol
    assert r.io == model_of(r, Q, K, V, Bc=8, causal=True)
    assert r.io.reads["O_partial"] == 4 * 4 * 2 * 8 * 4             # partials in float32: 4 bytes an element


# --- splits and the merge ----------------------------------------------------------------------------

def test_split_ranges_are_even_contiguous_and_cover_every_key_block():
    for Tc in range(1, 30):
        for S in range(1, 40):
            rs = split_ranges(Tc, S)
            assert len(rs) == S and rs[0][0] == 0 and rs[-1][1] == Tc
            assert all(a[1] == b[0] for a, b in zip(rs, rs[1:]))
            sizes = [j1 - j0 for j0, j1 in rs]
            assert max(sizes) - min(sizes) <= 1 and sum(sizes) == Tc
            assert sizes.count(0) == max(0, S - Tc)
    assert split_ranges(10, 4) == [(0, 2), (2, 5), (5, 7), (7, 10)]


def test_any_split_count_equals_one_split_and_empty_splits_weigh_nothing():
    """num_splits from 1 to more than the Tc = 7 key blocks: the same result; an empty split (S > Tc)
    reads no K or V, writes O_s = 0 and lse_s = -inf, and the merge gives it weight 0."""
    rng = np.random.default_rng(2)
    Q, K, V = qkv(rng, 4, 2, 3, 50, 8)
    Tc = 7
    one = fv.decode_attention(Q, K, V, num_splits=1, Bc=8, causal=True)
    assert len(one.partials) == 1 and np.array_equal(one.partials[0].O, one.O)
    for S in range(2, 13):
        r = fv.decode_attention(Q, K, V, num_splits=S, Bc=8, causal=True, record=True)
        assert np.abs(r.O - one.O).max() <= TOL and np.abs(r.lse - one.lse).max() <= TOL
        assert [(p.c0, p.c1) for p in r.partials] == [(min(j0 * 8, 50), min(j1 * 8, 50))
                                                     for j0, j1 in split_ranges(Tc, S)]
        empty = [p for p in r.partials if p.c0 == p.c1]
        assert len(empty) == max(0, S - Tc)
        for p in empty:
            assert np.all(np.isneginf(p.m)) and np.all(p.l == 0) and np.all(p.O == 0) and np.all(np.isneginf(p.lse))
            ev = [e for e in r.trace.events if e.split == p.s]
            assert [e.kind for e in ev if e.kind != "merge"] == ["write_partial"] * 2    # one per KV head
            assert all(np.all(e.weight == 0) for e in ev if e.kind == "merge")
        assert r.io.reads["K"] == one.io.reads["K"] and r.io.flops == one.io.flops


def test_merge_of_the_partials_gives_the_output():
    rng = np.random.default_rng(4)
    Q, K, V = qkv(rng, 6, 3, 4, 70, 8, B=2)
    r = fv.decode_attention(Q, K, V, num_splits=5, Bc=8, causal=True)
    lse_parts = np.stack([p.lse for p in r.partials])
    O_parts = np.stack([p.O for p in r.partials])
    O, lse = merge_partials(lse_parts, O_parts)
    assert np.array_equal(O, r.O) and np.array_equal(lse, r.lse)
    # the same by the closed formula: lse = log Σ exp(lse_s), O = Σ exp(lse_s - lse) O_s
    lse2 = np.logaddexp.reduce(lse_parts, axis=0)
    O2 = (np.exp(lse_parts - lse2)[..., None] * O_parts).sum(axis=0)
    assert np.abs(lse2 - r.lse).max() <= TOL and np.abs(O2 - r.O).max() <= TOL
    # each partial is the (causal) attention over its own keys alone: O_s, lse_s; empty splits give 0, -inf
    assert sum(p.c0 == p.c1 for p in r.partials) == 0
    for p in r.partials:
        O_s, lse_s = per_head_reference_masked(Q, K, V, p.c0, p.c1)
        assert np.abs(p.O - O_s).max() <= TOL
        assert np.array_equal(np.isneginf(p.lse), np.isneginf(lse_s))
        fin = np.isfinite(lse_s)
        assert np.abs(p.lse[fin] - lse_s[fin]).max() <= TOL


def per_head_reference_masked(Q, K, V, c0, c1):
    """Causal attention of every query row to the keys [c0, c1) only, per head: set S = -inf outside."""
    Nq, Nk = Q.shape[-2], K.shape[-2]
    H, H_kv = Q.shape[-3], K.shape[-3]
    G = H // H_kv
    Kx = np.repeat(K, G, axis=-3)
    Vx = np.repeat(V, G, axis=-3)
    S = (Q @ np.swapaxes(Kx, -1, -2)) / np.sqrt(Q.shape[-1])
    cols = np.arange(Nk)
    keep = (cols[None, :] <= np.arange(Nq)[:, None] + Nk - Nq) & (cols >= c0) & (cols < c1)
    S = np.where(keep, S, -np.inf)
    m = S.max(axis=-1, keepdims=True)
    P = np.exp(S - np.where(np.isfinite(m), m, 0))
    l = P.sum(axis=-1, keepdims=True)
    O = (P / np.where(l > 0, l, 1)) @ Vx
    with np.errstate(divide="ignore"):
        lse = np.where(l[..., 0] > 0, np.log(np.where(l > 0, l, 1))[..., 0] + np.where(np.isfinite(m), m, 0)[..., 0],
                       -np.inf)
    return O, lse


def test_merge_step_is_the_online_softmax_rescale_and_never_nan():
    m, l, O = np.array([-np.inf, 1.0]), np.array([0.0, 2.0]), np.array([[0.0], [4.0]])
    m2, l2, O2, alpha, beta = merge_step(m, l, O, np.array([-np.inf, 3.0]), np.array([[0.0], [1.0]]))
    assert np.array_equal(m2, [-np.inf, 3.0]) and np.array_equal(alpha, [0.0, np.exp(-2.0)])
    assert np.array_equal(beta, [0.0, 1.0]) and np.allclose(l2, [0.0, 2 * np.exp(-2.0) + 1], rtol=0, atol=1e-15)
    assert np.allclose(O2, [[0.0], [4 * np.exp(-2.0) + 1]], rtol=0, atol=1e-15)
    with pytest.raises(ValueError, match="lse_parts"):
        merge_partials(np.zeros((2, 3)), np.zeros((3, 3, 4)))


def test_merge_without_rescaling_is_wrong_by_the_computed_amount():
    """rescale=False ("break it"): the running l, O are not rescaled when a later split raises the max,
    so with M_s = max(lse_0..lse_s) the merge gives Σ exp(lse_s − M_s)·O_s / Σ exp(lse_s − M_s)."""
    # by hand: two splits of one row, lse = (0, log 3), O_s = (1, 0). Exact weights 1/4, 3/4: O = 1/4.
    # Unrescaled: split 0 keeps weight exp(0 − 0) = 1 after the max rose to log 3: weights 1, 1, O = 1/2.
    lse, O = np.array([[0.0], [np.log(3.0)]]), np.array([[[1.0]], [[0.0]]])
    good, good_lse = merge_partials(lse, O)
    bad, bad_lse = merge_partials(lse, O, rescale=False)
    assert abs(good[0, 0] - 0.25) <= TOL and abs(bad[0, 0] - 0.5) <= TOL and abs(bad[0, 0] - good[0, 0] - 0.25) <= TOL
    assert abs(good_lse[0] - np.log(4.0)) <= TOL and abs(bad_lse[0] - np.log(6.0)) <= TOL
    # a real run whose lse_s rise along the cache (keys drift toward the query): the closed form above
    rng = np.random.default_rng(12)
    Q, K, V = qkv(rng, 4, 2, 2, 96, 8)
    K += np.linspace(0, 3, 96)[None, :, None] * Q[::2, -1:].mean(axis=0, keepdims=True)
    r = fv.decode_attention(Q, K, V, num_splits=4, Bc=8, causal=True)
    lse_p, O_p = np.stack([p.lse for p in r.partials]), np.stack([p.O for p in r.partials])
    bad, bad_lse = merge_partials(lse_p, O_p, rescale=False)
    M = np.maximum.accumulate(lse_p, axis=0)
    w = np.exp(lse_p - M)
    want = (w[..., None] * O_p).sum(axis=0) / w.sum(axis=0)[..., None]
    assert np.abs(bad - want).max() <= TOL and np.abs(bad_lse - (M[-1] + np.log(w.sum(axis=0)))).max() <= TOL
    err = np.abs(bad - r.O).max(axis=-1)                     # per row: the computed amount it is wrong by
    assert np.abs(err - np.abs(want - r.O).max(axis=-1)).max() <= TOL and err.max() > 0.05
    first_max = np.all(lse_p[0] >= lse_p[1:], axis=0)         # rows whose first split holds the max: still exact
    assert np.all(err[first_max] <= TOL) and np.all(err[~np.all(M == M[0], axis=0)] > 0)
    # merge_step: alpha = 1 wherever something was merged, 0 before anything was; never NaN
    m, l, O2, alpha, beta = merge_step(np.array([-np.inf, 1.0]), np.array([0.0, 2.0]), np.array([[0.0], [4.0]]),
                                       np.array([-np.inf, 3.0]), np.array([[0.0], [1.0]]), rescale=False)
    assert np.array_equal(alpha, [0.0, 1.0]) and np.array_equal(beta, [0.0, 1.0])
    assert np.array_equal(l, [0.0, 3.0]) and np.array_equal(O2, [[0.0], [5.0]]) and np.array_equal(m, [-np.inf, 3.0])
    with pytest.raises(TypeError, match="rescale must be True or False"):
        merge_partials(lse, O, rescale="no")


# --- the paged cache and the batch axis --------------------------------------------------------------

def paged(K, V, page_size, rng, spare=3):
    """K, V (B, H_kv, Nk, d) as pools (num_pages, page_size, H_kv, d) with the pages in shuffled order
    (and some spare pages of noise), and the block table (B, max_pages) that finds them."""
    B, H_kv, Nk, d = K.shape
    P = -(-Nk // page_size)
    n = B * P + spare
    where = rng.permutation(n)[:B * P].reshape(B, P)          # logical page (b, p) → pool page
    pools = []
    for X in (K, V):
        pool = rng.standard_normal((n, page_size, H_kv, X.shape[-1])) * 5     # noise: must never be read
        for b in range(B):
            for p in range(P):
                rows = X[b, :, p * page_size:(p + 1) * page_size]              # (H_kv, <= page_size, d)
                pool[where[b, p], :rows.shape[1]] = np.swapaxes(rows, 0, 1)
        pools.append(pool)
    return pools[0], pools[1], where.astype(np.int32)


@pytest.mark.parametrize("page_size", [1, 3, 16, 64])
@pytest.mark.parametrize("causal", [False, True])
def test_paged_equals_unpaged_with_a_shuffled_block_table(page_size, causal):
    rng = np.random.default_rng(page_size)
    Q, K, V = qkv(rng, 4, 2, 3, 45, 8, B=3)
    flat = fv.decode_attention(Q, K, V, num_splits=3, Bc=8, causal=causal)
    Kp, Vp, table = paged(K, V, page_size, rng)
    r = fv.decode_attention(Q, Kp, Vp, num_splits=3, Bc=8, causal=causal, block_table=table, Nk=45, record=True)
    assert np.array_equal(r.O, flat.O) and np.array_equal(r.lse, flat.lse)      # the same keys, the same sums
    assert_exact(r, *per_head_reference(Q, K, V, causal))
    assert {k: v for k, v in r.io.reads.items() if k != "block_table"} == flat.io.reads
    assert r.io.writes == flat.io.writes and r.io.flops == flat.io.flops
    assert r.io == decode_io(3, 45, 8, H=4, H_kv=2, num_splits=3, Bc=8, itemsize=8, page_size=page_size,
                             causal=causal, B=3)
    for e in r.trace.events:                       # each key block read the pool pages the table names
        if e.kind == "load_KV":
            assert e.pages == tuple(table[e.batch, e.c0 // page_size:(e.c1 - 1) // page_size + 1])
            assert e.reads["block_table"] == 4 * len(e.pages)
    # page_size alone pages the contiguous cache in order: the same result, the page look-ups counted
    r2 = fv.decode_attention(Q, K, V, num_splits=3, Bc=8, causal=causal, page_size=page_size)
    assert np.array_equal(r2.O, flat.O) and r2.io == r.io


def test_paged_without_a_batch_axis_and_the_default_Nk():
    rng = np.random.default_rng(9)
    Q, K, V = qkv(rng, 2, 1, 1, 32, 4)
    Kp, Vp, table = paged(K[None], V[None], 8, rng, spare=0)
    r = fv.decode_attention(Q, Kp, Vp, Bc=8, num_splits=2, block_table=table[0])         # Nk = 4 pages · 8
    assert np.array_equal(r.O, fv.decode_attention(Q, K, V, Bc=8, num_splits=2).O)
    r = fv.decode_attention(Q, Kp, Vp, Bc=8, num_splits=2, block_table=table[0], Nk=20, page_size=8)
    assert_exact(r, *per_head_reference(Q, K[:, :20], V[:, :20], False))


def test_batch_axis_is_each_sequence_on_its_own():
    rng = np.random.default_rng(6)
    Q, K, V = qkv(rng, 4, 2, 2, 33, 8, B=3)
    r = fv.decode_attention(Q, K, V, num_splits=4, Bc=8, causal=True, record=True)
    assert r.O.shape == (3, 4, 2, 8) and r.lse.shape == (3, 4, 2) and r.partials[0].O.shape == (3, 4, 2, 8)
    assert_exact(r, *per_head_reference(Q, K, V, True))
    for b in range(3):
        rb = fv.decode_attention(Q[b], K[b], V[b], num_splits=4, Bc=8, causal=True)
        assert np.array_equal(rb.O, r.O[b]) and np.array_equal(rb.lse, r.lse[b])
        assert rb.io.scaled(3) == r.io
    assert {(e.batch, e.kv_head) for e in r.trace.events} == {(b, g) for b in range(3) for g in range(2)}


# --- the IO model ------------------------------------------------------------------------------------

def test_decode_io_by_hand():
    # B = 1, H = 32, H_kv = 8 (G = 4), one query, Nk = 4096, d = 128, Bc = 64 (Tc = 64), 16 splits, fp16
    io = decode_io(1, 4096, 128, H=32, H_kv=8, num_splits=16, Bc=64, itemsize=2)
    kv = 8 * 4096 * 128 * 2
    assert io.reads == {"Q": 16 * 8 * 4 * 128 * 2, "K": kv, "V": kv, "O_partial": 16 * 8 * 4 * 128 * 4,
                        "lse_partial": 16 * 8 * 4 * 4}
    assert io.writes == {"O_partial": 16 * 8 * 4 * 128 * 4, "lse_partial": 16 * 8 * 4 * 4, "O": 32 * 128 * 2,
                         "lse": 32 * 2}
    assert io.flops == 2 * 32 * 4096 * 256
    assert io.sram_bytes == sram_working_set(4, 64, 128, itemsize=2)
    assert 3.5 < io.intensity < 4.0                 # ≈ 2·G·Nq / itemsize = 4 FLOPs a byte, less the extras
    one = decode_io(1, 4096, 128, H=32, H_kv=8, num_splits=1, Bc=64, itemsize=2)
    assert one.reads == {"Q": 32 * 128 * 2, "K": kv, "V": kv} and one.writes == {"O": 32 * 128 * 2, "lse": 64}
    mha = decode_io(1, 4096, 128, H=32, H_kv=32, num_splits=1, Bc=64, itemsize=2)
    assert mha.reads["K"] == 4 * kv and 3.9 < one.intensity / mha.intensity <= 4.0    # GQA: G times the intensity
    # paged: pages of 16 tokens, 64-key blocks touch 4 pages each: 64 blocks · 4 entries · 4 bytes per KV head
    pg = decode_io(1, 4096, 128, H=32, H_kv=8, num_splits=1, Bc=64, itemsize=2, page_size=16)
    assert pg.reads["block_table"] == 8 * 64 * 4 * 4
    # pages of 48 tokens straddle the 64-key blocks: block j touches pages 64j//48 .. (64j+63)//48
    pg = decode_io(1, 200, 8, H=1, H_kv=1, num_splits=1, Bc=64, itemsize=4, page_size=48)
    assert pg.reads["block_table"] == 4 * (2 + 2 + 2 + 1)      # keys 0-63, 64-127, 128-191, 192-199
    # more splits than key blocks: the empty splits only write (and the merge reads) their partials
    e = decode_io(1, 100, 8, H=2, H_kv=1, num_splits=5, Bc=64, itemsize=8)
    assert e.reads["Q"] == 2 * 2 * 8 * 8 and e.writes["O_partial"] == 5 * 2 * 8 * 8


def test_decode_io_rejects_bad_sizes():
    with pytest.raises(ValueError, match="H must be a multiple of H_kv"):
        decode_io(1, 10, 4, H=6, H_kv=4, num_splits=1, Bc=4, itemsize=4)
    with pytest.raises(ValueError, match="num_splits must be an integer >= 1"):
        decode_io(1, 10, 4, H=4, H_kv=4, num_splits=0, Bc=4, itemsize=4)
    with pytest.raises(ValueError, match="itemsize"):
        decode_io(1, 10, 4, H=4, H_kv=4, num_splits=1, Bc=4, itemsize=3)


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(Nq=st.integers(1, 8), Nk=st.integers(1, 80), d=st.integers(1, 9), H_kv=st.integers(1, 3),
       G=st.integers(1, 3), Bc=st.integers(1, 40), S=st.integers(1, 12), causal=st.booleans(),
       page_size=st.sampled_from([None, 1, 5, 16]), B=st.sampled_from([None, 2]),
       dtype=st.sampled_from([np.float64, np.float32, np.float16]), seed=st.integers(0, 2**31 - 1))
def test_counted_io_equals_the_closed_form(Nq, Nk, d, H_kv, G, Bc, S, causal, page_size, B, dtype, seed):
    rng = np.random.default_rng(seed)
    Q, K, V = qkv(rng, G * H_kv, H_kv, Nq, Nk, d, B=B, dtype=dtype)
    r = fv.decode_attention(Q, K, V, num_splits=S, Bc=Bc, causal=causal, page_size=page_size, record=True)
    model = decode_io(Nq, Nk, d, H=G * H_kv, H_kv=H_kv, num_splits=S, Bc=Bc, itemsize=np.dtype(dtype).itemsize,
                      page_size=page_size, causal=causal, B=B or 1)
    assert r.io.reads == model.reads and r.io.writes == model.writes
    assert r.io.flops == model.flops and r.io.sram_bytes == model.sram_bytes
    assert r.trace.io() == model and r.io == model
    if dtype is np.float64:
        assert_exact(r, *per_head_reference(Q, K, V, causal))


# --- the trace ---------------------------------------------------------------------------------------

def test_trace_events_add_up_to_the_io_and_follow_the_algorithm():
    rng = np.random.default_rng(8)
    Q, K, V = qkv(rng, 4, 2, 2, 40, 8)
    r = fv.decode_attention(Q, K, V, num_splits=3, Bc=8, causal=True, record=True)
    tr = r.trace
    assert isinstance(tr, DecodeTrace) and tr.order == "decode" and (tr.H, tr.H_kv, tr.G, tr.num_splits) == (4, 2, 2, 3)
    assert tr.splits == [(p.c0, p.c1) for p in r.partials] == [(0, 8), (8, 24), (24, 40)]
    assert all(isinstance(e, DecodeEvent) and e.kind in EVENT_KINDS for e in tr.events)
    assert int(tr.cumulative_hbm_bytes()[-1]) == r.io.hbm_bytes
    for tensor in ("Q", "K", "V", "O_partial", "lse_partial"):
        assert sum(e.reads.get(tensor, 0) for e in tr.events) == r.io.reads[tensor]
    assert sum(e.flops for e in tr.events) == r.io.flops
    for g in range(2):
        kinds = [e.kind for e in tr.events if e.kv_head == g]
        split_kinds = []
        for n_blocks in (1, 2, 2):                  # key blocks of the three splits
            split_kinds += ["load_Q"] + ["load_KV", "compute_S", "update_ml", "accumulate_O"] * n_blocks
            split_kinds += ["write_partial"]
        assert kinds == split_kinds + ["merge"] * 3 + ["write_O"]
        ev = [e for e in tr.events if e.kv_head == g]
        for p in r.partials:                 # the split's last accumulator, normalised, is its partial O
            last = [e for e in ev if e.kind == "accumulate_O" and e.split == p.s][-1]
            assert np.array_equal(last.O / last.l[..., None], p.O[2 * g:2 * g + 2])
            wp = next(e for e in ev if e.kind == "write_partial" and e.split == p.s)
            assert np.array_equal(wp.lse, p.lse[2 * g:2 * g + 2]) and (wp.c0, wp.c1) == (p.c0, p.c1)
        merges = [e for e in ev if e.kind == "merge"]
        assert np.array_equal(merges[0].rescale, np.zeros((2, 2)))           # nothing merged before split 0
        final = ev[-1]
        assert np.array_equal(final.O, r.O[2 * g:2 * g + 2]) and np.array_equal(final.lse, r.lse[2 * g:2 * g + 2])
        assert np.allclose(merges[-1].O / merges[-1].l[..., None], final.O, rtol=0, atol=TOL)
        S0 = next(e for e in ev if e.kind == "compute_S")
        assert S0.S.shape == (2, 2, 8)                                     # (G heads, Nq rows, bc keys)
    assert r.partials[0].O.shape == (4, 2, 8)
    assert fv.decode_attention(Q, K, V, num_splits=3, Bc=8).trace is None


def test_decode_steps_in_the_vocabulary_and_the_tags():
    assert step("write_partial").cite("Flash-Decoding") == "Flash-Decoding step 2"
    assert step("merge").cite("Flash-Decoding") == "Flash-Decoding step 3"
    assert step("merge").decode and not step("merge").forward and not step("load_KV").decode
    path = ROOT / "flashviz" / "decode.py"
    text = path.read_text(encoding="utf-8")
    tags = find_tags(text)
    assert {t.name for t in tags} >= {"load_Q", "load_KV", "compute_S", "update_ml", "accumulate_O",
                                      "write_partial", "merge", "write_O"}
    for t in tags:                                     # each tag cites lines the vocabulary gives its step
        assert t.name in BY_NAME and t.paper in BY_NAME[t.name].lines, (t.index + 1, t.name, t.paper)
        assert set(t.lines) <= set(BY_NAME[t.name].lines[t.paper]), (t.index + 1, t.name, t.lines)
    from flashviz.views.code_pairs import tag_blocks
    lines = text.splitlines()
    a = next(k for k, ln in enumerate(lines) if ln.startswith("def _decode_block("))
    b = next(k for k in range(a + 1, len(lines)) if lines[k].startswith("def "))
    blocks = tag_blocks(text, None, path.name)
    emits = [(k + 1, m[1]) for k in range(a, b) for m in [re.search(r'rec\.emit\("(\w+)"', lines[k])] if m]
    assert len(emits) == 9
    for line, kind in emits:                           # every emit sits in a block of its own name
        assert [s.step for s in blocks if s.first <= line <= s.last] == [kind], (line, kind)


# --- the split count ---------------------------------------------------------------------------------

def test_num_splits_heuristic():
    assert num_splits_heuristic(8, 64) == 16                     # ⌊132/8⌋ = 16 splits of 4 key blocks, 128 SMs
    assert num_splits_heuristic(8, 64, blocks_per_sm=2) == 32    # ⌊264/8⌋ = 33 -> ⌈64/33⌉ = 2 blocks, as 32 give
    assert num_splits_heuristic(7, 100) == 17                    # ⌊132/7⌋ = 18 -> ⌈100/18⌉ = 6 = ⌈100/17⌉
    assert num_splits_heuristic(48, 100, num_sms=108) == 2       # FlashAttention's example: 2
    assert num_splits_heuristic(106, 1000) == 1                  # 106 >= 0.8 · 132: the GPU is full already
    assert num_splits_heuristic(105, 1000) == 1                  # two splits would not fit one wave
    assert num_splits_heuristic(1, 4) == 1 and num_splits_heuristic(1, 5) == 5       # too few key blocks / all
    assert num_splits_heuristic(1, 10_000) == 127                # cap 128: ⌈10000/128⌉ = 79 = ⌈10000/127⌉
    assert num_splits_heuristic(64, 1000) == 2
    # against a brute force of the rule's definition: within one wave, the shortest longest split,
    # the fewest splits that give it
    for n in range(1, 140, 3):
        for Tc in (1, 5, 6, 33, 64, 100, 512, 4097):
            for bps in (1, 2, 4):
                slots = 132 * bps
                got = num_splits_heuristic(n, Tc, blocks_per_sm=bps)
                if 5 * n >= 4 * slots or Tc <= 4:
                    assert got == 1
                    continue
                ok = range(1, min(slots // n, 128, Tc) + 1)
                best = min(-(-Tc // s) for s in ok)
                assert got == min(s for s in ok if -(-Tc // s) == best), (n, Tc, bps)
    with pytest.raises(ValueError, match="n_blocks must be an integer >= 1"):
        num_splits_heuristic(0, 10)
    rng = np.random.default_rng(1)
    Q, K, V = qkv(rng, 4, 2, 1, 700, 4, B=2)
    r = fv.decode_attention(Q, K, V, Bc=16)
    # 4 blocks: at most 33 splits in one wave; ⌈44/33⌉ = 2 key blocks a split, as 22 splits give
    assert r.num_splits == num_splits_heuristic(2 * 2, 44) == 22 and len(r.partials) == 22
    assert_exact(r, *per_head_reference(Q, K, V, False))


# --- bad input ---------------------------------------------------------------------------------------

def one_line(info):
    msg = str(info.value)
    assert msg and "\n" not in msg
    return msg


def _bad_cases():
    Q, K, V = np.ones((4, 2, 8)), np.ones((2, 10, 8)), np.ones((2, 10, 8))
    pool = np.ones((5, 4, 2, 8))
    QB = np.ones((2, 4, 2, 8))
    return [
        ((np.ones((6, 2, 8)), np.ones((4, 10, 8)), np.ones((4, 10, 8))), {}, ValueError, "H % H_kv must be 0"),
        ((Q, np.ones((2, 10, 6)), np.ones((2, 10, 8))), {}, ValueError, "head dimension d"),
        ((Q, K, np.ones((2, 9, 8))), {}, ValueError, "same H_kv and Nk"),
        ((Q, K, np.ones((3, 10, 8))), {}, ValueError, "same H_kv and Nk"),
        ((np.ones((2, 8)), K, V), {}, ValueError, r"\(H, Nq, d\) or \(B, H, Nq, d\)"),
        ((Q, np.ones((1, 2, 10, 8)), V), {}, ValueError, r"K must have shape \(H_kv, Nk, d\)"),
        ((QB, np.ones((3, 2, 10, 8)), np.ones((3, 2, 10, 8))), {}, ValueError, "batch axis"),
        ((Q, K, V), {"num_splits": 0}, ValueError, "num_splits must be an integer >= 1"),
        ((Q, K, V), {"num_splits": 2.0}, TypeError, "num_splits must be an integer >= 1"),
        ((Q, K, V), {"Bc": 0}, ValueError, "Bc must be an integer >= 1"),
        ((Q, K, V), {"page_size": 0}, ValueError, "page_size must be an integer >= 1"),
        ((Q, K, V), {"Nk": 5}, ValueError, "Nk is for a paged cache"),
        ((Q, K, V), {"causal": 1}, TypeError, "causal must be True or False"),
        (("q", K, V), {}, TypeError, "float array"),
        ((Q, pool, pool), {"block_table": np.array([0.0, 1.0])}, TypeError, "integer array"),
        ((Q, pool, pool), {"block_table": "0 1"}, TypeError, "integer array"),
        ((Q, pool, pool), {"block_table": np.array([[0, 1]])}, ValueError, r"shape \(max_pages,\)"),
        ((QB, pool, pool), {"block_table": np.array([0, 1])}, ValueError, r"shape \(B, max_pages\)"),
        ((QB, pool, pool), {"block_table": np.zeros((3, 2), int)}, ValueError, r"shape \(B, max_pages\)"),
        ((Q, pool, pool), {"block_table": np.array([0, 5])}, ValueError, r"pages 0\.\.4 of the pool"),
        ((Q, pool, pool), {"block_table": np.array([-1, 2])}, ValueError, r"pages 0\.\.4 of the pool"),
        ((Q, pool, pool), {"block_table": np.array([0, 1]), "Nk": 9}, ValueError, "from 1 to max_pages"),
        ((Q, pool, pool), {"block_table": np.array([0, 1]), "page_size": 8}, ValueError, "does not match"),
        ((Q, np.ones((5, 4, 8)), np.ones((5, 4, 8))), {"block_table": np.array([0])}, ValueError, "page pool"),
        ((Q, pool, np.ones((5, 3, 2, 8))), {"block_table": np.array([0])}, ValueError, "share"),
        ((Q, np.ones((5, 4, 3, 8)), np.ones((5, 4, 3, 8))), {"block_table": np.array([0])}, ValueError,
         "H % H_kv"),
    ]


@pytest.mark.parametrize("args,kw,exc,words", _bad_cases())
def test_bad_input_gets_one_clear_line(args, kw, exc, words):
    with pytest.raises(exc) as info:
        fv.decode_attention(*args, **kw)
    assert re.search(words, one_line(info))


def test_good_versions_of_the_bad_cases_run():
    """The bad cases above fail for the reason they name: their corrected versions run."""
    Q, pool = np.ones((4, 2, 8)), np.ones((5, 4, 2, 8))
    r = fv.decode_attention(Q, pool, pool, block_table=np.array([0, 4]), Nk=8, page_size=4)
    assert np.allclose(r.O, 1.0, rtol=0, atol=TOL)
    r = fv.decode_attention(np.ones((6, 2, 8)), np.ones((3, 10, 8)), np.ones((3, 10, 8)), num_splits=2, Bc=1)
    assert r.O.shape == (6, 2, 8)


def test_paginate_puts_each_page_where_its_table_says():
    from flashviz.decode import paginate
    rng = np.random.default_rng(3)
    X = rng.standard_normal((2, 3, 10, 4))                     # Bn, H_kv, Nk, d; 3 pages of 4, the last padded
    order = rng.permutation(6)
    pool, table = paginate(X, 4, order)
    assert pool.shape == (6, 4, 3, 4) and table.dtype == np.int32 and table.tolist() == order.reshape(2, 3).tolist()
    for b in range(2):
        for p in range(3):
            rows = X[b, :, 4 * p:4 * p + 4].transpose(1, 0, 2)      # (keys of the page, H_kv, d)
            assert np.array_equal(pool[table[b, p], :len(rows)], rows)
            assert not pool[table[b, p], len(rows):].any()          # padding of the last page is zero
    with pytest.raises(ValueError, match="permutation of range"):
        paginate(X, 4, [0, 0, 1, 2, 3, 4])


def test_merge_partials_promotes_integers_to_float64():
    # two splits with lse 0 each: the merged lse is log 2 (integer inputs gave 0 before)
    O, lse = merge_partials(np.zeros((2, 1), int), np.ones((2, 1, 1), int))
    assert lse.dtype == np.float64 and lse[0] == pytest.approx(np.log(2.0), abs=1e-15)
    np.testing.assert_array_equal(O, [[1.0]])
    O, lse = merge_partials([[0.0], [-np.inf]], [[[3.0]], [[0.0]]])     # -inf: an empty split, legal
    assert lse[0] == 0.0 and O[0, 0] == 3.0


@pytest.mark.parametrize("lse,O,exc,words", [
    ([[np.nan], [0.0]], np.ones((2, 1, 1)), ValueError, r"lse_parts contains NaN or \+inf"),
    ([[np.inf], [0.0]], np.ones((2, 1, 1)), ValueError, r"lse_parts contains NaN or \+inf"),
    (np.zeros((2, 1)), [[[np.nan]], [[1.0]]], ValueError, "O_parts contains NaN or inf"),
    ([[None]], [[[1.0]]], TypeError, "lse_parts must have dtype float16, float32 or float64, got object"),
    (np.zeros((1, 1)), [[["x"]]], TypeError, "O_parts must have dtype float16, float32 or float64"),
    (np.zeros((2, 1), bool), np.ones((2, 1, 1)), TypeError, "lse_parts must hold numbers, got a boolean array"),
    (np.zeros((1, 1), complex), np.ones((1, 1, 1)), TypeError, "lse_parts must have dtype"),
    (np.zeros((2, 1)), np.full((2, 1, 1), 1e308), ValueError,
     r"S·max\|O_parts\| = inf \(S = 2 splits\), beyond what float64"),
    (np.zeros((2, 1), np.float32), np.full((2, 1, 1), 3e38, np.float32), ValueError,
     r"S·max\|O_parts\| = 6e\+38 \(S = 2 splits\), beyond what float32"),
], ids=["nan_lse", "posinf_lse", "nan_O", "object", "strings", "bool", "complex", "overflow64", "overflow32"])
def test_merge_partials_refuses_bad_values_in_one_line(lse, O, exc, words):
    with pytest.raises(exc) as info:
        merge_partials(lse, O)
    assert re.search(words, one_line(info))


@pytest.mark.parametrize("call,words", [
    (lambda q, k: fv.decode_attention(q, k, k, num_splits=10**6),
     "num_splits must be at most 4,096 (each split is written and merged, even an empty one), got 1,000,000"),
    (lambda q, k: fv.decode_attention(q, k, k, num_splits=10**40), "num_splits must be at most 4,096"),
    (lambda q, k: fv.decode_attention(q, k, k, page_size=10**12),
     "page_size must be at most 65,536 tokens (real caches use pages of 16 to 256), got 1,000,000,000,000"),
    (lambda q, k: fv.iomodel.decode_io(1, 10, 4, H=1, H_kv=1, Bc=4, itemsize=4, num_splits=4097),
     "num_splits must be at most 4,096"),
    (lambda q, k: fv.iomodel.decode_io(1, 10, 4, H=1, H_kv=1, Bc=4, itemsize=4, num_splits=1,
                                              page_size=65537),
     "page_size must be at most 65,536 tokens"),
], ids=["splits_1e6", "splits_1e40", "page_1e12", "decode_io_splits", "decode_io_page"])
def test_num_splits_and_page_size_above_their_caps_are_refused_at_once(call, words):
    q, k = np.ones((1, 1, 4)), np.ones((1, 10, 4))
    with pytest.raises(ValueError) as info:
        call(q, k)
    assert words in one_line(info)


def test_num_splits_and_page_size_at_their_caps_run():
    from flashviz import checks as C

    q, k = np.ones((1, 1, 4)), np.arange(40.0).reshape(1, 10, 4) / 40
    want = fv.attention(q, k, k)
    r = fv.decode_attention(q, k, k, num_splits=C.MAX_NUM_SPLITS, Bc=1)
    assert r.num_splits == 4096 and len(r.partials) == 4096
    np.testing.assert_allclose(r.O, want, rtol=1e-12)
    np.testing.assert_allclose(fv.decode_attention(q, k, k, page_size=C.MAX_PAGE_SIZE).O, want, rtol=1e-12)
