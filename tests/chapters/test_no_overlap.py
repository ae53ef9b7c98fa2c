"""No overlapping text (issue 10, item 6): in every animation widget, at the notebook's default
size and at the app's (ChapterApp, presenter or not), over sampled frames, no two visible
texts of the figure overlap and none leaves the figure; and no figure text shows a raw
exponent (``e^-46``) outside mathtext (``$e^{-46}$``). The app's image chapters (widgets made of
``FigureTabs``: recorded figures drawn to PNG) are checked the same way, every tab at the app's
figure and at the presenter's, at the dpi the app draws them at.

Texts: titles, axis labels, drawn tick labels, offset texts, annotations, legend texts,
figure texts — every visible, non-empty matplotlib Text, with its window extent from a real
draw (Agg, ``canvas="png"``: no browser needed).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import matplotlib
import numpy as np
import pytest
from matplotlib.axes import Axes
from matplotlib.axis import Axis
from matplotlib.collections import Collection
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.path import Path as MplPath
from matplotlib.spines import Spine
from matplotlib.text import Text
from matplotlib.transforms import Affine2D, Bbox

from flashviz.widgets.app import APP_FIGURE, PRESENTER_FIGURE

matplotlib.use("Agg")

TOL = 1.0          # pixels two extents may share (anti-aliased edges touch)

# Overlap depends on the figure's size in inches and the text scale only (dpi scales text and
# figure alike). A notebook draws every widget at its default inches ("default": shorter than the
# app's, to fit a laptop's screen with its controls); the app (ChapterApp) at APP_FIGURE's inches,
# at text scale 1 ("app") or, in presenter mode, at PRESENTER_FIGURE's text scale ("presenter").
# The browser scales the app's bitmap to the window.
SIZES = {"default": {}, "app": {"figsize": APP_FIGURE["figsize"]},
         "presenter": {"figsize": PRESENTER_FIGURE["figsize"], "text_scale": PRESENTER_FIGURE["text_scale"]}}

#: presenter mode: no figure text below this many points (at 1920×1080 the app shows the figure
#: at about 130 px an inch: 9 pt ≈ 16 px)
PRESENTER_MIN_PT = 9.0


def test_the_sizes_checked_are_the_apps():
    assert SIZES["app"]["figsize"] == APP_FIGURE["figsize"] == PRESENTER_FIGURE["figsize"]
    assert APP_FIGURE.get("text_scale", 1.0) == 1.0 and PRESENTER_FIGURE["text_scale"] >= 1.4


def _widget(name, kwargs):
    if name == "TileExplorer":
        from flashviz.widgets.explorer import TileExplorer as W
    elif name == "OnlineSoftmaxExplorer":
        from flashviz.widgets.online_softmax import OnlineSoftmaxExplorer as W
    elif name == "LoopOrderExplorer":
        from flashviz.widgets.loop_order import LoopOrderExplorer as W
    elif name == "CausalExplorer":
        from flashviz.widgets.causal import CausalExplorer as W
    elif name == "BackwardExplorer":
        from flashviz.widgets.backward import BackwardExplorer as W
    elif name == "BlockSizeExplorer":
        from flashviz.widgets.blocksize import BlockSizeExplorer as W
    elif name == "TimelineExplorer":
        from flashviz.widgets.timeline import TimelineExplorer as W
    elif name == "DecodeExplorer":
        from flashviz.widgets.decode import DecodeExplorer as W
    else:
        raise KeyError(name)
    return W(**kwargs)


# (widget, keyword arguments): every widget at its defaults, and the configurations whose texts
# differ (break-it modes, causal, the lesson's other settings)
CASES = [
    ("TileExplorer", {}),
    ("TileExplorer", {"rescale": False}),
    ("TileExplorer", {"causal": True, "rescale": False}),
    ("TileExplorer", {"N": 128, "Br": 16, "Bc": 16}),
    ("TileExplorer", {"source": "adversarial"}),                      # rescale factors down to e^-38
    ("TileExplorer", {"source": "adversarial", "rescale": False}),
    ("OnlineSoftmaxExplorer", {}),
    ("OnlineSoftmaxExplorer", {"break_it": "no rescale"}),
    ("OnlineSoftmaxExplorer", {"break_it": "no max-subtraction"}),
    ("OnlineSoftmaxExplorer", {"break_it": "no rescale", "source": "rising"}),
    ("OnlineSoftmaxExplorer", {"break_it": "no max-subtraction", "source": "scores near 800"}),
    ("OnlineSoftmaxExplorer", {"break_it": "no rescale", "source": "scores near 800", "N": 256, "block": 16}),
    ("LoopOrderExplorer", {}),
    ("LoopOrderExplorer", {"causal": True}),
    ("CausalExplorer", {}),
    ("BackwardExplorer", {}),
    ("BackwardExplorer", {"causal": True}),
    ("BlockSizeExplorer", {}),
    ("BlockSizeExplorer", {"order": "fa1", "causal": True}),
    ("TimelineExplorer", {}),                                         # recorded timelines (no GPU needed)
    ("TimelineExplorer", {"causal": True}),                           # the causal tail
    ("TimelineExplorer", {"kernel": "teaching"}),                     # warps, no fp32 matmul ceiling
    ("TimelineExplorer", {"kernel": "teaching", "causal": True}),
    ("DecodeExplorer", {}),                                           # 16 splits (the heuristic), 128 SMs
    ("DecodeExplorer", {"no_rescale": True}),                         # the third row, the broken merge
    ("DecodeExplorer", {"no_splits": True, "B": 2}),                  # 16 blocks, one split: no merge frames
    ("DecodeExplorer", {"tiny_pages": True, "Nk": 2048, "B": 4}),     # 8,192 one-token pages
    ("DecodeExplorer", {"num_splits": 128, "Nk": 1024, "Nq": 8, "group": 8}),   # empty splits, 1,024 blocks
]


def _case_id(case):
    name, kw = case
    return name + ("[" + ",".join(f"{k}={v}" for k, v in kw.items()) + "]" if kw else "")


def sample_frames(n: int, inner: int = 6) -> list[int]:
    """The first frame, the last, and ~inner frames evenly in between."""
    return sorted({0, n - 1, *np.linspace(0, n - 1, inner + 2).round().astype(int).tolist()})


def _drawn_ticks(axis: Axis):
    """The ticks matplotlib draws (those inside the view), not every Tick object it keeps."""
    return axis._update_ticks()


def visible_texts(fig, renderer):
    """[(Text, Bbox)] of every Text that is drawn: visible itself and all its parents, non-empty,
    with its extent clipped to its clip box (a clipped text outside its axes is not seen)."""
    out = []

    def walk(artist):
        if not artist.get_visible():
            return
        if isinstance(artist, Text):
            if artist.get_text().strip():
                bb = artist.get_window_extent(renderer)
                clip = artist.get_clip_box() if artist.get_clip_on() else None
                if clip is not None:
                    bb = bb.intersection(bb, clip)
                if bb is not None and bb.width > 0 and bb.height > 0:
                    out.append((artist, bb))
            return
        if isinstance(artist, Axes) and not artist.axison:      # ax.axis("off"): no axes, ticks or spines drawn
            for child in artist.get_children():
                if not isinstance(child, (Axis, Spine)):
                    walk(child)
            return
        if isinstance(artist, Axis):
            for tick in _drawn_ticks(artist):
                for lab in (tick.label1, tick.label2):
                    walk(lab)
            walk(artist.label)
            walk(artist.offsetText)
            return
        for child in artist.get_children():
            walk(child)

    walk(fig)
    return out


def _overlap(a, b, tol=TOL) -> bool:
    return (min(a.x1, b.x1) - max(a.x0, b.x0) > tol) and (min(a.y1, b.y1) - max(a.y0, b.y0) > tol)


def _name(t: Text) -> str:
    s = t.get_text().replace("\n", "⏎")
    return repr(s if len(s) <= 70 else s[:67] + "…")


def _laid_out(fig):
    """Lay the figure out as a draw would (ticks, title positions), without rasterising."""
    fig.draw_without_rendering()
    return fig.canvas.get_renderer()


def _slanted(t: Text) -> bool:
    """A text turned by other than a multiple of 90° about its anchor (a label along a sloped
    line): its window extent is the upright envelope, larger than the text."""
    return type(t) is Text and t.get_rotation_mode() == "anchor" and t.get_rotation() % 90 != 0


def text_problems(fig, tol=TOL) -> list[str]:
    """One line per pair of overlapping texts and per text that leaves the figure (a slanted text
    by its turned box, ``drawn_outline``, not its upright envelope)."""
    renderer = _laid_out(fig)
    texts = visible_texts(fig, renderer)
    W, H = fig.bbox.width, fig.bbox.height
    out = []
    for t, bb in texts:
        if bb.x0 < -tol or bb.y0 < -tol or bb.x1 > W + tol or bb.y1 > H + tol:
            out.append(f"{_name(t)} leaves the {W:.0f}×{H:.0f} figure: "
                       f"x {bb.x0:.0f}…{bb.x1:.0f}, y {bb.y0:.0f}…{bb.y1:.0f}")
    for i, (a, ba) in enumerate(texts):
        for b, bb in texts[i + 1:]:
            if _overlap(ba, bb, tol) and (not (_slanted(a) or _slanted(b)) or drawn_outline(a, renderer, tol / 2)
                                          .intersects_path(drawn_outline(b, renderer, tol / 2), filled=True)):
                w = min(ba.x1, bb.x1) - max(ba.x0, bb.x0)
                h = min(ba.y1, bb.y1) - max(ba.y0, bb.y0)
                out.append(f"{_name(a)} overlaps {_name(b)} by {w:.0f}×{h:.0f} px")
    return out


_RAW_EXP = re.compile(r"\^|\*\*|\d[eE][-+]?\d")


def raw_exponents(fig) -> list[str]:
    """Figure texts with an exponent written raw (^, **, 1e-5) outside $…$ mathtext: what was
    found, in its context."""
    out = []
    for t, _ in visible_texts(fig, _laid_out(fig)):
        plain = re.sub(r"(?<!\\)\$.*?(?<!\\)\$", " ", t.get_text())
        for m in _RAW_EXP.finditer(plain):
            out.append(f"{plain[max(0, m.start() - 25):m.end() + 10]!r} in {_name(t)}")
    return out


def drawn_outline(artist, renderer, tol: float = 0.0) -> MplPath:
    """The outline of a Text, Annotation or Legend as drawn, in display pixels (a closed Path),
    shrunk by ``tol`` pixels each side: its window extent, except for a text rotated with
    rotation_mode="anchor" (a label along a sloped line), whose upright box is turned about its
    anchor (its window extent would be the upright envelope, covering what lies beside the text)."""
    def box(bb):
        bb = bb.padded(-tol)
        return bb.corners()[[0, 1, 3, 2]]

    if isinstance(artist, Text) and _slanted(artist):
        angle = artist.get_rotation()
        artist.set_rotation(0)
        try:
            upright = artist.get_window_extent(renderer)
        finally:
            artist.set_rotation(angle)
        x, y = artist.get_transform().transform(artist.get_unitless_position())
        return MplPath(Affine2D().rotate_deg_around(x, y, angle).transform(box(upright)), closed=True)
    return MplPath(box(artist.get_window_extent(renderer)), closed=True)


def _data_paths(artist):
    """(kind, [(display Path, closed)]) of a data artist of an axes: a line's drawn path (open)
    and each of its markers as a square (closed), a collection's paths (vlines' segments, open), a
    patch's outline (a bar, closed)."""
    if isinstance(artist, Line2D):
        paths = []
        if artist.get_linestyle() not in ("None", "", " ") and len(artist.get_xdata()) > 0:
            paths.append((artist.get_transform().transform_path(artist.get_path()), False))
        if artist.get_marker() not in (None, "None", "", " "):
            r = artist.get_markersize() / 2 * artist.figure.dpi / 72
            xy = artist.get_transform().transform(artist.get_xydata())
            paths += [(MplPath(Bbox.from_extents(x - r, y - r, x + r, y + r).corners()[[0, 1, 3, 2]], closed=True),
                       True) for x, y in xy if np.isfinite(x) and np.isfinite(y)]
        return "line", paths
    if isinstance(artist, Collection):
        t = artist.get_transform()
        return "collection", [(t.transform_path(p), False) for p in artist.get_paths()]
    if isinstance(artist, Patch):
        return "patch", [(artist.get_transform().transform_path(artist.get_path()), True)]
    return "other", []


def _data_name(artist) -> str:
    label = artist.get_label()
    if label and not label.startswith("_"):
        return f"{type(artist).__name__} {label!r}"
    if isinstance(artist, Line2D) and len(artist.get_xdata()):
        for axis, values in (("y", artist.get_ydata()), ("x", artist.get_xdata())):
            if len(set(np.ravel(values))) == 1:          # a horizontal or vertical line (axhline, axvline)
                return f"{type(artist).__name__} at {axis} = {np.ravel(values)[0]:g}"
    return f"{type(artist).__name__} {artist.get_gid() or ''}".strip()


def covered_data(fig, covers, tol=TOL) -> list[str]:
    """One line per (cover, data artist) pair where a data artist of one of ``fig``'s axes — a
    line's path or one of its markers, a collection's segment, a patch (a bar) — enters the
    cover's drawn outline (``drawn_outline``, shrunk by ``tol`` px): texts or legends sitting on
    top of data. An artist clipped to its axes counts only inside the axes. Window extents of a
    real layout (Agg), not pixels."""
    renderer = _laid_out(fig)
    out = []
    for cover in covers:
        outline = drawn_outline(cover, renderer, tol)
        name = _name(cover) if isinstance(cover, Text) else f"{type(cover).__name__} " + ", ".join(
            _name(t) for t in cover.get_texts())
        for ax in fig.axes:
            if not ax.get_visible():
                continue
            for artist in [*ax.lines, *ax.collections, *ax.patches]:
                if not artist.get_visible():
                    continue
                clipped = outline.clip_to_bbox(ax.bbox) if artist.get_clip_on() else outline
                if len(clipped.vertices) < 3:
                    continue
                kind, paths = _data_paths(artist)
                # edges that cross, a vertex of the data inside the cover, the cover inside a closed shape
                if any(p.intersects_path(clipped, filled=False) or clipped.contains_points(p.vertices).any()
                       or closed and p.contains_points(clipped.vertices).any() for p, closed in paths):
                    out.append(f"{name} covers the {kind} {_data_name(artist)}")
    return out


@functools.cache
def scan(i: int, size: str):
    """(overlap problems, raw exponents) over the sampled frames of CASES[i] at ``size``: one
    widget, each frame laid out once for both checks. Agg, no ipympl and no browser: outside a
    kernel canvas="auto" draws on the plain Agg canvas (canvas="png" would also encode a PNG a frame)."""
    name, kw = CASES[i]
    w = _widget(name, {**kw, **SIZES[size], "canvas": "auto", "key": ("test_no_overlap", name)})
    try:
        overlaps, raw, sizes = [], [], {}
        for k in sample_frames(w.n_frames):
            w.show_frame(k)
            overlaps += [f"frame {k}: {p}" for p in text_problems(w.fig)]
            raw += [f"frame {k}: {p}" for p in raw_exponents(w.fig)]
            for t, _ in visible_texts(w.fig, w.fig.canvas.get_renderer()):
                sizes.setdefault(_name(t), t.get_fontsize())
        return list(dict.fromkeys(overlaps)), list(dict.fromkeys(raw)), sizes
    finally:
        w.close()


@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("i", range(len(CASES)), ids=[_case_id(c) for c in CASES])
def test_no_text_overlaps(i, size):
    found = scan(i, size)[0]
    assert not found, f"{_case_id(CASES[i])} at {size} size:\n" + "\n".join(found)


@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("i", range(len(CASES)), ids=[_case_id(c) for c in CASES])
def test_exponents_are_mathtext(i, size):
    found = scan(i, size)[1]
    assert not found, f"{_case_id(CASES[i])} at {size} size: raw exponents in\n" + "\n".join(found)


@pytest.mark.parametrize("i", range(len(CASES)), ids=[_case_id(c) for c in CASES])
def test_presenter_mode_enlarges_every_text(i):
    """Presenter mode: every visible text at least PRESENTER_MIN_PT, and each text that is drawn in
    both of the app's modes (same words) at the text scale times its size at scale 1."""
    scale = SIZES["presenter"]["text_scale"]
    small = {n: s for n, s in scan(i, "presenter")[2].items() if s < PRESENTER_MIN_PT - 1e-6}
    assert not small, f"{_case_id(CASES[i])}: texts under {PRESENTER_MIN_PT} pt in presenter mode: {small}"
    default, presenter = scan(i, "app")[2], scan(i, "presenter")[2]         # the same inches
    both = default.keys() & presenter.keys()
    assert len(both) >= 5, sorted(both)
    unscaled = {n: (default[n], presenter[n]) for n in both if abs(presenter[n] - scale * default[n]) > 0.05}
    assert not unscaled, f"{_case_id(CASES[i])}: (notebook pt, presenter pt) not scaled by {scale}: {unscaled}"


def test_the_checks_catch_what_they_should():
    """The helpers themselves: two texts drawn on top of each other, one off the figure, a raw ^."""
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(4, 3), dpi=90)
    try:
        ax = fig.add_subplot()
        ax.set_title("a long title over the label")
        ax.text(0.5, 1.02, "an annotation", transform=ax.transAxes, ha="center")
        fig.text(0.99, 0.5, "off the edge")
        fig.text(0.1, 0.02, "smallest e^-46")
        fig.text(0.6, 0.02, r"smallest $e^{-46}$")
        problems = text_problems(fig)
        assert any("overlaps" in p and "annotation" in p for p in problems), problems
        assert any("'off the edge' leaves" in p for p in problems), problems
        assert [p.split(" in ")[0] for p in raw_exponents(fig)] == ["'smallest e^-46'"]
        invisible = ax.text(0.5, 1.02, "hidden", transform=ax.transAxes)
        invisible.set_visible(False)
        assert not any("hidden" in p for p in text_problems(fig))
    finally:
        plt.close(fig)


def test_covered_data_sees_texts_and_legends_on_data():
    """The data check itself: a line through a label, a label on a bar and a legend over a line
    are found; a label clear of the data, one along a sloped line (by its turned box: its upright
    envelope would cover the line) and a legend outside the axes are not."""
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(6, 4), dpi=90)
    try:
        ax = fig.add_subplot()
        fig.subplots_adjust(bottom=0.25)
        ax.set_xlim(0, 10)
        ax.set_ylim(0, 10)
        ax.plot([0, 10], [0, 10], label="diagonal")
        ridge = ax.axvline(5, ls=":")
        ax.bar([8], [2], width=1)
        crossed = ax.text(3.5, 0.5, "the ridge runs through", fontsize=8)
        clear = ax.text(0.3, 8.5, "clear of the data", fontsize=8)
        on_bar = ax.annotate("on its bar", (8, 2), xytext=(0, -14), textcoords="offset points", ha="center",
                             fontsize=8)
        (dx, dy) = ax.transData.transform((10, 10)) - ax.transData.transform((0, 0))
        along = ax.text(1, 1.6, "along the diagonal", rotation=np.degrees(np.arctan2(dy, dx)), rotation_mode="anchor",
                        va="bottom", fontsize=8)
        over = ax.legend(loc="upper left", bbox_to_anchor=(0.55, 0.72))
        outside = fig.legend(handles=[ridge], labels=["ridge"], loc="lower left")
        found = covered_data(fig, [crossed, clear, on_bar, along, over, outside])
        assert sorted(found) == sorted(["'the ridge runs through' covers the line Line2D at x = 5",
                                        "'on its bar' covers the patch Rectangle",
                                        "Legend 'diagonal' covers the line Line2D 'diagonal'"]), found
        upright = along.get_window_extent(fig.canvas.get_renderer())
        assert MplPath(upright.corners()[[0, 1, 3, 2]], closed=True).intersects_path(
            ax.lines[0].get_transform().transform_path(ax.lines[0].get_path()), filled=False)
    finally:
        plt.close(fig)


def test_status_lines_write_powers_of_ten_in_html():
    """The widgets' HTML status lines show 3.1×10⁻⁷, never a raw 3.1e-07."""
    import re

    import flashviz as fv
    from flashviz.views.style import sci_html
    assert sci_html("error 3.1e-07, bound 1e-09") == "error 3.1×10<sup>−7</sup>, bound 10<sup>−9</sup>"
    for w in (fv.TileExplorer(N=64, source="random", key="html-tile"),
              fv.CausalExplorer(Nq=64, Nk=96, key="html-causal"),
              fv.BackwardExplorer(N=32, d=32, Br=16, Bc=16, key="html-backward"),
              fv.OnlineSoftmaxExplorer(key="html-online"),                  # its status was 4.5e-09
              fv.DecodeExplorer(Nk=512, d=32, key="html-decode")):
        try:
            assert "10<sup>" in w.status.value and not re.search(r"\d[eE][-+]?\d", w.status.value), w.status.value
        finally:
            w.close()


# --- the app's image chapters: tabs of PNG figures (FigureTabs) ---------------------------------

def _image_chapters() -> list[tuple[str, type]]:
    """(chapter label, widget class) of every app chapter widget that is a FigureTabs."""
    import importlib

    from flashviz.widgets.app import CHAPTERS
    from flashviz.widgets.figure_tabs import FigureTabs

    out = []
    for label, parts in CHAPTERS.items():
        for module, name, _ in parts:
            cls = getattr(importlib.import_module(module), name)
            if isinstance(cls, type) and issubclass(cls, FigureTabs):
                out.append((label, cls))
    return out


IMAGE_CHAPTERS = _image_chapters()
#: the figure the app passes (figsize, dpi, text_scale), plain and presenter
APP_MODES = {"app": APP_FIGURE, "presenter": PRESENTER_FIGURE}


@functools.cache
def scan_tabs(i: int, mode: str):
    """{tab name: (overlap problems, raw exponents, {text: points})} of every tab of
    IMAGE_CHAPTERS[i], each figure built as the widget builds it (``figure(name)``) with the
    app's arguments in ``mode`` and laid out at the dpi its PNG is drawn at. A tab whose data
    this installation lacks is left out."""
    label, cls = IMAGE_CHAPTERS[i]
    w = cls(key=("test_no_overlap", label, mode), **APP_MODES[mode])
    out = {}
    try:
        for name in cls.NAMES:
            try:
                fig = w.figure(name)
            except (ValueError, LookupError):
                continue
            try:
                fig.set_dpi(APP_MODES[mode]["dpi"])
                out[name] = (text_problems(fig), raw_exponents(fig),
                             {_name(t): t.get_fontsize() for t, _ in visible_texts(fig, fig.canvas.get_renderer())})
            finally:
                import matplotlib.pyplot as plt
                plt.close(fig)
    finally:
        w.close()
    return out


def test_the_app_has_image_chapters():
    labels = [label for label, _ in IMAGE_CHAPTERS]
    assert "7 · The GPU kernel" in labels and "8 · FlashAttention-3 on Hopper" in labels, labels


@pytest.mark.recorded_data
@pytest.mark.parametrize("mode", list(APP_MODES))
@pytest.mark.parametrize("i", range(len(IMAGE_CHAPTERS)), ids=[f"{c.__name__}" for _, c in IMAGE_CHAPTERS])
def test_image_chapters_no_text_overlaps(i, mode):
    found = scan_tabs(i, mode)
    assert set(found) == set(IMAGE_CHAPTERS[i][1].NAMES), sorted(found)   # the recordings are committed
    problems = [f"{name}: {p}" for name, (ps, raw, _) in found.items() for p in ps + raw]
    assert not problems, f"{IMAGE_CHAPTERS[i][0]}, {mode}:\n" + "\n".join(problems)


@pytest.mark.recorded_data
@pytest.mark.parametrize("i", range(len(IMAGE_CHAPTERS)), ids=[f"{c.__name__}" for _, c in IMAGE_CHAPTERS])
def test_image_chapters_presenter_texts_are_large_and_scaled(i):
    scale = PRESENTER_FIGURE["text_scale"]
    app, presenter = scan_tabs(i, "app"), scan_tabs(i, "presenter")
    for name in presenter:
        default, big = app[name][2], presenter[name][2]
        small = {t: s for t, s in big.items() if s < PRESENTER_MIN_PT - 1e-6}
        assert not small, f"{name}: texts under {PRESENTER_MIN_PT} pt in presenter mode: {small}"
        both = default.keys() & big.keys()
        assert len(both) >= 5, (name, sorted(both))
        unscaled = {t: (default[t], big[t]) for t in both if abs(big[t] - scale * default[t]) > 0.05}
        assert not unscaled, f"{name}: (app pt, presenter pt) not scaled by {scale}: {unscaled}"


# --- chapter 1's roofline: the notebook's figure and the app's, at both text scales -------------
# The QKᵀ points of N = 256…2048 sit at 21–30 FLOP/byte and wherever this machine's timing puts
# them: close together on a quiet laptop, on top of each other, far apart on a loaded box, right
# under the top of the axes. Their labels N=… stand in one column with leader lines
# (views.roofline_view.place_point_labels): no two overlap, none leaves the axes, none covers the
# legend — in the notebook's figure (draw_roofline, 7 × 4.2 in) and in the app's (draw_memory_wall).

def roofline_rows(gflops, ew_gflops=(1.2, 1.0, 0.9, 0.8), Ns=(256, 512, 1024, 2048), d=64):
    """Rows as roofline.measure_intensity returns them, with QKᵀ at ``gflops`` GFLOP/s."""
    rows = []
    for N, g, e in zip(Ns, gflops, ew_gflops):
        mm_flops, ew_flops = 2 * N * N * d, N * N
        rows.append(dict(N=N, d=d, mm_flops=mm_flops, mm_bytes=(2 * N * d + N * N) * 4, mm_s=mm_flops / (g * 1e9),
                         ew_flops=ew_flops, ew_bytes=2 * N * N * 4, ew_s=ew_flops / (e * 1e9)))
    return rows


ROOFLINE_CASES = {
    "quiet laptop": (roofline_rows((40, 60, 70, 75)), 10e9),
    "on top of each other": (roofline_rows((50, 50, 50, 50)), 10e9),
    "loaded box": (roofline_rows((0.53, 2.1, 98.5, 38.5), (0.37, 0.43, 0.1, 0.26)), 3e9),
    "under the top": (roofline_rows((900, 1000, 1100, 1150)), 0.5e9),
    "a slow roof": (roofline_rows((3, 4, 5, 5.5), (0.01, 0.01, 0.01, 0.01)), 0.08e9),
}
ROOFLINE_FIGURES = {"notebook": {"figsize": (7, 4.2)}, "app": {"figsize": APP_FIGURE["figsize"]}}


def roofline_problems(fig, ax, labels) -> list[str]:
    """text_problems of the figure, and the labels that leave their axes."""
    out = text_problems(fig)
    renderer = fig.canvas.get_renderer()
    box = ax.bbox
    for a in labels:
        b = a.get_window_extent(renderer)
        if b.x0 < box.x0 - TOL or b.x1 > box.x1 + TOL or b.y0 < box.y0 - TOL or b.y1 > box.y1 + TOL:
            out.append(f"{_name(a)} leaves its axes: x {b.x0:.0f}…{b.x1:.0f}, y {b.y0:.0f}…{b.y1:.0f} "
                       f"(axes x {box.x0:.0f}…{box.x1:.0f}, y {box.y0:.0f}…{box.y1:.0f})")
    return out


@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("figure", list(ROOFLINE_FIGURES))
@pytest.mark.parametrize("case", list(ROOFLINE_CASES))
def test_roofline_labels_keep_apart_inside_the_axes(case, figure, size):
    import matplotlib.pyplot as plt

    from flashviz.views.roofline_view import draw_memory_wall, draw_roofline
    from flashviz.views.style import scaled_text

    rows, roof = ROOFLINE_CASES[case]
    fig = plt.figure(figsize=ROOFLINE_FIGURES[figure]["figsize"], dpi=90)
    try:
        with scaled_text(SIZES[size].get("text_scale", 1.0)):
            if figure == "notebook":
                info = draw_roofline(fig, rows, roof, roof_label=f"bandwidth roof ≈ {roof / 1e9:.1f} GB/s (measured)")
                ax = info["axes"]
            else:
                info = draw_memory_wall(fig, rows, roof)
                ax = info["axes"][0]
        labels = info["labels"]
        assert sorted(a.get_text() for a in labels) == sorted(f"N={r['N']}" for r in rows)
        problems = roofline_problems(fig, ax, labels) + raw_exponents(fig)
        assert not problems, f"roofline, {case}, {figure} figure, {size}:\n" + "\n".join(problems)
        # each label is joined to its own point: a leader (an arrow without text) from the label to it
        leaders = [c for c in ax.texts if c.get_gid() == "point-label-leader"]
        assert sorted(tuple(a.xy) for a in leaders) == sorted(tuple(a.xy) for a in labels)
        assert all(leader.xyann == a.xyann for leader in leaders for a in labels if a.xy == leader.xy)
    finally:
        plt.close(fig)


def test_the_notebook_draws_its_roofline_with_draw_roofline():
    """Chapter 1's notebook makes its roofline with the function checked above, not its own copy."""
    import nbformat

    nb = nbformat.read(Path(__file__).resolve().parents[2] / "notebooks" / "01_memory_wall.ipynb", as_version=4)
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert "draw_roofline(" in code and "ax.annotate(" not in code
