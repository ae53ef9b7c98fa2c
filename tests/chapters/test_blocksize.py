"""Chapter 4, block size: the IO-model additions against closed forms worked out by hand here,
the BlockSizeExplorer driven through every frame and control, and the exercises."""

import math

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pytest
from widget_contract import assert_recreating_leaks_no_figure

from flashviz import iomodel
from flashviz.exercises.blocksize import check_largest_fitting_tile, check_traffic_prediction
from flashviz.views.blocksize_view import BlockSizeFigure, recorded_sweep, working_set_parts
from flashviz.widgets.blocksize import BlockSizeExplorer

matplotlib.use("Agg")

H200, A100, TOY = 232_448, 166_912, 16 * 1024


# --- closed forms, by hand (Nq = Nk = N, dv = d; elements, times itemsize b) ----------------------
def fa2_bytes(N, d, Br, b):
    """Q once, K and V once per query block (Tr = ⌈N/Br⌉), O once, lse once."""
    Tr = math.ceil(N / Br)
    return ((2 * Tr + 2) * N * d + N) * b


def fa1_bytes(N, d, Bc, b):
    """Per key block (Tc of them): read Q, O, l, m and write O, l, m; K, V once; init O, l, m."""
    Tc = math.ceil(N / Bc)
    return (3 * Tc * N * d + 4 * Tc * N + 3 * N * d + 2 * N) * b


def sram_bytes(N, d, Br, Bc, b):
    br, bc = min(Br, N), min(Bc, N)
    return (br * d + 2 * bc * d + br * bc + br * d + 2 * br) * b


def test_paper_block_sizes_by_hand():
    # H200, fp32, d = 64: M = 232,448 B = 58,112 elements; 4d = 256; 58,112 / 256 = 227 exactly
    assert iomodel.paper_block_sizes(H200, 64, itemsize=4) == (64, 227)
    # A100, fp16, d = 128: 83,456 elements / 512 = 163 → Br = min(163, 128) = 128
    assert iomodel.paper_block_sizes(A100, 128, itemsize=2) == (128, 163)
    # a small M: Bc < d, so Br = Bc; ceil(250 / 64) = 4
    assert iomodel.paper_block_sizes(1000, 16, itemsize=4) == (4, 4)
    assert iomodel.paper_block_sizes(TOY, 64) == (16, 16)


def test_asymptotic_curve_constant_and_exact_gap():
    N, d, b = 4096, 64, 4
    M = 4 * d * 128 * b                  # the outer block of the paper's size B = M_el/(4d) is 128
    M_el = M // b
    assert iomodel.asymptotic_flash_io(N, d, M, itemsize=b) == pytest.approx(8 * N**2 * d**2 / M_el * b)
    assert iomodel.asymptotic_flash_io(N, d, M, itemsize=b, order="fa1") == pytest.approx(12 * N**2 * d**2 / M_el * b)
    # the exact count at B = 128 is the leading term plus the lower-order terms named in the docstring
    fa2 = iomodel.flash_forward_io(N, N, d, Br=128, Bc=128, itemsize=b).hbm_bytes
    assert fa2 - iomodel.asymptotic_flash_io(N, d, M, itemsize=b) == pytest.approx((2 * N * d + N) * b)
    fa1 = iomodel.flash_forward_io(N, N, d, Br=128, Bc=128, itemsize=b, order="fa1").hbm_bytes
    Tc = N // 128
    assert fa1 - iomodel.asymptotic_flash_io(N, d, M, itemsize=b, order="fa1") == pytest.approx(
        (4 * Tc * N + 3 * N * d + 2 * N) * b)
    # Θ(N²d²/M): quadrupling M at fixed N, d divides the traffic by 4; and exact/asymptotic → 1
    assert iomodel.asymptotic_flash_io(N, d, 4 * M) == pytest.approx(iomodel.asymptotic_flash_io(N, d, M) / 4)
    big = 65536
    ratio = iomodel.flash_forward_io(big, big, d, Br=128, Bc=128).hbm_bytes / iomodel.asymptotic_flash_io(big, d, M)
    assert 1 < ratio < 1.003


def test_theorem_2_count_with_the_paper_blocks():
    """Theorem 2 is about Algorithm 1 (key blocks outer) with the paper's Bc = ⌈M/4d⌉, Br = min(⌈M/4d⌉, d):
    K, V once, O, l, m initialised, then Tc = ⌈N/Bc⌉ passes over Q (read), O (read, written) and l, m —
    fa1_bytes above, by hand. With Tc = N/Bc = 4Nd/M_el the leading term is 3·N·d·Tc = 12·N²d²/M_el and
    exact / leading → 1 + 4/(3d) (the l, m passes); Br does not enter."""
    d, b, M = 64, 4, H200
    M_el = M // b
    Br, Bc = iomodel.paper_block_sizes(M, d, itemsize=b)
    assert (Br, Bc) == (min(math.ceil(M_el / (4 * d)), d), math.ceil(M_el / (4 * d))) == (64, 227)
    for N in (4096, 16384, 65536):
        exact = iomodel.flash_forward_io(N, N, d, Br=Br, Bc=Bc, itemsize=b, order="fa1").hbm_bytes
        assert exact == fa1_bytes(N, d, Bc, b)
        assert iomodel.asymptotic_flash_io(N, d, M, itemsize=b, order="fa1") == pytest.approx(
            12 * N * N * d * d / M_el * b)
    N = 1024 * Bc                                       # Tc = N / Bc = 4·N·d / M_el exactly
    Tc = N // Bc
    assert Tc * M_el == 4 * N * d
    exact = iomodel.flash_forward_io(N, N, d, Br=Br, Bc=Bc, itemsize=b, order="fa1").hbm_bytes
    lead = iomodel.asymptotic_flash_io(N, d, M, itemsize=b, order="fa1")
    assert exact == fa1_bytes(N, d, Bc, b)
    assert lead == pytest.approx(3 * N * d * Tc * b)                    # 3·N·d per pass over Q and O
    assert exact - lead == pytest.approx((4 * Tc * N + 3 * N * d + 2 * N) * b)
    assert exact / lead == pytest.approx(1 + 4 / (3 * d), rel=2e-3)
    assert iomodel.flash_forward_io(N, N, d, Br=16, Bc=Bc, itemsize=b, order="fa1").hbm_bytes == exact


@pytest.mark.parametrize("N,d,b,order,causal", [(4096, 64, 4, "fa2", False), (1000, 32, 2, "fa2", False),
                                                (4096, 64, 4, "fa1", False), (300, 128, 8, "fa1", False),
                                                (4096, 64, 4, "fa2", True), (1000, 32, 2, "fa1", True)])
def test_sweep_rows_match_closed_forms(N, d, b, order, causal):
    rows = iomodel.block_size_sweep(N, d, itemsize=b, sram_budget=A100, order=order, causal=causal)
    blocks = iomodel.SWEEP_BLOCKS
    assert [(r["Br"], r["Bc"]) for r in rows] == [(Br, Bc) for Br in blocks for Bc in blocks]
    for r in rows:
        Br, Bc = r["Br"], r["Bc"]
        assert (r["Tr"], r["Tc"]) == (math.ceil(N / Br), math.ceil(N / Bc))
        assert r["sram_bytes"] == sram_bytes(N, d, Br, Bc, b)
        assert r["fits"] == (sram_bytes(N, d, Br, Bc, b) <= A100)
        assert r["hbm_bytes"] == r["hbm_read_bytes"] + r["hbm_write_bytes"]
        if not causal:
            assert r["hbm_bytes"] == (fa2_bytes(N, d, Br, b) if order == "fa2" else fa1_bytes(N, d, Bc, b))
            assert r["flops"] == 4 * N * N * d
        else:
            io = iomodel.flash_forward_io(N, N, d, Br=Br, Bc=Bc, itemsize=b, order=order, causal=True)
            assert (r["hbm_bytes"], r["flops"]) == (io.hbm_bytes, io.flops)


def test_causal_sweep_by_hand_for_square_blocks():
    N, d, B, b = 4096, 64, 128, 4
    Tr = N // B        # query block i sees i + 1 key blocks
    row = next(r for r in iomodel.block_size_sweep(N, d, itemsize=b, sram_budget=H200, causal=True)
               if (r["Br"], r["Bc"]) == (B, B))
    assert row["hbm_bytes"] == (B * d * Tr * (Tr + 1) + 2 * N * d + N) * b
    assert row["flops"] == 2 * d * B * B * Tr * (Tr + 1)


def test_best_fitting_blocks_by_hand():
    # H200, fp32, d = 64: 256×64 needs (2·256·64 + 2·64·64 + 256·64 + 512)·4 = 231,424 B ≤ 232,448;
    # 256×128 needs 329,728 B. FA2 traffic depends on Br only, so the largest fitting Bc wins the tie.
    assert sram_bytes(4096, 64, 256, 64, 4) == 231_424 and sram_bytes(4096, 64, 256, 128, 4) == 329_728
    best = iomodel.best_fitting_blocks(4096, 64, itemsize=4, sram_budget=H200)
    assert (best["Br"], best["Bc"]) == (256, 64) and best["hbm_bytes"] == fa2_bytes(4096, 64, 256, 4)
    # FA1, A100, fp16, d = 128: traffic depends on Bc only; Bc = 256 fits with 514·Br + 65,536 ≤ 83,456 → Br = 32
    best = iomodel.best_fitting_blocks(65536, 128, itemsize=2, sram_budget=A100, order="fa1")
    assert (best["Br"], best["Bc"]) == (32, 256)
    # nothing fits: the smallest tile 16×16 at d = 256 in fp64 needs (16·256·4 + 256 + 32)·8 = 133,376 B
    assert iomodel.best_fitting_blocks(4096, 256, itemsize=8, sram_budget=TOY) is None
    assert iomodel.best_of_sweep([]) is None


def test_sweep_progress_and_custom_blocks():
    calls = []
    rows = iomodel.block_size_sweep(64, 16, blocks=(8, 64), sram_budget=TOY, progress=lambda i, n: calls.append((i, n)))
    assert calls == [(1, 4), (2, 4), (3, 4), (4, 4)] and len(rows) == 4


@pytest.mark.parametrize("fn,kw,exc", [
    (iomodel.paper_block_sizes, dict(M=0, d=64), ValueError),
    (iomodel.paper_block_sizes, dict(M=2.5, d=64), TypeError),
    (iomodel.paper_block_sizes, dict(M=3, d=64, itemsize=4), ValueError),
    (iomodel.asymptotic_flash_io, dict(N=0, d=64, M=H200), ValueError),
    (iomodel.asymptotic_flash_io, dict(N=64, d=64, M=H200, order="fa3"), ValueError),
    (iomodel.block_size_sweep, dict(N=64, d=64, sram_budget=None), TypeError),
    (iomodel.block_size_sweep, dict(N=64, d=64, sram_budget=0), ValueError),
    (iomodel.block_size_sweep, dict(N=64, d=64, sram_budget=H200, blocks=()), ValueError),
    (iomodel.block_size_sweep, dict(N=64, d=64, sram_budget=H200, blocks=(16, 16)), ValueError),
    (iomodel.block_size_sweep, dict(N=64, d=64, sram_budget=H200, blocks=(16, 0)), ValueError),
    (iomodel.block_size_sweep, dict(N=64, d=64, sram_budget=H200, blocks=16), TypeError),
    (iomodel.block_size_sweep, dict(N=64, d="64", sram_budget=H200), TypeError),
    (iomodel.best_fitting_blocks, dict(N=64, d=64, sram_budget=H200, itemsize=3), ValueError),
    (iomodel.best_fitting_blocks, dict(N=64, d=64, sram_budget=H200, causal="yes"), TypeError),
])
def test_bad_arguments_are_one_line_errors(fn, kw, exc):
    with pytest.raises(exc) as info:
        fn(**kw)
    assert "\n" not in str(info.value)


def test_working_set_parts_sum_to_the_model():
    for Br, Bc, N in ((16, 256, 4096), (256, 64, 100), (64, 64, 8)):
        assert sum(working_set_parts(Br, Bc, 64, N, 2)) == sram_bytes(N, 64, Br, Bc, 2) == \
            iomodel.flash_forward_io(N, N, 64, Br=Br, Bc=Bc, itemsize=2).sram_bytes


# --- the view and the recorded GPU sweep --------------------------------------------------------
def test_recorded_sweep_matches_only_when_the_model_bytes_agree():
    from flashviz.gpu import latest_results

    res = latest_results()
    rec = recorded_sweep(res, N=4096, d=64, itemsize=4, causal=False, order="fa2")
    assert len(rec) == len(res["sweep"]) >= 16
    for (Br, _Bc), r in rec.items():
        assert r["model_hbm_bytes"] == fa2_bytes(4096, 64, Br, 4) * r["B"] * r["H"]
    for kw in (dict(itemsize=2), dict(causal=True), dict(order="fa1")):
        assert recorded_sweep(res, **{**dict(N=4096, d=64, itemsize=4, causal=False, order="fa2"), **kw}) == {}
    assert recorded_sweep(None, N=4096, d=64, itemsize=4, causal=False, order="fa2") == {}
    forged = {"sweep": [{**res["sweep"][0], "model_hbm_bytes": 1}]}
    assert recorded_sweep(forged, N=4096, d=64, itemsize=4, causal=False, order="fa2") == {}


def test_view_frames_walk_the_search_and_end_on_the_optimum():
    fig = plt.figure()
    try:
        v = BlockSizeFigure(fig, N=4096, d=64, itemsize=4, sram_budget=H200, recorded=None)
        assert v.n_frames == 26 and not v.measured
        bests = [v.draw_frame(k).best for k in range(v.n_frames)]
        assert bests[0]["Br"] == 16 and bests[-1] is v.best
        assert [b["hbm_bytes"] for b in bests] == sorted((b["hbm_bytes"] for b in bests), reverse=True)
        last = v.state(v.n_frames - 1)
        assert last.final and (last.row["Br"], last.row["Bc"]) == (256, 64) and "optimum" in last.text
        with pytest.raises(IndexError):
            v.state(v.n_frames)
    finally:
        plt.close(fig)


# --- the widget ----------------------------------------------------------------------------------
@pytest.fixture
def explorer():
    w = BlockSizeExplorer(key="test-blocksize")
    yield w
    w.close()


def test_every_frame_and_the_measured_panel(explorer):
    w = explorer
    assert w.n_frames == 26 and "optimum Br × Bc = 256×64" in w.status.value
    assert len(w._view.measured) >= 16 and "measured GPU times" in w.status.value
    for k in range(w.n_frames):
        s = w.show_frame(k)
        assert s.k == k and w.frame.value == k
        assert w._view.step.get_text().startswith(f"step {k + 1}/{w.n_frames}")
        if k < len(w.rows):
            assert s.row is w.rows[k]
            if (s.row["Br"], s.row["Bc"]) in w._view.measured:
                assert s.measured_ms == w._view.measured[(s.row["Br"], s.row["Bc"])]["kernel_ms"]
                assert "measured" in w._view.numbers.get_text()
    assert s.final and s.best == iomodel.best_fitting_blocks(4096, 64, sram_budget=H200)


def test_pixels_change_between_frames(explorer):
    w = explorer
    w.show_frame(0)
    a = np.asarray(w.fig.canvas.buffer_rgba()).copy()
    w.show_frame(12)
    b = np.asarray(w.fig.canvas.buffer_rgba())
    assert (a != b).any(axis=-1).mean() > 0.002


def test_play_and_step_buttons(explorer):
    w = explorer
    w.play.value = 5
    assert w.state.k == 5
    w.next_button.click()
    assert w.state.k == 6
    w.prev_button.click()
    assert w.state.k == 5


def test_every_control_rebuilds_the_sweep(explorer):
    w = explorer
    w.show_frame(7)
    w.N.value = 1024
    assert w.frame.value == 0 and not w._view.measured
    assert w.rows == iomodel.block_size_sweep(1024, 64, itemsize=4, sram_budget=H200)
    w.d.value = 128
    w.dtype.value = "float16 (2 B)"
    w.budget.value = "A100: 163 KiB"
    assert w.rows == iomodel.block_size_sweep(1024, 128, itemsize=2, sram_budget=A100)
    w.causal.value = True
    w.order.value = "fa1"
    assert w.rows == iomodel.block_size_sweep(1024, 128, itemsize=2, sram_budget=A100, order="fa1", causal=True)
    assert w.best == iomodel.best_fitting_blocks(1024, 128, itemsize=2, sram_budget=A100, order="fa1", causal=True)
    w.show_frame(w.n_frames - 1)


def test_extremes_never_raise_and_nothing_fitting_is_explained():
    w = BlockSizeExplorer(N=1, d=16, sram_budget="toy", key="extremes", recorded=None)
    try:
        for k in range(w.n_frames):
            w.show_frame(k)
        assert all(r["hbm_bytes"] == fa2_bytes(1, 16, r["Br"], 4) for r in w.rows)
        w.N.value = 65536
        w.d.value = 256
        w.dtype.value = "float64 (8 B)"
        assert w.best is None and "No block size here fits" in w.status.value
        s = w.show_frame(w.n_frames - 1)
        assert s.best is None and "no configuration fits" in s.text
        w.budget.value = "H100/H200: 227 KiB"
        assert w.best is not None and "✓" in w.status.value
    finally:
        w.close()


def test_custom_budget_in_bytes_and_short_names():
    w = BlockSizeExplorer(N=512, d=32, dtype=np.float16, sram_budget=50_000, order="fa1", key="custom")
    try:
        assert w.budget.value.startswith("custom") and w._view.M == 50_000 and w._view.b == 2
        assert w.rows == iomodel.block_size_sweep(512, 32, itemsize=2, sram_budget=50_000, order="fa1")
    finally:
        w.close()


def test_recreating_on_one_line_leaks_no_figure():
    assert_recreating_leaks_no_figure(lambda: BlockSizeExplorer(N=256, d=32, recorded=None))


def test_export_png_and_gif(tmp_path, explorer):
    from PIL import Image

    w = explorer
    w.show_frame(9)
    png = w.save_png(tmp_path / "f.png")
    assert Image.open(png).size == (int(w.fig.bbox.width), int(w.fig.bbox.height))
    assert w.state.k == 9
    gif = w.save_gif(tmp_path / "run.gif", frames=range(0, w.n_frames, 5), fps=4)
    im = Image.open(gif)
    assert im.n_frames == len(range(0, w.n_frames, 5))


def test_png_canvas_mode_draws_frames():
    w = BlockSizeExplorer(N=256, d=32, canvas="png", key="png", recorded=None)
    try:
        first = w._canvas_widget.value
        assert first[:8] == b"\x89PNG\r\n\x1a\n"
        w.show_frame(10)
        assert w._canvas_widget.value != first
    finally:
        w.close()


@pytest.mark.parametrize("kw,exc", [
    (dict(N=0), ValueError), (dict(N=70000), ValueError), (dict(N=2.5), TypeError), (dict(d=48), ValueError),
    (dict(d="64"), TypeError), (dict(dtype="int8"), ValueError), (dict(sram_budget="TPU"), ValueError),
    (dict(sram_budget=0), ValueError), (dict(sram_budget=1.5), TypeError), (dict(causal="no"), TypeError),
    (dict(order="fa3"), ValueError), (dict(blocks=()), ValueError), (dict(blocks=tuple(range(1, 9))), ValueError),
    (dict(recorded="yesterday"), ValueError), (dict(canvas="svg"), ValueError),
])
def test_bad_widget_arguments_one_line_errors_and_no_figure(kw, exc):
    before = len(plt.get_fignums())
    with pytest.raises(exc) as info:
        BlockSizeExplorer(**kw)
    assert "\n" not in str(info.value)
    assert len(plt.get_fignums()) == before


# --- exercises -------------------------------------------------------------------------------------
def test_traffic_prediction_check(capsys):
    exact = fa2_bytes(4096, 64, 128, 4)
    assert check_traffic_prediction(exact, 4096, 64, 128, 128, 4)
    assert capsys.readouterr().out.startswith("✓ Right")
    near = check_traffic_prediction(exact * 1.01, 4096, 64, 128, 128, 4)       # exact: 1 % off is not it
    assert not near and "exact integer" in near.message
    for stub in (None, "?", float("nan"), 0, exact * 2, [1, 2], object()):
        r = check_traffic_prediction(stub, 4096, 64, 128, 128, 4)
        assert not r and r.message.startswith("✗ Not yet")
    assert not check_traffic_prediction(exact, 4096, 64, 0, 128, 4)             # a bad question, no raise
    assert "invalid" in capsys.readouterr().out


def test_largest_fitting_tile_check(capsys):
    assert check_largest_fitting_tile((256, 64), 4096, 64, sram_budget="H100/H200")
    assert check_largest_fitting_tile((256, 64), 4096, 64, sram_budget=H200)
    reasons = {(256, 128): "spills", (128, 128): "moves", (256, 32): "larger tile", (3, 3): "not in the sweep",
               None: "pair of integers", "ab": "pair of integers", (1.5, 2): "pair of integers"}
    for answer, why in reasons.items():
        r = check_largest_fitting_tile(answer, 4096, 64, sram_budget="H100/H200")
        assert not r and why in r.message, r.message
    r = check_largest_fitting_tile((16, 16), 4096, 256, sram_budget="toy", itemsize=8)
    assert not r and "nothing fits" in r.message
    assert not check_largest_fitting_tile((16, 16), 4096, 64, sram_budget="TPU")
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 + len(reasons) + 2 and all(line[0] in "✓✗" for line in out)
