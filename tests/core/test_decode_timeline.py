"""The decode kernel's timeline, decoded on the CPU from trace buffers written by hand as
kernels/flash_decode.cu writes them (one record a block = split s of a KV head, four warps, a
split's key tiles numbered from 0): the Timeline gives each step the cache's key-tile index and
names the last step after what the block writes."""

from __future__ import annotations

import numpy as np
import pytest
from trace_buffers import trace_buffer

from flashviz import masking, steps
from flashviz.gpu.decode_trace import GROUPS, decode_split_timeline, max_split_tiles, split_starts
from flashviz.records.timeline import Timeline

META = dict(N=640, d=128, Br=4, Bc=64, causal=False, dtype="float16", sm_count=132, device="test GPU",
            date="2026-12-05", kernel_ms=0.02, traced_ms=0.021)


def _split_plan(S: int, Tc: int, heads: int = 2):
    """Every block (split s, KV head g) on its own SM, 3 µs a key tile (long enough for each block's
    own clock rate to be measured), with the steps of each of its tiles (split-local j) for warps 0
    and 3, then its write."""
    plan, j0 = {}, split_starts(Tc, S)
    ends = list(j0[1:]) + [Tc]
    for g in range(heads):
        for s in range(S):
            cta = s + S * g
            n = int(ends[s] - j0[s])
            evs = [(0, -1, "load_Q", 0, 1000)]
            for j in range(n):
                t = 1000 + 3000 * j
                for w in (0, 3):
                    evs += [(w, j, "load_KV", t, t + 1000), (w, j, "compute_S", t + 1000, t + 1800),
                            (w, j, "update_ml", t + 1800, t + 2200), (w, j, "accumulate_O", t + 2200, t + 3000)]
            evs.append((0, -1, "write_O", 1000 + 3000 * n, 1500 + 3000 * n))
            plan[cta] = (cta, (s, g, 0), 10_000 * g, evs, 2000 + 3000 * n)
    return plan


@pytest.mark.parametrize("S, Tc", [(3, 10), (1, 10), (4, 4), (5, 3)])
def test_each_split_s_tiles_are_the_cache_s_key_tiles_once(S, Tc):
    """Over each KV head, the splits' tiles are the key tiles 0 .. Tc − 1 exactly once, each in the
    split that ``masking.split_ranges`` gives it (more splits than tiles: some splits are empty)."""
    jmax = max_split_tiles(Tc, S)
    raw = trace_buffer((S, 2, 1), GROUPS, jmax, _split_plan(S, Tc))
    tl = decode_split_timeline(raw, grid=(S, 2, 1), Tc=Tc, **META)
    assert tl.kernel == "decode" and tl.grid == (S, 2, 1)
    ranges = masking.split_ranges(Tc, S)
    for g in range(2):
        mine = tl.tiles[tl.blocks["h"][tl.tiles["cta"]] == g]
        assert sorted(mine["j"].tolist()) == list(range(Tc))
        for s, (c0, c1) in enumerate(ranges):
            assert sorted(mine["j"][mine["i"] == s].tolist()) == list(range(c0, c1))
    on_tile = tl.events["j"] >= 0
    assert np.array_equal(np.sort(np.unique(tl.events["j"][on_tile])), np.arange(Tc))
    assert tl.stages[-1] == ("write_partial" if S > 1 else "write_O")
    assert all(steps.step(s).name == s for s in tl.stages)


def test_the_steps_of_a_tile_keep_their_order_and_times():
    S, Tc = 3, 10
    tl = decode_split_timeline(trace_buffer((S, 2, 1), GROUPS, 4, _split_plan(S, Tc)), grid=(S, 2, 1), Tc=Tc,
                               **META)
    e = tl.events[(tl.events["cta"] == 2) & (tl.events["group"] == 3)]        # split 2 of head 0: tiles 6..9
    assert sorted(set(e["j"].tolist())) == [6, 7, 8, 9]
    k = e[e["j"] == 7]
    names = [tl.stages[s] for s in k["stage"][np.argsort(k["t0_ns"])]]
    assert names == ["load_KV", "compute_S", "update_ml", "accumulate_O"]
    np.testing.assert_allclose(k["t0_ns"].min(), 1000 + 3000, atol=2)   # its second tile, 3 µs a tile
    w = tl.stage_events("write_partial")
    assert len(w) == 6 and np.all(w["j"] == -1)


def test_a_saved_decode_timeline_reads_back(tmp_path):
    tl = decode_split_timeline(trace_buffer((3, 2, 1), GROUPS, 4, _split_plan(3, 10)), grid=(3, 2, 1), Tc=10,
                               **META)
    tl.notes.update(S=3, H=8, H_kv=2)
    back = Timeline.load(tl.save(tmp_path / "timeline-decode-d128-n640-s3-h200-2026-12-05.json.gz"))
    assert back.stages == tl.stages and back.notes["S"] == 3
    assert np.array_equal(back.tiles["j"], tl.tiles["j"])


def test_split_arithmetic_is_the_kernel_s_rule_and_refuses_nonsense():
    """⌊s·Tc/S⌋ (kernels/flash_decode.cu's j0) and ⌈Tc/S⌉ tiles at most, for every Tc and S tried."""
    for Tc in (1, 7, 64, 513):
        for S in (1, 2, 3, 16, 100):
            assert split_starts(Tc, S).tolist() == [s * Tc // S for s in range(S)]
            assert max_split_tiles(Tc, S) == -(-Tc // S)
    with pytest.raises(ValueError, match="Tc and S must be >= 1"):
        split_starts(0, 2)
    with pytest.raises(ValueError, match="Tc and S must be >= 1"):
        max_split_tiles(3, 0)
