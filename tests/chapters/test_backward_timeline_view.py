"""Chapter 6's measured tiles (views.backward_timeline, records.timeline_stats.per_tile_steps,
step_shares, trace_cost, recorded_backward and recorded_backward_pair) on teaching- and tensor-core-
backward timelines decoded from trace buffers written by hand (tests/helpers/trace_buffers.py) beside
a forward one: the per-step times are the hand-written ones. The committed records are read again
without flashviz (tests/helpers/raw_timeline.py) and must give the same numbers."""

from __future__ import annotations

import dataclasses

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import raw_timeline  # noqa: E402
from test_no_overlap import raw_exponents, text_problems  # noqa: E402
from trace_buffers import trace_buffer  # noqa: E402

from flashviz.gpu.bwd_trace import GROUPS, backward_timeline  # noqa: E402
from flashviz.gpu.tracing import decode  # noqa: E402
from flashviz.records import timeline as T  # noqa: E402
from flashviz.records.timeline_stats import (  # noqa: E402
    per_tile_steps,
    recorded_backward,
    recorded_backward_pair,
    step_shares,
    trace_cost,
)
from flashviz.views.backward_timeline import plot_tile_steps, tile_ratio  # noqa: E402

META = dict(N=256, d=64, Br=64, Bc=64, causal=False, dtype="float32", sm_count=132, device="test GPU",
            date="2026-12-05", kernel_ms=0.2, traced_ms=0.21)
#: hand-written ns of each step a tile; the slot names are the forward's (STAGES), the backward reads
#: them as BWD_STAGES: load_KV→load_Qi, load_K→recompute_P, load_V→accumulate_dV, compute_S→compute_dS,
#: update_ml→accumulate_dK, convert_P→update_dQ
BWD_NS = {"load_KV": 500, "load_K": 1500, "load_V": 900, "compute_S": 1600, "update_ml": 900, "convert_P": 600}
FWD_NS = {"load_KV": 400, "compute_S": 1200, "update_ml": 700, "accumulate_O": 1100}
#: the tensor-core backward's hand-written tile (the same slots): fast products, long loads and dQ updates
MMA_NS = {"load_KV": 1200, "load_K": 650, "load_V": 330, "compute_S": 1240, "update_ml": 320, "convert_P": 1120}
MMA_META = {**META, "Bc": 128, "dtype": "float16", "kernel_ms": 0.05, "traced_ms": 0.0523}
BWD = ("load_Qi", "recompute_P", "accumulate_dV", "compute_dS", "accumulate_dK", "update_dQ")


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


def _mma():
    evs, end = _events(MMA_NS, 2, groups=range(8))
    plan = {j: (j, j, 0, evs, end + 500) for j in range(2)}
    return backward_timeline(trace_buffer((2, 1, 1), 8, 2, plan), grid=(2, 1, 1), Tr=2, groups=8, kernel="bwd_mma",
                             **{**MMA_META, "N": 256})


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


def test_step_shares_and_trace_cost_are_the_hand_written_ones():
    b, m = _backward(), _mma()
    assert step_shares(b) == pytest.approx({k: v / sum(BWD_NS.values()) for k, v in zip(BWD, BWD_NS.values())},
                                           abs=1e-3)
    assert list(step_shares(m)) == list(BWD) and sum(step_shares(m).values()) == pytest.approx(1)
    assert step_shares(m)["update_dQ"] == pytest.approx(MMA_NS["convert_P"] / sum(MMA_NS.values()), rel=1e-3)
    assert step_shares(b, group=5) == {}
    assert trace_cost(b) == pytest.approx(0.21 / 0.2 - 1) and trace_cost(m) == pytest.approx(0.0523 / 0.05 - 1)
    assert trace_cost(dataclasses.replace(m, traced_ms=None)) is None
    with pytest.raises(TypeError):
        trace_cost({"kernel_ms": 1})


def test_the_tensor_core_figure_splits_each_tile_into_shares(tmp_path):
    """The pair {"backward", "bwd_mma"}: shares of each tile (widths), every step labelled with its µs and
    share where it fits, the tracing costs in the title, no text overlapping or leaving the figure."""
    pair = {"backward": _backward(), "bwd_mma": _mma()}
    fig = plot_tile_steps(pair)
    try:
        ax = fig.axes[0]
        widths = [p.get_width() for p in ax.patches]
        teach, mma = sum(BWD_NS.values()), sum(MMA_NS.values())
        assert widths == pytest.approx([v / teach for v in BWD_NS.values()] + [v / mma for v in MMA_NS.values()],
                                       abs=1e-3)
        texts = [t.get_text() for t in ax.texts]
        # update_dQ is the widest segment of the tensor-core bar: its name, µs and share fit
        assert f"update_dQ\n{MMA_NS['convert_P'] / 1e3:.2f} µs · {100 * MMA_NS['convert_P'] / mma:.0f} %" in texts
        assert f"  {teach / 1e3:.2f} µs" in texts and f"  {mma / 1e3:.2f} µs" in texts
        # each bar's every segment wider than a twentieth carries its µs
        for ns, total in [(v, teach) for v in BWD_NS.values()] + [(v, mma) for v in MMA_NS.values()]:
            if ns / total > 0.05:
                assert any(f"{ns / 1e3:.2f}" in t for t in texts), (ns, texts)
        title = ax.get_title(loc="left")
        assert "teaching +5.0 %, tensor-core +4.6 %" in title and "N = 256" in title
        assert [t.get_text() for t in ax.get_yticklabels()] == [
            "teaching backward,\nper query block i\n(Br × Bc = 64 × 64, float32)",
            "tensor-core backward,\nper query block i\n(Br × Bc = 64 × 128, float16)"]
        assert [t.get_text() for t in ax.get_legend().get_texts()] == list(BWD)       # each step once
        assert not text_problems(fig) and not raw_exponents(fig)
        fig.savefig(tmp_path / "mma.png")
    finally:
        plt.close(fig)
    with pytest.raises(TypeError, match="pair must be"):
        plot_tile_steps({"bwd_mma": pair["bwd_mma"]})
    with pytest.raises(TypeError, match="pair must be"):
        plot_tile_steps({"forward": _forward(), "bwd_mma": pair["bwd_mma"]})
    with pytest.raises(ValueError, match="teaching backward's and the tensor-core backward's"):
        plot_tile_steps({"backward": pair["bwd_mma"], "bwd_mma": pair["backward"]})


def test_the_forward_figure_keeps_its_text_apart():
    fig = plot_tile_steps({"forward": _forward(), "backward": _backward()})
    try:
        assert not text_problems(fig) and not raw_exponents(fig)
    finally:
        plt.close(fig)


def test_the_recorded_tensor_core_pair_matches_the_teaching_shape(monkeypatch, tmp_path):
    monkeypatch.setattr(T, "package_dir", lambda pkg: tmp_path)
    assert recorded_backward_pair(against="bwd_mma") == {} and recorded_backward("bwd_mma") is None
    _mma().save(tmp_path / "timeline-bwd_mma-d64-n256-h200-2026-12-05.json.gz")
    assert recorded_backward_pair(against="bwd_mma") == {}                 # no teaching backward
    assert recorded_backward("bwd_mma").kernel == "bwd_mma"
    _backward().save(tmp_path / "timeline-bwd_teaching-d64-n256-h200-2026-12-05.json.gz")
    newer = dataclasses.replace(_mma(), N=512, date="2026-12-06")            # newer, another N
    newer.save(tmp_path / "timeline-bwd_mma-d64-n512-h200-2026-12-06.json.gz")
    pair = recorded_backward_pair(against="bwd_mma")
    assert list(pair) == ["backward", "bwd_mma"] and pair["bwd_mma"].N == pair["backward"].N == 256
    assert recorded_backward("bwd_mma").N == 512                             # its own newest, alone
    assert recorded_backward("bwd_mma", d=64, N=256).N == 256
    assert recorded_backward_pair(causal=True, against="bwd_mma") == {}
    assert recorded_backward_pair() == {}                                    # still no teaching forward
    with pytest.raises(ValueError, match="against must be one of forward, bwd_mma"):
        recorded_backward_pair(against="wgmma")
    with pytest.raises(ValueError, match="kernel must be one of bwd_teaching, bwd_mma"):
        recorded_backward("teaching")


def test_the_dQ_ratio_exercise_reads_the_tensor_core_bar_and_names_mistakes(capsys):
    """check_update_dQ_ratio: right within 3 % of update_dQ ÷ accumulate_dK on the tensor-core bar
    (hand-written times), each named mistake ✗ with its hint, no record installed ✗ in one line."""
    from flashviz.exercises.backward import check_update_dQ_ratio

    pair = {"backward": _backward(), "bwd_mma": _mma()}
    want = MMA_NS["convert_P"] / MMA_NS["update_ml"]          # slots: update_dQ ÷ accumulate_dK
    teach = BWD_NS["convert_P"] / BWD_NS["update_ml"]
    assert check_update_dQ_ratio(want, pair=pair).ok
    assert check_update_dQ_ratio(round(MMA_NS["convert_P"] / 1e3, 2) / round(MMA_NS["update_ml"] / 1e3, 2),
                                 pair=pair).ok                            # read off the figure's rounded µs
    assert "in the teaching kernel " + f"{teach:.2f}x" in check_update_dQ_ratio(want, pair=pair).message
    assert not check_update_dQ_ratio(want * 1.05, pair=pair).ok
    assert not check_update_dQ_ratio(want * 0.95, pair=pair).ok
    for wrong_value, words in ((1 / want, "accumulate_dK ÷ update_dQ"), (teach, "the teaching kernel's bar"),
                               (want - 1, "beyond the product"),
                               (MMA_NS["convert_P"] / sum(MMA_NS.values()), "share of the tile"),
                               (MMA_NS["convert_P"] / MMA_NS["load_K"], "divides by recompute_P")):
        res = check_update_dQ_ratio(wrong_value, pair=pair)
        assert not res.ok and words in res.message, (wrong_value, res.message)
    res = check_update_dQ_ratio(None, pair=pair)
    assert not res.ok and "placeholder" in res.message
    assert not check_update_dQ_ratio(3.5, pair={}).ok
    assert "✗" in capsys.readouterr().out


def test_the_hopper_share_exercise_reads_the_wgmma_bar_and_names_mistakes(capsys):
    """check_hopper_dQ_share: right within 2 % of update_dQ's share of the Hopper bar's tile (hand-written
    times), each named mistake ✗ with its hint, no record installed ✗ in one line."""
    from flashviz.exercises.backward import check_hopper_dQ_share

    hop = dataclasses.replace(_mma(), kernel="bwd_wgmma", Bc=64)
    pair = {"backward": _backward(), "bwd_wgmma": hop}
    want = MMA_NS["convert_P"] / sum(MMA_NS.values())         # slot convert_P: update_dQ
    teach = BWD_NS["convert_P"] / sum(BWD_NS.values())
    assert check_hopper_dQ_share(want, pair=pair).ok
    assert check_hopper_dQ_share(want * 1.015, pair=pair).ok
    assert f"in the teaching kernel {teach:.2f}" in check_hopper_dQ_share(want, pair=pair).message
    assert not check_hopper_dQ_share(want * 1.03, pair=pair).ok
    for wrong_value, words in ((1 - want, "everything but update_dQ"), (100 * want, "not a percentage"),
                               (teach, "the teaching kernel's bar"),
                               (MMA_NS["convert_P"] / MMA_NS["update_ml"], "divides by accumulate_dK")):
        res = check_hopper_dQ_share(wrong_value, pair=pair)
        assert not res.ok and words in res.message, (wrong_value, res.message)
    res = check_hopper_dQ_share(None, pair=pair)
    assert not res.ok and "placeholder" in res.message
    assert not check_hopper_dQ_share(0.4, pair={}).ok
    assert "✗" in capsys.readouterr().out


# --- the committed records, read again without flashviz ------------------------------------------------

@pytest.mark.recorded_data
@pytest.mark.parametrize("causal", [False, True])
def test_recorded_data_the_tensor_core_tile_is_the_files(causal):
    """per_tile_steps, step_shares and trace_cost of the installed pair equal what the files hold, read
    by tests/helpers/raw_timeline.py; the tracing cost is the recording's own run list's overhead."""
    files = raw_timeline.backward_files(causal)
    if "bwd_mma" not in files:
        pytest.skip("no tensor-core backward timeline recorded")
    pair = recorded_backward_pair(causal, against="bwd_mma")
    for key, kernel in (("backward", "bwd_teaching"), ("bwd_mma", "bwd_mma")):
        raw = raw_timeline.steps_per_tile(files[kernel])
        assert list(raw) == list(BWD)
        assert per_tile_steps(pair[key]) == pytest.approx(raw, rel=1e-9)
        assert step_shares(pair[key])["update_dQ"] == pytest.approx(raw["update_dQ"] / sum(raw.values()), rel=1e-9)
        run = raw_timeline.run_row(files[kernel])
        assert trace_cost(pair[key]) == pytest.approx(run["overhead"], rel=1e-6)
        assert (pair[key].d, pair[key].N, pair[key].causal) == (run["d"], run["N"], causal)


@pytest.mark.recorded_data
def test_recorded_data_the_tensor_core_figure_shows_the_files_numbers(tmp_path):
    files = raw_timeline.backward_files(False)
    if "bwd_mma" not in files:
        pytest.skip("no tensor-core backward timeline recorded")
    raw = {k: raw_timeline.steps_per_tile(f) for k, f in files.items()}
    fig = plot_tile_steps(recorded_backward_pair(against="bwd_mma"))
    try:
        ax = fig.axes[0]
        shares = [v / sum(raw[k].values()) for k in ("bwd_teaching", "bwd_mma") for v in raw[k].values()]
        assert [p.get_width() for p in ax.patches] == pytest.approx(shares, rel=1e-6)
        texts = " ".join(t.get_text() for t in ax.texts)
        for k in ("bwd_teaching", "bwd_mma"):          # every step's µs is on the figure (the exercise reads two)
            for ns in raw[k].values():
                assert f"{ns / 1e3:.2f} µs" in texts or f"{ns / 1e3:.2f}\nµs" in texts, (k, ns)
        cost = [100 * raw_timeline.run_row(files[k])["overhead"] for k in ("bwd_teaching", "bwd_mma")]
        assert f"teaching {cost[0]:+.1f} %, tensor-core {cost[1]:+.1f} %" in ax.get_title(loc="left")
        assert not text_problems(fig) and not raw_exponents(fig)
        fig.savefig(tmp_path / "recorded.png")
    finally:
        plt.close(fig)
