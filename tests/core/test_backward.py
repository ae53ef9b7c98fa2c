"""The tiled backward with recomputation: exact gradients, recomputed P, and IO counted = IO modelled."""

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import flashviz as fv
from flashviz.backward import BackwardEvent, attention_backward, flash_backward
from flashviz.iomodel import (
    flash_backward_io,
    flash_forward_io,
    recompute_extra_flops,
    standard_attention_io,
    standard_backward_io,
    stored_between_passes,
)
from flashviz.masking import visible
from flashviz.trace import EVENT_KINDS

SHAPES = [  # Nq, Nk, d, Br, Bc
    (64, 64, 16, 16, 16), (100, 77, 8, 32, 20), (77, 100, 8, 7, 13), (1, 1, 1, 1, 1), (5, 300, 4, 64, 64),
    (130, 40, 8, 16, 16), (33, 33, 5, 1, 33), (10, 3, 2, 100, 100), (40, 130, 6, 128, 9),
]


def rel_err(a, b):
    return np.linalg.norm(np.asarray(a, np.float64) - b) / max(np.linalg.norm(b), 1e-300)


def make(rng, Nq, Nk, d, dv=None, dtype=np.float64):
    dv = d if dv is None else dv
    Q, K, V, dO = (rng.standard_normal(s).astype(dtype) for s in ((Nq, d), (Nk, d), (Nk, dv), (Nq, dv)))
    return Q, K, V, dO


def run(Q, K, V, dO, *, Br, Bc, causal, record=False, scale=None):
    f = fv.flash_forward(Q, K, V, Br=Br, Bc=Bc, causal=causal, scale=scale, record=record)
    b = flash_backward(Q, K, V, f.O, dO, f.lse, Br=Br, Bc=Bc, causal=causal, scale=scale, record=record)
    return f, b


def finite_diff(Q, K, V, G, causal, which, idx, h=1e-6):
    """Central difference of L = sum(O ∘ G), O = fv.attention(Q, K, V), w.r.t. one entry."""
    args = [Q.copy(), K.copy(), V.copy()]
    k = "QKV".index(which)
    x0 = args[k][idx]
    args[k][idx] = x0 + h
    Lp = (fv.attention(*args, causal=causal) * G).sum()
    args[k][idx] = x0 - h
    Lm = (fv.attention(*args, causal=causal) * G).sum()
    return (Lp - Lm) / (2 * h)


# ---------------------------------------------------------------- the dense analytic reference


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("Nq,Nk,d", [(6, 6, 3), (7, 4, 2), (4, 9, 3), (1, 5, 2)])
def test_dense_reference_matches_finite_differences(rng, Nq, Nk, d, causal):
    Q, K, V, G = make(rng, Nq, Nk, d, dv=d + 1)
    grads = dict(zip("QKV", attention_backward(Q, K, V, G, causal=causal)))
    for which in "QKV":
        for idx in np.ndindex(grads[which].shape):  # every entry: these are small
            fd = finite_diff(Q, K, V, G, causal, which, idx)
            assert abs(grads[which][idx] - fd) <= 1e-8 * max(1.0, abs(fd)), (which, idx)


def test_dense_reference_rows_that_see_no_key_give_zero():
    rng = np.random.default_rng(3)
    Q, K, V, dO = make(rng, 9, 4, 3)          # causal: the first Nq - Nk = 5 query rows see no key
    dQ, dK, dV = attention_backward(Q, K, V, dO, causal=True)
    assert np.isfinite(dQ).all() and np.isfinite(dK).all() and np.isfinite(dV).all()
    assert not dQ[:5].any()
    dK2, dV2 = attention_backward(Q[5:], K, V, dO[5:], causal=True)[1:]  # those rows change nothing
    np.testing.assert_allclose(dK, dK2, rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(dV, dV2, rtol=1e-14, atol=1e-15)


def test_dense_reference_batched_equals_per_head(rng):
    Q, K, V, dO = (rng.standard_normal((2, 3, n, 4)) for n in (5, 7, 7, 5))
    out = attention_backward(Q, K, V, dO, causal=True)
    for h in np.ndindex(2, 3):
        for a, b in zip(out, attention_backward(Q[h], K[h], V[h], dO[h], causal=True)):
            np.testing.assert_allclose(a[h], b, rtol=1e-13, atol=1e-15)


# ---------------------------------------------------------------- the tiled backward


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("Nq,Nk,d,Br,Bc", SHAPES)
def test_float64_matches_dense_analytic_gradient(rng, Nq, Nk, d, Br, Bc, causal):
    Q, K, V, dO = make(rng, Nq, Nk, d)
    _, r = run(Q, K, V, dO, Br=Br, Bc=Bc, causal=causal)
    ref = attention_backward(Q, K, V, dO, causal=causal)
    for got, want, shape in zip((r.dQ, r.dK, r.dV), ref, ((Nq, d), (Nk, d), (Nk, d))):
        assert got.dtype == np.float64 and got.shape == shape
        assert np.isfinite(got).all()
        if np.linalg.norm(want) > 1e-8:       # Nq = Nk = 1: dQ = dK = 0 up to rounding
            assert rel_err(got, want) <= 1e-12
        else:
            assert np.abs(got).max() <= 1e-14


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("Nq,Nk,d,dv,Br,Bc", [(6, 6, 3, 3, 4, 4), (7, 4, 2, 3, 3, 2), (4, 9, 3, 2, 2, 5),
                                              (5, 5, 2, 2, 8, 8)])
def test_float64_matches_finite_differences(Nq, Nk, d, dv, Br, Bc, causal):
    rng = np.random.default_rng(Nq * 100 + Nk)
    Q, K, V, G = make(rng, Nq, Nk, d, dv=dv)
    _, r = run(Q, K, V, G, Br=Br, Bc=Bc, causal=causal)
    grads = {"Q": r.dQ, "K": r.dK, "V": r.dV}
    for which, g in grads.items():
        flat = rng.choice(g.size, size=min(g.size, 8), replace=False)   # a sample of entries
        for idx in (np.unravel_index(k, g.shape) for k in flat):
            fd = finite_diff(Q, K, V, G, causal, which, idx)
            assert abs(g[idx] - fd) <= 1e-8 * max(1.0, abs(fd)), (which, idx, g[idx], fd)


@pytest.mark.parametrize("causal", [False, True])
def test_float32_and_float16_inputs(rng, causal):
    Q, K, V, dO = make(rng, 90, 70, 32)
    for dtype, tol in ((np.float32, 1e-5), (np.float16, 1e-2)):
        x = [a.astype(dtype) for a in (Q, K, V, dO)]
        _, r = run(*x, Br=32, Bc=16, causal=causal)
        ref = attention_backward(*x, causal=causal)
        for got, want in zip((r.dQ, r.dK, r.dV), ref):
            assert got.dtype == dtype
            assert rel_err(got, want) <= tol, (dtype, rel_err(got, want))


def test_rows_that_see_no_key_are_finite_and_zero():
    rng = np.random.default_rng(5)
    Q, K, V, dO = make(rng, 50, 12, 4)      # causal, Nq > Nk: rows 0..37 see no key
    f, r = run(Q, K, V, dO, Br=16, Bc=5, causal=True, record=True)
    assert np.isneginf(f.lse[:38]).all() and np.isfinite(f.lse[38:]).all()
    for g in (r.dQ, r.dK, r.dV):
        assert not np.isnan(g).any() and np.isfinite(g).all()
    assert not r.dQ[:38].any()
    ref = attention_backward(Q, K, V, dO, causal=True)
    assert max(rel_err(a, b) for a, b in zip((r.dQ, r.dK, r.dV), ref)) <= 1e-12
    # query block 0 (rows 0..15) sees no key: it is never loaded in the inner loop
    assert all(e.i != 0 for e in r.trace if e.kind == "load_Qi")


def test_lse_minus_inf_row_gives_zero_not_nan(rng):
    Q, K, V, dO = make(rng, 8, 8, 4)
    f = fv.flash_forward(Q, K, V, Br=4, Bc=4)
    lse = f.lse.copy()
    lse[2] = -np.inf                          # a row declared empty: P = 0 there
    r = flash_backward(Q, K, V, f.O, dO, lse, Br=4, Bc=4)
    assert np.isfinite(r.dQ).all() and np.isfinite(r.dK).all() and np.isfinite(r.dV).all()
    assert not r.dQ[2].any()


def test_batched_equals_per_head_and_io_sums(rng):
    Q, K, V, dO = (rng.standard_normal((2, 3, n, 4)) for n in (20, 13, 13, 20))
    f = fv.flash_forward(Q, K, V, Br=8, Bc=5, causal=True)
    r = flash_backward(Q, K, V, f.O, dO, f.lse, Br=8, Bc=5, causal=True)
    assert r.dQ.shape == Q.shape and r.dK.shape == K.shape and r.dV.shape == V.shape and r.trace is None
    ref = attention_backward(Q, K, V, dO, causal=True)
    assert max(rel_err(a, b) for a, b in zip((r.dQ, r.dK, r.dV), ref)) <= 1e-12
    assert r.io == flash_backward_io(20, 13, 4, Br=8, Bc=5, itemsize=8, causal=True).scaled(6)


def test_scale_is_used(rng):
    Q, K, V, dO = make(rng, 12, 9, 4)
    _, r = run(Q, K, V, dO, Br=5, Bc=4, causal=False, scale=0.3)
    ref = attention_backward(Q, K, V, dO, scale=0.3)
    assert max(rel_err(a, b) for a, b in zip((r.dQ, r.dK, r.dV), ref)) <= 1e-12


# ---------------------------------------------------------------- recomputation


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("Nq,Nk,d,Br,Bc", [(64, 64, 16, 16, 16), (100, 77, 8, 32, 20), (77, 100, 8, 7, 13),
                                           (30, 9, 4, 8, 4)])
def test_recomputed_P_equals_forward_P_exactly(rng, Nq, Nk, d, Br, Bc, causal):
    Q, K, V, dO = make(rng, Nq, Nk, d)
    f, r = run(Q, K, V, dO, Br=Br, Bc=Bc, causal=causal, record=True)
    S_fwd = {(e.i, e.j): e.S for e in f.trace if e.kind == "compute_S"}
    lse_fwd = {e.i: e.lse for e in f.trace if e.kind == "write_O"}
    O_ref, lse_ref = fv.attention(Q, K, V, causal=causal, return_lse=True)
    S = (Q @ K.T) / np.sqrt(d)
    if causal:
        S = np.where(visible(np.arange(Nq), np.arange(Nk), Nq, Nk), S, -np.inf)
    with np.errstate(invalid="ignore"):
        P_dense = np.where(np.isneginf(lse_ref)[:, None], 0.0, np.exp(S - lse_ref[:, None]))
    tiles = [e for e in r.trace if e.kind == "recompute_P"]
    assert {(e.i, e.j) for e in tiles} == set(S_fwd)            # the same tiles as the forward
    for e in tiles:
        np.testing.assert_array_equal(e.S, S_fwd[e.i, e.j])
        with np.errstate(invalid="ignore"):
            P_from_forward = np.where(np.isneginf(lse_fwd[e.i])[:, None], 0.0, np.exp(e.S - lse_fwd[e.i][:, None]))
        np.testing.assert_array_equal(e.P, P_from_forward)        # bit for bit
        assert np.abs(e.P - P_dense[e.r0:e.r1, e.c0:e.c1]).max() <= 1e-15
        assert not e.P[np.isneginf(e.S)].any()                    # masked → exactly 0


def test_trace_reads_like_the_algorithm(rng):
    Q, K, V, dO = make(rng, 20, 13, 4)
    _, r = run(Q, K, V, dO, Br=8, Bc=5, causal=False, record=True)
    tr = r.trace
    assert tr.order == "fa2_bwd" and tr.Tr == 3 and tr.Tc == 3
    assert all(isinstance(e, BackwardEvent) and e.kind in EVENT_KINDS for e in tr)
    kinds = [e.kind for e in tr]
    step = ["load_Qi", "recompute_P", "accumulate_dV", "compute_dS", "accumulate_dK", "update_dQ"]
    assert kinds == ["compute_D"] * 3 + (["load_KV"] + step * 3 + ["write_dKdV"]) * 3
    assert [(e.i, e.j) for e in tr if e.kind == "load_Qi"] == [(i, j) for j in range(3) for i in range(3)]
    assert tr.io() == r.io
    # snapshots: the last dK/dV written equal the result; D = rowsum(dO ∘ O)
    last = [e for e in tr if e.kind == "write_dKdV"][-1]
    np.testing.assert_array_equal(last.dK, r.dK[10:])
    np.testing.assert_array_equal(last.dV, r.dV[10:])
    O = fv.attention(Q, K, V)
    D = np.concatenate([e.D for e in tr if e.kind == "compute_D"])
    np.testing.assert_allclose(D, (dO * O).sum(1), rtol=1e-12, atol=1e-14)
    e = next(e for e in tr if e.kind == "compute_dS")
    np.testing.assert_array_equal(e.dS, next(p for p in tr if p.kind == "recompute_P").P * (e.dP - e.D[:, None]))


# ---------------------------------------------------------------- IO: counted == closed form

GRID = list(itertools.product([1, 5, 64, 100], [1, 7, 64, 90], [(1, 1), (3, 3), (8, 5)], [1, 4, 16, 128],
                              [1, 5, 16, 128], [False, True]))


def test_run_counts_equal_closed_form_over_a_grid():
    rng = np.random.default_rng(0)
    for k in rng.choice(len(GRID), size=120, replace=False):
        Nq, Nk, (d, dv), Br, Bc, causal = GRID[k]
        for dtype in (np.float64, np.float32, np.float16):
            Q, K, V, dO = make(rng, Nq, Nk, d, dv=dv, dtype=dtype)
            f = fv.flash_forward(Q, K, V, Br=Br, Bc=Bc, causal=causal)
            r = flash_backward(Q, K, V, f.O, dO, f.lse, Br=Br, Bc=Bc, causal=causal, record=True)
            model = flash_backward_io(Nq, Nk, d, dv=dv, Br=Br, Bc=Bc, itemsize=np.dtype(dtype).itemsize,
                                      causal=causal)
            case = (Nq, Nk, d, dv, Br, Bc, causal, dtype)
            assert r.io.reads == model.reads, case
            assert r.io.writes == model.writes, case
            assert r.io.flops == model.flops and r.io.sram_bytes == model.sram_bytes, case
            assert r.trace.io() == r.io, case
            # the recomputation's extra FLOPs are the recompute_P events, tile-granular
            assert sum(e.flops for e in r.trace if e.kind == "recompute_P") == \
                recompute_extra_flops(Nq, Nk, d, causal, Br=Br, Bc=Bc), case


def test_closed_form_by_hand():
    # N = 256, d = 64, Br = Bc = 64, float16: Tc = 4 passes over the query side
    N, d, b, Tc = 256, 64, 2, 4
    io = flash_backward_io(N, N, d, Br=64, Bc=64, itemsize=b)
    assert io.reads == {"O": N * d * b, "dO": N * d * b + Tc * N * d * b, "Q": Tc * N * d * b, "lse": Tc * N * b,
                        "D": Tc * N * b, "dQ": Tc * N * d * b, "K": N * d * b, "V": N * d * b}
    assert io.writes == {"D": N * b, "dQ": N * d * b + Tc * N * d * b, "dK": N * d * b, "dV": N * d * b}
    assert io.flops == 10 * N * N * d                        # 5 matmuls of 2·N·N·d
    assert io.sram_bytes == (4 * 64 * d + 3 * 64 * d + 2 * 64 + 2 * 64 * 64) * b
    # causal: key block j is seen by query blocks j..3 → 4+3+2+1 = 10 tiles of 64×64
    c = flash_backward_io(N, N, d, Br=64, Bc=64, itemsize=b, causal=True)
    assert c.flops == 10 * 10 * 64 * 64 * d and c.reads["Q"] == 10 * 64 * d * b
    assert c.reads["K"] == N * d * b and c.writes["dK"] == N * d * b


def test_standard_backward_closed_form_and_comparison():
    for N, d, b in [(1024, 64, 2), (7, 3, 4), (1, 1, 8)]:
        io = standard_backward_io(N, N, d, itemsize=b)
        assert io.hbm_read_bytes == (5 * N * N + 5 * N * d) * b     # Algorithm 3: P, dS read twice; dP once
        assert io.hbm_write_bytes == (2 * N * N + 3 * N * d) * b    # dP, dS, dQ, dK, dV
        assert io.flops == 8 * N * N * d
    io = standard_backward_io(10, 20, 4, dv=6, itemsize=1)
    assert io.reads == {"P": 400, "dO": 120, "V": 120, "dP": 200, "dS": 400, "K": 80, "Q": 40}
    assert io.writes == {"dV": 120, "dP": 200, "dS": 200, "dQ": 40, "dK": 80}
    # at long sequences the tiled backward moves far fewer bytes, for 25% more FLOPs (d = dv)
    std = standard_backward_io(4096, 4096, 64, itemsize=2)
    fl = flash_backward_io(4096, 4096, 64, Br=128, Bc=128, itemsize=2)
    assert fl.hbm_bytes < std.hbm_bytes / 3
    assert fl.flops - std.flops == recompute_extra_flops(4096, 4096, 64) == std.flops // 4


def test_recompute_extra_flops_causal_counts_visible_pairs():
    for Nq, Nk in [(10, 10), (13, 7), (7, 13), (1, 5)]:
        pairs = visible(np.arange(Nq), np.arange(Nk), Nq, Nk).sum()
        assert recompute_extra_flops(Nq, Nk, 3, causal=True) == 2 * pairs * 3
        assert recompute_extra_flops(Nq, Nk, 3) == 2 * Nq * Nk * 3
        # tiles count in full: at least the visible pairs, at most everything
        t = recompute_extra_flops(Nq, Nk, 3, True, Br=4, Bc=3)
        assert 2 * pairs * 3 <= t <= 2 * Nq * Nk * 3
    with pytest.raises(ValueError, match="both Br and Bc"):
        recompute_extra_flops(4, 4, 2, Br=2)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_stored_between_passes_matches_the_runs(rng, dtype):
    Nq, Nk, d = 37, 50, 8
    b = np.dtype(dtype).itemsize
    stored = stored_between_passes(Nq, Nk, itemsize=b)
    assert stored == {"standard (P)": Nq * Nk * b, "flash (lse)": Nq * b}
    Q, K, V, dO = make(rng, Nq, Nk, d, dtype=dtype)
    f, r = run(Q, K, V, dO, Br=16, Bc=16, causal=False)
    assert f.lse.nbytes == stored["flash (lse)"]                          # what the forward really keeps
    assert f.io.writes["lse"] == stored["flash (lse)"]
    assert flash_forward_io(Nq, Nk, d, Br=16, Bc=16, itemsize=b).writes["lse"] == stored["flash (lse)"]
    assert standard_attention_io(Nq, Nk, d, itemsize=b).writes["P"] == stored["standard (P)"]
    assert standard_backward_io(Nq, Nk, d, itemsize=b).reads["P"] == 2 * stored["standard (P)"]
    assert "P" not in r.io.reads and "P" not in r.io.writes                # P never touches HBM
    assert stored_between_passes(4096, 4096, itemsize=2) == {"standard (P)": 32 * 1024 * 1024,   # 32 MiB vs
                                                              "flash (lse)": 16 * 1024}          # 16 KiB (fp32)


def test_stored_lse_is_float32_for_half_precision(rng):
    """FlashAttention-2 keeps lse in fp32 whatever the activations; flashviz's forward does too (its lse is in
    the fp32 accumulator), so the stored bytes are 4 a row for fp16, itemsize for fp32/fp64."""
    Nq, Nk, d = 37, 50, 8
    Q, K, V = (rng.standard_normal((n, d)).astype(np.float16) for n in (Nq, Nk, Nk))
    f = fv.flash_forward(Q, K, V, Br=16, Bc=16)
    assert f.lse.dtype == np.float32
    assert stored_between_passes(Nq, Nk, itemsize=2) == {"standard (P)": Nq * Nk * 2, "flash (lse)": Nq * 4}
    assert f.lse.nbytes == stored_between_passes(Nq, Nk, itemsize=2)["flash (lse)"]
    assert stored_between_passes(Nq, Nk, itemsize=2, lse_itemsize=2)["flash (lse)"] == Nq * 2   # another width
    assert stored_between_passes(Nq, Nk, itemsize=8)["flash (lse)"] == Nq * 8
    with pytest.raises(ValueError):
        stored_between_passes(Nq, Nk, itemsize=2, lse_itemsize=3)


# ---------------------------------------------------------------- bad input


def one_line(info):
    msg = str(info.value)
    assert msg and "\n" not in msg
    return msg


Qg = np.ones((8, 4))
Og = np.ones((8, 4))
lse_g = np.zeros(8)


@pytest.mark.parametrize("kwargs,exc,words", [
    (dict(O=np.ones((8, 5))), ValueError, "O must have shape"),
    (dict(O=np.ones((7, 4))), ValueError, "O must have shape"),
    (dict(dO=np.ones((8, 3))), ValueError, "dO must have the shape"),
    (dict(dO=np.full((8, 4), np.nan)), ValueError, "NaN or inf"),
    (dict(O="out"), TypeError, "float array"),
    (dict(lse=np.zeros(7)), ValueError, "lse must have shape"),
    (dict(lse=np.zeros((8, 1))), ValueError, "lse must have shape"),
    (dict(lse=np.full(8, np.nan)), ValueError, "NaN or +inf"),
    (dict(lse=np.full(8, np.inf)), ValueError, "NaN or +inf"),
    (dict(lse=None), TypeError, "lse must be a float array"),
    (dict(lse=np.zeros(8, complex)), TypeError, "dtype"),
    (dict(Q=np.ones((8, 5))), ValueError, "head dimension"),
    (dict(V=np.ones((7, 4))), ValueError, "same number of keys"),
    (dict(Br=0), ValueError, "Br must be an integer >= 1"),
    (dict(Bc=2.5), TypeError, "Bc must be an integer"),
    (dict(causal="yes"), TypeError, "causal must be True or False"),
    (dict(scale=np.inf), ValueError, "scale must be finite"),
])
def test_bad_input_one_line_errors(kwargs, exc, words):
    args = dict(Q=Qg, K=Qg, V=Qg, O=Og, dO=Og, lse=lse_g)
    args.update(kwargs)
    pos = [args.pop(k) for k in ("Q", "K", "V", "O", "dO", "lse")]
    with pytest.raises(exc) as info:
        flash_backward(*pos, **args)
    assert words in one_line(info)


def test_bad_input_record_batched_and_reference():
    x = np.ones((2, 8, 4))
    with pytest.raises(ValueError) as info:
        flash_backward(x, x, x, x, x, np.zeros((2, 8)), record=True)
    assert "one head" in one_line(info)
    with pytest.raises(ValueError) as info:
        attention_backward(Qg, Qg, Qg, np.ones((8, 5)))
    assert "dO must have the shape" in one_line(info)
    with pytest.raises(TypeError) as info:
        attention_backward(Qg, Qg, Qg, "grad")
    one_line(info)
    with pytest.raises(ValueError) as info:
        flash_backward_io(0, 4, 4, Br=2, Bc=2)
    one_line(info)


def test_lse_minus_inf_is_accepted_and_ints_are_accepted():
    r = flash_backward(np.ones((3, 2), int), np.ones((3, 2)), np.ones((3, 2)), np.ones((3, 2)), np.ones((3, 2)),
                       [0.0, -np.inf, 1.0], Br=2, Bc=2)
    assert r.dQ.dtype == np.float64 and np.isfinite(r.dQ).all()


# ---------------------------------------------------------------- property test


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(Nq=st.integers(1, 40), Nk=st.integers(1, 40), d=st.integers(1, 8), dv=st.integers(1, 8),
       Br=st.integers(1, 48), Bc=st.integers(1, 48), causal=st.booleans(),
       dtype=st.sampled_from([np.float64, np.float32]), seed=st.integers(0, 2**31 - 1))
def test_property_tiled_backward_matches_reference_and_model(Nq, Nk, d, dv, Br, Bc, causal, dtype, seed):
    rng = np.random.default_rng(seed)
    Q, K, V, dO = make(rng, Nq, Nk, d, dv=dv, dtype=dtype)
    _, r = run(Q, K, V, dO, Br=Br, Bc=Bc, causal=causal)
    ref = attention_backward(Q, K, V, dO, causal=causal)
    # gradients are sums of |P|·|dP|-sized terms: bound the error by that scale, not by |grad|
    # (which can vanish by cancellation, e.g. Nk = 1 gives dQ = dK = 0)
    mag = 1.0 + np.abs(dO).max() * np.abs(V).max() * np.sqrt(dv) * max(np.abs(Q).max(), np.abs(K).max(), 1.0)
    tol = {np.float64: 1e-14, np.float32: 1e-6}[dtype] * mag * np.sqrt(max(Nq, Nk))   # seen: 2e-17, 8e-9
    for got, want in zip((r.dQ, r.dK, r.dV), ref):
        assert got.dtype == dtype and np.isfinite(got).all()
        assert np.abs(got.astype(np.float64) - want).max() <= tol
    assert r.io == flash_backward_io(Nq, Nk, d, dv=dv, Br=Br, Bc=Bc, itemsize=np.dtype(dtype).itemsize,
                                     causal=causal)
