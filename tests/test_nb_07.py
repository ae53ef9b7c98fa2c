"""Chapter 7 (the GPU kernel) runs top to bottom without a GPU, from the committed results; its
printed numbers equal values computed here independently from the JSON; its kernel/NumPy snippets
are all found in the current sources; its exercise stubs say "✗ Not yet" and the right answers
(worked out below) say "✓ Right"; the TensorCorePanel is driven in the same kernel."""

import json
import re
from pathlib import Path

import pytest
from nbutil import run_notebook, widget_views

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "07_gpu_kernel.ipynb"
RESULTS = ROOT / "benchmarks" / "results"


def _newest(prefix):
    files = sorted(RESULTS.glob(f"{prefix}-*.json"), key=lambda f: (re.search(r"\d{4}-\d{2}-\d{2}", f.name)[0], f.name))
    return json.loads(files[-1].read_text())


MMA, DRAM = _newest("mma"), _newest("dram")

# The exercises' right answers, worked out from the question and the JSON (not from flashviz):
BH, N, D = 128, 4096, 64
RIGHT_BYTES = 4 * BH * N * D * 2 + 4 * BH * N            # Q, K, V, O in fp16 + lse in fp32 = 270,532,608
_sweep = [r for r in MMA["sweep"] if r["variant"] == "wgmma" and r["d"] == 64 and not r["causal"]]
RIGHT_BLOCKS = min(((r["ms"], (r["Br"], r["Bc"])) for r in _sweep))[1]
RIGHT_INTENSITY = 4 * BH * N * N * D / RIGHT_BYTES        # ≈ 2032 FLOPs per byte
_ridge = MMA["ceilings"]["matmul_fp16_TFLOPs"] * 1e12 / (MMA["ceilings"]["copy_GBps"] * 1e9)
RIGHT_BOUND = "compute" if RIGHT_INTENSITY > _ridge else "memory"

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


def test_runs_without_errors_and_is_driven(executed):
    nb, texts = executed
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.get("output_type") == "error"]
    assert not errors
    assert widget_views(nb), "no widget (figure canvas or panel) was displayed"
    assert "DRIVEN-OK" in texts


def test_exercise_stubs_say_not_yet_and_right_answers_say_right(executed):
    _, texts = executed
    stubs = [line for line in texts.splitlines() if line.startswith("✗ Not yet")]
    assert len(stubs) == 3, stubs
    rights = [line for line in texts.splitlines() if line.startswith("✓ Right")]
    assert len(rights) == 3, rights
    assert f"{RIGHT_BYTES:,} B" in rights[0] and f"{RIGHT_BLOCKS[0]}×{RIGHT_BLOCKS[1]}" in rights[1]
    assert f"{RIGHT_BOUND}-bound" in rights[2]


def test_ceilings_label_and_benchmark_table(executed):
    _, texts = executed
    env, ceil = MMA["env"], MMA["ceilings"]
    assert f"Recorded on {env['device']}, {env['date']}" in texts
    assert f"{ceil['copy_GBps']:,.0f} GB/s" in texts and f"{ceil['matmul_fp16_TFLOPs']:,.0f} TFLOP/s" in texts
    teach = max(r["teaching_tflops"] for r in MMA["bench"])
    best = max(r["wgmma_tflops"] for r in MMA["bench"])
    assert f"{teach:,.1f} TFLOP/s at best" in texts and f"{best:,.0f} TFLOP/s at best = {best / teach:.0f}x" in texts
    # every benchmark row is in the table, with its ratios recomputed from the times
    table = texts.split("teach\n")[1].split("TFLOP/s; ÷FA2")[0].splitlines()
    assert len(table) == len(MMA["bench"])
    for r in MMA["bench"]:
        line = next(x for x in table if x.split()[:3] == [str(r["N"]), str(r["d"]), "yes" if r["causal"] else "no"])
        assert f"{r['wgmma_tflops']:.0f}" in line
        assert f"{r['sdpa_flash_ms'] / r['wgmma_ms']:.2f}" in line and f"{r['sdpa_cudnn_ms'] / r['wgmma_ms']:.2f}" in line
    # the verdict: the span of ratios to SDPA-flash for N >= 2048
    ratios = [r["sdpa_flash_ms"] / r["wgmma_ms"] for r in MMA["bench"] if r["N"] >= 2048]
    assert f"{min(ratios):.2f}–{max(ratios):.2f}x" in texts
    assert ("faster in every case" if min(ratios) > 1 else "not always faster") in texts


def test_correctness_grid_summary(executed):
    _, texts = executed
    for variant in ("wgmma", "mma.sync"):
        for dtype in ("float16", "bfloat16"):
            cases = [c for c in MMA["check"] if c["variant"] == variant and c["dtype"] == dtype]
            passed = sum(c["pass"] for c in cases)
            worst = max(c["rel_err"] for c in cases)
            assert f"{variant:>8} {dtype:>8}: {passed}/{len(cases)} pass, worst relative error {worst:.1e}" in texts


def test_block_sweep_and_dram_numbers(executed):
    _, texts = executed
    for r in _sweep:
        assert re.search(rf"{r['Br']:>4}×{r['Bc']:<3} +{r['smem_bytes']:,} +{r['regs']} │ +{r['ms']:.3f}", texts), r
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
           "this GPU allows 101,376" in texts
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
    assert len(htmls) == 7
    for h in htmls:
        assert "kernels/flash_fwd_mma.cu" in h and "flashviz/tiled.py" in h and "line" in h


# --- the snippets, without running the notebook -------------------------------------------------

from flashviz.views.code_pairs import STEPS, Cut, side_by_side, snippet, step_snippets  # noqa: E402

EXPECT = {  # step → (text the kernel side must contain, text the NumPy side must contain)
    "load": ("cp_async16(d, s, ok ? 16 : 0);", "K_j, V_j = K[c0:c1], V[c0:c1]"),
    "S": ("wgmma_ss<DT, Bc>(s, da, db, kk > 0);", "S_ij = scale * (Q_i @ K_j.T)"),
    "mask": ("= neg_inf();", "-np.inf"),
    "softmax": ("l0 = l0 * alpha0 + rs0;", "l_new = alpha * l_i + P_ij.sum(axis=1)"),
    "P": ("pack2<DT>(s[8 * kk + 0], s[8 * kk + 1])", "P_ij = safe_exp_diff(S_ij, m_new[:, None])"),
    "PV": ("wgmma_rs<DT, 64>(o + cb * 32, p[kk], db);", "O_new = alpha[:, None] * O_i + P_ij @ V_j"),
    "epilogue": ("__log2f(l0)", "m + np.log("),
}


def test_every_step_has_an_expectation():
    assert set(EXPECT) == set(STEPS)


@pytest.mark.parametrize("key", list(STEPS))
def test_every_snippet_is_found_in_the_current_sources(key):
    kernel, numpy = step_snippets(key)
    assert len(kernel) == len(STEPS[key].kernel) and len(numpy) == len(STEPS[key].numpy)
    for snip, cut in zip(kernel + numpy, STEPS[key].kernel + STEPS[key].numpy):
        assert cut.start in snip.text and 1 <= snip.first <= snip.last
        assert snip.text.strip() and snip.text == snip.text.rstrip("\n")
    want_k, want_n = EXPECT[key]
    assert any(want_k in s.text for s in kernel), (key, want_k)
    assert any(want_n in s.text for s in numpy), (key, want_n)
    view = side_by_side(key)
    assert STEPS[key].title.split(":")[0].replace("&", "&amp;") in view.html and want_k.split("(")[0] in repr(view)


def test_snippet_line_numbers_are_the_files_lines():
    from flashviz.gpu import kernel_source

    lines = kernel_source("flash_fwd_mma.cu").splitlines()
    (s,), _ = step_snippets("S")
    assert lines[s.first - 1].strip() == s.text.splitlines()[0].strip()
    assert lines[s.last - 1].strip() == s.text.splitlines()[-1].strip()


def test_a_missing_marker_is_named():
    with pytest.raises(LookupError, match="no such line"):
        snippet("a\nb\n", Cut("no such line"), "x.cu")
    with pytest.raises(LookupError, match="'zzz' not found in x.cu"):
        snippet("a\nb\n", Cut("a", "zzz"), "x.cu")
    with pytest.raises(KeyError):
        step_snippets("nope")


# --- the checks never raise ---------------------------------------------------------------------

from flashviz.exercises.gpu import check_compulsory_bytes, check_fastest_blocks, check_intensity  # noqa: E402


@pytest.mark.parametrize("answer", [None, "x", float("nan"), True, [1, 2], (1,), (64.0, 128), object(), -1])
def test_checks_never_raise(answer, capsys):
    for result in (check_compulsory_bytes(answer), check_fastest_blocks(answer), check_intensity(answer, answer),
                   check_intensity(RIGHT_INTENSITY, answer), check_compulsory_bytes(answer, N=0),
                   check_fastest_blocks(answer, d=7)):
        assert not result and result.message.startswith("✗ Not yet")
    assert capsys.readouterr().out.count("✗ Not yet") == 6


def test_wrong_answers_get_hints(capsys):
    assert "lse is missing" in check_compulsory_bytes(4 * BH * N * D * 2).message
    assert "multiply by the bytes" in check_compulsory_bytes(BH * N * (4 * D + 1)).message
    assert "which side" in check_intensity(RIGHT_INTENSITY, "memory" if RIGHT_BOUND == "compute" else "compute").message
    assert "both products" in check_intensity(RIGHT_INTENSITY / 2, RIGHT_BOUND).message
    slower = max(_sweep, key=lambda r: r["ms"])
    assert "slower than the fastest" in check_fastest_blocks((slower["Br"], slower["Bc"])).message
    assert "was not measured" in check_fastest_blocks((32, 32)).message


def test_fastest_blocks_accepts_a_tie_within_the_run_to_run_spread():
    from flashviz.exercises.gpu import TIE
    rows = sorted(_sweep, key=lambda r: r["ms"])
    near = [r for r in rows[1:] if r["ms"] <= rows[0]["ms"] * (1 + TIE)]
    far = [r for r in rows[1:] if r["ms"] > rows[0]["ms"] * (1 + TIE)]
    for r in near:
        res = check_fastest_blocks((r["Br"], r["Bc"]))
        assert res.ok and "a tie" in res.message
    for r in far:
        assert not check_fastest_blocks((r["Br"], r["Bc"])).ok
