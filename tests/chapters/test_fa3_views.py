"""Chapter 8's schematic (flashviz.replay.fa3_roles) and figures (flashviz.views.fa3_roles,
fa3_plots), without a GPU: the schedule keeps the kernel's protocol (ring slots reused only when
released, products only after their tiles landed, turns on the tensor cores with ping-pong,
shared tensor cores in lock-step), the roles figure is labelled with the kernel's real parameters
and without the exercises' totals, no text overlaps, the steps figure's bar labels keep off the
SDPA reference lines, bad input gets one-line errors."""

from __future__ import annotations

import itertools

import matplotlib
import pytest
from test_no_overlap import covered_data, raw_exponents, text_problems

from flashviz.records.fa3_records import fa3_config
from flashviz.replay.fa3_roles import EXP_TFLOPS, MATMUL_TFLOPS, roles_schedule, softmax_units
from flashviz.views.fa3_roles import plot_fa3_roles

matplotlib.use("Agg")

CASES = [(W, st, d, n, pp) for (W, st, d), n, pp in itertools.product(
    [(2, 2, 128), (3, 3, 64), (2, 3, 128), (1, 2, 64), (4, 2, 64)], (1, 2, 4, 7), (False, True))]
EPS = 1e-9


def _bars(s, lane, kind=None):
    return [b for b in s.bars if b.lane == lane and (kind is None or b.kind == kind)]


@pytest.mark.parametrize("W,st,d,n,pp", CASES)
def test_the_schedule_keeps_the_kernels_protocol(W, st, d, n, pp):
    s = roles_schedule(W, st, d, n, pp)
    loads = {(b.kind, b.j): b for b in _bars(s, 0) if b.kind.startswith("load")}
    assert len(loads) == 1 + 2 * n and loads[("load_Q", -1)].t0 == 0
    order = [n - 1 - t for t in range(n)]                     # key tiles, last first
    for t, j in enumerate(order):
        assert loads[("load_K", j)].slot == loads[("load_V", j)].slot == t % st
    for w in range(1, W + 1):
        lane = _bars(s, w)
        for a, b in zip(lane, lane[1:]):                      # one thing at a time
            assert a.t1 <= b.t0 + EPS
        gemms = _bars(s, w, "gemm")
        assert [g.what for g in gemms] == ["S"] + ["S+PV"] * (n - 1) + ["PV"]
        assert len(_bars(s, w, "softmax")) == n and len(_bars(s, w, "write_O")) == 1
        for t, g in enumerate(gemms):
            if t < n:                                         # S of tile t needs Q_i and K_t landed
                assert g.t0 >= loads[("load_K", order[t])].t1 - EPS and g.t0 >= loads[("load_Q", -1)].t1 - EPS
            if t > 0:                                         # P V of tile t - 1 needs V_{t-1}
                assert g.t0 >= loads[("load_V", order[t - 1])].t1 - EPS
    # a slot is reloaded only after every consumer released it (K after S, V after P V)
    for t in range(st, n):
        for w in range(1, W + 1):
            gemms = _bars(s, w, "gemm")
            assert loads[("load_K", order[t])].t0 >= gemms[t - st].t1 - EPS
            assert loads[("load_V", order[t])].t0 >= gemms[t - st + 1].t1 - EPS
    # the tensor cores serve 2 products a tile a consumer; turns with ping-pong, together without
    tc = _bars(s, W + 1, "tc")
    assert sum(b.t1 - b.t0 for b in tc) == pytest.approx(2 * n * W)
    assert s.tc_busy == pytest.approx(2 * n * W / s.span)
    if pp:
        assert all(len(b.wgs) == 1 for b in tc)
    else:
        assert all(b.wgs == tuple(range(W)) for b in tc)


@pytest.mark.parametrize("W,st,d", [(2, 2, 128), (3, 3, 64)])
def test_ping_pong_keeps_the_tensor_cores_busier(W, st, d):
    lock, ping = (roles_schedule(W, st, d, 4, pp) for pp in (False, True))
    assert ping.tc_busy > lock.tc_busy and ping.span < lock.span
    # in lock-step every softmax runs while the tensor cores idle; with ping-pong some softmax overlaps products
    tc = _bars(lock, W + 1, "tc")
    for b in _bars(lock, 1, "softmax"):
        assert not any(c.t0 < b.t1 - EPS and b.t0 < c.t1 - EPS for c in tc)
    tc = _bars(ping, W + 1, "tc")
    assert any(c.t0 < b.t1 - EPS and b.t0 < c.t1 - EPS for b in _bars(ping, 1, "softmax") for c in tc)


def test_softmax_units_is_the_papers_count():
    assert softmax_units(128) == pytest.approx(MATMUL_TFLOPS / (2 * 128 * EXP_TFLOPS))
    assert softmax_units(64) == pytest.approx(2 * softmax_units(128))


@pytest.mark.parametrize("args,err", [((0, 2, 64), ValueError), ((2, 0, 64), ValueError), ((2, 2, 96), ValueError),
                                      (("2", 2, 64), TypeError), ((True, 2, 64), TypeError), ((2, 2.0, 64), TypeError),
                                      ((2, 2, True), ValueError)])
def test_bad_schedule_input_is_refused_in_one_line(args, err):
    with pytest.raises(err) as e:
        roles_schedule(*args)
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="n_tiles"):
        roles_schedule(2, 2, 64, 0)


def _texts(fig):
    return [t.get_text() for t in fig.findobj(matplotlib.text.Text) if t.get_visible() and t.get_text()]


@pytest.mark.parametrize("d", [64, 128])
def test_the_roles_figure_is_labelled_with_the_kernels_parameters(d):
    cfg = fa3_config(d)
    fig = plot_fa3_roles(cfg)
    try:
        text = "\n".join(_texts(fig))
        for want in (f"setmaxnreg {cfg.reg_producer}", f"setmaxnreg {cfg.reg_consumer}", f"{cfg.threads} threads",
                     f"{cfg.stages}-slot K/V ring", f"= {cfg.Br} × {cfg.Bc}, d = {d}", f"{cfg.consumers} × 128 threads",
                     f"{cfg.stages} slots each of", "not measured"):
            assert want in text, want
        assert [t for t in _texts(fig) if t.startswith("K slot")] == [f"K slot {s}" for s in range(cfg.stages)]
        # no totals that answer the exercises
        assert f"{cfg.smem_bytes:,}" not in text and str(cfg.smem_bytes) not in text
        assert f"{cfg.consumers * 128 * cfg.reg_consumer:,}" not in text
        fig.canvas.draw()
        assert not text_problems(fig) and not raw_exponents(fig)
        busy = [t for t in _texts(fig) if "busy" in t]
        lock, ping = (roles_schedule(cfg.consumers, cfg.stages, d, 4, pp) for pp in (False, True))
        assert f"busy {100 * lock.tc_busy:.0f} %" in busy[0] and f"busy {100 * ping.tc_busy:.0f} %" in busy[1]
    finally:
        matplotlib.pyplot.close(fig)


def test_bad_figure_input_is_refused_in_one_line():
    from flashviz.records.fa3_records import latest_probe
    from flashviz.views.fa3_plots import plot_fa3_benchmark, plot_fa3_steps

    with pytest.raises(TypeError, match="FA3Config"):
        plot_fa3_roles(None)
    cfg = fa3_config(128)
    with pytest.raises(ValueError, match="schedules"):
        plot_fa3_roles(cfg, (roles_schedule(3, 3, 64, 4, False), roles_schedule(3, 3, 64, 4, True)))
    with pytest.raises(ValueError, match="schedules"):
        plot_fa3_roles(cfg, (roles_schedule(2, 2, 128, 4, True), roles_schedule(2, 2, 128, 4, False)))
    for fn in (plot_fa3_steps, plot_fa3_benchmark):
        with pytest.raises(ValueError) as e:
            fn({"nothing": 1})
        assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="no row that timed every step"):
        plot_fa3_steps({"times": [r for r in latest_probe("steps")["times"] if r["N"] != 8192]})
    with pytest.raises(ValueError, match="no benchmark row with fa3"):
        plot_fa3_benchmark({"bench": []})


def _lines_moved(rec, *, cudnn=None, flash=None):
    """``rec`` (a probe "steps" record) with SDPA-cuDNN's and SDPA-flash's kernel times of every
    row set from the steps' own: ``cudnn``/``flash`` = (which step, "fastest" or "slowest", and a
    factor on its time), so their lines stand where a bar's label is (a factor of 1: on the bar's
    top; 0.98: 2 % above it)."""
    from flashviz.records.fa3_records import STEPS

    rows = []
    for row in rec["times"]:
        row = dict(row)
        times = [row.get(f"{s.impl(row['d'])}_kernel_ms") for s in STEPS]
        if all(t is not None for t in times):
            for key, how in (("sdpa_cudnn", cudnn), ("sdpa_flash", flash)):
                if how:
                    which, factor = how
                    row[f"{key}_kernel_ms"] = (min if which == "fastest" else max)(times) * factor
        rows.append(row)
    return {**rec, "times": rows}


#: where the reference lines stand: as recorded (cuDNN's line crosses the labels of the bars a
#: little under it), on the tallest bar's top, just above it, and SDPA-flash's just above the
#: shortest bar with cuDNN's just above the tallest (a label meets two lines)
LINE_CASES = {"record": {}, "cuDNN on the top": {"cudnn": ("fastest", 1.0)},
              "cuDNN just above": {"cudnn": ("fastest", 0.98)},
              "both just above": {"cudnn": ("fastest", 0.98), "flash": ("slowest", 0.99)}}


@pytest.mark.recorded_data
@pytest.mark.parametrize("scale", [1.0, 1.4])
@pytest.mark.parametrize("case", list(LINE_CASES))
def test_recorded_data_step_labels_keep_off_the_reference_lines(case, scale):
    """The steps figure at the notebook's text size and the presenter's (the app's tab, the same
    inches): no bar label (TFLOP/s and cuDNN's ratio) is crossed by SDPA-cuDNN's or SDPA-flash's
    line, covers a bar, or reaches the legend; each label stands on its bar, or on the line that
    was in its way, centred over its bar."""
    from flashviz.records.fa3_records import latest_probe
    from flashviz.views import style
    from flashviz.views.fa3_plots import plot_fa3_steps

    rec = _lines_moved(latest_probe("steps"), **LINE_CASES[case])
    with style.scaled_text(scale):
        fig = plot_fa3_steps(rec)
    try:
        axes = [ax for ax in fig.axes if ax.get_visible()]
        labels = [t for ax in axes for t in ax.texts]
        problems = covered_data(fig, labels + [ax.get_legend() for ax in axes]) + text_problems(fig)
        assert not problems, f"{case}, scale {scale}:\n" + "\n".join(problems)
        for ax in axes:
            lines = sorted(ln.get_ydata()[0] for ln in ax.get_lines())
            for bar, label in zip(ax.patches, ax.texts):
                x, y = label.xy
                assert x == pytest.approx(bar.get_x() + bar.get_width() / 2)
                assert y == bar.get_height() or (y in lines and y > bar.get_height()), (case, label.get_text())
                assert label.xyann[0] == 0 and label.xyann[1] > 0         # above its anchor, in points
    finally:
        matplotlib.pyplot.close(fig)
