"""Chapter 6's recompute-versus-store figure (views.store_figure) on a record written by hand with the
benchmark's row keys: every timed point drawn where the record puts it, the crossover marked, one
legend under the panels that covers no data at the notebook's text size and the presenter's."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from test_no_overlap import covered_data, text_problems  # noqa: E402

from flashviz.gpu.teaching import store_bench as sb  # noqa: E402
from flashviz.records.store_records import NAMES  # noqa: E402
from flashviz.views import style  # noqa: E402
from flashviz.views.store_figure import plot_store_measured  # noqa: E402


def record():
    rows = []
    for N in (512, 1024, 2048, 4096):
        t = 1e-6 * N * N / 64                              # the recomputing backward: ~N², ms
        row = {"N": N, "P_bytes": 8 * N * N * 4, "recompute_kernel_ms": t, "stored_kernel_ms": t * (0.8 if N < 2048 else 1.2),
               "naive_kernel_ms": 2.5 * t, "make_P_kernel_ms": 0.4 * t}
        for impl in sb.IMPLS:
            row[f"{impl}_kept_bytes"] = sb.kept_bytes(N, impl)
            row[f"{impl}_peak_bytes"] = 3 * 8 * N * 64 * 4 + (8 * N * N * 4 if impl == "naive" else 0)
        rows.append(row)
    return {"d": 64, "BH": 8, "Br": 64, "Bc": 64, "env": {"device": "test GPU", "date": "2026-12-05"}, "bench": rows}


def test_every_timed_point_is_drawn_and_the_crossover_marked(tmp_path):
    rec = record()
    fig = plot_store_measured(rec)
    try:
        ax_t, ax_m = fig.axes[:2]
        lines = {ln.get_label(): ln for ln in ax_t.get_lines()}
        got = lines["recompute P (FlashAttention)"].get_data()
        assert list(got[0]) == [512, 1024, 2048, 4096]
        np.testing.assert_allclose(got[1], [r["recompute_kernel_ms"] for r in rec["bench"]])
        assert any("recompute ≤ stored\n from N = 2,048" in t.get_text() for t in ax_t.texts)
        mem = {ln.get_label(): ln for ln in ax_m.get_lines()}
        np.testing.assert_allclose(mem["stored: kept"].get_ydata(),
                                   [sb.kept_bytes(N, "stored") / 2**20 for N in (512, 1024, 2048, 4096)])
        fig.savefig(tmp_path / "store.png")
    finally:
        plt.close(fig)


def test_a_record_without_times_is_a_one_line_error():
    with pytest.raises(ValueError, match="no timed rows"):
        plot_store_measured({"bench": [{"N": 512}]})
    with pytest.raises(TypeError, match="recompute-versus-store record"):
        plot_store_measured([])


@pytest.mark.parametrize("scale", [1.0, 1.4])
def test_the_legend_stands_under_the_panels_on_no_data(scale):
    """At the notebook's text size and the presenter's, no text or legend covers a line or a
    marker (inside a panel, a legend had no free corner at 1.4: the lines rise across both) and no
    two texts overlap: one legend under both panels names the backwards and the line styles."""
    with style.scaled_text(scale):
        fig = plot_store_measured(record())
    try:
        legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend())]
        problems = covered_data(fig, [*legends, *(t for ax in fig.axes for t in ax.texts)]) + text_problems(fig)
        assert not problems, "\n".join(problems)
        assert [ax.get_legend() for ax in fig.axes] == [None, None]
        (leg,) = fig.legends
        assert [t.get_text() for t in leg.get_texts()] == [
            *NAMES.values(), "making the stored P (the forward's extra)",
            "memory: kept by the forward (counted)", "memory: the call's peak (measured)"]
        renderer = fig.canvas.get_renderer()
        assert all(leg.get_window_extent(renderer).y1 < ax.get_tightbbox(renderer).y0 for ax in fig.axes)
    finally:
        plt.close(fig)
