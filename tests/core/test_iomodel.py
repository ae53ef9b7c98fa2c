import itertools

import numpy as np
import pytest

import flashviz as fv
from flashviz.iomodel import flash_forward_io, standard_attention_io


def test_standard_attention_closed_form():
    for N, d, b in [(1024, 64, 2), (7, 3, 4), (1, 1, 8)]:
        io = standard_attention_io(N, N, d, itemsize=b)
        assert io.hbm_bytes == (4 * N * d + 4 * N * N) * b  # the paper's Θ(Nd + N²), exactly
        assert io.flops == 4 * N * N * d
    io = standard_attention_io(10, 20, 4, dv=6, itemsize=1)
    assert io.reads == {"Q": 40, "K": 80, "S": 200, "P": 200, "V": 120}
    assert io.writes == {"S": 200, "P": 200, "O": 60}


def test_fa2_closed_form_by_hand():
    # N=256, d=32, Br=Bc=64, float32: Q once, K and V Tr=4 times, O + lse once
    io = flash_forward_io(256, 256, 32, Br=64, Bc=64, itemsize=4)
    assert io.reads == {"Q": 256 * 32 * 4, "K": 4 * 256 * 32 * 4, "V": 4 * 256 * 32 * 4}
    assert io.writes == {"O": 256 * 32 * 4, "lse": 256 * 4}
    assert io.flops == 4 * 256 * 256 * 32
    assert io.sram_bytes == (64 * 32 * 4 + 64 * 64 + 2 * 64) * 4
    # causal: query block i sees key blocks 0..i → 1+2+3+4 = 10 tiles of 64×64
    c = flash_forward_io(256, 256, 32, Br=64, Bc=64, itemsize=4, causal=True)
    assert c.reads["K"] == 10 * 64 * 32 * 4 and c.flops == 10 * 4 * 64 * 64 * 32


def test_flash_moves_fewer_bytes_than_standard_at_large_N():
    std = standard_attention_io(4096, 4096, 64, itemsize=2)
    fl = flash_forward_io(4096, 4096, 64, Br=128, Bc=128, itemsize=2)
    N, d, Tr, b = 4096, 64, 32, 2
    assert fl.hbm_bytes == (N * d + 2 * Tr * N * d + N * d + N) * b
    # ≈ 4N² / (2·Tr·N·d) = 2·Br/d = 4 times fewer bytes at this block size
    assert 3.9 < std.hbm_bytes / fl.hbm_bytes < 4.0


CASES = list(itertools.product([1, 5, 64, 100], [1, 7, 64, 90], [1, 3, 8], [1, 4, 16, 128], [1, 5, 16, 128],
                               [False, True]))


@pytest.mark.parametrize("order", ["fa2", "fa1"])
def test_run_counts_equal_closed_form_exhaustive_grid(order):
    rng = np.random.default_rng(0)
    sel = rng.choice(len(CASES), size=120, replace=False)
    for k in sel:
        Nq, Nk, d, Br, Bc, causal = CASES[k]
        for dtype in (np.float64, np.float32, np.float16):
            Q = rng.standard_normal((Nq, d)).astype(dtype)
            K = rng.standard_normal((Nk, d)).astype(dtype)
            V = rng.standard_normal((Nk, d)).astype(dtype)
            r = fv.flash_forward(Q, K, V, Br=Br, Bc=Bc, causal=causal, order=order, record=True)
            model = flash_forward_io(Nq, Nk, d, Br=Br, Bc=Bc, itemsize=np.dtype(dtype).itemsize, order=order,
                                     causal=causal)
            assert r.io.reads == model.reads, (Nq, Nk, d, Br, Bc, causal, dtype)
            assert r.io.writes == model.writes, (Nq, Nk, d, Br, Bc, causal, dtype)
            assert r.io.flops == model.flops and r.io.sram_bytes == model.sram_bytes
            assert r.trace.io() == model


def test_fa1_moves_more_than_fa2():
    a = flash_forward_io(1024, 1024, 64, Br=64, Bc=64, order="fa1")
    b = flash_forward_io(1024, 1024, 64, Br=64, Bc=64, order="fa2")
    assert a.hbm_bytes > b.hbm_bytes and a.flops == b.flops


@pytest.mark.parametrize("kw,exc", [(dict(Br=0, Bc=4), ValueError), (dict(Br=4.0, Bc=4), TypeError),
                                    (dict(Br=4, Bc=4, itemsize=3), ValueError), (dict(Br=4, Bc=4, order="fa3"), ValueError),
                                    (dict(Br=4, Bc=4, causal="yes"), TypeError)])
def test_bad_arguments(kw, exc):
    with pytest.raises(exc):
        flash_forward_io(16, 16, 4, **kw)
    with pytest.raises(ValueError):
        standard_attention_io(0, 4, 4)
