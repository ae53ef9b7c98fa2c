"""Traced kernels on a GPU (issue 12): the traced build's O and lse are bit-identical to the normal
kernel's (trace_kernel raises otherwise), every block, every visited tile and every step of every
group is recorded and nothing else, the steps are in the kernel's order, and the cost of the
instrumentation is measured. Skipped without a GPU (the wgmma cases without Hopper)."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

TILE_STAGES = {"wgmma": ("load_K", "compute_S", "update_ml", "convert_P", "load_V", "accumulate_O"),
               "teaching": ("load_KV", "compute_S", "update_ml", "accumulate_O")}


@pytest.fixture(scope="module")
def gpu():
    import flashviz.gpu as g

    ok, reason = g.gpu_status()
    if not ok:
        pytest.skip(reason)
    return g


def _inputs(B, H, Nq, Nk, d, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((B, H, Nq, d)).astype(np.float32), rng.standard_normal((B, H, Nk, d)).astype(np.float32),
            rng.standard_normal((B, H, Nk, d)).astype(np.float32))


def _visible_tiles(i, Br, Bc, Nq, Nk, causal):
    end = Nk if not causal else min(Nk, (i + 1) * Br + Nk - Nq)
    return max(0, -(-end // Bc)) if end > 0 else 0


def _check(tl, kernel, Nq, Nk, causal):
    Tr, H, B = tl.grid
    assert len(tl.blocks) == Tr * H * B and sorted(tl.blocks["cta"]) == list(range(Tr * H * B))
    groups = 8 if kernel == "teaching" else tl.Br // 64
    st = tl.stages
    names = np.array(st)[tl.events["stage"]]
    for blk in tl.blocks:
        want = _visible_tiles(int(blk["i"]), tl.Br, tl.Bc, Nq, Nk, causal)
        assert blk["n_j"] == want, (blk, want)
        mine = tl.events[tl.events["cta"] == blk["cta"]]
        mnames = names[tl.events["cta"] == blk["cta"]]
        assert set(mine["sm"]) == {blk["sm"]}
        assert mine["t0_ns"].min() >= blk["t0_ns"] - 64 and mine["t1_ns"].max() <= blk["t1_ns"] + 64
        for g in range(groups):
            sel = mine["group"] == g
            got = {(int(j), s) for j, s in zip(mine["j"][sel], mnames[sel])}
            expect = {(j, s) for j in range(want) for s in TILE_STAGES[kernel]}
            expect |= {(-1, "write_O"), (-1, "load_Q")}          # also a block that sees no key
            assert got == expect, (int(blk["cta"]), g, sorted(got ^ expect)[:6])
            # order inside a tile, and tiles one after the other
            for j in range(want):
                t = {s: (e["t0_ns"], e["t1_ns"]) for e, s in zip(mine[sel], mnames[sel]) if e["j"] == j}
                seq = [s for s in TILE_STAGES[kernel] if not s.startswith("load_")] if kernel == "wgmma" \
                    else list(TILE_STAGES[kernel])
                for a, b in zip(seq, seq[1:]):
                    assert t[a][1] <= t[b][0] + 1, (j, a, t[a], b, t[b])
                if kernel == "wgmma":
                    assert t["load_K"][1] <= t["compute_S"][0] + 1 and t["load_V"][1] <= t["accumulate_O"][0] + 1
                    assert t["load_K"][0] <= t["load_K"][1]
    assert np.all(tl.tiles["t1_ns"] >= tl.tiles["t0_ns"])


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("Nq,Nk", [(512, 512), (300, 520), (520, 300)])
def test_wgmma_timeline_is_complete_ordered_and_exact(gpu, causal, Nq, Nk):
    from flashviz.gpu.tensorcore.kernel import device_variant

    if device_variant() != "wgmma":
        pytest.skip("the wgmma kernel needs a Hopper GPU")
    Q, K, V = _inputs(1, 3, Nq, Nk, 64)
    tl = gpu.trace_kernel(Q, K, V, kernel="wgmma", causal=causal, repeat=3, rounds=2)
    _check(tl, "wgmma", Nq, Nk, causal)
    assert tl.kernel_ms > 0 and tl.traced_ms > 0


@pytest.mark.parametrize("causal", [False, True])
def test_teaching_timeline_is_complete_ordered_and_exact(gpu, causal):
    Q, K, V = _inputs(1, 2, 300, 260, 64)
    tl = gpu.trace_kernel(Q, K, V, kernel="teaching", causal=causal, Br=64, Bc=32, repeat=3, rounds=2)
    _check(tl, "teaching", 300, 260, causal)


def test_instrumentation_cost_is_small(gpu):
    """At a benchmark-sized run the traced wgmma kernel costs at most 20 % more. This shape (d = 64,
    no mask, the shortest tiles) is the costliest: 13.7-15.3 % in the recorded runs of 2026-12-01;
    the goal, 5 %, is not met there (benchmarks/NOTES.md); the bound guards against a regression."""
    from flashviz.gpu.tensorcore.kernel import device_variant

    if device_variant() != "wgmma":
        pytest.skip("the wgmma kernel needs a Hopper GPU")
    Q, K, V = _inputs(1, 32, 4096, 4096, 64)
    tl = gpu.trace_kernel(Q, K, V, kernel="wgmma", repeat=10, rounds=5)
    assert tl.traced_ms <= 1.20 * tl.kernel_ms, (tl.kernel_ms, tl.traced_ms)


def test_an_oversized_trace_is_refused(gpu, monkeypatch):
    from flashviz.gpu import tracing

    monkeypatch.setattr(tracing, "MAX_TRACE_BYTES", 1 << 16)
    Q, K, V = _inputs(1, 2, 512, 512, 64)
    with pytest.raises(ValueError, match="needs .* MiB of trace buffer; at most"):
        gpu.trace_kernel(Q, K, V, kernel="teaching")


@pytest.mark.parametrize("order", ["kernel", "ascending", "longest_first"])
@pytest.mark.parametrize("kernel", ["wgmma", "teaching"])
def test_block_orders_compute_the_same_blocks_in_another_order(gpu, kernel, order):
    """Chapter 7's block-order experiment (FLASHVIZ_BLOCK_ORDER): O and lse bit-identical to the
    kernel's own order (trace_kernel raises otherwise); each block, in launch order, recorded the
    (i, head, batch) its order gives it (worked out here from the launch grid); the timeline is
    complete, and the own order was timed in the same rounds."""
    from flashviz.gpu.tensorcore.kernel import device_variant

    if kernel == "wgmma" and device_variant() != "wgmma":
        pytest.skip("the wgmma kernel needs a Hopper GPU")
    Q, K, V = _inputs(2, 3, 520, 520, 64)
    kw = {"Br": 64, "Bc": 32} if kernel == "teaching" else {}
    tl = gpu.trace_kernel(Q, K, V, kernel=kernel, causal=True, repeat=3, rounds=2, order=order, **kw)
    _check(tl, kernel, 520, 520, True)
    Tr, H, B = tl.grid
    c = tl.blocks["cta"]
    if order == "longest_first":       # launched on (H, B, Tr) (teaching: (B·H, 1, Tr))
        want = (Tr - 1 - c // (H * B), c % H, c // H % B)
    else:                              # launched on (Tr, H, B) (teaching: (Tr, B·H, 1))
        x = c % Tr
        want = (Tr - 1 - x if order == "kernel" else x, c // Tr % H, c // (Tr * H))
    got = (tl.blocks["i"], tl.blocks["h"], tl.blocks["b"])
    assert all(np.array_equal(g, w) for g, w in zip(got, want)), order
    assert tl.order == order
    assert (tl.notes.get("kernel_order_ms") or 0) > 0 if order != "kernel" else "kernel_order_ms" not in tl.notes


@pytest.mark.parametrize("kernel", ["teaching", "wgmma"])
def test_timeline_explorer_live_mode_end_to_end(gpu, kernel):
    """The explorer's *Run on this GPU* at N = 1024 (not recorded): the real trace_kernel on
    record_timelines' inputs (B = 1, H = 2048 / d, rng 0), then the figure draws every block of
    the grid at its measured start and end, and the status says "measured now on" the device."""
    import matplotlib

    matplotlib.use("Agg")
    from flashviz.gpu import latest_results
    from flashviz.gpu.tensorcore.kernel import device_variant
    from flashviz.widgets.timeline import TimelineExplorer

    if kernel == "wgmma" and device_variant() != "wgmma":
        pytest.skip("the wgmma kernel needs a Hopper GPU")
    w = TimelineExplorer(kernel=kernel, causal=True, d=64, key=("gpu-live", kernel))
    try:
        assert w.ok and not w.run_button.disabled, w.gpu_note.value
        w.N.value = 1024
        tl = w.run(wait=True)
        assert tl is not None, w.status.value
        Tr, H, B = tl.grid
        assert (tl.kernel, tl.N, tl.d, tl.causal, H, B) == (kernel, 1024, 64, True, 32, 1)
        assert Tr == -(-1024 // tl.Br) and tl.detail_ctas is None          # every block's steps came back
        _check(tl, kernel, 1024, 1024, True)                                 # complete and in order
        assert "measured now on the" in w.status.value and tl.device in w.status.value
        shown = w.timeline
        assert shown.blocks is tl.blocks and len(shown.detail_ctas) == 16
        paths = w._view.bars.get_paths()
        assert len(paths) == len(tl.blocks) == Tr * H * B                  # every block drawn …
        x = np.array([[p.vertices[:, 0].min(), p.vertices[:, 0].max()] for p in paths])
        assert np.allclose(x, np.stack([tl.blocks["t0_ns"], tl.blocks["t1_ns"]], 1) * 1e-3)   # … where it ran
        y = np.array([(p.vertices[:, 1].min() + p.vertices[:, 1].max()) / 2 for p in paths])
        assert np.allclose(y, tl.blocks["sm"])
        for k in (0, w.n_frames // 2, w.n_frames - 1):
            s = w.show_frame(k)
            assert s.busy == int(tl.busy_sms([s.now_ns])[0])
        texts = [t.get_text() for t in w.fig.texts]
        assert any(t.startswith(f"measured now: {tl.device}") for t in texts)
        ceiling = texts[texts.index("at the ceiling³") + 1]
        recorded = ((latest_results("mma") or {}).get("env") or {}).get("device")
        assert (ceiling == "none recorded") == (kernel == "teaching" or tl.device != recorded), (ceiling, recorded)
        assert not w.run_button.disabled and w.stop_button.disabled
    finally:
        w.close()


FA3_CONSUMER = ("load_K", "compute_S", "update_ml", "convert_P", "load_V", "accumulate_O")


@pytest.mark.parametrize("persistent", [False, True])
@pytest.mark.parametrize("causal,Nq,Nk,d", [(False, 512, 512, 128), (True, 520, 300, 64), (True, 300, 520, 128)])
def test_fa3_timeline_is_complete_ordered_and_exact(gpu, monkeypatch, causal, Nq, Nk, d, persistent):
    """kernels/flash_fwd_fa3.cu traced: one record per tile of its work list (one block per tile or
    the persistent grid), group 0 the producer (load_Q, then load_K and load_V of every visited
    tile: from waiting for the slot to the copy issued), groups 1.. the consumers (every step of
    every visited tile, their waits for the copies before the products that read them); a tile
    that sees no key has only its write_O. The traced O and lse are bit-identical (trace_kernel).
    Persistent: the grid is cut to two blocks (as if the GPU had two SMs), so each walks many tiles
    and the producer runs on into the next tile while the consumers finish one."""
    import dataclasses

    from flashviz.gpu.tensorcore import fa3
    from flashviz.gpu.tensorcore import kernel as kmod
    from flashviz.gpu.tensorcore.kernel import device_variant

    if device_variant() != "wgmma":
        pytest.skip("the fa3 kernel needs a Hopper GPU")
    monkeypatch.setattr(fa3, "PERSISTENT", persistent)
    if persistent:
        compile_mma = kmod.compile_mma
        monkeypatch.setattr(kmod, "compile_mma", lambda *a, **k: dataclasses.replace(compile_mma(*a, **k), sm_count=2))
    Q, K, V = _inputs(1, 3, Nq, Nk, d)
    tl = gpu.trace_kernel(Q, K, V, kernel="fa3", causal=causal, repeat=3, rounds=2)
    Tr, H, B = tl.grid
    assert tl.kernel == "fa3" and len(tl.blocks) == Tr * H * B
    names = np.array(tl.stages)[tl.events["stage"]]
    for blk in tl.blocks:
        want = _visible_tiles(int(blk["i"]), tl.Br, tl.Bc, Nq, Nk, causal)
        assert blk["n_j"] == want, (blk, want)
        sel_blk = tl.events["cta"] == blk["cta"]
        mine, mnames = tl.events[sel_blk], names[sel_blk]
        for g in range(tl.Br // 64 + 1):
            sel = mine["group"] == g
            got = {(int(j), s) for j, s in zip(mine["j"][sel], mnames[sel])}
            if g == 0:
                expect = {(-1, "load_Q")} | {(j, s) for j in range(want) for s in ("load_K", "load_V")} if want else set()
            else:
                expect = {(-1, "write_O")} | ({(-1, "load_Q")} | {(j, s) for j in range(want) for s in FA3_CONSUMER}
                                              if want else set())
            assert got == expect, (int(blk["cta"]), g, sorted(got ^ expect)[:6])
            for j in range(want):
                t = {s: (e["t0_ns"], e["t1_ns"]) for e, s in zip(mine[sel], mnames[sel]) if e["j"] == j}
                if g == 0:
                    assert t["load_K"][1] <= t["load_V"][0] + 1
                    continue
                for a, b in (("load_K", "compute_S"), ("compute_S", "update_ml"), ("update_ml", "convert_P"),
                             ("load_V", "accumulate_O")):
                    assert t[a][1] <= t[b][0] + 1, (j, a, t[a], b, t[b])
                if j >= 1:      # P V of tile j is issued with S of tile j - 1, after waiting for V_j (one clock read)
                    t_prev = {s: (e["t0_ns"], e["t1_ns"]) for e, s in zip(mine[sel], mnames[sel]) if e["j"] == j - 1}
                    assert t["accumulate_O"][0] == pytest.approx(t_prev["compute_S"][0], abs=0.01)
                    assert t["load_V"][0] == pytest.approx(t_prev["load_K"][1], abs=0.01)
    assert tl.kernel_ms > 0 and tl.traced_ms > 0
    per_sm = np.bincount(tl.blocks["sm"])
    if persistent:          # two blocks, each on its SM, walk the tiles b, b + 2, ... in order
        assert np.count_nonzero(per_sm) == 2 and per_sm.max() >= 2
        for sm in np.flatnonzero(per_sm):
            rows = np.sort(tl.blocks[tl.blocks["sm"] == sm], order="t0_ns")
            assert np.all(np.diff(rows["cta"]) == 2), rows["cta"]
