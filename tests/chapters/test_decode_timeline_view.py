"""Chapter 9's measured split-KV figure (views.decode_timeline) and the numbers it prints
(records.timeline_stats.sm_time_share, recorded_decode_runs), on decode timelines decoded from
trace buffers written by hand (tests/helpers/trace_buffers.py): no GPU."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.collections import PolyCollection  # noqa: E402
from trace_buffers import trace_buffer  # noqa: E402

from flashviz.gpu.decode_trace import GROUPS, decode_split_timeline, max_split_tiles, split_starts  # noqa: E402
from flashviz.records import timeline as T  # noqa: E402
from flashviz.records.timeline_stats import recorded_decode_runs, sm_time_share  # noqa: E402
from flashviz.views.decode_timeline import kernel_label, plot_decode_splits, run_title  # noqa: E402

TILE_NS = 2000


def _run(S: int, H_kv: int = 8, Tc: int = 64, sm_count: int = 132):
    """A decode run of H_kv KV heads, S splits each: block (s, g) on SM (s + S·g) % sm_count, all
    starting at 0 and taking TILE_NS a key tile of its split."""
    plan, j0 = {}, split_starts(Tc, S)
    ends = list(j0[1:]) + [Tc]
    for g in range(H_kv):
        for s in range(S):
            cta = s + S * g
            n = int(ends[s] - j0[s])
            evs = [(w, j, "accumulate_O", 100 + TILE_NS * j, 100 + TILE_NS * (j + 1)) for j in range(n) for w in (0,)]
            plan[cta] = (cta % sm_count, (s, g, 0), 0, evs, 200 + TILE_NS * n)
    raw = trace_buffer((S, H_kv, 1), GROUPS, max_split_tiles(Tc, S), plan)
    tl = decode_split_timeline(raw, grid=(S, H_kv, 1), Tc=Tc, N=Tc * 64, d=128, Br=4, Bc=64, causal=False,
                               dtype="float16", sm_count=sm_count, device="test GPU", date="2026-12-05",
                               kernel_ms=(200 + TILE_NS * -(-Tc // S)) * 1e-6, traced_ms=None)
    tl.notes.update(B=1, H=32, H_kv=H_kv, Nq=1, kernel_GBps=2 * H_kv * Tc * 64 * 128 * 2 / (tl.kernel_ms * 1e6))
    return tl


def test_the_busy_share_of_sm_time_is_the_closed_form():
    """8 blocks of equal length on 8 of 132 SMs: 8/132 of the SM-time; 16 splits: 128 blocks of a
    sixteenth the length, 128/132 of it (each SM one block, the same span)."""
    assert sm_time_share(_run(1)) == pytest.approx(8 / 132, rel=1e-3)
    assert sm_time_share(_run(16)) == pytest.approx(128 / 132, rel=1e-2)
    with pytest.raises(TypeError, match="expected a flashviz.gpu.Timeline"):
        sm_time_share("run")


def test_the_figure_draws_every_block_on_its_sm_and_titles_each_run(tmp_path):
    runs = {1: _run(1), 16: _run(16)}
    fig = plot_decode_splits(runs)
    try:
        axes = [a for a in fig.axes if a.collections and isinstance(a.collections[0], PolyCollection)]
        assert len(axes) == 2
        for ax, tl in zip(axes, runs.values()):
            bars = ax.collections[0].get_paths()
            assert len(bars) == len(tl.blocks)
            ys = sorted({round(float(p.vertices[:, 1].mean())) for p in bars})
            assert ys == sorted(set(tl.blocks["sm"].tolist()))
            assert ax.get_title(loc="left") == run_title(tl)
        assert "S = 1 (one split a block): 8 blocks on 8 of 132 SMs" in axes[0].get_title(loc="left")
        assert "S = 16 (16 splits a KV head): 128 blocks on 128 of 132 SMs" in axes[1].get_title(loc="left")
        assert f"{100 * 8 / 132:.0f} % of the SM-time" in axes[0].get_title(loc="left")
        # runs recorded before the notes named the variant traced v1, the default then
        assert fig.get_suptitle().startswith("decode kernel v1 (flash_decode, CUDA cores): B = 1, H = 32")
        fig.savefig(tmp_path / "decode.png")
    finally:
        plt.close(fig)
    for tl in runs.values():
        tl.notes["variant"] = "mma"
    fig = plot_decode_splits(runs)
    try:
        assert fig.get_suptitle().startswith("decode kernel v2 (flash_decode_mma, tensor cores): B = 1")
        assert kernel_label(runs[1]) == "v2 (flash_decode_mma, tensor cores)"
    finally:
        plt.close(fig)


def test_bad_runs_are_one_line_errors():
    with pytest.raises(TypeError, match="non-empty dict"):
        plot_decode_splits({})
    other = _run(4, H_kv=4)
    with pytest.raises(ValueError, match="one decode shape"):
        plot_decode_splits({1: _run(1), 4: other})


def test_the_recorded_runs_of_the_newest_day_by_split_count(monkeypatch, tmp_path):
    for S, date in ((1, "2026-12-05"), (16, "2026-12-05"), (4, "2026-12-01")):
        _run(S).save(tmp_path / f"timeline-decode-d128-n4096-s{S}-h200-{date}.json.gz")
    _run(1, Tc=8).save(tmp_path / "timeline-decode-d128-n512-s1-h200-2026-12-05.json.gz")
    monkeypatch.setattr(T, "package_dir", lambda pkg: tmp_path)
    got = recorded_decode_runs()
    assert list(got) == [1, 16] and all(t.N == 4096 for t in got.values())
    assert list(recorded_decode_runs(512)) == [1]
    assert np.array_equal(got[16].blocks["i"], _run(16).blocks["i"])
    monkeypatch.setattr(T, "package_dir", lambda pkg: tmp_path / "none")
    (tmp_path / "none").mkdir()
    assert recorded_decode_runs() == {}


def test_the_split_speedup_exercise_reads_the_two_runs_and_names_mistakes(capsys):
    """check_split_speedup: right within 2 % of kernel_ms(S = 1) ÷ kernel_ms(S = 16), each named
    mistake ✗ with its hint, runs missing ✗ in one line."""
    from flashviz.exercises.decode import check_split_speedup

    runs = {1: _run(1), 16: _run(16)}
    want = runs[1].kernel_ms / runs[16].kernel_ms
    assert check_split_speedup(want, runs=runs).ok and check_split_speedup(round(want, 2), runs=runs).ok
    assert not check_split_speedup(want * 0.9, runs=runs).ok
    for wrong_value, words in ((1 / want, "split ÷ unsplit"), (100 * (want - 1), "not a percentage")):
        res = check_split_speedup(wrong_value, runs=runs)
        assert not res.ok and words in res.message, res.message
    assert not check_split_speedup(want, runs={16: runs[16]}).ok
    assert "✗" in capsys.readouterr().out
