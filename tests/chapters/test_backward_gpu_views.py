"""Chapter 6, section 7: the recorded GPU backward (benchmarks/results/bwd-*.json), without a GPU.

The reader (flashviz.records.bwd_records) and the two figures (flashviz.views.backward_gpu_plots)
against values worked out here from the raw keys of the newest committed record: per-head bytes,
forward = fwd+bwd − bwd, TFLOP/s = FLOPs over milliseconds, ratios of raw times with one method on
both sides. The figures fit a notebook (at most FIT_WIDTH_PX wide, no text under 7.5 pt, none
overlapping or leaving the figure, no raw exponent, at the notebook's text size and the
presenter's) and refuse a record without their rows in one line. Both layouts of a record are read:
``bwd_mma`` the atomic dQ with ``bwd_mma_det`` beside it (records made while atomics were the
default), and ``bwd_mma`` the deterministic pass with ``bwd_mma_atomic`` beside it (since; made here
from the committed record by ``bwd_styles.new_style``), each labelled by the kernels it ran.

Tests that read the recorded JSON carry the ``recorded_data`` marker."""

from __future__ import annotations

import json
import re
from pathlib import Path

import matplotlib
import pytest
from bwd_styles import added_and_det, new_style
from test_no_overlap import covered_data, raw_exponents, text_problems, visible_texts

matplotlib.use("Agg")


from flashviz.records import bwd_records as br  # noqa: E402
from flashviz.views import style  # noqa: E402
from flashviz.views.backward_gpu_plots import SHORT, plot_bwd_speed, plot_recompute_vs_store, short  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
recorded_data = pytest.mark.recorded_data


def _newest_bwd():
    files = sorted(RESULTS.glob("bwd-*.json"), key=lambda f: (re.search(r"\d{4}-\d{2}-\d{2}", f.name)[0], f.name))
    rec = json.loads(files[-1].read_text())
    rec["source_file"] = files[-1].name
    return rec


REC = _newest_bwd()
BENCH = sorted(REC["bench"], key=lambda r: (r["d"], r["causal"], r["N"]))
PEAKS = REC["peak_bytes"]
RECOMPUTE = ["bwd_mma", "bwd_mma_det", "bwd_mma_atomic", "bwd_teaching", "bwd_teaching_det", "sdpa_flash_bwd",
             "sdpa_cudnn_bwd"]
#: the speed figure's implementations (the teaching kernel's deterministic twin is not drawn there)
SPEED = ["bwd_mma", "bwd_mma_det", "bwd_mma_atomic", "bwd_teaching", "sdpa_flash_bwd", "sdpa_cudnn_bwd"]


def _mma_twins(rec):
    """(atomic or bulk, deterministic) implementations of ours on tensor cores, from the raw kernel names."""
    return added_and_det(rec)


def bwd_over_fwd(r, impl):
    return r[f"{impl}_call_ms"] / (r[f"{impl}_fwdbwd_call_ms"] - r[f"{impl}_call_ms"])


# --- the reader ---------------------------------------------------------------------------------

@recorded_data
def test_recorded_data_the_reader_computes_what_the_keys_say():
    assert br.flop_ratio(True) == 2.5 and br.flop_ratio(False) == 2.0 and br.det_flop_ratio() == pytest.approx(1.4)
    rows = br.time_rows(REC)
    assert [(r["d"], r["causal"], r["N"]) for r in rows] == [(r["d"], r["causal"], r["N"]) for r in BENCH]
    for got, r in zip(rows, BENCH):
        for impl in RECOMPUTE:
            if f"{impl}_call_ms" not in r:
                assert f"{impl}_call_ms" not in got
                continue
            if impl in REC.get("no_fwdbwd", []):           # not timed: nothing derived from it
                assert f"{impl}_fwd_ms" not in got and f"{impl}_bwd_over_fwd" not in got
            else:
                fwd = r[f"{impl}_fwdbwd_call_ms"] - r[f"{impl}_call_ms"]
                assert got[f"{impl}_fwd_ms"] == pytest.approx(fwd, rel=1e-12)
                assert got[f"{impl}_bwd_over_fwd"] == pytest.approx(r[f"{impl}_call_ms"] / fwd, rel=1e-12)
                assert got[f"{impl}_bwd_share"] == pytest.approx(r[f"{impl}_call_ms"] / r[f"{impl}_fwdbwd_call_ms"])
            for m in ("call", "kernel"):
                assert got[f"{impl}_{m}_tflops"] == pytest.approx(r["flops_bwd"] / r[f"{impl}_{m}_ms"] / 1e9)
                assert got[f"{impl}_{m}_tflops"] == pytest.approx(r[f"{impl}_{'tflops' if m == 'call' else 'kernel_tflops'}"])
        for other in ("sdpa_flash_bwd", "sdpa_cudnn_bwd"):
            for m, key in (("call", "call_ms"), ("kernel", "kernel_ms"), ("fwdbwd", "fwdbwd_call_ms")):
                assert got[f"bwd_mma_{m}_vs_{other}"] == pytest.approx(r[f"{other}_{key}"] / r[f"bwd_mma_{key}"])
    assert len(br.time_rows(REC, d=128, causal=True)) == sum(r["d"] == 128 and r["causal"] for r in BENCH)


@recorded_data
def test_recorded_data_peaks_repeatability_and_the_deterministic_cost():
    rows = br.peak_rows(REC)
    assert len(rows) == len(PEAKS)
    for got, r in zip(rows, sorted(PEAKS, key=lambda r: r["N"])):
        BH = r["B"] * r["H"]
        for impl in br.PEAK_IMPLS:
            if f"{impl}_peak_bytes" in r:
                assert got[f"{impl}_peak_per_head"] == r[f"{impl}_peak_bytes"] / BH
                assert got[f"{impl}_saved_per_head"] == r[f"{impl}_saved_bytes"] / BH
            else:
                assert f"{impl}_peak_per_head" not in got and got[f"{impl}_note"] == r[f"{impl}_peak_note"]
    rep = br.repeatability(REC)
    for impl in {x["impl"] for x in REC["deterministic"]}:
        mine = [x for x in REC["deterministic"] if x["impl"] == impl]
        assert rep[impl]["shapes"] == len(mine) and rep[impl]["equal"] == sum(x["bitwise_equal"] for x in mine)
        assert rep[impl]["dQ"] == sum(x["dQ_bitwise_equal"] for x in mine)
    label = br.bwd_label(REC)
    env = REC["env"]
    assert env["device"] in label and env["time_utc"][:10] in label and env["commit"][:7] in label
    assert REC["source_file"] in label


def _ran(r, key):
    return isinstance(r.get(key), (int, float)) and r[key] == r[key]


def _without(rec, impl):
    """``rec`` with every ``<impl>_…`` key of its bench rows removed: a record made before ``impl`` ran."""
    return {**rec, "bench": [{k: v for k, v in r.items() if not k.startswith(impl + "_")} for r in rec["bench"]]}


@recorded_data
@pytest.mark.parametrize("kernel", ["bwd_teaching", "bwd_mma"])
def test_recorded_data_the_deterministic_cost_is_the_raw_times_ratio(kernel):
    atomic, det = ("bwd_teaching", "bwd_teaching_det") if kernel == "bwd_teaching" else _mma_twins(REC)
    assert br.dq_twins(REC, kernel) == (atomic, det)
    cost = br.det_cost(REC, kernel)
    rows = [r for r in BENCH if _ran(r, f"{det}_call_ms") and _ran(r, f"{atomic}_call_ms")]
    assert rows, f"the record has no row with both {atomic} and {det}"
    assert [(c["d"], c["causal"], c["N"]) for c in cost] == [(r["d"], r["causal"], r["N"]) for r in rows]
    assert [c["call"] for c in cost] == pytest.approx([r[f"{det}_call_ms"] / r[f"{atomic}_call_ms"] for r in rows],
                                                      rel=1e-12)
    assert [c["kernel"] for c in cost] == pytest.approx(
        [r[f"{det}_kernel_ms"] / r[f"{atomic}_kernel_ms"] for r in rows], rel=1e-12)
    if kernel == "bwd_teaching":
        assert br.det_cost(REC) == cost                  # the default pair: the teaching kernel, as before
    assert br.det_cost(_without(REC, det), kernel) == []   # a record made before the twin ran


def test_det_cost_refuses_a_pair_it_does_not_know():
    for impl in ("sdpa_flash_bwd", "bwd_mma_det", "mma"):
        with pytest.raises(ValueError, match="bwd_teaching or bwd_mma") as e:
            br.det_cost(REC, impl)
        assert "\n" not in str(e.value)
    with pytest.raises(LookupError):
        br.det_cost({"nothing": 1}, "bwd_mma")


def test_kernel_names_say_how_dq_was_added_up():
    assert br.kernel_dq("void flash_bwd_mma<0, 128, 64, false, true>(unsigned short const*, unsig") == "atomic"
    assert br.kernel_dq("void flash_bwd_mma<0, 128, 128, true, false>(unsigned short const*, unsi") == "separate"
    assert br.kernel_dq("void flash_bwd_mma<1, 64, 64, true, false, 2>(unsigned short const*)") == "separate"
    assert br.kernel_dq("void flash_bwd_mma<0, 128, 64, false>(unsigned short const*, unsigned sho") == "atomic"
    assert br.kernel_dq("void flash_bwd_mma_dq<0, 64, false, 1>(unsigned short const*)") == "separate"
    assert br.kernel_dq("void flash_bwd_wgmma<0, 64, 64, false, 2>(unsigned short const*, unsigned") == "bulk"
    assert br.kernel_dq("void flash_bwd_wgmma<1, 128, 128, true, 1>(unsigned short const*)") == "atomic"
    assert br.kernel_dq("void flash_bwd_wgmma<0, 128, 64, true, 0>(unsigned short const*)") == "separate"
    assert br.kernel_dq("void flash_bwd_wgmma<0, 128, 64, true, 7>(") is None
    for other in ("void flash_bwd_mma_preprocess<0, 64>(unsigned short const*)", "void flash_bwd<64, 64, 64, false>(",
                  "void flash_bwd_mma<0, 128", "", None, 3):
        assert br.kernel_dq(other) is None, other


#: a record of the first layout (bwd_mma the atomics, bwd_mma_det beside it), and the same record laid
#: out as records were written while the separate pass was the default (bwd_mma_atomic beside it)
OLD = json.loads((RESULTS / "bwd-h200-2026-12-05.json").read_text()) | {"source_file": "bwd-h200-2026-12-05.json"}
NEW = new_style(OLD)


@recorded_data
def test_recorded_data_both_layouts_are_labelled_by_the_kernels_they_ran():
    assert _mma_twins(OLD) == ("bwd_mma", "bwd_mma_det")
    for rec, default, other, twins in ((OLD, "atomic", "bwd_mma_det", ("bwd_mma", "bwd_mma_det")),
                                       (NEW, "separate", "bwd_mma_atomic", ("bwd_mma_atomic", "bwd_mma"))):
        assert br.dq_path(rec, "bwd_mma") == default and br.dq_twins(rec, "bwd_mma") == twins
        assert br.dq_path(rec, other) == ({"atomic", "separate"} - {default}).pop()
        assert br.impl_label(rec, "bwd_mma") == f"ours, tensor cores (fp16, {br.DQ_WORDS[default]})"
        assert short(rec, "bwd_mma") == f"ours, tensor cores ({br.DQ_WORDS[default]})"
        rep = br.repeatability(rec)
        assert rep["bwd_mma"]["dq"] == default and rep[other]["dq"] != default
        assert rep[twins[1]]["deterministic"] and not rep[twins[0]]["deterministic"]
    # the same measurements under either layout: the same cost of the deterministic dQ, the same speeds
    assert br.det_cost(NEW, "bwd_mma") == br.det_cost(OLD, "bwd_mma") != []
    for old, new in zip(br.time_rows(OLD), br.time_rows(NEW)):
        assert new["bwd_mma_kernel_vs_sdpa_flash_bwd"] == old["bwd_mma_det_kernel_vs_sdpa_flash_bwd"]
        assert new["bwd_mma_atomic_kernel_vs_sdpa_flash_bwd"] == old["bwd_mma_kernel_vs_sdpa_flash_bwd"]
        assert "bwd_mma_atomic_fwdbwd_ms" not in new and "bwd_mma_fwdbwd_ms" in new
    # kernel names gone: each row's <impl>_dq (the new layout), else the call each name stands for
    for rec, want in ((OLD, {"bwd_mma": "atomic", "bwd_mma_det": "separate", "bwd_mma_atomic": None}),
                      (NEW, {"bwd_mma": "separate", "bwd_mma_det": None, "bwd_mma_atomic": "atomic"})):
        bare = {**rec, "bench": [{k: v for k, v in r.items() if not k.endswith("_kernel_name")} for r in rec["bench"]]}
        assert {i: br.dq_path(bare, i) for i in br.MMA_IMPLS} == want
        nodq = {**bare, "bench": [{k: v for k, v in r.items() if not k.endswith("_dq")} for r in bare["bench"]]}
        assert {i: br.dq_path(nodq, i) for i in br.MMA_IMPLS} == want
    # rows that disagree: no path is claimed
    mixed = {**OLD, "bench": [dict(r) for r in OLD["bench"]]}
    mixed["bench"][0]["bwd_mma_kernel_name"] = mixed["bench"][0]["bwd_mma_det_kernel_name"]
    assert br.dq_path(mixed, "bwd_mma") is None and br.impl_label(mixed, "bwd_mma") == "ours, tensor cores (fp16)"
    assert br.dq_twins(mixed, "bwd_mma") is None and br.det_cost(mixed, "bwd_mma") == []


def test_a_wgmma_record_pairs_the_bulk_default_with_the_deterministic_call():
    """bwd-h100-80gb-hbm3-2026-12-06.json: the default call ran the wgmma kernel with the bulk dQ
    (bwd_mma), beside deterministic=True (bwd_mma_det) and dq="atomic" (bwd_mma_atomic): each is
    labelled by its kernels' DQ, and the deterministic cost pairs bwd_mma_det with bwd_mma."""
    rec = json.loads((RESULTS / "bwd-h100-80gb-hbm3-2026-12-06.json").read_text())
    rec["source_file"] = "bwd-h100-80gb-hbm3-2026-12-06.json"
    assert {i: br.dq_path(rec, i) for i in br.MMA_IMPLS} == {"bwd_mma": "bulk", "bwd_mma_det": "separate",
                                                             "bwd_mma_atomic": "atomic"}
    assert br.dq_twins(rec, "bwd_mma") == ("bwd_mma", "bwd_mma_det")
    assert br.impl_label(rec, "bwd_mma") == "ours, tensor cores (fp16, bulk dQ)"
    assert short(rec, "bwd_mma_atomic") == "ours, tensor cores (atomic dQ)"
    rows = [r for r in rec["bench"] if "bwd_mma_det_call_ms" in r]
    assert [c["call"] for c in br.det_cost(rec, "bwd_mma")] == pytest.approx(
        [r["bwd_mma_det_call_ms"] / r["bwd_mma_call_ms"] for r in sorted(rows, key=lambda r: (r["d"], r["causal"], r["N"]))])
    forms = br.kernel_forms(rec, "bwd_mma")
    assert forms == ["flash_bwd_wgmma with DQ = 2 (bulk)"]
    rep = br.repeatability(rec)
    assert rep["bwd_mma"]["dq"] == "bulk" and not rep["bwd_mma"]["deterministic"]
    assert rep["bwd_mma_det"]["deterministic"] and rep["bwd_mma_det"]["equal"] == rep["bwd_mma_det"]["shapes"]


def test_the_first_record_has_the_atomic_dq_alone():
    """bwd-h200-2026-12-04.json: before ATOMIC_DQ existed (kernel names with four template
    arguments), atomics were the only dQ; no deterministic twin, so no deterministic cost."""
    rec = json.loads((RESULTS / "bwd-h200-2026-12-04.json").read_text())
    assert br.dq_path(rec, "bwd_mma") == "atomic" and br.dq_twins(rec, "bwd_mma") is None
    assert br.det_cost(rec, "bwd_mma") == [] and br.kernel_forms(rec, "bwd_mma") == [
        "flash_bwd_mma with 4 template arguments (built before ATOMIC_DQ existed)"]
    assert {i: br.dq_path(rec, i) for i in ("bwd_mma_det", "bwd_mma_atomic", "sdpa_flash_bwd")} == dict.fromkeys(
        ("bwd_mma_det", "bwd_mma_atomic", "sdpa_flash_bwd"))


def test_the_reader_refuses_what_is_not_a_backward_record():
    with pytest.raises(LookupError):
        br.time_rows({"nothing": 1})
    assert br.peak_rows({"bench": []}) == [] and br.repeatability({"bench": []}) == {}


# --- the figures --------------------------------------------------------------------------------

def _lines(ax):
    return {ln.get_label(): ln for ln in ax.get_lines() if not ln.get_label().startswith("_")}


@recorded_data
def test_recorded_data_recompute_vs_store_draws_the_record(figures):
    fig = plot_recompute_vs_store(REC, d=64, causal=False)
    figures.append(fig)
    keep, peak, time = fig.axes
    peaks = sorted(PEAKS, key=lambda r: r["N"])
    for ax, what in ((keep, "saved"), (peak, "peak")):
        lines = _lines(ax)
        for impl in ("bwd_mma", "sdpa_flash_bwd", "sdpa_cudnn_bwd", "sdpa_math_bwd"):
            sel = [r for r in peaks if f"{impl}_{what}_bytes" in r]
            (ln,) = [ln for label, ln in lines.items() if label == short(REC, impl)]
            assert list(ln.get_xdata()) == [r["N"] for r in sel]
            assert list(ln.get_ydata()) == pytest.approx([r[f"{impl}_{what}_bytes"] / (r["B"] * r["H"]) / 2**20
                                                          for r in sel])
        assert ax.get_yscale() == "log" and ax.get_xscale() == "log"
    # SDPA-math's largest N was not run: said in the panel
    assert any("not run" in t.get_text() for t in peak.texts) == any("sdpa_math_bwd_peak_note" in r for r in peaks)
    sel = [r for r in BENCH if r["d"] == 64 and not r["causal"]]
    lines = _lines(time)
    for impl in RECOMPUTE:
        rows = [r for r in sel if f"{impl}_fwdbwd_call_ms" in r]
        if not rows:
            assert short(REC, impl) not in lines
            continue
        (ln,) = [ln for label, ln in lines.items() if label == short(REC, impl)]
        assert list(ln.get_ydata()) == pytest.approx([bwd_over_fwd(r, impl) for r in rows], rel=1e-12)
    flat = sorted(ln.get_ydata()[0] for ln in time.get_lines() if len(set(ln.get_ydata())) == 1 and
                  len(ln.get_ydata()) == 2)
    assert flat == [4 / 2, 5 / 2]                     # the FLOP ratios: 4 or 5 matmuls against the forward's 2
    title = fig._suptitle.get_text().replace("\n", " ")
    assert REC["env"]["device"] in title and REC["env"]["time_utc"][:10] in title and REC["env"]["commit"][:7] in title


@recorded_data
def test_recorded_data_speed_figure_draws_the_record(figures):
    fig = plot_bwd_speed(REC)
    figures.append(fig)
    panels = sorted({(r["d"], r["causal"]) for r in BENCH})
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert len(axes) == len(panels)
    for ax, (d, causal) in zip(axes, panels):
        assert ax.get_title(loc="left") == f"d = {d}, {'causal' if causal else 'no mask'}"
        sel = [r for r in BENCH if (r["d"], r["causal"]) == (d, causal)]
        lines = _lines(ax)
        drawn = set()
        for impl in SPEED:
            for m, name in (("call", "public call"), ("kernel", "kernel-only")):
                rows = [r for r in sel if _ran(r, f"{impl}_{m}_ms")]
                label = f"{short(REC, impl)}, {name}"
                if not rows:
                    assert label not in lines
                    continue
                ln = lines[label]
                drawn.add(label)
                assert list(ln.get_xdata()) == [r["N"] for r in rows]
                assert list(ln.get_ydata()) == pytest.approx([r["flops_bwd"] / r[f"{impl}_{m}_ms"] / 1e9 for r in rows])
        assert set(lines) == drawn                        # nothing else: not the teaching kernel's twin either
        # the other dQ path of the tensor-core backward is drawn wherever the record has it, in its own look
        atomic, det = _mma_twins(REC)
        if atomic and det and any(_ran(r, f"{det}_call_ms") for r in sel):
            d_line, a_line = lines[f"{short(REC, det)}, public call"], lines[f"{short(REC, atomic)}, public call"]
            assert d_line.get_color() != a_line.get_color() and d_line.get_marker() != a_line.get_marker()
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    for impl in SPEED:
        assert (f"{short(REC, impl)}, public call" in legend) == any(_ran(r, f"{impl}_call_ms") for r in BENCH)
    assert "ours, tensor cores (deterministic dQ), public call" in legend
    assert REC["env"]["commit"][:7] in fig._suptitle.get_text()


@recorded_data
def test_recorded_data_speed_figure_without_deterministic_rows_leaves_them_out(figures):
    atomic, det = _mma_twins(REC)
    fig = plot_bwd_speed(_without(REC, det))
    figures.append(fig)
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert f"{short(REC, atomic)}, public call" in labels
    assert not [t for t in labels if t.startswith(SHORT["bwd_mma_det"])]
    assert not [label for ax in fig.axes for label in _lines(ax) if label.startswith(SHORT["bwd_mma_det"])]


@recorded_data
def test_recorded_data_the_figures_of_the_new_layout_name_the_default_by_its_kernels(figures):
    """The committed record laid out as since the separate pass became the default: bwd_mma is drawn
    as the deterministic dQ (dark red), bwd_mma_atomic as the atomic one beside it, with the same
    points the old layout's bwd_mma_det and bwd_mma had; the recompute figure has no
    forward + backward line for the atomics (not timed)."""
    old, new = plot_bwd_speed(OLD), plot_bwd_speed(NEW)
    figures += [old, new]
    for ax_old, ax_new in zip(old.axes, new.axes):
        lo, ln = _lines(ax_old), _lines(ax_new)
        assert set(lo) == set(ln)                          # the same labels: each names what its line ran
        for label, line in ln.items():
            assert list(line.get_ydata()) == list(lo[label].get_ydata()), label
        det = ln["ours, tensor cores (deterministic dQ), public call"]
        atomic = ln["ours, tensor cores (atomic dQ), public call"]
        assert det.get_color() == "#d62728" and atomic.get_color() == "#ffbb78"    # ours, the default: dark red
    fig = plot_recompute_vs_store(NEW, d=64, causal=False)
    figures.append(fig)
    labels = set(_lines(fig.axes[2]))
    assert "ours, tensor cores (deterministic dQ)" in labels and "ours, tensor cores (atomic dQ)" not in labels
    assert set(_lines(fig.axes[1])) >= {"ours, tensor cores (deterministic dQ)"}


@recorded_data
@pytest.mark.parametrize("layout", ["record", "new layout"])
@pytest.mark.parametrize("scale", [1.0, 1.4])
@pytest.mark.parametrize("plot", [plot_recompute_vs_store, plot_bwd_speed])
def test_recorded_data_the_figures_fit_a_notebook(plot, scale, layout, figures):
    with style.scaled_text(scale):
        fig = plot(REC if layout == "record" else NEW)
    figures.append(fig)
    assert fig.bbox.width <= style.FIT_WIDTH_PX + 0.5
    assert not text_problems(fig) and not raw_exponents(fig)
    sizes = [t.get_fontsize() for t, _ in visible_texts(fig, fig.canvas.get_renderer())]
    assert min(sizes) >= 7.5 * scale - 1e-9, min(sizes)
    assert min(sizes) * fig.dpi / 72 >= 8.0               # tests/browser/test_fit.py: 8 px at the least
    if scale == 1.0:
        assert fig.get_figwidth() == pytest.approx(9.4)


@recorded_data
@pytest.mark.parametrize("layout", ["record", "new layout"])
@pytest.mark.parametrize("scale", [1.0, 1.4])
def test_recorded_data_recompute_vs_store_legends_and_notes_cover_no_data(scale, layout, figures):
    """No legend or note of the recompute-versus-store figure sits on a line or a marker, at the
    notebook's text size and the presenter's: the FLOP ratios' legend stands under the lower
    panel, outside every axes (inside, at 1k the slower backwards' lines ran through it), and
    SDPA-math's "not run" note at the end of its line."""
    with style.scaled_text(scale):
        fig = plot_recompute_vs_store(REC if layout == "record" else NEW)
    figures.append(fig)
    keep, peak, time = fig.axes
    covers = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend()),
              *(t for ax in fig.axes for t in ax.texts)]
    problems = covered_data(fig, covers)
    assert not problems, f"scale {scale}, {layout}:\n" + "\n".join(problems)
    assert any("not run" in t.get_text() for t in peak.texts) == any("sdpa_math_bwd_peak_note" in r for r in PEAKS)
    assert time.get_legend() is None
    (flops,) = [leg for leg in fig.legends if "FLOP ratio" in leg.get_texts()[0].get_text()]
    assert [t.get_text() for t in flops.get_texts()] == ["2.5 = FLOP ratio, P recomputed",
                                                         "2 = FLOP ratio if P were stored"]
    renderer = fig.canvas.get_renderer()
    box = flops.get_window_extent(renderer)
    assert all(box.y1 < ax.get_tightbbox(renderer).y0 for ax in fig.axes)     # under every panel, its labels too


@pytest.mark.parametrize("plot", [plot_recompute_vs_store, plot_bwd_speed])
@pytest.mark.parametrize("bad", [None, {"nothing": 1}, {"bench": []}])
def test_bad_input_is_refused_in_one_line(plot, bad):
    with pytest.raises(ValueError) as e:
        plot(bad)
    assert "\n" not in str(e.value)


def test_a_record_without_peak_rows_is_refused_in_one_line():
    with pytest.raises(ValueError, match="no peak-memory rows") as e:
        plot_recompute_vs_store({"bench": REC["bench"], "source_file": "x.json"})
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="no bench row at d = 96"):
        plot_recompute_vs_store(REC, d=96)
