"""Chapter 7 (the GPU kernel) runs top to bottom without a GPU, from the committed results; its
printed numbers equal values computed here independently from the raw keys of the JSON (FLOPs over
milliseconds, ratios of raw times, one method on both sides); every ratio it quotes names its method
(public call or kernel-only); numbers stated in its prose match the records; its kernel/NumPy
snippets, cut between step tags, are all found in the current sources; its exercise stubs say "✗ Not yet" and the right
answers (worked out below) say "✓ Right"; the TensorCorePanel is driven in the same kernel.

Tests that read the recorded JSON carry the ``recorded_data`` marker and are named
``test_recorded_data_*``: they check the committed records and the chapter's reading of them, not
the speed of anything."""

import inspect
import json
import math
import re
import statistics
from pathlib import Path

import nbformat
import pytest
from nbutil import flat, run_notebook, widget_views

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "07_gpu_kernel.ipynb"
RESULTS = ROOT / "benchmarks" / "results"
recorded_data = pytest.mark.recorded_data


def _newest(prefix):
    """The newest full record <prefix>-<device>-<date>.json (not a run of some kernels alone,
    timelines-fa3-...: record_timelines.py --kernels)."""
    files = sorted((f for f in RESULTS.glob(f"{prefix}-*.json")
                    if not re.match(rf"{prefix}-(teaching|wgmma|fa3|decode|bwd_teaching|bwd_mma)-", f.name)),
                   key=lambda f: (re.search(r"\d{4}-\d{2}-\d{2}", f.name)[0], f.name))
    return json.loads(files[-1].read_text())


MMA, DRAM = _newest("mma"), _newest("dram")
BENCH = sorted(MMA["bench"], key=lambda r: (r["d"], r["causal"], r["N"]))


# Derived figures, recomputed from the raw keys (not through flashviz.records.results):
def tflops(r, impl, method):
    """FLOPs over one method's time (method "call" or "kernel")."""
    return r["flops"] / r[f"{impl}_{method}_ms"] / 1e9


def vs(r, other, method, impl="wgmma"):
    """Their time ÷ ours, the same method on both sides (above 1: ours is faster)."""
    return r[f"{other}_{method}_ms"] / r[f"{impl}_{method}_ms"]


def span(values):
    return f"{min(values):.2f}–{max(values):.2f}x"


# The exercises' right answers, worked out from the question and the JSON (not from flashviz):
BH, N, D = 128, 4096, 64
RIGHT_BYTES = 4 * BH * N * D * 2 + 4 * BH * N            # Q, K, V, O in fp16 + lse in fp32 = 270,532,608
_sweep = [r for r in MMA["sweep"] if r["variant"] == "wgmma" and r["d"] == 64 and not r["causal"]]
RIGHT_BLOCKS = min((r["kernel_ms"], (r["Br"], r["Bc"])) for r in _sweep)[1]   # the sweep is read kernel-only
RIGHT_INTENSITY = 4 * BH * N * N * D / RIGHT_BYTES        # ≈ 2032 FLOPs per byte
_ridge = MMA["ceilings"]["matmul_fp16_TFLOPs"] * 1e12 / (MMA["ceilings"]["copy_GBps"] * 1e9)
RIGHT_BOUND = "compute" if RIGHT_INTENSITY > _ridge else "memory"
# section 7's exercises, from the timeline files and their summary (not through flashviz.records.timeline_stats)
TIMELINES = _newest("timelines")


def _timeline_blocks(name):
    """The blocks table of a recorded timeline file, decoded here from its JSON columns."""
    import base64
    import gzip

    import numpy as np

    data = json.loads(gzip.decompress((RESULTS / name).read_bytes()))
    cols = data["blocks"]
    return {k: np.frombuffer(base64.b64decode(c["data"]), np.dtype(c["dtype"]), count=data["n_blocks"])
            for k, c in cols.items()}, data


def _run(kernel, d, causal, order="kernel", N=4096):
    return next(r for r in TIMELINES["runs"] if (r["kernel"], r["d"], r["causal"], r["order"], r["N"])
                == (kernel, d, causal, order, N))


def _wave_counts():
    """(blocks, SMs, the most blocks one SM held at once — counted at every block's start) of the
    causal wgmma run at d = 64, N = 16384."""
    b, _ = _timeline_blocks(_run("wgmma", 64, True, N=16384)["file"])
    most = 0
    for sm in set(b["sm"].tolist()):
        t0, t1 = b["t0_ns"][b["sm"] == sm], b["t1_ns"][b["sm"] == sm]
        most = max(most, max(int(((t0 <= t) & (t < t1)).sum()) for t in t0))
    return len(b["sm"]), len(set(b["sm"].tolist())), most


def _right_waves():
    """blocks / (SMs × the most blocks one SM held at once)."""
    blocks, sms, most = _wave_counts()
    return blocks / (sms * most)


def _right_tail():
    b, _ = _timeline_blocks(_run("teaching", 128, True)["file"])
    idle = min(b["t1_ns"][b["sm"] == s].max() for s in set(b["sm"].tolist()))
    return float((b["t1_ns"].max() - idle) / (b["t1_ns"].max() - b["t0_ns"].min()))


RIGHT_WAVES, RIGHT_TAIL = _right_waves(), _right_tail()
_lf = _run("wgmma", 128, True, "longest_first")
RIGHT_SPEEDUP = _lf["kernel_order_ms"] / _lf["kernel_ms"]

DRIVE = f"""
import numpy as np
# the panel, without a GPU: recorded rows for d = 64, buttons disabled; d = 128 changes them
assert panel.d.value == 64 and panel.recorded_rows and {{r["d"] for r in panel.recorded_rows}} == {{64}}
if not panel.ok:
    assert panel.run_button.disabled and panel.sweep_button.disabled
before_rows, before_html = panel.recorded_rows, panel.recorded_html.value
panel.d.value = 128
assert panel.recorded_rows != before_rows and {{r["d"] for r in panel.recorded_rows}} == {{128}}
html_128 = panel.recorded_html.value
panel.Br.value, panel.Bc.value = 64, 32
assert panel.recorded_html.value != html_128 and "64×32" in panel.recorded_html.value
panel.causal.value = True
assert all(r["causal"] for r in panel.recorded_rows)
# the exercises, answered right, say so
assert check_compulsory_bytes({RIGHT_BYTES}, N=4096, d=64, BH=128, itemsize=2)
assert check_fastest_blocks({RIGHT_BLOCKS!r}, d=64, causal=False)
assert check_intensity({RIGHT_INTENSITY!r}, {RIGHT_BOUND!r}, N=4096, d=64, BH=128)
assert check_waves({RIGHT_WAVES!r}, kernel="wgmma", causal=True, d=64, N=16384)
assert check_tail_share({RIGHT_TAIL!r}, kernel="teaching", d=128, N=4096)
assert check_order_speedup({RIGHT_SPEEDUP!r}, kernel="wgmma", d=128, N=4096)
# the timeline explorer, without a GPU: recorded runs; the controls switch the run it shows
assert explorer.timeline.kernel == "wgmma" and not explorer.timeline.causal and explorer.timeline.d == 64
state = explorer.show_frame(explorer.n_frames // 2)
assert 0 < state.busy <= explorer.timeline.sm_count
explorer.causal.value = True
assert explorer.timeline.causal
explorer.close()
panel.close()
print("DRIVEN-OK")
"""


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    try:
        yield run_notebook(NOTEBOOK, tmp_path_factory.mktemp("nb07"), mp, DRIVE)
    finally:
        mp.undo()


def _markdown():
    return "\n".join(c.source for c in nbformat.read(NOTEBOOK, as_version=4).cells if c.cell_type == "markdown")


def _code():
    return "\n".join(c.source for c in nbformat.read(NOTEBOOK, as_version=4).cells if c.cell_type == "code")


def _block(texts, first, last):
    """The printed lines from the line starting with ``first`` up to the line starting with ``last``."""
    return texts.split(first, 1)[1].split(last, 1)[0]


def test_runs_without_errors_and_is_driven(executed):
    nb, texts = executed
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.get("output_type") == "error"]
    assert not errors
    assert widget_views(nb), "no widget (figure canvas or panel) was displayed"
    assert "DRIVEN-OK" in texts


@recorded_data
def test_recorded_data_exercise_stubs_say_not_yet_and_right_answers_say_right(executed):
    _, texts = executed
    stubs = [line for line in texts.splitlines() if line.startswith("✗ Not yet")]
    assert len(stubs) == 6, stubs
    rights = [line for line in texts.splitlines() if line.startswith("✓ Right")]
    assert len(rights) == 6, rights
    assert f"{RIGHT_BYTES:,} B" in rights[0] and f"{RIGHT_BLOCKS[0]}×{RIGHT_BLOCKS[1]}" in rights[1]
    assert f"{RIGHT_BOUND}-bound" in rights[2]


def test_code_reads_only_the_keys_that_name_their_method():
    """The keys of the pre-2026-12-01 records (one `<impl>_ms` per implementation, ratios of a bare
    launch against a public call) are gone; the chapter must not look for them."""
    code = _code()
    impl = r"(wgmma|mmasync|sdpa_flash|sdpa_cudnn|sdpa_efficient|teaching|naive)"
    for old in (rf"{impl}_ms\b", rf"{impl}_tflops\b", r"_ratio_to_sdpa_", r"\bnaive_ms\b"):
        assert not re.search(old, code), (old, re.search(old, code))
    assert re.search(r"wgmma_call_vs_sdpa_flash", code) and re.search(r"wgmma_kernel_vs_sdpa_flash", code)


@recorded_data
def test_recorded_data_ceilings_label_and_peaks(executed):
    _, texts = executed
    env, ceil = MMA["env"], MMA["ceilings"]
    assert f"Recorded on {env['device']}, {env['date']}" in texts
    assert f"{ceil['copy_GBps']:,.0f} GB/s" in texts and f"{ceil['matmul_fp16_TFLOPs']:,.0f} TFLOP/s" in texts
    teach = max(tflops(r, "teaching", "call") for r in BENCH)
    best = max(tflops(r, "wgmma", "call") for r in BENCH)
    assert f"{teach:,.1f} TFLOP/s at best in this run, public call" in texts
    assert (f"{best:,.0f} TFLOP/s at best, public call = {best / teach:.0f}x the teaching kernel by the same method"
            in flat(texts))
    assert (f"(kernel-only, the same two: {max(tflops(r, 'teaching', 'kernel') for r in BENCH):,.1f} and "
            f"{max(tflops(r, 'wgmma', 'kernel') for r in BENCH):,.0f} TFLOP/s)") in texts


@recorded_data
def test_recorded_data_benchmark_table_by_method(executed):
    """Every benchmark row is in the table: TFLOP/s and ratios by public call, ratios and the
    ceiling share kernel-only, host µs per call of ours, SDPA-flash and SDPA-cuDNN."""
    _, texts = executed
    assert "their time ÷ ours, the same method on both sides" in texts
    head = _block(texts, "wgmma kernel against SDPA", "FA2 = SDPA-flash")
    assert "public call" in head and "kernel-only" in head and "host µs per call" in head
    lines = [x for x in head.splitlines() if x.strip() and x.split()[0].isdigit()]
    assert len(lines) == len(BENCH)
    mm = MMA["ceilings"]["matmul_fp16_TFLOPs"]
    for r in BENCH:
        line = next(x for x in lines if x.split()[:3] == [str(r["N"]), str(r["d"]), "yes" if r["causal"] else "no"])
        want = [f"{tflops(r, 'wgmma', 'call'):.0f}", f"{vs(r, 'sdpa_flash', 'call'):.2f}",
                f"{vs(r, 'sdpa_cudnn', 'call'):.2f}", f"{vs(r, 'sdpa_flash', 'kernel'):.2f}",
                f"{vs(r, 'sdpa_cudnn', 'kernel'):.2f}", f"{100 * tflops(r, 'wgmma', 'kernel') / mm:.0f}%",
                f"{r['wgmma_host_us']:.0f}", f"{r['sdpa_flash_host_us']:.0f}", f"{r['sdpa_cudnn_host_us']:.0f}",
                f"{vs(r, 'sdpa_flash', 'call', 'mmasync'):.2f}"]
        assert [x for x in line.split() if x != "│"][3:] == want, (line, want)


@recorded_data
def test_recorded_data_spans_name_their_method(executed):
    _, texts = executed
    from1k = [r for r in BENCH if r["N"] >= 1024]
    Ns = sorted({r["N"] for r in BENCH})
    rows = {
        "vs FlashAttention-2 (SDPA-flash), N ≥ 1024": (from1k, "sdpa_flash", "wgmma"),
        f"vs FlashAttention-2 (SDPA-flash), every N ({Ns[0]}–{Ns[-1]})": (BENCH, "sdpa_flash", "wgmma"),
        "vs SDPA-cuDNN, every N": (BENCH, "sdpa_cudnn", "wgmma"),
        "mma.sync kernel vs FlashAttention-2, every N": (BENCH, "sdpa_flash", "mmasync"),
    }
    block = _block(texts, "wgmma kernel, their time ÷ ours over", "→ by both methods")
    assert re.search(r"public call +kernel-only", block)       # the columns name the method
    for label, (sel, other, impl) in rows.items():
        call = span([vs(r, other, "call", impl) for r in sel])
        kern = span([vs(r, other, "kernel", impl) for r in sel])
        assert re.search(rf"{re.escape(label)} +{call} +{kern}\n", block), (label, call, kern)
    lo = min(min(vs(r, "sdpa_flash", m) for r in BENCH) for m in ("call", "kernel"))
    hi = max(max(vs(r, "sdpa_cudnn", m) for r in BENCH) for m in ("call", "kernel"))
    assert ("faster than FlashAttention-2 in every case" if lo > 1 else "not always faster") in texts
    assert ("slower than cuDNN in every case" if hi < 1 else "sometimes faster than cuDNN") in flat(texts)
    top = max(BENCH, key=lambda r: tflops(r, "wgmma", "call"))
    assert (f"peak: {tflops(top, 'wgmma', 'call'):.0f} TFLOP/s by public call (d = {top['d']}, N = {top['N']}, "
            f"{'causal' if top['causal'] else 'no mask'}); kernel-only peak "
            f"{max(tflops(r, 'wgmma', 'kernel') for r in BENCH):.0f} TFLOP/s") in texts
    share = [tflops(r, "wgmma", "kernel") / MMA["ceilings"]["matmul_fp16_TFLOPs"] for r in from1k]
    assert f"share of the matmul ceiling (kernel-only), N ≥ 1024: {100 * min(share):.0f}–{100 * max(share):.0f}%" in texts


@recorded_data
def test_recorded_data_host_time_per_call(executed):
    _, texts = executed
    small = [r for r in BENCH if r["N"] == min(x["N"] for x in BENCH)]
    for r in small:
        k_us = 1000 * r["wgmma_kernel_ms"]
        assert re.search(rf"N = {r['N']}, d = +{r['d']}, {'causal' if r['causal'] else 'no mask'} ?: kernel-only +"
                         rf"{k_us:.0f} µs │ host per call: ours +{r['wgmma_host_us']:.0f} µs \( ?"
                         rf"{100 * r['wgmma_host_us'] / k_us:.0f}% of the kernel\), SDPA-flash +"
                         rf"{r['sdpa_flash_host_us']:.0f} µs", flat(texts)), r
    k_small = [1000 * r["wgmma_kernel_ms"] for r in small]
    assert f"the old 190–490 µs of host time per call = {190 / max(k_small):.1f}–{490 / min(k_small):.1f}x" in flat(texts)
    med = {k: statistics.median(r[k + "_host_us"] for r in BENCH) for k in ("wgmma", "sdpa_flash", "sdpa_cudnn")}
    below = sum(r["wgmma_host_us"] <= r["sdpa_flash_host_us"] for r in BENCH)
    assert (f"median over the {len(BENCH)} shapes: ours {med['wgmma']:.0f}, SDPA-flash {med['sdpa_flash']:.0f}, "
            f"SDPA-cuDNN {med['sdpa_cudnn']:.0f}; ours ≤ SDPA-flash's in {below} of {len(BENCH)} shapes") in flat(texts)
    frac = max(r["wgmma_host_us"] / (1000 * r["wgmma_kernel_ms"]) for r in BENCH)
    assert f"host time ÷ kernel-only time, ours: at most {100 * frac:.0f}% in this benchmark" in flat(texts)


@recorded_data
def test_recorded_data_numbers_in_the_prose_match_the_records():
    """What the markdown states without computing it: the benchmark's shape, the old bare-launch
    figure (from the archived record), and that today's host time hides under the kernel at the
    smallest N while the old one (190–490 µs, the issue's figure) did not."""
    text = _markdown()
    assert all(r["B"] * r["N"] == 16_384 and r["H"] * r["d"] == 2048 for r in BENCH)
    assert "B·N = 16,384" in text and "H = 2048/d" in text and "16,384 tokens" in text
    # "1.13–1.31x ... for N ≥ 2048": SDPA-flash's public call over our bare launch, the archived record
    old = json.loads((RESULTS / "archive" / "mma-h200-2026-11-29-mixed-runs.json").read_text())
    assert "1.13–1.31x the speed of FlashAttention-2 for N ≥ 2048" in text.replace("\n", " ")
    assert span([r["sdpa_flash_ms"] / r["wgmma_ms"] for r in old["bench"] if r["N"] >= 2048]) == "1.13–1.31x"
    # the only ratio span the prose quotes is that old one; today's are printed by the cells
    assert re.findall(r"\d\.\d\d–\d\.\d\dx", text) == ["1.13–1.31x"]
    # the old host time (190–490 µs a call, against SDPA's 15–60) and the 0.46x–1.21x are the
    # issue's measurements, quoted in benchmarks/NOTES.md (no record holds them): the chapter's
    # sentences about them are prose, not checked here
    small = [r for r in BENCH if r["N"] == 512]
    assert "even at N = 512 the kernel runs long enough to hide today's host time" in text.replace("\n", " ")
    assert small and all(r["wgmma_host_us"] < 1000 * r["wgmma_kernel_ms"] for r in small)
    # "the old host time was about as long as these kernels, or longer"
    assert 190 > 0.75 * max(1000 * r["wgmma_kernel_ms"] for r in small)
    assert 490 > max(1000 * r["wgmma_kernel_ms"] for r in small)


def test_the_chapter_says_which_comparison_is_which():
    text = _markdown().replace("\n", " ")
    assert "public call against public call, kernel-only against kernel-only" in text
    assert "bare kernel launch" in text
    assert "**kernel-only**" in text                                  # the block sweep says how it is timed
    assert "kernel-only times" in text                                # and so does exercise 2


@recorded_data
def test_recorded_data_correctness_grid_summary(executed):
    _, texts = executed
    for variant in ("wgmma", "mma.sync"):
        for dtype in ("float16", "bfloat16"):
            cases = [c for c in MMA["check"] if c["variant"] == variant and c["dtype"] == dtype]
            passed = sum(c["pass"] for c in cases)
            worst = max(c["rel_err"] for c in cases)
            assert f"{variant:>8} {dtype:>8}: {passed}/{len(cases)} pass, worst relative error {worst:.1e}" in texts


@recorded_data
def test_recorded_data_block_sweep_kernel_only_and_dram_numbers(executed):
    _, texts = executed
    assert re.search(r"│ +kernel-only +│\n +Br×Bc", texts)            # the sweep table's time is kernel-only
    for r in _sweep:
        t = 4 * r["B"] * r["H"] * r["N"] ** 2 * r["d"] / r["kernel_ms"] / 1e9
        assert re.search(rf"{r['Br']:>4}×{r['Bc']:<3} +{r['smem_bytes']:,} +{r['regs']} │ +{r['kernel_ms']:.3f} +"
                         rf"{t:.0f} │", texts), r
    fast, slow = min(_sweep, key=lambda r: r["kernel_ms"]), max(_sweep, key=lambda r: r["kernel_ms"])
    assert (f"kernel-only time: {fast['Br']}×{fast['Bc']} is fastest, {slow['Br']}×{slow['Bc']} slowest: "
            f"{slow['kernel_ms'] / fast['kernel_ms']:.2f}x apart") in texts
    assert f"fastest block size: {fast['kernel_ms']:.2f} ms kernel-only" in texts
    r128 = next(r for r in MMA["sweep"] if r["variant"] == "wgmma" and r["d"] == 128 and not r["causal"]
                and (r["Br"], r["Bc"]) == (128, 128))
    t128 = 4 * r128["B"] * r128["H"] * r128["N"] ** 2 * r128["d"] / r128["kernel_ms"] / 1e9
    assert f"128×128 ran at {t128:.0f} TFLOP/s (kernel-only)" in texts
    mma_rows = [r for r in DRAM["rows"] if r["impl"] == "mma"]
    r0 = mma_rows[0]
    need = r0["B"] * r0["H"] * r0["N"] * (4 * r0["d"] * 2 + 4)
    meas = [r["dram_bytes"] for r in mma_rows]
    model = [r["model_hbm_bytes"] for r in mma_rows]
    assert (f"IO model {min(model) / 1e9:.1f}–{max(model) / 1e9:.1f} GB over its blocks; measured "
            f"{min(meas) / 1e6:.0f}–{max(meas) / 1e6:.0f} MB; compulsory {need / 1e6:.0f} MB") in texts
    assert 0.9 < min(meas) / need <= max(meas) / need < 1.05          # (a) ≈ the compulsory bytes
    # (a) the in-flight bound: SMs · 1024 / N heads, their K and V in MiB
    heads = DRAM["env"]["sm_count"] * 1024 / r0["N"]
    assert f"= {heads:.0f} heads; their K and V: {heads * 4 * r0['N'] * r0['d'] / 2**20:.0f} MiB of the 60 MiB L2" in texts
    # (b) naive: passes over S, measured against the model
    nv = next(r for r in DRAM["rows"] if r["impl"] == "naive")
    S = nv["B"] * nv["H"] * nv["N"] ** 2 * 4
    assert f"{nv['dram_bytes'] / 1e9:.1f} GB = {nv['dram_bytes'] / S:.1f} passes over S" in texts
    assert f"({nv['dram_bytes'] / nv['model_hbm_bytes']:.1f}x the model)" in texts
    # (c) writes below O + lse
    out = r0["B"] * r0["H"] * r0["N"] * (r0["d"] * 2 + 4)
    w = [r["dram_write_bytes"] for r in mma_rows]
    assert max(w) < out and f"= {100 * min(w) / out:.0f}–{100 * max(w) / out:.0f}% of it" in texts


def test_break_it_cells(executed):
    _, texts = executed
    assert "ValueError: mma.sync kernel Br=128, Bc=128, d=128 needs 163,840 bytes of shared memory; " \
           "the device limit is 101,376" in flat(texts)
    assert "RTX 4090 (101,376 B a block): mma.sync d = 128 fits 64×32, 64×64, 128×32, 128×64" in texts
    # the NumPy simulation of the kernel's roundings matches the recorded worst errors, bf16 ≈ 8x fp16
    sims = [float(x) for x in re.findall(r"simulated / recorded = ([\d.]+)", texts)]
    assert len(sims) == 2 and all(0.7 < s < 1.3 for s in sims), sims
    ratio = float(re.search(r"bf16 / fp16: simulated ([\d.]+)x", texts)[1])
    assert 6 < ratio < 10


def test_side_by_side_cells_show_both_files(executed):
    nb, _ = executed
    htmls = [o["data"]["text/html"] for c in nb.cells if c.cell_type == "code" and "side_by_side(" in c.source
             for o in c.outputs if "text/html" in o.get("data", {})]
    assert len(htmls) == 10
    for h in htmls[:7]:
        assert "kernels/flash_fwd_mma.cu" in h and "flashviz/tiled.py" in h and "line" in h
    for h in htmls[7:]:                                  # the backward's pairs
        assert "kernels/flash_bwd_mma.cu" in h and "flashviz/backward.py" in h and "Alg. 2 line" in h


# --- the snippets, without running the notebook -------------------------------------------------

from flashviz.steps import NAMES  # noqa: E402
from flashviz.views.code_pairs import side_by_side, step_snippets, tag_blocks, title  # noqa: E402

EXPECT = {  # the steps of each side_by_side cell, in the lesson's order → (text the kernel side must
    #         contain, text the NumPy side must contain; None: the step has no NumPy block)
    ("load_Q", "load_KV"): ("cp_async_wait<1>();                              // V_j landed",
                            "K_j, V_j = K[c0:c1], V[c0:c1]"),
    ("compute_S",): ("wgmma_ss<DT, Bc>(s, da, db, kk > 0);", "S_ij = scale * (Q_i @ K_j.T)"),
    ("mask_S",): ("= neg_inf();", "-np.inf"),
    ("update_ml",): ("l_i.r0 = l_i.r0 * alpha.r0 + rowsum.r0;", "l_new = alpha * l_i + P_ij.sum(axis=1)"),
    ("convert_P",): ("pack2<DT>(s[8 * kk + 0], s[8 * kk + 1])", None),
    ("accumulate_O",): ("wgmma_rs<DT, 64>(o + cb * 32, p[kk], desc128(", "O_new = alpha[:, None] * O_i + P_ij @ V_j"),
    ("write_O",): ("__log2f(l_i.r0)", "m + np.log("),
}


BACKWARD_EXPECT = {  # the backward pairs (pair="backward"): flash_bwd_mma.cu beside flashviz/backward.py
    ("recompute_P",): ("ex2(fmaf(s[n][e], scale_log2, -L_i[rl]))", "P_ij = _recompute_P(S_ij, lse_i)"),
    ("compute_dS",): ("s[n][e] = s[n][e] * (dp[n][e] - D_i[rl]);", "dS_ij = P_ij * (dP_ij - D_i[:, None])"),
    ("update_dQ",): ("atomicAdd(dst, scale * q[n][2 * hf]);", "dQ"),
}


def _calls(pair_backward: bool) -> list[tuple[str, ...]]:
    text = (ROOT / "notebooks" / "07_gpu_kernel.md").read_text(encoding="utf-8")
    out = []
    for args in re.findall(r"^side_by_side\(([^)]*)\)", text, re.MULTILINE):
        if ('pair="backward"' in args) == pair_backward:
            out.append(tuple(re.findall(r'"(\w+)"', args.replace('pair="backward"', ""))))
    return out


def test_the_lesson_shows_these_steps_in_this_order():
    assert _calls(False) == list(EXPECT)
    assert _calls(True) == list(BACKWARD_EXPECT)


@pytest.mark.parametrize("names", list(BACKWARD_EXPECT), ids="+".join)
def test_every_backward_snippet_is_found_in_the_backward_sources(names):
    from flashviz import backward
    from flashviz.gpu import kernel_source

    kernel, numpy = step_snippets(*names, pair="backward")
    want_k, want_n = BACKWARD_EXPECT[names]
    assert {s.source for s in kernel} == {"kernels/flash_bwd_mma.cu"}
    assert {s.source for s in numpy} == {"flashviz/backward.py"}
    lines = kernel_source("flash_bwd_mma.cu").splitlines()
    for snip in kernel + numpy:
        assert re.match(rf"(//|#) \[{snip.step}\] Alg\. 2 lines? ", snip.text)
    for snip in kernel:                               # the file's own lines, hooks aside
        assert lines[snip.first - 1].strip() == snip.text.splitlines()[0].strip()
    assert len(kernel) >= 2                           # the main kernel and the deterministic dQ pass
    assert any(want_k in s.text for s in kernel) and any(want_n in s.text for s in numpy)
    assert "FV_" not in "".join(s.text for s in kernel)
    src = inspect.getsource(backward).splitlines()
    assert all(src[s.first - 1].strip() == s.text.splitlines()[0].strip() for s in numpy)
    view = side_by_side(*names, pair="backward")
    assert "Alg. 2 line" in title(*names, pair="backward") and "Alg. 1" not in title(*names, pair="backward")
    assert "kernels/flash_bwd_mma.cu" in view.html and "flashviz/backward.py" in view.html


def test_an_unknown_pair_is_a_one_line_error():
    with pytest.raises(ValueError, match="pair must be one of 'forward', 'backward', got 'sideways'"):
        side_by_side("compute_S", pair="sideways")


@pytest.mark.parametrize("names", list(EXPECT), ids="+".join)
def test_every_snippet_is_found_in_the_current_sources(names):
    kernel, numpy = step_snippets(*names)
    want_k, want_n = EXPECT[names]
    assert kernel and (numpy if want_n else not numpy)
    for side in (kernel, numpy):                                                # each file in line order
        for src in {s.source for s in side}:
            assert [s.first for s in side if s.source == src] == sorted(s.first for s in side if s.source == src)
    assert [s.source for s in kernel] == sorted((s.source for s in kernel), key="kernels/fv_attn.cuh".__eq__)
    for snip in kernel + numpy:
        assert snip.step in names and 1 <= snip.first <= snip.last
        assert re.match(rf"(//|#) \[{snip.step}\] Alg\. 1 lines? ", snip.text)     # it opens with its tag
        assert snip.text.strip() and snip.text == snip.text.rstrip("\n") and snip.text.splitlines()[-1].strip()
    assert {s.step for s in kernel} == set(names)
    assert any(want_k in s.text for s in kernel), (names, want_k)
    assert want_n is None or any(want_n in s.text for s in numpy), (names, want_n)
    view = side_by_side(*names)
    assert title(*names).replace("&", "&amp;") in view.html and want_k.split("(")[0] in repr(view)
    assert "kernels/flash_fwd_mma.cu" in view.html and "flashviz/tiled.py" in view.html
    assert ("No NumPy block" in view.html) == (want_n is None)


def test_load_kv_has_the_prologue_and_both_waits():
    kernel, _ = step_snippets("load_KV")
    assert len(kernel) == 3
    assert "sK, Kp, sKs, 0, Nk" in kernel[0].text and "sV, Vp, sVs, 0, Nk" in kernel[0].text   # K_0, V_0
    assert "// K_j (and Q_i) landed" in kernel[1].text and "for (int j = 0; j < Tc; ++j) {" in kernel[1].text
    assert "// V_j landed" in kernel[2].text and "wgmma" not in kernel[2].text


def test_snippet_line_numbers_are_the_files_lines():
    from flashviz.gpu import kernel_source
    from flashviz.views.code_pairs import without_timeline_hooks

    lines = kernel_source("flash_fwd_mma.cu").splitlines()
    (s, h), _ = step_snippets("compute_S")           # the kernel's call, then the header's code
    assert (s.source, h.source) == ("kernels/flash_fwd_mma.cu", "kernels/fv_attn.cuh")
    header = kernel_source("fv_attn.cuh").splitlines()
    assert [ln.strip() for ln in header[h.first - 1:h.last]] == [ln.strip() for ln in h.text.splitlines()]
    assert "wgmma_ss<DT, Bc>" in h.text and header[h.last].strip() == "#endif"
    assert lines[s.first - 1].strip() == s.text.splitlines()[0].strip()
    assert lines[s.first - 1].strip().startswith("// [compute_S] Alg. 1 line 8:")
    # the snippet is the file's lines first..last, without the timeline's hooks (compiled out)
    shown = [ln.strip() for ln in without_timeline_hooks(lines[s.first - 1:s.last])]
    assert shown == [ln.strip() for ln in s.text.splitlines()]
    assert any("FV_SPAN(t_s0, t_s1) {" in ln for ln in lines[s.first - 1:s.last]) and "FV_" not in s.text
    assert shown[-1] == "fence_regs<NS>(s);"
    assert lines[s.last].strip() == "" and "[mask_S]" in lines[s.last + 1]         # the next tag follows


def test_a_missing_tag_or_unknown_step_is_named():
    with pytest.raises(LookupError, match=r"tag \[compute_S\] not found in x.cu"):
        tag_blocks("a\nb\n", "compute_S", "x.cu")
    with pytest.raises(KeyError, match="no step 'nope'; the steps are init, load_Q"):
        step_snippets("nope")
    with pytest.raises(KeyError, match="compute_S"):
        step_snippets()
    with pytest.raises(KeyError, match="'S'"):
        side_by_side("S")                                # the old keys are gone
    assert {n for names in EXPECT for n in names} <= set(NAMES)


# --- the checks never raise ---------------------------------------------------------------------

from flashviz.exercises.gpu import check_compulsory_bytes, check_fastest_blocks, check_intensity  # noqa: E402
from flashviz.exercises.timeline import check_order_speedup, check_tail_share, check_waves  # noqa: E402


@pytest.mark.parametrize("answer", [None, "x", float("nan"), True, [1, 2], (1,), (64.0, 128), object(), -1])
def test_checks_never_raise(answer, capsys):
    for result in (check_compulsory_bytes(answer), check_fastest_blocks(answer), check_intensity(answer, answer),
                   check_intensity(RIGHT_INTENSITY, answer), check_compulsory_bytes(answer, N=0),
                   check_fastest_blocks(answer, d=7)):
        assert not result and result.message.startswith("✗ Not yet")
    assert capsys.readouterr().out.count("✗ Not yet") == 6


@recorded_data
def test_recorded_data_wrong_answers_get_hints_without_the_answer(capsys):
    assert "lse is missing" in check_compulsory_bytes(4 * BH * N * D * 2).message
    assert "multiply by the bytes" in check_compulsory_bytes(BH * N * (4 * D + 1)).message
    assert "which side" in check_intensity(RIGHT_INTENSITY, "memory" if RIGHT_BOUND == "compute" else "compute").message
    assert "both products" in check_intensity(RIGHT_INTENSITY / 2, RIGHT_BOUND).message
    slower = max(_sweep, key=lambda r: r["kernel_ms"])
    msg = check_fastest_blocks((slower["Br"], slower["Bc"])).message
    assert "slower than the fastest" in msg and f"{RIGHT_BLOCKS[0]}×{RIGHT_BLOCKS[1]}" not in msg
    assert "was not measured" in check_fastest_blocks((32, 32)).message
    # a wrong answer never prints the expected value
    for wrong_bytes in (4 * BH * N * D * 2, RIGHT_BYTES * 1.5, 12345):
        msg = check_compulsory_bytes(wrong_bytes).message
        assert f"{RIGHT_BYTES:,}" not in msg and f"{RIGHT_BYTES / 1e6:,.1f}" not in msg, msg
    for wrong_intensity in (RIGHT_INTENSITY / 2, RIGHT_INTENSITY * 3):
        msg = check_intensity(wrong_intensity, RIGHT_BOUND).message
        assert f"{RIGHT_INTENSITY:,.0f}" not in msg and f"{RIGHT_INTENSITY:,.4g}" not in msg, msg
    msg = check_intensity(RIGHT_INTENSITY, "memory" if RIGHT_BOUND == "compute" else "compute").message
    assert f"{RIGHT_BOUND}-bound" not in msg


@recorded_data
def test_recorded_data_known_mistakes_are_named_not_accepted(capsys):
    """Issue 20: no tolerance accepts a known wrong answer; each is named. The bytes are exact (lse
    left out is 0.8 % off, inside the 0.3 % it had at d = 128; lse in fp16 0.4 %); the intensity's
    tolerance is under half the distance to its nearest slip."""
    from test_exercise_hints import assert_right
    from test_exercise_mistakes import named

    def unit(result, words):                        # the learner's own number in MB: no leak check
        assert not result and words in result.message, result.message

    flops = 4 * BH * N * N * D
    assert_right(check_compulsory_bytes(RIGHT_BYTES))
    for answer, words in [(4 * BH * N * D * 2, "lse is missing"), (BH * N * (4 * D + 1) * 2, "not 2-byte elements"),
                          (3 * BH * N * D * 2 + 4 * BH * N, "O is written once too"),
                          (3 * BH * N * D * 2, "count the output O"), (BH * N * (4 * D + 1), "multiply by the bytes"),
                          (4 * BH * N * D * 4 + 4 * BH * N, "not 4-byte"), (RIGHT_BYTES // BH, "that is one head")]:
        named(check_compulsory_bytes(answer), RIGHT_BYTES, words)
    unit(check_compulsory_bytes(round(RIGHT_BYTES / 1e6, 1)), "not MB")
    rounded = check_compulsory_bytes(271e6)          # a rounded MB figure is not the count
    assert not rounded and "exact integer" in rounded.message
    # the intensity
    assert_right(check_intensity(round(RIGHT_INTENSITY), RIGHT_BOUND))
    for answer, words in [(flops / (4 * BH * N * D * 2), "include lse"), (flops / (BH * N * (4 * D + 1) * 2), "not 2-byte"),
                          (flops / (3 * BH * N * D * 2 + 4 * BH * N), "include O"), (RIGHT_INTENSITY / 2, "both products"),
                          (RIGHT_INTENSITY * 2, "not elements"), (1 / RIGHT_INTENSITY, "bytes per FLOP")]:
        named(check_intensity(answer, RIGHT_BOUND), RIGHT_INTENSITY, words)
    assert abs(flops / (4 * BH * N * D * 2) - RIGHT_INTENSITY) < 0.02 * RIGHT_INTENSITY     # inside the old 2 %
    # the waves of the causal wgmma run at N = 16384
    blocks, sms, most = _wave_counts()
    kw = dict(kernel="wgmma", causal=True, d=64, N=16384)
    assert_right(check_waves(round(RIGHT_WAVES, 2), **kw))
    for answer, words in [(math.ceil(RIGHT_WAVES), "need not be whole"), (math.floor(RIGHT_WAVES), "need not be whole"),
                          (blocks / sms, "SMs × blocks per SM"), (sms * most / blocks, "slots over blocks")]:
        if answer != RIGHT_WAVES:
            named(check_waves(answer, **kw), RIGHT_WAVES, words)
    # the tail of the teaching kernel's causal run at d = 128
    b, _ = _timeline_blocks(_run("teaching", 128, True)["file"])
    idle = min(b["t1_ns"][b["sm"] == s].max() for s in set(b["sm"].tolist()))
    tail_ms = float(b["t1_ns"].max() - idle) / 1e6
    for answer, words in [(1 - RIGHT_TAIL, "the part before the tail"), (tail_ms, "length in ms")]:
        named(check_tail_share(answer, kernel="teaching", d=128), RIGHT_TAIL, words)
    # the block orders' speed-up
    for answer, words in [(1 / RIGHT_SPEEDUP, "longest-first ÷ own order"), (RIGHT_SPEEDUP - 1, "not the increase"),
                          (100 * (RIGHT_SPEEDUP - 1), "not a percentage"), (100 * (1 - 1 / RIGHT_SPEEDUP), "time saved")]:
        named(check_order_speedup(answer, kernel="wgmma", d=128), RIGHT_SPEEDUP, words)
    capsys.readouterr()


@recorded_data
def test_recorded_data_fastest_blocks_accepts_a_tie_within_the_run_to_run_spread():
    from flashviz.exercises.gpu import TIE
    rows = sorted(_sweep, key=lambda r: r["kernel_ms"])
    near = [r for r in rows[1:] if r["kernel_ms"] <= rows[0]["kernel_ms"] * (1 + TIE)]
    far = [r for r in rows[1:] if r["kernel_ms"] > rows[0]["kernel_ms"] * (1 + TIE)]
    for r in near:
        res = check_fastest_blocks((r["Br"], r["Bc"]))
        assert res.ok and "a tie" in res.message
    for r in far:
        assert not check_fastest_blocks((r["Br"], r["Bc"])).ok


@recorded_data
def test_recorded_data_section_7_reads_the_timelines(executed):
    """Section 7's tables equal the timeline files and their summary: the instrumentation's cost,
    the tail per run, the block orders' kernel-only times (own order timed in the same run)."""
    _, texts = executed
    r = _run("wgmma", 64, False)
    assert f"uninstrumented {r['kernel_ms']:.3f} ms, instrumented {r['traced_ms']:.3f} ms" in texts
    assert f"(+{100 * r['overhead']:.1f} %)" in texts
    for kernel, d, causal in [("wgmma", 64, False), ("wgmma", 128, True), ("teaching", 64, True)]:
        row = _run(kernel, d, causal)
        name = f"{kernel} d={d}{' causal' if causal else ''}"
        line = next(ln for ln in texts.splitlines() if ln.startswith(name + " ") and "×" in ln)
        assert line.rstrip().endswith(f"{100 * row['tail_share']:.0f}%"), line
        assert f"{row['blocks']:,}" in line
    for kernel, d, n in [("wgmma", 64, 4096), ("wgmma", 128, 4096), ("wgmma", 64, 16384), ("teaching", 64, 4096)]:
        for order in ("ascending", "longest_first"):
            row = _run(kernel, d, True, order, n)
            line = next(ln for ln in texts.splitlines() if ln.startswith(f"{kernel} d={d} N={n}") and order in ln)
            assert f"{row['kernel_ms']:.4f} ms" in line and f"{row['kernel_order_ms']:.4f} ms" in line, line
            assert line.rstrip().endswith(f"{100 * row['tail_share']:.0f}%"), line
    # the wave count of the prose: N = 2176 needs a third wave 6 % full, busy 69 %
    assert "N =  2176:   544 blocks =  2.06 waves; the SMs are busy  68.7 % of 3 wave times" in texts
    md = " ".join(_markdown().split())
    assert "only 6 % full" in md and "94 % of the slots are empty" in md and "69 % of the run" in md
    # the exercises' answers are not printed in the section: no waves for N = 16384, no teaching d = 128
    # tail, no speed-up column
    assert f"{RIGHT_WAVES:.2f}" not in _block(texts, "run ", "N =  2048")
    assert "teaching d=128" not in texts and "speed-up" not in texts.split("causal run")[1].split("\n")[0]
    # the softmax lines: Br = 64 says there is nothing to overlap; the others under 15 %
    assert "wgmma d=64, causal, Br=64:" in texts and "one warpgroup per block" in texts
    shares = [float(x) for x in re.findall(r"other warpgroup's matmuls +([0-9.]+) %", texts)]
    assert len(shares) == 3 and all(0 <= x < 15 for x in shares)
