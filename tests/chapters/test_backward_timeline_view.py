"""Chapter 6's measured tile (views.backward_timeline, records.timeline_stats.per_tile_steps and
recorded_backward_pair) on a teaching-backward timeline decoded from a trace buffer written by hand
(tests/helpers/trace_buffers.py) beside a forward one: the per-step times are the hand-written ones."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from trace_buffers import trace_buffer  # noqa: E402

from flashviz.gpu.bwd_trace import GROUPS, backward_timeline  # noqa: E402
from flashviz.gpu.tracing import decode  # noqa: E402
from flashviz.records import timeline as T  # noqa: E402
from flashviz.records.timeline_stats import per_tile_steps, recorded_backward_pair  # noqa: E402
from flashviz.views.backward_timeline import plot_tile_steps, tile_ratio  # noqa: E402

META = dict(N=256, d=64, Br=64, Bc=64, causal=False, dtype="float32", sm_count=132, device="test GPU",
            date="2026-12-05", kernel_ms=0.2, traced_ms=0.21)
#: hand-written ns of each step a tile; the slot names are the forward's (STAGES), the backward reads
#: them as BWD_STAGES: load_KV→load_Qi, load_K→recompute_P, load_V→accumulate_dV, compute_S→compute_dS,
#: update_ml→accumulate_dK, convert_P→update_dQ
BWD_NS = {"load_KV": 500, "load_K": 1500, "load_V": 900, "compute_S": 1600, "update_ml": 900, "convert_P": 600}
FWD_NS = {"load_KV": 400, "compute_S": 1200, "update_ml": 700, "accumulate_O": 1100}


def _events(ns: dict, tiles: int, groups=(0, 1)):
    out, t = [], 1000
    for j in range(tiles):
        for name, dt in ns.items():
            out += [(g, j, name, t, t + dt) for g in groups]
            t += dt
    return out, t


def _forward():
    evs, end = _events(FWD_NS, 4)
    plan = {i: (i, i, 0, evs, end + 500) for i in range(4)}
    return decode(trace_buffer((4, 1, 1), 8, 4, plan), grid=(4, 1, 1), groups=8, jmax=4,
                  **{**META, "kernel": "teaching"})


def _backward():
    evs, end = _events(BWD_NS, 4)
    plan = {j: (j, j, 0, evs, end + 500) for j in range(4)}
    return backward_timeline(trace_buffer((4, 1, 1), GROUPS, 4, plan), grid=(4, 1, 1), Tr=4, **META)


def test_per_tile_steps_are_the_hand_written_times():
    b = per_tile_steps(_backward())
    want = dict(zip(("load_Qi", "recompute_P", "accumulate_dV", "compute_dS", "accumulate_dK", "update_dQ"),
                    BWD_NS.values()))
    assert list(b) == list(want) and b == pytest.approx(want, abs=2)
    assert per_tile_steps(_forward()) == pytest.approx(FWD_NS, abs=2)
    assert per_tile_steps(_backward(), group=5) == {}
    pair = {"forward": _forward(), "backward": _backward()}
    assert tile_ratio(pair) == pytest.approx(sum(BWD_NS.values()) / sum(FWD_NS.values()), rel=1e-3)


def test_the_figure_stacks_every_step_with_its_time(tmp_path):
    pair = {"forward": _forward(), "backward": _backward()}
    fig = plot_tile_steps(pair)
    try:
        ax = fig.axes[0]
        assert len(ax.patches) == len(FWD_NS) + len(BWD_NS)
        widths = [round(p.get_width() * 1e3) for p in ax.patches]
        assert widths == pytest.approx(list(FWD_NS.values()) + list(BWD_NS.values()), abs=2)
        texts = [t.get_text() for t in ax.texts]
        assert "recompute_P\n1.50 µs" in texts
        assert f"backward ÷ forward per tile {tile_ratio(pair):.2f}" in ax.get_title(loc="left")
        fig.savefig(tmp_path / "tile.png")
    finally:
        plt.close(fig)
    with pytest.raises(TypeError, match="pair must be"):
        plot_tile_steps({"forward": pair["forward"]})
    with pytest.raises(ValueError, match="teaching forward's and the teaching backward's"):
        plot_tile_steps({"forward": pair["backward"], "backward": pair["forward"]})


def test_the_recorded_pair_matches_shapes_and_needs_both(monkeypatch, tmp_path):
    monkeypatch.setattr(T, "package_dir", lambda pkg: tmp_path)
    assert recorded_backward_pair() == {}
    _backward().save(tmp_path / "timeline-bwd_teaching-d64-n256-h200-2026-12-05.json.gz")
    assert recorded_backward_pair() == {}                       # no forward of that shape
    _forward().save(tmp_path / "timeline-teaching-d64-n256-h200-2026-12-01.json.gz")
    _forward().save(tmp_path / "timeline-teaching-d64-n512-h200-2026-12-02.json.gz")
    pair = recorded_backward_pair()
    assert pair["forward"].N == pair["backward"].N == 256 and pair["backward"].kernel == "bwd_teaching"
    assert recorded_backward_pair(causal=True) == {}


def test_the_recompute_share_exercise_reads_the_timeline_and_names_mistakes(capsys):
    """check_recompute_share: right within 2 % of recompute_P ÷ the backward tile (hand-written times),
    each named mistake ✗ with its hint, no record installed ✗ in one line."""
    from flashviz.exercises.backward import check_recompute_share

    pair = {"forward": _forward(), "backward": _backward()}
    want = BWD_NS["load_K"] / sum(BWD_NS.values())                  # slot load_K holds recompute_P's times
    assert check_recompute_share(want, pair=pair).ok
    assert check_recompute_share(round(want, 3), pair=pair).ok
    assert not check_recompute_share(want * 1.05, pair=pair).ok
    for wrong_value, words in ((1 - want, "everything but the recomputation"), (100 * want, "not a percentage"),
                               (BWD_NS["load_K"] / sum(FWD_NS.values()), "forward's tile"),
                               ((FWD_NS["compute_S"] + FWD_NS["update_ml"]) / sum(FWD_NS.values()),
                                "the forward's S and softmax")):
        res = check_recompute_share(wrong_value, pair=pair)
        assert not res.ok and words in res.message, (wrong_value, res.message)
    res = check_recompute_share(None, pair=pair)
    assert not res.ok and "placeholder" in res.message
    assert not check_recompute_share(0.2, pair={}).ok
    assert "✗" in capsys.readouterr().out
