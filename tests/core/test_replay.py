"""Frame semantics of the replay: frame k is the state after events[0..k], from the trace alone."""

import subprocess
import sys

import numpy as np
import pytest

import flashviz as fv
from flashviz.replay import Replay


def run(Nq=70, Nk=70, d=8, Br=32, Bc=32, causal=False, order="fa2", rescale=True, seed=0):
    rng = np.random.default_rng(seed)
    Q, K, V = rng.standard_normal((Nq, d)), rng.standard_normal((Nk, d)), rng.standard_normal((Nk, d))
    return (Q, K, V), fv.flash_forward(Q, K, V, Br=Br, Bc=Bc, causal=causal, order=order, rescale=rescale,
                                       record=True)


def test_scores_and_output_fill_in_as_the_run_goes():
    (Q, K, V), r = run()
    R = Replay(r.trace)
    S_ref = Q @ K.T / np.sqrt(8)
    O_ref = fv.attention(Q, K, V)
    first_S = next(k for k, e in enumerate(r.trace.events) if e.kind == "compute_S")
    assert np.isnan(R.scores_shown(first_S - 1)).all()
    shown = R.scores_shown(first_S)
    np.testing.assert_allclose(shown[:32, :32], S_ref[:32, :32], rtol=1e-14)
    assert np.isnan(shown[:, 32:]).all() and np.isnan(shown[32:]).all()
    last = R.n_frames - 1
    np.testing.assert_allclose(R.scores_shown(last), S_ref, rtol=1e-14)
    first_write = next(k for k, e in enumerate(r.trace.events) if e.kind == "write_O")
    O = R.state(first_write).O_done
    np.testing.assert_allclose(O[:32], O_ref[:32], rtol=1e-12)
    assert np.isnan(O[32:]).all() and np.isnan(R.state(first_write - 1).O_done).all()
    np.testing.assert_allclose(R.state(last).O_done, O_ref, rtol=1e-12)


def test_row_statistics_at_a_frame_are_those_after_that_block():
    (Q, K, V), r = run()
    R = Replay(r.trace)
    S = Q @ K.T / np.sqrt(8)
    upd = [k for k, e in enumerate(r.trace.events) if e.kind == "update_ml" and e.i == 1]
    for n, k in enumerate(upd):           # after key block n: the max over columns [0, 32(n+1))
        s = R.state(k)
        np.testing.assert_allclose(s.m, S[32:64, : 32 * (n + 1)].max(1), rtol=1e-14)
        np.testing.assert_allclose(s.l, np.exp(S[32:64, : 32 * (n + 1)] - s.m[:, None]).sum(1), rtol=1e-12)
        assert s.rescale_j == n
        if n:
            np.testing.assert_allclose(s.rescale, np.exp(s.m_old - s.m), rtol=1e-14)


def test_state_arrays_do_not_change_under_the_caller():
    _, r = run()
    R = Replay(r.trace)
    s2 = R.state(2)
    before = s2.O_done.copy(), s2.shown_tiles.copy()
    R.state(R.n_frames - 1)
    np.testing.assert_array_equal(s2.O_done, before[0])
    np.testing.assert_array_equal(s2.shown_tiles, before[1])
    with pytest.raises(ValueError):
        s = R.state(40)
        s.m[0] = 1.0                      # snapshots are read-only


def test_hbm_bytes_by_frame_are_running_sums_of_the_events():
    _, r = run(causal=True)
    R = Replay(r.trace)
    total = 0
    for k, e in enumerate(r.trace.events):
        total += sum(e.reads.values()) + sum(e.writes.values())
        assert R.state(k).hbm_bytes == total
    assert total == fv.iomodel.flash_forward_io(70, 70, 8, Br=32, Bc=32, itemsize=8, causal=True).hbm_bytes


def test_fa1_replay_writes_every_row_even_those_that_see_no_key():
    (Q, K, V), r = run(Nq=40, Nk=17, Br=8, Bc=8, causal=True, order="fa1")
    R = Replay(r.trace)
    s = R.state(R.n_frames - 1)
    np.testing.assert_allclose(s.O_done, fv.attention(Q, K, V, causal=True), atol=1e-12)
    k = next(k for k, e in enumerate(r.trace.events) if e.kind == "load_Q")
    assert r.trace.events[k].i == 2                  # rows 0..15 see no key: blocks 0, 1 are never loaded
    assert "load Q₂, O₂, l₂, m₂" in R.state(k).text


def test_break_it_replay_says_the_correction_is_not_applied():
    _, r = run(rescale=False)
    R = Replay(r.trace)
    k = next(k for k, e in enumerate(r.trace.events) if e.kind == "update_ml")
    assert "WITHOUT rescaling" in R.state(k).text
    _, good = run()
    assert "rescaled by" in Replay(good.trace).state(k).text


def test_replay_of_an_empty_trace_is_refused():
    _, r = run()
    r.trace.events.clear()
    with pytest.raises(ValueError):
        Replay(r.trace)


def test_fa1_bytes_by_hand():
    # N=256, d=32, Br=Bc=64, float32: Tr = Tc = 4, every one of the 16 steps moves Q_i, O_i, l_i, m_i in
    # and O_i, l_i, m_i out; K, V read once; O, l, m initialised once.
    io = fv.iomodel.flash_forward_io(256, 256, 32, Br=64, Bc=64, order="fa1")
    N, d, b = 256, 32, 4
    assert io.reads == {"Q": 4 * N * d * b, "O": 4 * N * d * b, "l": 4 * N * b, "m": 4 * N * b,
                        "K": N * d * b, "V": N * d * b}
    assert io.writes == {"O": 5 * N * d * b, "l": 5 * N * b, "m": 5 * N * b}


@pytest.mark.parametrize("Nq,Nk,Br,Bc", [(40, 17, 8, 8), (17, 40, 5, 7), (64, 64, 16, 16), (33, 90, 32, 1)])
def test_causal_tile_count_by_brute_force(Nq, Nk, Br, Bc):
    rows, cols = np.arange(Nq)[:, None], np.arange(Nk)[None, :]
    visible = cols <= rows + Nk - Nq
    tiles = sum(visible[i:i + Br, j:j + Bc].any() for i in range(0, Nq, Br) for j in range(0, Nk, Bc))
    cells = sum(visible[i:i + Br, j:j + Bc].size for i in range(0, Nq, Br) for j in range(0, Nk, Bc)
                if visible[i:i + Br, j:j + Bc].any())
    io = fv.iomodel.flash_forward_io(Nq, Nk, 4, Br=Br, Bc=Bc, itemsize=1, causal=True)
    assert io.flops == 4 * cells * 4             # 2·cells·d for S plus 2·cells·dv for PV, d = dv = 4
    assert io.reads["K"] == 4 * sum(min(j + Bc, Nk) - j for i in range(0, Nq, Br) for j in range(0, Nk, Bc)
                                    if visible[i:i + Br, j:j + Bc].any())
    assert tiles == len([e for e in fv.flash_forward(*(np.ones((n, 4)) for n in (Nq, Nk, Nk)), Br=Br, Bc=Bc,
                                                     causal=True, record=True).trace.events
                         if e.kind == "compute_S"])


def test_importing_the_algorithm_pulls_in_no_plotting_widgets_or_cupy():
    code = ("import sys, flashviz, flashviz.tiled, flashviz.iomodel, flashviz.backward; "
            "bad = [m for m in ('matplotlib', 'ipywidgets', 'cupy') if m in sys.modules]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
