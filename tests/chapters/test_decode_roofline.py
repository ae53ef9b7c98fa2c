"""Chapter 9's roofline (flashviz.views.decode_roofline), without a GPU: the notebook's points
(the IO model's intensities of decode and the forward) under the ceilings of the newest
tensor-core record and under made-up ones that put a point right beside the ridge. At the
notebook's text size and the presenter's: the ridge point's dotted line runs from the x axis to
the roof's knee and through no text (it breaks around a label in its way), no text covers the
roof or a point, none overlaps another or leaves its axes, and the ceilings' source line stays
clear of the axis label. Bad input gets one-line errors."""

from __future__ import annotations

import matplotlib
import pytest
from test_no_overlap import TOL, _name, covered_data, raw_exponents, text_problems

matplotlib.use("Agg")


from flashviz import iomodel  # noqa: E402
from flashviz.records.results import latest_results  # noqa: E402
from flashviz.views import style  # noqa: E402
from flashviz.views.decode_roofline import plot_decode_roofline  # noqa: E402

D, B, NK, H = 128, 2, 4096, 32


def notebook_points():
    """The points chapter 9 draws (section 1): decode steps, MHA, GQA and speculative, and the
    forward with Br = Bc = 128 and with K and V read once."""
    dec = iomodel.decode_io(1, NK, D, H=1, H_kv=1, num_splits=1, Bc=64, itemsize=B)
    return [("decode, MHA (G = 1, Nq = 1)", dec.intensity, "decode"),
            ("decode, GQA G = 8", iomodel.decode_io(1, NK, D, H=H, H_kv=H // 8, num_splits=1, Bc=64,
                                                       itemsize=B).intensity, "decode"),
            ("G = 8, Nq = 4 (speculative)", iomodel.decode_io(4, NK, D, H=H, H_kv=H // 8, num_splits=1, Bc=64,
                                                                 itemsize=B).intensity, "decode"),
            ("forward, Br = Bc = 128", iomodel.flash_forward_io(NK, NK, D, Br=128, Bc=128, itemsize=B).intensity,
             "forward"),
            ("forward, K and V read once (Br = Nk)",
             iomodel.flash_forward_io(NK, NK, D, Br=NK, Bc=128, itemsize=B).intensity, "forward")]


def _recorded():
    mma = latest_results("mma")
    ceil, env = mma["ceilings"], mma["env"]
    return dict(copy_Bps=ceil["copy_GBps"] * 1e9, matmul_flops=ceil["matmul_fp16_TFLOPs"] * 1e12,
                source=f"{mma['source_file']} ({env['device']}, {env['date']}), d = {D}, Nk = {NK:,}, fp16")


#: ceilings: the record's (the notebook's figure); made-up ones whose ridge point (matmul ÷ copy)
#: falls just right of the forward's point (its label reaches far over the ridge); an H100 SXM's
#: datasheet figures (ridge at 295 FLOP/byte: both labels left of it reach over)
CEILINGS = {
    "record": _recorded,
    "ridge just right of the forward": lambda: dict(copy_Bps=3.0e12, matmul_flops=3.0e12 * 130, source="made up"),
    "H100 datasheet": lambda: dict(copy_Bps=3.35e12, matmul_flops=989e12, source="H100 SXM datasheet"),
}


@pytest.mark.recorded_data
@pytest.mark.parametrize("scale", [1.0, 1.4])
@pytest.mark.parametrize("ceilings", list(CEILINGS))
def test_recorded_data_the_ridge_line_and_the_texts_keep_apart(ceilings, scale, figures):
    kw = CEILINGS[ceilings]()
    with style.scaled_text(scale):
        fig = plot_decode_roofline(notebook_points(), **kw)
    figures.append(fig)
    (ax,) = fig.axes
    problems = covered_data(fig, ax.texts) + text_problems(fig) + raw_exponents(fig)
    renderer = fig.canvas.get_renderer()
    box = ax.bbox
    for t in ax.texts:                        # every label, the ceiling's and the ridge's texts inside the axes
        b = t.get_window_extent(renderer)
        if b.x0 < box.x0 - TOL or b.x1 > box.x1 + TOL or b.y0 < box.y0 - TOL or b.y1 > box.y1 + TOL:
            problems.append(f"{_name(t)} leaves the axes")
    assert not problems, f"{ceilings}, scale {scale}:\n" + "\n".join(problems)
    # the ridge: one dotted line at matmul ÷ copy, from the x axis up to the knee, with gaps only
    ridge = kw["matmul_flops"] / kw["copy_Bps"]
    (line,) = [c for c in ax.collections if c.get_gid() == "ridge"]
    segments = sorted((s[0][1], s[1][1]) for s in line.get_segments())
    assert [x for s in line.get_segments() for x, _ in s] == pytest.approx([ridge] * 2 * len(segments))
    assert segments[0][0] == pytest.approx(ax.get_ylim()[0])
    assert segments[-1][1] <= kw["matmul_flops"] / 1e12 * (1 + 1e-9)
    assert all(a[1] < b[0] for a, b in zip(segments, segments[1:]))       # apart: gaps where texts are
    assert any("ridge point" in t.get_text() for t in ax.texts)


def test_a_label_across_the_ridge_breaks_the_line(figures):
    """A point just left of the ridge: its label (under the roof, to the right) reaches over the
    ridge, and the line has a gap there, not a dotted stroke through the text."""
    fig = plot_decode_roofline([("near the ridge", 90.0, "forward"), ("far left", 1.0, "decode")],
                               copy_Bps=4.0e12, matmul_flops=4.0e12 * 100)
    figures.append(fig)
    (ax,) = fig.axes
    assert not covered_data(fig, ax.texts)
    (line,) = [c for c in ax.collections if c.get_gid() == "ridge"]
    assert len(line.get_segments()) >= 2


@pytest.mark.parametrize("bad, match", [
    (dict(points=[]), "at least one"),
    (dict(points=[("x", 0.0, "decode")]), "above 0"),
    (dict(points=[("x", 1.0, "decode")], copy_Bps=0.0), "ceilings must be above 0"),
])
def test_bad_input_is_refused_in_one_line(bad, match):
    kw = dict(copy_Bps=1e12, matmul_flops=1e14) | bad
    with pytest.raises(ValueError, match=match) as e:
        plot_decode_roofline(kw.pop("points"), **kw)
    assert "\n" not in str(e.value)
